//! `hygiene disk --prune`: free space by applying retention — the one rule,
//! `publish::retention::plan`, that publish applies too (it never removes latest.json's
//! target, the last good checkpoint, the newest checkpoint before a standing critic fail, the
//! newest one the critic's last pass vouched for, or anything quarantined) — taking its candidates oldest first only until the free-space goal is
//! met. The caller holds the destination's publish lock. Each removal is a `prune` ledger
//! record written before the bytes go.

use crate::checkpoints::Checkpoint;
use crate::config::PublishConfig;
use crate::ledger::{Entry, Kind, Ledger, Record};
pub use crate::publish::retention::Protected;
use crate::publish::retention::{self, Guard, PruneCandidate};
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize)]
pub struct PrunePlan {
    pub goal_free: u64,
    pub avail: u64,
    pub chosen: Vec<PruneCandidate>,
    pub freed: u64,
    pub goal_met: bool,
    pub protected: Vec<Protected>,
    /// Candidates retention allowed that were not needed for the goal.
    pub spared: usize,
}

/// The shortest oldest-first prefix of `candidates` whose sizes bring `avail` to `goal`.
/// When even all of them fall short, all are taken and `goal_met` is false.
pub fn take_until_goal(candidates: &[PruneCandidate], avail: u64, goal: u64) -> (usize, u64, bool) {
    let mut freed = 0u64;
    for (i, c) in candidates.iter().enumerate() {
        if avail.saturating_add(freed) >= goal {
            return (i, freed, true);
        }
        freed += c.checkpoint.size;
    }
    let met = avail.saturating_add(freed) >= goal;
    (candidates.len(), freed, met)
}

/// Plan the prune of the checkpoints in `dir` (absolute, as ledger paths are; pure given its
/// inputs and the injected hash check).
#[allow(clippy::too_many_arguments)]
pub fn plan(
    records: &[Record],
    run: &str,
    dir: &Path,
    policy: &PublishConfig,
    guard: &Guard,
    verifies: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
    avail: u64,
    goal_free: u64,
) -> PrunePlan {
    let r = retention::plan(records, run, dir, policy, guard, verifies);
    let (n, freed, goal_met) = take_until_goal(&r.candidates, avail, goal_free);
    PrunePlan {
        goal_free,
        avail,
        spared: r.candidates.len() - n,
        chosen: r.candidates[..n].to_vec(),
        freed,
        goal_met,
        protected: r.protected,
    }
}

