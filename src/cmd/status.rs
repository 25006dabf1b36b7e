//! `roger status`: the run at a glance, one screen (80×24) for a terminal or a tmux pane,
//! built on the report model (`report::load` → `Night`; no headline or ETA of its own): state
//! and why, step and ETA, the last verdict worst check first, last good checkpoint, disk,
//! relaunches and breakers, and how long since roger last looked (a stale roger is a problem
//! too). Exit code as a judge. `--watch` redraws in place, `--json` for scripts.

use crate::cmd::Global;
use crate::config::Config;
use crate::ledger::{Kind, Ledger, Record};
use crate::outln;
use crate::report::{self, human_duration, Night, Options, State};
use anyhow::Result;
use chrono::{DateTime, Utc};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Screen width the glance is cut to.
pub const WIDTH: usize = 80;
/// Lines at most (a 24-line terminal keeps its prompt).
pub const HEIGHT: usize = 23;
/// Checks of the last verdict shown, worst first.
const CHECKS_SHOWN: usize = 6;

#[derive(Debug, Args)]
#[command(after_help = "\
Exit codes: 0 ok, 1 attention (or roger itself has gone quiet), 2 stopped, 3 cannot judge.")]
pub struct StatusArgs {
    /// Redraw every --interval in place, like `watch -n` (Ctrl-C to leave).
    #[arg(long)]
    pub watch: bool,
    /// Redraw interval for --watch.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_interval, requires = "watch")]
    pub interval: Duration,
    /// One JSON object (the headline, the last verdict's checks, roger's last look).
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Ledger file (default: the config's).
    #[arg(long, value_name = "FILE")]
    pub ledger: Option<PathBuf>,
    /// Metrics log (default: the config's `[run] log`).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Pin "now" (RFC 3339): for reproducible output and tests.
    #[arg(long, value_name = "RFC3339", hide = true)]
    pub now: Option<DateTime<Utc>>,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = crate::config::units::parse_duration(s)?;
    if d < Duration::from_millis(100) {
        return Err("expected an interval of at least 100ms".into());
    }
    Ok(d)
}

/// One check of the last verdict.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CheckLine {
    pub check: String,
    pub status: String,
    pub reason: String,
}

/// What the screen and `--json` say.
#[derive(Debug, Clone, Serialize)]
pub struct Glance<'a> {
    pub run: &'a str,
    pub now: DateTime<Utc>,
    pub headline: &'a report::Headline,
    /// The last verdict's checks, worst first.
    pub checks: Vec<CheckLine>,
    /// Seconds since roger's newest record of this run.
    pub roger_silent_s: Option<f64>,
    /// Roger has not looked for longer than its limit (and the run has not finished).
    pub roger_stale: bool,
    pub roger_stale_after_s: f64,
    /// `[cluster]`: every node's newest record in the job's store.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeRow>,
    /// `[cluster]`: the job's newest complete step (its latest.json) and newest incident.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub complete: Option<crate::cluster::commit::JobLatest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incident: Option<crate::cluster::JobVerdict>,
    pub exit_code: u8,
}

pub use crate::cluster::view::NodeRow;

/// The job from `[cluster] store` (empty without one); an unreadable store is an error line.
fn job_view(cfg: &Config, now: DateTime<Utc>) -> Result<crate::cluster::view::JobView, String> {
    let now_s = now.timestamp_millis() as f64 / 1000.0;
    crate::cluster::view::of_config(cfg, now_s, stale_after(cfg)).unwrap_or(Ok(Default::default()))
}

