//! Which checkpoint is the last GOOD one (ARCHITECTURE.md, contracts): the newest published one whose bytes
//! still hash to its recorded sha256, that is not quarantined, and that no critic `fail`
//! taints: its step is not at or after the fail's onset (the earliest `diverged_at`), or —
//! its step unknown (`last.ckpt`) — it was not published after the fail, unless a passing
//! verdict cleared the fail before its publish. Decided from ledger records; the hash check
//! is injected so the rule is tested without big files.
//!
//! Record fields this relies on (written by publish, prune, quarantine, release, critic):
//! publish: `path` (absolute), `sha256`, `size`; prune: `path`; quarantine: `original_path`;
//! release: `restored_to`; verdict: `status`.

pub mod best;
pub mod bucket;
pub mod complete;

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

/// A critic `fail` of the run, and whether a later verdict cleared it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fail {
    /// seq of the verdict.
    pub seq: u64,
    /// The newest step the verdict saw.
    pub step: Option<u64>,
    /// Where the run diverged: the earliest `diverged_at` (or a collapse's `began_at`) of its
    /// failing checks, else its step (issue 10 item 7: the verdict's own step is later than
    /// the divergence).
    pub onset: Option<u64>,
    /// seq of the first `pass`/`warn` verdict after it; `None`: the fail stands.
    pub cleared_by: Option<u64>,
}

impl Fail {
    pub fn standing(&self) -> bool {
        self.cleared_by.is_none()
    }

    /// Why it taints `c`, if it does: a checkpoint published before the fail was cleared is
    /// tainted when its step is at or after the onset (published before the critic noticed
    /// counts too: the weights are from after the divergence), or — its step or the onset
    /// unknown — when it was published after the fail was filed.
    pub fn taints(&self, c: &Checkpoint) -> Option<String> {
        if self.cleared_by.is_some_and(|p| p < c.seq) {
            return None;
        }
        match (c.step, self.onset) {
            (Some(step), Some(onset)) => (step >= onset).then(|| {
                format!(
                    "step {step} is at or after step {onset}, where a critic fail (verdict #{}) says the run diverged, never cleared before it was published",
                    self.seq
                )
            }),
            _ => (c.seq > self.seq).then(|| {
                format!(
                    "{} unknown, and it was published after a critic fail (verdict #{}{}) that was never cleared before it",
                    if c.step.is_none() { "its step is" } else { "the fail's step is" },
                    self.seq,
                    self.step.map_or(String::new(), |s| format!(", step {s}"))
                )
            }),
        }
    }
}

/// The step a failing verdict says its failure began at: the earliest `diverged_at` of its
/// failing checks, or `began_at` (a collapse, the loss below its band, is no divergence, but
/// the checkpoints from its onset on are no better). None when no failing check dates it.
pub fn onset(verdict: &Record) -> Option<u64> {
    verdict
        .get("checks")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .filter(|c| c.get("status").and_then(|s| s.as_str()) == Some("fail"))
        .filter_map(|c| {
            let at = |k: &str| c.get(k).and_then(|d| d.as_u64());
            at("diverged_at").or(at("began_at"))
        })
        .min()
}

/// The run's critic fails, oldest first, each with its onset and what cleared it.
pub fn fails(records: &[Record], run: &str) -> Vec<Fail> {
    let verdicts: Vec<&Record> = records
        .iter()
        .filter(|r| r.kind == Kind::Verdict && r.run == run)
        .collect();
    let mut out = Vec::new();
    for (i, f) in verdicts.iter().enumerate() {
        if f.str_field("status") != Some("fail") {
            continue;
        }
        let onset = onset(f).or(f.step);
        let cleared_by = verdicts[i + 1..]
            .iter()
            .find(|p| matches!(p.str_field("status"), Some("pass") | Some("warn")))
            .map(|p| p.seq);
        out.push(Fail {
            seq: f.seq,
            step: f.step,
            onset,
            cleared_by,
        });
    }
    out
}

/// The newest good checkpoint, optionally strictly before `before_step` (divergence rollback).
/// `verifies` re-hashes from disk and says whether the bytes still match.
pub fn last_good(
    records: &[Record],
    run: &str,
    before_step: Option<u64>,
    verifies: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
) -> Choice {
    last_good_in(records, run, None, before_step, verifies)
}

