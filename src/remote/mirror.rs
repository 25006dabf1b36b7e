//! The ledger's copy in the bucket (`roger-ledger.jsonl` under the prefix). The ledger only
//! grows, so the mirror is the whole file, replaced with a conditional write: it is written
//! only when the bucket's copy is a prefix of the local file (nobody else appended there) and
//! only on the ETag that copy had, so two machines never overwrite each other's records. A
//! fresh machine rebuilds its ledger from it byte for byte: `roger ledger verify` passes.

use super::store::{Cond, Store, StoreError};
use super::Target;
use anyhow::{Context, Result};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Mirrored {
    /// The bucket already held exactly this.
    Unchanged,
    Written {
        bytes: u64,
    },
    /// The bucket's copy holds records this ledger does not (another machine wrote them):
    /// left alone.
    Diverged {
        remote_bytes: u64,
        local_bytes: u64,
    },
}

pub fn push(store: &dyn Store, target: &Target, ledger: &Path) -> Result<Mirrored> {
    let key = target.ledger_key();
    let local = std::fs::read(ledger).with_context(|| format!("reading {}", ledger.display()))?;
    for _ in 0..5 {
        let cond = match store.get(&key)? {
            None => Cond::Create,
            Some((remote, _)) if remote == local => return Ok(Mirrored::Unchanged),
            Some((remote, meta)) if local.starts_with(&remote) => match meta.etag {
                Some(e) => Cond::IfMatch(e),
                None => anyhow::bail!(
                    "{}: the store returned no ETag, so the mirror cannot be replaced safely",
                    target.object_url(&key)
                ),
            },
            Some((remote, _)) => {
                return Ok(Mirrored::Diverged {
                    remote_bytes: remote.len() as u64,
                    local_bytes: local.len() as u64,
                })
            }
        };
        match store.put(&key, local.clone(), cond) {
            Ok(_) => {
                return Ok(Mirrored::Written {
                    bytes: local.len() as u64,
                })
            }
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    anyhow::bail!(
        "{}: the mirror kept changing under roger (5 conditional writes lost)",
        target.object_url(&key)
    )
}

/// On a machine with no ledger (or an empty one): fetch the bucket's copy into place and
/// check its chain. Returns the number of records, or None when there is nothing to rebuild
/// (a ledger is already here, or the bucket has none).
pub fn rebuild(store: &dyn Store, target: &Target, ledger: &Path) -> Result<Option<usize>> {
    if std::fs::metadata(ledger).is_ok_and(|m| m.len() > 0) {
        return Ok(None);
    }
    let key = target.ledger_key();
    let Some((bytes, _)) = store.get(&key)? else {
        return Ok(None);
    };
    let dir = ledger
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    crate::sys::fsx::create_dirs_durably(dir)?;
    // What goes into place must be a ledger whose chain holds.
    let scan = crate::ledger::scan_bytes(&bytes);
    if let Some(p) = scan.first_break() {
        anyhow::bail!(
            "{}: the bucket's ledger does not verify (line {}: {}); not rebuilding from it",
            target.object_url(&key),
            p.line,
            p.what
        );
    }
    crate::sys::fsx::write_atomic(
        ledger,
        &bytes,
        crate::sys::fsx::Replace::new(crate::sys::fsx::Durability::Durable, 0o644),
    )?;
    Ok(Some(scan.records.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Entry, Kind, Ledger};
    use crate::remote::store::Memory;

    #[test]
    fn mirror_then_rebuild_on_a_fresh_machine() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let t = Target::parse("s3://bkt/run").unwrap();
        let m = Memory::default();
        let la = a.path().join("roger-ledger.jsonl");
        let l = Ledger::new(&la);
        l.append(Entry::new(Kind::Note, "t", "r"), chrono::Utc::now())
            .unwrap();
        assert!(matches!(
            push(&m, &t, &la).unwrap(),
            Mirrored::Written { .. }
        ));
        assert_eq!(push(&m, &t, &la).unwrap(), Mirrored::Unchanged);
        l.append(Entry::new(Kind::Note, "t", "r"), chrono::Utc::now())
            .unwrap();
        assert!(matches!(
            push(&m, &t, &la).unwrap(),
            Mirrored::Written { .. }
        ));
        // Machine B: rebuild, append, mirror; machine A's stale ledger may not overwrite it.
        let lb = b.path().join("sub/roger-ledger.jsonl");
        assert_eq!(rebuild(&m, &t, &lb).unwrap(), Some(2));
        assert_eq!(std::fs::read(&lb).unwrap(), std::fs::read(&la).unwrap());
        assert!(Ledger::new(&lb).scan().unwrap().first_break().is_none());
        Ledger::new(&lb)
            .append(Entry::new(Kind::Note, "t", "r"), chrono::Utc::now())
            .unwrap();
        assert!(matches!(
            push(&m, &t, &lb).unwrap(),
            Mirrored::Written { .. }
        ));
        l.append(Entry::new(Kind::Kill, "t", "r"), chrono::Utc::now())
            .unwrap();
        assert!(matches!(
            push(&m, &t, &la).unwrap(),
            Mirrored::Diverged { .. }
        ));
        // A ledger already here is never replaced.
        assert_eq!(rebuild(&m, &t, &la).unwrap(), None);
    }

    #[test]
    fn a_broken_mirror_is_refused() {
        let b = tempfile::tempdir().unwrap();
        let t = Target::parse("s3://bkt/run").unwrap();
        let m = Memory::default();
        m.put(
            &t.ledger_key(),
            b"{\"seq\":1,\"garbage\":true}\n".to_vec(),
            Cond::Overwrite,
        )
        .unwrap();
        let e = rebuild(&m, &t, &b.path().join("l.jsonl")).unwrap_err();
        assert!(e.to_string().contains("does not verify"), "{e}");
        assert!(!b.path().join("l.jsonl").exists());
    }
}
