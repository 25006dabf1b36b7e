//! The log signal for the sentinel: the log's size and the last step seen, read incrementally
//! (only new bytes each tick; truncation and rotation start over). Step extraction follows
//! `[run] format` and `[metrics] step`; a JSONL line with a bare NaN (what Python's json
//! writes) still yields its step.

use crate::config::{Config, LogFormat};
use crate::sentinel::LogObs;
use regex::Regex;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// On (re)open, only this much of the end of a long log is read to find the last step.
const TAIL_WINDOW: u64 = 256 * 1024;
/// More new bytes than this in one tick: skip to the tail rather than parse them all.
const MAX_READ: u64 = 8 << 20;

pub struct LogTail {
    path: Option<PathBuf>,
    format: LogFormat,
    key: String,
    patterns: Vec<(Regex, Vec<String>)>,
    offset: u64,
    ino: Option<u64>,
    partial: Vec<u8>,
    /// Started mid-file: the first line read is a fragment.
    skip_partial_line: bool,
    csv_col: Option<usize>,
    last_step: Option<u64>,
}

impl LogTail {
    pub fn new(cfg: &Config) -> anyhow::Result<LogTail> {
        let mut patterns = Vec::new();
        for p in &cfg.metrics.patterns {
            let re = Regex::new(&p.regex).map_err(|e| {
                anyhow::anyhow!("{}: [metrics] patterns: bad regex: {e}", cfg.path.display())
            })?;
            patterns.push((re, p.fields.clone()));
        }
        Ok(LogTail {
            path: cfg.run.log.clone(),
            format: cfg.run.format,
            key: cfg.metrics.step.clone(),
            patterns,
            offset: 0,
            ino: None,
            partial: Vec::new(),
            skip_partial_line: false,
            csv_col: None,
            last_step: None,
        })
    }

    pub fn poll(&mut self) -> Result<LogObs, String> {
        let path = self
            .path
            .clone()
            .ok_or_else(|| "no [run] log in the config: progress cannot be seen".to_string())?;
        let shown = path.display();
        let meta = std::fs::metadata(&path).map_err(|e| format!("{shown}: {e}"))?;
        let size = meta.len();
        if self.format == LogFormat::HfTrainerState {
            if size != self.offset || self.ino != Some(meta.ino()) {
                let text = std::fs::read_to_string(&path).map_err(|e| format!("{shown}: {e}"))?;
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                    self.last_step = v.get("global_step").and_then(as_step).or(self.last_step);
                }
                self.offset = size;
                self.ino = Some(meta.ino());
            }
            return Ok(self.obs(size));
        }
        let mut file = std::fs::File::open(&path).map_err(|e| format!("{shown}: {e}"))?;
        if self.ino != Some(meta.ino()) || size < self.offset {
            // First look, rotation or truncation: start over near the end.
            self.ino = Some(meta.ino());
            self.partial.clear();
            self.csv_col = None;
            self.offset = size.saturating_sub(TAIL_WINDOW);
            if self.format == LogFormat::Csv {
                self.read_csv_header(&mut file);
            }
            if self.offset > 0 {
                self.skip_partial_line = true;
            }
        }
        if size - self.offset > MAX_READ {
            self.offset = size - TAIL_WINDOW;
            self.partial.clear();
            self.skip_partial_line = true;
        }
        if size > self.offset {
            let mut buf = Vec::with_capacity((size - self.offset) as usize);
            file.seek(SeekFrom::Start(self.offset))
                .and_then(|_| file.take(size - self.offset).read_to_end(&mut buf))
                .map_err(|e| format!("{shown}: {e}"))?;
            self.offset += buf.len() as u64;
            self.consume(&buf);
        }
        Ok(self.obs(size))
    }

    fn obs(&self, bytes: u64) -> LogObs {
        LogObs {
            bytes,
            last_step: self.last_step,
        }
    }

    fn read_csv_header(&mut self, file: &mut std::fs::File) {
        let mut head = Vec::new();
        if file.seek(SeekFrom::Start(0)).is_ok()
            && file.by_ref().take(64 * 1024).read_to_end(&mut head).is_ok()
        {
            if let Some(line) = head.split(|&b| b == b'\n').next() {
                let line = String::from_utf8_lossy(line);
                self.csv_col = line.trim().split(',').position(|h| h.trim() == self.key);
                if self.offset == 0 {
                    self.offset = (line.len() as u64 + 1).min(head.len() as u64);
                }
            }
        }
    }

    fn consume(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        let mut lines = complete.split(|&b| b == b'\n');
        if std::mem::take(&mut self.skip_partial_line) {
            lines.next();
        }
        for line in lines {
            let line = String::from_utf8_lossy(line);
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(s) = self.step_of(line) {
                self.last_step = Some(s);
            }
        }
    }

    fn step_of(&self, line: &str) -> Option<u64> {
        match self.format {
            LogFormat::Jsonl => match serde_json::from_str::<serde_json::Value>(line) {
                Ok(v) => lookup(&v, &self.key).and_then(as_step),
                Err(_) => scan_json_number(line, &self.key),
            },
            LogFormat::Csv => {
                let col = self.csv_col?;
                let cell = line.split(',').nth(col)?.trim();
                cell.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .map(|v| v as u64)
            }
            LogFormat::Text => self.patterns.iter().find_map(|(re, fields)| {
                let caps = re.captures(line)?;
                let m = caps.name("step").or_else(|| {
                    let i = fields.iter().position(|f| f == "step")?;
                    caps.get(i + 1)
                })?;
                m.as_str().parse().ok()
            }),
            LogFormat::HfTrainerState => None,
        }
    }
}

