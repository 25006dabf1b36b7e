//! The sentinel's inputs (timed samples of log, process tree and GPU) and outputs (state,
//! limit, evidence), as plain serialisable data.

use serde::Serialize;

/// What the log showed at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LogObs {
    pub bytes: u64,
    pub last_step: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Main {
    /// Running; its /proc state letter (R, S, D, ...).
    Alive { state: char },
    /// Exited with a known status (reaped by us, or a defunct entry's exit code).
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// Gone and its status unknowable (attached to a process that was reaped elsewhere).
    Gone,
}

/// The run's process tree at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ProcObs {
    pub main: Main,
    /// Live processes of the run other than the main one.
    pub others: u32,
    /// CPU seconds of work the run has done since the watch's first sample: counted per
    /// process, with the work of children reaped inside the run (monotone).
    pub cpu_s: f64,
    /// Syscall I/O bytes done since the first sample, counted the same way (None when some
    /// process's I/O could not be read since the previous sample).
    pub io_bytes: Option<u64>,
    /// Processes that left the run since the first sample with their final usage unknown
    /// (reaped outside the run): a window in which this grows cannot be called idle.
    pub lost: u64,
    /// Some process of the tree is in uninterruptible sleep.
    pub d_state: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GpuObs {
    /// No GPU here (CPU machine, or disabled): not blinding.
    Absent { why: String },
    /// A driver is there but the read failed.
    Failed { why: String },
    Read {
        /// Highest utilisation (%) over the run's GPUs.
        util: Option<f64>,
        /// Power draw as a fraction of the limit, on the busiest of them.
        power_frac: Option<f64>,
        /// VRAM held by the run's processes.
        run_vram: Option<u64>,
    },
}

/// One timed sample; `at` is seconds on a monotonic clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at: f64,
    pub log: Result<LogObs, String>,
    pub proc: Result<ProcObs, String>,
    pub gpu: GpuObs,
    /// Each rank's counters (a distributed run; empty otherwise).
    pub ranks: Vec<crate::ranks::RankObs>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum State {
    Working,
    Grind,
    Wedge,
    Zombie,
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    Unknown {
        missing: Vec<String>,
    },
}

impl State {
    pub fn name(&self) -> &'static str {
        match self {
            State::Working => "working",
            State::Grind => "grind",
            State::Wedge => "wedge",
            State::Zombie => "zombie",
            State::Exited { .. } => "exited",
            State::Unknown { .. } => "unknown",
        }
    }
}

/// A stale limit and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limit {
    pub seconds: f64,
    pub source: String,
}

/// Thresholds, from the config; plain numbers so the sentinel stays pure.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Samples a state must hold; they must also span (hysteresis - 1) x interval.
    pub hysteresis: u32,
    /// `[watch] interval`, seconds: the shortest window activity is measured over (when an
    /// earlier sample that old exists), and the unit of hysteresis in time.
    pub interval: f64,
    pub grind_limit: f64,
    /// `[watch] stale`.
    pub stale: Option<f64>,
    /// (from, to, stale seconds, name) per phase.
    pub phases: Vec<(u64, Option<u64>, Option<f64>, String)>,
    /// (name, every steps, seconds).
    pub quiet: Vec<(String, u64, f64)>,
    /// Fraction of one core that counts as busy.
    pub busy_cpu: f64,
    /// Bytes per second of I/O that count as busy.
    pub busy_io: f64,
    /// GPU util (%) that counts as pinned.
    pub gpu_pinned_util: f64,
    /// Power fraction below which a pinned GPU is spinning, not computing.
    pub gpu_low_power: f64,
}

/// A compact copy of a sample for evidence.
#[derive(Debug, Clone, Serialize)]
pub struct Trace {
    pub at: f64,
    pub raw: &'static str,
    pub step: Option<u64>,
    pub log_bytes: Option<u64>,
    pub main: Option<Main>,
    pub others: Option<u32>,
    pub cpu: Option<f64>,
    pub io_per_s: Option<f64>,
    pub gpu_util: Option<f64>,
    pub gpu_power: Option<f64>,
    /// Each rank's CPU, I/O, state and GPU over the window (a distributed run).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<crate::ranks::RankLive>,
}

/// The sentinel's answer for one sample.
#[derive(Debug, Clone, Serialize)]
pub struct Assessment {
    /// The state that counts (held for `hysteresis` samples; Exited at once).
    pub state: State,
    /// This sample's own classification.
    pub raw: State,
    pub reasons: Vec<String>,
    pub limit: Limit,
    pub silent_s: f64,
    pub last_step: Option<u64>,
    /// True when `state` differs from the previous sample's.
    pub changed: bool,
    /// The last samples, oldest first.
    pub samples: Vec<Trace>,
}
