//! Writing results to stdout without dying on a closed pipe (`roger ledger tail | head`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Write to stdout and flush; once the reader has gone, further output is dropped silently.
fn write(f: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = f(&mut stdout).and_then(|_| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CLOSED.store(true, Ordering::Relaxed);
        }
    }
}

/// Print one line to stdout.
pub fn line(args: std::fmt::Arguments<'_>) {
    write(|out| out.write_fmt(args).and_then(|_| out.write_all(b"\n")));
}

/// Write `text` (whole lines) to stdout, as [`line`] does.
pub fn text(text: &str) {
    write(|out| out.write_all(text.as_bytes()));
}

/// `outln!("...", args)`: println! that tolerates a closed stdout.
#[macro_export]
macro_rules! outln {
    () => { $crate::out::line(format_args!("")) };
    ($($t:tt)*) => { $crate::out::line(format_args!($($t)*)) };
}

static QUIET: AtomicBool = AtomicBool::new(false);

/// `-q`: only errors on stderr, on every command.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// One `roger: warning: ...` line on stderr, unless `-q`.
pub fn warning(args: std::fmt::Arguments<'_>) {
    if !quiet() {
        eprintln!("roger: warning: {args}");
    }
}

/// One informational line on stderr (`roger: <what>: ...`), unless `-q`.
pub fn note(args: std::fmt::Arguments<'_>) {
    if !quiet() {
        eprintln!("{args}");
    }
}

/// `warnln!("...")`: a warning on stderr that `-q` silences.
#[macro_export]
macro_rules! warnln {
    ($($t:tt)*) => { $crate::out::warning(format_args!($($t)*)) };
}

/// `noteln!("...")`: an informational stderr line that `-q` silences.
#[macro_export]
macro_rules! noteln {
    ($($t:tt)*) => { $crate::out::note(format_args!($($t)*)) };
}
