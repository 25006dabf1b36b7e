//! The training's own metrics log turned into [`Sample`]s: the shared types, the key mapping
//! from `[metrics]`, and [`read_all`] for a whole log. Formats live in their own files; the
//! incremental reader (offset, rotation, truncation) is [`tail`]. No judging here.

pub mod csv;
pub mod derive;
mod fields;
pub mod framed;
pub mod hf_state;
pub mod jsonl;
pub mod kv;
pub mod lines;
pub mod locate;
pub mod mapping;
pub mod mlflow;
pub mod num;
pub mod packed;
pub mod tail;
pub mod tb_event;
pub mod tensorboard;
pub mod text;
pub mod tfrecord;
pub mod trainers;
pub mod wandb;

use crate::metrics::mapping::{LogFormat, MetricsConfig};
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use fields::{Fields, Keys, Target};
pub use num::{clean_line, parse_num, parse_time};

/// Canonical metric names, the keys of [`Sample::values`].
pub const LOSS: &str = "loss";
pub const LR: &str = "lr";
pub const GRAD_NORM: &str = "grad_norm";
pub const TOKENS_PER_S: &str = "tokens_per_s";
pub const VRAM_GIB: &str = "vram_gib";
pub const EVAL_LOSS: &str = "eval_loss";
pub const METRICS: [&str; 6] = [LOSS, LR, GRAD_NORM, TOKENS_PER_S, VRAM_GIB, EVAL_LOSS];
/// The lr of parameter groups 2.. (`[metrics] lr` lists one key per group; group 1 is `lr`).
pub const LR_GROUPS: [&str; 4] = [LR, "lr#2", "lr#3", "lr#4"];
/// The run's planned last step, as the trainer logs it.
pub const TOTAL_STEPS: &str = "total_steps";
/// A cumulative token counter (turned into tokens/s by [`derive`]).
pub const TOKENS: &str = "tokens";
/// An eval metric where higher is better (accuracy, top-1, mAP): the overfitting check
/// reads it beside the eval loss (a loss rising while the score still improves is the
/// model growing confident, not overfitting).
pub const EVAL_SCORE: &str = "eval_score";
/// How many slots a [`Record`] has.
pub const N_SLOTS: usize = 12;
/// Every slot of a [`Record`]: the judged [`METRICS`] first, then what feeds them.
pub const SLOTS: [&str; N_SLOTS] = [
    LOSS,
    LR,
    GRAD_NORM,
    TOKENS_PER_S,
    VRAM_GIB,
    EVAL_LOSS,
    LR_GROUPS[1],
    LR_GROUPS[2],
    LR_GROUPS[3],
    TOTAL_STEPS,
    TOKENS,
    EVAL_SCORE,
];
/// Index in [`SLOTS`].
pub fn slot(name: &str) -> Option<usize> {
    SLOTS.iter().position(|m| *m == name)
}
pub(crate) const TOTAL_SLOT: usize = 9;
pub(crate) const TOKENS_SLOT: usize = 10;
pub(crate) const EVAL_SCORE_SLOT: usize = 11;
pub(crate) const TPS_SLOT: usize = 3;

/// Garbage lines kept with their reason; beyond this only the count grows.
pub const GARBAGE_KEPT: usize = 100;

/// One logged point of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    pub step: u64,
    /// Unix seconds: the log's own time, else when roger saw it (or the file's mtime).
    pub time: Option<f64>,
    /// Canonical metric names ([`METRICS`]) → value; NaN/Inf are kept as such.
    pub values: BTreeMap<String, f64>,
}

impl Sample {
    pub fn get(&self, metric: &str) -> Option<f64> {
        self.values.get(metric).copied()
    }
}

/// A sample as the readers produce it: fixed slots instead of a map, so reading a large log
/// allocates nothing per line. [`Sample`] is its public, map-shaped form.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Record {
    pub step: u64,
    pub time: Option<f64>,
    /// Indexed like [`SLOTS`].
    pub values: [Option<f64>; N_SLOTS],
}

impl Record {
    pub fn get(&self, metric: &str) -> Option<f64> {
        slot(metric).and_then(|i| self.values[i])
    }

    /// The planned last step, when this line says it.
    pub fn total_steps(&self) -> Option<u64> {
        self.values[TOTAL_SLOT]
            .and_then(fields::as_step)
            .filter(|t| *t > 0)
    }

    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }

    pub fn to_sample(&self) -> Sample {
        Sample {
            step: self.step,
            time: self.time,
            values: SLOTS
                .iter()
                .zip(self.values)
                .filter_map(|(m, v)| v.map(|v| (m.to_string(), v)))
                .collect(),
        }
    }
}

impl From<&Sample> for Record {
    fn from(s: &Sample) -> Record {
        let mut values = [None; N_SLOTS];
        for (i, m) in SLOTS.iter().enumerate() {
            values[i] = s.get(m);
        }
        Record {
            step: s.step,
            time: s.time,
            values,
        }
    }
}

impl From<Sample> for Record {
    fn from(s: Sample) -> Record {
        Record::from(&s)
    }
}

