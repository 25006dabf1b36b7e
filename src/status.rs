//! The verdict statuses every judging command shares (ARCHITECTURE.md): `pass`, `warn`, `fail`,
//! `unknown` — declared in order of severity so `max` is the worst, and `unknown` (could not
//! judge) is never mistaken for `pass`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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

    /// The monitoring-plugin exit code of judging commands (0/1/2/3).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_and_codes() {
        assert_eq!(
            Status::worst([Status::Pass, Status::Unknown]),
            Status::Unknown
        );
        assert_eq!(Status::worst([Status::Warn, Status::Fail]), Status::Fail);
        assert_eq!(Status::worst([]), Status::Unknown);
        assert_eq!(Status::Fail.exit_code(), 2);
        assert_eq!(Status::Unknown.exit_code(), 3);
    }
}
