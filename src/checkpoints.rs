//! Which checkpoint is the last GOOD one (DESIGN.md): the newest published one whose bytes
//! still hash to its recorded sha256, that is not quarantined, and whose step is not at or
//! after a critic `fail` that was never cleared. Decided from ledger records; the hash check
//! is injected so the rule is tested without big files.
//!
//! Record fields this relies on (written by publish, prune, quarantine, release, critic):
//! publish: `path` (absolute), `sha256`, `size`; prune: `path`; quarantine: `original_path`;
//! release: `restored_to`; verdict: `status`.

use crate::ledger::{Kind, Record};
use serde::Serialize;
use std::collections::HashSet;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Checkpoint {
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
    pub step: Option<u64>,
    /// seq of its publish record.
    pub seq: u64,
}

/// Why a candidate was passed over (for the relaunch record).
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub path: PathBuf,
    pub why: String,
}

#[derive(Debug, Default, Serialize)]
pub struct Choice {
    pub chosen: Option<Checkpoint>,
    pub skipped: Vec<Skipped>,
}

/// Published checkpoints of `run` that have not been pruned since, oldest first.
pub fn published(records: &[Record], run: &str) -> Vec<Checkpoint> {
    let mut out: Vec<Checkpoint> = Vec::new();
    for r in records.iter().filter(|r| r.run == run) {
        match r.kind {
            Kind::Publish => {
                let (Some(path), Some(sha256), Some(size)) = (
                    r.str_field("path"),
                    r.str_field("sha256"),
                    r.u64_field("size"),
                ) else {
                    continue;
                };
                let path = PathBuf::from(path);
                out.retain(|c| c.path != path);
                out.push(Checkpoint {
                    path,
                    sha256: sha256.to_string(),
                    size,
                    step: r.step,
                    seq: r.seq,
                });
            }
            Kind::Prune => {
                if let Some(p) = r.str_field("path") {
                    out.retain(|c| c.path.as_path() != std::path::Path::new(p));
                }
            }
            _ => {}
        }
    }
    out
}

/// Paths quarantined and not released since.
pub fn quarantined(records: &[Record]) -> HashSet<PathBuf> {
    let mut set = HashSet::new();
    for r in records {
        match r.kind {
            Kind::Quarantine => {
                if let Some(p) = r.str_field("original_path") {
                    set.insert(PathBuf::from(p));
                }
            }
            Kind::Release => {
                if let Some(p) = r.str_field("restored_to") {
                    set.remove(&PathBuf::from(p));
                }
            }
            _ => {}
        }
    }
    set
}

/// A checkpoint is tainted by a critic `fail` at step F ≤ its step unless a passing verdict
/// was filed between that fail and its publish (a checkpoint published before the critic
/// noticed is tainted too: the weights are from after the divergence).
fn tainted_by(records: &[Record], run: &str, c: &Checkpoint) -> Option<u64> {
    let step = c.step?;
    let verdicts: Vec<&Record> = records
        .iter()
        .filter(|r| r.kind == Kind::Verdict && r.run == run)
        .collect();
    for (i, f) in verdicts.iter().enumerate() {
        if f.str_field("status") != Some("fail") {
            continue;
        }
        let Some(fail_step) = f.step else { continue };
        if fail_step > step {
            continue;
        }
        let cleared = verdicts[i + 1..]
            .iter()
            .any(|p| p.seq < c.seq && matches!(p.str_field("status"), Some("pass") | Some("warn")));
        if !cleared {
            return Some(fail_step);
        }
    }
    None
}

/// The newest good checkpoint, optionally strictly before `before_step` (divergence rollback).
/// `verifies` re-hashes from disk and says whether the bytes still match.
pub fn last_good(
    records: &[Record],
    run: &str,
    before_step: Option<u64>,
    verifies: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
) -> Choice {
    let quarantine = quarantined(records);
    let mut choice = Choice::default();
    for c in published(records, run).into_iter().rev() {
        let skip = |why: String| Skipped {
            path: c.path.clone(),
            why,
        };
        if let (Some(limit), Some(step)) = (before_step, c.step) {
            if step >= limit {
                choice
                    .skipped
                    .push(skip(format!("step {step} is not before {limit}")));
                continue;
            }
        }
        if quarantine.contains(&c.path) {
            choice.skipped.push(skip("quarantined".into()));
            continue;
        }
        if let Some(f) = tainted_by(records, run, &c) {
            choice.skipped.push(skip(format!(
                "at or after a critic fail at step {f} that was never cleared"
            )));
            continue;
        }
        if let Err(why) = verifies(&c) {
            choice.skipped.push(skip(why));
            continue;
        }
        choice.chosen = Some(c);
        break;
    }
    choice
}

