//! `roger critic`: grade the run against its declared curves (`--once`, the default),
//! keep grading (`--daemon`), or prove archived verdicts (`--replay`). Every verdict goes to
//! the ledger with the observation that produced it.

use super::critic_run::{daemon, DaemonOptions, Runner, Tick};
use crate::cmd::Global;
use crate::config::{self, Config};
use crate::critic::summary::Summary;
use crate::critic::{replay, Status, Verdict};
use crate::exit;
use crate::ledger::Ledger;
use crate::metrics::tail::Tail;
use crate::outln;
use crate::sys::{Clock, SystemClock};
use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Garbage lines printed per read; the rest are counted.
const GARBAGE_SHOWN: usize = 5;

#[derive(Debug, Args)]
#[command(after_help = "\
Checks: lr, loss, loss_slope, loss_spike, grad_norm, eval, tokens_per_s, vram, stale
(plus log and phase when there is no data or no phase). Thresholds come from the [[phase]]
the newest step is in; a check nothing declares is skipped.

Exit codes (--once): 0 pass, 1 warn, 2 fail, 3 unknown.
--replay: 0 every verdict recomputes the same, 2 some differ, 3 none to replay.
--daemon: 0 after SIGTERM/SIGINT.")]
pub struct CriticArgs {
    /// Judge once, file the verdict (unless nothing changed since this command last filed
    /// one: no new samples, same statuses), exit with its status (the default mode).
    #[arg(long, conflicts_with_all = ["daemon", "replay"])]
    pub once: bool,

    /// Judge every --interval until SIGTERM/SIGINT; file a verdict when new samples arrived
    /// or a check changed status.
    #[arg(long, conflicts_with = "replay")]
    pub daemon: bool,

    /// Recompute every archived critic verdict from its observation; report any that differ.
    #[arg(long)]
    pub replay: bool,

    /// Daemon tick (default: [critic] interval).
    #[arg(long, value_name = "DURATION", value_parser = parse_interval, requires = "daemon")]
    pub interval: Option<Duration>,

    /// File a verdict every check (every tick with --daemon), even when there are no new
    /// samples and every check has the status it was last filed with.
    #[arg(long, conflicts_with = "replay")]
    pub heartbeat: bool,

    /// Ledger to write to (or to replay); default: the config's.
    #[arg(long, value_name = "FILE")]
    pub ledger: Option<PathBuf>,

    /// The training's log (default: [run] log).
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub log: Option<PathBuf>,

    /// Judge as of this moment (RFC 3339, e.g. 2024-05-01T12:00:00Z) instead of the wall
    /// clock: for replaying a finished or copied log, where "stale" means stale back then.
    #[arg(long, value_name = "RFC3339", conflicts_with_all = ["daemon", "replay"])]
    pub now: Option<DateTime<Utc>>,

    /// PID(s) of the training, so VRAM read from the GPU counts only its memory (without
    /// it: the GPU's total memory used, and the reason says so).
    #[arg(long = "pid", value_name = "PID", conflicts_with = "replay")]
    pub pids: Vec<u32>,

    /// --once: read the whole log, not going on from the summary cache beside the ledger
    /// (which is then rebuilt). For when in doubt; verdicts are the same either way.
    #[arg(long, conflicts_with_all = ["daemon", "replay"])]
    pub full_read: bool,

    /// Machine-readable output (one JSON object per verdict).
    #[arg(long)]
    pub json: bool,

    /// The log's format, overriding [run] format: jsonl, csv, text or hf-trainer-state.
    #[arg(long, value_name = "FORMAT", value_parser = super::hygiene::parse_format, conflicts_with = "replay")]
    pub format: Option<config::LogFormat>,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = config::units::parse_duration(s)?;
    if d.is_zero() {
        return Err("expected an interval above 0".into());
    }
    Ok(d)
}

