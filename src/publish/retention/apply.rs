//! Publish's side of retention: after a publish, under its lock, apply the one rule
//! ([`super::plan`], every keep-rule included) — a `prune` record first (with its reason),
//! then the removal.

use super::Protected;
use crate::config::PublishConfig;
use crate::ledger::{Entry, Kind, Ledger};
use crate::publish::{place, Pruned, Request};
use crate::sys::Clock;
use anyhow::{Context, Result};
use std::path::Path;

/// Apply retention (`super::plan`, the rule `hygiene disk --prune` applies too): a prune
/// record first (with its reason), then the removal. The checkpoint just published was
/// verified from disk moments ago; any other candidate for the last good one is re-hashed.
pub fn after_publish(
    ledger: &Ledger,
    req: &Request,
    policy: &PublishConfig,
    latest: &Path,
    sha256: &str,
    clock: &dyn Clock,
) -> Result<(Vec<Pruned>, Vec<Protected>)> {
    let records = ledger.records()?;
    let dir = latest
        .parent()
        .context("a published checkpoint has a directory")?;
    let guard = super::Guard {
        latest: Some(latest.to_path_buf()),
        rollback_margin: req.rollback_margin,
        bucket: req.remote.as_ref().map(|r| r.target.url()),
        // [cluster] parts: read from the job's store through the run's config, as the watch does.
        complete: req
            .config
            .as_deref()
            .and_then(|p| crate::config::Config::load(p).ok())
            .and_then(|cfg| super::parts_of(&cfg)),
    };
    let mut verifies = |c: &crate::checkpoints::Checkpoint| {
        if c.path == latest && c.sha256 == sha256 {
            Ok(())
        } else {
            crate::checkpoints::verify_on_disk(c)
        }
    };
    let plan = super::plan(&records, &req.run, dir, policy, &guard, &mut verifies);
    for k in &plan.spared {
        tracing::info!("retention keeps {}: {}", k.path.display(), k.why);
    }
    let mut out = Vec::new();
    for c in plan.candidates {
        let path = c.checkpoint.path;
        ledger.append(
            Entry::new(Kind::Prune, "publish", &req.run)
                .step(c.checkpoint.step)
                .field("path", path.display().to_string())
                .field("size", c.checkpoint.size)
                .field("reason", &c.reason),
            clock.now(),
        )?;
        crate::publish::failpoint::hit("after_prune_record");
        let error = place::remove_any(&path).err().map(|e| format!("{e:#}"));
        if let Some(e) = &error {
            tracing::warn!("pruning {}: {e}", path.display());
        }
        out.push(Pruned {
            path,
            size: c.checkpoint.size,
            step: c.checkpoint.step,
            reason: c.reason,
            error,
        });
    }
    if !out.is_empty() {
        // The removals survive a power cut (else `recover` finishes them).
        crate::sys::fsx::fsync_dir(dir)?;
    }
    Ok((out, plan.spared))
}

#[cfg(test)]
mod tests {
    use super::super::cases;
    use crate::config::remote::{Remote, Target};
    use crate::config::PublishConfig;
    use crate::publish::Request;

    /// Publish's retention runs the shared table: the row's latest is the checkpoint just
    /// published (handed in with the sha256 of the bytes now on disk), the bucket the row's.
    #[test]
    fn publish_runs_the_shared_table() {
        for i in 0..cases::rows() {
            let t = tempfile::tempdir().unwrap();
            let root = std::fs::canonicalize(t.path()).unwrap();
            let dir = root.join("ck");
            let case = cases::table(&dir).remove(i);
            let ledger = case.lay_out(&dir, &root.join("roger-ledger.jsonl"));
            let policy = PublishConfig {
                keep_last: case.keep_last,
                ..Default::default()
            };
            let req = Request {
                src: root.join("src"),
                dest: dir.clone(),
                step: None,
                run: "r".into(),
                ledger: ledger.path().to_path_buf(),
                retention: Some(policy.clone()),
                margin: 0,
                quarantine_dir: root.join("quarantine"),
                rollback_margin: case.margin,
                config: None,
                queue: None,
                remote: case.bucket.map(|_| Remote {
                    target: Target::parse(cases::BUCKET).unwrap(),
                    cfg: Default::default(),
                }),
            };
            let latest = dir.join(case.latest);
            let sha = crate::digest::hash_file(&latest).unwrap().0;
            let (pruned, _) = super::after_publish(
                &ledger,
                &req,
                &policy,
                &latest,
                &sha,
                &crate::sys::SystemClock,
            )
            .unwrap();
            let removed: Vec<_> = pruned.iter().map(|p| p.path.clone()).collect();
            case.check_removed("publish", &dir, &removed);
            for n in case.names() {
                assert_eq!(
                    dir.join(&n).exists(),
                    !removed.contains(&dir.join(&n)),
                    "publish: {}: {n}",
                    case.name
                );
            }
        }
    }
}
