//! The lr check: every logged lr in the window against `[schedule]`, per parameter group,
//! and a plateau schedule by its contract.

use super::{fmt, num, CheckResult, Observation, Status, Unjudged};
use crate::config::{kind_name, ScheduleConfig, ScheduleKind};
use crate::metrics::{LR, LR_GROUPS};
use crate::schedule;
use serde_json::json;

/// Every logged lr in the window against the schedule: within `tolerance`·peak of the value
/// the schedule gives at some step within ±`step_slack`. With several parameter groups
/// (`[metrics] lr` lists one key each) every group is judged against the schedule × its
/// `group_scale`, and the worst decides. A plateau schedule is judged by its contract.
pub fn lr(obs: &Observation) -> Option<CheckResult> {
    let s = obs.schedule.as_ref()?;
    let declared = s.group_scale.as_ref().map_or(1, Vec::len);
    let present = LR_GROUPS
        .iter()
        .rposition(|g| !obs.series(g).is_empty())
        .map_or(0, |i| i + 1);
    if present == 0 && obs.rules >= 1 {
        // A run that logs no lr may still declare its schedule for total_steps.
        return Some(CheckResult::unjudged(
            "lr",
            Unjudged::Skipped,
            obs.rules,
            "no lr logged in the window: not judged (a schedule declared for total_steps needs no lr; if the run logs one, is [metrics] lr the right key?)",
        ));
    }
    if s.total_steps.is_none() && crate::config::needs_total(s.kind) && obs.rules >= 1 {
        return Some(CheckResult::unjudged(
            "lr",
            Unjudged::Waiting,
            obs.rules,
            format!(
                "the {} schedule needs total_steps, and neither the config nor the log has said it yet",
                kind_name(s.kind)
            ),
        ));
    }
    let groups = declared.max(present).max(1);
    if groups == 1 {
        return Some(lr_group(obs, s, LR));
    }
    let results: Vec<(usize, CheckResult)> = (0..groups)
        .map(|g| (g, lr_group(obs, &s.for_group(g), LR_GROUPS[g])))
        .collect();
    let worst = results
        .iter()
        .map(|(_, r)| r.status)
        .max()
        .expect("two groups or more");
    let label = |g: usize| format!("group {} (×{})", g + 1, s.scale(g));
    let mut ordered: Vec<&(usize, CheckResult)> = results.iter().collect();
    ordered.sort_by_key(|(g, r)| (std::cmp::Reverse(r.status), *g));
    let reason = ordered
        .iter()
        .map(|(g, r)| format!("{}: {}", label(*g), r.reason))
        .collect::<Vec<_>>()
        .join("; ");
    let per = |f: fn(&CheckResult) -> serde_json::Value| {
        results
            .iter()
            .map(|(g, r)| json!({"group": g + 1, "scale": s.scale(*g), "status": r.status, "value": f(r)}))
            .collect::<Vec<_>>()
    };
    Some(
        CheckResult::new(
            "lr",
            worst,
            format!("lr of {groups} parameter groups: {reason}"),
        )
        .observed(json!({"groups": per(|r| r.observed.clone())}))
        .expected(json!({"groups": per(|r| r.expected.clone())})),
    )
}

