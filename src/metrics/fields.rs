//! From a line's fields to a [`Record`]: which log key feeds which slot ([`Keys`], from
//! `[metrics]`), each value read by its kind (times by the `clock`), and [`Fields`], which
//! collects one line and finishes it into a sample, a partial sample or garbage.

use super::{
    num, parse_num, parse_time, Parsed, Record, EVAL_SCORE_SLOT, LR_GROUPS, TOKENS_SLOT,
    TOTAL_SLOT, TPS_SLOT,
};
use crate::metrics::mapping::MetricsConfig;

/// What a log field feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Step,
    Time,
    /// Seconds (or ms) one step took: tokens/s = `tokens_per_step` / it.
    StepTime,
    /// Index into [`SLOTS`].
    Metric(usize),
}

const LEN_BUCKETS: usize = 64;

/// `[metrics]` as (target, key) pairs. Keys compare with `.` and `/` as the same separator,
/// so `train/loss` finds `{"train": {"loss": ..}}` and a flat `"train/loss"` key alike.
#[derive(Debug, Clone)]
pub struct Keys {
    pub wanted: Vec<(Target, Vec<u8>)>,
    /// Per `wanted` entry: whether its key has a `.` or `/` (then a separator-blind match).
    has_sep: Vec<bool>,
    /// By key length (the last entry: any longer key): a bit per `wanted` entry of that
    /// length, so the hot lookup compares only keys that can match.
    by_len: [u32; LEN_BUCKETS],
    pub vram_unit: crate::metrics::mapping::VramUnit,
    pub clock: crate::metrics::mapping::Clock,
    step_time_ms: bool,
    tokens_per_step: Option<f64>,
}

impl Keys {
    pub fn new(m: &MetricsConfig) -> Keys {
        let mut wanted = vec![
            (Target::Step, m.step.clone()),
            (Target::Time, m.time.clone()),
            (Target::StepTime, m.step_time.clone()),
        ];
        let metric_keys = [
            m.loss.as_str(),
            m.lr.first(),
            &m.grad_norm,
            &m.tokens_per_s,
            &m.vram,
            &m.eval_loss,
        ];
        for (i, k) in metric_keys.into_iter().enumerate() {
            wanted.push((Target::Metric(i), k.to_string()));
        }
        for (g, k) in m.lr.0.iter().enumerate().skip(1).take(LR_GROUPS.len() - 1) {
            wanted.push((Target::Metric(5 + g), k.clone()));
        }
        wanted.push((Target::Metric(TOTAL_SLOT), m.total_steps.clone()));
        wanted.push((Target::Metric(TOKENS_SLOT), m.tokens.clone()));
        wanted.push((Target::Metric(EVAL_SCORE_SLOT), m.eval_score.clone()));
        let wanted: Vec<(Target, Vec<u8>)> = wanted
            .into_iter()
            .filter(|(_, k)| !k.is_empty())
            .map(|(t, k)| (t, k.into_bytes()))
            .collect();
        let has_sep = wanted
            .iter()
            .map(|(_, k)| k.iter().any(|&c| c == b'.' || c == b'/'))
            .collect();
        let mut by_len = [0u32; LEN_BUCKETS];
        for (i, (_, k)) in wanted.iter().enumerate() {
            by_len[k.len().min(LEN_BUCKETS - 1)] |= 1 << i;
        }
        Keys {
            wanted,
            has_sep,
            by_len,
            vram_unit: m.vram_unit,
            clock: m.clock,
            step_time_ms: m.step_time_unit == crate::metrics::mapping::TimeUnit::Ms,
            tokens_per_step: m.tokens_per_step,
        }
    }

    /// A value for `target` from its text: times by the `[metrics] clock`, the rest numbers.
    pub fn value(&self, target: Target, raw: &[u8]) -> Option<f64> {
        use crate::metrics::mapping::Clock;
        match (target, self.clock) {
            (Target::Time, Clock::Unix) => parse_time(raw),
            (Target::Time, Clock::Elapsed) => num::parse_elapsed(raw),
            (Target::Time, Clock::ElapsedMs) => {
                let raw = raw.trim_ascii();
                parse_num(raw.strip_suffix(b"ms").unwrap_or(raw))
            }
            _ => parse_num(raw),
        }
    }

    /// Targets fed by a key (usually zero or one).
    pub fn lookup<'a>(&'a self, key: &'a [u8]) -> impl Iterator<Item = Target> + 'a {
        self.wanted
            .iter()
            .filter(move |(_, k)| same_key(k, key))
            .map(|(t, _)| *t)
    }

