//! Fitting a staircase lr (torch `StepLR`/`MultiStepLR`, detectron2 `WarmupMultiStepLR`):
//! flat levels after the peak, each one the same factor below the last. The drops are found
//! in the log, not searched for: a level is a run of samples within 2% of its first, and a
//! drop is a fall of more than 10% that the next level holds. Pure; scored by the caller with
//! the critic's own curve like every other kind.

use crate::config::{ScheduleConfig, ScheduleKind};

/// A sample within this share of its level's first is on that level.
const FLAT: f64 = 0.02;
/// A level below the one before by more than this share is a drop.
const DROP: f64 = 0.10;
/// Every drop's factor within this share of their median: one `gamma` serves all.
const SAME_GAMMA: f64 = 0.10;

/// One flat stretch: its first step, the step of the sample before it, and its values.
struct Level {
    first: u64,
    before: u64,
    values: Vec<f64>,
}

/// A `step` or `multistep` schedule through `pts` (sorted by step, finite), or None when
/// the lr after its peak is not a staircase of at least one drop by a common factor.
/// Warmup is the linear rise's fit (0 when the log starts on the peak); milestones count
/// from the warmup's end, as the critic's curve does, and each is the roundest step between
/// the last sample of one level and the first of the next.
pub fn fit(pts: &[(u64, f64)], step_slack: u64, tolerance: f64) -> Option<ScheduleConfig> {
    let max = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    // Half the flat band, so the peak's level starts within it of the peak itself.
    let top = pts.iter().position(|p| p.1 >= (1.0 - FLAT / 2.0) * max)?;
    let mut levels: Vec<Level> = Vec::new();
    let mut before = pts[top].0;
    for &(step, lr) in &pts[top..] {
        match levels.last_mut() {
            Some(l) if (lr - l.values[0]).abs() <= FLAT * l.values[0] => l.values.push(lr),
            _ => levels.push(Level {
                first: step,
                before,
                values: vec![lr],
            }),
        }
        before = step;
    }
    // A level of one sample is noise, except the newest (a drop just logged).
    let n = levels.len();
    if n < 2 || levels[..n - 1].iter().any(|l| l.values.len() < 2) {
        return None;
    }
    let value: Vec<f64> = levels.iter().map(|l| median(&l.values)).collect();
    let ratios: Vec<f64> = value.windows(2).map(|w| w[1] / w[0]).collect();
    if ratios.iter().any(|r| !(*r > 0.0 && *r < 1.0 - DROP)) {
        return None;
    }
    let gamma = median(&ratios);
    if ratios
        .iter()
        .any(|r| (r - gamma).abs() > SAME_GAMMA * gamma)
    {
        return None;
    }
    let rise: Vec<(u64, f64)> = pts[..top].iter().copied().filter(|p| p.0 > 0).collect();
    let warmup = if rise.is_empty() {
        0
    } else {
        let (ss, sl) = rise.iter().fold((0.0, 0.0), |(ss, sl), &(s, lr)| {
            (ss + (s as f64).powi(2), sl + s as f64 * lr)
        });
        (value[0] * ss / sl).round() as u64
    };
    let milestones: Vec<u64> = levels[1..]
        .iter()
        .map(|l| roundest(l.before + 1, l.first).saturating_sub(warmup))
        .collect();
    let k = milestones[0];
    // Periodic only where the log shows it: one drop says nothing of the next.
    let even = k > 0
        && milestones.len() >= 2
        && milestones
            .iter()
            .enumerate()
            .all(|(i, &m)| m == k * (i as u64 + 1));
    Some(ScheduleConfig {
        kind: if even {
            ScheduleKind::Step
        } else {
            ScheduleKind::MultiStep
        },
        peak_lr: super::fit::round_sig(value[0], 3),
        min_lr: 0.0,
        warmup_steps: warmup,
        step_size: even.then_some(k),
        milestones: (!even).then_some(milestones),
        gamma: Some(super::fit::round_sig(gamma, 2)),
        tolerance,
        step_slack,
        ..Default::default()
    })
}

