//! The job at a glance, as its store holds it (`roger status`, `roger report`): one row per
//! node (state, step, when last heard, its part of the job's newest complete step), the job's
//! latest.json, and its incidents with the node each one names. Node index only.

use super::commit::JobLatest;
use super::{JobVerdict, NodeRecord, Store};
use serde::Serialize;

/// One node of the job as its record in the store says.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NodeRow {
    pub node: u32,
    /// `None`: the node never wrote one.
    pub state: Option<String>,
    pub step: Option<u64>,
    /// Seconds since it wrote its record (by its clock against this one's).
    pub age_s: Option<f64>,
    /// Unheard for the limit or longer (as the watches judge).
    pub lost: bool,
    /// Its part of the job's newest complete step (else its newest listed part), as
    /// `step N: name`; None without `parts = "every-node"` or parts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct JobView {
    pub nodes: Vec<NodeRow>,
    /// The job's latest.json: its newest complete step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub complete: Option<JobLatest>,
    /// Every verdict in the store, oldest first: the job's incidents.
    pub incidents: Vec<JobVerdict>,
    /// What of the store could not be read (a verdict that does not parse, latest.json).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// The rows from each node's newest record (`now_s`: unix seconds; `limit_s`: unheard for
/// this long is lost). Pure.
pub fn rows(
    all: &[(u32, Option<NodeRecord>)],
    complete: Option<&JobLatest>,
    now_s: f64,
    limit_s: f64,
) -> Vec<NodeRow> {
    all.iter()
        .map(|(node, r)| {
            let age = r.as_ref().map(|r| now_s - r.at);
            let part = r.as_ref().and_then(|r| {
                let name = |s: u64| {
                    complete
                        .filter(|c| c.step == s)
                        .and_then(|c| c.parts.get(node)?.clone())
                        .or_else(|| r.part_files.as_ref()?.get(&s).cloned())
                        .map_or(format!("step {s}"), |p| format!("step {s}: {}", p.name))
                };
                let listed = r.parts.as_ref()?;
                match complete.filter(|c| listed.contains(&c.step)) {
                    Some(c) => Some(name(c.step)),
                    None => Some(format!("{} (newest; not complete)", name(*listed.last()?))),
                }
            });
            NodeRow {
                node: *node,
                state: r.as_ref().map(|r| r.state.clone()),
                step: r.as_ref().and_then(|r| r.step),
                age_s: age.map(|a| (a * 10.0).round() / 10.0),
                lost: age.is_none_or(|a| a >= limit_s),
                part,
            }
        })
        .collect()
}

/// The job's view from its store: `nodes` records, latest.json and the verdicts. An
/// unreadable record list is an error; an unreadable verdict or latest.json is a problem
/// line beside what could be read.
pub fn read(store: &dyn Store, nodes: u32, now_s: f64, limit_s: f64) -> anyhow::Result<JobView> {
    let all = super::read_all(store, nodes)?;
    let mut problems = Vec::new();
    let complete = super::commit::read(store).unwrap_or_else(|e| {
        problems.push(format!("{e:#}"));
        None
    });
    let mut incidents = Vec::new();
    for key in store.list("verdicts")? {
        match store.get(&key)? {
            None => {}
            Some(b) => match serde_json::from_slice::<JobVerdict>(&b) {
                Ok(v) => incidents.push(v),
                Err(e) => problems.push(format!("{key}: not a verdict: {e}")),
            },
        }
    }
    Ok(JobView {
        nodes: rows(&all, complete.as_ref(), now_s, limit_s),
        complete,
        incidents,
        problems,
    })
}

/// How many nodes the job has: `[cluster]` or the environment, else (off the job, as on a
/// login node) the store's own node records.
pub fn node_count(cfg: &crate::config::Config, store: &dyn Store) -> anyhow::Result<u32> {
    let id = super::identity::resolve(cfg.cluster.node, cfg.cluster.nodes, &|k| {
        std::env::var(k).ok()
    });
    Ok(match (id, cfg.cluster.nodes) {
        (Ok(id), _) => id.nodes,
        (Err(_), Some(n)) => n,
        (Err(e), None) => store
            .list("nodes")
            .map_err(|_| e)?
            .into_iter()
            .filter_map(|key| {
                key.strip_prefix("nodes/node-")?
                    .strip_suffix(".json")?
                    .parse::<u32>()
                    .ok()
            })
            .max()
            .map_or(0, |m| m + 1),
    })
}

