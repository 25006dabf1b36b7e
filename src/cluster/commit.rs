//! The job's `latest.json` (`[cluster] parts = "every-node"`): the newest step whose every
//! node's part is verified, with each node's part of it. A node that sees a step complete in
//! the records (its own and every other node's) commits it: `commits/step-<N>.json` is
//! written create-if-absent (the first writer wins; the others read the winner's), then
//! `latest.json` is moved to the newest commit and the commits listed again: a writer that
//! finds a newer one moves it on. So `latest.json` ends at the newest commit whatever the
//! interleaving (the writer of the newest commit writes it after creating it, and any writer
//! of an older one lists after its write and sees it), and never names an incomplete step.

use super::Store;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One node's part of a checkpoint, as its publish record says (its name only: no path on
/// that node's disk, which may carry a host or user name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRef {
    pub name: String,
    pub sha256: String,
    pub size: u64,
    /// A torch DCP part: its shard files, and the files its `.metadata` names when it holds
    /// the coordinator's `.metadata` (what tells the job its parts make the whole checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcp: Option<super::parts::DcpFiles>,
}

/// The job's newest complete step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobLatest {
    pub step: u64,
    /// Each node's part of the step (None: its record listed the step, not the part's name).
    pub parts: BTreeMap<u32, Option<PartRef>>,
    /// The node whose commit this is, and when (unix seconds, its clock).
    pub committed_by: u32,
    pub at: f64,
}

pub const LATEST: &str = "latest.json";

pub fn commit_key(step: u64) -> String {
    format!("commits/step-{step:012}.json")
}

fn step_of(key: &str) -> Option<u64> {
    key.strip_prefix("commits/step-")?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

/// The newest step every node lists (`all`: each node's listed steps, None: no record) whose
/// parts make the whole checkpoint (not in `broken`).
pub fn newest_complete(
    all: &BTreeMap<u32, Option<Vec<u64>>>,
    broken: &BTreeMap<u64, String>,
) -> Option<u64> {
    let mut lists = all.values();
    let first = lists.next()?.as_ref()?;
    let rest: Vec<&Vec<u64>> = lists.map(|l| l.as_ref()).collect::<Option<_>>()?;
    first
        .iter()
        .rev()
        .find(|s| rest.iter().all(|l| l.contains(s)) && !broken.contains_key(s))
        .copied()
}

/// This node's parts older than a newly complete `step` and newer than the last commit this
/// node knew (`since`) that are not complete, each with why (naming the node whose part is
/// missing): passed over for good, since the job's latest.json moved past them.
pub fn passed_over(
    own: impl IntoIterator<Item = u64>,
    since: Option<u64>,
    step: u64,
    others: &crate::checkpoints::complete::Known,
) -> Vec<(u64, String)> {
    own.into_iter()
        .filter(|s| *s < step && since.is_none_or(|c| *s > c))
        .filter_map(|s| Some((s, super::parts::missing(Some(s), others)?)))
        .collect()
}

/// The job's latest.json as the store holds it.
pub fn read(store: &dyn Store) -> Result<Option<JobLatest>> {
    match store.get(LATEST)? {
        None => Ok(None),
        Some(b) => serde_json::from_slice(&b)
            .map(Some)
            .with_context(|| format!("[cluster] store {}: {LATEST}", store.describe())),
    }
}

/// What committing a step did.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    /// This call wrote the step's commit (false: another node had).
    pub won: bool,
    /// The commit of the step as the store holds it (the winner's).
    pub ours: JobLatest,
    /// What latest.json names now (a newer commit than ours, if another node made one).
    pub latest: JobLatest,
}

