//! Retention's keep-rules: each one a plain function from the same facts to the checkpoints
//! it keeps and why; [`RULES`] lists them all, and [`super::plan`] runs every one for every
//! caller, so no caller can forget one. A new rule is a function here plus one line in
//! [`RULES`] (its facts read from the ledger records or, if the caller alone knows them,
//! from a field of [`super::Guard`], which has no default so every caller must fill it in).

use super::{Guard, Protected};
use crate::checkpoints::{self, Checkpoint};
use crate::ledger::{Kind, Record};
use std::path::{Path, PathBuf};

/// What every rule sees: plain data, and the one side effect (the injected hash check).
pub struct Facts<'a> {
    pub records: &'a [Record],
    pub run: &'a str,
    /// The directory being pruned (absolute, as ledger paths are).
    pub dir: &'a Path,
    /// The run's published checkpoints directly inside `dir`, in publish order.
    pub here: Vec<Checkpoint>,
    pub guard: &'a Guard,
    /// Re-hashes a checkpoint (for the last good one).
    pub verifies: &'a mut dyn FnMut(&Checkpoint) -> Result<(), String>,
}

/// One keep-rule: the paths it keeps and why (one line each).
pub type Rule = fn(&mut Facts) -> Vec<Protected>;

/// Every keep-rule, in the order their reasons are listed. Never removed, whatever the policy.
pub const RULES: &[Rule] = &[
    latest,
    last_good,
    before_standing_fails,
    vouched_by_the_critic,
    best_eval_while_overfitting,
    quarantined,
    bucket_copy_not_verified,
    newest_complete_step,
];

