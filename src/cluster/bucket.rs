//! The job's store in its bucket (`[cluster] store = "s3://bucket/prefix/{job}"`): the node
//! records and verdicts as small objects under the prefix, reached as `[remote]` says (the
//! endpoint, the credential chain). `create` is a conditional put (`If-None-Match: *`): S3 and
//! the S3-compatible stores that implement it let only the first writer write a key, so one
//! verdict per incident holds as on a shared directory. A heartbeat must not hold up the
//! watch's own sampling, so each request gets at most one retry and a short time limit: a
//! bucket that does not answer is the store down, said once, not a stalled watch.

use super::Store;
use crate::config::remote::{Remote, RemoteConfig, Target};
use crate::config::units::Dur;
use crate::remote::store::{self as objects, Cond, StoreError};
use anyhow::Result;

/// One request's limit for the cluster's small objects.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

pub struct BucketStore {
    objects: Box<dyn objects::Store>,
    /// The key prefix of the job (no trailing slash).
    base: String,
    url: String,
}

impl BucketStore {
    /// The store at `url` (`s3://bucket/prefix/…`, `{job}` filled already).
    pub fn open(url: &str, remote: &RemoteConfig) -> Result<BucketStore> {
        let target = Target::parse(url).map_err(|e| anyhow::anyhow!("[cluster] store: {e:#}"))?;
        let mut cfg = remote.clone();
        cfg.max_retries = cfg.max_retries.min(1);
        cfg.timeout = Dur(cfg.timeout.0.min(TIMEOUT));
        let objects = objects::open(&Remote {
            target: target.clone(),
            cfg,
        })?;
        Ok(BucketStore::with(objects, &target))
    }

    /// Over any object store (the logic's tests use the in-memory one).
    pub fn with(objects: Box<dyn objects::Store>, target: &Target) -> BucketStore {
        BucketStore {
            objects,
            base: target.prefix.clone(),
            url: target.url(),
        }
    }

    fn key(&self, k: &str) -> String {
        if self.base.is_empty() {
            k.to_string()
        } else {
            format!("{}/{k}", self.base)
        }
    }

    fn err(&self, what: &str, key: &str, e: StoreError) -> anyhow::Error {
        anyhow::anyhow!("[cluster] store {}: {what} {key}: {e}", self.url)
    }
}

impl Store for BucketStore {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        self.objects
            .put(&self.key(key), bytes.to_vec(), Cond::Overwrite)
            .map(|_| ())
            .map_err(|e| self.err("writing", key, e))
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self.objects.get(&self.key(key)) {
            Ok(v) => Ok(v.map(|(b, _)| b)),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(self.err("reading", key, e)),
        }
    }

    fn create(&self, key: &str, bytes: &[u8]) -> Result<bool> {
        match self
            .objects
            .put(&self.key(key), bytes.to_vec(), Cond::Create)
        {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(self.err("creating", key, e)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let full = format!("{}/", self.key(prefix.trim_end_matches('/')));
        let strip = if self.base.is_empty() {
            String::new()
        } else {
            format!("{}/", self.base)
        };
        let mut out: Vec<String> = self
            .objects
            .list(&full)
            .map_err(|e| self.err("listing", prefix, e))?
            .into_iter()
            .filter_map(|(k, _)| k.strip_prefix(&strip).map(str::to_string))
            // Only the keys directly under the prefix, as a directory's entries.
            .filter(|k| !k[prefix.len()..].trim_start_matches('/').contains('/'))
            .collect();
        out.sort();
        Ok(out)
    }

    fn describe(&self) -> String {
        self.url.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> BucketStore {
        let t = Target::parse("s3://ckpts/runs/job-7").unwrap();
        BucketStore::with(Box::new(objects::Memory::default()), &t)
    }

    #[test]
    fn records_and_verdicts_under_the_jobs_prefix() {
        let s = store();
        assert_eq!(s.get("nodes/node-0.json").unwrap(), None);
        s.put("nodes/node-0.json", b"a").unwrap();
        s.put("nodes/node-0.json", b"b").unwrap();
        assert_eq!(s.get("nodes/node-0.json").unwrap(), Some(b"b".to_vec()));
        assert!(s.create("verdicts/incident-0001.json", b"v1").unwrap());
        assert!(
            !s.create("verdicts/incident-0001.json", b"v2").unwrap(),
            "the second writer loses"
        );
        assert_eq!(
            s.get("verdicts/incident-0001.json").unwrap(),
            Some(b"v1".to_vec())
        );
        s.put("verdicts/deeper/x.json", b"x").unwrap();
        assert_eq!(
            s.list("verdicts").unwrap(),
            vec!["verdicts/incident-0001.json"]
        );
        assert_eq!(s.list("nodes").unwrap(), vec!["nodes/node-0.json"]);
        assert_eq!(s.describe(), "s3://ckpts/runs/job-7/");
    }
}
