//! Untrusted outputs (`[quarantine] outputs`): eval results and exported metrics a nightly
//! loop will pick up. An output is untrusted when it does not parse (JSON, JSONL, CSV), holds
//! NaN/Infinity where a number belongs, or was written by a run that then crashed before
//! finishing. The judgement is pure ([`judge`]); [`scan`] reads the files, and
//! [`quarantine_untrusted`] moves the untrusted ones into quarantine with the reason.

use super::Item;
use crate::ledger::Ledger;
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The run that wrote the outputs crashed; outputs modified at or after `started_at` (all of
/// them when unknown) are untrusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crash {
    pub started_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Scanned {
    pub path: PathBuf,
    /// None: trusted; Some: why not.
    pub untrusted: Option<String>,
    pub missing: bool,
}

fn is_nonfinite_word(w: &str) -> bool {
    matches!(
        w.to_ascii_lowercase().as_str(),
        "nan" | "-nan" | "inf" | "-inf" | "+inf" | "infinity" | "-infinity" | "+infinity"
    )
}

/// A bare NaN/Infinity token outside strings (Python's json.dump writes these), as line:col.
fn bare_nonfinite(text: &str) -> Option<(usize, usize, String)> {
    let (mut in_str, mut esc) = (false, false);
    let (mut line, mut col) = (1usize, 0usize);
    let mut word = String::new();
    let mut word_at = (0, 0);
    for ch in text.chars() {
        col += 1;
        if in_str {
            match (esc, ch) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => in_str = false,
                _ => {}
            }
        } else if ch.is_ascii_alphabetic() {
            if word.is_empty() {
                word_at = (line, col);
            }
            word.push(ch);
        } else {
            if matches!(word.as_str(), "NaN" | "Infinity" | "nan" | "inf") {
                return Some((word_at.0, word_at.1, word));
            }
            word.clear();
            if ch == '"' {
                in_str = true;
            }
        }
        if ch == '\n' {
            line += 1;
            col = 0;
        }
    }
    matches!(word.as_str(), "NaN" | "Infinity" | "nan" | "inf")
        .then_some((word_at.0, word_at.1, word))
}

/// A string spelling a non-finite number inside parsed JSON, as a JSON pointer.
fn nonfinite_string(v: &Value, at: &str) -> Option<String> {
    match v {
        Value::String(s) if is_nonfinite_word(s.trim()) => Some(format!("{at} = {s:?}")),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| nonfinite_string(x, &format!("{at}/{i}"))),
        Value::Object(m) => m
            .iter()
            .find_map(|(k, x)| nonfinite_string(x, &format!("{at}/{k}"))),
        _ => None,
    }
}

fn judge_value(text: &str, v: Result<Value, serde_json::Error>, what: &str) -> Option<String> {
    match v {
        Ok(v) => nonfinite_string(&v, "")
            .map(|p| format!("{what}holds a non-finite number where a number belongs: {p}")),
        Err(e) => {
            if let Some((l, c, w)) = bare_nonfinite(text) {
                return Some(format!(
                    "{what}holds {w} at line {l} column {c} where a number belongs"
                ));
            }
            if e.to_string().contains("number out of range") {
                return Some(format!(
                    "{what}holds a number too large for a float (infinite): {e}"
                ));
            }
            let half = if e.is_eof() { " (half-written?)" } else { "" };
            Some(format!("{what}does not parse as JSON{half}: {e}"))
        }
    }
}

fn judge_json(text: &str) -> Option<String> {
    judge_value(text, serde_json::from_str::<Value>(text), "")
}

fn judge_jsonl(text: &str) -> Option<String> {
    let ends_clean = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let what = format!("line {}: ", i + 1);
        if let Some(why) = judge_value(line, serde_json::from_str::<Value>(line), &what) {
            if i + 1 == lines.len() && !ends_clean && !why.contains("holds") {
                return Some(format!(
                    "last line {} is unterminated and does not parse (half-written)",
                    i + 1
                ));
            }
            return Some(why);
        }
    }
    None
}

fn judge_csv(text: &str) -> Option<String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next()?;
    let width = header.split(',').count();
    for (i, line) in lines {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != width {
            return Some(format!(
                "line {}: {} fields, the header has {width} (half-written or corrupt)",
                i + 1,
                fields.len()
            ));
        }
        if let Some((j, f)) = fields
            .iter()
            .enumerate()
            .find(|(_, f)| is_nonfinite_word(f.trim()))
        {
            let col = header.split(',').nth(j).unwrap_or("?").trim();
            return Some(format!("line {}: column {col:?} holds {}", i + 1, f.trim()));
        }
    }
    None
}

/// Why an output's content is untrusted, by its extension: `.json`, `.jsonl`/`.ndjson`,
/// `.csv`; anything else must be JSON or JSONL.
pub fn judge_content(path: &Path, bytes: &[u8]) -> Option<String> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Some("not UTF-8 text".into());
    };
    if text.trim().is_empty() {
        return Some("empty (half-written?)".into());
    }
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "json" => judge_json(text),
        "jsonl" | "ndjson" => judge_jsonl(text),
        "csv" => judge_csv(text),
        _ => judge_json(text).and_then(|why| judge_jsonl(text).map(|_| why)),
    }
}