/// A line that could not be read, and why. It is counted and reported, never fatal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Garbage {
    pub file: PathBuf,
    /// 1-based line number (1 for whole-document formats).
    pub line: u64,
    pub why: String,
}

impl std::fmt::Display for Garbage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.why)
    }
}

#[derive(Debug, Default, Clone)]
pub struct ReadOutcome {
    pub samples: Vec<Sample>,
    /// The first [`GARBAGE_KEPT`] garbage lines.
    pub garbage: Vec<Garbage>,
    /// All garbage lines, including those not kept.
    pub garbage_total: u64,
    pub bytes: u64,
}

/// What a read produced, in the readers' compact form.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    pub records: Vec<Record>,
    /// The first [`GARBAGE_KEPT`] garbage lines.
    pub garbage: Vec<Garbage>,
    pub garbage_total: u64,
    pub bytes: u64,
}

impl Batch {
    pub fn push_garbage(&mut self, g: Garbage) {
        self.garbage_total += 1;
        if self.garbage.len() < GARBAGE_KEPT {
            self.garbage.push(g);
        }
    }
}

/// What one line of a line-based log holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    Sample(Record),
    /// A sample with one mapped field that could not be read: the rest is used, the field
    /// is reported.
    Partial(Record, String),
    /// Nothing to read (blank, a header, a text line no pattern matches).
    Skip,
    Garbage(String),
}

/// A line-based format. Stateful only where the format is (the CSV header).
pub trait LineParser: Send {
    fn parse(&mut self, line: &[u8]) -> Parsed;
    /// The file started over (truncated or replaced): forget per-file state.
    fn reset(&mut self);
    /// A copy that parses any later line the same way, for reading large stretches on
    /// several threads; None while the state is not settled (a CSV header not yet read).
    fn fork(&self) -> Option<Box<dyn LineParser>>;
}

/// The parser for a line-based format (`None` for the others).
pub fn line_parser(format: LogFormat, m: &MetricsConfig) -> Result<Option<Box<dyn LineParser>>> {
    Ok(match format {
        LogFormat::Jsonl => Some(Box::new(jsonl::JsonlParser::new(m))),
        LogFormat::Csv => Some(Box::new(csv::CsvParser::new(m))),
        LogFormat::Text => Some(Box::new(text::TextParser::new(m)?)),
        LogFormat::KeyValue => Some(Box::new(kv::KvParser::new(m))),
        LogFormat::HfTrainerState
        | LogFormat::Tensorboard
        | LogFormat::Mlflow
        | LogFormat::Wandb => None,
    })
}

/// The up to `len` bytes of `file` right before `offset`: what a carried-over read remembers
/// (with the file's head) so that `reopen_at` notices a file rewritten in place.
pub fn bytes_before(file: &std::fs::File, offset: u64, len: usize) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let start = offset.saturating_sub(len as u64);
    let mut before = vec![0u8; (offset - start) as usize];
    file.read_exact_at(&mut before, start).ok()?;
    Some(before)
}

/// Reopen `path` to go on reading at `offset`, as a carried-over read remembers it, or say why
/// not: another file now (device and inode `id`), shorter than `offset`, or rewritten in place
/// (`still_holds`).
pub fn reopen_at(
    path: &Path,
    id: (u64, u64),
    offset: u64,
    head: &[u8],
    before: &[u8],
) -> Result<std::fs::File, String> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    let meta = file.metadata().map_err(|e| format!("stat: {e}"))?;
    if (meta.dev(), meta.ino()) != id {
        return Err(format!("{} is another file now", path.display()));
    }
    if meta.len() < offset {
        return Err(format!("{} was truncated", path.display()));
    }
    if !still_holds(&file, head, before, offset) {
        return Err(format!(
            "{} was rewritten (bytes already read changed)",
            path.display()
        ));
    }
    Ok(file)
}

/// Whether `file` still holds `head` at its start and `before` just before `offset`: the
/// bytes a carried-over read remembers to notice a file rewritten in place.
pub fn still_holds(file: &std::fs::File, head: &[u8], before: &[u8], offset: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let same_at = |at: u64, want: &[u8]| {
        let mut got = vec![0u8; want.len()];
        file.read_exact_at(&mut got, at).is_ok() && got == want
    };
    offset >= before.len() as u64
        && same_at(0, head)
        && same_at(offset - before.len() as u64, before)
}

/// A log of several files or binary records, read incrementally by its own reader.
pub enum Source {
    Events(Box<tensorboard::EventLog>),
    Mlflow(Box<mlflow::MlflowRun>),
    Wandb(Box<wandb::WandbRun>),
}

/// Where a [`Source`]'s read stands, for a later process to go on from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum SourcePlace {
    Events(tensorboard::EventsPlace),
    Mlflow(mlflow::MlflowPlace),
    Wandb(wandb::WandbPlace),
}

impl Source {
    /// Where the read stands; `None` when there is nothing to go on from.
    pub fn place(&self) -> Option<SourcePlace> {
        match self {
            Source::Events(e) => e.place().map(SourcePlace::Events),
            Source::Mlflow(m) => m.place().map(SourcePlace::Mlflow),
            Source::Wandb(w) => w.place().map(SourcePlace::Wandb),
        }
    }

