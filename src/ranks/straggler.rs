//! The straggler rule (a warning, never a kill): per window of time, each rank's speed — from
//! the step times it logs itself (its own work before the collective; in a synchronous job
//! every rank's step *rate* is the same), else — for a job that logs none, in windows where
//! every rank works — from its CPU activity, relative to the
//! median rank's. A rank below `share` of the median for `windows` windows in a row is a
//! straggler, reported once until it recovers. Pure: step times, readings and `now` come in.

use super::RankObs;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// `[ranks]` thresholds.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Relative speed below which a rank is slow (NVRx's default 0.75).
    pub share: f64,
    /// Slow windows in a row before the verdict.
    pub windows: u32,
    /// Seconds of one window.
    pub window_s: f64,
    /// Step times a rank must log in a window for its step times to be used.
    pub min_steps: usize,
}

/// One closed window: each rank's relative speed and where the speed came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    pub end: f64,
    /// "step_time" or "cpu".
    pub source: &'static str,
    /// rank → speed / median speed, rounded to 3 places.
    pub relative: BTreeMap<u32, f64>,
    /// rank → the measure itself: median step time (s) or CPU (cores).
    pub measure: BTreeMap<u32, f64>,
}

/// A straggler found: the rank, its relative speed in each of the windows, and the windows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flag {
    pub rank: u32,
    pub relative: Vec<f64>,
    pub source: &'static str,
    pub windows: Vec<Window>,
}

impl Flag {
    pub fn reason(&self, share: f64) -> String {
        let w = self.windows.last();
        let what = match self.source {
            "step_time" => "median step time",
            _ => "CPU",
        };
        let own = w.and_then(|w| w.measure.get(&self.rank)).copied();
        let med = w.map(|w| median(w.measure.values().copied().collect()));
        let unit = if self.source == "step_time" {
            " s"
        } else {
            " cores"
        };
        format!(
            "rank {} is a straggler: its speed was {} of the median rank's in {} windows in a row (below the share {share}; {what} {}{unit} vs the median {}{unit})",
            self.rank,
            self.relative
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.relative.len(),
            own.map_or("?".into(), |v| format!("{v:.3}")),
            med.flatten().map_or("?".into(), |v| format!("{v:.3}")),
        )
    }
}

/// CPU (cores) below which a rank is waiting, not working, for the CPU fallback.
const CPU_WORKING: f64 = 0.05;

pub struct Detector {
    rule: Rule,
    start: Option<f64>,
    times: BTreeMap<u32, Vec<f64>>,
    cpu_base: Option<(f64, BTreeMap<u32, f64>)>,
    cpu_last: Option<(f64, BTreeMap<u32, f64>)>,
    recent: Vec<Window>,
    streak: BTreeMap<u32, u32>,
    flagged: BTreeSet<u32>,
    /// Some rank has logged step times: the job's speed is judged from them only.
    logs_step_times: bool,
    /// Windows closed with speeds (each a [`Window`] in `recent`).
    closed: u64,
}

impl Detector {
    pub fn new(rule: Rule) -> Detector {
        Detector {
            rule,
            start: None,
            times: BTreeMap::new(),
            cpu_base: None,
            cpu_last: None,
            recent: Vec::new(),
            streak: BTreeMap::new(),
            flagged: BTreeSet::new(),
            logs_step_times: false,
            closed: 0,
        }
    }

    /// How many windows closed with speeds, and the newest: what a node shares of its ranks.
    pub fn newest(&self) -> (u64, Option<&Window>) {
        (self.closed, self.recent.last())
    }

    /// One window of every rank's measure, gathered from many nodes (`source` as in
    /// [`Window`]; a step time or a CPU share per rank), judged by the same rule.
    pub fn judge_measures(
        &mut self,
        at: f64,
        source: &'static str,
        measure: BTreeMap<u32, f64>,
    ) -> Vec<Flag> {
        if measure.len() < 2 {
            return Vec::new();
        }
        let speed: BTreeMap<u32, f64> = measure
            .iter()
            .map(|(r, m)| (*r, if source == "step_time" { 1.0 / m } else { *m }))
            .filter(|(_, s)| s.is_finite() && *s > 0.0)
            .collect();
        let Some(med) = median(speed.values().copied().collect()).filter(|m| *m > 0.0) else {
            return Vec::new();
        };
        let round = |v: f64| (v * 1000.0).round() / 1000.0;
        self.judge(Window {
            end: round(at),
            source,
            relative: speed.iter().map(|(r, s)| (*r, round(s / med))).collect(),
            measure: measure.into_iter().map(|(r, v)| (r, round(v))).collect(),
        })
    }

