//! Learning-rate schedules: the expected `lr(step)` of `[schedule]`, and its range over a few
//! neighbouring steps (trainers log the LR of a step or two before or after the one they
//! print). Every kind has a linear warmup from 0 to `peak_lr` over `warmup_steps`.

use crate::config::{DecayShape, ScheduleConfig, ScheduleKind};
use std::f64::consts::PI;

/// The LR the schedule prescribes at `step`.
pub fn expected(s: &ScheduleConfig, step: u64) -> f64 {
    let (peak, min, w) = (s.peak_lr, s.min_lr, s.warmup_steps);
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
    match s.kind {
        ScheduleKind::Constant => peak,
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
    }
}

/// Steps where the curve changes direction or shape; between them it is monotone.
fn breakpoints(s: &ScheduleConfig) -> Vec<u64> {
    let mut b = vec![s.warmup_steps];
    if let Some(t) = s.total_steps {
        b.push(t);
        if s.kind == ScheduleKind::Wsd {
            b.push(t.saturating_sub(s.decay_steps.unwrap_or(0)));
        }
    }
    b
}

/// (min, max) of the expected LR over steps `[from, to]`. The curve is monotone between
/// breakpoints, so the ends and the breakpoints inside are enough.
pub fn range(s: &ScheduleConfig, from: u64, to: u64) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    let candidates = breakpoints(s)
        .into_iter()
        .filter(|b| (from..=to).contains(b))
        .chain([from, to]);
    for step in candidates {
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
            tolerance: 0.02,
            step_slack: 2,
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
