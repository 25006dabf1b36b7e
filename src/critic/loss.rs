//! Loss checks: inside the phase's band (NaN/Inf and an exact 0 fail at once), its robust
//! slope over the window, and a sudden spike over the window's median. Pure functions of an
//! [`Observation`]; `None` means the phase does not declare the check.

use super::onset::{whole, Run};
use super::stats::{median, theil_sen};
use super::{fmt, num, CheckResult, Observation, Status};
use crate::metrics::LOSS;
use serde_json::json;

/// Steps of the trailing run of samples for which `bad` holds; its first step is where the
/// divergence began.
fn trailing_run(series: &[(u64, f64)], bad: impl Fn(f64) -> bool) -> (usize, Option<u64>) {
    let n = series.iter().rev().take_while(|(_, v)| bad(*v)).count();
    let first = (n > 0).then(|| series[series.len() - n].0);
    (n, first)
}

/// [`trailing_run`] over the whole series: when the run fills the window, the history's
/// record of where it began (archived in the observation) says how far back it goes.
fn onset_run(
    series: &[(u64, f64)],
    bad: impl Fn(f64) -> bool,
    recorded: Option<Run>,
) -> (u64, Option<u64>) {
    let (n, first) = trailing_run(series, bad);
    whole(series.len(), n, first, recorded)
}

/// Band, NaN/Inf and collapse to 0. Runs even outside a phase (NaN needs no threshold).
pub fn loss(obs: &Observation) -> Option<CheckResult> {
    let series = obs.series(LOSS);
    let Some(&(last_step, last)) = series.last() else {
        return Some(CheckResult::new(
            "loss",
            Status::Unknown,
            "no loss in the window: is [metrics] loss the right key?",
        ));
    };
    if !last.is_finite() {
        let (n, first) = onset_run(&series, |v| !v.is_finite(), obs.onsets.nonfinite);
        return Some(
            CheckResult::new(
                "loss",
                Status::Fail,
                format!(
                    "loss is {last} at step {last_step} ({n} sample(s) in a row since step {})",
                    first.unwrap_or(last_step)
                ),
            )
            .observed(json!({"step": last_step, "loss": num(last)}))
            .expected(json!("finite"))
            .diverged_at(first),
        );
    }
    if last == 0.0 {
        let (_, first) = onset_run(&series, |v| v == 0.0, obs.onsets.zero);
        return Some(
            CheckResult::new(
                "loss",
                Status::Fail,
                format!("loss collapsed to exactly 0 at step {last_step}: as suspicious as NaN (a masked or empty batch?)"),
            )
            .observed(json!({"step": last_step, "loss": 0.0}))
            .expected(json!("> 0"))
            .diverged_at(first),
        );
    }
    let band = obs.phase.as_ref().and_then(|p| p.loss);
    let Some([lo, hi]) = band else {
        return Some(
            CheckResult::new(
                "loss",
                Status::Pass,
                format!(
                    "loss {} at step {last_step} is finite (no band declared for this phase)",
                    fmt(last)
                ),
            )
            .observed(json!({"step": last_step, "loss": num(last)})),
        );
    };
    let k = obs.settings.band_samples.max(1);
    let recent: Vec<f64> = series.iter().rev().take(k).map(|p| p.1).collect();
    let m = median(recent.iter().copied()).expect("last is finite");
    let observed = json!({"step": last_step, "median": num(m), "samples": recent.len()});
    let expected = json!([lo, hi]);
    if (lo..=hi).contains(&m) {
        return Some(
            CheckResult::new(
                "loss",
                Status::Pass,
                format!(
                    "loss {} (median of the last {}) is inside [{}, {}]",
                    fmt(m),
                    recent.len(),
                    fmt(lo),
                    fmt(hi)
                ),
            )
            .observed(observed)
            .expected(expected),
        );
    }
    let (_, first) = onset_run(&series, |v| !(lo..=hi).contains(&v), obs.onsets.out_of_band);
    let side = if m > hi { "above" } else { "below" };
    Some(
        CheckResult::new(
            "loss",
            Status::Fail,
            format!(
                "loss {} (median of the last {}) is {side} the band [{}, {}] at step {last_step}",
                fmt(m),
                recent.len(),
                fmt(lo),
                fmt(hi)
            ),
        )
        .observed(observed)
        .expected(expected)
        .diverged_at(first.or(Some(last_step))),
    )
}

