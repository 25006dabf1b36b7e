//! Checkpoints written by every node (`[cluster] parts = "every-node"`: a torch DCP directory
//! of shards from every rank, a file per rank). Each node's record lists the steps of its own
//! published parts (`roger publish` verified each copy before recording it); a step is
//! *complete* when every node's record lists it, and only a complete step is resumed from: a
//! step whose part on one node never landed is passed over, naming the node. Every node reads
//! the same records, so every node resumes from the same step. Pure over what was read.

use super::commit::PartRef;
use crate::ledger::{Kind, Record};
use std::collections::BTreeMap;

pub use crate::checkpoints::complete::{missing, Known, Others};

/// The other nodes' parts for retention and resume, read now from the job's store: `None`
/// unless `[cluster] parts = "every-node"`.
pub fn others_of(cfg: &crate::config::Config) -> Option<Others> {
    if cfg.cluster.parts != crate::config::cluster::Parts::EveryNode {
        return None;
    }
    let env = |k: &str| std::env::var(k).ok();
    let read = || -> anyhow::Result<Known> {
        let id = super::identity::resolve(cfg.cluster.node, cfg.cluster.nodes, &env)?;
        let store = super::open_store(cfg, true)?
            .ok_or_else(|| anyhow::anyhow!("parts = \"every-node\" needs [cluster] store"))?;
        let all = super::read_all(store.as_ref(), id.nodes)?;
        // This node's own parts from its ledger: its record in the store may predate the
        // part just published, and a DCP step is judged by every node's files.
        let records = crate::ledger::Ledger::new(cfg.ledger_path()).records()?;
        let mut own = BTreeMap::new();
        note(&mut own, &records, &cfg.run.name);
        Ok(known(&all, id.node, Some(&own)))
    };
    Some(read().map_err(|e| format!("the other nodes' parts cannot be read: {e:#}")))
}

/// What a resume or fetch candidate must pass for `others` (None: one node writes the
/// checkpoints, every candidate passes): its step complete on every node; unreadable parts
/// pass none.
pub fn gate(
    others: Option<Others>,
) -> impl FnMut(&crate::checkpoints::Checkpoint) -> Result<(), String> {
    move |c| match &others {
        None => Ok(()),
        Some(Ok(known)) => missing(c.step, known).map_or(Ok(()), Err),
        Some(Err(e)) => Err(e.clone()),
    }
}

/// What every node's record (`all`) says of the parts, for node `me` (`own`: its parts as
/// it knows them now, fresher than its record in the store).
pub fn known(
    all: &[(u32, Option<super::NodeRecord>)],
    me: u32,
    own: Option<&BTreeMap<u64, PartRef>>,
) -> Known {
    // Its own newest by file, as its record would name them.
    let own: Option<BTreeMap<u64, PartRef>> = own.map(|o| {
        o.iter()
            .rev()
            .take(NAMED)
            .map(|(s, p)| (*s, p.clone()))
            .collect()
    });
    let files: BTreeMap<u32, Option<&BTreeMap<u64, PartRef>>> = all
        .iter()
        .map(|(n, r)| {
            let f = match &own {
                Some(o) if *n == me => Some(o),
                _ => r.as_ref().and_then(|r| r.part_files.as_ref()),
            };
            (*n, f)
        })
        .collect();
    Known {
        lists: all
            .iter()
            .filter(|(n, _)| *n != me)
            .map(|(n, r)| (*n, r.as_ref().and_then(|r| r.parts.clone())))
            .collect(),
        broken: broken(&files),
    }
}

/// A torch DCP part's files: what lets the job tell whether its parts make the whole
/// checkpoint (each node verified only its own).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DcpFiles {
    /// The `.distcp` files in this part.
    pub shards: Vec<String>,
    /// The files its `.metadata` names, when this part holds the coordinator's `.metadata`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
}

