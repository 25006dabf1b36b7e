//! `roger hygiene disk|clean|flap|regress`: flags to domain inputs, then one printer each for
//! humans and for `--json` over the same result.

use crate::cmd::Global;
use crate::config::units::{format_bytes, format_duration};
use crate::config::{self, Config};
use crate::hygiene::{baseline, clean, clean_file, disk, flap, prune, regress, Status};
use crate::ledger::{Kind, Ledger, Record};
use crate::outln;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct HygieneArgs {
    #[command(subcommand)]
    pub action: HygieneAction,
}

#[derive(Debug, Subcommand)]
pub enum HygieneAction {
    /// Free space, growth rate and forecast hours to full for every path the run writes to
    /// (checkpoints, log, ledger, quarantine, and the Windows host drive on WSL), judged
    /// against [disk]. Exit 0 ok, 1 warn, 2 fail, 3 unknown.
    Disk(DiskArgs),
    /// Strip ANSI escapes and collapse `\r`-redrawn progress lines (tqdm) to their final
    /// state: FILE or - (stdin) to stdout, or --in-place (atomic; the original is kept until
    /// the clean copy is verified). Streaming, constant memory.
    Clean(CleanArgs),
    /// Checks whose verdicts flip back and forth (weighted state changes over the last
    /// [hygiene] flap_window verdicts, with high/low hysteresis). Exit 0 none, 1 some flap,
    /// 3 no verdicts.
    Flap(FlapArgs),
    /// Compare this run with a baseline run at matching steps (loss, tokens/s, grad norm;
    /// running-median smoothed, baseline interpolated): the steps and numbers where it is
    /// worse beyond the [hygiene] regress_* margins. Exit 0 ok, 1 regressed earlier but not
    /// now, 2 regressed over the latest steps, 3 too few matching steps.
    Regress(RegressArgs),
}