/// The last verdict's checks, worst first (the order verdicts are stored in is not promised).
pub fn checks_of(records: &[Record], run: &str) -> Vec<CheckLine> {
    let Some(v) = records
        .iter()
        .rev()
        .find(|r| r.kind == Kind::Verdict && r.run == run)
    else {
        return Vec::new();
    };
    let mut out: Vec<CheckLine> = v
        .get("checks")
        .and_then(|c| c.as_array())
        .map(|a| {
            a.iter()
                .map(|c| CheckLine {
                    check: c["check"].as_str().unwrap_or("?").to_string(),
                    status: c["unjudged"]
                        .as_str()
                        .or(c["status"].as_str())
                        .unwrap_or("?")
                        .to_string(),
                    reason: c["reason"].as_str().unwrap_or("").to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    let rank = |s: &str| match s {
        "fail" => 0,
        "warn" => 1,
        "unknown" => 2,
        "waiting" | "skipped" => 3,
        _ => 4,
    };
    out.sort_by_key(|c| rank(&c.status));
    out
}

pub use crate::report::stale_after;

pub fn glance<'a>(night: &'a Night, checks: Vec<CheckLine>, stale_after_s: f64) -> Glance<'a> {
    let h = &night.headline;
    let silent = h
        .last_record_at
        .map(|t| (night.now - t).num_milliseconds() as f64 / 1000.0);
    let roger_stale = !h.finished && silent.is_some_and(|s| s > stale_after_s);
    let mut exit_code = h.state.exit_code();
    if roger_stale && h.state == State::Ok {
        exit_code = crate::exit::WARN;
    }
    Glance {
        run: &night.run,
        now: night.now,
        headline: h,
        checks,
        roger_silent_s: silent,
        roger_stale,
        roger_stale_after_s: stale_after_s,
        nodes: Vec::new(),
        complete: None,
        incident: None,
        exit_code,
    }
}

/// Cut to the screen's width (on a char boundary), escaping control characters.
fn fit(s: &str) -> String {
    let clean = report::text::clean(s);
    if clean.chars().count() <= WIDTH {
        return clean;
    }
    let mut out: String = clean.chars().take(WIDTH - 1).collect();
    out.push('…');
    out
}

/// The screen: at most [`HEIGHT`] lines of at most [`WIDTH`] characters (plus colour codes
/// around status words when `colour`).
pub fn screen(g: &Glance, colour: bool) -> String {
    let h = g.headline;
    let paint = |word: &str| crate::colour::status(word, colour);
    let mut lines: Vec<String> = Vec::new();
    let title = format!(
        "roger status · {} · {}",
        g.run,
        g.now.format("%Y-%m-%d %H:%M:%S UTC")
    );
    lines.push(fit(&title));
    // The state word is painted after fitting: escape codes do not count as width.
    let state = h.state.as_str();
    let why = fit(&format!("{state}: {}", h.why));
    lines.push(why.replacen(state, &paint(state), 1));
    let unit = h.unit.word();
    let mut progress = match (h.step, h.total_steps) {
        (Some(s), Some(t)) if t > 0 => format!(
            "{unit} {s} of {t} ({:.1}%)",
            100.0 * s.min(t) as f64 / t as f64
        ),
        (Some(s), _) => format!("{unit} {s} (no total_steps declared)"),
        _ => "no step logged yet".into(),
    };
    if let Some(p) = &h.phase {
        progress.push_str(&format!(" · phase {p}"));
    }
    if let Some(t) = h.last_step_at {
        progress.push_str(&format!(
            " · logged {} ago",
            human_duration((g.now - t).num_milliseconds() as f64 / 1000.0)
        ));
    }
    lines.push(fit(&progress));
    lines.push(fit(&match &h.eta {
        Some(e) => format!(
            "ETA  {} (~{}) at {:.3} s/step, {} steps left",
            human_duration(e.seconds_left),
            e.finish_at.format("%a %H:%M UTC"),
            e.step_seconds,
            e.steps_left
        ),
        None if h.finished => "ETA  finished".into(),
        None => "ETA  unknown (needs total_steps and timed steps)".into(),
    }));
    match &h.last_verdict {
        Some(v) => {
            let word = v.status.to_uppercase();
            let text = fit(&format!(
                "verdict #{} {word} at {}, {} ago",
                v.seq,
                v.step.map_or(format!("{} -", h.unit.word()), |s| h
                    .unit
                    .at(s, h.total_steps)),
                human_duration((g.now - v.at).num_milliseconds() as f64 / 1000.0)
            ));
            lines.push(text.replacen(&word, &paint(&word), 1));
            for c in g.checks.iter().take(CHECKS_SHOWN) {
                let padded = format!("{:<8}", c.status);
                let rest = fit(&format!("  {padded} {:<12} {}", c.check, c.reason));
                lines.push(rest.replacen(
                    &padded,
                    &crate::colour::paint(&padded, &c.status, colour),
                    1,
                ));
            }
            if g.checks.len() > CHECKS_SHOWN {
                lines.push(format!(
                    "  ... and {} more checks",
                    g.checks.len() - CHECKS_SHOWN
                ));
            }
        }
        None => lines.push("verdict  none yet (run `roger critic` or `roger watch`)".into()),
    }
    lines.push(fit(&match &h.last_good {
        Some(c) => format!(
            "checkpoint  step {}, {} old (#{}), {}",
            c.step.map_or("?".into(), |s| s.to_string()),
            human_duration(c.age_s),
            c.seq,
            match c.verified {
                Some(true) => "verified now",
                Some(false) => "FAILED re-hash",
                None => "not re-hashed",
            }
        ),
        None => "checkpoint  none published".into(),
    }));
    if let Some(o) = &h.overfitting {
        lines.push(fit(&format!("best eval   {}", o.mark.describe())));
    }
    if let Some(q) = &h.queued_publishes {
        lines.push(fit(&format!("publish     {}", q.words())));
    }
    if let Some(b) = &h.bucket {
        lines.push(fit(&format!("bucket      {}", b.words())));
    }
    lines.push(fit(&match h.disk_hours_to_full {
        Some(hrs) => format!("disk        full in {}", human_duration(hrs * 3600.0)),
        None => "disk        not filling (or not measured)".into(),
    }));
    lines.push(fit(&format!(
        "relaunches {} · breakers {} · kills {}",
        h.relaunches, h.breakers, h.kills
    )));
    lines.push(fit(&match (g.roger_silent_s, g.roger_stale) {
        (Some(s), true) => format!(
            "roger       last looked {} ago (#{}): over {}; is `roger watch` or `roger critic --daemon` running?",
            human_duration(s),
            h.last_record_seq.unwrap_or(0),
            human_duration(g.roger_stale_after_s)
        ),
        (Some(s), false) => format!(
            "roger       last looked {} ago (#{})",
            human_duration(s),
            h.last_record_seq.unwrap_or(0)
        ),
        (None, _) => "roger       has not looked yet (empty ledger)".into(),
    }));
    if let Some(p) = h.ledger_problem.as_ref().or(h.log_problem.as_ref()) {
        lines.push(fit(&format!("problem     {p}")));
    }
    for n in &g.nodes {
        let what = match (&n.state, n.age_s) {
            (Some(st), Some(age)) => format!(
                "{st}, {}, wrote {} ago",
                n.step.map_or("no step yet".into(), |s| format!("step {s}")),
                human_duration(age.max(0.0))
            ),
            _ => "has not reported".into(),
        };
        let flag = if n.lost {
            "  LOST: not heard within the limit"
        } else {
            ""
        };
        let part = n
            .part
            .as_ref()
            .map_or(String::new(), |p| format!(", part {p}"));
        lines.push(fit(&format!(
            "{:<12}{what}{part}{flag}",
            format!("node {}", n.node)
        )));
    }
    if let Some(c) = &g.complete {
        lines.push(fit(&format!(
            "complete    step {}: every node's part verified (the job's latest.json, by node {})",
            c.step, c.committed_by
        )));
    }
    if let Some(v) = &g.incident {
        lines.push(fit(&format!(
            "incident    {}",
            crate::cluster::view::incident_words(v)
        )));
    }
    for a in &h.also {
        if lines.len() >= HEIGHT {
            break;
        }
        lines.push(fit(&format!("also        {a}")));
    }
    lines.truncate(HEIGHT);
    lines.join("\n")
}

pub fn run(global: &Global, args: StatusArgs) -> Result<u8> {
    let cfg = crate::config::require(global.config.as_deref())?;
    let opts = Options {
        ledger: args.ledger.clone(),
        log: args.log.clone(),
        since: None,
        verify: false,
        measure_disk: args.now.is_none(),
    };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    loop {
        let now = args.now.unwrap_or_else(Utc::now);
        let log = opts.log.clone().or_else(|| cfg.run.log.clone());
        let bar = log
            .as_deref()
            .and_then(crate::metrics::locate::resolve)
            .and_then(|p| crate::progress::reading(&p, "reading"));
        let loaded = report::load(&cfg, &opts, now)?;
        drop(bar);
        let records = Ledger::new(&loaded.ledger).records().unwrap_or_default();
        let checks = checks_of(&records, &cfg.run.name);
        let mut g = glance(&loaded.night, checks, stale_after(&cfg));
        match job_view(&cfg, now) {
            Ok(v) => {
                g.nodes = v.nodes;
                g.complete = v.complete;
                g.incident = v.incidents.into_iter().last();
                for p in v.problems {
                    eprintln!("roger: [cluster] store: {p}");
                }
            }
            Err(e) => eprintln!("roger: [cluster] store: {e}"),
        }
        if g.nodes.iter().any(|n| n.lost) && g.exit_code < crate::exit::WARN {
            g.exit_code = crate::exit::WARN;
        }
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&g)?);
            return Ok(g.exit_code);
        }
        let text = screen(&g, crate::colour::stdout());
        if !args.watch {
            outln!("{text}");
            return Ok(g.exit_code);
        }
        if tty {
            // Home and clear, then the screen: redrawn in place like `watch -n`.
            outln!("\x1b[H\x1b[2J{text}");
        } else {
            outln!("{text}\n");
        }
        std::thread::sleep(args.interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{test_records, Entry};

    #[test]
    fn checks_worst_first_and_width_kept() {
        let recs = test_records(vec![Entry::new(Kind::Verdict, "critic", "r").field(
            "checks",
            serde_json::json!([
                {"check": "lr", "status": "pass", "reason": "ok"},
                {"check": "loss_slope", "status": "unknown", "unjudged": "waiting", "reason": "needs 5"},
                {"check": "loss", "status": "fail", "reason": "x".repeat(200)},
                {"check": "stale", "status": "warn", "reason": "late"},
            ]),
        )]);
        let c = checks_of(&recs, "r");
        let order: Vec<&str> = c.iter().map(|c| c.check.as_str()).collect();
        assert_eq!(order, ["loss", "stale", "loss_slope", "lr"]);
        assert_eq!(c[2].status, "waiting");
        assert!(checks_of(&recs, "other").is_empty());
        assert_eq!(fit(&"y".repeat(300)).chars().count(), WIDTH);
        assert_eq!(fit("a\u{1b}[2Jb"), report::text::clean("a\u{1b}[2Jb"));
    }
}
