//! Overfitting as a verdict (the `eval` check from rules 3): the eval loss above its best by
//! more than a margin taken from the run's own eval noise, eval after eval, while the train
//! loss keeps falling. The first such eval warns, `[critic] eval_window` of them in a row
//! fail; each names the best eval and the published checkpoint nearest it (at or before it),
//! which the verdict record marks as `best` ([`Mark`]) for retention, `fetch --best`, watch's
//! `{best_ckpt}`, status and report ([`standing`]). Pure: the checkpoint is looked up by the
//! caller ([`nearest`]) and archived in the observation, so replay gives the same answer.

use super::{fmt, num, CheckResult, EvalPoint, Observation, Status, Unjudged};
use crate::checkpoints::Checkpoint;
use crate::ledger::{Kind, Record};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Evals before the best whose rises make the run's eval noise.
pub const NOISE_EVALS: usize = 10;

/// A published checkpoint at or before the best eval's step (absolute path).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NearBest {
    pub path: String,
    pub step: u64,
}

/// The checkpoint the verdict marks, and whether it is at the best eval's step or before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkedCheckpoint {
    pub path: String,
    pub step: u64,
    /// `"at"` (saved at the best eval's step) or `"before"` (the newest one before it).
    pub relation: String,
}

/// The verdict record's `best` field: where the eval loss was best and how far it has risen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    pub step: u64,
    pub eval_loss: f64,
    pub newest_step: u64,
    pub newest_eval_loss: f64,
    /// newest − best.
    pub rise: f64,
    /// The rise as a fraction of |best|.
    pub rise_frac: f64,
    /// Evals in a row, newest last, above best + margin.
    pub evals_above: usize,
    pub margin: f64,
    /// `None`: no published checkpoint at or before the best step.
    pub checkpoint: Option<MarkedCheckpoint>,
}

impl Mark {
    /// "best eval 0.321 at step 1000, now 0.4200 at step 5000 (+30.8%); checkpoint ... (at it)"
    pub fn describe(&self) -> String {
        format!(
            "best eval loss {} at step {}, now {} at step {} (+{:.1}%, {} eval(s) above best + {}); {}",
            fmt(self.eval_loss),
            self.step,
            fmt(self.newest_eval_loss),
            self.newest_step,
            100.0 * self.rise_frac,
            self.evals_above,
            fmt(self.margin),
            self.checkpoint_words()
        )
    }

    pub fn checkpoint_words(&self) -> String {
        match &self.checkpoint {
            Some(c) if c.relation == "at" => {
                format!("checkpoint {} is at that step", c.path)
            }
            Some(c) => format!(
                "checkpoint {} (step {}) is the newest before it",
                c.path, c.step
            ),
            None => format!("no published checkpoint at or before step {}", self.step),
        }
    }
}

/// Index of the best (lowest, first of equals) finite eval loss.
pub fn best_index(evals: &[EvalPoint]) -> Option<usize> {
    evals
        .iter()
        .enumerate()
        .filter(|(_, e)| e.eval_loss.0.is_finite())
        .min_by(|a, b| a.1.eval_loss.0.total_cmp(&b.1.eval_loss.0))
        .map(|(i, _)| i)
}

/// The step of the best eval, for the caller to look its checkpoint up.
pub fn best_step(evals: &[EvalPoint]) -> Option<u64> {
    best_index(evals).map(|i| evals[i].step)
}

/// The run's own eval noise, relative: the largest rise (as a fraction of the eval before it)
/// that the eval loss made and recovered from over the last [`NOISE_EVALS`] evals up to its
/// best. While the loss still improves every rise is noise; a smooth curve has none (`None`).
pub fn noise(evals: &[EvalPoint], best: usize) -> Option<f64> {
    let from = best.saturating_sub(NOISE_EVALS);
    evals[from..=best]
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (w[0].eval_loss.0, w[1].eval_loss.0);
            (a.is_finite() && b.is_finite() && b > a && a != 0.0).then(|| (b - a) / a.abs())
        })
        .max_by(f64::total_cmp)
}

/// Best + margin is where a rise starts to count: `eval_margin` × |best| at least, else
/// `eval_noise` × the run's own noise × |best|.
pub fn margin(best: f64, noise: Option<f64>, floor: f64, k: f64) -> f64 {
    best.abs() * floor.max(noise.map_or(0.0, |n| k * n))
}

