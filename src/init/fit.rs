//! Fitting `[schedule]` to a logged lr: kind, peak, warmup, min and total steps, with how well
//! it fits — or a refusal when nothing does. Every candidate is scored with the critic's own
//! curve and tolerance (`schedule::deviation`), so "fits" means "the lr check would pass".

use crate::config::{kind_name, ScheduleConfig, ScheduleKind};
use crate::schedule;

/// Share of samples that must lie within tolerance for a fit to be proposed.
pub const MIN_SHARE: f64 = 0.95;
/// Tolerance roger starts from (the example config's), as a fraction of peak.
const BASE_TOLERANCE: f64 = 0.02;
/// A fit needing more than this tolerance to cover every sample is refused: a doubled lr late
/// in a decay would hide inside it.
const MAX_TOLERANCE: f64 = 0.05;
/// Trainers log the lr of a neighbouring step (HF under AMP lags 2-4 steps).
const STEP_SLACK: u64 = 4;
/// Samples scored per candidate during the search (the winner is scored on all).
const SEARCH_SAMPLES: usize = 400;
/// RMS deviations (fraction of peak) below this are noise, not a better curve: the peak is
/// rounded to 3 significant figures (up to 0.05%) and fp16 loggers keep 0.05%.
const RMS_NOISE: f64 = 0.001;

#[derive(Debug, Clone)]
pub struct Fit {
    pub schedule: ScheduleConfig,
    /// Share of samples within `BASE_TOLERANCE` of the curve.
    pub share: f64,
    /// Largest deviation of any sample, as a fraction of peak.
    pub max_dev: f64,
    /// Root mean square deviation, as a fraction of peak.
    pub rms: f64,
    pub samples: usize,
    /// total_steps came from the log (true) or was fitted.
    pub total_from_log: bool,
    /// The next best kind and its share, to say how clear the choice was.
    pub runner_up: Option<(ScheduleKind, f64)>,
    /// The lr was still rising at the log's last samples: peak and warmup are lower bounds.
    pub still_rising: bool,
}

#[derive(Debug, Clone)]
pub enum FitOutcome {
    Fitted(Box<Fit>),
    /// No kind fits; the reason has the numbers.
    Refused(String),
}

