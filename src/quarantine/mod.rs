//! Quarantine: items set aside (moved with rename, never copied) until a trial proves them
//! good. The store is `<dir>/<id>/` holding the item under its own name and `meta.json`
//! ({id, original_path, quarantined_path, reason, sha256, size, added_at, source, run,
//! proofs}). Every change is a ledger record; `checkpoints::quarantined` reads
//! `quarantine.original_path` / `release.restored_to`, so a quarantined checkpoint is never
//! chosen for resume. Moving across filesystems is refused (EXDEV), not faked with a copy.

pub mod outputs;
pub mod release;
pub mod trial;

use crate::ledger::{Entry, Kind, Ledger};
use crate::sys::fsx::{self, fsync_dir, Durability, Replace};
use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const META: &str = "meta.json";

/// One attempt to prove an item good.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proof {
    pub at: DateTime<Utc>,
    pub command: Vec<String>,
    pub exit_code: Option<i32>,
    pub passed: bool,
    #[serde(default)]
    pub timed_out: bool,
    /// The item's bytes still hash to the quarantined sha256 after the trial.
    #[serde(default)]
    pub unchanged: bool,
    pub duration_s: f64,
    pub output_tail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub id: String,
    pub original_path: PathBuf,
    pub quarantined_path: PathBuf,
    pub reason: String,
    pub sha256: String,
    pub size: u64,
    pub added_at: DateTime<Utc>,
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub run: String,
    #[serde(default)]
    pub proofs: Vec<Proof>,
}

impl Item {
    /// The item's directory in the store.
    pub fn dir(&self) -> PathBuf {
        self.quarantined_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// "unproven", "proven good" or "proven bad", from the latest attempt.
    pub fn proof_state(&self) -> &'static str {
        match self.proofs.last() {
            None => "unproven",
            Some(p) if p.passed => "proven good",
            Some(_) => "proven bad",
        }
    }
}

fn dev_of(path: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(path)
        .with_context(|| format!("stat {}", path.display()))?
        .dev())
}

/// Whether `path` (or its nearest existing ancestor) and `qdir` (created if missing) share a
/// filesystem, i.e. whether [`quarantine_path`] can move `path` there. Publish uses this to
/// fall back to its own rejected-copies dir when the quarantine is elsewhere.
pub fn same_filesystem(path: &Path, qdir: &Path) -> Result<bool> {
    std::fs::create_dir_all(qdir)
        .with_context(|| format!("creating quarantine dir {}", qdir.display()))?;
    let existing = path
        .ancestors()
        .find(|p| !p.as_os_str().is_empty() && p.exists())
        .unwrap_or(Path::new("."));
    Ok(dev_of(existing)? == dev_of(qdir)?)
}

