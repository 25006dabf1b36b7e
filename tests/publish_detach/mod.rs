//! `roger publish --detach` end to end: the queue, its order, `--wait`, rejection of a source
//! changed before the publisher copied it, the free-space check counting queued work, a
//! crashed publisher resumed by the next command, sharded directories (one shard truncated
//! after fsync rejects the whole directory), and a reflink snapshot on a btrfs loop image.

mod caller;
mod kill;
mod reflink;

use crate::publish::{latest, ledger_records, sha256_file, torch_zip};
use crate::util::Env;
use serde_json::Value;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Hold the destination's publish lock, so the background publisher waits before copying.
pub fn hold_publish_lock(dest: &Path) -> nix::fcntl::Flock<File> {
    std::fs::create_dir_all(dest).unwrap();
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dest.join(".roger-publish.lock"))
        .unwrap();
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).unwrap()
}

pub fn queue_ids(dest: &Path) -> Vec<String> {
    roger::publish::queue::pending(dest)
        .unwrap()
        .into_iter()
        .map(|q| q.id)
        .collect()
}

pub fn kind<'a>(recs: &'a [Value], k: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["kind"] == k).collect()
}

/// The publisher's pid, once it has written it.
pub fn publisher_pid(dest: &Path) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(t) = std::fs::read_to_string(dest.join(".roger-queue/publisher.pid")) {
            if let Ok(p) = t.trim().parse() {
                return Some(p);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

pub fn ck(env: &Env) -> PathBuf {
    std::fs::create_dir_all(env.path("ck")).unwrap();
    std::fs::canonicalize(env.path("ck")).unwrap()
}

#[test]
fn detach_queues_durably_then_publishes_in_queue_order_and_a_blocking_publish_waits() {
    let env = Env::new();
    let ck = ck(&env);
    let lock = hold_publish_lock(&ck);
    for i in 1..=3u8 {
        env.write(&format!("ckpt-{i}.pt"), torch_zip(300_000 + i as usize, i));
        let out = env
            .run(&[
                "publish",
                "--detach",
                &format!("ckpt-{i}.pt"),
                "--to",
                "ck",
                "--json",
            ])
            .expect(0)
            .stderr_has("roger: queued");
        let o: Value = serde_json::from_str(out.stdout().trim()).unwrap();
        assert_eq!(
            o["target"],
            ck.join(format!("ckpt-{i}.pt")).display().to_string()
        );
        assert_eq!(o["step"], i as u64);
    }
    // The publisher waits behind the lock: everything is queued, nothing published.
    let ids = queue_ids(&ck);
    assert_eq!(ids.len(), 3);
    // The caller's one durable act is the queue entry; the running publisher records each
    // `publish_queued` as it takes the request in (within a moment, while it waits).
    let deadline = Instant::now() + Duration::from_secs(30);
    let recs = loop {
        let recs = ledger_records(&ck.join("roger-ledger.jsonl"));
        if kind(&recs, "publish_queued").len() >= 3 || Instant::now() > deadline {
            break recs;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let queued = kind(&recs, "publish_queued");
    assert_eq!(queued.len(), 3);
    assert!(kind(&recs, "publish").is_empty());
    for (r, id) in queued.iter().zip(&ids) {
        assert_eq!(r["queue_id"], id.as_str());
        assert!(r["size"].as_u64().unwrap() > 300_000);
        assert!(r["mtime"].as_str().unwrap().ends_with('Z'));
    }
    assert!(!ck.join("latest.json").exists());
    // A blocking publish queued behind them lands last.
    env.write("ckpt-4.pt", torch_zip(1000, 4));
    let mut blocking = env.cmd(&["publish", "ckpt-4.pt", "--to", "ck"]);
    let child = blocking
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(lock);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("publish: copy") && !err.contains("\r"),
        "no progress line off a terminal: {err}"
    );
    env.run(&["publish", "--wait", "--to", "ck", "--timeout", "300s"])
        .expect(0);
    let recs = ledger_records(&ck.join("roger-ledger.jsonl"));
    let published: Vec<&str> = kind(&recs, "publish")
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    let want: Vec<String> = (1..=4)
        .map(|i| ck.join(format!("ckpt-{i}.pt")).display().to_string())
        .collect();
    assert_eq!(published, want, "queue order, then the blocking one");
    for (r, id) in kind(&recs, "publish").iter().zip(&ids) {
        assert_eq!(r["queue_id"], id.as_str());
        assert!(r["duration_s"].as_f64().unwrap() >= 0.0);
        assert!(r["bytes_per_s"].as_u64().is_some());
        assert!(
            r["queued_s"].as_f64().unwrap() >= 0.3,
            "waited behind the lock: {r}"
        );
    }
    let blocking_rec = kind(&recs, "publish")[3];
    assert!(blocking_rec.get("queue_id").is_none());
    assert!(blocking_rec["duration_s"].as_f64().is_some());
    assert_eq!(latest(&ck)["path"], "ckpt-4.pt");
    assert!(queue_ids(&ck).is_empty());
    for i in 1..=4 {
        let p = ck.join(format!("ckpt-{i}.pt"));
        assert_eq!(
            sha256_file(&p),
            sha256_file(&env.path(&format!("ckpt-{i}.pt")))
        );
    }
    // The last --wait answered for everything: nothing more to report.
    env.run(&["publish", "--wait", "--to", "ck", "--timeout", "5s"])
        .expect(0)
        .stdout_has("nothing queued");
}

#[test]
fn a_source_changed_or_deleted_before_the_copy_is_rejected_with_a_record() {
    let env = Env::new();
    let ck = ck(&env);
    env.write("ckpt-1.pt", torch_zip(200_000, 1));
    env.run(&["publish", "ckpt-1.pt", "--to", "ck"]).expect(0);
    let lock = hold_publish_lock(&ck);
    env.write("ckpt-2.pt", torch_zip(200_000, 2));
    env.write("ckpt-3.pt", torch_zip(200_000, 3));
    env.run(&["publish", "--detach", "ckpt-2.pt", "--to", "ck"])
        .expect(0);
    env.run(&["publish", "--detach", "ckpt-3.pt", "--to", "ck"])
        .expect(0);
    // The training script reuses its file before the publisher copied it, and deletes one.
    env.write("ckpt-2.pt", torch_zip(250_000, 9));
    std::fs::remove_file(env.path("ckpt-3.pt")).unwrap();
    drop(lock);
    let out = env
        .run(&["publish", "--wait", "--to", "ck", "--timeout", "300s"])
        .expect(1)
        .stdout_has("rejected");
    assert!(
        out.stderr().contains("2 of 2 queued publish(es)"),
        "{}",
        out.report()
    );
    let recs = ledger_records(&ck.join("roger-ledger.jsonl"));
    let rejected: Vec<&Value> = kind(&recs, "note")
        .into_iter()
        .filter(|r| r["event"] == "publish-rejected")
        .collect();
    assert_eq!(rejected.len(), 2, "{recs:#?}");
    let queued = kind(&recs, "publish_queued");
    for (q, r) in queued.iter().zip(&rejected) {
        assert_eq!(q["queue_id"], r["queue_id"]);
    }
    let why = rejected[0]["reason"].as_str().unwrap();
    assert!(why.contains("changed"), "{why}");
    assert!(rejected[1]["reason"]
        .as_str()
        .unwrap()
        .contains("ckpt-3.pt"));
    assert!(!ck.join("ckpt-2.pt").exists() && !ck.join("ckpt-3.pt").exists());
    assert_eq!(latest(&ck)["path"], "ckpt-1.pt");
    assert!(queue_ids(&ck).is_empty());
}

#[test]
fn free_space_check_counts_queued_publishes() {
    let env = Env::new();
    let ck = ck(&env);
    let lock = hold_publish_lock(&ck);
    env.write("ckpt-1.pt", torch_zip(1 << 20, 1));
    env.write("ckpt-2.pt", torch_zip(1 << 20, 2));
    // Room for the margin (256 MiB) and one checkpoint, not two.
    let free = ((256u64 << 20) + (3 << 19)).to_string();
    let mut c = env.cmd(&["publish", "--detach", "ckpt-1.pt", "--to", "ck"]);
    c.env("ROGER_FAKE_FREE_BYTES", &free);
    env.run_cmd(c, &["publish", "--detach", "ckpt-1.pt"])
        .expect(0);
    let mut c = env.cmd(&["publish", "--detach", "ckpt-2.pt", "--to", "ck"]);
    c.env("ROGER_FAKE_FREE_BYTES", &free);
    let out = env
        .run_cmd(c, &["publish", "--detach", "ckpt-2.pt"])
        .expect(1);
    let err = out.stderr();
    assert!(
        err.contains("1 queued publish(es) ahead of this one"),
        "{err}"
    );
    assert!(err.contains("not enough free space"), "{err}");
    assert_eq!(queue_ids(&ck).len(), 1, "the refused one is not queued");
    drop(lock);
    env.run(&["publish", "--wait", "--to", "ck", "--timeout", "300s"])
        .expect(0);
}

#[test]
fn a_killed_publisher_leaves_queued_work_that_the_next_command_resumes() {
    let env = Env::new();
    let ck = ck(&env);
    env.write("ckpt-1.pt", torch_zip(100_000, 1));
    env.run(&["publish", "ckpt-1.pt", "--to", "ck"]).expect(0);
    let lock = hold_publish_lock(&ck);
    env.write("ckpt-2.pt", torch_zip(100_000, 2));
    env.run(&["publish", "--detach", "ckpt-2.pt", "--to", "ck"])
        .expect(0);
    let pid = publisher_pid(&ck).expect("publisher pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).unwrap();
    // Reaped by init; its lock goes with it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while roger::publish::publisher::running(&ck) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !roger::publish::publisher::running(&ck),
        "the killed publisher let go of its lock"
    );
    drop(lock);
    assert_eq!(
        queue_ids(&ck).len(),
        1,
        "the queued work survives its publisher"
    );
    // Any command that runs publish recovery resumes it and says so.
    let out = env.run(&["publish", "--verify", "--to", "ck"]).expect(0);
    assert!(
        out.stderr().contains("had no running publisher: resumed"),
        "{}\n--- publisher.log\n{}",
        out.report(),
        std::fs::read_to_string(ck.join(".roger-queue/publisher.log")).unwrap_or_default()
    );
    env.run(&["publish", "--wait", "--to", "ck", "--timeout", "300s"])
        .expect(0)
        .stdout_has("published");
    assert_eq!(latest(&ck)["path"], "ckpt-2.pt");
}

/// Eight shards; version `v` of each.
fn shards(env: &Env, v: u8) {
    for i in 0..8 {
        env.write(
            &format!("checkpoint-100/model-{i:05}-of-00008.safetensors.bin"),
            vec![v.wrapping_add(i); 700_000 + i as usize * 1000],
        );
    }
}

#[test]
fn a_sharded_directory_with_one_shard_truncated_after_fsync_is_rejected_whole() {
    let env = Env::new();
    let ck = ck(&env);
    shards(&env, 1);
    env.run(&["publish", "checkpoint-100", "--to", "ck"])
        .expect(0);
    let before = latest(&ck);
    let old = roger::publish::rehash(&ck.join("checkpoint-100"))
        .unwrap()
        .sha256;
    shards(&env, 2);
    let mut c = env.cmd(&["publish", "--detach", "checkpoint-100", "--to", "ck"]);
    c.env("ROGER_FAULT_TRUNCATE_AFTER_FSYNC", "4096").env(
        "ROGER_FAULT_TRUNCATE_ONLY",
        "model-00005-of-00008.safetensors.bin",
    );
    env.run_cmd(c, &["publish", "--detach", "checkpoint-100"])
        .expect(0);
    let out = env
        .run(&["publish", "--wait", "--to", "ck", "--timeout", "300s"])
        .expect(1);
    assert!(
        out.stdout().contains("model-00005-of-00008"),
        "{}",
        out.report()
    );
    assert_eq!(
        roger::publish::rehash(&ck.join("checkpoint-100"))
            .unwrap()
            .sha256,
        old
    );
    assert_eq!(latest(&ck), before, "latest.json unchanged");
    let recs = ledger_records(&ck.join("roger-ledger.jsonl"));
    let rej: Vec<&Value> = kind(&recs, "note")
        .into_iter()
        .filter(|r| r["event"] == "publish-rejected")
        .collect();
    assert_eq!(rej.len(), 1, "one record, from the verification: {recs:#?}");
    assert!(rej[0]["queue_id"].is_string());
    assert!(rej[0]["reason"]
        .as_str()
        .unwrap()
        .contains("4096 bytes on disk"));
    // Without the fault the same directory publishes, all shards at once.
    let out = env
        .run(&["publish", "checkpoint-100", "--to", "ck", "--json"])
        .expect(0);
    let o: Value = serde_json::from_str(out.stdout().trim()).unwrap();
    assert_eq!(o["files"], 8);
    for i in 0..8u8 {
        let rel = format!("checkpoint-100/model-{i:05}-of-00008.safetensors.bin");
        assert_eq!(sha256_file(&ck.join(&rel)), sha256_file(&env.path(&rel)));
    }
}

#[test]
fn config_detach_queues_by_default_with_retention_and_no_detach_blocks() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"llama\"\ncheckpoint_dir = \"ckpts\"\nledger = \"logs/ledger.jsonl\"\n[publish]\nkeep_last = 1\nmargin = \"1MiB\"\ndetach = true\n",
    );
    // Both are queued before the publisher may start (it waits behind the lock).
    let lock = hold_publish_lock(&env.path("ckpts"));
    for step in [10, 20] {
        let name = format!("ckpt-{step}.pt");
        env.write(&name, torch_zip(1000, step as u8));
        env.run(&["publish", &name])
            .expect(0)
            .stdout_has("queued")
            .stderr_has("roger: queued");
    }
    drop(lock);
    env.run(&["publish", "--wait", "--timeout", "300s"])
        .expect(0)
        .stdout_has("published");
    // The queued publishes ran with the config's retention, under its run and ledger.
    assert!(!env.path("ckpts/ckpt-10.pt").exists());
    assert!(env.path("ckpts/ckpt-20.pt").exists());
    let recs = ledger_records(&env.path("logs/ledger.jsonl"));
    // Each request is recorded by the publisher as it takes it in (the second may land after
    // the first publish), always before its own publish.
    let kinds: Vec<(&str, u64)> = recs
        .iter()
        .map(|r| (r["kind"].as_str().unwrap(), r["step"].as_u64().unwrap_or(0)))
        .collect();
    let at = |k: &str, step: u64| kinds.iter().position(|x| *x == (k, step)).unwrap();
    assert!(at("publish_queued", 10) < at("publish", 10), "{kinds:?}");
    assert!(at("publish_queued", 20) < at("publish", 20), "{kinds:?}");
    assert!(
        at("publish_queued", 10) < at("publish_queued", 20),
        "{kinds:?}"
    );
    assert!(at("publish", 10) < at("publish", 20), "{kinds:?}");
    let tail: Vec<&str> = kinds[4..].iter().map(|x| x.0).collect();
    assert_eq!((kinds.len(), tail), (6, vec!["prune", "note"]), "{kinds:?}");
    assert!(recs.iter().all(|r| r["run"] == "llama"));
    let waited = recs.last().unwrap();
    assert_eq!(waited["event"], "publish-waited");
    assert_eq!(
        (waited["published"].as_u64(), waited["rejected"].as_u64()),
        (Some(2), Some(0))
    );
    env.write("ckpt-30.pt", torch_zip(1000, 30));
    env.run(&["publish", "ckpt-30.pt", "--no-detach"])
        .expect(0)
        .stdout_has("published");
    assert_eq!(latest(&env.path("ckpts"))["step"], 30);
}
