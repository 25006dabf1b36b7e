//! The checkpoint where a run was best: the overfitting mark a critic verdict files (`best`,
//! written by `critic::overfit`) and the one that stands for a run, read from the ledger for
//! retention, `fetch --best`, watch's `{best_ckpt}`, status and report. Data and a ledger
//! reader only, so its readers need not name the critic.

use crate::ledger::{Kind, Record};
use serde::{Deserialize, Serialize};

/// The checkpoint the verdict marks, and whether it is at the best eval's step or before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkedCheckpoint {
    pub path: String,
    pub step: u64,
    /// `"at"` (saved at the best eval's step) or `"before"` (the newest one before it).
    pub relation: String,
}

/// The verdict record's `best` field: where the eval loss was best and how far it has risen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    pub step: u64,
    pub eval_loss: f64,
    pub newest_step: u64,
    pub newest_eval_loss: f64,
    /// newest − best.
    pub rise: f64,
    /// The rise as a fraction of |best|.
    pub rise_frac: f64,
    /// Evals in a row, newest last, above best + margin.
    pub evals_above: usize,
    pub margin: f64,
    /// `None`: no published checkpoint at or before the best step.
    pub checkpoint: Option<MarkedCheckpoint>,
}

impl Mark {
    /// "best eval 0.321 at step 1000, now 0.4200 at step 5000 (+30.8%); checkpoint ... (at it)"
    pub fn describe(&self) -> String {
        format!(
            "best eval loss {} at step {}, now {} at step {} (+{:.1}%, {} eval(s) above best + {}); {}",
            num(self.eval_loss),
            self.step,
            num(self.newest_eval_loss),
            self.newest_step,
            100.0 * self.rise_frac,
            self.evals_above,
            num(self.margin),
            self.checkpoint_words()
        )
    }

    pub fn checkpoint_words(&self) -> String {
        match &self.checkpoint {
            Some(c) if c.relation == "at" => {
                format!("checkpoint {} is at that step", c.path)
            }
            Some(c) => format!(
                "checkpoint {} (step {}) is the newest before it",
                c.path, c.step
            ),
            None => format!("no published checkpoint at or before step {}", self.step),
        }
    }
}

/// The mark that stands for `run`: the newest critic verdict whose eval check judged
/// (pass, warn or fail) decides; it stands when that verdict carries a `best`. Returns the
/// verdict's seq and status with the mark.
pub fn standing(records: &[Record], run: &str) -> Option<Standing> {
    standing_of(records.iter(), run)
}

/// [`standing`] over borrowed records (the report's view of one run).
pub fn standing_refs(records: &[&Record], run: &str) -> Option<Standing> {
    standing_of(records.iter().copied(), run)
}

fn standing_of<'a>(
    mut records: impl DoubleEndedIterator<Item = &'a Record>,
    run: &str,
) -> Option<Standing> {
    let judged = |r: &&Record| {
        r.kind == Kind::Verdict
            && r.source == "critic"
            && r.run == run
            && r.get("checks")
                .and_then(|c| c.as_array())
                .into_iter()
                .flatten()
                .any(|c| {
                    c.get("check").and_then(|n| n.as_str()) == Some("eval")
                        && matches!(
                            c.get("status").and_then(|s| s.as_str()),
                            Some("pass" | "warn" | "fail")
                        )
                })
    };
    let v = records.rfind(judged)?;
    let mark: Mark = serde_json::from_value(v.get("best")?.clone()).ok()?;
    Some(Standing {
        seq: v.seq,
        status: v.str_field("status").unwrap_or("?").to_string(),
        mark,
    })
}

/// A standing overfitting mark and the verdict that filed it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Standing {
    pub seq: u64,
    pub status: String,
    #[serde(flatten)]
    pub mark: Mark,
}

/// A loss or margin as the mark's words print it: 4 decimals, trailing zeros off; tiny or huge
/// values in exponent form.
fn num(v: f64) -> String {
    let a = v.abs();
    if v.is_finite() && a != 0.0 && !(1e-3..1e5).contains(&a) {
        return format!("{v:.2e}");
    }
    let s = format!("{v:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
