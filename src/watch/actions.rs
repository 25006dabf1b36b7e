//! What the watch does about a state — every action after its ledger record: kill a wedge
//! (evidence hook first), clean a zombie's leftovers, roll back on a critic failure, end on
//! exit 0, and relaunch from the last good checkpoint within budget and breakers.

use super::child::{self, Stopped};
use super::policy::{self, Decision, RunEnd, VramGate};
use super::resume::{self, Resume, Rollback};
use super::{dur, Event, Flow, Watcher};
use crate::config::ForeignVram;
use crate::exit;
use crate::ledger::Kind;
use crate::sentinel::Assessment;
use crate::sys::proc::ProcId;
use anyhow::Result;
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use std::time::Instant;

/// What a kill record cites: the sentinel's assessment, or a plain note for cleanup.
enum Evidence<'a> {
    Sentinel(&'a Assessment),
    Note(String),
}

impl Watcher<'_> {
    /// roger got SIGINT/SIGTERM: pass it to the run we own (then SIGKILL after the grace);
    /// an attached run is not ours to stop.
    pub(super) fn forward(&mut self, sig: Signal) -> Result<u8> {
        let targets = if self.run.attached() {
            Vec::new()
        } else {
            self.run.members(&self.fs)
        };
        let pids: Vec<u32> = targets.iter().map(|p| p.pid).collect();
        self.record(
            Kind::Watch,
            self.sentinel_step(),
            vec![
                ("event", "signal".into()),
                ("signal", sig.as_str().into()),
                ("forwarded_to", json!(pids)),
            ],
        )?;
        self.report.event(&Event::Signal {
            signal: sig.as_str().into(),
            forwarded_to: pids,
        });
        if !targets.is_empty() {
            let grace = self.cfg.watch.grace.0;
            let s = child::stop(&mut self.run, &targets, sig, grace, &self.fs)?;
            self.stopped(&s)?;
        }
        self.done(exit::NOT_DONE, &format!("stopped by {}", sig.as_str()))
    }

    pub(super) fn on_exit(&mut self, code: Option<i32>, signal: Option<i32>) -> Result<Flow> {
        let lived = self.run.started.elapsed().as_secs_f64();
        self.record(
            Kind::Watch,
            self.sentinel_step(),
            vec![
                ("event", "exited".into()),
                ("pid", self.run.main.pid.into()),
                ("code", json!(code)),
                ("signal", json!(signal)),
                ("lived_s", lived.into()),
            ],
        )?;
        self.report.event(&Event::Exited {
            code,
            signal,
            lived_s: lived,
        });
        if code == Some(0) {
            return self.done(exit::DONE, "the run exited 0").map(Flow::Exit);
        }
        let how = crate::sentinel::exit_text(code, signal);
        self.ends.push(RunEnd {
            lived_s: lived,
            how,
        });
        if self.opts.dry_run {
            return self
                .done(
                    exit::NOT_DONE,
                    "dry run: the run crashed; a relaunch would follow",
                )
                .map(Flow::Exit);
        }
        self.relaunch(None)
    }

    pub(super) fn on_zombie(&mut self, a: &Assessment) -> Result<Flow> {
        let (code, signal) = self.run.poll_exit(&self.fs).unwrap_or((None, None));
        let leftovers: Vec<ProcId> = self.run.members(&self.fs);
        if self.opts.dry_run && self.recorded_episode {
            return Ok(Flow::Continue);
        }
        self.kill_record("zombie", Evidence::Sentinel(a), &leftovers, None)?;
        if self.opts.dry_run {
            self.recorded_episode = true;
            return Ok(Flow::Continue);
        }
        let s = child::stop(
            &mut self.run,
            &leftovers,
            Signal::SIGTERM,
            self.cfg.watch.grace.0,
            &self.fs,
        )?;
        self.stopped(&s)?;
        self.on_exit(code, signal)
    }

    pub(super) fn on_wedge(&mut self, a: &Assessment) -> Result<Flow> {
        if self.opts.dry_run && self.recorded_episode {
            return Ok(Flow::Continue);
        }
        let targets = self.run.members(&self.fs);
        self.kill_record("wedge", Evidence::Sentinel(a), &targets, None)?;
        if self.opts.dry_run {
            self.recorded_episode = true;
            return Ok(Flow::Continue);
        }
        self.stop_and_relaunch(&targets, "wedge", None)
    }

    pub(super) fn on_rollback(&mut self, rb: Rollback, a: &Assessment) -> Result<Flow> {
        let targets = self.run.members(&self.fs);
        self.kill_record("divergence", Evidence::Sentinel(a), &targets, Some(&rb))?;
        if self.opts.dry_run {
            return Ok(Flow::Continue);
        }
        self.stop_and_relaunch(
            &targets,
            &format!("critic fail: {}", rb.check),
            Some(rb.diverged_at),
        )
    }

    fn stop_and_relaunch(
        &mut self,
        targets: &[ProcId],
        how: &str,
        diverged_at: Option<u64>,
    ) -> Result<Flow> {
        let s = child::stop(
            &mut self.run,
            targets,
            Signal::SIGTERM,
            self.cfg.watch.grace.0,
            &self.fs,
        )?;
        self.stopped(&s)?;
        self.ends.push(RunEnd {
            lived_s: self.run.started.elapsed().as_secs_f64(),
            how: how.to_string(),
        });
        self.relaunch(diverged_at)
    }

    /// The kill record: written (and fsynced) before any signal, with the sentinel's evidence.
    fn kill_record(
        &mut self,
        reason: &str,
        a: Evidence,
        targets: &[ProcId],
        rb: Option<&Rollback>,
    ) -> Result<()> {
        let main = self.run.main.pid;
        let mut fields: Vec<(&str, Value)> = vec![
            ("reason", reason.into()),
            ("pid", main.into()),
            ("targets", serde_json::to_value(targets)?),
            ("dry_run", self.opts.dry_run.into()),
        ];
        let step = match a {
            Evidence::Sentinel(a) => {
                fields.extend([
                    ("state", serde_json::to_value(&a.state)?),
                    ("reasons", json!(a.reasons)),
                    ("limit", serde_json::to_value(&a.limit)?),
                    ("silent_s", a.silent_s.into()),
                    ("samples", serde_json::to_value(&a.samples)?),
                ]);
                a.last_step
            }
            Evidence::Note(why) => {
                fields.push(("reasons", json!([why])));
                self.sentinel_step()
            }
        };
        if let Some(rb) = rb {
            fields.push(("rollback", serde_json::to_value(rb)?));
        }
        let hook = &self.cfg.watch.evidence_hook;
        if !hook.is_empty() && reason != "zombie" {
            let argv = resume::fill(hook, &[("pid", main.to_string())]);
            let dir = self
                .ledger
                .path()
                .parent()
                .map_or_else(|| std::path::PathBuf::from("."), |p| p.to_path_buf())
                .join("roger-evidence");
            let file = dir.join(format!(
                "{}-{main}.txt",
                chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ")
            ));
            match child::evidence(&argv, self.cfg.watch.evidence_timeout.0, &file) {
                Ok(()) => fields.push(("evidence", file.display().to_string().into())),
                Err(e) => fields.push(("evidence_error", format!("{e:#}").into())),
            }
        }
        let rec = self.record(Kind::Kill, step, fields)?;
        self.report.event(&Event::Kill {
            seq: rec.seq,
            reason: reason.into(),
            pids: targets.iter().map(|t| t.pid).collect(),
            dry_run: self.opts.dry_run,
        });
        Ok(())
    }

    fn stopped(&mut self, s: &Stopped) -> Result<()> {
        self.record(
            Kind::Watch,
            self.sentinel_step(),
            vec![
                ("event", "stopped".into()),
                ("sigterm", json!(s.sigterm)),
                ("sigkill", json!(s.sigkill)),
                ("survivors", json!(s.survivors)),
                ("took_s", s.took_s.into()),
            ],
        )?;
        self.report.event(&Event::Stopped {
            sigterm: s.sigterm.clone(),
            sigkill: s.sigkill.clone(),
            survivors: s.survivors.clone(),
        });
        Ok(())
    }

    pub(super) fn done(&mut self, code: u8, reason: &str) -> Result<u8> {
        self.record(
            Kind::Watch,
            self.sentinel_step(),
            vec![
                ("event", "done".into()),
                ("code", code.into()),
                ("reason", reason.into()),
            ],
        )?;
        self.report.event(&Event::Done {
            code,
            reason: reason.into(),
        });
        Ok(code)
    }

    fn sentinel_step(&self) -> Option<u64> {
        self.sentinel.last_step()
    }

    fn breaker(
        &mut self,
        breaker: &str,
        evidence: String,
        extra: Vec<(&str, Value)>,
    ) -> Result<Flow> {
        let mut fields: Vec<(&str, Value)> = vec![
            ("breaker", breaker.into()),
            ("evidence", evidence.clone().into()),
        ];
        fields.extend(extra);
        let rec = self.record(Kind::Breaker, self.sentinel_step(), fields)?;
        self.report.event(&Event::Breaker {
            seq: rec.seq,
            breaker: breaker.into(),
            evidence,
        });
        self.done(exit::DO_NOT_RESTART, &format!("breaker open: {breaker}"))
            .map(Flow::Exit)
    }

    /// Clean leftovers, wait for VRAM, pick the checkpoint, check budget and breakers, back
    /// off, start again.
    fn relaunch(&mut self, diverged_at: Option<u64>) -> Result<Flow> {
        let leftovers = self.run.members(&self.fs);
        if !leftovers.is_empty() {
            let why = format!(
                "{} process(es) of the ended run still alive: cleaned before the relaunch",
                leftovers.len()
            );
            self.kill_record("leftover", Evidence::Note(why), &leftovers, None)?;
            let s = child::stop(
                &mut self.run,
                &leftovers,
                Signal::SIGTERM,
                self.cfg.watch.grace.0,
                &self.fs,
            )?;
            self.stopped(&s)?;
        }
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
        let w = &self.cfg.watch;
        let records = self.ledger.records()?;
        let before = diverged_at.map(|d| d.saturating_sub(w.rollback_margin_steps));
        let choice = resume::choose(
            &records,
            &self.run_name,
            before,
            &mut crate::checkpoints::verify_on_disk,
        );
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
        let env = super::child_env(self.cfg, &r);
        self.run = child::spawn(&argv, &env, &self.fs)?;
        self.relaunches += 1;
        self.resumed.push(next_step);
        self.recorded_episode = false;
        let now = self.now();
        self.sentinel.relaunched(now);
        self.record(
            Kind::Watch,
            next_step,
            vec![
                ("event", "launched".into()),
                ("pid", self.run.main.pid.into()),
                ("attempt", attempt.into()),
            ],
        )?;
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
                        let s = child::stop(
                            &mut self.run,
                            &ids,
                            Signal::SIGTERM,
                            self.cfg.watch.grace.0,
                            &self.fs,
                        )?;
                        self.stopped(&s)?;
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
}