#[derive(Debug, Args)]
pub struct DiskArgs {
    /// Apply the retention policy ([publish] keep_last/keep_every) until [disk]
    /// prune_goal_free (else warn_free) is free. Keeps what publish's retention keeps (what
    /// latest.json points to, the last good checkpoint, anything quarantined, with [publish]
    /// remote anything whose bucket copy is not verified); each removal is a ledger record.
    #[arg(long)]
    pub prune: bool,
    /// With --prune: list what would be removed, remove nothing.
    #[arg(long, requires = "prune")]
    pub dry_run: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CleanArgs {
    /// The log to clean; `-` or absent reads stdin.
    #[arg(value_name = "FILE|-")]
    pub file: Option<PathBuf>,
    /// Replace FILE by its clean version (atomically; refuses a file still being written).
    #[arg(long, short = 'i')]
    pub in_place: bool,
    /// With --in-place: keep the original as FILE.orig.
    #[arg(long, requires = "in_place")]
    pub keep_original: bool,
    /// Print bytes in/out, lines, escapes and redraws removed, and MB/s on stderr.
    #[arg(long)]
    pub stats: bool,
}

#[derive(Debug, Args)]
pub struct FlapArgs {
    /// Ledger file (default: the config's).
    #[arg(long, value_name = "FILE")]
    pub ledger: Option<PathBuf>,
    /// Only this run's verdicts (default: the config's run; all runs without a config).
    #[arg(long)]
    pub run: Option<String>,
    /// Also list the checks that are not flapping.
    #[arg(long)]
    pub all: bool,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RegressArgs {
    /// The baseline: another run's metrics log (read like this run's), or its roger ledger
    /// (the samples archived in its verdicts' observation windows).
    #[arg(long, value_name = "LOG_OR_LEDGER")]
    pub baseline: PathBuf,
    /// Only this run's verdicts when the baseline is a ledger.
    #[arg(long, value_name = "NAME")]
    pub baseline_run: Option<String>,
    /// This run's metrics log (default: [run] log).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Log format of both logs (default: [run] format, else jsonl).
    #[arg(long, value_parser = parse_format)]
    pub format: Option<config::LogFormat>,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn parse_format(s: &str) -> Result<config::LogFormat, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("unknown format {s:?}; expected jsonl, csv, text, key-value, hf-trainer-state, tensorboard, mlflow or wandb"))
}

pub fn run(global: &Global, args: HygieneArgs) -> Result<u8> {
    match args.action {
        HygieneAction::Disk(a) => run_disk(global, a),
        HygieneAction::Clean(a) => run_clean(a),
        HygieneAction::Flap(a) => run_flap(global, a),
        HygieneAction::Regress(a) => run_regress(global, a),
    }
}

fn hours(h: Option<f64>) -> String {
    match h {
        Some(h) if h < 48.0 => format!("full in {h:.1} h"),
        Some(h) => format!("full in {:.1} d", h / 24.0),
        None => "not filling".into(),
    }
}

fn run_disk(global: &Global, a: DiskArgs) -> Result<u8> {
    let cfg = config::require(global.config.as_deref())?;
    let now = chrono::Utc::now();
    let ledger = Ledger::new(cfg.ledger_path());
    if let Ok(dir) = cfg.checkpoint_dir() {
        crate::publish::recover::try_recover(&dir, &ledger, &cfg.run.name, "hygiene", now);
        crate::publish::publisher::resume(&dir);
    }
    let mut report = disk::check(&cfg, now)?;
    let mut pruned = None;
    if a.prune {
        // Under the publish lock: a publish's own retention cannot interleave with this one.
        let dir = cfg.checkpoint_dir()?;
        let _lock = match (a.dry_run, dir.is_dir()) {
            (false, true) => Some(crate::publish::place::lock(&dir)?),
            _ => None,
        };
        let records = ledger.records()?;
        let p = plan_prune(&cfg, &records, &report)?;
        for k in &p.held {
            crate::noteln!(
                "roger: {} {}: {}",
                if a.dry_run { "would keep" } else { "kept" },
                k.path.display(),
                k.why
            );
        }
        if !a.dry_run {
            prune::execute(&p, &ledger, &cfg.run.name, now)?;
            report = disk::check(&cfg, now)?;
        }
        pruned = Some(p);
    }
    if a.json {
        outln!(
            "{}",
            serde_json::json!({"disk": report, "prune": pruned, "dry_run": a.dry_run})
        );
    } else {
        print_disk(&report);
        if let Some(p) = &pruned {
            print_prune(p, a.dry_run);
        }
    }
    Ok(report.status.exit_code())
}

fn plan_prune(
    cfg: &Config,
    records: &[Record],
    report: &disk::DiskReport,
) -> Result<prune::PrunePlan> {
    let dir = cfg.checkpoint_dir()?;
    let avail = report
        .targets
        .iter()
        .find(|t| t.role == "checkpoints")
        .and_then(|t| t.avail)
        .with_context(|| format!("cannot measure free space at {}", dir.display()))?;
    prune::plan_for(cfg, records, avail)
}

fn print_disk(r: &disk::DiskReport) {
    outln!("disk: {}", r.status);
    for t in &r.targets {
        let space = match (t.avail, t.total) {
            (Some(a), Some(tot)) => format!("{} free of {}", format_bytes(a), format_bytes(tot)),
            _ => "-".into(),
        };
        let rate = t
            .bytes_per_hour
            .map_or("-".into(), |b| format!("{:+}/h", signed_bytes(b)));
        match &t.same_fs_as {
            Some(first) => outln!(
                "  {:<7} {:<11} {} (same filesystem as {first})",
                t.status.as_str(),
                t.role,
                t.path.display()
            ),
            None => {
                outln!(
                    "  {:<7} {:<11} {}: {}",
                    t.status.as_str(),
                    t.role,
                    t.path.display(),
                    t.reason
                );
                outln!("          {space}, {rate}, {}", hours(t.hours_to_full));
            }
        }
    }
    match &r.growth {
        Some(g) => outln!(
            "growth: {} per checkpoint every {} (last {} publishes) = {}/h, pruned {}/h, net {}/h",
            format_bytes(g.bytes_per_checkpoint as u64),
            format_duration(crate::config::units::duration_from_secs(g.cadence_s)),
            g.checkpoints,
            format_bytes(g.gross_bytes_per_hour as u64),
            format_bytes(g.pruned_bytes_per_hour as u64),
            signed_bytes(g.net_bytes_per_hour)
        ),
        None => outln!(
            "growth: unknown (fewer than 2 publish records, or none for over {} cadences: not publishing now)",
            disk::IDLE_CADENCES
        ),
    }
}

/// A byte rate with its sign ("-1.0 GiB").
struct Signed(f64);
impl std::fmt::Display for Signed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.0 < 0.0 {
            "-"
        } else if f.sign_plus() {
            "+"
        } else {
            ""
        };
        write!(f, "{sign}{}", format_bytes(self.0.abs() as u64))
    }
}
fn signed_bytes(b: f64) -> Signed {
    Signed(b)
}

