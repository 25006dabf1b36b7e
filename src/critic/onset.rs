//! Where the current bad stretch of the loss began, over the whole series: the checks see only
//! the phase's last `window` samples, so a NaN that began before the window (one read covering
//! more new steps than `window`, a long run of NaN) would be dated at the window's first
//! sample. [`Tracker`] keeps, per kind of badness, the first bad step since the last good one
//! and how many samples followed; the observation archives it ([`Onsets`]) so `critic
//! --replay` recomputes the same `diverged_at`.

use serde::{Deserialize, Serialize};

/// A trailing run of bad samples: its first step and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub since: u64,
    pub samples: u64,
}

/// The trailing bad runs of the loss as of the newest sample; `None`: the newest is not bad
/// that way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
}

/// (from, to, loss band) of each declared phase, in config order (the first match wins, as
/// in `Config::phase_for`).
pub type Bands = Vec<(u64, Option<u64>, Option<[f64; 2]>)>;

#[derive(Debug, Clone, Default)]
pub struct Tracker {
    bands: Bands,
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
    pub fn new(bands: Bands) -> Tracker {
        Tracker {
            bands,
            now: Onsets::default(),
        }
    }

    fn band(&self, step: u64) -> Option<[f64; 2]> {
        self.bands
            .iter()
            .find(|(from, to, _)| step >= *from && to.is_none_or(|t| step < t))
            .and_then(|b| b.2)
    }

    fn kinds(&self, step: u64, v: f64) -> [bool; 3] {
        let out = self
            .band(step)
            .is_some_and(|[lo, hi]| !(lo..=hi).contains(&v));
        [!v.is_finite(), v == 0.0, out]
    }

    pub fn into_bands(self) -> Bands {
        self.bands
    }

    /// One more loss sample, in log order.
    pub fn push(&mut self, step: u64, loss: f64) {
        let [nf, zero, out] = self.kinds(step, loss);
        self.now = Onsets {
            nonfinite: extend(self.now.nonfinite, step, nf),
            zero: extend(self.now.zero, step, zero),
            out_of_band: extend(self.now.out_of_band, step, out),
        };
    }

    /// A resume rewound the log to `step`: `dropped` losses (at or after it) never happened,
    /// `kept` are the retained (step, loss) before it, oldest first. A run that began before
    /// `step` continues, shorter by what was dropped; otherwise the run is re-found in `kept`
    /// (when `kept` is all bad, it began at or before its first: the oldest retained step is
    /// the best known).
    pub fn rewind(&mut self, step: u64, dropped: usize, kept: &[(u64, f64)]) {
        let mut fresh = Tracker::new(std::mem::take(&mut self.bands));
        for &(s, v) in kept {
            fresh.push(s, v);
        }
        let keep = |old: Option<Run>, new: Option<Run>| match old {
            Some(r) if r.since < step => Some(Run {
                since: r.since,
                samples: r.samples.saturating_sub(dropped as u64).max(1),
            }),
            _ => new,
        };
        self.now = Onsets {
            nonfinite: keep(self.now.nonfinite, fresh.now.nonfinite),
            zero: keep(self.now.zero, fresh.now.zero),
            out_of_band: keep(self.now.out_of_band, fresh.now.out_of_band),
        };
        self.bands = fresh.bands;
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

    #[test]
    fn runs_start_at_the_first_bad_step_since_the_last_good_one() {
        let mut t = Tracker::new(vec![(0, Some(100), Some([1.0, 5.0])), (100, None, None)]);
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
        let bands = vec![(0, None, Some([1.0, 5.0]))];
        let mut t = Tracker::new(bands.clone());
        let series: Vec<(u64, f64)> = (0..50)
            .map(|s| (s, if s >= 20 { f64::NAN } else { 3.0 }))
            .collect();
        for &(s, v) in &series {
            t.push(s, v);
        }
        // Resumed at 30: 30..49 (20 samples) never happened; the run from 20 stays.
        t.rewind(30, 20, &series[..30]);
        assert_eq!(t.now.nonfinite, run(20, 10));
        // Resumed at 10: the run is gone; what is kept decides (all good).
        t.rewind(10, 20, &series[..10]);
        assert_eq!(t.now, Onsets::default());
        // A run that ended before the rewind point is found again in what is kept.
        let mut t = Tracker::new(bands);
        let s2: Vec<(u64, f64)> = vec![(1, 3.0), (2, 0.0), (3, 0.0), (4, 3.0), (5, 3.0)];
        for &(s, v) in &s2 {
            t.push(s, v);
        }
        t.rewind(4, 2, &s2[..3]);
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
