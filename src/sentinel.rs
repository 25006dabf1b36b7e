//! Liveness, decided from timed samples and nothing else: Working, Grind, Wedge, Zombie,
//! Exited, or Unknown (naming the missing signal). Pure: no I/O, time comes in the samples.
//! "Why did roger kill my run" is answered here and in one ledger record. The rules, in order:
//!
//! 1. main process exited and nothing of the run lingers → Exited (at once, no hysteresis);
//!    exited/defunct while processes of its tree or its GPU memory linger → Zombie.
//! 2. the log or the process cannot be read → Unknown (a blind watcher never looks healthy).
//!    A GPU that is simply absent (CPU box, `source = "none"`) is noted, not blinding; a GPU
//!    read that fails is blinding unless the log shows progress.
//! 3. a new step in the log (or, before any step was parsed, new bytes) → Working.
//! 4. silent for no longer than the stale limit → Working (steps are not continuous).
//! 5. silent past the stale limit and busy (CPU, I/O, log bytes, or GPU pinned *with* power
//!    draw) → Grind, until the silence passes the grind limit → Wedge.
//! 6. silent past the stale limit and idle — or the GPU pinned at low power, the NCCL spin,
//!    where host CPU spinning does not count as work → Wedge.
//!
//! Stale limit: the phase's `stale`, else `[watch] stale`, else calibrated; never below the
//! grind limit before the first step of a launch (loading, compiling); a declared `[[quiet]]`
//! period at its step raises it to the period's duration. A state counts only after holding
//! `hysteresis` samples in a row that span at least (hysteresis - 1) x interval of time.
//! Activity (CPU, I/O) is measured over a window of at least half an interval, and a window
//! in which a process of the run vanished with its final usage unknown is never idle.

pub mod calibrate;
#[cfg(test)]
mod tests;
mod types;

pub use types::*;

use calibrate::Calibrator;
use std::collections::VecDeque;

pub struct Sentinel {
    rules: Rules,
    pub calibration: Calibrator,
    prev: Option<Sample>,
    last_progress_at: f64,
    progressed: bool,
    last_step: Option<u64>,
    ever_step: bool,
    /// The raw state, how many samples in a row it held, and when the first of them was.
    streak: (&'static str, u32, f64),
    reported: State,
    /// Recent (time, process reading) pairs: the base of activity windows.
    history: VecDeque<(f64, Option<ProcObs>)>,
    recent: VecDeque<Trace>,
    /// Recent (time, rank readings) pairs: the base of per-rank windows.
    rank_history: VecDeque<(f64, Vec<crate::ranks::RankObs>)>,
}

impl Sentinel {
    pub fn new(rules: Rules, calibration: Calibrator, launched_at: f64) -> Sentinel {
        Sentinel {
            rules,
            calibration,
            prev: None,
            last_progress_at: launched_at,
            progressed: false,
            last_step: None,
            ever_step: false,
            streak: ("", 0, launched_at),
            history: VecDeque::new(),
            reported: State::Unknown {
                missing: vec!["no samples yet".into()],
            },
            recent: VecDeque::new(),
            rank_history: VecDeque::new(),
        }
    }

    /// A new launch: forget the process baseline, keep the calibration.
    pub fn relaunched(&mut self, at: f64) {
        let cal = self.calibration.clone();
        *self = Sentinel::new(self.rules.clone(), cal, at);
    }

    pub fn last_step(&self) -> Option<u64> {
        self.last_step
    }