/// Fit a schedule to `(step, lr)` samples. `total` is the run's planned last step when the
/// log says it (trainer_state's max_steps, a `total_steps` key).
pub fn fit(points: &[(u64, f64)], total: Option<u64>) -> FitOutcome {
    let pts: Vec<(u64, f64)> = points
        .iter()
        .copied()
        .filter(|(_, lr)| lr.is_finite() && *lr >= 0.0)
        .collect();
    if pts.len() < 5 {
        return FitOutcome::Refused(format!(
            "only {} finite lr samples; 5 or more are needed to fit a schedule",
            pts.len()
        ));
    }
    let peak = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    if peak <= 0.0 {
        return FitOutcome::Refused("the logged lr is 0 throughout".into());
    }
    let warmup = warmup_steps(&pts, peak);
    let last = pts.iter().map(|p| p.0).max().unwrap_or(0);
    let sparse = thin(&pts, SEARCH_SAMPLES);
    let totals: Vec<u64> = match total {
        Some(t) => vec![t],
        None => total_grid(warmup, last),
    };
    let mut scored: Vec<(ScheduleConfig, Score)> = Vec::new();
    for kind in [
        ScheduleKind::Constant,
        ScheduleKind::Linear,
        ScheduleKind::Cosine,
        ScheduleKind::InverseSqrt,
    ] {
        let best = if crate::config::needs_total(kind) {
            totals
                .iter()
                .map(|&t| {
                    let s = with_min(candidate(kind, peak, warmup, Some(t)), &sparse);
                    let sc = score(&s, &sparse);
                    (s, sc)
                })
                .min_by(|a, b| a.1.rank(&b.1))
        } else {
            let s = candidate(kind, peak, warmup, total);
            let sc = score(&s, &sparse);
            Some((s, sc))
        };
        scored.extend(best);
    }
    // Simplest kind first, so an equally good fit keeps the simpler curve.
    let mut order: Vec<usize> = (0..scored.len()).collect();
    order.sort_by(|&a, &b| scored[a].1.rank_kind(&scored[b].1).then(a.cmp(&b)));
    let (mut s, _) = scored[order[0]].clone();
    let runner_up = order.get(1).map(|&i| (scored[i].0.kind, scored[i].1.share));
    if total.is_none() && crate::config::needs_total(s.kind) {
        s.total_steps = s.total_steps.map(round_steps);
        s = with_min(s, &sparse);
    }
    let all = score(&s, &pts);
    let name = kind_name(s.kind);
    if all.share < MIN_SHARE {
        return FitOutcome::Refused(format!(
            "no schedule kind fits: the best, {name}, has {:.0}% of {} samples within {:.0}% of peak (needs {:.0}%); declare [schedule] yourself",
            100.0 * all.share,
            pts.len(),
            100.0 * BASE_TOLERANCE,
            100.0 * MIN_SHARE
        ));
    }
    if all.max_dev > MAX_TOLERANCE {
        return FitOutcome::Refused(format!(
            "{name} fits {:.1}% of {} samples, but some are {:.0}% of peak away (a restart or a manual change?); declare [schedule] yourself",
            100.0 * all.share,
            pts.len(),
            100.0 * all.max_dev
        ));
    }
    s.tolerance = tolerance_for(all.max_dev);
    let top = pts.iter().position(|p| p.1 >= 0.98 * peak).unwrap_or(0);
    let still_rising = warmup > 0 && top + 1 >= pts.len().saturating_sub(pts.len() / 50);
    FitOutcome::Fitted(Box::new(Fit {
        schedule: s,
        share: all.share,
        max_dev: all.max_dev,
        rms: all.rms,
        samples: pts.len(),
        total_from_log: total.is_some(),
        runner_up,
        still_rising,
    }))
}

/// Tightest tolerance proposed (0.2% of peak): below it a log's printed precision shows.
const MIN_TOLERANCE: f64 = 0.002;

/// The tolerance the proposal declares: twice the worst sample's deviation, at least 0.2% of
/// peak. As tight as the run allows, because the allowance is a fraction of *peak*: late in a
/// decay a doubled lr is a small absolute change and a loose 2% would hide it.
pub fn tolerance_for(max_dev: f64) -> f64 {
    let t = (max_dev * 2.0 * 1000.0).ceil() / 1000.0;
    t.max(MIN_TOLERANCE)
}

#[derive(Debug, Clone, Copy)]
struct Score {
    share: f64,
    max_dev: f64,
    rms: f64,
}

