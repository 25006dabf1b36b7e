//! roger: a guard for long GPU training runs. `run` parses the command line, builds the real
//! context, dispatches to `cmd/`, and maps the outcome onto the exit-code table.

pub mod bench;
pub mod checkpoints;
pub(crate) mod cli;
pub mod cluster;
pub mod cmd;
pub(crate) mod colour;
pub mod config;
pub mod critic;
pub mod digest;
pub(crate) mod exit;
pub(crate) mod export;
pub mod gpu;
pub mod hygiene;
pub(crate) mod init;
pub mod ledger;
pub(crate) mod logging;
pub mod metrics;
pub(crate) mod notify;
pub(crate) mod out;
pub(crate) mod preempt;
pub(crate) mod probe;
pub(crate) mod progress;
pub mod publish;
pub(crate) mod quarantine;
pub(crate) mod ranks;
pub mod remote;
pub mod report;
pub mod schedule;
pub(crate) mod sentinel;
pub(crate) mod status;
pub mod sys;
// Fuzz targets' and property tests' entry points, not an API (ARCHITECTURE.md says why it
// is here and not in fuzz/).
#[doc(hidden)]
pub mod untrusted;
pub(crate) mod watch;

use std::ffi::OsString;

/// The whole command; returns the exit code (see `exit`).
pub fn run(args: impl IntoIterator<Item = OsString>) -> u8 {
    // Retention reads the other nodes' parts through the cluster store (publish cannot call
    // cluster itself: the store may be the bucket, whose client depends on publish).
    publish::retention::read_parts_with(cluster::parts::others_of);
    let args: Vec<OsString> = args.into_iter().collect();
    let (cli, role) = match cli::parse(&args) {
        Ok(parsed) => parsed,
        Err((e, role)) => {
            let _ = e.print();
            if !e.use_stderr() {
                return 0;
            }
            // A typo in a monitoring check must read UNKNOWN (3), not CRITICAL (2).
            return exit::usage_code(role);
        }
    };
    out::set_quiet(cli.quiet);
    colour::init(cli.color);
    logging::init(cli.verbose, cli.quiet);
    let global = cmd::Global {
        config: cli.config.clone(),
    };
    match cli::dispatch(&global, cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roger: error: {e:#}");
            role.error_code()
        }
    }
}
