//! Flap detection over the critic's verdict history, per check, in the spirit of Nagios:
//! over the last N statuses of a check, each state change counts with a weight rising
//! linearly from 0.8 (oldest transition) to 1.2 (newest), normalised so the score is the
//! weighted fraction of transitions that changed (0 = steady, 1 = flips every time). A check
//! starts flapping when the score rises above `flap_high` and stops only when it falls below
//! `flap_low` (hysteresis), so the flag itself does not flap. Pure: records in, states out.

use crate::config::HygieneConfig;
use crate::ledger::{Kind, Record};
use serde::Serialize;
use std::collections::BTreeMap;

/// Fewest statuses needed before a check can be judged as flapping.
pub const MIN_STATES: usize = 5;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlapState {
    pub check: String,
    /// Weighted fraction of changes over the window, 0..=1.
    pub score: f64,
    pub flapping: bool,
    /// Statuses in the window.
    pub states: usize,
    /// Unweighted number of changes in the window.
    pub changes: usize,
    pub last_status: String,
    /// The window's statuses, oldest first, one letter each (P W F U).
    pub recent: String,
    /// Ledger seq of the verdict at which the current flapping episode began.
    pub since_seq: Option<u64>,
}

/// The weighted change score of a status sequence (oldest first): the last `window` entries.
pub fn score(statuses: &[&str], window: usize) -> f64 {
    let w = &statuses[statuses.len().saturating_sub(window.max(2))..];
    if w.len() < 2 {
        return 0.0;
    }
    let m = w.len() - 1;
    let weight = |i: usize| {
        if m == 1 {
            1.0
        } else {
            0.8 + 0.4 * i as f64 / (m - 1) as f64
        }
    };
    let total: f64 = (0..m).map(weight).sum();
    // fold from +0.0: an empty f64 `sum()` is -0.0, which prints as "-0.00".
    let changed = (0..m)
        .filter(|&i| w[i] != w[i + 1])
        .map(weight)
        .fold(0.0, |a, b| a + b);
    changed / total
}

/// Walk a check's statuses (oldest first) applying the hysteresis at each step; returns the
/// state after the last one. `seqs` are the ledger seqs of the same verdicts (for `since_seq`).
pub fn flap_state(check: &str, statuses: &[&str], seqs: &[u64], cfg: &HygieneConfig) -> FlapState {
    let window = cfg.flap_window.max(2);
    let min = MIN_STATES.min(window);
    let mut flapping = false;
    let mut since = None;
    let mut last_score = 0.0;
    for end in 1..=statuses.len() {
        let start = end.saturating_sub(window);
        if end - start < min {
            continue;
        }
        let s = score(&statuses[start..end], window);
        last_score = s;
        if !flapping && s > cfg.flap_high {
            flapping = true;
            since = seqs.get(end - 1).copied();
        } else if flapping && s < cfg.flap_low {
            flapping = false;
            since = None;
        }
    }
    let w = &statuses[statuses.len().saturating_sub(window)..];
    FlapState {
        check: check.to_string(),
        score: last_score,
        flapping,
        states: w.len(),
        changes: w.windows(2).filter(|p| p[0] != p[1]).count(),
        last_status: statuses.last().map(|s| s.to_string()).unwrap_or_default(),
        recent: w.iter().map(|s| letter(s)).collect(),
        since_seq: if flapping { since } else { None },
    }
}

fn letter(status: &str) -> char {
    match status {
        "pass" => 'P',
        "warn" => 'W',
        "fail" => 'F',
        "unknown" => 'U',
        _ => '?',
    }
}

/// Per check name, its statuses and verdict seqs, oldest first, from verdict records.
pub fn histories(history: &[&Record]) -> BTreeMap<String, (Vec<String>, Vec<u64>)> {
    let mut out: BTreeMap<String, (Vec<String>, Vec<u64>)> = BTreeMap::new();
    for r in history.iter().filter(|r| r.kind == Kind::Verdict) {
        let Some(checks) = r.get("checks").and_then(|c| c.as_array()) else {
            continue;
        };
        for c in checks {
            let (Some(name), Some(status)) = (
                c.get("check").and_then(|v| v.as_str()),
                c.get("status").and_then(|v| v.as_str()),
            ) else {
                continue;
            };
            let e = out.entry(name.to_string()).or_default();
            e.0.push(status.to_string());
            e.1.push(r.seq);
        }
    }
    out
}

