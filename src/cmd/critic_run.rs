//! The critic's edge: a [`Runner`] owns the log tail, the history and the GPU reader, and
//! turns one tick (read new bytes → observe → judge) into a verdict; [`daemon`] repeats it
//! every interval, files a verdict when something changed (and runs hygiene's disk check
//! when `[critic] disk_check` asks), and stops cleanly on SIGTERM/SIGINT after finishing the
//! verdict in hand.

use crate::config::Config;
use crate::critic::{self, observe, History, Observation, Verdict};
use crate::gpu::GpuReader;
use crate::ledger::Ledger;
use crate::metrics::tail::Tail;
use crate::metrics::{Garbage, Record};
use crate::sys::Clock;
use anyhow::Result;
use chrono::{DateTime, Utc};
use nix::sys::signal::Signal;
use std::time::Duration;

pub struct Runner<'a> {
    pub cfg: &'a Config,
    tail: Tail,
    history: History,
    gpu: &'a mut dyn GpuReader,
    pids: Vec<u32>,
    judged_through: Option<u64>,
}

/// One tick's result.
pub struct Tick {
    pub obs: Observation,
    pub verdict: Verdict,
    pub new_samples: usize,
    pub bytes_read: u64,
    pub garbage: Vec<Garbage>,
    /// Unreadable lines in this read, all of them (`garbage` keeps the first few).
    pub garbage_total: u64,
    pub missing: bool,
    pub restarted: Option<String>,
}

impl<'a> Runner<'a> {
    pub fn new(
        cfg: &'a Config,
        tail: Tail,
        gpu: &'a mut dyn GpuReader,
        pids: Vec<u32>,
    ) -> Runner<'a> {
        Runner {
            cfg,
            tail,
            history: History::new(cfg),
            gpu,
            pids,
            judged_through: None,
        }
    }

    pub fn replace_tail(&mut self, tail: Tail) {
        self.tail = tail;
    }

    /// The state a summary cache carries to the next `--once`.
    pub fn state(&self) -> (&Tail, &History) {
        (&self.tail, &self.history)
    }

    /// Go on from a cached history (read by `tail`, resumed where it stood). What the last
    /// verdict judged is set from the ledger again, as for a fresh read.
    pub fn restore(&mut self, mut history: History) {
        history.forget_judged();
        self.history = history;
    }

    /// `--once`: the ledger's last verdict of this run judged up to `step`; samples after it
    /// are new to this one (applied after the read, so a resume in the log before then does
    /// not make old samples new).
    pub fn judged_through(&mut self, step: Option<u64>) {
        self.judged_through = step;
    }

    /// Read what is new and judge the run as of `now`.
    pub fn tick(&mut self, now: DateTime<Utc>) -> Result<Tick> {
        let poll = if self.tail.is_snapshot() {
            let mut poll = self.tail.poll()?;
            if poll.snapshot {
                self.history
                    .replace(std::mem::take(&mut poll.batch.records));
            }
            poll
        } else {
            let history = &mut self.history;
            self.tail.poll_into(&mut |recs: &mut Vec<Record>| {
                for r in recs.drain(..) {
                    history.push(r);
                }
            })?
        };
        if let Some(step) = self.judged_through.take() {
            self.history.judged_through(step);
        }
        let new_samples = poll.records;
        self.history.garbage_total += poll.batch.garbage_total;
        let now_s = now_seconds(now);
        let mut obs = observe(&self.history, self.cfg, now_s, None);
        if observe::needs_gpu(&obs) {
            obs.gpu_vram = Some(observe::read_vram(&mut *self.gpu, &self.pids));
        }
        if let Some(pattern) = &self.cfg.run.rank_log {
            // The other ranks' logs feed staleness; the curves are the judged rank's.
            obs.ranks = crate::watch::ranklogs::latest(pattern, &self.cfg.metrics.step)
                .into_iter()
                .filter(|(r, _, _)| *r != self.cfg.ranks.judge)
                .map(|(rank, step, changed_at)| critic::RankProgress {
                    rank,
                    step,
                    changed_at,
                })
                .collect();
        }
        let mut verdict = critic::judge(&obs);
        if verdict.best().is_some() {
            // Overfitting: name the published checkpoint nearest the best eval (the whole
            // ledger is read only then), archived in the observation so replay agrees.
            let recs = Ledger::new(self.cfg.ledger_path())
                .records()
                .unwrap_or_default();
            let best = critic::overfit::best_step(&obs.evals);
            obs.near_best =
                best.and_then(|s| critic::overfit::nearest(&recs, &self.cfg.run.name, s));
            if obs.near_best.is_some() {
                verdict = critic::judge(&obs);
            }
        }
        // What this verdict judged is not new to the next one.
        self.history.judged();
        Ok(Tick {
            obs,
            verdict,
            new_samples,
            bytes_read: poll.bytes_read,
            garbage: poll.batch.garbage,
            garbage_total: poll.batch.garbage_total,
            missing: poll.missing,
            restarted: poll.restarted,
        })
    }
}

