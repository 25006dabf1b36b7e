//! `hygiene disk --prune`: free space by applying retention — the one rule,
//! `publish::retention::plan`, that publish applies too, every keep-rule included (latest.json's
//! target, the last good checkpoint, the newest checkpoint before a standing critic fail, the
//! newest one the critic's last pass vouched for, anything quarantined, and, with a bucket
//! configured, anything whose bucket copy is not verified) — taking its candidates oldest
//! first only until the free-space goal is met. The caller holds the destination's publish
//! lock. Each removal is a `prune` ledger record written before the bytes go; what a keep-rule
//! holds back from the policy is one `note` record (`event: prune-kept`) saying why.

use crate::checkpoints::Checkpoint;
use crate::config::{Config, PublishConfig};
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
    /// Checkpoints the policy alone would remove that a keep-rule holds back, and why.
    pub held: Vec<Protected>,
}

/// The guard of `hygiene disk --prune` for `cfg`'s checkpoint directory `dir` (`abs_dir`: the
/// same, absolute like ledger paths): latest.json's target, the rollback margin, and the
/// bucket the checkpoints go to when `[publish] remote` is set.
pub fn guard(cfg: &Config, dir: &Path, abs_dir: &Path) -> Result<Guard> {
    Ok(Guard {
        latest: crate::publish::manifest::read(dir)?.map(|l| l.target(abs_dir)),
        rollback_margin: cfg.watch.rollback_margin_steps,
        // Parsed as the config was read: no error left to meet here.
        bucket: crate::config::remote::Remote::of_config(cfg).map(|r| r.target.url()),
        complete: crate::cluster::parts::others_of(cfg),
    })
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
        held: r.spared,
    }
}

/// The prune of `cfg`'s checkpoint directory with `avail` bytes free now: the guard from
/// [`guard`], the goal `[disk] prune_goal_free` (else `warn_free`), every candidate's bytes
/// re-hashed for the last good one.
pub fn plan_for(cfg: &Config, records: &[Record], avail: u64) -> Result<PrunePlan> {
    let dir = cfg.checkpoint_dir()?;
    // Ledger paths are absolute: compare like with like, or latest.json's target would not
    // match its own publish record.
    let abs_dir = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
    let guard = guard(cfg, &dir, &abs_dir)?;
    let goal = cfg.disk.prune_goal_free.unwrap_or(cfg.disk.warn_free).0;
    Ok(plan(
        records,
        &cfg.run.name,
        &abs_dir,
        &cfg.publish,
        &guard,
        &mut crate::checkpoints::verify_on_disk,
        avail,
        goal,
    ))
}

/// Remove the chosen checkpoints, each after its ledger record. A checkpoint already gone is
/// recorded (the ledger must stop listing it) and skipped.
pub fn execute(
    plan: &PrunePlan,
    ledger: &Ledger,
    run: &str,
    now: DateTime<Utc>,
) -> Result<Vec<PathBuf>> {
    if !plan.held.is_empty() {
        let paths: std::collections::BTreeSet<&Path> =
            plan.held.iter().map(|k| k.path.as_path()).collect();
        ledger.append(
            Entry::new(Kind::Note, "hygiene", run)
                .field("event", "prune-kept")
                .field(
                    "message",
                    format!(
                        "disk prune kept {} checkpoint(s) the retention policy alone would remove",
                        paths.len()
                    ),
                )
                .field("kept", &plan.held),
            now,
        )?;
    }
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
        Guard {
            latest: None,
            rollback_margin: 0,
            bucket: None,
            complete: None,
        }
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
            bucket: None,
            complete: None,
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

    /// `hygiene disk --prune` runs the shared table (`publish::retention::cases`) from a
    /// roger.toml, latest.json and the files on disk, with a goal no removal can reach. A
    /// row with `keep_last = 0` is not a roger.toml (`check` rejects it): publish's caller runs it.
    #[test]
    fn hygiene_runs_the_shared_table() {
        use crate::publish::retention::cases;
        let mut ran = 0;
        for i in 0..cases::rows() {
            let t = tempfile::tempdir().unwrap();
            let root = std::fs::canonicalize(t.path()).unwrap();
            let dir = root.join("ck");
            let case = cases::table(&dir).remove(i);
            if case.keep_last == 0 {
                continue;
            }
            ran += 1;
            let ledger = case.lay_out(&dir, &root.join("roger-ledger.jsonl"));
            let toml = format!(
                "[run]\nname = \"r\"\nlog = \"train.log\"\ncheckpoint_dir = \"{}\"\n\
                 [publish]\nkeep_last = {}\n{}\
                 [watch]\nrollback_margin_steps = {}\n\
                 [disk]\nprune_goal_free = \"1000TB\"\n",
                dir.display(),
                case.keep_last,
                case.bucket.map_or(String::new(), |_| format!(
                    "remote = \"{}\"\n",
                    cases::BUCKET
                )),
                case.margin
            );
            let cfg = Config::parse(&toml, &root.join("roger.toml")).unwrap();
            let latest = crate::publish::manifest::Latest {
                path: case.latest.to_string(),
                sha256: cases::sha256(case.latest),
                size: cases::bytes(case.latest).len() as u64,
                step: None,
                published_at: "2023-11-14T22:13:20Z".into(),
            };
            crate::publish::manifest::write(&dir, &latest).unwrap();
            let records = ledger.records().unwrap();
            let p = plan_for(&cfg, &records, 0).unwrap();
            case.check_kept("hygiene", &dir, &p.protected);
            let removed = execute(&p, &ledger, "r", Utc::now()).unwrap();
            case.check_removed("hygiene", &dir, &removed);
            for n in case.names() {
                assert_eq!(
                    dir.join(&n).exists(),
                    !removed.contains(&dir.join(&n)),
                    "hygiene: {}: {n}",
                    case.name
                );
            }
            // Each checkpoint the policy alone would remove and a rule keeps is in one note.
            let notes: Vec<_> = ledger
                .records()
                .unwrap()
                .into_iter()
                .filter(|r| r.str_field("event") == Some("prune-kept"))
                .collect();
            assert_eq!(
                notes.len(),
                usize::from(!p.held.is_empty()),
                "{}",
                case.name
            );
        }
        assert_eq!(ran, cases::rows() - 1);
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
