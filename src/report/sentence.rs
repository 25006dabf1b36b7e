//! One human sentence per ledger record, by kind, in the watch's own words (`roger ledger
//! tail`, the report's tooltips). Fields a record lacks are left out, never invented; a
//! record of a kind or event this does not know still gets its fields, briefly. Pure.

use crate::ledger::{Kind, Record};
use crate::report::text::clean;
use serde_json::Value;

/// `#12  2026-12-03 12:39:36  watch     kill (wedge) at step 39: ... ` — seq, time, source,
/// then the sentence. Control characters are escaped.
pub fn line(r: &Record) -> String {
    format!(
        "#{:<5} {} {:<10} {}",
        r.seq,
        r.ts.format("%Y-%m-%d %H:%M:%S"),
        r.source,
        clean(&sentence(r))
    )
}

fn s<'a>(r: &'a Record, k: &str) -> &'a str {
    r.str_field(k).unwrap_or("?")
}

fn at_step(r: &Record) -> String {
    r.step.map_or(String::new(), |s| format!(" at step {s}"))
}

fn num(v: Option<&Value>) -> String {
    match v {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(t)) => t.clone(),
        _ => "?".into(),
    }
}

fn list(v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        Some(a) => {
            let items: Vec<String> = a
                .iter()
                .map(|x| match x {
                    Value::String(t) => t.clone(),
                    Value::Object(o) => o
                        .get("pid")
                        .map_or_else(|| x.to_string(), |p| p.to_string()),
                    other => other.to_string(),
                })
                .collect();
            format!("[{}]", items.join(", "))
        }
        None => "[]".into(),
    }
}

fn bytes(v: Option<u64>) -> String {
    v.map_or("?".into(), crate::config::units::format_bytes)
}

