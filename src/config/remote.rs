//! `[publish] remote` and `[remote]`: the bucket's address (`s3://bucket/prefix/`, parsed,
//! and the key layout under it) and how to reach it. Plain data: the bucket itself is
//! `crate::remote`'s; it lives here so the config embeds it without importing the remote.

use super::units::{Bytes, Dur};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// `[remote]`: how to reach the bucket named by `[publish] remote`. Credentials are never
/// here: they come from the AWS_* variables, the shared credentials/config files, a web
/// identity token (IRSA, workload identity) or the instance/container metadata role.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteConfig {
    /// An S3-compatible endpoint (MinIO, Ceph RGW, R2, OCI, GCS's XML API); AWS when unset.
    pub endpoint: Option<String>,
    /// The signing region (AWS_REGION / the config file's when unset; "us-east-1" last).
    pub region: Option<String>,
    /// `https://bucket.endpoint/key` instead of `https://endpoint/bucket/key`.
    pub virtual_hosted: bool,
    /// "read": every byte is re-read with ranged GETs and hashed (the default);
    /// "checksum": trust the server's check of each part's SHA-256 plus the object's size.
    pub verify: VerifyMode,
    /// Multipart part size.
    pub part_size: Bytes,
    /// Parts (and verify ranges) in flight at once; memory held is part_size × concurrency.
    pub concurrency: usize,
    /// Retries of one request (5xx, SlowDown, timeouts, resets) before the upload is retried
    /// as a whole by the uploader's own backoff.
    pub max_retries: usize,
    /// One request's time limit.
    pub timeout: Dur,
    /// Keep this many checkpoints in the bucket by the local retention rule (0 = keep all).
    pub keep_last: usize,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            endpoint: None,
            region: None,
            virtual_hosted: false,
            verify: VerifyMode::Read,
            part_size: Bytes(16 << 20),
            concurrency: 8,
            max_retries: 6,
            timeout: Dur::secs(120),
            keep_last: 0,
        }
    }
}

impl RemoteConfig {
    pub fn check(&self) -> Result<(), String> {
        if self.part_size.0 < 5 << 20 || self.part_size.0 > 5 << 30 {
            return Err(format!(
                "[remote] part_size must be between 5 MiB and 5 GiB (S3's limits), got {} bytes",
                self.part_size.0
            ));
        }
        if self.concurrency == 0 || self.concurrency > 64 {
            return Err(format!(
                "[remote] concurrency must be 1..=64, got {}",
                self.concurrency
            ));
        }
        if let Some(e) = &self.endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(format!(
                    "[remote] endpoint must start with http:// or https://, got {e:?}"
                ));
            }
        }
        Ok(())
    }

    /// The most bytes the uploader holds in memory at once (parts in flight).
    pub fn memory_bound(&self) -> u64 {
        self.part_size.0 * self.concurrency as u64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    Read,
    Checksum,
}

impl VerifyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyMode::Read => "read",
            VerifyMode::Checksum => "checksum",
        }
    }
}

/// `s3://bucket/prefix/`, parsed once where it enters (roger.toml, `--remote`, a queued
/// upload job) and carried inward typed. It is read and written as its URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Target {
    pub bucket: String,
    /// Without leading or trailing slashes; may be empty.
    pub prefix: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target> {
        let Some(rest) = url.strip_prefix("s3://") else {
            bail!("remote {url:?}: expected s3://bucket/prefix/ (any S3-compatible store; for one that is not AWS set its endpoint in [remote] endpoint or AWS_ENDPOINT_URL)");
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !bucket.starts_with(['-', '.'])
            && !bucket.ends_with(['-', '.']);
        if !ok {
            bail!("remote {url:?}: {bucket:?} is not a valid bucket name (3-63 characters: lowercase letters, digits, '-' and '.')");
        }
        let prefix = prefix.trim_matches('/').to_string();
        if prefix.split('/').any(|s| s == ".." || s == ".") || prefix.contains("//") {
            bail!("remote {url:?}: the prefix must not hold '.', '..' or empty segments");
        }
        Ok(Target {
            bucket: bucket.to_string(),
            prefix,
        })
    }

    /// The clap value parser of `--remote URL`.
    pub fn parse_arg(url: &str) -> Result<Target, String> {
        Target::parse(url).map_err(|e| format!("{e:#}"))
    }

    fn join(&self, rest: &str) -> String {
        if self.prefix.is_empty() {
            rest.to_string()
        } else {
            format!("{}/{rest}", self.prefix)
        }
    }

    /// The object key of a checkpoint file: `name` is its path relative to the destination
    /// directory (`ckpt-100.pt`, or `step-100/shard-0.safetensors` for a directory).
    pub fn checkpoint_key(&self, name: &str) -> String {
        self.join(&format!("checkpoints/{name}"))
    }

    pub fn latest_key(&self) -> String {
        self.join("latest.json")
    }

    pub fn ledger_key(&self) -> String {
        self.join("roger-ledger.jsonl")
    }

    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.join(""))
    }

    pub fn object_url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }
}

