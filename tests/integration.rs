//! One test binary: end-to-end tests that run the real `roger` against temp dirs.

mod util;

mod bad_input;
mod bench;
mod checkpoint_trust;
mod cli;
mod critic;
mod hygiene;
mod ledger;
mod probe;
mod publish;
mod quarantine;
mod real_configs;
mod real_logs;
mod watch;
