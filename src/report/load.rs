//! The edge of the report: read the ledger and stream the metrics log a config names (a copy
//! of them on another machine works: only the files are read), measure the disk when its paths
//! are there, and gather the [`Night`]. Unreadable pieces become words in the headline, never
//! an abort: a page about a broken night is the point.

use super::{Gather, Inputs, LogRead, Night};
use crate::config::Config;
use crate::ledger::Ledger;
use anyhow::Result;
use chrono::{DateTime, Utc};
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Ledger file (default: the config's).
    pub ledger: Option<PathBuf>,
    /// Metrics log (default: the config's `[run] log`).
    pub log: Option<PathBuf>,
    pub since: Option<DateTime<Utc>>,
    /// Re-hash the last good checkpoint from disk (slow for big checkpoints).
    pub verify: bool,
    /// Measure free space now (off: the ledger's newest disk record is shown).
    pub measure_disk: bool,
}

pub struct Loaded {
    pub night: Night,
    pub ledger: PathBuf,
    pub log: Option<PathBuf>,
}

/// Read everything `cfg` names and build the night at `now`.
pub fn load(cfg: &Config, opts: &Options, now: DateTime<Utc>) -> Result<Loaded> {
    let ledger_path = match &opts.ledger {
        Some(p) => p.clone(),
        None => cfg.ledger_path(),
    };
    let scan = Ledger::new(&ledger_path).scan()?;
    let ledger_problem = scan.first_break().map(|p| {
        format!(
            "line {}{}: {}",
            p.line,
            p.seq.map_or(String::new(), |s| format!(", seq {s}")),
            p.what
        )
    });
    let disk = if opts.measure_disk {
        crate::hygiene::disk::check(cfg, now).ok()
    } else {
        None
    };
    let verify = |c: &crate::checkpoints::Checkpoint| crate::checkpoints::verify_on_disk(c);
    // `[run] log` is already resolved against the config's directory at load.
    let log = opts.log.clone().or_else(|| cfg.run.log.clone());
    let inputs = Inputs {
        config: cfg,
        records: &scan.records,
        ledger_problem,
        disk: disk.as_ref(),
        verify: opts.verify.then_some(&verify as &super::Verify),
        since: opts.since,
        now,
    };
    let mut g = Gather::new(&inputs);
    let read = match &log {
        None => LogRead {
            garbage: 0,
            problem: Some("no [run] log is configured".into()),
        },
        Some(path) => match read_log(cfg, path, &mut g) {
            Ok(garbage) => LogRead {
                garbage,
                problem: None,
            },
            Err(e) => LogRead {
                garbage: 0,
                problem: Some(format!("{e:#}")),
            },
        },
    };
    let mut night = g.finish(&read);
    queued_publishes(cfg, now, &mut night.headline);
    night.headline.bucket = bucket(cfg, &scan.records, now);
    if let Some(e) = night
        .headline
        .bucket
        .as_ref()
        .and_then(|b| b.last_error.clone())
    {
        night
            .headline
            .also
            .push(format!("the bucket: the newest upload failed: {e}"));
    }
    // The job's other nodes: their rows, its latest.json and incidents, from its store.
    match crate::cluster::view::of_config(cfg, super::unix(now), super::stale_after(cfg)) {
        None => {}
        Some(Ok(v)) => {
            for p in &v.problems {
                night.headline.also.push(format!("[cluster] store: {p}"));
            }
            night.job = Some(v);
        }
        Some(Err(e)) => night
            .headline
            .also
            .push(format!("[cluster] store unreadable: {e}")),
    }
    Ok(Loaded {
        night,
        ledger: ledger_path,
        log,
    })
}

/// The bucket side of the run, when `[publish] remote` names one; an upload error newer than
/// the newest verified copy also needs a look.
fn bucket(
    cfg: &Config,
    records: &[crate::ledger::Record],
    now: DateTime<Utc>,
) -> Option<super::headline::BucketSide> {
    let url = crate::config::remote::Remote::of_config(cfg)?.target.url();
    let s = crate::checkpoints::bucket::summary(records, &cfg.run.name);
    let stale_error = match (s.last_error_at, s.newest_at) {
        (Some(e), Some(v)) => e > v,
        (Some(_), None) => true,
        _ => false,
    };
    Some(super::headline::BucketSide {
        url,
        newest_step: s.newest_step,
        newest_age_s: s
            .newest_at
            .map(|t| (now - t).num_milliseconds() as f64 / 1000.0),
        verified: s.verified,
        queued: s.queued,
        queued_bytes: s.queued_bytes,
        last_error: s.last_error.filter(|_| stale_error),
    })
}

/// The checkpoint directory's detached-publish queue (`roger publish --detach`), when any.
fn queued_publishes(cfg: &Config, now: DateTime<Utc>, h: &mut super::Headline) {
    let Some(dest) = &cfg.run.checkpoint_dir else {
        return;
    };
    match crate::publish::queue::pending(dest) {
        Ok(queue) => h.queued_publishes = super::QueuedPublishes::of(&queue, dest, now),
        Err(e) => h.also.push(format!(
            "publish queue of {} unreadable: {e:#}",
            dest.display()
        )),
    }
}

/// Stream the whole log into the builder; the count of unreadable lines.
fn read_log(cfg: &Config, path: &std::path::Path, g: &mut Gather) -> Result<u64> {
    let mut tail = crate::metrics::tail::Tail::new(path, cfg.run.format, &cfg.metrics)?;
    let poll = tail.poll_into(&mut |recs| {
        g.push(recs);
        recs.clear();
    })?;
    if poll.missing || (!path.exists() && poll.records == 0) {
        anyhow::bail!("the log {} does not exist", path.display());
    }
    Ok(poll.batch.garbage_total)
}