/// `dir`'s DCP files (None: not a directory with `.distcp` files or a `.metadata`; a
/// `.metadata` that does not parse was refused at publish).
pub fn dcp_of(dir: &std::path::Path) -> Option<DcpFiles> {
    let mut shards: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".distcp"))
        .collect();
    shards.sort();
    let names = std::fs::read(dir.join(crate::publish::dcp::METADATA))
        .ok()
        .and_then(|b| crate::publish::dcp::storage(&b).ok())
        .map(|items| {
            let set: std::collections::BTreeSet<String> =
                items.into_iter().map(|i| i.file).collect();
            set.into_iter().collect::<Vec<_>>()
        });
    (!shards.is_empty() || names.is_some()).then_some(DcpFiles { shards, names })
}

/// Steps whose DCP parts, each verified on its node, do not make the whole checkpoint: no
/// node's part holds the `.metadata`, or it names files no node's part holds. Only steps
/// every node names by file can be told (`files`: each node's newest parts by file).
pub fn broken(files: &BTreeMap<u32, Option<&BTreeMap<u64, PartRef>>>) -> BTreeMap<u64, String> {
    let mut out = BTreeMap::new();
    let steps: std::collections::BTreeSet<u64> = files
        .values()
        .flatten()
        .flat_map(|f| f.keys().copied())
        .collect();
    for step in steps {
        let parts: Vec<(u32, Option<&PartRef>)> = files
            .iter()
            .map(|(n, f)| (*n, f.and_then(|f| f.get(&step))))
            .collect();
        let dcp: Vec<(u32, &DcpFiles)> = parts
            .iter()
            .filter_map(|(n, p)| Some((*n, p.as_ref()?.dcp.as_ref()?)))
            .collect();
        if dcp.is_empty() {
            continue;
        }
        // A DCP step some node's record does not name by file (its newest record predates
        // the part): whether the parts make the checkpoint cannot be told yet, so it is not
        // counted complete (retention keeps the older complete step meanwhile).
        let unnamed: Vec<String> = parts
            .iter()
            .filter(|(_, p)| p.is_none())
            .map(|(n, _)| n.to_string())
            .collect();
        if !unnamed.is_empty() {
            out.insert(
                step,
                format!(
                    "step {step} is not complete: whether its torch DCP parts make the whole checkpoint cannot be told yet (node {}'s record does not name its part of it)",
                    unnamed.join(",")
                ),
            );
            continue;
        }
        let Some((coord, names)) = dcp.iter().find_map(|(n, d)| Some((*n, d.names.as_ref()?)))
        else {
            out.insert(
                step,
                format!("step {step} is not complete: no node's part holds the torch DCP .metadata (the coordinator's save never finished?)"),
            );
            continue;
        };
        let held: std::collections::BTreeSet<&String> =
            dcp.iter().flat_map(|(_, d)| d.shards.iter()).collect();
        let lost: Vec<&String> = names
            .iter()
            .filter(|f| f.ends_with(".distcp") && !held.contains(f))
            .collect();
        if !lost.is_empty() {
            let shown: Vec<&str> = lost.iter().take(6).map(|s| s.as_str()).collect();
            out.insert(
                step,
                format!(
                    "step {step} is not complete: its .metadata (in node {coord}'s part) names {}{}, which no node's part holds",
                    shown.join(", "),
                    if lost.len() > 6 {
                        format!(" and {} more", lost.len() - 6)
                    } else {
                        String::new()
                    }
                ),
            );
        }
    }
    out
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
                // The same part noted again keeps what was read from its files.
                if parts.get(&s).is_some_and(|p| p.sha256 == sha) {
                    continue;
                }
                let dcp = r
                    .str_field("path")
                    .and_then(|p| dcp_of(std::path::Path::new(p)));
                parts.insert(
                    s,
                    PartRef {
                        name,
                        sha256: sha.to_string(),
                        size: r.get("size").and_then(|v| v.as_u64()).unwrap_or(0),
                        dcp,
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
        let others = Known::lists(
            [
                (1, Some(vec![5, 10, 15])),
                (2, Some(vec![5, 10])),
                (3, None),
            ]
            .into_iter()
            .collect(),
        );
        let why = missing(Some(15), &others).unwrap();
        assert_eq!(
            why,
            "step 15 is not complete: node 2's part is not verified (its newest parts: steps 10, 5); node 3 lists no parts in the [cluster] store (no record yet)"
        );
        let two = Known::lists(
            [(1, Some(vec![5, 10, 15])), (2, Some(vec![5, 10]))]
                .into_iter()
                .collect(),
        );
        assert_eq!(missing(Some(10), &two), None);
        assert!(missing(None, &two).unwrap().contains("step is unknown"));
        assert_eq!(missing(Some(3), &Known::default()), None, "a one-node job");
    }

    fn dcp_part(dir: &std::path::Path, files: &[&str], metadata: bool) -> PartRef {
        std::fs::create_dir_all(dir).unwrap();
        for f in files {
            std::fs::write(dir.join(f), vec![0u8; 16384]).unwrap();
        }
        if metadata {
            std::fs::copy(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/dcp/protocol4.metadata"),
                dir.join(".metadata"),
            )
            .unwrap();
        }
        PartRef {
            name: dir.file_name().unwrap().to_string_lossy().into(),
            sha256: "ab".into(),
            size: 1,
            dcp: dcp_of(dir),
        }
    }

    #[test]
    fn dcp_parts_make_the_whole_checkpoint_only_when_every_named_shard_is_held() {
        let t = tempfile::tempdir().unwrap();
        let n0 = dcp_part(&t.path().join("a"), &["__0_0.distcp"], true);
        assert_eq!(
            n0.dcp,
            Some(DcpFiles {
                shards: vec!["__0_0.distcp".into()],
                names: Some(vec!["__0_0.distcp".into(), "__1_0.distcp".into()]),
            })
        );
        let n1 = dcp_part(&t.path().join("b"), &["__1_0.distcp"], false);
        let n1_lost = dcp_part(&t.path().join("c"), &["__1_0.distcp.tmp"], false);
        assert_eq!(n1_lost.dcp, None, "no shard, no .metadata: not a DCP part");
        let plain = dcp_part(&t.path().join("d"), &["model.pt"], false);
        let of = |parts: Vec<(u64, &PartRef)>| -> BTreeMap<u64, PartRef> {
            parts.into_iter().map(|(s, p)| (s, p.clone())).collect()
        };
        let a = of(vec![(5, &n0), (10, &n0), (15, &n0), (20, &plain)]);
        let b = of(vec![(5, &n1), (10, &n1_lost), (20, &plain)]);
        let files: BTreeMap<u32, Option<&BTreeMap<u64, PartRef>>> =
            [(0, Some(&a)), (1, Some(&b))].into_iter().collect();
        let got = broken(&files);
        assert_eq!(
            got.get(&10).map(String::as_str),
            Some("step 10 is not complete: its .metadata (in node 0's part) names __1_0.distcp, which no node's part holds")
        );
        assert!(!got.contains_key(&5), "{got:?}");
        assert!(!got.contains_key(&20), "not a DCP checkpoint: {got:?}");
        assert!(
            got[&15].contains("cannot be told yet (node 1's record does not name its part of it)"),
            "{got:?}"
        );
        // Shards with no .metadata anywhere: the coordinator's save never finished.
        let c = of(vec![(5, &n1)]);
        let files: BTreeMap<u32, Option<&BTreeMap<u64, PartRef>>> =
            [(0, Some(&c)), (1, Some(&c))].into_iter().collect();
        assert!(broken(&files)[&5].contains("no node's part holds the torch DCP .metadata"));
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
                size: 0,
                dcp: None
            }
        );
        let p = |s: u64| PartRef {
            name: s.to_string(),
            sha256: String::new(),
            size: 0,
            dcp: None,
        };
        let mut many: BTreeMap<u64, PartRef> = (0..100).map(|s| (s, p(s))).collect();
        note(&mut many, &[], "run");
        assert_eq!((many.len(), many.keys().next()), (KEEP, Some(&36)));
    }
}
