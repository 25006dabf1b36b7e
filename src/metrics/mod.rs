//! The training's own metrics log turned into [`Sample`]s: the shared types, the key mapping
//! from `[metrics]`, and [`read_all`] for a whole log. Formats live in their own files; the
//! incremental reader (offset, rotation, truncation) is [`tail`]. No judging here.

pub mod csv;
pub mod derive;
pub mod hf_state;
pub mod jsonl;
pub mod lines;
pub mod locate;
pub mod num;
pub mod tail;
pub mod text;

use crate::config::{LogFormat, MetricsConfig};
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
/// Every slot of a [`Record`]: the judged [`METRICS`] first, then what feeds them.
pub const SLOTS: [&str; 11] = [
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
];
/// Index in [`SLOTS`].
pub fn slot(name: &str) -> Option<usize> {
    SLOTS.iter().position(|m| *m == name)
}
const TOTAL_SLOT: usize = 9;
pub(crate) const TOKENS_SLOT: usize = 10;
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record {
    pub step: u64,
    pub time: Option<f64>,
    /// Indexed like [`SLOTS`].
    pub values: [Option<f64>; 11],
}

impl Record {
    pub fn get(&self, metric: &str) -> Option<f64> {
        slot(metric).and_then(|i| self.values[i])
    }

    /// The planned last step, when this line says it.
    pub fn total_steps(&self) -> Option<u64> {
        self.values[TOTAL_SLOT].and_then(as_step).filter(|t| *t > 0)
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
        let mut values = [None; 11];
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

/// What a log field feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Step,
    Time,
    /// Seconds (or ms) one step took: tokens/s = `tokens_per_step` / it.
    StepTime,
    /// Index into [`SLOTS`].
    Metric(usize),
}

/// `[metrics]` as (target, key) pairs. Keys compare with `.` and `/` as the same separator,
/// so `train/loss` finds `{"train": {"loss": ..}}` and a flat `"train/loss"` key alike.
#[derive(Debug, Clone)]
pub struct Keys {
    pub wanted: Vec<(Target, Vec<u8>)>,
    /// Per `wanted` entry: whether its key has a `.` or `/` (then a separator-blind match).
    has_sep: Vec<bool>,
    pub vram_unit: crate::config::VramUnit,
    pub clock: crate::config::Clock,
    step_time_ms: bool,
    tokens_per_step: Option<f64>,
}

impl Keys {
    pub fn new(m: &MetricsConfig) -> Keys {
        let mut wanted = vec![
            (Target::Step, m.step.clone()),
            (Target::Time, m.time.clone()),
            (Target::StepTime, m.step_time.clone()),
        ];
        let metric_keys = [
            m.loss.as_str(),
            m.lr.first(),
            &m.grad_norm,
            &m.tokens_per_s,
            &m.vram,
            &m.eval_loss,
        ];
        for (i, k) in metric_keys.into_iter().enumerate() {
            wanted.push((Target::Metric(i), k.to_string()));
        }
        for (g, k) in m.lr.0.iter().enumerate().skip(1).take(LR_GROUPS.len() - 1) {
            wanted.push((Target::Metric(5 + g), k.clone()));
        }
        wanted.push((Target::Metric(TOTAL_SLOT), m.total_steps.clone()));
        wanted.push((Target::Metric(TOKENS_SLOT), m.tokens.clone()));
        let wanted: Vec<(Target, Vec<u8>)> = wanted
            .into_iter()
            .filter(|(_, k)| !k.is_empty())
            .map(|(t, k)| (t, k.into_bytes()))
            .collect();
        let has_sep = wanted
            .iter()
            .map(|(_, k)| k.iter().any(|&c| c == b'.' || c == b'/'))
            .collect();
        Keys {
            wanted,
            has_sep,
            vram_unit: m.vram_unit,
            clock: m.clock,
            step_time_ms: m.step_time_unit == crate::config::TimeUnit::Ms,
            tokens_per_step: m.tokens_per_step,
        }
    }

    /// A value for `target` from its text: times by the `[metrics] clock`, the rest numbers.
    pub fn value(&self, target: Target, raw: &[u8]) -> Option<f64> {
        use crate::config::Clock;
        match (target, self.clock) {
            (Target::Time, Clock::Unix) => parse_time(raw),
            (Target::Time, Clock::Elapsed) => num::parse_elapsed(raw),
            (Target::Time, Clock::ElapsedMs) => {
                let raw = raw.trim_ascii();
                parse_num(raw.strip_suffix(b"ms").unwrap_or(raw))
            }
            _ => parse_num(raw),
        }
    }

