//! Following the ledger: the records appended since the last look, for the readers that run
//! beside the daemons (export, notify: one follower per daemon feeds both, so the ledger is
//! read once). Only whole lines are taken; a line still being written is picked up on the
//! next call.

use super::{scan_bytes, Record};
use anyhow::{Context, Result};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    offset: u64,
}

/// A daemon's follower when any reader needs one (`want`), from the first record.
pub fn for_readers(path: PathBuf, want: bool) -> Option<Follower> {
    want.then(|| Follower::new(path, 0))
}

/// This tick's new records for the daemon's readers; an unreadable ledger is warned about
/// and gives none this tick (the next one reads from the same offset).
pub fn this_tick(follower: &mut Option<Follower>) -> Vec<Record> {
    match follower.as_mut().map(Follower::new_records) {
        Some(Ok(records)) => records,
        Some(Err(e)) => {
            tracing::warn!("reading the ledger's new records: {e:#}");
            Vec::new()
        }
        None => Vec::new(),
    }
}

impl Follower {
    /// Start at byte `offset` (0: from the first record).
    pub fn new(path: PathBuf, offset: u64) -> Follower {
        Follower { path, offset }
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The whole records appended since the last call (torn lines skipped, as every reader
    /// does); a missing ledger has none yet.
    pub fn new_records(&mut self) -> Result<Vec<Record>> {
        let len = match std::fs::metadata(&self.path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.path.display())),
        };
        if len <= self.offset {
            return Ok(Vec::new());
        }
        let mut f = std::fs::File::open(&self.path)
            .with_context(|| format!("reading {}", self.path.display()))?;
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.take(len - self.offset).read_to_end(&mut buf)?;
        let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
            return Ok(Vec::new());
        };
        let start = self.offset;
        self.offset += end as u64 + 1;
        // The chain check of a slice fails at its first line; the records are what is wanted.
        let mut records = scan_bytes(&buf[..=end]).records;
        for r in &mut records {
            r.offset += start;
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Entry, Kind, Ledger};

    #[test]
    fn yields_each_record_once_and_waits_for_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.jsonl");
        let mut f = Follower::new(path.clone(), 0);
        assert!(f.new_records().unwrap().is_empty());
        let ledger = Ledger::new(&path);
        let now = chrono::Utc::now();
        ledger
            .append(Entry::new(Kind::Note, "t", "r"), now)
            .unwrap();
        ledger
            .append(Entry::new(Kind::Note, "t", "r"), now)
            .unwrap();
        let got = f.new_records().unwrap();
        assert_eq!(got.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2]);
        assert!(f.new_records().unwrap().is_empty());
        // Half a line: not yet.
        use std::io::Write;
        let mut raw = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        raw.write_all(b"{\"seq\":3").unwrap();
        assert!(f.new_records().unwrap().is_empty());
        // Offsets are the file's, not the slice's.
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes[got[1].offset as usize..].starts_with(b"{\"seq\":2"));
    }
}
