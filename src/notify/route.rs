//! Which ledger records wake a person: each record becomes an [`Event`] with a (kind, cause),
//! the routing table makes it a page or a digest item, and the [`Router`] keeps the noise
//! down (one page per incident, a cooldown, quiet hours, flapping said once). Pure: records
//! and `now` in, decisions out.

use crate::ledger::{Kind, Record};
use chrono::{DateTime, NaiveTime, Utc};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Page,
    Digest,
    Ignore,
}

/// One thing worth telling, from one ledger record.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub kind: String,
    pub cause: String,
    pub run: String,
    pub seq: u64,
    /// The record's hash: what makes a delivery idempotent across restarts.
    pub hash: String,
    pub ts: DateTime<Utc>,
    pub step: Option<u64>,
    /// One sentence with the numbers, from the record.
    pub text: String,
    /// The run stopped and roger will not restart it: pages even in quiet hours.
    pub stops_run: bool,
}

fn text_of(r: &Record, keys: &[&str]) -> String {
    keys.iter()
        .filter_map(|k| r.get(k).map(|v| (k, v)))
        .map(|(k, v)| match v.as_str() {
            Some(s) => format!("{k}: {s}"),
            None => format!("{k}: {v}"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The (kind, cause) of a record and its default level; None for records nobody is told of.
pub fn classify(r: &Record) -> Option<(Event, Level)> {
    let s = |k: &str| r.str_field(k).map(str::to_string);
    let (kind, cause, level, stops, keys): (&str, String, Level, bool, &[&str]) = match r.kind {
        Kind::Breaker => (
            "breaker",
            s("breaker")?,
            Level::Page,
            true,
            &["breaker", "evidence"],
        ),
        Kind::Watch if s("event").as_deref() == Some("xid") => {
            let critical = s("class").as_deref() == Some("critical");
            (
                "xid",
                r.get("xid").map_or_else(String::new, |v| v.to_string()),
                if critical { Level::Page } else { Level::Digest },
                false,
                &["xid", "device", "meaning"],
            )
        }
        Kind::Hygiene => {
            let status = s("status")?;
            let level = match status.as_str() {
                "fail" => Level::Page,
                "warn" => Level::Digest,
                _ => return None,
            };
            (
                "hygiene",
                format!("{}_{status}", s("check")?),
                level,
                false,
                &["check", "status", "reason"],
            )
        }
        Kind::Verdict => {
            let status = s("status")?;
            if !matches!(status.as_str(), "warn" | "fail" | "unknown") {
                return None;
            }
            (
                "verdict",
                status,
                Level::Digest,
                false,
                &["status", "phase"],
            )
        }
        Kind::Kill => (
            "kill",
            s("reason").unwrap_or_else(|| "kill".into()),
            Level::Digest,
            false,
            &["reason"],
        ),
        Kind::Relaunch => ("relaunch", "relaunch".into(), Level::Digest, false, &[]),
        Kind::Publish => ("publish", "publish".into(), Level::Digest, false, &["path"]),
        _ => return None,
    };
    let mut text = format!("{} {kind} {cause}", r.run);
    let detail = text_of(r, keys);
    if !detail.is_empty() {
        text = format!("{text}: {detail}");
    }
    if let Some(step) = r.step {
        text = format!("{text} (step {step})");
    }
    Some((
        Event {
            kind: kind.into(),
            cause,
            run: r.run.clone(),
            seq: r.seq,
            hash: r.hash.clone(),
            ts: r.ts,
            step: r.step,
            text,
            stops_run: stops,
        },
        level,
    ))
}

/// Quiet hours, in the clock the caller passes (local time); may wrap midnight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quiet {
    pub from: NaiveTime,
    pub to: NaiveTime,
}

impl Quiet {
    pub fn contains(&self, t: NaiveTime) -> bool {
        if self.from <= self.to {
            t >= self.from && t < self.to
        } else {
            t >= self.from || t < self.to
        }
    }
}

#[derive(Debug, Clone)]
pub struct Policy {
    /// After a page, the same (kind, cause) of the same run waits this long.
    pub cooldown: Duration,
    pub quiet: Option<Quiet>,
    /// "kind" or "kind:cause" -> level; the more specific wins over the default.
    pub overrides: BTreeMap<String, Level>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            cooldown: Duration::from_secs(3600),
            quiet: None,
            overrides: BTreeMap::new(),
        }
    }
}

impl Policy {
    pub fn level(&self, ev: &Event, default: Level) -> Level {
        self.overrides
            .get(&format!("{}:{}", ev.kind, ev.cause))
            .or_else(|| self.overrides.get(&ev.kind))
            .copied()
            .unwrap_or(default)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Send now; `repeats` is how often it recurred during the last cooldown (it flaps).
    Page { event: Event, repeats: u32 },
    /// Into the next digest, with why it is not a page.
    Digest { event: Event, why: String },
    /// Neither: a page inside its cooldown (counted for the flapping note).
    Suppressed { event: Event, why: String },
}

/// The router's memory: when each (run, kind, cause) last paged and how often it recurred.
#[derive(Debug, Default)]
pub struct Router {
    pub policy: Policy,
    last_page: BTreeMap<(String, String, String), (DateTime<Utc>, u32)>,
}

impl Router {
    pub fn new(policy: Policy) -> Router {
        Router {
            policy,
            last_page: BTreeMap::new(),
        }
    }

    /// Decide one record. `local` is `now` on the user's clock (for quiet hours).
    pub fn decide(&mut self, r: &Record, now: DateTime<Utc>, local: NaiveTime) -> Option<Decision> {
        let (event, default) = classify(r)?;
        match self.policy.level(&event, default) {
            Level::Ignore => None,
            Level::Digest => Some(Decision::Digest {
                event,
                why: "routed to the digest".into(),
            }),
            Level::Page => {
                if let Some(q) = self.policy.quiet.filter(|q| q.contains(local)) {
                    if !event.stops_run {
                        return Some(Decision::Digest {
                            why: format!(
                                "quiet hours {}-{}",
                                q.from.format("%H:%M"),
                                q.to.format("%H:%M")
                            ),
                            event,
                        });
                    }
                }
                let key = (event.run.clone(), event.kind.clone(), event.cause.clone());
                let cooldown = chrono::Duration::from_std(self.policy.cooldown)
                    .unwrap_or(chrono::Duration::MAX);
                match self.last_page.get_mut(&key) {
                    Some((at, repeats)) if now - *at < cooldown => {
                        *repeats += 1;
                        let why = format!(
                            "same {} {} paged at {}, cooldown {} s ({} repeat(s) since)",
                            event.kind,
                            event.cause,
                            at.format("%H:%M:%S"),
                            self.policy.cooldown.as_secs(),
                            repeats
                        );
                        Some(Decision::Suppressed { event, why })
                    }
                    prev => {
                        let repeats = prev.map_or(0, |(_, n)| *n);
                        self.last_page.insert(key, (now, 0));
                        Some(Decision::Page { event, repeats })
                    }
                }
            }
        }
    }
}

/// Whether the daily digest is due: the local clock has passed `at` today and no digest
/// went out since then. `last` and `now` are on the same (local) clock.
pub fn digest_due(
    last: Option<chrono::NaiveDateTime>,
    now: chrono::NaiveDateTime,
    at: NaiveTime,
) -> bool {
    let today = now.date().and_time(at);
    let slot = if now >= today {
        today
    } else {
        today - chrono::Duration::days(1)
    };
    match last {
        None => now >= today,
        Some(l) => l < slot,
    }
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
