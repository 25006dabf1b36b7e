//! What happened between two verdicts. One read may bring many new samples (a snapshot log
//! rewritten only at saves, a slow tick), and a loss or grad-norm spike among them that is
//! over by the newest sample is invisible to checks that judge the newest. [`Recorder`]
//! notes, as each sample is pushed, the events those checks would have reported had it been
//! the newest; the observation archives the worst of each kind since the last verdict
//! ([`Missed`]), so replay sees what the verdict saw, and [`apply`] reports one that is over
//! as a `warn` naming its step (over by now, so no `fail`: rollback is for what is still
//! going on).

use super::onset::{Onsets, Rules};
use super::stats::median;
use super::{fmt, CheckResult, Num, Observation, Status};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::VecDeque;

/// One run of bad samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// First and last step of the run.
    pub step: u64,
    pub until: u64,
    pub samples: u64,
    /// The worst value in it, and where.
    pub peak: Num,
    pub peak_step: u64,
    /// Spikes: the median before the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<Num>,
    /// How many runs of this kind since `from` (this one is the worst).
    pub runs: u64,
}

/// The kinds the checks judge per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    LossNonfinite,
    LossZero,
    LossSpike,
    GradSpike,
    GradNonfinite,
}

/// The worst event of each kind that began at or after `from`, the first step new since
/// the last verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Missed {
    pub from: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_nonfinite: Option<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_zero: Option<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_spike: Option<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_spike: Option<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_nonfinite: Option<Event>,
}

impl Missed {
    fn slot(&mut self, k: Kind) -> &mut Option<Event> {
        match k {
            Kind::LossNonfinite => &mut self.loss_nonfinite,
            Kind::LossZero => &mut self.loss_zero,
            Kind::LossSpike => &mut self.loss_spike,
            Kind::GradSpike => &mut self.grad_spike,
            Kind::GradNonfinite => &mut self.grad_nonfinite,
        }
    }
}

/// Events kept, newest last; older ones are dropped (a verdict reads only the recent ones).
const KEPT: usize = 4096;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recorder {
    rules: Rules,
    events: VecDeque<(Kind, Event)>,
    /// Finite grad norms (step, value), newest last, for the median before a spike.
    #[serde(with = "crate::metrics::packed::pairs")]
    grads: VecDeque<(u64, f64)>,
    /// The current trailing run of non-finite grad norms.
    grad_bad: Option<(u64, u64)>,
}

impl Recorder {
    pub fn new(rules: Rules) -> Recorder {
        Recorder {
            rules,
            ..Default::default()
        }
    }

    /// Extend the open event of `kind` whose run began at `since`, or open one.
    fn note(&mut self, kind: Kind, since: u64, step: u64, value: f64, base: Option<f64>) {
        if let Some((_, e)) = self
            .events
            .iter_mut()
            .rev()
            .find(|(k, e)| *k == kind && e.step == since)
        {
            e.until = step;
            e.samples += 1;
            if value > e.peak.0 {
                (e.peak, e.peak_step) = (Num(value), step);
            }
            return;
        }
        self.events.push_back((
            kind,
            Event {
                step: since,
                until: step,
                samples: 1,
                peak: Num(value),
                peak_step: step,
                base: base.map(Num),
                runs: 1,
            },
        ));
        if self.events.len() > KEPT {
            self.events.pop_front();
        }
    }

    /// A loss sample, after the onset tracker has taken it (its runs say what is bad).
    pub fn loss(&mut self, step: u64, loss: f64, onsets: &Onsets) {
        if let Some(r) = onsets.nonfinite {
            self.note(Kind::LossNonfinite, r.since, step, loss, None);
        }
        if let Some(r) = onsets.zero {
            self.note(Kind::LossZero, r.since, step, loss, None);
        }
        if let (Some(r), true) = (onsets.spike, loss.is_finite()) {
            self.note(Kind::LossSpike, r.since, step, loss, Some(r.base.0));
        }
    }