/// Write meta.json atomically. Durable: it is the only record of where a quarantined item
/// came from and the proofs it passed (the ledger holds the claim, not the proofs).
pub fn write_meta(item: &Item) -> Result<()> {
    let path = item.dir().join(META);
    let text = serde_json::to_string_pretty(item)? + "\n";
    fsx::write_atomic(
        &path,
        text.as_bytes(),
        Replace::new(Durability::Durable, 0o644),
    )
    .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Move `path` into quarantine under `qdir`: hash it, record it in the ledger, rename it.
/// Publish calls this for a copy that failed verification; `scan` for untrusted outputs.
pub fn quarantine_path(
    qdir: &Path,
    path: &Path,
    reason: &str,
    source: &str,
    run: &str,
    ledger: &Ledger,
    now: DateTime<Utc>,
) -> Result<Item> {
    let lmeta = std::fs::symlink_metadata(path)
        .with_context(|| format!("{}: cannot quarantine what is not there", path.display()))?;
    if lmeta.file_type().is_symlink() {
        bail!(
            "{} is a symlink: quarantine what it points to, not the link",
            path.display()
        );
    }
    if reason.trim().is_empty() {
        bail!("a quarantine needs a reason (--reason)");
    }
    let original =
        std::fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))?;
    fsx::create_dirs_durably(qdir)
        .with_context(|| format!("creating quarantine dir {}", qdir.display()))?;
    let qdir = std::fs::canonicalize(qdir)?;
    if original.starts_with(&qdir) || qdir.starts_with(&original) {
        bail!(
            "{} and the quarantine dir {} contain one another",
            original.display(),
            qdir.display()
        );
    }
    // The ledger is append-only and stays where it is: moving it would restart the chain.
    if let Ok(ledger_path) = std::fs::canonicalize(ledger.path()) {
        if ledger_path.starts_with(&original) {
            bail!(
                "{} is (or holds) roger's ledger {}: the ledger is never moved; quarantine the suspect item itself",
                original.display(),
                ledger_path.display()
            );
        }
    }
    let parent = original.parent().unwrap_or(Path::new("/")).to_path_buf();
    if dev_of(&parent)? != dev_of(&qdir)? {
        bail!(exdev_message(&original, &qdir));
    }
    let digest = crate::digest::hash_path(&original)?;
    let name = original
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "item".into());
    let base_id = format!("{}-{}", now.format("%Y%m%dT%H%M%SZ"), &digest.sha256[..8]);
    let id = (1..)
        .map(|i| {
            if i == 1 {
                base_id.clone()
            } else {
                format!("{base_id}-{i}")
            }
        })
        .find(|id| !qdir.join(id).exists())
        .expect("some id is free");
    let item_dir = qdir.join(&id);
    std::fs::create_dir(&item_dir).with_context(|| format!("creating {}", item_dir.display()))?;
    let item = Item {
        id: id.clone(),
        original_path: original.clone(),
        quarantined_path: item_dir.join(&name),
        reason: reason.to_string(),
        sha256: digest.sha256.clone(),
        size: digest.size,
        added_at: now,
        source: source.to_string(),
        run: run.to_string(),
        proofs: Vec::new(),
    };
    if let Err(e) = write_meta(&item) {
        let _ = std::fs::remove_dir_all(&item_dir);
        return Err(e);
    }
    // Ledger first: if the move then fails, a release record undoes the claim.
    let recorded = ledger.append(
        Entry::new(Kind::Quarantine, source, run)
            .field("id", &id)
            .field("original_path", &original)
            .field("quarantined_path", &item.quarantined_path)
            .field("sha256", &item.sha256)
            .field("size", item.size)
            .field("reason", reason),
        now,
    );
    if let Err(e) = recorded {
        let _ = std::fs::remove_dir_all(&item_dir);
        return Err(e.context("recording the quarantine in the ledger (nothing was moved)"));
    }
    if let Err(e) = std::fs::rename(&original, &item.quarantined_path) {
        let _ = ledger.append(
            Entry::new(Kind::Release, source, run)
                .field("id", &id)
                .field("restored_to", &original)
                .field("reason", format!("quarantine move failed: {e}")),
            now,
        );
        let _ = std::fs::remove_dir_all(&item_dir);
        if e.raw_os_error() == Some(libc::EXDEV) {
            bail!(exdev_message(&original, &qdir));
        }
        return Err(e).with_context(|| {
            format!(
                "moving {} to {}",
                original.display(),
                item.quarantined_path.display()
            )
        });
    }
    // The moved entry, then the item's own directory in the store, and only then the
    // original's removal: at no power cut is the item in neither place.
    fsync_dir(&item_dir)?;
    fsync_dir(&qdir)?;
    fsync_dir(&parent)?;
    Ok(item)
}

fn exdev_message(original: &Path, qdir: &Path) -> String {
    format!(
        "{} is on another filesystem than the quarantine dir {} (EXDEV): roger moves quarantined items with rename and never copies-then-deletes; set [quarantine] dir (or --dir) to a directory on the same filesystem, e.g. {}",
        original.display(),
        qdir.display(),
        original
            .parent()
            .unwrap_or(Path::new("/"))
            .join(".roger-quarantine")
            .display()
    )
}

