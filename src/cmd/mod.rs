//! One file per subcommand: turn Args into domain inputs, call the domain, print. Below the
//! command line: `crate::cli` holds the clap tree and dispatches here; nothing here names
//! `crate::cli` (the clap tree reaches `man` and `completions` as an argument).

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

use anyhow::Result;

/// Options every subcommand sees, turned into plain values by the command line (`crate::cli`,
/// which builds it and dispatches here: cli -> cmd, never back).
#[derive(Debug, Clone)]
pub struct Global {
    pub config: Option<std::path::PathBuf>,
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
