//! Retention's tests: the shared rule as a table of cases, and the policy alone.

use super::*;
use crate::config::Bytes;
use crate::ledger::{Entry, Kind};

fn publish(name: &str, step: Option<u64>) -> Entry {
    Entry::new(Kind::Publish, "publish", "r")
        .step(step)
        .field("path", format!("/ck/{name}"))
        .field("sha256", "a".repeat(64))
        .field("size", 10)
}

fn ckpt(step: u64) -> Entry {
    publish(&format!("ckpt-{step}"), Some(step))
}

fn verdict(step: Option<u64>, status: &str, diverged_at: Option<u64>) -> Entry {
    let mut check = serde_json::json!({"check": "loss", "status": status});
    if let Some(d) = diverged_at {
        check["diverged_at"] = d.into();
    }
    Entry::new(Kind::Verdict, "critic", "r")
        .step(step)
        .field("status", status)
        .field("checks", vec![check])
}

/// A `pass` at `step` whose observation records an out-of-band stretch since `since` that
/// the median of the newest losses still hides (what the real critic files: see `vouched`).
fn pass_hiding(step: u64, since: u64) -> Entry {
    verdict(Some(step), "pass", None).field(
        "observation",
        serde_json::json!({"onsets": {"out_of_band": {"since": since, "samples": step - since + 1}}}),
    )
}

/// The one rule, as the shared table (`super::cases`), run on the pure plan.
#[test]
fn the_shared_rule() {
    let dir = Path::new("/ck");
    for case in super::cases::table(dir) {
        let records = case.records(dir);
        let guard = Guard {
            latest: Some(dir.join(case.latest)),
            rollback_margin: case.margin,
            bucket: case.bucket.map(|_| super::cases::BUCKET.to_string()),
            complete: None,
        };
        let mut verifies = |c: &Checkpoint| {
            if case.corrupt.iter().any(|n| c.path.ends_with(n)) {
                Err("bytes changed".to_string())
            } else {
                Ok(())
            }
        };
        let p = plan(
            &records,
            "r",
            dir,
            &policy(case.keep_last, 0),
            &guard,
            &mut verifies,
        );
        let pruned: Vec<PathBuf> = p
            .candidates
            .iter()
            .map(|c| c.checkpoint.path.clone())
            .collect();
        case.check_removed("plan", dir, &pruned);
        case.check_kept("plan", dir, &p.protected);
    }
}

/// No pass of this run, no vouch: no critic, or one that only failed, warned or knew nothing,
/// or passed another run.
#[test]
fn only_a_pass_of_the_run_vouches() {
    let none: Vec<Vec<Entry>> = vec![
        vec![ckpt(100), ckpt(200)],
        vec![
            ckpt(100),
            verdict(Some(150), "warn", None),
            verdict(None, "unknown", None),
            verdict(Some(160), "fail", Some(150)),
        ],
        vec![
            ckpt(100),
            Entry::new(Kind::Verdict, "critic", "other")
                .step(Some(150))
                .field("status", "pass"),
        ],
    ];
    for ledger in none {
        let records = crate::ledger::test_records(ledger);
        assert_eq!(vouched(&records, "r"), None);
        let p = plan(
            &records,
            "r",
            Path::new("/ck"),
            &policy(0, 0),
            &Guard {
                latest: None,
                rollback_margin: 0,
                bucket: None,
                complete: None,
            },
            &mut |_| Ok(()),
        );
        assert!(
            !p.protected
                .iter()
                .any(|k| k.why.contains("critic's last pass") || k.why.contains("critic vouched")),
            "{:#?}",
            p.protected
        );
    }
    // The newest pass counts, a fail after it does not undo it, a hidden stretch bounds it.
    let records = crate::ledger::test_records(vec![
        verdict(Some(100), "pass", None),
        pass_hiding(151, 150),
        verdict(Some(160), "fail", Some(150)),
    ]);
    assert_eq!(
        vouched(&records, "r"),
        Some(Vouch {
            seq: 2,
            step: Some(151),
            bad_since: Some(150),
            before: Some(150),
        })
    );
    // Garbage in the observation is no stretch.
    let records = crate::ledger::test_records(vec![verdict(Some(90), "pass", None).field(
        "observation",
        serde_json::json!({"onsets": {"out_of_band": {"since": "soon"}, "zero": 7}}),
    )]);
    assert_eq!(vouched(&records, "r").and_then(|v| v.before), Some(91));
}

