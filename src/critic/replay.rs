//! `critic --replay`: recompute every archived verdict from its observation and report each
//! one that comes out different. This is the determinism proof, and it catches an edited
//! observation whose numbers no longer give the verdict filed with them.

use super::{judge, Observation};
use crate::ledger::{Kind, Record};
use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    pub seq: u64,
    pub step: Option<u64>,
    pub archived: String,
    /// None when the observation could not be read.
    pub recomputed: Option<String>,
    /// Empty when the recomputed verdict is the archived one.
    pub differences: Vec<String>,
}

impl Replayed {
    pub fn matches(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Every critic verdict in `records`, recomputed.
pub fn replay(records: &[Record]) -> Vec<Replayed> {
    records
        .iter()
        .filter(|r| r.kind == Kind::Verdict && r.source == "critic")
        .map(replay_one)
        .collect()
}

fn replay_one(r: &Record) -> Replayed {
    let archived = r.str_field("status").unwrap_or("?").to_string();
    let mut out = Replayed {
        seq: r.seq,
        step: r.step,
        archived,
        recomputed: None,
        differences: Vec::new(),
    };
    let obs: Observation = match r.get("observation").cloned().map(serde_json::from_value) {
        Some(Ok(o)) => o,
        Some(Err(e)) => {
            out.differences.push(format!("observation unreadable: {e}"));
            return out;
        }
        None => {
            out.differences.push("no observation archived".into());
            return out;
        }
    };
    let v = judge(&obs);
    out.recomputed = Some(v.status.as_str().to_string());
    if v.status.as_str() != out.archived {
        out.differences
            .push(format!("status {} → {}", out.archived, v.status.as_str()));
    }
    let fresh_best = v
        .best()
        .map(|m| serde_json::to_value(m).expect("a mark serialises"));
    if r.get("best") != fresh_best.as_ref() {
        out.differences.push(format!(
            "best: {} → {}",
            r.get("best").map_or("none".into(), Value::to_string),
            fresh_best.map_or("none".into(), |b| b.to_string())
        ));
    }
    let stored: Vec<Value> = r
        .get("checks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let fresh: Vec<Value> = v
        .checks
        .iter()
        .map(|c| serde_json::to_value(c).expect("check serialises"))
        .collect();
    let name = |c: &Value| c["check"].as_str().unwrap_or("?").to_string();
    for f in &fresh {
        match stored.iter().find(|s| name(s) == name(f)) {
            None => out.differences.push(format!("check {} is new", name(f))),
            Some(s) if s != f => out.differences.push(describe(s, f)),
            Some(_) => {}
        }
    }
    for s in &stored {
        if !fresh.iter().any(|f| name(f) == name(s)) {
            out.differences.push(format!("check {} is gone", name(s)));
        }
    }
    out
}

fn describe(stored: &Value, fresh: &Value) -> String {
    let name = fresh["check"].as_str().unwrap_or("?");
    if stored["status"] != fresh["status"] {
        format!(
            "{name}: {} → {} ({})",
            stored["status"].as_str().unwrap_or("?"),
            fresh["status"].as_str().unwrap_or("?"),
            fresh["reason"].as_str().unwrap_or("")
        )
    } else {
        let fields: Vec<&str> = ["observed", "expected", "reason", "diverged_at"]
            .into_iter()
            .filter(|k| stored.get(*k) != fresh.get(*k))
            .collect();
        format!("{name}: same status, different {}", fields.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::super::checks::tests::obs_with;
    use super::*;
    use crate::ledger::Ledger;

    #[test]
    fn archived_verdicts_replay_and_tampering_shows() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path().join("l.jsonl"));
        let o = obs_with(vec![
            (200, vec![("loss", 3.0)]),
            (210, vec![("loss", f64::NAN)]),
        ]);
        let v = judge(&o);
        ledger
            .append(v.entry("run", &o), chrono::Utc::now())
            .unwrap();
        let recs = ledger.records().unwrap();
        let r = replay(&recs);
        assert!(r[0].matches(), "{:?}", r[0].differences);
        assert_eq!(r[0].archived, "fail");

        let mut tampered = recs[0].clone();
        tampered.fields.get_mut("observation").unwrap()["window"][1]["values"]["loss"] =
            serde_json::json!(3.1);
        let r = replay(&[tampered]);
        assert!(!r[0].matches());
        assert!(
            r[0].differences
                .iter()
                .any(|d| d.contains("status fail → ")),
            "{:?}",
            r[0].differences
        );
    }

    /// Found by the fuzz harness's long ledger run (eab314e), its minimised input: a verdict
    /// whose archived observation declares a quiet period `every = 0` (config validation
    /// refuses it, an edited ledger need not) made `critic --replay` divide by zero.
    #[test]
    fn regress_replayed_observation_with_quiet_every_zero() {
        let input: &[u8] = b"{\"\":[{\"\":{\"\":0},\"\":\"\",\"\":\"\"},{\"\":\"\",\"\":\"\",\"\":{\"\":0},\"\":\"\",\"\":{\"\":0},\"\":\"\",\"\":\"\"},{\"\":\"\",\"\":{\"\":[],\"\":0,\"\":3},\"\":{\"\":9,\"\":0},\"\":\"\",\"\":\"\"}],\"hash\":\"\",\"kind\":\"verdict\",\"observation\":{\"advanced_at\":0,\"config_hash\":\"\",\"evals\":[],\"garbage_total\":0,\"\":null,\"\":0,\"now\":1,\"phase\":{\"from\":0,\"\":8,\"\":[],\"\":null,\"\":null,\"name\":\"\",\"stale_s\":3,\"\":0,\"\":0,\"window\":0},\"quiet\":[{\"duration_s\":0,\"every\":0,\"name\":\"\"}],\"samples_total\":2,\"\":{\"\":\"\",\"\":null,\"\":\"\",\"\":0,\"\":0.6,\"\":2,\"\":0.2,\"\":2,\"\":0},\"settings\":{\"band_samples\":5,\"eval_window\":3,\"grad_nonfinite_consecutive\":3,\"min_samples\":5},\"step\":1,\"window\":[{\"step\":0,\"values\":{\"\":0,\"\":1}},{\"step\":0,\"values\":{\"\":0.1}},{\"step\":0,\"values\":{\"o\":0.01}},{\"step\":30,\"values\":{\"\":1.01}},{\"step\":40,\"values\":{\"g\":1}},{\"step\":60,\"values\":{\"\":94,\"\":1}},{\"step\":70,\"values\":{\"\":1.01}},{\"step\":80,\"values\":{\"gd\":1}},{\"step\":90,\"values\":{\"gm\":1,\"\":1}},{\"step\":0,\"values\":{\"nr\":0}},{\"step\":1,\"values\":{\"\":1.01}}]},\"prev\":\"50\",\"run\":\"r\",\"seq\":3,\"source\":\"critic\",\"s\":\"\",\"sp\":1,\"ts\":\"2023-11-14T22:13:22.000Z\"}\n";
        let scan = crate::ledger::scan_bytes(input);
        assert_eq!(scan.records.len(), 1);
        let replayed = replay(&scan.records);
        assert!(replayed[0].recomputed.is_some(), "{:?}", replayed[0]);
    }
}
