//! Which critic verdicts the current launch acts on: only those filed after it launched, about
//! data it logged itself. A verdict about an earlier launch's data — a critic still reading the
//! log from before a rollback — is ignored, with a record saying why, instead of killing the
//! fresh launch. The rule is pure ([`judge`]); reading the new ledger bytes is the watcher's.

use super::resume::{self, Rollback};
use super::{Event, Watcher};
use crate::ledger::Kind;
use anyhow::{Context, Result};
use serde_json::json;

/// What the current launch is.
#[derive(Debug, Clone, PartialEq)]
pub struct Scope {
    /// Verdicts at or below this ledger seq were filed before the launch.
    pub floor_seq: u64,
    /// Unix seconds when roger started it; None when attached (it started before roger).
    pub launched_at: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Judged {
    Act,
    /// About a step the launch has not been seen to log yet (the critic may have read the
    /// line before roger's tick did): asked again for a few ticks, then ignored.
    Wait,
    Ignore(String),
}

/// Ticks a waiting verdict is asked again before it is ignored as not this launch's.
pub const WAIT_TICKS: u32 = 3;

/// Is this verdict about the current launch? `reached`: the newest step the launch logged.
/// It must be filed after the launch, not judge data logged before it, and be about a step
/// the launch itself logged (the critic may read a line before roger's tick does: that is
/// what waiting is for).
pub fn judge(rb: &Rollback, scope: &Scope, reached: Option<u64>) -> Judged {
    if rb.verdict_seq <= scope.floor_seq {
        return Judged::Ignore(format!(
            "filed before this launch (the launch began after ledger #{})",
            scope.floor_seq
        ));
    }
    // The critic's newest sample time, when it is a wall-clock time (a relative "time"
    // column is not), says whose data it judged.
    let sampled = rb.sampled_at.filter(|t| t.is_finite() && *t > 1e9);
    if let (Some(at), Some(launched)) = (sampled, scope.launched_at) {
        if at < launched {
            return Judged::Ignore(format!(
                "it judged log data from {:.1}s before this launch started: an earlier launch's",
                launched - at
            ));
        }
    }
    match reached {
        Some(r) if rb.step <= r => Judged::Act,
        _ => Judged::Wait,
    }
}

impl Watcher<'_> {
    /// A new launch: verdicts filed from here on, about data logged from `launched_at` on.
    pub(super) fn scope_launch(&mut self, floor_seq: u64, launched_at: Option<f64>) {
        self.launch = Scope {
            floor_seq,
            launched_at,
        };
        self.pending.clear();
    }

    /// A rollback the current launch must act on: from verdicts appended since the last tick,
    /// or ones waiting for the launch to log their step.
    pub(super) fn new_rollback(&mut self) -> Result<Option<Rollback>> {
        if self.cfg.watch.rollback_on.is_empty() || self.run.poll_exit(&self.fs).is_some() {
            return Ok(None);
        }
        let mut candidates: Vec<(Rollback, u32)> = std::mem::take(&mut self.pending);
        candidates.extend(
            self.read_new_triggers()?
                .into_iter()
                .map(|r| (r, WAIT_TICKS)),
        );
        let reached = self.log.launch_reached();
        let mut act = None;
        for (rb, ticks) in candidates {
            if act.is_some() {
                // One rollback at a time; the rest are moot once the launch is stopped.
                continue;
            }
            match judge(&rb, &self.launch, reached) {
                Judged::Act => act = Some(rb),
                Judged::Wait if ticks > 1 => self.pending.push((rb, ticks - 1)),
                Judged::Wait => {
                    let why = format!(
                        "this launch has not logged step {} ({} so far) {WAIT_TICKS} ticks after the verdict: about an earlier launch's data",
                        rb.step,
                        reached.map_or("none".into(), |r| format!("step {r}"))
                    );
                    self.verdict_ignored(&rb, why)?;
                }
                Judged::Ignore(why) => self.verdict_ignored(&rb, why)?,
            }
        }
        Ok(act)
    }

