//! `roger notify`: `test` sends a test message on every `[notify]` channel (and pings the
//! dead-man URL) and says how each went; `digest` sends `roger report --text` now.

use crate::cmd::Global;
use crate::config::Config;
use crate::ledger::{Entry, Kind, Ledger};
use crate::notify::daemon::{digest_payload, digest_text, FAILED, SENT};
use crate::notify::outbox::idempotency_key;
use crate::notify::send;
use crate::outln;
use anyhow::{bail, Result};
use chrono::Utc;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

#[derive(Debug, Args)]
pub struct NotifyArgs {
    #[command(subcommand)]
    pub what: NotifyCommand,
}

#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Send a test message on every channel and report each result (exit 1 if any failed).
    Test,
    /// Send the digest (`roger report --text` of the last `--since`) on every channel now.
    Digest {
        /// The period the digest covers.
        #[arg(long, default_value = "24h", value_parser = crate::config::units::parse_duration)]
        since: std::time::Duration,
    },
}

/// The payload for one channel (named by the channel: its key differs).
type PayloadFor = Box<dyn Fn(&str) -> Value>;

pub fn run(global: &Global, args: NotifyArgs) -> Result<u8> {
    let cfg = crate::config::require(global.config.as_deref())?;
    if !cfg.notify.enabled() {
        bail!(
            "{}: no [notify] channel or dead-man URL configured (see docs/notify.md)",
            cfg.path.display()
        );
    }
    let now = Utc::now();
    let (about, payload): (&str, PayloadFor) = match args.what {
        NotifyCommand::Test => {
            let run = cfg.run.name.clone();
            let nonce = now.timestamp_millis();
            (
                "test",
                Box::new(move |ch: &str| {
                    let key = idempotency_key(&format!("test{nonce:016}"), ch);
                    json!({"idempotency_key": key, "level": "test", "run": run, "kind": "test",
                        "cause": "test", "text": format!("{run}: test message from roger notify test"),
                        "ts": now.to_rfc3339()})
                }),
            )
        }
        NotifyCommand::Digest { since } => {
            let since =
                now - chrono::Duration::from_std(since).unwrap_or(chrono::Duration::days(1));
            let text = digest_text(&cfg, now, Some(since))?;
            let run = cfg.run.name.clone();
            let stamp = now.format("%Y%m%dT%H%M%S").to_string();
            (
                "digest",
                Box::new(move |ch: &str| {
                    digest_payload(&run, &text, &format!("roger-digest-{stamp}-{ch}"), now)
                }),
            )
        }
    };
    let mut failed = 0;
    for ch in send::channels(&cfg.notify) {
        let p = payload(ch.name());
        let r = ch.send(&p);
        let key = p["idempotency_key"].clone();
        match &r {
            Ok(()) => outln!("{}: sent ({about})", ch.name()),
            Err(e) => {
                failed += 1;
                outln!("{}: failed: {e:#}", ch.name());
            }
        }
        let (event, extra) = match r {
            Ok(()) => (SENT, None),
            Err(e) => (FAILED, Some(format!("{e:#}"))),
        };
        note(&cfg, event, ch.name(), key, about, extra);
    }
    if let Some(url) = cfg.notify.deadman() {
        match send::request(
            "GET",
            &url,
            "text/plain",
            &[],
            b"",
            std::time::Duration::from_secs(10),
        ) {
            Ok(s) if (200..300).contains(&s) => outln!("dead-man ping: answered {s}"),
            Ok(s) => {
                failed += 1;
                outln!("dead-man ping: failed: HTTP {s}");
            }
            Err(e) => {
                failed += 1;
                outln!("dead-man ping: failed: {e:#}");
            }
        }
    }
    Ok(if failed == 0 {
        crate::exit::DONE
    } else {
        crate::exit::NOT_DONE
    })
}

fn note(cfg: &Config, event: &str, channel: &str, key: Value, about: &str, error: Option<String>) {
    let mut e = Entry::new(Kind::Note, "notify", &cfg.run.name)
        .field("event", event)
        .field("channel", channel)
        .field("key", key)
        .field("attempt", 1)
        .field("about", about);
    if let Some(err) = error {
        e = e.field("error", err);
    }
    if let Err(err) = Ledger::new(cfg.ledger_path()).append(e, Utc::now()) {
        eprintln!("roger: warning: recording {event}: {err:#}");
    }
}
