//! The summary cache beside the ledger (`<ledger>.critic-cache`, CBOR: self-describing like
//! JSON, and it keeps NaN, which JSON cannot): what one `critic --once`
//! knew when it finished — the run's [`History`] (window, evals, onsets, events between
//! verdicts, counts) and where its read of the log stood — so the next `--once` reads only
//! what was appended since. It is a cache, never a source of truth: any doubt (another
//! config, roger version, log, inode; a log shorter than what was read, or whose bytes
//! already read changed) and it is ignored and the log is read afresh; a cache that cannot
//! be written costs only speed.
//!
//! It also remembers the verdict this cache's command last filed and how long the ledger
//! was right after, so a repeated check on an unchanged log and ledger can tell, without
//! reading the ledger, that it would file the same verdict again (it then files nothing,
//! as the daemon does).

use super::History;
use crate::config::{Config, LogFormat};
use crate::metrics::tail::{Place, Tail};
use crate::sys::fsx::{self, Durability, Replace};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Bump when anything serialised here changes shape.
const SCHEMA: u32 = 6;

#[derive(Debug, Serialize, Deserialize)]
struct Key {
    schema: u32,
    roger: String,
    config_hash: String,
    run: String,
    log: PathBuf,
    format: LogFormat,
}

#[derive(Debug, Serialize, Deserialize)]
struct Cached {
    key: Key,
    place: Place,
    history: History,
    filed: Option<Filed>,
}

/// The verdict last filed by a check that kept this cache, and the ledger as it left it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Filed {
    pub seq: u64,
    pub ts: chrono::DateTime<chrono::Utc>,
    pub verdict: crate::critic::Verdict,
    /// (length, inode) of the ledger right after that record: while both are unchanged,
    /// nothing was appended since, so this is still the run's newest record.
    pub ledger: (u64, u64),
}

impl Filed {
    /// Keeps of `verdict` only what the filing rule and the printout use (statuses, step,
    /// phase, flapping): the checks' observations and reasons are in the ledger, and
    /// decoding them on every cached check cost more than the rest of the summary.
    pub fn new(
        seq: u64,
        ts: chrono::DateTime<chrono::Utc>,
        verdict: &crate::critic::Verdict,
        ledger: (u64, u64),
    ) -> Filed {
        let mut verdict = verdict.clone();
        for c in &mut verdict.checks {
            c.observed = serde_json::Value::Null;
            c.expected = serde_json::Value::Null;
            c.reason.clear();
        }
        Filed {
            seq,
            ts,
            verdict,
            ledger,
        }
    }

    /// Still the newest record of `ledger` (nothing appended, not replaced)?
    pub fn still_last(&self, ledger: &Path) -> bool {
        ledger_identity(ledger) == Some(self.ledger)
    }
}

/// (length, inode) of a ledger file; `None` when it cannot be read.
pub fn ledger_identity(ledger: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(ledger).ok()?;
    Some((m.len(), m.ino()))
}

pub struct Summary {
    path: PathBuf,
}

fn key(cfg: &Config, log: &Path) -> Key {
    Key {
        schema: SCHEMA,
        roger: env!("CARGO_PKG_VERSION").into(),
        config_hash: cfg.hash.clone(),
        run: cfg.run.name.clone(),
        log: log.to_path_buf(),
        format: cfg.run.format,
    }
}

impl Summary {
    /// The cache for the ledger at `ledger`.
    pub fn beside(ledger: &Path) -> Summary {
        let mut name = ledger.file_name().unwrap_or_default().to_os_string();
        name.push(".critic-cache");
        Summary {
            path: ledger.with_file_name(name),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A tail resumed where the cached read stood and the history it had built; `Err` says
    /// why the cache is not used (absent, another config, the log changed under it).
    pub fn load(&self, cfg: &Config, log: &Path) -> Result<(Tail, History, Option<Filed>), String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("none yet".into()),
            Err(e) => return Err(format!("unreadable: {e}")),
        };
        let cached: Cached =
            ciborium::from_reader(bytes.as_slice()).map_err(|e| format!("unreadable: {e}"))?;
        let want = key(cfg, log);
        let k = &cached.key;
        if (k.schema, &k.roger) != (want.schema, &want.roger) {
            return Err("written by another roger version".into());
        }
        if k.config_hash != want.config_hash || k.run != want.run || k.format != want.format {
            return Err("written for another config".into());
        }
        if k.log != want.log {
            return Err(format!("written for another log ({})", k.log.display()));
        }
        let tail = Tail::from_place(log, cfg.run.format, &cfg.metrics, &cached.place)?;
        Ok((tail, cached.history, cached.filed))
    }

