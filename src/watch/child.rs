//! The run's processes: start the training in its own process group (roger is a child
//! subreaper, so workers orphaned by a crash come back to it instead of init), attach to one
//! started elsewhere, read its tree each tick, and stop it: SIGTERM, grace, SIGKILL — every
//! signal after an identity check (pid + start time), through a pidfd opened before the check
//! where the kernel has pidfd_open (kill(2) otherwise), never outside the run's tree.

use crate::sentinel::{Main, ProcObs};
use crate::sys::proc::{self, ProcId, ProcSource, ProcStat};
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
    /// The run's work, counted per process across samples.
    work: super::work::Work,
    /// A sample has reported the main process's exit (so SIGCHLD no longer wakes the loop).
    exit_sampled: bool,
    /// The tree as the last sample read it (the rank map is made from it).
    pub last_tree: Vec<ProcStat>,
}

/// Make orphans of our children come back to us (Linux ≥ 3.4).
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

pub fn spawn(argv: &[String], env: &[(&str, Option<String>)], fs: &dyn ProcSource) -> Result<Run> {
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
        work: Default::default(),
        exit_sampled: false,
        last_tree: Vec::new(),
    })
}

pub fn attach(pid: u32, fs: &dyn ProcSource) -> Result<Run> {
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
        work: Default::default(),
        exit_sampled: false,
        last_tree: Vec::new(),
    })
}

impl Run {
    pub fn attached(&self) -> bool {
        self.child.is_none()
    }

    /// Has the main process ended? Reaps it when it is ours.
    pub fn poll_exit(&mut self, fs: &dyn ProcSource) -> Option<(Option<i32>, Option<i32>)> {
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

    /// The run's tree, defunct entries included: the main process (while it is the same
    /// process), its descendants, and (when we launched it) every child of roger — orphans
    /// reparented to us. Notes every process in `seen`.
    fn read_tree(&mut self, fs: &dyn ProcSource) -> Result<Vec<ProcStat>> {
        let mut roots = vec![self.main.pid];
        if !self.attached() {
            for pid in fs.children(std::process::id())? {
                if pid != self.main.pid && !roger_helper(pid) {
                    roots.push(pid);
                }
            }
        }
        let mut tree = proc::tree(fs, &roots)?;
        // A recycled main pid is not the run.
        tree.retain(|st| st.id.pid != self.main.pid || st.id.start == self.main.start);
        for st in &tree {
            if st.state != 'Z' && !self.seen.contains(&st.id) {
                self.seen.push(st.id);
            }
        }
        Ok(tree)
    }

    /// Reap the defunct orphans reparented to roger (their final reading is in `tree`).
    fn reap_ours(&self, tree: &[ProcStat]) {
        for st in tree {
            if st.state == 'Z' && st.id.pid != self.main.pid && st.ppid == std::process::id() {
                reap(st.id.pid);
            }
        }
    }

    /// Live processes of the run other than the main one: its descendants, plus (when we
    /// launched it) orphans reparented to us. Reaps orphans that have exited.
    pub fn others(&mut self, fs: &dyn ProcSource) -> Result<Vec<ProcStat>> {
        let tree = self.read_tree(fs)?;
        self.reap_ours(&tree);
        Ok(tree
            .into_iter()
            .filter(|st| st.id.pid != self.main.pid && st.state != 'Z')
            .collect())
    }

    /// Has the main process's exit happened without a sample reporting it yet? (Only that
    /// may wake the watch before its interval.)
    pub fn exit_unsampled(&mut self, fs: &dyn ProcSource) -> bool {
        !self.exit_sampled && self.poll_exit(fs).is_some()
    }

    /// The sentinel's view of the tree: the run's work since the first sample counted per
    /// process (see `work.rs`), so workers that exit between samples keep their work.
    pub fn observe(&mut self, fs: &dyn ProcSource) -> Result<ProcObs, String> {
        let exit = self.poll_exit(fs);
        let tree = self.read_tree(fs).map_err(|e| format!("{e:#}"))?;
        let mut live: Vec<u32> = tree
            .iter()
            .filter(|st| st.state != 'Z' && st.state != 'X')
            .map(|st| st.id.pid)
            .collect();
        live.sort_unstable();
        let cg = match exit {
            None => crate::sys::cgroup::own_usage(self.main.pid, &live),
            Some(_) => None,
        };
        // The work is read before roger reaps anything, so a defunct entry's reading is final.
        self.work.update(&tree, std::process::id(), cg);
        self.reap_ours(&tree);
        // Defunct but not yet reaped (it exited after poll_exit): still Alive { 'Z' } this
        // sample; the next one reaps it and reads its status.
        let main_stat = tree.iter().find(|st| exit.is_none() && st.id == self.main);
        let main = match (exit, main_stat) {
            (Some((code, signal)), _) => Main::Exited { code, signal },
            (None, Some(st)) => Main::Alive { state: st.state },
            (None, None) => Main::Gone,
        };
        self.exit_sampled |= exit.is_some();
        let running = tree.iter().filter(|st| st.state != 'Z' && st.state != 'X');
        let others = running
            .clone()
            .filter(|st| st.id.pid != self.main.pid)
            .count();
        self.last_tree = tree.clone();
        Ok(ProcObs {
            main,
            others: others as u32,
            cpu_s: self.work.cpu_s,
            io_bytes: self.work.io_known.then_some(self.work.io_bytes),
            lost: self.work.lost,
            d_state: running.clone().any(|st| st.state == 'D'),
        })
    }

    /// Every live process of the run, main first (for a kill): the main process, its tree,
    /// every process seen in the tree earlier that is still the same process (orphans), and —
    /// for an attached run that leads its own process group — the rest of that group. A group
    /// the run does not lead (a shell's, a test runner's) is never scanned or signalled.
    pub fn members(&mut self, fs: &dyn ProcSource) -> Vec<ProcId> {
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
                    if !v.contains(&st.id) && st.state != 'Z' && st.id.pid != self.main.pid {
                        v.push(st.id);
                    }
                }
            }
        }
        v
    }
}

