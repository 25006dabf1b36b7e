//! Reading a log incrementally: [`Tail`] keeps its byte offset and reads only what was
//! appended since the last poll. It survives the log being rotated (renamed away and
//! recreated: the old file is drained first), truncated (copytruncate, a trainer reopening
//! with "w") or replaced in place (the first bytes changed). Snapshot formats
//! (trainer_state.json) are re-read whole when their size, mtime or inode changes. Event
//! files and MLflow runs are read by their own incremental [`super::Source`].

use super::lines::{feed_with, one_line, CHUNK};
use super::{Batch, LineParser, Record};
use crate::metrics::mapping::{LogFormat, MetricsConfig};
use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

const HEAD: usize = 64;

mod resume;
pub use resume::{line_start, Place, Resume};
/// What one poll found.
#[derive(Debug, Default)]
pub struct Poll {
    pub batch: Batch,
    /// The samples are the whole log (snapshot formats), not an append.
    pub snapshot: bool,
    /// Why reading started over, if it did ("rotated", "truncated", "replaced").
    pub restarted: Option<String>,
    /// The log does not exist (yet).
    pub missing: bool,
    /// Bytes read from disk by this poll.
    pub bytes_read: u64,
    /// Samples read by this poll (also those already handed to a sink).
    pub records: usize,
}

/// Hands a chunk's records on and counts them.
type Flush<'a> = dyn FnMut(&mut Vec<Record>, &mut usize) + 'a;

struct Open {
    file: File,
    id: (u64, u64),
    offset: u64,
    line_no: u64,
    partial: Vec<u8>,
    head: Vec<u8>,
}

pub struct Tail {
    path: PathBuf,
    /// `[run] log` as written when it is a pattern (`version_{version}`): re-resolved at
    /// each poll, and a newer match is read from its start.
    pattern: Option<PathBuf>,
    derive: super::derive::Derive,
    metrics: MetricsConfig,
    parser: Option<Box<dyn LineParser>>,
    /// Formats with their own reader (TensorBoard, MLflow).
    source: Option<super::Source>,
    format: LogFormat,
    open: Option<Open>,
    /// Snapshot formats: (size, mtime ns, inode) of the last read.
    seen: Option<(u64, i128, u64)>,
    /// See [`Resume::lines_from`].
    lines_from: Option<u64>,
}

