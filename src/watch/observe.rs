//! One tick's observations: the sample the sentinel judges (process tree, log, GPU), new
//! critic verdicts that ask for a rollback, and the optional disk check.

use super::{resume, Watcher};
use crate::gpu::GpuError;
use crate::sentinel::{GpuObs, Sample};
use anyhow::{Context, Result};

impl Watcher<'_> {
    pub(super) fn sample(&mut self) -> Sample {
        let proc = self.run.observe(&self.fs);
        let log = self.log.poll();
        let gpu = self.gpu_obs();
        Sample {
            at: self.now(),
            log,
            proc,
            gpu,
        }
    }

    fn gpu_obs(&mut self) -> GpuObs {
        let snap = match self.gpu.read() {
            Ok(s) => s,
            Err(GpuError::NoGpu(why)) => return GpuObs::Absent { why },
            Err(GpuError::Failed(why)) => return GpuObs::Failed { why },
        };
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

    /// `[watch] disk_check`: the same disk check as `roger hygiene disk` (free space and the
    /// forecast hours to full of every path the run writes to), rate-limited, recorded as a
    /// `hygiene` record when its status changes. Never an action: the warning is the point.
    pub(super) fn check_disk(&mut self) -> Result<()> {
        let now = chrono::Utc::now();
        let step = self.sentinel.last_step();
        if let Err(e) = self.disk.tick(self.cfg, &self.ledger, "watch", step, now) {
            tracing::warn!("disk check failed: {e:#}");
        }
        Ok(())
    }

    /// New `verdict` records (appended since the last tick) that ask for a rollback.
    pub(super) fn new_rollback(&mut self) -> Result<Option<resume::Rollback>> {
        if self.cfg.watch.rollback_on.is_empty() || self.run.poll_exit(&self.fs).is_some() {
            return Ok(None);
        }
        let path = self.ledger.path();
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        if len <= self.ledger_offset {
            return Ok(None);
        }
        use std::io::{Read, Seek, SeekFrom};
        let mut f =
            std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
        f.seek(SeekFrom::Start(self.ledger_offset))?;
        let mut buf = Vec::new();
        f.take(len - self.ledger_offset).read_to_end(&mut buf)?;
        let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
            return Ok(None);
        };
        self.ledger_offset += end as u64 + 1;
        let scan = crate::ledger::scan_bytes(&buf[..=end]);
        // A verdict about a step this launch has not reached is about the data before a
        // rollback: stale, not a new divergence.
        let reached = self.sentinel.last_step();
        Ok(scan
            .records
            .iter()
            .filter(|r| r.seq > self.start_seq)
            .filter(|r| match (r.step, reached) {
                (Some(v), Some(l)) => v <= l,
                _ => true,
            })
            .find_map(|r| resume::rollback_trigger(r, &self.run_name, &self.cfg.watch.rollback_on)))
    }
}
