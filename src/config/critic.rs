//! Sections the critic reads: `[metrics]` (which log keys mean what), `[schedule]` (the LR
//! curve), `[[phase]]` (per-phase thresholds), `[critic]` (cadence) and `[[quiet]]` (declared
//! quiet periods such as evals and checkpoint saves).

use super::units::{Band, Dur};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    /// HF get_constant_schedule_with_warmup (also spelled `constant-with-warmup`).
    #[serde(alias = "constant-with-warmup")]
    Constant,
    Cosine,
    Linear,
    /// Warmup-stable-decay: warmup, flat at peak, then a final decay over `decay_steps`.
    Wsd,
    InverseSqrt,
    /// HF get_polynomial_decay_schedule_with_warmup: `power`, ending at `min_lr` (lr_end).
    Polynomial,
    /// PyTorch StepLR: × `gamma` every `step_size` steps.
    Step,
    /// PyTorch MultiStepLR: × `gamma` at each of `milestones`.
    #[serde(rename = "multistep")]
    MultiStep,
    /// PyTorch OneCycleLR: `pct_start`, `div_factor`, `final_div_factor`, `anneal`.
    OneCycle,
    /// HF get_cosine_with_hard_restarts_schedule_with_warmup: `num_cycles` cosines.
    CosineRestarts,
    /// PyTorch CosineAnnealingWarmRestarts (SGDR): cycles of `t_0` steps, × `t_mult` each.
    Sgdr,
    /// PyTorch ReduceLROnPlateau: no curve; the lr never rises and drops only by `factor`.
    Plateau,
    /// Ultralytics YOLO's linear `lf`: lr0 × ((1 - e/epochs)(1 - lrf) + lrf) over the 0-based
    /// epoch `e`, decaying from epoch 0 (not from the warmup's end), the warmup a ramp that
    /// multiplies it. Steps are results.csv's epochs (counted from 1); `total_steps` is
    /// `epochs`, `min_lr` lr0 × lrf.
    YoloLinear,
    /// Ultralytics YOLO with `cos_lr`: its `one_cycle` cosine from lr0 to lr0 × lrf.
    YoloCos,
}

/// OneCycleLR's annealing.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Anneal {
    Cos,
    Linear,
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
    /// Warmup as a fraction of `total_steps` (HF: ceil(ratio × total)); instead of warmup_steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_ratio: Option<f64>,
    /// Step at which decay reaches `min_lr` (cosine, linear, wsd). Absent: the log's own
    /// total (`[metrics] total_steps`) when it has one.
    pub total_steps: Option<u64>,
    /// The scheduler is stepped once per epoch of this many steps: the lr is a staircase,
    /// held from each epoch's first step (Lightning's default `interval = "epoch"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_per_epoch: Option<u64>,
    /// polynomial: the exponent (HF `power`, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<f64>,
    /// step: decay every this many steps (StepLR `step_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_size: Option<u64>,
    /// multistep: the steps where the lr drops (MultiStepLR `milestones`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub milestones: Option<Vec<u64>>,
    /// step, multistep: the factor of each drop (default 0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gamma: Option<f64>,
    /// one-cycle: share of the steps spent rising (default 0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pct_start: Option<f64>,
    /// one-cycle: initial lr = peak_lr / div_factor (default 25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub div_factor: Option<f64>,
    /// one-cycle: final lr = initial lr / final_div_factor (default 1e4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_div_factor: Option<f64>,
    /// one-cycle: cos (default) or linear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anneal: Option<Anneal>,
    /// cosine-restarts: number of hard restarts' cycles (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_cycles: Option<u64>,
    /// sgdr: steps of the first cycle (T_0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_0: Option<u64>,
    /// sgdr: each cycle is this many times longer than the one before (T_mult, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_mult: Option<u64>,
    /// plateau: each drop multiplies the lr by this (ReduceLROnPlateau `factor`, default 0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
    /// Per `[metrics] lr` key: that group's lr is this × the schedule (default 1 each),
    /// e.g. `[1.0, 0.1]` for AdamW and Muon at a tenth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_scale: Option<Vec<f64>>,
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

impl Default for ScheduleConfig {
    /// A constant schedule at 0 with every optional key unset (for building one in code).
    fn default() -> Self {
        ScheduleConfig {
            kind: ScheduleKind::Constant,
            peak_lr: 0.0,
            min_lr: 0.0,
            warmup_steps: 0,
            warmup_ratio: None,
            total_steps: None,
            steps_per_epoch: None,
            decay_steps: None,
            decay_shape: default_wsd_shape(),
            power: None,
            step_size: None,
            milestones: None,
            gamma: None,
            pct_start: None,
            div_factor: None,
            final_div_factor: None,
            anneal: None,
            num_cycles: None,
            t_0: None,
            t_mult: None,
            factor: None,
            group_scale: None,
            tolerance: default_tolerance(),
            step_slack: default_step_slack(),
        }
    }
}

impl ScheduleConfig {
    /// The schedule as judged: `total_steps` taken from the log when the config leaves it
    /// out, and `warmup_ratio` turned into `warmup_steps` (HF: ceil(ratio × total)).
    pub fn resolved(&self, log_total: Option<u64>) -> ScheduleConfig {
        let mut s = self.clone();
        s.total_steps = s.total_steps.or(log_total);
        if let (Some(r), Some(t)) = (s.warmup_ratio, s.total_steps) {
            if s.warmup_steps == 0 {
                s.warmup_steps = (t as f64 * r).ceil() as u64;
            }
            s.warmup_ratio = None;
        }
        s
    }

    /// Group `g`'s schedule: peak and floor × its `group_scale` (tolerance follows the peak).
    pub fn for_group(&self, g: usize) -> ScheduleConfig {
        let k = self.scale(g);
        let mut s = self.clone();
        s.peak_lr *= k;
        s.min_lr *= k;
        s
    }

    pub fn scale(&self, g: usize) -> f64 {
        self.group_scale
            .as_ref()
            .and_then(|v| v.get(g).copied())
            .unwrap_or(1.0)
    }
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
    /// Overfitting: this many evals in a row above the best eval + margin (while the train
    /// loss falls) fail; the first warns.
    pub eval_window: usize,
    /// Overfitting: the margin is at least this fraction of the best eval loss.
    pub eval_margin: f64,
    /// Overfitting: the margin is at least this many times the run's own eval noise (its
    /// largest recovered rise before the best, relative).
    pub eval_noise: f64,
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

/// `[critic] eval_margin` default: a rise under 0.5% of the best is never overfitting (a
/// real QLoRA fine-tune's overfitting began +1.4% above its best, its eval noise 0.1%).
pub const DEFAULT_EVAL_MARGIN: f64 = 0.005;
/// `[critic] eval_noise` default: twice the largest rise the run recovered from before.
pub const DEFAULT_EVAL_NOISE: f64 = 2.0;

impl Default for CriticConfig {
    fn default() -> Self {
        CriticConfig {
            interval: Dur::secs(30),
            grad_nonfinite_consecutive: 3,
            eval_window: 3,
            eval_margin: DEFAULT_EVAL_MARGIN,
            eval_noise: DEFAULT_EVAL_NOISE,
            band_samples: 5,
            min_samples: 5,
            loss_slope_confidence: 0.95,
            disk_check: false,
        }
    }
}
