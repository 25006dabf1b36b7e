//! Learning-rate schedules: the expected `lr(step)` of `[schedule]`, and its range over a few
//! neighbouring steps (trainers log the LR of a step or two before or after the one they
//! print). Kinds follow the PyTorch and Hugging Face schedulers they are named after (see
//! `reference_tests.rs`, which checks each against their documented formula). All but
//! one-cycle (which rises on its own) and plateau (no curve) have a linear warmup from 0 to
//! `peak_lr` over `warmup_steps`, and their decay counts from its end. With `steps_per_epoch`
//! the scheduler is stepped per epoch: the curve is held from each epoch's first step.

pub mod plateau;
#[cfg(test)]
mod reference_tests;

use crate::config::{Anneal, DecayShape, ScheduleConfig, ScheduleKind};
use std::f64::consts::PI;

/// The LR the schedule prescribes at `step`.
pub fn expected(s: &ScheduleConfig, step: u64) -> f64 {
    let step = match s.steps_per_epoch {
        Some(n) if n > 0 => step / n * n,
        _ => step,
    };
    curve(s, step)
}

fn curve(s: &ScheduleConfig, step: u64) -> f64 {
    let (peak, min, w) = (s.peak_lr, s.min_lr, s.warmup_steps);
    if s.kind == ScheduleKind::OneCycle {
        return one_cycle(s, step);
    }
    if matches!(s.kind, ScheduleKind::YoloLinear | ScheduleKind::YoloCos) {
        return yolo(s, step);
    }
    if step < w {
        return peak * step as f64 / w as f64;
    }
    let total = s.total_steps.unwrap_or(u64::MAX);
    let progress = |from: u64, len: u64| -> f64 {
        if len == 0 {
            1.0
        } else {
            ((step - from) as f64 / len as f64).min(1.0)
        }
    };
    let decay = |f: f64| min + (peak - min) * f;
    let since = step - w;
    match s.kind {
        ScheduleKind::Constant
        | ScheduleKind::Plateau
        | ScheduleKind::OneCycle
        | ScheduleKind::YoloLinear
        | ScheduleKind::YoloCos => peak,
        ScheduleKind::Cosine => decay(0.5 * (1.0 + (PI * progress(w, total - w)).cos())),
        ScheduleKind::Linear => decay(1.0 - progress(w, total - w)),
        ScheduleKind::Wsd => {
            let d = s.decay_steps.unwrap_or(0).min(total - w);
            let start = total - d;
            if step < start {
                peak
            } else {
                let p = progress(start, d);
                decay(match s.decay_shape {
                    DecayShape::Linear => 1.0 - p,
                    DecayShape::Cosine => 0.5 * (1.0 + (PI * p).cos()),
                    DecayShape::Sqrt => 1.0 - p.sqrt(),
                })
            }
        }
        ScheduleKind::InverseSqrt => {
            let lr = peak * ((w.max(1)) as f64 / step.max(1) as f64).sqrt();
            lr.max(min)
        }
        ScheduleKind::Polynomial => {
            let remaining = 1.0 - progress(w, total - w);
            decay(remaining.powf(s.power.unwrap_or(1.0)))
        }
        ScheduleKind::Step => {
            let drops = since / s.step_size.unwrap_or(u64::MAX).max(1);
            peak * s.gamma.unwrap_or(0.1).powf(drops as f64)
        }
        ScheduleKind::MultiStep => {
            let ms = s.milestones.as_deref().unwrap_or_default();
            let drops = ms.iter().filter(|&&m| m <= since).count();
            peak * s.gamma.unwrap_or(0.1).powi(drops as i32)
        }
        ScheduleKind::CosineRestarts => {
            if step >= total {
                return min;
            }
            // Position inside the current cycle, in integers: exact at the restarts.
            let len = u128::from(total - w);
            let pos = (u128::from(since) * u128::from(s.num_cycles.unwrap_or(1))) % len;
            decay(0.5 * (1.0 + (PI * pos as f64 / len as f64).cos()))
        }
        ScheduleKind::Sgdr => {
            let t0 = s.t_0.unwrap_or(1).max(1);
            let mult = s.t_mult.unwrap_or(1).max(1);
            let (mut t, mut len) = (since, t0);
            if mult == 1 {
                t %= t0;
            } else {
                while t >= len {
                    t -= len;
                    len = len.saturating_mul(mult);
                }
            }
            decay(0.5 * (1.0 + (PI * t as f64 / len as f64).cos()))
        }
    }
}

/// PyTorch OneCycleLR (two phases): from peak/div_factor up to peak over the first
/// `pct_start` of the steps, then down to peak/div_factor/final_div_factor at the last step.
fn one_cycle(s: &ScheduleConfig, step: u64) -> f64 {
    let total = s.total_steps.unwrap_or(1).max(2) as f64;
    let initial = s.peak_lr / s.div_factor.unwrap_or(25.0);
    let last = initial / s.final_div_factor.unwrap_or(1e4);
    let up_end = s.pct_start.unwrap_or(0.3) * total - 1.0;
    let x = step as f64;
    if x >= total - 1.0 {
        return last;
    }
    let (from, to, start, end) = if x <= up_end {
        (initial, s.peak_lr, 0.0, up_end)
    } else {
        (s.peak_lr, last, up_end, total - 1.0)
    };
    let pct = (x - start) / (end - start);
    match s.anneal.unwrap_or(Anneal::Cos) {
        Anneal::Cos => to + (from - to) / 2.0 * ((PI * pct).cos() + 1.0),
        Anneal::Linear => (to - from) * pct + from,
    }
}

