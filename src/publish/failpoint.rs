//! Test-only crash injection. `ROGER_FAILPOINT=<name>` makes `roger publish` abort (no
//! unwinding, no destructors: as close to a power cut or `kill -9` as a process can get) at
//! the named step boundary; `ROGER_FAULT_TRUNCATE_AFTER_FSYNC=<bytes>` cuts the staging copy
//! short after its fsync succeeded (the WSL drvfs/9p failure) so verification has to catch it.
//! `ROGER_FAILPOINT_COUNT=<file>` makes `publish --detach` write, as it returns, how many
//! fsyncs, directories made and removed, children started and children waited on it did (the
//! seams count them: `count`), so a test sees what the caller's path costs without strace.
//! All are documented as test-only; without them nothing here does anything but count.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

pub const ENV: &str = "ROGER_FAILPOINT";
pub const TRUNCATE_ENV: &str = "ROGER_FAULT_TRUNCATE_AFTER_FSYNC";
/// With `TRUNCATE_ENV`: only the staging file whose name is this one (one shard of many).
pub const TRUNCATE_ONLY_ENV: &str = "ROGER_FAULT_TRUNCATE_ONLY";
/// Where `publish --detach` writes its operation counts (test-only).
pub const COUNT_ENV: &str = "ROGER_FAILPOINT_COUNT";

/// An operation that can wait on a busy disk or on another process, counted where it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// fsync/fdatasync of a file or a directory.
    Fsync,
    /// A directory created.
    MakeDir,
    /// A directory removed.
    RemoveDir,
    /// A child process started.
    Spawn,
    /// This process blocked until a child did something (exec'd, or ended).
    WaitChild,
}

const OPS: [(Op, &str); 5] = [
    (Op::Fsync, "fsync"),
    (Op::MakeDir, "make_dir"),
    (Op::RemoveDir, "remove_dir"),
    (Op::Spawn, "spawn"),
    (Op::WaitChild, "wait_child"),
];

static COUNTS: [AtomicU32; 5] = [const { AtomicU32::new(0) }; 5];

/// Count one `op` (a relaxed atomic add: free enough to stay in production code).
pub fn count(op: Op) {
    COUNTS[op as usize].fetch_add(1, Ordering::Relaxed);
}

/// The counts so far, by name.
pub fn counts() -> serde_json::Value {
    OPS.iter()
        .map(|(op, name)| {
            (
                name.to_string(),
                serde_json::Value::from(COUNTS[*op as usize].load(Ordering::Relaxed)),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// With `COUNT_ENV` set: write the counts there (a test reads them).
pub fn write_counts() {
    if let Some(p) = std::env::var_os(COUNT_ENV).filter(|p| !p.is_empty()) {
        if let Err(e) = std::fs::write(&p, counts().to_string()) {
            eprintln!("roger: {COUNT_ENV}: writing {}: {e}", p.to_string_lossy());
        }
    }
}

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