fn print_prune(p: &prune::PrunePlan, dry_run: bool) {
    let verb = if dry_run { "would remove" } else { "removed" };
    outln!(
        "prune: goal {} free, {} free now; {verb} {} checkpoint(s), {}{}",
        format_bytes(p.goal_free),
        format_bytes(p.avail),
        p.chosen.len(),
        format_bytes(p.freed),
        if p.goal_met {
            String::new()
        } else {
            " — the goal is NOT reachable by retention alone".into()
        }
    );
    for c in &p.chosen {
        outln!(
            "  {verb} {} ({}): {}",
            c.checkpoint.path.display(),
            format_bytes(c.checkpoint.size),
            c.reason
        );
    }
    for k in &p.protected {
        outln!("  kept    {}: {}", k.path.display(), k.why);
    }
}

fn run_clean(a: CleanArgs) -> Result<u8> {
    let start = std::time::Instant::now();
    let file = a.file.filter(|f| f.as_os_str() != "-");
    let stats = match (&file, a.in_place) {
        (None, true) => anyhow::bail!("--in-place needs a FILE (not stdin)"),
        (Some(f), true) => {
            let r = clean_file::clean_in_place(f, a.keep_original)?;
            if let Some(e) = &r.evidence {
                crate::noteln!("roger: original kept as {}", e.display());
            }
            r.stats
        }
        (Some(f), false) => {
            if f.is_dir() {
                anyhow::bail!("{}: is a directory, expected a log file", f.display());
            }
            let input =
                std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?;
            clean_to_stdout(input)?
        }
        (None, false) => clean_to_stdout(std::io::stdin().lock())?,
    };
    if a.stats {
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        eprintln!(
            "roger: cleaned {} -> {} bytes, {} lines, {} escapes, {} redraws collapsed, {:.0} MB/s",
            stats.bytes_in,
            stats.bytes_out,
            stats.lines,
            stats.escapes,
            stats.redraws,
            stats.bytes_in as f64 / secs / 1e6
        );
    }
    Ok(crate::exit::DONE)
}

/// Filter to stdout; a reader that went away (`| head`) is not an error.
fn clean_to_stdout(input: impl std::io::Read) -> Result<clean::CleanStats> {
    let stdout = std::io::stdout().lock();
    let w = std::io::BufWriter::with_capacity(1 << 20, stdout);
    match clean::clean_stream(input, w) {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Default::default()),
        Err(e) => Err(e).context("cleaning to stdout"),
    }
}

