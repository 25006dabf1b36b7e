//! The exit-code table and which commands judge or act ([`ROLES`]), in one place: `--help`
//! and the error paths read them from here.
//!
//! Commands that *judge* follow the monitoring-plugin convention (Nagios/Icinga/Sensu): 0 ok,
//! 1 warn, 2 fail, 3 unknown; `report` and `status` read them as ok, attention, stopped,
//! cannot judge. Commands that *act*: 0 done, 1 not done, 2 usage error. `watch` adds two codes of its own so a scheduler wrapper can tell
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
pub const REQUEUE: u8 = 76;

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

/// Every subcommand's role, by its path of names. A path takes the role of its longest listed
/// prefix (`quarantine list` is `quarantine`'s); a command line naming no subcommand acts.
/// `cli`'s tests check that every subcommand in `--help` is listed here.
pub const ROLES: &[(&str, Role)] = &[
    ("critic", Role::Judge),
    ("watch", Role::Actor),
    ("publish", Role::Actor),
    ("fetch", Role::Actor),
    ("hygiene", Role::Judge),
    ("hygiene disk", Role::Judge),
    ("hygiene clean", Role::Actor),
    ("hygiene flap", Role::Judge),
    ("hygiene regress", Role::Judge),
    ("notify", Role::Actor),
    ("notify test", Role::Actor),
    ("notify digest", Role::Actor),
    ("quarantine", Role::Actor),
    ("quarantine add", Role::Actor),
    ("quarantine list", Role::Actor),
    ("quarantine show", Role::Actor),
    ("quarantine prove", Role::Judge),
    ("quarantine release", Role::Actor),
    ("quarantine purge", Role::Actor),
    ("quarantine scan", Role::Judge),
    ("probe", Role::Judge),
    ("bench", Role::Judge),
    ("init", Role::Actor),
    ("check", Role::Judge),
    ("ledger", Role::Actor),
    ("ledger verify", Role::Actor),
    ("ledger tail", Role::Actor),
    ("ledger note", Role::Actor),
    ("report", Role::Judge),
    ("status", Role::Judge),
    ("completions", Role::Actor),
    ("man", Role::Actor),
];

/// The role of the subcommand at `path` (names from the top: `["hygiene", "clean"]`).
pub fn role<S: AsRef<str>>(path: &[S]) -> Role {
    (0..=path.len())
        .rev()
        .find_map(|n| {
            let key = path[..n]
                .iter()
                .map(AsRef::as_ref)
                .collect::<Vec<_>>()
                .join(" ");
            ROLES.iter().find(|(p, _)| *p == key).map(|(_, r)| *r)
        })
        .unwrap_or(Role::Actor)
}

/// The listed paths of one role, for `--help` ("critic, probe, hygiene disk, ...").
pub fn commands_of(role: Role) -> Vec<&'static str> {
    ROLES
        .iter()
        .filter(|(_, r)| *r == role)
        .map(|(p, _)| *p)
        .filter(|p| {
            // A child of a listed parent with the same role adds nothing to the list.
            !ROLES
                .iter()
                .any(|(q, r)| *r == role && p.len() > q.len() && p.starts_with(&format!("{q} ")))
        })
        .collect()
}

/// Exit code of a command line that does not parse: a judging command's is UNKNOWN.
pub fn usage_code(role: Role) -> u8 {
    match role {
        Role::Judge => UNKNOWN,
        Role::Actor => USAGE,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_takes_the_role_of_its_longest_listed_prefix() {
        assert_eq!(role(&["critic"]), Role::Judge);
        assert_eq!(role(&["hygiene"]), Role::Judge);
        assert_eq!(role(&["hygiene", "clean"]), Role::Actor);
        assert_eq!(role(&["quarantine", "scan"]), Role::Judge);
        assert_eq!(role(&["quarantine", "add"]), Role::Actor);
        assert_eq!(role(&["quarantine", "later"]), Role::Actor);
        assert_eq!(role::<&str>(&[]), Role::Actor);
        assert_eq!(role(&["frobnicate"]), Role::Actor);
        assert_eq!(usage_code(role(&["report"])), UNKNOWN);
    }

    #[test]
    fn help_lists_each_role_without_children_that_repeat_their_parent() {
        let judges = commands_of(Role::Judge);
        assert!(judges.contains(&"hygiene"), "{judges:?}");
        assert!(!judges.contains(&"hygiene disk"), "{judges:?}");
        assert!(judges.contains(&"quarantine prove"), "{judges:?}");
        let actors = commands_of(Role::Actor);
        assert!(actors.contains(&"hygiene clean"), "{actors:?}");
        assert!(!actors.contains(&"quarantine add"), "{actors:?}");
    }
}