    /// [`Keys::lookup`] for the JSONL hot loop: a bit per entry of `wanted` that matches.
    /// Keys without a separator can only match exactly, which is one short memcmp.
    #[inline]
    pub fn lookup_mask(&self, key: &[u8]) -> u32 {
        let mut candidates = self.by_len[key.len().min(LEN_BUCKETS - 1)];
        let mut mask = 0;
        while candidates != 0 {
            let i = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            let k = self.wanted[i].1.as_slice();
            // A byte loop beats a memcmp call on keys this short. (The length check matters
            // only in the last, shared bucket.)
            let same = k.len() == key.len() && k.iter().zip(key).all(|(a, b)| a == b);
            if same || (self.has_sep[i] && same_key(k, key)) {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// Whether some wanted key lies under `prefix/` (worth descending into a nested object).
    pub fn under(&self, prefix: &[u8]) -> bool {
        self.wanted.iter().any(|(_, k)| {
            k.len() > prefix.len() && same_key(&k[..prefix.len()], prefix) && {
                let c = k[prefix.len()];
                c == b'/' || c == b'.'
            }
        })
    }
}

fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(&x, &y)| x == y || (matches!(x, b'.' | b'/') && matches!(y, b'.' | b'/')))
}

/// Collects a line's fields into a sample.
#[derive(Debug, Default)]
pub struct Fields {
    pub step: Option<f64>,
    pub time: Option<f64>,
    pub step_time: Option<f64>,
    pub values: [Option<f64>; crate::metrics::N_SLOTS],
    /// Why a wanted field could not be read (first problem only).
    pub bad: Option<String>,
}

impl Fields {
    pub fn set(&mut self, target: Target, v: f64) {
        match target {
            Target::Step => self.step = Some(v),
            Target::Time => self.time = Some(v),
            Target::StepTime => self.step_time = Some(v),
            Target::Metric(i) => self.values[i] = Some(v),
        }
    }

    /// Sample (Partial when one field was unreadable), Skip (no step and no mapped metric:
    /// a summary or `predict_*` entry) or Garbage (no usable step).
    pub fn finish(self, keys: &Keys, step_key: &str) -> Parsed {
        let Some(step) = self.step else {
            if let Some(why) = self.bad {
                return Parsed::Garbage(why);
            }
            if self.values.iter().all(Option::is_none) && self.step_time.is_none() {
                return Parsed::Skip;
            }
            return Parsed::Garbage(format!("no step: expected a `{step_key}` field"));
        };
        let Some(step) = as_step(step) else {
            return Parsed::Garbage(format!(
                "step {step} is not a non-negative integer (`{step_key}`)"
            ));
        };
        let mut values = self.values;
        if let Some(v) = values[4].as_mut() {
            *v = keys.vram_unit.to_gib(*v); // METRICS[4] is VRAM_GIB
        }
        if let (None, Some(per_step), Some(dt)) =
            (values[TPS_SLOT], keys.tokens_per_step, self.step_time)
        {
            let dt = if keys.step_time_ms { dt / 1000.0 } else { dt };
            if dt.is_finite() && dt > 0.0 {
                values[TPS_SLOT] = Some(per_step / dt);
            }
        }
        let time = match keys.clock {
            crate::metrics::mapping::Clock::ElapsedMs => self.time.map(|t| t / 1000.0),
            _ => self.time,
        };
        let record = Record { step, time, values };
        match self.bad {
            Some(why) => {
                Parsed::Partial(record, format!("{why}; the line's other fields are used"))
            }
            None => Parsed::Sample(record),
        }
    }
}

pub(super) fn as_step(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 1.8e19).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hot lookup (length-filtered bit mask) agrees with the plain one on keys of equal
    /// length, separator-blind keys and keys longer than the length table.
    #[test]
    fn lookup_mask_agrees_with_lookup() {
        let long = "x".repeat(70);
        let longer = "x".repeat(71);
        let m = MetricsConfig {
            loss: "train/loss".into(),
            grad_norm: "gn".into(),
            eval_loss: long.clone(),
            vram: "lr".into(), // same key, two targets
            ..Default::default()
        };
        let keys = Keys::new(&m);
        let tricky = [
            "step",
            "stap",
            "loss",
            "train/loss",
            "train.loss",
            "train/lost",
            "trainXloss",
            "lr",
            "gn",
            "ng",
            "",
            "time",
            long.as_str(),
            longer.as_str(),
            "tokens_per_s",
            "s",
        ];
        for key in tricky {
            let want: Vec<Target> = keys.lookup(key.as_bytes()).collect();
            let mask = keys.lookup_mask(key.as_bytes());
            let got: Vec<Target> = (0..keys.wanted.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| keys.wanted[i].0)
                .collect();
            assert_eq!(got, want, "{key:?}");
        }
        assert_eq!(keys.lookup_mask(b"lr").count_ones(), 2);
        assert_ne!(keys.lookup_mask(long.as_bytes()), 0);
        assert_eq!(keys.lookup_mask(longer.as_bytes()), 0);
    }
}
