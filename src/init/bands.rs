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

/// The loss band's noise factor: the band reaches this many noise widths past what the
/// run's own median-of-`band_samples` did.
pub const NOISE_FACTOR: f64 = 6.0;
/// The band's margin is never narrower than this share of the loss (a loss logged to few
/// digits, a run with no visible noise).
pub const NOISE_FLOOR: f64 = 0.02;
/// Half-width of the running median the noise is measured around.
const TREND_HALF: usize = 5;

/// The rule, as written in the generated config.
pub const LOSS_RULE: &str = "loss band from this run's own noise: noise = 1.4826 x MAD of (loss / running median of 11 - 1); margin = max(6 x noise, 2%); the critic's statistic (median of the last band_samples losses) ranged [lo, hi] over the phase, and fell by `drift` over its second half; band = [(lo - drift) x (1 - margin), hi x (1 + margin)]";

/// The critic's statistic: the median of the last `k` samples, at every sample.
fn trailing_medians(v: &[f64], k: usize) -> Vec<f64> {
    (0..v.len())
        .filter_map(|i| {
            crate::critic::stats::median(v[(i + 1).saturating_sub(k)..=i].iter().copied())
        })
        .collect()
}

/// Relative noise around the local trend: 1.4826 × MAD of `v / centred running median - 1`
/// (the MAD ignores spikes; 1.4826 makes it a standard deviation for Gaussian noise).
pub fn relative_noise(v: &[f64]) -> f64 {
    let res: Vec<f64> = (0..v.len())
        .filter_map(|i| {
            let lo = i.saturating_sub(TREND_HALF);
            let hi = (i + TREND_HALF + 1).min(v.len());
            let m = crate::critic::stats::median(v[lo..hi].iter().copied())?;
            (m.abs() > 0.0).then(|| v[i] / m - 1.0)
        })
        .collect();
    let Some(mid) = crate::critic::stats::median(res.iter().copied()) else {
        return 0.0;
    };
    1.4826 * crate::critic::stats::median(res.iter().map(|r| (r - mid).abs())).unwrap_or(0.0)
}

/// `x` rounded down (`up`: up) to 3 significant digits: rounding never narrows the band.
fn round_out(x: f64, up: bool) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x.max(0.0);
    }
    let mag = 10f64.powi(2 - x.log10().floor() as i32);
    let r = if up {
        // The nudge keeps a float just past a round number (10.2 × 10 = 102.00000000000001)
        // from rounding a whole digit out.
        (x * mag - 1e-9).ceil() / mag
    } else {
        (x * mag + 1e-9).floor() / mag
    };
    round_sig(r, 3)
}

/// The loss band from the run's own noise ([`LOSS_RULE`]): a run that stayed within ±2.5%
/// of 2.0 gets about [1.8, 2.2], so a halving (or a doubling) fails; a run still falling
/// keeps room below for the fall its second half showed.
fn loss_band(s: &[&Sample]) -> Option<(&'static str, String, String)> {
    let v: Vec<f64> = s
        .iter()
        .filter_map(|x| x.get(LOSS))
        .filter(|x| x.is_finite())
        .collect();
    if v.len() < 2 {
        return None;
    }
    let k = crate::config::CriticConfig::default().band_samples.max(1);
    let stat = trailing_medians(&v, k);
    let lo = stat.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = stat.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let n = v.len();
    let fifth = (n / 5).max(1);
    let median = |x: &[f64]| crate::critic::stats::median(x.iter().copied()).unwrap_or(0.0);
    let mid = median(&v[n / 2..(n / 2 + fifth).min(n)]);
    let end = median(&v[n - fifth..]);
    let drift = (mid - end).max(0.0);
    let noise = relative_noise(&v);
    let margin = (NOISE_FACTOR * noise).max(NOISE_FLOOR);
    let band_lo = round_out(((lo - drift) * (1.0 - margin)).max(0.0), false);
    let band_hi = round_out(hi * (1.0 + margin), true);
    Some((
        "loss",
        format!("[{}, {}]", num(band_lo), num(band_hi)),
        format!(
            "{n} samples: median of {k} ranged {}..{}, fell {} over the second half, noise {:.2}%; margin {:.1}% (rule in the header)",
            num(lo),
            num(hi),
            num(drift),
            100.0 * noise,
            100.0 * margin
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

    /// A tiny deterministic noise in [-1, 1].
    fn jitter(i: u64) -> f64 {
        let x = (i.wrapping_mul(2654435761) % 10007) as f64 / 10007.0;
        2.0 * x - 1.0
    }

    /// Issue 29: a loss within ±2.5% of 2.0 got [0.98, 2.56] (q1% x 0.5, max x 1.25), where
    /// a halving passes. From the run's own noise, a halving and a doubling fall outside
    /// while every median of 5 of the run itself lies inside.
    #[test]
    fn the_loss_band_is_proportionate_to_the_runs_noise() {
        let samples: Vec<Sample> = (0..400u64)
            .map(|i| s(i * 5, i as f64, 2.0 * (1.0 + 0.025 * jitter(i)), 1.0))
            .collect();
        let p = propose(&samples, 0);
        let loss = p[0].keys.iter().find(|k| k.0 == "loss").unwrap();
        let band: Vec<f64> = loss
            .1
            .trim_matches(['[', ']'])
            .split(", ")
            .map(|x| x.parse().unwrap())
            .collect();
        let (lo, hi) = (band[0], band[1]);
        assert!(
            lo > 1.0 && hi < 4.0,
            "a halving or doubling would pass: {loss:?}"
        );
        assert!(lo > 1.6 && hi < 2.4, "wider than the noise: {loss:?}");
        let v: Vec<f64> = samples.iter().map(|x| x.get(LOSS).unwrap()).collect();
        for m in trailing_medians(&v, 5) {
            assert!(
                (lo..=hi).contains(&m),
                "the run itself fails its band: {m} {loss:?}"
            );
        }
        assert!(loss.2.contains("noise"), "{loss:?}");
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
        // No noise: the 2% floor around what the median of 5 did (10 .. 9.15, falling
        // 0.3 over the second half).
        assert_eq!(loss.1, "[8.67, 10.2]", "{}", loss.2);
        let stale = p[1].keys.iter().find(|k| k.0 == "stale").unwrap();
        assert_eq!(stale.1, "\"5m\""); // 30 s gaps: the 5-minute floor
        assert_eq!(propose(&samples, 0).len(), 1);
    }
}
