//! `kill -9` of the caller and of the background publisher at random moments: every queued
//! publish still ends published or rejected with a record, latest.json always names a
//! checkpoint whose bytes match it, no real name ever holds a half-published checkpoint.

use super::{kind, publisher_pid, queue_ids};
use crate::publish::{latest, ledger_records, sha256_file, torch_zip};
use crate::util::Env;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;
use std::time::Duration;

/// latest.json, when there is one, names bytes that hash to its sha256.
fn latest_verifies(ck: &Path) {
    if !ck.join("latest.json").exists() {
        return;
    }
    let l = latest(ck);
    let target = ck.join(l["path"].as_str().unwrap());
    assert_eq!(
        sha256_file(&target),
        l["sha256"].as_str().unwrap(),
        "latest.json names {target:?}"
    );
}

#[test]
fn kill_9_of_caller_and_publisher_at_random_moments_ends_every_queued_publish() {
    let env = Env::new();
    std::fs::create_dir_all(env.path("ck")).unwrap();
    let ck = std::fs::canonicalize(env.path("ck")).unwrap();
    let mut rng = fastrand::Rng::with_seed(17);
    let rounds = 16;
    let mut publisher_kills = 0;
    for i in 0..rounds {
        let name = format!("ckpt-{i}.pt");
        env.write(&name, torch_zip(6 << 20, i as u8));
        let mut caller = env
            .cmd(&["publish", "--detach", &name, "--to", "ck"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Kill the caller at a random moment (sometimes after it returned; every fourth one
        // is left to finish, so there is queued work for the publisher kills).
        if i % 4 == 0 {
            assert!(caller.wait().unwrap().success());
        } else {
            std::thread::sleep(Duration::from_millis(rng.u64(0..120)));
            let _ = caller.kill();
            let _ = caller.wait();
        }
        // And, every other round, the publisher, at a random moment of its work.
        if i % 2 == 1 && !queue_ids(&ck).is_empty() {
            if let Some(pid) = publisher_pid(&ck) {
                std::thread::sleep(Duration::from_millis(rng.u64(0..150)));
                if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                    publisher_kills += 1;
                }
            }
        }
        latest_verifies(&ck);
    }
    // The next command resumes whatever is left.
    let out = env.run(&["publish", "--wait", "--to", "ck", "--timeout", "300s"]);
    assert!(
        out.code() == 0 || out.code() == 1,
        "--wait ends: {}",
        out.report()
    );
    // A late publisher (started by a killed caller) may still be finishing an entry that
    // --wait did not know about: wait for the queue to empty.
    env.run(&["publish", "--wait", "--to", "ck", "--timeout", "300s"])
        .expect(0);
    assert!(queue_ids(&ck).is_empty(), "nothing left queued");
    latest_verifies(&ck);
    let recs = ledger_records(&ck.join("roger-ledger.jsonl"));
    let queued = kind(&recs, "publish_queued");
    assert!(!queued.is_empty(), "some callers got as far as queueing");
    for q in &queued {
        let id = &q["queue_id"];
        let ends: Vec<_> = recs
            .iter()
            .filter(|r| {
                &r["queue_id"] == id
                    && (r["kind"] == "publish"
                        || (r["kind"] == "note" && r["event"] == "publish-rejected"))
            })
            .collect();
        assert_eq!(
            ends.len(),
            1,
            "queued publish {id} ends exactly once: {ends:#?}"
        );
        // Sources were never touched: a queued publish is published, or given up only after
        // its publisher was killed on it again and again.
        assert!(
            ends[0]["kind"] == "publish"
                || ends[0]["reason"]
                    .as_str()
                    .unwrap()
                    .contains("the publisher died"),
            "{:#}",
            ends[0]
        );
    }
    // Every real name in the destination is a whole, recorded checkpoint.
    for e in std::fs::read_dir(&ck).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with('.') || n == "latest.json" || n.starts_with("roger-ledger") {
            continue;
        }
        let sha = sha256_file(&e.path());
        assert!(
            kind(&recs, "publish")
                .iter()
                .any(|r| r["path"] == e.path().display().to_string() && r["sha256"] == sha.as_str()),
            "{n} has no matching publish record"
        );
        assert_eq!(
            sha,
            sha256_file(&env.path(&n)),
            "{n} holds its source's bytes"
        );
    }
    // The newest published checkpoint is what latest.json names.
    let newest = kind(&recs, "publish").last().unwrap()["path"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        ck.join(latest(&ck)["path"].as_str().unwrap())
            .display()
            .to_string(),
        newest
    );
    let published = kind(&recs, "publish").len();
    let repaired = recs.iter().filter(|r| r["repaired"] == true).count();
    eprintln!(
        "kill -9: {rounds} callers, {publisher_kills} publisher kills; {} queued, {published} published, {repaired} repaired records",
        queued.len()
    );
    assert!(
        publisher_kills > 0,
        "the publisher was killed at least once"
    );
}
