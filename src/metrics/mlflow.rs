//! `format = "mlflow"`: [`MlflowRun`] reads a run directory of MLflow's file store
//! (`mlruns/<experiment>/<run>/`). Each `metrics/<key>` file is one metric, a line
//! `timestamp_ms value step` per logged point (older stores leave out the step); a key with
//! slashes (`train/loss`) is a file in a subdirectory. Files are read incrementally; the new
//! points of one read are put in step order and the points of one step become one record,
//! its time the newest timestamp, its values the keys `[metrics]` maps.

use super::fields::{Fields, Keys, Target};
use super::tail::Poll;
use super::{Garbage, Parsed, Record};
use crate::metrics::mapping::MetricsConfig;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

struct MetricFile {
    target: Target,
    id: (u64, u64),
    offset: u64,
    line_no: u64,
}

/// Bytes at the start of a metric file and before its offset remembered to notice it
/// rewritten in place.
const BEFORE: u64 = 64;

/// Where an [`MlflowRun`] stands between reads, for a later process (the critic's summary
/// cache) to go on from: per metric file read so far, how far, and bytes to check.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MlflowPlace {
    files: Vec<FilePlace>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct FilePlace {
    path: PathBuf,
    dev: u64,
    ino: u64,
    offset: u64,
    line_no: u64,
    /// The file's first bytes and those just before `offset`.
    #[serde(with = "serde_bytes")]
    head: Vec<u8>,
    #[serde(with = "serde_bytes")]
    before: Vec<u8>,
}

pub struct MlflowRun {
    run_dir: PathBuf,
    keys: Keys,
    files: BTreeMap<PathBuf, MetricFile>,
}

/// One logged point: (step, time ms, target, value).
type Point = (u64, f64, Target, f64);

