//! The job-wide verdict on a lost node or a stalled job: written once, recorded by every
//! node with the same id, and acted on by every node the same way. Its id is the job's next
//! incident number (`incident-0003`): every node that would write one tries the same next
//! number, the store's create-if-absent lets only the first writer write it, and the others
//! read the winner's. A node reads the verdicts it has not seen before it writes one, so one
//! incident is one verdict. Every verdict file the job's store holds is an incident of the
//! job: their count against `[watch] max_relaunches` is the job-wide budget.

use crate::config::cluster::OnFault;
use crate::exit;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobVerdict {
    pub id: String,
    /// `node_lost` or `hang`.
    pub cause: String,
    /// The node that caused it (None: a stall on which no node stands out).
    pub node: Option<u32>,
    /// A hang's ranks on that node that stand out, and their frame.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    pub last_step: Option<u64>,
    /// The node that wrote it (the first to).
    pub by_node: u32,
    /// Unix seconds on the writer's clock.
    pub at: f64,
    /// What every node does: `requeue` or `stop`.
    pub action: OnFault,
    /// The writer's sentence.
    pub reason: String,
}

/// The job's next incident id, from the verdict keys the store holds (`verdicts/…json`):
/// past both their count and the highest incident number among them.
pub fn next_id(keys: &[String]) -> String {
    let high = keys
        .iter()
        .filter_map(|k| {
            k.strip_prefix("verdicts/incident-")?
                .strip_suffix(".json")?
                .parse::<usize>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    format!("incident-{:04}", high.max(keys.len()) + 1)
}

pub fn key(id: &str) -> String {
    format!("verdicts/{id}.json")
}

/// The exit code every node leaves with after acting, and why: the scheduler restarts the
/// whole job on 76 (`requeue`), and stops it on 75 (`stop`, or the job-wide budget spent).
pub fn exit_for(action: OnFault, incidents: usize, budget: u32) -> (u8, String) {
    match action {
        OnFault::Requeue if incidents <= budget as usize => (
            exit::REQUEUE,
            format!("requeue the job: incident {incidents} of at most {budget} ([watch] max_relaunches, job-wide)"),
        ),
        OnFault::Requeue => (
            exit::DO_NOT_RESTART,
            format!("do not requeue: the job-wide budget is spent ({incidents} incidents, [watch] max_relaunches = {budget})"),
        ),
        OnFault::Stop | OnFault::Name => (
            exit::DO_NOT_RESTART,
            "stop the job ([cluster] on_fault = \"stop\")".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_incident_and_the_budget_is_the_jobs() {
        let keys = |v: &[&str]| {
            v.iter()
                .map(|k| format!("verdicts/{k}.json"))
                .collect::<Vec<_>>()
        };
        assert_eq!(next_id(&[]), "incident-0001");
        assert_eq!(next_id(&keys(&["incident-0001"])), "incident-0002");
        // A gap (a file removed by hand) or a verdict of another name: past both.
        assert_eq!(next_id(&keys(&["incident-0007"])), "incident-0008");
        assert_eq!(
            next_id(&keys(&["incident-0001", "node1-lost-1500"])),
            "incident-0003"
        );
        // An old verdict without ranks or stack reads.
        let old = r#"{"id":"node1-lost-1500","cause":"node_lost","node":1,"last_step":3,"by_node":0,"at":1.0,"action":"requeue","reason":"x"}"#;
        let v: JobVerdict = serde_json::from_str(old).unwrap();
        assert_eq!((v.node, v.ranks.len()), (Some(1), 0));
        assert_eq!(exit_for(OnFault::Requeue, 1, 20).0, exit::REQUEUE);
        assert_eq!(exit_for(OnFault::Requeue, 20, 20).0, exit::REQUEUE);
        let (code, why) = exit_for(OnFault::Requeue, 21, 20);
        assert_eq!(code, exit::DO_NOT_RESTART);
        assert!(why.contains("budget is spent (21 incidents"), "{why}");
        assert_eq!(exit_for(OnFault::Stop, 1, 20).0, exit::DO_NOT_RESTART);
    }
}
