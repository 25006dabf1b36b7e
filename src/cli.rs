//! The command line (clap derive). Only this file and `cmd/` know about clap; each
//! subcommand's Args struct lives beside its handler in `cmd/`.

use crate::cmd;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Exit codes:
  judging commands (critic --once, probe, hygiene checks, bench, check, status, quarantine prove):
    0 ok   1 warn   2 fail   3 unknown (could not judge; a usage error too)
  acting commands (init, publish, watch, quarantine add/release, ledger):
    0 done   1 not done (cause on stderr)   2 usage error
  watch: 75 = breaker open or relaunch budget spent: do not restart
         76 = [preempt] hand-off done: requeue me (requeue_exit_code)

Config: ./roger.toml, or --config FILE / ROGER_CONFIG. See roger.example.toml.
Colour: --color auto|always|never; NO_COLOR and CLICOLOR_FORCE are honoured.

First steps:
  roger init --log train_log.jsonl   write roger.toml from the run's own log
  roger check                        validate it and show the phases
  roger status                       the run at a glance (add --watch to keep it on screen)";

/// roger: a guard for long GPU training runs.
///
/// It knows what the run should look like (roger.toml), notices when it doesn't, keeps
/// checkpoints intact and fixes what can be fixed — always writing the reason to an
/// append-only, hash-chained ledger first.
#[derive(Debug, Parser)]
#[command(name = "roger", version, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    /// Config file (default: ./roger.toml if present).
    #[arg(short, long, global = true, env = "ROGER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// More log output on stderr (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only errors on stderr (no warnings, notes or progress), on every command.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Colour for statuses: auto (a terminal, unless NO_COLOR; CLICOLOR_FORCE forces it),
    /// always, never.
    #[arg(long, global = true, value_enum, default_value_t = crate::colour::When::Auto, value_name = "WHEN")]
    pub color: crate::colour::When,

    #[command(subcommand)]
    pub command: Command,
}

// Deferred: a run builds only the subcommand it was given (clap built all ~20 with every
// argument on each start: 0.4 M of a repeated `critic --once`'s 2.7 M instructions).
// Whatever walks the whole tree uses [`full_command`].
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Grade the run against its declared curves (lr schedule, loss band and slope, spikes,
    /// grad norm, evals, tokens/s, VRAM, staleness); every verdict goes to the ledger.
    Critic(cmd::critic::CriticArgs),
    /// Supervise a training run (or attach to one): tell wedge, grind, zombie and crash apart,
    /// kill only after a ledger record, relaunch from the last good checkpoint.
    Watch(cmd::watch::WatchArgs),
    /// Publish a checkpoint crash-safely: copy, fsync, verify from disk, rename, latest.json,
    /// ledger record, retention. `--verify` re-hashes a published one.
    Publish(cmd::publish::PublishArgs),
    /// The disk before the emergency (free space, growth, hours to full, prune), clean logs
    /// (ANSI, tqdm redraws), flapping checks, regressions against a baseline run.
    Hygiene(cmd::hygiene::HygieneArgs),
    /// Tell a person: `test` sends a test message on every `[notify]` channel, `digest`
    /// sends `roger report --text` now.
    Notify(cmd::notify::NotifyArgs),
    /// Set suspect items aside (moved, never copied) until a trial proves them good:
    /// add, list, show, prove, release, purge, and scan the run's outputs.
    Quarantine(cmd::quarantine::QuarantineArgs),
    /// The machine under the run: GPUs (throttling, ECC, XIDs), who holds VRAM (orphans),
    /// host memory, free space and filesystem kind of every path. Exit 0 ok, 1 warn, 2 fail,
    /// 3 unknown. `--record F` saves GPU snapshots for `[gpu] source = "replay"`.
    Probe(cmd::probe::ProbeArgs),
    /// GEMM TFLOPS per dtype and memory bandwidth against the GPU's dense spec (cuBLAS; CPU
    /// GFLOPS without a GPU), and MFU arbitration: with --params and the run's tokens/s, says
    /// whether the GPU or the code is slow. Exit 0 ok, 1 warn, 2 fail, 3 unknown.
    Bench(cmd::bench::BenchArgs),
    /// Write a commented roger.toml for a run that already has a log: detects the format,
    /// maps the keys, fits the lr schedule and proposes per-phase bands from the data.
    Init(cmd::init::InitArgs),
    /// Validate roger.toml and print the resolved phases.
    Check(cmd::check::CheckArgs),
    /// Read and verify the append-only ledger.
    Ledger(cmd::ledger::LedgerArgs),
    /// The night at a glance: a self-contained HTML page with plots (default
    /// roger-report.html beside the ledger), or a 20-line digest (--text), from roger.toml,
    /// the log and the ledger alone. Exit 0 ok, 1 attention, 2 stopped, 3 cannot judge.
    Report(cmd::report::ReportArgs),
    /// The run at a glance, one screen: state and why, step and ETA, the last verdict worst
    /// check first, last good checkpoint, disk, relaunches, and when roger last looked. Exit
    /// 0 ok, 1 attention, 2 stopped, 3 cannot judge. `--watch` redraws in place.
    Status(cmd::status::StatusArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::completions::CompletionsArgs),
}

