//! The daemons' side of `[notify]`: after each tick of `watch` or `critic --daemon`, follow
//! the ledger, route new records (page / digest / suppressed), queue pages in the outbox,
//! deliver what is due on every channel (each send and failure a ledger `note`), send the
//! digest when its time comes, and ping the dead-man URL when the run was observable.

use super::outbox::{idempotency_key, Line, Outbox, OutboxFile};
use super::route::{Decision, Event, Level, Policy, Quiet, Router};
use super::send::{self, Channel};
use crate::config::notify::parse_hhmm;
use crate::config::Config;
use crate::ledger::{Entry, Kind, Ledger, Record};
use anyhow::Result;
use chrono::{DateTime, Local, NaiveDateTime, NaiveTime, Utc};
use serde_json::{json, Value};
use std::time::Duration;

/// Note events this module writes.
pub const SENT: &str = "notify_sent";
pub const FAILED: &str = "notify_failed";
pub const SUPPRESSED: &str = "notify_suppressed";

pub fn policy(cfg: &crate::config::notify::NotifyConfig) -> Policy {
    let level = |s: &str| match s {
        "page" => Level::Page,
        "digest" => Level::Digest,
        _ => Level::Ignore,
    };
    Policy {
        cooldown: cfg.cooldown.0,
        quiet: cfg.quiet_hours.as_ref().and_then(|[f, t]| {
            Some(Quiet {
                from: parse_hhmm(f).ok()?,
                to: parse_hhmm(t).ok()?,
            })
        }),
        overrides: cfg
            .route
            .iter()
            .map(|(k, v)| (k.clone(), level(v)))
            .collect(),
    }
}

/// What goes on the wire for an event: run, event and numbers; no host, no environment.
pub fn payload(ev: &Event, level: &str, repeats: u32, key: &str) -> Value {
    json!({
        "idempotency_key": key,
        "level": level,
        "run": ev.run,
        "kind": ev.kind,
        "cause": ev.cause,
        "text": ev.text,
        "step": ev.step,
        "seq": ev.seq,
        "ts": ev.ts.to_rfc3339(),
        "repeats": repeats,
    })
}

/// The records this daemon answers for: its own, and (for `watch`) those of the one-shot
/// commands (publish, hygiene, ...); `critic --daemon` sends its own only, so two daemons
/// on one run never page twice for one record.
pub fn in_scope(r: &Record, run: &str, source: &str) -> bool {
    r.run == run && (r.source == source || (source == "watch" && r.source != "critic"))
}

pub struct Notifier {
    cfg: Config,
    source: &'static str,
    ledger: Ledger,
    router: Router,
    file: OutboxFile,
    outbox: Outbox,
    channels: Vec<Channel>,
    /// Records older than this only teach the router (a restart must not page old news).
    catch_up_from: DateTime<Utc>,
    digest_at: Option<NaiveTime>,
    last_digest: Option<NaiveDateTime>,
    deadman: Option<String>,
    deadman_failing: bool,
    /// (kind, cause) whose suppression is in the ledger since its last page.
    quieted: std::collections::BTreeSet<(String, String)>,
}

impl Notifier {
    /// On when `[notify]` has a channel or a dead-man URL.
    pub fn from_config(cfg: &Config, source: &'static str, now: DateTime<Utc>) -> Option<Notifier> {
        let n = &cfg.notify;
        if !n.enabled() {
            return None;
        }
        let file = OutboxFile::beside(&cfg.ledger_path());
        let outbox = file.load().unwrap_or_else(|e| {
            tracing::warn!("notify: {e:#}; starting with an empty outbox");
            Outbox::default()
        });
        let cooldown =
            chrono::Duration::from_std(n.cooldown.0).unwrap_or(chrono::Duration::hours(1));
        Some(Notifier {
            source,
            ledger: Ledger::new(cfg.ledger_path()),
            router: Router::new(policy(n)),
            file,
            outbox,
            channels: send::channels(n),
            // A page whose record was written just before roger died is still owed; the
            // outbox's keys keep one that was queued from being queued twice.
            catch_up_from: now - cooldown,
            digest_at: n.digest_at.as_deref().and_then(|t| parse_hhmm(t).ok()),
            last_digest: None,
            deadman: n.deadman(),
            deadman_failing: false,
            quieted: Default::default(),
            cfg: cfg.clone(),
        })
    }

