//! One file per subcommand: turn Args into domain inputs, call the domain, print.

pub mod bench;
pub mod check;
pub mod completions;
pub mod critic;
pub mod critic_run;
pub mod fetch;
pub mod hygiene;
pub mod init;
pub mod ledger;
pub mod man;
pub mod notify;
pub mod probe;
pub mod publish;
pub mod publish_queue;
pub mod quarantine;
pub mod report;
pub mod status;
pub mod watch;

use crate::cli::{Command, Global};
use anyhow::Result;

/// Run a subcommand (its role, for the exit code of an error, is `exit::ROLES`').
pub fn dispatch(global: &Global, command: Command) -> Result<u8> {
    match command {
        Command::Init(a) => init::run(global, a),
        Command::Check(a) => check::run(global, a),
        Command::Ledger(a) => ledger::run(global, a),
        Command::Completions(a) => completions::run(a),
        Command::Man(a) => man::run(a),
        Command::Critic(a) => critic::run(global, a),
        Command::Publish(a) => publish::run(global, a),
        Command::Fetch(a) => fetch::run(global, a),
        Command::Hygiene(a) => hygiene::run(global, a),
        Command::Quarantine(a) => quarantine::run(global, a),
        Command::Probe(a) => probe::run(global, a),
        Command::Bench(a) => bench::run(global, a),
        Command::Notify(a) => notify::run(global, a),
        Command::Watch(a) => watch::run(global, a),
        Command::Report(a) => report::run(global, a),
        Command::Status(a) => status::run(global, a),
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
