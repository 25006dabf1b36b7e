//! The other checks: lr against the schedule (in `lr.rs`), grad norm (ceiling, spike, persistent NaN),
//! eval trend (overfitting), tokens/s floor and VRAM ceiling. Pure functions of an
//! [`Observation`]; `None` means the check is not declared (no schedule, no threshold).

use super::stats::{ls_slope, median};
use super::{fmt, num, CheckResult, Observation, Status, Unjudged};
use crate::metrics::{GRAD_NORM, TOKENS_PER_S, VRAM_GIB};
use serde_json::json;

pub use super::lr::lr;

/// Grad norm: ceiling on the recent median, spike of the newest over the window median, and
/// NaN/Inf only when it persists (fp16 loss scaling skips steps with an inf grad norm).
pub fn grad_norm(obs: &Observation) -> Option<CheckResult> {
    let p = obs.phase.as_ref()?;
    if p.grad_norm_max.is_none() && p.grad_norm_spike.is_none() {
        return None;
    }
    let expected = json!({"max": p.grad_norm_max, "spike_factor": p.grad_norm_spike,
        "nonfinite_consecutive": obs.settings.grad_nonfinite_consecutive});
    let series = obs.series(GRAD_NORM);
    if series.is_empty() {
        return Some(
            CheckResult::new(
                "grad_norm",
                Status::Unknown,
                "no grad norm in the window: is [metrics] grad_norm the right key?",
            )
            .expected(expected),
        );
    }
    let k = obs.settings.grad_nonfinite_consecutive.max(1);
    let run = series.iter().rev().take_while(|p| !p.1.is_finite()).count();
    let isolated = series.iter().filter(|p| !p.1.is_finite()).count() - run;
    let finite: Vec<(u64, f64)> = series.iter().copied().filter(|p| p.1.is_finite()).collect();
    if run >= k {
        let since = series[series.len() - run].0;
        return Some(
            CheckResult::new(
                "grad_norm",
                Status::Warn,
                format!("grad norm non-finite for {run} samples in a row since step {since} ({k} allowed: more than fp16 skipped steps)"),
            )
            .observed(json!({"nonfinite_run": run, "since": since}))
            .expected(expected),
        );
    }
    let note = match (run, isolated) {
        (0, 0) => String::new(),
        (r, i) => format!(
            " ({} isolated non-finite value(s) ignored: fp16 skipped steps)",
            r + i
        ),
    };
    let Some(&(last_step, last)) = finite.last() else {
        return Some(
            CheckResult::unjudged(
                "grad_norm",
                Unjudged::Waiting,
                obs.rules,
                format!("no finite grad norm in the window yet{note}"),
            )
            .expected(expected),
        );
    };
    let bs = obs.settings.band_samples.max(1);
    let recent = median(finite.iter().rev().take(bs).map(|p| p.1)).expect("non-empty");
    let base = median(finite[..finite.len() - 1].iter().map(|p| p.1));
    let observed = json!({"step": last_step, "grad_norm": num(last), "recent_median": num(recent),
        "window_median": base.map(num)});
    let mut r = CheckResult::new(
        "grad_norm",
        Status::Pass,
        format!(
            "grad norm {} (recent median {}) is within limits{note}",
            fmt(last),
            fmt(recent)
        ),
    );
    if let Some(max) = p.grad_norm_max.filter(|m| recent > *m) {
        r = CheckResult::new(
            "grad_norm",
            Status::Warn,
            format!(
                "grad norm median {} over the last {bs} samples is above the ceiling {}{note}",
                fmt(recent),
                fmt(max)
            ),
        );
    } else if let (Some(f), Some(b)) = (p.grad_norm_spike, base) {
        if finite.len() >= obs.settings.min_samples.max(3) && last > f * b {
            r = CheckResult::new(
                "grad_norm",
                Status::Warn,
                format!("grad norm spiked to {} at step {last_step}, over {}× the window median {}{note}", fmt(last), fmt(f), fmt(b)),
            );
        }
    }
    Some(r.observed(observed).expected(expected))
}

