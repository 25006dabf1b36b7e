//! `roger watch`: turn flags into watch options, pick the printer (human lines or `--json`
//! events), run the watch. Decisions (kills, relaunches, breakers, the final `done`) also go to
//! stderr in words, so `nohup roger watch ... >/dev/null` still says why it stopped.

use crate::cmd::Global;
use crate::outln;
use crate::sentinel::{Assessment, State};
use crate::watch::{self, Event, Mode, Options, Report};
use anyhow::{bail, Result};
use clap::Args;

#[derive(Debug, Args)]
#[command(after_help = "\
Classification (see docs/watch.md): working, grind (busy, no progress), wedge (no progress
past the stale limit and idle, or busy past the grind limit, or a GPU pinned at low power),
zombie (main process gone while its processes or VRAM linger), exited, unknown (a signal is
missing: roger never reports a run it cannot see as healthy).

Every kill, relaunch and breaker is written to the ledger first. Exit: 0 the run finished
(exit 0); 1 not done (roger stopped by a signal, or an error); 75 a breaker opened or the
relaunch budget is spent: do not restart; 76 ([preempt] requeue_exit_code) a preemption notice
was handed off (save, stop, requeue): requeue me.")]
pub struct WatchArgs {
    /// Watch a process started elsewhere (e.g. under nohup) instead of starting one;
    /// relaunches use `[watch] command`.
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,

    /// Classify and record what would be done, but never signal or relaunch.
    #[arg(long)]
    pub dry_run: bool,

    /// One JSON event per line on stdout (start, state, kill, relaunch, breaker, done, ...).
    #[arg(long)]
    pub json: bool,

    /// One watch per node of a multi-node job (`srun --ntasks-per-node=1 roger watch
    /// --node-local -- ...`): the one-watch lock and the ROGER_SAVE_NOW file are per node
    /// (SLURM_NODEID), other nodes' launches are never adopted, and only node 0 requeues.
    #[arg(long)]
    pub node_local: bool,

    /// The training command (after `--`); `{ckpt}`, `{step}`, `{diverged_at}`, `{best_ckpt}` are
    /// filled in on relaunch. Default: `[watch] command`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(global: &Global, args: WatchArgs) -> Result<u8> {
    let cfg = crate::config::require(global.config.as_deref())?;
    let mode = match (args.pid, args.command.is_empty()) {
        (Some(pid), _) => Mode::Attach(pid),
        (None, false) => Mode::Supervise(args.command),
        (None, true) if !cfg.watch.command.is_empty() => Mode::Supervise(cfg.watch.command.clone()),
        (None, true) => bail!(
            "nothing to watch: give the training command after `--`, --pid PID, or set [watch] command in {}",
            cfg.path.display()
        ),
    };
    let opts = Options {
        mode,
        dry_run: args.dry_run,
        node_local: args.node_local,
    };
    if args.json {
        watch::watch(&cfg, &opts, &mut JsonReport::default())
    } else {
        watch::watch(&cfg, &opts, &mut HumanReport::default())
    }
}

#[derive(Default)]
struct JsonReport {
    said: Said,
}

impl Report for JsonReport {
    fn event(&mut self, e: &Event) {
        if let Ok(line) = serde_json::to_string(e) {
            outln!("{line}");
        }
        to_stderr(e);
    }
    fn tick(&mut self, a: &Assessment) {
        status_line(a, &mut self.said);
    }
}

#[derive(Default)]
struct HumanReport {
    said: Said,
}

impl Report for HumanReport {
    fn event(&mut self, e: &Event) {
        outln!("{}", human(e));
        to_stderr(e);
    }
    fn tick(&mut self, a: &Assessment) {
        status_line(a, &mut self.said);
    }
}

/// The reason the last status line gave: a reason is said once and again when it changes,
/// not every tick (a 150-character "no GPU signal" every 5 s buries everything else).
#[derive(Default)]
struct Said {
    reason: Option<String>,
}

impl Said {
    /// The reason to print now: the new one, or a short "unchanged".
    fn reason(&mut self, now: Option<&String>) -> String {
        if now == self.reason.as_ref() {
            return if now.is_some() {
                "reason unchanged".into()
            } else {
                String::new()
            };
        }
        self.reason = now.cloned();
        now.cloned().unwrap_or_default()
    }
}

fn secs(s: f64) -> String {
    use crate::config::units::{duration_from_secs, format_duration};
    format_duration(duration_from_secs(s))
}

/// Every decision, in words, on stderr too (stdout may be discarded). What ends the watch
/// with a code other than 0 is an error, so `--quiet` keeps it.
fn to_stderr(e: &Event) {
    match e {
        Event::Breaker { .. } | Event::Done { code: 1.., .. } => tracing::error!("{}", human(e)),
        Event::Kill { .. }
        | Event::Stopped { .. }
        | Event::Signal { .. }
        | Event::Adopted { .. }
        | Event::PreviousWatchDied { .. } => tracing::warn!("{}", human(e)),
        Event::Relaunch { .. }
        | Event::Launched { .. }
        | Event::Exited { .. }
        | Event::VerdictIgnored { .. }
        | Event::Done { .. } => tracing::info!("{}", human(e)),
        _ => {}
    }
}