/// The metric files under `metrics/` with their key (`train/loss`).
pub fn metric_files(run_dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), run_dir.join("metrics"))];
    while let Some((prefix, dir)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let key = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push((key, e.path())),
                Ok(t) if t.is_file() => out.push((key, e.path())),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

impl MlflowRun {
    pub fn new(run_dir: &Path, metrics: &MetricsConfig) -> MlflowRun {
        MlflowRun {
            run_dir: run_dir.to_path_buf(),
            keys: Keys::new(metrics),
            files: BTreeMap::new(),
        }
    }

    /// Where this run's read stands (after a [`MlflowRun::poll`]).
    pub fn place(&self) -> Option<MlflowPlace> {
        let mut files = Vec::new();
        for (path, f) in &self.files {
            let len = f.offset.min(BEFORE);
            let (mut head, mut before) = (vec![0u8; len as usize], vec![0u8; len as usize]);
            let file = std::fs::File::open(path).ok()?;
            file.read_exact_at(&mut head, 0).ok()?;
            file.read_exact_at(&mut before, f.offset - len).ok()?;
            files.push(FilePlace {
                path: path.clone(),
                dev: f.id.0,
                ino: f.id.1,
                offset: f.offset,
                line_no: f.line_no,
                head,
                before,
            });
        }
        Some(MlflowPlace { files })
    }

    /// Go on where `p` stood, or say why not (a metric file replaced, shorter, rewritten).
    pub fn resume(&mut self, p: &MlflowPlace) -> Result<(), String> {
        let metrics_dir = self.run_dir.join("metrics");
        for f in &p.files {
            let key = f
                .path
                .strip_prefix(&metrics_dir)
                .map_err(|_| format!("{} is not in {}", f.path.display(), metrics_dir.display()))?
                .to_string_lossy()
                .into_owned();
            let target = self
                .keys
                .lookup(key.as_bytes())
                .find(|t| matches!(t, Target::Metric(_) | Target::StepTime))
                .ok_or_else(|| format!("metric {key} is no longer read"))?;
            let file = std::fs::File::open(&f.path)
                .map_err(|e| format!("opening {}: {e}", f.path.display()))?;
            let meta = file.metadata().map_err(|e| format!("stat: {e}"))?;
            if (meta.dev(), meta.ino()) != (f.dev, f.ino) || meta.len() < f.offset {
                return Err(format!("{} was replaced or truncated", f.path.display()));
            }
            if !crate::metrics::still_holds(&file, &f.head, &f.before, f.offset) {
                return Err(format!(
                    "{} was rewritten (bytes already read changed)",
                    f.path.display()
                ));
            }
            self.files.insert(
                f.path.clone(),
                MetricFile {
                    target,
                    id: (f.dev, f.ino),
                    offset: f.offset,
                    line_no: f.line_no,
                },
            );
        }
        Ok(())
    }

    pub fn poll(&mut self, poll: &mut Poll) -> Result<()> {
        if !self.run_dir.join("metrics").is_dir() {
            poll.missing = true;
            return Ok(());
        }
        let mut points: Vec<Point> = Vec::new();
        for (key, path) in metric_files(&self.run_dir) {
            let Some(target) = self
                .keys
                .lookup(key.as_bytes())
                .find(|t| matches!(t, Target::Metric(_) | Target::StepTime))
            else {
                continue;
            };
            let meta = std::fs::metadata(&path)
                .with_context(|| format!("stat metric file {}", path.display()))?;
            let id = (meta.dev(), meta.ino());
            let state = self.files.entry(path.clone()).or_insert(MetricFile {
                target,
                id,
                offset: 0,
                line_no: 0,
            });
            if state.id != id || meta.len() < state.offset {
                poll.restarted = Some(format!("rewritten ({})", path.display()));
                *state = MetricFile {
                    target,
                    id,
                    offset: 0,
                    line_no: 0,
                };
            }
            if meta.len() == state.offset {
                continue;
            }
            let file = std::fs::File::open(&path)
                .with_context(|| format!("opening metric file {}", path.display()))?;
            let mut buf = vec![0u8; (meta.len() - state.offset) as usize];
            file.read_exact_at(&mut buf, state.offset)
                .with_context(|| format!("reading metric file {}", path.display()))?;
            poll.bytes_read += buf.len() as u64;
            poll.batch.bytes += buf.len() as u64;
            // Complete lines only: a line being written is read next time.
            let Some(last_nl) = memchr::memrchr(b'\n', &buf) else {
                continue;
            };
            for line in buf[..last_nl].split(|&c| c == b'\n') {
                state.line_no += 1;
                match parse_point(line) {
                    Ok(Some((ms, value, step))) => points.push((step, ms, state.target, value)),
                    Ok(None) => {}
                    Err(why) => poll.batch.push_garbage(Garbage {
                        file: path.clone(),
                        line: state.line_no,
                        why,
                    }),
                }
            }
            state.offset += last_nl as u64 + 1;
        }
        // In step order (stable: a step's points keep their time order).
        points.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let mut i = 0;
        while i < points.len() {
            let step = points[i].0;
            let mut fields = Fields {
                step: Some(step as f64),
                ..Default::default()
            };
            let mut newest = f64::NEG_INFINITY;
            while i < points.len() && points[i].0 == step {
                let (_, ms, target, value) = points[i];
                fields.set(target, value);
                newest = newest.max(ms);
                i += 1;
            }
            let time = newest.is_finite().then_some(newest / 1000.0);
            if let Parsed::Sample(r) | Parsed::Partial(r, _) = fields.finish(&self.keys, "step") {
                poll.batch.records.push(Record { time, ..r });
            }
        }
        Ok(())
    }
}

/// `timestamp_ms value [step]`; `None` for a blank line.
fn parse_point(line: &[u8]) -> Result<Option<(f64, f64, u64)>, String> {
    let text = String::from_utf8_lossy(line);
    let parts: Vec<&str> = text.split_ascii_whitespace().collect();
    if parts.is_empty() {
        return Ok(None);
    }
    let expected = || format!("expected `timestamp value step`, found {:?}", text.trim());
    if parts.len() < 2 || parts.len() > 3 {
        return Err(expected());
    }
    let ms: f64 = parts[0].parse().map_err(|_| expected())?;
    // MLflow writes Python's float repr: `nan`, `inf`, `-inf` included.
    let value = super::parse_num(parts[1].as_bytes()).ok_or_else(expected)?;
    let step = match parts.get(2) {
        Some(s) => s.parse().map_err(|_| {
            format!("step {s:?} is not a non-negative integer (`timestamp value step`)")
        })?,
        None => 0,
    };
    Ok(Some((ms, value, step)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse_with_and_without_step() {
        assert_eq!(
            parse_point(b"1700000000123 2.5 10"),
            Ok(Some((1700000000123.0, 2.5, 10)))
        );
        assert!(parse_point(b"17 nan 3").unwrap().unwrap().1.is_nan());
        assert_eq!(parse_point(b"17 0.5"), Ok(Some((17.0, 0.5, 0))));
        assert_eq!(parse_point(b"  "), Ok(None));
        assert!(parse_point(b"17 x 3")
            .unwrap_err()
            .contains("timestamp value step"));
        assert!(parse_point(b"17 1 -3").unwrap_err().contains("step \"-3\""));
    }

    #[test]
    fn a_run_dir_with_nested_keys_reads_incrementally() {
        let d = tempfile::tempdir().unwrap();
        let m = d.path().join("metrics");
        std::fs::create_dir_all(m.join("train")).unwrap();
        std::fs::write(m.join("train/loss"), "1000 3.0 1\n2000 2.5 2\n3000 2.").unwrap();
        std::fs::write(m.join("lr"), "1000 0.1 1\n2000 0.2 2\n").unwrap();
        std::fs::write(m.join("ignored"), "1000 9 1\n").unwrap();
        let metrics = MetricsConfig {
            loss: "train/loss".into(),
            ..Default::default()
        };
        let mut run = MlflowRun::new(d.path(), &metrics);
        let mut poll = Poll::default();
        run.poll(&mut poll).unwrap();
        let got: Vec<_> = poll
            .batch
            .records
            .iter()
            .map(|r| (r.step, r.time, r.get("loss"), r.get("lr")))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, Some(1.0), Some(3.0), Some(0.1)),
                (2, Some(2.0), Some(2.5), Some(0.2))
            ]
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(m.join("train/loss"))
            .unwrap();
        std::io::Write::write_all(&mut f, b"0 3\nbad line\n").unwrap();
        let mut poll = Poll::default();
        run.poll(&mut poll).unwrap();
        assert_eq!(poll.batch.records.len(), 1);
        let r = poll.batch.records[0];
        assert_eq!((r.step, r.get("loss")), (3, Some(2.0)));
        assert_eq!(poll.batch.garbage[0].line, 4);
    }
}