    /// Keep what this read knew. Written to a temporary file and renamed over the old one,
    /// so a reader sees the old cache or the new, never half of one.
    /// `Ok(false)`: this log's format cannot be resumed (no cache kept).
    pub fn save(
        &self,
        cfg: &Config,
        log: &Path,
        tail: &Tail,
        history: &History,
        filed: Option<Filed>,
    ) -> Result<bool, String> {
        let Some(place) = tail.place() else {
            let _ = std::fs::remove_file(&self.path); // nothing to resume from: no stale cache
            return Ok(false);
        };
        let cached = Cached {
            key: key(cfg, log),
            place,
            history: history.clone(),
            filed,
        };
        let mut bytes = Vec::new();
        ciborium::into_writer(&cached, &mut bytes).map_err(|e| e.to_string())?;
        // Atomic, not durable: a cache lost at a power cut (or left empty by one) reads as
        // "unreadable" and the next check reads the log again. Mode as `fs::write` gave it.
        let how = Replace::new(Durability::Atomic, 0o666);
        fsx::write_atomic(&self.path, &bytes, how)
            .map(|_| true)
            .map_err(|e| format!("writing {}: {e:#}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tail::Tail;
    use std::fmt::Write as _;

    /// A history with every kind of state (NaN, evals, a spike event, onsets) comes back
    /// from the cache the same, and the tail goes on where it stood.
    #[test]
    fn a_history_survives_the_cache() {
        let d = tempfile::tempdir().unwrap();
        let toml = d.path().join("roger.toml");
        std::fs::write(
            &toml,
            "[run]\nname = \"t\"\nlog = \"train.jsonl\"\n[[phase]]\nname = \"a\"\nfrom = 0\n\
             window = 10\nloss = [0.5, 6.0]\nloss_spike = 2.0\ngrad_norm_spike = 3.0\n",
        )
        .unwrap();
        let cfg = Config::load(&toml).unwrap();
        let log = d.path().join("train.jsonl");
        let mut text = String::new();
        for i in 0..100u64 {
            let loss = match i {
                50 => "9.0".to_string(),
                90.. => "NaN".to_string(),
                _ => "3.0".to_string(),
            };
            let grad = if i == 60 { 9.0 } else { 0.5 };
            writeln!(
                text,
                "{{\"step\": {i}, \"time\": {i}, \"loss\": {loss}, \"grad_norm\": {grad}}}"
            )
            .unwrap();
            if i % 20 == 0 {
                writeln!(text, "{{\"step\": {i}, \"eval_loss\": 2.5}}").unwrap();
            }
        }
        std::fs::write(&log, &text).unwrap();
        let mut tail = Tail::new(&log, cfg.run.format, &cfg.metrics).unwrap();
        let mut history = History::new(&cfg);
        for r in tail.poll().unwrap().batch.records {
            history.push(r);
        }
        let summary = Summary::beside(&d.path().join("roger-ledger.jsonl"));
        assert!(summary.save(&cfg, &log, &tail, &history, None).unwrap());
        let (mut back_tail, back, filed) = summary.load(&cfg, &log).unwrap();
        assert!(filed.is_none());
        assert_eq!(back.state_bytes(), history.state_bytes());
        assert_eq!(back.samples_total, history.samples_total);
        let obs = |h: &History| crate::critic::observe(h, &cfg, 200.0, None);
        let (a, b) = (obs(&history), obs(&back));
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap()
        );
        assert!(
            !a.evals.is_empty() && a.onsets.nonfinite.is_some(),
            "{a:#?}"
        );
        let poll = back_tail.poll().unwrap();
        assert_eq!(
            (poll.bytes_read, poll.records),
            (0, 0),
            "nothing new to read"
        );
        // Another config: not used.
        std::fs::write(&toml, "[run]\nname = \"t\"\nlog = \"train.jsonl\"\n").unwrap();
        let other = Config::load(&toml).unwrap();
        assert!(summary
            .load(&other, &log)
            .err()
            .unwrap()
            .contains("another config"));
    }
}
