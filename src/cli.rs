//! The command line (clap derive). Only this file and `cmd/` know about clap; each
//! subcommand's Args struct lives beside its handler in `cmd/`.

use crate::cmd;
use crate::exit::Role;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// `--help`'s closing text: the exit codes by role (`exit::TABLE`, `exit::ROLES`), then
/// config, colour and first steps.
fn after_help() -> String {
    use std::fmt::Write;
    // "judging commands (critic, probe, ...):" wrapped at 88 columns.
    let heading = |what: &str, role: Role| {
        let mut lines = vec![format!("  {what} commands (")];
        for (i, name) in crate::exit::commands_of(role).iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let last = lines.last_mut().expect("one line at least");
            if last.len() + sep.len() + name.len() > 88 {
                last.push(',');
                lines.push(format!("    {name}"));
            } else {
                last.push_str(sep);
                last.push_str(name);
            }
        }
        lines.join("\n") + "):"
    };
    let mut o = String::from("Exit codes:");
    for (group, title) in [
        ("judge", heading("judging", Role::Judge)),
        ("act", heading("acting", Role::Actor)),
        ("watch", "  watch:".to_string()),
    ] {
        let _ = write!(o, "\n{title}");
        for (code, _, meaning) in crate::exit::TABLE.iter().filter(|r| r.1 == group) {
            let _ = write!(o, "\n    {code:>2}  {meaning}");
        }
    }
    format!("{o}\n\n{AFTER_HELP}")
}

const AFTER_HELP: &str = "\
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
#[command(name = "roger", version = version(), after_help = after_help(), propagate_version = true)]
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
    /// The last good checkpoint from the bucket ([publish] remote) onto this machine,
    /// verified against its ledger record (the ledger is rebuilt from the bucket when there
    /// is none here). Exit 0 only with a verified file.
    Fetch(cmd::fetch::FetchArgs),
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
    /// Print the manual page roger(1) in roff (`roger man | man -l -`), or write one page per
    /// subcommand into a directory (--dir).
    Man(cmd::man::ManArgs),
}

/// `roger --version`: the crate's version and the commit it was built from, which the build
/// passes in as ROGER_COMMIT (the wheel build does: python/pyproject.toml). There is no build
/// script to ask git (tests/layout.rs), so a build without it says so instead of guessing.
pub fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        let commit = option_env!("ROGER_COMMIT").map(str::trim);
        match commit.filter(|c| !c.is_empty()) {
            Some(c) => format!("{} (commit {c})", env!("CARGO_PKG_VERSION")),
            None => format!(
                "{} (unknown commit: built without ROGER_COMMIT)",
                env!("CARGO_PKG_VERSION")
            ),
        }
    })
}

/// A parsed command line and the role of its subcommand (`exit::ROLES`); a command line that
/// does not parse comes back as clap's error with the role of the subcommand it names, which
/// clap finds by parsing it again with errors ignored (`roger --color never critic --bogus`
/// names `critic`, not `never`).
pub fn parse(args: &[std::ffi::OsString]) -> Result<(Cli, Role), (clap::Error, Role)> {
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = Cli::command();
    match cmd.try_get_matches_from_mut(args) {
        Ok(mut m) => {
            let role = crate::exit::role(&subcommand_path(&m));
            Cli::from_arg_matches_mut(&mut m)
                .map(|cli| (cli, role))
                .map_err(|e| (e.format(&mut cmd), role))
        }
        Err(e) => {
            let named = Cli::command()
                .ignore_errors(true)
                .try_get_matches_from(args)
                .map(|m| subcommand_path(&m))
                .unwrap_or_default();
            Err((e, crate::exit::role(&named)))
        }
    }
}

/// The subcommand names a parse reached, from the top (`["quarantine", "prove"]`).
fn subcommand_path(mut m: &clap::ArgMatches) -> Vec<String> {
    let mut path = Vec::new();
    while let Some((name, sub)) = m.subcommand() {
        path.push(name.to_string());
        m = sub;
    }
    path
}