/// The clock as the critic judges it: unix seconds, to the millisecond.
fn now_seconds(now: DateTime<Utc>) -> f64 {
    now.timestamp() as f64 + f64::from(now.timestamp_subsec_millis()) / 1e3
}

/// The newest `want` critic verdicts of `run`, oldest first, read from the end of the
/// ledger back only as far as they go (a ledger grows by a verdict every check: reading all
/// of it each time would make every check slower than the last). Unreadable: none.
pub fn recent_verdicts(ledger: &Ledger, run: &str, want: usize) -> Vec<crate::ledger::Record> {
    use std::os::unix::fs::FileExt;
    let Ok(file) = std::fs::File::open(ledger.path()) else {
        return Vec::new();
    };
    let size = file.metadata().map_or(0, |m| m.len());
    let mine = |r: &crate::ledger::Record| {
        r.kind == crate::ledger::Kind::Verdict && r.source == "critic" && r.run == run
    };
    let mut stretch: u64 = 32 << 10;
    loop {
        let from = size.saturating_sub(stretch);
        let mut buf = vec![0u8; (size - from) as usize];
        if file.read_exact_at(&mut buf, from).is_err() {
            return Vec::new();
        }
        // From the first whole line (the chain check of the first one is moot here).
        let start = if from == 0 {
            0
        } else {
            memchr::memchr(b'\n', &buf).map_or(buf.len(), |i| i + 1)
        };
        let found: Vec<_> = crate::ledger::scan_bytes(&buf[start..])
            .records
            .into_iter()
            .filter(mine)
            .collect();
        if found.len() >= want || from == 0 {
            let skip = found.len().saturating_sub(want);
            return found.into_iter().skip(skip).collect();
        }
        stretch *= 4;
    }
}

/// The step of the newest critic verdict of `run` in the ledger (none, or unreadable: `None`).
pub fn last_judged_step(ledger: &Ledger, run: &str) -> Option<u64> {
    recent_verdicts(ledger, run, 1).pop()?.step
}

/// Name the checks hygiene's flap detector finds flapping in this run's recent verdicts
/// (the status is left as judged; the flag tells a reader not to chase every flip). A ledger
/// that cannot be read leaves the list empty.
pub fn mark_flapping(verdict: &mut Verdict, ledger: &Ledger, cfg: &Config) {
    let recent = recent_verdicts(ledger, &cfg.run.name, 4 * cfg.hygiene.flap_window.max(1));
    let recent: Vec<&crate::ledger::Record> = recent.iter().collect();
    verdict.flapping = crate::hygiene::flap::flapping_checks(&recent, &cfg.hygiene)
        .into_iter()
        .map(|s| s.check)
        .collect();
}

pub struct DaemonOptions {
    pub interval: Duration,
    pub heartbeat: bool,
}