    /// Targets fed by a key (usually zero or one).
    pub fn lookup<'a>(&'a self, key: &'a [u8]) -> impl Iterator<Item = Target> + 'a {
        self.wanted
            .iter()
            .filter(move |(_, k)| same_key(k, key))
            .map(|(t, _)| *t)
    }

    /// [`Keys::lookup`] for the JSONL hot loop: a bit per entry of `wanted` that matches.
    /// Keys without a separator can only match exactly, which is one short memcmp.
    #[inline]
    pub fn lookup_mask(&self, key: &[u8]) -> u32 {
        let mut mask = 0;
        for (i, (_, k)) in self.wanted.iter().enumerate() {
            if k.len() == key.len()
                && (k.first() == key.first() || self.has_sep[i])
                && (k.as_slice() == key || (self.has_sep[i] && same_key(k, key)))
            {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// Whether some wanted key lies under `prefix/` (worth descending into a nested object).
    pub fn under(&self, prefix: &[u8]) -> bool {
        self.wanted.iter().any(|(_, k)| {
            k.len() > prefix.len() && same_key(&k[..prefix.len()], prefix) && {
                let c = k[prefix.len()];
                c == b'/' || c == b'.'
            }
        })
    }
}

fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(&x, &y)| x == y || (matches!(x, b'.' | b'/') && matches!(y, b'.' | b'/')))
}

/// Collects a line's fields into a sample.
#[derive(Debug, Default)]
pub struct Fields {
    pub step: Option<f64>,
    pub time: Option<f64>,
    pub step_time: Option<f64>,
    pub values: [Option<f64>; 11],
    /// Why a wanted field could not be read (first problem only).
    pub bad: Option<String>,
}

impl Fields {
    pub fn set(&mut self, target: Target, v: f64) {
        match target {
            Target::Step => self.step = Some(v),
            Target::Time => self.time = Some(v),
            Target::StepTime => self.step_time = Some(v),
            Target::Metric(i) => self.values[i] = Some(v),
        }
    }

    /// Sample (Partial when one field was unreadable), Skip (no step and no mapped metric:
    /// a summary or `predict_*` entry) or Garbage (no usable step).
    pub fn finish(self, keys: &Keys, step_key: &str) -> Parsed {
        let Some(step) = self.step else {
            if let Some(why) = self.bad {
                return Parsed::Garbage(why);
            }
            if self.values.iter().all(Option::is_none) && self.step_time.is_none() {
                return Parsed::Skip;
            }
            return Parsed::Garbage(format!("no step: expected a `{step_key}` field"));
        };
        let Some(step) = as_step(step) else {
            return Parsed::Garbage(format!(
                "step {step} is not a non-negative integer (`{step_key}`)"
            ));
        };
        let mut values = self.values;
        if let Some(v) = values[4].as_mut() {
            *v = keys.vram_unit.to_gib(*v); // METRICS[4] is VRAM_GIB
        }
        if let (None, Some(per_step), Some(dt)) =
            (values[TPS_SLOT], keys.tokens_per_step, self.step_time)
        {
            let dt = if keys.step_time_ms { dt / 1000.0 } else { dt };
            if dt.is_finite() && dt > 0.0 {
                values[TPS_SLOT] = Some(per_step / dt);
            }
        }
        let time = match keys.clock {
            crate::config::Clock::ElapsedMs => self.time.map(|t| t / 1000.0),
            _ => self.time,
        };
        let record = Record { step, time, values };
        match self.bad {
            Some(why) => {
                Parsed::Partial(record, format!("{why}; the line's other fields are used"))
            }
            None => Parsed::Sample(record),
        }
    }
}

fn as_step(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 1.8e19).then_some(v as u64)
}

/// The parser for a line-based format (`None` for whole-document formats).
pub fn line_parser(format: LogFormat, m: &MetricsConfig) -> Result<Option<Box<dyn LineParser>>> {
    Ok(match format {
        LogFormat::Jsonl => Some(Box::new(jsonl::JsonlParser::new(m))),
        LogFormat::Csv => Some(Box::new(csv::CsvParser::new(m))),
        LogFormat::Text => Some(Box::new(text::TextParser::new(m)?)),
        LogFormat::HfTrainerState => None,
    })
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
        None => hf_state::read(path, metrics)?,
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
    derive::Derive::new(metrics.clock).apply(&mut batch.records, mtime);
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
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 || records.len() < 100_000 {
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
                values: [
                    Some(i as f64),
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                ],
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
