//! The run's own /proc entries: stat (state, CPU time, start time, exit code), io, and the
//! children lists. Only the run's PIDs are read each tick, never the whole process table
//! (the one exception, [`ProcFs::group_members`], runs once when cleaning up after an
//! attached run). Signals go out only after an identity check (pid + start time), through a
//! pidfd where the kernel has one.

use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeSet;

/// A process, identified so a recycled PID is never mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ProcId {
    pub pid: u32,
    /// Start time in clock ticks since boot (/proc/PID/stat field 22).
    pub start: u64,
}

/// One reading of /proc/PID/stat (+ io when readable).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcStat {
    pub id: ProcId,
    /// R, S, D, Z, T, t, X, I.
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    /// utime + stime, seconds.
    pub cpu_s: f64,
    /// cutime + cstime, seconds: the CPU time of the children it has waited for (and theirs).
    pub children_cpu_s: f64,
    /// rchar + wchar from /proc/PID/io (None when not readable).
    pub io_bytes: Option<u64>,
    /// The wait status of a zombie (field 52), as waitpid reports it.
    pub exit_status: Option<i32>,
}

/// Everything that touches /proc, behind a trait so the sampler is tested with a fake.
pub trait ProcSource {
    /// The process's stat; `Ok(None)` when it no longer exists.
    fn stat(&self, pid: u32) -> Result<Option<ProcStat>>;
    /// Direct children (all threads).
    fn children(&self, pid: u32) -> Result<Vec<u32>>;
    /// Every live process in a process group (scans /proc: use only for cleanup).
    fn group_members(&self, pgrp: u32) -> Result<Vec<u32>>;
}

/// The real /proc.
pub struct ProcFs {
    ticks: f64,
}

impl Default for ProcFs {
    fn default() -> Self {
        // SAFETY: sysconf has no preconditions.
        let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        ProcFs {
            ticks: if t > 0 { t as f64 } else { 100.0 },
        }
    }
}

impl ProcSource for ProcFs {
    fn stat(&self, pid: u32) -> Result<Option<ProcStat>> {
        let text = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading /proc/{pid}/stat")),
        };
        let mut st = parse_stat(&text, self.ticks)
            .with_context(|| format!("/proc/{pid}/stat: unexpected format"))?;
        st.io_bytes = std::fs::read_to_string(format!("/proc/{pid}/io"))
            .ok()
            .and_then(|t| parse_io(&t));
        Ok(Some(st))
    }

    fn children(&self, pid: u32) -> Result<Vec<u32>> {
        let dir = match std::fs::read_dir(format!("/proc/{pid}/task")) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("listing /proc/{pid}/task")),
        };
        let mut out = Vec::new();
        for task in dir.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                out.extend(
                    text.split_whitespace()
                        .filter_map(|s| s.parse::<u32>().ok()),
                );
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    fn group_members(&self, pgrp: u32) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc")
            .context("listing /proc")?
            .flatten()
        {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(Some(st)) = self.stat(pid) {
                if st.pgrp == pgrp && st.state != 'Z' && st.state != 'X' {
                    out.push(pid);
                }
            }
        }
        Ok(out)
    }
}

/// Parse /proc/PID/stat. The command name may hold spaces and parentheses: split at the last ')'.
pub fn parse_stat(text: &str, ticks_per_s: f64) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid: u32 = text[..open].trim().parse().ok()?;
    // Fields from 3 (state) on; index 0 here is field 3.
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).copied();
    let num = |n: usize| field(n).and_then(|s| s.parse::<u64>().ok());
    let state = field(3)?.chars().next()?;
    let utime = num(14)?;
    let stime = num(15)?;
    // Signed in the kernel's format; never negative in practice.
    let signed = |n: usize| field(n).and_then(|s| s.parse::<i64>().ok());
    let children = signed(16)?.max(0) as u64 + signed(17)?.max(0) as u64;
    Some(ProcStat {
        id: ProcId {
            pid,
            start: num(22)?,
        },
        state,
        ppid: num(4)? as u32,
        pgrp: num(5)? as u32,
        cpu_s: utime.saturating_add(stime) as f64 / ticks_per_s,
        children_cpu_s: children as f64 / ticks_per_s,
        io_bytes: None,
        exit_status: if state == 'Z' {
            field(52).and_then(|s| s.parse::<i32>().ok())
        } else {
            None
        },
    })
}

pub fn parse_io(text: &str) -> Option<u64> {
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some(get("rchar:")?.saturating_add(get("wchar:")?))
}

/// Exit code / signal from a wait status.
pub fn decode_wait_status(status: i32) -> (Option<i32>, Option<i32>) {
    if status & 0x7f == 0 {
        (Some((status >> 8) & 0xff), None)
    } else {
        (None, Some(status & 0x7f))
    }
}