pub fn run(global: &Global, args: CriticArgs) -> Result<u8> {
    if args.replay {
        return run_replay(global, &args);
    }
    let mut cfg = config::require(global.config.as_deref())?;
    if let Some(f) = args.format {
        cfg.run.format = f;
    }
    let log = match (&args.log, &cfg.run.log) {
        (Some(l), _) | (None, Some(l)) => l.clone(),
        (None, None) => bail!(
            "{}: no log to read: set [run] log or pass --log FILE",
            cfg.path.display()
        ),
    };
    let ledger = Ledger::new(args.ledger.clone().unwrap_or_else(|| cfg.ledger_path()));
    let tail = Tail::new(&log, cfg.run.format, &cfg.metrics)
        .with_context(|| format!("{}", cfg.path.display()))?;
    let mut gpu = LazyGpu {
        cfg: &cfg.gpu,
        reader: None,
    };
    let mut runner = Runner::new(&cfg, tail, &mut gpu, args.pids.clone());
    let clock = SystemClock;
    if args.daemon {
        let opts = DaemonOptions {
            interval: args.interval.unwrap_or(cfg.critic.interval.0),
            heartbeat: args.heartbeat,
        };
        let json = args.json;
        let mut hinted = false;
        daemon(&mut runner, &ledger, &clock, &opts, &mut |tick, seq| {
            report_read(tick, &log);
            if !hinted {
                hinted = format_hint(tick, &log, cfg.run.format);
            }
            if let Some(seq) = seq {
                if json {
                    crate::out::text(&json_text(&tick.verdict, Filing::New(seq)));
                } else {
                    print_summary(tick, seq);
                }
            }
        })?;
        return Ok(exit::OK);
    }
    // Go on from the summary cache when it still fits the log; else read the log afresh.
    let summary = Summary::beside(ledger.path());
    let cached = if args.full_read {
        Err("none yet".to_string())
    } else {
        summary.load(&cfg, &log)
    };
    let mut filed = None;
    match cached {
        Ok((tail, history, last)) => {
            runner.replace_tail(tail);
            runner.restore(history);
            filed = last.filter(|f| f.still_last(ledger.path()));
        }
        Err(why) => {
            if why != "none yet" {
                eprintln!(
                    "roger: note: summary cache {} not used ({why}); reading the log afresh",
                    summary.path().display()
                );
            }
            // A big log is first read from its end when that gives the same history.
            if !args.full_read {
                if let Ok(look) = crate::critic::first_look::from_the_end(&cfg, &log) {
                    runner.replace_tail(look.tail);
                    runner.restore(look.history);
                }
            }
        }
    }
    // Our last filing is still the ledger's newest record: its step is the last judged one.
    runner.judged_through(match &filed {
        Some(f) => f.verdict.step,
        None => super::critic_run::last_judged_step(&ledger, &cfg.run.name),
    });
    let bar =
        crate::metrics::locate::resolve(&log).and_then(|p| crate::progress::reading(&p, "reading"));
    let judged_at = args.now.unwrap_or_else(|| clock.now());
    let mut tick = runner.tick(judged_at)?;
    drop(bar);
    report_read(&tick, &log);
    format_hint(&tick, &log, cfg.run.format);
    // The daemon's rule: no new samples and every check as it was filed last time means
    // nothing new to file (`--heartbeat` files anyway). Only when that filing is known to
    // be the ledger's newest record, so no other writer's record is skipped over.
    if let Some(last) = filed.as_ref().filter(|f| {
        !args.heartbeat && tick.new_samples == 0 && tick.verdict.same_statuses(&f.verdict)
    }) {
        tick.verdict.flapping = last.verdict.flapping.clone();
        let filing = Filing::Unchanged(last.seq, last.ts);
        let text = if args.json {
            json_text(&tick.verdict, filing)
        } else {
            human_text(&tick.verdict, &cfg, filing, crate::colour::stdout())
        };
        crate::out::text(&text);
        let code = tick.verdict.status.exit_code();
        return Ok(code);
    }
    super::critic_run::mark_flapping(&mut tick.verdict, &ledger, &cfg);
    let rec = ledger.append(
        tick.verdict.entry_from(&cfg.run.name, &tick.obs, &cfg.path),
        clock.now(),
    )?;
    let filed = crate::critic::summary::ledger_identity(ledger.path()).map(|identity| {
        crate::critic::summary::Filed::new(rec.seq, rec.ts, &tick.verdict, identity)
    });
    let (tail, history) = runner.state();
    if let Err(e) = summary.save(&cfg, &log, tail, history, filed) {
        eprintln!(
            "roger: warning: summary cache not kept (the next check reads the log afresh): {e}"
        );
    }
    crate::out::text(&if args.json {
        json_text(&tick.verdict, Filing::New(rec.seq))
    } else {
        human_text(
            &tick.verdict,
            &cfg,
            Filing::New(rec.seq),
            crate::colour::stdout(),
        )
    });
    Ok(tick.verdict.status.exit_code())
}

