//! Where the current bad stretch of the loss began, over the whole series: the checks see only
//! the phase's last `window` samples, so a NaN that began before the window (one read covering
//! more new steps than `window`, a long run of NaN) would be dated at the window's first
//! sample. [`Tracker`] keeps, per kind of badness, the first bad step since the last good one
//! and how many samples followed; the observation archives it ([`Onsets`]) so `critic
//! --replay` recomputes the same `diverged_at`.

use super::Num;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// A trailing run of bad samples: its first step and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub since: u64,
    pub samples: u64,
}

/// A trailing run of finite losses over `loss_spike` × `base`, the median of the phase's
/// window before the run began (frozen, so a long run does not lift its own median). Once it
/// is an excursion (two samples or more) it lasts until the loss is back near `base` (see
/// [`near`]), not merely under the limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpikeRun {
    pub since: u64,
    pub samples: u64,
    pub base: Num,
}

/// The trailing bad runs of the loss as of the newest sample; `None`: the newest is not bad
/// that way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Onsets {
    /// NaN or ±Inf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonfinite: Option<Run>,
    /// Exactly 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero: Option<Run>,
    /// Outside the `loss` band of the phase each sample is in (NaN included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_band: Option<Run>,
    /// Over `loss_spike` × the median before it (non-finite samples neither extend nor end it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spike: Option<SpikeRun>,
}

/// What the trackers need of a declared phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRule {
    pub from: u64,
    pub to: Option<u64>,
    pub band: Option<[f64; 2]>,
    pub spike: Option<f64>,
    pub grad_spike: Option<f64>,
    pub window: usize,
}

impl PhaseRule {
    pub fn contains(&self, step: u64) -> bool {
        step >= self.from && self.to.is_none_or(|t| step < t)
    }
}

/// The phases in config order (the first match wins, as in `Config::phase_for`) and the
/// `[critic]` settings the trackers use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rules {
    pub phases: Vec<PhaseRule>,
    pub min_samples: usize,
    pub band_samples: usize,
    pub grad_nonfinite_consecutive: usize,
}

impl Rules {
    pub fn phase(&self, step: u64) -> Option<&PhaseRule> {
        self.phases.iter().find(|p| p.contains(step))
    }
}