/// The process tree under `roots` (roots included), read from the children lists.
pub fn tree(src: &dyn ProcSource, roots: &[u32]) -> Result<Vec<ProcStat>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut stack: Vec<u32> = roots.to_vec();
    while let Some(pid) = stack.pop() {
        if !seen.insert(pid) {
            continue;
        }
        if let Some(st) = src.stat(pid)? {
            if st.state != 'Z' && st.state != 'X' {
                stack.extend(src.children(pid)?);
            }
            out.push(st);
        }
    }
    Ok(out)
}

/// Is `id` still the same process (not exited and reaped, not a recycled PID)?
pub fn same_process(src: &dyn ProcSource, id: ProcId) -> bool {
    matches!(src.stat(id.pid), Ok(Some(st)) if st.id.start == id.start)
}

/// How a checked signal went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// pidfd_send_signal on a pidfd opened before the identity check: race-free.
    Pidfd,
    /// kill(2) right after the identity check (kernels before 5.3, or pidfd refused).
    Kill,
}

/// Send `sig` to `id` only if it is still the same process. Returns whether it was sent.
pub fn signal_checked(
    src: &dyn ProcSource,
    id: ProcId,
    sig: nix::sys::signal::Signal,
) -> Result<bool> {
    Ok(signal_checked_via(src, id, sig)?.is_some())
}

/// [`signal_checked`], saying how the signal went out (None: not sent, the process is gone
/// or its pid now belongs to another process).
///
/// With a pidfd the check has no race: the pidfd pins the process that held the pid when it
/// was opened, and a pid is never reused while its process exists, so a start time that still
/// matches after the open proves the pidfd is ours. kill(2) after the check leaves a window
/// of microseconds in which the pid could be recycled; it is the fallback only.
pub fn signal_checked_via(
    src: &dyn ProcSource,
    id: ProcId,
    sig: nix::sys::signal::Signal,
) -> Result<Option<Via>> {
    match pidfd_open(id.pid) {
        Ok(fd) => {
            if !same_process(src, id) {
                return Ok(None);
            }
            match pidfd_send_signal(&fd, sig) {
                Ok(()) => return Ok(Some(Via::Pidfd)),
                Err(nix::errno::Errno::ESRCH) => return Ok(None),
                // Seccomp or a kernel with pidfd_open but a refused send: use kill(2).
                Err(nix::errno::Errno::ENOSYS | nix::errno::Errno::EPERM) => {}
                Err(e) => return Err(anyhow::anyhow!("sending {sig} to pid {}: {e}", id.pid)),
            }
        }
        Err(nix::errno::Errno::ESRCH) => return Ok(None),
        // ENOSYS (before Linux 5.3), EPERM/EACCES under seccomp, EINVAL: use kill(2).
        Err(_) => {}
    }
    if !same_process(src, id) {
        return Ok(None);
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(id.pid as i32), sig) {
        Ok(()) => Ok(Some(Via::Kill)),
        Err(nix::errno::Errno::ESRCH) => Ok(None),
        Err(e) => Err(anyhow::anyhow!("sending {sig} to pid {}: {e}", id.pid)),
    }
}

fn pidfd_open(pid: u32) -> std::result::Result<std::os::fd::OwnedFd, nix::errno::Errno> {
    use std::os::fd::FromRawFd;
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Err(nix::errno::Errno::ESRCH);
    };
    // SAFETY: pidfd_open takes a pid and flags; on success it returns a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) };
    if fd < 0 {
        return Err(nix::errno::Errno::last());
    }
    // SAFETY: fd is a fresh descriptor returned by the kernel, owned by nobody else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

fn pidfd_send_signal(
    fd: &std::os::fd::OwnedFd,
    sig: nix::sys::signal::Signal,
) -> std::result::Result<(), nix::errno::Errno> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0 as libc::c_uint,
        )
    };
    if r < 0 {
        Err(nix::errno::Errno::last())
    } else {
        Ok(())
    }
}

/// A scripted process table for tests.
#[derive(Default)]
pub struct FakeProc {
    pub procs: std::collections::BTreeMap<u32, (ProcStat, Vec<u32>)>,
}

impl FakeProc {
    pub fn add(&mut self, pid: u32, parent: u32, state: char, cpu_s: f64, io: u64) {
        let pgrp = self.procs.get(&parent).map_or(pid, |(p, _)| p.pgrp);
        let st = ProcStat {
            id: ProcId {
                pid,
                start: 1000 + pid as u64,
            },
            state,
            ppid: parent,
            pgrp,
            cpu_s,
            children_cpu_s: 0.0,
            io_bytes: Some(io),
            exit_status: None,
        };
        self.procs.insert(pid, (st, Vec::new()));
        if let Some((_, kids)) = self.procs.get_mut(&parent) {
            kids.push(pid);
        }
    }
}