    /// The stale limit in force for the current step.
    pub fn limit(&self) -> Limit {
        let phase = self.last_step.and_then(|s| {
            self.rules
                .phases
                .iter()
                .find(|(from, to, _, _)| s >= *from && to.is_none_or(|t| s < t))
        });
        let mut limit = match (phase.and_then(|p| p.2.map(|s| (s, &p.3))), self.rules.stale) {
            (Some((s, name)), _) => Limit {
                seconds: s,
                source: format!("phase '{name}' stale"),
            },
            (None, Some(s)) => Limit {
                seconds: s,
                source: "[watch] stale".into(),
            },
            (None, None) => match self.calibration.limit() {
                Some(s) => Limit {
                    seconds: s,
                    source: "calibrated".into(),
                },
                None => Limit {
                    seconds: self.rules.grind_limit,
                    source: "grind_limit (no progress gap seen yet to calibrate)".into(),
                },
            },
        };
        if !self.progressed && limit.seconds < self.rules.grind_limit {
            limit = Limit {
                seconds: self.rules.grind_limit,
                source: format!("grind_limit until the first step (else {})", limit.source),
            };
        }
        if let Some(step) = self.last_step {
            for (name, every, dur) in &self.rules.quiet {
                if step > 0 && step.is_multiple_of(*every) && *dur > limit.seconds {
                    limit = Limit {
                        seconds: *dur,
                        source: format!("quiet '{name}' at step {step}"),
                    };
                }
            }
        }
        limit
    }

    pub fn observe(&mut self, s: Sample) -> Assessment {
        let prev = self.prev.take();
        let (progress, log_grew) = self.note_progress(prev.as_ref(), &s);
        let limit = self.limit();
        let silent = (s.at - self.last_progress_at).max(0.0);
        let rates = self.rates(&s);
        let ranks = self.rank_rates(&s);
        let (raw, mut reasons) = self.classify(&s, progress, log_grew, silent, &limit, rates);
        if !matches!(raw, State::Working | State::Exited { .. }) {
            // Which ranks are idle, busy or in D state, and the one that differs, if any.
            reasons.extend(crate::ranks::describe(&ranks));
        }

        let kind = raw.name();
        self.streak = if self.streak.0 == kind {
            (kind, self.streak.1 + 1, self.streak.2)
        } else {
            (kind, 1, s.at)
        };
        let before = self.reported.clone();
        let r = &self.rules;
        let held = self.streak.1 >= r.hysteresis
            && s.at - self.streak.2 + 1e-9
                >= f64::from(r.hysteresis.saturating_sub(1)) * r.interval;
        if matches!(raw, State::Exited { .. }) || held {
            self.reported = raw.clone();
        }
        let mut t = trace(&s, &raw, rates);
        t.ranks = ranks;
        self.recent.push_back(t);
        while self.recent.len() > self.rules.hysteresis as usize + 2 {
            self.recent.pop_front();
        }
        self.prev = Some(s);
        Assessment {
            changed: before != self.reported,
            state: self.reported.clone(),
            raw,
            reasons,
            limit,
            silent_s: silent,
            last_step: self.last_step,
            samples: self.recent.iter().cloned().collect(),
        }
    }

    /// CPU and I/O rates from the newest earlier sample at least half an interval old (the
    /// oldest kept when none is), so a sample taken early never measures a sliver of time.
    fn rates(&mut self, s: &Sample) -> Option<Rates> {
        let min_window = self.rules.interval / 2.0;
        while self.history.len() >= 2 && s.at - self.history[1].0 >= min_window {
            self.history.pop_front();
        }
        let out = self.history.front().and_then(|(at, base)| {
            let (base, cur) = (base.as_ref()?, s.proc.as_ref().ok()?);
            let dt = (s.at - at).max(1e-9);
            // I/O is known only if every reading in the window could read it.
            let io_known = self
                .history
                .iter()
                .skip(1)
                .all(|(_, p)| p.is_some_and(|p| p.io_bytes.is_some()));
            Some(Rates {
                cpu: ((cur.cpu_s - base.cpu_s) / dt).max(0.0),
                io: match (base.io_bytes, cur.io_bytes) {
                    (Some(x), Some(y)) if io_known => Some(y.saturating_sub(x) as f64 / dt),
                    _ => None,
                },
                lost: cur.lost.saturating_sub(base.lost),
            })
        });
        self.history
            .push_back((s.at, s.proc.as_ref().ok().copied()));
        out
    }