    /// One tick over the ledger's `new` records (from the daemon's follower): `observed`
    /// says roger could see the run (the dead-man ping needs it).
    pub fn tick(&mut self, now: DateTime<Utc>, observed: bool, new: &[Record]) {
        if let Err(e) = self.route_new(new) {
            tracing::warn!("notify: {e:#}");
        }
        if let Err(e) = self.digest_if_due(now) {
            tracing::warn!("notify: digest: {e:#}");
        }
        self.flush(now);
        if observed {
            self.ping();
        }
    }

    fn route_new(&mut self, new: &[Record]) -> Result<()> {
        let run = self.cfg.run.name.clone();
        for r in new {
            if !in_scope(r, &run, self.source) {
                continue;
            }
            let local = r.ts.with_timezone(&Local).time();
            let Some(d) = self.router.decide(r, r.ts, local) else {
                continue;
            };
            if r.ts < self.catch_up_from {
                continue;
            }
            match d {
                Decision::Page { event, repeats } => {
                    self.quieted
                        .remove(&(event.kind.clone(), event.cause.clone()));
                    self.queue(&event, "page", repeats, r.ts)?
                }
                Decision::Digest { event, why } => {
                    eprintln!("roger: notify: {} waits for the digest ({why})", event.text)
                }
                Decision::Suppressed { event, why } => {
                    eprintln!("roger: notify: not paging {}: {why}", event.text);
                    // The ledger hears of the first repeat per cooldown, not of every tick's.
                    if !self
                        .quieted
                        .insert((event.kind.clone(), event.cause.clone()))
                    {
                        continue;
                    }
                    self.note(
                        SUPPRESSED,
                        &[
                            ("about", json!(event.kind)),
                            ("cause", json!(event.cause)),
                            ("record_seq", json!(event.seq)),
                            ("why", json!(why)),
                        ],
                    );
                }
            }
        }
        Ok(())
    }

    fn queue(&mut self, ev: &Event, level: &str, repeats: u32, at: DateTime<Utc>) -> Result<()> {
        for ch in self
            .channels
            .iter()
            .map(|c| c.name().to_string())
            .collect::<Vec<_>>()
        {
            let key = idempotency_key(&ev.hash, &ch);
            let p = payload(ev, level, repeats, &key);
            if let Some(line) = self.outbox.enqueue(key, &ch, p, at) {
                self.file.append(&line)?;
                eprintln!("roger: notify: paging on {ch}: {}", ev.text);
            }
        }
        Ok(())
    }

    /// Deliver every due message once; failures wait for their backoff.
    pub fn flush(&mut self, now: DateTime<Utc>) {
        let due: Vec<_> = self.outbox.due(now).into_iter().cloned().collect();
        for item in due {
            let Some(ch) = self.channels.iter().find(|c| c.name() == item.channel) else {
                continue;
            };
            let attempt = item.attempts + 1;
            let what = item.payload.get("kind").cloned().unwrap_or(Value::Null);
            let line = match ch.send(&item.payload) {
                Ok(()) => {
                    eprintln!(
                        "roger: notify: sent {} on {} (attempt {attempt})",
                        item.key, item.channel
                    );
                    self.note(
                        SENT,
                        &[
                            ("channel", json!(item.channel)),
                            ("key", json!(item.key)),
                            ("attempt", json!(attempt)),
                            ("about", what),
                        ],
                    );
                    Line::Sent {
                        key: item.key.clone(),
                        attempt,
                        at: now,
                    }
                }
                Err(e) => {
                    let retry = super::outbox::backoff(attempt).as_secs();
                    let error = format!("{e:#}");
                    eprintln!(
                        "roger: notify: {} on {} failed (attempt {attempt}): {error}; retry in {retry} s",
                        item.key, item.channel
                    );
                    self.note(
                        FAILED,
                        &[
                            ("channel", json!(item.channel)),
                            ("key", json!(item.key)),
                            ("attempt", json!(attempt)),
                            ("error", json!(error)),
                            ("retry_in_s", json!(retry)),
                        ],
                    );
                    Line::Failed {
                        key: item.key.clone(),
                        attempt,
                        at: now,
                        error,
                    }
                }
            };
            self.outbox.apply(&line);
            if let Err(e) = self.file.append(&line) {
                tracing::warn!("notify: {e:#}");
            }
        }
    }

