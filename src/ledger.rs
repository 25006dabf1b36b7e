//! The append-only, hash-chained ledger: every verdict, kill, publish and prune, with why.
//!
//! Contract (DESIGN.md): one JSON object per line; `seq`, `ts`, `kind`, `source`, `run`,
//! `step` (if known), the kind's own fields, `prev`, `hash`. `hash` is the SHA-256 of the
//! record without `hash`, serialised canonically (keys sorted, compact), so the on-disk key
//! order is free to be the readable one. Appends take an exclusive flock, write one line and
//! fsync. Nothing here ever rewrites or truncates the file. A torn line (a crash mid-write) is
//! skipped by readers, reported by `verify`, and the next append starts on a fresh line.
//! Time is passed in.

use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const DEFAULT_FILE: &str = "roger-ledger.jsonl";
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
    Note,
}

impl Kind {
    pub const ALL: [Kind; 15] = [
        Kind::Verdict,
        Kind::Kill,
        Kind::Relaunch,
        Kind::Breaker,
        Kind::Publish,
        Kind::Prune,
        Kind::Quarantine,
        Kind::Release,
        Kind::Proof,
        Kind::Purge,
        Kind::Probe,
        Kind::Bench,
        Kind::Hygiene,
        Kind::Watch,
        Kind::Note,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Verdict => "verdict",
            Kind::Kill => "kill",
            Kind::Relaunch => "relaunch",
            Kind::Breaker => "breaker",
            Kind::Publish => "publish",
            Kind::Prune => "prune",
            Kind::Quarantine => "quarantine",
            Kind::Release => "release",
            Kind::Proof => "proof",
            Kind::Purge => "purge",
            Kind::Probe => "probe",
            Kind::Bench => "bench",
            Kind::Hygiene => "hygiene",
            Kind::Watch => "watch",
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
    crate::config::hex(&Sha256::digest(text.as_bytes()))
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

    /// Append one record under an exclusive lock, fsynced before returning.
    pub fn append(&self, entry: Entry, now: DateTime<Utc>) -> Result<Record> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating ledger directory {}", dir.display()))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)
            .with_context(|| format!("opening ledger {}", self.path.display()))?;
        let mut locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| anyhow!("locking ledger {}: {e}", self.path.display()))?;
        refuse_foreign_file(&mut locked, &self.path)?;
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
        locked
            .sync_data()
            .with_context(|| format!("fsync of ledger {}", self.path.display()))?;
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

/// Walk the lines, check each hash and the chain; torn lines are skipped.
pub fn scan_bytes(bytes: &[u8]) -> Scan {
    let mut scan = Scan::default();
    let mut offset = 0usize;
    let mut line_no = 0u64;
    let mut expect_prev = GENESIS.to_string();
    let mut expect_seq = 1u64;
    while offset < bytes.len() {
        line_no += 1;
        let end = bytes[offset..].iter().position(|&b| b == b'\n');
        let (line, terminated, next) = match end {
            Some(i) => (&bytes[offset..offset + i], true, offset + i + 1),
            None => (&bytes[offset..], false, bytes.len()),
        };
        let at = offset as u64;
        offset = next;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let is_last = offset >= bytes.len();
        let parsed = std::str::from_utf8(line)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(|s| parse_record(s).map_err(|e| e.to_string()));
        let rec = match parsed {
            Ok(mut r) => {
                r.offset = at;
                r
            }
            Err(why) => {
                // Unterminated last line: a crash mid-append. A bad line that was later
                // followed by a good one is the same torn write with the next append after it;
                // the chain check on the next record still catches a removed/garbled record.
                let torn = could_be_torn(line) && (!terminated || !is_last);
                scan.problems.push(Problem {
                    line: line_no,
                    offset: at,
                    seq: None,
                    what: if torn {
                        format!("torn line skipped ({why})")
                    } else if !could_be_torn(line) {
                        format!(
                            "not a roger ledger record ({why}): expected a line starting {RECORD_START}, found {}",
                            preview(line)
                        )
                    } else {
                        format!("unparseable final line ({why})")
                    },
                    torn,
                });
                continue;
            }
        };
        if !terminated {
            scan.problems.push(Problem {
                line: line_no,
                offset: at,
                seq: Some(rec.seq),
                what: "last line has no newline (torn write); skipped".into(),
                torn: true,
            });
            continue;
        }
        let actual = rec.compute_hash();
        if actual != rec.hash {
            scan.problems.push(Problem {
                line: line_no,
                offset: at,
                seq: Some(rec.seq),
                what: format!(
                    "hash mismatch: the record was edited (stored {}, content hashes to {})",
                    short(&rec.hash),
                    short(&actual)
                ),
                torn: false,
            });
        } else if rec.prev != expect_prev {
            scan.problems.push(Problem {
                line: line_no,
                offset: at,
                seq: Some(rec.seq),
                what: format!(
                    "chain broken: prev {} does not match the previous record's hash {} (a record before it was removed or altered)",
                    short(&rec.prev),
                    short(&expect_prev)
                ),
                torn: false,
            });
        } else if rec.seq != expect_seq {
            scan.problems.push(Problem {
                line: line_no,
                offset: at,
                seq: Some(rec.seq),
                what: format!("sequence gap: expected seq {expect_seq}, found {}", rec.seq),
                torn: false,
            });
        }
        expect_prev = rec.hash.clone();
        expect_seq = rec.seq.saturating_add(1);
        scan.records.push(rec);
    }
    scan
}

/// Every line roger writes starts with this.
const RECORD_START: &str = "{\"seq\":";

/// What a crash mid-append can leave: a prefix of a record line, possibly after blocks the
/// filesystem zero-filled. Any other bad line was never written by roger.
fn could_be_torn(line: &[u8]) -> bool {
    let start = line.iter().position(|&b| b != 0).unwrap_or(line.len());
    let rest = &line[start..];
    let n = rest.len().min(RECORD_START.len());
    rest[..n] == RECORD_START.as_bytes()[..n]
}

fn preview(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(40)]);
    format!("{text:?}")
}

