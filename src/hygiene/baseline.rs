//! Reading the two sides of `hygiene regress` into plain points: a metrics log through
//! `metrics::read_all` (any format the critic reads), or a baseline run's ledger, whose
//! verdicts archive the window of samples each was judged on (`observation.window`). A
//! ledger baseline covers only the steps inside those windows — as dense as the critic's
//! ticks were — and says so when it holds none.

use super::regress::Point;
use crate::config::{LogFormat, MetricsConfig};
use crate::critic::ObsSample;
use crate::ledger::{Kind, Ledger};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// Whether a file is a roger ledger: its first non-empty line is a record with `kind` and
/// `hash`.
pub fn is_ledger(path: &Path) -> Result<bool> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut head = Vec::new();
    f.take(1 << 20)
        .read_to_end(&mut head)
        .with_context(|| format!("reading {}", path.display()))?;
    // Bytes, not text: a binary file is simply not a ledger (the log reader then says why).
    for line in head.split(|&b| b == b'\n').take(20) {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let v: serde_json::Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(_) => return Ok(false),
        };
        return Ok(v.get("kind").is_some() && v.get("hash").is_some() && v.get("seq").is_some());
    }
    Ok(false)
}

/// Points from a metrics log.
pub fn from_log(path: &Path, format: LogFormat, metrics: &MetricsConfig) -> Result<Vec<Point>> {
    let out = crate::metrics::read_all(path, format, metrics)
        .with_context(|| format!("reading metrics log {}", path.display()))?;
    if out.garbage_total > 0 {
        // Never fatal (like the critic), but said: a comparison against junk is no comparison.
        crate::warnln!(
            "{} unreadable line(s) in {}; first: {}",
            out.garbage_total,
            path.display(),
            out.garbage.first().map_or(String::new(), |g| g.to_string())
        );
    }
    Ok(out
        .samples
        .into_iter()
        .map(|s| Point {
            step: s.step,
            values: s.values,
        })
        .collect())
}

/// Points from the verdict observations in a ledger (optionally one run's). Later verdicts
/// win for a step seen in several windows.
pub fn from_ledger(path: &Path, run: Option<&str>) -> Result<Vec<Point>> {
    let records = Ledger::new(path).records()?;
    let mut by_step: BTreeMap<u64, BTreeMap<String, f64>> = BTreeMap::new();
    let mut verdicts = 0usize;
    for r in records
        .iter()
        .filter(|r| r.kind == Kind::Verdict && run.is_none_or(|run| r.run == run))
    {
        verdicts += 1;
        let Some(window) = r.get("observation").and_then(|o| o.get("window")) else {
            continue;
        };
        let samples: Vec<ObsSample> =
            serde_json::from_value(window.clone()).with_context(|| {
                format!(
                    "{}: verdict seq {}: observation.window is not a list of samples",
                    path.display(),
                    r.seq
                )
            })?;
        for s in samples {
            let values = s.values.iter().map(|(k, n)| (k.to_string(), n.0)).collect();
            by_step.insert(s.step, values);
        }
    }
    if by_step.is_empty() {
        bail!(
            "{}: a ledger baseline needs verdict records with archived observation windows; found {verdicts} verdict(s){} and no samples — give the baseline run's metrics log instead",
            path.display(),
            run.map_or(String::new(), |r| format!(" for run {r:?}"))
        );
    }
    Ok(by_step
        .into_iter()
        .map(|(step, values)| Point { step, values })
        .collect())
}