/// Run a subcommand (its role, for the exit code of an error, is `exit::ROLES`').
pub fn dispatch(global: &cmd::Global, command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Init(a) => cmd::init::run(global, a),
        Command::Check(a) => cmd::check::run(global, a),
        Command::Ledger(a) => cmd::ledger::run(global, a),
        Command::Completions(a) => cmd::completions::run(a, full_command()),
        Command::Man(a) => cmd::man::run(a, full_command()),
        Command::Critic(a) => cmd::critic::run(global, a),
        Command::Publish(a) => cmd::publish::run(global, a),
        Command::Fetch(a) => cmd::fetch::run(global, a),
        Command::Hygiene(a) => cmd::hygiene::run(global, a),
        Command::Quarantine(a) => cmd::quarantine::run(global, a),
        Command::Probe(a) => cmd::probe::run(global, a),
        Command::Bench(a) => cmd::bench::run(global, a),
        Command::Notify(a) => cmd::notify::run(global, a),
        Command::Watch(a) => cmd::watch::run(global, a),
        Command::Report(a) => cmd::report::run(global, a),
        Command::Status(a) => cmd::status::run(global, a),
    }
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

    /// Every subcommand `--help` shows is listed in `exit::ROLES` (its usage errors and its
    /// failures exit by that role), and every listed path is a subcommand.
    #[test]
    fn every_subcommand_has_a_role() {
        fn walk(cmd: &clap::Command, path: &str, found: &mut Vec<String>) {
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                let p = format!("{path}{}", sub.get_name());
                walk(sub, &format!("{p} "), found);
                found.push(p);
            }
        }
        let mut found = Vec::new();
        walk(&full_command(), "", &mut found);
        let listed: Vec<&str> = crate::exit::ROLES.iter().map(|(p, _)| *p).collect();
        let unlisted: Vec<&String> = found
            .iter()
            .filter(|p| !listed.contains(&p.as_str()))
            .collect();
        assert!(
            unlisted.is_empty(),
            "subcommands without a role in exit::ROLES: {unlisted:?}"
        );
        let stale: Vec<&&str> = listed
            .iter()
            .filter(|p| !found.iter().any(|f| f == *p))
            .collect();
        assert!(
            stale.is_empty(),
            "exit::ROLES lists what is no subcommand: {stale:?}"
        );
    }

    /// The role is clap's subcommand, whatever global options stand before it.
    #[test]
    fn a_usage_error_takes_the_role_of_the_subcommand_clap_finds() {
        for (argv, role) in [
            (&["roger", "critic", "--bogus"][..], Role::Judge),
            (
                &["roger", "--color", "never", "critic", "--bogus"],
                Role::Judge,
            ),
            (
                &[
                    "roger",
                    "-c",
                    "x.toml",
                    "--color=never",
                    "report",
                    "--bogus",
                ],
                Role::Judge,
            ),
            (
                &["roger", "hygiene", "clean", "--keep-original"],
                Role::Actor,
            ),
            (&["roger", "-v", "hygiene", "flap", "--bogus"], Role::Judge),
            (&["roger", "quarantine", "add", "x"], Role::Actor),
            (&["roger", "quarantine", "scan", "--bogus"], Role::Judge),
            (
                &["roger", "--color", "critic", "publish", "--bogus"],
                Role::Actor,
            ),
            (&["roger", "frobnicate"], Role::Actor),
            (&["roger"], Role::Actor),
        ] {
            let args: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            match parse(&args) {
                Ok(_) => panic!("{argv:?} parsed"),
                Err((_, r)) => assert_eq!(r, role, "{argv:?}"),
            }
        }
        let args: Vec<std::ffi::OsString> =
            ["roger", "-q", "quarantine", "prove", "id", "--", "true"]
                .iter()
                .map(Into::into)
                .collect();
        assert!(matches!(parse(&args), Ok((_, Role::Judge))));
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
