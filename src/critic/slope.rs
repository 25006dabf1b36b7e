//! `loss_slope`: the Theil–Sen slope of the loss over the window, per 1000 steps, against
//! the phase's bounds. Per-step loss is noisy, so a bound is crossed only when the slope's
//! whole confidence interval (Sen 1968, at `[critic] loss_slope_confidence`) is past it, over
//! a window spanning at least `loss_slope_min_span` steps. Rules 0 (records from before
//! issue 18) judged the point estimate alone; [`legacy`] keeps that for replay.

use super::loss::nonfinite_newest;
use super::stats::{normal_quantile, theil_sen, theil_sen_interval};
use super::{fmt, num, CheckResult, Observation, Status, Unjudged};
use crate::metrics::LOSS;
use serde_json::json;

/// `loss_slope_confidence` when the observation has none.
pub const CONFIDENCE: f64 = 0.95;
/// `loss_slope_min_span` when the observation has none.
pub const MIN_SPAN: u64 = 100;

pub fn loss_slope(obs: &Observation) -> Option<CheckResult> {
    let phase = obs.phase.as_ref()?;
    let [lo, hi] = phase.loss_slope?;
    if obs.rules == 0 {
        return Some(legacy(obs, lo, hi));
    }
    let expected = json!([lo, hi]);
    if let Some((step, v)) = nonfinite_newest(obs) {
        return Some(
            CheckResult::new(
                "loss_slope",
                Status::Unknown,
                format!("the newest loss is {v} at step {step}: no slope of the finite losses before it vouches for the run"),
            )
            .expected(expected),
        );
    }
    let pts: Vec<(f64, f64)> = obs
        .series(LOSS)
        .into_iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(s, v)| (s as f64, v))
        .collect();
    let need = obs.settings.min_samples.max(3);
    if pts.len() < need {
        return Some(
            CheckResult::unjudged(
                "loss_slope",
                Unjudged::Waiting,
                obs.rules,
                format!(
                    "{} finite loss sample(s) at distinct steps in this phase; a slope needs {need}",
                    pts.len()
                ),
            )
            .observed(json!({"samples": pts.len()}))
            .expected(expected),
        );
    }
    let span = (pts[pts.len() - 1].0 - pts[0].0) as u64;
    let min_span = phase.loss_slope_min_span.unwrap_or(MIN_SPAN);
    if span < min_span {
        // A full window that still spans too few steps will not get better by waiting.
        let full = obs.window.len() >= phase.window;
        let (why, reason) = if full {
            (Unjudged::Skipped, format!("the window's {} loss samples span {span} steps, under loss_slope_min_span = {min_span}: a slope over so few steps is batch noise; raise the phase's window (or lower loss_slope_min_span)", pts.len()))
        } else {
            (Unjudged::Waiting, format!("{} loss samples span {span} steps so far; a slope needs {min_span} (loss_slope_min_span)", pts.len()))
        };
        return Some(
            CheckResult::unjudged("loss_slope", why, obs.rules, reason)
                .observed(json!({"samples": pts.len(), "span_steps": span}))
                .expected(json!({"bounds": [lo, hi], "min_span_steps": min_span})),
        );
    }
    let confidence = obs.settings.loss_slope_confidence.unwrap_or(CONFIDENCE);
    let z = normal_quantile(1.0 - (1.0 - confidence) / 2.0);
    let ci = theil_sen_interval(&pts, z).expect("span > 0 gives pairs");
    let k = |v: f64| v * 1000.0;
    let (slope, ci_lo, ci_hi) = (k(ci.slope), k(ci.lo), k(ci.hi));
    let observed = json!({"per_1k_steps": num(slope), "interval": [num(ci_lo), num(ci_hi)],
        "confidence": confidence, "samples": ci.points, "span_steps": span});
    let pct = fmt(confidence * 100.0);
    let (status, why) = if ci_lo > hi {
        (Status::Warn, "loss is creeping up".to_string())
    } else if ci_hi < lo {
        (Status::Warn, "loss falls faster than declared".to_string())
    } else if slope > hi || slope < lo {
        (
            Status::Pass,
            format!("within bounds: the estimate is past a bound but its {pct}% interval is not (noise, not a trend)"),
        )
    } else {
        (Status::Pass, "within bounds".to_string())
    };
    Some(
        CheckResult::new(
            "loss_slope",
            status,
            format!(
                "loss slope {} per 1k steps ({pct}% interval {}..{}) over the last {} samples spanning {span} steps, allowed [{}, {}]: {why}",
                fmt(slope),
                fmt(ci_lo),
                fmt(ci_hi),
                ci.points,
                fmt(lo),
                fmt(hi)
            ),
        )
        .observed(observed)
        .expected(expected),
    )
}

/// Rules 0: the point estimate against the bounds.
fn legacy(obs: &Observation, lo: f64, hi: f64) -> CheckResult {
    let pts: Vec<(f64, f64)> = obs
        .series(LOSS)
        .into_iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(s, v)| (s as f64, v))
        .collect();
    let need = obs.settings.min_samples.max(3);
    let expected = json!([lo, hi]);
    let slope = if pts.len() >= need {
        theil_sen(&pts)
    } else {
        None
    };
    let Some(slope) = slope.map(|s| s * 1000.0) else {
        return CheckResult::new(
            "loss_slope",
            Status::Unknown,
            format!(
                "{} finite loss sample(s) at distinct steps in this phase; a slope needs {need}",
                pts.len()
            ),
        )
        .observed(json!({"samples": pts.len()}))
        .expected(expected);
    };
    let observed = json!({"per_1k_steps": num(slope), "samples": pts.len()});
    let (status, why) = if slope > hi {
        (Status::Warn, "loss is creeping up")
    } else if slope < lo {
        (Status::Warn, "loss falls faster than declared")
    } else {
        (Status::Pass, "within bounds")
    };
    CheckResult::new(
        "loss_slope",
        status,
        format!(
            "loss slope {} per 1k steps over the last {} samples, allowed [{}, {}]: {why}",
            fmt(slope),
            pts.len(),
            fmt(lo),
            fmt(hi)
        ),
    )
    .observed(observed)
    .expected(expected)
}

