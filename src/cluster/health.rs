//! Which of the job's other nodes are lost: pure over what this watch read of their records
//! and when (its own clock: a node is heard when its record *changes*, so clocks that differ
//! between machines do not matter). A node unheard for the limit — never heard, counted from
//! this watch's start — is named lost once; heard again, it is named back once.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What each node writes at its sampling interval (`nodes/node-<k>.json`). Node index only:
/// no host name or address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub node: u32,
    pub nodes: u32,
    pub run: String,
    /// This watch's heartbeat count; with `started_at`, what tells a new record from an old.
    pub seq: u64,
    /// Unix seconds on the writer's clock: when this record was written.
    pub at: f64,
    /// When the writing watch started.
    pub started_at: f64,
    /// The watch's state word for its run (`working`, `wedge`, `exited`, ...).
    pub state: String,
    pub step: Option<u64>,
    /// Seconds since the run's step last advanced, as that node measured it.
    pub silent_s: f64,
    /// Its ranks' stacks, once its run has been silent for half the stale limit (this stall's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<super::NodeStacks>,
    /// The steps of this node's published checkpoints (its parts; the newest
    /// [`super::parts::KEEP`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<u64>>,
    /// The newest [`super::parts::NAMED`] of them by file: what the job's latest.json and
    /// `roger status` name as each node's part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_files: Option<BTreeMap<u64, super::commit::PartRef>>,
    /// Its ranks' newest straggler window: what the job-wide straggler rule reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speeds: Option<NodeSpeeds>,
}

/// A node's ranks' measures over its newest closed window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpeeds {
    /// The window's number on that node, and its end on that node's clock (a new one: a new
    /// window).
    pub window: u64,
    pub end: f64,
    /// `step_time` (median seconds of its own work per step) or `cpu` (cores).
    pub source: String,
    /// Global rank → measure.
    pub measure: BTreeMap<u32, f64>,
}

/// A change this watch names, once per incident.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Unheard for `silent_s` ≥ the limit. `last` is its newest record (None: never heard).
    Lost {
        node: u32,
        last: Option<NodeRecord>,
        silent_s: f64,
        limit_s: f64,
    },
    /// Heard again after it was named lost.
    Back { node: u32, record: NodeRecord },
}

#[derive(Debug, Clone)]
struct Heard {
    record: NodeRecord,
    /// This watch's clock when the record last changed.
    changed_at: f64,
}

/// This watch's view of the other nodes.
#[derive(Debug, Clone)]
pub struct Peers {
    me: u32,
    nodes: u32,
    started_at: f64,
    heard: BTreeMap<u32, Heard>,
    lost: BTreeSet<u32>,
}

impl Peers {
    pub fn new(me: u32, nodes: u32, started_at: f64) -> Peers {
        Peers {
            me,
            nodes,
            started_at,
            heard: BTreeMap::new(),
            lost: BTreeSet::new(),
        }
    }

    /// Node `node`'s record as read at `now` (this watch's clock).
    pub fn read(&mut self, record: NodeRecord, now: f64) {
        let node = record.node;
        if node == self.me || node >= self.nodes {
            return;
        }
        let same = self.heard.get(&node).is_some_and(|h| {
            h.record.seq == record.seq && h.record.started_at == record.started_at
        });
        if !same {
            self.heard.insert(
                node,
                Heard {
                    record,
                    changed_at: now,
                },
            );
        }
    }