impl Tail {
    pub fn new(path: &Path, format: LogFormat, metrics: &MetricsConfig) -> Result<Tail> {
        let pattern = super::locate::is_pattern(path).then(|| path.to_path_buf());
        let path = pattern
            .as_deref()
            .and_then(super::locate::resolve)
            .unwrap_or_else(|| path.to_path_buf());
        Ok(Tail {
            source: super::Source::new(format, &path, metrics),
            format,
            path,
            pattern,
            derive: super::derive::Derive::new(metrics),
            metrics: metrics.clone(),
            parser: super::line_parser(format, metrics)?,
            open: None,
            seen: None,
            lines_from: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Byte offset reached in the current file.
    pub fn offset(&self) -> u64 {
        self.open.as_ref().map_or(0, |o| o.offset)
    }

    /// Read what is new. Samples without a time of their own get the log's mtime.
    pub fn poll(&mut self) -> Result<Poll> {
        let mut all = Vec::new();
        let mut poll = self.poll_into(&mut |recs: &mut Vec<Record>| all.append(recs))?;
        poll.batch.records = all;
        Ok(poll)
    }

    /// Like [`Tail::poll`], but hands the records to `sink` a chunk at a time (the sink takes
    /// them out of the vector), so a first read of a huge log never holds all of it.
    pub fn poll_into(&mut self, sink: &mut dyn FnMut(&mut Vec<Record>)) -> Result<Poll> {
        let mut poll = Poll::default();
        if let Some(pattern) = &self.pattern {
            match super::locate::resolve(pattern) {
                None if self.open.is_none() => {
                    poll.missing = true;
                    return Ok(poll);
                }
                Some(newer) if newer != self.path => {
                    // A new launch's log: finish the old file, then read the new one whole.
                    if self.parser.is_some() && self.open.is_some() {
                        let mut derive = std::mem::take(&mut self.derive);
                        let mtime = super::mtime_secs(&self.path);
                        self.drain(&mut poll, true, &mut |recs: &mut Vec<Record>, n| {
                            derive.apply(recs, mtime);
                            *n += recs.len();
                            sink(recs);
                            recs.clear();
                        })?;
                        self.derive = derive;
                    }
                    let had_source = match self.source.as_mut() {
                        Some(src) => {
                            let mut old = Poll::default();
                            src.poll(&mut old)?;
                            let mtime = super::mtime_secs(&self.path);
                            self.derive.apply(&mut old.batch.records, mtime);
                            poll.records += old.batch.records.len();
                            sink(&mut old.batch.records);
                            !old.missing
                        }
                        None => false,
                    };
                    if self.open.is_some() || self.seen.is_some() || had_source {
                        poll.restarted =
                            Some(format!("followed by a newer log {}", newer.display()));
                    }
                    self.source = super::Source::new(self.format, &newer, &self.metrics);
                    self.path = newer;
                    self.open = None;
                    self.seen = None;
                    self.derive.reset();
                    if let Some(p) = self.parser.as_mut() {
                        p.reset();
                    }
                }
                _ => {}
            }
        }
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("stat log {}", self.path.display())),
        };
        let mtime = meta.as_ref().and_then(|m| {
            let t = m
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            Some(t.as_secs_f64())
        });
        let mut derive = std::mem::take(&mut self.derive);
        if self.is_snapshot() {
            derive.reset(); // a snapshot is the whole document again, from its first entry
        }
        let mut flush = |recs: &mut Vec<Record>, count: &mut usize| {
            derive.apply(recs, mtime);
            *count += recs.len();
            sink(recs);
            recs.clear();
        };
        let read = if let Some(src) = self.source.as_mut() {
            src.poll(&mut poll)
        } else if self.parser.is_none() {
            self.poll_snapshot(meta.as_ref(), &mut poll)
        } else {
            self.poll_lines(
                meta.as_ref(),
                &mut poll,
                &mut |recs: &mut Vec<Record>, n| flush(recs, n),
            )
        };
        if read.is_ok() {
            let mut count = poll.records;
            flush(&mut poll.batch.records, &mut count);
            poll.records = count;
        }
        self.derive = derive;
        read.map(|()| poll)
    }

    /// Whether the log is read as a whole document each time (trainer_state.json).
    pub fn is_snapshot(&self) -> bool {
        self.parser.is_none() && self.source.is_none()
    }

    fn poll_snapshot(&mut self, meta: Option<&std::fs::Metadata>, poll: &mut Poll) -> Result<()> {
        let Some(meta) = meta else {
            poll.missing = true;
            return Ok(());
        };
        let sig = (
            meta.len(),
            i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            meta.ino(),
        );
        if self.seen == Some(sig) {
            return Ok(());
        }
        let bytes = std::fs::read(&self.path)
            .with_context(|| format!("reading log {}", self.path.display()))?;
        poll.bytes_read = bytes.len() as u64;
        poll.batch = super::hf_state::parse(&bytes, &self.path, &self.metrics);
        poll.snapshot = true;
        // A document caught mid-rewrite is read again next time.
        if poll.batch.records.is_empty() && poll.batch.garbage_total > 0 {
            self.seen = None;
        } else {
            self.seen = Some(sig);
        }
        Ok(())
    }

    fn poll_lines(
        &mut self,
        meta: Option<&std::fs::Metadata>,
        poll: &mut Poll,
        flush: &mut Flush<'_>,
    ) -> Result<()> {
        let id = meta.map(|m| (m.dev(), m.ino()));
        // Rotated or replaced by a new file: finish the old one, then start on the new.
        if let Some(open) = &self.open {
            if id != Some(open.id) {
                self.drain(poll, true, flush)?;
                if id.is_some() {
                    self.open = None;
                    poll.restarted = Some("rotated".into());
                } else {
                    return Ok(()); // renamed away, not recreated yet: keep the old handle
                }
            }
        }
        let Some(meta) = meta else {
            poll.missing = true;
            return Ok(());
        };
        if self.open.is_none() {
            self.lines_from = None;
            let file = File::open(&self.path)
                .with_context(|| format!("opening log {}", self.path.display()))?;
            self.open = Some(Open {
                file,
                id: (meta.dev(), meta.ino()),
                offset: 0,
                line_no: 0,
                partial: Vec::new(),
                head: Vec::new(),
            });
        }
        let open = self.open.as_mut().expect("opened above");
        let mut head = vec![0u8; open.head.len()];
        let head_changed = !open.head.is_empty()
            && (open.file.read_exact_at(&mut head, 0).is_err() || head != open.head);
        if meta.len() < open.offset || head_changed {
            poll.restarted = Some(if meta.len() < open.offset {
                "truncated".into()
            } else {
                "replaced".into()
            });
            open.offset = 0;
            open.line_no = 0;
            self.lines_from = None;
            open.partial.clear();
            open.head.clear();
            if let Some(p) = self.parser.as_mut() {
                p.reset();
            }
        }
        let first_new = poll.batch.garbage.len();
        self.drain(poll, false, flush)?;
        self.number_lines(&mut poll.batch, first_new)
    }

    /// Read from the offset to the end of the open file. `finished`: the file will not grow
    /// any more, so a last line without newline counts.
    fn drain(&mut self, poll: &mut Poll, finished: bool, flush: &mut Flush<'_>) -> Result<()> {
        let (Some(open), Some(parser)) = (self.open.as_mut(), self.parser.as_mut()) else {
            return Ok(());
        };
        // `partial` holds the unfinished last line, and new bytes are read in right after it
        // (no second copy). It grows for a big catch-up and shrinks back for small ticks.
        let mut have = open.partial.len();
        // `resize` zero-fills, touching every page: with a 64 KiB floor a repeated `--once` on
        // an unchanged log took 13 more page faults (212 vs 199, perf stat). The loop below
        // doubles a buffer a read fills.
        let small = 4 << 10;
        // Size the buffer for what is pending: a tick's few lines need little, a first read
        // of a big log gets large chunks (parsed on all cores).
        let pending = open
            .file
            .metadata()
            .map_or(0, |m| m.len().saturating_sub(open.offset)) as usize;
        let want = (have + pending).clamp(small, CHUNK.max(have * 2));
        open.partial.resize(want, 0);
        // The previous chunk's records, handed on while the next chunk is parsed.
        let mut parsed: Vec<Record> = Vec::new();
        loop {
            if have == open.partial.len() {
                // A line longer than the buffer.
                let grown = open.partial.len() * 2;
                open.partial.resize(grown, 0);
            }
            let n = open
                .file
                .read_at(&mut open.partial[have..], open.offset)
                .with_context(|| format!("reading log {}", self.path.display()))?;
            if n == 0 {
                break;
            }
            if open.head.len() < HEAD && open.offset < HEAD as u64 {
                let take = (HEAD - open.offset as usize).min(n);
                open.head
                    .extend_from_slice(&open.partial[have..have + take]);
            }
            open.offset += n as u64;
            poll.bytes_read += n as u64;
            poll.batch.bytes += n as u64;
            crate::progress::advance(n as u64);
            have += n;
            let records = &mut poll.records;
            let used = feed_with(
                &mut **parser,
                &open.partial[..have],
                &mut open.line_no,
                &self.path,
                &mut poll.batch,
                &mut || flush(&mut parsed, records),
            );
            open.partial.copy_within(used..have, 0);
            have -= used;
            // `parsed` was emptied by the flush: it takes this chunk's records, in order.
            std::mem::swap(&mut parsed, &mut poll.batch.records);
        }
        flush(&mut parsed, &mut poll.records);
        open.partial.truncate(have);
        open.partial.shrink_to(small);
        if finished && !open.partial.is_empty() {
            open.line_no += 1;
            let line = std::mem::take(&mut open.partial);
            one_line(
                &mut **parser,
                &line,
                open.line_no,
                &self.path,
                &mut poll.batch,
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(p: &Path, s: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(p)
            .unwrap();
        f.write_all(s.as_bytes()).unwrap();
    }

    fn steps(poll: &Poll) -> Vec<u64> {
        poll.batch.records.iter().map(|s| s.step).collect()
    }

    fn tail(p: &Path) -> Tail {
        Tail::new(p, LogFormat::Jsonl, &MetricsConfig::default()).unwrap()
    }

    /// A first read of a log several chunks long is parsed on all cores while the previous
    /// chunk's records are handed on: the sink still gets every line once, in log order,
    /// with garbage numbered by its true line, and the unfinished last line waits.
    #[test]
    fn big_first_read_hands_records_on_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        let mut text = String::new();
        let lines = 700_000u64;
        for i in 1..=lines {
            if i % 250_000 == 0 {
                text.push_str("garbage\n");
            } else {
                text.push_str(&format!("{{\"step\": {i}, \"loss\": 2.5}}\n"));
            }
        }
        assert!(text.len() > 2 * CHUNK, "spans several chunks");
        text.push_str("{\"step\": 0, \"lo");
        append(&p, &text);
        let mut t = tail(&p);
        let (mut seen, mut handed) = (Vec::new(), 0);
        let poll = t
            .poll_into(&mut |recs: &mut Vec<Record>| {
                handed += usize::from(!recs.is_empty());
                seen.extend(recs.drain(..).map(|r| r.step));
            })
            .unwrap();
        let want: Vec<u64> = (1..=lines).filter(|i| i % 250_000 != 0).collect();
        assert_eq!(seen, want);
        assert!(handed > 2, "handed on a chunk at a time ({handed})");
        assert_eq!(poll.records, want.len());
        let bad: Vec<u64> = poll.batch.garbage.iter().map(|g| g.line).collect();
        assert_eq!(bad, vec![250_000, 500_000]);
        append(&p, "ss\": 1}\n");
        assert_eq!(steps(&t.poll().unwrap()), vec![0]);
    }

    #[test]
    fn reads_only_new_complete_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        let mut t = tail(&p);
        assert!(t.poll().unwrap().missing);
        append(&p, "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"lo");
        let first = t.poll().unwrap();
        assert_eq!(steps(&first), vec![1]);
        assert!(first.batch.records[0].time.is_some(), "mtime stands in");
        append(&p, "ss\": 2}\n");
        let second = t.poll().unwrap();
        assert_eq!(steps(&second), vec![2]);
        assert_eq!(second.bytes_read, 8, "only the appended bytes are read");
        let idle = t.poll().unwrap();
        assert_eq!((idle.bytes_read, idle.batch.records.len()), (0, 0));
    }

    #[test]
    fn survives_truncation_rotation_and_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        let mut t = tail(&p);
        append(&p, "{\"step\": 1}\n{\"step\": 2}\n");
        assert_eq!(steps(&t.poll().unwrap()), vec![1, 2]);

        std::fs::write(&p, "{\"step\": 3}\n").unwrap(); // truncated and rewritten shorter
        let poll = t.poll().unwrap();
        assert_eq!(
            (steps(&poll), poll.restarted.as_deref()),
            (vec![3], Some("truncated"))
        );

        append(&p, "{\"step\": 4}\n{\"step\": 5}"); // last line still being written
        let rotated = dir.path().join("log.jsonl.1");
        std::fs::rename(&p, &rotated).unwrap();
        assert_eq!(steps(&t.poll().unwrap()), vec![4, 5], "old file drained");
        append(&p, "{\"step\": 6}\n");
        let poll = t.poll().unwrap();
        assert_eq!(
            (steps(&poll), poll.restarted.as_deref()),
            (vec![6], Some("rotated"))
        );

        // Same inode, rewritten in place to a longer file: the head changed.
        let long = "{\"step\": 7, \"loss\": 1.0}\n{\"step\": 8, \"loss\": 1.0}\n";
        std::fs::write(&p, long).unwrap();
        let poll = t.poll().unwrap();
        assert_eq!(
            (steps(&poll), poll.restarted.as_deref()),
            (vec![7, 8], Some("replaced"))
        );
    }

    #[test]
    fn garbage_lines_are_numbered_and_reading_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        std::fs::write(&p, "{\"step\": 1}\noops\n{\"step\": 2}\n").unwrap();
        let mut t = tail(&p);
        let poll = t.poll().unwrap();
        assert_eq!(steps(&poll), vec![1, 2]);
        assert_eq!(poll.batch.garbage[0].line, 2);
        assert_eq!(
            poll.batch.garbage[0].to_string(),
            format!("{}:2: expected a JSON object, found \"oops\"", p.display())
        );
    }

    /// Issue 18 item 7: a `{version}` log follows the newest launch's directory.
    #[test]
    fn a_version_pattern_follows_the_newest_launch() {
        let dir = tempfile::tempdir().unwrap();
        let v = |n: u32| dir.path().join(format!("logs/version_{n}/m.jsonl"));
        let pattern = dir.path().join("logs/version_{version}/m.jsonl");
        let mut t = Tail::new(&pattern, LogFormat::Jsonl, &MetricsConfig::default()).unwrap();
        assert!(t.poll().unwrap().missing, "nothing matches yet");
        std::fs::create_dir_all(v(0).parent().unwrap()).unwrap();
        append(&v(0), "{\"step\": 1}\n{\"step\": 2}\n");
        assert_eq!(steps(&t.poll().unwrap()), vec![1, 2]);
        append(&v(0), "{\"step\": 3}");
        std::fs::create_dir_all(v(1).parent().unwrap()).unwrap();
        append(&v(1), "{\"step\": 2}\n");
        let poll = t.poll().unwrap();
        assert_eq!(
            steps(&poll),
            vec![3, 2],
            "the old file finished, then the new one"
        );
        assert!(poll.restarted.unwrap().contains("version_1"));
        append(&v(1), "{\"step\": 4}\n");
        assert_eq!(steps(&t.poll().unwrap()), vec![4]);
        assert_eq!(t.path(), v(1));
    }

    #[test]
    fn snapshot_is_reread_only_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("trainer_state.json");
        std::fs::write(&p, r#"{"log_history": [{"step": 1, "loss": 2.0}]}"#).unwrap();
        let mut t = Tail::new(&p, LogFormat::HfTrainerState, &MetricsConfig::default()).unwrap();
        let poll = t.poll().unwrap();
        assert!(poll.snapshot);
        assert_eq!(steps(&poll), vec![1]);
        assert_eq!(t.poll().unwrap().bytes_read, 0);
        std::fs::write(
            &p,
            r#"{"log_history": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.9}]}"#,
        )
        .unwrap();
        assert_eq!(steps(&t.poll().unwrap()), vec![1, 2]);
    }
}
