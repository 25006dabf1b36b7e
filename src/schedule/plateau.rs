//! ReduceLROnPlateau has no curve to compare with: when it drops depends on the eval loss.
//! What can be judged is its contract: after the warmup the lr never rises, and each drop
//! multiplies it by `factor` (a ratio of `factor^k` is k drops between two logged samples;
//! a drop that lands on `min_lr` is PyTorch's floor at work).

use crate::config::ScheduleConfig;

/// Changes smaller than this share of the lr are print rounding, not a change.
const SAME: f64 = 1e-6;

/// What the series showed: the drops seen (step, ratio), or the first breach of the contract.
#[derive(Debug, Clone, PartialEq)]
pub enum Judged {
    Ok { drops: Vec<(u64, f64)> },
    Bad { step: u64, lr: f64, why: String },
}

/// The post-warmup samples of `series` (step, lr), oldest first. Warmup samples are judged
/// against the warmup line by the caller.
pub fn judge(s: &ScheduleConfig, series: &[(u64, f64)]) -> Judged {
    let factor = s.factor.unwrap_or(0.1);
    let tol = s.tolerance;
    let mut drops = Vec::new();
    let mut prev: Option<(u64, f64)> = None;
    for &(step, lr) in series {
        if !lr.is_finite() || lr < 0.0 {
            return Judged::Bad {
                step,
                lr,
                why: format!("lr is {lr}"),
            };
        }
        let Some((pstep, p)) = prev else {
            if lr > s.peak_lr * (1.0 + tol) {
                return Judged::Bad {
                    step,
                    lr,
                    why: format!("above the declared peak_lr {}", s.peak_lr),
                };
            }
            prev = Some((step, lr));
            continue;
        };
        if lr > p * (1.0 + SAME) {
            return Judged::Bad {
                step,
                lr,
                why: format!(
                    "rose from {p} at step {pstep}: a plateau schedule never raises the lr (a resume that reset the scheduler?)"
                ),
            };
        }
        if lr < p * (1.0 - SAME) {
            let ratio = lr / p;
            let k = (ratio.ln() / factor.ln()).round().max(1.0);
            let want = factor.powf(k);
            let floored = s.min_lr > 0.0 && (lr - s.min_lr).abs() <= tol * s.min_lr.max(lr);
            if (ratio - want).abs() > tol * want && !floored {
                return Judged::Bad {
                    step,
                    lr,
                    why: format!(
                        "dropped from {p} at step {pstep} by ×{ratio:.4}, expected ×{factor} per drop (±{tol} of it)"
                    ),
                };
            }
            drops.push((step, ratio));
        }
        if lr < s.min_lr * (1.0 - tol) {
            return Judged::Bad {
                step,
                lr,
                why: format!("below min_lr {}", s.min_lr),
            };
        }
        prev = Some((step, lr));
    }
    Judged::Ok { drops }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ScheduleKind;

    fn plateau(factor: f64, min_lr: f64) -> ScheduleConfig {
        ScheduleConfig {
            kind: ScheduleKind::Plateau,
            peak_lr: 1e-3,
            min_lr,
            factor: Some(factor),
            ..Default::default()
        }
    }

    /// The lr of PyTorch's ReduceLROnPlateau, written out from its documentation: the lr is
    /// multiplied by `factor` after `patience` epochs without improvement (mode "min",
    /// threshold 0 here), and never below `min_lr`.
    fn reference(metrics: &[f64], lr0: f64, factor: f64, patience: usize, min_lr: f64) -> Vec<f64> {
        let (mut lr, mut best, mut bad) = (lr0, f64::INFINITY, 0);
        let mut out = Vec::new();
        for &m in metrics {
            if m < best {
                best = m;
                bad = 0;
            } else {
                bad += 1;
            }
            if bad > patience {
                lr = (lr * factor).max(min_lr);
                bad = 0;
            }
            out.push(lr);
        }
        out
    }

    #[test]
    fn a_reference_plateau_run_passes_and_its_faults_fail() {
        let metrics = [
            3.0, 2.5, 2.4, 2.4, 2.4, 2.4, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3,
        ];
        for (factor, min_lr) in [(0.5, 0.0), (0.1, 0.0), (0.5, 2e-4)] {
            let lrs = reference(&metrics, 1e-3, factor, 2, min_lr);
            assert!(lrs.windows(2).any(|w| w[1] < w[0]), "the reference drops");
            let series: Vec<(u64, f64)> = lrs
                .iter()
                .enumerate()
                .map(|(i, l)| (i as u64 * 100, *l))
                .collect();
            match judge(&plateau(factor, min_lr), &series) {
                Judged::Ok { drops } => assert!(!drops.is_empty()),
                bad => panic!("factor {factor}: {bad:?}"),
            }
            // Logged every other epoch: two drops between samples are ×factor².
            let sparse: Vec<(u64, f64)> = series.iter().copied().step_by(4).collect();
            assert!(matches!(
                judge(&plateau(factor, min_lr), &sparse),
                Judged::Ok { .. }
            ));
        }
        let s = plateau(0.5, 0.0);
        // A rise (a resume that reset the scheduler).
        let r = judge(&s, &[(0, 1e-3), (100, 5e-4), (200, 1e-3)]);
        assert!(
            matches!(&r, Judged::Bad { step: 200, why, .. } if why.contains("rose")),
            "{r:?}"
        );
        // A drop by the wrong factor.
        let r = judge(&s, &[(0, 1e-3), (100, 3e-4)]);
        assert!(
            matches!(&r, Judged::Bad { step: 100, why, .. } if why.contains("×0.3")),
            "{r:?}"
        );
        // Within tolerance: ×0.505 for 0.5 with tolerance 0.02.
        assert!(matches!(
            judge(&s, &[(0, 1e-3), (100, 5.05e-4)]),
            Judged::Ok { .. }
        ));
        // Above the peak from the start.
        assert!(matches!(judge(&s, &[(0, 2e-3)]), Judged::Bad { .. }));
        // NaN.
        assert!(matches!(
            judge(&s, &[(0, 1e-3), (1, f64::NAN)]),
            Judged::Bad { .. }
        ));
    }
}
