//! When to relaunch and when to give up: the relaunch budget (total and per window, counting
//! SLURM requeues), exponential backoff, the loop breakers (named for what ended the launches:
//! crash_loop, rollback_loop, wedge_loop, relaunch_loop when mixed), the progress breaker, and
//! the GPU-memory gate before a relaunch. Pure: plain numbers in, a decision out.

use crate::config::WatchConfig;
use crate::gpu::GpuSnapshot;
use serde::Serialize;

/// How one launch of the run ended.
#[derive(Debug, Clone, Serialize)]
pub struct RunEnd {
    /// Seconds from launch to end.
    pub lived_s: f64,
    /// What ended it, in words: "main process exited with code 1", "critic fail: loss", ...
    pub how: String,
    pub cause: Cause,
    /// Started by a relaunch of this watch (the first launch only starts the relaunching: it
    /// is never part of a loop).
    pub relaunched: bool,
}

/// Who ended a launch: the run itself, or roger (and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// It exited or died by itself (a zombie's leftovers cleaned by roger included).
    Crash,
    /// roger killed it as wedged.
    Wedge,
    /// roger killed it on a critic failure (a rollback).
    Divergence,
}

impl Cause {
    fn loop_name(self) -> &'static str {
        match self {
            Cause::Crash => "crash_loop",
            Cause::Wedge => "wedge_loop",
            Cause::Divergence => "rollback_loop",
        }
    }
    fn verb(self) -> &'static str {
        match self {
            Cause::Crash => "crashed",
            Cause::Wedge => "were killed by roger as wedged",
            Cause::Divergence => "were killed by roger for divergence",
        }
    }
    fn noun(self) -> &'static str {
        match self {
            Cause::Crash => "crashed",
            Cause::Wedge => "killed as wedged",
            Cause::Divergence => "killed for divergence",
        }
    }
}

/// What the policy sees.
#[derive(Debug, Clone)]
pub struct History<'a> {
    /// SLURM_RESTART_COUNT: requeues of this job, each a relaunch already spent.
    pub slurm_restarts: u32,
    /// Relaunches made by this watch.
    pub session_relaunches: u32,
    /// Relaunch records of this run inside the window (from the ledger, survives requeues).
    pub in_window: u32,
    /// Every launch's end, oldest first.
    pub ends: &'a [RunEnd],
    /// The checkpoint step each earlier relaunch resumed from, oldest first.
    pub resumed_steps: &'a [Option<u64>],
    /// The step the next relaunch would resume from.
    pub next_step: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    Relaunch {
        attempt: u32,
        backoff_s: f64,
    },
    /// Give up; `breaker` names which one opened.
    Stop {
        breaker: &'static str,
        evidence: String,
    },
}

pub fn decide(cfg: &WatchConfig, h: &History) -> Decision {
    if let Some(stop) = loop_breaker(cfg, h.ends) {
        return stop;
    }
    let m = cfg.breaker_no_progress as usize;
    if m > 0
        && h.resumed_steps.len() >= m
        && h.resumed_steps[h.resumed_steps.len() - m..]
            .iter()
            .all(|s| *s == h.next_step)
    {
        return Decision::Stop {
            breaker: "no_progress",
            evidence: format!(
                "the last good checkpoint is still at step {} after {m} relaunches: the run fails at the same place",
                h.next_step.map_or("none".into(), |s| s.to_string())
            ),
        };
    }
    let used = h.slurm_restarts + h.session_relaunches;
    if used >= cfg.max_relaunches {
        return Decision::Stop {
            breaker: "budget",
            evidence: format!(
                "{used} relaunches spent ({} by SLURM requeue, {} by this watch) of max_relaunches = {}",
                h.slurm_restarts, h.session_relaunches, cfg.max_relaunches
            ),
        };
    }
    if h.in_window >= cfg.max_relaunches_per_window {
        return Decision::Stop {
            breaker: "budget_window",
            evidence: format!(
                "{} relaunches in the last {} (max_relaunches_per_window = {})",
                h.in_window, cfg.relaunch_window, cfg.max_relaunches_per_window
            ),
        };
    }
    // Back off harder while runs keep dying young; a run that lived resets it.
    let within = cfg.breaker_within.as_secs_f64();
    let quick = h
        .ends
        .iter()
        .rev()
        .take_while(|e| e.lived_s < within)
        .count() as i32;
    let base = cfg.backoff_initial.as_secs_f64();
    let backoff = (base * 2f64.powi((quick - 1).max(0))).min(cfg.backoff_max.as_secs_f64());
    Decision::Relaunch {
        attempt: used + 1,
        backoff_s: backoff,
    }
}

