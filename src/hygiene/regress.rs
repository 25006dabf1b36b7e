//! `hygiene regress`: this run against a baseline run at matching steps. Both series are
//! smoothed with a running median (training curves are noisy step to step), the baseline is
//! interpolated linearly at this run's steps inside its range, and a step regressed where
//! loss or grad norm is higher, or tokens/s lower, by more than the `[hygiene]` margin
//! (relative). Pure: plain points in, a report out.

use super::Status;
use crate::config::HygieneConfig;
use serde::Serialize;
use std::collections::BTreeMap;

/// Half-width of the running median, in samples (5-point median).
pub const SMOOTH: usize = 2;
/// Fewer matched steps than this: cannot judge.
pub const MIN_MATCHED: usize = 3;
/// The latest this many matched steps all regressed: the run is worse now (fail).
pub const PERSIST: usize = 3;
/// Regressed steps listed in the report (the count is always complete).
pub const LIST_MAX: usize = 20;

/// One logged step: canonical metric name → value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub step: u64,
    pub values: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Worse {
    Higher,
    Lower,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Regressed {
    pub step: u64,
    pub value: f64,
    pub baseline: f64,
    /// Relative change, signed (+0.12 = 12% higher than the baseline).
    pub change: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricReport {
    pub metric: String,
    pub worse_when: Worse,
    pub margin: f64,
    pub status: Status,
    pub matched: usize,
    pub regressed_count: usize,
    /// The first [`LIST_MAX`] regressed steps.
    pub regressed: Vec<Regressed>,
    /// The matched step with the largest regression, if any.
    pub worst: Option<Regressed>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegressReport {
    pub status: Status,
    pub metrics: Vec<MetricReport>,
}

/// The metrics compared, the direction that is worse, and their margin.
pub fn metrics(cfg: &HygieneConfig) -> [(&'static str, Worse, f64); 3] {
    [
        ("loss", Worse::Higher, cfg.regress_loss),
        ("tokens_per_s", Worse::Lower, cfg.regress_tokens_per_s),
        ("grad_norm", Worse::Higher, cfg.regress_grad_norm),
    ]
}

pub fn compare(current: &[Point], baseline: &[Point], cfg: &HygieneConfig) -> RegressReport {
    let metrics: Vec<MetricReport> = metrics(cfg)
        .into_iter()
        .map(|(name, worse, margin)| {
            compare_metric(
                name,
                &series(current, name),
                &series(baseline, name),
                worse,
                margin,
            )
        })
        .collect();
    // A metric neither run logs says nothing; judge on those that were compared.
    let judged: Vec<Status> = metrics
        .iter()
        .filter(|m| m.matched > 0)
        .map(|m| m.status)
        .collect();
    RegressReport {
        status: Status::worst(judged),
        metrics,
    }
}

/// (step, value) of finite values, sorted by step, later duplicates winning (a resumed run
/// re-logs steps after its checkpoint).
fn series(points: &[Point], name: &str) -> Vec<(u64, f64)> {
    let mut by_step: BTreeMap<u64, f64> = BTreeMap::new();
    for p in points {
        if let Some(v) = p.values.get(name).copied().filter(|v| v.is_finite()) {
            by_step.insert(p.step, v);
        }
    }
    by_step.into_iter().collect()
}

/// Running median over ±[`SMOOTH`] samples.
fn smooth(s: &[(u64, f64)]) -> Vec<(u64, f64)> {
    (0..s.len())
        .map(|i| {
            let lo = i.saturating_sub(SMOOTH);
            let hi = (i + SMOOTH + 1).min(s.len());
            let mut w: Vec<f64> = s[lo..hi].iter().map(|p| p.1).collect();
            w.sort_by(|a, b| a.total_cmp(b));
            let m = w.len();
            let med = if m % 2 == 1 {
                w[m / 2]
            } else {
                (w[m / 2 - 1] + w[m / 2]) / 2.0
            };
            (s[i].0, med)
        })
        .collect()
}

/// Baseline value at `step` by linear interpolation; None outside its range.
fn at(base: &[(u64, f64)], step: u64) -> Option<f64> {
    let i = base.partition_point(|p| p.0 < step);
    let right = base.get(i)?;
    if right.0 == step {
        return Some(right.1);
    }
    let left = base.get(i.checked_sub(1)?)?;
    let f = (step - left.0) as f64 / (right.0 - left.0) as f64;
    Some(left.1 + f * (right.1 - left.1))
}

pub fn compare_metric(
    name: &str,
    current: &[(u64, f64)],
    baseline: &[(u64, f64)],
    worse: Worse,
    margin: f64,
) -> MetricReport {
    let cur = smooth(current);
    let base = smooth(baseline);
    let mut matched = 0usize;
    let mut flags: Vec<bool> = Vec::new();
    let mut regressed: Vec<Regressed> = Vec::new();
    for &(step, value) in &cur {
        let Some(b) = at(&base, step) else { continue };
        matched += 1;
        let change = if b != 0.0 { (value - b) / b.abs() } else { 0.0 };
        let bad = match worse {
            Worse::Higher => change > margin,
            Worse::Lower => change < -margin,
        };
        flags.push(bad);
        if bad {
            regressed.push(Regressed {
                step,
                value,
                baseline: b,
                change,
            });
        }
    }
    // The earliest of equally bad steps: where it started.
    let worst = regressed
        .iter()
        .fold(None::<&Regressed>, |w, r| match w {
            Some(w) if w.change.abs() >= r.change.abs() => Some(w),
            _ => Some(r),
        })
        .cloned();
    let persistent = flags.len() >= PERSIST && flags[flags.len() - PERSIST..].iter().all(|f| *f);
    let pct = |c: f64| format!("{:+.1}%", c * 100.0);
    let (status, reason) = if matched < MIN_MATCHED {
        (
            Status::Unknown,
            format!(
                "{matched} matching steps (this run {} samples, baseline {}): need {MIN_MATCHED}",
                current.len(),
                baseline.len()
            ),
        )
    } else if persistent {
        let w = worst.as_ref().expect("regressed steps exist");
        (
            Status::Fail,
            format!(
                "worse than the baseline beyond {} over the latest {PERSIST} matched steps; worst at step {}: {} vs {} ({})",
                pct(margin).trim_start_matches('+'),
                w.step,
                w.value,
                w.baseline,
                pct(w.change)
            ),
        )
    } else if let Some(w) = &worst {
        (
            Status::Warn,
            format!(
                "regressed at {} of {matched} matched steps, not at the latest; worst at step {}: {} vs {} ({})",
                regressed.len(),
                w.step,
                w.value,
                w.baseline,
                pct(w.change)
            ),
        )
    } else {
        (
            Status::Pass,
            format!(
                "within {} of the baseline at {matched} matched steps",
                pct(margin).trim_start_matches('+')
            ),
        )
    };
    let regressed_count = regressed.len();
    regressed.truncate(LIST_MAX);
    MetricReport {
        metric: name.to_string(),
        worse_when: worse,
        margin,
        status,
        matched,
        regressed_count,
        regressed,
        worst,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(
        f: impl Fn(u64) -> Vec<(&'static str, f64)>,
        steps: impl Iterator<Item = u64>,
    ) -> Vec<Point> {
        steps
            .map(|s| Point {
                step: s,
                values: f(s).into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            })
            .collect()
    }

    fn loss(s: u64) -> f64 {
        4.0 - (s as f64 / 1000.0)
    }

    #[test]
    fn same_run_passes_even_with_noise_and_other_sampling() {
        let cfg = HygieneConfig::default();
        let base = pts(
            |s| vec![("loss", loss(s)), ("tokens_per_s", 50_000.0)],
            (0..100).map(|i| i * 10),
        );
        // This run logs every 5 steps, with one noisy spike the median absorbs.
        let cur = pts(
            |s| {
                let spike = if s == 300 { 2.0 } else { 0.0 };
                vec![("loss", loss(s) + spike), ("tokens_per_s", 49_000.0)]
            },
            (0..150).map(|i| i * 5),
        );
        let r = compare(&cur, &base, &cfg);
        assert_eq!(r.status, Status::Pass, "{r:#?}");
        let l = &r.metrics[0];
        assert_eq!(
            l.matched, 150,
            "every step is inside the baseline's range [0, 990]"
        );
        assert_eq!(r.metrics[2].matched, 0, "grad norm logged by neither");
    }

    #[test]
    fn persistent_regression_fails_with_steps_and_numbers() {
        let cfg = HygieneConfig::default();
        let base = pts(
            |s| vec![("loss", loss(s)), ("tokens_per_s", 50_000.0)],
            (0..50).map(|i| i * 10),
        );
        let cur = pts(
            |s| {
                let tps = if s >= 200 { 40_000.0 } else { 50_000.0 };
                vec![("loss", loss(s)), ("tokens_per_s", tps)]
            },
            (0..50).map(|i| i * 10),
        );
        let r = compare(&cur, &base, &cfg);
        assert_eq!(r.status, Status::Fail);
        let t = &r.metrics[1];
        assert_eq!(t.status, Status::Fail);
        // A step change passes through the running median unblurred.
        assert_eq!(t.regressed[0].step, 200);
        assert_eq!(t.regressed_count, 30);
        assert_eq!(t.regressed.len(), LIST_MAX);
        assert!((t.worst.as_ref().unwrap().change + 0.2).abs() < 1e-9);
        assert_eq!(t.worst.as_ref().unwrap().step, 200, "the first of equals");
        assert!(t.reason.contains("40000 vs 50000 (-20.0%)"), "{}", t.reason);
        assert_eq!(r.metrics[0].status, Status::Pass);
    }

    #[test]
    fn recovered_regression_warns_and_thin_overlap_is_unknown() {
        let cfg = HygieneConfig::default();
        let base = pts(|s| vec![("loss", loss(s))], (0..50).map(|i| i * 10));
        let cur = pts(
            |s| {
                let bump = if (100..200).contains(&s) { 0.5 } else { 0.0 };
                vec![("loss", loss(s) + bump)]
            },
            (0..50).map(|i| i * 10),
        );
        let r = compare(&cur, &base, &cfg);
        assert_eq!(r.metrics[0].status, Status::Warn, "{:?}", r.metrics[0]);
        let far = pts(|s| vec![("loss", loss(s))], (1000..1010).map(|i| i * 10));
        assert_eq!(compare(&far, &base, &cfg).status, Status::Unknown);
    }

    #[test]
    fn interpolation_between_baseline_samples() {
        let base = [(0, 1.0), (10, 2.0)];
        assert_eq!(at(&base, 5), Some(1.5));
        assert_eq!(at(&base, 10), Some(2.0));
        assert_eq!(at(&base, 11), None);
    }
}