/// Remove the chosen checkpoints, each after its ledger record. A checkpoint already gone is
/// recorded (the ledger must stop listing it) and skipped.
pub fn execute(
    plan: &PrunePlan,
    ledger: &Ledger,
    run: &str,
    now: DateTime<Utc>,
) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for c in &plan.chosen {
        let path = &c.checkpoint.path;
        ledger.append(
            Entry::new(Kind::Prune, "hygiene", run)
                .step(c.checkpoint.step)
                .field("path", path)
                .field("size", c.checkpoint.size)
                .field("reason", format!("disk: free-space goal; {}", c.reason)),
            now,
        )?;
        crate::publish::place::remove_any(path)?;
        removed.push(path.clone());
    }
    // The removals survive a power cut, like publish's retention (else `recover` finishes them).
    let dirs: std::collections::BTreeSet<&Path> =
        removed.iter().filter_map(|p| p.parent()).collect();
    for dir in dirs {
        crate::sys::fsx::fsync_dir(dir)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Bytes;
    use chrono::TimeZone;

    fn ok(_: &Checkpoint) -> Result<(), String> {
        Ok(())
    }

    /// Every checkpoint's bytes changed: none is the last good one, so none is protected by it.
    fn corrupt(_: &Checkpoint) -> Result<(), String> {
        Err("bytes changed".into())
    }

    fn no_latest() -> Guard {
        Guard::default()
    }

    fn records(entries: Vec<Entry>) -> Vec<Record> {
        crate::ledger::test_records(entries)
    }

    fn publish(step: u64) -> Entry {
        Entry::new(Kind::Publish, "publish", "r")
            .step(Some(step))
            .field("path", format!("/ck/{step}"))
            .field("sha256", format!("{step:064}"))
            .field("size", 10u64)
    }

    fn policy(keep_last: usize) -> PublishConfig {
        PublishConfig {
            keep_last,
            keep_every: 0,
            margin: Bytes(0),
            ..Default::default()
        }
    }

    #[test]
    fn takes_only_what_the_goal_needs() {
        let recs = records((1..=6).map(|s| publish(s * 100)).collect());
        let p = plan(
            &recs,
            "r",
            Path::new("/ck"),
            &policy(1),
            &no_latest(),
            &mut ok,
            75,
            100,
        );
        let steps: Vec<_> = p
            .chosen
            .iter()
            .map(|c| c.checkpoint.step.unwrap())
            .collect();
        assert_eq!(steps, [100, 200, 300], "oldest first, 3 × 10 B reach 100");
        assert!(p.goal_met);
        assert_eq!(p.spared, 2);
        let p = plan(
            &recs,
            "r",
            Path::new("/ck"),
            &policy(1),
            &no_latest(),
            &mut ok,
            100,
            100,
        );
        assert!(p.chosen.is_empty() && p.goal_met);
        let p = plan(
            &recs,
            "r",
            Path::new("/ck"),
            &policy(1),
            &no_latest(),
            &mut ok,
            0,
            1000,
        );
        assert_eq!(p.chosen.len(), 5);
        assert!(!p.goal_met);
    }

    #[test]
    fn never_latest_last_good_or_quarantined() {
        let recs = records(vec![
            publish(100),
            publish(200),
            publish(300),
            publish(400),
            Entry::new(Kind::Quarantine, "quarantine", "r").field("original_path", "/ck/200"),
            Entry::new(Kind::Verdict, "critic", "r")
                .step(Some(350))
                .field("status", "fail"),
        ]);
        // The fail at 350 taints 400: the last good is 300 (200 is quarantined), which is
        // also the newest before the standing fail.
        let guard = Guard {
            latest: Some(PathBuf::from("/ck/100")),
            rollback_margin: 0,
        };
        let p = plan(
            &recs,
            "r",
            Path::new("/ck"),
            &policy(1),
            &guard,
            &mut ok,
            0,
            u64::MAX,
        );
        let whys: Vec<_> = p
            .protected
            .iter()
            .map(|p| (p.path.to_str().unwrap(), p.why.as_str()))
            .collect();
        assert_eq!(whys.len(), 4, "{whys:?}");
        assert_eq!(whys[0], ("/ck/100", "latest.json points to it"));
        assert_eq!(whys[1], ("/ck/300", "the last good checkpoint"));
        assert!(
            whys[2].0 == "/ck/300"
                && whys[2]
                    .1
                    .starts_with("the newest checkpoint before step 350")
        );
        assert_eq!(whys[3], ("/ck/200", "quarantined"));
        assert!(p.chosen.is_empty(), "{:?}", p.chosen);
    }

    #[test]
    fn never_a_checkpoint_of_another_directory() {
        // The same run also publishes to /backup, whose latest.json points at /backup/400.
        let mut entries: Vec<Entry> = (1..=4).map(|s| publish(s * 100)).collect();
        for s in [100u64, 200, 300, 400] {
            entries.push(
                Entry::new(Kind::Publish, "publish", "r")
                    .step(Some(s))
                    .field("path", format!("/backup/{s}"))
                    .field("sha256", format!("{s:064}"))
                    .field("size", 10u64),
            );
        }
        let recs = records(entries);
        let p = plan(
            &recs,
            "r",
            Path::new("/ck"),
            &policy(0),
            &no_latest(),
            &mut corrupt,
            0,
            u64::MAX,
        );
        let chosen: Vec<_> = p
            .chosen
            .iter()
            .map(|c| c.checkpoint.path.to_str().unwrap())
            .collect();
        assert_eq!(chosen, ["/ck/100", "/ck/200", "/ck/300", "/ck/400"]);
        assert!(
            !p.goal_met,
            "the backup's bytes are not this directory's to free"
        );
        // keep_last counts within /ck: its newest stays though the backup's are newer.
        let p = plan(
            &recs,
            "r",
            Path::new("/ck"),
            &policy(1),
            &no_latest(),
            &mut ok,
            0,
            u64::MAX,
        );
        assert_eq!(p.chosen.len(), 3);
        // The last good checkpoint of /ck is /ck/400, though the run's newest is /backup/400.
        assert!(p
            .protected
            .iter()
            .any(|k| k.path == Path::new("/ck/400") && k.why == "the last good checkpoint"));
        assert!(p
            .chosen
            .iter()
            .all(|c| c.checkpoint.path.starts_with("/ck")));
    }

    #[test]
    fn execute_records_before_removing() {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("ck-1");
        std::fs::create_dir(&ck).unwrap();
        std::fs::write(ck.join("w"), b"x").unwrap();
        let ledger = Ledger::new(dir.path().join("l.jsonl"));
        ledger
            .append(
                Entry::new(Kind::Publish, "publish", "r")
                    .step(Some(1))
                    .field("path", &ck)
                    .field("sha256", "0".repeat(64))
                    .field("size", 1u64),
                Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
            )
            .unwrap();
        let recs = ledger.records().unwrap();
        let p = plan(
            &recs,
            "r",
            dir.path(),
            &policy(0),
            &no_latest(),
            &mut corrupt,
            0,
            1,
        );
        let removed = execute(
            &p,
            &ledger,
            "r",
            Utc.timestamp_opt(1_700_000_100, 0).unwrap(),
        )
        .unwrap();
        assert_eq!(removed, vec![ck.clone()]);
        assert!(!ck.exists());
        let recs = ledger.records().unwrap();
        assert_eq!(recs[1].kind, Kind::Prune);
        assert_eq!(recs[1].u64_field("size"), Some(1));
        assert!(crate::checkpoints::published(&recs, "r").is_empty());
    }
}
