//! The log signal for the sentinel: the log's size and the last step seen. It reads through
//! the critic's incremental [`Tail`] — the same formats, key mapping, rotation, truncation and
//! replacement handling, and only the bytes appended since the last tick. It also keeps the
//! newest step the current launch logged itself, so verdicts about the data of an earlier
//! launch are told apart (verdicts.rs). A big log is first looked at from its end: the last
//! step and the gap before it are in its newest lines.

use crate::config::Config;
use crate::metrics::tail::Tail;
use crate::sentinel::LogObs;

/// A log bigger than this is first read from near its end ...
const FIRST_LOOK_MIN: u64 = 4 << 20;
/// ... this many bytes before it, when they hold a sample.
const FIRST_LOOK_BYTES: u64 = 256 << 10;

pub struct LogTail {
    tail: Option<Tail>,
    last_step: Option<u64>,
    /// The newest step read since [`LogTail::launched`]: one the current launch logged.
    launch_step: Option<u64>,
    /// The launch's logging cadence: the last step minus the one logged before it.
    launch_gap: Option<u64>,
    launch_prev: Option<u64>,
}

impl LogTail {
    pub fn new(cfg: &Config) -> anyhow::Result<LogTail> {
        let tail = match &cfg.run.log {
            Some(path) => Some(match near_end(cfg, path) {
                Some(near) => near,
                None => Tail::new(path, cfg.run.format, &cfg.metrics)?,
            }),
            None => None,
        };
        Ok(LogTail {
            tail,
            last_step: None,
            launch_step: None,
            launch_gap: None,
            launch_prev: None,
        })
    }

    /// A launch is about to start: what the log holds now was written before it (read and
    /// set aside), so only steps logged from here on are the new launch's — and the step the
    /// sentinel sees is none until the new launch logs one, not the dead run's last.
    pub fn launched(&mut self) {
        let _ = self.poll();
        self.launch_step = None;
        self.last_step = None;
        self.launch_gap = None;
        self.launch_prev = None;
    }

    /// Steps between the launch's last two logged steps (how often it logs).
    pub fn launch_cadence(&self) -> Option<u64> {
        self.launch_gap
    }

    /// The newest step the current launch has logged (everything read, when attached).
    pub fn launch_reached(&self) -> Option<u64> {
        self.launch_step
    }

    pub fn poll(&mut self) -> Result<LogObs, String> {
        let tail = self
            .tail
            .as_mut()
            .ok_or_else(|| "no [run] log in the config: progress cannot be seen".to_string())?;
        let shown = tail.path().display().to_string();
        let mut newest = None;
        let (prev, gap) = (&mut self.launch_prev, &mut self.launch_gap);
        let poll = tail
            .poll_into(&mut |recs| {
                for r in recs.iter() {
                    match *prev {
                        Some(p) if r.step > p => *gap = Some(r.step - p),
                        _ => {}
                    }
                    *prev = Some(r.step);
                }
                newest = recs.last().map(|r| r.step).or(newest)
            })
            .map_err(|e| format!("{e:#}"))?;
        if poll.missing {
            return Err(format!("{shown}: the log does not exist (yet)"));
        }
        if poll.snapshot || poll.restarted.is_some() {
            // The whole log (or a new file) was read: its newest step is the truth.
            self.last_step = newest.or(if poll.snapshot { self.last_step } else { None });
        } else if newest.is_some() {
            self.last_step = newest;
        }
        if let Some(n) = newest {
            self.launch_step = Some(self.launch_step.map_or(n, |l| l.max(n)));
        }
        let bytes = std::fs::metadata(tail.path()).map_or(0, |m| m.len());
        Ok(LogObs {
            bytes,
            last_step: self.last_step,
        })
    }
}

/// A tail starting near the end of a big line-based log whose last stretch holds a sample.
fn near_end(cfg: &Config, path: &std::path::Path) -> Option<Tail> {
    let big = std::fs::metadata(path).is_ok_and(|m| m.len() > FIRST_LOOK_MIN);
    if !big
        || crate::metrics::line_parser(cfg.run.format, &cfg.metrics)
            .ok()?
            .is_none()
    {
        return None;
    }
    let open = || Tail::near_end(path, cfg.run.format, &cfg.metrics, FIRST_LOOK_BYTES).ok();
    let probe = open()?.poll().ok()?;
    if probe.batch.records.is_empty() {
        return None; // only noise there (progress bars): read it all
    }
    open()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::path::{Path, PathBuf};

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
    fn a_launch_reaches_only_the_steps_logged_after_it() {
        let d = tempfile::tempdir().unwrap();
        let (mut t, log) = tail(d.path(), "");
        append(&log, "{\"step\": 93}\n{\"step\": 94}\n");
        assert_eq!(t.poll().unwrap().last_step, Some(94));
        assert_eq!(t.launch_reached(), Some(94), "attached: all of it");
        // Rollback: the dead run's tail is not the new launch's, nor are lines it left unread.
        append(&log, "{\"step\": 95}\n");
        t.launched();
        assert_eq!(t.launch_reached(), None);
        assert_eq!(t.poll().unwrap().last_step, None, "not the dead run's step");
        assert_eq!(t.launch_reached(), None);
        append(&log, "{\"step\": 11}\n{\"step\": 12}\n");
        assert_eq!(t.poll().unwrap().last_step, Some(12));
        assert_eq!(t.launch_reached(), Some(12));
        assert_eq!(t.launch_cadence(), Some(1));
        append(&log, "{\"step\": 50}\n");
        t.poll().unwrap();
        assert_eq!(t.launch_cadence(), Some(38));
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

    #[test]
    fn a_big_log_is_first_read_from_near_its_end() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("log");
        let mut text = String::new();
        for i in 0..200_000u64 {
            text.push_str(&format!("{{\"step\": {}, \"loss\": 2.0}}\n", 10 * i));
        }
        std::fs::write(&log, &text).unwrap();
        let (mut t, _) = tail(d.path(), "");
        let o = t.poll().unwrap();
        assert_eq!(o.last_step, Some(1_999_990));
        assert_eq!(t.launch_cadence(), Some(10));
        let state = t.tail.as_ref().unwrap().resume_state().unwrap();
        assert_eq!(state.offset, text.len() as u64);
        let from = state.lines_from.expect("started near the end");
        assert!(text.len() as u64 - from <= 300 << 10, "read from {from}");
        // Only the stretch was read: a second poll after an append reads just that.
        append(&log, "{\"step\": 2000000}\n");
        assert_eq!(t.poll().unwrap().last_step, Some(2_000_000));
    }
}