/// Theil–Sen slope of the loss over the window, per 1000 steps, against the phase's bounds.
pub fn loss_slope(obs: &Observation) -> Option<CheckResult> {
    let [lo, hi] = obs.phase.as_ref()?.loss_slope?;
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
        return Some(
            CheckResult::new(
                "loss_slope",
                Status::Unknown,
                format!("{} finite loss sample(s) at distinct steps in this phase; a slope needs {need}", pts.len()),
            )
            .observed(json!({"samples": pts.len()}))
            .expected(expected),
        );
    };
    let observed = json!({"per_1k_steps": num(slope), "samples": pts.len()});
    let (status, why) = if slope > hi {
        (Status::Warn, "loss is creeping up")
    } else if slope < lo {
        (Status::Warn, "loss falls faster than declared")
    } else {
        (Status::Pass, "within bounds")
    };
    Some(
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
        .expected(expected),
    )
}

/// The newest losses against `loss_spike` × the median of the window before them. One spiking
/// sample warns (a bad batch); two or more in a row fail and name where it began.
pub fn loss_spike(obs: &Observation) -> Option<CheckResult> {
    let factor = obs.phase.as_ref()?.loss_spike?;
    let series: Vec<(u64, f64)> = obs
        .series(LOSS)
        .into_iter()
        .filter(|(_, v)| v.is_finite())
        .collect();
    let need = obs.settings.min_samples.max(3);
    if series.len() < need {
        return Some(
            CheckResult::new(
                "loss_spike",
                Status::Unknown,
                format!(
                    "{} finite loss sample(s) in this phase; the spike median needs {need}",
                    series.len()
                ),
            )
            .expected(json!({"factor": factor})),
        );
    }
    // Median of everything but the newest sample, then the run above factor × it.
    let base = median(series[..series.len() - 1].iter().map(|p| p.1)).expect("non-empty");
    let limit = factor * base;
    let (n, first) = trailing_run(&series, |v| v > limit);
    // Re-base on what precedes the run, so a long run does not lift its own median.
    let (n, first, base, limit) = if n > 1 && series.len() - n >= 2 {
        let base = median(series[..series.len() - n].iter().map(|p| p.1)).expect("non-empty");
        let limit = factor * base;
        let (n, first) = trailing_run(&series, |v| v > limit);
        (n, first, base, limit)
    } else {
        (n, first, base, limit)
    };
    let (last_step, last) = *series.last().expect("non-empty");
    // A run that began before the window (it fills it, and lifts the window's median with
    // it): the history's record, with the median from before the run.
    let (n, first, base, limit) = match obs.onsets.spike {
        Some(r) if r.since < series[0].0 && last > factor * r.base.0 => (
            r.samples as usize,
            Some(r.since),
            r.base.0,
            factor * r.base.0,
        ),
        _ => (n, first, base, limit),
    };
    let observed = json!({"step": last_step, "loss": num(last), "median": num(base), "run": n});
    let expected = json!({"factor": factor, "max": num(limit)});
    let r = match n {
        0 => CheckResult::new(
            "loss_spike",
            Status::Pass,
            format!("loss {} is under {}× the window median {}", fmt(last), fmt(factor), fmt(base)),
        ),
        1 => CheckResult::new(
            "loss_spike",
            Status::Warn,
            format!("loss spiked to {} at step {last_step}, over {}× the window median {} (one sample so far)", fmt(last), fmt(factor), fmt(base)),
        ),
        _ => CheckResult::new(
            "loss_spike",
            Status::Fail,
            format!(
                "loss has stayed over {}× the window median {} for {n} samples since step {}",
                fmt(factor),
                fmt(base),
                first.unwrap_or(last_step)
            ),
        )
        .diverged_at(first),
    };
    Some(r.observed(observed).expected(expected))
}

#[cfg(test)]
mod tests {
    use super::super::checks::tests::obs_with;
    use super::super::onset::SpikeRun;
    use super::super::Num;
    use super::*;

    fn losses(vals: &[f64]) -> Observation {
        obs_with(
            vals.iter()
                .enumerate()
                .map(|(i, v)| (100 + i as u64 * 10, vec![("loss", *v)]))
                .collect(),
        )
    }

