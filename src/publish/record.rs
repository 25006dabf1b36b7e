//! Fields a `publish` record carries beyond what was published: how long it took and how
//! fast it went (the report's goodput and the preemption check read them), and for a queued
//! publish its queue id and time in the queue.

use super::queue;
use crate::ledger::Entry;

/// `entry` with more fields.
pub fn with_fields(
    entry: Entry,
    fields: impl IntoIterator<Item = (&'static str, serde_json::Value)>,
) -> Entry {
    fields.into_iter().fold(entry, |e, (k, v)| e.field(k, v))
}

/// The training's own save time, when it says it: `ROGER_SAVE_S=12.5 roger publish ...` adds
/// `save_s` to the record, so `[preempt]`'s fit check weighs save plus publish, not publish
/// alone. Anything but a finite non-negative number is left out (and said once on stderr).
pub fn trainer_save_time() -> Option<(&'static str, serde_json::Value)> {
    let v = std::env::var("ROGER_SAVE_S").ok()?;
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Some(("save_s", serde_json::json!(s))),
        _ => {
            eprintln!(
                "roger: warning: ROGER_SAVE_S={v:?} is not a number of seconds: not recorded"
            );
            None
        }
    }
}

/// What a `publish` record says about speed (so the report's goodput and the preemption
/// check read real numbers) and, for a queued publish, its queue id and time in the queue.
/// Pure.
pub fn measured(
    size: u64,
    took: std::time::Duration,
    queue: Option<&queue::Ticket>,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<(&'static str, serde_json::Value)> {
    let secs = took.as_secs_f64();
    let mut f = vec![
        (
            "duration_s",
            serde_json::json!((secs * 1000.0).round() / 1000.0),
        ),
        (
            "bytes_per_s",
            serde_json::json!(if secs > 0.0 {
                (size as f64 / secs) as u64
            } else {
                0
            }),
        ),
    ];
    if let Some(t) = queue {
        f.push(("queue_id", serde_json::json!(t.id)));
        f.push(("queued_at", serde_json::json!(t.queued_at)));
        if let Ok(q) = chrono::DateTime::parse_from_rfc3339(&t.queued_at) {
            let waited = (now - q.with_timezone(&chrono::Utc))
                .num_milliseconds()
                .max(0);
            f.push(("queued_s", serde_json::json!(waited as f64 / 1000.0)));
        }
    }
    f
}
