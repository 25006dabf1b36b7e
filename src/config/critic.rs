//! Sections the critic reads: `[metrics]` (which log keys mean what), `[schedule]` (the LR
//! curve), `[[phase]]` (per-phase thresholds), `[critic]` (cadence) and `[[quiet]]` (declared
//! quiet periods such as evals and checkpoint saves).

use super::units::{Band, Dur};
use serde::{Deserialize, Serialize};

/// Which key in the training's log holds which metric.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    pub step: String,
    pub loss: String,
    pub lr: String,
    pub grad_norm: String,
    pub tokens_per_s: String,
    /// VRAM as logged by the training (unit in `vram_unit`).
    pub vram: String,
    pub vram_unit: VramUnit,
    pub eval_loss: String,
    /// Wall-clock time of the sample (unix seconds or RFC 3339); absent → time it was read.
    pub time: String,
    /// For `format = "text"`: regexes with named groups (`(?P<step>\d+)`), or unnamed groups
    /// mapped in order by `fields`.
    pub patterns: Vec<TextPattern>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            step: "step".into(),
            loss: "loss".into(),
            lr: "lr".into(),
            grad_norm: "grad_norm".into(),
            tokens_per_s: "tokens_per_s".into(),
            vram: "vram_gib".into(),
            vram_unit: VramUnit::GiB,
            eval_loss: "eval_loss".into(),
            time: "time".into(),
            patterns: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub enum VramUnit {
    #[serde(rename = "bytes")]
    Bytes,
    MiB,
    GiB,
    MB,
    GB,
}

impl VramUnit {
    pub fn to_gib(self, v: f64) -> f64 {
        const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
        match self {
            VramUnit::Bytes => v / GIB,
            VramUnit::MiB => v / 1024.0,
            VramUnit::GiB => v,
            VramUnit::MB => v * 1e6 / GIB,
            VramUnit::GB => v * 1e9 / GIB,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TextPattern {
    pub regex: String,
    /// Names for unnamed capture groups, in order (e.g. `["step", "loss"]`).
    #[serde(default)]
    pub fields: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    Constant,
    Cosine,
    Linear,
    /// Warmup-stable-decay: warmup, flat at peak, then a final decay over `decay_steps`.
    Wsd,
    InverseSqrt,
}

/// The LR curve the run should follow. One curve for the run; thresholds stay per phase.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    pub kind: ScheduleKind,
    pub peak_lr: f64,
    #[serde(default)]
    pub min_lr: f64,
    #[serde(default)]
    pub warmup_steps: u64,
    /// Step at which decay reaches `min_lr` (cosine, linear, wsd).
    pub total_steps: Option<u64>,
    /// WSD: length of the final decay phase.
    pub decay_steps: Option<u64>,
    /// WSD: shape of its final decay.
    #[serde(default = "default_wsd_shape")]
    pub decay_shape: DecayShape,
    /// Allowed |lr - expected| as a fraction of `peak_lr`.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    /// Trainers log the LR of a neighbouring step: accept any expected value within ±k steps.
    #[serde(default = "default_step_slack")]
    pub step_slack: u64,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DecayShape {
    Cosine,
    Linear,
    /// 1 - sqrt(progress), as in the WSD / MiniCPM papers.
    Sqrt,
}

fn default_wsd_shape() -> DecayShape {
    DecayShape::Linear
}
fn default_tolerance() -> f64 {
    0.02
}
fn default_step_slack() -> u64 {
    2
}

/// Thresholds for one contiguous step range. There is no global threshold.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseConfig {
    pub name: String,
    /// First step of the phase (inclusive).
    pub from: u64,
    /// End of the phase (exclusive). Only the last phase may leave it open.
    pub to: Option<u64>,
    /// Expected loss band [lo, hi]; below lo catches a loss collapsed to 0.
    pub loss: Option<Band>,
    /// Allowed loss slope per 1000 steps [lo, hi] over the window (robust Theil–Sen slope):
    /// warns only when its whole confidence interval is past a bound.
    pub loss_slope: Option<Band>,
    /// The slope is judged only over a window spanning at least this many steps (a slope
    /// over a few dozen steps of per-step loss is batch noise).
    #[serde(default = "default_min_span")]
    pub loss_slope_min_span: u64,
    /// A sample above `loss_spike` × the window's median loss is a spike.
    pub loss_spike: Option<f64>,
    pub grad_norm_max: Option<f64>,
    /// A grad norm above `grad_norm_spike` × the window's median is a spike.
    pub grad_norm_spike: Option<f64>,
    pub tokens_per_s_min: Option<f64>,
    pub vram_max_gib: Option<f64>,
    /// No new sample / step for this long → stale.
    pub stale: Option<Dur>,
    /// Samples in the judging window.
    #[serde(default = "default_window")]
    pub window: usize,
}

fn default_window() -> usize {
    50
}

fn default_min_span() -> u64 {
    100
}

/// A declared quiet period: every `every` steps the log may be silent for up to `duration`
/// (an eval, a checkpoint save). Declared, never guessed.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QuietConfig {
    pub name: String,
    pub every: u64,
    pub duration: Dur,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CriticConfig {
    /// Daemon tick.
    pub interval: Dur,
    /// NaN/Inf grad norm must persist this many samples before it warns (fp16 skipped steps).
    pub grad_nonfinite_consecutive: usize,
    /// Evals looked at for the overfitting trend.
    pub eval_window: usize,
    /// The loss band, grad-norm ceiling and VRAM are judged on the median of this many of
    /// the newest samples, so one noisy batch does not fail a run (NaN and 0 fail at once).
    pub band_samples: usize,
    /// Samples a trend (loss slope, spike median) needs before it is judged; fewer → unknown.
    pub min_samples: usize,
    /// Confidence of the loss slope's interval (Theil–Sen, Sen 1968) that must clear a
    /// `loss_slope` bound before it warns.
    pub loss_slope_confidence: f64,
    /// Run the disk check each tick.
    pub disk_check: bool,
}

impl Default for CriticConfig {
    fn default() -> Self {
        CriticConfig {
            interval: Dur::secs(30),
            grad_nonfinite_consecutive: 3,
            eval_window: 3,
            band_samples: 5,
            min_samples: 5,
            loss_slope_confidence: 0.95,
            disk_check: false,
        }
    }
}
