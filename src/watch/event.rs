//! What the watch tells its printer: events (human lines or `--json`), and a status line
//! every tick. One result type, separate printers (cmd/watch.rs).

use crate::sentinel::{Assessment, State};
use serde::Serialize;

/// What the watch tells its printer (human lines or `--json` events).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Start {
        run: String,
        pid: u32,
        attached: bool,
        ledger: String,
        dry_run: bool,
    },
    State {
        /// Flattened: `"state": "wedge"` (plus `code`/`signal` or `missing`).
        #[serde(flatten)]
        state: State,
        step: Option<u64>,
        silent_s: f64,
        limit_s: f64,
        limit_source: String,
        reasons: Vec<String>,
    },
    StaleLimit {
        seconds: f64,
        longest_gap_s: f64,
        /// False when a declared stale limit (`[watch] stale` / the phase's) is the one used.
        in_use: bool,
    },
    Kill {
        seq: u64,
        reason: String,
        /// What caused it, in words: the check, step and verdict for a divergence; the
        /// sentinel's first reason for a wedge.
        why: String,
        pids: Vec<u32>,
        dry_run: bool,
    },
    /// The run's last launch (by an earlier watch) is still running: watched, not restarted.
    Adopted {
        seq: u64,
        pid: u32,
        launched_seq: u64,
        earlier_watch_done: bool,
    },
    /// The earlier watch of this run ended without a `done` record (killed) and its trainer
    /// is gone.
    PreviousWatchDied {
        seq: u64,
        pid: u32,
        launched_seq: u64,
    },
    /// A critic failure that is not about the current launch.
    VerdictIgnored {
        seq: u64,
        verdict_seq: u64,
        check: String,
        step: u64,
        why: String,
    },
    Stopped {
        sigterm: Vec<u32>,
        sigkill: Vec<u32>,
        survivors: Vec<u32>,
    },
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
        lived_s: f64,
    },
    Relaunch {
        seq: u64,
        attempt: u32,
        ckpt: Option<String>,
        step: Option<u64>,
        diverged_at: Option<u64>,
        backoff_s: f64,
    },
    Launched {
        pid: u32,
    },
    Breaker {
        seq: u64,
        breaker: String,
        evidence: String,
    },
    Signal {
        signal: String,
        forwarded_to: Vec<u32>,
    },
    Done {
        code: u8,
        reason: String,
    },
}

/// The printer side: events, plus a status line every tick.
pub trait Report {
    fn event(&mut self, e: &Event);
    fn tick(&mut self, a: &Assessment);
}