    /// Each rank's activity over the same kind of window as [`Sentinel::rates`].
    fn rank_rates(&mut self, s: &Sample) -> Vec<crate::ranks::RankLive> {
        let min_window = self.rules.interval / 2.0;
        while self.rank_history.len() >= 2 && s.at - self.rank_history[1].0 >= min_window {
            self.rank_history.pop_front();
        }
        let r = &self.rules;
        let out = self
            .rank_history
            .front()
            .map_or_else(Vec::new, |(at, base)| {
                crate::ranks::rates(
                    base,
                    &s.ranks,
                    s.at - at,
                    r.busy_cpu,
                    r.busy_io,
                    r.gpu_pinned_util,
                )
            });
        self.rank_history.push_back((s.at, s.ranks.clone()));
        out
    }

    /// Update progress bookkeeping; (progress, log bytes grew).
    fn note_progress(&mut self, prev: Option<&Sample>, s: &Sample) -> (bool, bool) {
        let Ok(log) = &s.log else {
            return (false, false);
        };
        let prev_log = prev.and_then(|p| p.log.as_ref().ok());
        let grew = prev_log.is_some_and(|p| log.bytes > p.bytes);
        let new_step = log.last_step.is_some() && log.last_step != self.last_step;
        if log.last_step.is_some() {
            self.ever_step = true;
        }
        let progress = if self.ever_step {
            new_step && (prev.is_some() || self.last_step.is_some())
        } else {
            grew
        };
        if log.last_step.is_some() {
            self.last_step = log.last_step;
        }
        if progress {
            if self.progressed {
                self.calibration.observe_gap(s.at - self.last_progress_at);
            }
            self.progressed = true;
            self.last_progress_at = s.at;
        }
        (progress, grew)
    }