/// Every check's flap state from the verdict history (records of other kinds are ignored).
/// The critic calls this with its past verdicts to mark a flapping check's result.
pub fn flap_states(history: &[&Record], cfg: &HygieneConfig) -> Vec<FlapState> {
    histories(history)
        .into_iter()
        .map(|(name, (statuses, seqs))| {
            let refs: Vec<&str> = statuses.iter().map(String::as_str).collect();
            flap_state(&name, &refs, &seqs, cfg)
        })
        .collect()
}

/// Only the checks flapping now.
pub fn flapping_checks(history: &[&Record], cfg: &HygieneConfig) -> Vec<FlapState> {
    flap_states(history, cfg)
        .into_iter()
        .filter(|s| s.flapping)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Entry, Ledger};
    use chrono::{TimeZone, Utc};

    fn cfg() -> HygieneConfig {
        HygieneConfig::default()
    }

    #[test]
    fn steady_scores_zero_alternating_scores_one() {
        assert_eq!(score(&["pass"; 10], 21), 0.0);
        assert!(score(&["pass"; 10], 21).is_sign_positive());
        let alt: Vec<&str> = (0..21)
            .map(|i| if i % 2 == 0 { "pass" } else { "fail" })
            .collect();
        assert!((score(&alt, 21) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn recent_changes_weigh_more() {
        let mut old = vec!["fail"; 1];
        old.extend(["pass"; 10]);
        let mut new = vec!["pass"; 10];
        new.push("fail");
        assert!(score(&new, 21) > score(&old, 21));
        // Exactly the end weights: 0.8 and 1.2 over a total of m = 10 transitions.
        assert!((score(&old, 21) - 0.08).abs() < 1e-12);
        assert!((score(&new, 21) - 0.12).abs() < 1e-12);
    }

    #[test]
    fn hysteresis_holds_between_low_and_high() {
        let c = cfg(); // high 0.5, low 0.25, window 21
        let mut s: Vec<&str> = (0..10)
            .map(|i| if i % 2 == 0 { "pass" } else { "fail" })
            .collect();
        let seqs: Vec<u64> = (1..=40).collect();
        let st = flap_state("loss", &s, &seqs, &c);
        assert!(st.flapping && st.score > 0.5);
        // Settle: the score drifts down through the band; it stays flapping while above low.
        let mut crossed_band = false;
        for _ in 0..25 {
            s.push("pass");
            let st = flap_state("loss", &s, &seqs, &c);
            if st.score < 0.5 && st.score >= 0.25 {
                assert!(st.flapping, "in the band it keeps flapping: {st:?}");
                crossed_band = true;
            }
            if st.score < 0.25 {
                assert!(!st.flapping);
            }
        }
        assert!(crossed_band);
        assert!(!flap_state("loss", &s, &seqs, &c).flapping);
    }

    #[test]
    fn too_few_states_never_flap() {
        let st = flap_state(
            "x",
            &["pass", "fail", "pass", "fail"],
            &[1, 2, 3, 4],
            &cfg(),
        );
        assert!(!st.flapping);
        assert_eq!(st.recent, "PFPF");
    }

    #[test]
    fn reads_checks_from_verdict_records() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::new(dir.path().join("l.jsonl"));
        for i in 0..12u64 {
            let lr = if i % 2 == 0 { "pass" } else { "warn" };
            let checks = serde_json::json!([
                {"check": "loss", "status": "pass", "observed": 2.0, "expected": "[1,3]", "reason": ""},
                {"check": "lr", "status": lr, "observed": 1e-4, "expected": "", "reason": ""},
            ]);
            l.append(
                Entry::new(Kind::Verdict, "critic", "r")
                    .step(Some(i))
                    .field("status", lr)
                    .field("checks", checks),
                Utc.timestamp_opt(1_700_000_000 + i as i64, 0).unwrap(),
            )
            .unwrap();
        }
        l.append(
            Entry::new(Kind::Note, "ledger", "r").field("message", "hi"),
            Utc.timestamp_opt(1_800_000_000, 0).unwrap(),
        )
        .unwrap();
        let recs = l.records().unwrap();
        let refs: Vec<&Record> = recs.iter().collect();
        let all = flap_states(&refs, &cfg());
        assert_eq!(all.len(), 2);
        let flapping = flapping_checks(&refs, &cfg());
        assert_eq!(flapping.len(), 1);
        assert_eq!(flapping[0].check, "lr");
        assert_eq!(flapping[0].since_seq, Some(5));
        assert_eq!(flapping[0].changes, 11);
    }
}