/// One parameter group's lr (`metric` in the window) against `s`. On a finished run the
/// main lr's earlier samples where the schedule is distinguishable (`obs.run_lr`) are
/// judged with the window: its last samples alone sit where a decayed lr is ~0 and a doubled
/// one is within tolerance.
fn lr_group(obs: &Observation, s: &ScheduleConfig, metric: &str) -> CheckResult {
    let window = obs.series(metric);
    let earlier: Vec<(u64, f64)> = if metric == LR {
        let first = window.first().map_or(u64::MAX, |p| p.0);
        obs.run_lr
            .iter()
            .filter(|p| p.0 < first)
            .map(|p| (p.0, p.1 .0))
            .collect()
    } else {
        Vec::new()
    };
    let series: Vec<(u64, f64)> = earlier.iter().chain(&window).copied().collect();
    if series.is_empty() {
        return CheckResult::new(
            "lr",
            Status::Unknown,
            "no lr in the window: is [metrics] lr the right key?",
        );
    }
    let kind = kind_name(s.kind);
    if s.total_steps.is_none() && crate::config::needs_total(s.kind) {
        return CheckResult::new(
            "lr",
            Status::Unknown,
            format!("the {kind} schedule needs total_steps, and neither the config nor the log has said it yet"),
        );
    }
    let allowed = s.tolerance * s.peak_lr;
    let plateau = s.kind == ScheduleKind::Plateau;
    // A plateau schedule has a curve only in its warmup; the rest is judged by its contract.
    type Series = Vec<(u64, f64)>;
    let (curve, after): (Series, Series) = if plateau {
        series
            .iter()
            .partition(|p| p.0 < s.warmup_steps.saturating_add(s.step_slack))
    } else {
        (series.clone(), Vec::new())
    };
    let mut worst: Option<(u64, f64, f64, (f64, f64))> = None;
    for &(step, lr) in &curve {
        let (dev, range) = schedule::deviation(s, step, lr);
        if worst.is_none_or(|w| dev > w.2) {
            worst = Some((step, lr, dev, range));
        }
    }
    if plateau && worst.is_none_or(|w| w.2 <= allowed) {
        return plateau_result(s, &after, series.len());
    }
    let (step, lr, dev, (lo, hi)) = worst.expect("non-empty");
    let observed =
        json!({"step": step, "lr": num(lr), "deviation": num(dev), "samples": series.len()});
    let expected = json!({"lo": lo, "hi": hi, "tolerance": allowed, "step_slack": s.step_slack});
    if dev <= allowed {
        let how = if dev == 0.0 {
            format!("all within ±{} steps of it", s.step_slack)
        } else {
            format!(
                "worst off by {} at step {step}, allowed {}",
                fmt(dev),
                fmt(allowed)
            )
        };
        let whole = if earlier.is_empty() {
            String::new()
        } else {
            format!(
                ", {} of them from earlier in the finished run, where the schedule is distinguishable",
                earlier.len()
            )
        };
        return CheckResult::new(
            "lr",
            Status::Pass,
            format!(
                "lr follows the {kind} schedule over {} samples ({how}{whole})",
                series.len()
            ),
        )
        .observed(observed)
        .expected(expected);
    }
    let lrs: Vec<f64> = window.iter().map(|p| p.1).collect();
    let hint = if lrs.len() >= 3 && lrs.windows(2).all(|w| w[0] == w[1]) && lo != hi {
        format!(": lr is frozen at {}, is the scheduler stepping?", fmt(lr))
    } else if lr < lo && lrs.len() >= 2 && lrs.windows(2).all(|w| w[1] > w[0]) {
        ": lr is climbing like a warmup, did a resume restart the schedule?".to_string()
    } else if lr < lo {
        ": below the schedule".to_string()
    } else {
        ": above the schedule".to_string()
    };
    let hint = if step < window.first().map_or(u64::MAX, |p| p.0) {
        format!("{hint} (the finished run judged where its schedule is distinguishable)")
    } else {
        hint
    };
    CheckResult::new(
        "lr",
        Status::Fail,
        format!(
            "lr {} at step {step} is off the {kind} schedule (expected {}..{} within ±{} steps, ± {}){hint}",
            fmt(lr),
            fmt(lo),
            fmt(hi),
            s.step_slack,
            fmt(allowed)
        ),
    )
    .observed(observed)
    .expected(expected)
}

