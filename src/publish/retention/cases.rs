//! The one table of retention cases that every caller of [`super::plan`] runs: the pure plan
//! (`super::tests`), publish's retention (`super::apply`), `hygiene disk --prune`
//! (`hygiene::prune`) and the bucket's retention (`remote::queue`). A row is a ledger, a
//! policy and what may go; a caller that builds its guard wrong, or prunes outside the plan,
//! fails the rows it gets wrong. Paths are under the directory each runner hands in.

pub use super::case::{bytes, sha256, verified_in, Case, BUCKET};
use super::case::{pass_hiding, publish_in, verdict};
use crate::ledger::{Entry, Kind};
use std::path::Path;

/// How many rows the table has (a disk runner builds each row under its own directory).
pub fn rows() -> usize {
    table(Path::new("/ck")).len()
}

/// The table. `dir` is where the runner's checkpoints live (absolute).
pub fn table(dir: &Path) -> Vec<Case> {
    let publish = |name: &str, step: Option<u64>| publish_in(dir, name, step);
    let ckpt = |step: u64| publish_in(dir, &format!("ckpt-{step}"), Some(step));
    let fail = |s: u64| verdict(Some(s), "fail", None);
    let fail_since = |s: u64, d: u64| verdict(Some(s), "fail", Some(d));
    let pass = |s: u64| verdict(Some(s), "pass", None);
    let warn = |s: u64| verdict(Some(s), "warn", None);
    // A critic warn whose eval check marks `ckpt-<best>` as at its best eval (critic::overfit).
    let overfitting = |best: u64| {
        Entry::new(Kind::Verdict, "critic", "r")
            .step(Some(350))
            .field("status", "warn")
            .field("checks", vec![serde_json::json!({"check": "eval", "status": "warn"})])
            .field(
                "best",
                serde_json::json!({"step": best, "eval_loss": 0.3, "newest_step": 350,
                    "newest_eval_loss": 0.4, "rise": 0.1, "rise_frac": 0.333, "evals_above": 1,
                    "margin": 0.0015, "checkpoint": {"path": dir.join(format!("ckpt-{best}")).display().to_string(),
                    "step": best, "relation": "at"}}),
            )
    };
    let quarantine = |n: &str| {
        Entry::new(Kind::Quarantine, "quarantine", "r")
            .field("original_path", dir.join(n).display().to_string())
    };
    vec![
        Case {
            name: "healthy: keep_last only",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300), ckpt(400)],
            keep_last: 2,
            latest: "ckpt-400",
            margin: 0,
            bucket: None,
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
            bucket: None,
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
            bucket: None,
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
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-60"],
            kept: &[
                ("ckpt-78", "the newest checkpoint before step 80"),
                ("ckpt-70", "the newest checkpoint before step 75"),
            ],
        },
        Case {
            name: "a cleared fail protects nothing more",
            ledger: vec![
                ckpt(100),
                fail(150),
                pass(160),
                ckpt(200),
                pass(250),
                ckpt(300),
            ],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-100"],
            kept: &[
                ("ckpt-300", "the last good"),
                ("ckpt-200", "the newest checkpoint at or before step 250"),
            ],
        },
        Case {
            name: "item 6: a stepless checkpoint after a fail is not the last good",
            ledger: vec![ckpt(100), fail(150), publish("last.ckpt", None)],
            keep_last: 1,
            latest: "last.ckpt",
            margin: 0,
            bucket: None,
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
            bucket: None,
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
            bucket: None,
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
            bucket: None,
            corrupt: &[],
            prune: &[],
            kept: &[
                ("ckpt-100", "latest.json"),
                ("ckpt-300", "the last good"),
                ("ckpt-200", "quarantined"),
            ],
        },
        Case {
            name: "issue 28 item 7: the newest checkpoint at or before the last pass",
            ledger: vec![
                ckpt(130),
                ckpt(140),
                pass(145),
                ckpt(150),
                ckpt(160),
                ckpt(170),
            ],
            keep_last: 3,
            latest: "ckpt-170",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-130"],
            kept: &[(
                "ckpt-140",
                "the newest checkpoint at or before step 145, the last the critic vouched for (pass verdict #3)",
            )],
        },
        Case {
            name: "issue 28 item 7: a pass at a checkpoint's step vouches for that checkpoint",
            ledger: vec![ckpt(130), ckpt(140), pass(140), ckpt(150), ckpt(160)],
            keep_last: 1,
            latest: "ckpt-160",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-130", "ckpt-150"],
            kept: &[("ckpt-140", "the newest checkpoint at or before step 140")],
        },
        Case {
            name: "issue 28 item 7: a fail after the pass does not remove it",
            ledger: vec![
                ckpt(120),
                ckpt(130),
                pass(135),
                ckpt(140),
                ckpt(150),
                ckpt(160),
                fail_since(170, 150),
                ckpt(170),
            ],
            keep_last: 2,
            latest: "ckpt-170",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-120", "ckpt-150"],
            kept: &[
                ("ckpt-130", "the newest checkpoint at or before step 135"),
                ("ckpt-140", "the newest checkpoint before step 150"),
                ("ckpt-140", "the last good"),
            ],
        },
        Case {
            name: "issue 28 item 7: a newer pass moves the protection",
            ledger: vec![
                ckpt(100),
                pass(105),
                ckpt(110),
                ckpt(120),
                pass(125),
                ckpt(130),
                ckpt(140),
            ],
            keep_last: 1,
            latest: "ckpt-140",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-100", "ckpt-110", "ckpt-130"],
            kept: &[(
                "ckpt-120",
                "the newest checkpoint at or before step 125, the last the critic vouched for (pass verdict #5)",
            )],
        },
        Case {
            name: "issue 28 item 7: a warn neither vouches nor moves the protection",
            ledger: vec![ckpt(100), pass(105), ckpt(110), warn(115), ckpt(120)],
            keep_last: 1,
            latest: "ckpt-120",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-110"],
            kept: &[("ckpt-100", "the newest checkpoint at or before step 105")],
        },
        Case {
            name: "issue 28 item 7: a pass whose median hid the first bad losses vouches before them",
            ledger: vec![
                ckpt(140),
                ckpt(150),
                pass_hiding(151, 150),
                ckpt(160),
                ckpt(170),
            ],
            keep_last: 1,
            latest: "ckpt-170",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-150", "ckpt-160"],
            kept: &[(
                "ckpt-140",
                "the newest checkpoint before step 150: the critic's last pass (verdict #3, step 151) saw the loss turn bad from step 150 on",
            )],
        },
        Case {
            name: "issue 28 item 7: a stepless checkpoint is never the vouched one (a rollback passes it over)",
            ledger: vec![
                ckpt(100),
                publish("last.ckpt", None),
                pass(150),
                ckpt(200),
            ],
            keep_last: 1,
            latest: "ckpt-200",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["last.ckpt"],
            kept: &[("ckpt-100", "the newest checkpoint at or before step 150")],
        },
        Case {
            name: "issue 28 item 7: a pass without a step vouches by publish order",
            ledger: vec![ckpt(100), ckpt(200), verdict(None, "pass", None), ckpt(300)],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-100"],
            kept: &[(
                "ckpt-200",
                "the newest checkpoint published before the critic's last pass (verdict #3, no step)",
            )],
        },
        Case {
            name: "issue 28 item 7: the vouched one quarantined: the newest usable before it",
            ledger: vec![
                ckpt(100),
                ckpt(140),
                pass(145),
                ckpt(150),
                quarantine("ckpt-140"),
            ],
            keep_last: 1,
            latest: "ckpt-150",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &[],
            kept: &[
                ("ckpt-100", "the newest checkpoint at or before step 145"),
                ("ckpt-140", "quarantined"),
            ],
        },
        Case {
            name: "issue 28 item 7: a pass after a rollback vouches for no tainted checkpoint",
            ledger: vec![
                ckpt(130),
                ckpt(140),
                pass(145),
                ckpt(150),
                ckpt(160),
                fail_since(200, 150),
                pass(165),
            ],
            keep_last: 1,
            latest: "ckpt-160",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-130", "ckpt-150"],
            kept: &[(
                "ckpt-140",
                "the newest checkpoint at or before step 165, the last the critic vouched for (pass verdict #7)",
            )],
        },
        Case {
            name: "issue 28 item 7: after a rollback the new pass vouches for the new timeline",
            ledger: vec![
                ckpt(130),
                ckpt(140),
                pass(145),
                ckpt(150),
                ckpt(160),
                fail_since(200, 150),
                pass(165),
                publish("ckpt-150", Some(150)),
                publish("ckpt-160", Some(160)),
                ckpt(170),
            ],
            keep_last: 1,
            latest: "ckpt-170",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-130", "ckpt-140", "ckpt-150"],
            kept: &[("ckpt-160", "the newest checkpoint at or before step 165")],
        },
            Case {
            name: "issue 36 item 1: a bucket that never verified anything: nothing goes",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300)],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            bucket: Some(&[]),
            corrupt: &[],
            prune: &[],
            kept: &[
                ("ckpt-100", "its copy in s3://ckpts/r/ is not verified yet"),
                ("ckpt-200", "its copy in s3://ckpts/r/ is not verified yet"),
                ("ckpt-300", "latest.json"),
            ],
        },
        Case {
            name: "issue 36 item 1: only checkpoints with a verified bucket copy go",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300), ckpt(400)],
            keep_last: 1,
            latest: "ckpt-400",
            margin: 0,
            bucket: Some(&["ckpt-100", "ckpt-300"]),
            corrupt: &[],
            prune: &["ckpt-100", "ckpt-300"],
            kept: &[("ckpt-200", "its copy in s3://ckpts/r/ is not verified yet")],
        },
        Case {
            name: "issue 36 item 1: a verified copy of other bytes is no copy of these",
            ledger: vec![
                ckpt(100),
                ckpt(200),
                // The bucket verified a copy of other bytes under the same path.
                verified_in(dir, "ckpt-200").field("sha256", "b".repeat(64)),
                ckpt(300),
            ],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            bucket: Some(&["ckpt-100"]),
            corrupt: &[],
            prune: &["ckpt-100"],
            kept: &[("ckpt-200", "its copy in s3://ckpts/r/ is not verified yet")],
        },
        Case {
            name: "issue 36 item 1: the bucket rule adds to the others, it never replaces them",
            ledger: vec![ckpt(100), ckpt(200), fail(250), ckpt(300), quarantine("ckpt-300"), ckpt(400)],
            keep_last: 1,
            latest: "ckpt-400",
            margin: 0,
            bucket: Some(&["ckpt-100", "ckpt-200", "ckpt-300", "ckpt-400"]),
            corrupt: &[],
            prune: &["ckpt-100"],
            kept: &[
                ("ckpt-400", "latest.json"),
                ("ckpt-200", "the last good"),
                ("ckpt-200", "the newest checkpoint before step 250"),
                ("ckpt-300", "quarantined"),
            ],
        },
        Case {
            name: "issue 37 point 7: the best eval's checkpoint while overfitting stands",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300), overfitting(200), ckpt(400)],
            keep_last: 1,
            latest: "ckpt-400",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-100", "ckpt-300"],
            kept: &[
                ("ckpt-400", "latest.json"),
                ("ckpt-200", "the checkpoint at the best eval (step 200, loss 0.3)"),
            ],
        },
    ]
}
