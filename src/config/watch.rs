//! `[watch]`: how to relaunch, how patient to be, and when to give up.

use super::units::{Bytes, Dur};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatchConfig {
    /// Relaunch command (argv). `{ckpt}`, `{step}`, `{diverged_at}`, `{best_ckpt}` are filled
    /// in; the same values are in ROGER_RESUME_CKPT / ROGER_RESUME_STEP / ROGER_DIVERGED_AT /
    /// ROGER_BEST_CKPT.
    pub command: Vec<String>,
    /// Sampling interval.
    pub interval: Dur,
    /// A state must hold this many samples in a row, spanning at least (hysteresis - 1) x
    /// interval of time, before it counts.
    pub hysteresis: u32,
    /// SIGTERM → SIGKILL grace.
    pub grace: Dur,
    /// Busy without progress for longer than this is treated as a wedge.
    pub grind_limit: Dur,
    /// Stale limit when no phase declares one; absent → calibrated from the run.
    pub stale: Option<Dur>,
    /// Safety factor on the longest observed progress gap when calibrating.
    pub calibrate_factor: f64,
    pub max_relaunches: u32,
    pub max_relaunches_per_window: u32,
    pub relaunch_window: Dur,
    pub backoff_initial: Dur,
    pub backoff_max: Dur,
    /// Loop breakers: this many consecutive relaunches (the first launch is not counted) each
    /// ending within `breaker_within` of its start; named for what ended them (crash_loop,
    /// rollback_loop, wedge_loop, or relaunch_loop when mixed).
    pub breaker_crashes: u32,
    pub breaker_within: Dur,
    /// Progress breaker: last good checkpoint step unchanged across this many relaunches.
    pub breaker_no_progress: u32,
    /// With no good checkpoint, may the run start from scratch?
    pub allow_from_scratch: bool,
    /// Run before a kill, e.g. ["py-spy", "dump", "--pid", "{pid}"]; output saved as evidence.
    pub evidence_hook: Vec<String>,
    pub evidence_timeout: Dur,
    /// Bounded wait for the run's GPU memory to be released before relaunch.
    pub gpu_release_timeout: Dur,
    /// What to do when VRAM is still held by processes outside the run.
    pub on_foreign_vram: ForeignVram,
    /// Roll back on these critic failures (check names, e.g. "loss", "loss_spike").
    pub rollback_on: Vec<String>,
    /// Steps before the divergence to roll back to at least.
    pub rollback_margin_steps: u64,
    /// Run `hygiene disk` (free space + forecast hours to full) at most once a minute and
    /// file a `hygiene` record whenever its status changes. Never an action.
    pub disk_check: bool,
    /// CPU use of the run's process tree, as a fraction of one core, that counts as busy.
    pub busy_cpu: f64,
    /// I/O (read + written through syscalls) per second that counts as busy, e.g. "1MiB".
    pub busy_io: Bytes,
    /// GPU utilisation (%) that counts as pinned.
    pub gpu_pinned_util: f64,
    /// A pinned GPU drawing less than this fraction of its power limit is spinning (an
    /// NCCL-style hang), not computing.
    pub gpu_low_power: f64,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ForeignVram {
    Wait,
    Relaunch,
    Stop,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            command: Vec::new(),
            interval: Dur::secs(5),
            hysteresis: 3,
            grace: Dur::secs(30),
            grind_limit: Dur::secs(45 * 60),
            stale: None,
            calibrate_factor: 3.0,
            max_relaunches: 20,
            max_relaunches_per_window: 5,
            relaunch_window: Dur::secs(6 * 3600),
            backoff_initial: Dur::secs(10),
            backoff_max: Dur::secs(600),
            breaker_crashes: 3,
            breaker_within: Dur::secs(120),
            breaker_no_progress: 3,
            allow_from_scratch: false,
            evidence_hook: Vec::new(),
            evidence_timeout: Dur::secs(30),
            gpu_release_timeout: Dur::secs(120),
            on_foreign_vram: ForeignVram::Wait,
            rollback_on: Vec::new(),
            rollback_margin_steps: 0,
            disk_check: false,
            busy_cpu: 0.1,
            busy_io: Bytes(1 << 20),
            gpu_pinned_util: 90.0,
            gpu_low_power: 0.4,
        }
    }
}