fn kept(path: &Path, why: impl Into<String>) -> Protected {
    Protected {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// The checkpoint at (or nearest before) the best eval that a standing overfitting verdict
/// names (`checkpoints::best::standing`): where the run was best, kept while the verdict stands.
pub fn best_eval_while_overfitting(f: &mut Facts) -> Vec<Protected> {
    let Some(s) = crate::checkpoints::best::standing(f.records, f.run) else {
        return Vec::new();
    };
    let Some(c) = s.mark.checkpoint.as_ref() else {
        return Vec::new();
    };
    let path = PathBuf::from(&c.path);
    if path.parent() != Some(f.dir) {
        return Vec::new();
    }
    vec![kept(
        &path,
        format!(
            "the checkpoint {} the best eval (step {}, loss {}) named by a standing overfitting verdict (#{})",
            if c.relation == "at" { "at" } else { "nearest before" },
            s.mark.step,
            s.mark.eval_loss,
            s.seq
        ),
    )]
}

/// What the directory's latest.json points to.
pub fn latest(f: &mut Facts) -> Vec<Protected> {
    f.guard
        .latest
        .iter()
        .map(|p| kept(p, "latest.json points to it"))
        .collect()
}

/// The last good checkpoint of the directory (`checkpoints::last_good_in`).
pub fn last_good(f: &mut Facts) -> Vec<Protected> {
    checkpoints::last_good_in(f.records, f.run, Some(f.dir), None, f.verifies)
        .chosen
        .map(|c| kept(&c.path, "the last good checkpoint"))
        .into_iter()
        .collect()
}

/// For every standing critic fail, the newest checkpoint before its onset (and before onset −
/// `rollback_margin`, where a rollback resumes), so a run that keeps publishing diverged
/// weights cannot push the way back out.
pub fn before_standing_fails(f: &mut Facts) -> Vec<Protected> {
    let mut out = Vec::new();
    let here = &f.here;
    for fail in checkpoints::fails(f.records, f.run)
        .into_iter()
        .filter(|x| x.standing())
    {
        let newest_before = |limit: u64| {
            here.iter()
                .filter(|c| c.step.is_some_and(|s| s < limit))
                .max_by_key(|c| (c.step, c.seq))
        };
        match fail.onset {
            Some(onset) => {
                let mut limits = vec![onset];
                if f.guard.rollback_margin > 0 {
                    limits.push(onset.saturating_sub(f.guard.rollback_margin));
                }
                for limit in limits {
                    if let Some(c) = newest_before(limit) {
                        out.push(kept(
                            &c.path,
                            format!(
                                "the newest checkpoint before step {limit}, where a standing critic fail (verdict #{}) says the run diverged{}",
                                fail.seq,
                                if limit < onset { format!(" at {onset}, less the rollback margin") } else { String::new() }
                            ),
                        ));
                    }
                }
            }
            // A fail with no step: the newest checkpoint published before it.
            None => {
                if let Some(c) = here
                    .iter()
                    .filter(|c| c.seq < fail.seq)
                    .max_by_key(|c| c.seq)
                {
                    out.push(kept(
                        &c.path,
                        format!(
                            "the newest checkpoint published before a standing critic fail (verdict #{})",
                            fail.seq
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// While a critic judges the run, the newest checkpoint it vouched for (see [`vouched`]), so
/// the way back is still there when its fail arrives late.
pub fn vouched_by_the_critic(f: &mut Facts) -> Vec<Protected> {
    let Some(v) = vouched(f.records, f.run) else {
        return Vec::new();
    };
    let quarantine = checkpoints::quarantined(f.records);
    let fails = checkpoints::fails(f.records, f.run);
    // One a rollback could resume from: not quarantined, not tainted by a fail.
    let usable = |c: &&Checkpoint| {
        !quarantine.contains(&c.path) && fails.iter().all(|x| x.taints(c).is_none())
    };
    let chosen = match v.before {
        Some(limit) => f
            .here
            .iter()
            .filter(|c| c.step.is_some_and(|s| s < limit))
            .filter(usable)
            .max_by_key(|c| (c.step, c.seq)),
        None => f
            .here
            .iter()
            .filter(|c| c.seq < v.seq)
            .filter(usable)
            .max_by_key(|c| c.seq),
    };
    chosen.map(|c| kept(&c.path, v.why())).into_iter().collect()
}

/// Anything quarantined.
pub fn quarantined(f: &mut Facts) -> Vec<Protected> {
    let mut q: Vec<PathBuf> = checkpoints::quarantined(f.records).into_iter().collect();
    q.sort();
    q.iter().map(|p| kept(p, "quarantined")).collect()
}

/// With a bucket configured, every checkpoint whose bucket copy is not verified (same path and
/// bytes): docs/remote.md's "a local checkpoint is never pruned before its bucket copy is
/// verified".
pub fn bucket_copy_not_verified(f: &mut Facts) -> Vec<Protected> {
    let Some(url) = &f.guard.bucket else {
        return Vec::new();
    };
    let copies = checkpoints::bucket::verified(f.records, f.run);
    f.here
        .iter()
        .filter(|c| checkpoints::bucket::copy_of(&copies, c).is_none())
        .map(|c| {
            kept(
                &c.path,
                format!(
                    "its copy in {url} is not verified yet (a local checkpoint is pruned only after its bucket copy is)"
                ),
            )
        })
        .collect()
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

/// `[cluster] parts = "every-node"`: the newest checkpoint here whose step every other node's
/// record lists (the step the job can resume from); while those records cannot be read,
/// every one (which is complete cannot be told).
pub fn newest_complete_step(f: &mut Facts) -> Vec<Protected> {
    match &f.guard.complete {
        None => Vec::new(),
        Some(Err(e)) => f
            .here
            .iter()
            .map(|c| {
                kept(
                    &c.path,
                    format!("[cluster] parts: {e}; which step is complete on every node cannot be told"),
                )
            })
            .collect(),
        Some(Ok(others)) => f
            .here
            .iter()
            .rev()
            .find(|c| crate::checkpoints::complete::missing(c.step, others).is_none())
            .map(|c| {
                kept(
                    &c.path,
                    format!(
                        "the newest step every node's part of is verified (step {}; [cluster] parts), the job's resume point",
                        c.step.map_or("?".into(), |s| s.to_string())
                    ),
                )
            })
            .into_iter()
            .collect(),
    }
}
