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

struct Case {
    name: &'static str,
    ledger: Vec<Entry>,
    keep_last: usize,
    latest: &'static str,
    margin: u64,
    /// Names whose bytes no longer match their record.
    corrupt: &'static [&'static str],
    prune: &'static [&'static str],
    /// (name, start of the why) that must be among the protections.
    kept: &'static [(&'static str, &'static str)],
}

/// The one rule, as a table: what publish and `hygiene disk --prune` may remove.
#[test]
fn the_shared_rule() {
    let fail = |s: u64| verdict(Some(s), "fail", None);
    let fail_since = |s: u64, d: u64| verdict(Some(s), "fail", Some(d));
    let pass = |s: u64| verdict(Some(s), "pass", None);
    let quarantine = |n: &str| {
        Entry::new(Kind::Quarantine, "quarantine", "r").field("original_path", format!("/ck/{n}"))
    };
    let cases = vec![
        Case {
            name: "healthy: keep_last only",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300), ckpt(400)],
            keep_last: 2,
            latest: "ckpt-400",
            margin: 0,
            corrupt: &[],
            prune: &["ckpt-100", "ckpt-200"],
            kept: &[("ckpt-400", "latest.json"), ("ckpt-400", "the last good")],
        },
        Case {
            name: "item 5: the only checkpoint before a standing fail",
            ledger: vec![ckpt(100), fail(150), ckpt(200), ckpt(300), ckpt(400)],
            keep_last: 2,
            latest: "ckpt-400",
            margin: 0,
            corrupt: &[],
            prune: &["ckpt-200"],
            kept: &[
                ("ckpt-100", "the last good"),
                ("ckpt-100", "the newest checkpoint before step 150"),
            ],
        },
        Case {
            name: "item 7: the onset, not the verdict's step",
            ledger: vec![ckpt(70), ckpt(90), ckpt(110), fail_since(120, 80)],
            keep_last: 1,
            latest: "ckpt-110",
            margin: 0,
            corrupt: &[],
            prune: &["ckpt-90"],
            kept: &[
                ("ckpt-70", "the last good"),
                ("ckpt-70", "the newest checkpoint before step 80"),
            ],
        },
        Case {
            name: "item 7: and before onset - rollback margin",
            ledger: vec![ckpt(60), ckpt(70), ckpt(78), ckpt(90), fail_since(100, 80)],
            keep_last: 1,
            latest: "ckpt-90",
            margin: 5,
            corrupt: &[],
            prune: &["ckpt-60"],
            kept: &[
                ("ckpt-78", "the newest checkpoint before step 80"),
                ("ckpt-70", "the newest checkpoint before step 75"),
            ],
        },
        Case {
            name: "a cleared fail protects nothing more",
            ledger: vec![ckpt(100), fail(150), pass(160), ckpt(200), ckpt(300)],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            corrupt: &[],
            prune: &["ckpt-100", "ckpt-200"],
            kept: &[("ckpt-300", "the last good")],
        },
        Case {
            name: "item 6: a stepless checkpoint after a fail is not the last good",
            ledger: vec![ckpt(100), fail(150), publish("last.ckpt", None)],
            keep_last: 1,
            latest: "last.ckpt",
            margin: 0,
            corrupt: &[],
            prune: &[],
            kept: &[("ckpt-100", "the last good"), ("last.ckpt", "latest.json")],
        },
        Case {
            name: "a fail without a step: the newest published before it",
            ledger: vec![ckpt(100), ckpt(200), verdict(None, "fail", None), ckpt(300)],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            corrupt: &[],
            prune: &["ckpt-100"],
            kept: &[
                ("ckpt-200", "the last good"),
                ("ckpt-200", "the newest checkpoint published before"),
            ],
        },
        Case {
            name: "corrupt bytes pass the last good on to an older one",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300)],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            corrupt: &["ckpt-300"],
            prune: &["ckpt-100"],
            kept: &[("ckpt-200", "the last good")],
        },
        Case {
            name: "quarantined and latest.json rolled back by hand",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300), quarantine("ckpt-200")],
            keep_last: 0,
            latest: "ckpt-100",
            margin: 0,
            corrupt: &[],
            prune: &[],
            kept: &[
                ("ckpt-100", "latest.json"),
                ("ckpt-300", "the last good"),
                ("ckpt-200", "quarantined"),
            ],
        },
    ];
    for case in cases {
        let records = crate::ledger::test_records(case.ledger);
        let guard = Guard {
            latest: Some(PathBuf::from(format!("/ck/{}", case.latest))),
            rollback_margin: case.margin,
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
            Path::new("/ck"),
            &policy(case.keep_last, 0),
            &guard,
            &mut verifies,
        );
        let pruned: Vec<String> = p
            .candidates
            .iter()
            .map(|c| c.checkpoint.path.display().to_string())
            .collect();
        let want: Vec<String> = case.prune.iter().map(|n| format!("/ck/{n}")).collect();
        assert_eq!(pruned, want, "{}: {:#?}", case.name, p.protected);
        for (name, why) in case.kept {
            assert!(
                p.protected
                    .iter()
                    .any(|k| k.path.ends_with(name) && k.why.starts_with(why)),
                "{}: {name} not kept as {why:?}: {:#?}",
                case.name,
                p.protected
            );
        }
        // Every protected path of this directory stays, whatever the policy says.
        for k in &p.protected {
            assert!(
                !pruned.contains(&k.path.display().to_string()),
                "{}",
                case.name
            );
        }
    }
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