    /// Go on where `p` stood, or say why not.
    pub fn resume(&mut self, p: &SourcePlace) -> Result<(), String> {
        match (self, p) {
            (Source::Events(e), SourcePlace::Events(p)) => e.resume(p),
            (Source::Mlflow(m), SourcePlace::Mlflow(p)) => m.resume(p),
            (Source::Wandb(w), SourcePlace::Wandb(p)) => w.resume(p),
            _ => Err("the log's format changed".into()),
        }
    }

    /// The reader for `format` at `path` (`None` for line-based and snapshot formats).
    pub fn new(format: LogFormat, path: &Path, m: &MetricsConfig) -> Option<Source> {
        match format {
            LogFormat::Tensorboard => Some(Source::Events(Box::new(tensorboard::EventLog::new(
                path, m,
            )))),
            LogFormat::Mlflow => Some(Source::Mlflow(Box::new(mlflow::MlflowRun::new(path, m)))),
            LogFormat::Wandb => Some(Source::Wandb(Box::new(wandb::WandbRun::new(path, m)))),
            LogFormat::Jsonl
            | LogFormat::Csv
            | LogFormat::Text
            | LogFormat::KeyValue
            | LogFormat::HfTrainerState => None,
        }
    }

    /// Read what is new into `poll` (records, garbage, bytes, restarts, missing).
    pub fn poll(&mut self, poll: &mut tail::Poll) -> Result<()> {
        match self {
            Source::Events(e) => e.poll(poll),
            Source::Mlflow(m) => m.poll(poll),
            Source::Wandb(w) => w.poll(poll),
        }
    }
}

/// Read a whole log (a `[run] log` pattern reads its newest match). Samples without a time
/// of their own get the file's mtime (the last moment the log was written).
pub fn read_all(path: &Path, format: LogFormat, metrics: &MetricsConfig) -> Result<ReadOutcome> {
    let resolved = locate::resolve(path);
    let path = match &resolved {
        Some(p) => p.as_path(),
        None => anyhow::bail!("no log matches {} (yet)", path.display()),
    };
    let mut batch = match line_parser(format, metrics)? {
        None => match Source::new(format, path, metrics) {
            Some(mut source) => {
                let mut poll = tail::Poll::default();
                source.poll(&mut poll)?;
                if poll.missing {
                    anyhow::bail!("no log at {} (yet)", path.display());
                }
                poll.batch
            }
            None => hf_state::read(path, metrics)?,
        },
        Some(mut parser) => {
            let file = std::fs::File::open(path)
                .with_context(|| format!("opening log {}", path.display()))?;
            let mut out = Batch::default();
            let mut lines = lines::LineReader::new(file, path);
            lines.read_to_end(&mut *parser, &mut out)?;
            out
        }
    };
    let mtime = mtime_secs(path);
    derive::Derive::new(metrics).apply(&mut batch.records, mtime);
    Ok(ReadOutcome {
        samples: to_samples(&batch.records, mtime),
        garbage: batch.garbage,
        garbage_total: batch.garbage_total,
        bytes: batch.bytes,
    })
}

/// Records → map-shaped samples, on all cores for a big log (a map per line is most of the
/// cost of `read_all`).
fn to_samples(records: &[Record], mtime: Option<f64>) -> Vec<Sample> {
    let convert = |rs: &[Record]| -> Vec<Sample> {
        rs.iter()
            .map(|r| {
                let mut s = r.to_sample();
                s.time = s.time.or(mtime);
                s
            })
            .collect()
    };
    if records.len() < 100_000 {
        return convert(records);
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 {
        return convert(records);
    }
    let per = records.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = records
            .chunks(per)
            .map(|c| scope.spawn(move || convert(c)))
            .collect();
        let mut out = Vec::with_capacity(records.len());
        for p in parts {
            out.extend(p.join().expect("conversion thread"));
        }
        out
    })
}

pub fn mtime_secs(path: &Path) -> Option<f64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    let d = m.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_keep_order_when_converted_on_many_threads() {
        let recs: Vec<Record> = (0..150_000u64)
            .map(|i| Record {
                step: i,
                time: (i % 2 == 0).then_some(1.0),
                values: {
                    let mut v = [None; N_SLOTS];
                    v[0] = Some(i as f64);
                    v
                },
            })
            .collect();
        let samples = to_samples(&recs, Some(9.0));
        assert_eq!(samples.len(), recs.len());
        assert!(samples.iter().enumerate().all(|(i, s)| s.step == i as u64
            && s.get(LOSS) == Some(i as f64)
            && s.time == Some(if i % 2 == 0 { 1.0 } else { 9.0 })));
    }

    #[test]
    fn keys_match_across_separators() {
        let m = MetricsConfig {
            loss: "train/loss".into(),
            ..Default::default()
        };
        let k = Keys::new(&m);
        assert_eq!(
            k.lookup(b"train.loss").collect::<Vec<_>>(),
            vec![Target::Metric(0)]
        );
        assert!(k.under(b"train"));
        assert!(!k.under(b"tra"));
        assert!(!k.under(b"eval"));
    }
}
