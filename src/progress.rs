//! The one progress bar on stderr (bytes, rate, time left) for work that takes a while: a
//! first read of a big log, a checkpoint publish. Drawn only on a terminal (indicatif hides it
//! otherwise) and never under `-q`. Workers report bytes through [`advance`]: one relaxed
//! atomic load when no bar is up.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Logs smaller than this read in a couple of seconds: no bar.
const MIN_BYTES: u64 = 256 << 20;
/// Test-only: a smaller threshold, to check that no bar is drawn when stderr is a pipe.
const MIN_ENV: &str = "ROGER_PROGRESS_MIN_BYTES";

static ACTIVE: AtomicBool = AtomicBool::new(false);
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// The bar for one read; cleared when dropped.
pub struct Reading(());

impl Drop for Reading {
    fn drop(&mut self) {
        ACTIVE.store(false, Ordering::Relaxed);
        if let Ok(mut bar) = BAR.lock() {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
        }
    }
}

/// Start a bar for reading `path` when it is big enough to take a while.
pub fn reading(path: &Path, what: &str) -> Option<Reading> {
    let min = std::env::var(MIN_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MIN_BYTES);
    let len = std::fs::metadata(path).ok()?.len();
    if len < min {
        return None;
    }
    start(len, format!("{what} {}", path.display()))
}

/// Start a bar for a job of `total` bytes (0: not known yet, see [`phase`]), whatever its
/// size: the caller knows it takes a while (a checkpoint publish).
pub fn bytes(what: &str, total: u64) -> Option<Reading> {
    start(total, what.to_string())
}

/// The job behind the bar moves to its next phase of `total` bytes (publish: copy, then
/// verify): the bar restarts under the new label, so rate and time left are the phase's own.
pub fn phase(what: &str, total: u64) {
    if ACTIVE.load(Ordering::Relaxed) {
        if let Ok(bar) = BAR.lock() {
            if let Some(b) = bar.as_ref() {
                b.reset();
                b.set_length(total);
                b.set_message(what.to_string());
            }
        }
    }
}

fn start(len: u64, msg: String) -> Option<Reading> {
    if crate::out::quiet() {
        return None;
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if bar.is_hidden() {
        return None;
    }
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ~{eta} left",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.set_message(msg);
    *BAR.lock().ok()? = Some(bar);
    ACTIVE.store(true, Ordering::Relaxed);
    Some(Reading(()))
}

/// Bytes read by a log reader.
pub fn advance(n: u64) {
    if ACTIVE.load(Ordering::Relaxed) {
        if let Ok(bar) = BAR.lock() {
            if let Some(b) = bar.as_ref() {
                b.inc(n);
            }
        }
    }
}
