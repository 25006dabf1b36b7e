//! Relaunch: clean the ended run's leftovers, wait for its GPU memory, pick the last good
//! checkpoint, check budget and breakers, back off, start again — each step recorded first.

use super::actions::Evidence;
use super::child;
use super::policy::{self, Decision, VramGate};
use super::resume::{self, Resume};
use super::{dur, Event, Flow, Watcher};
use crate::config::ForeignVram;
use crate::exit;
use crate::ledger::Kind;
use crate::sys::proc::ProcId;
use anyhow::Result;
use serde_json::json;
use std::time::Instant;

impl Watcher<'_> {
    /// Clean leftovers, wait for VRAM, pick the checkpoint, check budget and breakers, back
    /// off, start again.
    pub(super) fn relaunch(&mut self, diverged_at: Option<u64>) -> Result<Flow> {
        let leftovers = self.run.members(&self.fs);
        if !leftovers.is_empty() {
            let why = format!(
                "{} process(es) of the ended run still alive: cleaned before the relaunch",
                leftovers.len()
            );
            self.kill_record("leftover", Evidence::Note(why), &leftovers, None)?;
            self.terminate(&leftovers)?;
        }
        self.quarantine_outputs()?;
        if let Flow::Exit(c) = self.wait_vram()? {
            return Ok(Flow::Exit(c));
        }
        if self.template.is_empty() {
            return self
                .done(
                    exit::NOT_DONE,
                    "no [watch] command to relaunch the attached run with",
                )
                .map(Flow::Exit);
        }
        if let Ok(dir) = self.cfg.checkpoint_dir() {
            // The run's own `roger publish` may have died with the run (roger's SIGKILL of the
            // tree reaches it too): finish or undo it, on record, before choosing from the ledger.
            crate::publish::recover::try_recover(
                &dir,
                &self.ledger,
                &self.run_name,
                super::SOURCE,
                chrono::Utc::now(),
            );
            crate::publish::publisher::resume(&dir);
        }
        let w = &self.cfg.watch;
        let records = self.ledger.records()?;
        let before = diverged_at.map(|d| d.saturating_sub(w.rollback_margin_steps));
        let mut check = super::cluster::NodeWatch::resume_check(self.cluster.as_ref());
        let mut choice = resume::choose(&records, &self.run_name, before, &mut check);
        if let (Some(b), Ok(dir)) = (&self.bucket, self.cfg.checkpoint_dir()) {
            b.fill(
                &mut choice,
                &self.ledger,
                &self.run_name,
                &std::path::absolute(&dir)?,
                before,
                &mut super::cluster::NodeWatch::part_gate(self.cluster.as_ref()),
            );
        }
        for s in &choice.skipped {
            tracing::warn!("not resumed from {}: {}", s.path.display(), s.why);
        }
        let skipped = serde_json::to_value(&choice.skipped)?;
        if choice.chosen.is_none() && !w.allow_from_scratch {
            let evidence = format!(
                "no good checkpoint{} and allow_from_scratch = false ({} passed over)",
                before.map_or(String::new(), |b| format!(" before step {b}")),
                choice.skipped.len()
            );
            return self.breaker("no_checkpoint", evidence, vec![("skipped", skipped)]);
        }
        let next_step = choice.chosen.as_ref().and_then(|c| c.step);
        let window_start = chrono::Utc::now()
            - chrono::Duration::from_std(w.relaunch_window.0).unwrap_or(chrono::Duration::zero());
        let in_window = records
            .iter()
            .filter(|r| r.kind == Kind::Relaunch && r.run == self.run_name && r.ts >= window_start)
            .count() as u32;
        let decision = policy::decide(
            w,
            &policy::History {
                slurm_restarts: self.slurm_restarts,
                session_relaunches: self.relaunches,
                in_window,
                ends: &self.ends,
                resumed_steps: &self.resumed,
                next_step,
            },
        );
        let (attempt, backoff_s) = match decision {
            Decision::Stop { breaker, evidence } => {
                let ends = serde_json::to_value(&self.ends)?;
                return self.breaker(
                    breaker,
                    evidence,
                    vec![("runs", ends), ("resumed_steps", json!(self.resumed))],
                );
            }
            Decision::Relaunch { attempt, backoff_s } => (attempt, backoff_s),
        };
        let r = Resume {
            ckpt: choice.chosen.clone(),
            diverged_at,
            best_ckpt: resume::best_ckpt(&records, &self.run_name),
        };
        let argv = resume::fill(&self.template, &r.placeholders());
        let rec = self.record(
            Kind::Relaunch,
            next_step,
            vec![
                ("attempt", attempt.into()),
                (
                    "ckpt",
                    json!(r.ckpt.as_ref().map(|c| c.path.display().to_string())),
                ),
                ("ckpt_step", json!(next_step)),
                (
                    "ckpt_sha256",
                    json!(r.ckpt.as_ref().map(|c| c.sha256.clone())),
                ),
                ("skipped", skipped),
                ("diverged_at", json!(diverged_at)),
                ("backoff_s", backoff_s.into()),
                ("command", json!(argv)),
                ("after", json!(self.ends.last())),
            ],
        )?;
        self.report.event(&Event::Relaunch {
            seq: rec.seq,
            attempt,
            ckpt: r.ckpt.as_ref().map(|c| c.path.display().to_string()),
            step: next_step,
            diverged_at,
            backoff_s,
        });
        if let Flow::Exit(c) = self.pause(dur(backoff_s))? {
            return Ok(Flow::Exit(c));
        }
        let save_now = self.preempt.as_ref().map(|a| a.save_now.clone());
        let env = super::child_env(self.cfg, &r, save_now.as_deref());
        // What the log holds now is the ended launch's: set aside before the new one starts.
        self.log.launched();
        self.ranks.launched();
        let launched_at = super::unix_now();
        self.run = child::spawn(&argv, &env, &self.fs)?;
        self.relaunches += 1;
        if self.bucket.is_some() {
            super::remote::mirror(self.cfg, &self.ledger, std::time::Duration::from_secs(5));
        }
        self.resumed.push(next_step);
        self.recorded_episode = false;
        let now = self.now();
        self.sentinel.relaunched(now);
        let mut fields = vec![("event", "launched".into())];
        fields.extend(self.launch_fields());
        fields.push(("attempt", attempt.into()));
        let rec = self.record(Kind::Watch, next_step, fields)?;
        self.scope_launch(rec.seq, Some(launched_at));
        self.report.event(&Event::Launched {
            pid: self.run.main.pid,
        });
        Ok(Flow::Continue)
    }

    /// Before a relaunch: the run's GPU memory must be released (bounded wait); leftovers of
    /// the run that hold it are killed; memory held by others follows `on_foreign_vram`.
    fn wait_vram(&mut self) -> Result<Flow> {
        let timeout = self.cfg.watch.gpu_release_timeout.0;
        let mut t0 = Instant::now();
        let mut noted_foreign = false;
        loop {
            let Ok(snap) = self.gpu.read() else {
                return Ok(Flow::Continue);
            };
            let pids: Vec<u32> = self.run.seen.iter().map(|p| p.pid).collect();
            match policy::vram_gate(&snap, &pids, &self.run_gpus) {
                VramGate::Clear => return Ok(Flow::Continue),
                VramGate::Run { pids } => {
                    let ids: Vec<ProcId> = self
                        .run
                        .seen
                        .iter()
                        .copied()
                        .filter(|p| {
                            pids.contains(&p.pid) && crate::sys::proc::same_process(&self.fs, *p)
                        })
                        .collect();
                    if !ids.is_empty() {
                        let why = "processes of the ended run still hold GPU memory".to_string();
                        self.kill_record("vram_leftover", Evidence::Note(why), &ids, None)?;
                        self.terminate(&ids)?;
                    }
                    if t0.elapsed() >= timeout {
                        tracing::warn!("the run's GPU memory is still reported held after {timeout:?}; relaunching");
                        return Ok(Flow::Continue);
                    }
                }
                VramGate::Foreign { pids, bytes } if t0.elapsed() >= timeout => {
                    let policy = self.cfg.watch.on_foreign_vram;
                    let evidence = format!(
                        "{} of VRAM on the run's GPUs {:?} held by processes outside the run {pids:?} after {:.0}s",
                        crate::sentinel::human_bytes(bytes as f64),
                        self.run_gpus,
                        t0.elapsed().as_secs_f64()
                    );
                    match policy {
                        ForeignVram::Stop => return self.breaker("foreign_vram", evidence, vec![]),
                        ForeignVram::Relaunch | ForeignVram::Wait => {
                            if !noted_foreign {
                                let action = if policy == ForeignVram::Wait {
                                    "wait"
                                } else {
                                    "relaunch"
                                };
                                self.record(
                                    Kind::Watch,
                                    None,
                                    vec![
                                        ("event", "foreign_vram".into()),
                                        ("action", action.into()),
                                        ("evidence", evidence.into()),
                                    ],
                                )?;
                                noted_foreign = true;
                            }
                            if policy == ForeignVram::Relaunch {
                                return Ok(Flow::Continue);
                            }
                            t0 = Instant::now();
                        }
                    }
                }
                VramGate::Foreign { .. } => {}
            }
            if let Flow::Exit(c) = self.pause(self.cfg.watch.interval.0)? {
                return Ok(Flow::Exit(c));
            }
        }
    }

    /// The run ended without finishing: its declared outputs (`[quarantine] outputs`) written
    /// since it started, or that do not parse / hold NaN, are set aside before anything (a
    /// nightly loop, the relaunched run) can pick them up as good.
    fn quarantine_outputs(&mut self) -> Result<()> {
        let outputs = &self.cfg.quarantine.outputs;
        if outputs.is_empty() {
            return Ok(());
        }
        let now = chrono::Utc::now();
        let started_at = chrono::Duration::from_std(self.run.started.elapsed())
            .ok()
            .map(|lived| now - lived);
        let (_, items) = crate::quarantine::outputs::quarantine_untrusted(
            outputs,
            Some(crate::quarantine::outputs::Crash { started_at }),
            &self.cfg.quarantine_dir(),
            "watch",
            &self.run_name,
            &self.ledger,
            now,
        )?;
        for item in &items {
            tracing::warn!(
                "quarantined {} ({}): {}",
                item.original_path.display(),
                item.id,
                item.reason
            );
        }
        Ok(())
    }
}