/// The step in `lo..=hi` with the most trailing zeros (then fives): where a trainer's
/// milestone most likely is, between two logged samples.
fn roundest(lo: u64, hi: u64) -> u64 {
    let mut unit = 1u64;
    while unit <= hi / 10 {
        unit *= 10;
    }
    while unit > 1 {
        for u in [unit, unit / 2] {
            let m = lo.div_ceil(u.max(1)) * u.max(1);
            if u > 0 && m <= hi {
                return m;
            }
        }
        unit /= 10;
    }
    lo
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule;

    fn logged(s: &ScheduleConfig, every: u64, last: u64) -> Vec<(u64, f64)> {
        (0..=last / every)
            .map(|i| (i * every, schedule::expected(s, i * every)))
            .collect()
    }

    /// detectron2's COCO recipe: base 0.02, warmup 1000, drops ×0.1 at 60k and 80k
    /// (absolute), logged every 20 iterations.
    #[test]
    fn multistep_with_warmup_is_found_with_its_milestones() {
        let truth = ScheduleConfig {
            kind: ScheduleKind::MultiStep,
            peak_lr: 0.02,
            warmup_steps: 1000,
            milestones: Some(vec![59000, 79000]),
            gamma: Some(0.1),
            ..Default::default()
        };
        let s = fit(&logged(&truth, 20, 90000), 4, 0.02).expect("a staircase");
        assert_eq!(s.kind, ScheduleKind::MultiStep, "{s:?}");
        assert_eq!(s.milestones, truth.milestones, "{s:?}");
        assert_eq!(s.gamma, Some(0.1));
        assert_eq!(s.peak_lr, 0.02);
        assert!(s.warmup_steps.abs_diff(1000) <= 20, "{s:?}");
    }

    #[test]
    fn even_drops_are_step_lr() {
        let truth = ScheduleConfig {
            kind: ScheduleKind::Step,
            peak_lr: 0.1,
            step_size: Some(3000),
            gamma: Some(0.5),
            ..Default::default()
        };
        let s = fit(&logged(&truth, 100, 12000), 4, 0.02).expect("a staircase");
        assert_eq!(
            (s.kind, s.step_size, s.gamma),
            (ScheduleKind::Step, Some(3000), Some(0.5))
        );
        assert_eq!(s.warmup_steps, 0);
        let one = fit(&logged(&truth, 100, 5000), 4, 0.02).expect("a staircase");
        assert_eq!(
            (one.kind, one.milestones),
            (ScheduleKind::MultiStep, Some(vec![3000])),
            "one drop"
        );
    }

    #[test]
    fn smooth_decays_and_uneven_factors_are_not_staircases() {
        let cosine = ScheduleConfig {
            kind: ScheduleKind::Cosine,
            peak_lr: 1e-3,
            warmup_steps: 100,
            total_steps: Some(5000),
            ..Default::default()
        };
        assert!(fit(&logged(&cosine, 10, 5000), 4, 0.02).is_none());
        let mut pts: Vec<(u64, f64)> = (0..100).map(|i| (i * 10, 0.1)).collect();
        pts.extend((100..200).map(|i| (i * 10, 0.01)));
        pts.extend((200..300).map(|i| (i * 10, 0.005)));
        assert!(fit(&pts, 4, 0.02).is_none(), "x0.1 then x0.5: no one gamma");
        assert!(fit(&pts[..100], 4, 0.02).is_none(), "no drop: constant");
    }

    #[test]
    fn the_roundest_step_between_two_samples() {
        assert_eq!(roundest(59981, 60000), 60000);
        assert_eq!(roundest(1201, 1300), 1300);
        assert_eq!(roundest(1201, 1299), 1250);
        assert_eq!(roundest(7, 9), 7);
    }
}
