//! What a log says only across lines, worked out in order over the records as they are read:
//! an elapsed clock (`"0:29:27"`, ms since start) placed on the wall clock, the log's mtime
//! for samples with no time of their own, and tokens/s from a cumulative token counter or
//! from `tokens_per_step` over the log's own clock (steps advanced per second).

use super::{Record, TOKENS_SLOT, TPS_SLOT};
use crate::metrics::mapping::{Clock, MetricsConfig};

/// Carries what the next record needs from the ones before it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Derive {
    clock: Clock,
    /// Wall-clock second at which the current launch's elapsed clock read 0.
    anchor: Option<f64>,
    last_elapsed: Option<f64>,
    /// (tokens so far, time) of the previous record with a token count.
    prev_tokens: Option<(f64, f64)>,
    /// `tokens_per_step` when no step time is logged: tokens/s from the log's clock.
    per_step: Option<f64>,
    /// (step, own time) of the previous record that carried a time of its own.
    prev_clock: Option<(u64, f64)>,
    /// Some time came from the log's mtime (a line without one, an elapsed clock's anchor):
    /// records read earlier would be timed differently by a read now.
    pub used_mtime: bool,
}

impl Derive {
    pub fn new(m: &MetricsConfig) -> Derive {
        Derive {
            clock: m.clock,
            per_step: m.tokens_per_step.filter(|_| m.step_time.is_empty()),
            ..Default::default()
        }
    }

    /// The log started over (truncated, replaced, a new file): forget the previous lines.
    pub fn reset(&mut self) {
        *self = Derive {
            clock: self.clock,
            per_step: self.per_step,
            used_mtime: self.used_mtime,
            ..Default::default()
        };
    }

    /// Records in log order; `mtime` is the log's modification time (unix seconds).
    ///
    /// An elapsed clock is anchored at the mtime: the newest line of the current launch is
    /// taken as written at the mtime, and the anchor is kept until the clock runs backwards
    /// (a relaunch restarting it at 0), so a log that stops advancing stays old.
    pub fn apply(&mut self, recs: &mut [Record], mtime: Option<f64>) {
        if self.clock != Clock::Unix {
            for i in 0..recs.len() {
                let Some(e) = recs[i].time else { continue };
                if self.last_elapsed.is_some_and(|last| e < last) {
                    self.anchor = None; // the clock restarted: a new launch
                }
                if self.anchor.is_none() {
                    let newest = recs[i..]
                        .iter()
                        .filter_map(|r| r.time)
                        .scan(e, |prev, t| {
                            let ok = t >= *prev;
                            *prev = t;
                            ok.then_some(t)
                        })
                        .last()
                        .unwrap_or(e);
                    self.anchor = mtime.map(|m| m - newest);
                    self.used_mtime = true;
                }
                self.last_elapsed = Some(e);
                recs[i].time = self.anchor.map(|a| a + e);
            }
        }
        for r in recs.iter_mut() {
            if let (Some(per_step), Some(t)) = (self.per_step, r.time) {
                if let Some((s0, t0)) = self.prev_clock {
                    if r.values[TPS_SLOT].is_none() && r.step > s0 && t > t0 {
                        r.values[TPS_SLOT] = Some(per_step * (r.step - s0) as f64 / (t - t0));
                    }
                }
                self.prev_clock = Some((r.step, t));
            }
            if r.time.is_none() {
                r.time = mtime;
                self.used_mtime = true;
            }
            let (Some(count), Some(t)) = (r.values[TOKENS_SLOT], r.time) else {
                continue;
            };
            if let Some((c0, t0)) = self.prev_tokens {
                if r.values[TPS_SLOT].is_none() && t > t0 && count >= c0 {
                    r.values[TPS_SLOT] = Some((count - c0) / (t - t0));
                }
            }
            if count.is_finite() {
                self.prev_tokens = Some((count, t));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(step: u64, time: Option<f64>, tokens: Option<f64>) -> Record {
        let mut values = [None; 11];
        values[TOKENS_SLOT] = tokens;
        Record { step, time, values }
    }

    #[test]
    fn elapsed_clock_is_anchored_at_the_mtime_and_kept_while_the_log_is_quiet() {
        let mut d = Derive::new(&MetricsConfig {
            clock: Clock::Elapsed,
            ..Default::default()
        });
        let mut a = vec![rec(1, Some(10.0), None), rec(2, Some(70.0), None)];
        d.apply(&mut a, Some(1000.0));
        assert_eq!(
            a.iter().map(|r| r.time).collect::<Vec<_>>(),
            vec![Some(940.0), Some(1000.0)]
        );
        // A later read: same anchor, whatever the mtime says now.
        let mut b = vec![rec(3, Some(130.0), None)];
        d.apply(&mut b, Some(5000.0));
        assert_eq!(b[0].time, Some(1060.0));
        // A relaunch restarts the clock at 0: anchored afresh.
        let mut c = vec![rec(4, Some(5.0), None), rec(5, Some(15.0), None)];
        d.apply(&mut c, Some(9000.0));
        assert_eq!((c[0].time, c[1].time), (Some(8990.0), Some(9000.0)));
    }

    #[test]
    fn tokens_per_s_from_a_cumulative_counter() {
        let mut d = Derive::new(&MetricsConfig::default());
        let mut r = vec![
            rec(1, Some(100.0), Some(0.0)),
            rec(2, Some(110.0), Some(50_000.0)),
            rec(3, None, None),
            rec(4, Some(130.0), Some(150_000.0)),
        ];
        d.apply(&mut r, Some(200.0));
        let tps: Vec<Option<f64>> = r.iter().map(|r| r.values[TPS_SLOT]).collect();
        assert_eq!(tps, vec![None, Some(5000.0), None, Some(5000.0)]);
        assert_eq!(r[2].time, Some(200.0), "the mtime stands in");
        // A counter that restarts gives no rate for that line.
        let mut r = vec![rec(5, Some(140.0), Some(10.0))];
        d.apply(&mut r, None);
        assert_eq!(r[0].values[TPS_SLOT], None);
    }

    #[test]
    fn tokens_per_s_from_tokens_per_step_and_the_clock() {
        let mut d = Derive::new(&MetricsConfig {
            clock: Clock::ElapsedMs,
            tokens_per_step: Some(1000.0),
            ..Default::default()
        });
        // Times already in seconds since the start (the parser divides ms by 1000).
        let mut r = vec![
            rec(0, Some(0.0), None),
            rec(10, Some(2.0), None),
            rec(30, None, None),
            rec(40, Some(8.0), None),
        ];
        d.apply(&mut r, Some(100.0));
        let tps: Vec<Option<f64>> = r.iter().map(|r| r.values[TPS_SLOT]).collect();
        assert_eq!(tps, vec![None, Some(5000.0), None, Some(5000.0)]);
    }
}
