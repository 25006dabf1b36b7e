//! Power cut at every step of `publish --detach` (queueing) and of the background
//! publisher's work: the ledger stays intact, latest.json always verifies, no real name holds
//! a torn checkpoint, a queue entry is whole or absent, a returned `--detach` survives, and
//! after `publish --wait` every queued publish has ended exactly once.

use super::{prepared, sha, Cut, Rig};
use crate::publish::torch_zip;
use roger::ledger::{Kind, Ledger};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[run]
name = "r"
checkpoint_dir = "disk/ck"
ledger = "disk/ck/roger-ledger.jsonl"
[publish]
keep_last = 1
"#;
const QUEUE_ONLY: (&str, &str) = ("ROGER_DETACH_NO_PUBLISHER", "1");

fn ck(rig: &Rig) -> PathBuf {
    rig.disk().join("ck")
}

/// Right after the reboot: ledger intact, latest.json verifies and names one of `known`,
/// every real name holds a whole known version, the queue holds only whole entries.
fn sound(rig: &Rig, known: &[String], cut: &Cut) -> String {
    let ctx = cut.ctx();
    let dir = ck(rig);
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "latest.json" || name == "roger-ledger.jsonl" {
            continue;
        }
        let got = sha(&e.path());
        assert!(
            got.as_ref().is_some_and(|g| known.contains(g)),
            "{name} is torn or unknown\n{ctx}"
        );
    }
    let scan = Ledger::new(dir.join("roger-ledger.jsonl")).scan().unwrap();
    assert!(scan.first_break().is_none(), "{:?}\n{ctx}", scan.problems);
    let l: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("latest.json")).unwrap())
            .unwrap_or_else(|e| panic!("latest.json torn: {e}\n{ctx}"));
    let want = l["sha256"].as_str().unwrap().to_string();
    assert_eq!(
        sha(&dir.join(l["path"].as_str().unwrap())).as_deref(),
        Some(want.as_str()),
        "latest.json's target\n{ctx}"
    );
    let (_, bad) = roger::publish::queue::scan(&dir).unwrap();
    assert!(bad.is_empty(), "torn queue entries {bad:?}\n{ctx}");
    want
}

/// `publish --wait` ends every queued publish exactly once (published: the sources were
/// never touched); latest.json then names `newest` when it was queued.
fn drained(rig: &Rig, ctx: &str, newest: &str) {
    let wait = rig.roger(&["publish", "--wait", "--timeout", "120s"]);
    let what = format!("{ctx}\n--- publish --wait\n{}", wait.report());
    assert_eq!(wait.code(), 0, "{what}");
    // The publisher that --wait started leaves once the queue is empty.
    let dir = ck(rig);
    let deadline = Instant::now() + Duration::from_secs(60);
    while roger::publish::publisher::running(&dir) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        roger::publish::queue::pending(&dir).unwrap().is_empty(),
        "{what}"
    );
    let records = Ledger::new(dir.join("roger-ledger.jsonl"))
        .records()
        .unwrap();
    let queued: Vec<_> = records
        .iter()
        .filter(|r| r.kind == Kind::PublishQueued)
        .collect();
    for q in &queued {
        let id = q.str_field("queue_id");
        let ends = records
            .iter()
            .filter(|r| r.str_field("queue_id") == id && r.kind == Kind::Publish)
            .count();
        assert_eq!(ends, 1, "queued publish {id:?} published once\n{what}");
    }
    let l: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("latest.json")).unwrap()).unwrap();
    if !queued.is_empty() {
        assert_eq!(l["sha256"], newest, "{what}");
    }
    rig.roger(&["ledger", "verify"]).expect(0);
}

#[test]
fn power_cut_at_every_step_of_queueing_and_of_the_background_publish() {
    let Some(rig) = Rig::new("power_cut_at_every_step_of_queueing_and_of_the_background_publish")
    else {
        return;
    };
    rig.write("roger.toml", CONFIG);
    rig.write("v1/ckpt-1.pt", torch_zip(12_000, 1));
    rig.write("v2/ckpt-2.pt", torch_zip(12_000, 2));
    let shas: Vec<String> = ["v1/ckpt-1.pt", "v2/ckpt-2.pt"]
        .iter()
        .map(|v| sha(&rig.path(v)).unwrap())
        .collect();
    let base = prepared(&rig, &|r: &Rig| {
        r.roger(&["publish", "v1/ckpt-1.pt"]).expect(0);
    });
    // 1. Power cut while the caller queues.
    rig.cut_everywhere(
        &base,
        &|r: &Rig| r.roger_with(&["publish", "--detach", "v2/ckpt-2.pt"], &[QUEUE_ONLY]),
        &mut |r: &Rig, cut: &Cut| {
            let ctx = cut.ctx();
            assert_eq!(
                sound(r, &shas, cut),
                shas[0],
                "nothing published yet\n{ctx}"
            );
            if cut.finished {
                assert!(cut.run.out.status.success(), "{ctx}");
                let q = roger::publish::queue::pending(&ck(r)).unwrap();
                assert_eq!(q.len(), 1, "a returned --detach was lost\n{ctx}");
            }
            drained(r, &ctx, &shas[1]);
        },
    );
    let queueing = rig.cuts.get();
    // 2. Power cut while the publisher works the queue off.
    let queued = prepared(&rig, &|r: &Rig| {
        r.roger(&["publish", "v1/ckpt-1.pt"]).expect(0);
        r.roger_with(&["publish", "--detach", "v2/ckpt-2.pt"], &[QUEUE_ONLY])
            .expect(0);
    });
    rig.cut_everywhere(
        &queued,
        &|r: &Rig| r.roger(&["publish", "--drain", "--to", "disk/ck"]),
        &mut |r: &Rig, cut: &Cut| {
            let ctx = cut.ctx();
            let now = sound(r, &shas, cut);
            let entries = roger::publish::queue::pending(&ck(r)).unwrap();
            let records = Ledger::new(ck(r).join("roger-ledger.jsonl"))
                .records()
                .unwrap();
            let published = records
                .iter()
                .any(|x| x.kind == Kind::Publish && x.str_field("queue_id").is_some());
            // The entry leaves only after its record.
            assert!(
                entries.len() == 1 || published,
                "entry lost without a record\n{ctx}"
            );
            if cut.finished {
                assert!(cut.run.out.status.success(), "{ctx}");
                assert_eq!(
                    now, shas[1],
                    "a finished publisher's publish was lost\n{ctx}"
                );
                assert!(entries.is_empty(), "{ctx}");
            }
            drained(r, &ctx, &shas[1]);
        },
    );
    eprintln!(
        "publish --detach: {queueing} power cuts while queueing, {} while publishing",
        rig.cuts.get() - queueing
    );
}
