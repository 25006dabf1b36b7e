//! The outbox beside the ledger (`roger-outbox.jsonl`): a message is `queued` before it is
//! sent and `sent` after, failures are `failed` with the attempt number, all appended, never
//! rewritten. Replaying the file after a restart gives what is still owed, so a page is
//! neither lost nor queued twice; a crash between a send and its `sent` line sends it once
//! more with the same idempotency key (at-least-once; the key lets a receiver drop the copy).

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const FILE: &str = "roger-outbox.jsonl";

/// The delivery key of one event on one channel: the ledger record's hash names the event, so
/// the key is the same however often roger restarts.
pub fn idempotency_key(record_hash: &str, channel: &str) -> String {
    let short = record_hash.get(..16).unwrap_or(record_hash);
    format!("roger-{short}-{channel}")
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Line {
    Queued {
        key: String,
        channel: String,
        at: DateTime<Utc>,
        payload: Value,
    },
    Failed {
        key: String,
        attempt: u32,
        at: DateTime<Utc>,
        error: String,
    },
    Sent {
        key: String,
        attempt: u32,
        at: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub key: String,
    pub channel: String,
    pub payload: Value,
    pub attempts: u32,
    pub last_failure: Option<DateTime<Utc>>,
    pub sent: bool,
}

/// Retry delay after `attempts` failures: 10 s doubling, at most 10 minutes.
pub fn backoff(attempts: u32) -> Duration {
    let base = 10u64.saturating_mul(1u64 << attempts.saturating_sub(1).min(16));
    Duration::from_secs(base.min(600))
}

/// What the outbox holds, in queue order.
#[derive(Debug, Default)]
pub struct Outbox {
    items: BTreeMap<String, Item>,
    order: Vec<String>,
}

impl Outbox {
    /// Replay lines (unparseable ones, such as a torn last line, are skipped).
    pub fn replay(text: &str) -> Outbox {
        let mut o = Outbox::default();
        for line in text.lines() {
            if let Ok(l) = serde_json::from_str::<Line>(line) {
                o.apply(&l);
            }
        }
        o
    }

    pub fn apply(&mut self, line: &Line) {
        match line {
            Line::Queued {
                key,
                channel,
                payload,
                ..
            } => {
                if !self.items.contains_key(key) {
                    self.order.push(key.clone());
                    self.items.insert(
                        key.clone(),
                        Item {
                            key: key.clone(),
                            channel: channel.clone(),
                            payload: payload.clone(),
                            attempts: 0,
                            last_failure: None,
                            sent: false,
                        },
                    );
                }
            }
            Line::Failed {
                key, attempt, at, ..
            } => {
                if let Some(i) = self.items.get_mut(key) {
                    i.attempts = i.attempts.max(*attempt);
                    i.last_failure = Some(*at);
                }
            }
            Line::Sent { key, .. } => {
                if let Some(i) = self.items.get_mut(key) {
                    i.sent = true;
                }
            }
        }
    }

    /// The line that queues a message, or None when this key was queued before (a restart
    /// re-reading the same ledger records must not queue them again).
    pub fn enqueue(
        &mut self,
        key: String,
        channel: &str,
        payload: Value,
        now: DateTime<Utc>,
    ) -> Option<Line> {
        if self.items.contains_key(&key) {
            return None;
        }
        let line = Line::Queued {
            key,
            channel: channel.into(),
            at: now,
            payload,
        };
        self.apply(&line);
        Some(line)
    }

    /// Unsent messages whose retry time has come, oldest first.
    pub fn due(&self, now: DateTime<Utc>) -> Vec<&Item> {
        self.order
            .iter()
            .filter_map(|k| self.items.get(k))
            .filter(|i| !i.sent)
            .filter(|i| match i.last_failure {
                None => true,
                Some(at) => {
                    let wait = chrono::Duration::from_std(backoff(i.attempts))
                        .unwrap_or(chrono::Duration::MAX);
                    now - at >= wait
                }
            })
            .collect()
    }

    #[cfg(test)]
    pub fn get(&self, key: &str) -> Option<&Item> {
        self.items.get(key)
    }
}

/// The file at the edge: load, and append one line at a time (fsynced: a `sent` line that
/// is lost means a duplicate, a `queued` line that is lost means a lost page).
#[derive(Debug, Clone)]
pub struct OutboxFile {
    pub path: PathBuf,
}

impl OutboxFile {
    /// The outbox in the ledger's directory.
    pub fn beside(ledger: &Path) -> OutboxFile {
        let dir = ledger.parent().unwrap_or(Path::new("."));
        OutboxFile {
            path: dir.join(FILE),
        }
    }

    pub fn load(&self) -> Result<Outbox> {
        match std::fs::read_to_string(&self.path) {
            Ok(t) => Ok(Outbox::replay(&t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Outbox::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", self.path.display())),
        }
    }

    pub fn append(&self, line: &Line) -> Result<()> {
        let mut text = serde_json::to_string(line).context("serialising an outbox line")?;
        text.push('\n');
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        // A torn line from a crash must not swallow this one.
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len > 0 && !ends_with_newline(&self.path, len) {
            text.insert(0, '\n');
        }
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .with_context(|| format!("appending to {}", self.path.display()))
    }
}

fn ends_with_newline(path: &Path, len: u64) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let mut b = [0u8; 1];
    std::fs::File::open(path)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(len - 1))?;
            f.read_exact(&mut b)
        })
        .map_or(true, |()| b[0] == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn a_restart_neither_drops_nor_requeues_a_page() {
        let dir = tempfile::tempdir().unwrap();
        let file = OutboxFile::beside(&dir.path().join("roger-ledger.jsonl"));
        let key = idempotency_key(&"ab".repeat(32), "webhook");
        assert_eq!(key, "roger-abababababababab-webhook");
        let mut o = file.load().unwrap();
        let q = o
            .enqueue(key.clone(), "webhook", json!({"text": "breaker"}), t(0))
            .unwrap();
        file.append(&q).unwrap();
        // roger dies here (kill -9 during the send): the restart still owes the page ...
        let mut again = file.load().unwrap();
        assert_eq!(again.due(t(1)).len(), 1);
        // ... and re-reading the same ledger record does not queue it a second time.
        assert!(again
            .enqueue(key.clone(), "webhook", json!({}), t(1))
            .is_none());
        file.append(&Line::Sent {
            key: key.clone(),
            attempt: 1,
            at: t(2),
        })
        .unwrap();
        let after = file.load().unwrap();
        assert!(after.due(t(3)).is_empty());
        assert!(after.get(&key).unwrap().sent);
    }

    #[test]
    fn failures_back_off_and_a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let file = OutboxFile {
            path: dir.path().join(FILE),
        };
        let mut o = Outbox::default();
        file.append(&o.enqueue("k".into(), "cmd", json!(1), t(0)).unwrap())
            .unwrap();
        let fail = Line::Failed {
            key: "k".into(),
            attempt: 2,
            at: t(100),
            error: "503".into(),
        };
        file.append(&fail).unwrap();
        // A crash mid-append leaves half a line; the next append starts on a fresh one.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&file.path)
            .unwrap()
            .write_all(b"{\"op\":\"sent\",\"ke")
            .unwrap();
        file.append(&o.enqueue("k2".into(), "cmd", json!(2), t(101)).unwrap())
            .unwrap();
        let o = file.load().unwrap();
        let keys = |now| o.due(now).iter().map(|i| i.key.clone()).collect::<Vec<_>>();
        // Two failures: 20 s before the next try.
        assert_eq!(keys(t(119)), vec!["k2".to_string()]);
        assert_eq!(keys(t(120)), vec!["k".to_string(), "k2".to_string()]);
        assert_eq!(backoff(1), Duration::from_secs(10));
        assert_eq!(backoff(3), Duration::from_secs(40));
        assert_eq!(backoff(30), Duration::from_secs(600));
    }
}
