//! Combining checks into a verdict (`fail` > `warn` > `unknown` > `pass`), and the verdict's
//! ledger record. [`judge`] is the whole pure path from an observation to a verdict.

use super::{between, checks, loss, slope, spike, stale, CheckResult, Observation, Status, CHECKS};
use crate::ledger::{Entry, Kind};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub status: Status,
    pub step: Option<u64>,
    pub phase: Option<String>,
    /// Worst first; ties keep the order of [`CHECKS`].
    pub checks: Vec<CheckResult>,
    /// Checks not run because nothing declares them (no schedule, no threshold, too few evals).
    pub skipped: Vec<String>,
    /// Checks the hygiene flap detector marks as flapping (issue 7). Filled by the caller
    /// after [`judge`]; the status is not changed here.
    #[serde(default)]
    pub flapping: Vec<String>,
}

/// Every check on one observation. Deterministic: this is what replay recomputes.
pub fn judge(obs: &Observation) -> Verdict {
    let mut results: Vec<CheckResult> = Vec::new();
    let mut skipped = Vec::new();
    if obs.step.is_none() {
        results.push(CheckResult::new(
            "log",
            Status::Unknown,
            "no samples in the log yet",
        ));
        return assemble(obs, results, skipped, Vec::new());
    }
    let step = obs.step.expect("checked");
    if obs.phase.is_none() {
        results.push(CheckResult::new(
            "phase",
            Status::Unknown,
            format!("step {step} is in no declared [[phase]]: its thresholds are unknown"),
        ));
    }
    type Check = fn(&Observation) -> Option<CheckResult>;
    let all: [(&str, Check); 9] = [
        ("lr", checks::lr),
        ("loss", loss::loss),
        ("loss_slope", slope::loss_slope),
        ("loss_spike", spike::loss_spike),
        ("grad_norm", checks::grad_norm),
        ("eval", checks::eval),
        ("tokens_per_s", checks::tokens_per_s),
        ("vram", checks::vram),
        ("stale", stale::stale),
    ];
    for (name, check) in all {
        match check(obs) {
            Some(r) => results.push(r),
            None if obs.phase.is_some() || name == "lr" || name == "eval" => {
                skipped.push(name.to_string())
            }
            None => {}
        }
    }
    if obs.rules >= 1 {
        between::apply(obs, &mut results);
    }
    stale::apply(&mut results);
    assemble(obs, results, skipped, Vec::new())
}

/// Sort worst first and take the worst status of the checks that judged: one waiting for
/// data or skipped ([`super::Unjudged`]) is listed but does not decide, so with none left
/// the verdict is `unknown`. `flapping` is carried, not acted on.
pub fn assemble(
    obs: &Observation,
    mut checks: Vec<CheckResult>,
    skipped: Vec<String>,
    flapping: Vec<String>,
) -> Verdict {
    let order = |c: &CheckResult| CHECKS.iter().position(|n| *n == c.check).unwrap_or(99);
    checks.sort_by(|a, b| b.status.cmp(&a.status).then(order(a).cmp(&order(b))));
    let status = checks
        .iter()
        .filter(|c| c.unjudged.is_none())
        .map(|c| c.status)
        .max()
        .unwrap_or(Status::Unknown);
    Verdict {
        status,
        step: obs.step,
        phase: obs.phase.as_ref().map(|p| p.name.clone()),
        checks,
        skipped,
        flapping,
    }
}

/// The verdict record's field naming the config file that judged it.
pub const CONFIG_PATH: &str = "config_path";

impl Verdict {
    /// The ledger record: status, phase, checks, and the observation to recompute it from.
    /// An overfitting eval check adds `best` (the best eval and the checkpoint marked near
    /// it, [`super::overfit::Mark`]) for retention, `fetch --best`, status and report.
    pub fn entry(&self, run: &str, obs: &Observation) -> Entry {
        let e = Entry::new(Kind::Verdict, "critic", run)
            .step(self.step)
            .field("status", self.status)
            .field("phase", &self.phase)
            .field("checks", &self.checks)
            .field("skipped", &self.skipped)
            .field("flapping", &self.flapping)
            .field("config_hash", &obs.config_hash)
            .field("observation", obs);
        match self.best() {
            Some(m) => e.field("best", m),
            None => e,
        }
    }

    /// The overfitting mark of the eval check, when it warns or fails on overfitting.
    pub fn best(&self) -> Option<super::overfit::Mark> {
        self.checks.iter().find_map(super::overfit::mark_of)
    }

    /// [`Verdict::entry`] with the config that judged it (`config_path`, absolute, beside
    /// the observation's `config_hash`): `init --from-run LEDGER` finds the run's config by it.
    pub fn entry_from(&self, run: &str, obs: &Observation, config: &std::path::Path) -> Entry {
        let abs = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
        self.entry(run, obs)
            .field(CONFIG_PATH, abs.display().to_string())
    }

    /// The first step of a divergence named by a failing loss or loss_spike check.
    pub fn diverged_at(&self) -> Option<u64> {
        self.checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .filter_map(|c| c.diverged_at)
            .min()
    }