/// Every item in the store, oldest first; unreadable entries are returned as problems.
pub fn list(qdir: &Path) -> Result<(Vec<Item>, Vec<String>)> {
    let mut items = Vec::new();
    let mut problems = Vec::new();
    let rd = match std::fs::read_dir(qdir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((items, problems)),
        Err(e) => return Err(e).with_context(|| format!("listing {}", qdir.display())),
    };
    for entry in rd {
        let entry = entry.with_context(|| format!("listing {}", qdir.display()))?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let meta = entry.path().join(META);
        match std::fs::read(&meta)
            .map_err(anyhow::Error::from)
            .and_then(|b| serde_json::from_slice::<Item>(&b).map_err(anyhow::Error::from))
        {
            Ok(item) => items.push(item),
            Err(e) => problems.push(format!("{}: {e:#}", meta.display())),
        }
    }
    items.sort_by(|a, b| (a.added_at, &a.id).cmp(&(b.added_at, &b.id)));
    Ok((items, problems))
}

/// The item whose id is `id` or starts with it (unique).
pub fn find(qdir: &Path, id: &str) -> Result<Item> {
    let (items, _) = list(qdir)?;
    if let Some(i) = items.iter().find(|i| i.id == id) {
        return Ok(i.clone());
    }
    let hits: Vec<&Item> = items.iter().filter(|i| i.id.starts_with(id)).collect();
    match hits.as_slice() {
        [one] => Ok((*one).clone()),
        [] => bail!(
            "no quarantined item {id:?} in {} (see `roger quarantine list`)",
            qdir.display()
        ),
        many => bail!(
            "{id:?} matches {} items ({}): give more of the id",
            many.len(),
            many.iter()
                .map(|i| i.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000, 0).unwrap()
    }

    #[test]
    fn add_moves_hashes_records_and_lists() {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("ck");
        std::fs::create_dir(&ck).unwrap();
        std::fs::write(ck.join("model.pt"), b"weights").unwrap();
        let ledger = Ledger::new(dir.path().join("l.jsonl"));
        let q = dir.path().join("q");
        let item =
            quarantine_path(&q, &ck.join("model.pt"), "bad", "test", "r", &ledger, now()).unwrap();
        assert!(!ck.join("model.pt").exists());
        assert_eq!(std::fs::read(&item.quarantined_path).unwrap(), b"weights");
        assert_eq!(item.size, 7);
        assert!(item.id.starts_with("20231114T221320Z-"));
        let recs = ledger.records().unwrap();
        assert_eq!(recs[0].kind, Kind::Quarantine);
        let orig = std::fs::canonicalize(&ck).unwrap().join("model.pt");
        assert_eq!(recs[0].str_field("original_path"), orig.to_str());
        assert!(crate::checkpoints::quarantined(&recs).contains(&orig));
        assert_eq!(find(&q, &item.id[..18]).unwrap(), item);
        // A second item with the same content and second gets its own id.
        std::fs::write(ck.join("model.pt"), b"weights").unwrap();
        let again =
            quarantine_path(&q, &ck.join("model.pt"), "bad", "test", "r", &ledger, now()).unwrap();
        assert_eq!(again.id, format!("{}-2", item.id));
        assert!(find(&q, "2023")
            .unwrap_err()
            .to_string()
            .contains("matches 2"));
        assert_eq!(list(&q).unwrap().0.len(), 2);
    }

    #[test]
    fn refusals() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path().join("l.jsonl"));
        let q = dir.path().join("q");
        let missing = quarantine_path(&q, &dir.path().join("nope"), "r", "t", "r", &ledger, now());
        assert!(missing.unwrap_err().to_string().contains("not there"));
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("f"), dir.path().join("link")).unwrap();
        let link = quarantine_path(&q, &dir.path().join("link"), "r", "t", "r", &ledger, now());
        assert!(link.unwrap_err().to_string().contains("symlink"));
        let inside = quarantine_path(&q, dir.path(), "r", "t", "r", &ledger, now());
        assert!(inside
            .unwrap_err()
            .to_string()
            .contains("contain one another"));
        assert!(
            ledger.records().unwrap().is_empty(),
            "refusals write nothing"
        );
    }
}
