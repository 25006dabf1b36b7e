//! Per-phase thresholds proposed from what the run actually logged: loss band and grad-norm
//! ceiling from quantiles, tokens/s floor and VRAM ceiling with a margin, and a stale limit
//! from the gaps between samples. Each number carries the words saying where it came from.

use crate::config::units::{duration_from_secs, format_duration};
use crate::init::fit::round_sig;
use crate::metrics::{Sample, GRAD_NORM, LOSS, TOKENS_PER_S, VRAM_GIB};

/// One proposed `[[phase]]`, each value with its provenance comment.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub name: String,
    pub from: u64,
    pub to: Option<u64>,
    /// (TOML key, TOML value, comment).
    pub keys: Vec<(&'static str, String, String)>,
    pub samples: usize,
}

/// Samples in the judging window of a proposed phase.
pub const WINDOW: usize = 20;

/// Phases for the run: a warmup phase up to `warmup` (when the log has samples on both sides
/// of it) and a main phase after it, else one phase for the whole run.
pub fn propose(samples: &[Sample], warmup: u64) -> Vec<Phase> {
    let first = samples.first().map_or(0, |s| s.step);
    let split = warmup > first && samples.iter().any(|s| s.step >= warmup);
    let ranges: Vec<(&str, u64, Option<u64>)> = if split {
        vec![("warmup", 0, Some(warmup)), ("main", warmup, None)]
    } else {
        vec![("main", 0, None)]
    };
    let stale = stale_limit(samples);
    ranges
        .into_iter()
        .map(|(name, from, to)| {
            let inside: Vec<&Sample> = samples
                .iter()
                .filter(|s| s.step >= from && to.is_none_or(|t| s.step < t))
                .collect();
            let mut keys = Vec::new();
            if let Some(k) = loss_band(&inside) {
                keys.push(k);
            }
            if let Some(k) = grad_ceiling(&inside) {
                keys.push(k);
            }
            if let Some(k) = tokens_floor(&inside) {
                keys.push(k);
            }
            if let Some(k) = vram_ceiling(&inside) {
                keys.push(k);
            }
            keys.push(stale.clone());
            keys.push((
                "window",
                WINDOW.to_string(),
                "samples judged at a time".into(),
            ));
            Phase {
                name: name.into(),
                from,
                to,
                keys,
                samples: inside.len(),
            }
        })
        .collect()
}