#[cfg(test)]
mod tests {
    use super::super::checks::tests::obs_with;
    use super::super::loss::tests::{losses, noise};
    use super::*;

    #[test]
    fn slope_all_equal_is_zero_and_rising_warns() {
        let flat = loss_slope(&losses(&[3.0; 20])).unwrap();
        assert_eq!(flat.status, Status::Pass, "{}", flat.reason);
        assert_eq!(flat.observed["per_1k_steps"], 0.0);
        // +0.01 per 10 steps = +1 per 1k steps, over the 0.05 bound.
        let rising: Vec<f64> = (0..20).map(|i| 3.0 + 0.01 * i as f64).collect();
        let r = loss_slope(&losses(&rising)).unwrap();
        assert_eq!(r.status, Status::Warn, "{}", r.reason);
        assert!(r.reason.contains("creeping up"), "{}", r.reason);
    }

    #[test]
    fn too_few_samples_or_steps_wait_and_a_full_short_window_is_skipped() {
        let r = loss_slope(&losses(&[3.0])).unwrap();
        assert_eq!(
            (r.status, r.unjudged),
            (Status::Unknown, Some(Unjudged::Waiting))
        );
        // 10 samples over 90 steps: waiting for the 100-step span.
        let r = loss_slope(&losses(&[3.0; 10])).unwrap();
        assert_eq!(r.unjudged, Some(Unjudged::Waiting), "{}", r.reason);
        assert!(r.reason.contains("span 90 steps so far"), "{}", r.reason);
        // A full window of per-step samples spans 49 steps: it never will.
        let o = obs_with((0..50).map(|i| (1000 + i, vec![("loss", 3.0)])).collect());
        let r = loss_slope(&o).unwrap();
        assert_eq!(r.unjudged, Some(Unjudged::Skipped), "{}", r.reason);
        assert!(
            r.reason.contains("raise the phase's window"),
            "{}",
            r.reason
        );
    }

    /// Records from before issue 18 (rules 0) are judged on the point estimate, as then.
    #[test]
    fn rules_0_judges_the_point_estimate() {
        let rising: Vec<f64> = (0..10).map(|i| 3.0 + 0.01 * i as f64).collect();
        let mut o = losses(&rising);
        o.rules = 0;
        let r = loss_slope(&o).unwrap();
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.reason,
            "loss slope 1 per 1k steps over the last 10 samples, allowed [-2, 0.05]: loss is creeping up"
        );
    }

    /// Issue 18 item 2: a healthy, falling per-step loss with batch noise (sd 0.12, one bad
    /// batch in 50 at +0.6) judged at every 10th step as a daemon would: the point estimate
    /// of the slope over 50 samples swings far past 0.05 per 1k steps, the interval does not
    /// clear it. (Before: 143 and 151 false alarms in 296 reads logging every step, 1 in 26
    /// logging every 10.)
    #[test]
    fn healthy_noisy_loss_never_warns_on_its_slope() {
        for (every, seed) in [(1u64, 1u64), (1, 2), (10, 3), (10, 4)] {
            let mut n = noise(seed, 0.12);
            let curve: Vec<(u64, f64)> = (0..3000 / every)
                .map(|i| {
                    let s = 100 + i * every;
                    let bad = if i % 50 == 17 { 0.6 } else { 0.0 };
                    (s, 2.0 + 1.5 * (-(s as f64) / 800.0).exp() + n() + bad)
                })
                .collect();
            // Per-step logging needs a wider window to span loss_slope_min_span steps.
            let window = if every == 1 { 200 } else { 50 };
            let mut warned = Vec::new();
            for end in (window..=curve.len()).step_by(10) {
                let mut o = obs_with(
                    curve[end - window..end]
                        .iter()
                        .map(|&(s, v)| (s, vec![("loss", v)]))
                        .collect(),
                );
                o.phase.as_mut().unwrap().window = window;
                let r = loss_slope(&o).unwrap();
                assert_eq!(r.unjudged, None, "{}", r.reason);
                if r.status == Status::Warn {
                    warned.push(r.reason);
                }
            }
            assert!(
                warned.is_empty(),
                "logging every {every} step(s), seed {seed}: {} false alarm(s), first: {}",
                warned.len(),
                warned[0]
            );
        }
    }

    /// ... while a real creep (+0.5 per 1k steps, same noise, logged every 10 steps) warns,
    /// and the observation carries the slope, its interval, n and the span.
    #[test]
    fn a_real_creep_warns_with_its_interval() {
        let mut n = noise(7, 0.12);
        let o = obs_with(
            (0..50)
                .map(|i| {
                    let s = 1000 + 10 * i;
                    (s, vec![("loss", 2.5 + 0.0005 * s as f64 + n())])
                })
                .collect(),
        );
        let r = loss_slope(&o).unwrap();
        assert_eq!(r.status, Status::Warn, "{}", r.reason);
        assert!(r.reason.contains("creeping up"), "{}", r.reason);
        let ci = &r.observed["interval"];
        let (lo, hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
        assert!(0.05 < lo && lo < 0.5 && 0.5 < hi, "{}", r.observed);
        assert_eq!(r.observed["samples"], 50);
        assert_eq!(r.observed["span_steps"], 490);
        assert_eq!(r.observed["confidence"], 0.95);
    }
}
