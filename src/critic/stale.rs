//! Staleness: time since the step last advanced against the phase's stale limit, extended by
//! the declared quiet periods (an eval every N steps may silence the log for D) that apply at
//! the current step. A run that reached `total_steps` has finished and is not stale, however
//! long ago: the log declared its end (HF `global_step == max_steps`, the step a text log's
//! lines or arguments declare, a trainer's own end line, which reads as a total at its
//! last step), or the config says the total. Stale
//! data turns every passing check into `unknown`: old numbers cannot vouch for the run.

use super::{CheckResult, Observation, Status};
use serde_json::json;

/// Quiet periods that may be running at `step`: the step is on a multiple of `every`, or
/// closer to the next multiple than one logging interval (the eval starts between two log
/// lines).
pub fn quiet_allowance(obs: &Observation, step: u64) -> (f64, Vec<String>) {
    let gap = log_interval(obs);
    let mut total = 0.0;
    let mut names = Vec::new();
    for q in &obs.quiet {
        // `every = 0` is refused in a config, but an archived observation (replay) is data.
        let Some(into) = step.checked_rem(q.every) else {
            continue;
        };
        if into == 0 || q.every - into < gap {
            total += q.duration_s;
            names.push(q.name.clone());
        }
    }
    (total, names)
}

/// Median step gap between consecutive window samples (at least 1).
fn log_interval(obs: &Observation) -> u64 {
    let gaps: Vec<f64> = obs
        .window
        .windows(2)
        .filter(|w| w[1].step > w[0].step)
        .map(|w| (w[1].step - w[0].step) as f64)
        .collect();
    super::stats::median(gaps).map_or(1, |g| (g as u64).max(1))
}

/// Sample times this far ahead of `now` are accepted as ordinary clock skew between hosts.
pub const CLOCK_SKEW_S: f64 = 300.0;

pub fn stale(obs: &Observation) -> Option<CheckResult> {
    let limit = obs.phase.as_ref()?.stale_s?;
    let step = obs.step?;
    let total = obs
        .total_steps
        .or_else(|| obs.schedule.as_ref().and_then(|s| s.total_steps));
    if let Some(total) = total {
        // A log sampled every k steps may never show the last one (Lightning logs when
        // (step + 1) % k == 0): the next sample would be past the total (rules 3).
        let every = log_interval(obs);
        if step < total && obs.rules >= 3 && every > 1 && step + every > total {
            return Some(
                CheckResult::new(
                    "stale",
                    Status::Pass,
                    format!("finished at step {step}: the log samples every {every} steps, so its next sample would be at {} past total_steps = {total}; no more samples expected", step + every),
                )
                .observed(json!({"step": step, "log_every": every}))
                .expected(json!({"total_steps": total})),
            );
        }
        if step >= total {
            return Some(
                CheckResult::new(
                    "stale",
                    Status::Pass,
                    format!("finished at step {step}: the run reached total_steps = {total}, no more samples expected"),
                )
                .observed(json!({"step": step}))
                .expected(json!({"total_steps": total})),
            );
        }
    }
    if obs.rules >= 3 {
        if let Some(done) = at_the_floor(obs, step) {
            return Some(done);
        }
    }
    let Some(advanced_at) = obs.advanced_at else {
        return Some(CheckResult::new(
            "stale",
            Status::Unknown,
            "samples carry no time and the log's mtime is unknown",
        ));
    };
    if advanced_at > obs.now + CLOCK_SKEW_S {
        // A future timestamp would make the run look fresh forever: stale data must not pass.
        return Some(
            CheckResult::new(
                "stale",
                Status::Unknown,
                format!(
                    "the log says step {step} advanced {} in the future: clock skew or a wrong time unit in the log, so staleness cannot be judged",
                    secs(advanced_at - obs.now)
                ),
            )
            .observed(json!({"step": step, "advanced_at": advanced_at, "now": obs.now}))
            .expected(json!({"at_most_now_plus_s": CLOCK_SKEW_S})),
        );
    }
    let age = (obs.now - advanced_at).max(0.0);
    let since_sample = obs.last_sample_at.map(|t| (obs.now - t).max(0.0));
    let (quiet, names) = quiet_allowance(obs, step);
    let allowed = limit + quiet;
    let observed =
        json!({"step": step, "since_step_advanced_s": age, "since_last_sample_s": since_sample});
    let expected = json!({"stale_s": limit, "quiet_s": quiet, "quiet": names});
    let allowance = if names.is_empty() {
        String::new()
    } else {
        format!(" incl. {} for {}", secs(quiet), names.join(" + "))
    };
    // Another rank behind this one whose log has not changed for longer than the limit.
    let stuck = obs
        .ranks
        .iter()
        .filter(|r| r.step.is_none_or(|s| s < step))
        .filter_map(|r| Some((r, (obs.now - r.changed_at?).max(0.0))))
        .filter(|(_, a)| *a > allowed)
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let (Some((r, a)), false) = (stuck, age > allowed) {
        let at = r.step.map_or("no step yet".into(), |s| format!("step {s}"));
        return Some(
            CheckResult::new(
                "stale",
                Status::Fail,
                format!(
                    "rank {}'s log has not changed for {} ({at}) while the judged rank is at step {step}, over the limit of {}{allowance}: that rank has stopped",
                    r.rank,
                    secs(a),
                    secs(allowed)
                ),
            )
            .observed(json!({"step": step, "rank": r.rank, "rank_step": r.step, "rank_unchanged_s": a}))
            .expected(expected),
        );
    }
    let r = if age > allowed {
        CheckResult::new(
            "stale",
            Status::Fail,
            format!(
                "no new step for {} (step {step}), over the limit of {}{allowance}: the log has stopped",
                secs(age),
                secs(allowed)
            ),
        )
    } else {
        CheckResult::new(
            "stale",
            Status::Pass,
            format!(
                "step {step} advanced {} ago (limit {}{allowance})",
                secs(age),
                secs(allowed)
            ),
        )
    };
    Some(r.observed(observed).expected(expected))
}

