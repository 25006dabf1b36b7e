//! roger: a guard for long GPU training runs. `run` parses the command line, builds the real
//! context, dispatches to `cmd/`, and maps the outcome onto the exit-code table.

pub mod bench;
pub mod checkpoints;
pub mod cli;
pub mod cmd;
pub mod colour;
pub mod config;
pub mod critic;
pub mod digest;
pub mod exit;
pub mod export;
pub mod gpu;
pub mod hygiene;
pub mod init;
pub mod ledger;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod out;
pub mod preempt;
pub mod probe;
pub mod progress;
pub mod publish;
pub mod quarantine;
pub mod ranks;
pub mod report;
pub mod schedule;
pub mod sentinel;
pub mod status;
pub mod sys;
pub mod untrusted;
pub mod watch;

use clap::Parser;
use std::ffi::OsString;

/// The whole command; returns the exit code (see `exit`).
pub fn run(args: impl IntoIterator<Item = OsString>) -> u8 {
    let args: Vec<OsString> = args.into_iter().collect();
    let parsed = match cli::monitor_form(&args) {
        Some(c) => {
            // Nothing changed since this very check last ran: its answer, without reading.
            if let cli::Command::Critic(cmd::critic::CriticArgs {
                answer: Some(req),
                now,
                ..
            }) = &c.command
            {
                if let Some(code) = cmd::critic_answer::replay(req, *now) {
                    return code;
                }
            }
            Ok(c)
        }
        None => cli::Cli::try_parse_from(&args),
    };
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            if !e.use_stderr() {
                return 0;
            }
            // A typo in a monitoring check must read UNKNOWN (3), not CRITICAL (2).
            return match cli::role_of(&args) {
                exit::Role::Judge => exit::UNKNOWN,
                exit::Role::Actor => exit::USAGE,
            };
        }
    };
    out::set_quiet(cli.quiet);
    colour::init(cli.color);
    logging::init(cli.verbose, cli.quiet);
    let global = cli::Global {
        config: cli.config.clone(),
    };
    let (role, result) = cmd::dispatch(&global, cli.command);
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roger: error: {e:#}");
            role.error_code()
        }
    }
}
