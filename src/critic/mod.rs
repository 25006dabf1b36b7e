//! The critic's judgement: an [`Observation`] (the window's numbers, the thresholds of the
//! phase the step is in, `now`) goes in, a [`Verdict`] comes out. One pure function per check
//! (`loss.rs`, `checks.rs`, `stale.rs`), combined in `verdict.rs`. No I/O here: the same
//! observation always gives the same verdict, which is what `critic --replay` proves.

pub mod between;
pub mod checks;
pub mod first_look;
#[cfg(test)]
pub(crate) mod fixture;
pub mod loss;
pub mod lr;
pub mod observe;
pub mod onset;
pub mod overfit;
pub mod replay;
pub mod slope;
pub mod spike;
pub mod stale;
pub mod stats;
pub mod summary;
pub mod verdict;

pub use observe::{observe, History};
pub use verdict::{judge, Verdict};

use crate::config::{PhaseConfig, QuietConfig, ScheduleConfig};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::collections::BTreeMap;

/// Check names, in the order they are evaluated.
pub const CHECKS: [&str; 11] = [
    "log",
    "phase",
    "lr",
    "loss",
    "loss_slope",
    "loss_spike",
    "grad_norm",
    "eval",
    "tokens_per_s",
    "vram",
    "stale",
];

pub use crate::status::Status;

/// A number that survives JSON: non-finite values are written as the strings "NaN",
/// "Infinity", "-Infinity" (serde_json would write null) and read back from them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Num(pub f64);

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_finite() {
            s.serialize_f64(v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if v > 0.0 {
            s.serialize_str("Infinity")
        } else {
            s.serialize_str("-Infinity")
        }
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(f64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(v) => Ok(Num(v)),
            Raw::S(s) => match s.as_str() {
                "NaN" => Ok(Num(f64::NAN)),
                "Infinity" => Ok(Num(f64::INFINITY)),
                "-Infinity" => Ok(Num(f64::NEG_INFINITY)),
                other => Err(serde::de::Error::custom(format!(
                    "expected a number or \"NaN\"/\"Infinity\"/\"-Infinity\", got {other:?}"
                ))),
            },
        }
    }
}

/// A number as a JSON value, non-finite as a string (see [`Num`]).
pub fn num(v: f64) -> Value {
    serde_json::to_value(Num(v)).expect("a number serialises")
}

/// The judging rules an observation is judged by. 0: before issue 18 (records without the
/// field), where only the newest sample is judged, a slope is a point estimate and any
/// `unknown` makes the verdict unknown. 1: every sample new since the last verdict is
/// judged, the slope must clear its bound with its confidence interval, a spike keeps the
/// level from before it until the loss returns near it, a NaN newest loss leaves no loss
/// check passing, checks waiting for data do not decide the verdict, and a loss below its
/// band is no divergence. 2: a declared check with too little data says so (an eval check
/// with 2 evals < eval_window 3 is waiting, not "not declared"). 3: the eval check is
/// overfitting as a verdict (`overfit.rs`): above the best eval by a noise margin while the
/// train loss falls warns, `eval_window` such evals in a row fail; and a run whose newest
/// logged lr sits on its schedule's floor, where the schedule has nothing left to tell apart
/// before its total (`stale::ended_on_floor`), has finished. Replay judges an old record by
/// its old rules.
pub const RULES: u32 = 3;

/// Why a check is `unknown` without deciding the verdict (it stays `unknown`: never `pass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unjudged {
    /// Too few samples yet (the start of a phase): more will come.
    Waiting,
    /// This log or config cannot feed it (no lr logged; a window spanning too few steps for
    /// a slope): the reason says what would.
    Skipped,
}

impl Unjudged {
    pub fn as_str(self) -> &'static str {
        match self {
            Unjudged::Waiting => "waiting",
            Unjudged::Skipped => "skipped",
        }
    }
}

