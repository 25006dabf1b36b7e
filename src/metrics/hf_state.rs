//! Hugging Face Trainer's `trainer_state.json`: one JSON document whose `log_history` is
//! rewritten at every save, so it is read as a snapshot (never tailed). Python's `NaN` /
//! `Infinity` tokens are accepted. Entries carry no time; the file's mtime stands in.

use super::{Batch, Fields, Garbage, Keys, Parsed, Target};
use crate::metrics::mapping::MetricsConfig;
use anyhow::{Context, Result};
use serde_json::Value;
use std::path::Path;

pub fn read(path: &Path, m: &MetricsConfig) -> Result<Batch> {
    let bytes = std::fs::read(path).with_context(|| format!("reading log {}", path.display()))?;
    Ok(parse(&bytes, path, m))
}

/// A snapshot from the file's bytes. A document that does not parse (caught mid-rewrite) is
/// one garbage entry and no samples.
pub fn parse(bytes: &[u8], path: &Path, m: &MetricsConfig) -> Batch {
    let mut out = Batch {
        bytes: bytes.len() as u64,
        ..Default::default()
    };
    let garbage = |line: u64, why: String| Garbage {
        file: path.to_path_buf(),
        line,
        why,
    };
    let doc: Value = match serde_json::from_slice(&quote_python_tokens(bytes)) {
        Ok(v) => v,
        Err(e) => {
            out.push_garbage(garbage(
                e.line() as u64,
                format!("not a complete trainer_state.json (being rewritten?): {e}"),
            ));
            return out;
        }
    };
    let Some(history) = doc.get("log_history").and_then(Value::as_array) else {
        out.push_garbage(garbage(1, "expected a `log_history` array".into()));
        return out;
    };
    let keys = Keys::new(m);
    // HF names the LR `learning_rate`; honour it unless the user mapped lr elsewhere.
    let hf_lr = m.lr.0 == ["lr"];
    // HF writes the planned length of the run beside the history.
    let max_steps = doc
        .get("max_steps")
        .and_then(Value::as_u64)
        .filter(|t| *t > 0)
        .map(|t| t as f64);
    // The trainer's own word that the run ended: `global_step` reached `max_steps`. Its last
    // loss entry may be a logging interval short of that; the closing summary entry (at
    // `global_step`, no mapped metric) is kept when past the last kept entry, so the newest
    // step is where the run ended and the critic sees it finished instead of stopped.
    let finished_at = doc
        .get("global_step")
        .and_then(Value::as_u64)
        .filter(|g| max_steps.is_some_and(|t| *g as f64 >= t));
    for (i, entry) in history.iter().enumerate() {
        let Some(obj) = entry.as_object() else {
            out.push_garbage(garbage(1, format!("log_history[{i}] is not an object")));
            continue;
        };
        let mut fields = Fields::default();
        for (k, v) in obj {
            let mut targets: Vec<Target> = keys.lookup(k.as_bytes()).collect();
            if targets.is_empty() && hf_lr && k == "learning_rate" {
                targets.push(Target::Metric(1));
            }
            for t in targets {
                let num = match v {
                    Value::Number(n) if t == Target::Time => {
                        keys.value(t, n.to_string().as_bytes())
                    }
                    Value::Number(n) => n.as_f64(),
                    Value::String(s) => keys.value(t, s.as_bytes()),
                    Value::Null => continue,
                    _ => None,
                };
                match num {
                    Some(x) => fields.set(t, x),
                    None if fields.bad.is_none() => {
                        fields.bad = Some(format!("log_history[{i}].{k} = {v} is not a number"))
                    }
                    None => {}
                }
            }
        }
        let slot = super::slot(super::TOTAL_STEPS).expect("a slot");
        let with_total = |mut r: super::Record| {
            r.values[slot] = r.values[slot].or(max_steps);
            r
        };
        match fields.finish(&keys, &m.step) {
            // Summary entries (train_runtime, total_flos) carry none of the mapped metrics.
            Parsed::Sample(s)
                if s.is_empty()
                    && finished_at == Some(s.step)
                    && out.records.last().is_none_or(|r| r.step < s.step) =>
            {
                out.records.push(with_total(s))
            }
            Parsed::Sample(s) if s.is_empty() => {}
            Parsed::Sample(s) => out.records.push(with_total(s)),
            Parsed::Partial(s, why) => {
                out.push_garbage(garbage(1, format!("log_history[{i}]: {why}")));
                if !s.is_empty() {
                    out.records.push(with_total(s));
                }
            }
            Parsed::Skip => {}
            Parsed::Garbage(why) => {
                out.push_garbage(garbage(1, format!("log_history[{i}]: {why}")))
            }
        }
    }
    out
}

