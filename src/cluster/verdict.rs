//! The job-wide verdict on a lost node: written once (the first node to write it wins, the
//! others read the winner's), recorded by every node with the same id, and acted on by every
//! node the same way. Its id comes from the lost node's own record, so every node that names
//! the same loss names the same verdict. Every verdict file the job's store holds is an
//! incident of the job: their count against `[watch] max_relaunches` is the job-wide budget.

use super::NodeRecord;
use crate::config::cluster::OnLost;
use crate::exit;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobVerdict {
    pub id: String,
    /// `node_lost`.
    pub cause: String,
    /// The node that caused it.
    pub node: u32,
    pub last_step: Option<u64>,
    /// The node that wrote it (the first to).
    pub by_node: u32,
    /// Unix seconds on the writer's clock.
    pub at: f64,
    /// What every node does: `requeue` or `stop`.
    pub action: OnLost,
    /// The writer's sentence.
    pub reason: String,
}

/// One id per loss: the lost node, and the start of the watch it last heard there (a node
/// never heard: `never`).
pub fn id_for(node: u32, last: Option<&NodeRecord>) -> String {
    match last {
        Some(r) => format!("node{node}-lost-{}", (r.started_at * 1000.0).round() as u64),
        None => format!("node{node}-never-heard"),
    }
}

pub fn key(id: &str) -> String {
    format!("verdicts/{id}.json")
}

/// The exit code every node leaves with after acting, and why: the scheduler restarts the
/// whole job on 76 (`requeue`), and stops it on 75 (`stop`, or the job-wide budget spent).
pub fn exit_for(action: OnLost, incidents: usize, budget: u32) -> (u8, String) {
    match action {
        OnLost::Requeue if incidents <= budget as usize => (
            exit::REQUEUE,
            format!("requeue the job: incident {incidents} of at most {budget} ([watch] max_relaunches, job-wide)"),
        ),
        OnLost::Requeue => (
            exit::DO_NOT_RESTART,
            format!("do not requeue: the job-wide budget is spent ({incidents} incidents, [watch] max_relaunches = {budget})"),
        ),
        OnLost::Stop | OnLost::Name => (
            exit::DO_NOT_RESTART,
            "stop the job ([cluster] on_lost = \"stop\")".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_id_per_loss_and_the_budget_is_the_jobs() {
        let r = NodeRecord {
            node: 1,
            nodes: 2,
            run: "r".into(),
            seq: 9,
            at: 10.0,
            started_at: 1.5,
            state: "working".into(),
            step: Some(3),
            silent_s: 0.0,
        };
        let mut later = r.clone();
        later.seq = 10;
        assert_eq!(
            id_for(1, Some(&r)),
            id_for(1, Some(&later)),
            "any record of one watch"
        );
        assert_eq!(id_for(1, Some(&r)), "node1-lost-1500");
        assert_eq!(id_for(2, None), "node2-never-heard");
        assert_eq!(exit_for(OnLost::Requeue, 1, 20).0, exit::REQUEUE);
        assert_eq!(exit_for(OnLost::Requeue, 20, 20).0, exit::REQUEUE);
        let (code, why) = exit_for(OnLost::Requeue, 21, 20);
        assert_eq!(code, exit::DO_NOT_RESTART);
        assert!(why.contains("budget is spent (21 incidents"), "{why}");
        assert_eq!(exit_for(OnLost::Stop, 1, 20).0, exit::DO_NOT_RESTART);
    }
}