/// The real verification: re-hash from disk and compare to the record.
pub fn verify_on_disk(c: &Checkpoint) -> Result<(), String> {
    match crate::digest::hash_path(&c.path) {
        Ok(d) if d.sha256 == c.sha256 && d.size == c.size => Ok(()),
        Ok(d) => Err(format!(
            "bytes changed since publish: sha256 {} size {} (recorded {} size {})",
            &d.sha256[..12],
            d.size,
            &c.sha256[..c.sha256.floor_char_boundary(12)],
            c.size
        )),
        Err(e) => Err(format!("cannot be read: {e:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Entry;

    fn ledger_with(entries: Vec<Entry>) -> Vec<Record> {
        crate::ledger::test_records(entries)
    }

    fn publish(step: u64) -> Entry {
        Entry::new(Kind::Publish, "publish", "r")
            .step(Some(step))
            .field("path", format!("/ck/ckpt-{step}.pt"))
            .field("sha256", format!("{step:064}"))
            .field("size", 10)
    }

    fn verdict(step: u64, status: &str) -> Entry {
        Entry::new(Kind::Verdict, "critic", "r")
            .step(Some(step))
            .field("status", status)
    }

    fn ok(_: &Checkpoint) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn newest_verified_wins() {
        let recs = ledger_with(vec![publish(100), publish(200)]);
        let c = last_good(&recs, "r", None, &mut ok).chosen.unwrap();
        assert_eq!(c.step, Some(200));
        let mut bad_200 = |c: &Checkpoint| {
            if c.step == Some(200) {
                Err("truncated".to_string())
            } else {
                Ok(())
            }
        };
        let choice = last_good(&recs, "r", None, &mut bad_200);
        assert_eq!(choice.chosen.unwrap().step, Some(100));
        assert_eq!(choice.skipped[0].why, "truncated");
    }

    #[test]
    fn pruned_and_quarantined_are_not_candidates() {
        let recs = ledger_with(vec![
            publish(100),
            publish(200),
            publish(300),
            Entry::new(Kind::Prune, "publish", "r").field("path", "/ck/ckpt-300.pt"),
            Entry::new(Kind::Quarantine, "quarantine", "r")
                .field("original_path", "/ck/ckpt-200.pt"),
        ]);
        let choice = last_good(&recs, "r", None, &mut ok);
        assert_eq!(choice.chosen.unwrap().step, Some(100));
    }

    #[test]
    fn uncleared_fail_taints_later_checkpoints() {
        // ckpt 300 was published before the critic filed its fail at step 250.
        let recs = ledger_with(vec![
            publish(100),
            verdict(150, "pass"),
            publish(200),
            publish(300),
            verdict(250, "fail"),
        ]);
        assert_eq!(
            last_good(&recs, "r", None, &mut ok).chosen.unwrap().step,
            Some(200)
        );
        // After a pass clears it, a new checkpoint is good again.
        let recs = ledger_with(vec![
            publish(100),
            verdict(250, "fail"),
            verdict(260, "pass"),
            publish(300),
        ]);
        assert_eq!(
            last_good(&recs, "r", None, &mut ok).chosen.unwrap().step,
            Some(300)
        );
    }

    #[test]
    fn rollback_limit() {
        let recs = ledger_with(vec![publish(100), publish(200), publish(300)]);
        let c = last_good(&recs, "r", Some(250), &mut ok).chosen.unwrap();
        assert_eq!(c.step, Some(200));
        assert!(last_good(&recs, "r", Some(50), &mut ok).chosen.is_none());
    }

    #[test]
    fn other_runs_are_ignored() {
        let recs = ledger_with(vec![publish(100)]);
        assert!(last_good(&recs, "other", None, &mut ok).chosen.is_none());
    }
}