fn run_flap(global: &Global, a: FlapArgs) -> Result<u8> {
    let cfg = config::discover(global.config.as_deref())?;
    let path = super::ledger_path(global, a.ledger.as_deref())?;
    let hcfg = cfg.as_ref().map(|c| c.hygiene.clone()).unwrap_or_default();
    let run = a.run.or_else(|| cfg.as_ref().map(|c| c.run.name.clone()));
    // `records` names the ledger in its own error.
    let records = Ledger::new(&path).records()?;
    let verdicts: Vec<&Record> = records
        .iter()
        .filter(|r| r.kind == Kind::Verdict && run.as_ref().is_none_or(|run| &r.run == run))
        .collect();
    let states = flap::flap_states(&verdicts, &hcfg);
    let status = if states.is_empty() {
        Status::Unknown
    } else if states.iter().any(|s| s.flapping) {
        Status::Warn
    } else {
        Status::Pass
    };
    if a.json {
        outln!(
            "{}",
            serde_json::json!({"status": status, "verdicts": verdicts.len(), "window": hcfg.flap_window,
                "high": hcfg.flap_high, "low": hcfg.flap_low, "checks": states})
        );
        return Ok(status.exit_code());
    }
    let flapping = states.iter().filter(|s| s.flapping).count();
    outln!(
        "flap: {status}: {flapping} of {} checks flapping over {} verdicts (window {}, start > {}, stop < {})",
        states.len(),
        verdicts.len(),
        hcfg.flap_window,
        hcfg.flap_high,
        hcfg.flap_low
    );
    for s in states.iter().filter(|s| a.all || s.flapping) {
        let since = s
            .since_seq
            .map_or(String::new(), |q| format!("  since verdict #{q}"));
        outln!(
            "  {:<18} score {:.2}  {:<8}  {} changes in {}  {}{since}",
            s.check,
            s.score,
            if s.flapping { "FLAPPING" } else { "steady" },
            s.changes,
            s.states,
            s.recent
        );
    }
    if states.is_empty() {
        crate::noteln!(
            "roger: no verdict records with checks in {}{}",
            path.display(),
            run.map_or(String::new(), |r| format!(" for run {r:?}"))
        );
    }
    Ok(status.exit_code())
}

fn run_regress(global: &Global, a: RegressArgs) -> Result<u8> {
    let cfg = config::discover(global.config.as_deref())?;
    let metrics = cfg.as_ref().map(|c| c.metrics.clone()).unwrap_or_default();
    let hcfg = cfg.as_ref().map(|c| c.hygiene.clone()).unwrap_or_default();
    let format = a
        .format
        .or(cfg.as_ref().map(|c| c.run.format))
        .unwrap_or(config::LogFormat::Jsonl);
    let log = match a
        .log
        .or_else(|| cfg.as_ref().and_then(|c| c.run.log.clone()))
    {
        Some(l) => l,
        None => {
            anyhow::bail!("no log for this run: pass --log FILE, or a config whose [run] names it")
        }
    };
    let current = baseline::from_log(&log, format, &metrics)?;
    let base = if baseline::is_ledger(&a.baseline)? {
        baseline::from_ledger(&a.baseline, a.baseline_run.as_deref())?
    } else {
        baseline::from_log(&a.baseline, format, &metrics)?
    };
    let report = regress::compare(&current, &base, &hcfg);
    if a.json {
        outln!(
            "{}",
            serde_json::json!({"status": report.status, "log": log, "baseline": a.baseline,
                "samples": current.len(), "baseline_samples": base.len(), "metrics": report.metrics})
        );
        return Ok(report.status.exit_code());
    }
    outln!(
        "regress: {} ({} samples vs baseline {}: {} samples)",
        report.status,
        current.len(),
        a.baseline.display(),
        base.len()
    );
    for m in &report.metrics {
        outln!("  {:<7} {:<12} {}", m.status.as_str(), m.metric, m.reason);
        for r in m.regressed.iter().take(5) {
            outln!(
                "            step {}: {} vs {} ({:+.1}%)",
                r.step,
                r.value,
                r.baseline,
                r.change * 100.0
            );
        }
        if m.regressed_count > 5 {
            outln!(
                "            ... {} more (see --json)",
                m.regressed_count - 5
            );
        }
    }
    Ok(report.status.exit_code())
}
