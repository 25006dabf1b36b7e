//! The bucket's `latest.json`: the local manifest's fields (path relative to the prefix's
//! `checkpoints/`, sha256, size, step, published_at) plus the object's URL and ETags. Written
//! last, after the checkpoint is verified, with a conditional write — If-None-Match for the
//! first, If-Match on the ETag read for every later one — so a zombie writer from a dead VM can
//! never move it back: a lost race is re-read and settled by step, not by who wrote last.

use super::store::{Cond, Store, StoreError};
use super::Target;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteLatest {
    /// The checkpoint's name under `checkpoints/` (as the local latest.json's `path`).
    pub path: String,
    pub sha256: String,
    pub size: u64,
    pub step: Option<u64>,
    pub published_at: String,
    /// `s3://bucket/prefix/checkpoints/NAME`.
    pub url: String,
    /// The ETag of each object of the checkpoint (one for a file).
    pub etags: Vec<String>,
    /// Their version ids, where the bucket keeps versions (null otherwise).
    #[serde(default)]
    pub versions: Vec<Option<String>>,
    pub verified_at: String,
}

/// What happened to `latest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Moved {
    /// It now names ours.
    Written { etag: Option<String>, races: u32 },
    /// It names a newer step (or the same checkpoint): left as it is.
    Kept {
        theirs: Option<u64>,
        theirs_path: String,
        races: u32,
    },
}

pub fn read(store: &dyn Store, target: &Target) -> Result<Option<(RemoteLatest, Option<String>)>> {
    let key = target.latest_key();
    match store.get(&key)? {
        None => Ok(None),
        Some((bytes, meta)) => {
            let l: RemoteLatest = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not a roger latest.json", target.object_url(&key)))?;
            Ok(Some((l, meta.etag)))
        }
    }
}

/// Whether `ours` should replace `theirs`: a newer step wins; the same step only replaces a
/// different checkpoint published earlier; an unknown step never replaces a known one.
pub fn newer(ours: &RemoteLatest, theirs: &RemoteLatest) -> bool {
    match (ours.step, theirs.step) {
        (Some(a), Some(b)) if a != b => a > b,
        (None, Some(_)) => false,
        (Some(_), None) => true,
        _ => ours.sha256 != theirs.sha256 && ours.published_at > theirs.published_at,
    }
}

