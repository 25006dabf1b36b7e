//! What /proc says about a PID holding VRAM: command line, parent, process group, and
//! whether the group leader still lives (an orphaned DataLoader or torchrun worker outlives
//! the leader it was started with).

use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PidInfo {
    pub pid: u32,
    /// False when /proc has no such PID here (exited, or another PID namespace).
    pub visible: bool,
    pub cmdline: Option<String>,
    pub ppid: Option<u32>,
    pub pgid: Option<u32>,
    /// The parent's command name (`comm`).
    pub parent_comm: Option<String>,
    /// The process-group leader still exists.
    pub pgid_leader_alive: Option<bool>,
}

fn proc_root() -> PathBuf {
    PathBuf::from("/proc")
}

/// `(comm)` may hold spaces and parens: the fields after it start after the last ')'.
pub fn parse_stat(stat: &str) -> Option<(u32, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // state ppid pgrp ...
    Some((f.get(1)?.parse().ok()?, f.get(2)?.parse().ok()?))
}

/// NUL-separated argv as one readable line.
pub fn parse_cmdline(raw: &[u8]) -> Option<String> {
    let parts: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if parts.is_empty() {
        None
    } else {
        Some(parts.join(" "))
    }
}

pub fn pid_info(pid: u32) -> PidInfo {
    let dir = proc_root().join(pid.to_string());
    let stat = std::fs::read_to_string(dir.join("stat")).ok();
    let Some((ppid, pgid)) = stat.as_deref().and_then(parse_stat) else {
        return PidInfo {
            pid,
            visible: false,
            cmdline: None,
            ppid: None,
            pgid: None,
            parent_comm: None,
            pgid_leader_alive: None,
        };
    };
    let cmdline = std::fs::read(dir.join("cmdline"))
        .ok()
        .and_then(|b| parse_cmdline(&b));
    let parent_comm = std::fs::read_to_string(proc_root().join(ppid.to_string()).join("comm"))
        .ok()
        .map(|s| s.trim().to_string());
    PidInfo {
        pid,
        visible: true,
        cmdline,
        ppid: Some(ppid),
        pgid: Some(pgid),
        parent_comm,
        pgid_leader_alive: Some(leader_alive(pgid)),
    }
}

/// The group leader lives if /proc/PGID is a process that still leads that group (a PID
/// reused by an unrelated process is not the leader).
fn leader_alive(pgid: u32) -> bool {
    let stat = std::fs::read_to_string(proc_root().join(pgid.to_string()).join("stat"));
    stat.ok()
        .as_deref()
        .and_then(parse_stat)
        .is_some_and(|(_, g)| g == pgid)
}

/// The PID's ancestors, nearest first (bounded: a /proc race cannot loop us).
pub fn ancestors(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut cur = pid;
    for _ in 0..64 {
        let stat = std::fs::read_to_string(proc_root().join(cur.to_string()).join("stat"));
        match stat.ok().as_deref().and_then(parse_stat) {
            Some((ppid, _)) if ppid > 0 && !out.contains(&ppid) => {
                out.push(ppid);
                cur = ppid;
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_comm() {
        let s = "4242 (python (worker) 1) S 1 4000 4000 0 -1 4194560 ...";
        assert_eq!(parse_stat(s), Some((1, 4000)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn cmdline_joins_args() {
        assert_eq!(
            parse_cmdline(b"python\0train.py\0--lr\x003e-4\0"),
            Some("python train.py --lr 3e-4".into())
        );
        assert_eq!(parse_cmdline(b""), None);
    }

    #[test]
    fn self_is_visible_with_parent() {
        let me = pid_info(std::process::id());
        assert!(me.visible && me.cmdline.is_some() && me.ppid.is_some());
        assert!(ancestors(std::process::id()).contains(&me.ppid.unwrap()));
        assert!(!pid_info(u32::MAX - 1).visible);
    }
}