/// The nearest published checkpoint at or before `step` that is not quarantined (newest
/// step; of equals, the newest publish).
pub fn nearest(records: &[Record], run: &str, step: u64) -> Option<NearBest> {
    let quarantined = crate::checkpoints::quarantined(records);
    crate::checkpoints::published(records, run)
        .into_iter()
        .filter(|c| c.step.is_some_and(|s| s <= step) && !quarantined.contains(&c.path))
        .max_by_key(|c: &Checkpoint| (c.step, c.seq))
        .map(|c| NearBest {
            path: c.path.display().to_string(),
            step: c.step.expect("filtered"),
        })
}

/// The eval check under rules 3 (see the module). `None` when the run logs no eval loss.
pub fn eval(obs: &Observation) -> Option<CheckResult> {
    let rule = Rule {
        patience: obs.settings.eval_window.max(1),
        floor: obs.settings.eval_margin.unwrap_or(DEFAULT_MARGIN),
        k: obs.settings.eval_noise.unwrap_or(DEFAULT_NOISE),
        rules: obs.rules,
    };
    judge_evals(&obs.evals, obs.near_best.as_ref(), &rule)
}

/// The knobs of the rule (`[critic] eval_window`, `eval_margin`, `eval_noise`).
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub patience: usize,
    pub floor: f64,
    pub k: f64,
    pub rules: u32,
}

/// [`eval`] over plain evals: what `init` asks of the log it reads.
pub fn judge_evals(
    evals: &[EvalPoint],
    near_best: Option<&NearBest>,
    rule: &Rule,
) -> Option<CheckResult> {
    if evals.is_empty() {
        return None;
    }
    let Rule {
        patience, floor, k, ..
    } = *rule;
    let expected = json!({"evals_above_to_fail": patience, "margin_min": floor, "noise_factor": k,
        "rule": "eval loss not above its best + margin while train loss falls"});
    let newest = evals.last().expect("non-empty");
    if !newest.eval_loss.0.is_finite() {
        return Some(
            CheckResult::new(
                "eval",
                Status::Fail,
                format!(
                    "eval loss is {} at step {}",
                    newest.eval_loss.0, newest.step
                ),
            )
            .observed(json!({"step": newest.step, "eval_loss": newest.eval_loss}))
            .expected(json!("finite")),
        );
    }
    let b = best_index(evals)?;
    if evals.len() < 2 {
        return Some(
            CheckResult::unjudged(
                "eval",
                Unjudged::Waiting,
                rule.rules,
                format!(
                    "1 eval (loss {} at step {}): overfitting shows from the second",
                    fmt(evals[0].eval_loss.0),
                    evals[0].step
                ),
            )
            .expected(expected),
        );
    }
    let best = &evals[b];
    let noise = noise(evals, b);
    let m = margin(best.eval_loss.0, noise, floor, k);
    let line = best.eval_loss.0 + m;
    let above = evals[b + 1..]
        .iter()
        .rev()
        .take_while(|e| e.eval_loss.0 > line)
        .count();
    let noise_words = match noise {
        Some(n) => format!(
            "margin {}: the larger of {}% of the best and {k} × its own noise, {:.1}% of it",
            fmt(m),
            fmt(100.0 * floor),
            100.0 * n
        ),
        None => format!(
            "margin {}: {}% of the best, no rise before it to measure noise by",
            fmt(m),
            fmt(100.0 * floor)
        ),
    };
    let mut observed = json!({"best_step": best.step, "best_eval_loss": best.eval_loss,
        "newest_step": newest.step, "newest_eval_loss": newest.eval_loss, "margin": num(m),
        "noise": noise.map(num), "evals_above": above, "evals": evals.len()});
    if above == 0 {
        let r = if b + 1 == evals.len() {
            format!(
                "eval loss {} at step {} is its best so far ({} evals)",
                fmt(best.eval_loss.0),
                best.step,
                evals.len()
            )
        } else {
            format!(
                "eval loss {} at step {} is within the margin of its best {} at step {} ({noise_words})",
                fmt(newest.eval_loss.0),
                newest.step,
                fmt(best.eval_loss.0),
                best.step
            )
        };
        return Some(
            CheckResult::new("eval", Status::Pass, r)
                .observed(observed)
                .expected(expected),
        );
    }
    let first_above = &evals[evals.len() - above];
    let rise = newest.eval_loss.0 - best.eval_loss.0;
    let rise_frac = rise / best.eval_loss.0.abs().max(f64::MIN_POSITIVE);
    let trend = format!(
        "eval loss {} at step {} is {} (+{:.1}%) above its best {} at step {}, {above} eval(s) in a row above best + margin ({noise_words})",
        fmt(newest.eval_loss.0),
        newest.step,
        fmt(rise),
        100.0 * rise_frac,
        fmt(best.eval_loss.0),
        best.step
    );
    let train = match (best.train_loss, newest.train_loss) {
        (Some(a), Some(z)) if a.0.is_finite() && z.0.is_finite() => Some((a.0, z.0)),
        _ => None,
    };
    observed["train_loss_at_best"] = json!(train.map(|t| num(t.0)));
    observed["train_loss_newest"] = json!(train.map(|t| num(t.1)));
    match train {
        Some((a, z)) if z < a => {
            let checkpoint = near_best
                .filter(|c| c.step <= best.step)
                .map(|c| MarkedCheckpoint {
                    path: c.path.clone(),
                    step: c.step,
                    relation: if c.step == best.step { "at" } else { "before" }.into(),
                });
            let mark = Mark {
                step: best.step,
                eval_loss: best.eval_loss.0,
                newest_step: newest.step,
                newest_eval_loss: newest.eval_loss.0,
                rise,
                rise_frac,
                evals_above: above,
                margin: m,
                checkpoint,
            };
            let status = if above >= patience {
                Status::Fail
            } else {
                Status::Warn
            };
            let reason = format!(
                "overfitting: {trend} while train loss fell {} → {}; {} ({})",
                fmt(a),
                fmt(z),
                mark.checkpoint_words(),
                if status == Status::Fail {
                    format!("{above} ≥ eval_window {patience}: fail")
                } else {
                    format!("eval_window {patience} in a row fail")
                }
            );
            observed["overfitting"] = serde_json::to_value(&mark).expect("a mark serialises");
            Some(
                CheckResult::new("eval", status, reason)
                    .observed(observed)
                    .expected(expected)
                    .began_at(Some(first_above.step)),
            )
        }
        Some((a, z)) => Some(
            CheckResult::new(
                "eval",
                Status::Warn,
                format!(
                    "{trend}, and train loss rose too ({} → {}): divergence, not overfitting (the loss checks judge it)",
                    fmt(a),
                    fmt(z)
                ),
            )
            .observed(observed)
            .expected(expected),
        ),
        None => Some(
            CheckResult::new(
                "eval",
                Status::Warn,
                format!("{trend}; no train loss around the evals to tell overfitting from divergence"),
            )
            .observed(observed)
            .expected(expected),
        ),
    }
}

