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
    /// (before the collective); a job that logs none is judged by CPU activity, in windows
    /// where every rank works.
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

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::{Path, PathBuf};

    fn parse(text: &str) -> anyhow::Result<Config> {
        Config::parse(text, Path::new("/r/roger.toml"))
    }

    #[test]
    fn a_rank_pattern_judges_one_rank_and_keeps_the_pattern() {
        let c = parse("[run]\nname = \"x\"\nlog = \"logs/rank{rank}.jsonl\"\n").unwrap();
        assert_eq!(c.run.log, Some(PathBuf::from("/r/logs/rank0.jsonl")));
        assert_eq!(
            c.run.rank_log,
            Some(PathBuf::from("/r/logs/rank{rank}.jsonl"))
        );
        assert_eq!(c.ranks.straggler_share, 0.75);
        let c = parse("[run]\nname = \"x\"\nlog = \"logs/rank{rank}.jsonl\"\n[ranks]\njudge = 2\n")
            .unwrap();
        assert_eq!(c.run.log, Some(PathBuf::from("/r/logs/rank2.jsonl")));
        let c = parse("[run]\nname = \"x\"\nlog = \"train.jsonl\"\n").unwrap();
        assert_eq!(c.run.rank_log, None);
    }

    #[test]
    fn a_misplaced_rank_placeholder_or_unknown_key_is_an_error() {
        let e = parse("[run]\nname = \"x\"\nlog = \"rank{rank}/log.jsonl\"\n").unwrap_err();
        assert!(
            format!("{e:#}").contains("expected `{rank}` once, in the file name"),
            "{e:#}"
        );
        let e = parse("[run]\nname = \"x\"\nlog = \"r{rank}-{rank}.jsonl\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("once"), "{e:#}");
        let e = parse("[run]\nname = \"x\"\n[ranks]\nstraggler_shar = 0.5\n").unwrap_err();
        assert!(format!("{e:#}").contains("straggler_shar"), "{e:#}");
    }
}
