//! Progress of a publish on a terminal: one stderr line (phase, bytes done of total, rate,
//! ETA) redrawn four times a second, cleared at the end; nothing at all when stderr is not a
//! terminal (logs and pipes stay clean). The byte path only bumps counters.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const PHASES: [&str; 2] = ["copy", "verify"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Copy = 0,
    Verify = 1,
}

static DONE: AtomicU64 = AtomicU64::new(0);
static TOTAL: AtomicU64 = AtomicU64::new(0);
static PHASE: AtomicUsize = AtomicUsize::new(0);
/// Nanoseconds since `base()` when the phase began.
static SINCE: AtomicU64 = AtomicU64::new(0);

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// A phase of `total` bytes starts.
pub fn begin(phase: Phase, total: u64) {
    DONE.store(0, Ordering::Relaxed);
    TOTAL.store(total, Ordering::Relaxed);
    PHASE.store(phase as usize, Ordering::Relaxed);
    SINCE.store(base().elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// `n` more bytes of the current phase are done.
pub fn add(n: u64) {
    DONE.fetch_add(n, Ordering::Relaxed);
}

/// The line for `done` of `total` bytes after `secs` seconds. Pure.
pub fn line(phase: &str, done: u64, total: u64, secs: f64) -> String {
    use crate::config::units::format_bytes;
    let done = done.min(total);
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let pct = if total > 0 {
        done as f64 * 100.0 / total as f64
    } else {
        100.0
    };
    let eta = if rate > 0.0 {
        format!("{:.0} s", (total - done) as f64 / rate)
    } else {
        "?".to_string()
    };
    format!(
        "publish {phase}: {} / {} ({pct:.0}%), {}/s, ETA {eta}",
        format_bytes(done),
        format_bytes(total),
        format_bytes(rate as u64)
    )
}

/// Redraws the line until dropped; then clears it.
pub struct Reporter {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Start a reporter when stderr is a terminal.
pub fn on_terminal() -> Option<Reporter> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(250));
            let total = TOTAL.load(Ordering::Relaxed);
            if total == 0 {
                continue;
            }
            let since = Duration::from_nanos(SINCE.load(Ordering::Relaxed));
            let secs = base().elapsed().saturating_sub(since).as_secs_f64();
            let phase = PHASES[PHASE.load(Ordering::Relaxed).min(1)];
            let l = line(phase, DONE.load(Ordering::Relaxed), total, secs);
            let _ = write!(std::io::stderr(), "\r\x1b[K{l}");
        }
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    });
    Some(Reporter {
        stop,
        thread: Some(thread),
    })
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shows_bytes_rate_and_eta() {
        let l = line("copy", 1 << 30, 4 << 30, 2.0);
        assert!(
            l.starts_with("publish copy: 1.0 GiB / 4.0 GiB (25%)"),
            "{l}"
        );
        assert!(l.contains("512.0 MiB/s"), "{l}");
        assert!(l.ends_with("ETA 6 s"), "{l}");
        assert!(line("verify", 0, 10, 0.0).ends_with("ETA ?"));
        assert!(line("copy", 0, 0, 1.0).contains("(100%)"));
    }
}
