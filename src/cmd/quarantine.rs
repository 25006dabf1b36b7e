//! `roger quarantine add|list|show|prove|release|purge|scan`: flags to store operations,
//! human and `--json` printers over the same items.

use crate::cmd::Global;
use crate::config::units::{format_bytes, parse_duration, Dur};
use crate::config::{self, Config};
use crate::exit;
use crate::ledger::{Entry, Kind, Ledger};
use crate::outln;
use crate::quarantine::{self, outputs, release, trial, Item, Proof};
use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct QuarantineArgs {
    /// Quarantine directory (default: [quarantine] dir, else .roger/quarantine beside the
    /// config). Must be on the same filesystem as what goes in: items are moved, not copied.
    #[arg(long, global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Ledger file (default: the config's).
    #[arg(long, global = true, value_name = "FILE")]
    pub ledger: Option<PathBuf>,
    /// Run name for the records (default: the config's).
    #[arg(long, global = true)]
    pub run: Option<String>,
    #[command(subcommand)]
    pub action: QuarantineAction,
}

#[derive(Debug, Subcommand)]
pub enum QuarantineAction {
    /// Move PATH into quarantine (hashed, recorded; never copied). A quarantined checkpoint
    /// is never chosen for resume.
    Add {
        /// The suspect file or directory (a checkpoint, an output).
        path: PathBuf,
        /// Why it is suspect.
        #[arg(long)]
        reason: String,
    },
    /// The items in quarantine, oldest first.
    List {
        /// One JSON array of the items.
        #[arg(long)]
        json: bool,
    },
    /// One item: where it came from, why, its hash and every proof attempt.
    Show {
        /// The item's id (as `quarantine list` shows it; a unique prefix will do).
        id: String,
        /// The item as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Try the item: run CMD with `{path}` replaced by the item's path (also in
    /// ROGER_QUARANTINE_PATH). Passes when CMD exits 0 and the item's bytes are unchanged.
    /// Exit 0 proof passed, 2 failed, 3 could not run.
    Prove {
        /// The item's id (as `quarantine list` shows it).
        id: String,
        /// Kill the trial after this long (e.g. "10m"; default [quarantine] trial_timeout).
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
        /// The trial, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Move the item back to where it came from: only after a passing proof, or with
    /// --force --reason. Refuses if something is at the original path now.
    Release {
        /// The item's id (as `quarantine list` shows it).
        id: String,
        /// Release without a passing proof (needs --reason, which goes to the ledger).
        #[arg(long, requires = "reason")]
        force: bool,
        /// Why it is released without a passing proof (with --force).
        #[arg(long, requires = "force")]
        reason: Option<String>,
    },
    /// Delete items older than the age whose fate a proof decided; unproven ones stay unless
    /// --force (they may be the only good copy).
    Purge {
        /// Minimum age (default [quarantine] purge_after, 7d).
        #[arg(long, value_parser = parse_duration, value_name = "AGE")]
        older_than: Option<std::time::Duration>,
        /// Also delete items no proof has decided (they may be the only good copy).
        #[arg(long)]
        force: bool,
        /// List what would go; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Check the run's declared outputs ([quarantine] outputs, or PATHS) and quarantine those
    /// that do not parse, hold NaN/Infinity, or (--crashed) were written by a run that crashed.
    /// Exit 0 all trusted, 2 some were quarantined, 3 could not judge.
    Scan {
        /// Outputs to check (default: [quarantine] outputs).
        paths: Vec<PathBuf>,
        /// The run crashed before finishing: its outputs are untrusted.
        #[arg(long)]
        crashed: bool,
        /// With --crashed: when the crashed run started (RFC 3339 or unix seconds); only
        /// outputs modified since then are untrusted. Default: all.
        #[arg(long, requires = "crashed", value_parser = parse_time)]
        since: Option<DateTime<Utc>>,
        /// The result as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(secs) = s.parse::<f64>() {
        return DateTime::from_timestamp_millis((secs * 1000.0) as i64)
            .ok_or_else(|| format!("{s}: out of range"));
    }
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            format!("expected RFC 3339 (2026-01-02T03:04:05Z) or unix seconds, got {s:?}: {e}")
        })
}

struct Ctx {
    cfg: Option<Config>,
    qdir: PathBuf,
    ledger: Ledger,
    run: String,
}

fn context(global: &Global, a: &QuarantineArgs) -> Result<Ctx> {
    let cfg = config::discover(global.config.as_deref())?;
    let qdir = match (&a.dir, &cfg) {
        (Some(d), _) => d.clone(),
        (None, Some(c)) => c.quarantine_dir(),
        (None, None) => bail!("no quarantine dir: pass --dir DIR, or --config FILE / ./roger.toml"),
    };
    let ledger = Ledger::new(super::ledger_path(global, a.ledger.as_deref())?);
    let run = a
        .run
        .clone()
        .or_else(|| cfg.as_ref().map(|c| c.run.name.clone()))
        .unwrap_or_default();
    Ok(Ctx {
        cfg,
        qdir,
        ledger,
        run,
    })
}

/// The config says what the run is; moving it away would leave every later command blind.
fn refuse_config(path: &std::path::Path, config: &std::path::Path) -> Result<()> {
    let (Ok(p), Ok(c)) = (std::fs::canonicalize(path), std::fs::canonicalize(config)) else {
        return Ok(());
    };
    if c.starts_with(&p) {
        bail!(
            "{} is (or holds) roger's config {}: it is never quarantined; quarantine the suspect item itself",
            p.display(),
            c.display()
        );
    }
    Ok(())
}

pub fn run(global: &Global, a: QuarantineArgs) -> Result<u8> {
    let ctx = context(global, &a)?;
    let now = Utc::now();
    match a.action {
        QuarantineAction::Add { path, reason } => {
            if let Some(cfg) = &ctx.cfg {
                refuse_config(&path, &cfg.path)?;
            }
            let item = quarantine::quarantine_path(
                &ctx.qdir,
                &path,
                &reason,
                "quarantine",
                &ctx.run,
                &ctx.ledger,
                now,
            )?;
            outln!(
                "quarantined {} as {} ({}, sha256 {})",
                item.original_path.display(),
                item.id,
                format_bytes(item.size),
                &item.sha256[..16]
            );
            Ok(exit::DONE)
        }
        QuarantineAction::List { json } => {
            let (items, problems) = quarantine::list(&ctx.qdir)?;
            for p in &problems {
                crate::warnln!("{p}");
            }
            if json {
                outln!("{}", serde_json::to_string(&items)?);
            } else if items.is_empty() {
                outln!("quarantine {} is empty", ctx.qdir.display());
            } else {
                for i in &items {
                    outln!(
                        "{}  {:<11} {:>10}  {}  {}",
                        i.id,
                        i.proof_state(),
                        format_bytes(i.size),
                        i.original_path.display(),
                        i.reason
                    );
                }
            }
            Ok(exit::DONE)
        }
        QuarantineAction::Show { id, json } => {
            let item = quarantine::find(&ctx.qdir, &id)?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&item)?);
            } else {
                print_item(&item);
            }
            Ok(exit::DONE)
        }
        QuarantineAction::Prove {
            id,
            timeout,
            command,
        } => prove(&ctx, &id, timeout, &command),
        QuarantineAction::Release { id, force, reason } => {
            let item = quarantine::find(&ctx.qdir, &id)?;
            let force_reason = if force { reason.as_deref() } else { None };
            release::release(&item, force_reason, "quarantine", &ctx.ledger, now)?;
            outln!("released {} to {}", item.id, item.original_path.display());
            Ok(exit::DONE)
        }
        QuarantineAction::Purge {
            older_than,
            force,
            dry_run,
        } => {
            let age = older_than
                .or(ctx.cfg.as_ref().map(|c| c.quarantine.purge_after.0))
                .unwrap_or(Dur::secs(7 * 86400).0);
            let (items, _) = quarantine::list(&ctx.qdir)?;
            let (go, kept) = release::purge_plan(&items, age, force, now);
            for i in &go {
                if !dry_run {
                    release::purge(i, force, "quarantine", &ctx.ledger, now)?;
                }
                outln!(
                    "{} {} ({}, {}): {}",
                    if dry_run { "would purge" } else { "purged" },
                    i.id,
                    i.proof_state(),
                    format_bytes(i.size),
                    i.original_path.display()
                );
            }
            for k in &kept {
                outln!("kept {}: {}", k.id, k.why);
            }
            Ok(exit::DONE)
        }
        QuarantineAction::Scan {
            paths,
            crashed,
            since,
            json,
        } => scan(
            &ctx,
            paths,
            crashed.then_some(outputs::Crash { started_at: since }),
            json,
            now,
        ),
    }
}

