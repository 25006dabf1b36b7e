//! The OS readers that decisions consume (/proc, cgroups, mountinfo, statvfs, meminfo, WSL,
//! the clock, bounded child processes), each behind a small trait or plain function so the
//! logic above it is tested with fakes; the file-system idioms every writer shares (`fsx`);
//! the one way a helper is detached (`detach`). Nothing here decides.
//!
//! Not the only code that touches the OS: std's file and process APIs are used at every edge,
//! and a few edges call `libc`/`nix` themselves where the call is the point (publish's byte
//! path and locks, the ledger's flock, the watch's signals and children). Outside this
//! folder, only the files in ARCHITECTURE.md's OS table may name `libc` or `nix`, some to
//! call, some only for constants and types; decision code names neither. `tests/layout.rs`
//! reads that table and holds every file to it.

pub mod bounded;
pub mod cgroup;
pub mod clock;
pub mod detach;
pub mod disk;
pub mod environ;
pub mod fskind;
pub mod fsx;
pub mod host;
pub mod opcount;
pub mod owner;
pub mod pidinfo;
pub mod proc;
pub mod wsl;

pub use clock::{Clock, FakeClock, SystemClock};
