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

/// What every node does after stopping its run, and why.
#[derive(Debug, Clone, PartialEq)]
pub enum Then {
    /// Exit with this code: 76 for the scheduler to restart the whole job, 75 to stop it.
    Exit(u8, String),
    /// Relaunch this node's run (every node does, from the same complete step).
    Relaunch(String),
}

impl Then {
    pub fn words(&self) -> &str {
        match self {
            Then::Exit(_, w) | Then::Relaunch(w) => w,
        }
    }

    /// The exit code (a relaunch: none).
    pub fn code(&self) -> Option<u8> {
        match self {
            Then::Exit(c, _) => Some(*c),
            Then::Relaunch(_) => None,
        }
    }
}

/// One incident as the breakers see it: the step it happened at and when (the writer's clock).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Past {
    pub step: Option<u64>,
    pub at: f64,
}

/// The job-wide breakers over its incidents (oldest first, the one being acted on last), as
/// `[watch]`'s breakers are over one node's relaunches: no progress (the last
/// `breaker_no_progress` incidents all at the same step: the job fails at the same place,
/// and another requeue would too) and too many within `relaunch_window`
/// (`max_relaunches_per_window`). Why the job stops, if it must.
pub fn breaker(past: &[Past], w: &crate::config::WatchConfig) -> Option<String> {
    let m = w.breaker_no_progress as usize;
    if m > 0 && past.len() >= m {
        let tail = &past[past.len() - m..];
        if tail[0].step.is_some() && tail.iter().all(|p| p.step == tail[0].step) {
            return Some(format!(
                "no progress: the last {m} incidents were all at step {} ([watch] breaker_no_progress = {m}, job-wide)",
                tail[0].step.unwrap_or_default()
            ));
        }
    }
    let last = past.last()?;
    let window = w.relaunch_window.as_secs_f64();
    let within = past.iter().filter(|p| last.at - p.at <= window).count();
    (within > w.max_relaunches_per_window as usize).then(|| {
        format!(
            "{within} incidents within {} (max_relaunches_per_window = {}, job-wide)",
            w.relaunch_window, w.max_relaunches_per_window
        )
    })
}

/// What every node does on a verdict of `cause`: the job-wide budget is `budget` incidents
/// (`[watch] max_relaunches`), this one the `incidents`-th; `breaker`: why the job-wide
/// breakers stop the job, if they do ([`breaker`]).
pub fn then_for(
    action: OnFault,
    cause: &str,
    incidents: usize,
    budget: u32,
    breaker: Option<&str>,
) -> Then {
    let within = incidents <= budget as usize && breaker.is_none();
    let spent = || {
        Then::Exit(
            exit::DO_NOT_RESTART,
            match breaker {
                Some(b) => format!("do not requeue: a breaker opened: {b}"),
                None => format!("do not requeue: the job-wide budget is spent ({incidents} incidents, [watch] max_relaunches = {budget})"),
            },
        )
    };
    match action {
        OnFault::Relaunch if cause == "hang" && within => Then::Relaunch(format!(
            "relaunch every node's run from the same step: incident {incidents} of at most {budget} ([watch] max_relaunches, job-wide)"
        )),
        OnFault::Requeue | OnFault::Relaunch if within => Then::Exit(
            exit::REQUEUE,
            format!("requeue the job: incident {incidents} of at most {budget} ([watch] max_relaunches, job-wide)"),
        ),
        OnFault::Requeue | OnFault::Relaunch => spent(),
        OnFault::Stop | OnFault::Name => Then::Exit(
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
        let code = |a, cause, n| then_for(a, cause, n, 20, None).code();
        assert_eq!(code(OnFault::Requeue, "hang", 1), Some(exit::REQUEUE));
        assert_eq!(code(OnFault::Requeue, "node_lost", 20), Some(exit::REQUEUE));
        let t = then_for(OnFault::Requeue, "hang", 21, 20, None);
        assert_eq!(t.code(), Some(exit::DO_NOT_RESTART));
        assert!(t.words().contains("budget is spent (21 incidents"), "{t:?}");
        assert_eq!(code(OnFault::Stop, "hang", 1), Some(exit::DO_NOT_RESTART));
        // A relaunch for a stall; a lost machine cannot be relaunched here: requeue.
        assert_eq!(code(OnFault::Relaunch, "hang", 3), None);
        assert_eq!(code(OnFault::Relaunch, "node_lost", 3), Some(exit::REQUEUE));
        assert_eq!(
            code(OnFault::Relaunch, "hang", 21),
            Some(exit::DO_NOT_RESTART)
        );
        let t = then_for(OnFault::Relaunch, "hang", 3, 20, Some("no progress: x"));
        assert_eq!(t.code(), Some(exit::DO_NOT_RESTART));
        assert_eq!(
            t.words(),
            "do not requeue: a breaker opened: no progress: x"
        );
    }

    #[test]
    fn the_job_wide_breakers_open_on_no_progress_and_too_many_in_the_window() {
        let w = crate::config::WatchConfig::default();
        let p = |step, at| Past { step, at };
        // Default: 3 in a row at one step.
        assert_eq!(breaker(&[p(Some(12), 0.0), p(Some(12), 10.0)], &w), None);
        assert_eq!(
            breaker(&[p(Some(5), 0.0), p(Some(12), 5.0), p(Some(12), 10.0), p(Some(12), 20.0)], &w).unwrap(),
            "no progress: the last 3 incidents were all at step 12 ([watch] breaker_no_progress = 3, job-wide)"
        );
        assert_eq!(
            breaker(&[p(Some(10), 0.0), p(Some(12), 5.0), p(Some(14), 10.0)], &w),
            None,
            "it advances"
        );
        assert_eq!(
            breaker(&[p(None, 0.0), p(None, 1.0), p(None, 2.0)], &w),
            None
        );
        // Default window: 5 in 6 h; a sixth within it opens.
        let many: Vec<Past> = (0..6).map(|i| p(Some(i * 10), i as f64 * 60.0)).collect();
        assert!(breaker(&many[..5], &w).is_none());
        assert!(breaker(&many, &w)
            .unwrap()
            .starts_with("6 incidents within 6h"));
        let spread: Vec<Past> = (0..6).map(|i| p(Some(i * 10), i as f64 * 7200.0)).collect();
        assert!(breaker(&spread, &w).is_none(), "spread over 10 h");
    }
}
