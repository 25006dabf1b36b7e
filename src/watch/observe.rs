//! One tick's observations: the sample the sentinel judges (process tree, log, GPU) and the
//! optional disk check. (Critic verdicts that ask for a rollback: verdicts.rs.)

use super::Watcher;
use crate::gpu::GpuError;
use crate::sentinel::{Assessment, GpuObs, Sample, State};
use anyhow::Result;

impl Watcher<'_> {
    pub(super) fn sample(&mut self) -> Sample {
        let proc = self.run.observe(&self.fs);
        let mut log = self.log.poll();
        let gpu = self.gpu_obs();
        let ranks = self.ranks.read(&self.run.last_tree);
        // With a log per rank, the run has progressed as far as its slowest rank's log: one
        // rank whose log stops makes the run stale even while the others' still grow.
        match (self.ranks.poll_logs(), log.as_mut()) {
            (Some(slowest), Ok(l)) => {
                l.last_step = Some(l.last_step.map_or(slowest, |s| s.min(slowest)));
            }
            // The judged rank's log is on another node (a multi-node job writes each node's
            // ranks' logs there): this node's progress is its own ranks'.
            (Some(slowest), Err(_)) => {
                log = Ok(crate::sentinel::LogObs {
                    bytes: 0,
                    last_step: Some(slowest),
                });
            }
            _ => {}
        }
        Sample {
            at: self.now(),
            log,
            proc,
            gpu,
            ranks,
        }
    }

    /// Read the rank map now (an attached run's ranks exist already at the start).
    pub(super) fn sample_ranks(&mut self) {
        if self.run.observe(&self.fs).is_ok() {
            self.ranks.read(&self.run.last_tree);
        }
    }

    fn gpu_obs(&mut self) -> GpuObs {
        let snap = match self.gpu.read() {
            Ok(s) => s,
            Err(GpuError::NoGpu(why)) => return GpuObs::Absent { why },
            Err(GpuError::Failed(why)) => return GpuObs::Failed { why },
        };
        self.ranks.note_gpu(&snap);
        let pids: Vec<u32> = self.run.seen.iter().map(|p| p.pid).collect();
        let mine: Vec<&crate::gpu::GpuProcess> = snap
            .processes
            .iter()
            .filter(|p| pids.contains(&p.pid))
            .collect();
        // A driver that lists no processes at all cannot attribute: judge every GPU.
        let gpus: Vec<u32> = if snap.processes.is_empty() {
            snap.gpus.iter().map(|g| g.index).collect()
        } else {
            mine.iter().map(|p| p.gpu).collect()
        };
        for g in &gpus {
            if !self.run_gpus.contains(g) {
                self.run_gpus.push(*g);
            }
        }
        let busiest = snap
            .gpus
            .iter()
            .filter(|g| gpus.contains(&g.index))
            .max_by_key(|g| g.util.unwrap_or(0));
        GpuObs::Read {
            util: busiest.and_then(|g| g.util).map(f64::from),
            power_frac: busiest.and_then(|g| match (g.power_w, g.power_limit_w) {
                (Some(p), Some(l)) if l > 0.0 => Some(p / l),
                _ => None,
            }),
            run_vram: if snap.processes.is_empty() {
                None
            } else {
                snap.memory_of(&pids)
            },
        }
    }

    /// `[export] textfile`: what this tick saw, plus what the ledger gained (`new`).
    pub(super) fn export(&mut self, a: &Assessment, new: &[crate::ledger::Record]) {
        let Some(e) = self.export.as_mut() else {
            return;
        };
        let now = super::unix_now();
        let goodput = e.observe_state(now, a.state == State::Working);
        let live = crate::export::Live {
            now,
            state: Some(a.state.name()),
            step: a.last_step,
            since_progress_s: Some(super::ms(a.silent_s)),
            stale_limit_s: Some(super::ms(a.limit.seconds)),
            goodput: Some(goodput),
            ticks: 0,
            nodes: self
                .cluster
                .as_ref()
                .map_or_else(Vec::new, |c| c.live(now, a.last_step)),
        };
        e.tick(&live, new);
    }

    /// `[watch] disk_check`: the same disk check as `roger hygiene disk` (free space and the
    /// forecast hours to full of every path the run writes to), rate-limited, recorded as a
    /// `hygiene` record when its status changes. Never an action: the warning is the point.
    pub(super) fn check_disk(&mut self) -> Result<()> {
        let now = chrono::Utc::now();
        let step = self.sentinel.last_step();
        match self.disk.tick(self.cfg, &self.ledger, "watch", step, now) {
            Ok(Some(report)) => {
                if let Some(e) = self.export.as_mut() {
                    e.disk(&report.targets);
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("disk check failed: {e:#}"),
        }
        Ok(())
    }
}