/// One check's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub check: String,
    pub status: Status,
    pub observed: Value,
    pub expected: Value,
    /// One plain sentence.
    pub reason: String,
    /// Failing loss / loss_spike: the first step of the divergence (for rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged_at: Option<u64>,
    /// A fail that is no divergence (the loss below its band or exactly 0): where it began.
    /// Rollback leaves it alone; checkpoints from this step on are not good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub began_at: Option<u64>,
    /// Set on an `unknown` that does not decide the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unjudged: Option<Unjudged>,
}

impl CheckResult {
    pub fn new(check: &str, status: Status, reason: impl Into<String>) -> CheckResult {
        CheckResult {
            check: check.to_string(),
            status,
            observed: Value::Null,
            expected: Value::Null,
            reason: reason.into(),
            diverged_at: None,
            began_at: None,
            unjudged: None,
        }
    }
    /// `unknown` for want of data; from rules 1 on, it does not decide the verdict.
    pub fn unjudged(check: &str, why: Unjudged, rules: u32, reason: impl Into<String>) -> Self {
        let mut r = CheckResult::new(check, Status::Unknown, reason);
        r.unjudged = (rules >= 1).then_some(why);
        r
    }
    pub fn began_at(mut self, step: Option<u64>) -> CheckResult {
        self.began_at = step;
        self
    }
    pub fn observed(mut self, v: Value) -> CheckResult {
        self.observed = v;
        self
    }
    pub fn expected(mut self, v: Value) -> CheckResult {
        self.expected = v;
        self
    }
    pub fn diverged_at(mut self, step: Option<u64>) -> CheckResult {
        self.diverged_at = step;
        self
    }
}

/// The thresholds of one phase, with exact numbers (durations in seconds) so that an
/// archived observation is judged exactly as it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub name: String,
    pub from: u64,
    pub to: Option<u64>,
    pub loss: Option<[f64; 2]>,
    pub loss_slope: Option<[f64; 2]>,
    pub loss_spike: Option<f64>,
    pub grad_norm_max: Option<f64>,
    pub grad_norm_spike: Option<f64>,
    pub tokens_per_s_min: Option<f64>,
    pub vram_max_gib: Option<f64>,
    pub stale_s: Option<f64>,
    pub window: usize,
    /// Absent in records from before it (rules 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_slope_min_span: Option<u64>,
}

impl From<&PhaseConfig> for Thresholds {
    fn from(p: &PhaseConfig) -> Thresholds {
        let band = |b: &Option<crate::config::Band>| b.map(|b| [b.lo, b.hi]);
        Thresholds {
            name: p.name.clone(),
            from: p.from,
            to: p.to,
            loss: band(&p.loss),
            loss_slope: band(&p.loss_slope),
            loss_spike: p.loss_spike,
            grad_norm_max: p.grad_norm_max,
            grad_norm_spike: p.grad_norm_spike,
            tokens_per_s_min: p.tokens_per_s_min,
            vram_max_gib: p.vram_max_gib,
            stale_s: p.stale.map(|d| d.as_secs_f64()),
            window: p.window,
            loss_slope_min_span: Some(p.loss_slope_min_span),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quiet {
    pub name: String,
    pub every: u64,
    pub duration_s: f64,
}

impl From<&QuietConfig> for Quiet {
    fn from(q: &QuietConfig) -> Quiet {
        Quiet {
            name: q.name.clone(),
            every: q.every,
            duration_s: q.duration.as_secs_f64(),
        }
    }
}

/// `[critic]` knobs a check reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub grad_nonfinite_consecutive: usize,
    pub eval_window: usize,
    pub band_samples: usize,
    pub min_samples: usize,
    /// Absent in records from before it (rules 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_slope_confidence: Option<f64>,
    /// `[critic] eval_margin` (rules 3; absent before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_margin: Option<f64>,
    /// `[critic] eval_noise` (rules 3; absent before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_noise: Option<f64>,
}

/// One sample of the window, as archived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObsSample {
    pub step: u64,
    /// Borrowed names when built from a log (50 samples × 6 metrics of `String` were a
    /// tenth of a cached `critic --once`); owned when read back from the ledger.
    pub values: BTreeMap<std::borrow::Cow<'static, str>, Num>,
}

impl ObsSample {
    pub fn get(&self, metric: &str) -> Option<f64> {
        self.values.get(metric).map(|n| n.0)
    }
}

/// One eval, with the train loss of the stretch before it (median).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    pub step: u64,
    pub eval_loss: Num,
    pub train_loss: Option<Num>,
    /// `[metrics] eval_score` at the same eval (higher is better), where the run logs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<Num>,
}

