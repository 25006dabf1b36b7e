//! Reading a log incrementally: [`Tail`] keeps its byte offset and reads only what was
//! appended since the last poll. It survives the log being rotated (renamed away and
//! recreated: the old file is drained first), truncated (copytruncate, a trainer reopening
//! with "w") or replaced in place (the first bytes changed). Snapshot formats
//! (trainer_state.json) are re-read whole when their size, mtime or inode changes. Event
//! files and MLflow runs are read by their own incremental [`super::Source`].

use super::lines::{feed, one_line, CHUNK};
use super::{Batch, LineParser, Record};
use crate::config::{LogFormat, MetricsConfig};
use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

const HEAD: usize = 64;
/// Bytes before the resume offset a [`Resume`] remembers (a log rewritten in place differs
/// there); leading bytes allowed to settle a parser (a CSV header).
const BEFORE: usize = 4096;
const PRIME_MAX: usize = 64 << 10;

/// Where a line-based read stands, for a later process to go on from (the critic's summary
/// cache): only valid while the file is the same one, grown at most.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Resume {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    /// Through the last complete line read, and its line number.
    pub offset: u64,
    pub line_no: u64,
    /// Lines before this byte were never counted (a read that began near the end):
    /// `line_no` counts from there until a garbage line needs the real number.
    pub lines_from: Option<u64>,
    pub head: Vec<u8>,
    /// The bytes just before `offset`.
    pub before: Vec<u8>,
    /// Leading bytes fed to a fresh parser to settle it (a CSV header).
    pub prime: u64,
    /// The file's size and mtime (ns) when this was taken.
    pub size: u64,
    pub mtime_ns: i128,
    pub derive: super::derive::Derive,
}

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

    /// Where this read stands, for [`Tail::resume`]; `None` for formats that are not
    /// line-based, a file not open, or a parser not settled within its first lines.
    pub fn resume_state(&self) -> Option<Resume> {
        let open = self.open.as_ref()?;
        if self.source.is_some() || self.pattern.is_some() {
            return None;
        }
        let parser = self.parser.as_ref()?;
        parser.fork()?;
        let offset = open.offset - open.partial.len() as u64;
        let start = offset.saturating_sub(BEFORE as u64);
        let mut before = vec![0u8; (offset - start) as usize];
        open.file.read_exact_at(&mut before, start).ok()?;
        let prime = prime_len(&self.metrics, self.format, &open.file)?;
        let meta = open.file.metadata().ok()?;
        Some(Resume {
            size: meta.len(),
            mtime_ns: mtime_ns(&meta),
            path: self.path.clone(),
            dev: open.id.0,
            ino: open.id.1,
            offset,
            line_no: open.line_no,
            lines_from: self.lines_from,
            head: open.head.clone(),
            before,
            prime,
            derive: self.derive.clone(),
        })
    }

    /// A tail that goes on where `r` stood, or why not (another file, truncated, rewritten:
    /// the caller reads the log afresh).
    pub fn resume(
        path: &Path,
        format: LogFormat,
        m: &MetricsConfig,
        r: &Resume,
    ) -> Result<Tail, String> {
        let mut tail = Tail::new(path, format, m).map_err(|e| format!("{e:#}"))?;
        if tail.pattern.is_some() || tail.source.is_some() || tail.parser.is_none() {
            return Err("not a single line-based log".into());
        }
        if tail.path != r.path {
            return Err(format!("the log is now {}", tail.path.display()));
        }
        let file = File::open(&tail.path).map_err(|e| format!("opening the log: {e}"))?;
        let meta = file.metadata().map_err(|e| format!("stat: {e}"))?;
        if (meta.dev(), meta.ino()) != (r.dev, r.ino) {
            return Err("another file now (inode changed)".into());
        }
        if meta.len() < r.offset {
            return Err(format!(
                "truncated ({} < {} bytes read)",
                meta.len(),
                r.offset
            ));
        }
        if r.derive.used_mtime && (meta.len(), mtime_ns(&meta)) != (r.size, r.mtime_ns) {
            // Its samples are timed by the mtime, which a read now would give them all.
            return Err("changed, and its samples are timed by its mtime".into());
        }
        let same_at = |at: u64, want: &[u8]| {
            let mut got = vec![0u8; want.len()];
            file.read_exact_at(&mut got, at).is_ok() && got == want
        };
        if !same_at(0, &r.head) || !same_at(r.offset - r.before.len() as u64, &r.before) {
            return Err("rewritten (bytes already read changed)".into());
        }
        if prime_len(m, format, &file) != Some(r.prime) {
            return Err("its header changed".into());
        }
        let parser = tail.parser.as_mut().expect("checked");
        let mut prime = vec![0u8; r.prime as usize];
        file.read_exact_at(&mut prime, 0)
            .map_err(|e| format!("reading the header: {e}"))?;
        let mut scratch = Batch::default();
        let mut line_no = 0;
        for line in prime.split_inclusive(|&c| c == b'\n') {
            line_no += 1;
            one_line(
                &mut **parser,
                line.strip_suffix(b"\n").unwrap_or(line),
                line_no,
                &tail.path,
                &mut scratch,
            );
        }
        tail.open = Some(Open {
            file,
            id: (r.dev, r.ino),
            offset: r.offset,
            line_no: r.line_no,
            partial: Vec::new(),
            // What was read past `offset` (a partial line) is read again, head included.
            head: r.head[..r.head.len().min(r.offset as usize)].to_vec(),
        });
        tail.derive = r.derive.clone();
        tail.lines_from = r.lines_from;
        Ok(tail)
    }

    /// A tail that starts reading at `offset` (a line start) instead of the beginning: the
    /// parser is settled on the file's header first. Line numbers count from there until a
    /// garbage line needs the real one.
    pub fn starting_at(
        path: &Path,
        format: LogFormat,
        m: &MetricsConfig,
        offset: u64,
    ) -> Result<Tail, String> {
        let file = File::open(path).map_err(|e| format!("opening the log: {e}"))?;
        let meta = file.metadata().map_err(|e| format!("stat: {e}"))?;
        let prime = prime_len(m, format, &file).ok_or("its header is not settled")?;
        if offset < prime {
            return Err("the offset is inside the header".into());
        }
        let mut head = vec![0u8; (meta.len().min(HEAD as u64)) as usize];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| format!("reading the log: {e}"))?;
        let mut before = vec![0u8; offset.min(BEFORE as u64) as usize];
        let start = offset - before.len() as u64;
        file.read_exact_at(&mut before, start)
            .map_err(|e| format!("reading the log: {e}"))?;
        let r = Resume {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
            offset,
            line_no: 0,
            lines_from: Some(offset),
            head,
            before,
            prime,
            size: meta.len(),
            mtime_ns: mtime_ns(&meta),
            derive: super::derive::Derive::new(m),
        };
        Tail::resume(path, format, m, &r)
    }

    /// A tail that starts at the last line start at least `bytes` before the end of the
    /// log (a line-based log only): for a first look that needs only the newest lines.
    pub fn near_end(
        path: &Path,
        format: LogFormat,
        m: &MetricsConfig,
        bytes: u64,
    ) -> Result<Tail, String> {
        if super::locate::is_pattern(path) {
            return Err("a pattern".into());
        }
        let file = File::open(path).map_err(|e| format!("opening the log: {e}"))?;
        let size = file.metadata().map_err(|e| format!("stat: {e}"))?.len();
        let from = line_start(&file, size.saturating_sub(bytes))?;
        Tail::starting_at(path, format, m, from)
    }

    /// Give the garbage of this read its real line numbers (lines before the start of a read
    /// from the end are counted now, once).
    fn number_lines(&mut self, batch: &mut Batch, first_new: usize) -> Result<()> {
        let (Some(from), Some(open)) = (self.lines_from, self.open.as_mut()) else {
            return Ok(());
        };
        if batch.garbage_total == 0 {
            return Ok(());
        }
        let mut before = 0u64;
        let mut buf = vec![0u8; CHUNK];
        let mut at = 0;
        while at < from {
            let want = ((from - at) as usize).min(buf.len());
            let n = open
                .file
                .read_at(&mut buf[..want], at)
                .with_context(|| format!("reading log {}", self.path.display()))?;
            if n == 0 {
                break;
            }
            before += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
            at += n as u64;
        }
        for g in &mut batch.garbage[first_new..] {
            g.line += before;
        }
        open.line_no += before;
        self.lines_from = None;
        Ok(())
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
        let small = 64 << 10;
        // Size the buffer for what is pending: a tick's few lines need little, a first read
        // of a big log gets large chunks (parsed on all cores).
        let pending = open
            .file
            .metadata()
            .map_or(0, |m| m.len().saturating_sub(open.offset)) as usize;
        let want = (have + pending).clamp(small, CHUNK.max(have * 2));
        open.partial.resize(want, 0);
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
            have += n;
            let used = feed(
                &mut **parser,
                &open.partial[..have],
                &mut open.line_no,
                &self.path,
                &mut poll.batch,
            );
            open.partial.copy_within(used..have, 0);
            have -= used;
            flush(&mut poll.batch.records, &mut poll.records);
        }
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