/// The sentence alone.
pub fn sentence(r: &Record) -> String {
    match r.kind {
        Kind::Verdict => {
            let mut out = format!("critic verdict {}{}", s(r, "status"), at_step(r));
            if let Some(p) = r.str_field("phase") {
                out.push_str(&format!(" (phase {p})"));
            }
            let worst: Vec<String> = r
                .get("checks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|c| {
                    matches!(
                        c.get("status").and_then(Value::as_str),
                        Some("fail") | Some("warn")
                    )
                })
                .map(|c| {
                    format!(
                        "{} {}: {}",
                        c.get("check").and_then(Value::as_str).unwrap_or("?"),
                        c.get("status").and_then(Value::as_str).unwrap_or("?"),
                        c.get("reason").and_then(Value::as_str).unwrap_or("")
                    )
                })
                .collect();
            if !worst.is_empty() {
                out.push_str(&format!(": {}", worst.join("; ")));
            }
            out
        }
        Kind::Kill => {
            let dry = r.get("dry_run").and_then(Value::as_bool) == Some(true);
            let why = r
                .get("reasons")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
                .unwrap_or("");
            format!(
                "{}kill ({}){} pids {}{}{}",
                if dry { "dry run, would " } else { "" },
                s(r, "reason"),
                at_step(r),
                list(r.get("targets")),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {why}")
                },
                r.str_field("evidence")
                    .map_or(String::new(), |e| format!("; evidence {e}"))
            )
        }
        Kind::Relaunch => format!(
            "relaunch #{} from {} (step {}){} in {}s",
            num(r.get("attempt")),
            r.str_field("ckpt").unwrap_or("scratch"),
            num(r.get("ckpt_step")),
            r.u64_field("diverged_at")
                .map_or(String::new(), |d| format!(", diverged at {d}")),
            num(r.get("backoff_s"))
        ),
        Kind::Breaker => format!("breaker {} open: {}", s(r, "breaker"), s(r, "evidence")),
        Kind::Remote => {
            let what = match r.str_field("event").unwrap_or("?") {
                "queued" => format!(
                    "queued {} for the bucket ({})",
                    s(r, "path"),
                    bytes(r.u64_field("size"))
                ),
                "verified" => format!(
                    "verified in the bucket: {} ({})",
                    s(r, "url"),
                    bytes(r.u64_field("size"))
                ),
                "mismatch" => format!(
                    "bucket copy {} failed verification: {}",
                    s(r, "url"),
                    s(r, "error")
                ),
                "failed" => format!("bucket: {} failed: {}", s(r, "url"), s(r, "error")),
                "gave_up" => format!("bucket: gave up on {}: {}", s(r, "url"), s(r, "error")),
                "aborted" => format!("bucket: aborted an interrupted upload of {}", s(r, "url")),
                "latest" => format!("bucket latest.json now names {}", s(r, "points_to")),
                "latest_race" => format!(
                    "bucket latest.json race: {} ({})",
                    s(r, "points_to"),
                    s(r, "resolved")
                ),
                "pruned" => format!("pruned {} from the bucket: {}", s(r, "url"), s(r, "reason")),
                "fetched" => format!("fetched {} to {}", s(r, "url"), s(r, "to")),
                "fetch_mismatch" | "fetch_failed" => format!(
                    "passed over {}: {}",
                    s(r, "url"),
                    r.str_field("reason")
                        .or(r.str_field("error"))
                        .unwrap_or("?")
                ),
                "ledger_rebuilt" => format!(
                    "ledger rebuilt from {} ({} records)",
                    s(r, "url"),
                    num(r.get("records"))
                ),
                "mirror_conflict" => format!("ledger mirror left alone: {}", s(r, "error")),
                e => format!("bucket {e}"),
            };
            format!("{what}{}", at_step(r))
        }
        Kind::Publish => format!(
            "published {} ({}){}{}",
            s(r, "path"),
            bytes(r.u64_field("size")),
            at_step(r),
            r.str_field("sha256").map_or(String::new(), |h| format!(
                ", sha256 {}",
                crate::digest::short(h)
            ))
        ),
        Kind::PublishQueued => format!(
            "queued {} ({}){} for the background publisher as {} (snapshot: {})",
            s(r, "path"),
            bytes(r.u64_field("size")),
            at_step(r),
            s(r, "queue_id"),
            s(r, "snapshot")
        ),
        Kind::Prune => format!(
            "pruned {} ({}){}: {}",
            s(r, "path"),
            bytes(r.u64_field("size")),
            at_step(r),
            s(r, "reason")
        ),
        Kind::Quarantine => format!(
            "quarantined {} ({}) to {}: {}",
            s(r, "original_path"),
            bytes(r.u64_field("size")),
            s(r, "quarantined_path"),
            s(r, "reason")
        ),
        Kind::Release => format!(
            "released quarantine {} back to {}: {}",
            s(r, "id"),
            s(r, "restored_to"),
            s(r, "reason")
        ),
        Kind::Proof => format!(
            "proof of quarantine {} {} (exit {}{})",
            s(r, "id"),
            if r.get("passed").and_then(Value::as_bool) == Some(true) {
                "passed"
            } else {
                "failed"
            },
            num(r.get("exit_code")),
            if r.get("timed_out").and_then(Value::as_bool) == Some(true) {
                ", timed out"
            } else {
                ""
            }
        ),
        Kind::Purge => format!(
            "purged quarantined {} ({}): {}",
            s(r, "original_path"),
            bytes(r.u64_field("size")),
            s(r, "reason")
        ),
        Kind::Probe => format!(
            "probe {} (GPU source {})",
            s(r, "status"),
            s(r, "gpu_source")
        ),
        Kind::Bench => format!(
            "bench {} on {} {}",
            s(r, "status"),
            s(r, "device"),
            s(r, "name")
        ),
        Kind::Hygiene => format!(
            "hygiene {} {}{}: {}",
            s(r, "check"),
            s(r, "status"),
            r.str_field("previous")
                .map_or(String::new(), |p| format!(" (was {p})")),
            s(r, "reason")
        ),
        Kind::Watch => watch(r),
        Kind::Note => match r.str_field("event") {
            Some("publish-rejected") => format!(
                "publish of {} rejected{}: {}; the bad copy kept at {}",
                s(r, "path"),
                at_step(r),
                s(r, "reason"),
                s(r, "evidence")
            ),
            _ => match r.str_field("message") {
                Some(m) => format!("note{}: {m}", at_step(r)),
                None => format!("note{}: {}", at_step(r), fields(r)),
            },
        },
    }
}

