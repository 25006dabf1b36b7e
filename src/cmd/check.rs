//! `roger check`: validate roger.toml and print the resolved phases.

use crate::cmd::Global;
use crate::config::{self, Config};
use crate::outln;
use anyhow::Result;
use clap::Args;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Print the resolved config as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(global: &Global, args: CheckArgs) -> Result<u8> {
    let cfg = config::require(global.config.as_deref())?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&cfg)?);
        return Ok(crate::exit::OK);
    }
    print_human(&cfg);
    print_log_read(&cfg);
    Ok(crate::exit::OK)
}

/// Unreadable lines `check` lists one by one; beyond this it counts them.
const NOT_READ_SHOWN: usize = 5;

/// The log as this config reads it: samples, how many hold a non-finite value, and each line
/// it cannot read (file, line, key and value), so a mapping that misses shows before a run
/// relies on it. A log not written yet is said, not an error.
fn print_log_read(cfg: &Config) {
    let Some(log) = &cfg.run.log else { return };
    let read = match crate::metrics::read_all(log, cfg.run.format, &cfg.metrics) {
        Ok(r) => r,
        Err(e) => {
            outln!("read     nothing yet: {e:#}");
            return;
        }
    };
    let non_finite = read
        .samples
        .iter()
        .filter(|s| s.values.values().any(|v| !v.is_finite()))
        .count();
    outln!(
        "read     {} samples ({non_finite} with a non-finite value), {} line(s) not read",
        read.samples.len(),
        read.garbage_total
    );
    for g in read.garbage.iter().take(NOT_READ_SHOWN) {
        outln!("  not read {g}");
    }
    let more = read
        .garbage_total
        .saturating_sub(read.garbage.len().min(NOT_READ_SHOWN) as u64);
    if more > 0 {
        outln!("  ... and {more} more");
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".into(), |v| v.to_string())
}

fn print_human(cfg: &Config) {
    outln!("{}: ok (sha256 {})", cfg.path.display(), &cfg.hash[..16]);
    outln!("run      {}", cfg.run.name);
    outln!(
        "log      {} ({:?})",
        opt(&cfg.run.log.as_ref().map(|p| p.display())),
        cfg.run.format
    );
    outln!(
        "ckpts    {}",
        opt(&cfg.run.checkpoint_dir.as_ref().map(|p| p.display()))
    );
    outln!("ledger   {}", cfg.ledger_path().display());
    if let Some(s) = &cfg.schedule {
        let warmup = match s.warmup_ratio {
            Some(r) if s.total_steps.is_none() => format!("{r} of the log's total"),
            _ => s.resolved(None).warmup_steps.to_string(),
        };
        let total = match s.total_steps {
            Some(t) => t.to_string(),
            None if config::needs_total(s.kind) || s.warmup_ratio.is_some() => {
                "from the log".to_string()
            }
            None => "-".to_string(),
        };
        outln!(
            "schedule {} peak {} min {} warmup {warmup} total {total} (tolerance {}·peak, ±{} steps)",
            config::kind_name(s.kind),
            s.peak_lr,
            s.min_lr,
            s.tolerance,
            s.step_slack
        );
    } else {
        outln!("schedule none (the lr check is skipped: declare [schedule] to have it judged)");
    }
    if cfg.phases.is_empty() {
        outln!("phases   none: every threshold check is unknown until a [[phase]] is declared");
    }
    for p in &cfg.phases {
        let range = match p.to {
            Some(to) => format!("[{}, {to})", p.from),
            None => format!("[{}, ∞)", p.from),
        };
        let band =
            |b: &Option<config::Band>| b.map_or("-".into(), |b| format!("[{}, {}]", b.lo, b.hi));
        outln!("phase    {:<12} steps {range}", p.name);
        outln!(
            "           loss {}  slope/1k {}  spike ×{}  grad ≤ {}  spike ×{}",
            band(&p.loss),
            band(&p.loss_slope),
            opt(&p.loss_spike),
            opt(&p.grad_norm_max),
            opt(&p.grad_norm_spike)
        );
        outln!(
            "           tokens/s ≥ {}  vram ≤ {} GiB  stale {}  window {}",
            opt(&p.tokens_per_s_min),
            opt(&p.vram_max_gib),
            opt(&p.stale),
            p.window
        );
    }
    for q in &cfg.quiet {
        outln!(
            "quiet    {} every {} steps, up to {}",
            q.name,
            q.every,
            q.duration
        );
    }
}