fn print_item(i: &Item) {
    outln!("id          {}", i.id);
    outln!("original    {}", i.original_path.display());
    outln!("now at      {}", i.quarantined_path.display());
    outln!("reason      {}", i.reason);
    outln!("sha256      {}", i.sha256);
    outln!("size        {} ({} bytes)", format_bytes(i.size), i.size);
    outln!(
        "added       {} by {} (run {:?})",
        i.added_at.format("%Y-%m-%d %H:%M:%S UTC"),
        i.source,
        i.run
    );
    outln!("state       {}", i.proof_state());
    for (n, p) in i.proofs.iter().enumerate() {
        outln!(
            "proof #{}    {} {} exit {}{}{} in {:.1}s: {}",
            n + 1,
            p.at.format("%Y-%m-%d %H:%M:%S"),
            if p.passed { "PASSED" } else { "FAILED" },
            p.exit_code.map_or("none".into(), |c| c.to_string()),
            if p.timed_out { " (timed out)" } else { "" },
            if p.unchanged {
                ""
            } else {
                " (item bytes changed!)"
            },
            p.duration_s,
            p.command.join(" ")
        );
        for line in p
            .output_tail
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            outln!("              | {line}");
        }
    }
}

fn prove(
    ctx: &Ctx,
    id: &str,
    timeout: Option<std::time::Duration>,
    command: &[String],
) -> Result<u8> {
    let mut item = quarantine::find(&ctx.qdir, id)?;
    if !item.quarantined_path.exists() {
        bail!(
            "{}: the quarantined item {} is missing",
            item.id,
            item.quarantined_path.display()
        );
    }
    let timeout = timeout.or(ctx
        .cfg
        .as_ref()
        .and_then(|c| c.quarantine.trial_timeout.map(|d| d.0)));
    let at = Utc::now();
    let ledger = &ctx.ledger;
    let item_id = item.id.clone();
    let run = item.run.clone();
    let outcome = trial::run(command, &item.quarantined_path, timeout, &mut |pgid| {
        ledger
            .append(
                Entry::new(Kind::Kill, "quarantine", &run)
                    .field("target", "proof trial")
                    .field("pgid", pgid)
                    .field("id", &item_id)
                    .field(
                        "reason",
                        format!(
                            "trial ran past its timeout of {:?}",
                            timeout.unwrap_or_default()
                        ),
                    ),
                Utc::now(),
            )
            .map(|_| ())
    })?;
    let unchanged = crate::digest::hash_path(&item.quarantined_path)
        .map(|d| d.sha256 == item.sha256)
        .unwrap_or(false);
    let passed = outcome.exit_code == Some(0) && !outcome.timed_out && unchanged;
    let proof = Proof {
        at,
        command: trial::substitute(command, &item.quarantined_path),
        exit_code: outcome.exit_code,
        passed,
        timed_out: outcome.timed_out,
        unchanged,
        duration_s: outcome.duration_s,
        output_tail: outcome.output_tail.clone(),
    };
    ctx.ledger.append(
        Entry::new(Kind::Proof, "quarantine", &item.run)
            .field("id", &item.id)
            .field("path", &item.quarantined_path)
            .field("command", &proof.command)
            .field("exit_code", proof.exit_code)
            .field("signal", outcome.signal)
            .field("timed_out", proof.timed_out)
            .field("unchanged", unchanged)
            .field("passed", passed)
            .field("output_tail", &proof.output_tail),
        Utc::now(),
    )?;
    item.proofs.push(proof);
    quarantine::write_meta(&item)?;
    let why = if passed {
        "exit 0, bytes unchanged".to_string()
    } else if outcome.timed_out {
        "timed out".into()
    } else if !unchanged {
        "the trial changed the item's bytes".into()
    } else {
        match (outcome.exit_code, outcome.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            _ => "no exit status".into(),
        }
    };
    outln!(
        "proof of {} {}: {why} ({:.1}s)",
        item.id,
        if passed { "PASSED" } else { "FAILED" },
        outcome.duration_s
    );
    for line in outcome
        .output_tail
        .lines()
        .rev()
        .take(10)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        outln!("  | {line}");
    }
    Ok(if passed { exit::OK } else { exit::FAIL })
}

