//! A hang across nodes. When a job's ranks stop, every node's ranks stop: the hung one and
//! the ones waiting for it in a collective. Each node's watch takes its ranks' stacks once
//! per stall, at half the stale limit (before any kill), and puts their innermost frames in
//! its node record; from every node's frames, the node whose ranks are somewhere else while
//! the others wait is the cause. Pure over the records read.

use crate::ranks::rank_list;
use crate::ranks::stacks::Frame;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One rank's innermost frame (its main thread's), as its node read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankStack {
    /// `RANK`; None: the run's main process (a run without torchrun ranks).
    pub rank: Option<u32>,
    pub frame: Option<Frame>,
    /// Why no frame was read (no hook, the hook failed, no Python stack).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A node's stacks for one stall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStacks {
    /// The run's step when they were taken (the stall is after it).
    pub step: Option<u64>,
    /// Seconds the run had been silent then.
    pub silent_s: f64,
    pub ranks: Vec<RankStack>,
}

/// The node a hang is on, and how that was told.
#[derive(Debug, Clone, PartialEq)]
pub struct Culprit {
    pub node: u32,
    /// Its ranks that stand out, with their frame.
    pub ranks: Vec<RankStack>,
    /// `odd`: the one smallest group of frames; `outside`: the only ranks not in a collective.
    pub how: &'static str,
}

/// Functions a rank waits in while another is late: torch.distributed's collectives (and
/// anything under `torch/distributed/`).
const COLLECTIVES: &[&str] = &[
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "monitored_barrier",
    "all_to_all",
    "all_to_all_single",
    "reduce",
    "gather",
    "scatter",
    "send",
    "recv",
    "wait",
    "synchronize",
];

pub fn in_collective(f: &Frame) -> bool {
    f.file.contains("torch/distributed/") || COLLECTIVES.contains(&f.function.as_str())
}

type Key = (String, String);

fn key(f: &Frame) -> Key {
    (f.function.clone(), f.file.clone())
}

/// Every rank with a frame, grouped by its frame (function and file), largest group first.
fn groups<'a>(all: &'a [(u32, &'a NodeStacks)]) -> Vec<(Key, Vec<(u32, &'a RankStack)>)> {
    let mut by: BTreeMap<Key, Vec<(u32, &RankStack)>> = BTreeMap::new();
    for (node, s) in all {
        for r in &s.ranks {
            if let Some(f) = &r.frame {
                by.entry(key(f)).or_default().push((*node, r));
            }
        }
    }
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    v
}

/// One node, when every rank in `ranks` is on it.
fn one_node(ranks: &[(u32, &RankStack)]) -> Option<u32> {
    let first = ranks.first()?.0;
    ranks.iter().all(|(n, _)| *n == first).then_some(first)
}

/// The node the job's stall is on, from every node's stacks (None: no node stands out).
pub fn culprit(all: &[(u32, &NodeStacks)]) -> Option<Culprit> {
    let g = groups(all);
    let culprit = |ranks: &[(u32, &RankStack)], how| {
        one_node(ranks).map(|node| Culprit {
            node,
            ranks: ranks.iter().map(|(_, r)| (*r).clone()).collect(),
            how,
        })
    };
    // The odd group: the one smallest, strictly smaller than another (as on one node).
    if g.len() >= 2 {
        let min = g.iter().map(|(_, r)| r.len()).min().unwrap_or(0);
        let max = g.iter().map(|(_, r)| r.len()).max().unwrap_or(0);
        let smallest: Vec<_> = g.iter().filter(|(_, r)| r.len() == min).collect();
        if smallest.len() == 1 && max > min {
            if let Some(c) = culprit(&smallest[0].1, "odd") {
                return Some(c);
            }
        }
    }
    // Else the only ranks that are not in a collective while others are (a 1–1 split).
    let (outside, inside): (Vec<_>, Vec<_>) = g
        .iter()
        .flat_map(|(_, r)| r.iter().copied())
        .partition(|(_, r)| r.frame.as_ref().is_some_and(|f| !in_collective(f)));
    if inside.is_empty() {
        return None;
    }
    culprit(&outside, "outside")
}

fn who(ranks: &[&RankStack], node: u32) -> String {
    let nums: Vec<u32> = ranks.iter().filter_map(|r| r.rank).collect();
    if nums.is_empty() {
        format!("node {node}'s run")
    } else {
        format!("node {node}'s {}", rank_list(&nums))
    }
}

fn frame_words(f: Option<&Frame>) -> String {
    f.map_or("with no stack read".into(), |f| format!("in {}", f.short()))
}