/// Tick until signalled. `on_tick(tick, filed_seq)` prints; a verdict is filed when it is the
/// first, new samples arrived, a check changed status, or `heartbeat` asks for every tick.
pub fn daemon(
    runner: &mut Runner<'_>,
    ledger: &Ledger,
    clock: &dyn Clock,
    opts: &DaemonOptions,
    on_tick: &mut dyn FnMut(&Tick, Option<u64>),
) -> Result<()> {
    // SIGTERM/SIGINT end the loop after the verdict in hand is finished (they wait in the
    // pipe while a tick runs).
    let sig = crate::watch::signals::Signals::on(&[Signal::SIGTERM, Signal::SIGINT])?;
    let mut last: Option<Verdict> = None;
    let mut disk = crate::hygiene::disk_tick::DiskTicker::default();
    let mut export = crate::export::Exporter::from_config(runner.cfg, "critic");
    let mut notify =
        crate::notify::daemon::Notifier::from_config(runner.cfg, "critic", clock.now());
    let mut feed = crate::ledger::follow::for_readers(
        ledger.path().to_path_buf(),
        export.is_some() || notify.is_some(),
    );
    loop {
        let now = clock.now();
        if runner.cfg.critic.disk_check {
            let step = last.as_ref().and_then(|v| v.step);
            match disk.tick(runner.cfg, ledger, "critic", step, now) {
                Ok(Some(report)) => {
                    if let Some(e) = export.as_mut() {
                        e.disk(&report.targets);
                    }
                }
                Ok(None) => {}
                Err(e) => eprintln!("roger: error: disk check: {e:#}"),
            }
        }
        let mut observed = false;
        match runner.tick(now) {
            Ok(mut tick) => {
                observed = true;
                mark_flapping(&mut tick.verdict, ledger, runner.cfg);
                let changed = last
                    .as_ref()
                    .is_none_or(|l| tick.new_samples > 0 || !tick.verdict.same_statuses(l));
                let mut seq = None;
                if changed || opts.heartbeat {
                    let rec = ledger.append(
                        tick.verdict
                            .entry_from(&runner.cfg.run.name, &tick.obs, &runner.cfg.path),
                        now,
                    )?;
                    seq = Some(rec.seq);
                    last = Some(tick.verdict.clone());
                }
                on_tick(&tick, seq);
            }
            // A log that cannot be read this tick (permissions, NFS hiccup) is reported and
            // retried; the daemon itself stays up.
            Err(e) => eprintln!("roger: error: {e:#}"),
        }
        // The verdict just filed is in the ledger, so the readers have it.
        let new = crate::ledger::follow::this_tick(&mut feed);
        if let Some(e) = export.as_mut() {
            let live = crate::export::Live {
                now: now.timestamp_millis() as f64 / 1000.0,
                ..Default::default()
            };
            e.tick(&live, &new);
        }
        if let Some(n) = notify.as_mut() {
            n.tick(now, observed, &new);
        }
        if !sig.wait(opts.interval).is_empty() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::critic::Status;
    use crate::gpu::FakeGpu;

    fn state(entries: &[(u64, f64, f64)]) -> String {
        let hist: Vec<String> = entries
            .iter()
            .map(|(s, l, g)| format!(r#"{{"step": {s}, "loss": {l}, "grad_norm": {g}}}"#))
            .collect();
        format!(
            r#"{{"global_step": 1, "log_history": [{}]}}"#,
            hist.join(", ")
        )
    }

    /// Issue 18 item 3: trainer_state.json is rewritten only at saves; a loss and a grad-norm
    /// spike between two reads are over by the second read, and its verdict still names them.
    #[test]
    fn a_spike_between_two_snapshot_reads_is_reported_with_its_step() {
        let dir = tempfile::tempdir().unwrap();
        let toml = dir.path().join("roger.toml");
        let log = dir.path().join("trainer_state.json");
        std::fs::write(
            &toml,
            "[run]\nname = \"t\"\nlog = \"trainer_state.json\"\nformat = \"hf-trainer-state\"\n\
             [[phase]]\nname = \"a\"\nfrom = 0\nwindow = 50\nloss_spike = 1.5\ngrad_norm_spike = 5.0\n",
        )
        .unwrap();
        let cfg = Config::load(&toml).unwrap();
        let mut entries: Vec<(u64, f64, f64)> = (1..=40).map(|i| (10 * i, 3.0, 0.5)).collect();
        std::fs::write(&log, state(&entries)).unwrap();
        let tail = Tail::new(&log, cfg.run.format, &cfg.metrics).unwrap();
        let mut gpu = FakeGpu::new(vec![]);
        let mut runner = Runner::new(&cfg, tail, &mut gpu, vec![]);
        let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let first = runner.tick(t0).unwrap();
        assert_eq!(first.verdict.status, Status::Pass, "{:#?}", first.verdict);
        // The next save: 40 more steps, a spike at step 600 and normal again after it.
        entries.extend((41..=80).map(|i| {
            let spike = i == 60;
            (
                10 * i,
                if spike { 9.0 } else { 3.0 },
                if spike { 6.0 } else { 0.5 },
            )
        }));
        std::fs::write(&log, state(&entries)).unwrap();
        let second = runner.tick(t0 + chrono::Duration::seconds(60)).unwrap();
        let v = &second.verdict;
        assert_eq!(v.step, Some(800));
        for name in ["loss_spike", "grad_norm"] {
            let c = v.checks.iter().find(|c| c.check == name).unwrap();
            assert_eq!(c.status, Status::Warn, "{name}: {}", c.reason);
            assert!(c.reason.contains("step 600"), "{name}: {}", c.reason);
        }
        // Replayed from its observation alone, the same verdict.
        let back: Observation =
            serde_json::from_value(serde_json::to_value(&second.obs).unwrap()).unwrap();
        assert_eq!(&critic::judge(&back), v);
        // Reported once: the read after it has nothing new between, and passes.
        let third = runner.tick(t0 + chrono::Duration::seconds(120)).unwrap();
        assert_eq!(third.verdict.status, Status::Pass, "{:#?}", third.verdict);
    }

    /// The newest verdicts of a run, read from the ledger's end: the same as from all of it,
    /// however many records of other runs and kinds lie between.
    #[test]
    fn recent_verdicts_come_from_the_end_of_a_long_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path().join("l.jsonl"));
        let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let pad = "x".repeat(2000);
        for i in 0..600u64 {
            let (source, run) = match i % 3 {
                0 => ("critic", "a"),
                1 => ("critic", "b"),
                _ => ("watch", "a"),
            };
            let e = crate::ledger::Entry::new(crate::ledger::Kind::Verdict, source, run)
                .step(Some(i))
                .field("pad", &pad);
            ledger.append(e, t0).unwrap();
        }
        let all: Vec<u64> = ledger
            .records()
            .unwrap()
            .into_iter()
            .filter(|r| r.source == "critic" && r.run == "a")
            .filter_map(|r| r.step)
            .collect();
        for want in [1, 7, 150, 1000] {
            let got: Vec<u64> = recent_verdicts(&ledger, "a", want)
                .into_iter()
                .filter_map(|r| r.step)
                .collect();
            assert_eq!(got, all[all.len().saturating_sub(want)..], "want {want}");
        }
        assert_eq!(last_judged_step(&ledger, "a"), Some(597));
        assert_eq!(last_judged_step(&ledger, "none"), None);
    }
}
