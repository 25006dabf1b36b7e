//! What the kubelet does to a pod's container when the pod is deleted, preempted or evicted:
//! SIGTERM to PID 1 (here: the child, e.g. `roger watch`), then SIGKILL once
//! `terminationGracePeriodSeconds` have passed if it has not exited.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How the container ended.
#[derive(Debug)]
pub struct Stopped {
    pub status: ExitStatus,
    /// The grace ran out and the kubelet's SIGKILL ended it.
    pub killed: bool,
    /// From the SIGTERM to the exit.
    pub took: Duration,
}

/// SIGTERM `child`, wait up to `grace`, then SIGKILL it, as the kubelet does.
pub fn terminate(child: &mut Child, grace: Duration) -> Stopped {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let t0 = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM the child");
    while t0.elapsed() < grace {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return Stopped {
                status,
                killed: false,
                took: t0.elapsed(),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    Stopped {
        status: child.wait().expect("wait for the killed child"),
        killed: true,
        took: t0.elapsed(),
    }
}
