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
/// A rounder number (peak, min, warmup, total) is kept when the curve stays this close,
/// judged without step slack: rms and worst sample up by at most a quarter of what they
/// were, or by 2e-6 of peak (so an exact fit stays exact, while a log printed to a few
/// digits still gets 6e-4 rather than 6.00013e-4).
const ROUNDING_SHARE: f64 = 0.25;
const ROUNDING_FLOOR: f64 = 2e-6;
/// An rms off the curve (fraction of peak, no slack) above this is a log that is not exact.
const NOT_EXACT: f64 = 1e-4;
/// Kinds fitted, simplest first (an equally good fit keeps the simpler curve).
const KINDS: [ScheduleKind; 6] = [
    ScheduleKind::Constant,
    ScheduleKind::Linear,
    ScheduleKind::Cosine,
    ScheduleKind::InverseSqrt,
    ScheduleKind::Wsd,
    ScheduleKind::OneCycle,
];

/// Polynomial decays fitted beside the kinds, by exponent: 0.9 is mmseg/DeepLab's `poly`,
/// 2 and 0.5 the squared and square-root decays (power 1 is `linear`).
const POWERS: [f64; 3] = [0.9, 2.0, 0.5];

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
    /// The log's first lr sample is at or past the fitted warmup's end: the warmup was not
    /// seen and is what the decay's shape implies (0 for a curve it does not change).
    pub warmup_unseen: bool,
}

#[derive(Debug, Clone)]
pub enum FitOutcome {
    Fitted(Box<Fit>),
    /// No kind fits; the reason has the numbers.
    Refused(String),
}

/// Fit a schedule to `(step, lr)` samples. `total` is the run's planned last step when the
/// log declares it (trainer_state's max_steps, a `total_steps` key, a text log's
/// `max_iters` / `--train-iters`): then it is used as is, else it is a parameter of the fit.
///
/// Peak, warmup, min (and total, and a WSD's decay length) are all parameters: for each
/// kind, a grid then a local integer search over warmup/total/decay, with peak and min
/// solved by least squares at each point (the curve is linear in them). So a log that
/// starts late in the warmup, after it, or at an already decayed lr fits as exactly as one
/// that starts at step 0. Kinds are then compared with the critic's own deviation
/// (`schedule::deviation`), so "fits" means "the lr check would pass".
#[cfg(test)]
pub fn fit(points: &[(u64, f64)], total: Option<u64>) -> FitOutcome {
    fit_with(points, total, &Hints::default())
}

/// What the run's trainer says about its schedule, beyond the lr it logged.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hints {
    /// Ultralytics YOLO: its own `lf` curves (yolo-linear, yolo-cos) are candidates, ranked
    /// first among equals, and the total is its `epochs`.
    pub yolo: bool,
    /// The log counts epochs from 0 (YOLOv5, early v8): the declared total is the last
    /// epoch, one short of `epochs`.
    pub zero_based: bool,
}

