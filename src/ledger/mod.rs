//! The append-only, hash-chained ledger: every verdict, kill, publish and prune, with why.
//!
//! Contract (ARCHITECTURE.md): one JSON object per line; `seq`, `ts`, `kind`, `source`, `run`,
//! `step` (if known), the kind's own fields, `prev`, `hash`. `hash` is the SHA-256 of the
//! record without `hash`, serialised canonically (keys sorted, compact), so the on-disk key
//! order is free to be the readable one. Appends take an exclusive flock, write one line and
//! fsync. Nothing here ever rewrites or truncates the file. A torn line (a crash mid-write) is
//! skipped by readers, reported by `verify`, and the next append starts on a fresh line; a
//! last record that is whole and links but lost only its newline is chained to, not
//! duplicated (torn or complete is decided by parsing and linking, not by the newline alone).
//! Time is passed in.

use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

pub mod follow;
mod read;
pub use read::scan_bytes;
use read::{last_good_record, refuse_foreign_file};

pub const DEFAULT_FILE: &str = "roger-ledger.jsonl";

// The ledger names its own default file; the config only resolves what `[run] ledger` says.
impl crate::config::Config {
    /// The run's ledger: `[run] ledger` (relative to the config), else [`DEFAULT_FILE`]
    /// beside the config.
    pub fn ledger_path(&self) -> PathBuf {
        self.run
            .ledger
            .clone()
            .unwrap_or_else(|| self.base_dir().join(DEFAULT_FILE))
    }
}
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const RESERVED: [&str; 8] = ["seq", "ts", "kind", "source", "run", "step", "prev", "hash"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Verdict,
    Kill,
    Relaunch,
    Breaker,
    Publish,
    /// `roger publish --detach`: a publish is durable as an intent (its source's size and
    /// mtime); a `publish` or a `publish-rejected` note with the same `queue_id` ends it.
    #[serde(rename = "publish_queued")]
    PublishQueued,
    Prune,
    Quarantine,
    Release,
    Proof,
    Purge,
    Probe,
    Bench,
    Hygiene,
    /// Watch lifecycle: start, signal forwarded, child exited, done.
    Watch,
    /// The bucket (`event`: queued, verified, mismatch, failed, aborted, latest, latest_race,
    /// pruned, fetched, ledger_rebuilt, mirror_conflict): what reached it, verified or not.
    Remote,
    Note,
}

