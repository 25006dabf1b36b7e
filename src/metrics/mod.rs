//! The training's own metrics log turned into [`Sample`]s: the shared types, the key mapping
//! from `[metrics]`, and [`read_all`] for a whole log. Formats live in their own files; the
//! incremental reader (offset, rotation, truncation) is [`tail`]. No judging here.

pub mod csv;
pub mod hf_state;
pub mod jsonl;
pub mod tail;
pub mod text;

use crate::config::{LogFormat, MetricsConfig};
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Canonical metric names, the keys of [`Sample::values`].
pub const LOSS: &str = "loss";
pub const LR: &str = "lr";
pub const GRAD_NORM: &str = "grad_norm";
pub const TOKENS_PER_S: &str = "tokens_per_s";
pub const VRAM_GIB: &str = "vram_gib";
pub const EVAL_LOSS: &str = "eval_loss";
pub const METRICS: [&str; 6] = [LOSS, LR, GRAD_NORM, TOKENS_PER_S, VRAM_GIB, EVAL_LOSS];

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

impl ReadOutcome {
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
    Sample(Sample),
    /// Nothing to read (blank, a header, a text line no pattern matches).
    Skip,
    Garbage(String),
}

/// A line-based format. Stateful only where the format is (the CSV header).
pub trait LineParser: Send {
    fn parse(&mut self, line: &[u8]) -> Parsed;
    /// The file started over (truncated or replaced): forget per-file state.
    fn reset(&mut self);
}

/// What a log field feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Step,
    Time,
    /// Index into [`METRICS`].
    Metric(usize),
}

/// `[metrics]` as (target, key) pairs. Keys compare with `.` and `/` as the same separator,
/// so `train/loss` finds `{"train": {"loss": ..}}` and a flat `"train/loss"` key alike.
#[derive(Debug, Clone)]
pub struct Keys {
    pub wanted: Vec<(Target, Vec<u8>)>,
    pub vram_unit: crate::config::VramUnit,
}

impl Keys {
    pub fn new(m: &MetricsConfig) -> Keys {
        let mut wanted = vec![
            (Target::Step, m.step.clone()),
            (Target::Time, m.time.clone()),
        ];
        let metric_keys = [
            &m.loss,
            &m.lr,
            &m.grad_norm,
            &m.tokens_per_s,
            &m.vram,
            &m.eval_loss,
        ];
        for (i, k) in metric_keys.into_iter().enumerate() {
            wanted.push((Target::Metric(i), k.clone()));
        }
        Keys {
            wanted: wanted
                .into_iter()
                .filter(|(_, k)| !k.is_empty())
                .map(|(t, k)| (t, k.into_bytes()))
                .collect(),
            vram_unit: m.vram_unit,
        }
    }

    /// Targets fed by a key (usually zero or one).
    pub fn lookup<'a>(&'a self, key: &'a [u8]) -> impl Iterator<Item = Target> + 'a {
        self.wanted
            .iter()
            .filter(move |(_, k)| same_key(k, key))
            .map(|(t, _)| *t)
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
    pub values: [Option<f64>; 6],
    /// Why a wanted field could not be read (first problem only).
    pub bad: Option<String>,
}

impl Fields {
    pub fn set(&mut self, target: Target, v: f64) {
        match target {
            Target::Step => self.step = Some(v),
            Target::Time => self.time = Some(v),
            Target::Metric(i) => self.values[i] = Some(v),
        }
    }

    /// Sample, Skip (no step and nothing else either) or Garbage.
    pub fn finish(self, keys: &Keys, step_key: &str) -> Parsed {
        if let Some(why) = self.bad {
            return Parsed::Garbage(why);
        }
        let Some(step) = self.step else {
            return Parsed::Garbage(format!("no step: expected a `{step_key}` field"));
        };
        let Some(step) = as_step(step) else {
            return Parsed::Garbage(format!(
                "step {step} is not a non-negative integer (`{step_key}`)"
            ));
        };
        let mut values = BTreeMap::new();
        for (i, v) in self.values.iter().enumerate() {
            if let Some(v) = *v {
                let v = if METRICS[i] == VRAM_GIB {
                    keys.vram_unit.to_gib(v)
                } else {
                    v
                };
                values.insert(METRICS[i].to_string(), v);
            }
        }
        Parsed::Sample(Sample {
            step,
            time: self.time,
            values,
        })
    }
}

fn as_step(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 1.8e19).then_some(v as u64)
}