/// `[critic] eval_margin` default: a rise under 0.5% of the best is never overfitting (a
/// real QLoRA fine-tune's overfitting began +1.4% above its best, its eval noise 0.1%).
pub const DEFAULT_MARGIN: f64 = 0.005;
/// `[critic] eval_noise` default: twice the largest rise the run recovered from before.
pub const DEFAULT_NOISE: f64 = 2.0;

/// The overfitting mark of a judged eval check (warn or fail, train loss falling).
pub fn mark_of(check: &CheckResult) -> Option<Mark> {
    if check.check != "eval" || !matches!(check.status, Status::Warn | Status::Fail) {
        return None;
    }
    serde_json::from_value(check.observed.get("overfitting")?.clone()).ok()
}

/// The mark that stands for `run`: the newest critic verdict whose eval check judged
/// (pass, warn or fail) decides; it stands when that verdict carries a `best`. Returns the
/// verdict's seq and status with the mark.
pub fn standing(records: &[Record], run: &str) -> Option<Standing> {
    standing_of(records.iter(), run)
}

/// [`standing`] over borrowed records (the report's view of one run).
pub fn standing_refs(records: &[&Record], run: &str) -> Option<Standing> {
    standing_of(records.iter().copied(), run)
}

fn standing_of<'a>(
    mut records: impl DoubleEndedIterator<Item = &'a Record>,
    run: &str,
) -> Option<Standing> {
    let judged = |r: &&Record| {
        r.kind == Kind::Verdict
            && r.source == "critic"
            && r.run == run
            && r.get("checks")
                .and_then(|c| c.as_array())
                .into_iter()
                .flatten()
                .any(|c| {
                    c.get("check").and_then(|n| n.as_str()) == Some("eval")
                        && matches!(
                            c.get("status").and_then(|s| s.as_str()),
                            Some("pass" | "warn" | "fail")
                        )
                })
    };
    let v = records.rfind(judged)?;
    let mark: Mark = serde_json::from_value(v.get("best")?.clone()).ok()?;
    Some(Standing {
        seq: v.seq,
        status: v.str_field("status").unwrap_or("?").to_string(),
        mark,
    })
}

/// A standing overfitting mark and the verdict that filed it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Standing {
    pub seq: u64,
    pub status: String,
    #[serde(flatten)]
    pub mark: Mark,
}

#[cfg(test)]
#[path = "overfit_tests.rs"]
mod tests;
