//! The ranks of a distributed run (torchrun and friends): which process is which rank (from
//! `RANK`, `LOCAL_RANK`, `WORLD_SIZE` in its environment) and its GPU, each rank's liveness
//! in a sample, stacks grouped by their innermost frames (`stacks.rs`) and the straggler rule
//! (`straggler.rs`). Pure: the environment, the process table and the dumps come in as plain
//! data, read through `sys/environ.rs`, `sys/proc.rs` and the evidence hook.

pub mod stacks;
pub mod straggler;

use crate::sys::proc::{ProcId, ProcStat};
use serde::Serialize;
use std::collections::BTreeMap;

/// What a process's environment says about its place in the job.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankEnv {
    pub rank: u32,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`: where torch's Flight Recorder dumps this rank's
    /// trace (the rank number is appended); None unless the recorder is on.
    pub flight_recorder: Option<String>,
}

/// Parse `/proc/PID/environ` (NUL-separated `KEY=value`): None when it names no `RANK`.
pub fn parse_environ(raw: &[u8]) -> Option<RankEnv> {
    let mut vars: BTreeMap<&[u8], &[u8]> = BTreeMap::new();
    for kv in raw.split(|b| *b == 0) {
        if let Some(eq) = kv.iter().position(|b| *b == b'=') {
            vars.insert(&kv[..eq], &kv[eq + 1..]);
        }
    }
    let num = |k: &str| {
        vars.get(k.as_bytes())
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    let text = |k: &str| {
        vars.get(k.as_bytes())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    // The recorder is on when its buffer has a size; its dump file defaults to torch's.
    let buffer = num("TORCH_NCCL_TRACE_BUFFER_SIZE").unwrap_or(0);
    let flight_recorder = text("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
        .or_else(|| (buffer > 0).then(|| "/tmp/nccl_trace_rank_".to_string()));
    Some(RankEnv {
        rank: num("RANK")?,
        local_rank: num("LOCAL_RANK"),
        world_size: num("WORLD_SIZE"),
        flight_recorder,
    })
}

/// One rank of the run: the topmost process of the tree that carries that `RANK` (its
/// DataLoader workers inherit the variable and count as the rank's).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rank {
    pub rank: u32,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub pid: u32,
    #[serde(skip)]
    pub id: ProcId,
    /// The GPU NVML lists the rank (or one of its processes) on; None without one.
    pub gpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flight_recorder: Option<String>,
}

/// The rank map from the run's tree and the environments read for it: a process is a rank
/// when it has a `RANK` and its parent does not have the same one. Sorted by rank; when two
/// processes claim one rank (two launches' leftovers) the lower pid is kept.
pub fn rank_map(tree: &[ProcStat], envs: &BTreeMap<ProcId, RankEnv>) -> Vec<Rank> {
    let by_pid: BTreeMap<u32, &ProcStat> = tree.iter().map(|s| (s.id.pid, s)).collect();
    let mut out: BTreeMap<u32, Rank> = BTreeMap::new();
    for st in tree.iter().filter(|s| s.state != 'Z' && s.state != 'X') {
        let Some(env) = envs.get(&st.id) else {
            continue;
        };
        let parent_same = by_pid
            .get(&st.ppid)
            .and_then(|p| envs.get(&p.id))
            .is_some_and(|p| p.rank == env.rank);
        if parent_same {
            continue;
        }
        let r = Rank {
            rank: env.rank,
            local_rank: env.local_rank,
            world_size: env.world_size,
            pid: st.id.pid,
            id: st.id,
            gpu: None,
            flight_recorder: env.flight_recorder.clone(),
        };
        match out.get(&env.rank) {
            Some(have) if have.pid < r.pid => {}
            _ => {
                out.insert(env.rank, r);
            }
        }
    }
    out.into_values().collect()
}

/// Every process of each rank: the rank's process and its descendants.
pub fn members(tree: &[ProcStat], ranks: &[Rank]) -> BTreeMap<u32, Vec<ProcId>> {
    let mut kids: BTreeMap<u32, Vec<&ProcStat>> = BTreeMap::new();
    for st in tree {
        kids.entry(st.ppid).or_default().push(st);
    }
    let mut out = BTreeMap::new();
    for r in ranks {
        let mut v = Vec::new();
        let mut stack = vec![r.id];
        while let Some(id) = stack.pop() {
            if v.contains(&id) || v.len() > 4096 {
                continue;
            }
            v.push(id);
            for k in kids.get(&id.pid).into_iter().flatten() {
                stack.push(k.id);
            }
        }
        out.insert(r.rank, v);
    }
    out
}

/// One rank at one sample: cumulative counters, so the sentinel can take rates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankObs {
    pub rank: u32,
    pub pid: u32,
    /// The rank process's /proc state; `D` when any of its processes is in D state.
    pub state: char,
    /// CPU seconds of the rank's live processes (their own and their reaped children's).
    pub cpu_s: f64,
    /// Syscall I/O bytes of those processes (None when one was unreadable).
    pub io_bytes: Option<u64>,
    /// Utilisation (%) of the rank's GPU, when it has one.
    pub gpu_util: Option<f64>,
}

/// Each rank's counters from the tree; `gpu_util` is filled by the caller that read the GPU.
pub fn observe(tree: &[ProcStat], ranks: &[Rank]) -> Vec<RankObs> {
    let by_id: BTreeMap<ProcId, &ProcStat> = tree.iter().map(|s| (s.id, s)).collect();
    let groups = members(tree, ranks);
    ranks
        .iter()
        .filter_map(|r| {
            let procs: Vec<&ProcStat> = groups
                .get(&r.rank)?
                .iter()
                .filter_map(|id| by_id.get(id).copied())
                .filter(|s| s.state != 'Z' && s.state != 'X')
                .collect();
            let main = procs.iter().find(|s| s.id == r.id)?;
            let d = procs.iter().any(|s| s.state == 'D');
            Some(RankObs {
                rank: r.rank,
                pid: r.pid,
                state: if d { 'D' } else { main.state },
                cpu_s: procs.iter().map(|s| s.cpu_s + s.children_cpu_s).sum(),
                io_bytes: procs.iter().map(|s| s.io_bytes).sum(),
                gpu_util: None,
            })
        })
        .collect()
}

/// One rank's activity over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankLive {
    pub rank: u32,
    pub pid: u32,
    pub state: char,
    /// Fraction of one core.
    pub cpu: f64,
    pub io_per_s: Option<f64>,
    pub gpu_util: Option<f64>,
    /// idle, busy or d_state.
    pub activity: &'static str,
}

/// Rates per rank between two readings `dt` seconds apart (ranks missing from either are
/// left out: a rank that just appeared has no window yet).
pub fn rates(
    base: &[RankObs],
    cur: &[RankObs],
    dt: f64,
    busy_cpu: f64,
    busy_io: f64,
    pinned: f64,
) -> Vec<RankLive> {
    let dt = dt.max(1e-9);
    cur.iter()
        .filter_map(|c| {
            let b = base.iter().find(|b| b.rank == c.rank && b.pid == c.pid)?;
            let cpu = ((c.cpu_s - b.cpu_s) / dt).max(0.0);
            let io = c
                .io_bytes
                .zip(b.io_bytes)
                .map(|(x, y)| x.saturating_sub(y) as f64 / dt);
            let busy = cpu >= busy_cpu
                || io.is_some_and(|io| io >= busy_io)
                || c.gpu_util.is_some_and(|u| u >= pinned);
            let activity = if c.state == 'D' {
                "d_state"
            } else if busy {
                "busy"
            } else {
                "idle"
            };
            Some(RankLive {
                rank: c.rank,
                pid: c.pid,
                state: c.state,
                cpu: (cpu * 1000.0).round() / 1000.0,
                io_per_s: io.map(|v| v.round()),
                gpu_util: c.gpu_util,
                activity,
            })
        })
        .collect()
}

/// The ranks in words for the sentinel's reasons: which are idle, busy, in D state, and —
/// when exactly one rank's activity differs from all the others' — that one, named.
pub fn describe(live: &[RankLive]) -> Vec<String> {
    if live.is_empty() {
        return Vec::new();
    }
    let mut by: BTreeMap<&str, Vec<&RankLive>> = BTreeMap::new();
    for l in live {
        by.entry(l.activity).or_default().push(l);
    }
    let part = |name: &str, v: &[&RankLive]| {
        let cpus: Vec<String> = v.iter().map(|l| format!("{:.0}%", l.cpu * 100.0)).collect();
        format!(
            "{} {} (CPU {})",
            rank_list(&v.iter().map(|l| l.rank).collect::<Vec<_>>()),
            name.replace('_', " "),
            cpus.join(", ")
        )
    };
    let mut out = vec![format!(
        "ranks: {}",
        by.iter()
            .map(|(k, v)| part(k, v))
            .collect::<Vec<_>>()
            .join("; ")
    )];
    if let Some(odd) = odd_one(live) {
        let rest: Vec<u32> = live
            .iter()
            .filter(|l| l.rank != odd.rank)
            .map(|l| l.rank)
            .collect();
        out.push(format!(
            "one rank differs from the rest: rank {} {} (CPU {:.0}%) while {} {}",
            odd.rank,
            odd.activity.replace('_', " "),
            odd.cpu * 100.0,
            rank_list(&rest),
            live.iter()
                .find(|l| l.rank != odd.rank)
                .map_or("", |l| l.activity)
                .replace('_', " ")
        ));
    }
    out
}

/// The one rank whose activity differs from all the others' (which agree), if any; needs
/// at least three ranks for "the rest" to mean something.
pub fn odd_one(live: &[RankLive]) -> Option<&RankLive> {
    if live.len() < 3 {
        return None;
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for l in live {
        *counts.entry(l.activity).or_default() += 1;
    }
    if counts.len() != 2 {
        return None;
    }
    let odd = counts.iter().find(|(_, n)| **n == 1)?.0;
    live.iter().find(|l| l.activity == *odd)
}

/// "rank 2" or "ranks 0,1,3".
pub fn rank_list(ranks: &[u32]) -> String {
    let list: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    match ranks.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(",")),
    }
}

/// The one-line rank map for people: "4 ranks: 0 pid 812 (local 0, GPU 0), 1 pid 813 ...".
pub fn map_line(ranks: &[Rank]) -> String {
    let world = ranks.iter().find_map(|r| r.world_size);
    let items: Vec<String> = ranks
        .iter()
        .map(|r| {
            let mut extra = Vec::new();
            if let Some(l) = r.local_rank {
                extra.push(format!("local {l}"));
            }
            extra.push(r.gpu.map_or("no GPU".into(), |g| format!("GPU {g}")));
            format!("{} pid {} ({})", r.rank, r.pid, extra.join(", "))
        })
        .collect();
    format!(
        "{} rank(s){}: {}",
        ranks.len(),
        world.map_or(String::new(), |w| format!(" of world size {w}")),
        items.join("; ")
    )
}

/// `{rank}` in a log path: the path with it filled in.
pub fn fill(pattern: &std::path::Path, rank: u32) -> std::path::PathBuf {
    std::path::PathBuf::from(
        pattern
            .to_string_lossy()
            .replace("{rank}", &rank.to_string()),
    )
}

/// Whether a file name matches a `{rank}` pattern's file name, and for which rank.
pub fn rank_of_name(pattern_name: &str, name: &str) -> Option<u32> {
    let (pre, post) = pattern_name.split_once("{rank}")?;
    let mid = name.strip_prefix(pre)?.strip_suffix(post)?;
    if mid.is_empty() || !mid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    mid.parse().ok()
}

/// One JSONL line of a rank's log: its step and its own step time (seconds), by key
/// (`a/b` reaches into nested objects). None when the line is not JSON or has no step.
pub fn parse_line(line: &[u8], step_key: &str, time_key: &str) -> Option<(u64, Option<f64>)> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let get = |key: &str| {
        key.split('/')
            .try_fold(&v, |v, k| v.get(k))
            .filter(|_| !key.is_empty())
    };
    let step = get(step_key)?;
    let step = step
        .as_u64()
        .or_else(|| step.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))?;
    Some((step, get(time_key).and_then(|t| t.as_f64())))
}

#[cfg(test)]
mod tests;