#[test]
fn spared_names_what_the_policy_alone_would_have_removed() {
    let records = crate::ledger::test_records(vec![
        ckpt(100),
        verdict(Some(150), "fail", None),
        ckpt(200),
        ckpt(300),
    ]);
    let guard = Guard {
        latest: Some(PathBuf::from("/ck/ckpt-300")),
        rollback_margin: 0,
        bucket: None,
        complete: None,
    };
    let p = plan(
        &records,
        "r",
        Path::new("/ck"),
        &policy(1, 0),
        &guard,
        &mut |_| Ok(()),
    );
    let spared: Vec<_> = p
        .spared
        .iter()
        .map(|s| (s.path.display().to_string(), s.why.clone()))
        .collect();
    assert_eq!(spared.len(), 2, "{spared:?}");
    assert!(spared.iter().all(|(p, _)| p == "/ck/ckpt-100"));
    assert_eq!(
        p.candidates
            .iter()
            .map(|c| c.checkpoint.step)
            .collect::<Vec<_>>(),
        vec![Some(200)]
    );
}

fn ck(seq: u64, step: Option<u64>) -> Checkpoint {
    Checkpoint {
        path: PathBuf::from(format!("/ck/c-{seq}")),
        sha256: "0".repeat(64),
        size: 10,
        step,
        seq,
    }
}

fn policy(keep_last: usize, keep_every: u64) -> PublishConfig {
    PublishConfig {
        keep_last,
        keep_every,
        margin: Bytes(0),
        ..Default::default()
    }
}

fn seqs(c: &[PruneCandidate]) -> Vec<u64> {
    c.iter().map(|c| c.checkpoint.seq).collect()
}

#[test]
fn keep_last_only() {
    let cks: Vec<_> = (1..=6).map(|i| ck(i, Some(i * 100))).collect();
    assert_eq!(
        seqs(&select(&cks, Path::new("/ck"), &policy(3, 0), &[])),
        vec![1, 2, 3]
    );
    assert_eq!(
        seqs(&select(&cks, Path::new("/ck"), &policy(6, 0), &[])),
        Vec::<u64>::new()
    );
    assert_eq!(
        seqs(&select(&cks, Path::new("/ck"), &policy(10, 0), &[])),
        Vec::<u64>::new()
    );
    assert_eq!(
        seqs(&select(&[], Path::new("/ck"), &policy(3, 0), &[])),
        Vec::<u64>::new()
    );
}

#[test]
fn keep_every_spares_milestones() {
    let cks: Vec<_> = (1..=8).map(|i| ck(i, Some(i * 500))).collect();
    // steps 500..4000; multiples of 1000 are kept: 1000, 2000, 3000 (4000 is newest anyway)
    let p = select(&cks, Path::new("/ck"), &policy(2, 1000), &[]);
    assert_eq!(seqs(&p), vec![1, 3, 5]);
    assert!(p[0].reason.contains("keep_last=2, keep_every=1000"));
    assert!(p[0].reason.contains("step 500"));
}

#[test]
fn protected_paths_and_unknown_steps() {
    let cks = vec![ck(1, None), ck(2, Some(1000)), ck(3, None), ck(4, Some(7))];
    // keep_every never keeps an unknown step; protected wins over everything.
    let p = select(
        &cks,
        Path::new("/ck"),
        &policy(1, 1000),
        &[PathBuf::from("/ck/c-1")],
    );
    assert_eq!(seqs(&p), vec![3]);
    assert!(p[0].reason.contains("step (unknown)"));
    // keep_last = 0: everything but protected goes, oldest first.
    let p = select(
        &cks,
        Path::new("/ck"),
        &policy(0, 0),
        &[PathBuf::from("/ck/c-4")],
    );
    assert_eq!(seqs(&p), vec![1, 2, 3]);
}

#[test]
fn order_is_by_publish_seq_not_input_order() {
    let cks = vec![
        ck(5, Some(5)),
        ck(2, Some(2)),
        ck(9, Some(9)),
        ck(1, Some(1)),
    ];
    assert_eq!(
        seqs(&select(&cks, Path::new("/ck"), &policy(1, 0), &[])),
        vec![1, 2, 5]
    );
}

#[test]
fn only_the_given_directory_is_pruned_or_counted() {
    let mut cks: Vec<_> = (1..=4).map(|i| ck(i, Some(i))).collect();
    for i in 5..=8 {
        let mut c = ck(i, Some(i));
        c.path = PathBuf::from(format!("/backup/c-{i}"));
        cks.push(c);
    }
    // A nested directory is another directory too.
    let mut nested = ck(9, Some(9));
    nested.path = PathBuf::from("/ck/old/c-9");
    cks.push(nested);
    // keep_last counts within /ck: 4 is the newest there, although 5..9 are newer.
    assert_eq!(
        seqs(&select(&cks, Path::new("/ck"), &policy(1, 0), &[])),
        vec![1, 2, 3]
    );
    assert_eq!(
        seqs(&select(&cks, Path::new("/backup"), &policy(0, 0), &[])),
        vec![5, 6, 7, 8]
    );
    assert!(select(&cks, Path::new("/elsewhere"), &policy(0, 0), &[]).is_empty());
}