/// An excursion is over when the median of the newest `band_samples` losses is back within
/// this many × the level before it: halfway from that level to the spike limit, so a loss
/// hovering at the limit does not flap between fail and pass.
pub fn near(factor: f64) -> f64 {
    1.0 + (factor - 1.0) / 2.0
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tracker {
    rules: Rules,
    /// The newest finite losses (step, loss), for the median before a spike.
    #[serde(with = "crate::metrics::packed::pairs")]
    recent: VecDeque<(u64, f64)>,
    pub now: Onsets,
}

fn extend(run: Option<Run>, step: u64, bad: bool) -> Option<Run> {
    if !bad {
        return None;
    }
    Some(match run {
        Some(r) => Run {
            samples: r.samples + 1,
            ..r
        },
        None => Run {
            since: step,
            samples: 1,
        },
    })
}

impl Tracker {
    pub fn new(rules: Rules) -> Tracker {
        Tracker {
            rules,
            recent: VecDeque::new(),
            now: Onsets::default(),
        }
    }

    pub fn into_rules(self) -> Rules {
        self.rules
    }

    fn phase(&self, step: u64) -> Option<&PhaseRule> {
        self.rules.phase(step)
    }

    /// One more loss sample, in log order.
    pub fn push(&mut self, step: u64, loss: f64) {
        let phase = self.phase(step).cloned();
        let out = phase
            .as_ref()
            .and_then(|p| p.band)
            .is_some_and(|[lo, hi]| !(lo..=hi).contains(&loss));
        let spike = self.spike(step, loss, phase.as_ref());
        if let (Some(r), None) = (self.now.spike, spike) {
            if r.samples >= 2 {
                // The excursion is over: its losses are no baseline for the next spike.
                self.recent.retain(|(s, _)| *s < r.since);
            }
        }
        self.now = Onsets {
            nonfinite: extend(self.now.nonfinite, step, !loss.is_finite()),
            zero: extend(self.now.zero, step, loss == 0.0),
            out_of_band: extend(self.now.out_of_band, step, out),
            spike,
        };
        if loss.is_finite() {
            self.recent.push_back((step, loss));
            let cap = self
                .rules
                .phases
                .iter()
                .map(|p| p.window)
                .max()
                .unwrap_or(0);
            while self.recent.len() > cap {
                self.recent.pop_front();
            }
        }
    }

    /// The spike run after `loss`, as the `loss_spike` check sees one: over `factor` × the
    /// median of the phase's window before it, once the window holds `min_samples` (at least
    /// 3); a run keeps the median from before it.
    fn spike(&self, step: u64, loss: f64, phase: Option<&PhaseRule>) -> Option<SpikeRun> {
        if !loss.is_finite() {
            return self.now.spike;
        }
        let p = phase?;
        let factor = p.spike?;
        if let Some(r) = self.now.spike {
            let base = r.base.0;
            let over = loss > factor * base
                || (r.samples >= 2 && {
                    // An excursion: a dip under the limit does not end it, a return near base does.
                    let k = self.rules.band_samples.max(1);
                    let newest = self.recent.iter().rev().take(k - 1).map(|p| p.1);
                    super::stats::median(newest.chain([loss]))
                        .is_some_and(|m| m > near(factor) * base)
                });
            return over.then_some(SpikeRun {
                samples: r.samples + 1,
                ..r
            });
        }
        let before: Vec<f64> = self
            .recent
            .iter()
            .filter(|(s, _)| p.contains(*s))
            .map(|(_, v)| *v)
            .collect();
        let before = &before[before.len().saturating_sub(p.window.saturating_sub(1))..];
        if before.len() + 1 < self.rules.min_samples.max(3) {
            return None;
        }
        let base = super::stats::median(before.iter().copied())?;
        (loss > factor * base).then_some(SpikeRun {
            since: step,
            samples: 1,
            base: Num(base),
        })
    }

    /// A resume rewound the log to `step`: `dropped` losses (at or after it) never happened,
    /// `kept` are the retained (step, loss) before it, oldest first. A run that began before
    /// `step` continues, shorter by what was dropped; otherwise the run is re-found in `kept`
    /// (when `kept` is all bad, it began at or before its first: the oldest retained step is
    /// the best known).
    pub fn rewind(&mut self, step: u64, dropped: &[f64], kept: &[(u64, f64)]) {
        let mut fresh = Tracker::new(std::mem::take(&mut self.rules));
        for &(s, v) in kept {
            fresh.push(s, v);
        }
        let all = dropped.len() as u64;
        let keep = |old: Option<Run>, new: Option<Run>| match old {
            Some(r) if r.since < step => Some(Run {
                since: r.since,
                samples: r.samples.saturating_sub(all).max(1),
            }),
            _ => new,
        };
        let finite = dropped.iter().filter(|v| v.is_finite()).count() as u64;
        let spike = match self.now.spike {
            Some(r) if r.since < step => Some(SpikeRun {
                samples: r.samples.saturating_sub(finite).max(1),
                ..r
            }),
            _ => fresh.now.spike,
        };
        self.now = Onsets {
            nonfinite: keep(self.now.nonfinite, fresh.now.nonfinite),
            zero: keep(self.now.zero, fresh.now.zero),
            out_of_band: keep(self.now.out_of_band, fresh.now.out_of_band),
            spike,
        };
        self.recent = fresh.recent;
        self.rules = fresh.rules;
    }
}

/// The first step and length of a window's trailing run over the whole series: the window's
/// own (`n` samples from `first`) unless the run fills the window (`n == len`), in which case
/// it may have begun earlier and the recorded run says where.
pub fn whole(
    len: usize,
    n: usize,
    first: Option<u64>,
    recorded: Option<Run>,
) -> (u64, Option<u64>) {
    match (recorded, first) {
        (Some(r), Some(f)) if n == len && r.since <= f => (r.samples.max(n as u64), Some(r.since)),
        _ => (n as u64, first),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(since: u64, samples: u64) -> Option<Run> {
        Some(Run { since, samples })
    }

    type Phase = (u64, Option<u64>, Option<[f64; 2]>, Option<f64>);

    fn rules(phases: Vec<Phase>) -> Rules {
        Rules {
            phases: phases
                .into_iter()
                .map(|(from, to, band, spike)| PhaseRule {
                    from,
                    to,
                    band,
                    spike,
                    grad_spike: None,
                    window: 10,
                })
                .collect(),
            min_samples: 5,
            band_samples: 5,
            grad_nonfinite_consecutive: 3,
        }
    }

    #[test]
    fn a_spike_run_keeps_the_median_from_before_it() {
        let mut t = Tracker::new(rules(vec![(0, None, None, Some(1.5))]));
        for s in 0..3 {
            t.push(s, 3.0);
        }
        t.push(3, 9.0);
        assert_eq!(t.now.spike, None, "4 samples: fewer than min_samples");
        let mut t = Tracker::new(rules(vec![(0, None, None, Some(1.5))]));
        for s in 0..20 {
            t.push(s, 3.0);
        }
        for s in 20..60 {
            t.push(s, 6.0);
            if s == 40 {
                t.push(s, f64::NAN);
            }
        }
        let r = t.now.spike.unwrap();
        assert_eq!((r.since, r.samples, r.base), (20, 40, Num(3.0)));
        // Under 1.5 × 3 but not near 3 (1.25 × 3): the excursion goes on; it ends once the
        // median of the newest 5 is back near 3, and its losses leave the baseline.
        t.push(60, 4.4);
        assert_eq!(t.now.spike.map(|r| r.samples), Some(41));
        for s in 61..63 {
            t.push(s, 3.0);
            assert!(t.now.spike.is_some(), "median 4.4 at {s}");
        }
        t.push(63, 3.0);
        assert_eq!(t.now.spike, None);
        assert!(
            t.recent.iter().all(|(s, _)| *s < 20 || *s >= 63),
            "{:?}",
            t.recent
        );
        // A rewind into the run keeps it, shorter by what was dropped.
        let mut t = Tracker::new(rules(vec![(0, None, None, Some(1.5))]));
        let series: Vec<(u64, f64)> = (0..60)
            .map(|s| (s, if s < 20 { 3.0 } else { 6.0 }))
            .collect();
        for &(s, v) in &series {
            t.push(s, v);
        }
        t.rewind(50, &[6.0; 10], &series[..50]);
        assert_eq!(t.now.spike.map(|r| (r.since, r.samples)), Some((20, 30)));
        t.rewind(10, &[6.0; 40], &series[..10]);
        assert_eq!(t.now.spike, None);
    }

    #[test]
    fn runs_start_at_the_first_bad_step_since_the_last_good_one() {
        let mut t = Tracker::new(rules(vec![
            (0, Some(100), Some([1.0, 5.0]), None),
            (100, None, None, None),
        ]));
        for s in 0..80 {
            t.push(s, 3.0);
        }
        assert_eq!(t.now, Onsets::default());
        for s in 80..99 {
            t.push(s, f64::NAN);
        }
        assert_eq!(t.now.nonfinite, run(80, 19));
        assert_eq!(t.now.out_of_band, run(80, 19), "NaN is outside any band");
        // Phase without a band: out_of_band ends, NaN goes on.
        t.push(100, f64::INFINITY);
        assert_eq!((t.now.nonfinite, t.now.out_of_band), (run(80, 20), None));
        t.push(101, 3.0);
        assert_eq!(t.now, Onsets::default());
        t.push(102, 0.0);
        t.push(103, 0.0);
        assert_eq!(t.now.zero, run(102, 2));
    }

    #[test]
    fn a_rewind_keeps_a_run_begun_before_it_and_refinds_the_rest() {
        let bands = rules(vec![(0, None, Some([1.0, 5.0]), None)]);
        let mut t = Tracker::new(bands.clone());
        let series: Vec<(u64, f64)> = (0..50)
            .map(|s| (s, if s >= 20 { f64::NAN } else { 3.0 }))
            .collect();
        for &(s, v) in &series {
            t.push(s, v);
        }
        // Resumed at 30: 30..49 (20 samples) never happened; the run from 20 stays.
        t.rewind(30, &[f64::NAN; 20], &series[..30]);
        assert_eq!(t.now.nonfinite, run(20, 10));
        // Resumed at 10: the run is gone; what is kept decides (all good).
        t.rewind(
            10,
            &series[10..].iter().map(|p| p.1).collect::<Vec<_>>(),
            &series[..10],
        );
        assert_eq!(t.now, Onsets::default());
        // A run that ended before the rewind point is found again in what is kept.
        let mut t = Tracker::new(bands);
        let s2: Vec<(u64, f64)> = vec![(1, 3.0), (2, 0.0), (3, 0.0), (4, 3.0), (5, 3.0)];
        for &(s, v) in &s2 {
            t.push(s, v);
        }
        t.rewind(4, &[3.0, 3.0], &s2[..3]);
        assert_eq!(t.now.zero, run(2, 2));
    }

    #[test]
    fn whole_prefers_the_record_only_when_the_run_fills_the_window() {
        assert_eq!(whole(10, 10, Some(190), run(80, 120)), (120, Some(80)));
        assert_eq!(whole(10, 4, Some(196), run(196, 4)), (4, Some(196)));
        // No record (an observation archived before onsets existed): the window's answer.
        assert_eq!(whole(10, 10, Some(190), None), (10, Some(190)));
        // A record later than the window's first is not believed over it.
        assert_eq!(whole(10, 10, Some(190), run(195, 5)), (10, Some(190)));
        assert_eq!(whole(0, 0, None, run(1, 1)), (0, None));
    }
}