    #[test]
    fn band_uses_a_median_but_nan_and_zero_fail_at_once() {
        let ok = loss(&losses(&[3.0, 3.1, 2.9, 9.0])).unwrap();
        assert_eq!(ok.status, Status::Pass, "{}", ok.reason);
        let nan = loss(&losses(&[3.0, 3.0, f64::NAN, f64::INFINITY])).unwrap();
        assert_eq!((nan.status, nan.diverged_at), (Status::Fail, Some(120)));
        assert_eq!(nan.observed["loss"], "Infinity");
        let zero = loss(&losses(&[3.0, 0.0])).unwrap();
        assert_eq!(zero.status, Status::Fail);
        assert!(zero.reason.contains("exactly 0"));
        let high = loss(&losses(&[3.0, 3.0, 7.0, 7.5, 8.0])).unwrap();
        assert_eq!((high.status, high.diverged_at), (Status::Fail, Some(120)));
        assert!(high.reason.contains("above the band"), "{}", high.reason);
    }

    #[test]
    fn a_run_filling_the_window_is_dated_by_the_recorded_onset() {
        let mut o = losses(&[f64::NAN; 10]);
        // Window alone: 100..190, so "since 100"; the history saw it begin at 40, 25 ago.
        assert_eq!(loss(&o).unwrap().diverged_at, Some(100));
        o.onsets.nonfinite = Some(Run {
            since: 40,
            samples: 25,
        });
        let r = loss(&o).unwrap();
        assert_eq!(r.diverged_at, Some(40));
        assert!(
            r.reason.contains("25 sample(s) in a row since step 40"),
            "{}",
            r.reason
        );
        // Not filling the window: the window's own start is exact.
        let mut o = losses(&[3.0, 3.0, f64::NAN, f64::NAN]);
        o.onsets.nonfinite = Some(Run {
            since: 120,
            samples: 2,
        });
        assert_eq!(loss(&o).unwrap().diverged_at, Some(120));
        let mut o = losses(&[7.0; 6]);
        o.onsets.out_of_band = Some(Run {
            since: 30,
            samples: 13,
        });
        assert_eq!(loss(&o).unwrap().diverged_at, Some(30));
        let mut o = losses(&[0.0; 3]);
        o.onsets.zero = Some(Run {
            since: 90,
            samples: 4,
        });
        assert_eq!(loss(&o).unwrap().diverged_at, Some(90));
    }

    /// A spike that lasts longer than the window must not fade into a pass (which would clear
    /// the fail and make the diverged checkpoints good again).
    #[test]
    fn a_spike_longer_than_the_window_still_fails_from_its_onset() {
        let mut o = losses(&[6.0; 10]);
        o.onsets.spike = Some(SpikeRun {
            since: 40,
            samples: 16,
            base: Num(3.0),
        });
        let r = loss_spike(&o).unwrap();
        assert_eq!(
            (r.status, r.diverged_at),
            (Status::Fail, Some(40)),
            "{}",
            r.reason
        );
        assert!(
            r.reason.contains("for 16 samples since step 40"),
            "{}",
            r.reason
        );
        // The spike ended: the window decides again.
        let mut o = losses(&[6.0, 6.0, 6.0, 3.0]);
        o.onsets.spike = None;
        assert_ne!(loss_spike(&o).unwrap().status, Status::Fail);
    }

    #[test]
    fn single_point_and_empty_window() {
        assert_eq!(loss(&losses(&[3.0])).unwrap().status, Status::Pass);
        assert_eq!(loss(&losses(&[])).unwrap().status, Status::Unknown);
        assert_eq!(loss_slope(&losses(&[3.0])).unwrap().status, Status::Unknown);
        assert_eq!(loss_spike(&losses(&[3.0])).unwrap().status, Status::Unknown);
    }

    #[test]
    fn slope_all_equal_is_zero_and_rising_warns() {
        let flat = loss_slope(&losses(&[3.0; 8])).unwrap();
        assert_eq!(flat.status, Status::Pass);
        assert_eq!(flat.observed["per_1k_steps"], 0.0);
        // +0.01 per 10 steps = +1 per 1k steps, over the 0.05 bound.
        let rising: Vec<f64> = (0..10).map(|i| 3.0 + 0.01 * i as f64).collect();
        let r = loss_slope(&losses(&rising)).unwrap();
        assert_eq!(r.status, Status::Warn);
        assert!(r.reason.contains("creeping up"), "{}", r.reason);
    }

    #[test]
    fn spike_one_sample_warns_a_run_fails() {
        let mut v = vec![3.0; 10];
        v.push(6.0);
        assert_eq!(loss_spike(&losses(&v)).unwrap().status, Status::Warn);
        v.push(6.5);
        let r = loss_spike(&losses(&v)).unwrap();
        assert_eq!((r.status, r.diverged_at), (Status::Fail, Some(200)));
        assert_eq!(
            loss_spike(&losses(&[3.0; 10])).unwrap().status,
            Status::Pass
        );
    }
}
