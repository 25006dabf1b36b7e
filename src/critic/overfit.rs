//! Overfitting as a verdict (the `eval` check from rules 3): the eval loss above its best by
//! more than a margin taken from the run's own eval noise, eval after eval, while the train
//! loss keeps falling. The first such eval warns, `[critic] eval_window` of them in a row
//! fail; each names the best eval and the published checkpoint nearest it (at or before it),
//! which the verdict record marks as `best` ([`Mark`]) for retention, `fetch --best`, watch's
//! `{best_ckpt}`, status and report ([`standing`]). Pure: the checkpoint is looked up by the
//! caller ([`nearest`]) and archived in the observation, so replay gives the same answer.

use super::{fmt, num, CheckResult, EvalPoint, Observation, Status, Unjudged};
use crate::checkpoints::Checkpoint;
use crate::ledger::Record;
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

pub use crate::checkpoints::best::{standing, standing_refs, Mark, MarkedCheckpoint, Standing};

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
        "rule": "eval loss not above its best + margin while train loss falls (and the eval score, where logged, falls below its value at the best)"});
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
    // The run's eval score (accuracy, mAP) at the best eval loss and now: not worse means
    // the model still generalises as well or better; the loss rises as it grows confident
    // (label smoothing, mixup, a cooldown sharpening the logits), which is not overfitting.
    let score = match (best.score, newest.score) {
        (Some(a), Some(z)) if a.0.is_finite() && z.0.is_finite() => Some((a.0, z.0)),
        _ => None,
    };
    if let Some((a, z)) = score {
        observed["eval_score_at_best"] = json!(num(a));
        observed["eval_score_newest"] = json!(num(z));
        if z >= a {
            return Some(
                CheckResult::new(
                    "eval",
                    Status::Pass,
                    format!(
                        "{trend}, but the eval score rose {} → {} since then: the model grows confident, it does not generalise worse (not overfitting)",
                        fmt(a),
                        fmt(z)
                    ),
                )
                .observed(observed)
                .expected(expected),
            );
        }
    }
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

pub use crate::config::critic::{
    DEFAULT_EVAL_MARGIN as DEFAULT_MARGIN, DEFAULT_EVAL_NOISE as DEFAULT_NOISE,
};

/// The overfitting mark of a judged eval check (warn or fail, train loss falling).
pub fn mark_of(check: &CheckResult) -> Option<Mark> {
    if check.check != "eval" || !matches!(check.status, Status::Warn | Status::Fail) {
        return None;
    }
    serde_json::from_value(check.observed.get("overfitting")?.clone()).ok()
}

#[cfg(test)]
#[path = "overfit_tests.rs"]
mod tests;
