//! `hygiene disk --prune`: free space by applying the retention policy — the one
//! implementation, `publish::retention::plan`, scoped like publish's to the checkpoint
//! directory being pruned — protecting what `latest.json` points to, the
//! last good checkpoint and anything quarantined, and taking candidates oldest first only
//! until the free-space goal is met. Each removal is a `prune` ledger record written before
//! the bytes go.

use crate::checkpoints::{self, Checkpoint};
use crate::config::PublishConfig;
use crate::ledger::{Entry, Kind, Ledger, Record};
use crate::publish::retention::{self, PruneCandidate};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize)]
pub struct Protected {
    pub path: PathBuf,
    pub why: String,
}

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

/// What must never be pruned: latest.json's target, the last good checkpoint, quarantined
/// paths. `verifies` re-hashes a checkpoint (injected for tests).
pub fn protected(
    records: &[Record],
    run: &str,
    latest_target: Option<PathBuf>,
    verifies: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
) -> Vec<Protected> {
    let mut out = Vec::new();
    if let Some(p) = latest_target {
        out.push(Protected {
            path: p,
            why: "latest.json points to it".into(),
        });
    }
    if let Some(c) = checkpoints::last_good(records, run, None, verifies).chosen {
        out.push(Protected {
            path: c.path,
            why: "the last good checkpoint".into(),
        });
    }
    let mut q: Vec<PathBuf> = checkpoints::quarantined(records).into_iter().collect();
    q.sort();
    out.extend(q.into_iter().map(|path| Protected {
        path,
        why: "quarantined".into(),
    }));
    out
}

/// Plan the prune of the checkpoints in `dir` (absolute, as ledger paths are; pure given its
/// inputs).
pub fn plan(
    records: &[Record],
    run: &str,
    dir: &Path,
    policy: &PublishConfig,
    protected: Vec<Protected>,
    avail: u64,
    goal_free: u64,
) -> PrunePlan {
    let published = checkpoints::published(records, run);
    let paths: Vec<PathBuf> = protected.iter().map(|p| p.path.clone()).collect();
    let candidates = retention::plan(&published, dir, policy, &paths);
    let (n, freed, goal_met) = take_until_goal(&candidates, avail, goal_free);
    PrunePlan {
        goal_free,
        avail,
        spared: candidates.len() - n,
        chosen: candidates[..n].to_vec(),
        freed,
        goal_met,
        protected,
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
        remove_any(path)?;
        removed.push(path.clone());
    }
    Ok(removed)
}

fn remove_any(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("stat {}", path.display())),
    };
    if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
    .with_context(|| format!("removing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Bytes;
    use chrono::TimeZone;

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
        }
    }

    #[test]
    fn takes_only_what_the_goal_needs() {
        let recs = records((1..=6).map(|s| publish(s * 100)).collect());
        let p = plan(&recs, "r", Path::new("/ck"), &policy(1), vec![], 75, 100);
        let steps: Vec<_> = p
            .chosen
            .iter()
            .map(|c| c.checkpoint.step.unwrap())
            .collect();
        assert_eq!(steps, [100, 200, 300], "oldest first, 3 × 10 B reach 100");
        assert!(p.goal_met);
        assert_eq!(p.spared, 2);
        let p = plan(&recs, "r", Path::new("/ck"), &policy(1), vec![], 100, 100);
        assert!(p.chosen.is_empty() && p.goal_met);
        let p = plan(&recs, "r", Path::new("/ck"), &policy(1), vec![], 0, 1000);
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
        // The fail at 350 taints 400: the last good is 300 (200 is quarantined).
        let prot = protected(&recs, "r", Some(PathBuf::from("/ck/100")), &mut |_| Ok(()));
        let whys: Vec<_> = prot
            .iter()
            .map(|p| (p.path.to_str().unwrap(), p.why.as_str()))
            .collect();
        assert_eq!(
            whys,
            [
                ("/ck/100", "latest.json points to it"),
                ("/ck/300", "the last good checkpoint"),
                ("/ck/200", "quarantined")
            ]
        );
        let p = plan(&recs, "r", Path::new("/ck"), &policy(1), prot, 0, u64::MAX);
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
            vec![],
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
            vec![],
            0,
            u64::MAX,
        );
        assert_eq!(p.chosen.len(), 3);
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
        let p = plan(&recs, "r", dir.path(), &policy(0), vec![], 0, 1);
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
        assert!(checkpoints::published(&recs, "r").is_empty());
    }
}
