//! The stale limit when nobody declared one: the longest gap between progress events seen in
//! this run (and in earlier runs, from the ledger) times a safety factor, never below what the
//! sampling can resolve. The limit only grows, and a change is announced only when it moves by
//! more than 10% — a smoothed number people can read in the ledger, not a jittery one.

use crate::ledger::{Kind, Record};

/// Ledger `watch` records with this `event` carry `longest_gap_s` for later runs.
pub const EVENT: &str = "stale_limit";

#[derive(Debug, Clone)]
pub struct Calibrator {
    factor: f64,
    floor: f64,
    prior: Option<f64>,
    longest: Option<f64>,
    announced: Option<f64>,
}

impl Calibrator {
    /// `floor`: the shortest limit the sampling can judge (interval × (hysteresis + 1)).
    pub fn new(factor: f64, floor: f64, prior: Option<f64>) -> Calibrator {
        Calibrator {
            factor,
            floor,
            prior,
            longest: None,
            announced: None,
        }
    }

    pub fn observe_gap(&mut self, gap_s: f64) {
        if gap_s.is_finite() && gap_s > 0.0 {
            self.longest = Some(self.longest.map_or(gap_s, |l| l.max(gap_s)));
        }
    }

    /// Longest gap known, this run or earlier ones.
    pub fn longest_gap(&self) -> Option<f64> {
        match (self.longest, self.prior) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The calibrated limit, once any gap is known.
    pub fn limit(&self) -> Option<f64> {
        self.longest_gap()
            .map(|g| (g * self.factor).max(self.floor))
    }

    /// The limit to announce now, if it moved by more than 10% since the last announcement.
    pub fn announce(&mut self) -> Option<f64> {
        let now = self.limit()?;
        let moved = self.announced.is_none_or(|a| (now - a).abs() > 0.1 * a);
        if moved {
            self.announced = Some(now);
            Some(now)
        } else {
            None
        }
    }
}

/// The longest progress gap earlier watches of `run` recorded.
pub fn prior_gap(records: &[Record], run: &str) -> Option<f64> {
    records
        .iter()
        .filter(|r| r.kind == Kind::Watch && r.run == run)
        .filter(|r| r.str_field("event") == Some(EVENT))
        .filter_map(|r| r.get("longest_gap_s").and_then(|v| v.as_f64()))
        .fold(None, |acc: Option<f64>, g| {
            Some(acc.map_or(g, |a| a.max(g)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_factor_times_longest_gap_with_floor() {
        let mut c = Calibrator::new(3.0, 1.0, None);
        assert_eq!(c.limit(), None);
        c.observe_gap(0.1);
        assert_eq!(c.limit(), Some(1.0), "floor applies");
        c.observe_gap(2.0);
        c.observe_gap(0.5);
        assert_eq!(
            c.limit(),
            Some(6.0),
            "the longest gap wins, it never shrinks"
        );
    }

    #[test]
    fn prior_runs_count_and_announcements_are_smoothed() {
        let mut c = Calibrator::new(2.0, 0.0, Some(10.0));
        assert_eq!(c.announce(), Some(20.0));
        c.observe_gap(10.5);
        assert_eq!(c.announce(), None, "a 5% move is not announced");
        c.observe_gap(15.0);
        assert_eq!(c.announce(), Some(30.0));
    }
}
