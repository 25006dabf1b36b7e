//! Where a relaunch resumes: the last GOOD checkpoint (checkpoints::last_good), handed to the
//! command as `{ckpt}` / `{step}` / `{diverged_at}` and ROGER_RESUME_* variables (and the
//! best-eval checkpoint a standing overfitting verdict marks as `{best_ckpt}` /
//! ROGER_BEST_CKPT); and which
//! critic verdicts ask for a divergence rollback. Pure apart from the injected verifier.

use crate::checkpoints::{self, Checkpoint, Choice};
use crate::ledger::{Kind, Record};
use serde::Serialize;

/// What the next launch is told.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Resume {
    pub ckpt: Option<Checkpoint>,
    pub diverged_at: Option<u64>,
    /// `{best_ckpt}`: the checkpoint at (or nearest before) the best eval that a standing
    /// overfitting verdict marks ([`best_ckpt`]).
    pub best_ckpt: Option<String>,
}

/// The path a standing overfitting verdict of `run` marks (critic/overfit.rs), if any.
pub fn best_ckpt(records: &[Record], run: &str) -> Option<String> {
    crate::critic::overfit::standing(records, run)?
        .mark
        .checkpoint
        .map(|c| c.path)
}

impl Resume {
    pub fn step(&self) -> Option<u64> {
        self.ckpt.as_ref().and_then(|c| c.step)
    }

    /// (placeholder, value) pairs; empty strings where there is nothing to say.
    pub fn placeholders(&self) -> Vec<(&'static str, String)> {
        let s = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
        vec![
            (
                "ckpt",
                self.ckpt
                    .as_ref()
                    .map_or(String::new(), |c| c.path.display().to_string()),
            ),
            ("step", s(self.step())),
            ("diverged_at", s(self.diverged_at)),
            ("best_ckpt", self.best_ckpt.clone().unwrap_or_default()),
        ]
    }

    /// ROGER_RESUME_CKPT / ROGER_RESUME_STEP / ROGER_DIVERGED_AT / ROGER_BEST_CKPT: set when
    /// known, else removed.
    pub fn env(&self) -> Vec<(&'static str, Option<String>)> {
        let p = self.placeholders();
        let get = |k: &str| {
            p.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        vec![
            ("ROGER_RESUME_CKPT", get("ckpt")),
            ("ROGER_RESUME_STEP", get("step")),
            ("ROGER_DIVERGED_AT", get("diverged_at")),
            ("ROGER_BEST_CKPT", get("best_ckpt")),
        ]
    }
}

/// Replace `{name}` in each argument.
pub fn fill(template: &[String], values: &[(&str, String)]) -> Vec<String> {
    template
        .iter()
        .map(|arg| {
            values
                .iter()
                .fold(arg.clone(), |a, (k, v)| a.replace(&format!("{{{k}}}"), v))
        })
        .collect()
}

/// The checkpoint to resume from, strictly before `before_step` when rolling back.
pub fn choose(
    records: &[Record],
    run: &str,
    before_step: Option<u64>,
    verifies: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
) -> Choice {
    checkpoints::last_good(records, run, before_step, verifies)
}

/// A critic failure the watch was told to roll back on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rollback {
    pub verdict_seq: u64,
    pub check: String,
    pub reason: String,
    pub diverged_at: u64,
    /// The step the verdict is about (its own step, else `diverged_at`).
    pub step: u64,
    /// When the newest log sample the critic judged was logged (unix seconds), if it says.
    pub sampled_at: Option<f64>,
}

impl Rollback {
    /// "critic verdict #12 failed check 'loss' at step 30: loss is NaN; diverged at step 25"
    pub fn describe(&self) -> String {
        format!(
            "critic verdict #{} failed check '{}' at step {}{}; diverged at step {}",
            self.verdict_seq,
            self.check,
            self.step,
            if self.reason.is_empty() {
                String::new()
            } else {
                format!(": {}", self.reason)
            },
            self.diverged_at
        )
    }
}

