//! Hygiene: the disk before the emergency (measure, forecast, prune), clean logs, flapping
//! checks and regressions against a baseline run. Decisions are pure functions here; the
//! measuring and file edges are small and named.

pub mod baseline;
pub mod clean;
pub mod clean_file;
pub mod disk;
pub mod disk_tick;
pub mod flap;
pub mod prune;
pub mod regress;

use serde::Serialize;

/// A hygiene verdict, ordered by severity for "worst of".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Unknown,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Unknown => "unknown",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }

    /// The monitoring-plugin exit code (judging commands).
    pub fn exit_code(self) -> u8 {
        match self {
            Status::Pass => crate::exit::OK,
            Status::Warn => crate::exit::WARN,
            Status::Fail => crate::exit::FAIL,
            Status::Unknown => crate::exit::UNKNOWN,
        }
    }

    /// Worst of a set; an empty set is unknown (nothing was judged, never `pass`).
    pub fn worst(all: impl IntoIterator<Item = Status>) -> Status {
        all.into_iter().max().unwrap_or(Status::Unknown)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