/// Watch lifecycle records, worded as the watch prints its events.
fn watch(r: &Record) -> String {
    match r.str_field("event") {
        Some("start") => format!(
            "watch: {} run '{}' pid {}{}",
            match r.str_field("mode") {
                Some("attach") => "attached to",
                Some("adopt") => "adopted",
                _ => "started",
            },
            r.run,
            num(r.get("pid")),
            if r.get("dry_run").and_then(Value::as_bool) == Some(true) {
                " (dry run: nothing will be signalled)"
            } else {
                ""
            }
        ),
        Some("launched") => format!(
            "launched pid {} (attempt {}){}",
            num(r.get("pid")),
            num(r.get("attempt")),
            at_step(r)
        ),
        Some("exited") => format!(
            "{} after {}s{}",
            s(r, "how"),
            num(r.get("lived_s")),
            at_step(r)
        ),
        Some("stopped") => format!(
            "stopped: SIGTERM {}, SIGKILL {}, still alive {}",
            list(r.get("sigterm")),
            list(r.get("sigkill")),
            list(r.get("survivors"))
        ),
        Some("done") => format!("done ({}): {}", num(r.get("code")), s(r, "reason")),
        Some("signal") => format!(
            "{} received; forwarded to {}",
            s(r, "signal"),
            list(r.get("forwarded_to"))
        ),
        Some("stale_limit") => format!(
            "stale limit calibrated: {}s (longest progress gap {}s){}",
            num(r.get("limit_s")),
            num(r.get("longest_gap_s")),
            if r.get("in_use").and_then(Value::as_bool) == Some(true) {
                ", in use"
            } else {
                "; the declared stale limit is in use"
            }
        ),
        Some("xid") => format!(
            "XID {} on GPU {} ({}): {}",
            num(r.get("xid")),
            s(r, "device"),
            s(r, "class"),
            s(r, "meaning")
        ),
        Some("verdict_ignored") => format!(
            "critic verdict #{} (check '{}' at step {}) is not about this launch, not acted on: {}",
            num(r.get("verdict_seq")),
            s(r, "check"),
            num(r.get("verdict_step")),
            s(r, "why")
        ),
        Some("adopted") => format!(
            "the run's trainer pid {} (launched at #{}) is still running: attached to it",
            num(r.get("pid")),
            num(r.get("launched_seq"))
        ),
        Some("previous_watch_died") => format!(
            "the earlier watch died without a done record; its trainer pid {} (#{}) is gone",
            num(r.get("pid")),
            num(r.get("launched_seq"))
        ),
        Some("foreign_vram") => format!("{} ({})", s(r, "evidence"), s(r, "action")),
        Some(other) => format!("watch {other}: {}", fields(r)),
        None => format!("watch: {}", fields(r)),
    }
}

/// A short `key=value` list for what has no sentence of its own.
fn fields(r: &Record) -> String {
    let parts: Vec<String> = r
        .fields
        .iter()
        .filter(|(k, _)| k.as_str() != "event")
        .take(6)
        .map(|(k, v)| {
            let t = match v {
                Value::String(t) => t.clone(),
                other => other.to_string(),
            };
            let t = if t.len() > 60 {
                format!("{}…", &t[..t.floor_char_boundary(60)])
            } else {
                t
            };
            format!("{k}={t}")
        })
        .collect();
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{test_records, Entry};
    use serde_json::json;

    #[test]
    fn each_kind_reads_as_a_sentence() {
        let recs = test_records(vec![
            Entry::new(Kind::Kill, "watch", "r")
                .step(Some(39))
                .field("reason", "wedge")
                .field("targets", json!([{"pid": 28044, "start": 5}]))
                .field("reasons", json!(["no new step for 2.3s (limit 2.0s)"])),
            Entry::new(Kind::Relaunch, "watch", "r")
                .step(Some(30))
                .field("attempt", 1)
                .field("ckpt", "/ck/ckpt-30.json")
                .field("ckpt_step", 30)
                .field("backoff_s", 0.1),
            Entry::new(Kind::Watch, "watch", "r")
                .field("event", "exited")
                .field("how", "main process exited with code 3")
                .field("lived_s", 2.5),
            Entry::new(Kind::Note, "ledger", "r").field("message", "lowered LR \x1b[31m"),
            Entry::new(Kind::Watch, "watch", "r")
                .field("event", "brand_new")
                .field("x", 1),
        ]);
        let lines: Vec<String> = recs.iter().map(line).collect();
        assert!(lines[0].ends_with(
            "watch      kill (wedge) at step 39 pids [28044]: no new step for 2.3s (limit 2.0s)"
        ), "{}", lines[0]);
        assert!(lines[1].ends_with("relaunch #1 from /ck/ckpt-30.json (step 30) in 0.1s"));
        assert!(lines[2].ends_with("main process exited with code 3 after 2.5s"));
        assert!(
            lines[3].ends_with("note: lowered LR \\u{1b}[31m"),
            "{}",
            lines[3]
        );
        assert!(lines[4].ends_with("watch brand_new: x=1"));
    }
}
