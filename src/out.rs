//! Writing results to stdout without dying on a closed pipe (`roger ledger tail | head`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Print one line to stdout; once the reader has gone, further output is dropped silently.
pub fn line(args: std::fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    let result = stdout
        .write_fmt(args)
        .and_then(|_| stdout.write_all(b"\n"))
        .and_then(|_| stdout.flush());
    if let Err(e) = result {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CLOSED.store(true, Ordering::Relaxed);
        }
    }
}

/// `outln!("...", args)`: println! that tolerates a closed stdout.
#[macro_export]
macro_rules! outln {
    () => { $crate::out::line(format_args!("")) };
    ($($t:tt)*) => { $crate::out::line(format_args!($($t)*)) };
}