/// [`fit`] with the trainer's [`Hints`].
pub fn fit_with(points: &[(u64, f64)], total: Option<u64>, hints: &Hints) -> FitOutcome {
    let mut pts: Vec<(u64, f64)> = points
        .iter()
        .copied()
        .filter(|(_, lr)| lr.is_finite() && *lr >= 0.0)
        .collect();
    pts.sort_by_key(|p| p.0);
    if pts.len() < 5 {
        return FitOutcome::Refused(format!(
            "only {} finite lr samples; 5 or more are needed to fit a schedule",
            pts.len()
        ));
    }
    let max_lr = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    if max_lr <= 0.0 {
        return FitOutcome::Refused("the logged lr is 0 throughout".into());
    }
    let total = total.filter(|t| *t > 0);
    let sparse = thin(&pts, SEARCH_SAMPLES);
    let top = pts.iter().position(|p| p.1 >= 0.98 * max_lr).unwrap_or(0);
    // Still rising at the end: only peak/warmup's ratio is known; say what the log shows.
    let still_rising = pts[0].1 < 0.98 * max_lr && top + 1 >= pts.len() - pts.len() / 50;
    let mut scored: Vec<(ScheduleConfig, Score)> = Vec::new();
    if still_rising {
        let warmup = warmup_from_rise(&pts, max_lr);
        for kind in KINDS.into_iter().filter(|k| *k != ScheduleKind::Wsd) {
            if needs_total_or(kind) && total.is_none_or(|t| t <= warmup) {
                continue;
            }
            let mut s = schedule_of(
                Shape { kind, power: None },
                Params {
                    w: warmup,
                    t: total.unwrap_or(0),
                    d: 0,
                },
            );
            s.peak_lr = round_sig(max_lr, 3);
            let sc = score(&s, &sparse);
            scored.push((s, sc));
        }
    } else {
        let last = pts[pts.len() - 1].0;
        let space = Space {
            // The peak is reached by the top sample (a lagging logger: a little after).
            w_hi: pts[top].0 + pts[top].0 / 20 + 1,
            total,
            t_lo: (pts[top].0 + 1).max(last / 4).max(2),
            t_hi: last.max(1).saturating_mul(20),
        };
        let yolo_kinds: &[ScheduleKind] = if hints.yolo {
            &[ScheduleKind::YoloLinear, ScheduleKind::YoloCos]
        } else {
            &[]
        };
        // YOLO's total is `epochs`: a log counting from 0 declares the last, one short.
        let yolo_space = Space {
            total: total.map(|t| t + u64::from(hints.zero_based)),
            w_hi: space.w_hi + 1,
            ..space
        };
        let sparse_from_1: Vec<(u64, f64)> = sparse.iter().map(|p| (p.0 + 1, p.1)).collect();
        // One-cycle's cosine rise reaches 98% of its peak at 85% of the rise: its rise is
        // searched up to the highest sample.
        let highest = pts
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(0, |p| p.0);
        let one_cycle_space = Space {
            w_hi: space.w_hi.max(highest + highest / 20 + 1),
            ..space
        };
        let shapes = yolo_kinds
            .iter()
            .map(|&kind| Shape { kind, power: None })
            .chain(KINDS.map(|kind| Shape { kind, power: None }))
            .chain(POWERS.map(|p| Shape {
                kind: ScheduleKind::Polynomial,
                power: Some(p),
            }));
        // Staircases are read off the log's levels, not searched (fit_steps). Ranked before
        // wsd: a wsd whose decay falls between two samples is the same drop, and one drop
        // is a milestone more plainly than a decay of unknown length.
        let mut staircase = super::fit_steps::fit(&pts, STEP_SLACK, BASE_TOLERANCE)
            .map(|s| rounder(s, &sparse, total.is_some(), last));
        for shape in shapes {
            if shape.kind == ScheduleKind::Wsd {
                if let Some(s) = staircase.take() {
                    let sc = score(&s, &sparse);
                    scored.push((s, sc));
                }
            }
            let space = if is_yolo(shape.kind) {
                &yolo_space
            } else if shape.kind == ScheduleKind::OneCycle {
                &one_cycle_space
            } else {
                &space
            };
            // YOLO's curve counts epochs from 1; a log counting from 0 is fitted one on.
            let pts_of = if is_yolo(shape.kind) && hints.zero_based {
                &sparse_from_1
            } else {
                &sparse
            };
            let Some((mut s, p0, e0)) = fit_kind(shape, space, pts_of, None) else {
                continue;
            };
            // Loggers print the lr of a step or a few before (HF: the step before; under
            // AMP a few more): the same curve `lag` steps later fits such a log exactly,
            // and warmup/total come out as the trainer declared them.
            let mut on = pts_of.clone();
            let mse = |e: f64, n: usize| e / n.max(1) as f64;
            let mut best = mse(e0, pts_of.len());
            for lag in 1..=STEP_SLACK {
                let shifted: Vec<(u64, f64)> = pts_of
                    .iter()
                    .filter(|p| p.0 >= lag)
                    .map(|p| (p.0 - lag, p.1))
                    .collect();
                let start = Params {
                    w: p0.w.saturating_sub(lag),
                    t: if total.is_none() {
                        p0.t.saturating_sub(lag)
                    } else {
                        p0.t
                    },
                    d: p0.d,
                };
                // A curve already exact (rms under 1e-7 of peak) has no lag to find.
                if best.sqrt() <= 1e-7 * max_lr {
                    break;
                }
                if let Some((c, _, e)) = fit_kind(shape, space, &shifted, Some(start)) {
                    if mse(e, shifted.len()) < 0.5 * best {
                        (s, best, on) = (c, mse(e, shifted.len()), shifted);
                    }
                }
            }
            let s = rounder(s, &on, total.is_some(), last);
            let sc = score(&s, &sparse);
            scored.push((s, sc));
        }
    }
    if scored.is_empty() {
        return FitOutcome::Refused(
            "the lr still rises at the log's end and the log declares no total steps: nothing to fit yet".into(),
        );
    }
    let mut order: Vec<usize> = (0..scored.len()).collect();
    order.sort_by(|&a, &b| scored[a].1.rank_kind(&scored[b].1).then(a.cmp(&b)));
    let (mut s, _) = scored[order[0]].clone();
    let runner_up = order.get(1).map(|&i| (scored[i].0.kind, scored[i].1.share));
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
    // A kind that needs no total still carries a declared one: the run's end is known.
    // (YOLO's total is its `epochs`, set by the fit.)
    if let Some(t) = total.filter(|t| *t > s.warmup_steps && !is_yolo(s.kind)) {
        s.total_steps = Some(t);
    }
    let warmup_unseen =
        !still_rising && s.kind != ScheduleKind::OneCycle && pts[0].0 >= s.warmup_steps;
    FitOutcome::Fitted(Box::new(Fit {
        schedule: s,
        share: all.share,
        max_dev: all.max_dev,
        rms: all.rms,
        samples: pts.len(),
        total_from_log: total.is_some(),
        runner_up,
        still_rising,
        warmup_unseen,
    }))
}

fn is_yolo(kind: ScheduleKind) -> bool {
    matches!(kind, ScheduleKind::YoloLinear | ScheduleKind::YoloCos)
}

fn needs_total_or(kind: ScheduleKind) -> bool {
    crate::config::needs_total(kind)
}

/// Where the integer parameters are searched.
#[derive(Clone, Copy)]
struct Space {
    /// Warmup is searched in `0..=w_hi`.
    w_hi: u64,
    /// The declared total (fixed), else searched geometrically in `t_lo..=t_hi`.
    total: Option<u64>,
    t_lo: u64,
    t_hi: u64,
}

/// Integer parameters of one candidate curve: warmup, total, WSD decay steps.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Params {
    w: u64,
    t: u64,
    d: u64,
}

/// `x` moved by `by` in the direction of `sign` (None past 0 or u64::MAX).
fn shift(x: u64, by: u64, sign: i8) -> Option<u64> {
    if sign < 0 {
        x.checked_sub(by)
    } else {
        x.checked_add(by)
    }
}