/// roger's own background helpers (the publisher and the uploader: `roger publish --drain` /
/// `--upload-drain`, each in its own session) end up children of the watch, which is a
/// subreaper, or are started by it; they are not the run, and stopping the run must not stop
/// an upload halfway.
fn roger_helper(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let own = std::env::current_exe().ok();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    exe.is_some()
        && exe == own
        && args.iter().any(|a| *a == b"publish")
        && args
            .iter()
            .any(|a| *a == b"--drain" || *a == b"--upload-drain")
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
    /// How the signals went out: "pidfd" (race-free) or "kill" (kill(2) after the check).
    pub via: Option<proc::Via>,
}

/// Leave to signal the run: [`stop`], the only way roger signals it, takes one, and a dry run
/// never gets one — so no path of a dry run can signal, whatever it decides.
pub struct MaySignal(());

impl MaySignal {
    pub(super) fn unless_dry_run(dry_run: bool) -> Option<MaySignal> {
        (!dry_run).then_some(MaySignal(()))
    }
}

/// `first` (SIGTERM, or the signal roger received) to every member, wait up to `grace`,
/// SIGKILL what is left. Reaps what is ours.
pub fn stop(
    run: &mut Run,
    targets: &[ProcId],
    first: Signal,
    grace: Duration,
    fs: &dyn ProcSource,
    _leave: &MaySignal,
) -> Result<Stopped> {
    let t0 = Instant::now();
    let mut out = Stopped {
        sigterm: Vec::new(),
        sigkill: Vec::new(),
        survivors: Vec::new(),
        took_s: 0.0,
        via: None,
    };
    for id in targets {
        if let Some(via) = proc::signal_checked_via(fs, *id, first)? {
            out.sigterm.push(id.pid);
            out.via = Some(via);
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
        if let Some(via) = proc::signal_checked_via(fs, id, Signal::SIGKILL)? {
            out.sigkill.push(id.pid);
            out.via = Some(via);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::proc::FakeProc;

    /// An attached run: main 10 with workers 11 (in D state) and 12; 99 shares the group
    /// but was never in the run's tree.
    fn table(main_leads_group: bool) -> FakeProc {
        let mut f = FakeProc::default();
        f.add(10, 1, 'S', 2.0, 100);
        f.add(11, 10, 'D', 1.0, 50);
        f.add(12, 10, 'R', 0.5, 0);
        f.add(99, 1, 'S', 0.0, 0);
        let group = if main_leads_group { 10 } else { 7 };
        for (st, _) in f.procs.values_mut() {
            st.pgrp = group;
        }
        f
    }

    #[test]
    fn observe_sums_the_tree() {
        let f = table(true);
        let mut f = f;
        let mut run = attach(10, &f).unwrap();
        let o = run.observe(&f).unwrap();
        assert_eq!(o.main, Main::Alive { state: 'S' });
        assert_eq!(o.others, 2);
        assert_eq!(
            (o.cpu_s, o.io_bytes),
            (0.0, Some(0)),
            "the first sample is the baseline"
        );
        assert!(o.d_state);
        // Each process works 0.5 s and does 10 bytes of I/O.
        for (st, _) in f.procs.values_mut() {
            st.cpu_s += 0.5;
            st.io_bytes = st.io_bytes.map(|b| b + 10);
        }
        let o = run.observe(&f).unwrap();
        assert!((o.cpu_s - 1.5).abs() < 1e-9, "{}", o.cpu_s);
        assert_eq!(o.io_bytes, Some(30));
        assert_eq!(o.lost, 0);
    }

    #[test]
    fn defunct_main_reports_its_exit_code_and_orphans_stay_members() {
        let mut f = table(false);
        let mut run = attach(10, &f).unwrap();
        run.observe(&f).unwrap();
        // Main exits with code 1 and is left defunct; its workers are reparented to init.
        let (st, kids) = f.procs.get_mut(&10).unwrap();
        st.state = 'Z';
        st.exit_status = Some(256);
        kids.clear();
        let o = run.observe(&f).unwrap();
        assert_eq!(
            o.main,
            Main::Exited {
                code: Some(1),
                signal: None
            }
        );
        let mut members: Vec<u32> = run.members(&f).iter().map(|p| p.pid).collect();
        members.sort_unstable();
        assert_eq!(
            members,
            vec![11, 12],
            "seen orphans, never the shared group's 99"
        );
    }

    #[test]
    fn a_group_the_run_leads_is_scanned_after_it_exits() {
        let mut f = table(true);
        let mut run = attach(10, &f).unwrap();
        f.procs.get_mut(&10).unwrap().0.state = 'Z';
        let members: Vec<u32> = run.members(&f).iter().map(|p| p.pid).collect();
        assert!(members.contains(&99), "{members:?}");
    }

    #[test]
    fn a_recycled_pid_is_not_the_run() {
        let mut f = table(true);
        let mut run = attach(10, &f).unwrap();
        f.procs.get_mut(&10).unwrap().0.id.start += 1;
        assert_eq!(run.poll_exit(&f), Some((None, None)));
        assert!(!run.members(&f).iter().any(|p| p.pid == 10));
    }
}
