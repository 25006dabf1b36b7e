//! `[preempt]`: which notices of a coming end (SLURM signal or end time, cloud metadata,
//! SIGTERM) start the hand-off, how the training is asked to save, how long to wait for its
//! publish, and how the job comes back (scontrol requeue or an exit code). Off unless written.

use super::units::Dur;
use serde::{Deserialize, Serialize};

/// Exit code of `roger watch` after a hand-off: "requeue me". Distinct from 75 (do not restart).
pub const DEFAULT_REQUEUE_EXIT_CODE: u8 = crate::exit::REQUEUE;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PreemptConfig {
    /// The signal `sbatch --signal=B:SIG@N` sends ("USR1" or "USR2"); "" listens for none.
    pub slurm_signal: String,
    /// The N of `--signal=B:USR1@N`: seconds from the signal to the end (SLURM may send it
    /// up to 60 s early, which only adds time).
    pub slurm_window: Dur,
    /// Inside a SLURM job (SLURM_JOB_ID set), also read the job's end time (`squeue -o %e`,
    /// else `scontrol show job`) and start the hand-off `slurm_window` before it, so a job
    /// submitted without `--signal` is not cut off by its time limit.
    pub slurm_end_time: bool,
    /// How often the end time is read again (`scontrol update` may move it).
    pub end_time_poll: Dur,
    /// SIGTERM from whatever launched roger (Kubernetes, systemd, a cloud agent) is a notice.
    /// Unset: yes outside a SLURM job; inside one, no — there SIGTERM is `scancel` or the hard
    /// time limit (the notice is the signal or the end time), and a cancelled job must not be
    /// requeued, so SIGTERM stops the run as without `[preempt]`.
    pub sigterm: Option<bool>,
    /// Seconds a SIGTERM leaves (Kubernetes' terminationGracePeriodSeconds defaults to 30).
    pub sigterm_window: Dur,
    /// Cloud metadata services to poll: any of "aws", "gce", "azure".
    pub cloud: Vec<Cloud>,
    /// How often they are polled (AWS recommends every 5 s).
    pub cloud_poll: Dur,
    /// Base URLs (tests point them at loopback).
    pub aws_url: String,
    pub gce_url: String,
    pub azure_url: String,
    /// How the training is asked to save now: touch the file named in ROGER_SAVE_NOW, send
    /// `save_signal` to the trainer's main process, or both.
    pub save_now: SaveNow,
    pub save_signal: String,
    /// Stop waiting for the publish this long before the deadline (time to stop the tree
    /// and requeue).
    pub margin: Dur,
    /// "scontrol": `scontrol requeue $SLURM_JOB_ID`; "exit": exit `requeue_exit_code` for the
    /// wrapper to map; "auto": scontrol when inside a job and on PATH, else the exit code.
    pub requeue: Requeue,
    pub requeue_exit_code: u8,
    /// With `[publish] remote`: the hand-off's save counts only once its bucket copy is
    /// verified (the local disk may not survive the preemption: a spot VM's NVMe, a pod's
    /// emptyDir). false: a verified local publish is enough.
    pub require_remote: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Cloud {
    Aws,
    Gce,
    Azure,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SaveNow {
    File,
    Signal,
    Both,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Requeue {
    Auto,
    Scontrol,
    Exit,
}

impl Default for PreemptConfig {
    fn default() -> Self {
        PreemptConfig {
            slurm_signal: "USR1".into(),
            slurm_window: Dur::secs(120),
            slurm_end_time: true,
            end_time_poll: Dur::secs(60),
            sigterm: None,
            sigterm_window: Dur::secs(30),
            cloud: Vec::new(),
            cloud_poll: Dur::secs(5),
            aws_url: "http://169.254.169.254".into(),
            gce_url: "http://metadata.google.internal".into(),
            azure_url: "http://169.254.169.254".into(),
            save_now: SaveNow::File,
            save_signal: "USR1".into(),
            margin: Dur::secs(10),
            requeue: Requeue::Auto,
            requeue_exit_code: DEFAULT_REQUEUE_EXIT_CODE,
            require_remote: true,
        }
    }
}

/// "USR1" / "SIGUSR1" / "usr2" -> the signal number, for the signals a notice or a save
/// request may use.
pub fn signal_number(name: &str) -> Option<i32> {
    let n = name.trim().to_ascii_uppercase();
    let n = n.strip_prefix("SIG").unwrap_or(&n);
    match n {
        "USR1" => Some(libc::SIGUSR1),
        "USR2" => Some(libc::SIGUSR2),
        "TERM" => Some(libc::SIGTERM),
        "INT" => Some(libc::SIGINT),
        "HUP" => Some(libc::SIGHUP),
        "CONT" => Some(libc::SIGCONT),
        _ => None,
    }
}

impl PreemptConfig {
    /// Is SIGTERM a notice here (`in_slurm`: inside a SLURM job)?
    pub fn sigterm_is_notice(&self, in_slurm: bool) -> bool {
        self.sigterm.unwrap_or(!in_slurm)
    }

    /// Checks serde cannot make; errors name the section and key.
    pub fn check(&self) -> Result<(), String> {
        let c = self.requeue_exit_code;
        if matches!(c, 0 | 1 | 2 | 75) || c >= 126 {
            return Err(format!(
                "[preempt] requeue_exit_code must differ from roger's own codes (0 done, 1 not done, 2 usage, 75 do not restart) and from the shell's (126 and up), got {c}"
            ));
        }
        if !self.slurm_signal.is_empty()
            && !matches!(
                signal_number(&self.slurm_signal),
                Some(libc::SIGUSR1 | libc::SIGUSR2)
            )
        {
            return Err(format!(
                "[preempt] slurm_signal expected \"USR1\", \"USR2\" or \"\" (none), got {:?}",
                self.slurm_signal
            ));
        }
        if signal_number(&self.save_signal).is_none() {
            return Err(format!(
                "[preempt] save_signal expected one of USR1, USR2, TERM, INT, HUP, CONT, got {:?}",
                self.save_signal
            ));
        }
        for (key, url) in [
            ("aws_url", &self.aws_url),
            ("gce_url", &self.gce_url),
            ("azure_url", &self.azure_url),
        ] {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "[preempt] {key} expected an http:// or https:// base URL, got {url:?}"
                ));
            }
        }
        if self.cloud_poll.0.is_zero() || self.end_time_poll.0.is_zero() {
            return Err("[preempt] cloud_poll and end_time_poll must be more than 0s".into());
        }
        self.check_margin()
    }

    /// `margin` is taken off every notice window before the hand-off stops waiting for the
    /// save: it must be shorter than each window a notice may come with (SLURM's when a SLURM
    /// signal or the job's end time is read, SIGTERM's unless `sigterm = false`), or the
    /// hand-off never waits at all.
    fn check_margin(&self) -> Result<(), String> {
        use super::units::format_duration as d;
        let mut windows = Vec::new();
        if !self.slurm_signal.is_empty() || self.slurm_end_time {
            windows.push((
                "slurm_window",
                self.slurm_window,
                "set slurm_signal = \"\" and slurm_end_time = false if no SLURM notice comes here",
            ));
        }
        if self.sigterm != Some(false) {
            windows.push((
                "sigterm_window",
                self.sigterm_window,
                "set sigterm = false if SIGTERM is no notice here",
            ));
        }
        for (key, window, or) in windows {
            if self.margin.0 >= window.0 {
                return Err(format!(
                    "[preempt] expected margin < {key} (the hand-off stops waiting for the save margin before the deadline the notice gives, so it would never wait), got margin = {} and {key} = {}; shorten margin, or {or}",
                    d(self.margin.0),
                    d(window.0)
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commented_example_is_the_defaults() {
        let text = include_str!("../../roger.example.toml");
        let block: String = text
            .lines()
            .skip_while(|l| l.trim() != "# [preempt]")
            .skip(1)
            .take_while(|l| l.starts_with("# "))
            .map(|l| format!("{}\n", &l[2..]))
            .collect();
        assert!(block.contains("requeue_exit_code"), "{block}");
        let c: PreemptConfig = toml::from_str(&block).unwrap();
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            serde_json::to_value(PreemptConfig::default()).unwrap()
        );
    }

    #[test]
    fn defaults_pass_and_bad_values_are_named() {
        assert!(PreemptConfig::default().check().is_ok());
        let mut c = PreemptConfig {
            requeue_exit_code: 75,
            ..Default::default()
        };
        assert!(c.check().unwrap_err().contains("requeue_exit_code"));
        c.requeue_exit_code = 76;
        c.slurm_signal = "TERM".into();
        assert!(c.check().unwrap_err().contains("slurm_signal"));
        c.slurm_signal = "sigusr2".into();
        assert!(c.check().is_ok());
        c.aws_url = "169.254.169.254".into();
        assert!(c.check().unwrap_err().contains("aws_url"));
    }
}
