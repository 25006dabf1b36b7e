//! A row of the shared retention table (`super::cases`): its type, the ledger entries rows are
//! made of, laying a row out on disk, and the checks every runner makes of its result.

use crate::ledger::{Entry, Kind, Record};
use std::path::{Path, PathBuf};

/// The bucket of every row that configures one.
pub const BUCKET: &str = "s3://ckpts/r/";

pub struct Case {
    pub name: &'static str,
    pub ledger: Vec<Entry>,
    pub keep_last: usize,
    pub latest: &'static str,
    pub margin: u64,
    /// A bucket is configured ([`BUCKET`]) and these names have a verified copy there.
    pub bucket: Option<&'static [&'static str]>,
    /// Names whose bytes no longer match their record.
    pub corrupt: &'static [&'static str],
    /// What may go, oldest first.
    pub prune: &'static [&'static str],
    /// (name, start of the why) that must be among the protections.
    pub kept: &'static [(&'static str, &'static str)],
}

/// The bytes of the checkpoint file `name` (its record's sha256 is theirs).
pub fn bytes(name: &str) -> Vec<u8> {
    format!("weights of {name}").into_bytes()
}

pub fn sha256(name: &str) -> String {
    crate::digest::hash_reader(&bytes(name)[..]).unwrap().0
}

pub(super) fn publish_in(dir: &Path, name: &str, step: Option<u64>) -> Entry {
    Entry::new(Kind::Publish, "publish", "r")
        .step(step)
        .field("path", dir.join(name).display().to_string())
        .field("sha256", sha256(name))
        .field("size", bytes(name).len() as u64)
}

/// The bucket's record of a verified copy of `dir/name` (as the uploader writes it).
pub fn verified_in(dir: &Path, name: &str) -> Entry {
    Entry::new(Kind::Remote, crate::checkpoints::bucket::SOURCE, "r")
        .field("event", "verified")
        .field("path", dir.join(name).display().to_string())
        .field("url", format!("{BUCKET}checkpoints/{name}"))
        .field("name", name)
        .field("sha256", sha256(name))
        .field("size", bytes(name).len() as u64)
}

pub(super) fn verdict(step: Option<u64>, status: &str, diverged_at: Option<u64>) -> Entry {
    let mut check = serde_json::json!({"check": "loss", "status": status});
    if let Some(d) = diverged_at {
        check["diverged_at"] = d.into();
    }
    Entry::new(Kind::Verdict, "critic", "r")
        .step(step)
        .field("status", status)
        .field("checks", vec![check])
}

/// A `pass` at `step` whose observation records an out-of-band stretch since `since` that
/// the median of the newest losses still hides (what the real critic files: see `vouched`).
pub(super) fn pass_hiding(step: u64, since: u64) -> Entry {
    verdict(Some(step), "pass", None).field(
        "observation",
        serde_json::json!({"onsets": {"out_of_band": {"since": since, "samples": step - since + 1}}}),
    )
}

impl Case {
    /// The row's ledger (then its verified bucket copies) as records, paths under `dir`.
    pub fn records(&self, dir: &Path) -> Vec<Record> {
        let mut entries = self.ledger.clone();
        for name in self.bucket.unwrap_or_default() {
            entries.push(verified_in(dir, name));
        }
        crate::ledger::test_records(entries)
    }

    /// Every checkpoint name the row publishes, once each, in publish order.
    pub fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in &self.ledger {
            let r = crate::ledger::test_records(vec![e.clone()]);
            if r[0].kind == Kind::Publish {
                let p = PathBuf::from(r[0].str_field("path").unwrap());
                let n = p.file_name().unwrap().to_string_lossy().to_string();
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        out
    }

    /// Lay the row out for a runner that touches disk: each checkpoint file under `dir` (a
    /// corrupt one with other bytes), the row's records appended to a ledger at `ledger`.
    pub fn lay_out(&self, dir: &Path, ledger: &Path) -> crate::ledger::Ledger {
        std::fs::create_dir_all(dir).unwrap();
        for n in self.names() {
            let b = if self.corrupt.contains(&n.as_str()) {
                b"changed bytes".to_vec()
            } else {
                bytes(&n)
            };
            std::fs::write(dir.join(&n), b).unwrap();
        }
        let l = crate::ledger::Ledger::new(ledger.to_path_buf());
        let verified = self
            .bucket
            .unwrap_or_default()
            .iter()
            .map(|n| verified_in(dir, n));
        for (i, e) in self.ledger.iter().cloned().chain(verified).enumerate() {
            use chrono::TimeZone;
            let ts = chrono::Utc
                .timestamp_opt(1_700_000_000 + i as i64, 0)
                .unwrap();
            l.append(e, ts).unwrap();
        }
        l
    }

    /// Panics unless exactly the row's `prune` went (`removed`: paths, in removal order).
    pub fn check_removed(&self, caller: &str, dir: &Path, removed: &[PathBuf]) {
        let want: Vec<PathBuf> = self.prune.iter().map(|n| dir.join(n)).collect();
        assert_eq!(removed, want, "{caller}: {}", self.name);
    }

    /// Panics unless every `kept` (name, why) is among `protected`, and no protected path
    /// went.
    pub fn check_kept(&self, caller: &str, dir: &Path, protected: &[super::Protected]) {
        for (name, why) in self.kept {
            assert!(
                protected
                    .iter()
                    .any(|k| k.path == dir.join(name) && k.why.starts_with(why)),
                "{caller}: {}: {name} not kept as {why:?}: {protected:#?}",
                self.name
            );
        }
        for k in protected {
            assert!(
                !self.prune.iter().any(|n| k.path == dir.join(n)),
                "{caller}: {}: {} is protected and pruned",
                self.name,
                k.path.display()
            );
        }
    }
}
