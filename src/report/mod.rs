//! `roger report` and `roger status`: the night as one pure model. The ledger (the event
//! stream), the metrics log and the config go in as plain data with an injected `now`; a
//! [`Night`] comes out (headline, incidents, goodput, segments, checkpoints, critic strips,
//! disk) for the printers (`html`, `text`). Nothing here reads a file or calls into the code
//! that made the decisions: everything the page says is rebuilt from the records alone.
//!
//! Entry points:
//! - [`Night::gather`]: config + ledger records + metrics samples + `now` → [`Night`].
//! - [`Gather`]: the same, fed the log in chunks (a 10-million-step log never sits in memory).
//! - [`load`]: the edge that reads the files a config names and gathers (`roger report`,
//!   `roger status`).
//! - Printers: [`html::page`], [`text::digest`] (the 20-line digest notifications send),
//!   [`sentence::line`] (one ledger record as a sentence, `roger ledger tail`).

pub mod events;
mod headline;
pub mod html;
pub mod load;
pub mod plot;
pub mod sentence;
pub mod series;
mod tables;
pub mod text;

pub use events::{CheckStrip, CkptRow, Goodput, Incident, Marker};
pub use headline::{human_duration, Eta, Headline, LastGood, LastVerdict, QueuedPublishes, State};
pub use load::{load, Loaded, Options};
pub use series::{Bucket, Segment, Series};

use crate::checkpoints::Checkpoint;
use crate::config::Config;
use crate::hygiene::disk::DiskReport;
use crate::ledger::{Kind, Record};
use crate::metrics::Record as Sample;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Re-hashes a checkpoint from disk: `Err` says why its bytes are not the published ones.
pub type Verify = dyn Fn(&Checkpoint) -> Result<(), String>;

/// What the model is built from: plain data, no files.
pub struct Inputs<'a> {
    pub config: &'a Config,
    /// The ledger's good records, in file order (other runs' records are ignored).
    pub records: &'a [Record],
    /// The ledger's first integrity problem, in words (a broken chain, an edited record).
    pub ledger_problem: Option<String>,
    /// Disk measured now, when the paths are there to measure; else the newest `hygiene`
    /// disk record stands in.
    pub disk: Option<&'a DiskReport>,
    /// Re-hash a checkpoint from disk; `None`: the last good one is taken from the ledger,
    /// unverified.
    pub verify: Option<&'a Verify>,
    /// Incidents, goodput and markers from this instant on (the headline uses everything).
    pub since: Option<DateTime<Utc>>,
    pub now: DateTime<Utc>,
}

/// How reading the log went (the reader's side; the samples went to [`Gather::push`]).
#[derive(Debug, Clone, Default)]
pub struct LogRead {
    /// Unreadable lines, counted by the reader.
    pub garbage: u64,
    /// Why the log could not be read at all, if it could not.
    pub problem: Option<String>,
}

/// One disk path: free space and hours to full.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DiskRow {
    pub role: String,
    pub path: String,
    pub status: String,
    pub avail: Option<u64>,
    pub total: Option<u64>,
    pub hours_to_full: Option<f64>,
    pub reason: String,
    /// When it was measured: now, or the ledger record's time.
    pub measured_at: DateTime<Utc>,
}

/// The night, ready to print.
#[derive(Debug, Clone, Serialize)]
pub struct Night {
    pub run: String,
    pub now: DateTime<Utc>,
    pub since: Option<DateTime<Utc>>,
    pub headline: Headline,
    pub incidents: Vec<Incident>,
    pub goodput: Goodput,
    pub markers: Vec<Marker>,
    pub segments: Vec<Segment>,
    /// Steps covered by the plots' x axis: `[0, span)`.
    pub span: u64,
    pub checkpoints: Vec<CkptRow>,
    pub critic: Vec<CheckStrip>,
    pub disk: Vec<DiskRow>,
    /// The declared bands, for the plots.
    pub declared: events::Declared,
    pub samples: u64,
    /// `[cluster]`: the job as its store holds it (set by [`load`], which reads the store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<crate::cluster::view::JobView>,
}

/// The streaming builder: [`Gather::new`], [`Gather::push`] each chunk of the log in order,
/// [`Gather::finish`].
pub struct Gather<'a> {
    inputs: &'a Inputs<'a>,
    mine: Vec<&'a Record>,
    series: Series,
}

