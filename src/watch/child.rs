//! The run's processes: start the training in its own process group (roger is a child
//! subreaper, so workers orphaned by a crash come back to it instead of init), attach to one
//! started elsewhere, read its tree each tick, and stop it: SIGTERM, grace, SIGKILL — every
//! signal after an identity check (pid + start time), never outside the run's tree.

use crate::sentinel::{Main, ProcObs};
use crate::sys::proc::{self, ProcFs, ProcId, ProcSource, ProcStat};
use anyhow::{bail, Context, Result};
use nix::sys::signal::Signal;
use serde::Serialize;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::time::{Duration, Instant};

pub struct Run {
    pub main: ProcId,
    pub pgid: u32,
    /// None when attached to a process started elsewhere.
    child: Option<std::process::Child>,
    pub started: Instant,
    exit: Option<(Option<i32>, Option<i32>)>,
    /// Every process seen in the run's tree (for GPU attribution and cleanup).
    pub seen: Vec<ProcId>,
}

/// Make orphans of our children come back to us (Linux ≥ 3.4).
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

pub fn spawn(argv: &[String], env: &[(&str, Option<String>)], fs: &ProcFs) -> Result<Run> {
    let Some((prog, args)) = argv.split_first() else {
        bail!("no command to run: give one after `--` or set [watch] command");
    };
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args).process_group(0);
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", argv.join(" ")))?;
    let pid = child.id();
    let start = fs.stat(pid)?.map_or(0, |s| s.id.start);
    Ok(Run {
        main: ProcId { pid, start },
        pgid: pid,
        child: Some(child),
        started: Instant::now(),
        exit: None,
        seen: vec![ProcId { pid, start }],
    })
}

pub fn attach(pid: u32, fs: &ProcFs) -> Result<Run> {
    let st = fs
        .stat(pid)?
        .with_context(|| format!("no process with pid {pid}"))?;
    if st.state == 'Z' {
        bail!("pid {pid} has already exited (defunct)");
    }
    Ok(Run {
        main: st.id,
        pgid: st.pgrp,
        child: None,
        started: Instant::now(),
        exit: None,
        seen: vec![st.id],
    })
}

impl Run {
    pub fn attached(&self) -> bool {
        self.child.is_none()
    }

    /// Has the main process ended? Reaps it when it is ours.
    pub fn poll_exit(&mut self, fs: &ProcFs) -> Option<(Option<i32>, Option<i32>)> {
        if self.exit.is_some() {
            return self.exit;
        }
        self.exit = match &mut self.child {
            Some(c) => match c.try_wait() {
                Ok(Some(st)) => Some((st.code(), st.signal())),
                _ => None,
            },
            None => match fs.stat(self.main.pid) {
                Ok(Some(st)) if st.id.start == self.main.start && st.state != 'Z' => None,
                Ok(Some(st)) if st.id.start == self.main.start => Some(
                    st.exit_status
                        .map_or((None, None), proc::decode_wait_status),
                ),
                _ => Some((None, None)),
            },
        };
        self.exit
    }

    /// Live processes of the run other than the main one: its descendants, plus (when we
    /// launched it) orphans reparented to us. Reaps orphans that have exited.
    pub fn others(&mut self, fs: &ProcFs) -> Result<Vec<ProcStat>> {
        let mut roots = vec![self.main.pid];
        if !self.attached() {
            for pid in fs.children(std::process::id())? {
                if pid != self.main.pid {
                    roots.push(pid);
                }
            }
        }
        let tree = proc::tree(fs, &roots)?;
        let mut out = Vec::new();
        for st in tree {
            if st.id.pid == self.main.pid {
                continue;
            }
            if st.state == 'Z' {
                if st.ppid == std::process::id() {
                    reap(st.id.pid);
                }
                continue;
            }
            if !self.seen.contains(&st.id) {
                self.seen.push(st.id);
            }
            out.push(st);
        }
        Ok(out)
    }

    /// The sentinel's view of the tree.
    pub fn observe(&mut self, fs: &ProcFs) -> Result<ProcObs, String> {
        let exit = self.poll_exit(fs);
        let others = self.others(fs).map_err(|e| format!("{e:#}"))?;
        let main_stat = match exit {
            Some(_) => None,
            None => fs
                .stat(self.main.pid)
                .map_err(|e| format!("{e:#}"))?
                .filter(|s| s.id.start == self.main.start),
        };
        let main = match (exit, &main_stat) {
            (Some((code, signal)), _) => Main::Exited { code, signal },
            (None, Some(st)) => Main::Alive { state: st.state },
            (None, None) => Main::Gone,
        };
        let all = main_stat.iter().chain(others.iter());
        let mut cpu = 0.0;
        let mut io = Some(0u64);
        let mut d = false;
        for st in all {
            cpu += st.cpu_s;
            io = io.and_then(|t| st.io_bytes.map(|b| t + b));
            d |= st.state == 'D';
        }
        Ok(ProcObs {
            main,
            others: others.len() as u32,
            cpu_s: cpu,
            io_bytes: io,
            d_state: d,
        })
    }

