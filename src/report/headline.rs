//! The headline: OK / ATTENTION / STOPPED (or cannot judge) and why in one sentence, the step
//! against the plan, the time to finish from the robust recent step time, the last good
//! checkpoint, the phase, the counts, the disk, and when roger last wrote. Pure.

use super::events::Events;
use super::series::Series;
use super::{from_unix, unix, DiskRow, Inputs, LogRead};
use crate::checkpoints;
use crate::ledger::{Kind, Record};
use chrono::{DateTime, Utc};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum State {
    #[serde(rename = "OK")]
    Ok,
    #[serde(rename = "ATTENTION")]
    Attention,
    #[serde(rename = "STOPPED")]
    Stopped,
    /// Nothing to judge from (exit 3).
    #[serde(rename = "CANNOT JUDGE")]
    Unknown,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ok => "OK",
            State::Attention => "ATTENTION",
            State::Stopped => "STOPPED",
            State::Unknown => "CANNOT JUDGE",
        }
    }

    /// The judging exit code: 0 ok, 1 attention, 2 stopped, 3 cannot judge.
    pub fn exit_code(self) -> u8 {
        match self {
            State::Ok => crate::exit::OK,
            State::Attention => crate::exit::WARN,
            State::Stopped => crate::exit::FAIL,
            State::Unknown => crate::exit::UNKNOWN,
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Eta {
    /// Median seconds per step over the newest samples.
    pub step_seconds: f64,
    pub steps_left: u64,
    pub seconds_left: f64,
    pub finish_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LastGood {
    pub step: Option<u64>,
    pub path: String,
    pub seq: u64,
    pub published: DateTime<Utc>,
    pub age_s: f64,
    /// Re-hashed from disk just now: `Some(true)`; `None`: not checked (taken from the ledger).
    pub verified: Option<bool>,
    /// Newer checkpoints passed over, and why.
    pub passed_over: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LastVerdict {
    pub status: String,
    pub step: Option<u64>,
    pub seq: u64,
    pub at: DateTime<Utc>,
    /// The worst check's reason.
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Headline {
    pub state: State,
    /// One sentence, with its numbers.
    pub why: String,
    /// Other things that need a look (the first is in `why`).
    pub also: Vec<String>,
    pub step: Option<u64>,
    pub total_steps: Option<u64>,
    /// What `step` counts (`[metrics] unit`); left out of JSON for steps.
    #[serde(skip_serializing_if = "crate::config::StepUnit::is_step")]
    pub unit: crate::config::StepUnit,
    pub finished: bool,
    pub eta: Option<Eta>,
    pub last_good: Option<LastGood>,
    pub phase: Option<String>,
    pub relaunches: u64,
    pub breakers: u64,
    pub kills: u64,
    /// The soonest any disk path fills, in hours.
    pub disk_hours_to_full: Option<f64>,
    pub last_verdict: Option<LastVerdict>,
    /// The newest record of the run: roger's last look.
    pub last_record_at: Option<DateTime<Utc>>,
    pub last_record_seq: Option<u64>,
    /// The newest logged step's time.
    pub last_step_at: Option<DateTime<Utc>>,
    pub ledger_problem: Option<String>,
    pub log_problem: Option<String>,
    pub log_garbage: u64,
    /// Publishes queued by `roger publish --detach` and not yet done (None: none queued).
    pub queued_publishes: Option<QueuedPublishes>,
    /// The bucket (`[publish] remote`): None when the run has none.
    pub bucket: Option<BucketSide>,
    /// A standing overfitting verdict: the best eval, how far the eval rose since, and the
    /// checkpoint it marks (`critic::overfit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overfitting: Option<crate::checkpoints::best::Standing>,
}

/// The bucket side of the run, from the ledger (`remote::records::summary`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BucketSide {
    pub url: String,
    pub newest_step: Option<u64>,
    pub newest_age_s: Option<f64>,
    pub verified: usize,
    pub queued: usize,
    pub queued_bytes: u64,
    /// The newest upload error, when it is newer than the newest verified copy.
    pub last_error: Option<String>,
}

impl BucketSide {
    pub fn words(&self) -> String {
        let newest = match (self.newest_step, self.newest_age_s) {
            (Some(s), Some(a)) => format!(
                "newest verified step {s}, {} ago",
                crate::report::human_duration(a)
            ),
            (None, Some(a)) => format!(
                "newest verified copy {} ago",
                crate::report::human_duration(a)
            ),
            _ => "nothing verified yet".into(),
        };
        let mut out = format!("{} · {newest}", self.url);
        if self.queued > 0 {
            out.push_str(&format!(
                " · {} queued ({})",
                self.queued,
                crate::config::units::format_bytes(self.queued_bytes)
            ));
        }
        if let Some(e) = &self.last_error {
            out.push_str(&format!(" · last upload error: {e}"));
        }
        out
    }
}

/// The detached-publish queue of the checkpoint directory, summed up.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QueuedPublishes {
    pub count: usize,
    /// Bytes the queued checkpoints hold.
    pub bytes: u64,
    /// Age of the oldest entry, seconds (None when no entry's time reads).
    pub oldest_age_s: Option<f64>,
    /// The destination whose queue this is.
    pub dest: String,
}

impl QueuedPublishes {
    /// The summary of `queue` (oldest first, as `publish::queue::pending` gives it) at `now`;
    /// None when nothing is queued. Pure.
    pub fn of(
        queue: &[crate::publish::queue::Queued],
        dest: &std::path::Path,
        now: DateTime<Utc>,
    ) -> Option<QueuedPublishes> {
        if queue.is_empty() {
            return None;
        }
        let oldest = queue
            .iter()
            .filter_map(|q| DateTime::parse_from_rfc3339(&q.queued_at).ok())
            .min();
        Some(QueuedPublishes {
            count: queue.len(),
            bytes: queue.iter().fold(0, |n, q| n.saturating_add(q.size)),
            oldest_age_s: oldest.map(|t| {
                ((now - t.with_timezone(&Utc)).num_milliseconds() as f64 / 1000.0).max(0.0)
            }),
            dest: dest.display().to_string(),
        })
    }

    /// In words: "2 queued publishes (1.5 GiB), oldest queued 5m ago, to DIR".
    pub fn words(&self) -> String {
        format!(
            "{} queued publish{} ({}){}, to {}",
            self.count,
            if self.count == 1 { "" } else { "es" },
            crate::config::units::format_bytes(self.bytes),
            self.oldest_age_s.map_or(String::new(), |a| format!(
                ", oldest queued {} ago",
                human_duration(a)
            )),
            self.dest
        )
    }
}

/// The log is called silent past this many typical steps (and at least [`SILENT_MIN_S`]).
const SILENT_STEPS: f64 = 20.0;
const SILENT_MIN_S: f64 = 600.0;

pub fn build(
    inputs: &Inputs,
    log: &LogRead,
    mine: &[&Record],
    series: &Series,
    ev: &Events,
    disk: &[DiskRow],
) -> Headline {
    let cfg = inputs.config;
    let now = inputs.now;
    let step = series
        .newest
        .map(|n| n.0)
        .or_else(|| mine.iter().filter_map(|r| r.step).max());
    let total_steps = cfg.planned_last().or(series.log_total_steps);
    let unit = cfg.metrics.unit;
    let last_step_at = series.newest.and_then(|n| n.1).map(from_unix);
    let count = |k: Kind| mine.iter().filter(|r| r.kind == k).count() as u64;
    let last_watch = mine.iter().rev().find(|r| r.kind == Kind::Watch);
    let last_launch = mine
        .iter()
        .rposition(|r| r.kind == Kind::Watch && super::events::is_launch(r));
    let open_breaker = mine
        .iter()
        .enumerate()
        .rev()
        .find(|(_, r)| r.kind == Kind::Breaker)
        .filter(|(i, _)| last_launch.is_none_or(|l| *i > l))
        .map(|(_, r)| *r);
    let done = last_watch.filter(|r| r.str_field("event") == Some("done"));
    let finished = done.is_some_and(|r| r.u64_field("code") == Some(0))
        || matches!((step, total_steps), (Some(s), Some(t)) if s >= t);
    let step_s = series.step_seconds();
    let eta = match (step, total_steps, step_s, finished) {
        (Some(s), Some(t), Some(per), false) if t > s => {
            let steps_left = t - s;
            let from = last_step_at.map_or(unix(now), unix);
            let finish = from + steps_left as f64 * per;
            Some(Eta {
                step_seconds: per,
                steps_left,
                seconds_left: (finish - unix(now)).max(0.0),
                finish_at: from_unix(finish),
            })
        }
        _ => None,
    };
    let last_good = last_good(inputs, mine, now);
    let last_verdict = mine
        .iter()
        .rev()
        .find(|r| r.kind == Kind::Verdict)
        .map(|r| LastVerdict {
            status: r.str_field("status").unwrap_or("unknown").to_string(),
            step: r.step,
            seq: r.seq,
            at: r.ts,
            reason: worst_reason(r),
        });
    let disk_hours_to_full = disk
        .iter()
        .filter_map(|d| d.hours_to_full)
        .min_by(f64::total_cmp);
    let phase = step.and_then(|s| cfg.phase_for(s)).map(|p| p.name.clone());

    // The sentence: the gravest thing first.
    let mut attention: Vec<String> = Vec::new();
    if let Some(p) = &inputs.ledger_problem {
        attention.push(format!(
            "the ledger's hash chain is broken ({p}): its records cannot be trusted as they stand"
        ));
    }
    if let Some(v) = &last_verdict {
        if matches!(v.status.as_str(), "fail" | "warn") {
            attention.push(format!(
                "the critic's newest verdict is {} at step {} (#{}): {}",
                v.status,
                v.step.map_or("?".into(), |s| s.to_string()),
                v.seq,
                v.reason
            ));
        }
    }
    for d in disk
        .iter()
        .filter(|d| matches!(d.status.as_str(), "warn" | "fail"))
    {
        attention.push(format!("disk {} ({}): {}", d.status, d.path, d.reason));
    }
    if let Some(p) = &log.problem {
        attention.push(format!("the log could not be read: {p}"));
    }
    let running = last_watch.is_some_and(|r| r.str_field("event") != Some("done"));
    if let (Some(at), false) = (last_step_at, finished) {
        let silent = (now - at).num_milliseconds() as f64 / 1000.0;
        let limit = step_s.map_or(SILENT_MIN_S, |s| (s * SILENT_STEPS).max(SILENT_MIN_S));
        if silent > limit && open_breaker.is_none() && (running || last_watch.is_none()) {
            attention.push(format!(
                "no new step for {} (the last, step {}, at {})",
                human_duration(silent),
                step.unwrap_or(0),
                at.format("%H:%M UTC")
            ));
        }
    }
    let incidents = ev.incidents.len();
    let (state, why) = if mine.is_empty() && series.samples == 0 {
        (
            State::Unknown,
            log.problem.clone().map_or_else(
                || {
                    "nothing to judge: the ledger has no record of this run and the log no sample"
                        .to_string()
                },
                |p| format!("nothing to judge: the ledger has no record of this run and {p}"),
            ),
        )
    } else if let Some(b) = open_breaker {
        (
            State::Stopped,
            format!(
                "stopped: breaker {} opened at {} (#{}): {}",
                b.str_field("breaker").unwrap_or("?"),
                b.ts.format("%H:%M UTC"),
                b.seq,
                b.str_field("evidence").unwrap_or("")
            ),
        )
    } else if let Some(d) = done.filter(|d| d.u64_field("code") != Some(0)) {
        (
            State::Stopped,
            format!(
                "stopped: roger watch ended at {} (#{}): {}",
                d.ts.format("%H:%M UTC"),
                d.seq,
                d.str_field("reason").unwrap_or("")
            ),
        )
    } else if !attention.is_empty() {
        (State::Attention, attention[0].clone())
    } else if finished {
        (
            State::Ok,
            format!(
                "finished at {}{}",
                unit.at(step.unwrap_or(0), total_steps),
                handled(incidents)
            ),
        )
    } else {
        (
            State::Ok,
            format!(
                "training at {} {}{}{}",
                unit.word(),
                step.unwrap_or(0),
                total_steps.map_or(String::new(), |t| format!(" of {t}")),
                handled(incidents)
            ),
        )
    };
    let also = if state == State::Attention {
        attention[1..].to_vec()
    } else {
        attention
    };
    Headline {
        state,
        why,
        also,
        step,
        total_steps,
        unit,
        finished,
        eta,
        last_good,
        phase,
        relaunches: count(Kind::Relaunch),
        breakers: count(Kind::Breaker),
        kills: count(Kind::Kill),
        disk_hours_to_full,
        last_verdict,
        last_record_at: mine.last().map(|r| r.ts),
        last_record_seq: mine.last().map(|r| r.seq),
        last_step_at,
        ledger_problem: inputs.ledger_problem.clone(),
        log_problem: log.problem.clone(),
        log_garbage: log.garbage,
        queued_publishes: None,
        bucket: None,
        overfitting: crate::checkpoints::best::standing_refs(mine, &cfg.run.name),
    }
}

fn handled(n: usize) -> String {
    match n {
        0 => ", no incidents".into(),
        1 => "; roger handled 1 incident".into(),
        n => format!("; roger handled {n} incidents"),
    }
}

fn last_good(inputs: &Inputs, mine: &[&Record], now: DateTime<Utc>) -> Option<LastGood> {
    let owned: Vec<Record> = mine.iter().map(|r| (*r).clone()).collect();
    let mut checked = false;
    let mut verify = |c: &checkpoints::Checkpoint| match inputs.verify {
        Some(v) => {
            checked = true;
            v(c)
        }
        None => Ok(()),
    };
    let choice = checkpoints::last_good(&owned, &inputs.config.run.name, None, &mut verify);
    let c = choice.chosen?;
    let published = mine.iter().find(|r| r.seq == c.seq).map_or(now, |r| r.ts);
    Some(LastGood {
        step: c.step,
        path: c.path.display().to_string(),
        seq: c.seq,
        published,
        age_s: ((now - published).num_milliseconds() as f64 / 1000.0).max(0.0),
        verified: checked.then_some(true),
        passed_over: choice.skipped.len(),
    })
}

/// The reason of the verdict's worst check.
fn worst_reason(r: &Record) -> String {
    let rank = |s: Option<&str>| match s {
        Some("fail") => 3,
        Some("warn") => 2,
        Some("unknown") => 1,
        _ => 0,
    };
    r.get("checks")
        .and_then(|c| c.as_array())
        .and_then(|a| {
            a.iter()
                .max_by_key(|c| rank(c.get("status").and_then(|s| s.as_str())))
        })
        .map(|c| {
            format!(
                "{}: {}",
                c.get("check").and_then(|s| s.as_str()).unwrap_or("?"),
                c.get("reason").and_then(|s| s.as_str()).unwrap_or("")
            )
        })
        .unwrap_or_default()
}

/// "3h 12m", "4m 05s", "12s", "0.4s"; past a year, "over a year".
pub fn human_duration(s: f64) -> String {
    if !s.is_finite() {
        return "?".into();
    }
    if s > 365.0 * 86400.0 {
        return "over a year".into();
    }
    if s < 9.95 {
        // Short nights and fast restarts: a tenth of a second still says something.
        return format!("{:.1}s", s.max(0.0));
    }
    let s = s.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {:02}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::queue::tests::q;

    #[test]
    fn queued_publishes_summed_with_the_oldest_age() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let dest = std::path::Path::new("/ck");
        assert_eq!(QueuedPublishes::of(&[], dest, now), None);
        let mut a = q("1", 2048, false);
        a.queued_at = "2026-01-01T11:00:00Z".into();
        let mut b = q("2", 1024, true);
        b.queued_at = "not a time".into();
        let s = QueuedPublishes::of(&[a, b], dest, now).unwrap();
        assert_eq!((s.count, s.bytes, s.oldest_age_s), (2, 3072, Some(3600.0)));
        assert_eq!(
            s.words(),
            "2 queued publishes (3.0 KiB), oldest queued 1h 00m ago, to /ck"
        );
    }

    /// Found writing the queue entry fuzz target (issue 27): queue entries edited to sizes
    /// that sum past u64 panicked `status` and the report (debug builds). The sum saturates.
    #[test]
    fn regress_queued_publishes_sizes_past_u64() {
        let now = Utc::now();
        let s = QueuedPublishes::of(
            &[q("1", u64::MAX, false), q("2", 1, false)],
            std::path::Path::new("/ck"),
            now,
        )
        .unwrap();
        assert_eq!(s.bytes, u64::MAX);
    }
}
