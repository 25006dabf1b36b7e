//! The hand-off's decisions, pure: how long to wait for the save a notice asked for, whether
//! a publish answers it, and how the job is requeued. Plain data and `now` in, a decision out.

use super::Notice;
use crate::config::preempt::{PreemptConfig, Requeue as Mode};

/// A publish the hand-off may accept: the newest good checkpoint as the ledger has it.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    pub seq: u64,
    pub step: Option<u64>,
    pub path: String,
    pub sha256: String,
}

/// Where the wait for the save stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Wait {
    /// A verified publish filed after the notice: the save answered it.
    Saved(Published),
    /// Keep waiting, at most this many seconds more.
    Waiting { left_s: f64 },
    /// Stop waiting: the deadline minus the margin came, or the run ended without a new
    /// publish. The words say which, with numbers.
    Missed { why: String },
}

/// `newest` is the newest good checkpoint; only one filed after the notice record
/// (`notice_seq`) is this notice's save. `run_alive`: the run still has processes that could
/// publish.
pub fn wait(
    n: &Notice,
    notice_seq: u64,
    margin_s: f64,
    now: f64,
    newest: Option<&Published>,
    run_alive: bool,
) -> Wait {
    if let Some(p) = newest.filter(|p| p.seq > notice_seq) {
        return Wait::Saved(p.clone());
    }
    let stop_at = n.deadline - margin_s;
    let waited = now - n.received_at;
    if now >= stop_at {
        return Wait::Missed {
            why: format!(
                "no verified publish {waited:.1} s after the notice: the deadline ({:.1} s after it) minus the margin ({margin_s:.1} s) came first",
                n.window_s()
            ),
        };
    }
    if !run_alive {
        return Wait::Missed {
            why: format!("the run ended {waited:.1} s after the notice without a verified publish"),
        };
    }
    Wait::Waiting {
        left_s: stop_at - now,
    }
}

/// How the job comes back after the run tree is stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requeue {
    /// `scontrol requeue <job>`.
    Scontrol { job: String },
    /// Exit with this code; the wrapper maps it to a requeue.
    Exit { code: u8, why: String },
}

/// `job`: SLURM_JOB_ID; `scontrol`: whether scontrol is on PATH; `requeuer`: whether this
/// watch is the one that requeues (with `--node-local`, only node 0's).
pub fn requeue(cfg: &PreemptConfig, job: Option<&str>, scontrol: bool, requeuer: bool) -> Requeue {
    let code = cfg.requeue_exit_code;
    let exit = |why: String| Requeue::Exit { code, why };
    match (cfg.requeue, job, scontrol, requeuer) {
        (Mode::Exit, ..) => exit("[preempt] requeue = \"exit\"".into()),
        (_, _, _, false) => exit("--node-local on a node other than 0: node 0 requeues".into()),
        (_, None, ..) => exit("not inside a SLURM job (no SLURM_JOB_ID)".into()),
        (_, Some(_), false, _) => exit(
            "scontrol is not on PATH (inside a container?): the wrapper outside requeues".into(),
        ),
        (Mode::Auto | Mode::Scontrol, Some(j), true, true) => {
            Requeue::Scontrol { job: j.to_string() }
        }
    }
}