/// What became of a `--once` verdict in the ledger.
#[derive(Clone, Copy)]
enum Filing {
    /// Filed as this seq.
    New(u64),
    /// The same as the one filed as this seq at that time, with no new samples since: not
    /// filed again.
    Unchanged(u64, DateTime<Utc>),
}

/// Nothing read as the declared format but some lines were not: if the log looks like another
/// format, say which and how to declare it. Returns whether a hint was given.
fn format_hint(tick: &Tick, log: &std::path::Path, declared: config::LogFormat) -> bool {
    if tick.garbage_total == 0 || tick.obs.step.is_some() {
        return false;
    }
    let Some(path) = crate::metrics::locate::resolve(log) else {
        return false;
    };
    let mut head = Vec::new();
    let Ok(f) = std::fs::File::open(&path) else {
        return false;
    };
    use std::io::Read;
    if f.take(256 * 1024).read_to_end(&mut head).is_err() {
        return false;
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    match crate::init::detect::detect(name.as_deref().unwrap_or(""), &head) {
        Some(d) if d.format != declared => {
            let f = crate::init::format_name(d.format);
            crate::warnln!(
                "{} does not read as {}: this looks like {f} ({}); set [run] format = {f:?} (or pass --format {f})",
                log.display(),
                crate::init::format_name(declared),
                d.why
            );
            true
        }
        _ => false,
    }
}

/// The GPU reader, opened when a check first asks (most verdicts never do: the log carries
/// VRAM or no ceiling is set), so a check every few minutes does not load the driver each time.
struct LazyGpu<'a> {
    cfg: &'a crate::config::GpuConfig,
    reader: Option<Box<dyn crate::gpu::GpuReader>>,
}

impl crate::gpu::GpuReader for LazyGpu<'_> {
    fn read(&mut self) -> Result<crate::gpu::GpuSnapshot, crate::gpu::GpuError> {
        let cfg = self.cfg;
        self.reader
            .get_or_insert_with(|| crate::gpu::open_reader(cfg))
            .read()
    }
}

/// Garbage lines and restarts go to stderr: they never stop the critic.
fn report_read(tick: &Tick, log: &std::path::Path) {
    if tick.missing {
        crate::warnln!("log {} does not exist (yet)", log.display());
    }
    if let Some(why) = &tick.restarted {
        crate::noteln!(
            "roger: note: log {} was {why}; reading it from the start",
            log.display()
        );
    }
    for g in tick.garbage.iter().take(GARBAGE_SHOWN) {
        crate::warnln!("skipped {g}");
    }
    let shown = tick.garbage.len().min(GARBAGE_SHOWN) as u64;
    let more = tick.garbage_total.saturating_sub(shown);
    if more > 0 {
        crate::warnln!("... and {more} more unreadable line(s)");
    }
}

fn status_word(s: Status) -> &'static str {
    s.as_str()
}