/// Subcommands that judge (their usage errors exit 3, UNKNOWN): named here, from the raw
/// command line, because a command line that does not parse has no `Command` to ask.
const JUDGES: &[&str] = &["critic", "probe", "bench", "check", "status"];

/// Whether a (possibly malformed) command line names a judging command. Global options
/// before the subcommand are skipped (`-c FILE`, `--config FILE`, `-v`, `-q`).
pub fn role_of(args: &[std::ffi::OsString]) -> crate::exit::Role {
    use crate::exit::Role;
    let words: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut it = words.iter();
    let mut command = None;
    while let Some(w) = it.next() {
        if w == "-c" || w == "--config" {
            it.next();
        } else if !w.starts_with('-') {
            command = Some(w.as_str());
            break;
        }
    }
    let rest: Vec<&str> = it.map(String::as_str).collect();
    let first_of = |names: &[&str]| rest.iter().find(|w| names.contains(w)).copied();
    let judge = match command {
        Some(c) if JUDGES.contains(&c) => true,
        Some("hygiene") => first_of(&["disk", "clean", "flap", "regress"]) != Some("clean"),
        Some("quarantine") => matches!(
            first_of(&["add", "list", "show", "prove", "release", "purge", "scan"]),
            Some("prove" | "scan")
        ),
        _ => false,
    };
    if judge {
        Role::Judge
    } else {
        Role::Actor
    }
}