    /// Every live process of the run, main first (for a kill): the main process, its tree,
    /// every process seen in the tree earlier that is still the same process (orphans), and —
    /// for an attached run that leads its own process group — the rest of that group. A group
    /// the run does not lead (a shell's, a test runner's) is never scanned or signalled.
    pub fn members(&mut self, fs: &ProcFs) -> Vec<ProcId> {
        let mut v = Vec::new();
        if self.poll_exit(fs).is_none() && proc::same_process(fs, self.main) {
            v.push(self.main);
        }
        v.extend(self.others(fs).unwrap_or_default().iter().map(|s| s.id));
        for id in self.seen.clone() {
            if id != self.main && !v.contains(&id) && alive_as(fs, id) {
                v.push(id);
            }
        }
        if self.attached() && self.pgid == self.main.pid && self.poll_exit(fs).is_some() {
            for pid in fs.group_members(self.pgid).unwrap_or_default() {
                if let Ok(Some(st)) = fs.stat(pid) {
                    if !v.contains(&st.id) && st.state != 'Z' {
                        v.push(st.id);
                    }
                }
            }
        }
        v
    }
}

/// Still the same process, and not a zombie.
pub fn alive_as(fs: &dyn ProcSource, id: ProcId) -> bool {
    matches!(fs.stat(id.pid), Ok(Some(s)) if s.id.start == id.start && s.state != 'Z' && s.state != 'X')
}

/// How a stop went.
#[derive(Debug, Clone, Serialize)]
pub struct Stopped {
    pub sigterm: Vec<u32>,
    pub sigkill: Vec<u32>,
    pub survivors: Vec<u32>,
    pub took_s: f64,
}

/// `first` (SIGTERM, or the signal roger received) to every member, wait up to `grace`,
/// SIGKILL what is left. Reaps what is ours.
pub fn stop(
    run: &mut Run,
    targets: &[ProcId],
    first: Signal,
    grace: Duration,
    fs: &ProcFs,
) -> Result<Stopped> {
    let t0 = Instant::now();
    let mut out = Stopped {
        sigterm: Vec::new(),
        sigkill: Vec::new(),
        survivors: Vec::new(),
        took_s: 0.0,
    };
    for id in targets {
        if proc::signal_checked(fs, *id, first)? {
            out.sigterm.push(id.pid);
        }
    }
    let alive = |run: &mut Run| -> Vec<ProcId> {
        run.poll_exit(fs);
        run.others(fs).ok();
        targets
            .iter()
            .copied()
            .filter(|id| alive_as(fs, *id))
            .collect()
    };
    while t0.elapsed() < grace && !alive(run).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    for id in alive(run) {
        if proc::signal_checked(fs, id, Signal::SIGKILL)? {
            out.sigkill.push(id.pid);
        }
    }
    let t1 = Instant::now();
    while t1.elapsed() < Duration::from_secs(10) && !alive(run).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    out.survivors = alive(run).iter().map(|i| i.pid).collect();
    out.took_s = t0.elapsed().as_secs_f64();
    Ok(out)
}

fn reap(pid: u32) {
    let _ = nix::sys::wait::waitpid(
        nix::unistd::Pid::from_raw(pid as i32),
        Some(nix::sys::wait::WaitPidFlag::WNOHANG),
    );
}

/// Run the evidence hook with a time limit, its stdout and stderr going to `out`.
pub fn evidence(argv: &[String], timeout: Duration, out: &std::path::Path) -> Result<()> {
    let Some((prog, args)) = argv.split_first() else {
        bail!("empty evidence hook");
    };
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut child = std::process::Command::new(prog)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file.try_clone()?)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting evidence hook {}", argv.join(" ")))?;
    let t0 = Instant::now();
    let note = loop {
        if let Some(st) = child.try_wait()? {
            break format!("\n[roger: hook exited with {st}]\n");
        }
        if t0.elapsed() >= timeout {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                Signal::SIGKILL,
            );
            let _ = child.wait();
            break format!(
                "\n[roger: hook killed after the {:.0}s evidence_timeout]\n",
                timeout.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(out)?;
    f.write_all(note.as_bytes())?;
    Ok(())
}