/// A run whose logged lr has reached its schedule's floor, at a step the schedule puts on that
/// floor too as far as the log's printed lr can tell, has finished: a fitted total is only as
/// exact as the lr column that fed it (llm.c prints 6 decimals, so its cosine reads 0.000000
/// for the last ~350 steps, and the fit's total can sit a few steps past the last one).
/// Only schedules that end on their floor (cosine, linear, wsd, polynomial, one-cycle) end
/// this way. `resolution`: see [`printed_resolution`].
pub fn ended_on_floor(
    s: &crate::config::ScheduleConfig,
    total: u64,
    lr_step: u64,
    lr: f64,
    resolution: f64,
) -> bool {
    use crate::config::ScheduleKind as K;
    if !matches!(
        s.kind,
        K::Cosine | K::Linear | K::Wsd | K::Polynomial | K::OneCycle | K::YoloLinear | K::YoloCos
    ) || lr_step >= total
    {
        return false;
    }
    let floor = crate::schedule::expected(s, total);
    let on_floor = |v: f64| v.is_finite() && (v - floor).abs() <= resolution;
    floor < s.peak_lr && on_floor(lr) && on_floor(crate::schedule::expected(s, lr_step))
}

/// Half a unit in the last decimal place the logged lr values show (their shortest decimal
/// form, at most 12 places): `0.000430` and `0.000429` say 6 decimals, so ±5e-7. None
/// without a non-zero lr.
pub fn printed_resolution(lrs: impl Iterator<Item = f64>) -> Option<f64> {
    let decimals = lrs
        .filter(|v| v.is_finite() && *v != 0.0)
        .map(|v| {
            let text = format!("{}", v.abs());
            text.split_once('.')
                .map_or(0, |(_, frac)| frac.len())
                .min(12)
        })
        .max()?;
    Some(0.5 * 10f64.powi(-(decimals as i32)))
}

/// [`ended_on_floor`] for the observation's newest logged lr (rules >= 3).
fn at_the_floor(obs: &Observation, step: u64) -> Option<CheckResult> {
    let s = obs.schedule.as_ref()?;
    let total = obs.total_steps.or(s.total_steps)?;
    let resolution = obs.lr_resolution?.0;
    let (lr_step, lr) = obs
        .window
        .iter()
        .rev()
        .find_map(|x| Some((x.step, x.get("lr")?)))?;
    if !ended_on_floor(s, total, lr_step, lr, resolution) {
        return None;
    }
    let floor = crate::schedule::expected(s, total);
    Some(
        CheckResult::new(
            "stale",
            Status::Pass,
            format!(
                "finished at step {step}: the lr reached the schedule's floor {} at step {lr_step}, {} step(s) before its total_steps = {total}, closer than the log's lr (printed to ±{}) can tell apart; no more samples expected",
                super::fmt(floor),
                total - lr_step,
                super::fmt(resolution)
            ),
        )
        .observed(json!({"step": step, "lr_step": lr_step, "lr": lr}))
        .expected(json!({"total_steps": total, "floor": floor, "resolution": resolution})),
    )
}

