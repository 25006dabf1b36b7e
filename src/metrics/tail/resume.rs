//! Carrying a [`Tail`]'s place to another process (the critic's summary cache), and
//! starting one part-way into a log (a first look at its end): the file must still be the
//! same one, the parser is settled on the file's header first, and line numbers are counted
//! only when a garbage line needs them.

use super::{one_line, Batch, Open, Tail, CHUNK, HEAD};
use crate::metrics::mapping::{LogFormat, MetricsConfig};
use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

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
    /// As byte strings: a sequence of numbers made every cached check decode thousands
    /// of integers one by one.
    #[serde(with = "serde_bytes")]
    pub head: Vec<u8>,
    /// The bytes just before `offset`.
    #[serde(with = "serde_bytes")]
    pub before: Vec<u8>,
    /// Leading bytes fed to a fresh parser to settle it (a CSV header).
    pub prime: u64,
    /// The file's size and mtime (ns) when this was taken.
    pub size: u64,
    pub mtime_ns: i128,
    pub derive: crate::metrics::derive::Derive,
}

/// Where any resumable read stands: a line-based log's, or a TensorBoard/MLflow reader's.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Place {
    Lines(Resume),
    Source {
        path: PathBuf,
        derive: crate::metrics::derive::Derive,
        state: crate::metrics::SourcePlace,
    },
}

impl Tail {
    /// Where this read stands, whatever the format reads like; `None` when it cannot be
    /// carried over (a snapshot format, a pattern, samples timed by the file's mtime).
    pub fn place(&self) -> Option<Place> {
        match &self.source {
            None => self.resume_state().map(Place::Lines),
            Some(_) if self.pattern.is_some() || self.derive.used_mtime => None,
            Some(src) => Some(Place::Source {
                path: self.path.clone(),
                derive: self.derive.clone(),
                state: src.place()?,
            }),
        }
    }

    /// A tail that goes on where `p` stood, or why not (the caller reads the log afresh).
    pub fn from_place(
        path: &Path,
        format: LogFormat,
        m: &MetricsConfig,
        p: &Place,
    ) -> Result<Tail, String> {
        match p {
            Place::Lines(r) => Tail::resume(path, format, m, r),
            Place::Source {
                path: was,
                derive,
                state,
            } => {
                let mut tail = Tail::new(path, format, m).map_err(|e| format!("{e:#}"))?;
                if tail.pattern.is_some() {
                    return Err("a pattern".into());
                }
                if &tail.path != was {
                    return Err(format!("the log is now {}", tail.path.display()));
                }
                tail.source
                    .as_mut()
                    .ok_or("not read by its own reader now")?
                    .resume(state)?;
                tail.derive = derive.clone();
                Ok(tail)
            }
        }
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
        if !crate::metrics::still_holds(&file, &r.head, &r.before, r.offset) {
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
            derive: crate::metrics::derive::Derive::new(m),
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
        if crate::metrics::locate::is_pattern(path) {
            return Err("a pattern".into());
        }
        let file = File::open(path).map_err(|e| format!("opening the log: {e}"))?;
        let size = file.metadata().map_err(|e| format!("stat: {e}"))?.len();
        let from = line_start(&file, size.saturating_sub(bytes))?;
        Tail::starting_at(path, format, m, from)
    }

    /// Give the garbage of this read its real line numbers (lines before the start of a read
    /// from the end are counted now, once).
    pub(super) fn number_lines(&mut self, batch: &mut Batch, first_new: usize) -> Result<()> {
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
    let mut parser = crate::metrics::line_parser(format, m).ok()??;
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