/// The notice window a configuration expects: the shortest of its enabled sources' (the one a
/// save must fit), with the source's name.
pub fn expected_window(cfg: &PreemptConfig, in_slurm: bool) -> Option<(f64, &'static str)> {
    use crate::config::preempt::Cloud;
    let mut w: Vec<(f64, &'static str)> = Vec::new();
    if !cfg.slurm_signal.is_empty() || (cfg.slurm_end_time && in_slurm) {
        w.push((
            cfg.slurm_window.as_secs_f64(),
            "the SLURM notice (slurm_window)",
        ));
    }
    if cfg.sigterm_is_notice(in_slurm) {
        w.push((cfg.sigterm_window.as_secs_f64(), "SIGTERM (sigterm_window)"));
    }
    for c in &cfg.cloud {
        w.push(match c {
            Cloud::Aws => (super::cloud::AWS_WINDOW_S, "the AWS spot notice"),
            Cloud::Gce => (super::cloud::GCE_WINDOW_S, "the GCE preemption notice"),
            Cloud::Azure => (super::cloud::AZURE_WINDOW_S, "the Azure eviction notice"),
        });
    }
    w.into_iter().min_by(|a, b| a.0.total_cmp(&b.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preempt::Source;

    fn notice() -> Notice {
        Notice {
            source: Source::SlurmSignal,
            detail: "USR1".into(),
            received_at: 1000.0,
            deadline: 1060.0,
        }
    }

    fn p(seq: u64) -> Published {
        Published {
            seq,
            step: Some(7),
            path: "c".into(),
            sha256: "ab".into(),
        }
    }

    #[test]
    fn only_a_publish_after_the_notice_answers_it() {
        let n = notice();
        assert_eq!(
            wait(&n, 10, 5.0, 1001.0, Some(&p(9)), true),
            Wait::Waiting { left_s: 54.0 }
        );
        assert_eq!(
            wait(&n, 10, 5.0, 1001.0, Some(&p(11)), true),
            Wait::Saved(p(11))
        );
        // Even past the deadline, a save that landed counts.
        assert_eq!(
            wait(&n, 10, 5.0, 1100.0, Some(&p(11)), false),
            Wait::Saved(p(11))
        );
    }

    #[test]
    fn the_wait_stops_at_deadline_minus_margin_or_when_the_run_is_gone() {
        let n = notice();
        let Wait::Missed { why } = wait(&n, 10, 5.0, 1055.0, Some(&p(9)), true) else {
            panic!()
        };
        assert!(why.contains("55.0 s after the notice"), "{why}");
        assert!(why.contains("margin (5.0 s)"), "{why}");
        assert!(matches!(
            wait(&n, 10, 5.0, 1054.9, None, true),
            Wait::Waiting { .. }
        ));
        let Wait::Missed { why } = wait(&n, 10, 5.0, 1020.0, None, false) else {
            panic!()
        };
        assert!(why.contains("run ended 20.0 s after"), "{why}");
    }

    #[test]
    fn requeue_by_scontrol_only_inside_a_job_with_scontrol_on_node_0() {
        let cfg = PreemptConfig::default();
        assert_eq!(
            requeue(&cfg, Some("42"), true, true),
            Requeue::Scontrol { job: "42".into() }
        );
        for (job, sc, r, word) in [
            (None, true, true, "SLURM_JOB_ID"),
            (Some("42"), false, true, "container"),
            (Some("42"), true, false, "node 0"),
        ] {
            let Requeue::Exit { code, why } = requeue(&cfg, job, sc, r) else {
                panic!("{job:?} {sc} {r}")
            };
            assert_eq!(code, 76);
            assert!(why.contains(word), "{why}");
        }
        let exit = PreemptConfig {
            requeue: Mode::Exit,
            requeue_exit_code: 99,
            ..Default::default()
        };
        assert!(matches!(
            requeue(&exit, Some("42"), true, true),
            Requeue::Exit { code: 99, .. }
        ));
    }

    #[test]
    fn the_expected_window_is_the_shortest_enabled_one() {
        let mut cfg = PreemptConfig::default();
        // Outside SLURM SIGTERM (30 s) is a notice; inside a job it is scancel, not one.
        assert_eq!(expected_window(&cfg, false).unwrap().0, 30.0);
        assert_eq!(expected_window(&cfg, true).unwrap().0, 120.0);
        cfg.sigterm = Some(false);
        cfg.slurm_signal.clear();
        assert!(expected_window(&cfg, false).is_none());
        cfg.cloud = vec![crate::config::preempt::Cloud::Aws];
        assert_eq!(expected_window(&cfg, false).unwrap().0, 120.0);
    }
}