/// `breaker_crashes` consecutive relaunches that each ended within `breaker_within` of their
/// start: a loop, named for what ended them, with the count of each.
fn loop_breaker(cfg: &WatchConfig, ends: &[RunEnd]) -> Option<Decision> {
    let within = cfg.breaker_within.as_secs_f64();
    let k = cfg.breaker_crashes as usize;
    if k == 0 || ends.len() < k {
        return None;
    }
    let last = &ends[ends.len() - k..];
    if !last.iter().all(|e| e.relaunched && e.lived_s < within) {
        return None;
    }
    let detail: Vec<String> = last
        .iter()
        .map(|e| format!("{} after {:.1}s", e.how, e.lived_s))
        .collect();
    let first = last[0].cause;
    let (breaker, what) = if last.iter().all(|e| e.cause == first) {
        (first.loop_name(), first.verb().to_string())
    } else {
        let counts: Vec<String> = [Cause::Crash, Cause::Wedge, Cause::Divergence]
            .iter()
            .filter_map(|c| {
                let n = last.iter().filter(|e| e.cause == *c).count();
                (n > 0).then(|| format!("{n} {}", c.noun()))
            })
            .collect();
        ("relaunch_loop", format!("ended ({})", counts.join(", ")))
    };
    Some(Decision::Stop {
        breaker,
        evidence: format!(
            "{k} consecutive relaunches {what} within {within:.0}s of start: {}",
            detail.join("; ")
        ),
    })
}

/// Who still holds VRAM on the GPUs the run used.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "vram", rename_all = "snake_case")]
pub enum VramGate {
    Clear,
    /// The run's own processes (these may be killed).
    Run {
        pids: Vec<u32>,
    },
    /// Processes outside the run, holding this many bytes.
    Foreign {
        pids: Vec<u32>,
        bytes: u64,
    },
}