/// ReduceLROnPlateau after its warmup: never rising, each drop × `factor`.
fn plateau_result(s: &ScheduleConfig, after: &[(u64, f64)], samples: usize) -> CheckResult {
    let factor = s.factor.unwrap_or(0.1);
    let expected = json!({"never_rises": true, "factor": factor, "tolerance": s.tolerance,
        "peak_lr": s.peak_lr, "min_lr": s.min_lr});
    match schedule::plateau::judge(s, after) {
        schedule::plateau::Judged::Ok { drops } => {
            let how = match drops.as_slice() {
                [] => "no drop in the window".to_string(),
                d => format!(
                    "{} drop(s), at step(s) {}",
                    d.len(),
                    d.iter()
                        .map(|x| x.0.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            CheckResult::new(
                "lr",
                Status::Pass,
                format!("lr keeps the plateau schedule's contract over {samples} samples: never rises, drops ×{factor} ({how})"),
            )
            .observed(json!({"samples": samples, "drops": drops.iter().map(|d| json!({"step": d.0, "ratio": num(d.1)})).collect::<Vec<_>>()}))
            .expected(expected)
        }
        schedule::plateau::Judged::Bad { step, lr, why } => CheckResult::new(
            "lr",
            Status::Fail,
            format!(
                "lr {} at step {step} breaks the plateau schedule: {why}",
                fmt(lr)
            ),
        )
        .observed(json!({"step": step, "lr": num(lr), "samples": samples}))
        .expected(expected),
    }
}

#[cfg(test)]
mod tests {
    use super::super::checks::tests::obs_with;
    use super::super::Num;
    use super::*;

    #[test]
    fn lr_on_schedule_passes_restart_from_warmup_fails() {
        let s = obs_with(vec![]).schedule.unwrap();
        let on: Vec<(u64, Vec<(&str, f64)>)> = (500..510)
            .map(|st| (st, vec![("lr", schedule::expected(&s, st - 2))]))
            .collect();
        assert_eq!(lr(&obs_with(on)).unwrap().status, Status::Pass);
        // Resumed at 600 but the scheduler restarted: lr climbs from 0 again.
        let restarted: Vec<(u64, Vec<(&str, f64)>)> = (0..5)
            .map(|i| (600 + i, vec![("lr", 1e-5 * (i + 1) as f64)]))
            .collect();
        let r = lr(&obs_with(restarted)).unwrap();
        assert_eq!(r.status, Status::Fail);
        assert!(r.reason.contains("restart the schedule"), "{}", r.reason);
        let frozen: Vec<(u64, Vec<(&str, f64)>)> = (0..5)
            .map(|i| (300 + 100 * i, vec![("lr", 1e-3)]))
            .collect();
        let r = lr(&obs_with(frozen)).unwrap();
        assert!(r.reason.contains("frozen"), "{}", r.reason);
        assert_eq!(
            lr(&obs_with(vec![(5, vec![("loss", 3.0)])]))
                .unwrap()
                .status,
            Status::Unknown
        );
    }

    /// Issue 29 point 5: lr doubled over a whole finished run passed, the last samples
    /// sitting where the decayed lr is ~0 (2 x ~0 is within tolerance). The finished run's
    /// earlier samples where the schedule is distinguishable are judged too.
    #[test]
    fn a_finished_runs_doubled_lr_fails_on_its_distinguishable_samples() {
        let s = obs_with(vec![]).schedule.unwrap();
        let tail = |k: f64| -> Vec<(u64, Vec<(&str, f64)>)> {
            (1090..=1100)
                .map(|st| (st, vec![("lr", k * schedule::expected(&s, st))]))
                .collect()
        };
        let earlier = |k: f64| -> Vec<(u64, Num)> {
            (1..100)
                .map(|i| (i * 10, Num(k * schedule::expected(&s, i * 10))))
                .collect()
        };
        // The tail alone: a doubled decayed lr hides within the tolerance (min 1e-4 here,
        // the allowance 2e-5: floor 0 would hide it the same way).
        let mut o = obs_with(tail(1.0));
        o.schedule.as_mut().unwrap().min_lr = 0.0;
        let s0 = o.schedule.clone().unwrap();
        let at = |k: f64| -> Vec<(u64, Vec<(&str, f64)>)> {
            (1090..=1100)
                .map(|st| (st, vec![("lr", k * schedule::expected(&s0, st))]))
                .collect()
        };
        o.window = obs_with(at(2.0)).window;
        assert_eq!(lr(&o).unwrap().status, Status::Pass, "the hole this closes");
        o.run_lr = (1..100)
            .map(|i| (i * 10, Num(2.0 * schedule::expected(&s0, i * 10))))
            .collect();
        let r = lr(&o).unwrap();
        assert_eq!(r.status, Status::Fail, "{}", r.reason);
        assert!(r.reason.contains("finished run"), "{}", r.reason);
        // Healthy: passes, and says what it judged.
        let mut ok = obs_with(tail(1.0));
        ok.run_lr = earlier(1.0);
        let r = lr(&ok).unwrap();
        assert_eq!(r.status, Status::Pass, "{}", r.reason);
        assert!(r.reason.contains("99 of them from earlier"), "{}", r.reason);
    }

    /// Issue 18 item 7: a kind that needs the run's length, with none known yet, waits.
    #[test]
    fn lr_without_a_known_total_is_unknown_not_judged_against_infinity() {
        let mut o = obs_with(vec![(500, vec![("lr", 5e-4)])]);
        o.schedule.as_mut().unwrap().total_steps = None;
        let r = lr(&o).unwrap();
        assert_eq!(r.status, Status::Unknown, "{}", r.reason);
        assert!(r.reason.contains("needs total_steps"), "{}", r.reason);
        o.schedule = o.schedule.map(|s| s.resolved(Some(1100)));
        assert_eq!(
            lr(&o).unwrap().status,
            Status::Fail,
            "5e-4 is off the cosine at 500"
        );
    }
}