/// The verdict as `--once` prints it: a headline, a line per check.
fn human_text(v: &Verdict, cfg: &Config, filing: Filing, on: bool) -> String {
    use std::fmt::Write;
    // The axis as the config counts it: `step 420`, `epoch 37/100`.
    let total = cfg.planned_last();
    let step = v
        .step
        .map_or(format!("{} -", cfg.metrics.unit.word()), |s| {
            cfg.metrics.unit.at(s, total)
        });
    let filed = match filing {
        Filing::New(seq) => format!("ledger seq {seq}"),
        Filing::Unchanged(seq, ts) => format!(
            "unchanged since ledger seq {seq} of {}, not filed again",
            ts.format("%Y-%m-%d %H:%M:%SZ")
        ),
    };
    let mut out = String::with_capacity(1024);
    let _ = writeln!(
        out,
        "{}: {}  {step}  phase {}  ({filed}, config {})",
        cfg.run.name,
        crate::colour::status(&status_word(v.status).to_uppercase(), on),
        v.phase.as_deref().unwrap_or("-"),
        &cfg.hash[..12.min(cfg.hash.len())]
    );
    for c in &v.checks {
        // A check waiting for data (or skipped) is unknown but does not decide: say which.
        let word = c.unjudged.map_or(status_word(c.status), |u| u.as_str());
        let padded = format!("{word:<7}");
        let _ = writeln!(
            out,
            "{} {:<12} {}",
            crate::colour::paint(&padded, word, on),
            c.check,
            c.reason
        );
    }
    if !v.skipped.is_empty() {
        let _ = writeln!(out, "skipped      {} (not declared)", v.skipped.join(", "));
    }
    if !v.flapping.is_empty() {
        let _ = writeln!(
            out,
            "flapping     {} (see `roger hygiene flap`)",
            v.flapping.join(", ")
        );
    }
    out
}

fn print_summary(tick: &Tick, seq: u64) {
    let v = &tick.verdict;
    let worst = v
        .checks
        .first()
        .filter(|c| c.status != Status::Pass && c.unjudged.is_none())
        .map(|c| format!(" — {}: {}", c.check, c.reason))
        .unwrap_or_default();
    outln!(
        "{} seq {seq} step {} {}: {} (+{} samples, {} B read){worst}",
        Utc::now().format("%Y-%m-%dT%H:%M:%SZ"),
        v.step.map_or("-".into(), |s| s.to_string()),
        v.phase.as_deref().unwrap_or("-"),
        v.status.as_str(),
        tick.new_samples,
        tick.bytes_read
    );
}

/// The verdict as one JSON line.
fn json_text(v: &Verdict, filing: Filing) -> String {
    let mut j = serde_json::to_value(v).expect("verdict serialises");
    match filing {
        Filing::New(seq) => j["seq"] = serde_json::json!(seq),
        Filing::Unchanged(seq, _) => {
            j["seq"] = serde_json::json!(seq);
            j["unchanged"] = serde_json::json!(true);
        }
    }
    format!("{j}\n")
}

fn run_replay(global: &Global, args: &CriticArgs) -> Result<u8> {
    let path = super::ledger_path(global, args.ledger.as_deref())?;
    let ledger = Ledger::new(&path);
    let records = ledger.records()?;
    let results = replay::replay(&records);
    let differ: Vec<&replay::Replayed> = results.iter().filter(|r| !r.matches()).collect();
    if args.json {
        outln!(
            "{}",
            serde_json::json!({"ledger": path, "replayed": results.len(), "differ": differ})
        );
    } else {
        for r in &differ {
            outln!(
                "seq {} step {}: archived {}, recomputed {}: {}",
                r.seq,
                r.step.map_or("-".into(), |s| s.to_string()),
                r.archived,
                r.recomputed.as_deref().unwrap_or("-"),
                r.differences.join("; ")
            );
        }
        outln!(
            "{}: replayed {} critic verdict(s), {} differ",
            path.display(),
            results.len(),
            differ.len()
        );
    }
    Ok(if results.is_empty() {
        exit::UNKNOWN
    } else if differ.is_empty() {
        exit::OK
    } else {
        exit::FAIL
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_must_be_positive() {
        assert_eq!(parse_interval("200ms").unwrap(), Duration::from_millis(200));
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("soon").is_err());
    }
}