pub fn vram_gate(snap: &GpuSnapshot, run_pids: &[u32], run_gpus: &[u32]) -> VramGate {
    let holding = |p: &&crate::gpu::GpuProcess| p.used_memory.is_none_or(|m| m > 0);
    if snap.foreign_pids {
        // Host PIDs (roger in a container): the run's and others' cannot be told apart, so
        // wait for the run's GPUs to free up, killing and stopping nothing.
        let held = snap
            .processes
            .iter()
            .filter(holding)
            .any(|p| run_gpus.contains(&p.gpu));
        return if held {
            VramGate::Run { pids: vec![] }
        } else {
            VramGate::Clear
        };
    }
    let mine: Vec<u32> = snap
        .processes
        .iter()
        .filter(holding)
        .filter(|p| run_pids.contains(&p.pid))
        .map(|p| p.pid)
        .collect();
    if !mine.is_empty() {
        return VramGate::Run { pids: mine };
    }
    let foreign: Vec<&crate::gpu::GpuProcess> = snap
        .processes
        .iter()
        .filter(holding)
        .filter(|p| run_gpus.contains(&p.gpu) && !run_pids.contains(&p.pid))
        .collect();
    if foreign.is_empty() {
        VramGate::Clear
    } else {
        VramGate::Foreign {
            pids: foreign.iter().map(|p| p.pid).collect(),
            bytes: foreign
                .iter()
                .filter_map(|p| p.used_memory)
                .fold(0u64, u64::saturating_add),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Dur;
    use crate::gpu::GpuProcess;

    fn cfg() -> WatchConfig {
        WatchConfig {
            max_relaunches: 5,
            max_relaunches_per_window: 3,
            backoff_initial: Dur::secs(10),
            backoff_max: Dur::secs(35),
            breaker_crashes: 3,
            breaker_within: Dur::secs(60),
            breaker_no_progress: 2,
            ..WatchConfig::default()
        }
    }

    fn end(lived: f64) -> RunEnd {
        RunEnd {
            lived_s: lived,
            how: "exit 1".into(),
            cause: Cause::Crash,
            relaunched: true,
        }
    }

    fn ended(lived: f64, cause: Cause, relaunched: bool) -> RunEnd {
        RunEnd {
            lived_s: lived,
            how: format!("{cause:?}"),
            cause,
            relaunched,
        }
    }

    fn hist<'a>(ends: &'a [RunEnd], resumed: &'a [Option<u64>], next: Option<u64>) -> History<'a> {
        History {
            slurm_restarts: 0,
            session_relaunches: resumed.len() as u32,
            in_window: 0,
            ends,
            resumed_steps: resumed,
            next_step: next,
        }
    }

    #[test]
    fn crash_loop_opens_after_k_quick_deaths() {
        let ends = [end(500.0), end(2.0), end(3.0)];
        assert!(matches!(
            decide(&cfg(), &hist(&ends, &[], Some(100))),
            Decision::Relaunch { .. }
        ));
        let ends = [end(2.0), end(3.0), end(1.0)];
        match decide(&cfg(), &hist(&ends, &[], Some(100))) {
            Decision::Stop { breaker, evidence } => {
                assert_eq!(breaker, "crash_loop");
                assert!(evidence.contains("exit 1 after 3.0s"), "{evidence}");
                assert!(evidence.contains("3 consecutive relaunches crashed"));
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn the_first_launch_is_not_part_of_a_loop() {
        // A first launch that ran (and died young), then two quick relaunch deaths: k = 3 is
        // not reached — the first launch started the relaunching.
        let ends = [
            ended(40.0, Cause::Crash, false),
            ended(2.0, Cause::Crash, true),
            ended(1.0, Cause::Crash, true),
        ];
        let d = decide(&cfg(), &hist(&ends, &[], Some(100)));
        assert!(matches!(d, Decision::Relaunch { .. }), "{d:?}");
    }

    #[test]
    fn loops_are_named_for_what_ended_the_runs() {
        let name = |ends: &[RunEnd]| match decide(&cfg(), &hist(ends, &[], Some(100))) {
            Decision::Stop { breaker, evidence } => (breaker, evidence),
            d => panic!("{d:?}"),
        };
        let div = [
            ended(0.1, Cause::Divergence, true),
            ended(0.1, Cause::Divergence, true),
            ended(0.1, Cause::Divergence, true),
        ];
        let (b, e) = name(&div);
        assert_eq!(b, "rollback_loop");
        assert!(e.contains("killed by roger for divergence"), "{e}");
        let wedge = [
            ended(5.0, Cause::Wedge, true),
            ended(5.0, Cause::Wedge, true),
            ended(5.0, Cause::Wedge, true),
        ];
        assert_eq!(name(&wedge).0, "wedge_loop");
        let mixed = [
            ended(5.0, Cause::Wedge, true),
            ended(5.0, Cause::Crash, true),
            ended(5.0, Cause::Crash, true),
        ];
        let (b, e) = name(&mixed);
        assert_eq!(b, "relaunch_loop");
        assert!(e.contains("2 crashed, 1 killed as wedged"), "{e}");
    }

    #[test]
    fn progress_breaker_when_the_checkpoint_does_not_move() {
        let ends = [end(500.0), end(500.0)];
        let d = decide(&cfg(), &hist(&ends, &[Some(100), Some(100)], Some(100)));
        assert!(
            matches!(
                d,
                Decision::Stop {
                    breaker: "no_progress",
                    ..
                }
            ),
            "{d:?}"
        );
        let d = decide(&cfg(), &hist(&ends, &[Some(100), Some(100)], Some(200)));
        assert!(matches!(d, Decision::Relaunch { attempt: 3, .. }), "{d:?}");
    }

    #[test]
    fn budget_counts_slurm_requeues_and_the_window() {
        let ends = [end(500.0)];
        let mut h = hist(&ends, &[], Some(1));
        h.slurm_restarts = 5;
        assert!(matches!(
            decide(&cfg(), &h),
            Decision::Stop {
                breaker: "budget",
                ..
            }
        ));
        h.slurm_restarts = 1;
        h.in_window = 3;
        assert!(matches!(
            decide(&cfg(), &h),
            Decision::Stop {
                breaker: "budget_window",
                ..
            }
        ));
    }

    #[test]
    fn backoff_doubles_while_runs_die_young_and_is_capped() {
        let c = cfg();
        let b = |ends: &[RunEnd]| match decide(&c, &hist(ends, &[], Some(1))) {
            Decision::Relaunch { backoff_s, .. } => backoff_s,
            d => panic!("{d:?}"),
        };
        assert_eq!(b(&[end(500.0)]), 10.0);
        assert_eq!(b(&[end(500.0), end(5.0)]), 10.0);
        assert_eq!(b(&[end(5.0), end(5.0)]), 20.0);
        let c2 = WatchConfig {
            breaker_crashes: 0,
            ..cfg()
        };
        let d = decide(&c2, &hist(&[end(1.0), end(1.0), end(1.0)], &[], Some(1)));
        assert_eq!(
            d,
            Decision::Relaunch {
                attempt: 1,
                backoff_s: 35.0
            }
        );
    }

    #[test]
    fn vram_gate_tells_own_from_foreign() {
        let snap = |procs: Vec<(u32, u32, u64)>| GpuSnapshot {
            gpus: vec![],
            processes: procs
                .into_iter()
                .map(|(pid, gpu, m)| GpuProcess {
                    pid,
                    gpu,
                    used_memory: Some(m),
                })
                .collect(),
            source: "fake".into(),
            ..Default::default()
        };
        assert_eq!(vram_gate(&snap(vec![]), &[1], &[0]), VramGate::Clear);
        assert_eq!(
            vram_gate(&snap(vec![(1, 0, 10), (9, 0, 5)]), &[1], &[0]),
            VramGate::Run { pids: vec![1] }
        );
        assert_eq!(
            vram_gate(&snap(vec![(9, 0, 5), (8, 1, 7)]), &[1], &[0]),
            VramGate::Foreign {
                pids: vec![9],
                bytes: 5
            }
        );
        // In a container the driver's PIDs are the host's: the run's own leftover (host PID
        // 9) was "foreign" before, and on_foreign_vram = "stop" stopped the watch.
        let host = |procs| GpuSnapshot {
            foreign_pids: true,
            ..snap(procs)
        };
        assert_eq!(
            vram_gate(&host(vec![(9, 0, 5)]), &[1], &[0]),
            VramGate::Run { pids: vec![] }
        );
        assert_eq!(
            vram_gate(&host(vec![(8, 1, 7)]), &[1], &[0]),
            VramGate::Clear
        );
    }

    /// Found by the fuzz harness's long replay run (840986a): per-process VRAM in a recording
    /// (the same numbers come from NVML or nvidia-smi) summed past u64 by `memory_of` and by
    /// the VRAM gate.
    #[test]
    fn regress_process_vram_sum_past_u64() {
        let r: crate::gpu::replay::Recording = serde_json::from_str(
            r#"{"snapshots":[{"gpus":[{"index":0,"name":"","uuid":"","":0,"":0}],"processes":[{"pid":2,"gpu":0,"used_memory":3},{"pid":1,"gpu":0,"used_memory":18446744073709551615}],"source":""}]}"#,
        )
        .unwrap();
        let snap = &r.snapshots[0];
        assert_eq!(snap.memory_of(&[1, 2]), Some(u64::MAX));
        match vram_gate(snap, &[], &[0]) {
            VramGate::Foreign { bytes, .. } => assert_eq!(bytes, u64::MAX),
            other => panic!("{other:?}"),
        }
    }
}