#[test]
fn step_zero_is_a_multiple() {
    let cks = vec![ck(1, Some(0)), ck(2, Some(10)), ck(3, Some(20))];
    assert_eq!(
        seqs(&select(&cks, Path::new("/ck"), &policy(1, 1000), &[])),
        vec![2]
    );
}

/// Issue 37 point 7: the checkpoint at the best eval, named by a standing overfitting
/// verdict, stays whatever keep_last says; a later verdict whose eval check passes releases it.
#[test]
fn the_best_eval_checkpoint_of_a_standing_overfitting_verdict_is_kept() {
    use crate::critic::{judge, overfit::NearBest, EvalPoint, Num};
    let mut o = crate::critic::checks::tests::obs_with(vec![(400, vec![("loss", 3.0)])]);
    let ev = |step, e: f64, t: f64| EvalPoint {
        step,
        eval_loss: Num(e),
        train_loss: Some(Num(t)),
        score: None,
    };
    o.evals = vec![ev(200, 0.3, 1.0), ev(300, 0.4, 0.5), ev(400, 0.45, 0.2)];
    o.near_best = Some(NearBest {
        path: "/ck/ckpt-200".into(),
        step: 200,
    });
    let overfit = judge(&o).entry("r", &o);
    let mut healthy = o.clone();
    healthy.evals.push(ev(500, 0.25, 0.1));
    let cleared = judge(&healthy).entry("r", &healthy);
    let run = |ledger: Vec<Entry>| {
        let p = plan(
            &crate::ledger::test_records(ledger),
            "r",
            Path::new("/ck"),
            &policy(1, 0),
            &Guard {
                latest: Some(PathBuf::from("/ck/ckpt-400")),
                rollback_margin: 0,
                bucket: None,
                complete: None,
            },
            &mut |_| Ok(()),
        );
        let pruned: Vec<Option<u64>> = p.candidates.iter().map(|c| c.checkpoint.step).collect();
        (pruned, p.protected)
    };
    let (pruned, protected) = run(vec![
        ckpt(100),
        ckpt(200),
        ckpt(300),
        overfit.clone(),
        ckpt(400),
    ]);
    assert!(!pruned.contains(&Some(200)), "{pruned:?}");
    assert!(
        protected.iter().any(|k| k.path == Path::new("/ck/ckpt-200")
            && k.why.starts_with("the checkpoint at the best eval (step 200, loss 0.3) named by a standing overfitting verdict (#4)")),
        "{protected:#?}"
    );
    let (pruned, _) = run(vec![
        ckpt(100),
        ckpt(200),
        ckpt(300),
        overfit,
        ckpt(400),
        cleared,
    ]);
    assert!(pruned.contains(&Some(200)), "released: {pruned:?}");
}

/// `[cluster] parts = "every-node"`: the newest step every node has is kept even when newer
/// parts of this node (not complete yet) fill `keep_last`; unreadable records keep them all.
#[test]
fn the_newest_step_complete_on_every_node_is_kept() {
    let records = crate::ledger::test_records(vec![ckpt(5), ckpt(10), ckpt(15), ckpt(20)]);
    let policy = PublishConfig {
        keep_last: 1,
        ..Default::default()
    };
    let plan_with = |complete| {
        plan(
            &records,
            "r",
            Path::new("/ck"),
            &policy,
            &Guard {
                latest: Some(PathBuf::from("/ck/ckpt-20")),
                rollback_margin: 0,
                bucket: None,
                complete,
            },
            &mut |_| Ok(()),
        )
    };
    let gone = |p: &Plan| -> Vec<String> {
        p.candidates
            .iter()
            .map(|c| c.checkpoint.path.display().to_string())
            .collect()
    };
    // Node 1 has parts of 5 and 10 only: 10 is the job's resume point.
    let others: crate::checkpoints::complete::Others =
        Ok(crate::checkpoints::complete::Known::lists(
            [(1, Some(vec![5, 10])), (2, Some(vec![5, 10, 15]))]
                .into_iter()
                .collect(),
        ));
    let p = plan_with(Some(others));
    assert_eq!(gone(&p), vec!["/ck/ckpt-5", "/ck/ckpt-15"]);
    assert!(p
        .protected
        .iter()
        .any(|k| k.path == Path::new("/ck/ckpt-10")
            && k.why
                .starts_with("the newest step every node's part of is verified (step 10")));
    // Without the rule (one node writes the checkpoints): 10 would go too.
    assert_eq!(
        gone(&plan_with(None)),
        vec!["/ck/ckpt-5", "/ck/ckpt-10", "/ck/ckpt-15"]
    );
    // The store cannot be read: nothing goes.
    let p = plan_with(Some(Err(
        "the other nodes' parts cannot be read: gone".into()
    )));
    assert!(gone(&p).is_empty(), "{:?}", gone(&p));
}