    fn digest_if_due(&mut self, now: DateTime<Utc>) -> Result<()> {
        let Some(at) = self.digest_at else {
            return Ok(());
        };
        let local = now.with_timezone(&Local).naive_local();
        if !super::route::digest_due(self.last_digest, local, at) {
            return Ok(());
        }
        self.last_digest = Some(local);
        // One digest per local day and channel, whoever restarts: the key is the date.
        let slot = if local.time() >= at {
            local.date()
        } else {
            local.date().pred_opt().unwrap_or(local.date())
        };
        let text = digest_text(&self.cfg, now, Some(now - chrono::Duration::days(1)))?;
        for ch in self
            .channels
            .iter()
            .map(|c| c.name().to_string())
            .collect::<Vec<_>>()
        {
            let key = format!("roger-digest-{slot}-{ch}");
            let p = digest_payload(&self.cfg.run.name, &text, &key, now);
            if let Some(line) = self.outbox.enqueue(key, &ch, p, now) {
                self.file.append(&line)?;
            }
        }
        Ok(())
    }

    fn ping(&mut self) {
        let Some(url) = &self.deadman else {
            return;
        };
        let r = send::request("GET", url, "text/plain", &[], b"", Duration::from_secs(5));
        match r {
            Ok(s) if (200..300).contains(&s) => {
                if self.deadman_failing {
                    eprintln!("roger: notify: dead-man ping answered again");
                }
                self.deadman_failing = false;
            }
            other if !self.deadman_failing => {
                self.deadman_failing = true;
                let why = match other {
                    Ok(s) => format!("HTTP {s}"),
                    Err(e) => format!("{e:#}"),
                };
                eprintln!("roger: notify: dead-man ping failed: {why} (said once until it works)");
            }
            _ => {}
        }
    }

    fn note(&self, event: &str, fields: &[(&str, Value)]) {
        let mut e = Entry::new(Kind::Note, self.source, &self.cfg.run.name).field("event", event);
        for (k, v) in fields {
            e = e.field(k, v);
        }
        if let Err(err) = self.ledger.append(e, Utc::now()) {
            tracing::warn!("notify: recording {event}: {err:#}");
        }
    }
}

/// `roger report --text` of the period, as the digest's body.
pub fn digest_text(
    cfg: &Config,
    now: DateTime<Utc>,
    since: Option<DateTime<Utc>>,
) -> Result<String> {
    let opts = crate::report::Options {
        since,
        ..Default::default()
    };
    let loaded = crate::report::load(cfg, &opts, now)?;
    Ok(crate::report::text::digest(&loaded.night, false))
}

pub fn digest_payload(run: &str, text: &str, key: &str, now: DateTime<Utc>) -> Value {
    json!({
        "idempotency_key": key,
        "level": "digest",
        "run": run,
        "kind": "digest",
        "cause": "digest",
        "text": text,
        "ts": now.to_rfc3339(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn local(d: u32, h: u32, m: u32) -> DateTime<Utc> {
        Local
            .with_ymd_and_hms(2026, 1, d, h, m, 0)
            .single()
            .unwrap()
            .with_timezone(&Utc)
    }

    /// The digest goes out once per day after `digest_at` on an injected clock, and a restart
    /// the same day does not send it again (its key is the date).
    #[test]
    fn the_digest_goes_once_a_day_at_its_time_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("hook.jsonl");
        let text = format!(
            "[run]\nname = \"r\"\nlog = \"missing.jsonl\"\n[notify]\ndigest_at = \"08:00\"\n[[notify.command]]\nargv = [\"sh\", \"-c\", \"cat >> {}\"]\n",
            out.display()
        );
        let path = dir.path().join("roger.toml");
        std::fs::write(&path, &text).unwrap();
        let cfg = Config::parse(&text, &path).unwrap();
        let sent = || {
            std::fs::read_to_string(&out)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("\"level\":\"digest\""))
                .count()
        };
        let mut n = Notifier::from_config(&cfg, "watch", local(5, 7, 0)).unwrap();
        n.tick(local(5, 7, 59), false, &[]);
        assert_eq!(sent(), 0, "not before 08:00");
        n.tick(local(5, 8, 1), false, &[]);
        n.tick(local(5, 9, 0), false, &[]);
        assert_eq!(sent(), 1);
        let mut again = Notifier::from_config(&cfg, "watch", local(5, 10, 0)).unwrap();
        again.tick(local(5, 10, 0), false, &[]);
        assert_eq!(sent(), 1, "a restart the same day sends no second digest");
        again.tick(local(6, 8, 0), false, &[]);
        assert_eq!(sent(), 2, "the next day's");
    }
}