/// The command line monitors call every few minutes — `roger critic [--once] [--json]
/// [--heartbeat] [--full-read] [--now RFC3339]` with `-q` and `-c/--config FILE` anywhere
/// after `roger` — read without clap. Even deferred, clap's tree cost a repeated check 0.3 M instructions
/// and 45 page faults (a fifth of its time); this costs a few hundred. Anything else — any
/// other flag, a repeated one, a value that looks like a flag, `ROGER_CONFIG` set (clap
/// reads it) — is `None`, and clap parses it and reports errors as it always did. The tests
/// prove the answer equals clap's on every combination of these words.
pub fn monitor_form(args: &[std::ffi::OsString]) -> Option<Cli> {
    if std::env::var_os("ROGER_CONFIG").is_some() {
        return None;
    }
    let (mut config, mut quiet, mut critic) = (None, false, false);
    let (mut once, mut json, mut heartbeat, mut full_read) = (false, false, false, false);
    let mut now = None;
    let mut words = args.iter().skip(1);
    let set = |flag: &mut bool| (!std::mem::replace(flag, true)).then_some(());
    while let Some(w) = words.next() {
        let w = w.to_str()?;
        match w {
            "critic" if !critic => critic = true,
            "-q" | "--quiet" => set(&mut quiet)?,
            "-c" | "--config" if config.is_none() => {
                let v = words.next()?;
                if v.is_empty() || v.to_str().is_some_and(|v| v.starts_with('-')) {
                    return None;
                }
                config = Some(PathBuf::from(v));
            }
            "--once" if critic => set(&mut once)?,
            "--json" if critic => set(&mut json)?,
            "--heartbeat" if critic => set(&mut heartbeat)?,
            "--full-read" if critic => set(&mut full_read)?,
            // Parsed as clap's value parser does (`FromStr`); a bad one is clap's to report.
            "--now" if critic && now.is_none() => now = Some(words.next()?.to_str()?.parse().ok()?),
            _ => match w.strip_prefix("--config=") {
                Some(v) if config.is_none() && !v.is_empty() => config = Some(PathBuf::from(v)),
                _ => return None,
            },
        }
    }
    critic.then(|| Cli {
        config,
        verbose: 0,
        quiet,
        color: crate::colour::When::Auto,
        command: Command::Critic(cmd::critic::CriticArgs {
            once,
            daemon: false,
            replay: false,
            interval: None,
            heartbeat,
            ledger: None,
            log: None,
            now,
            pids: Vec::new(),
            full_read,
            json,
            format: None,
            answer: (!heartbeat && !full_read).then(|| cmd::critic_answer::Request::new(args)),
        }),
    })
}

/// Options every subcommand sees, turned into plain values.
#[derive(Debug, Clone)]
pub struct Global {
    pub config: Option<PathBuf>,
}