/// The sentence of a job-wide stall, from every node's stacks: the node it is on, in which
/// frame, and where the others wait; or that no node stands out, and each node's frames.
pub fn words(all: &[(u32, &NodeStacks)], c: Option<&Culprit>) -> String {
    let g = groups(all);
    let nodes_of = |r: &[(u32, &RankStack)]| {
        let mut n: Vec<u32> = r.iter().map(|(n, _)| *n).collect();
        n.dedup();
        match n.as_slice() {
            [one] => format!("node {one}"),
            _ => format!(
                "nodes {}",
                n.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            ),
        }
    };
    let rest = |skip: Option<&Culprit>, verb: &str| -> Vec<String> {
        g.iter()
            .filter_map(|(_, r)| {
                let r: Vec<(u32, &RankStack)> = r
                    .iter()
                    .filter(|(n, rs)| !skip.is_some_and(|c| c.node == *n && c.ranks.contains(rs)))
                    .copied()
                    .collect();
                let first = r.first()?;
                let nums: Vec<u32> = r.iter().filter_map(|(_, rs)| rs.rank).collect();
                let label = if nums.len() == r.len() {
                    format!("{} ({})", rank_list(&nums), nodes_of(&r))
                } else {
                    format!("{}'s runs", nodes_of(&r))
                };
                Some(format!(
                    "{label}{verb} {}",
                    frame_words(first.1.frame.as_ref())
                ))
            })
            .collect()
    };
    let unread: Vec<String> = all
        .iter()
        .filter(|(_, s)| s.ranks.iter().all(|r| r.frame.is_none()))
        .map(|(n, s)| {
            let why = s
                .ranks
                .iter()
                .find_map(|r| r.error.clone())
                .unwrap_or_else(|| "no rank".into());
            format!("node {n}: no stack read ({why})")
        })
        .collect();
    let mut out = match c {
        Some(c) => {
            let silent = all
                .iter()
                .find(|(n, _)| *n == c.node)
                .map_or(0.0, |(_, s)| s.silent_s);
            let refs: Vec<&RankStack> = c.ranks.iter().collect();
            let others = rest(Some(c), " wait");
            let tail = if others.is_empty() {
                String::new()
            } else {
                format!(" while {}", others.join("; "))
            };
            format!(
                "{} {} (silent {silent:.1}s when its stack was taken){tail}: node {} hangs, the others wait on it",
                who(&refs, c.node),
                frame_words(c.ranks[0].frame.as_ref()),
                c.node
            )
        }
        None => {
            let r = rest(None, "");
            if r.is_empty() {
                "no stack read on any node".to_string()
            } else {
                format!("no node stands out: {}", r.join("; "))
            }
        }
    };
    if !unread.is_empty() {
        out.push_str(&format!("; {}", unread.join("; ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(function: &str, file: &str, line: u32) -> Option<Frame> {
        Some(Frame {
            function: function.into(),
            file: file.into(),
            line: Some(line),
        })
    }

    fn stacks(ranks: &[(u32, Option<Frame>)]) -> NodeStacks {
        NodeStacks {
            step: Some(12),
            silent_s: 4.0,
            ranks: ranks
                .iter()
                .map(|(r, fr)| RankStack {
                    rank: Some(*r),
                    frame: fr.clone(),
                    error: fr.is_none().then(|| "py-spy: permission denied".into()),
                })
                .collect(),
        }
    }

    const C10D: &str = "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py";

    #[test]
    fn the_odd_rank_across_nodes_names_its_node() {
        // Two nodes of two ranks; rank 2 (node 1) in the data loader, the rest in all_reduce.
        let n0 = stacks(&[
            (0, f("all_reduce", C10D, 2501)),
            (1, f("all_reduce", C10D, 2501)),
        ]);
        let n1 = stacks(&[
            (2, f("slow_loader", "train_ddp.py", 38)),
            (3, f("all_reduce", C10D, 2501)),
        ]);
        let all = [(0, &n0), (1, &n1)];
        let c = culprit(&all).expect("a culprit");
        assert_eq!((c.node, c.how, c.ranks[0].rank), (1, "odd", Some(2)));
        let w = words(&all, Some(&c));
        assert_eq!(
            w,
            "node 1's rank 2 in `slow_loader` (train_ddp.py:38) (silent 4.0s when its stack was taken) while ranks 0,1,3 (nodes 0,1) wait in `all_reduce` (distributed_c10d.py:2501): node 1 hangs, the others wait on it"
        );
    }

    #[test]
    fn with_one_rank_a_node_the_one_outside_a_collective_is_named() {
        // A 1–1 split has no odd group: the rank not in a collective is the cause.
        let n0 = stacks(&[(0, f("all_reduce", C10D, 2501))]);
        let n1 = stacks(&[(1, f("slow_loader", "train_ddp.py", 38))]);
        let c = culprit(&[(0, &n0), (1, &n1)]).expect("a culprit");
        assert_eq!((c.node, c.how), (1, "outside"));
        // Three nodes: the odd one.
        let n2 = stacks(&[(2, f("all_reduce", C10D, 2501))]);
        let c = culprit(&[(0, &n0), (1, &n1), (2, &n2)]).expect("a culprit");
        assert_eq!((c.node, c.how), (1, "odd"));
    }

    #[test]
    fn no_node_stands_out_when_every_rank_waits_or_two_nodes_are_out() {
        let n0 = stacks(&[(0, f("all_reduce", C10D, 2501))]);
        let n1 = stacks(&[(1, f("all_reduce", C10D, 2501))]);
        let all = [(0, &n0), (1, &n1)];
        assert_eq!(culprit(&all), None);
        assert_eq!(
            words(&all, None),
            "no node stands out: ranks 0,1 (nodes 0,1) in `all_reduce` (distributed_c10d.py:2501)"
        );
        // Two nodes outside a collective, one waiting: not one node.
        let a = stacks(&[(0, f("load", "data.py", 9))]);
        let b = stacks(&[(1, f("save", "ckpt.py", 3))]);
        let w = stacks(&[(2, f("all_reduce", C10D, 2501))]);
        assert_eq!(culprit(&[(0, &a), (1, &b), (2, &w)]), None);
        // Nothing read on a node is said, never taken for a frame.
        let none = stacks(&[(1, None)]);
        let all = [(0, &n0), (1, &none)];
        assert_eq!(culprit(&all), None);
        let w = words(&all, None);
        assert!(
            w.ends_with("node 1: no stack read (py-spy: permission denied)"),
            "{w}"
        );
    }

    #[test]
    fn a_record_with_stacks_round_trips() {
        let s = stacks(&[(2, f("slow_loader", "train_ddp.py", 38))]);
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<NodeStacks>(&j).unwrap(), s);
    }
}