/// Python's json writes bare `NaN`, `Infinity`, `-Infinity`; turn them into strings (outside
/// of strings) so a strict parser accepts the document, and [`parse_num`] reads them back.
pub fn quote_python_tokens(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if memchr::memmem::find(bytes, b"NaN").is_none()
        && memchr::memmem::find(bytes, b"Infinity").is_none()
    {
        return std::borrow::Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len() + 64);
    let mut i = 0;
    let mut in_str = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_str {
            out.push(c);
            if c == b'\\' && i + 1 < bytes.len() {
                out.push(bytes[i + 1]);
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        let rest = &bytes[i..];
        let token = [&b"-Infinity"[..], b"Infinity", b"NaN"]
            .into_iter()
            .find(|t| rest.starts_with(t));
        match token {
            Some(t) => {
                out.push(b'"');
                out.extend_from_slice(t);
                out.push(b'"');
                i += t.len();
            }
            None => {
                in_str = c == b'"';
                out.push(c);
                i += 1;
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_log_history_with_hf_names() {
        let doc = br#"{"global_step": 50, "log_history": [
            {"epoch": 0.1, "learning_rate": 5e-7, "loss": 0.30, "step": 25},
            {"epoch": 0.2, "learning_rate": 1e-6, "loss": NaN, "grad_norm": Infinity, "step": 50},
            {"eval_loss": 0.32, "eval_runtime": 1728.0, "step": 50},
            {"step": 50, "train_runtime": 77350.9, "total_flos": 5e20},
            {"note": "NaN inside a string", "step": "x"}
        ]}"#;
        let out = parse(doc, Path::new("ts.json"), &MetricsConfig::default());
        assert_eq!(out.records.len(), 3, "{:?}", out.records);
        assert_eq!(out.records[0].get("lr"), Some(5e-7));
        assert!(out.records[1].get("loss").unwrap().is_nan());
        assert_eq!(out.records[1].get("grad_norm"), Some(f64::INFINITY));
        assert_eq!(out.records[2].get("eval_loss"), Some(0.32));
        assert_eq!(out.garbage_total, 1);
        assert!(
            out.garbage[0].why.contains("log_history[4]"),
            "{:?}",
            out.garbage
        );
    }

    /// Issue 18 items 6 and 7: `max_steps` is the run's total; stepless entries are quiet.
    #[test]
    fn max_steps_rides_on_every_sample_and_stepless_entries_are_skipped() {
        let doc = br#"{"max_steps": 900, "log_history": [
            {"learning_rate": 5e-7, "loss": 0.30, "step": 25},
            {"predict_loss": 0.4, "predict_runtime": 2.0},
            {"loss": "oops", "grad_norm": 1.5, "step": 50}
        ]}"#;
        let out = parse(doc, Path::new("ts.json"), &MetricsConfig::default());
        assert_eq!(out.records.len(), 2);
        assert!(out.records.iter().all(|r| r.total_steps() == Some(900)));
        assert_eq!(
            out.records[1].get("grad_norm"),
            Some(1.5),
            "the bad loss costs only itself"
        );
        assert_eq!(out.garbage_total, 1, "{:?}", out.garbage);
        assert!(
            out.garbage[0].why.contains("log_history[2]"),
            "{:?}",
            out.garbage
        );
    }

    #[test]
    fn half_written_document_is_one_garbage_entry() {
        let out = parse(
            b"{\"log_history\": [{\"step\": 1,",
            Path::new("ts.json"),
            &MetricsConfig::default(),
        );
        assert!(out.records.is_empty());
        assert!(out.garbage[0].why.contains("being rewritten"));
    }

    #[test]
    fn tokens_inside_strings_are_left_alone() {
        let q = quote_python_tokens(br#"{"a": "NaN \" Infinity", "b": -Infinity}"#);
        assert_eq!(&*q, br#"{"a": "NaN \" Infinity", "b": "-Infinity"}"#);
    }
}