fn secs(s: f64) -> String {
    use crate::config::units::{duration_from_secs, format_duration};
    format_duration(duration_from_secs(s))
}

/// With stale data nothing may pass: passing checks become unknown.
pub fn apply(checks: &mut [CheckResult]) {
    let stale = checks
        .iter()
        .any(|c| c.check == "stale" && c.status == Status::Fail);
    if !stale {
        return;
    }
    for c in checks.iter_mut().filter(|c| c.check != "stale") {
        if c.status == Status::Pass {
            c.status = Status::Unknown;
            c.reason = format!("stale data, cannot vouch: {}", c.reason);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::checks::tests::obs_with;
    use super::super::{fmt, Quiet};
    use super::*;

    fn at(step: u64, now_offset: f64) -> Observation {
        let mut o = obs_with(vec![
            (step - 10, vec![("loss", 3.0)]),
            (step, vec![("loss", 3.0)]),
        ]);
        o.now += now_offset;
        o
    }

    #[test]
    fn stale_after_the_limit_and_fmt() {
        assert_eq!(stale(&at(500, 599.0)).unwrap().status, Status::Pass);
        let r = stale(&at(500, 601.0)).unwrap();
        assert_eq!(r.status, Status::Fail);
        assert!(r.reason.contains("no new step for 10m"), "{}", r.reason);
        assert_eq!(fmt(0.5), "0.5");
    }

    #[test]
    fn the_last_sample_of_a_log_that_cannot_show_the_total_is_finished() {
        // Logged every 10 steps at ..., 90, 100 (Lightning: (step + 1) % 10 == 0 shows 89, 99).
        let mut o = at(99, 7200.0);
        o.total_steps = Some(101);
        let r = stale(&o).unwrap();
        assert_eq!(r.status, Status::Pass, "{}", r.reason);
        assert!(
            r.reason.contains("next sample would be at 109"),
            "{}",
            r.reason
        );
        // One more sample to come (at 109 <= 110): still stale when it does not.
        o.total_steps = Some(110);
        assert_eq!(stale(&o).unwrap().status, Status::Fail);
        // Judged by the rules before 3: as before.
        o.total_steps = Some(101);
        o.rules = 2;
        assert_eq!(stale(&o).unwrap().status, Status::Fail);
    }

    #[test]
    fn declared_quiet_extends_the_limit_at_its_steps_only() {
        let eval = Quiet {
            name: "eval".into(),
            every: 1000,
            duration_s: 1800.0,
        };
        let mut o = at(1000, 2000.0);
        o.quiet = vec![eval.clone()];
        assert_eq!(stale(&o).unwrap().status, Status::Pass, "eval at 1000");
        let mut o = at(996, 2000.0); // logs every 10: the eval at 1000 starts before the next line
        o.quiet = vec![eval.clone()];
        assert_eq!(stale(&o).unwrap().status, Status::Pass);
        let mut o = at(1050, 2000.0);
        o.quiet = vec![eval];
        assert_eq!(stale(&o).unwrap().status, Status::Fail, "no eval at 1050");
    }

    #[test]
    fn finished_run_is_not_stale_and_stale_data_never_passes() {
        let r = stale(&at(1100, 1e6)).unwrap();
        assert_eq!(r.status, Status::Pass);
        let mut checks = vec![
            CheckResult::new("loss", Status::Pass, "fine"),
            CheckResult::new("lr", Status::Fail, "off"),
            stale(&at(500, 1e4)).unwrap(),
        ];
        apply(&mut checks);
        assert_eq!(checks[0].status, Status::Unknown);
        assert_eq!(checks[1].status, Status::Fail);
    }

    #[test]
    fn printed_resolution_is_half_the_last_decimal_shown() {
        let r = |v: &[f64]| printed_resolution(v.iter().copied());
        assert_eq!(r(&[0.00043, 0.000429, 0.0]), Some(5e-7));
        assert_eq!(r(&[0.1, 0.25]), Some(0.005));
        assert_eq!(r(&[1.2345678901234e-5]), Some(5e-13), "capped at 12 places");
        assert_eq!(r(&[0.0, f64::NAN]), None, "no non-zero lr: unknown");
    }

    /// llm.c's cosine (peak 6e-4, warmup 700, total 19560) printed to 6 decimals.
    #[test]
    fn on_the_floor_only_where_the_schedule_has_nothing_left_to_show() {
        use crate::config::{ScheduleConfig, ScheduleKind};
        let mut s = ScheduleConfig {
            kind: ScheduleKind::Cosine,
            peak_lr: 6e-4,
            warmup_steps: 700,
            total_steps: Some(19560),
            ..Default::default()
        };
        let r = 5e-7;
        assert!(ended_on_floor(&s, 19560, 19552, 0.0, r));
        assert!(ended_on_floor(&s, 19560, 19300, 0.0, r), "within ±5e-7");
        assert!(!ended_on_floor(&s, 19560, 18999, 1e-6, r), "one unit above");
        assert!(
            !ended_on_floor(&s, 19560, 10000, 0.0, r),
            "lr 0 mid-run: off schedule, not done"
        );
        assert!(
            !ended_on_floor(&s, 19560, 19560, 0.0, r),
            "at the total: the plain rule"
        );
        s.min_lr = 6e-5;
        assert!(ended_on_floor(&s, 19560, 19552, 6e-5, r), "a floor above 0");
        s.kind = ScheduleKind::Constant;
        assert!(
            !ended_on_floor(&s, 19560, 19552, 6e-4, r),
            "constant: no floor to end on"
        );
    }

    #[test]
    fn ended_on_the_floor_is_finished_from_rules_3_only() {
        use crate::config::{ScheduleConfig, ScheduleKind};
        // Logged every step (llm.c): the next sample would be at 19553, short of the total.
        let mut o = obs_with(vec![
            (19551, vec![("loss", 3.2), ("lr", 0.0)]),
            (19552, vec![("loss", 3.2), ("lr", 0.0)]),
        ]);
        o.schedule = Some(ScheduleConfig {
            kind: ScheduleKind::Cosine,
            peak_lr: 6e-4,
            warmup_steps: 700,
            total_steps: Some(19560),
            ..Default::default()
        });
        o.lr_resolution = Some(super::super::Num(5e-7));
        o.now += 7200.0;
        let r = stale(&o).unwrap();
        assert_eq!(r.status, Status::Pass, "{}", r.reason);
        assert!(
            r.reason.starts_with("finished at step 19552"),
            "{}",
            r.reason
        );
        o.rules = 2;
        assert_eq!(
            stale(&o).unwrap().status,
            Status::Fail,
            "an old record replays as before"
        );
        o.rules = 3;
        o.lr_resolution = None;
        assert_eq!(
            stale(&o).unwrap().status,
            Status::Fail,
            "no printed lr to tell"
        );
    }

    #[test]
    fn a_timestamp_in_the_future_cannot_pass() {
        assert_eq!(
            stale(&at(500, -200.0)).unwrap().status,
            Status::Pass,
            "skew"
        );
        let r = stale(&at(500, -86_400.0 * 365.0)).unwrap();
        assert_eq!(r.status, Status::Unknown);
        assert!(r.reason.contains("in the future"), "{}", r.reason);
    }

    #[test]
    fn another_rank_whose_log_stopped_makes_the_run_stale() {
        use super::super::RankProgress;
        let mut o = at(500, 10.0);
        let now = o.now;
        o.ranks = vec![
            RankProgress {
                rank: 1,
                step: Some(500),
                changed_at: Some(now - 5.0),
            },
            RankProgress {
                rank: 3,
                step: Some(120),
                changed_at: Some(now - 700.0),
            },
        ];
        let r = stale(&o).unwrap();
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.reason.starts_with("rank 3's log has not changed for"),
            "{}",
            r.reason
        );
        // The same rank level with the judged one (a finished rank, a lockstep pause): fine.
        o.ranks[1].step = Some(500);
        assert_eq!(stale(&o).unwrap().status, Status::Pass);
    }
}
