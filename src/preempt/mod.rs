//! Preemption: notice sources (a SLURM signal or end time, cloud metadata, SIGTERM) turned into
//! one `Notice` with a deadline, and the pure decisions of the hand-off the watch runs on it
//! (wait for a verified save or stop at the deadline, requeue how, does a save fit the window).
//! The OS and network edges (squeue, scontrol, metadata HTTP, the polling thread) are in
//! `slurm.rs`, `cloud.rs` and `feed.rs`; the hand-off's steps run in `watch/preempt.rs`.

pub mod cloud;
pub mod feed;
pub mod fit;
pub mod handoff;
pub mod slurm;

use serde::Serialize;

/// Who said the end is coming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// `sbatch --signal=B:USR1@N` reached roger.
    SlurmSignal,
    /// The job's end time (squeue / scontrol) is less than the window away.
    SlurmEndTime,
    /// SIGTERM from whatever launched roger.
    Sigterm,
    Aws,
    Gce,
    Azure,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::SlurmSignal => "slurm-signal",
            Source::SlurmEndTime => "slurm-end-time",
            Source::Sigterm => "sigterm",
            Source::Aws => "aws",
            Source::Gce => "gce",
            Source::Azure => "azure",
        }
    }
}

/// A notice: where it came from, what it said, and when the machine (or job) goes away, in
/// unix seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notice {
    pub source: Source,
    /// What the source said, in words ("USR1", "instance-action terminate at ...").
    pub detail: String,
    pub received_at: f64,
    pub deadline: f64,
}

impl Notice {
    pub fn window_s(&self) -> f64 {
        self.deadline - self.received_at
    }
}

/// Unix seconds now (the edges' clock; the pure code takes `now` as a parameter).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Unix seconds as RFC 3339 UTC, for records.
pub fn rfc3339(t: f64) -> String {
    chrono::DateTime::from_timestamp_millis((t * 1000.0).round() as i64).map_or_else(
        || format!("{t}"),
        |d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}