/// A schedule with peak 1 and min 0: its value is the curve's shape `f(step)`.
fn unit(kind: ScheduleKind, w: u64, t: Option<u64>, d: Option<u64>) -> ScheduleConfig {
    ScheduleConfig {
        kind,
        peak_lr: 1.0,
        min_lr: 0.0,
        warmup_steps: w,
        total_steps: t,
        decay_steps: d,
        tolerance: BASE_TOLERANCE,
        step_slack: STEP_SLACK,
        ..Default::default()
    }
}

/// Kinds whose decay ends at a floor `min_lr` (fitted); the others have none to fit.
fn has_floor(kind: ScheduleKind) -> bool {
    matches!(
        kind,
        ScheduleKind::Linear
            | ScheduleKind::Cosine
            | ScheduleKind::Wsd
            | ScheduleKind::Polynomial
            | ScheduleKind::YoloLinear
            | ScheduleKind::YoloCos
    )
}

/// A kind to fit, with a polynomial's exponent (fixed per candidate, not searched).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    kind: ScheduleKind,
    power: Option<f64>,
}

fn schedule_of(shape: Shape, p: Params) -> ScheduleConfig {
    let kind = shape.kind;
    let t = needs_total_or(kind).then_some(p.t);
    let d = (kind == ScheduleKind::Wsd).then_some(p.d);
    if kind == ScheduleKind::OneCycle {
        // OneCycleLR rises on its own: the searched warmup is its rise, pct_start × total,
        // from max_lr / 25 and down to that / 1e4 (its defaults, which Lightning and fastai
        // keep).
        return ScheduleConfig {
            pct_start: Some(p.w as f64 / p.t.max(1) as f64),
            ..unit(kind, 0, t, None)
        };
    }
    ScheduleConfig {
        power: shape.power,
        ..unit(kind, p.w, t, d)
    }
}

/// Least squares peak and min for a shape: `lr = peak·a + min·b`, where in the warmup
/// `a = step/warmup, b = 0` and after it `a = f, b = 1 - f` (YOLO: both times its ramp).
/// Returns (peak, min, sse).
fn solve(shape: &ScheduleConfig, pts: &[(u64, f64)], fixed_peak: Option<f64>) -> (f64, f64, f64) {
    let floor = has_floor(shape.kind);
    // Every kind is linear in (peak, min): a is the curve with peak 1 and min 0, b with peak
    // 0 and min 1 (outside the warmup 1 - a; under YOLO's ramp, the ramp times that).
    let floor_only = ScheduleConfig {
        peak_lr: 0.0,
        min_lr: 1.0,
        ..shape.clone()
    };
    let cols: Vec<(f64, f64, f64)> = pts
        .iter()
        .map(|&(step, lr)| {
            let a = schedule::expected(shape, step);
            let b = if floor {
                schedule::expected(&floor_only, step)
            } else {
                0.0
            };
            (a, b, lr)
        })
        .collect();
    let (mut saa, mut sab, mut sbb, mut sal, mut sbl) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(a, b, l) in &cols {
        saa += a * a;
        sab += a * b;
        sbb += b * b;
        sal += a * l;
        sbl += b * l;
    }
    let only_peak = |saa: f64, sal: f64| if saa > 0.0 { sal / saa } else { 0.0 };
    let (peak, min) = match fixed_peak {
        Some(p) => {
            let m = if sbb > 1e-12 {
                (sbl - p * sab) / sbb
            } else {
                0.0
            };
            (p, m.clamp(0.0, p))
        }
        None => {
            let det = saa * sbb - sab * sab;
            if !floor || sbb <= 1e-12 || det.abs() <= 1e-12 * saa * sbb {
                (only_peak(saa, sal), 0.0)
            } else {
                let p = (sal * sbb - sbl * sab) / det;
                let m = (saa * sbl - sab * sal) / det;
                if m < 0.0 || p <= 0.0 {
                    (only_peak(saa, sal), 0.0)
                } else if m > p {
                    // A floor above the peak is no decay: a constant at the mean.
                    let p = (sal + sbl) / (saa + 2.0 * sab + sbb);
                    (p, p)
                } else {
                    (p, m)
                }
            }
        }
    };
    let sse = cols
        .iter()
        .map(|&(a, b, l)| {
            let r = l - peak * a - min * b;
            r * r
        })
        .sum();
    (peak, min, sse)
}

fn sse_at(shape: Shape, p: Params, pts: &[(u64, f64)]) -> f64 {
    solve(&schedule_of(shape, p), pts, None).2
}