    /// A new launch: everything measured so far belongs to the old one.
    pub fn reset(&mut self) {
        *self = Detector::new(self.rule.clone());
    }

    /// Step times a rank logged since the last call (seconds).
    pub fn step_times(&mut self, rank: u32, times: &[f64]) {
        self.logs_step_times |= !times.is_empty();
        self.times
            .entry(rank)
            .or_default()
            .extend(times.iter().copied().filter(|t| t.is_finite() && *t > 0.0));
    }

    /// One sample of the ranks' counters; closes a window when it has lasted `window_s`.
    /// Returns the stragglers found by that window (usually none).
    pub fn sample(&mut self, at: f64, ranks: &[RankObs]) -> Vec<Flag> {
        let cpu: BTreeMap<u32, f64> = ranks.iter().map(|r| (r.rank, r.cpu_s)).collect();
        let start = *self.start.get_or_insert(at);
        if self.cpu_base.is_none() {
            self.cpu_base = Some((at, cpu.clone()));
        }
        self.cpu_last = Some((at, cpu));
        if at - start < self.rule.window_s {
            return Vec::new();
        }
        let w = self.close(at);
        self.start = Some(at);
        self.cpu_base = self.cpu_last.clone();
        self.times.clear();
        match w {
            Some(w) => self.judge(w),
            None => Vec::new(),
        }
    }

    /// The window's speeds: step times when every rank logged enough, else CPU.
    fn close(&self, at: f64) -> Option<Window> {
        let ranks: Vec<u32> = self.cpu_last.as_ref()?.1.keys().copied().collect();
        // One rank is judged against nothing here (its relative speed is 1), but its window
        // is what its node shares with the job's other nodes ([cluster]).
        if ranks.is_empty() {
            return None;
        }
        let from_steps = ranks.iter().all(|r| {
            self.times
                .get(r)
                .is_some_and(|t| t.len() >= self.rule.min_steps)
        });
        if !from_steps && self.logs_step_times {
            // The job logs step times: a window short of them (start-up, a checkpoint) is
            // not judged by CPU instead.
            return None;
        }
        let (source, measure, speed): (&'static str, BTreeMap<u32, f64>, BTreeMap<u32, f64>) =
            if from_steps {
                let m: BTreeMap<u32, f64> = ranks
                    .iter()
                    .map(|r| (*r, median(self.times[r].clone()).unwrap_or(f64::NAN)))
                    .collect();
                let s = m.iter().map(|(r, t)| (*r, 1.0 / t)).collect();
                ("step_time", m, s)
            } else {
                let (t0, base) = self.cpu_base.as_ref()?;
                let (t1, last) = self.cpu_last.as_ref()?;
                let dt = t1 - t0;
                if dt <= 0.0 {
                    return None;
                }
                let m: BTreeMap<u32, f64> = ranks
                    .iter()
                    .filter_map(|r| Some((*r, ((last.get(r)? - base.get(r)?) / dt).max(0.0))))
                    .collect();
                if m.is_empty() || m.values().any(|v| *v < CPU_WORKING) {
                    // A rank that does not work at all is waiting (start-up, a collective the
                    // others are late to, a wedge): CPU says nothing about its speed then.
                    return None;
                }
                ("cpu", m.clone(), m)
            };
        let med = median(speed.values().copied().collect())?;
        if !med.is_finite() || med <= 0.0 {
            return None;
        }
        let round = |v: f64| (v * 1000.0).round() / 1000.0;
        Some(Window {
            end: round(at),
            source,
            relative: speed.iter().map(|(r, s)| (*r, round(s / med))).collect(),
            measure: measure.into_iter().map(|(r, v)| (r, round(v))).collect(),
        })
    }

    fn judge(&mut self, w: Window) -> Vec<Flag> {
        self.closed += 1;
        self.recent.push(w.clone());
        let keep = self.rule.windows.max(1) as usize;
        if self.recent.len() > keep {
            self.recent.remove(0);
        }
        let mut out = Vec::new();
        for (rank, rel) in &w.relative {
            let slow = *rel < self.rule.share;
            let n = self.streak.entry(*rank).or_default();
            if !slow {
                *n = 0;
                self.flagged.remove(rank);
                continue;
            }
            *n += 1;
            if *n >= self.rule.windows && self.flagged.insert(*rank) {
                let windows: Vec<Window> = self.recent.clone();
                out.push(Flag {
                    rank: *rank,
                    relative: windows
                        .iter()
                        .filter_map(|w| w.relative.get(rank).copied())
                        .collect(),
                    source: w.source,
                    windows,
                });
            }
        }
        out
    }
}

/// The median (mean of the middle two for an even count); None when empty.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}
