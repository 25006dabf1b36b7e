//! What the ledger says about the bucket (pure): which published checkpoints have a verified
//! copy there, which were pruned there, what is queued, and the newest verified step — for
//! retention (a local copy goes only after its bucket copy is verified), the fresh-machine
//! resume, status, report and Prometheus. Here, beside the last-good rule, so that publish's
//! retention reads it without knowing the bucket's code (`crate::remote`).

use super::Checkpoint;
use crate::ledger::{Kind, Record};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::path::PathBuf;

pub const SOURCE: &str = "remote";

/// A checkpoint's verified copy in the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Copy {
    /// The local path its publish record names (on the machine that published it).
    pub path: PathBuf,
    /// `s3://bucket/prefix/checkpoints/NAME`: the object (a directory checkpoint: its prefix).
    pub url: String,
    /// The checkpoint's name relative to its destination directory.
    pub name: String,
    pub sha256: String,
    pub size: u64,
    /// A directory checkpoint (one object per file under `url/`).
    pub dir: bool,
    pub step: Option<u64>,
    pub ts: DateTime<Utc>,
    pub seq: u64,
}

fn event(r: &Record) -> Option<&str> {
    (r.kind == Kind::Remote)
        .then(|| r.str_field("event"))
        .flatten()
}

/// Verified remote copies of `run` not pruned from the bucket since, oldest first.
pub fn verified(records: &[Record], run: &str) -> Vec<Copy> {
    let mut out: Vec<Copy> = Vec::new();
    for r in records.iter().filter(|r| r.run == run) {
        match event(r) {
            Some("verified") => {
                let (Some(path), Some(url), Some(name), Some(sha256), Some(size)) = (
                    r.str_field("path"),
                    r.str_field("url"),
                    r.str_field("name"),
                    r.str_field("sha256"),
                    r.u64_field("size"),
                ) else {
                    continue;
                };
                out.retain(|c| c.url != url);
                out.push(Copy {
                    path: PathBuf::from(path),
                    url: url.to_string(),
                    name: name.to_string(),
                    sha256: sha256.to_string(),
                    size,
                    dir: r.get("dir").and_then(|v| v.as_bool()).unwrap_or(false),
                    step: r.step,
                    ts: r.ts,
                    seq: r.seq,
                });
            }
            Some("pruned") | Some("mismatch") => {
                if let Some(url) = r.str_field("url") {
                    out.retain(|c| c.url != url);
                }
            }
            _ => {}
        }
    }
    out
}

/// The verified remote copy of this local checkpoint (same path and bytes), if any.
pub fn copy_of<'a>(copies: &'a [Copy], c: &Checkpoint) -> Option<&'a Copy> {
    copies
        .iter()
        .rev()
        .find(|k| k.path == c.path && k.sha256 == c.sha256)
}

/// What the bucket side of a run looks like now, for status/report/Prometheus.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Summary {
    pub newest_step: Option<u64>,
    pub newest_at: Option<DateTime<Utc>>,
    pub newest_url: Option<String>,
    pub verified: usize,
    /// Queued and not yet verified (nor failed for good).
    pub queued: usize,
    pub queued_bytes: u64,
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    /// Seconds each verified upload took (upload + verify), for the preemption fit check.
    pub upload_seconds: Vec<f64>,
}

pub fn summary(records: &[Record], run: &str) -> Summary {
    let copies = verified(records, run);
    let mut s = Summary {
        verified: copies.len(),
        ..Default::default()
    };
    if let Some(n) = copies.iter().max_by_key(|c| (c.step.unwrap_or(0), c.seq)) {
        s.newest_step = n.step;
        s.newest_at = Some(n.ts);
        s.newest_url = Some(n.url.clone());
    }
    let mut open: Vec<(String, u64)> = Vec::new();
    for r in records.iter().filter(|r| r.run == run) {
        let id = r.str_field("upload_id").unwrap_or_default().to_string();
        match event(r) {
            Some("queued") => open.push((id, r.u64_field("size").unwrap_or(0))),
            Some("verified") | Some("gave_up") => {
                open.retain(|(q, _)| *q != id);
                if let Some(t) = r.get("seconds").and_then(|v| v.as_f64()) {
                    if event(r) == Some("verified") {
                        s.upload_seconds.push(t);
                    }
                }
            }
            Some("failed") | Some("mismatch") => {
                s.last_error = r.str_field("error").map(str::to_string);
                s.last_error_at = Some(r.ts);
            }
            _ => {}
        }
    }
    s.queued = open.len();
    s.queued_bytes = open.iter().map(|(_, b)| b).sum();
    s
}

/// p95 of recorded upload times (upload + verify), for the preemption fit warning.
pub fn upload_p95(records: &[Record], run: &str) -> Option<f64> {
    let mut t = summary(records, run).upload_seconds;
    if t.is_empty() {
        return None;
    }
    t.sort_by(|a, b| a.total_cmp(b));
    let i = ((t.len() as f64 * 0.95).ceil() as usize).clamp(1, t.len()) - 1;
    Some(t[i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Entry, Ledger};
    use serde_json::json;

    fn rec(l: &Ledger, e: Entry) {
        l.append(e, Utc::now()).unwrap();
    }

    #[test]
    fn verified_copies_and_the_summary() {
        let d = tempfile::tempdir().unwrap();
        let l = Ledger::new(d.path().join("l.jsonl"));
        let v = |name: &str, step: u64, secs: f64| {
            Entry::new(Kind::Remote, SOURCE, "r")
                .step(Some(step))
                .field("event", "verified")
                .field("path", format!("/ck/{name}"))
                .field("url", format!("s3://b/p/checkpoints/{name}"))
                .field("name", name)
                .field("sha256", "aa")
                .field("size", 10)
                .field("upload_id", name)
                .field("seconds", secs)
        };
        rec(
            &l,
            Entry::new(Kind::Remote, SOURCE, "r")
                .field("event", "queued")
                .field("upload_id", "c10")
                .field("size", 10),
        );
        rec(&l, v("c10", 10, 2.0));
        rec(
            &l,
            Entry::new(Kind::Remote, SOURCE, "r")
                .field("event", "queued")
                .field("upload_id", "c20")
                .field("size", 7),
        );
        rec(
            &l,
            Entry::new(Kind::Remote, SOURCE, "r")
                .field("event", "failed")
                .field("upload_id", "c20")
                .field("error", "503 SlowDown"),
        );
        rec(&l, v("c30", 30, 4.0));
        rec(
            &l,
            Entry::new(Kind::Remote, SOURCE, "r")
                .field("event", "pruned")
                .field("url", json!("s3://b/p/checkpoints/c10")),
        );
        let records = l.records().unwrap();
        let c = verified(&records, "r");
        assert_eq!(
            c.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["c30"]
        );
        let s = summary(&records, "r");
        assert_eq!(
            (s.newest_step, s.verified, s.queued, s.queued_bytes),
            (Some(30), 1, 1, 7)
        );
        assert_eq!(s.last_error.as_deref(), Some("503 SlowDown"));
        assert_eq!(upload_p95(&records, "r"), Some(4.0));
    }
}
