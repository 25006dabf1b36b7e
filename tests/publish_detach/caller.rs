//! What the caller of `publish --detach` (a training loop's `on_save`) pays, counted at the
//! seams (`ROGER_FAILPOINT_COUNT`), not timed: on a filesystem that cannot reflink (this
//! machine's ext4 or tmpfs), after the first try no snapshot directory is made and removed,
//! no child is waited on, at most the one fsync of the queue entry; with a publisher already
//! running, no child is started at all. The queued publishes still land, verified, in order.

use super::{ck, kind, queue_ids};
use crate::publish::{latest, ledger_records, sha256_file, torch_zip};
use crate::util::Env;
use serde_json::Value;
use std::path::Path;

/// Hold the destination's publisher lock: to the caller, a publisher is running.
fn hold_publisher_lock(dest: &Path) -> nix::fcntl::Flock<std::fs::File> {
    std::fs::create_dir_all(dest.join(".roger-queue")).unwrap();
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dest.join(".roger-queue/publisher.lock"))
        .unwrap();
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).unwrap()
}

/// `publish --detach NAME --to ck`, and what its caller's path did.
fn detach_counted(env: &Env, name: &str) -> Value {
    let counts = env.path(&format!("{name}.counts.json"));
    let mut c = env.cmd(&["publish", "--detach", name, "--to", "ck"]);
    c.env("ROGER_FAILPOINT_COUNT", &counts);
    env.run_cmd(c, &["publish", "--detach", name, "--to", "ck"])
        .expect(0);
    serde_json::from_str(&std::fs::read_to_string(&counts).unwrap()).unwrap()
}

fn reflink_capable(dir: &Path) -> bool {
    let fs = nix::sys::statfs::statfs(dir).unwrap().filesystem_type();
    fs == nix::sys::statfs::BTRFS_SUPER_MAGIC || fs == nix::sys::statfs::XFS_SUPER_MAGIC
}

#[test]
fn regress_detach_caller_makes_no_snapshot_dir_waits_on_no_child_and_fsyncs_once() {
    let env = Env::new();
    let ck = ck(&env);
    if reflink_capable(&ck) {
        eprintln!("SKIPPED: the temp dir can reflink (this test is about one that cannot)");
        return;
    }
    for i in 1..=4u8 {
        env.write(&format!("ckpt-{i}.pt"), torch_zip(200_000 + i as usize, i));
    }
    // The first detach to a destination learns that it cannot reflink (and says so).
    let busy = hold_publisher_lock(&ck);
    env.run(&["publish", "--detach", "ckpt-1.pt", "--to", "ck"])
        .expect(0)
        .stderr_has("no reflink snapshot");
    // A publisher is running (it holds its lock): the caller only queues.
    let c = detach_counted(&env, "ckpt-2.pt");
    assert_eq!(c["make_dir"], 0, "no snapshot directory made: {c}");
    assert_eq!(c["remove_dir"], 0, "no directory removed: {c}");
    assert!(c["fsync"].as_u64().unwrap() <= 1, "one fsync at most: {c}");
    assert_eq!(c["spawn"], 0, "a publisher runs: no child started: {c}");
    assert_eq!(c["wait_child"], 0, "no child waited on: {c}");
    drop(busy);
    // No publisher runs now: the caller starts one, and does not wait on it.
    let c = detach_counted(&env, "ckpt-3.pt");
    assert_eq!(
        (c["make_dir"].as_u64(), c["remove_dir"].as_u64()),
        (Some(0), Some(0)),
        "{c}"
    );
    assert!(c["fsync"].as_u64().unwrap() <= 1, "one fsync at most: {c}");
    assert_eq!(c["wait_child"], 0, "no child waited on: {c}");
    let c = detach_counted(&env, "ckpt-4.pt");
    assert!(c["fsync"].as_u64().unwrap() <= 1, "{c}");
    assert_eq!(c["wait_child"], 0, "{c}");
    env.run(&["publish", "--wait", "--to", "ck", "--timeout", "300s"])
        .expect(0);
    let recs = ledger_records(&ck.join("roger-ledger.jsonl"));
    let queued: Vec<&str> = kind(&recs, "publish_queued")
        .iter()
        .map(|r| r["queue_id"].as_str().unwrap())
        .collect();
    let published = kind(&recs, "publish");
    assert_eq!(published.len(), 4, "{recs:#?}");
    for (i, r) in published.iter().enumerate() {
        let name = format!("ckpt-{}.pt", i + 1);
        assert_eq!(r["path"], ck.join(&name).display().to_string(), "in order");
        assert_eq!(r["queue_id"], queued[i]);
        assert_eq!(sha256_file(&ck.join(&name)), sha256_file(&env.path(&name)));
    }
    assert_eq!(latest(&ck)["path"], "ckpt-4.pt");
    assert!(queue_ids(&ck).is_empty());
    let snaps = std::fs::read_dir(ck.join(".roger-queue"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".snap"))
        .count();
    assert_eq!(snaps, 0);
}

/// The training loop's path through `roger_guard`: a preemption save request answered by
/// `save_requested()`, then `roger_guard.publish` (what `on_save` of the HF and Lightning
/// callbacks calls) while a publisher runs: the same one fsync, nothing made or removed, no
/// child of roger's started or waited on.
#[test]
fn roger_guard_publish_after_a_save_request_costs_the_caller_one_fsync_and_no_child() {
    let py = "/usr/bin/python3";
    if !Path::new(py).exists() {
        crate::util::missing(
            "roger_guard_publish_after_a_save_request_costs_the_caller_one_fsync_and_no_child",
            "/usr/bin/python3",
            "apt-get install python3",
        );
        return;
    }
    let env = Env::new();
    let ck = ck(&env);
    env.write("ckpt-1.pt", torch_zip(100_000, 1));
    env.write("ckpt-2.pt", torch_zip(100_000, 2));
    let busy = hold_publisher_lock(&ck);
    env.run(&["publish", "--detach", "ckpt-1.pt", "--to", "ck"])
        .expect(0);
    let counts = env.path("py.counts.json");
    let script = r#"
import os, roger_guard
with open(os.environ["ROGER_SAVE_NOW"], "w") as f:
    f.write("notice 1")
assert roger_guard.save_requested(), "the save request was not seen"
roger_guard.publish("ckpt-2.pt", step=2, to="ck")
"#;
    let out = std::process::Command::new(py)
        .current_dir(env.path(""))
        .env("PYTHONPATH", crate::util::repo_root().join("python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("ROGER_BIN", crate::util::roger_bin())
        .env("ROGER_SAVE_NOW", env.path("save-now"))
        .env("ROGER_FAILPOINT_COUNT", &counts)
        .env_remove("ROGER_CONFIG")
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let c: Value = serde_json::from_str(&std::fs::read_to_string(&counts).unwrap()).unwrap();
    assert_eq!(
        (c["make_dir"].as_u64(), c["remove_dir"].as_u64()),
        (Some(0), Some(0)),
        "{c}"
    );
    assert!(c["fsync"].as_u64().unwrap() <= 1, "{c}");
    assert_eq!(
        (c["spawn"].as_u64(), c["wait_child"].as_u64()),
        (Some(0), Some(0)),
        "{c}"
    );
    drop(busy);
    env.run(&["publish", "--wait", "--to", "ck", "--timeout", "300s"])
        .expect(0);
    let recs = ledger_records(&ck.join("roger-ledger.jsonl"));
    let steps: Vec<u64> = kind(&recs, "publish")
        .iter()
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2]);
    assert_eq!(latest(&ck)["path"], "ckpt-2.pt");
}
