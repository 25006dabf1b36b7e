//! What the watch does about a state — every action after its ledger record: kill a wedge
//! (evidence hook first), clean a zombie's leftovers, roll back on a critic failure, end on
//! exit 0 (or, with the exit status lost, on evidence that the run finished), and relaunch
//! from the last good checkpoint within budget and breakers. Signals need the watcher's
//! `MaySignal`, which a dry run does not have.

use super::child::{self, Stopped};
use super::ended::{self, Ended};
use super::policy::{Cause, RunEnd};
use super::resume::Rollback;
use super::{Event, Flow, Watcher};
use crate::exit;
use crate::ledger::Kind;
use crate::sentinel::Assessment;
use crate::sys::proc::ProcId;
use anyhow::{bail, Result};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

/// What a kill record cites: the sentinel's assessment, the critic verdict (with the
/// sentinel's view of the process beside it), or a plain note for cleanup.
pub(super) enum Evidence<'a> {
    Sentinel(&'a Assessment),
    Verdict(&'a Rollback, &'a Assessment),
    Note(String),
}

impl Watcher<'_> {
    /// roger got SIGINT/SIGTERM: pass it to the run we own (then SIGKILL after the grace);
    /// an attached run is not ours to stop, and a dry run signals nothing.
    pub(super) fn forward(&mut self, sig: Signal) -> Result<u8> {
        let targets = if self.run.attached() || self.may_signal.is_none() {
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
                ("dry_run", self.opts.dry_run.into()),
            ],
        )?;
        self.report.event(&Event::Signal {
            signal: sig.as_str().into(),
            forwarded_to: pids,
        });
        if let (false, Some(leave)) = (targets.is_empty(), &self.may_signal) {
            let grace = self.cfg.watch.grace.0;
            let s = child::stop(&mut self.run, &targets, sig, grace, &self.fs, leave)?;
            self.stopped(&s)?;
        }
        self.done(exit::NOT_DONE, &format!("stopped by {}", sig.as_str()))
    }

    /// SIGTERM, the grace period, SIGKILL for what is left — each signal after the identity
    /// check in `child::stop` — then record who got what.
    pub(super) fn terminate(&mut self, targets: &[ProcId]) -> Result<()> {
        self.terminate_within(targets, self.cfg.watch.grace.0)
    }

    /// SIGTERM, then SIGKILL to whatever is left after `grace`.
    pub(super) fn terminate_within(
        &mut self,
        targets: &[ProcId],
        grace: std::time::Duration,
    ) -> Result<()> {
        let Some(leave) = &self.may_signal else {
            bail!("dry run: roger never signals the run");
        };
        let s = child::stop(
            &mut self.run,
            targets,
            Signal::SIGTERM,
            grace,
            &self.fs,
            leave,
        )?;
        self.stopped(&s)
    }

    pub(super) fn on_exit(&mut self, code: Option<i32>, signal: Option<i32>) -> Result<Flow> {
        let lived = self.run.started.elapsed().as_secs_f64();
        // No status: the run's own parent (bash, nohup, init) reaped it. Judge by evidence.
        let judged = (code.is_none() && signal.is_none()).then(|| ended::judge(&self.known_end()));
        let mut fields = vec![
            ("event", "exited".into()),
            ("pid", self.run.main.pid.into()),
            ("code", json!(code)),
            ("signal", json!(signal)),
            ("exit_status_known", judged.is_none().into()),
            ("how", crate::sentinel::exit_text(code, signal).into()),
            ("lived_s", super::ms(lived).into()),
        ];
        if let Some(j) = &judged {
            let (Ended::Finished(w) | Ended::Short(w) | Ended::Unknown(w)) = j;
            fields.push(("judged", w.clone().into()));
        }
        self.record(Kind::Watch, self.sentinel_step(), fields)?;
        self.report.event(&Event::Exited {
            code,
            signal,
            lived_s: lived,
        });
        if code == Some(0) {
            return self.done(exit::DONE, "the run exited 0").map(Flow::Exit);
        }
        let mut how = crate::sentinel::exit_text(code, signal);
        match judged {
            Some(Ended::Finished(why)) => {
                let text = format!(
                    "the run finished (exit status unknown: reaped by its own parent; {why})"
                );
                return self.done(exit::DONE, &text).map(Flow::Exit);
            }
            Some(Ended::Unknown(why)) => {
                let text = format!(
                    "the run ended with its exit status unknown (reaped by its own parent) and {why}: not relaunched, so a finished run is never run twice"
                );
                return self.done(exit::NOT_DONE, &text).map(Flow::Exit);
            }
            Some(Ended::Short(why)) => how = format!("exit status unknown; {why}"),
            None => {}
        }
        self.ends.push(RunEnd {
            lived_s: lived,
            how,
            cause: Cause::Crash,
            relaunched: self.relaunches > 0,
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

    /// What is known about how far the ended launch got: the steps it logged, and the
    /// checkpoints and verdicts filed since it launched.
    fn known_end(&self) -> ended::Known {
        let floor = self.launch.floor_seq;
        let records = self.ledger.records().unwrap_or_default();
        let newest = |kind: Kind| {
            records
                .iter()
                .filter(|r| r.kind == kind && r.run == self.run_name && r.seq > floor)
                .filter_map(|r| r.step)
                .max()
        };
        ended::Known {
            total_steps: self.cfg.planned_last(),
            log_step: self.log.launch_reached(),
            log_every: self.log.launch_cadence(),
            ckpt_step: newest(Kind::Publish),
            verdict_step: newest(Kind::Verdict),
        }
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
        self.terminate(&leftovers)?;
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
        self.stop_and_relaunch(&targets, "wedge", Cause::Wedge, None)
    }

    pub(super) fn on_rollback(&mut self, rb: Rollback, a: &Assessment) -> Result<Flow> {
        let targets = self.run.members(&self.fs);
        self.kill_record("divergence", Evidence::Verdict(&rb, a), &targets, Some(&rb))?;
        if self.opts.dry_run {
            return Ok(Flow::Continue);
        }
        self.stop_and_relaunch(
            &targets,
            &format!(
                "critic fail: {} (verdict #{} at step {})",
                rb.check, rb.verdict_seq, rb.step
            ),
            Cause::Divergence,
            Some(rb.diverged_at),
        )
    }

    pub(super) fn stop_and_relaunch(
        &mut self,
        targets: &[ProcId],
        how: &str,
        cause: Cause,
        diverged_at: Option<u64>,
    ) -> Result<Flow> {
        self.terminate(targets)?;
        self.ends.push(RunEnd {
            lived_s: self.run.started.elapsed().as_secs_f64(),
            how: how.to_string(),
            cause,
            relaunched: self.relaunches > 0,
        });
        self.relaunch(diverged_at)
    }

    /// The kill record: written (and fsynced) before any signal, with the sentinel's evidence.
    pub(super) fn kill_record(
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
        let silent = match &a {
            Evidence::Sentinel(a) | Evidence::Verdict(_, a) => a.silent_s,
            Evidence::Note(_) => 0.0,
        };
        let (step, why) = match a {
            Evidence::Sentinel(a) => {
                fields.extend([
                    ("state", serde_json::to_value(&a.state)?),
                    ("reasons", json!(a.reasons)),
                    ("limit", serde_json::to_value(&a.limit)?),
                    ("silent_s", super::ms(a.silent_s).into()),
                    ("samples", serde_json::to_value(&a.samples)?),
                ]);
                (a.last_step, a.reasons.first().cloned().unwrap_or_default())
            }
            Evidence::Verdict(rb, a) => {
                // The verdict is the cause; the process's state is context, not a reason.
                let why = rb.describe();
                fields.extend([
                    ("reasons", json!([why])),
                    ("check", rb.check.clone().into()),
                    ("verdict_seq", rb.verdict_seq.into()),
                    ("verdict_step", rb.step.into()),
                    ("diverged_at", rb.diverged_at.into()),
                    ("process_state", serde_json::to_value(&a.state)?),
                    ("samples", serde_json::to_value(&a.samples)?),
                ]);
                (Some(rb.step), why)
            }
            Evidence::Note(why) => {
                fields.push(("reasons", json!([why])));
                (self.sentinel_step(), why)
            }
        };
        if let Some(rb) = rb {
            fields.push(("rollback", serde_json::to_value(rb)?));
        }
        if reason != "zombie" {
            // The hook on the main process and on every rank at once; the ranks' stacks grouped.
            fields.extend(self.all_evidence(silent));
        }
        let rec = self.record(Kind::Kill, step, fields)?;
        self.report.event(&Event::Kill {
            seq: rec.seq,
            reason: reason.into(),
            why,
            pids: targets.iter().map(|t| t.pid).collect(),
            dry_run: self.opts.dry_run,
        });
        Ok(())
    }

    pub(super) fn stopped(&mut self, s: &Stopped) -> Result<()> {
        self.record(
            Kind::Watch,
            self.sentinel_step(),
            vec![
                ("event", "stopped".into()),
                ("sigterm", json!(s.sigterm)),
                ("sigkill", json!(s.sigkill)),
                ("survivors", json!(s.survivors)),
                ("took_s", super::ms(s.took_s).into()),
                ("via", json!(s.via)),
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

    pub(super) fn breaker(
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
}
