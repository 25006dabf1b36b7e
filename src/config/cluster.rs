//! `[cluster]`: one job on many nodes, each node's watch sharing its state through a store
//! the job already has (a directory every node sees).

use super::units::Dur;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// A directory every node of the job sees (NFS, Lustre, a shared volume): each node's
    /// record and the job's state live under it. Relative paths are from roger.toml's
    /// directory; `{job}` is the job's id (`SLURM_JOB_ID`, else `ROGER_JOB_ID`), one
    /// directory per job. Absent: this watch guards its node alone.
    pub store: Option<PathBuf>,
    /// This node's index in the job; absent: from the engine's environment
    /// (`SLURM_NODEID`, `JOB_COMPLETION_INDEX`, `NODE_RANK`, `PET_NODE_RANK`).
    pub node: Option<u32>,
    /// The job's node count; absent: `SLURM_NNODES` (`SLURM_JOB_NUM_NODES`), `NNODES`,
    /// `PET_NNODES`.
    pub nodes: Option<u32>,
    /// A node unheard for this long is named lost; absent: the watch's stale limit
    /// (`[watch] stale`, or the calibrated one).
    pub lost_after: Option<Dur>,
    /// What the job does when a node is lost while the others wait on it, or its run stalls
    /// (the stale limit): `name` it only (a stall is then each node's own, as without
    /// `[cluster]`), `requeue` (one job-wide verdict naming the node; every node dumps its
    /// ranks' stacks, stops its run and exits 76 for the scheduler to restart the whole job,
    /// 75 once the job-wide budget, `[watch] max_relaunches` incidents, is spent), or `stop`
    /// (the same, exit 75), or `relaunch` (a stall: every node stops its run and relaunches
    /// it from the same step, within the job-wide budget; a lost node: as `requeue`).
    /// `on_lost`, its first name, is read too.
    #[serde(alias = "on_lost")]
    pub on_fault: OnFault,
    /// Who writes a checkpoint: `one` node (DDP: rank 0 saves the whole state), or
    /// `every-node` (each node publishes its part: a torch DCP directory's shards, a file per
    /// rank); then a step is resumed from only when every node's part of it is verified.
    pub parts: Parts,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Parts {
    #[default]
    One,
    EveryNode,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum OnFault {
    #[default]
    Name,
    Requeue,
    Stop,
    /// A stall: every node relaunches its run from the same step (the newest complete one);
    /// a lost node: as `requeue` (its machine is gone; the scheduler replaces it).
    Relaunch,
}