/// A number as trainers write it: plain, in a string (`"0.000e+00"`), or Python's `NaN`,
/// `Infinity`, `-Infinity` (also `nan`, `inf`).
pub fn parse_num(b: &[u8]) -> Option<f64> {
    let b = b.trim_ascii();
    let b = b
        .strip_prefix(b"\"")
        .and_then(|s| s.strip_suffix(b"\""))
        .unwrap_or(b)
        .trim_ascii();
    match b {
        b"NaN" | b"nan" | b"-NaN" | b"-nan" => return Some(f64::NAN),
        b"Infinity" | b"inf" | b"+inf" | b"+Infinity" => return Some(f64::INFINITY),
        b"-Infinity" | b"-inf" => return Some(f64::NEG_INFINITY),
        _ => {}
    }
    std::str::from_utf8(b).ok()?.parse::<f64>().ok()
}

/// A time field: unix seconds, or an RFC 3339 string.
pub fn parse_time(b: &[u8]) -> Option<f64> {
    if let Some(v) = parse_num(b) {
        return v.is_finite().then_some(v);
    }
    let s = std::str::from_utf8(b.trim_ascii()).ok()?.trim_matches('"');
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    Some(t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9)
}

/// Drop ANSI escape sequences (colour codes) and keep only what follows the last `\r` (a
/// progress bar redrawn in place leaves its fragments before it).
pub fn clean_line(line: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = match memchr::memrchr(b'\r', line) {
        Some(i) => &line[i + 1..],
        None => line,
    };
    if memchr::memchr(0x1b, line).is_none() {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i] == 0x1b {
            i += 1;
            if line.get(i) == Some(&b'[') {
                i += 1;
                while i < line.len() && !(0x40..=0x7e).contains(&line[i]) {
                    i += 1;
                }
            }
            i += 1;
        } else {
            out.push(line[i]);
            i += 1;
        }
    }
    std::borrow::Cow::Owned(out)
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

/// Read a whole log. Samples without a time of their own get the file's mtime (the last
/// moment the log was written).
pub fn read_all(path: &Path, format: LogFormat, metrics: &MetricsConfig) -> Result<ReadOutcome> {
    let mut out = match line_parser(format, metrics)? {
        None => hf_state::read(path, metrics)?,
        Some(mut parser) => {
            let file = std::fs::File::open(path)
                .with_context(|| format!("opening log {}", path.display()))?;
            let mut out = ReadOutcome::default();
            let mut lines = tail::LineReader::new(file, path);
            lines.read_to_end(&mut *parser, &mut out)?;
            out
        }
    };
    let mtime = mtime_secs(path);
    for s in &mut out.samples {
        if s.time.is_none() {
            s.time = mtime;
        }
    }
    Ok(out)
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
    fn numbers_as_trainers_write_them() {
        assert_eq!(parse_num(b"0.5"), Some(0.5));
        assert_eq!(parse_num(b"\"0.000e+00\""), Some(0.0));
        assert!(parse_num(b"NaN").unwrap().is_nan());
        assert_eq!(parse_num(b"-Infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_num(b"\"inf\""), Some(f64::INFINITY));
        assert_eq!(parse_num(b"abc"), None);
        assert_eq!(parse_num(b""), None);
    }

    #[test]
    fn times_as_unix_or_rfc3339() {
        assert_eq!(parse_time(b"1700000000.5"), Some(1_700_000_000.5));
        assert_eq!(
            parse_time(b"\"2023-11-14T22:13:20Z\""),
            Some(1_700_000_000.0)
        );
        assert_eq!(parse_time(b"yesterday"), None);
    }

    #[test]
    fn ansi_and_carriage_returns_are_dropped() {
        assert_eq!(
            &*clean_line(b"10%|#  |\r\x1b[32mstep 5\x1b[0m\r"),
            b"step 5"
        );
        assert_eq!(&*clean_line(b"plain"), b"plain");
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