/// The first `fail` check in a new verdict of `run` whose name is in `rollback_on` and that
/// is a divergence: one with `began_at` (a loss below its band or exactly 0: a collapse) is
/// not. The divergence step is the check's `diverged_at`, else the verdict's step.
pub fn rollback_trigger(rec: &Record, run: &str, rollback_on: &[String]) -> Option<Rollback> {
    if rec.kind != Kind::Verdict || rec.run != run || rec.str_field("status") != Some("fail") {
        return None;
    }
    let checks = rec.get("checks")?.as_array()?;
    checks.iter().find_map(|c| {
        let name = c.get("check")?.as_str()?;
        if c.get("status")?.as_str()? != "fail"
            || !rollback_on.iter().any(|r| r == name)
            || c.get("began_at").is_some_and(|b| !b.is_null())
        {
            return None;
        }
        let diverged_at = c.get("diverged_at").and_then(|v| v.as_u64()).or(rec.step)?;
        Some(Rollback {
            step: rec.step.unwrap_or(diverged_at),
            sampled_at: rec
                .get("observation")
                .and_then(|o| o.get("last_sample_at"))
                .and_then(|t| t.as_f64()),
            verdict_seq: rec.seq,
            check: name.to_string(),
            reason: c
                .get("reason")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string(),
            diverged_at,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Entry;
    use std::path::PathBuf;

    fn records(entries: Vec<Entry>) -> Vec<Record> {
        crate::ledger::test_records(entries)
    }

    #[test]
    fn placeholders_and_env() {
        let r = Resume {
            ckpt: Some(Checkpoint {
                path: PathBuf::from("/ck/c-100.json"),
                sha256: "x".into(),
                size: 1,
                step: Some(100),
                seq: 3,
            }),
            diverged_at: None,
            best_ckpt: Some("/ck/c-50.json".into()),
        };
        let argv = fill(
            &[
                "train".into(),
                "--resume={ckpt}".into(),
                "{step}/{diverged_at}".into(),
                "--init={best_ckpt}".into(),
            ],
            &r.placeholders(),
        );
        assert_eq!(
            argv,
            vec![
                "train",
                "--resume=/ck/c-100.json",
                "100/",
                "--init=/ck/c-50.json"
            ]
        );
        let env = r.env();
        assert_eq!(env[0], ("ROGER_RESUME_CKPT", Some("/ck/c-100.json".into())));
        assert_eq!(env[2], ("ROGER_DIVERGED_AT", None));
        assert_eq!(env[3], ("ROGER_BEST_CKPT", Some("/ck/c-50.json".into())));
        let scratch = Resume::default();
        assert_eq!(
            fill(
                &["--resume".into(), "{ckpt}".into()],
                &scratch.placeholders()
            ),
            vec!["--resume", ""]
        );
    }

    /// Issue 18 item 8: the critic's own verdict on a loss collapsed below its band (a fail,
    /// no divergence) does not roll back; one on a loss above its band does, from its onset.
    #[test]
    fn a_loss_below_its_band_is_no_rollback() {
        use crate::critic::{checks::tests::obs_with, judge};
        let verdict = |vals: &[f64]| {
            let o = obs_with(
                vals.iter()
                    .enumerate()
                    .map(|(i, v)| (500 + 10 * i as u64, vec![("loss", *v)]))
                    .collect(),
            );
            judge(&o).entry("r", &o)
        };
        let recs = records(vec![
            verdict(&[3.0, 3.0, 3.0, 0.4, 0.3, 0.3, 0.2, 0.2]),
            verdict(&[3.0, 3.0, 3.0, 0.0]),
            verdict(&[3.0, 3.0, 3.0, 9.0, 9.5, 9.9, 9.8, 9.7]),
        ]);
        let on = vec!["loss".to_string()];
        assert_eq!(recs[0].str_field("status"), Some("fail"));
        assert_eq!(rollback_trigger(&recs[0], "r", &on), None);
        assert_eq!(rollback_trigger(&recs[1], "r", &on), None);
        let up = rollback_trigger(&recs[2], "r", &on).expect("a divergence rolls back");
        assert_eq!((up.check.as_str(), up.diverged_at), ("loss", 530));
    }

    #[test]
    fn rollback_only_on_listed_failing_checks_of_this_run() {
        let check = |name: &str, status: &str, at: Option<u64>| {
            let mut c = serde_json::json!({"check": name, "status": status, "observed": 1, "expected": 0, "reason": "loss is NaN"});
            if let Some(a) = at {
                c["diverged_at"] = a.into();
            }
            c
        };
        let recs = records(vec![
            Entry::new(Kind::Verdict, "critic", "r")
                .step(Some(500))
                .field("status", "fail")
                .field(
                    "checks",
                    vec![check("lr", "fail", None), check("loss", "fail", Some(450))],
                ),
            Entry::new(Kind::Verdict, "critic", "r")
                .step(Some(500))
                .field("status", "fail")
                .field("checks", vec![check("lr", "fail", None)]),
            Entry::new(Kind::Verdict, "critic", "other")
                .step(Some(500))
                .field("status", "fail")
                .field("checks", vec![check("loss", "fail", None)]),
            Entry::new(Kind::Verdict, "critic", "r")
                .step(Some(600))
                .field("status", "warn")
                .field("checks", vec![check("loss", "warn", None)]),
        ]);
        let on = vec!["loss".to_string(), "loss_spike".to_string()];
        let r = rollback_trigger(&recs[0], "r", &on).unwrap();
        assert_eq!(
            (r.check.as_str(), r.diverged_at, r.verdict_seq, r.step),
            ("loss", 450, 1, 500)
        );
        assert_eq!(
            r.describe(),
            "critic verdict #1 failed check 'loss' at step 500: loss is NaN; diverged at step 450"
        );
        assert!(rollback_trigger(&recs[1], "r", &on).is_none());
        assert!(rollback_trigger(&recs[2], "r", &on).is_none());
        assert!(rollback_trigger(&recs[3], "r", &on).is_none());
    }
}