/// The first line start at or after `at`.
pub fn line_start(file: &File, at: u64) -> Result<u64, String> {
    let mut buf = vec![0u8; 64 << 10];
    let mut pos = at.saturating_sub(1); // `at` itself starts a line when the byte before is \n
    loop {
        let n = file
            .read_at(&mut buf, pos)
            .map_err(|e| format!("reading the log: {e}"))?;
        if n == 0 {
            return Ok(pos);
        }
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            return Ok(pos + i as u64 + 1);
        }
        pos += n as u64;
    }
}

fn mtime_ns(m: &std::fs::Metadata) -> i128 {
    i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec())
}

/// How many leading bytes (whole lines) a fresh parser needs before it can be forked: 0 for
/// JSONL and text, the header for CSV; `None` when not settled within [`PRIME_MAX`].
fn prime_len(m: &MetricsConfig, format: LogFormat, file: &File) -> Option<u64> {
    let mut parser = super::line_parser(format, m).ok()??;
    if parser.fork().is_some() {
        return Some(0);
    }
    let mut buf = vec![0u8; PRIME_MAX];
    let n = file.read_at(&mut buf, 0).ok()?;
    let mut scratch = Batch::default();
    let mut used = 0;
    for (i, line) in buf[..n].split_inclusive(|&c| c == b'\n').enumerate() {
        if !line.ends_with(b"\n") {
            return None;
        }
        one_line(
            &mut *parser,
            &line[..line.len() - 1],
            i as u64 + 1,
            Path::new(""),
            &mut scratch,
        );
        used += line.len();
        if parser.fork().is_some() {
            return Some(used as u64);
        }
    }
    None
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
