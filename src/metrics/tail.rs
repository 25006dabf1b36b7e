//! Reading a log incrementally: [`Tail`] keeps its byte offset and reads only what was
//! appended since the last poll. It survives the log being rotated (renamed away and
//! recreated: the old file is drained first), truncated (copytruncate, a trainer reopening
//! with "w") or replaced in place (the first bytes changed). Snapshot formats
//! (trainer_state.json) are re-read whole when their size, mtime or inode changes.
//! [`LineReader`] is the chunked line splitter both this and `read_all` use.

use super::{Garbage, LineParser, Parsed, ReadOutcome};
use crate::config::{LogFormat, MetricsConfig};
use anyhow::{Context, Result};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

const CHUNK: usize = 4 << 20;
const HEAD: usize = 64;

/// Split complete lines out of `data` and parse them; returns the bytes consumed (through
/// the last newline).
pub fn feed(
    parser: &mut dyn LineParser,
    data: &[u8],
    line_no: &mut u64,
    path: &Path,
    out: &mut ReadOutcome,
) -> usize {
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', data) {
        *line_no += 1;
        one_line(parser, &data[start..nl], *line_no, path, out);
        start = nl + 1;
    }
    start
}

fn one_line(
    parser: &mut dyn LineParser,
    line: &[u8],
    line_no: u64,
    path: &Path,
    out: &mut ReadOutcome,
) {
    match parser.parse(line) {
        Parsed::Sample(s) => out.samples.push(s),
        Parsed::Skip => {}
        Parsed::Garbage(why) => out.push_garbage(Garbage {
            file: path.to_path_buf(),
            line: line_no,
            why,
        }),
    }
}

/// Reads a whole file in large chunks, line by line.
pub struct LineReader<'a> {
    file: File,
    path: &'a Path,
}

impl<'a> LineReader<'a> {
    pub fn new(file: File, path: &'a Path) -> LineReader<'a> {
        LineReader { file, path }
    }

    /// Every line, the last one even without its newline (the file is taken as finished).
    pub fn read_to_end(
        &mut self,
        parser: &mut dyn LineParser,
        out: &mut ReadOutcome,
    ) -> Result<()> {
        let mut buf = vec![0u8; CHUNK];
        let mut have = 0;
        let mut line_no = 0;
        loop {
            if have == buf.len() {
                buf.resize(buf.len() * 2, 0); // a line longer than the buffer
            }
            let n = self
                .file
                .read(&mut buf[have..])
                .with_context(|| format!("reading log {}", self.path.display()))?;
            out.bytes += n as u64;
            if n == 0 {
                if have > 0 {
                    one_line(parser, &buf[..have], line_no + 1, self.path, out);
                }
                return Ok(());
            }
            have += n;
            let used = feed(parser, &buf[..have], &mut line_no, self.path, out);
            buf.copy_within(used..have, 0);
            have -= used;
        }
    }
}

/// What one poll found.
#[derive(Debug, Default)]
pub struct Poll {
    pub outcome: ReadOutcome,
    /// The samples are the whole log (snapshot formats), not an append.
    pub snapshot: bool,
    /// Why reading started over, if it did ("rotated", "truncated", "replaced").
    pub restarted: Option<String>,
    /// The log does not exist (yet).
    pub missing: bool,
    /// Bytes read from disk by this poll.
    pub bytes_read: u64,
}

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
    metrics: MetricsConfig,
    parser: Option<Box<dyn LineParser>>,
    open: Option<Open>,
    /// Snapshot formats: (size, mtime ns, inode) of the last read.
    seen: Option<(u64, i128, u64)>,
}

impl Tail {
    pub fn new(path: &Path, format: LogFormat, metrics: &MetricsConfig) -> Result<Tail> {
        Ok(Tail {
            path: path.to_path_buf(),
            metrics: metrics.clone(),
            parser: super::line_parser(format, metrics)?,
            open: None,
            seen: None,
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
        let mut poll = Poll::default();
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("stat log {}", self.path.display())),
        };
        if self.parser.is_none() {
            self.poll_snapshot(meta.as_ref(), &mut poll)?;
        } else {
            self.poll_lines(meta.as_ref(), &mut poll)?;
        }
        let mtime = super::mtime_secs(&self.path);
        for s in &mut poll.outcome.samples {
            if s.time.is_none() {
                s.time = mtime;
            }
        }
        Ok(poll)
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
        poll.outcome = super::hf_state::parse(&bytes, &self.path, &self.metrics);
        poll.snapshot = true;
        // A document caught mid-rewrite is read again next time.
        if poll.outcome.samples.is_empty() && poll.outcome.garbage_total > 0 {
            self.seen = None;
        } else {
            self.seen = Some(sig);
        }
        Ok(())
    }

    fn poll_lines(&mut self, meta: Option<&std::fs::Metadata>, poll: &mut Poll) -> Result<()> {
        let id = meta.map(|m| (m.dev(), m.ino()));
        // Rotated or replaced by a new file: finish the old one, then start on the new.
        if let Some(open) = &self.open {
            if id != Some(open.id) {
                self.drain(poll, true)?;
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
            open.partial.clear();
            open.head.clear();
            if let Some(p) = self.parser.as_mut() {
                p.reset();
            }
        }
        self.drain(poll, false)
    }

    /// Read from the offset to the end of the open file. `finished`: the file will not grow
    /// any more, so a last line without newline counts.
    fn drain(&mut self, poll: &mut Poll, finished: bool) -> Result<()> {
        let (Some(open), Some(parser)) = (self.open.as_mut(), self.parser.as_mut()) else {
            return Ok(());
        };
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = open
                .file
                .read_at(&mut buf, open.offset)
                .with_context(|| format!("reading log {}", self.path.display()))?;
            if n == 0 {
                break;
            }
            if open.head.len() < HEAD && open.offset < HEAD as u64 {
                let take = (HEAD - open.offset as usize).min(n);
                open.head.extend_from_slice(&buf[..take]);
            }
            open.offset += n as u64;
            poll.bytes_read += n as u64;
            poll.outcome.bytes += n as u64;
            open.partial.extend_from_slice(&buf[..n]);
            let used = feed(
                &mut **parser,
                &open.partial,
                &mut open.line_no,
                &self.path,
                &mut poll.outcome,
            );
            open.partial.drain(..used);
            if buf.len() < CHUNK {
                buf.resize(CHUNK, 0);
            }
        }
        if finished && !open.partial.is_empty() {
            open.line_no += 1;
            let line = std::mem::take(&mut open.partial);
            one_line(
                &mut **parser,
                &line,
                open.line_no,
                &self.path,
                &mut poll.outcome,
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
        poll.outcome.samples.iter().map(|s| s.step).collect()
    }

    fn tail(p: &Path) -> Tail {
        Tail::new(p, LogFormat::Jsonl, &MetricsConfig::default()).unwrap()
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
        assert!(first.outcome.samples[0].time.is_some(), "mtime stands in");
        append(&p, "ss\": 2}\n");
        let second = t.poll().unwrap();
        assert_eq!(steps(&second), vec![2]);
        assert_eq!(second.bytes_read, 8, "only the appended bytes are read");
        let idle = t.poll().unwrap();
        assert_eq!((idle.bytes_read, idle.outcome.samples.len()), (0, 0));
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
        assert_eq!(poll.outcome.garbage[0].line, 2);
        assert_eq!(
            poll.outcome.garbage[0].to_string(),
            format!("{}:2: expected a JSON object, found \"oops\"", p.display())
        );
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