impl TryFrom<String> for Target {
    type Error = String;
    fn try_from(url: String) -> Result<Target, String> {
        Target::parse_arg(&url)
    }
}

impl From<Target> for String {
    fn from(t: Target) -> String {
        t.url()
    }
}

/// A remote in effect: where, and how.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Remote {
    pub target: Target,
    pub cfg: RemoteConfig,
}

impl Remote {
    /// The bucket in effect: `--remote` when given, else the config's `[publish] remote`
    /// (the one place that decides "flag or config"), reached as `[remote]` says.
    pub fn chosen(
        flag: Option<&Target>,
        config: Option<&Target>,
        cfg: &RemoteConfig,
    ) -> Option<Remote> {
        flag.or(config).map(|t| Remote {
            target: t.clone(),
            cfg: cfg.clone(),
        })
    }

    /// The config's own bucket, if it names one.
    pub fn of_config(c: &crate::config::Config) -> Option<Remote> {
        Remote::chosen(None, c.publish.remote.as_ref(), &c.remote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_lay_out_keys() {
        let t = Target::parse("s3://ckpts/runs/gpt2/").unwrap();
        assert_eq!(t.bucket, "ckpts");
        assert_eq!(t.prefix, "runs/gpt2");
        assert_eq!(
            t.checkpoint_key("ckpt-10.pt"),
            "runs/gpt2/checkpoints/ckpt-10.pt"
        );
        assert_eq!(t.latest_key(), "runs/gpt2/latest.json");
        assert_eq!(t.ledger_key(), "runs/gpt2/roger-ledger.jsonl");
        let bare = Target::parse("s3://ckpts").unwrap();
        assert_eq!(bare.latest_key(), "latest.json");
        assert_eq!(bare.url(), "s3://ckpts/");
    }

    #[test]
    fn bad_targets_say_what_was_expected() {
        for (url, says) in [
            ("gs://b/p", "expected s3://"),
            ("s3://UPPER/p", "not a valid bucket name"),
            ("s3://ab/p", "not a valid bucket name"),
            ("s3://bucket/a/../b", "must not hold"),
        ] {
            let e = Target::parse(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
    }

    #[test]
    fn a_target_is_read_and_written_as_its_url() {
        #[derive(Debug, Deserialize, Serialize)]
        struct T {
            remote: Target,
        }
        let t: T = toml::from_str("remote = \"s3://ckpts/runs/gpt2\"").unwrap();
        assert_eq!(t.remote, Target::parse("s3://ckpts/runs/gpt2/").unwrap());
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            serde_json::json!({"remote": "s3://ckpts/runs/gpt2/"})
        );
        let e = toml::from_str::<T>("remote = \"gs://b/p\"").unwrap_err();
        assert!(e.to_string().contains("expected s3://"), "{e}");
        let flag = Target::parse("s3://flag").unwrap();
        let conf = Target::parse("s3://conf").unwrap();
        let cfg = RemoteConfig::default();
        let pick = |f, c| Remote::chosen(f, c, &cfg).map(|r| r.target.bucket);
        assert_eq!(pick(Some(&flag), Some(&conf)).as_deref(), Some("flag"));
        assert_eq!(pick(None, Some(&conf)).as_deref(), Some("conf"));
        assert_eq!(pick(None, None), None);
    }

    #[test]
    fn config_limits() {
        let mut c = RemoteConfig::default();
        assert!(c.check().is_ok());
        assert_eq!(c.memory_bound(), 128 << 20);
        c.part_size = Bytes(1 << 20);
        assert!(c.check().unwrap_err().contains("part_size"));
        c = RemoteConfig {
            endpoint: Some("localhost:9000".into()),
            ..Default::default()
        };
        assert!(c.check().unwrap_err().contains("http://"));
    }
}
