//! Combining checks into a verdict (`fail` > `warn` > `unknown` > `pass`), and the verdict's
//! ledger record. [`judge`] is the whole pure path from an observation to a verdict.

use super::{checks, loss, stale, CheckResult, Observation, Status, CHECKS};
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
        ("loss_slope", loss::loss_slope),
        ("loss_spike", loss::loss_spike),
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
    stale::apply(&mut results);
    assemble(obs, results, skipped, Vec::new())
}

/// Sort worst first and take the worst status. `flapping` is carried, not acted on.
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

impl Verdict {
    /// The ledger record: status, phase, checks, and the observation to recompute it from.
    pub fn entry(&self, run: &str, obs: &Observation) -> Entry {
        Entry::new(Kind::Verdict, "critic", run)
            .step(self.step)
            .field("status", self.status)
            .field("phase", &self.phase)
            .field("checks", &self.checks)
            .field("skipped", &self.skipped)
            .field("flapping", &self.flapping)
            .field("config_hash", &obs.config_hash)
            .field("observation", obs)
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