    /// The nodes that became lost or came back since the last call.
    pub fn judge(&mut self, now: f64, limit_s: f64) -> Vec<Change> {
        let mut out = Vec::new();
        for node in (0..self.nodes).filter(|n| *n != self.me) {
            let h = self.heard.get(&node);
            let silent_s = self.unheard(node, now);
            let is_lost = silent_s >= limit_s;
            match (is_lost, self.lost.contains(&node)) {
                (true, false) => {
                    self.lost.insert(node);
                    out.push(Change::Lost {
                        node,
                        last: h.map(|h| h.record.clone()),
                        silent_s,
                        limit_s,
                    });
                }
                (false, true) => {
                    self.lost.remove(&node);
                    if let Some(h) = h {
                        out.push(Change::Back {
                            node,
                            record: h.record.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// After an outage of the store: every node is silent only from `now` (none could write).
    pub fn grace(&mut self, now: f64) {
        self.started_at = self.started_at.max(now);
        for h in self.heard.values_mut() {
            h.changed_at = h.changed_at.max(now);
        }
    }

    /// Seconds node `node` has been unheard at `now` (never heard: since this watch started).
    pub fn unheard(&self, node: u32, now: f64) -> f64 {
        let since = self
            .heard
            .get(&node)
            .map_or(self.started_at, |h| h.changed_at.max(self.started_at));
        now - since
    }

    /// Node `node`'s newest record heard.
    pub fn last(&self, node: u32) -> Option<&NodeRecord> {
        self.heard.get(&node).map(|h| &h.record)
    }

    /// The nodes named lost now.
    pub fn lost(&self) -> impl Iterator<Item = &u32> {
        self.lost.iter()
    }
}

/// Unix seconds as a UTC wall time people read (`03:12:40Z`; a date when not today's).
pub fn clock(at: f64, now: f64) -> String {
    let Some(t) = chrono::DateTime::from_timestamp(at as i64, 0) else {
        return format!("{at}");
    };
    let n = chrono::DateTime::from_timestamp(now as i64, 0).unwrap_or(t);
    if t.date_naive() == n.date_naive() {
        t.format("%H:%M:%SZ").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    }
}

/// This node's own run when another is named: whether its steps still advance tells a lost
/// node's trainer from its roger (in a synchronous job, ranks advance only together).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Own {
    pub step: Option<u64>,
    /// Seconds since this node's step last advanced.
    pub silent_s: f64,
}

impl Change {
    /// The sentence every node says of it, with what this node's own run shows.
    pub fn words(&self, now: f64, own: Own) -> String {
        match self {
            Change::Lost {
                node,
                last,
                silent_s,
                limit_s,
            } => {
                let head = match last {
                    Some(r) => format!(
                        "node {node} has not reported since {} ({}, {}; unheard {silent_s:.1}s, limit {limit_s:.1}s)",
                        clock(r.at, now),
                        r.step.map_or("no step yet".into(), |s| format!("last step {s}")),
                        r.state
                    ),
                    None => format!(
                        "node {node} has not reported at all ({silent_s:.1}s since this watch started, limit {limit_s:.1}s)"
                    ),
                };
                let mine = own.step.map_or("no step".into(), |s| format!("step {s}"));
                // Half the limit: a run that stalls at the same time as the node went quiet.
                let cause = if own.silent_s < *limit_s / 2.0 {
                    format!("machine lost or roger stopped; this node's run still advances ({mine}, {:.1}s ago), so in a synchronous job node {node}'s trainer still takes part: its roger stopped", own.silent_s)
                } else {
                    format!("machine lost or roger stopped; this node's run has not advanced for {:.1}s either ({mine}): it waits on node {node}", own.silent_s)
                };
                format!("{head}: {cause}")
            }
            Change::Back { node, record } => format!(
                "node {node} reports again ({}, {})",
                record
                    .step
                    .map_or("no step yet".into(), |s| format!("step {s}")),
                record.state
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: Own = Own {
        step: None,
        silent_s: 0.0,
    };

    fn rec(node: u32, seq: u64, at: f64, step: u64) -> NodeRecord {
        NodeRecord {
            node,
            nodes: 3,
            run: "r".into(),
            seq,
            at,
            started_at: 1000.0,
            state: "working".into(),
            step: Some(step),
            silent_s: 0.0,
            stacks: None,
            parts: None,
            part_files: None,
            speeds: None,
        }
    }

    #[test]
    fn a_node_unheard_for_the_limit_is_named_once_and_back_once() {
        let mut p = Peers::new(0, 3, 1000.0);
        p.read(rec(1, 1, 1000.5, 10), 1001.0);
        p.read(rec(2, 1, 1000.5, 10), 1001.0);
        assert!(p.judge(1001.0, 5.0).is_empty());
        // Node 2 keeps writing; node 1's record stops changing at 1001.
        for t in 2..=6 {
            let now = 1000.0 + t as f64;
            p.read(rec(1, 1, 1000.5, 10), now);
            p.read(rec(2, t, now, 10 + t), now);
        }
        let c = p.judge(1006.0, 5.0);
        assert_eq!(c.len(), 1, "{c:?}");
        let Change::Lost { node, silent_s, .. } = &c[0] else {
            panic!("{c:?}")
        };
        assert_eq!((*node, *silent_s), (1, 5.0));
        let waiting = Own {
            step: Some(16),
            silent_s: 5.5,
        };
        let words = c[0].words(1006.0, waiting);
        assert!(
            words.starts_with("node 1 has not reported since 00:16:40Z (last step 10, working"),
            "{words}"
        );
        assert!(
            words.ends_with("has not advanced for 5.5s either (step 16): it waits on node 1"),
            "{words}"
        );
        let advancing = Own {
            step: Some(30),
            silent_s: 0.2,
        };
        let words = c[0].words(1006.0, advancing);
        assert!(
            words.ends_with("node 1's trainer still takes part: its roger stopped"),
            "{words}"
        );
        assert!(p.judge(1007.0, 5.0).is_empty(), "named once");
        assert_eq!(p.lost().copied().collect::<Vec<_>>(), vec![1]);
        // A restarted watch on node 1 (a new start, seq from 1 again) is heard.
        let mut back = rec(1, 1, 1008.0, 10);
        back.started_at = 1007.5;
        p.read(back, 1008.0);
        let c = p.judge(1008.0, 5.0);
        assert!(
            matches!(c.as_slice(), [Change::Back { node: 1, .. }]),
            "{c:?}"
        );
    }

    #[test]
    fn a_node_never_heard_is_named_from_this_watchs_start_and_clocks_do_not_matter() {
        let mut p = Peers::new(1, 3, 5000.0);
        // Node 0's clock is an hour behind: heard by change, not by its `at`.
        for t in 0..10 {
            p.read(rec(0, t, 1400.0 + t as f64, t), 5000.0 + t as f64);
        }
        let c = p.judge(5009.0, 8.0);
        assert_eq!(c.len(), 1, "only node 2, never heard: {c:?}");
        assert!(
            c[0].words(5009.0, OWN)
                .starts_with("node 2 has not reported at all (9.0s"),
            "{}",
            c[0].words(5009.0, OWN)
        );
        // Its own record and a node past the count are ignored.
        p.read(rec(1, 1, 5009.0, 1), 5009.0);
        p.read(rec(7, 1, 5009.0, 1), 5009.0);
        assert!(p.judge(5009.5, 8.0).is_empty());
    }

    #[test]
    fn an_old_record_from_before_this_watch_counts_from_its_start() {
        // The store holds node 1's record from a previous job: silent, but only since this
        // watch started, so it is not named at once.
        let mut p = Peers::new(0, 2, 2000.0);
        p.read(rec(1, 40, 900.0, 400), 2000.0);
        assert!(p.judge(2001.0, 5.0).is_empty());
        assert_eq!(p.judge(2005.0, 5.0).len(), 1);
    }
}
