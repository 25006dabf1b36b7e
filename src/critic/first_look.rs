//! The first look at a big log with no summary cache: read a stretch at its end, not all
//! of it. The run's [`History`] is built from a stretch (16 KiB, then twice as much each
//! time) and from one twice as long; when both give the same history, the window is full
//! of the current timeline, and nothing the stretch cannot show lies before it (an eval, a
//! logged `total_steps`: searched for as bytes, which is far cheaper than parsing), that
//! history is the one a full read builds, and it is judged. Otherwise, or for a log whose
//! lines are timed across lines (an elapsed clock, token counters), the log is read whole.
//! Only a sample timed later than every sample after it (a clock that ran backwards) before
//! the stretch would be missed by the staleness check; the counts of samples and unreadable
//! lines in the observation cover what was read.

use super::observe::{History, EVALS_KEPT};
use crate::config::{Clock, Config, LogFormat};
use crate::metrics::tail::Tail;
use crate::metrics::Record;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The first stretch read.
const FIRST: u64 = 16 << 10;

/// What the first look read: the tail (positioned after the stretch), the history it
/// built, and the byte where the stretch began.
pub struct Look {
    pub tail: Tail,
    pub history: History,
    pub from: u64,
}

/// The look at a stretch at the end, or why the log is read whole.
pub fn from_the_end(cfg: &Config, log: &Path) -> Result<Look, String> {
    let m = &cfg.metrics;
    if !matches!(cfg.run.format, LogFormat::Jsonl | LogFormat::Csv) {
        return Err("only JSONL and CSV logs are read from the end".into());
    }
    if crate::metrics::locate::is_pattern(log)
        || m.clock != Clock::Unix
        || !m.tokens.is_empty()
        || m.tokens_per_step.is_some()
    {
        return Err("its samples are timed or counted across lines".into());
    }
    let file = File::open(log).map_err(|e| format!("opening the log: {e}"))?;
    let size = file.metadata().map_err(|e| format!("stat: {e}"))?.len();
    // Keys whose lines may be anywhere (an eval every few thousand steps, a total logged once).
    let mut rare: Vec<Rare> = Vec::new();
    if !m.eval_loss.is_empty() {
        rare.push(Rare::new(&m.eval_loss, Fact::Evals));
    }
    let total_from_log = cfg
        .schedule
        .as_ref()
        .is_none_or(|s| s.total_steps.is_none());
    if !m.total_steps.is_empty() && total_from_log {
        rare.push(Rare::new(&m.total_steps, Fact::Total));
    }
    let mut stretch = FIRST;
    let mut shorter: Option<Vec<u8>> = None;
    while stretch < size {
        let from = crate::metrics::tail::line_start(&file, size - stretch)?;
        let mut tail = Tail::starting_at(log, cfg.run.format, m, from)?;
        let mut history = History::new(cfg);
        tail.poll_into(&mut |recs: &mut Vec<Record>| {
            for r in recs.drain(..) {
                history.push(r);
            }
        })
        .map_err(|e| format!("{e:#}"))?;
        let state = history.state_bytes();
        let settled = shorter.as_ref() == Some(&state)
            && history.window_full()
            && rare
                .iter_mut()
                .all(|r| !r.possible_before(&file, from) || r.seen_enough(&history));
        if settled {
            return Ok(Look {
                tail,
                history,
                from,
            });
        }
        shorter = Some(state);
        stretch *= 2;
    }
    Err("the stretch grew to the whole log".into())
}

#[derive(Clone, Copy, PartialEq)]
enum Fact {
    Evals,
    Total,
}

/// A key that may appear anywhere, searched for as bytes before the stretch.
struct Rare {
    needle: Vec<u8>,
    fact: Fact,
    /// Nothing before this offset (searched already).
    clean_below: Option<u64>,
}

impl Rare {
    /// The key's last component (`eval/loss` is `{"eval": {"loss": ..}}` in nested JSON).
    fn new(key: &str, fact: Fact) -> Rare {
        let last = key.rsplit(['/', '.']).next().unwrap_or(key);
        Rare {
            needle: last.as_bytes().to_vec(),
            fact,
            clean_below: None,
        }
    }

    /// Whether the key's bytes occur before `end` (a header counts: its column may be set
    /// on any row).
    fn possible_before(&mut self, file: &File, end: u64) -> bool {
        if self.clean_below.is_some_and(|c| end <= c) {
            return false;
        }
        let finder = memchr::memmem::Finder::new(&self.needle);
        let overlap = self.needle.len().saturating_sub(1) as u64;
        let mut buf = vec![0u8; 8 << 20];
        let mut hi = end;
        while hi > 0 {
            let lo = hi.saturating_sub(buf.len() as u64 - overlap);
            let len = (hi + overlap).min(end) - lo;
            let Ok(()) = file.read_exact_at(&mut buf[..len as usize], lo) else {
                return true; // cannot tell: assume it is there
            };
            if finder.find(&buf[..len as usize]).is_some() {
                return true;
            }
            hi = lo;
        }
        self.clean_below = Some(end);
        false
    }

    /// Whether the stretch holds all a full read would keep of this fact.
    fn seen_enough(&self, h: &History) -> bool {
        match self.fact {
            Fact::Evals => h.evals_len() >= EVALS_KEPT,
            Fact::Total => h.has_total_steps(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    fn cfg(dir: &Path, extra: &str) -> Config {
        let text = format!(
            "[run]\nname = \"t\"\nlog = \"train.jsonl\"\n{extra}[[phase]]\nname = \"a\"\nfrom = 0\nwindow = 20\nloss = [0.5, 6.0]\n"
        );
        Config::parse(&text, &dir.join("roger.toml")).unwrap()
    }

    fn log(steps: u64, eval_every: u64) -> String {
        let mut s = String::new();
        for i in 0..steps {
            writeln!(
                s,
                "{{\"step\": {i}, \"time\": {}, \"loss\": 3.0}}",
                1e9 + i as f64
            )
            .unwrap();
            if eval_every > 0 && i % eval_every == 0 {
                writeln!(s, "{{\"step\": {i}, \"eval_loss\": 2.0}}").unwrap();
            }
        }
        s
    }

    #[test]
    fn a_big_log_is_judged_from_a_stretch_at_its_end() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("train.jsonl");
        std::fs::write(&p, log(20_000, 0)).unwrap();
        let c = cfg(d.path(), "");
        let look = from_the_end(&c, &p).unwrap();
        let size = std::fs::metadata(&p).unwrap().len();
        assert!(
            look.from > size * 9 / 10,
            "read {} of {size} bytes",
            size - look.from
        );
        assert_eq!(look.history.last_step(), Some(19_999));
        // Evals before the stretch: fewer than a full read keeps, so the log is read whole.
        std::fs::write(&p, log(20_000, 1000)).unwrap();
        assert!(from_the_end(&c, &p).err().unwrap().contains("whole log"));
        // Timed across lines: read whole.
        let c = cfg(d.path(), "[metrics]\ntokens = \"tokens\"\n");
        assert!(from_the_end(&c, &p).err().unwrap().contains("across lines"));
    }
}