fn scan(
    ctx: &Ctx,
    paths: Vec<PathBuf>,
    crash: Option<outputs::Crash>,
    json: bool,
    now: DateTime<Utc>,
) -> Result<u8> {
    let outputs = if paths.is_empty() {
        ctx.cfg
            .as_ref()
            .map(|c| c.quarantine.outputs.clone())
            .unwrap_or_default()
    } else {
        paths
    };
    if outputs.is_empty() {
        bail!("no outputs to scan: declare [quarantine] outputs in the config, or give PATHS");
    }
    let (scanned, items) = outputs::quarantine_untrusted(
        &outputs,
        crash,
        &ctx.qdir,
        "quarantine",
        &ctx.run,
        &ctx.ledger,
        now,
    )
    .context("scanning outputs")?;
    let code = if items.is_empty() {
        exit::OK
    } else {
        exit::FAIL
    };
    if json {
        outln!(
            "{}",
            serde_json::json!({"scanned": scanned, "quarantined": items})
        );
        return Ok(code);
    }
    // Items were made in scan order, one per untrusted output.
    let mut made = items.iter();
    for s in &scanned {
        match (&s.untrusted, s.missing) {
            (_, true) => outln!("missing      {}", s.path.display()),
            (None, _) => outln!("trusted      {}", s.path.display()),
            (Some(why), _) => {
                let id = made.next().map_or("?", |i| i.id.as_str());
                outln!("QUARANTINED  {} as {id}: {why}", s.path.display());
            }
        }
    }
    Ok(code)
}