/// The eval check: from rules 3 overfitting as a verdict ([`super::overfit::eval`]); before,
/// the eval loss over the last `eval_window` evals rising while train loss falls warned,
/// skipped until that many evals existed (kept so replay judges old records by their rules).
pub fn eval(obs: &Observation) -> Option<CheckResult> {
    if obs.rules >= 3 {
        return super::overfit::eval(obs);
    }
    let n = obs.settings.eval_window.max(2);
    if obs.evals.len() < n {
        // Evals are logged but too few yet: say so (rules 2), instead of "not declared".
        if obs.rules >= 2 && !obs.evals.is_empty() {
            return Some(CheckResult::unjudged(
                "eval",
                Unjudged::Waiting,
                obs.rules,
                format!(
                    "{} eval(s) < eval_window {n}: the overfitting trend needs {n}",
                    obs.evals.len()
                ),
            ));
        }
        return None;
    }
    let evals = &obs.evals[obs.evals.len() - n..];
    let first = &evals[0];
    let last = &evals[n - 1];
    let observed = json!({"steps": evals.iter().map(|e| e.step).collect::<Vec<_>>(),
        "eval_loss": evals.iter().map(|e| e.eval_loss).collect::<Vec<_>>(),
        "train_loss": evals.iter().map(|e| e.train_loss).collect::<Vec<_>>()});
    let expected = json!("eval loss not rising while train loss falls");
    if let Some(bad) = evals.iter().find(|e| !e.eval_loss.0.is_finite()) {
        return Some(
            CheckResult::new(
                "eval",
                Status::Fail,
                format!("eval loss is {} at step {}", bad.eval_loss.0, bad.step),
            )
            .observed(observed)
            .expected(json!("finite")),
        );
    }
    let pts: Vec<(f64, f64)> = evals
        .iter()
        .map(|e| (e.step as f64, e.eval_loss.0))
        .collect();
    let rising = last.eval_loss.0 > first.eval_loss.0 && ls_slope(&pts).is_some_and(|s| s > 0.0);
    let train = match (first.train_loss, last.train_loss) {
        (Some(a), Some(b)) if a.0.is_finite() && b.0.is_finite() => Some((a.0, b.0)),
        _ => None,
    };
    let eval_trend = format!(
        "eval loss {} → {} over the last {n} evals (steps {}..{})",
        fmt(first.eval_loss.0),
        fmt(last.eval_loss.0),
        first.step,
        last.step
    );
    let r = match (rising, train) {
        (true, Some((a, b))) if b < a => CheckResult::new(
            "eval",
            Status::Warn,
            format!(
                "overfitting: {eval_trend} while train loss fell {} → {}",
                fmt(a),
                fmt(b)
            ),
        ),
        (true, _) => CheckResult::new("eval", Status::Warn, format!("{eval_trend}: rising")),
        (false, _) => CheckResult::new("eval", Status::Pass, format!("{eval_trend}: not rising")),
    };
    Some(r.observed(observed).expected(expected))
}

/// Median tokens/s over the window against the phase's floor.
pub fn tokens_per_s(obs: &Observation) -> Option<CheckResult> {
    let floor = obs.phase.as_ref()?.tokens_per_s_min?;
    let series = obs.series(TOKENS_PER_S);
    let expected = json!({"min": floor});
    let Some(m) = median(series.iter().map(|p| p.1)) else {
        return Some(
            CheckResult::new(
                "tokens_per_s",
                Status::Unknown,
                "no tokens/s in the window: is [metrics] tokens_per_s the right key?",
            )
            .expected(expected),
        );
    };
    let observed = json!({"median": num(m), "samples": series.len()});
    let r = if m < floor {
        CheckResult::new(
            "tokens_per_s",
            Status::Warn,
            format!("tokens/s median {} over {} samples is below the floor {} (a dataloader down to one worker? a throttled GPU?)", fmt(m), series.len(), fmt(floor)),
        )
    } else {
        CheckResult::new(
            "tokens_per_s",
            Status::Pass,
            format!(
                "tokens/s median {} over {} samples is above the floor {}",
                fmt(m),
                series.len(),
                fmt(floor)
            ),
        )
    };
    Some(r.observed(observed).expected(expected))
}