    /// Same statuses per check: what the daemon compares to decide whether to file again.
    pub fn same_statuses(&self, other: &Verdict) -> bool {
        let key = |v: &Verdict| {
            let mut k: Vec<(String, Status)> = v
                .checks
                .iter()
                .map(|c| (c.check.clone(), c.status))
                .collect();
            k.sort();
            (v.status, v.phase.clone(), k)
        };
        key(self) == key(other)
    }
}

#[cfg(test)]
mod tests {
    use super::super::checks::tests::obs_with;
    use super::*;

    #[test]
    fn worst_first_and_worst_wins() {
        let o = obs_with(
            (0..10)
                .map(|i| {
                    let step = 500 + 10 * i;
                    let lr = crate::schedule::expected(o_sched().as_ref().unwrap(), step);
                    (
                        step,
                        vec![
                            ("loss", 3.0),
                            ("lr", lr),
                            ("grad_norm", 0.5),
                            ("tokens_per_s", 1e3),
                        ],
                    )
                })
                .collect(),
        );
        let v = judge(&o);
        assert_eq!(v.status, Status::Warn, "{v:#?}");
        assert_eq!(v.checks[0].check, "tokens_per_s");
        assert_eq!(v.checks.last().unwrap().status, Status::Pass);
        assert!(v.skipped.contains(&"eval".to_string()));
        assert_eq!(v.phase.as_deref(), Some("main"));
    }

    fn o_sched() -> Option<crate::config::ScheduleConfig> {
        obs_with(vec![]).schedule
    }

    #[test]
    fn no_samples_and_no_phase_are_unknown() {
        let v = judge(&obs_with(vec![]));
        assert_eq!(
            (v.status, v.checks[0].check.as_str()),
            (Status::Unknown, "log")
        );
        let mut o = obs_with(vec![(5, vec![("loss", f64::NAN)])]);
        o.phase = None;
        let v = judge(&o);
        assert_eq!(v.status, Status::Fail, "NaN needs no phase");
        assert!(v
            .checks
            .iter()
            .any(|c| c.check == "phase" && c.status == Status::Unknown));
        assert_eq!(v.diverged_at(), Some(5));
    }

    /// Issue 18 item 6: at the start of a phase the trend checks wait for samples; they say
    /// so, and the verdict is what the judged checks say (exit 0), not UNKNOWN.
    #[test]
    fn a_check_waiting_for_samples_does_not_make_the_verdict_unknown() {
        let s = o_sched().unwrap();
        let o = obs_with(
            (0..3)
                .map(|i| {
                    let step = 500 + 10 * i;
                    let lr = crate::schedule::expected(&s, step);
                    let vals = vec![
                        ("loss", 3.0),
                        ("lr", lr),
                        ("grad_norm", 0.5),
                        ("tokens_per_s", 5e4),
                        ("vram_gib", 20.0),
                    ];
                    (step, vals)
                })
                .collect(),
        );
        let v = judge(&o);
        assert_eq!(v.status, Status::Pass, "{v:#?}");
        assert_eq!(v.status.exit_code(), 0);
        for name in ["loss_slope", "loss_spike"] {
            let c = v.checks.iter().find(|c| c.check == name).unwrap();
            assert_eq!(c.status, Status::Unknown, "{c:?}");
            assert_eq!(
                serde_json::to_value(c).unwrap()["unjudged"],
                "waiting",
                "{c:?}"
            );
        }
        // No loss at all is no judgement: unknown, whatever else passes.
        let o = obs_with(vec![
            (500, vec![("grad_norm", 0.5)]),
            (510, vec![("grad_norm", 0.5)]),
        ]);
        assert_eq!(judge(&o).status, Status::Unknown);
        // Nothing at all: unknown.
        assert_eq!(judge(&obs_with(vec![])).status, Status::Unknown);
    }

    /// Issue 18 item 6: a run that logs no lr, with a schedule declared for its total_steps:
    /// finished, it is not stale, and the lr check is skipped with its reason.
    #[test]
    fn a_finished_run_without_logged_lr_passes_with_lr_skipped() {
        let mut o = obs_with(
            (0..20)
                .map(|i| (910 + 10 * i, vec![("loss", 3.0)]))
                .collect(),
        );
        let p = o.phase.as_mut().unwrap();
        (
            p.grad_norm_max,
            p.grad_norm_spike,
            p.tokens_per_s_min,
            p.vram_max_gib,
        ) = (None, None, None, None);
        o.now += 86_400.0;
        let v = judge(&o);
        assert_eq!(v.status, Status::Pass, "{v:#?}");
        let stale = v.checks.iter().find(|c| c.check == "stale").unwrap();
        assert!(stale.reason.contains("finished"), "{}", stale.reason);
        let lr = v.checks.iter().find(|c| c.check == "lr").unwrap();
        assert_eq!(lr.status, Status::Unknown);
        assert!(lr.reason.contains("no lr"), "{}", lr.reason);
        assert_eq!(serde_json::to_value(lr).unwrap()["unjudged"], "skipped");
    }

    #[test]
    fn judging_is_deterministic_through_json() {
        let o = obs_with(vec![
            (200, vec![("loss", f64::INFINITY)]),
            (210, vec![("loss", 3.0)]),
        ]);
        let text = serde_json::to_string(&o).unwrap();
        let back: Observation = serde_json::from_str(&text).unwrap();
        assert_eq!(
            serde_json::to_value(judge(&o)).unwrap(),
            serde_json::to_value(judge(&back)).unwrap()
        );
    }
}
