//! One file per subcommand: turn Args into domain inputs, call the domain, print.

pub mod bench;
pub mod check;
pub mod completions;
pub mod critic;
pub mod critic_answer;
pub mod critic_run;
pub mod hygiene;
pub mod init;
pub mod ledger;
pub mod notify;
pub mod probe;
pub mod publish;
pub mod publish_queue;
pub mod quarantine;
pub mod report;
pub mod status;
pub mod watch;

use crate::cli::{Command, Global};
use crate::exit::Role;
use anyhow::Result;

/// Run a subcommand; the role says how an error maps to an exit code.
pub fn dispatch(global: &Global, command: Command) -> (Role, Result<u8>) {
    match command {
        Command::Init(a) => (Role::Actor, init::run(global, a)),
        Command::Check(a) => (Role::Judge, check::run(global, a)),
        Command::Ledger(a) => (Role::Actor, ledger::run(global, a)),
        Command::Completions(a) => (Role::Actor, completions::run(a)),
        Command::Critic(a) => (Role::Judge, critic::run(global, a)),
        Command::Publish(a) => (Role::Actor, publish::run(global, a)),
        Command::Hygiene(a) => (hygiene::role(&a), hygiene::run(global, a)),
        Command::Quarantine(a) => (quarantine::role(&a), quarantine::run(global, a)),
        Command::Probe(a) => (Role::Judge, probe::run(global, a)),
        Command::Bench(a) => (Role::Judge, bench::run(global, a)),
        Command::Notify(a) => (Role::Actor, notify::run(global, a)),
        Command::Watch(a) => (Role::Actor, watch::run(global, a)),
        Command::Report(a) => (Role::Judge, report::run(global, a)),
        Command::Status(a) => (Role::Judge, status::run(global, a)),
    }
}

/// The ledger path: `--ledger`, else the config's, else an error saying how to give one.
pub fn ledger_path(
    global: &Global,
    explicit: Option<&std::path::Path>,
) -> Result<std::path::PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    match crate::config::discover(global.config.as_deref())? {
        Some(c) => Ok(c.ledger_path()),
        None => anyhow::bail!(
            "no ledger given: pass --ledger FILE, or --config FILE / ./roger.toml whose [run] names it"
        ),
    }
}