/// Move the bucket's latest.json to `ours` unless it already names something newer.
pub fn advance(store: &dyn Store, target: &Target, ours: &RemoteLatest) -> Result<Moved> {
    let key = target.latest_key();
    let mut body = serde_json::to_vec_pretty(ours)?;
    body.push(b'\n');
    let mut races = 0;
    loop {
        let current = read(store, target)?;
        let cond = match &current {
            Some((theirs, _)) if !newer(ours, theirs) => {
                return Ok(Moved::Kept {
                    theirs: theirs.step,
                    theirs_path: theirs.path.clone(),
                    races,
                })
            }
            Some((_, Some(etag))) => Cond::IfMatch(etag.clone()),
            // A store that gives no ETag cannot be written conditionally: refuse.
            Some((_, None)) => anyhow::bail!(
                "{}: the store returned no ETag, so it cannot be replaced safely",
                target.object_url(&key)
            ),
            None => Cond::Create,
        };
        match store.put(&key, body.clone(), cond) {
            Ok(m) => {
                return Ok(Moved::Written {
                    etag: m.etag,
                    races,
                })
            }
            Err(StoreError::Conflict(_)) if races < 10 => races += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::store::Memory;

    fn l(step: Option<u64>, sha: &str, at: &str) -> RemoteLatest {
        RemoteLatest {
            path: format!("ckpt-{}.pt", step.unwrap_or(0)),
            sha256: sha.into(),
            size: 1,
            step,
            published_at: at.into(),
            url: String::new(),
            etags: vec![],
            versions: vec![],
            verified_at: at.into(),
        }
    }

    #[test]
    fn it_never_goes_back() {
        let m = Memory::default();
        let t = Target::parse("s3://bkt/run").unwrap();
        assert!(matches!(
            advance(&m, &t, &l(Some(20), "b", "2")).unwrap(),
            Moved::Written { races: 0, .. }
        ));
        // A zombie from a dead VM with an older step.
        assert_eq!(
            advance(&m, &t, &l(Some(10), "a", "3")).unwrap(),
            Moved::Kept {
                theirs: Some(20),
                theirs_path: "ckpt-20.pt".into(),
                races: 0
            }
        );
        assert!(matches!(
            advance(&m, &t, &l(Some(30), "c", "4")).unwrap(),
            Moved::Written { .. }
        ));
        assert_eq!(read(&m, &t).unwrap().unwrap().0.step, Some(30));
        assert!(!newer(&l(None, "x", "9"), &l(Some(1), "y", "1")));
    }

    /// A store where somebody else writes latest.json between our read and our write.
    struct Racer {
        inner: Memory,
        theirs: std::sync::Mutex<Option<RemoteLatest>>,
    }

    impl Store for Racer {
        fn describe(&self) -> String {
            "racer".into()
        }
        fn head(
            &self,
            k: &str,
        ) -> crate::remote::store::StoreResult<Option<super::super::store::Meta>> {
            self.inner.head(k)
        }
        fn get(
            &self,
            k: &str,
        ) -> crate::remote::store::StoreResult<Option<(Vec<u8>, super::super::store::Meta)>>
        {
            self.inner.get(k)
        }
        fn read_range(
            &self,
            k: &str,
            a: u64,
            b: u64,
            sink: &mut crate::remote::store::Sink<'_>,
        ) -> crate::remote::store::StoreResult<u64> {
            self.inner.read_range(k, a, b, sink)
        }
        fn put(
            &self,
            k: &str,
            b: Vec<u8>,
            c: Cond,
        ) -> crate::remote::store::StoreResult<super::super::store::Meta> {
            if let Some(t) = self.theirs.lock().unwrap().take() {
                self.inner
                    .put(k, serde_json::to_vec(&t).unwrap(), Cond::Overwrite)
                    .unwrap();
            }
            self.inner.put(k, b, c)
        }
        fn create_multipart(&self, k: &str) -> crate::remote::store::StoreResult<String> {
            self.inner.create_multipart(k)
        }
        fn put_part(
            &self,
            k: &str,
            u: &str,
            i: usize,
            b: Vec<u8>,
        ) -> crate::remote::store::StoreResult<String> {
            self.inner.put_part(k, u, i, b)
        }
        fn complete_multipart(
            &self,
            k: &str,
            u: &str,
            p: Vec<String>,
        ) -> crate::remote::store::StoreResult<super::super::store::Meta> {
            self.inner.complete_multipart(k, u, p)
        }
        fn abort_multipart(&self, k: &str, u: &str) -> crate::remote::store::StoreResult<()> {
            self.inner.abort_multipart(k, u)
        }
        fn delete(&self, k: &str) -> crate::remote::store::StoreResult<()> {
            self.inner.delete(k)
        }
        fn list(&self, p: &str) -> crate::remote::store::StoreResult<Vec<(String, u64)>> {
            self.inner.list(p)
        }
    }

    #[test]
    fn a_lost_race_is_settled_by_step() {
        let t = Target::parse("s3://bkt/run").unwrap();
        // They write step 50 between our read and our write of step 40: we lose, re-read, keep theirs.
        let r = Racer {
            inner: Memory::default(),
            theirs: std::sync::Mutex::new(Some(l(Some(50), "z", "5"))),
        };
        advance(&r.inner, &t, &l(Some(10), "a", "1")).unwrap();
        assert_eq!(
            advance(&r, &t, &l(Some(40), "b", "4")).unwrap(),
            Moved::Kept {
                theirs: Some(50),
                theirs_path: "ckpt-50.pt".into(),
                races: 1
            }
        );
        // They write an older step 20 in between: we lose the race, re-read, and still win by step.
        *r.theirs.lock().unwrap() = Some(l(Some(20), "y", "6"));
        let r2 = Racer {
            inner: Memory::default(),
            theirs: std::sync::Mutex::new(Some(l(Some(20), "y", "6"))),
        };
        advance(&r2.inner, &t, &l(Some(10), "a", "1")).unwrap();
        assert!(matches!(
            advance(&r2, &t, &l(Some(40), "b", "4")).unwrap(),
            Moved::Written { races: 1, .. }
        ));
        assert_eq!(read(&r2, &t).unwrap().unwrap().0.step, Some(40));
    }
}