/// The status line every interval, through tracing (stderr).
fn status_line(a: &Assessment, said: &mut Said) {
    let step = a.last_step.map_or("-".into(), |s| s.to_string());
    tracing::info!(
        "{} (this sample: {}) step {step}, silent {}, limit {} ({}): {}",
        a.state.name(),
        a.raw.name(),
        secs(a.silent_s),
        secs(a.limit.seconds),
        a.limit.source,
        said.reason(a.reasons.first())
    );
}

fn state_text(s: &State) -> String {
    match s {
        State::Unknown { missing } => format!("unknown ({})", missing.join("; ")),
        State::Exited { code, signal } => crate::sentinel::exit_text(*code, *signal),
        other => other.name().to_string(),
    }
}

pub fn human(e: &Event) -> String {
    match e {
        Event::Start {
            run,
            pid,
            attached,
            ledger,
            dry_run,
        } => format!(
            "watch: {} run '{run}' pid {pid}; ledger {ledger}{}",
            if *attached { "attached to" } else { "started" },
            if *dry_run { " (dry run: nothing will be signalled)" } else { "" }
        ),
        Event::State {
            state,
            step,
            silent_s,
            limit_s,
            limit_source,
            reasons,
        } => format!(
            "state: {} at step {} (silent {}, limit {} from {limit_source}){}",
            state_text(state),
            step.map_or("-".into(), |s| s.to_string()),
            secs(*silent_s),
            secs(*limit_s),
            if reasons.is_empty() {
                String::new()
            } else {
                format!(": {}", reasons.join("; "))
            }
        ),
        Event::StaleLimit {
            seconds,
            longest_gap_s,
            in_use: true,
        } => format!(
            "stale limit calibrated: {seconds:.1}s (longest progress gap {longest_gap_s:.1}s), in use"
        ),
        Event::StaleLimit {
            seconds,
            longest_gap_s,
            in_use: false,
        } => format!(
            "calibrated stale limit would be {seconds:.1}s (longest progress gap {longest_gap_s:.1}s); the declared stale limit is in use"
        ),
        Event::Kill {
            seq,
            reason,
            why,
            pids,
            dry_run,
        } => format!(
            "{}kill ({reason}{}) pids {pids:?}: ledger #{seq}",
            if *dry_run { "dry run, would " } else { "" },
            if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            }
        ),
        Event::Adopted {
            seq,
            pid,
            launched_seq,
            earlier_watch_done,
        } => format!(
            "the run's trainer pid {pid} (launched at ledger #{launched_seq}{}) is still running: attaching to it instead of starting another: ledger #{seq}",
            if *earlier_watch_done { "" } else { " by a watch that died without a done record" }
        ),
        Event::PreviousWatchDied {
            seq,
            pid,
            launched_seq,
        } => format!(
            "the earlier watch of this run died without a done record (killed?); its trainer pid {pid} (ledger #{launched_seq}) is gone: going on: ledger #{seq}"
        ),
        Event::VerdictIgnored {
            seq,
            verdict_seq,
            check,
            step,
            why,
        } => format!(
            "critic verdict #{verdict_seq} (check '{check}' failed at step {step}) is not about this launch, not acted on: {why}: ledger #{seq}"
        ),
        Event::Stopped {
            sigterm,
            sigkill,
            survivors,
        } => format!("stopped: SIGTERM {sigterm:?}, SIGKILL {sigkill:?}, still alive {survivors:?}"),
        Event::Exited {
            code,
            signal,
            lived_s,
        } => format!(
            "{} after {lived_s:.1}s",
            crate::sentinel::exit_text(*code, *signal)
        ),
        Event::Relaunch {
            seq,
            attempt,
            ckpt,
            step,
            diverged_at,
            backoff_s,
        } => format!(
            "relaunch #{attempt} from {} (step {}){} in {backoff_s:.1}s: ledger #{seq}",
            ckpt.as_deref().unwrap_or("scratch"),
            step.map_or("-".into(), |s| s.to_string()),
            diverged_at.map_or(String::new(), |d| format!(", diverged at {d}"))
        ),
        Event::Launched { pid } => format!("launched pid {pid}"),
        Event::Breaker {
            seq,
            breaker,
            evidence,
        } => format!("breaker {breaker} open: {evidence}: ledger #{seq}"),
        Event::Signal {
            signal,
            forwarded_to,
        } => format!("{signal} received; forwarded to {forwarded_to:?}"),
        Event::Done { code, reason } => format!("done ({code}): {reason}"),
    }
}

#[cfg(test)]
mod said_tests {
    use super::Said;

    #[test]
    fn a_reason_is_said_once_and_again_when_it_changes() {
        let mut said = Said::default();
        let gpu =
            "no GPU signal (no NVIDIA driver: libnvidia-ml.so could not be loaded)".to_string();
        assert_eq!(said.reason(Some(&gpu)), gpu);
        assert_eq!(said.reason(Some(&gpu)), "reason unchanged");
        let other = "silent 40s".to_string();
        assert_eq!(said.reason(Some(&other)), other);
        assert_eq!(said.reason(None), "");
        assert_eq!(said.reason(None), "");
        assert_eq!(said.reason(Some(&gpu)), gpu);
    }
}
