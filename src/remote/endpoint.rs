//! Which S3 endpoint roger talks to, decided the way the AWS SDKs and awscli ≥ 2.13 decide
//! it, with roger.toml's `[remote] endpoint` first: pure over the variables and what the
//! shared config file says (`creds::from_files`), so the table is tested without a network.
//! Plain http is allowed exactly when the chosen endpoint says `http://`.

use super::creds::{Env, FromFiles};

/// Where the endpoint came from, for messages ("endpoint X from AWS_ENDPOINT_URL").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// roger.toml's `[remote] endpoint`.
    RogerToml,
    /// An environment variable: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or AWS_ENDPOINT.
    Var(&'static str),
    /// The config file's `[services NAME]` section, `s3 = endpoint_url = ...`, of a profile.
    Services { profile: String, services: String },
    /// The config file's `endpoint_url` of a profile.
    Profile(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::RogerToml => f.write_str("roger.toml [remote] endpoint"),
            Source::Var(v) => f.write_str(v),
            Source::Services { profile, services } => write!(
                f,
                "the AWS config file's [services {services}] s3 endpoint_url (profile {profile})"
            ),
            Source::Profile(p) => write!(f, "the AWS config file's endpoint_url (profile {p})"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub url: String,
    pub source: Source,
}

impl Endpoint {
    /// Plain http only for an endpoint that says so.
    pub fn allow_http(&self) -> bool {
        self.url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
    }
}

/// The environment variables, most specific first (object_store's own `AWS_ENDPOINT` last).
const VARS: [&str; 3] = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"];

/// The endpoint in effect: roger.toml's, else (unless AWS_IGNORE_CONFIGURED_ENDPOINT_URLS or
/// the profile's ignore_configured_endpoint_urls says to ignore them) AWS_ENDPOINT_URL_S3,
/// AWS_ENDPOINT_URL, AWS_ENDPOINT, the profile's services section, the profile's
/// endpoint_url; None: AWS itself. An endpoint that is not an http(s) URL is refused, in
/// words naming where it came from and what to write instead.
pub fn resolve(
    toml: Option<&str>,
    env: &Env,
    files: Option<&FromFiles>,
) -> Result<Option<Endpoint>, String> {
    let chosen = if let Some(u) = toml {
        Some(Endpoint {
            url: u.to_string(),
            source: Source::RogerToml,
        })
    } else if ignore_configured(env, files) {
        None
    } else if let Some((var, u)) = VARS
        .iter()
        .find_map(|v| env.var(v).map(|u| (*v, u.to_string())))
    {
        Some(Endpoint {
            url: u,
            source: Source::Var(var),
        })
    } else if let Some(f) = files {
        match (&f.services_endpoint, &f.endpoint) {
            (Some((services, u)), _) => Some(Endpoint {
                url: u.clone(),
                source: Source::Services {
                    profile: f.profile.clone(),
                    services: services.clone(),
                },
            }),
            (None, Some(u)) => Some(Endpoint {
                url: u.clone(),
                source: Source::Profile(f.profile.clone()),
            }),
            (None, None) => None,
        }
    } else {
        None
    };
    match chosen {
        Some(e) if !has_scheme(&e.url) => Err(format!(
            "endpoint refused: {} = {:?} is not an http:// or https:// URL; write it with its scheme: http://{} for a server without TLS (a local MinIO or moto), https://{} otherwise",
            e.source,
            e.url,
            e.url.trim_start_matches('/'),
            e.url.trim_start_matches('/')
        )),
        other => Ok(other),
    }
}

fn has_scheme(u: &str) -> bool {
    let lower = u.to_ascii_lowercase();
    ["http://", "https://"]
        .iter()
        .any(|s| lower.starts_with(s) && lower.len() > s.len())
}

/// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS (when set) decides; else the profile's setting.
fn ignore_configured(env: &Env, files: Option<&FromFiles>) -> bool {
    match env.var("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") {
        Some(v) => v.eq_ignore_ascii_case("true"),
        None => files.is_some_and(|f| f.ignore_endpoints),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            home: None,
        }
    }

    fn files(services: Option<&str>, profile: Option<&str>, ignore: bool) -> FromFiles {
        FromFiles {
            profile: "train".into(),
            services_endpoint: services.map(|u| ("local".to_string(), u.to_string())),
            endpoint: profile.map(str::to_string),
            ignore_endpoints: ignore,
            ..Default::default()
        }
    }

    /// (roger.toml, variables, config file) -> (url, source) or None, as the SDKs decide.
    type Case<'a> = (
        Option<&'a str>,
        Vec<(&'a str, &'a str)>,
        Option<&'a FromFiles>,
        Option<(&'a str, Source)>,
    );

    #[test]
    fn the_resolution_table() {
        let all_vars = [
            ("AWS_ENDPOINT_URL_S3", "http://s3-var:1"),
            ("AWS_ENDPOINT_URL", "http://general-var:2"),
            ("AWS_ENDPOINT", "http://legacy-var:3"),
        ];
        let full = files(Some("http://services:4"), Some("http://profile:5"), false);
        let profile_only = files(None, Some("https://profile:5"), false);
        let ignoring = files(None, Some("http://p:1"), true);
        let ignoring_bare = files(None, None, true);
        let var = |v: &'static str| Source::Var(v);
        let services = Source::Services {
            profile: "train".into(),
            services: "local".into(),
        };
        let cases: Vec<Case> = vec![
            // Nothing anywhere: AWS itself.
            (None, vec![], None, None),
            // roger.toml wins over everything.
            (
                Some("https://toml:9"),
                all_vars.to_vec(),
                Some(&full),
                Some(("https://toml:9", Source::RogerToml)),
            ),
            // Service-specific variable > general variable > object_store's AWS_ENDPOINT.
            (
                None,
                all_vars.to_vec(),
                Some(&full),
                Some(("http://s3-var:1", var("AWS_ENDPOINT_URL_S3"))),
            ),
            (
                None,
                all_vars[1..].to_vec(),
                Some(&full),
                Some(("http://general-var:2", var("AWS_ENDPOINT_URL"))),
            ),
            (
                None,
                all_vars[2..].to_vec(),
                Some(&full),
                Some(("http://legacy-var:3", var("AWS_ENDPOINT"))),
            ),
            // An empty variable is unset.
            (
                None,
                vec![
                    ("AWS_ENDPOINT_URL_S3", ""),
                    ("AWS_ENDPOINT_URL", "http://general-var:2"),
                ],
                None,
                Some(("http://general-var:2", var("AWS_ENDPOINT_URL"))),
            ),
            // Variables > the config file; in the file, the services section > the profile's.
            (
                None,
                vec![],
                Some(&full),
                Some(("http://services:4", services.clone())),
            ),
            (
                None,
                vec![],
                Some(&profile_only),
                Some(("https://profile:5", Source::Profile("train".into()))),
            ),
            // Ignoring configured endpoints: the variable, or the profile's setting.
            (
                None,
                vec![
                    ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
                    ("AWS_ENDPOINT_URL", "http://x:1"),
                ],
                Some(&full),
                None,
            ),
            (
                None,
                vec![("AWS_ENDPOINT_URL", "http://x:1")],
                Some(&ignoring),
                None,
            ),
            // ... the variable overrides the profile's setting; roger.toml is never ignored.
            (
                None,
                vec![
                    ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "false"),
                    ("AWS_ENDPOINT_URL", "http://x:1"),
                ],
                Some(&ignoring_bare),
                Some(("http://x:1", var("AWS_ENDPOINT_URL"))),
            ),
            (
                Some("http://toml:1"),
                vec![("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")],
                None,
                Some(("http://toml:1", Source::RogerToml)),
            ),
        ];
        for (i, (toml, vars, f, want)) in cases.into_iter().enumerate() {
            let got = resolve(toml, &env(&vars), f).unwrap();
            let got = got.map(|e| (e.url, e.source));
            let want = want.map(|(u, s)| (u.to_string(), s));
            assert_eq!(got, want, "case {i}: toml {toml:?}, vars {vars:?}");
        }
    }

    #[test]
    fn http_is_allowed_exactly_when_the_endpoint_says_http() {
        for (url, http) in [
            ("http://127.0.0.1:9000", true),
            ("HTTP://minio:9000", true),
            ("https://minio:9000", false),
        ] {
            let e = resolve(None, &env(&[("AWS_ENDPOINT_URL", url)]), None)
                .unwrap()
                .unwrap();
            assert_eq!(e.allow_http(), http, "{url}");
        }
    }

    #[test]
    fn an_endpoint_without_a_scheme_is_refused_in_words() {
        let e = resolve(
            None,
            &env(&[("AWS_ENDPOINT_URL_S3", "localhost:9000")]),
            None,
        )
        .unwrap_err();
        assert!(
            e.starts_with("endpoint refused: AWS_ENDPOINT_URL_S3"),
            "{e}"
        );
        assert!(e.contains("http://localhost:9000"), "{e}");
        let e = resolve(
            None,
            &env(&[]),
            Some(&files(None, Some("minio:9000"), false)),
        )
        .unwrap_err();
        assert!(e.contains("endpoint_url (profile train)"), "{e}");
        assert!(resolve(Some("http://"), &env(&[]), None).is_err());
    }
}