impl Score {
    /// Better first: more samples within tolerance (to 0.5%), then a closer curve.
    fn rank(&self, other: &Score) -> std::cmp::Ordering {
        let a = (self.share * 200.0).round();
        let b = (other.share * 200.0).round();
        b.total_cmp(&a).then_with(|| {
            if self.rms < other.rms * 0.8 {
                std::cmp::Ordering::Less
            } else if other.rms < self.rms * 0.8 {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
    }
}

impl Score {
    /// Between kinds: as [`Score::rank`], but two curves both within [`RMS_NOISE`] are equally
    /// good (then the simpler kind is kept).
    fn rank_kind(&self, other: &Score) -> std::cmp::Ordering {
        match self.rank(other) {
            std::cmp::Ordering::Equal => std::cmp::Ordering::Equal,
            _ if self.rms.max(other.rms) < RMS_NOISE
                && (self.share * 200.0).round() == (other.share * 200.0).round() =>
            {
                std::cmp::Ordering::Equal
            }
            o => o,
        }
    }
}

fn score(s: &ScheduleConfig, pts: &[(u64, f64)]) -> Score {
    let mut within = 0usize;
    let mut max_dev = 0.0f64;
    let mut sq = 0.0;
    for &(step, lr) in pts {
        let d = schedule::deviation(s, step, lr).0 / s.peak_lr;
        if d <= BASE_TOLERANCE {
            within += 1;
        }
        max_dev = max_dev.max(d);
        sq += d * d;
    }
    let n = pts.len().max(1) as f64;
    Score {
        share: within as f64 / n,
        max_dev,
        rms: (sq / n).sqrt(),
    }
}

fn candidate(kind: ScheduleKind, peak: f64, warmup: u64, total: Option<u64>) -> ScheduleConfig {
    ScheduleConfig {
        kind,
        peak_lr: round_sig(peak, 3),
        min_lr: 0.0,
        warmup_steps: warmup,
        total_steps: total,
        tolerance: BASE_TOLERANCE,
        step_slack: STEP_SLACK,
        ..Default::default()
    }
}

/// The min lr that best explains the decay, given kind, peak, warmup and total: the curve is
/// `min + (peak - min)·f(step)`, linear in min, so least squares is one division.
fn with_min(mut s: ScheduleConfig, pts: &[(u64, f64)]) -> ScheduleConfig {
    if !matches!(s.kind, ScheduleKind::Linear | ScheduleKind::Cosine) {
        return s;
    }
    let peak = s.peak_lr;
    let mut unit = s.clone();
    unit.peak_lr = 1.0;
    unit.min_lr = 0.0;
    let (mut num, mut den) = (0.0, 0.0);
    for &(step, lr) in pts.iter().filter(|p| p.0 >= s.warmup_steps) {
        let f = schedule::expected(&unit, step);
        num += (lr - peak * f) * (1.0 - f);
        den += (1.0 - f) * (1.0 - f);
    }
    let min = if den > 1e-12 {
        (num / den).clamp(0.0, peak)
    } else {
        0.0
    };
    s.min_lr = if min < 0.01 * peak {
        0.0
    } else {
        round_sig(min, 2)
    };
    s
}

/// Warmup length from the rising samples before the lr first reaches its peak: least squares
/// of `lr = peak·step/warmup`. 0 when the log starts at (or near) the peak.
fn warmup_steps(pts: &[(u64, f64)], peak: f64) -> u64 {
    let Some(top) = pts.iter().position(|p| p.1 >= 0.98 * peak) else {
        return 0;
    };
    if pts[0].1 >= 0.5 * peak || top == 0 {
        return 0;
    }
    let rising = &pts[..top];
    let (mut ss, mut sl) = (0.0, 0.0);
    for &(step, lr) in rising {
        ss += (step as f64) * (step as f64);
        sl += step as f64 * lr;
    }
    if sl <= 0.0 {
        return pts[top].0;
    }
    let w = (peak * ss / sl).round().max(1.0) as u64;
    round_steps(w)
}

/// Round a step count the way people write them when the difference is under 1%.
fn round_steps(n: u64) -> u64 {
    for unit in [1000, 500, 100, 50, 10] {
        let r = (n + unit / 2) / unit * unit;
        if r > 0 && (r as f64 - n as f64).abs() <= 0.01 * n as f64 {
            return r;
        }
    }
    n
}

/// Candidate totals: geometric from just past warmup to 20× the last logged step.
fn total_grid(warmup: u64, last: u64) -> Vec<u64> {
    let lo = (warmup + 1).max(last / 4).max(2) as f64;
    let hi = (last.max(1) * 20) as f64;
    let n = 300;
    let mut v: Vec<u64> = (0..=n)
        .map(|i| (lo * (hi / lo).powf(i as f64 / n as f64)).round() as u64)
        .collect();
    v.dedup();
    v
}

fn thin(pts: &[(u64, f64)], n: usize) -> Vec<(u64, f64)> {
    if pts.len() <= n {
        return pts.to_vec();
    }
    (0..n).map(|i| pts[i * (pts.len() - 1) / (n - 1)]).collect()
}

/// `x` to `n` significant digits (so the file says 6e-4, not 0.000600000000001).
pub fn round_sig(x: f64, n: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let mag = 10f64.powi(n - 1 - x.abs().log10().floor() as i32);
    let r = (x * mag).round() / mag;
    // One more parse round-trip removes the binary tail of the division.
    format!("{r:.*e}", (n - 1).max(0) as usize)
        .parse()
        .unwrap_or(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(s: &ScheduleConfig, every: u64, until: u64) -> Vec<(u64, f64)> {
        (1..=until / every)
            .map(|i| (i * every, schedule::expected(s, i * every)))
            .collect()
    }

    fn truth(kind: ScheduleKind) -> ScheduleConfig {
        ScheduleConfig {
            kind,
            peak_lr: 6e-4,
            min_lr: 6e-5,
            warmup_steps: 200,
            total_steps: Some(5000),
            ..Default::default()
        }
    }

    #[test]
    fn recovers_kind_peak_warmup_min_and_total() {
        for kind in [ScheduleKind::Cosine, ScheduleKind::Linear] {
            let t = truth(kind);
            let FitOutcome::Fitted(f) = fit(&sample(&t, 10, 5000), None) else {
                panic!("{kind:?} not fitted");
            };
            assert_eq!(f.schedule.kind, kind);
            assert_eq!(f.schedule.peak_lr, 6e-4);
            assert_eq!(f.schedule.warmup_steps, 200);
            let total = f.schedule.total_steps.unwrap();
            assert!((4900..=5100).contains(&total), "{kind:?} total {total}");
            assert!((f.schedule.min_lr - 6e-5).abs() < 1e-5, "{:?}", f.schedule);
            assert!(f.share >= 0.99);
        }
    }

    #[test]
    fn constant_stays_constant_and_total_from_log_is_kept() {
        let mut t = truth(ScheduleKind::Constant);
        t.warmup_steps = 0;
        let FitOutcome::Fitted(f) = fit(&sample(&t, 10, 1000), None) else {
            panic!()
        };
        assert_eq!(f.schedule.kind, ScheduleKind::Constant);
        // 3e-4 as an fp16 logger stores it: 0.02% below the rounded peak, which a cosine
        // bent down by as much must not beat.
        let half: Vec<(u64, f64)> = (0..40).map(|i| (i, 2.999_305_725_097_656e-4)).collect();
        let FitOutcome::Fitted(f) = fit(&half, None) else {
            panic!()
        };
        assert_eq!(f.schedule.kind, ScheduleKind::Constant, "{:?}", f.schedule);
        let FitOutcome::Fitted(f) =
            fit(&sample(&truth(ScheduleKind::Cosine), 25, 3000), Some(5000))
        else {
            panic!()
        };
        assert_eq!(f.schedule.total_steps, Some(5000));
        assert!(f.total_from_log);
    }

    #[test]
    fn refuses_noise_and_restarts() {
        let noise: Vec<(u64, f64)> = (1..200u64)
            .map(|i| (i * 10, if i % 3 == 0 { 1e-3 } else { 2e-4 }))
            .collect();
        let FitOutcome::Refused(why) = fit(&noise, None) else {
            panic!("noise fitted")
        };
        assert!(why.contains("no schedule kind fits"), "{why}");
        assert!(matches!(fit(&[(1, 1e-3)], None), FitOutcome::Refused(_)));
    }

    #[test]
    fn rounding() {
        assert_eq!(round_sig(0.000600000001, 3), 6e-4);
        assert_eq!(round_steps(4998), 5000);
        assert_eq!(round_steps(4321), 4300);
        assert_eq!(round_steps(12), 12);
        assert_eq!(tolerance_for(0.0), 0.002);
        assert_eq!(tolerance_for(0.005), 0.01);
        assert_eq!(tolerance_for(0.03), 0.06);
    }
}
