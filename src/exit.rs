//! The exit-code table, in one place. README's table is generated from the same words.
//!
//! Commands that *judge* (critic --once, probe, hygiene checks, bench, quarantine prove, report)
//! follow the monitoring-plugin convention (Nagios/Icinga/Sensu): 0 ok, 1 warn, 2 fail, 3
//! unknown; `report` reads them as ok, attention, stopped, cannot judge.
//! Commands that *act* (publish, watch, quarantine add/release, ledger): 0 done, 1 not done,
//! 2 usage error. `watch` adds two codes of its own so a scheduler wrapper can tell
//! "gave up on purpose" (75) and "preempted, requeue me" (76) from "crashed".

/// Judging: everything checked is fine.
pub const OK: u8 = 0;
/// Judging: at least one check warns, none fails.
pub const WARN: u8 = 1;
/// Judging: at least one check fails.
pub const FAIL: u8 = 2;
/// Judging: could not judge (no data, unreadable input, roger's own error).
pub const UNKNOWN: u8 = 3;

/// Acting: done.
pub const DONE: u8 = 0;
/// Acting: not done; the cause is on stderr as `roger: error: ...`.
pub const NOT_DONE: u8 = 1;
/// Bad command line of an acting command (clap's own code as well). A judging command's bad
/// command line is UNKNOWN (3): in the monitoring-plugin convention 2 is CRITICAL, and a typo
/// in a Nagios/Icinga check must not page as a failing run.
pub const USAGE: u8 = 2;
/// `roger watch`: a breaker opened or the relaunch budget is spent — do NOT restart roger.
pub const DO_NOT_RESTART: u8 = 75;
/// `roger watch` under `[preempt]`: the hand-off after a notice is done (saved or not, the run
/// tree stopped) — requeue me. The default of `[preempt] requeue_exit_code`.
pub const REQUEUE: u8 = crate::config::preempt::DEFAULT_REQUEUE_EXIT_CODE;

/// How a command's failure to even run is reported: judges say "unknown", actors "not done".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Judge,
    Actor,
}

impl Role {
    pub fn error_code(self) -> u8 {
        match self {
            Role::Judge => UNKNOWN,
            Role::Actor => NOT_DONE,
        }
    }
}

/// (code, meaning) rows for `--help` and the README.
pub const TABLE: &[(u8, &str, &str)] = &[
    (OK, "judge", "ok: every check passed"),
    (
        WARN,
        "judge",
        "warn: something needs a look, nothing failed",
    ),
    (FAIL, "judge", "fail/critical: at least one check failed"),
    (
        UNKNOWN,
        "judge",
        "unknown: could not judge (no data, unreadable input, own error, bad command line)",
    ),
    (DONE, "act", "done"),
    (
        NOT_DONE,
        "act",
        "not done: one-line cause on stderr (`roger: error: ...`)",
    ),
    (USAGE, "act", "usage error (bad flags or arguments)"),
    (
        DO_NOT_RESTART,
        "watch",
        "breaker open or relaunch budget spent: do not restart",
    ),
    (
        REQUEUE,
        "watch",
        "[preempt] hand-off done after a notice: requeue me ([preempt] requeue_exit_code)",
    ),
];
