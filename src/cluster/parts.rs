//! Checkpoints written by every node (`[cluster] parts = "every-node"`: a torch DCP directory
//! of shards from every rank, a file per rank). Each node's record lists the steps of its own
//! published parts (`roger publish` verified each copy before recording it); a step is
//! *complete* when every node's record lists it, and only a complete step is resumed from: a
//! step whose part on one node never landed is passed over, naming the node. Every node reads
//! the same records, so every node resumes from the same step. Pure over what was read.

use super::commit::PartRef;
use crate::ledger::{Kind, Record};
use std::collections::BTreeMap;

pub use crate::checkpoints::complete::{missing, Others};

/// The other nodes' parts for retention and resume, read now from the job's store: `None`
/// unless `[cluster] parts = "every-node"`.
pub fn others_of(cfg: &crate::config::Config) -> Option<Others> {
    if cfg.cluster.parts != crate::config::cluster::Parts::EveryNode {
        return None;
    }
    let env = |k: &str| std::env::var(k).ok();
    let read = || -> anyhow::Result<BTreeMap<u32, Option<Vec<u64>>>> {
        let id = super::identity::resolve(cfg.cluster.node, cfg.cluster.nodes, &env)?;
        let store = super::open_store(cfg, true)?
            .ok_or_else(|| anyhow::anyhow!("parts = \"every-node\" needs [cluster] store"))?;
        Ok(super::read_all(store.as_ref(), id.nodes)?
            .into_iter()
            .filter(|(n, _)| *n != id.node)
            .map(|(n, r)| (n, r.and_then(|r| r.parts)))
            .collect())
    };
    Some(read().map_err(|e| format!("the other nodes' parts cannot be read: {e:#}")))
}

/// Steps a node record lists: the newest this many (older ones are long past resuming from).
pub const KEEP: usize = 64;

/// Parts a node record names by file (the newest this many; older steps are listed by step).
pub const NAMED: usize = 4;

/// `run`'s published checkpoints in `records`, by step (a pruned one no longer counts): the
/// part's name, hash and size, as its publish record says.
pub fn note(parts: &mut BTreeMap<u64, PartRef>, records: &[Record], run: &str) {
    for r in records.iter().filter(|r| r.run == run) {
        match (r.kind, r.step) {
            (Kind::Publish, Some(s)) => {
                let Some(sha) = r.str_field("sha256") else {
                    continue;
                };
                let name = r
                    .str_field("path")
                    .map(|p| {
                        std::path::Path::new(p)
                            .file_name()
                            .map_or_else(|| p.to_string(), |n| n.to_string_lossy().to_string())
                    })
                    .unwrap_or_default();
                parts.insert(
                    s,
                    PartRef {
                        name,
                        sha256: sha.to_string(),
                        size: r.get("size").and_then(|v| v.as_u64()).unwrap_or(0),
                    },
                );
            }
            (Kind::Prune, Some(s)) => {
                parts.remove(&s);
            }
            _ => {}
        }
    }
    while parts.len() > KEEP {
        parts.pop_first();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_counts_only_when_every_other_node_lists_it() {
        let others: BTreeMap<u32, Option<Vec<u64>>> = [
            (1, Some(vec![5, 10, 15])),
            (2, Some(vec![5, 10])),
            (3, None),
        ]
        .into_iter()
        .collect();
        let why = missing(Some(15), &others).unwrap();
        assert_eq!(
            why,
            "step 15 is not complete: node 2's part is not verified (its newest parts: steps 10, 5); node 3 lists no parts in the [cluster] store (no record yet)"
        );
        let two: BTreeMap<u32, Option<Vec<u64>>> =
            [(1, Some(vec![5, 10, 15])), (2, Some(vec![5, 10]))]
                .into_iter()
                .collect();
        assert_eq!(missing(Some(10), &two), None);
        assert!(missing(None, &two).unwrap().contains("step is unknown"));
        assert_eq!(missing(Some(3), &BTreeMap::new()), None, "a one-node job");
    }

    #[test]
    fn published_steps_are_parts_and_a_pruned_one_is_not() {
        use crate::ledger::Entry;
        let rec = |kind, step: u64, sha: bool| {
            let e = Entry::new(kind, "publish", "run")
                .step(Some(step))
                .field("path", format!("c{step}"));
            if sha {
                e.field("sha256", "ab")
            } else {
                e
            }
        };
        let records = crate::ledger::test_records(vec![
            rec(Kind::Publish, 5, true),
            rec(Kind::Publish, 10, true),
            rec(Kind::Publish, 15, false),
            rec(Kind::Prune, 5, false),
        ]);
        let mut parts = BTreeMap::new();
        note(&mut parts, &records, "run");
        assert_eq!(parts.keys().copied().collect::<Vec<_>>(), vec![10]);
        assert_eq!(
            parts[&10],
            PartRef {
                name: "c10".into(),
                sha256: "ab".into(),
                size: 0
            }
        );
        let p = |s: u64| PartRef {
            name: s.to_string(),
            sha256: String::new(),
            size: 0,
        };
        let mut many: BTreeMap<u64, PartRef> = (0..100).map(|s| (s, p(s))).collect();
        note(&mut many, &[], "run");
        assert_eq!((many.len(), many.keys().next()), (KEEP, Some(&36)));
    }
}
