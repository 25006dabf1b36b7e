//! The run's work between samples, counted per process (pid + start time) so that a worker
//! exiting between samples neither takes its CPU time with it nor reads as idleness.
//!
//! A process's work is its own CPU time plus that of the children it has waited for
//! (`cutime`/`cstime`; /proc/PID/io already includes reaped children's I/O). A process that
//! vanished between samples was either reaped inside the run — its nearest surviving ancestor's
//! children time then grew by at least what it had used when last seen, and only its usage
//! since then is new — or reaped by roger from a defunct entry whose final usage was read, or
//! neither: then its final usage is unknown and the window is counted as `lost`, which the
//! sentinel reads as "unknown", never as idle.
//!
//! When the run has a cgroup of its own at both ends of a window, its `cpu.stat` (and
//! `io.stat`) counted every process of the run, exited or not: the window's work is at least
//! the cgroup's, and nothing in it is lost.

use crate::sys::cgroup::CgUsage;
use crate::sys::proc::{ProcId, ProcStat};
use std::collections::BTreeMap;

/// CPU seconds below which two readings are equal (they are whole clock ticks).
const TICK_SLACK: f64 = 1e-6;

#[derive(Debug, Clone, Copy)]
struct Seen {
    ppid: u32,
    /// Defunct and waiting for roger to reap it: its reading is final.
    ours_defunct: bool,
    cpu: f64,
    children: f64,
    io: Option<u64>,
}

impl Seen {
    fn total(&self) -> f64 {
        self.cpu + self.children
    }
}

/// Cumulative work counters, fed one process-tree reading per sample.
#[derive(Debug, Default)]
pub struct Work {
    last: BTreeMap<ProcId, Seen>,
    last_cg: Option<CgUsage>,
    started: bool,
    /// CPU seconds of work done by the run since the first reading (monotone).
    pub cpu_s: f64,
    /// Syscall I/O bytes done since the first reading (monotone; readable windows only).
    pub io_bytes: u64,
    /// The last window's I/O could be read for every process.
    pub io_known: bool,
    /// Processes that left the run between samples with their final usage unknown.
    pub lost: u64,
}

