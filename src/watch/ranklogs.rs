//! Every rank's log when `[run] log` holds `{rank}`: the files found for the pattern, read
//! incrementally (only bytes appended since the last tick, whole lines only), giving each
//! rank's newest step and the step times it logged — for staleness and the straggler rule.

use crate::ranks;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

#[derive(Debug, Default)]
struct File {
    offset: u64,
    partial: Vec<u8>,
    last_step: Option<u64>,
}

/// What one poll read from one rank's log.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Read1 {
    pub last_step: Option<u64>,
    pub step_times: Vec<f64>,
}

pub struct RankLogs {
    pattern: PathBuf,
    step_key: String,
    time_key: String,
    files: BTreeMap<u32, File>,
}

/// The rank log files that exist now: rank → path.
pub fn list(pattern: &Path) -> BTreeMap<u32, PathBuf> {
    let dir = pattern
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Some(name) = pattern
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
    else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if let Some(r) = ranks::rank_of_name(&name, &e.file_name().to_string_lossy()) {
            out.insert(r, e.path());
        }
    }
    out
}

impl RankLogs {
    pub fn new(pattern: &Path, step_key: &str, time_key: &str) -> RankLogs {
        RankLogs {
            pattern: pattern.to_path_buf(),
            step_key: step_key.to_string(),
            time_key: time_key.to_string(),
            files: BTreeMap::new(),
        }
    }

    /// A launch starts: what the logs hold now is the ended launch's (read and set aside).
    pub fn launched(&mut self) {
        self.poll();
        for f in self.files.values_mut() {
            f.last_step = None;
        }
    }

    /// Read what each rank's log gained since the last poll.
    pub fn poll(&mut self) -> BTreeMap<u32, Read1> {
        let mut out = BTreeMap::new();
        for (rank, path) in list(&self.pattern) {
            let f = self.files.entry(rank).or_default();
            let mut read = Read1::default();
            let Ok(mut fh) = std::fs::File::open(&path) else {
                continue;
            };
            let len = fh.metadata().map_or(0, |m| m.len());
            if len < f.offset {
                // Truncated or replaced: start over.
                *f = File::default();
            }
            let mut buf = Vec::new();
            if fh.seek(SeekFrom::Start(f.offset)).is_ok() && fh.read_to_end(&mut buf).is_ok() {
                f.offset += buf.len() as u64;
                f.partial.extend_from_slice(&buf);
                let cut = f
                    .partial
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |i| i + 1);
                let whole: Vec<u8> = f.partial.drain(..cut).collect();
                for line in whole.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    if let Some((step, t)) = ranks::parse_line(line, &self.step_key, &self.time_key)
                    {
                        f.last_step = Some(step);
                        read.step_times.extend(t);
                    }
                }
            }
            read.last_step = f.last_step;
            out.insert(rank, read);
        }
        out
    }
}

/// Each rank's newest step and when its log last changed (unix seconds), read from the last
/// 64 KiB of each file: what the critic needs to see a rank whose log has stopped.
pub fn latest(pattern: &Path, step_key: &str) -> Vec<(u32, Option<u64>, Option<f64>)> {
    let mut out = Vec::new();
    for (rank, path) in list(pattern) {
        let Ok(mut fh) = std::fs::File::open(&path) else {
            continue;
        };
        let meta = fh.metadata().ok();
        let len = meta.as_ref().map_or(0, |m| m.len());
        let mtime = meta
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64());
        let mut buf = Vec::new();
        let _ = fh.seek(SeekFrom::Start(len.saturating_sub(64 << 10)));
        let _ = fh.read_to_end(&mut buf);
        let step = buf
            .split(|b| *b == b'\n')
            .rev()
            .find_map(|l| ranks::parse_line(l, step_key, ""))
            .map(|(s, _)| s);
        out.push((rank, step, mtime));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn ranks_are_found_and_read_incrementally() {
        let d = tempfile::tempdir().unwrap();
        let pat = d.path().join("rank{rank}.jsonl");
        let w = |r: u32, s: &str| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(d.path().join(format!("rank{r}.jsonl")))
                .unwrap()
                .write_all(s.as_bytes())
                .unwrap()
        };
        std::fs::write(d.path().join("rank.jsonl"), "x").unwrap();
        w(
            0,
            "{\"step\": 1, \"step_time\": 0.5}\n{\"step\": 2, \"step_t",
        );
        w(1, "{\"step\": 1, \"step_time\": 0.7}\n");
        let mut l = RankLogs::new(&pat, "step", "step_time");
        let r = l.poll();
        assert_eq!(r.len(), 2);
        assert_eq!(r[&0].last_step, Some(1));
        assert_eq!(r[&0].step_times, vec![0.5]);
        w(0, "ime\": 0.6}\n");
        let r = l.poll();
        assert_eq!(
            (r[&0].last_step, r[&0].step_times.clone()),
            (Some(2), vec![0.6])
        );
        assert!(r[&1].step_times.is_empty(), "nothing new from rank 1");
        assert_eq!(r[&1].last_step, Some(1));
        l.launched();
        assert_eq!(
            l.poll()[&0].last_step,
            None,
            "the ended launch's steps are set aside"
        );
        let late = latest(&pat, "step");
        assert_eq!(
            late.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>(),
            vec![(0, Some(2)), (1, Some(1))]
        );
    }
}