impl Kind {
    pub const ALL: [Kind; 17] = [
        Kind::Verdict,
        Kind::Kill,
        Kind::Relaunch,
        Kind::Breaker,
        Kind::Publish,
        Kind::PublishQueued,
        Kind::Prune,
        Kind::Quarantine,
        Kind::Release,
        Kind::Proof,
        Kind::Purge,
        Kind::Probe,
        Kind::Bench,
        Kind::Hygiene,
        Kind::Watch,
        Kind::Remote,
        Kind::Note,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Verdict => "verdict",
            Kind::Kill => "kill",
            Kind::Relaunch => "relaunch",
            Kind::Breaker => "breaker",
            Kind::Publish => "publish",
            Kind::PublishQueued => "publish_queued",
            Kind::Prune => "prune",
            Kind::Quarantine => "quarantine",
            Kind::Release => "release",
            Kind::Proof => "proof",
            Kind::Purge => "purge",
            Kind::Probe => "probe",
            Kind::Bench => "bench",
            Kind::Hygiene => "hygiene",
            Kind::Watch => "watch",
            Kind::Remote => "remote",
            Kind::Note => "note",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record to append: what happened, without the chain fields the ledger adds.
#[derive(Debug, Clone)]
pub struct Entry {
    pub kind: Kind,
    pub source: String,
    pub run: String,
    pub step: Option<u64>,
    pub fields: Map<String, Value>,
}

impl Entry {
    pub fn new(kind: Kind, source: &str, run: &str) -> Entry {
        Entry {
            kind,
            source: source.to_string(),
            run: run.to_string(),
            step: None,
            fields: Map::new(),
        }
    }

    pub fn step(mut self, step: Option<u64>) -> Entry {
        self.step = step;
        self
    }

    /// Add a kind-specific field. Panics on a reserved name: that is a programming error.
    pub fn field(mut self, key: &str, value: impl Serialize) -> Entry {
        assert!(
            !RESERVED.contains(&key),
            "ledger field {key:?} is reserved for the chain"
        );
        let v = serde_json::to_value(value).unwrap_or(Value::Null);
        self.fields.insert(key.to_string(), v);
        self
    }
}

/// A record as stored.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub seq: u64,
    pub ts: DateTime<Utc>,
    pub kind: Kind,
    pub source: String,
    pub run: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
    pub prev: String,
    pub hash: String,
    /// Byte offset of the line in the file (not stored).
    #[serde(skip)]
    pub offset: u64,
}

impl Record {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.get(key)
    }
    pub fn str_field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }
    pub fn u64_field(&self, key: &str) -> Option<u64> {
        self.fields.get(key).and_then(Value::as_u64)
    }

    /// The canonical value the hash covers: everything but `hash`, keys sorted.
    fn canonical(&self) -> Value {
        let mut m = self.fields.clone();
        m.insert("seq".into(), self.seq.into());
        m.insert("ts".into(), ts_string(self.ts).into());
        m.insert("kind".into(), self.kind.as_str().into());
        m.insert("source".into(), self.source.clone().into());
        m.insert("run".into(), self.run.clone().into());
        if let Some(s) = self.step {
            m.insert("step".into(), s.into());
        }
        m.insert("prev".into(), self.prev.clone().into());
        Value::Object(m)
    }

    fn compute_hash(&self) -> String {
        hash_canonical(&self.canonical())
    }

    /// The line as written: readable key order, then the chain fields.
    fn to_line(&self) -> String {
        let mut parts: Vec<String> = vec![
            kv("seq", &Value::from(self.seq)),
            kv("ts", &Value::from(ts_string(self.ts))),
            kv("kind", &Value::from(self.kind.as_str())),
            kv("source", &Value::from(self.source.as_str())),
            kv("run", &Value::from(self.run.as_str())),
        ];
        if let Some(s) = self.step {
            parts.push(kv("step", &Value::from(s)));
        }
        for (k, v) in &self.fields {
            parts.push(kv(k, v));
        }
        parts.push(kv("prev", &Value::from(self.prev.as_str())));
        parts.push(kv("hash", &Value::from(self.hash.as_str())));
        format!("{{{}}}\n", parts.join(","))
    }
}

fn kv(k: &str, v: &Value) -> String {
    format!(
        "{}:{}",
        serde_json::to_string(k).expect("string serialises"),
        serde_json::to_string(v).expect("value serialises")
    )
}

fn ts_string(ts: DateTime<Utc>) -> String {
    ts.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn hash_canonical(v: &Value) -> String {
    // serde_json's Map is a BTreeMap (no preserve_order feature): keys serialise sorted.
    let text = serde_json::to_string(v).expect("value serialises");
    crate::digest::hex(&Sha256::digest(text.as_bytes()))
}

/// Why a line is not a good record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// 1-based line number.
    pub line: u64,
    pub offset: u64,
    /// The seq the line claims, when it has one.
    pub seq: Option<u64>,
    pub what: String,
    /// A torn line is what a crash mid-append leaves; it is skipped, not a break.
    pub torn: bool,
}

/// Everything readable in a ledger, with what was wrong on the way.
#[derive(Debug, Default)]
pub struct Scan {
    pub records: Vec<Record>,
    pub problems: Vec<Problem>,
}

impl Scan {
    /// The first problem that breaks integrity (not a torn line).
    pub fn first_break(&self) -> Option<&Problem> {
        self.problems.iter().find(|p| !p.torn)
    }
}

pub struct Ledger {
    path: PathBuf,
}