/// The whole command tree with every subcommand expanded (the same subcommands and
/// arguments as before deferral): clap's `help` subcommand copies the subcommands' trees
/// when the root is built, so they must be expanded first (completion scripts offer
/// `roger help hygiene clean`). Expanded subcommands carry their own `help`, so that copy
/// now also lists e.g. `roger help hygiene help`, and zsh lists global options first.
pub fn full_command() -> clap::Command {
    use clap::CommandFactory;
    let mut expanded = Cli::command();
    expanded.build();
    let mut full = Cli::command();
    for sub in expanded
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
    {
        full = full.mut_subcommand(sub.get_name(), |_| sub.clone());
    }
    full.build();
    full
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every sequence of up to four of these words, `critic` placed anywhere: where the
    /// monitor form answers, clap answers the same (compared as printed).
    #[test]
    fn the_monitor_form_is_what_clap_would_parse() {
        let words: &[&[&str]] = &[
            &["--once"],
            &["--json"],
            &["--heartbeat"],
            &["--full-read"],
            &["-q"],
            &["--quiet"],
            &["--config", "a.toml"],
            &["-c", "b.toml"],
            &["--config=c.toml"],
            &["--now", "2023-11-14T22:15:00Z"],
            &["--now", "2023-11-14 22:15:00+02:00"],
            &["--now", "yesterday"],
            &["--config", "-x"],
            &["--config="],
            &["--daemon"],
            &["-v"],
            &["critic"],
        ];
        let (mut answered, mut compared) = (0, 0);
        let mut seq = vec![0usize; 0];
        fn each(n: usize, k: usize, seq: &mut Vec<usize>, f: &mut dyn FnMut(&[usize])) {
            f(seq);
            if seq.len() < k {
                for i in 0..n {
                    seq.push(i);
                    each(n, k, seq, f);
                    seq.pop();
                }
            }
        }
        each(words.len(), 4, &mut seq, &mut |picked| {
            for at in 0..=picked.len() {
                let mut argv: Vec<std::ffi::OsString> = vec!["roger".into()];
                for (i, &p) in picked.iter().enumerate() {
                    if i == at {
                        argv.push("critic".into());
                    }
                    argv.extend(words[p].iter().map(Into::into));
                }
                if at == picked.len() {
                    argv.push("critic".into());
                }
                compared += 1;
                if let Some(mut fast) = monitor_form(&argv) {
                    answered += 1;
                    // The answer cache's key is the monitor form's own addition.
                    if let Command::Critic(a) = &mut fast.command {
                        a.answer = None;
                    }
                    let clap = Cli::try_parse_from(&argv)
                        .unwrap_or_else(|e| panic!("{argv:?}: fast path answered, clap: {e}"));
                    assert_eq!(format!("{fast:?}"), format!("{clap:?}"), "{argv:?}");
                }
            }
        });
        // Not vacuous: the forms monitors use are answered without clap.
        assert!(answered > 2_000, "{answered} of {compared}");
        for argv in [
            &["roger", "critic"][..],
            &["roger", "critic", "--once"],
            &["roger", "-c", "x.toml", "critic", "--once", "--json"],
            &["roger", "critic", "--once", "--config=x.toml", "-q"],
            &["roger", "critic", "--once", "--now", "2023-11-14T22:15:00Z"],
        ] {
            let argv: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            assert!(monitor_form(&argv).is_some(), "{argv:?}");
        }
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Every flag and positional argument of every (sub)command says what it is for.
    #[test]
    fn every_argument_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if id == "help" || id == "version" || a.is_hide_set() {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(format!("{path} {} (the subcommand)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&full_command(), "roger", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }

    #[test]
    fn help_ends_with_the_first_three_commands() {
        let help = Cli::command().render_help().to_string();
        let tail: Vec<&str> = help.trim_end().lines().rev().take(4).collect();
        assert_eq!(tail[3], "First steps:", "{help}");
        assert!(tail[2].trim_start().starts_with("roger init"), "{help}");
        assert!(tail[1].trim_start().starts_with("roger check"), "{help}");
        assert!(tail[0].trim_start().starts_with("roger status"), "{help}");
    }

    #[test]
    fn command_lines() {
        let ok = [
            &["roger", "check"][..],
            &["roger", "--config", "x.toml", "check"],
            &["roger", "ledger", "verify"],
            &[
                "roger", "ledger", "tail", "-n", "5", "--kind", "publish", "--json",
            ],
            &["roger", "completions", "bash"],
            &["roger", "critic"],
            &["roger", "critic", "--once", "--json"],
            &["roger", "critic", "--once", "--now", "2024-05-01T12:00:00Z"],
            &[
                "roger",
                "critic",
                "--daemon",
                "--interval",
                "200ms",
                "--heartbeat",
            ],
            &["roger", "critic", "--replay", "--ledger", "l.jsonl"],
            &[
                "roger", "critic", "--pid", "7", "--pid", "8", "--log", "x.jsonl",
            ],
            &[
                "roger",
                "publish",
                "ckpt-10.pt",
                "--to",
                "ck",
                "--step",
                "10",
            ],
            &[
                "roger",
                "publish",
                "checkpoint-5/",
                "--keep-last",
                "2",
                "--json",
            ],
            &["roger", "publish", "--verify"],
            &[
                "roger",
                "publish",
                "--verify",
                "ck/ckpt-10.pt",
                "--to",
                "ck",
            ],
            &["roger", "hygiene", "disk", "--json"],
            &["roger", "hygiene", "disk", "--prune", "--dry-run"],
            &["roger", "hygiene", "clean"],
            &["roger", "hygiene", "clean", "-"],
            &[
                "roger",
                "hygiene",
                "clean",
                "train.log",
                "--in-place",
                "--keep-original",
            ],
            &[
                "roger", "hygiene", "flap", "--ledger", "l.jsonl", "--all", "--json",
            ],
            &[
                "roger",
                "quarantine",
                "add",
                "ck.pt",
                "--reason",
                "bad hash",
            ],
            &["roger", "quarantine", "--dir", "q", "list", "--json"],
            &["roger", "quarantine", "show", "2026", "--ledger", "l.jsonl"],
            &[
                "roger",
                "quarantine",
                "prove",
                "id",
                "--timeout",
                "10m",
                "--",
                "python",
                "-c",
                "x",
            ],
            &["roger", "quarantine", "release", "id"],
            &[
                "roger",
                "quarantine",
                "release",
                "id",
                "--force",
                "--reason",
                "checked",
            ],
            &[
                "roger",
                "quarantine",
                "purge",
                "--older-than",
                "7d",
                "--force",
            ],
            &[
                "roger",
                "quarantine",
                "scan",
                "--crashed",
                "--since",
                "2026-01-02T03:04:05Z",
            ],
            &[
                "roger",
                "quarantine",
                "scan",
                "out.json",
                "--crashed",
                "--since",
                "1700000000",
            ],
            &["roger", "probe"],
            &["roger", "probe", "--json", "--no-ledger"],
            &[
                "roger",
                "probe",
                "--record",
                "r.json",
                "--samples",
                "2",
                "--every",
                "10ms",
            ],
            &["roger", "probe", "--replay", "r.json", "--source", "replay"],
            &[
                "roger", "bench", "--device", "cpu", "--sizes", "64,128", "--iters", "2",
            ],
            &[
                "roger",
                "bench",
                "--dtypes",
                "bf16,fp16",
                "--params",
                "124e6",
                "--tokens-per-s",
                "5e4",
            ],
            &[
                "roger", "watch", "--", "python", "train.py", "--resume", "{ckpt}",
            ],
            &["roger", "watch", "--pid", "123", "--dry-run", "--json"],
            &["roger", "watch"],
        ];
        for argv in ok {
            assert!(Cli::try_parse_from(argv).is_ok(), "{argv:?}");
        }
        let bad = [
            &["roger"][..],
            &["roger", "ledger", "tail", "-n", "x"],
            &["roger", "completions", "tcsh"],
            &["roger", "-v", "-q", "check"],
            &["roger", "critic", "--once", "--daemon"],
            &["roger", "critic", "--replay", "--daemon"],
            &["roger", "critic", "--interval", "5s"],
            &["roger", "critic", "--daemon", "--interval", "0s"],
            &["roger", "critic", "--now", "yesterday"],
            &[
                "roger",
                "critic",
                "--daemon",
                "--now",
                "2024-05-01T12:00:00Z",
            ],
            &["roger", "publish"],
            &["roger", "publish", "x.pt", "--step", "ten"],
            &["roger", "publish", "--verify", "--step", "3"],
            &["roger", "publish", "x.pt", "--no-prune", "--keep-last", "2"],
            &["roger", "hygiene", "disk", "--dry-run"],
            &["roger", "hygiene", "regress"],
            &[
                "roger",
                "hygiene",
                "regress",
                "--baseline",
                "b",
                "--format",
                "xml",
            ],
            &["roger", "hygiene", "clean", "--keep-original"],
            &["roger", "quarantine", "add", "ck.pt"],
            &["roger", "quarantine", "prove", "id"],
            &["roger", "quarantine", "release", "id", "--force"],
            &["roger", "quarantine", "release", "id", "--reason", "x"],
            &["roger", "quarantine", "purge", "--older-than", "a week"],
            &[
                "roger",
                "quarantine",
                "scan",
                "--since",
                "2026-01-02T03:04:05Z",
            ],
            &["roger", "probe", "--samples", "2"],
            &["roger", "probe", "--record", "r.json", "--samples", "0"],
            &["roger", "probe", "--record", "r.json", "--every", "soon"],
            &["roger", "bench", "--device", "tpu"],
            &["roger", "bench", "--dtypes", "fp8"],
            &["roger", "bench", "--sizes", "64,0"],
            &["roger", "bench", "--iters", "0"],
            &["roger", "bench", "--params", "nan"],
            &["roger", "bench", "--tokens-per-s", "inf"],
            &["roger", "bench", "--gpus", "0"],
            &["roger", "watch", "--pid", "x"],
            &["roger", "watch", "--pid", "1", "--", "python"],
        ];
        for argv in bad {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
    }
}