/// The best curve of one kind: a coarse grid over the integer parameters, then a local
/// search that halves its steps down to single steps. None when the kind cannot be
/// placed (no room for a decay after the warmup). From `start`, only the local search, with
/// small first steps. Returns the curve, its integer parameters and its squared error.
fn fit_kind(
    shape: Shape,
    sp: &Space,
    pts: &[(u64, f64)],
    start: Option<Params>,
) -> Option<(ScheduleConfig, Params, f64)> {
    let kind = shape.kind;
    let needs_t = needs_total_or(kind);
    // One-cycle needs two steps of rise (config check: pct_start × total >= 2).
    let w_min = match kind {
        ScheduleKind::InverseSqrt => 1,
        ScheduleKind::OneCycle => 2,
        _ => 0,
    };
    let w_grid: Vec<u64> = {
        let n = 24u64;
        let mut v: Vec<u64> = (0..=n).map(|i| w_min.max(sp.w_hi * i / n)).collect();
        v.dedup();
        v
    };
    let t_grid: Vec<u64> = match (needs_t, sp.total) {
        (false, _) => vec![0],
        (true, Some(t)) => vec![t],
        (true, None) => geometric(sp.t_lo, sp.t_hi, 40),
    };
    let d_fracs: &[f64] = if kind == ScheduleKind::Wsd {
        &[
            0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
        ]
    } else {
        &[0.0]
    };
    let valid = |p: Params| {
        !needs_t || (p.t > p.w && (kind != ScheduleKind::Wsd || (p.d >= 1 && p.d <= p.t - p.w)))
    };
    let mut best: Option<(Params, f64)> = start.map(|p| (p, 0.0));
    for &t in t_grid.iter().filter(|_| start.is_none()) {
        for &w in &w_grid {
            for &f in d_fracs {
                let d = ((t.saturating_sub(w)) as f64 * f).round() as u64;
                let p = Params { w, t, d };
                if !valid(p) {
                    continue;
                }
                let e = sse_at(shape, p, pts);
                if best.is_none_or(|b| e < b.1) {
                    best = Some((p, e));
                }
            }
        }
    }
    let (p0, _) = best?;
    // Local search on the profile: for each warmup, the best total and decay near the
    // current ones (warmup and total trade off along a valley that moving one at a time
    // cannot follow), then warmup itself, steps halving down to single steps.
    let t_free = needs_t && sp.total.is_none();
    let wsd = kind == ScheduleKind::Wsd;
    let small = start.is_some();
    let inner = |from: Params| -> (Params, f64) {
        let mut p = from;
        let mut e = sse_at(shape, p, pts);
        let first = |x: u64| if small { 2 } else { x.max(1) };
        let mut st = if t_free { first(p.t / 10) } else { 0 };
        let mut sd = if wsd { first(p.d / 4) } else { 0 };
        if st == 0 && sd == 0 {
            return (p, e);
        }
        for _ in 0..200 {
            let mut improved = false;
            for (a, b) in [
                (-1i8, 0i8),
                (1, 0),
                (0, -1),
                (0, 1),
                (-1, -1),
                (1, 1),
                (-1, 1),
                (1, -1),
            ] {
                let (dt, dd) = (st * u64::from(a != 0), sd * u64::from(b != 0));
                if dt == 0 && dd == 0 {
                    continue;
                }
                let (Some(t), Some(d)) = (shift(p.t, dt, a), shift(p.d, dd, b)) else {
                    continue;
                };
                let q = Params { t, d, ..p };
                if !valid(q) {
                    continue;
                }
                let eq = sse_at(shape, q, pts);
                if eq < e {
                    (p, e, improved) = (q, eq, true);
                }
            }
            if !improved {
                if st <= 1 && sd <= 1 {
                    break;
                }
                st = if st == 0 { 0 } else { (st / 2).max(1) };
                sd = if sd == 0 { 0 } else { (sd / 2).max(1) };
            }
        }
        (p, e)
    };
    if !valid(p0) {
        return None;
    }
    let (mut p, mut e) = inner(p0);
    let mut sw = if start.is_some() {
        2
    } else {
        (sp.w_hi / 24).max(1)
    };
    for _ in 0..200 {
        let mut improved = false;
        for sign in [-1i8, 1] {
            let Some(w) = shift(p.w, sw, sign) else {
                continue;
            };
            if w < w_min || w > sp.w_hi {
                continue;
            }
            // Keep the decay's end where it was: move the total with the warmup if needed.
            let mut q = Params { w, ..p };
            if needs_t && q.t <= q.w {
                continue;
            }
            if wsd && q.d > q.t - q.w {
                q.d = q.t - q.w;
            }
            let (q, eq) = inner(q);
            if eq < e {
                (p, e, improved) = (q, eq, true);
            }
        }
        if !improved {
            if sw <= 1 {
                break;
            }
            sw = (sw / 2).max(1);
        }
    }
    let mut s = schedule_of(shape, p);
    let (peak, min, _) = solve(&s, pts, None);
    if peak <= 0.0 || !peak.is_finite() {
        return None;
    }
    s.peak_lr = peak;
    s.min_lr = min;
    Some((s, p, e))
}

