//! `[publish]` retention, `[disk]` levels, `[hygiene]` (flapping, regression margins) and
//! `[quarantine]`.

use super::units::{Bytes, Dur};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Checkpoint retention, shared by `publish` and `hygiene disk --prune`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PublishConfig {
    /// Keep the newest N checkpoints.
    pub keep_last: usize,
    /// Also keep every checkpoint whose step is a multiple of M (0 = off).
    pub keep_every: u64,
    /// Free space required beyond the checkpoint's own size.
    pub margin: Bytes,
    /// `roger publish` queues the publish and returns at once (as `--detach`).
    pub detach: bool,
    /// `s3://bucket/prefix/`: every published checkpoint is also sent there, verified
    /// (`[remote]` says how to reach it; credentials come from the environment). Parsed here,
    /// as the file is read.
    pub remote: Option<super::remote::Target>,
}

impl Default for PublishConfig {
    fn default() -> Self {
        PublishConfig {
            keep_last: 3,
            keep_every: 0,
            margin: Bytes(256 << 20),
            detach: false,
            remote: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiskConfig {
    pub warn_free: Bytes,
    pub fail_free: Bytes,
    /// Forecast hours to full below which it warns / fails.
    pub warn_hours: f64,
    pub fail_hours: f64,
    /// The Windows host drive that backs a WSL2 VHDX (e.g. "/mnt/c"); auto-detected on WSL.
    pub host: Option<PathBuf>,
    /// `hygiene disk --prune` stops once this much is free.
    pub prune_goal_free: Option<Bytes>,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            warn_free: Bytes(20 << 30),
            fail_free: Bytes(5 << 30),
            warn_hours: 12.0,
            fail_hours: 2.0,
            host: None,
            prune_goal_free: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HygieneConfig {
    /// Verdicts per check looked at for flapping.
    pub flap_window: usize,
    /// Flap score above which a check starts flapping / below which it stops.
    pub flap_high: f64,
    pub flap_low: f64,
    /// Regression margins (relative): loss higher, tokens/s lower, grad norm higher.
    pub regress_loss: f64,
    pub regress_tokens_per_s: f64,
    pub regress_grad_norm: f64,
}

impl Default for HygieneConfig {
    fn default() -> Self {
        HygieneConfig {
            flap_window: 21,
            flap_high: 0.5,
            flap_low: 0.25,
            regress_loss: 0.05,
            regress_tokens_per_s: 0.10,
            regress_grad_norm: 0.5,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuarantineConfig {
    /// Where quarantined items go (same filesystem as what is quarantined, so it is a move).
    pub dir: Option<PathBuf>,
    /// Outputs of the run that must parse and hold finite numbers (eval results etc.).
    pub outputs: Vec<PathBuf>,
    /// `purge` default age.
    pub purge_after: Dur,
    /// `prove` kills a trial that runs longer than this (absent: no limit).
    pub trial_timeout: Option<Dur>,
}

impl Default for QuarantineConfig {
    fn default() -> Self {
        QuarantineConfig {
            dir: None,
            outputs: Vec::new(),
            purge_after: Dur::secs(7 * 86400),
            trial_timeout: None,
        }
    }
}