impl Ledger {
    pub fn new(path: impl Into<PathBuf>) -> Ledger {
        Ledger { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a record could be appended now (the file opens for appending, or, when it does
    /// not exist yet, its directory is writable), checked before work whose record must not be
    /// lost: a publish never lands without its ledger record.
    pub fn check_writable(&self) -> Result<()> {
        match OpenOptions::new().append(true).open(&self.path) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut dir = self
                    .path
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                // The first existing ancestor: missing directories are created on append.
                while !dir.exists() {
                    match dir.parent().filter(|d| !d.as_os_str().is_empty()) {
                        Some(p) => dir = p,
                        None => break,
                    }
                }
                if crate::sys::owner::dir_writable(dir) {
                    Ok(())
                } else {
                    bail!(
                        "ledger {} cannot be created: {} is not writable",
                        self.path.display(),
                        dir.display()
                    )
                }
            }
            Err(e) => {
                Err(e).with_context(|| format!("ledger {} is not writable", self.path.display()))
            }
        }
    }

    /// Append one record under an exclusive lock, fsynced before returning.
    pub fn append(&self, entry: Entry, now: DateTime<Utc>) -> Result<Record> {
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        crate::sys::fsx::create_dirs_durably(dir)?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)
            .with_context(|| format!("opening ledger {}", self.path.display()))?;
        let mut locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| anyhow!("locking ledger {}: {e}", self.path.display()))?;
        refuse_foreign_file(&mut locked, &self.path)?;
        let was_empty = locked
            .metadata()
            .with_context(|| format!("reading ledger {}", self.path.display()))?
            .len()
            == 0;
        if was_empty {
            // A first record written by root in a user's run dir stays appendable by the user.
            crate::sys::owner::give_to_dir_owner(&locked, dir);
        }
        let (last, ends_clean) = last_good_record(&mut locked)
            .with_context(|| format!("reading the tail of ledger {}", self.path.display()))?;
        let (seq, prev) = match last {
            Some((seq, hash)) => match seq.checked_add(1) {
                Some(next) => (next, hash),
                None => bail!(
                    "ledger {}: the last record's seq is {seq}, the largest there is: nothing can follow it (start a new ledger)",
                    self.path.display()
                ),
            },
            None => (1, GENESIS.to_string()),
        };
        let mut rec = Record {
            seq,
            ts: now,
            kind: entry.kind,
            source: entry.source,
            run: entry.run,
            step: entry.step,
            fields: entry.fields,
            prev,
            hash: String::new(),
            offset: 0,
        };
        rec.hash = rec.compute_hash();
        let mut line = rec.to_line();
        if !ends_clean {
            // A torn tail: never touch it, start ours on a fresh line.
            line.insert(0, '\n');
        }
        locked
            .write_all(line.as_bytes())
            .with_context(|| format!("appending to ledger {}", self.path.display()))?;
        crate::sys::opcount::count(crate::sys::opcount::Op::Fsync);
        locked
            .sync_data()
            .with_context(|| format!("fsync of ledger {}", self.path.display()))?;
        if was_empty {
            // A new ledger's name is a directory entry: without this fsync a power cut can
            // lose the file and every record fsynced into it.
            crate::sys::fsx::fsync_dir(dir)?;
        }
        Ok(rec)
    }

    /// Every good record, in file order; a missing ledger is an empty one.
    pub fn scan(&self) -> Result<Scan> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Scan::default()),
            Err(e) => {
                return Err(e).with_context(|| format!("reading ledger {}", self.path.display()))
            }
        };
        Ok(scan_bytes(&bytes))
    }

    /// Records only; problems are for `verify`.
    pub fn records(&self) -> Result<Vec<Record>> {
        Ok(self.scan()?.records)
    }
}

/// Records made by appending `entries` to a fresh ledger, one second apart: for unit tests of
/// the modules that decide from ledger records.
#[cfg(test)]
pub fn test_records(entries: Vec<Entry>) -> Vec<Record> {
    use chrono::TimeZone;
    let dir = tempfile::tempdir().expect("temp dir");
    let l = Ledger::new(dir.path().join("l.jsonl"));
    for (i, e) in entries.into_iter().enumerate() {
        l.append(e, Utc.timestamp_opt(1_700_000_000 + i as i64, 0).unwrap())
            .expect("append");
    }
    l.records().expect("read back")
}

#[cfg(test)]
mod tests;