/// Appending to a file that is not a ledger (a training log, a checkpoint: `--ledger` pointed
/// at the wrong file) would corrupt it. Its first line tells: roger's start `{"seq":`.
fn refuse_foreign_file(file: &mut File, path: &Path) -> Result<()> {
    let mut head = Vec::with_capacity(4096);
    file.seek(SeekFrom::Start(0))?;
    Read::by_ref(file).take(4096).read_to_end(&mut head)?;
    let Some(start) = head.iter().position(|b| !b.is_ascii_whitespace()) else {
        return Ok(());
    };
    let first = &head[start..];
    let first = &first[..first
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(first.len())];
    if could_be_torn(first) {
        return Ok(());
    }
    bail!(
        "{} is not a roger ledger: its first line starts {}, expected a record starting {RECORD_START}; refusing to append to it (does --ledger or [run] ledger name the wrong file?)",
        path.display(),
        preview(first)
    )
}

fn short(h: &str) -> &str {
    &h[..h.len().min(12)]
}

fn parse_record(line: &str) -> Result<Record> {
    let v: Value = serde_json::from_str(line).context("bad JSON")?;
    let Value::Object(mut m) = v else {
        bail!("not a JSON object");
    };
    let mut take = |k: &str| m.remove(k).ok_or_else(|| anyhow!("missing `{k}`"));
    let seq = take("seq")?
        .as_u64()
        .ok_or_else(|| anyhow!("`seq` not a number"))?;
    let ts_text = take("ts")?;
    let ts = ts_text
        .as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .ok_or_else(|| anyhow!("`ts` not RFC 3339"))?
        .with_timezone(&Utc);
    let kind_text = take("kind")?;
    let kind = kind_text
        .as_str()
        .and_then(Kind::parse)
        .ok_or_else(|| anyhow!("unknown `kind` {kind_text}"))?;
    let source = take("source")?.as_str().unwrap_or_default().to_string();
    let run = take("run")?.as_str().unwrap_or_default().to_string();
    let prev = take("prev")?.as_str().unwrap_or_default().to_string();
    let hash = take("hash")?.as_str().unwrap_or_default().to_string();
    let step = m.remove("step").and_then(|s| s.as_u64());
    // The hash covers the exact timestamp text; a non-canonical one would not round-trip.
    if ts_text.as_str() != Some(ts_string(ts).as_str()) {
        bail!("`ts` is not in roger's canonical form");
    }
    Ok(Record {
        seq,
        ts,
        kind,
        source,
        run,
        step,
        fields: m,
        prev,
        hash,
        offset: 0,
    })
}