    /// A grad-norm sample: a spike as the `grad_norm` check sees one (over `grad_norm_spike`
    /// × the median of the phase's window before it, once `min_samples` are there), and
    /// non-finite runs of at least `grad_nonfinite_consecutive`.
    pub fn grad(&mut self, step: u64, g: f64) {
        let Some(p) = self.rules.phase(step).cloned() else {
            return;
        };
        if !g.is_finite() {
            let (since, n) = self.grad_bad.map_or((step, 1), |(s, n)| (s, n + 1));
            self.grad_bad = Some((since, n));
            let k = self.rules.grad_nonfinite_consecutive.max(1) as u64;
            if n >= k {
                self.note(Kind::GradNonfinite, since, step, g, None);
                // Reaching k, the run counts from its first sample.
                if let Some((_, e)) = self.events.back_mut().filter(|_| n == k) {
                    e.samples = n;
                }
            }
            return;
        }
        self.grad_bad = None;
        if let Some(f) = p.grad_spike {
            let before: Vec<f64> = self
                .grads
                .iter()
                .filter(|(s, _)| p.contains(*s))
                .map(|(_, v)| *v)
                .collect();
            let before = &before[before.len().saturating_sub(p.window.saturating_sub(1))..];
            if before.len() + 1 >= self.rules.min_samples.max(3) {
                if let Some(base) = median(before.iter().copied()).filter(|b| g > f * b) {
                    self.note(Kind::GradSpike, step, step, g, Some(base));
                }
            }
        }
        self.grads.push_back((step, g));
        while self.grads.len() > p.window.max(1) {
            self.grads.pop_front();
        }
    }

    /// A resume rewound the log to `step`: what was noted at or after it never happened.
    pub fn rewind(&mut self, step: u64) {
        self.events.retain(|(_, e)| e.step < step);
        self.grads.retain(|(s, _)| *s < step);
        self.grad_bad = None;
    }

    /// The worst event of each kind that began at or after `from`.
    pub fn since(&self, from: u64) -> Missed {
        let mut m = Missed {
            from,
            ..Default::default()
        };
        for (k, e) in self.events.iter().filter(|(_, e)| e.step >= from) {
            let slot = m.slot(*k);
            let runs = slot.map_or(0, |s| s.runs) + 1;
            let ratio = |e: &Event| e.base.map_or(0.0, |b| e.peak.0 / b.0);
            let keep = match slot {
                None => *e,
                // Non-finite and zero: the first; spikes: the highest over its median.
                Some(old) if ratio(e) > ratio(old) => *e,
                Some(old) => *old,
            };
            *slot = Some(Event { runs, ..keep });
        }
        m
    }
}

/// Report the events between two reads that are over by the newest sample, on the check
/// that would have reported them; a check already at `warn` or worse keeps its own answer.
pub fn apply(obs: &Observation, results: &mut [CheckResult]) {
    let Some(m) = &obs.between else {
        return;
    };
    let newest = |metric: &str| obs.series(metric).last().map(|p| p.0);
    let loss_at = newest(crate::metrics::LOSS);
    let grad_at = newest(crate::metrics::GRAD_NORM);
    let over = |e: &Option<Event>, at: Option<u64>| e.filter(|e| at.is_some_and(|a| e.until < a));
    let phase = obs.phase.as_ref();
    let says = |e: &Event, what: String| {
        let runs = match e.runs {
            1 => String::new(),
            n => format!("; {n} such runs since step {}", m.from),
        };
        format!(
            "{what} ({} sample(s), steps {}..={}), between two reads, over by the newest sample{runs}",
            e.samples, e.step, e.until
        )
    };
    let mut report = |check: &str, e: Event, reason: String| {
        if let Some(r) = results.iter_mut().find(|r| r.check == check) {
            if r.status < Status::Warn {
                let now = std::mem::take(&mut r.observed);
                *r = CheckResult::new(check, Status::Warn, reason)
                    .observed(json!({"newest": now, "between_reads": e}))
                    .expected(std::mem::take(&mut r.expected));
            }
        }
    };
    if let Some(e) = over(&m.loss_nonfinite, loss_at) {
        let what = format!("loss was {} at step {}", e.peak.0, e.step);
        report("loss", e, says(&e, what));
    } else if let Some(e) = over(&m.loss_zero, loss_at) {
        let what = format!("loss was exactly 0 at step {}", e.step);
        report("loss", e, says(&e, what));
    }
    if let Some(e) = over(&m.loss_spike, loss_at) {
        let f = phase.and_then(|p| p.loss_spike).unwrap_or(f64::NAN);
        let what = format!(
            "loss spiked to {} at step {}, over {}× the median {} before it",
            fmt(e.peak.0),
            e.peak_step,
            fmt(f),
            e.base.map_or("?".into(), |b| fmt(b.0))
        );
        report("loss_spike", e, says(&e, what));
    }
    if let Some(e) = over(&m.grad_nonfinite, grad_at) {
        let what = format!("grad norm was {} from step {}", e.peak.0, e.step);
        report("grad_norm", e, says(&e, what));
    } else if let Some(e) = over(&m.grad_spike, grad_at) {
        let f = phase.and_then(|p| p.grad_norm_spike).unwrap_or(f64::NAN);
        let what = format!(
            "grad norm spiked to {} at step {}, over {}× the median {} before it",
            fmt(e.peak.0),
            e.peak_step,
            fmt(f),
            e.base.map_or("?".into(), |b| fmt(b.0))
        );
        report("grad_norm", e, says(&e, what));
    }
}