/// [`last_good`] among the checkpoints directly inside `dir` (all of them when `None`).
pub fn last_good_in(
    records: &[Record],
    run: &str,
    dir: Option<&std::path::Path>,
    before_step: Option<u64>,
    verifies: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
) -> Choice {
    let quarantine = quarantined(records);
    let fails = fails(records, run);
    let mut choice = Choice::default();
    let candidates = published(records, run)
        .into_iter()
        .filter(|c| dir.is_none_or(|d| c.path.parent() == Some(d)));
    for c in candidates.rev() {
        let skip = |why: String| Skipped {
            path: c.path.clone(),
            why,
        };
        if let Some(limit) = before_step {
            match c.step {
                Some(step) if step >= limit => {
                    choice
                        .skipped
                        .push(skip(format!("step {step} is not before {limit}")));
                    continue;
                }
                None => {
                    choice.skipped.push(skip(format!(
                        "its step is unknown, so it cannot be shown to be before {limit}"
                    )));
                    continue;
                }
                Some(_) => {}
            }
        }
        if quarantine.contains(&c.path) {
            choice.skipped.push(skip("quarantined".into()));
            continue;
        }
        if let Some(why) = fails.iter().find_map(|f| f.taints(&c)) {
            choice.skipped.push(skip(why));
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
            crate::digest::short(&d.sha256),
            d.size,
            crate::digest::short(&c.sha256),
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

    fn publish_named(name: &str) -> Entry {
        Entry::new(Kind::Publish, "publish", "r")
            .field("path", format!("/ck/{name}"))
            .field("sha256", "a".repeat(64))
            .field("size", 10)
    }

    fn fail_since(step: u64, diverged_at: u64) -> Entry {
        verdict(step, "fail").field(
            "checks",
            serde_json::json!([
                {"check": "lr", "status": "fail"},
                {"check": "loss", "status": "fail", "diverged_at": diverged_at},
                {"check": "loss_spike", "status": "warn", "diverged_at": 10}
            ]),
        )
    }

    fn chosen(recs: &[Record], before: Option<u64>) -> Option<PathBuf> {
        last_good(recs, "r", before, &mut ok).chosen.map(|c| c.path)
    }

    /// Issue 10 item 6: `last.ckpt` (no step in its name) published after a standing fail.
    #[test]
    fn a_stepless_checkpoint_is_judged_by_when_it_was_published() {
        let recs = ledger_with(vec![
            publish(100),
            verdict(150, "fail"),
            publish_named("last.ckpt"),
        ]);
        let choice = last_good(&recs, "r", None, &mut ok);
        assert_eq!(choice.chosen.unwrap().step, Some(100));
        assert!(
            choice.skipped[0].why.contains("its step is unknown, and it was published after a critic fail (verdict #2, step 150)"),
            "{:?}",
            choice.skipped
        );
        // Published before the fail, or after a pass cleared it: good.
        let before = ledger_with(vec![publish_named("last.ckpt"), verdict(150, "fail")]);
        assert_eq!(chosen(&before, None), Some(PathBuf::from("/ck/last.ckpt")));
        let cleared = ledger_with(vec![
            verdict(150, "fail"),
            verdict(160, "pass"),
            publish_named("last.ckpt"),
        ]);
        assert_eq!(chosen(&cleared, None), Some(PathBuf::from("/ck/last.ckpt")));
        // A rollback needs a step before the limit: an unknown one cannot be shown to be.
        let c = last_good(&before, "r", Some(100), &mut ok);
        assert!(c.chosen.is_none());
        assert!(c.skipped[0]
            .why
            .contains("cannot be shown to be before 100"));
    }

    /// Issue 10 item 7: tainting starts at the onset, not at the step the verdict was filed at.
    #[test]
    fn a_fail_taints_from_its_onset() {
        let recs = ledger_with(vec![publish(70), publish(90), fail_since(120, 80)]);
        let choice = last_good(&recs, "r", None, &mut ok);
        assert_eq!(choice.chosen.unwrap().step, Some(70));
        assert!(
            choice.skipped[0]
                .why
                .contains("step 90 is at or after step 80"),
            "{:?}",
            choice.skipped
        );
        let f = &fails(&recs, "r")[0];
        assert_eq!((f.step, f.onset, f.standing()), (Some(120), Some(80), true));
        // After the rollback the new run publishes 70 again and then 90 once a pass came.
        let recs = ledger_with(vec![
            publish(70),
            publish(90),
            fail_since(120, 80),
            verdict(75, "pass"),
            publish(90),
        ]);
        assert_eq!(last_good(&recs, "r", None, &mut ok).chosen.unwrap().seq, 5);
        assert!(!fails(&recs, "r")[0].standing());
    }

    /// Issue 18 item 8: a collapse (the loss below its band) is no divergence, but the
    /// checkpoints from its onset (`began_at`) on are not good either.
    #[test]
    fn a_collapse_taints_from_where_it_began() {
        let collapse = verdict(120, "fail").field(
            "checks",
            serde_json::json!([{"check": "loss", "status": "fail", "began_at": 80}]),
        );
        let recs = ledger_with(vec![publish(70), publish(90), collapse]);
        assert_eq!(fails(&recs, "r")[0].onset, Some(80));
        assert_eq!(
            last_good(&recs, "r", None, &mut ok).chosen.unwrap().step,
            Some(70)
        );
    }

    #[test]
    fn last_good_in_a_directory() {
        let mut backup = publish(300);
        backup = backup.field("path", "/backup/ckpt-300.pt");
        let recs = ledger_with(vec![publish(100), publish(200), backup]);
        let c = last_good_in(&recs, "r", Some(std::path::Path::new("/ck")), None, &mut ok);
        assert_eq!(c.chosen.unwrap().step, Some(200));
        assert_eq!(
            chosen(&recs, None),
            Some(PathBuf::from("/backup/ckpt-300.pt"))
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

    /// Issue 10 item 11 (found by the fuzz harness, 840986a): a publish record's sha256 cut
    /// for the "bytes changed" message inside a 2-byte char panicked.
    #[test]
    fn regress_non_ascii_sha256_in_publish_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ckpt-1.pt");
        std::fs::write(&p, b"weights").unwrap();
        let c = Checkpoint {
            path: p,
            sha256: "abcdefghijkééé".into(),
            size: 7,
            step: Some(1),
            seq: 1,
        };
        let why = verify_on_disk(&c).unwrap_err();
        assert!(why.contains("recorded abcdefghijk size 7"), "{why}");
    }
}