/// The last good record's (seq, hash), and whether the file ends with a newline.
fn last_good_record(file: &mut File) -> Result<(Option<(u64, String)>, bool)> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok((None, true));
    }
    let mut window: u64 = 256 * 1024;
    loop {
        let start = len.saturating_sub(window);
        file.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::with_capacity((len - start) as usize);
        Read::by_ref(file).take(len - start).read_to_end(&mut buf)?;
        let ends_clean = buf.last() == Some(&b'\n');
        // Complete lines only; from a mid-file start, the first fragment is not a line.
        let body = if ends_clean {
            &buf[..]
        } else {
            match buf.iter().rposition(|&b| b == b'\n') {
                Some(i) => &buf[..=i],
                None => &buf[..0],
            }
        };
        let mut lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
        if start > 0 && !lines.is_empty() {
            lines.remove(0);
        }
        for line in lines.iter().rev() {
            if let Ok(rec) = std::str::from_utf8(line)
                .map_err(anyhow::Error::from)
                .and_then(parse_record)
            {
                return Ok((Some((rec.seq, rec.hash)), ends_clean));
            }
        }
        if start == 0 {
            return Ok((None, ends_clean));
        }
        window *= 4;
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
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn appends_chain_and_verify() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::new(dir.path().join("l.jsonl"));
        let a = l
            .append(Entry::new(Kind::Note, "test", "r").field("msg", "hi"), t(0))
            .unwrap();
        let b = l
            .append(Entry::new(Kind::Note, "test", "r").step(Some(7)), t(1))
            .unwrap();
        assert_eq!(a.prev, GENESIS);
        assert_eq!(b.prev, a.hash);
        assert_eq!(b.seq, 2);
        let scan = l.scan().unwrap();
        assert_eq!(scan.records.len(), 2);
        assert!(scan.problems.is_empty(), "{:?}", scan.problems);
        assert_eq!(scan.records[1].step, Some(7));
    }

    #[test]
    fn torn_tail_is_skipped_and_next_append_chains() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.jsonl");
        let l = Ledger::new(&p);
        let a = l.append(Entry::new(Kind::Note, "t", "r"), t(0)).unwrap();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"seq\":2,\"ts\":\"20").unwrap();
        let scan = l.scan().unwrap();
        assert_eq!(scan.records.len(), 1);
        assert!(scan.problems[0].torn);
        let b = l.append(Entry::new(Kind::Note, "t", "r"), t(1)).unwrap();
        assert_eq!((b.seq, b.prev.as_str()), (2, a.hash.as_str()));
        let scan = l.scan().unwrap();
        assert_eq!(scan.records.len(), 2);
        assert!(scan.first_break().is_none(), "{:?}", scan.problems);
        assert_eq!(scan.problems.len(), 1);
    }

    #[test]
    fn edited_record_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.jsonl");
        let l = Ledger::new(&p);
        for i in 0..3 {
            l.append(Entry::new(Kind::Note, "t", "r").field("n", i), t(i))
                .unwrap();
        }
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, text.replacen("\"n\":1", "\"n\":5", 1)).unwrap();
        let scan = l.scan().unwrap();
        let bad = scan.first_break().unwrap();
        assert_eq!(bad.seq, Some(2));
        assert!(bad.what.contains("edited"), "{}", bad.what);
    }

    #[test]
    fn removed_record_breaks_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.jsonl");
        let l = Ledger::new(&p);
        for i in 0..3 {
            l.append(Entry::new(Kind::Note, "t", "r"), t(i)).unwrap();
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        std::fs::write(&p, format!("{}\n{}\n", lines[0], lines[2])).unwrap();
        let bad = l.scan().unwrap();
        let bad = bad.first_break().unwrap();
        assert_eq!(bad.seq, Some(3));
        assert!(bad.what.contains("chain broken"));
    }

    #[test]
    fn garbage_is_a_break_not_a_torn_line() {
        let scan = scan_bytes(b"hello world\nnot json either\n");
        assert_eq!(scan.problems.len(), 2);
        let bad = scan.first_break().unwrap();
        assert_eq!(bad.line, 1);
        assert!(
            bad.what.contains("not a roger ledger record"),
            "{}",
            bad.what
        );
        // What a crash leaves is still torn: a record prefix, or zero-filled blocks.
        assert!(could_be_torn(b"{\"se"));
        assert!(could_be_torn(b"\0\0\0{\"seq\":4,\"ts"));
        assert!(!could_be_torn(b"{\"step\":1,\"loss\":2}"));
    }

    #[test]
    fn refuses_to_append_to_a_file_that_is_not_a_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("train.jsonl");
        std::fs::write(&p, "{\"step\":1,\"loss\":2.5}\n").unwrap();
        let err = Ledger::new(&p)
            .append(Entry::new(Kind::Note, "t", "r"), t(0))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a roger ledger"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"step\":1,\"loss\":2.5}\n"
        );
    }

    #[test]
    fn the_largest_seq_is_an_error_not_an_overflow() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.jsonl");
        let l = Ledger::new(&p);
        let mut rec = l.append(Entry::new(Kind::Note, "t", "r"), t(0)).unwrap();
        rec.seq = u64::MAX;
        rec.hash = rec.compute_hash();
        std::fs::write(&p, rec.to_line()).unwrap();
        let scan = l.scan().unwrap();
        assert_eq!(scan.records.len(), 1);
        let err = l
            .append(Entry::new(Kind::Note, "t", "r"), t(1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("the largest there is"), "{err}");
    }

    #[test]
    fn floats_and_nested_fields_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::new(dir.path().join("l.jsonl"));
        let obs = serde_json::json!({"loss": [2.345678901234, 1e-7, 0.1], "z": {"b": 1, "a": 2}});
        l.append(
            Entry::new(Kind::Verdict, "critic", "r").field("observation", obs),
            t(0),
        )
        .unwrap();
        let scan = l.scan().unwrap();
        assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    }
}
