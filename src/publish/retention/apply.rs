//! Publish's side of retention: after a publish, under its lock, apply the one rule
//! ([`super::plan`]) — a `prune` record first (with its reason), then the removal.

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
    };
    let mut verifies = |c: &crate::checkpoints::Checkpoint| {
        if c.path == latest && c.sha256 == sha256 {
            Ok(())
        } else {
            crate::checkpoints::verify_on_disk(c)
        }
    };
    let mut plan = super::plan(&records, &req.run, dir, policy, &guard, &mut verifies);
    if let Some(r) = &req.remote {
        // A local copy goes only once its bucket copy is verified.
        let copies = crate::checkpoints::bucket::verified(&records, &req.run);
        let (keep, go): (Vec<_>, Vec<_>) = plan
            .candidates
            .into_iter()
            .partition(|c| crate::checkpoints::bucket::copy_of(&copies, &c.checkpoint).is_none());
        plan.candidates = go;
        plan.spared.extend(keep.into_iter().map(|c| super::Protected {
            path: c.checkpoint.path,
            why: format!(
                "its copy in {} is not verified yet (retention prunes a local checkpoint only after its bucket copy is)",
                r.target.url()
            ),
        }));
    }
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