/// The whole judgement: content, then the crash rule.
pub fn judge(
    path: &Path,
    bytes: &[u8],
    modified: Option<DateTime<Utc>>,
    crash: Option<Crash>,
) -> Option<String> {
    if let Some(why) = judge_content(path, bytes) {
        return Some(why);
    }
    let crash = crash?;
    match (crash.started_at, modified) {
        (None, _) => Some("written by a run that crashed before finishing".into()),
        (Some(start), Some(m)) if m >= start => Some(format!(
            "written at {} by a run that started {} and crashed before finishing",
            m.format("%Y-%m-%d %H:%M:%S"),
            start.format("%Y-%m-%d %H:%M:%S")
        )),
        _ => None,
    }
}

/// Read and judge each output; a missing output is reported, not an error.
pub fn scan(outputs: &[PathBuf], crash: Option<Crash>) -> Result<Vec<Scanned>> {
    let mut out = Vec::new();
    for path in outputs {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                out.push(Scanned {
                    path: path.clone(),
                    untrusted: None,
                    missing: true,
                });
                continue;
            }
            Err(e) => {
                return Err(anyhow::Error::from(e).context(format!("reading {}", path.display())))
            }
        };
        let modified = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .map(DateTime::<Utc>::from);
        out.push(Scanned {
            path: path.clone(),
            untrusted: judge(path, &bytes, modified, crash),
            missing: false,
        });
    }
    Ok(out)
}

/// Scan and quarantine every untrusted output (the watch calls this after a crash with
/// `crash = Some(..)`). Returns the scan and the items made.
pub fn quarantine_untrusted(
    outputs: &[PathBuf],
    crash: Option<Crash>,
    qdir: &Path,
    source: &str,
    run: &str,
    ledger: &Ledger,
    now: DateTime<Utc>,
) -> Result<(Vec<Scanned>, Vec<Item>)> {
    let scanned = scan(outputs, crash)?;
    let mut items = Vec::new();
    for s in &scanned {
        if let Some(why) = &s.untrusted {
            let reason = format!("untrusted output: {why}");
            items.push(super::quarantine_path(
                qdir, &s.path, &reason, source, run, ledger, now,
            )?);
        }
    }
    Ok((scanned, items))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn j(name: &str, text: &str) -> Option<String> {
        judge_content(Path::new(name), text.as_bytes())
    }

    #[test]
    fn json_parse_nan_and_strings() {
        assert_eq!(j("r.json", "{\"acc\": 0.5, \"name\": \"nanogpt\"}"), None);
        let why = j("r.json", "{\"acc\": 0.5,\n \"loss\": NaN}").unwrap();
        assert!(why.contains("NaN at line 2 column 10"), "{why}");
        assert!(j("r.json", "{\"x\": -Infinity}")
            .unwrap()
            .contains("Infinity"));
        assert!(j("r.json", "{\"x\": 1e999}").unwrap().contains("too large"));
        let why = j("r.json", "{\"m\": {\"acc\": \"nan\"}}").unwrap();
        assert!(why.contains("/m/acc = \"nan\""), "{why}");
        let why = j("r.json", "{\"acc\": 0.5, \"lo").unwrap();
        assert!(why.contains("half-written"), "{why}");
        assert!(j("r.json", "").unwrap().contains("empty"));
        assert_eq!(
            j("r.json", "{\"s\": \"NaN inside a \\\"string\\\"\"}"),
            None
        );
    }

    #[test]
    fn jsonl_and_csv() {
        assert_eq!(j("m.jsonl", "{\"a\":1}\n{\"a\":2}\n"), None);
        let why = j("m.jsonl", "{\"a\":1}\n{\"a\":").unwrap();
        assert!(why.contains("last line 2 is unterminated"), "{why}");
        assert!(j("m.jsonl", "{\"a\":1}\n{\"a\":NaN}\n")
            .unwrap()
            .starts_with("line 2: holds NaN"));
        assert_eq!(j("m.csv", "step,loss\n1,2.5\n"), None);
        assert!(j("m.csv", "step,loss\n1,2.5\n2\n")
            .unwrap()
            .contains("1 fields"));
        assert!(j("m.csv", "step,loss\n1,nan\n")
            .unwrap()
            .contains("column \"loss\" holds nan"));
        assert_eq!(
            j("m.out", "{\"a\":1}\n{\"a\":2}\n"),
            None,
            "unknown ext: JSONL accepted"
        );
    }

    #[test]
    fn crash_rule() {
        let t = |s: i64| Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap();
        let ok = b"{\"acc\": 0.9}";
        let p = Path::new("r.json");
        assert_eq!(judge(p, ok, Some(t(10)), None), None);
        let started = Crash {
            started_at: Some(t(5)),
        };
        assert!(judge(p, ok, Some(t(10)), Some(started))
            .unwrap()
            .contains("crashed"));
        assert_eq!(
            judge(p, ok, Some(t(1)), Some(started)),
            None,
            "from an earlier run"
        );
        assert!(judge(p, ok, None, Some(Crash { started_at: None })).is_some());
    }
}
