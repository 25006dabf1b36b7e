//! What a log says only across lines, worked out in order over the records as they are read:
//! an elapsed clock (`"0:29:27"`, ms since start) placed on the wall clock, the log's mtime
//! for samples with no time of their own, tokens/s from a cumulative token counter or
//! from `tokens_per_step` over the log's own clock (steps advanced per second), and what a
//! text log declares for the whole run (its total steps, its end: [`MARK`] records).

use super::{Record, TOKENS_SLOT, TOTAL_SLOT, TPS_SLOT};

/// The step of a marker record from a text line that declares something about the whole run
/// (see `metrics::text`): with a total in its `total_steps` slot, the run's planned last
/// step, for the samples after it; without, the run ended at the last step before it.
/// [`Derive::apply`] consumes every marker: no reader hands one on.
pub const MARK: u64 = u64::MAX;
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
    /// The total a text line declared (a [`MARK`]), given to later samples without their own.
    #[serde(default)]
    declared_total: Option<f64>,
    /// The newest sample's step and time: where a run that says it ended ended.
    #[serde(default)]
    last: Option<(u64, Option<f64>)>,
    /// `[metrics] planned_total`: the run's own arguments' total, for samples that carry none
    /// and when no line declared one.
    #[serde(default)]
    planned_total: Option<f64>,
}

impl Derive {
    pub fn new(m: &MetricsConfig) -> Derive {
        Derive {
            clock: m.clock,
            per_step: m.tokens_per_step.filter(|_| m.step_time.is_empty()),
            planned_total: m.planned_total.map(|t| t as f64),
            ..Default::default()
        }
    }

    /// The log started over (truncated, replaced, a new file): forget the previous lines.
    pub fn reset(&mut self) {
        *self = Derive {
            clock: self.clock,
            per_step: self.per_step,
            used_mtime: self.used_mtime,
            planned_total: self.planned_total,
            ..Default::default()
        };
    }

    /// Records in log order; `mtime` is the log's modification time (unix seconds).
    ///
    /// An elapsed clock is anchored at the mtime: the newest line of the current launch is
    /// taken as written at the mtime, and the anchor is kept until the clock runs backwards
    /// (a relaunch restarting it at 0), so a log that stops advancing stays old.
    pub fn apply(&mut self, recs: &mut Vec<Record>, mtime: Option<f64>) {
        self.declarations(recs);
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

impl Derive {
    /// Markers out, in order: a declared total goes on the samples after it (a sample's own
    /// total wins); a declared end becomes a sample at the last step, whose total is that
    /// step (nothing to place it on before any sample: dropped).
    fn declarations(&mut self, recs: &mut Vec<Record>) {
        let fallback = self.declared_total.or(self.planned_total);
        if fallback.is_none() && !recs.iter().any(|r| r.step == MARK) {
            if let Some(r) = recs.last() {
                self.last = Some((r.step, r.time));
            }
            return;
        }
        recs.retain_mut(|r| {
            if r.step != MARK {
                if r.values[TOTAL_SLOT].is_none() {
                    r.values[TOTAL_SLOT] = self.declared_total.or(self.planned_total);
                }
                self.last = Some((r.step, r.time));
                return true;
            }
            match (r.values[TOTAL_SLOT], self.last) {
                (Some(t), _) => {
                    // `max_update=0`: no limit declared.
                    self.declared_total = (t.is_finite() && t > 0.0).then_some(t);
                    false
                }
                (None, Some((step, time))) => {
                    let mut values = [None; crate::metrics::N_SLOTS];
                    values[TOTAL_SLOT] = Some(step as f64);
                    *r = Record { step, time, values };
                    true
                }
                (None, None) => false,
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(step: u64, time: Option<f64>, tokens: Option<f64>) -> Record {
        let mut values = [None; crate::metrics::N_SLOTS];
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

    fn total(r: &Record) -> Option<f64> {
        r.values[TOTAL_SLOT]
    }

    #[test]
    fn a_declared_total_goes_on_later_samples_and_an_end_becomes_the_last_step() {
        let mark = |t: Option<f64>| {
            let mut values = [None; crate::metrics::N_SLOTS];
            values[TOTAL_SLOT] = t;
            Record {
                step: MARK,
                time: None,
                values,
            }
        };
        let mut d = Derive::new(&MetricsConfig::default());
        // An end before any sample has no step to stand at: dropped.
        let mut a = vec![mark(None), rec(1, Some(5.0), None), mark(Some(300.0))];
        d.apply(&mut a, Some(9.0));
        assert_eq!(a.len(), 1);
        assert_eq!(total(&a[0]), None, "declared after it");
        // Carried to the next read; a sample's own total wins; 0 is no limit.
        let mut own = rec(3, None, None);
        own.values[TOTAL_SLOT] = Some(40.0);
        let mut b = vec![rec(2, None, None), own, mark(Some(0.0)), rec(4, None, None)];
        d.apply(&mut b, Some(9.0));
        let totals: Vec<_> = b.iter().map(total).collect();
        assert_eq!(totals, vec![Some(300.0), Some(40.0), None]);
        // The end: a sample at the last step, with that step as its total.
        let mut c = vec![mark(None)];
        d.apply(&mut c, Some(12.0));
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].step, total(&c[0])), (4, Some(4.0)));
        assert!(c.iter().all(|r| r.step != MARK));
        // A restarted file forgets both.
        d.reset();
        let mut e = vec![mark(None), rec(1, None, None)];
        d.apply(&mut e, None);
        assert_eq!((e.len(), total(&e[0])), (1, None));
    }

    /// A first read of a big text log parses its parts on several threads; the total the
    /// first lines declare still reaches every sample, and the end line the last one.
    #[test]
    fn declarations_survive_a_parallel_read() {
        use crate::metrics::mapping::TextPattern;
        use crate::metrics::{lines, Batch};
        let m = MetricsConfig {
            patterns: [
                r"iter (?P<step>\d+): loss (?P<loss>\S+),",
                r"(?:^|Overriding: )max_iters = (?P<total_steps>\d+)",
                r"(?P<finished>Training completed)",
            ]
            .iter()
            .map(|r| TextPattern {
                regex: r.to_string(),
                fields: Vec::new(),
            })
            .collect(),
            ..Default::default()
        };
        let mut text = String::from("max_iters = 5000\nOverriding: max_iters = 90000\n");
        for i in 0..90_000 {
            text.push_str(&format!("iter {i}: loss 2.5, time 95.12ms, mfu 31.20%\n"));
        }
        text.push_str("Training completed\n");
        assert!(text.len() > 2 << 20, "several parts");
        let mut p = crate::metrics::text::TextParser::new(&m).unwrap();
        let (mut out, mut n) = (Batch::default(), 0);
        lines::feed(
            &mut p,
            text.as_bytes(),
            &mut n,
            std::path::Path::new("l"),
            &mut out,
        );
        let mut d = Derive::new(&m);
        d.apply(&mut out.records, None);
        assert_eq!(out.records.len(), 90_001);
        assert!(out.records[..90_000]
            .iter()
            .all(|r| total(r) == Some(90_000.0)));
        let end = out.records.last().unwrap();
        assert_eq!((end.step, total(end)), (89_999, Some(89_999.0)));
    }
}
