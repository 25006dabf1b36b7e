//! Retention: which published checkpoints may go — THE rule, one function ([`plan`]) for every
//! caller (publish's retention and `hygiene disk --prune`), run under the destination's publish
//! lock. Pure apart from the injected hash check. Scoped to one directory: a run published to
//! two places (local + backup) keeps N in each, and pruning one never touches a checkpoint of
//! the other — which that directory's latest.json may point to.
//!
//! Never removed, whatever the policy: what latest.json points to; the last good checkpoint
//! of the directory (`checkpoints::last_good_in`); for every standing critic fail, the newest
//! checkpoint before its onset (and before onset − `rollback_margin_steps`, where a rollback
//! resumes), so a run that keeps publishing diverged weights cannot push the way back out;
//! while a critic judges the run, the newest checkpoint it vouched for (see [`vouched`]), so the
//! way back is still there when its fail arrives late; the checkpoint at (or nearest before)
//! the best eval that a standing overfitting verdict names (`critic::overfit::standing`);
//! anything quarantined.

use crate::checkpoints::{self, Checkpoint};
use crate::config::PublishConfig;
use crate::ledger::{Kind, Record};
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

/// What the caller knows beyond the ledger.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// What the directory's latest.json points to (absolute, like ledger paths).
    pub latest: Option<PathBuf>,
    /// `[watch] rollback_margin_steps`: a rollback resumes before onset − margin.
    pub rollback_margin: u64,
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
    let protected = protected(records, run, dir, &published, guard, verifies);
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

fn protected(
    records: &[Record],
    run: &str,
    dir: &Path,
    published: &[Checkpoint],
    guard: &Guard,
    verifies: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
) -> Vec<Protected> {
    let mut out: Vec<Protected> = Vec::new();
    let mut keep = |path: PathBuf, why: String| {
        if !out.iter().any(|p| p.path == path && p.why == why) {
            out.push(Protected { path, why });
        }
    };
    if let Some(p) = &guard.latest {
        keep(p.clone(), "latest.json points to it".into());
    }
    if let Some(c) = checkpoints::last_good_in(records, run, Some(dir), None, verifies).chosen {
        keep(c.path, "the last good checkpoint".into());
    }
    let here: Vec<&Checkpoint> = published
        .iter()
        .filter(|c| c.path.parent() == Some(dir))
        .collect();
    for f in checkpoints::fails(records, run)
        .into_iter()
        .filter(|f| f.standing())
    {
        let newest_before = |limit: u64| {
            here.iter()
                .filter(|c| c.step.is_some_and(|s| s < limit))
                .max_by_key(|c| (c.step, c.seq))
        };
        match f.onset {
            Some(onset) => {
                let mut limits = vec![onset];
                if guard.rollback_margin > 0 {
                    limits.push(onset.saturating_sub(guard.rollback_margin));
                }
                for limit in limits {
                    if let Some(c) = newest_before(limit) {
                        keep(
                            c.path.clone(),
                            format!(
                                "the newest checkpoint before step {limit}, where a standing critic fail (verdict #{}) says the run diverged{}",
                                f.seq,
                                if limit < onset { format!(" at {onset}, less the rollback margin") } else { String::new() }
                            ),
                        );
                    }
                }
            }
            // A fail with no step: the newest checkpoint published before it.
            None => {
                if let Some(c) = here.iter().filter(|c| c.seq < f.seq).max_by_key(|c| c.seq) {
                    keep(
                        c.path.clone(),
                        format!(
                            "the newest checkpoint published before a standing critic fail (verdict #{})",
                            f.seq
                        ),
                    );
                }
            }
        }
    }
    if let Some(v) = vouched(records, run) {
        let quarantine = checkpoints::quarantined(records);
        let fails = checkpoints::fails(records, run);
        // One a rollback could resume from: not quarantined, not tainted by a fail.
        let usable = |c: &&&Checkpoint| {
            !quarantine.contains(&c.path) && fails.iter().all(|f| f.taints(c).is_none())
        };
        let chosen = match v.before {
            Some(limit) => here
                .iter()
                .filter(|c| c.step.is_some_and(|s| s < limit))
                .filter(usable)
                .max_by_key(|c| (c.step, c.seq)),
            None => here
                .iter()
                .filter(|c| c.seq < v.seq)
                .filter(usable)
                .max_by_key(|c| c.seq),
        };
        if let Some(c) = chosen {
            keep(c.path.clone(), v.why());
        }
    }
    // The best-eval checkpoint a standing overfitting verdict names (critic/overfit.rs).
    if let Some(s) = crate::critic::overfit::standing(records, run) {
        if let Some(c) = s.mark.checkpoint.as_ref() {
            let path = PathBuf::from(&c.path);
            if path.parent() == Some(dir) {
                keep(
                    path,
                    format!(
                        "the checkpoint {} the best eval (step {}, loss {}) named by a standing overfitting verdict (#{})",
                        if c.relation == "at" { "at" } else { "nearest before" },
                        s.mark.step,
                        crate::critic::fmt(s.mark.eval_loss),
                        s.seq
                    ),
                );
            }
        }
    }
    let mut q: Vec<PathBuf> = checkpoints::quarantined(records).into_iter().collect();
    q.sort();
    for p in q {
        keep(p, "quarantined".into());
    }
    out
}