#[cfg(test)]
mod tests {
    use super::super::onset::{PhaseRule, Tracker};
    use super::*;

    fn rules() -> Rules {
        Rules {
            phases: vec![PhaseRule {
                from: 0,
                to: None,
                band: None,
                spike: Some(1.5),
                grad_spike: Some(5.0),
                window: 10,
            }],
            min_samples: 5,
            band_samples: 5,
            grad_nonfinite_consecutive: 3,
        }
    }

    #[test]
    fn grad_runs_and_spikes_are_noted_worst_first_and_a_rewind_forgets() {
        let mut r = Recorder::new(rules());
        for s in 0..10 {
            r.grad(s, 0.5);
        }
        r.grad(10, 3.0); // 6× the median: a spike
        r.grad(11, 0.5);
        r.grad(12, 9.0); // a worse one
        for s in 13..15 {
            r.grad(s, f64::NAN); // 2 in a row: under grad_nonfinite_consecutive
        }
        r.grad(15, 0.5);
        for s in 16..20 {
            r.grad(s, f64::INFINITY); // 4 in a row
        }
        let m = r.since(0);
        let spike = m.grad_spike.unwrap();
        assert_eq!(
            (spike.peak_step, spike.runs, spike.base),
            (12, 2, Some(Num(0.5)))
        );
        let bad = m.grad_nonfinite.unwrap();
        assert_eq!((bad.step, bad.until, bad.samples, bad.runs), (16, 19, 4, 1));
        // Only what began at or after `from` counts.
        assert_eq!(r.since(11).grad_spike.map(|e| e.step), Some(12));
        assert_eq!(r.since(13).grad_spike, None);
        r.rewind(12);
        let m = r.since(0);
        assert_eq!(
            (m.grad_spike.map(|e| e.step), m.grad_nonfinite),
            (Some(10), None)
        );
    }

    #[test]
    fn loss_events_follow_the_onset_tracker() {
        let mut t = Tracker::new(rules());
        let mut r = Recorder::new(rules());
        let mut push = |s: u64, v: f64| {
            t.push(s, v);
            r.loss(s, v, &t.now);
        };
        for s in 0..10 {
            push(s, 3.0);
        }
        push(10, 9.0);
        push(11, 8.0);
        for s in 12..20 {
            push(s, 3.0);
        }
        push(20, f64::NAN);
        push(21, 3.0);
        let m = r.since(5);
        let spike = m.loss_spike.unwrap();
        assert_eq!(
            (spike.step, spike.peak, spike.peak_step),
            (10, Num(9.0), 10)
        );
        assert!(spike.until >= 11, "{spike:?}");
        assert_eq!(m.loss_nonfinite.map(|e| (e.step, e.until)), Some((20, 20)));
    }
}
