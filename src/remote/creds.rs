//! Credentials from the standard places object_store's own chain does not read: the shared
//! credentials file (`~/.aws/credentials`, or AWS_SHARED_CREDENTIALS_FILE) and the config file
//! (`~/.aws/config`, or AWS_CONFIG_FILE) for the profile AWS_PROFILE names ("default" when
//! unset): keys, region, endpoint_url. The environment's own credentials (AWS_ACCESS_KEY_ID,
//! a web identity token file, a container role) win; the instance metadata role comes last
//! (object_store asks it when nothing else gave keys). Never from roger.toml.

use std::collections::HashMap;
use std::path::PathBuf;

/// What the credential lookup may read: variables and the home directory (tests fake both).
pub struct Env {
    pub vars: HashMap<String, String>,
    pub home: Option<PathBuf>,
}

impl Env {
    pub fn real() -> Env {
        Env {
            vars: std::env::vars()
                .filter(|(k, _)| k.starts_with("AWS_"))
                .collect(),
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }

    /// A variable, unset when empty (as the AWS tools read them).
    pub fn var(&self, k: &str) -> Option<&str> {
        self.vars
            .get(k)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

/// What the shared files say for the profile.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FromFiles {
    pub profile: String,
    pub keys: Option<Keys>,
    pub region: Option<String>,
    /// The profile's `endpoint_url`.
    pub endpoint: Option<String>,
    /// The S3 `endpoint_url` of the `[services NAME]` section the profile names
    /// (`services = NAME`): (NAME, url).
    pub services_endpoint: Option<(String, String)>,
    /// The profile's `ignore_configured_endpoint_urls = true`.
    pub ignore_endpoints: bool,
}

/// Whether the environment itself names credentials (then the files are not read for keys).
pub fn env_has_credentials(env: &Env) -> bool {
    env.var("AWS_ACCESS_KEY_ID").is_some()
        || env.var("AWS_WEB_IDENTITY_TOKEN_FILE").is_some()
        || env.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
        || env.var("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
}

/// The profile's keys, region and endpoint from the shared files; None when neither file
/// has the profile.
pub fn from_files(env: &Env) -> Option<FromFiles> {
    let profile = env
        .var("AWS_PROFILE")
        .or(env.var("AWS_DEFAULT_PROFILE"))
        .unwrap_or("default")
        .to_string();
    let home_file = |rel: &str| env.home.as_ref().map(|h| h.join(".aws").join(rel));
    let creds_path = env
        .var("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| home_file("credentials"));
    let config_path = env
        .var("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| home_file("config"));
    let read = |p: &Option<PathBuf>| {
        p.as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    };
    let creds = ini(&read(&creds_path));
    let config = ini(&read(&config_path));
    // The config file names profiles "[profile NAME]", except "[default]".
    let config_section = if profile == "default" {
        "default".to_string()
    } else {
        format!("profile {profile}")
    };
    let c = creds.get(&profile);
    let f = config.get(&config_section);
    if c.is_none() && f.is_none() {
        return None;
    }
    let get = |k: &str| {
        c.and_then(|s| s.get(k))
            .or_else(|| f.and_then(|s| s.get(k)))
            .cloned()
    };
    let keys = match (get("aws_access_key_id"), get("aws_secret_access_key")) {
        (Some(a), Some(s)) => Some(Keys {
            access_key_id: a,
            secret_access_key: s,
            session_token: get("aws_session_token"),
        }),
        _ => None,
    };
    let services_endpoint = f.and_then(|s| s.get("services")).and_then(|name| {
        config
            .get(&format!("services {name}"))
            .and_then(|s| s.get("s3.endpoint_url"))
            .map(|u| (name.clone(), u.clone()))
    });
    Some(FromFiles {
        profile,
        keys,
        services_endpoint,
        ignore_endpoints: f
            .and_then(|s| s.get("ignore_configured_endpoint_urls"))
            .is_some_and(|v| v.eq_ignore_ascii_case("true")),
        region: f.and_then(|s| s.get("region")).cloned(),
        endpoint: f
            .and_then(|s| s.get("endpoint_url"))
            .or_else(|| c.and_then(|s| s.get("endpoint_url")))
            .cloned(),
    })
}

/// An INI file as the AWS tools read it: `[section]`, `key = value`, `#`/`;` comments, and
/// nested settings (`s3 =` then indented `endpoint_url = ...`, stored as `s3.endpoint_url`).
fn ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section: Option<String> = None;
    let mut parent: Option<String> = None;
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        let indented = line.starts_with([' ', '\t']);
        if let Some(name) = l.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            out.entry(name.clone()).or_default();
            section = Some(name);
            parent = None;
        } else if let (Some(s), Some((k, v))) = (&section, l.split_once('=')) {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
            let key = match (&parent, indented) {
                (Some(p), true) => format!("{p}.{k}"),
                _ => {
                    parent = v.is_empty().then(|| k.clone());
                    k
                }
            };
            out.entry(s.clone()).or_default().insert(key, v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(dir: &std::path::Path, vars: &[(&str, &str)]) -> Env {
        Env {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            home: Some(dir.to_path_buf()),
        }
    }

    #[test]
    fn profiles_from_the_shared_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".aws")).unwrap();
        std::fs::write(
            d.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = s1\n\n[train]\n# a comment\naws_access_key_id=AKIATRAIN\naws_secret_access_key = s2\naws_session_token = tok\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join(".aws/config"),
            "[default]\nregion = eu-west-1\n[profile train]\nregion = us-west-2\nendpoint_url = http://127.0.0.1:9000\n",
        )
        .unwrap();
        let f = from_files(&env(d.path(), &[])).unwrap();
        assert_eq!(f.keys.unwrap().access_key_id, "AKIADEFAULT");
        assert_eq!(f.region.as_deref(), Some("eu-west-1"));
        let f = from_files(&env(d.path(), &[("AWS_PROFILE", "train")])).unwrap();
        let k = f.keys.unwrap();
        assert_eq!(
            (k.access_key_id.as_str(), k.session_token.as_deref()),
            ("AKIATRAIN", Some("tok"))
        );
        assert_eq!(f.region.as_deref(), Some("us-west-2"));
        assert_eq!(f.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert!(from_files(&env(d.path(), &[("AWS_PROFILE", "nope")])).is_none());
    }

    #[test]
    fn a_services_section_names_the_s3_endpoint() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".aws")).unwrap();
        std::fs::write(
            d.path().join(".aws/config"),
            "[profile lab]\nservices = local\nendpoint_url = https://general:1\nignore_configured_endpoint_urls = false\n\
             [services local]\ndynamodb =\n  endpoint_url = http://ddb:2\ns3 =\n  endpoint_url = http://minio:9000\n",
        )
        .unwrap();
        let f = from_files(&env(d.path(), &[("AWS_PROFILE", "lab")])).unwrap();
        assert_eq!(
            f.services_endpoint,
            Some(("local".to_string(), "http://minio:9000".to_string()))
        );
        assert_eq!(f.endpoint.as_deref(), Some("https://general:1"));
        assert!(!f.ignore_endpoints);
    }

    #[test]
    fn the_environment_wins() {
        let d = tempfile::tempdir().unwrap();
        assert!(!env_has_credentials(&env(d.path(), &[])));
        assert!(env_has_credentials(&env(
            d.path(),
            &[("AWS_ACCESS_KEY_ID", "A")]
        )));
        assert!(env_has_credentials(&env(
            d.path(),
            &[("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/token")]
        )));
    }
}