/// What the critic's newest `pass` verdict of the run vouched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vouch {
    /// seq of the verdict.
    pub seq: u64,
    /// The newest step it saw.
    pub step: Option<u64>,
    /// Where a bad stretch the pass did not fail on yet began (see [`vouched`]).
    pub bad_since: Option<u64>,
    /// Checkpoints with a step before this are vouched for; `None` (a verdict without a step):
    /// those published before the verdict.
    pub before: Option<u64>,
}

impl Vouch {
    fn why(&self) -> String {
        match (self.step, self.bad_since) {
            (Some(step), Some(since)) if self.before == Some(since) => format!(
                "the newest checkpoint before step {since}: the critic's last pass (verdict #{}, step {step}) saw the loss turn bad from step {since} on, not yet enough to fail",
                self.seq
            ),
            (Some(step), _) => format!(
                "the newest checkpoint at or before step {step}, the last the critic vouched for (pass verdict #{})",
                self.seq
            ),
            (None, _) => format!(
                "the newest checkpoint published before the critic's last pass (verdict #{}, no step)",
                self.seq
            ),
        }
    }
}

/// The critic's newest `pass` verdict of `run`: the last point it vouched for. A critic's fail
/// arrives after the onset it names (its daemon reads every `interval`, the log may be
/// flushed in chunks, the loss band is judged on a median), and by then `keep_last` alone may
/// have pruned every checkpoint before the onset (issue 28 item 7); the checkpoint the last pass
/// vouched for is kept until a newer pass moves it, so the rollback has somewhere to go.
///
/// Only `pass` vouches: a `warn` says some check is already unhappy, and `unknown` judged
/// nothing; neither moves the protection (a run whose critic never passes gets none from this
/// clause, only the others). A pass whose observation records a trailing bad stretch
/// (`onsets`: NaN, exact 0, out of band, spike — e.g. two huge losses that the median of
/// `band_samples` still hides) vouches only for the checkpoints before that stretch began:
/// its fail, when it comes, dates the onset there. A pass without a step vouches, by publish
/// order, for the checkpoints published before it. Checkpoints with an unknown step are
/// never the protected one when the verdict has a step: a rollback passes them over ("cannot
/// be shown to be before"), so keeping one would not keep the way back.
pub fn vouched(records: &[Record], run: &str) -> Option<Vouch> {
    let v = records.iter().rev().find(|r| {
        r.kind == Kind::Verdict && r.run == run && r.str_field("status") == Some("pass")
    })?;
    let bad_since = v
        .get("observation")
        .and_then(|o| o.get("onsets"))
        .and_then(|o| o.as_object())
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(|run| run.get("since").and_then(|s| s.as_u64()))
        .min();
    let before = v.step.map(|step| {
        let after = step.saturating_add(1);
        bad_since.map_or(after, |s| s.min(after))
    });
    Some(Vouch {
        seq: v.seq,
        step: v.step,
        bad_since,
        before,
    })
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

#[cfg(test)]
mod tests;