/// Commit `ours` and move latest.json to the newest commit.
pub fn commit(store: &dyn Store, ours: &JobLatest) -> Result<Committed> {
    let key = commit_key(ours.step);
    let won = store.create(&key, &serde_json::to_vec(ours)?)?;
    let get = |k: &str| -> Result<JobLatest> {
        let b = store
            .get(k)?
            .with_context(|| format!("[cluster] store {}: {k} vanished", store.describe()))?;
        serde_json::from_slice(&b)
            .with_context(|| format!("[cluster] store {}: {k}", store.describe()))
    };
    let ours = if won { ours.clone() } else { get(&key)? };
    let newest = || -> Result<u64> {
        Ok(store
            .list("commits")?
            .iter()
            .filter_map(|k| step_of(k))
            .max()
            .unwrap_or(ours.step))
    };
    let mut named = newest()?;
    // Bounded: each round follows a newer commit, which only a newer complete step makes.
    for _ in 0..16 {
        let l = if named == ours.step {
            ours.clone()
        } else {
            get(&commit_key(named))?
        };
        store.put(LATEST, &serde_json::to_vec_pretty(&l)?)?;
        let now = newest()?;
        if now == named {
            return Ok(Committed {
                won,
                ours,
                latest: l,
            });
        }
        named = now;
    }
    anyhow::bail!(
        "[cluster] store {}: {LATEST} kept being overtaken by newer commits",
        store.describe()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::DirStore;

    fn store() -> (tempfile::TempDir, DirStore) {
        let d = tempfile::tempdir().unwrap();
        let s = DirStore::open(d.path()).unwrap();
        (d, s)
    }

    fn latest(step: u64, by: u32) -> JobLatest {
        JobLatest {
            step,
            parts: [(0, None), (1, None)].into_iter().collect(),
            committed_by: by,
            at: 1.0,
        }
    }

    #[test]
    fn the_newest_step_on_every_list() {
        let m = |v: Vec<(u32, Option<Vec<u64>>)>| v.into_iter().collect::<BTreeMap<_, _>>();
        assert_eq!(
            newest_complete(
                &m(vec![(0, Some(vec![5, 10, 15])), (1, Some(vec![5, 10]))]),
                &BTreeMap::new()
            ),
            Some(10)
        );
        let broken: BTreeMap<u64, String> = [(10, "shards missing".to_string())].into();
        assert_eq!(
            newest_complete(
                &m(vec![(0, Some(vec![5, 10, 15])), (1, Some(vec![5, 10]))]),
                &broken
            ),
            Some(5)
        );
        assert_eq!(
            newest_complete(&m(vec![(0, Some(vec![5])), (1, None)]), &BTreeMap::new()),
            None
        );
        assert_eq!(
            newest_complete(
                &m(vec![(0, Some(vec![5, 10])), (1, Some(vec![15]))]),
                &BTreeMap::new()
            ),
            None
        );
        assert_eq!(
            newest_complete(&m(vec![(0, Some(vec![3]))]), &BTreeMap::new()),
            Some(3)
        );
    }

    #[test]
    fn an_incomplete_part_older_than_the_commit_is_passed_over_once() {
        let others = crate::checkpoints::complete::Known::lists(
            [(1, Some(vec![5, 10, 20]))].into_iter().collect(),
        );
        let over = passed_over([5, 10, 15, 20], Some(10), 20, &others);
        assert_eq!(
            over,
            vec![(
                15,
                "step 15 is not complete: node 1's part is not verified (its newest parts: steps 20, 10, 5)".to_string()
            )]
        );
        assert!(passed_over([5, 10, 15, 20], Some(15), 20, &others).is_empty());
        assert!(passed_over([5, 10, 20], None, 20, &others).is_empty());
    }

    #[test]
    fn the_first_writer_wins_and_latest_never_goes_back() {
        let (_d, s) = store();
        let a = commit(&s, &latest(10, 0)).unwrap();
        assert!(a.won);
        let b = commit(&s, &latest(10, 1)).unwrap();
        assert!(!b.won);
        assert_eq!(b.ours.committed_by, 0, "the winner's commit is read back");
        commit(&s, &latest(15, 1)).unwrap();
        // A node with an older view commits step 10 again after 15: latest.json stays at 15.
        let late = commit(&s, &latest(10, 0)).unwrap();
        assert_eq!(late.latest.step, 15);
        assert_eq!(read(&s).unwrap().unwrap().step, 15);
    }

    #[test]
    fn an_older_writer_racing_a_newer_one_ends_at_the_newer() {
        // The older writer's put lands after the newer commit was made: it lists again and
        // moves latest.json on.
        let (_d, s) = store();
        s.create(
            &commit_key(20),
            &serde_json::to_vec(&latest(20, 1)).unwrap(),
        )
        .unwrap();
        let c = commit(&s, &latest(10, 0)).unwrap();
        assert!(c.won);
        assert_eq!(c.latest.step, 20);
        assert_eq!(read(&s).unwrap().unwrap().step, 20);
    }
}