/// The job's view for `cfg` (None without `[cluster] store`); `fallback_s`: the unheard
/// limit without `lost_after` or `[watch] stale`.
pub fn of_config(
    cfg: &crate::config::Config,
    now_s: f64,
    fallback_s: f64,
) -> Option<Result<JobView, String>> {
    let read = || -> anyhow::Result<Option<JobView>> {
        // A reader: an unmounted share is said, never made again as an empty directory.
        let Some(store) = super::open_store(cfg, true)? else {
            return Ok(None);
        };
        let nodes = node_count(cfg, store.as_ref())?;
        let limit = cfg
            .cluster
            .lost_after
            .or(cfg.watch.stale)
            .map_or(fallback_s, |d| d.0.as_secs_f64());
        Ok(Some(read(store.as_ref(), nodes, now_s, limit)?))
    };
    read().map_err(|e| format!("{e:#}")).transpose()
}

/// The newest incident as one line: what, which node caused it, what every node did.
pub fn incident_words(v: &JobVerdict) -> String {
    let cause = match (v.cause.as_str(), v.node) {
        ("node_lost", Some(n)) => format!("node {n} lost"),
        ("hang", Some(n)) => {
            let ranks: Vec<String> = v.ranks.iter().map(u32::to_string).collect();
            let mut s = format!("hang caused by node {n}");
            if !ranks.is_empty() {
                s.push_str(&format!(" (rank {})", ranks.join(",")));
            }
            if let Some(f) = &v.stack {
                s.push_str(&format!(" in {f}"));
            }
            s
        }
        ("hang", None) => "hang; no node stands out".to_string(),
        (c, n) => format!(
            "{c}{}",
            n.map_or(String::new(), |n| format!(" on node {n}"))
        ),
    };
    // The action before the writer: a status line cut at the screen's width keeps what
    // matters.
    format!(
        "{} {cause}{}; every node: {}; written by node {}",
        v.id,
        v.last_step
            .map_or(String::new(), |s| format!(" at step {s}")),
        serde_json::to_value(v.action)
            .ok()
            .and_then(|a| a.as_str().map(String::from))
            .unwrap_or_default(),
        v.by_node,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::commit::PartRef;
    use std::collections::BTreeMap;

    fn rec(node: u32, at: f64, parts: Vec<u64>) -> NodeRecord {
        NodeRecord {
            node,
            nodes: 2,
            run: "r".into(),
            seq: 1,
            at,
            started_at: 0.0,
            state: "working".into(),
            step: Some(17),
            silent_s: 0.0,
            stacks: None,
            part_files: Some(
                parts
                    .iter()
                    .map(|s| {
                        (
                            *s,
                            PartRef {
                                name: format!("n{node}-s{s}"),
                                sha256: "ab".into(),
                                size: 1,
                                dcp: None,
                            },
                        )
                    })
                    .collect(),
            ),
            parts: Some(parts),
            speeds: None,
        }
    }

    #[test]
    fn a_row_per_node_with_its_part_of_the_complete_step() {
        let all = vec![
            (0, Some(rec(0, 99.0, vec![10, 15]))),
            (1, Some(rec(1, 40.0, vec![10]))),
            (2, None),
        ];
        let complete = JobLatest {
            step: 10,
            parts: [
                (
                    0,
                    Some(PartRef {
                        name: "n0-s10".into(),
                        sha256: "ab".into(),
                        size: 1,
                        dcp: None,
                    }),
                ),
                (1, None),
            ]
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
            committed_by: 1,
            at: 1.0,
        };
        let r = rows(&all, Some(&complete), 100.0, 30.0);
        assert_eq!(r[0].part.as_deref(), Some("step 10: n0-s10"));
        assert!(!r[0].lost);
        // Named in latest.json by step only: the name comes from its own record.
        assert_eq!(r[1].part.as_deref(), Some("step 10: n1-s10"));
        assert!(r[1].lost, "60 s unheard, limit 30 s");
        assert_eq!((r[2].state.as_ref(), r[2].lost), (None, true));
        let no_commit = rows(&all, None, 100.0, 30.0);
        assert_eq!(
            no_commit[0].part.as_deref(),
            Some("step 15: n0-s15 (newest; not complete)")
        );
    }

    #[test]
    fn an_incident_names_its_node() {
        let v = JobVerdict {
            id: "incident-0002".into(),
            cause: "hang".into(),
            node: Some(1),
            ranks: vec![2],
            stack: Some("slow_loader (train.py:41)".into()),
            last_step: Some(12),
            by_node: 0,
            at: 1.0,
            action: crate::config::cluster::OnFault::Requeue,
            reason: "x".into(),
        };
        assert_eq!(
            incident_words(&v),
            "incident-0002 hang caused by node 1 (rank 2) in slow_loader (train.py:41) at step 12; every node: requeue; written by node 0"
        );
    }
}