    fn classify(
        &self,
        s: &Sample,
        progress: bool,
        log_grew: bool,
        silent: f64,
        limit: &Limit,
        rates: Option<Rates>,
    ) -> (State, Vec<String>) {
        let r = &self.rules;
        let mut reasons = Vec::new();
        if let GpuObs::Absent { why } = &s.gpu {
            reasons.push(format!("no GPU signal ({why})"));
        }
        if let Ok(p) = &s.proc {
            let lingering =
                p.others > 0 || matches!(s.gpu, GpuObs::Read { run_vram: Some(v), .. } if v > 0);
            let exited = match p.main {
                Main::Alive { .. } => None,
                Main::Exited { code, signal } => Some((code, signal)),
                Main::Gone => Some((None, None)),
            };
            if let Some((code, signal)) = exited {
                reasons.insert(0, exit_text(code, signal));
                if lingering {
                    reasons.push(format!(
                        "{} process(es) of the run linger{}",
                        p.others,
                        match &s.gpu {
                            GpuObs::Read {
                                run_vram: Some(v), ..
                            } if *v > 0 => format!(", holding {v} bytes of VRAM"),
                            _ => String::new(),
                        }
                    ));
                    return (State::Zombie, reasons);
                }
                return (State::Exited { code, signal }, reasons);
            }
        }
        let mut missing = Vec::new();
        if let Err(e) = &s.log {
            missing.push(format!("log: {e}"));
        }
        if let Err(e) = &s.proc {
            missing.push(format!("process: {e}"));
        }
        if let GpuObs::Failed { why } = &s.gpu {
            if !progress {
                missing.push(format!("GPU: {why}"));
            }
        }
        if !missing.is_empty() {
            return (State::Unknown { missing }, reasons);
        }
        if progress {
            reasons.insert(0, format!("new step {}", fmt_step(self.last_step)));
            return (State::Working, reasons);
        }
        let quiet_for = format!(
            "no new step for {:.1}s (limit {:.1}s, {})",
            silent, limit.seconds, limit.source
        );
        if silent <= limit.seconds {
            reasons.insert(0, format!("{quiet_for}: within the limit"));
            return (State::Working, reasons);
        }
        reasons.insert(0, quiet_for);
        let Some(rates) = rates else {
            return (
                State::Unknown {
                    missing: vec!["process: a second sample is needed to measure activity".into()],
                },
                reasons,
            );
        };
        let p = s.proc.as_ref().expect("checked above");
        let (util, power) = match &s.gpu {
            GpuObs::Read {
                util, power_frac, ..
            } => (*util, *power_frac),
            _ => (None, None),
        };
        let pinned = util.is_some_and(|u| u >= r.gpu_pinned_util);
        let spinning = pinned && power.is_some_and(|pw| pw < r.gpu_low_power);
        let mut busy = Vec::new();
        if spinning {
            reasons.push(format!(
                "GPU pinned at {:.0}% while drawing {:.0}% of its power limit: a spinning kernel (NCCL-style hang), not compute",
                util.unwrap_or(0.0),
                power.unwrap_or(0.0) * 100.0
            ));
        } else {
            if pinned {
                busy.push(format!("GPU at {:.0}%", util.unwrap_or(0.0)));
            }
            if rates.cpu >= r.busy_cpu {
                busy.push(format!("CPU {:.0}% of a core", rates.cpu * 100.0));
            }
        }
        if rates.io.is_some_and(|io| io >= r.busy_io) {
            busy.push(format!("I/O {}/s", human_bytes(rates.io.unwrap_or(0.0))));
        }
        if log_grew {
            busy.push("log growing without a new step".into());
        }
        if p.d_state {
            reasons.push("a process of the run is in uninterruptible sleep (D)".into());
        }
        if busy.is_empty() && rates.lost > 0 {
            // Their work since the previous sample is unknown: not evidence of idleness.
            return (
                State::Unknown {
                    missing: vec![format!(
                        "process: {} process(es) of the run ended since the last sample, reaped outside it, so their final CPU and I/O are unknown (measured: CPU {:.0}% of a core)",
                        rates.lost,
                        rates.cpu * 100.0
                    )],
                },
                reasons,
            );
        }
        if !busy.is_empty() {
            let grind_cap = r.grind_limit.max(limit.seconds);
            reasons.push(format!("busy: {}", busy.join(", ")));
            if silent > grind_cap {
                reasons.push(format!(
                    "busy without progress for {silent:.1}s, past the grind limit {grind_cap:.1}s"
                ));
                return (State::Wedge, reasons);
            }
            return (State::Grind, reasons);
        }
        reasons.push(format!(
            "idle: CPU {:.0}% of a core, I/O {}",
            rates.cpu * 100.0,
            rates
                .io
                .map_or("unreadable".into(), |io| format!("{}/s", human_bytes(io)))
        ));
        (State::Wedge, reasons)
    }
}

#[derive(Debug, Clone, Copy)]
struct Rates {
    cpu: f64,
    io: Option<f64>,
    /// Processes that vanished in the window with their final usage unknown.
    lost: u64,
}

fn trace(s: &Sample, raw: &State, rates: Option<Rates>) -> Trace {
    let (gpu_util, gpu_power) = match &s.gpu {
        GpuObs::Read {
            util, power_frac, ..
        } => (*util, *power_frac),
        _ => (None, None),
    };
    Trace {
        at: (s.at * 1000.0).round() / 1000.0,
        raw: raw.name(),
        step: s.log.as_ref().ok().and_then(|l| l.last_step),
        log_bytes: s.log.as_ref().ok().map(|l| l.bytes),
        main: s.proc.as_ref().ok().map(|p| p.main),
        others: s.proc.as_ref().ok().map(|p| p.others),
        cpu: rates.map(|r| (r.cpu * 1000.0).round() / 1000.0),
        io_per_s: rates.and_then(|r| r.io),
        gpu_util,
        gpu_power,
        ranks: Vec::new(),
    }
}

fn fmt_step(s: Option<u64>) -> String {
    s.map_or("?".into(), |s| s.to_string())
}

pub fn exit_text(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("main process exited with code {c}"),
        (None, Some(s)) => format!("main process killed by signal {s}"),
        (None, None) => "main process is gone (exit status unknown: reaped elsewhere)".into(),
    }
}

pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", UNITS[i])
}
