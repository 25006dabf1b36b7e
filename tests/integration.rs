//! One test binary: end-to-end tests that run the real `roger` against temp dirs.

mod util;

mod bad_input;
mod bench;
mod checkpoint_trust;
mod cli;
mod conventions;
mod critic;
mod critic_live;
mod export;
mod fake_gpu_libs;
mod gpu_check_script;
mod hygiene;
mod init;
mod layout;
mod ledger;
mod notify;
mod powercut;
mod probe;
mod props;
mod publish;
mod publish_detach;
mod quarantine;
mod ranks;
mod read_less;
mod real_configs;
mod real_logs;
mod remote_harness;
mod report;
mod slurm;
mod status;
mod tensorboard;
mod untrusted_ledger;
mod watch;
mod watch_lifecycle;
mod watch_shapes;
