//! `roger ledger verify|tail`: check the hash chain; show recent records.

use crate::cmd::Global;
use crate::ledger::{Entry, Kind, Ledger, Record};
use crate::outln;
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct LedgerArgs {
    /// Ledger file (default: the config's).
    #[arg(long, global = true, value_name = "FILE")]
    pub ledger: Option<PathBuf>,
    #[command(subcommand)]
    pub action: LedgerAction,
}

#[derive(Debug, Subcommand)]
pub enum LedgerAction {
    /// Check every hash and the chain. Exit 0 intact; 1 names the first bad seq/offset.
    Verify {
        /// The result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Append a note (e.g. "lowered LR by hand after the step-4000 spike").
    Note {
        /// The note.
        message: String,
        /// Step it refers to.
        #[arg(long)]
        step: Option<u64>,
        /// Run name (default: the config's).
        #[arg(long)]
        run: Option<String>,
    },
    /// Print the last records, one sentence each (--json: the records as stored).
    Tail {
        /// How many records.
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        /// Only this kind (verdict, kill, relaunch, breaker, publish, prune, ...).
        #[arg(long, value_parser = parse_kind)]
        kind: Option<Kind>,
        /// One JSON record per line, as stored.
        #[arg(long)]
        json: bool,
    },
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::parse(s).ok_or_else(|| {
        let all: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        format!("unknown kind {s:?}; expected one of {}", all.join(", "))
    })
}

pub fn run(global: &Global, args: LedgerArgs) -> Result<u8> {
    let path = super::ledger_path(global, args.ledger.as_deref())?;
    let ledger = Ledger::new(&path);
    match args.action {
        LedgerAction::Verify { json } => verify(&ledger, json),
        LedgerAction::Note { message, step, run } => {
            let run = match run {
                Some(r) => r,
                None => crate::config::discover(global.config.as_deref())?
                    .map(|c| c.run.name)
                    .unwrap_or_default(),
            };
            let rec = ledger.append(
                Entry::new(Kind::Note, "ledger", &run)
                    .step(step)
                    .field("message", message),
                chrono::Utc::now(),
            )?;
            outln!("noted as #{}", rec.seq);
            Ok(crate::exit::DONE)
        }
        LedgerAction::Tail { n, kind, json } => {
            if !path.exists() {
                bail!("ledger {} does not exist yet", path.display());
            }
            let records = ledger.records()?;
            let picked: Vec<&Record> = records
                .iter()
                .filter(|r| kind.is_none_or(|k| r.kind == k))
                .collect();
            for r in &picked[picked.len().saturating_sub(n)..] {
                if json {
                    outln!("{}", serde_json::to_string(r)?);
                } else {
                    outln!("{}", crate::report::sentence::line(r));
                }
            }
            Ok(crate::exit::DONE)
        }
    }
}

fn verify(ledger: &Ledger, json: bool) -> Result<u8> {
    if !ledger.path().exists() {
        bail!("ledger {} does not exist", ledger.path().display());
    }
    let scan = ledger.scan()?;
    let broken = scan.first_break().cloned();
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "ledger": ledger.path(),
                "records": scan.records.len(),
                "intact": broken.is_none(),
                "problems": scan.problems,
            })
        );
    } else {
        for p in scan.problems.iter().filter(|p| p.torn) {
            crate::warnln!(
                "{}: line {} (offset {}): {}",
                ledger.path().display(),
                p.line,
                p.offset,
                p.what
            );
        }
        match &broken {
            None => outln!(
                "{}: intact, {} records, last seq {}",
                ledger.path().display(),
                scan.records.len(),
                scan.records.last().map_or(0, |r| r.seq)
            ),
            Some(p) => eprintln!(
                "roger: error: {}: first bad record: seq {} at line {} (offset {}): {}",
                ledger.path().display(),
                p.seq.map_or("?".into(), |s| s.to_string()),
                p.line,
                p.offset,
                p.what
            ),
        }
    }
    Ok(if broken.is_none() {
        crate::exit::DONE
    } else {
        crate::exit::NOT_DONE
    })
}