/// VRAM read from the GPU when the log has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuVram {
    /// GiB in use on the fullest GPU (of the run's PIDs when known).
    pub used_gib: Option<Num>,
    /// How it was measured, said in the reason ("pids 123" or "total memory used ...").
    pub scope: String,
    /// Why there is no reading.
    pub error: Option<String>,
}

/// Everything a verdict is computed from. Archived in the ledger with the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// Unix seconds at judging time.
    pub now: f64,
    pub config_hash: String,
    /// The newest step of the run's current timeline.
    pub step: Option<u64>,
    pub phase: Option<Thresholds>,
    /// As judged: `total_steps` from the log when the config leaves it out, `warmup_ratio`
    /// turned into steps.
    pub schedule: Option<ScheduleConfig>,
    /// The run's planned last step, from `[schedule]` or the log (absent in observations
    /// archived before it existed).
    #[serde(default)]
    pub total_steps: Option<u64>,
    pub quiet: Vec<Quiet>,
    pub settings: Settings,
    /// The phase's last `window` samples (train metrics), oldest first.
    pub window: Vec<ObsSample>,
    /// A finished run: earlier (step, lr) samples where the schedule is distinguishable,
    /// judged by the lr check with the window (absent otherwise, and in records from before
    /// it: the window alone was judged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_lr: Vec<(u64, Num)>,
    /// Half a unit in the last decimal the run's logged lr shows (rules >= 3): how close to
    /// its schedule's floor a logged lr can be told apart (`stale::printed_resolution`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr_resolution: Option<Num>,
    pub evals: Vec<EvalPoint>,
    /// The published checkpoint nearest the best eval (at or before it), looked up by the
    /// caller when the eval loss has risen above its best (rules 3; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_best: Option<overfit::NearBest>,
    /// Time of the newest sample, and of the first sample at the newest step.
    pub last_sample_at: Option<f64>,
    pub advanced_at: Option<f64>,
    pub gpu_vram: Option<GpuVram>,
    /// Where the loss's trailing bad runs began over the whole series, which may be before
    /// the window (absent in observations archived before it existed: the window decides).
    #[serde(default)]
    pub onsets: onset::Onsets,
    /// Loss and grad-norm events among the samples new since the last verdict (absent in
    /// records from before it: only the newest sample was judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between: Option<between::Missed>,
    pub samples_total: u64,
    pub garbage_total: u64,
    /// The judging rules ([`RULES`]); 0 in records from before the field.
    #[serde(default)]
    pub rules: u32,
    /// With `{rank}` in `[run] log`: the other ranks' logs (the curves are the judged
    /// rank's), for staleness — one rank whose log stops is a stale run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankProgress>,
}

/// Where another rank's log stands: its newest step and when the file last changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankProgress {
    pub rank: u32,
    pub step: Option<u64>,
    pub changed_at: Option<f64>,
}

impl Observation {
    /// (step, value) of a metric in the window, non-finite values included.
    pub fn series(&self, metric: &str) -> Vec<(u64, f64)> {
        self.window
            .iter()
            .filter_map(|s| s.get(metric).map(|v| (s.step, v)))
            .collect()
    }
}

/// A number for sentences: at most 4 decimals, scientific when tiny or huge.
pub fn fmt(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e5).contains(&a) {
        format!("{v:.2e}")
    } else {
        let s = format!("{v:.4}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    }
}