/// VRAM: the newest logged value, else the GPU reading, against the phase's ceiling.
pub fn vram(obs: &Observation) -> Option<CheckResult> {
    let max = obs.phase.as_ref()?.vram_max_gib?;
    let expected = json!({"max_gib": max});
    let logged = obs
        .series(VRAM_GIB)
        .into_iter()
        .rev()
        .find(|p| p.1.is_finite());
    let (used, source) = match (logged, &obs.gpu_vram) {
        (Some((step, v)), _) => (v, format!("logged at step {step}")),
        (None, Some(g)) => match g.used_gib {
            Some(v) => (v.0, format!("read from the GPU: {}", g.scope)),
            None => {
                let why = g.error.clone().unwrap_or_else(|| "no reading".into());
                return Some(
                    CheckResult::new(
                        "vram",
                        Status::Unknown,
                        format!("no VRAM in the log and none from the GPU ({why})"),
                    )
                    .expected(expected),
                );
            }
        },
        (None, None) => {
            return Some(
                CheckResult::new(
                    "vram",
                    Status::Unknown,
                    "no VRAM in the log and no GPU reading",
                )
                .expected(expected),
            )
        }
    };
    let observed = json!({"gib": num(used), "source": source});
    let r = if used > max {
        CheckResult::new(
            "vram",
            Status::Warn,
            format!(
                "VRAM {} GiB ({source}) is above the ceiling {} GiB: heading for OOM",
                fmt(used),
                fmt(max)
            ),
        )
    } else {
        CheckResult::new(
            "vram",
            Status::Pass,
            format!(
                "VRAM {} GiB ({source}) is under the ceiling {} GiB",
                fmt(used),
                fmt(max)
            ),
        )
    };
    Some(r.observed(observed).expected(expected))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::{EvalPoint, GpuVram, Num};
    use super::*;

    pub(crate) use super::super::fixture::obs_with;

    fn one(metric: &str, vals: &[f64]) -> Observation {
        obs_with(
            vals.iter()
                .enumerate()
                .map(|(i, v)| (100 + 10 * i as u64, vec![(metric, *v)]))
                .collect(),
        )
    }

    #[test]
    fn grad_norm_nan_must_persist() {
        let isolated =
            grad_norm(&one("grad_norm", &[1.0, 1.0, f64::NAN, 1.0, f64::INFINITY])).unwrap();
        assert_eq!(isolated.status, Status::Pass, "{}", isolated.reason);
        assert!(isolated.reason.contains("2 isolated"));
        let persistent =
            grad_norm(&one("grad_norm", &[1.0, f64::NAN, f64::NAN, f64::NAN])).unwrap();
        assert_eq!(persistent.status, Status::Warn);
        let ceiling = grad_norm(&one("grad_norm", &[3.0, 3.0, 3.0])).unwrap();
        assert!(ceiling.reason.contains("ceiling"), "{}", ceiling.reason);
        let spike = grad_norm(&one("grad_norm", &[0.2, 0.2, 0.2, 0.2, 0.2, 1.5])).unwrap();
        assert_eq!(spike.status, Status::Warn);
        assert!(spike.reason.contains("spiked"), "{}", spike.reason);
    }

    #[test]
    fn eval_overfitting_needs_both_trends() {
        // The trend rule of rules 2 (rules 3: `overfit.rs`), kept for replay.
        let mut o = obs_with(vec![]);
        o.rules = 2;
        let ev = |step, e: f64, t: f64| EvalPoint {
            step,
            eval_loss: Num(e),
            train_loss: Some(Num(t)),
            score: None,
        };
        o.evals = vec![ev(1000, 0.32, 0.05), ev(2000, 0.36, 0.01)];
        // Two evals are not a 3-eval trend: waiting, and saying why (rules 2).
        let waiting = eval(&o).unwrap();
        assert_eq!(waiting.status, Status::Unknown);
        assert_eq!(waiting.unjudged, Some(Unjudged::Waiting));
        assert!(
            waiting.reason.contains("2 eval(s) < eval_window 3"),
            "{}",
            waiting.reason
        );
        o.rules = 1;
        assert!(eval(&o).is_none(), "rules 1 replays the old answer");
        o.rules = 2;
        o.evals.push(ev(3000, 0.39, 0.002));
        let r = eval(&o).unwrap();
        assert_eq!(r.status, Status::Warn);
        assert!(r.reason.starts_with("overfitting"), "{}", r.reason);
        o.evals[2].eval_loss = Num(0.30);
        assert_eq!(eval(&o).unwrap().status, Status::Pass);
        o.evals[2].eval_loss = Num(f64::NAN);
        assert_eq!(eval(&o).unwrap().status, Status::Fail);
    }

    #[test]
    fn tokens_and_vram() {
        assert_eq!(
            tokens_per_s(&one("tokens_per_s", &[50e3, 20e3, 45e3]))
                .unwrap()
                .status,
            Status::Pass
        );
        assert_eq!(
            tokens_per_s(&one("tokens_per_s", &[50e3, 20e3, 21e3]))
                .unwrap()
                .status,
            Status::Warn
        );
        assert_eq!(
            vram(&one("vram_gib", &[71.0])).unwrap().status,
            Status::Warn
        );
        let mut o = one("loss", &[3.0]);
        assert_eq!(vram(&o).unwrap().status, Status::Unknown);
        o.gpu_vram = Some(GpuVram {
            used_gib: Some(Num(40.0)),
            scope: "total memory used".into(),
            error: None,
        });
        let r = vram(&o).unwrap();
        assert_eq!(r.status, Status::Pass);
        assert!(r.reason.contains("total memory used"), "{}", r.reason);
    }
}
