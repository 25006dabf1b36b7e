//! The `loss` check: inside the phase's band (NaN/Inf and an exact 0 fail at once), and the
//! helpers the other loss checks share (`slope.rs`, `spike.rs`). A loss above its band or
//! NaN is a divergence (`diverged_at`, for rollback); below its band or exactly 0 it is a
//! collapse (memorisation, a masked batch): a fail with `began_at`, which rollback leaves
//! alone. Pure functions of an [`Observation`].

use super::onset::{whole, Run};
use super::stats::median;
use super::{fmt, num, CheckResult, Observation, Status};
use crate::metrics::LOSS;
use serde_json::json;

/// The newest loss sample when it is NaN/Inf: no other loss check may pass on the finite
/// values before it.
pub fn nonfinite_newest(obs: &Observation) -> Option<(u64, f64)> {
    obs.series(LOSS)
        .last()
        .copied()
        .filter(|p| !p.1.is_finite())
}

/// Steps of the trailing run of samples for which `bad` holds; its first step is where the
/// divergence began.
pub fn trailing_run(series: &[(u64, f64)], bad: impl Fn(f64) -> bool) -> (usize, Option<u64>) {
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
        let first = first.unwrap_or(last_step);
        // The divergence began at the first sample of the bad run that ends in this NaN:
        // finite losses out of the band just before it are that run's start (issue 36, 7a).
        let band = obs.phase.as_ref().and_then(|p| p.loss);
        let onset = band
            .and_then(|[lo, hi]| {
                let out = |v: f64| !(lo..=hi).contains(&v);
                onset_run(&series, out, obs.onsets.out_of_band).1
            })
            .filter(|s| *s < first);
        let before = onset.map_or(String::new(), |s| {
            format!("; out of the band since step {s}")
        });
        return Some(
            CheckResult::new(
                "loss",
                Status::Fail,
                format!(
                    "loss is {last} at step {last_step} ({n} sample(s) in a row since step {first}{before})"
                ),
            )
            .observed(json!({"step": last_step, "loss": num(last)}))
            .expected(json!("finite"))
            .diverged_at(Some(onset.unwrap_or(first))),
        );
    }
    if last == 0.0 {
        let (_, first) = onset_run(&series, |v| v == 0.0, obs.onsets.zero);
        let r = CheckResult::new(
            "loss",
            Status::Fail,
            format!("loss collapsed to exactly 0 at step {last_step}: as suspicious as NaN (a masked or empty batch?)"),
        )
        .observed(json!({"step": last_step, "loss": 0.0}))
        .expected(json!("> 0"));
        return Some(collapse(obs, r, first));
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
    let r = CheckResult::new(
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
    .expected(expected);
    let first = first.or(Some(last_step));
    Some(if m > hi {
        r.diverged_at(first)
    } else {
        collapse(obs, r, first)
    })
}

/// A loss below its band or exactly 0: from rules 1 on a collapse, not a divergence.
fn collapse(obs: &Observation, r: CheckResult, first: Option<u64>) -> CheckResult {
    if obs.rules >= 1 {
        r.began_at(first)
    } else {
        r.diverged_at(first)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::checks::tests::obs_with;
    use super::*;

    pub(crate) fn losses(vals: &[f64]) -> Observation {
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
        // A collapse to 0 is no divergence: its onset is `began_at`.
        assert_eq!(loss(&o).unwrap().began_at, Some(90));
    }

    /// Issue 36 defect 7a: finite losses above the band, then NaN. The divergence began at
    /// the first out-of-band sample, not at the first NaN: a rollback to just before the NaN
    /// would restore a checkpoint already diverging.
    #[test]
    fn a_nan_after_out_of_band_losses_is_dated_at_the_first_bad_sample() {
        let r = loss(&losses(&[3.0, 3.0, 7.0, 9.0, 20.0, f64::NAN, f64::NAN])).unwrap();
        assert_eq!(
            (r.status, r.diverged_at),
            (Status::Fail, Some(120)),
            "{}",
            r.reason
        );
        assert!(r.reason.contains("since step 150"), "{}", r.reason);
        assert!(
            r.reason.contains("out of the band since step 120"),
            "{}",
            r.reason
        );
        // A NaN straight after in-band losses: dated at the NaN, as before.
        let r = loss(&losses(&[3.0, 3.0, 3.1, f64::NAN])).unwrap();
        assert_eq!(r.diverged_at, Some(130), "{}", r.reason);
        // The window full of bad samples: the history's out-of-band record reaches back.
        let mut o = losses(&[8.0, 9.0, f64::NAN, f64::NAN]);
        o.onsets.out_of_band = Some(Run {
            since: 60,
            samples: 8,
        });
        assert_eq!(loss(&o).unwrap().diverged_at, Some(60));
    }

    #[test]
    fn single_point_and_empty_window() {
        assert_eq!(loss(&losses(&[3.0])).unwrap().status, Status::Pass);
        assert_eq!(loss(&losses(&[])).unwrap().status, Status::Unknown);
    }

    /// A deterministic N(0, sd) stream (an LCG and Box–Muller), so the noise is the same on
    /// every machine.
    pub(crate) fn noise(seed: u64, sd: f64) -> impl FnMut() -> f64 {
        let mut x = seed;
        let mut uniform = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        move || {
            let (u, v) = (uniform(), uniform());
            sd * (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    /// Issue 18 item 5: with a NaN newest loss, no other loss check may pass on the finite
    /// values before it.
    #[test]
    fn a_nan_newest_loss_leaves_no_loss_check_passing() {
        let mut v = vec![3.0; 20];
        v.push(f64::NAN);
        let o = losses(&v);
        for r in [
            super::super::slope::loss_slope(&o).unwrap(),
            super::super::spike::loss_spike(&o).unwrap(),
        ] {
            assert_ne!(r.status, Status::Pass, "{}: {}", r.check, r.reason);
            assert!(r.reason.contains("NaN"), "{}", r.reason);
        }
        assert_eq!(loss(&o).unwrap().status, Status::Fail);
    }

    /// Issue 18 item 8: a loss below its band (memorisation, a collapsed loss) fails but is no
    /// divergence: no `diverged_at`, and it is marked so that rollback leaves it alone.
    #[test]
    fn a_loss_below_its_band_fails_without_a_divergence() {
        let low = loss(&losses(&[3.0, 3.0, 3.0, 1.0, 0.9, 0.8, 0.7, 0.6])).unwrap();
        assert_eq!(low.status, Status::Fail, "{}", low.reason);
        assert!(low.reason.contains("below the band"), "{}", low.reason);
        assert_eq!(low.diverged_at, None);
        // Where it began is still recorded (checkpoints from then on are not good), under
        // another name: `began_at`.
        let began = |r: &CheckResult| serde_json::to_value(r).unwrap()["began_at"].as_u64();
        assert_eq!(began(&low), Some(130));
        let zero = loss(&losses(&[3.0, 3.0, 0.0])).unwrap();
        assert_eq!((zero.status, zero.diverged_at), (Status::Fail, None));
        assert_eq!(began(&zero), Some(120));
        // Above the band is a divergence, with its onset.
        let high = loss(&losses(&[3.0, 3.0, 7.0, 7.5, 8.0])).unwrap();
        assert_eq!((high.status, high.diverged_at), (Status::Fail, Some(120)));
    }
}