fn values(samples: &[&Sample], metric: &str) -> Vec<f64> {
    let mut v: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.get(metric))
        .filter(|x| x.is_finite())
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The q-quantile of sorted values (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn num(x: f64) -> String {
    let r = round_sig(x, 3);
    if r == r.trunc() && r.abs() < 1e15 {
        format!("{r:.1}")
    } else {
        format!("{r}")
    }
}

fn loss_band(s: &[&Sample]) -> Option<(&'static str, String, String)> {
    let v = values(s, LOSS);
    if v.len() < 2 {
        return None;
    }
    let (q01, q99, max) = (quantile(&v, 0.01), quantile(&v, 0.99), v[v.len() - 1]);
    let lo = round_sig(q01 * 0.5, 2);
    let hi = round_sig(max * 1.25, 3);
    Some((
        "loss",
        format!("[{}, {}]", num(lo), num(hi)),
        format!(
            "{} samples: 1% quantile {}, 99% {}, max {}; band = [q1% x 0.5, max x 1.25]",
            v.len(),
            num(q01),
            num(q99),
            num(max)
        ),
    ))
}

fn grad_ceiling(s: &[&Sample]) -> Option<(&'static str, String, String)> {
    let v = values(s, GRAD_NORM);
    if v.len() < 2 {
        return None;
    }
    let (q50, q99) = (quantile(&v, 0.5), quantile(&v, 0.99));
    Some((
        "grad_norm_max",
        num(round_sig(q99 * 1.5, 3)),
        format!(
            "{} samples: median {}, 99% quantile {}; ceiling = q99% x 1.5",
            v.len(),
            num(q50),
            num(q99)
        ),
    ))
}

fn tokens_floor(s: &[&Sample]) -> Option<(&'static str, String, String)> {
    // A counter that never moved (0 tokens logged) says nothing about throughput.
    let v: Vec<f64> = values(s, TOKENS_PER_S)
        .into_iter()
        .filter(|x| *x > 0.0)
        .collect();
    if v.len() < 2 {
        return None;
    }
    let (q05, q50) = (quantile(&v, 0.05), quantile(&v, 0.5));
    Some((
        "tokens_per_s_min",
        num(round_sig(q05 * 0.7, 2)),
        format!(
            "{} samples: median {}, 5% quantile {}; floor = q5% x 0.7",
            v.len(),
            num(q50),
            num(q05)
        ),
    ))
}

fn vram_ceiling(s: &[&Sample]) -> Option<(&'static str, String, String)> {
    let v = values(s, VRAM_GIB);
    let max = *v.last()?;
    Some((
        "vram_max_gib",
        num(round_sig(max * 1.1, 3)),
        format!(
            "{} samples: max {} GiB; ceiling = max x 1.1",
            v.len(),
            num(max)
        ),
    ))
}

/// Stale limit: 3x the longest gap between samples the log timed itself (evals and saves
/// included), at least 5 minutes. Without the log's own times, a stated default.
fn stale_limit(samples: &[Sample]) -> (&'static str, String, String) {
    let mut gaps: Vec<f64> = samples
        .windows(2)
        .filter_map(|w| Some(w[1].time? - w[0].time?))
        .filter(|g| g.is_finite() && *g > 0.0)
        .collect();
    gaps.sort_by(f64::total_cmp);
    if gaps.len() < 2 {
        return (
            "stale",
            "\"30m\"".into(),
            "the log has no times of its own: a default; set it to a few times the longest quiet stretch (eval, save)".into(),
        );
    }
    let max = gaps[gaps.len() - 1];
    let limit = (max * 3.0).max(300.0);
    // Whole minutes (or hours) read better than 1347.2s.
    let rounded = if limit >= 7200.0 {
        (limit / 3600.0).ceil() * 3600.0
    } else {
        (limit / 60.0).ceil() * 60.0
    };
    (
        "stale",
        format!("{:?}", format_duration(duration_from_secs(rounded))),
        format!(
            "{} gaps between samples: median {}, longest {}; limit = longest x 3 (at least 5m)",
            gaps.len(),
            format_duration(duration_from_secs(quantile(&gaps, 0.5))),
            format_duration(duration_from_secs(max))
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn s(step: u64, time: f64, loss: f64, gn: f64) -> Sample {
        let mut values = BTreeMap::new();
        values.insert(LOSS.to_string(), loss);
        values.insert(GRAD_NORM.to_string(), gn);
        Sample {
            step,
            time: Some(time),
            values,
        }
    }

    #[test]
    fn phases_split_at_warmup_with_quantile_bands() {
        let samples: Vec<Sample> = (0..100u64)
            .map(|i| s(i * 10, i as f64 * 30.0, 10.0 - i as f64 * 0.05, 1.0))
            .collect();
        let p = propose(&samples, 200);
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].from, p[0].to, p[1].from), (0, Some(200), 200));
        assert_eq!(p[0].samples, 20);
        let loss = &p[0].keys[0];
        assert_eq!(loss.0, "loss");
        assert_eq!(loss.1, "[4.5, 12.5]"); // q1% 9.05 x 0.5, max 10 x 1.25
        let stale = p[1].keys.iter().find(|k| k.0 == "stale").unwrap();
        assert_eq!(stale.1, "\"5m\""); // 30 s gaps: the 5-minute floor
        assert_eq!(propose(&samples, 0).len(), 1);
    }
}
