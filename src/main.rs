//! The `roger` binary: a C `main` instead of Rust's runtime start-up (`#![no_main]`).
//!
//! Monitors call `roger critic --once` every few minutes and a repeated call is mostly process
//! start-up. Rust's start-up reads /proc/self/maps (the main thread's stack guard), installs
//! SIGSEGV/SIGBUS handlers on an alternate stack and names the thread; what of it matters
//! here is done below: SIGPIPE ignored (a closed pipe is an error to handle, not a death) and
//! file descriptors 0-2 kept open (else the first file opened, a ledger, would become stdout).
//! What is lost: a stack overflow reads as a plain SIGSEGV, without Rust's message. std's
//! arguments and environment are set up by glibc either way.

// The test harness of this target brings its own `main`.
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    keep_standard_fds_open();
    // SAFETY: setting a signal's disposition to "ignore" before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let code = roger::run(std::env::args_os());
    // Rust's own exit path flushes stdout; returning to C does not.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::ffi::c_int::from(code)
}

/// A descriptor among 0-2 that was closed is opened on /dev/null, as Rust's start-up does.
#[cfg(not(test))]
fn keep_standard_fds_open() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: poll on a local array of three pollfd, no timeout.
    if unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } < 0 {
        return;
    }
    for p in fds {
        if p.revents & libc::POLLNVAL != 0 {
            // SAFETY: open(2) with a static NUL-terminated path; the lowest free descriptor,
            // the closed one, is taken.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        }
    }
}