fn lookup<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    if let Some(x) = v.get(key) {
        return Some(x);
    }
    key.split(['/', '.']).try_fold(v, |cur, part| cur.get(part))
}

fn as_step(v: &serde_json::Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| f as u64)
    })
}

/// `"key": 123` in a line that is not strict JSON.
fn scan_json_number(line: &str, key: &str) -> Option<u64> {
    let at = line.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = line[at..].trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::path::Path;

    fn tail(dir: &Path, extra: &str) -> (LogTail, PathBuf) {
        let log = dir.join("log");
        let text = format!("[run]\nname = \"t\"\nlog = \"log\"\n{extra}");
        let cfg = Config::parse(&text, &dir.join("roger.toml")).unwrap();
        (LogTail::new(&cfg).unwrap(), log)
    }

    fn append(p: &Path, s: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .unwrap();
        f.write_all(s.as_bytes()).unwrap();
    }

    #[test]
    fn jsonl_incremental_with_partial_lines_and_nan() {
        let d = tempfile::tempdir().unwrap();
        let (mut t, log) = tail(d.path(), "");
        assert!(t.poll().unwrap_err().contains("log"));
        append(&log, "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"lo");
        assert_eq!(t.poll().unwrap().last_step, Some(1));
        append(&log, "ss\": NaN}\n");
        let o = t.poll().unwrap();
        assert_eq!(o.last_step, Some(2));
        assert_eq!(o.bytes, std::fs::metadata(&log).unwrap().len());
    }

    #[test]
    fn truncation_starts_over() {
        let d = tempfile::tempdir().unwrap();
        let (mut t, log) = tail(d.path(), "");
        append(&log, "{\"step\": 10}\n{\"step\": 11}\n");
        assert_eq!(t.poll().unwrap().last_step, Some(11));
        std::fs::write(&log, "{\"step\": 3}\n").unwrap();
        assert_eq!(t.poll().unwrap().last_step, Some(3));
    }

    #[test]
    fn nested_key_csv_and_text() {
        let d = tempfile::tempdir().unwrap();
        let (mut t, log) = tail(d.path(), "[metrics]\nstep = \"train/step\"\n");
        append(&log, "{\"train\": {\"step\": 7}}\n");
        assert_eq!(t.poll().unwrap().last_step, Some(7));

        let d = tempfile::tempdir().unwrap();
        let (mut t, log) = tail(d.path(), "format = \"csv\"\n");
        append(&log, "epoch,step,loss\n0,5,2.1\n0,6,2.0\n");
        assert_eq!(t.poll().unwrap().last_step, Some(6));

        let d = tempfile::tempdir().unwrap();
        let (mut t, log) = tail(
            d.path(),
            "format = \"text\"\n[metrics]\npatterns = [{ regex = 'iter (\\d+): loss', fields = [\"step\"] }]\n",
        );
        append(&log, "iter 41: loss 2.0\nsome noise\n");
        assert_eq!(t.poll().unwrap().last_step, Some(41));
    }
}