impl<'a> Gather<'a> {
    pub fn new(inputs: &'a Inputs<'a>) -> Gather<'a> {
        let run = &inputs.config.run.name;
        let mine: Vec<&Record> = inputs.records.iter().filter(|r| &r.run == run).collect();
        let launches: Vec<f64> = mine
            .iter()
            .filter(|r| r.kind == Kind::Watch && events::is_launch(r))
            .map(|r| unix(r.ts))
            .collect();
        let probes: Vec<f64> = mine
            .iter()
            .filter(|r| events::needs_probe(r))
            .map(|r| unix(r.ts))
            .collect();
        let hint = inputs.config.planned_last();
        Gather {
            inputs,
            mine,
            series: Series::new(hint, launches, &probes),
        }
    }

    pub fn push(&mut self, samples: &[Sample]) {
        self.series.push_all(samples);
    }

    pub fn finish(mut self, log: &LogRead) -> Night {
        self.series.finish();
        let inputs = self.inputs;
        let cfg = inputs.config;
        let ev = events::Events::build(&self.mine, &self.series, inputs);
        let disk = disk_rows(inputs, &self.mine);
        let headline = headline::build(inputs, log, &self.mine, &self.series, &ev, &disk);
        Night {
            run: cfg.run.name.clone(),
            now: inputs.now,
            since: inputs.since,
            headline,
            incidents: ev.incidents,
            goodput: ev.goodput,
            markers: ev.markers,
            span: self.series.span,
            segments: std::mem::take(&mut self.series.segments),
            checkpoints: ev.checkpoints,
            critic: ev.critic,
            disk,
            declared: events::Declared::from_config(cfg),
            samples: self.series.samples,
            job: None,
        }
    }
}

impl Night {
    /// The whole model in one call, the log already in memory.
    pub fn gather(inputs: &Inputs, samples: &[Sample]) -> Night {
        let mut g = Gather::new(inputs);
        g.push(samples);
        g.finish(&LogRead::default())
    }
}

/// Roger is "stale" after this many of its own intervals without a record.
const STALE_INTERVALS: f64 = 3.0;
/// ... and never before this.
const STALE_MIN_S: f64 = 600.0;

/// How long roger may stay silent: a few of its own intervals (watch or critic daemon).
pub fn stale_after(cfg: &Config) -> f64 {
    let every = cfg
        .critic
        .interval
        .as_secs_f64()
        .max(cfg.watch.interval.as_secs_f64());
    (every * STALE_INTERVALS).max(STALE_MIN_S)
}

pub(crate) fn unix(ts: DateTime<Utc>) -> f64 {
    ts.timestamp_millis() as f64 / 1000.0
}

pub(crate) fn from_unix(t: f64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis((t * 1000.0).round() as i64).unwrap_or_default()
}

/// Disk rows: measured now when the edge could, else the newest disk record's targets.
fn disk_rows(inputs: &Inputs, mine: &[&Record]) -> Vec<DiskRow> {
    if let Some(d) = inputs.disk {
        return d
            .targets
            .iter()
            .filter(|t| t.same_fs_as.is_none())
            .map(|t| DiskRow {
                role: t.role.clone(),
                path: t.path.display().to_string(),
                status: t.status.as_str().to_string(),
                avail: t.avail,
                total: t.total,
                hours_to_full: t.hours_to_full.filter(|h| h.is_finite()),
                reason: t.reason.clone(),
                measured_at: inputs.now,
            })
            .collect();
    }
    let Some(rec) = mine
        .iter()
        .rev()
        .find(|r| r.kind == Kind::Hygiene && r.str_field("check") == Some("disk"))
    else {
        return Vec::new();
    };
    let text = |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_str()).map(String::from);
    rec.get("targets")
        .and_then(|t| t.as_array())
        .into_iter()
        .flatten()
        .filter(|t| t.get("same_fs_as").is_none_or(|s| s.is_null()))
        .map(|t| DiskRow {
            role: text(t, "role").unwrap_or_default(),
            path: text(t, "path").unwrap_or_default(),
            status: text(t, "status").unwrap_or_else(|| "unknown".into()),
            avail: t.get("avail").and_then(|x| x.as_u64()),
            total: t.get("total").and_then(|x| x.as_u64()),
            hours_to_full: t
                .get("hours_to_full")
                .and_then(|x| x.as_f64())
                .filter(|h| h.is_finite()),
            reason: text(t, "reason").unwrap_or_default(),
            measured_at: rec.ts,
        })
        .collect()
}

#[cfg(test)]
mod tests;