/// Ultralytics YOLO (ultralytics/engine/trainer.py): `LambdaLR` with `lf(e) = (1 - e/E)(1 -
/// lrf) + lrf` (or `one_cycle(1, lrf, E)`, a cosine, with `cos_lr`) of the 0-based epoch `e`,
/// stepped once per epoch, so the decay runs from epoch 0. The warmup interpolates every
/// iteration from 0 to `lr0·lf(e)` over `max(warmup_epochs × batches, 100)` iterations: a ramp
/// over the decayed curve, not a rise to the peak. results.csv counts epochs from 1 and logs
/// the lr at the end of each: epoch `x` shows `lf(x - 1)` × `min(1, x / warmup)`. (YOLOv5 and
/// early v8 count from 0 and log a step apart; the critic's step slack covers them.)
fn yolo(s: &ScheduleConfig, step: u64) -> f64 {
    let epochs = s.total_steps.unwrap_or(1).max(1) as f64;
    let p = (step.saturating_sub(1) as f64 / epochs).min(1.0);
    let f = match s.kind {
        ScheduleKind::YoloCos => 0.5 * (1.0 + (PI * p).cos()),
        _ => 1.0 - p,
    };
    let ramp = if s.warmup_steps == 0 {
        1.0
    } else {
        (step as f64 / s.warmup_steps as f64).min(1.0)
    };
    ramp * (s.min_lr + (s.peak_lr - s.min_lr) * f)
}

/// (min, max) of the expected LR over steps `[from, to]`: every step in it is evaluated
/// (the span is `2 × step_slack + 1`, at most 20001 steps), so jumps and restarts inside
/// it are never missed.
pub fn range(s: &ScheduleConfig, from: u64, to: u64) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for step in from..=to.max(from) {
        let v = expected(s, step);
        lo = lo.min(v);
        hi = hi.max(v);
    }
    (lo, hi)
}

/// How far `lr` at `step` is from the schedule, allowing ±`step_slack` steps: 0 inside the
/// range of expected values, else the distance to it. Also returns that range.
pub fn deviation(s: &ScheduleConfig, step: u64, lr: f64) -> (f64, (f64, f64)) {
    let (lo, hi) = range(
        s,
        step.saturating_sub(s.step_slack),
        step.saturating_add(s.step_slack),
    );
    let d = if lr.is_nan() {
        f64::INFINITY
    } else if lr < lo {
        lo - lr
    } else if lr > hi {
        lr - hi
    } else {
        0.0
    };
    (d, (lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(kind: ScheduleKind) -> ScheduleConfig {
        ScheduleConfig {
            kind,
            peak_lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: 100,
            total_steps: Some(1100),
            decay_steps: Some(200),
            decay_shape: DecayShape::Linear,
            ..Default::default()
        }
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn warmup_is_linear_from_zero() {
        let s = sched(ScheduleKind::Cosine);
        close(expected(&s, 0), 0.0);
        close(expected(&s, 50), 5e-4);
        close(expected(&s, 100), 1e-3);
    }

    #[test]
    fn cosine_by_hand() {
        let s = sched(ScheduleKind::Cosine);
        // Mid-decay: cos(pi/2) = 0 → halfway between peak and min.
        close(expected(&s, 600), 1e-4 + 0.9e-3 * 0.5);
        // A quarter in: 0.5·(1 + cos(pi/4)) = 0.853553...
        close(
            expected(&s, 350),
            1e-4 + 0.9e-3 * 0.5 * (1.0 + (PI / 4.0).cos()),
        );
        close(expected(&s, 1100), 1e-4);
        close(expected(&s, 5000), 1e-4);
    }

    #[test]
    fn linear_constant_wsd_inverse_sqrt_by_hand() {
        close(expected(&sched(ScheduleKind::Linear), 600), 5.5e-4);
        close(expected(&sched(ScheduleKind::Constant), 9999), 1e-3);
        let wsd = sched(ScheduleKind::Wsd);
        close(expected(&wsd, 899), 1e-3);
        close(expected(&wsd, 1000), 5.5e-4); // halfway through the 200-step decay
        let mut sqrt = wsd.clone();
        sqrt.decay_shape = DecayShape::Sqrt;
        close(expected(&sqrt, 950), 1e-4 + 0.9e-3 * 0.5);
        let inv = sched(ScheduleKind::InverseSqrt);
        close(expected(&inv, 400), 5e-4); // 1e-3·sqrt(100/400)
        close(expected(&inv, 1_000_000), 1e-4); // floored at min_lr
    }

    #[test]
    fn slack_covers_neighbouring_steps_and_the_peak() {
        let s = sched(ScheduleKind::Cosine);
        // Logged lr of step 48 printed at step 50.
        assert_eq!(deviation(&s, 50, 4.8e-4).0, 0.0);
        assert!(deviation(&s, 50, 4.5e-4).0 > 0.0);
        // Around the warmup end the max is the peak itself.
        assert_eq!(range(&s, 98, 102).1, 1e-3);
        assert_eq!(deviation(&s, 100, f64::NAN).0, f64::INFINITY);
    }
}
