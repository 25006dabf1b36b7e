//! Retention: which published checkpoints may go — THE rule, one function ([`plan`]) for every
//! caller (publish's retention, `hygiene disk --prune`, and the bucket's own retention in
//! `remote::queue`), run under the destination's publish lock. Pure apart from the injected
//! hash check. Scoped to one directory: a run published to two places (local + backup) keeps
//! N in each, and pruning one never touches a checkpoint of the other — which that
//! directory's latest.json may point to.
//!
//! Never removed, whatever the policy: what every rule in [`rules::RULES`] keeps — what
//! latest.json points to; the last good checkpoint of the directory; for every standing critic
//! fail, the newest checkpoint before its onset (and before onset − `rollback_margin_steps`);
//! while a critic judges the run, the newest checkpoint it vouched for; anything quarantined;
//! the checkpoint at (or nearest before) the best eval that a standing overfitting verdict
//! names (`checkpoints::best::standing`); with a bucket configured, every checkpoint whose bucket copy is not verified;
//! with `[cluster] parts = "every-node"`, the newest step every node's part of is verified. The rules
//! live in the planning function, not in its callers, so no caller can forget one.

use crate::checkpoints::{self, Checkpoint};
use crate::config::PublishConfig;
use crate::ledger::Record;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PruneCandidate {
    pub checkpoint: Checkpoint,
    /// A plain sentence for the prune record.
    pub reason: String,
}

/// A path retention must keep, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Protected {
    pub path: PathBuf,
    pub why: String,
}

/// What the caller knows beyond the ledger. No `Default`: every caller states each field.
#[derive(Debug, Clone)]
pub struct Guard {
    /// What the directory's latest.json points to (absolute, like ledger paths).
    pub latest: Option<PathBuf>,
    /// `[watch] rollback_margin_steps`: a rollback resumes before onset − margin.
    pub rollback_margin: u64,
    /// The bucket the directory's checkpoints go to (`s3://bucket/prefix/`), when a remote is
    /// configured: a checkpoint stays until its copy there is verified.
    pub bucket: Option<String>,
    /// `[cluster] parts = "every-node"`: the other nodes' parts as the job's store lists them
    /// (node → its steps; None: no record), or why they cannot be read. `None`: one node
    /// writes the checkpoints.
    pub complete: Option<crate::checkpoints::complete::Others>,
}

/// How retention learns the other nodes' parts (`[cluster] parts`) for a run's config: read
/// from the job's store by `crate::cluster`, which publish cannot call itself (the store may
/// be the bucket, whose client depends on publish). The binary registers it at start-up;
/// unregistered (a library caller), no part is known and the rule keeps every part.
static PARTS: std::sync::OnceLock<
    fn(&crate::config::Config) -> Option<crate::checkpoints::complete::Others>,
> = std::sync::OnceLock::new();

pub fn read_parts_with(
    f: fn(&crate::config::Config) -> Option<crate::checkpoints::complete::Others>,
) {
    let _ = PARTS.set(f);
}

/// The other nodes' parts for `cfg` (None: one node writes the checkpoints).
pub fn parts_of(cfg: &crate::config::Config) -> Option<crate::checkpoints::complete::Others> {
    if cfg.cluster.parts != crate::config::cluster::Parts::EveryNode {
        return None;
    }
    match PARTS.get() {
        Some(f) => f(cfg),
        None => Some(Err(
            "no reader of the [cluster] store in this process".into()
        )),
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Plan {
    /// May go, oldest first (a caller that only needs some space takes a prefix).
    pub candidates: Vec<PruneCandidate>,
    /// Never to be removed, and why (one line per reason; a path may have several).
    pub protected: Vec<Protected>,
    /// Checkpoints the policy alone would have removed that a protection keeps.
    pub spared: Vec<Protected>,
}

/// Retention for the checkpoints of `run` directly inside `dir` (absolute, as ledger paths
/// are). `verifies` re-hashes a checkpoint (for the last good one).
pub fn plan(
    records: &[Record],
    run: &str,
    dir: &Path,
    policy: &PublishConfig,
    guard: &Guard,
    verifies: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
) -> Plan {
    let published = checkpoints::published(records, run);
    let mut here: Vec<Checkpoint> = published
        .iter()
        .filter(|c| c.path.parent() == Some(dir))
        .cloned()
        .collect();
    here.sort_by_key(|c| c.seq);
    let mut facts = rules::Facts {
        records,
        run,
        dir,
        here,
        guard,
        verifies,
    };
    let mut protected: Vec<Protected> = Vec::new();
    for rule in rules::RULES {
        for p in rule(&mut facts) {
            if !protected.contains(&p) {
                protected.push(p);
            }
        }
    }
    let paths: Vec<PathBuf> = protected.iter().map(|p| p.path.clone()).collect();
    let candidates = select(&published, dir, policy, &paths);
    let spared = select(&published, dir, policy, &[])
        .into_iter()
        .filter(|c| {
            !candidates
                .iter()
                .any(|k| k.checkpoint.path == c.checkpoint.path)
        })
        .flat_map(|c| {
            protected
                .iter()
                .filter(|p| p.path == c.checkpoint.path)
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect();
    Plan {
        candidates,
        protected,
        spared,
    }
}

/// The policy alone: only checkpoints directly inside `dir` are considered (the others are not
/// this prune's business, nor counted towards `keep_last`). Of those, keep the newest
/// `keep_last` (by publish order), every checkpoint whose step is a multiple of `keep_every`
/// (when > 0), and everything in `protected`. The rest are candidates, oldest first.
fn select(
    checkpoints: &[Checkpoint],
    dir: &Path,
    policy: &PublishConfig,
    protected: &[PathBuf],
) -> Vec<PruneCandidate> {
    let mut ordered: Vec<&Checkpoint> = checkpoints
        .iter()
        .filter(|c| c.path.parent() == Some(dir))
        .collect();
    ordered.sort_by_key(|c| c.seq);
    let newest_from = ordered.len().saturating_sub(policy.keep_last);
    let rule = if policy.keep_every > 0 {
        format!(
            "keep_last={}, keep_every={}",
            policy.keep_last, policy.keep_every
        )
    } else {
        format!("keep_last={}", policy.keep_last)
    };
    ordered
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i < newest_from)
        .filter(|(_, c)| {
            !(policy.keep_every > 0 && c.step.is_some_and(|s| s % policy.keep_every == 0))
        })
        .filter(|(_, c)| !protected.iter().any(|p| p == &c.path))
        .map(|(_, c)| PruneCandidate {
            checkpoint: c.clone(),
            reason: format!(
                "retention: {rule}; {} is older than the newest {} and its step {} is not kept",
                c.path.display(),
                policy.keep_last,
                c.step.map_or("(unknown)".to_string(), |s| s.to_string())
            ),
        })
        .collect()
}

pub mod apply;
pub mod rules;
pub use rules::{vouched, Vouch};

#[cfg(test)]
pub(crate) mod case;
#[cfg(test)]
pub(crate) mod cases;
#[cfg(test)]
mod tests;