/// The fitted numbers as people write them: the peak and min with fewer digits, warmup,
/// total and decay rounded, each kept only when the curve stays as close (see
/// [`ROUNDING_SHARE`]). A fitted total is never rounded below the log's last step.
fn rounder(
    s: ScheduleConfig,
    pts: &[(u64, f64)],
    total_declared: bool,
    last: u64,
) -> ScheduleConfig {
    let exact = |c: &ScheduleConfig| {
        score(
            &ScheduleConfig {
                step_slack: 0,
                ..c.clone()
            },
            pts,
        )
    };
    let base = exact(&s);
    let slack_base = score(&s, pts);
    // A log that is not exact anyway (a lag that varies, as HF's under AMP: 2-4 steps) may
    // also round where the critic's step slack covers the change.
    let inexact = base.rms > NOT_EXACT;
    let ok = |c: &ScheduleConfig| {
        let sc = exact(c);
        let exact_ok = sc.rms <= base.rms + (ROUNDING_SHARE * base.rms).max(ROUNDING_FLOOR)
            && sc.max_dev
                <= base.max_dev + (ROUNDING_SHARE * base.max_dev).max(2.0 * ROUNDING_FLOOR);
        exact_ok || {
            let sl = score(c, pts);
            inexact
                && sl.max_dev <= slack_base.max_dev + 2.0 * ROUNDING_FLOOR
                && sl.rms <= slack_base.rms + ROUNDING_FLOOR
        }
    };
    let mut s = s;
    if let Some(c) = round_unseen_linear(&s, pts).filter(|c| ok(c)) {
        s = c;
    }
    // Peak first (min re-solved for it), then min, then the steps.
    let raw_peak = s.peak_lr;
    for sig in [2, 3, 4, 6] {
        let mut c = s.clone();
        c.peak_lr = round_sig(raw_peak, sig);
        if has_floor(c.kind) {
            let shape = ScheduleConfig {
                peak_lr: 1.0,
                min_lr: 0.0,
                ..c.clone()
            };
            c.min_lr = solve(&shape, pts, Some(c.peak_lr)).1;
        }
        if ok(&c) {
            s = c;
            break;
        }
    }
    if has_floor(s.kind) {
        let raw_min = s.min_lr;
        let candidates = [
            0.0,
            round_sig(raw_min, 1),
            round_sig(raw_min, 2),
            round_sig(raw_min, 3),
        ];
        for m in candidates {
            let c = ScheduleConfig {
                min_lr: m,
                ..s.clone()
            };
            if ok(&c) {
                s = c;
                break;
            }
        }
    }
    if let Some(p) = s.pct_start {
        if let Some(c) = [100.0, 1000.0]
            .iter()
            .map(|k| ScheduleConfig {
                pct_start: Some((p * k).round() / k),
                ..s.clone()
            })
            .find(|c| c.pct_start != Some(p) && ok(c))
        {
            s = c;
        }
    }
    // A staircase's milestones count from the warmup's end: its drops stay where they are.
    let with_warmup = |s: &ScheduleConfig, w: u64| ScheduleConfig {
        warmup_steps: w,
        milestones: s.milestones.as_ref().map(|m| {
            m.iter()
                .map(|&x| (x + s.warmup_steps).saturating_sub(w))
                .collect()
        }),
        ..s.clone()
    };
    if let Some(w) = rounder_steps(s.warmup_steps)
        .into_iter()
        .find(|&w| s.total_steps.is_none_or(|t| w < t) && ok(&with_warmup(&s, w)))
    {
        s = with_warmup(&s, w);
    }
    if let Some(t) = s.total_steps.filter(|_| !total_declared) {
        // Never rounded below the log's last step (the run would seem to overrun it).
        if let Some(r) = rounder_steps(t).into_iter().find(|&r| {
            (r >= last || t < last)
                && r > s.warmup_steps
                && ok(&ScheduleConfig {
                    total_steps: Some(r),
                    ..s.clone()
                })
        }) {
            s.total_steps = Some(r);
        }
    }
    if let (Some(d), Some(t)) = (s.decay_steps, s.total_steps) {
        if let Some(r) = rounder_steps(d).into_iter().find(|&r| {
            r <= t - s.warmup_steps
                && ok(&ScheduleConfig {
                    decay_steps: Some(r),
                    ..s.clone()
                })
        }) {
            s.decay_steps = Some(r);
        }
    }
    s
}

/// Rounder step counts within 1% of `n`, roundest first (19564: 19500, 19600, 19550, 19560,
/// 19570).
fn rounder_steps(n: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for unit in [1000, 500, 100, 50, 10] {
        for r in [n / unit * unit, (n / unit + 1) * unit] {
            if r > 0
                && r != n
                && (r as f64 - n as f64).abs() <= 0.01 * n as f64
                && !out.contains(&r)
            {
                out.push(r);
            }
        }
    }
    out
}

