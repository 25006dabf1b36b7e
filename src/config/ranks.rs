//! `[ranks]`: a distributed run's ranks — which rank's log the curves are judged on, and the
//! straggler rule (a warning, never a kill).

use super::units::Dur;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RanksConfig {
    /// With `{rank}` in `[run] log`: the rank whose log the critic's curves are judged on
    /// (the others feed staleness and the straggler rule).
    pub judge: u32,
    /// A rank whose speed stays below this share of the median rank's is a straggler
    /// (NVRx's default 0.75).
    pub straggler_share: f64,
    /// ... for this many windows in a row.
    pub straggler_windows: u32,
    /// The length of one window.
    pub straggler_window: Dur,
    /// The key in each rank's JSONL log holding the seconds of its own work in a step
    /// (before the collective); without it the rule falls back on CPU activity.
    pub step_time: String,
    /// Step times a rank must log in a window for them to be used.
    pub min_steps: u32,
}

impl Default for RanksConfig {
    fn default() -> Self {
        RanksConfig {
            judge: 0,
            straggler_share: 0.75,
            straggler_windows: 3,
            straggler_window: Dur::secs(60),
            step_time: "step_time".into(),
            min_steps: 3,
        }
    }
}

impl RanksConfig {
    pub fn rule(&self) -> crate::ranks::straggler::Rule {
        crate::ranks::straggler::Rule {
            share: self.straggler_share,
            windows: self.straggler_windows.max(1),
            window_s: self.straggler_window.0.as_secs_f64(),
            min_steps: self.min_steps.max(1) as usize,
        }
    }
}
