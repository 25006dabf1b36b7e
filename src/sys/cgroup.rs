//! The run's cgroup (v2), when it has one of its own: `cpu.stat` and `io.stat` count the work
//! of every process that ever ran in it, exited ones included, so a worker that exits between
//! samples cannot take its usage with it. Parsing is pure; reading is bounded (a few small
//! files per sample, a cgroup tree walk limited in depth and size).

use std::path::{Path, PathBuf};

/// One reading of a cgroup's counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CgUsage {
    /// `cpu.stat` usage_usec, in seconds (all CPU of the cgroup and its descendants, ever).
    pub cpu_s: f64,
    /// `io.stat` rbytes + wbytes over devices (None without the io controller).
    pub io_bytes: Option<u64>,
}

/// The v2 cgroup path in /proc/PID/cgroup text (the `0::PATH` line).
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
        .filter(|p| p.starts_with('/'))
}

/// `usage_usec` from cpu.stat, in seconds.
pub fn parse_cpu_stat(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|us| us as f64 / 1e6)
}

/// rbytes + wbytes summed over the devices of io.stat (`MAJ:MIN rbytes=.. wbytes=.. ...`).
pub fn parse_io_stat(text: &str) -> Option<u64> {
    let mut total = 0u64;
    for line in text.lines() {
        for kv in line.split_whitespace().skip(1) {
            if let Some((k, v)) = kv.split_once('=') {
                if k == "rbytes" || k == "wbytes" {
                    total = total.saturating_add(v.parse::<u64>().ok()?);
                }
            }
        }
    }
    Some(total)
}

/// A cgroup directory on the cgroup2 mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    pub dir: PathBuf,
}

impl Cgroup {
    /// The cgroup of `pid` (None: no cgroup2 mount, no such process, or the root cgroup).
    pub fn of_pid(pid: u32) -> Option<Cgroup> {
        let mount = cgroup2_mount()?;
        let rel = parse_proc_cgroup(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?)?;
        if rel == "/" {
            return None;
        }
        Some(Cgroup {
            dir: mount.join(rel.trim_start_matches('/')),
        })
    }

    pub fn usage(&self) -> Option<CgUsage> {
        let cpu = parse_cpu_stat(&std::fs::read_to_string(self.dir.join("cpu.stat")).ok()?)?;
        let io = std::fs::read_to_string(self.dir.join("io.stat"))
            .ok()
            .and_then(|t| parse_io_stat(&t));
        Some(CgUsage {
            cpu_s: cpu,
            io_bytes: io,
        })
    }