impl ProcSource for FakeProc {
    fn stat(&self, pid: u32) -> Result<Option<ProcStat>> {
        Ok(self.procs.get(&pid).map(|(s, _)| s.clone()))
    }
    fn children(&self, pid: u32) -> Result<Vec<u32>> {
        Ok(self
            .procs
            .get(&pid)
            .map(|(_, k)| k.clone())
            .unwrap_or_default())
    }
    fn group_members(&self, pgrp: u32) -> Result<Vec<u32>> {
        Ok(self
            .procs
            .values()
            .filter(|(s, _)| s.pgrp == pgrp)
            .map(|(s, _)| s.id.pid)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_name() {
        let mut fields = vec!["0"; 50];
        fields[0] = "S"; // field 3
        fields[1] = "10"; // ppid
        fields[2] = "42"; // pgrp
        fields[11] = "250"; // utime (14)
        fields[12] = "50"; // stime (15)
        fields[13] = "100"; // cutime (16)
        fields[14] = "-1"; // cstime (17), signed
        fields[19] = "777"; // starttime (22)
        let text = format!("42 (python (x) y) {}", fields.join(" "));
        let st = parse_stat(&text, 100.0).unwrap();
        assert_eq!(
            st.id,
            ProcId {
                pid: 42,
                start: 777
            }
        );
        assert_eq!((st.state, st.ppid, st.pgrp), ('S', 10, 42));
        assert!((st.cpu_s - 3.0).abs() < 1e-9);
        assert!((st.children_cpu_s - 1.0).abs() < 1e-9);
        assert_eq!(st.exit_status, None);
    }

    #[test]
    fn zombie_exit_status() {
        let mut fields = vec!["0"; 50];
        fields[0] = "Z";
        fields[49] = "256"; // field 52: exit code 1
        let text = format!("7 (t) {}", fields.join(" "));
        let st = parse_stat(&text, 100.0).unwrap();
        assert_eq!(st.exit_status, Some(256));
        assert_eq!(decode_wait_status(256), (Some(1), None));
        assert_eq!(decode_wait_status(9), (None, Some(9)));
    }

    #[test]
    fn io_sums_syscall_bytes() {
        let t = "rchar: 100\nwchar: 23\nsyscr: 1\nread_bytes: 0\n";
        assert_eq!(parse_io(t), Some(123));
        assert_eq!(parse_io("garbage"), None);
    }

    #[test]
    fn real_proc_reads_self_and_children() {
        let fs = ProcFs::default();
        let me = std::process::id();
        let st = fs.stat(me).unwrap().unwrap();
        assert_eq!(st.id.pid, me);
        assert!(same_process(&fs, st.id));
        assert!(!same_process(
            &fs,
            ProcId {
                pid: me,
                start: st.id.start + 1
            }
        ));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(fs.children(me).unwrap().contains(&child.id()));
        let t = tree(&fs, &[me]).unwrap();
        assert!(t.iter().any(|s| s.id.pid == child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(fs.stat(child.id()).unwrap().is_none());
    }

    #[test]
    fn signals_go_through_a_pidfd_and_never_to_a_recycled_pid() {
        let fs = ProcFs::default();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let id = fs.stat(child.id()).unwrap().unwrap().id;
        let wrong = ProcId {
            start: id.start + 1,
            ..id
        };
        use nix::sys::signal::Signal;
        assert_eq!(
            signal_checked_via(&fs, wrong, Signal::SIGKILL).unwrap(),
            None
        );
        assert!(
            same_process(&fs, id),
            "a different start time is not signalled"
        );
        let via = signal_checked_via(&fs, id, Signal::SIGKILL).unwrap();
        // pidfd_open is Linux 5.3+; older kernels take the kill(2) path.
        let has_pidfd = pidfd_open(std::process::id()).is_ok();
        assert_eq!(via, Some(if has_pidfd { Via::Pidfd } else { Via::Kill }));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(9));
        // Reaped: gone, not sent.
        assert_eq!(signal_checked_via(&fs, id, Signal::SIGKILL).unwrap(), None);
    }

    #[test]
    fn fake_tree() {
        let mut f = FakeProc::default();
        f.add(10, 1, 'S', 1.0, 0);
        f.add(11, 10, 'R', 2.0, 0);
        f.add(12, 11, 'D', 0.5, 0);
        let t = tree(&f, &[10]).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(f.group_members(10).unwrap(), vec![10, 11, 12]);
    }

    /// Found by the fuzz harness (b76a294): /proc/PID/stat utime + stime summed past u64.
    #[test]
    fn regress_proc_stat_utime_plus_stime_overflows() {
        let s = parse_stat(
            "7()S 0 6 4 0 1 4 6 0 5 5 18446744073709551615 4 0 0 8 0 0 0 0",
            100.0,
        )
        .unwrap();
        assert_eq!(s.cpu_s, u64::MAX as f64 / 100.0);
    }

    /// Found by the fuzz harness (b76a294): /proc/PID/io rchar + wchar summed past u64.
    #[test]
    fn regress_proc_io_rchar_plus_wchar_overflows() {
        assert_eq!(
            parse_io("rchar: 18446744073709551615\nwchar: 1\n"),
            Some(u64::MAX)
        );
    }
}