/// A linear decay logged only after its warmup fixes its slope `k` and floor, not where it
/// began: every warmup `w` in `0..=first step` with peak `min + k·(total - w)` is the same
/// line. Pick the one whose peak is the roundest number (1, then 2, then 3 significant
/// digits) at a whole step, as the trainer's config most likely said it.
fn round_unseen_linear(s: &ScheduleConfig, pts: &[(u64, f64)]) -> Option<ScheduleConfig> {
    let first = pts.first()?.0;
    let t = s.total_steps?;
    if s.kind != ScheduleKind::Linear || first < s.warmup_steps || t <= first {
        return None;
    }
    let k = (s.peak_lr - s.min_lr) / (t - s.warmup_steps) as f64;
    if k.is_nan() || k <= 0.0 {
        return None;
    }
    let peak_at = |w: u64| s.min_lr + k * (t - w) as f64;
    let (lo, hi) = (peak_at(first.min(t - 1)), peak_at(0));
    for sig in 1..=3 {
        let unit = 10f64.powi(hi.log10().floor() as i32 - sig + 1);
        let mut n = (lo / unit).ceil();
        while n * unit <= hi * (1.0 + 1e-12) {
            let p = round_sig(n * unit, sig);
            let w = t as f64 - (p - s.min_lr) / k;
            if w >= -1e-6 && (w - w.round()).abs() < 1e-3 && w.round() as u64 <= first {
                return Some(ScheduleConfig {
                    peak_lr: p,
                    warmup_steps: w.round() as u64,
                    ..s.clone()
                });
            }
            n += 1.0;
        }
    }
    None
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

/// Warmup length from the rising samples when the log ends before the peak: least squares
/// of `lr = peak·step/warmup` with the highest logged lr as the peak so far.
fn warmup_from_rise(pts: &[(u64, f64)], peak: f64) -> u64 {
    let (mut ss, mut sl) = (0.0, 0.0);
    for &(step, lr) in pts {
        ss += (step as f64) * (step as f64);
        sl += step as f64 * lr;
    }
    if sl <= 0.0 {
        return pts[pts.len() - 1].0;
    }
    (peak * ss / sl).round().max(1.0) as u64
}

/// `n + 1` values from `lo` to `hi`, evenly spaced on a log scale.
fn geometric(lo: u64, hi: u64, n: u32) -> Vec<u64> {
    let (lo, hi) = (lo.max(1) as f64, hi.max(lo + 1) as f64);
    let mut v: Vec<u64> = (0..=n)
        .map(|i| (lo * (hi / lo).powf(f64::from(i) / f64::from(n))).round() as u64)
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
    use std::f64::consts::PI;

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

    /// The worst sample of `pts` off the fitted curve, as a fraction of peak (no slack).
    fn worst(s: &ScheduleConfig, pts: &[(u64, f64)]) -> f64 {
        pts.iter()
            .map(|&(st, lr)| (schedule::expected(s, st) - lr).abs() / s.peak_lr)
            .fold(0.0, f64::max)
    }

    /// Issue 29: peak and warmup are parameters of the fit, not the highest logged lr and
    /// "0 when the first lr is at least half the peak". A log that starts late in the warmup,
    /// after it, or at an already decayed lr gets the exact schedule back.
    #[test]
    fn fits_exactly_when_logging_starts_late_after_warmup_or_decayed() {
        for kind in [ScheduleKind::Cosine, ScheduleKind::Linear] {
            for min in [0.0, 5e-6] {
                let t = ScheduleConfig {
                    kind,
                    peak_lr: 5e-5,
                    min_lr: min,
                    warmup_steps: 109,
                    total_steps: Some(2178),
                    ..Default::default()
                };
                for from in [80u64, 100, 300, 1200] {
                    let pts: Vec<(u64, f64)> = (from / 5..=2178 / 5)
                        .map(|i| (i * 5, schedule::expected(&t, i * 5)))
                        .collect();
                    for declared in [Some(2178), None] {
                        let what = format!("{kind:?} min {min} from {from} total {declared:?}");
                        let FitOutcome::Fitted(f) = fit(&pts, declared) else {
                            panic!("{what}: refused: {:?}", fit(&pts, declared));
                        };
                        let s = &f.schedule;
                        // Exact to print precision: 1e-5 of peak is 200x below the tightest
                        // tolerance proposed (with the total declared it is ~1e-12).
                        let off = worst(s, &pts);
                        assert!(off < 1e-5, "{what}: worst {off:e}: {s:?}");
                        if declared.is_some() && from < 1200 {
                            assert!(off < 1e-9, "{what}: worst {off:e}: {s:?}");
                        }
                        assert_eq!(f.warmup_unseen, from >= s.warmup_steps, "{what}");
                        // A straight line cannot say where it started: after the warmup a
                        // linear decay fixes only its slope (and with the total, its floor).
                        if kind == ScheduleKind::Linear && declared.is_none() {
                            // As above, and a line's end and floor trade off too.
                            assert_eq!((s.kind, s.peak_lr), (kind, 5e-5), "{what}: {s:?}");
                            continue;
                        }
                        if kind == ScheduleKind::Linear && from > 109 {
                            if declared.is_some() {
                                assert!((s.min_lr - min).abs() < 1e-12, "{what}: {s:?}");
                            }
                            continue;
                        }
                        // The second half of a cosine alone barely says where it began or
                        // ends (four numbers from a gentle curve): the curve is exact, the
                        // numbers need the declared total.
                        if from >= 1200 && declared.is_none() {
                            continue;
                        }
                        assert_eq!(s.kind, kind, "{what}");
                        assert_eq!(s.peak_lr, 5e-5, "{what}");
                        assert_eq!(s.total_steps, Some(2178), "{what}: {s:?}");
                        assert!((s.min_lr - min).abs() < 1e-12, "{what}: {s:?}");
                        if from < 109 || kind == ScheduleKind::Cosine {
                            assert_eq!(s.warmup_steps, 109, "{what}: {s:?}");
                        }
                    }
                }
            }
        }
    }

    /// Issue 29: an llm.c run (lr printed to 6 decimals, no total in the log) got a round
    /// total short of the last step its log reached, and the critic said the run had reached
    /// total_steps. A fitted total is rounded only where the curve allows it, and never below
    /// the log's last step.
    #[test]
    fn a_fitted_total_is_never_rounded_short_of_the_log() {
        let t = ScheduleConfig {
            kind: ScheduleKind::Cosine,
            peak_lr: 6e-4,
            warmup_steps: 700,
            total_steps: Some(19560),
            ..Default::default()
        };
        let printed = |x: f64| (x * 1e6).round() / 1e6;
        let pts: Vec<(u64, f64)> = (0..=1956u64)
            .map(|i| (i * 10, printed(schedule::expected(&t, i * 10))))
            .collect();
        let FitOutcome::Fitted(f) = fit(&pts, None) else {
            panic!()
        };
        let total = f.schedule.total_steps.unwrap();
        assert!((19560..=19600).contains(&total), "{:?}", f.schedule);
        assert_eq!(f.schedule.kind, ScheduleKind::Cosine);
        assert_eq!(f.schedule.warmup_steps, 700, "{:?}", f.schedule);
    }

    /// Issue 37 point 6: mmseg's `PolyLR` (power 0.9, floor 1e-4) over 80k iterations, and
    /// a squared decay with a warmup, come back as polynomials with their power; an exact
    /// linear decay stays linear (power 1 is the simpler kind).
    #[test]
    fn polynomial_decays_are_fitted_with_their_power() {
        for (power, warmup, peak, min) in [(0.9, 0, 0.01, 1e-4), (2.0, 500, 3e-4, 0.0)] {
            let t = ScheduleConfig {
                kind: ScheduleKind::Polynomial,
                peak_lr: peak,
                min_lr: min,
                warmup_steps: warmup,
                total_steps: Some(80000),
                power: Some(power),
                ..Default::default()
            };
            let pts: Vec<(u64, f64)> = (0..=1600u64)
                .map(|i| (i * 50, schedule::expected(&t, i * 50)))
                .collect();
            let FitOutcome::Fitted(f) = fit(&pts, None) else {
                panic!("power {power}: refused")
            };
            let s = &f.schedule;
            assert_eq!(
                (s.kind, s.power),
                (ScheduleKind::Polynomial, Some(power)),
                "{s:?}"
            );
            assert_eq!(s.total_steps, Some(80000), "{s:?}");
            assert!((s.peak_lr - peak).abs() <= 1e-3 * peak, "{s:?}");
            assert!(f.rms < 1e-3, "{}", f.rms);
        }
        let linear = ScheduleConfig {
            kind: ScheduleKind::Linear,
            peak_lr: 1e-3,
            warmup_steps: 100,
            total_steps: Some(5000),
            ..Default::default()
        };
        let FitOutcome::Fitted(f) = fit(&sample(&linear, 10, 5000), None) else {
            panic!()
        };
        assert_eq!(f.schedule.kind, ScheduleKind::Linear, "{:?}", f.schedule);
    }

    #[test]
    fn wsd_and_inverse_sqrt_are_fitted_too() {
        let wsd = ScheduleConfig {
            kind: ScheduleKind::Wsd,
            peak_lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: 100,
            total_steps: Some(3000),
            decay_steps: Some(600),
            ..Default::default()
        };
        // Logged past the end (the floor pins where the decay ends).
        let FitOutcome::Fitted(f) = fit(&sample(&wsd, 10, 3300), None) else {
            panic!()
        };
        let s = &f.schedule;
        assert_eq!(
            (
                s.kind,
                s.peak_lr,
                s.min_lr,
                s.warmup_steps,
                s.total_steps,
                s.decay_steps
            ),
            (ScheduleKind::Wsd, 1e-3, 1e-4, 100, Some(3000), Some(600)),
            "{s:?}"
        );
        let inv = ScheduleConfig {
            kind: ScheduleKind::InverseSqrt,
            peak_lr: 7e-4,
            warmup_steps: 4000,
            ..Default::default()
        };
        let FitOutcome::Fitted(f) = fit(&sample(&inv, 50, 20000), None) else {
            panic!()
        };
        let s = &f.schedule;
        assert_eq!(
            (s.kind, s.peak_lr, s.warmup_steps),
            (ScheduleKind::InverseSqrt, 7e-4, 4000),
            "{s:?}"
        );
        // Logged from step 6000, after the warmup: only peak x sqrt(warmup) shows, and the
        // curve is still exact.
        let late: Vec<(u64, f64)> = (120..400u64)
            .map(|i| (i * 50, schedule::expected(&inv, i * 50)))
            .collect();
        let FitOutcome::Fitted(f) = fit(&late, None) else {
            panic!()
        };
        assert_eq!(
            f.schedule.kind,
            ScheduleKind::InverseSqrt,
            "{:?}",
            f.schedule
        );
        let off = worst(&f.schedule, &late);
        assert!(off < 1e-5, "worst {off:e}: {:?}", f.schedule);
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
            assert!(
                worst(&f.schedule, &sample(&t, 10, 5000)) < 1e-6,
                "{:?}",
                f.schedule
            );
            if kind == ScheduleKind::Cosine {
                assert_eq!(f.schedule.total_steps, Some(5000), "{:?}", f.schedule);
                assert!((f.schedule.min_lr - 6e-5).abs() < 1e-12, "{:?}", f.schedule);
            } else {
                // A line ending at the log's last step: its end and floor trade off (any
                // pair on the same line fits exactly); a declared total settles them.
                let FitOutcome::Fitted(f) = fit(&sample(&t, 10, 5000), Some(5000)) else {
                    panic!()
                };
                assert!((f.schedule.min_lr - 6e-5).abs() < 1e-12, "{:?}", f.schedule);
            }
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
        assert_eq!(rounder_steps(4998), vec![5000, 4950, 4990]);
        assert_eq!(
            rounder_steps(19564),
            vec![19500, 19600, 19550, 19560, 19570]
        );
        assert_eq!(rounder_steps(4321), vec![4300, 4350, 4320, 4330]);
        assert!(rounder_steps(12).is_empty());
        assert_eq!(tolerance_for(0.0), 0.002);
        assert_eq!(tolerance_for(0.005), 0.01);
        assert_eq!(tolerance_for(0.03), 0.06);
    }

    /// Ultralytics' own arithmetic (ultralytics/engine/trainer.py), iteration by iteration:
    /// the warmup interpolates from 0 to lr0·lf(epoch) over max(warmup_epochs × nb, 100)
    /// iterations, results.csv logs each epoch's last lr with the epoch counted from 1.
    fn yolo_csv(
        cos: bool,
        lr0: f64,
        lrf: f64,
        epochs: u64,
        warmup: f64,
        nb: u64,
    ) -> Vec<(u64, f64)> {
        let lf = |e: f64| {
            if cos {
                ((1.0 - (e * PI / epochs as f64).cos()) / 2.0) * (lrf - 1.0) + 1.0
            } else {
                (1.0 - e / epochs as f64).max(0.0) * (1.0 - lrf) + lrf
            }
        };
        let nw = ((warmup * nb as f64).round() as u64).max(100);
        (0..epochs)
            .map(|e| {
                let ni = (e + 1) * nb - 1;
                let target = lr0 * lf(e as f64);
                let lr = if ni <= nw {
                    target * ni as f64 / nw as f64
                } else {
                    target
                };
                (e + 1, lr)
            })
            .collect()
    }

    #[test]
    fn yolo_curves_are_fitted_as_yolo_computes_them() {
        let yolo = Hints {
            yolo: true,
            zero_based: false,
        };
        // (cos_lr, lr0, lrf, epochs, warmup_epochs, batches per epoch): a long warmup where
        // 100 iterations outlast 3 epochs, and the usual 3 epochs.
        for (cos, lr0, lrf, epochs, warmup, nb) in [
            (false, 0.01, 0.01, 100, 3.0, 200),
            (false, 1.667e-3, 0.01, 150, 3.0, 3),
            (true, 0.01, 0.01, 80, 3.0, 150),
            (true, 2e-3, 0.1, 300, 5.0, 500),
        ] {
            let pts = yolo_csv(cos, lr0, lrf, epochs, warmup, nb);
            let what =
                format!("cos {cos} lr0 {lr0} lrf {lrf} epochs {epochs} warmup {warmup} nb {nb}");
            let FitOutcome::Fitted(f) = fit_with(&pts, Some(epochs), &yolo) else {
                panic!("{what}: refused: {:?}", fit_with(&pts, Some(epochs), &yolo));
            };
            let s = &f.schedule;
            let want = if cos {
                ScheduleKind::YoloCos
            } else {
                ScheduleKind::YoloLinear
            };
            assert_eq!(s.kind, want, "{what}: {s:?}");
            assert!(
                (s.peak_lr - lr0).abs() <= 0.03 * lr0,
                "{what}: peak {}",
                s.peak_lr
            );
            assert!(
                (s.min_lr - lr0 * lrf).abs() <= 0.02 * lr0,
                "{what}: min {}",
                s.min_lr
            );
            assert_eq!(s.total_steps, Some(epochs), "{what}");
            let true_w = (100.0f64.max(warmup * nb as f64) / nb as f64).ceil() as u64;
            assert!(
                s.warmup_steps.abs_diff(true_w) <= 1,
                "{what}: warmup {} for {true_w}",
                s.warmup_steps
            );
            // Without the hint the kind is not proposed: no LLM log becomes a YOLO curve.
            if let FitOutcome::Fitted(g) = fit(&pts, Some(epochs)) {
                assert!(!is_yolo(g.schedule.kind), "{what}");
            }
        }
        // A log counting from 0 declares its last epoch: the fit's total is still `epochs`.
        let pts: Vec<(u64, f64)> = yolo_csv(false, 0.01, 0.01, 50, 3.0, 200)
            .into_iter()
            .map(|(x, lr)| (x - 1, lr))
            .collect();
        let zero = Hints {
            yolo: true,
            zero_based: true,
        };
        let FitOutcome::Fitted(f) = fit_with(&pts, Some(49), &zero) else {
            panic!("zero-based refused: {:?}", fit_with(&pts, Some(49), &zero));
        };
        assert!(is_yolo(f.schedule.kind), "{:?}", f.schedule);
        assert_eq!(f.schedule.total_steps, Some(50));
    }

    #[test]
    fn one_cycle_is_fitted_with_its_rise() {
        for (peak, pct, total, every, declared) in [
            (3e-3, 0.25, 4000u64, 10u64, None),
            (1e-2, 0.3, 1170, 5, Some(1170)),
            (4e-4, 0.1, 20_000, 50, None),
        ] {
            let t = ScheduleConfig {
                kind: ScheduleKind::OneCycle,
                peak_lr: peak,
                pct_start: Some(pct),
                total_steps: Some(total),
                ..Default::default()
            };
            let pts = sample(&t, every, total);
            let what = format!("peak {peak} pct {pct} total {total} every {every}");
            let FitOutcome::Fitted(f) = fit(&pts, declared) else {
                panic!("{what}: refused: {:?}", fit(&pts, declared));
            };
            let s = &f.schedule;
            assert_eq!(s.kind, ScheduleKind::OneCycle, "{what}: {s:?}");
            assert!((s.peak_lr - peak).abs() <= 0.01 * peak, "{what}: {s:?}");
            let got_pct = s.pct_start.unwrap();
            assert!((got_pct - pct).abs() <= 0.01, "{what}: {s:?}");
            let got_t = s.total_steps.unwrap() as f64;
            assert!(
                (got_t - total as f64).abs() <= 0.01 * total as f64,
                "{what}: {s:?}"
            );
            assert_eq!((s.warmup_steps, s.min_lr), (0, 0.0), "{what}");
            assert!(!f.warmup_unseen, "{what}");
        }
        // A cosine with a linear warmup stays a cosine.
        let FitOutcome::Fitted(f) = fit(&sample(&truth(ScheduleKind::Cosine), 10, 5000), None)
        else {
            panic!("cosine refused");
        };
        assert_eq!(f.schedule.kind, ScheduleKind::Cosine);
    }
}
