//! Counts of the operations that can wait on a busy disk or another process (fsyncs,
//! directories made and removed, children started and waited on), bumped where they happen:
//! the seams in `sys/` and `publish/`. `ROGER_FAILPOINT_COUNT=<file>` makes `publish --detach`
//! write them as it returns (test-only: `publish::failpoint`), so a test sees what the caller's
//! path costs without strace. Counting is a relaxed atomic add, cheap enough to stay on.

use std::sync::atomic::{AtomicU32, Ordering};

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
        let how = super::fsx::Replace::new(super::fsx::Durability::Atomic, 0o644);
        if let Err(e) = super::fsx::write_atomic(p.as_ref(), counts().to_string().as_bytes(), how) {
            eprintln!("roger: {COUNT_ENV}: writing {}: {e}", p.to_string_lossy());
        }
    }
}