    fn verdict_ignored(&mut self, rb: &Rollback, why: String) -> Result<()> {
        let rec = self.record(
            Kind::Watch,
            self.sentinel.last_step(),
            vec![
                ("event", "verdict_ignored".into()),
                ("verdict_seq", rb.verdict_seq.into()),
                ("check", rb.check.clone().into()),
                ("verdict_step", rb.step.into()),
                ("launch_reached", json!(self.log.launch_reached())),
                ("why", why.clone().into()),
            ],
        )?;
        self.report.event(&Event::VerdictIgnored {
            seq: rec.seq,
            verdict_seq: rb.verdict_seq,
            check: rb.check.clone(),
            step: rb.step,
            why,
        });
        Ok(())
    }

    /// Rollback triggers among the `verdict` records appended since the last look.
    fn read_new_triggers(&mut self) -> Result<Vec<Rollback>> {
        let path = self.ledger.path();
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        if len <= self.ledger_offset {
            return Ok(Vec::new());
        }
        use std::io::{Read, Seek, SeekFrom};
        let mut f =
            std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
        f.seek(SeekFrom::Start(self.ledger_offset))?;
        let mut buf = Vec::new();
        f.take(len - self.ledger_offset).read_to_end(&mut buf)?;
        let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
            return Ok(Vec::new());
        };
        self.ledger_offset += end as u64 + 1;
        let scan = crate::ledger::scan_bytes(&buf[..=end]);
        Ok(scan
            .records
            .iter()
            .filter_map(|r| {
                resume::rollback_trigger(r, &self.run_name, &self.cfg.watch.rollback_on)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rb(seq: u64, step: u64, sampled_at: Option<f64>) -> Rollback {
        Rollback {
            verdict_seq: seq,
            check: "loss".into(),
            reason: "loss is NaN".into(),
            diverged_at: step - 5,
            step,
            sampled_at,
        }
    }

    const LAUNCH: f64 = 1_800_000_000.0;

    fn relaunch() -> Scope {
        Scope {
            floor_seq: 20,
            launched_at: Some(LAUNCH),
        }
    }

    #[test]
    fn a_verdict_filed_before_the_launch_is_ignored_whatever_the_log_says() {
        // The dead run logged step 94; the log tail still says 94 when the new launch starts.
        let j = judge(&rb(19, 94, None), &relaunch(), Some(94));
        assert!(matches!(j, Judged::Ignore(w) if w.contains("before this launch")));
    }

    #[test]
    fn a_verdict_about_data_older_than_the_launch_is_ignored() {
        let j = judge(&rb(25, 30, Some(LAUNCH - 4.0)), &relaunch(), Some(40));
        assert!(
            matches!(&j, Judged::Ignore(w) if w.contains("4.0s before this launch")),
            "{j:?}"
        );
        assert_eq!(
            judge(&rb(25, 30, Some(LAUNCH + 1.0)), &relaunch(), Some(30)),
            Judged::Act
        );
        // Data logged after the launch, but a step it has not been seen to log: the watch's
        // tick may lag the critic (or the time is the log's mtime, not the sample's).
        assert_eq!(
            judge(&rb(25, 30, Some(LAUNCH + 1.0)), &relaunch(), Some(12)),
            Judged::Wait
        );
    }

    #[test]
    fn the_step_must_be_one_this_launch_logged() {
        assert_eq!(
            judge(&rb(25, 30, None), &relaunch(), Some(12)),
            Judged::Wait
        );
        assert_eq!(judge(&rb(25, 30, None), &relaunch(), None), Judged::Wait);
        assert_eq!(judge(&rb(25, 30, None), &relaunch(), Some(30)), Judged::Act);
        // A relative time column ("12.5 s since start") is no wall clock.
        assert_eq!(
            judge(&rb(25, 30, Some(12.5)), &relaunch(), Some(31)),
            Judged::Act
        );
        let attached = Scope {
            floor_seq: 3,
            launched_at: None,
        };
        assert_eq!(
            judge(&rb(4, 30, Some(LAUNCH - 100.0)), &attached, Some(31)),
            Judged::Act
        );
    }
}
