//! `roger report`: the night as a page (HTML with inline SVG plots), a 20-line digest
//! (`--text`) or the model as JSON (`--json`), from roger.toml, the log and the ledger alone.

use crate::cmd::Global;
use crate::outln;
use crate::report::{self, Options};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Where to write the page (default: roger-report.html beside the ledger).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Incidents, goodput and markers from this long ago (`12h`) or this instant (RFC 3339)
    /// on; the headline always covers the whole run.
    #[arg(long, value_name = "DURATION|RFC3339", value_parser = parse_since)]
    pub since: Option<Since>,
    /// The digest (at most 20 lines) on stdout instead of the page.
    #[arg(long, conflicts_with = "json")]
    pub text: bool,
    /// The model as JSON on stdout instead of the page.
    #[arg(long)]
    pub json: bool,
    /// Ledger file (default: the config's).
    #[arg(long, value_name = "FILE")]
    pub ledger: Option<PathBuf>,
    /// Metrics log (default: the config's `[run] log`).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Re-hash the last good checkpoint from disk (reads every byte of it).
    #[arg(long)]
    pub verify: bool,
    /// Pin "now" (RFC 3339): for reproducible pages and tests.
    #[arg(long, value_name = "RFC3339", value_parser = parse_instant, hide = true)]
    pub now: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy)]
pub enum Since {
    Ago(std::time::Duration),
    At(DateTime<Utc>),
}

fn parse_instant(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("expected an RFC 3339 time like 2026-01-02T03:04:05Z: {e}"))
}

fn parse_since(s: &str) -> Result<Since, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(Since::At(t.with_timezone(&Utc)));
    }
    crate::config::units::parse_duration(s)
        .map(Since::Ago)
        .map_err(|e| format!("expected a duration (12h, 90m) or an RFC 3339 time: {e}"))
}

pub fn run(global: &Global, args: ReportArgs) -> Result<u8> {
    let cfg = crate::config::require(global.config.as_deref())?;
    let now = args.now.unwrap_or_else(Utc::now);
    let since = args.since.map(|s| match s {
        Since::At(t) => t,
        Since::Ago(d) => now - chrono::Duration::from_std(d).unwrap_or(chrono::Duration::zero()),
    });
    let opts = Options {
        ledger: args.ledger.clone(),
        log: args.log.clone(),
        since,
        verify: args.verify,
        // A pinned clock is a replay: the disk as it is now would not match it.
        measure_disk: args.now.is_none(),
    };
    let loaded = report::load(&cfg, &opts, now)?;
    let night = &loaded.night;
    let code = night.headline.state.exit_code();
    if args.json {
        outln!("{}", serde_json::to_string_pretty(night)?);
        return Ok(code);
    }
    if args.text {
        let colour = crate::colour::stdout();
        outln!("{}", report::text::digest(night, colour));
        return Ok(code);
    }
    let out = args.out.clone().unwrap_or_else(|| {
        loaded
            .ledger
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), |p| p.to_path_buf())
            .join("roger-report.html")
    });
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), |p| p.to_path_buf());
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let page = report::html::page(night, Some(&dir));
    write_replacing(&out, page.as_bytes())?;
    outln!("{}", out.display());
    eprintln!(
        "roger: {}: {}",
        night.headline.state.as_str(),
        night.headline.why
    );
    Ok(code)
}

/// Write beside, then rename over: a browser reloading the page never sees half of it.
/// Atomic, not durable: the page is rebuilt from the ledger by the next `roger report`.
fn write_replacing(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    use crate::sys::fsx::{write_atomic, Durability, Replace};
    write_atomic(path, bytes, Replace::new(Durability::Atomic, 0o666))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
