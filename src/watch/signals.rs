//! roger's own signals while it watches: SIGINT/SIGTERM are to be forwarded to the run,
//! SIGHUP is survived (nohup, a closed terminal), SIGCHLD wakes the loop at once when the run
//! exits. A self-pipe turns them into bytes the loop waits on with a timeout, so the tick
//! sleeps in one poll(2) instead of waking up to check flags. The critic daemon uses the same
//! pipe for its SIGTERM/SIGINT.
//!
//! By hand (nix's sigaction), not signal-hook: its registry cannot give a signal back its
//! default action (after `unregister`, SIGTERM would be ignored, not fatal, once a watch
//! ended), and its iterator has no wait with a timeout, which the tick needs.

use anyhow::{Context, Result};
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

static WRITE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = WRITE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; a full pipe just drops the wake-up byte.
        unsafe {
            libc::write(fd, (&b as *const u8).cast(), 1);
        }
    }
}

pub struct Signals {
    read: OwnedFd,
    _write: OwnedFd,
    /// Handled here, given back their default actions on drop.
    handled: Vec<Signal>,
}

/// The watch's: SIGINT/SIGTERM to forward, SIGHUP to survive, SIGCHLD to wake at a child's exit.
const HANDLED: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGCHLD,
];

impl Signals {
    /// Install the watch's handlers (one `Signals` per process at a time).
    pub fn install() -> Result<Signals> {
        Signals::on(&HANDLED)
    }

    /// Turn `sigs` into wake-up bytes (one `Signals` per process at a time).
    pub fn on(sigs: &[Signal]) -> Result<Signals> {
        let (read, write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_CLOEXEC)
                .context("creating the signal pipe")?;
        WRITE_FD.store(write.as_raw_fd(), Ordering::Relaxed);
        let mut s = Signals {
            read,
            _write: write,
            handled: Vec::new(),
        };
        for &sig in sigs {
            s.also(sig)?;
        }
        Ok(s)
    }

    /// Also turn `sig` into a wake-up byte (e.g. SLURM's USR1 notice, whose default action
    /// would kill roger).
    pub fn also(&mut self, sig: Signal) -> Result<()> {
        // A handler (not SIG_IGN) so a child does not inherit an ignored SIGHUP across exec.
        let action = SigAction::new(
            SigHandler::Handler(on_signal),
            SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        // SAFETY: the handler only calls write(2).
        unsafe { signal::sigaction(sig, &action) }
            .with_context(|| format!("installing {sig} handler"))?;
        self.handled.push(sig);
        Ok(())
    }

    /// Wait up to `timeout` for signals; returns those that arrived (SIGCHLD included).
    pub fn wait(&self, timeout: Duration) -> Vec<Signal> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            let mut fds = [nix::poll::PollFd::new(
                self.read.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let timeout =
                nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX);
            match nix::poll::poll(&mut fds, timeout) {
                Ok(0) => return Vec::new(),
                Ok(_) => return self.drain(),
                Err(nix::errno::Errno::EINTR) if !left.is_zero() => continue,
                Err(_) => return self.drain(),
            }
        }
    }

    /// Signals that arrived, without waiting.
    pub fn drain(&self) -> Vec<Signal> {
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        while let Ok(n) = nix::unistd::read(self.read.as_raw_fd(), &mut buf) {
            if n == 0 {
                break;
            }
            out.extend(
                buf[..n]
                    .iter()
                    .filter_map(|&b| Signal::try_from(b as i32).ok()),
            );
        }
        out
    }
}

impl Drop for Signals {
    /// Stop writing to a pipe that is about to close (its fd number could be reused), and give
    /// the signals back their default actions.
    fn drop(&mut self) {
        WRITE_FD.store(-1, Ordering::Relaxed);
        for &sig in &self.handled {
            // SAFETY: restoring the default action.
            let _ = unsafe { signal::signal(sig, SigHandler::SigDfl) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_wakes_the_wait_and_sighup_does_not_kill() {
        // Other tests in this process spawn children: SIGCHLD may come too.
        let s = Signals::install().unwrap();
        let not_chld = |v: Vec<Signal>| -> Vec<Signal> {
            v.into_iter().filter(|s| *s != Signal::SIGCHLD).collect()
        };
        assert!(not_chld(s.wait(Duration::from_millis(10))).is_empty());
        nix::sys::signal::raise(Signal::SIGHUP).unwrap();
        let t0 = Instant::now();
        let mut got = Vec::new();
        while got.is_empty() && t0.elapsed() < Duration::from_secs(10) {
            got = not_chld(s.wait(Duration::from_secs(1)));
        }
        assert_eq!(got, vec![Signal::SIGHUP]);
    }
}
