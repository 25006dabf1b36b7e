//! Test-only crash injection. `ROGER_FAILPOINT=<name>` makes `roger publish` abort (no
//! unwinding, no destructors: as close to a power cut or `kill -9` as a process can get) at
//! the named step boundary; `ROGER_FAULT_TRUNCATE_AFTER_FSYNC=<bytes>` cuts the staging copy
//! short after its fsync succeeded (the WSL drvfs/9p failure) so verification has to catch it.
//! `ROGER_FAILPOINT_COUNT=<file>` makes `publish --detach` write, as it returns, how many
//! fsyncs, directories made and removed, children started and children waited on it did (the
//! seams count them: `count`), so a test sees what the caller's path costs without strace.
//! All are documented as test-only; without them nothing here does anything but count.

use std::sync::OnceLock;

pub const ENV: &str = "ROGER_FAILPOINT";
pub const TRUNCATE_ENV: &str = "ROGER_FAULT_TRUNCATE_AFTER_FSYNC";
/// With `TRUNCATE_ENV`: only the staging file whose name is this one (one shard of many).
pub const TRUNCATE_ONLY_ENV: &str = "ROGER_FAULT_TRUNCATE_ONLY";
pub use crate::sys::opcount::{count, counts, write_counts, Op, COUNT_ENV};

/// Every failpoint, in the order publish passes them.
pub const ALL: &[&str] = &[
    "after_lock",
    "after_staging_write",
    "after_fsync",
    "after_verify",
    "after_intent",
    "after_prev_link",
    "after_rename",
    "before_ledger",
    "after_ledger",
    "before_manifest",
    "after_manifest",
    "after_prune_record",
];

fn armed() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED
        .get_or_init(|| std::env::var(ENV).ok().filter(|s| !s.is_empty()))
        .as_deref()
}

/// Abort here if this failpoint is armed.
pub fn hit(name: &str) {
    debug_assert!(ALL.contains(&name), "unknown failpoint {name}");
    if armed() == Some(name) {
        eprintln!("roger: failpoint {name}: aborting (test-only {ENV})");
        std::process::abort();
    }
}

/// The length to truncate a staging file to after its fsync, when the fault is switched on.
pub fn truncate_after_fsync(staging: &std::path::Path) -> Option<u64> {
    let len = std::env::var(TRUNCATE_ENV).ok()?.trim().parse().ok()?;
    match std::env::var(TRUNCATE_ONLY_ENV) {
        Ok(only) if !only.is_empty() => {
            (staging.file_name().and_then(|n| n.to_str()) == Some(only.as_str())).then_some(len)
        }
        _ => Some(len),
    }
}