    /// Every pid in the cgroup and its descendants (None when unreadable or too large to be
    /// one run's: 64 levels, 4096 cgroups).
    pub fn members(&self) -> Option<Vec<u32>> {
        let mut out = Vec::new();
        let mut stack = vec![(self.dir.clone(), 0)];
        let mut seen = 0;
        while let Some((dir, depth)) = stack.pop() {
            seen += 1;
            if depth > 64 || seen > 4096 {
                return None;
            }
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
            out.extend(
                procs
                    .split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
            for e in std::fs::read_dir(&dir).ok()?.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((e.path(), depth + 1));
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        Some(out)
    }
}

/// Where cgroup2 is mounted (read once: the watch asks every sample).
fn cgroup2_mount() -> Option<PathBuf> {
    static MOUNT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    MOUNT
        .get_or_init(|| {
            crate::sys::fskind::read_mounts()?
                .into_iter()
                .find(|m| m.fstype == "cgroup2")
                .map(|m| m.mount_point)
        })
        .clone()
}

/// The run's own cgroup, read this sample: the main process's cgroup when it is not roger's,
/// holds every live process of the run's tree (`run_pids`, sorted) — so whatever of the run
/// exits, the cgroup counted it — holds no ancestor of the main process (a shell's or a
/// login's cgroup is not the run's), and holds nothing else but processes of the main
/// process's session (workers orphaned out of the tree keep it). A cgroup shared with other
/// jobs would count their work as the run's, so it is not used.
pub fn own_usage(main: u32, run_pids: &[u32]) -> Option<CgUsage> {
    let cg = Cgroup::of_pid(main)?;
    if Cgroup::of_pid(std::process::id()).is_some_and(|mine| is_within(&mine.dir, &cg.dir)) {
        return None;
    }
    let members = cg.members()?;
    if run_pids.iter().any(|p| members.binary_search(p).is_err()) {
        return None;
    }
    let ancestors = crate::sys::pidinfo::ancestors(main);
    let session = session_of(main)?;
    let of_run = |pid: u32| {
        run_pids.binary_search(&pid).is_ok()
            || (!ancestors.contains(&pid) && session_of(pid) == Some(session))
    };
    if !members.iter().all(|p| of_run(*p)) {
        return None;
    }
    cg.usage()
}

/// The session id (/proc/PID/stat field 6).
fn session_of(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_session(&text)
}

fn parse_session(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // state ppid pgrp session ...
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// Is `inner` the cgroup `outer` or below it?
fn is_within(inner: &Path, outer: &Path) -> bool {
    inner.starts_with(outer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_files() {
        assert_eq!(
            parse_proc_cgroup("12:cpu:/x\n0::/system.slice/train.scope\n"),
            Some("/system.slice/train.scope".into())
        );
        assert_eq!(parse_proc_cgroup("4:memory:/a\n"), None);
        assert_eq!(
            parse_cpu_stat("usage_usec 2500000\nuser_usec 2000000\n"),
            Some(2.5)
        );
        assert_eq!(parse_cpu_stat("garbage"), None);
        assert_eq!(
            parse_io_stat("8:0 rbytes=100 wbytes=20 rios=1 wios=1\n259:0 rbytes=5 wbytes=0\n"),
            Some(125)
        );
        assert_eq!(parse_io_stat("8:0 rbytes=x\n"), None);
        assert_eq!(parse_io_stat(""), Some(0));
        assert_eq!(parse_session("7 (a) b) S 1 7 99 0"), Some(99));
        assert_eq!(parse_session("7 (a"), None);
    }

    /// On a kernel with a writable cgroup2 mount (root here and in CI), a cgroup of its own
    /// counts the CPU of a process that has exited.
    #[test]
    fn a_cgroup_keeps_the_work_of_exited_processes() {
        // tests/util's `missing`, which a unit test cannot reach: a failure under CI, else
        // a SKIPPED line.
        let missing = |what: String| {
            let ci = std::env::var("CI").is_ok_and(|v| {
                !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false")
            });
            assert!(
                !ci,
                "a_cgroup_keeps_the_work_of_exited_processes: {what} (CI must run it)"
            );
            eprintln!("SKIPPED a_cgroup_keeps_the_work_of_exited_processes: {what}");
        };
        let Some(mount) = cgroup2_mount() else {
            missing("no cgroup2 mount".into());
            return;
        };
        let dir = mount.join(format!("roger-test-{}", std::process::id()));
        if let Err(e) = std::fs::create_dir(&dir) {
            missing(format!("a writable cgroup2 mount is missing: {e}"));
            return;
        }
        let cg = Cgroup { dir: dir.clone() };
        // A shell that moves itself into the cgroup, then counts to 100000 in a child that
        // exits: a fixed amount of work (about 0.17 s of CPU here), not a span of wall time,
        // whose CPU a loaded machine shrinks (0.3 s of `timeout` got 0.037 s at load 13).
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && sh -c 'i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done'; exit 0",
                dir.display()
            ))
            .status();
        let usage = cg.usage();
        let members = cg.members();
        let _ = std::fs::remove_dir(&dir);
        assert!(st.is_ok_and(|s| s.success()));
        assert!(usage.is_some_and(|u| u.cpu_s > 0.05), "{usage:?}");
        assert_eq!(members, Some(vec![]), "everyone exited");
    }
}