impl Work {
    /// Account the window since the last reading. `tree` is every process of the run now,
    /// defunct ones included; `reaper` is roger's pid (defunct children of roger are reaped
    /// by it right after this reading, so their reading is final); `cg` the run's own
    /// cgroup's counters when it has one this sample.
    pub fn update(&mut self, tree: &[ProcStat], reaper: u32, cg: Option<CgUsage>) {
        let lost_before = self.lost;
        let now: BTreeMap<ProcId, Seen> = tree
            .iter()
            .map(|st| {
                (
                    st.id,
                    Seen {
                        ppid: st.ppid,
                        ours_defunct: st.state == 'Z' && st.ppid == reaper,
                        cpu: st.cpu_s,
                        children: st.children_cpu_s,
                        io: st.io_bytes,
                    },
                )
            })
            .collect();
        let last_cg = std::mem::replace(&mut self.last_cg, cg);
        if !self.started {
            self.started = true;
            self.io_known = now.values().all(|s| s.io.is_some());
            self.last = now;
            return;
        }
        // Each vanished process, owed to its nearest ancestor that is still the same process.
        let by_pid: BTreeMap<u32, ProcId> = self.last.keys().map(|id| (id.pid, *id)).collect();
        let mut owed: BTreeMap<ProcId, (f64, u64, u64)> = BTreeMap::new();
        for (id, prev) in &self.last {
            if now.contains_key(id) || prev.ours_defunct {
                continue;
            }
            let mut anc = by_pid.get(&prev.ppid).copied();
            let mut hops = 0;
            while let Some(a) = anc {
                if now.contains_key(&a) || hops > 64 {
                    break;
                }
                anc = self.last.get(&a).and_then(|s| by_pid.get(&s.ppid).copied());
                hops += 1;
            }
            match anc.filter(|a| now.contains_key(a)) {
                Some(a) => {
                    let e = owed.entry(a).or_default();
                    e.0 += prev.total();
                    e.1 += prev.io.unwrap_or(0);
                    e.2 += 1;
                }
                None => self.lost += 1,
            }
        }
        let mut cpu = 0.0;
        let mut io = 0u64;
        let mut io_known = true;
        for (id, cur) in &now {
            let prev = self.last.get(id);
            let (mut d_cpu, d_io) = match prev {
                Some(p) => (
                    (cur.total() - p.total()).max(0.0),
                    cur.io.zip(p.io).map(|(c, p)| c.saturating_sub(p)),
                ),
                // New since the last reading: all its work is in this window.
                None => (cur.total(), cur.io),
            };
            let mut d_io = d_io;
            if let (Some((owed_cpu, owed_io, n)), Some(p)) = (owed.get(id), prev) {
                let grew = cur.children - p.children;
                if grew + TICK_SLACK >= *owed_cpu {
                    // It reaped them: their earlier usage was counted in earlier windows.
                    d_cpu = (d_cpu - owed_cpu).max(0.0);
                    d_io = d_io.map(|b| b.saturating_sub(*owed_io));
                } else {
                    // Not (all) reaped here: reparented and reaped outside the run.
                    self.lost += n;
                    d_cpu = (cur.cpu - p.cpu).max(0.0);
                    d_io = None;
                }
            }
            cpu += d_cpu;
            match d_io {
                Some(b) => io += b,
                None => io_known = false,
            }
        }
        if let (Some(a), Some(b)) = (last_cg, cg) {
            cpu = cpu.max(b.cpu_s - a.cpu_s);
            if let (Some(x), Some(y)) = (a.io_bytes, b.io_bytes) {
                io = if io_known {
                    io.max(y.saturating_sub(x))
                } else {
                    y.saturating_sub(x)
                };
                io_known = true;
            }
            self.lost = lost_before;
        }
        self.cpu_s += cpu;
        self.io_bytes += io;
        self.io_known = io_known;
        self.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROGER: u32 = 1;

    fn st(pid: u32, ppid: u32, state: char, cpu: f64, children: f64) -> ProcStat {
        ProcStat {
            id: ProcId {
                pid,
                start: 1000 + pid as u64,
            },
            state,
            ppid,
            pgrp: 10,
            cpu_s: cpu,
            children_cpu_s: children,
            // Like the kernel: a reaped child's I/O is added to its parent's.
            io_bytes: Some(((cpu + children) * 1000.0) as u64),
            exit_status: None,
        }
    }

    #[test]
    fn a_worker_reaped_by_its_parent_keeps_its_work() {
        let mut w = Work::default();
        // bash (10) runs one 2-second worker after another.
        w.update(
            &[st(10, ROGER, 'S', 0.1, 0.0), st(11, 10, 'R', 1.0, 0.0)],
            ROGER,
            None,
        );
        // Worker 11 used 1.0 s more, exited and was reaped (bash's cutime +2.0); worker 12
        // started and used 0.9 s. One core busy for the window: 1.9 s of work.
        w.update(
            &[st(10, ROGER, 'S', 0.1, 2.0), st(12, 10, 'R', 0.9, 0.0)],
            ROGER,
            None,
        );
        assert!((w.cpu_s - 1.9).abs() < 1e-9, "{}", w.cpu_s);
        assert_eq!(w.lost, 0);
        assert!(w.io_known);
        assert_eq!(w.io_bytes, 1900);
    }

    #[test]
    fn a_grandchild_reaped_through_a_vanished_parent_is_counted_once() {
        let mut w = Work::default();
        // sh (10) → timeout (11) → spinner (12).
        w.update(
            &[
                st(10, ROGER, 'S', 0.0, 0.0),
                st(11, 10, 'S', 0.0, 0.0),
                st(12, 11, 'R', 0.5, 0.0),
            ],
            ROGER,
            None,
        );
        // The spinner ends at 1.0 s, timeout reaps it and exits, sh reaps timeout.
        w.update(&[st(10, ROGER, 'S', 0.0, 1.0)], ROGER, None);
        assert!((w.cpu_s - 0.5).abs() < 1e-9, "{}", w.cpu_s);
        assert_eq!(w.lost, 0);
    }

    #[test]
    fn a_process_that_vanished_unreaped_by_the_run_is_lost_not_idle() {
        let mut w = Work::default();
        w.update(
            &[st(10, ROGER, 'S', 0.0, 0.0), st(11, 10, 'R', 1.0, 0.0)],
            ROGER,
            None,
        );
        // 11 is gone but 10's children time did not grow: reaped elsewhere (init).
        w.update(&[st(10, ROGER, 'S', 0.0, 0.0)], ROGER, None);
        assert_eq!(w.lost, 1);
        assert_eq!(w.cpu_s, 0.0);
        assert!(!w.io_known);
        // With no surviving ancestor at all, the same.
        let mut w = Work::default();
        w.update(&[st(11, 7, 'R', 1.0, 0.0)], ROGER, None);
        w.update(&[], ROGER, None);
        assert_eq!(w.lost, 1);
    }

    #[test]
    fn a_defunct_child_of_roger_is_final_when_read() {
        let mut w = Work::default();
        w.update(
            &[st(10, ROGER, 'S', 0.0, 0.0), st(20, ROGER, 'R', 1.0, 0.0)],
            ROGER,
            None,
        );
        // Orphan 20 exits: roger reads its defunct entry (final 1.5 s), then reaps it.
        w.update(
            &[st(10, ROGER, 'S', 0.0, 0.0), st(20, ROGER, 'Z', 1.5, 0.0)],
            ROGER,
            None,
        );
        w.update(&[st(10, ROGER, 'S', 0.0, 0.0)], ROGER, None);
        assert!((w.cpu_s - 0.5).abs() < 1e-9);
        assert_eq!(w.lost, 0);
    }

    #[test]
    fn the_runs_own_cgroup_accounts_for_processes_reaped_elsewhere() {
        let cg = |cpu_s: f64| {
            Some(CgUsage {
                cpu_s,
                io_bytes: None,
            })
        };
        let mut w = Work::default();
        w.update(
            &[st(10, ROGER, 'S', 0.0, 0.0), st(11, 10, 'R', 1.0, 0.0)],
            ROGER,
            cg(1.0),
        );
        // 11 used 0.8 s more and was reaped outside the run: the cgroup still counted it.
        w.update(&[st(10, ROGER, 'S', 0.0, 0.0)], ROGER, cg(1.8));
        assert_eq!(w.lost, 0);
        assert!((w.cpu_s - 0.8).abs() < 1e-9, "{}", w.cpu_s);
        // Without the cgroup at one end of the window, the same is lost.
        w.update(
            &[st(10, ROGER, 'S', 0.0, 0.0), st(12, 10, 'R', 0.1, 0.0)],
            ROGER,
            None,
        );
        w.update(&[st(10, ROGER, 'S', 0.0, 0.0)], ROGER, cg(2.5));
        assert_eq!(w.lost, 1);
    }

    #[test]
    fn a_recycled_pid_is_a_new_process() {
        let mut w = Work::default();
        w.update(
            &[st(10, ROGER, 'S', 0.0, 0.0), st(11, 10, 'R', 5.0, 0.0)],
            ROGER,
            None,
        );
        let mut recycled = st(11, 10, 'R', 0.2, 0.0);
        recycled.id.start += 7;
        // Old 11 reaped by 10 (children +5.5), a new process got pid 11 and used 0.2 s.
        w.update(&[st(10, ROGER, 'S', 0.0, 5.5), recycled], ROGER, None);
        assert!((w.cpu_s - 0.7).abs() < 1e-9, "{}", w.cpu_s);
        assert_eq!(w.lost, 0);
    }
}
