//! The crash-safety proof, end to end with the real binary: a crash at every step boundary,
//! `kill -9` at random moments of a large publish, a copy truncated after its fsync, ENOSPC on
//! a tiny filesystem, and the free-space refusal. After each: latest.json parses and its
//! target verifies, the previous checkpoint is intact, and the next publish cleans up.

use super::{latest, ledger_records, names_in, sha256_file, torch_zip};
use crate::util::{roger_bin, Env};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// latest.json parses and the checkpoint it names exists with the recorded size and sha256.
/// Returns the recorded sha256.
#[track_caller]
fn check_latest(dir: &Path) -> String {
    let l = latest(dir);
    let target = dir.join(l["path"].as_str().expect("latest.json path"));
    let d = roger::digest::hash_path(&target)
        .unwrap_or_else(|e| panic!("latest.json target {} unreadable: {e:#}", target.display()));
    assert_eq!(
        d.sha256,
        l["sha256"].as_str().unwrap(),
        "{}",
        target.display()
    );
    assert_eq!(d.size, l["size"].as_u64().unwrap(), "{}", target.display());
    d.sha256
}

fn leftovers(dir: &Path) -> Vec<String> {
    names_in(dir)
        .into_iter()
        .filter(|n| n.starts_with(".roger-staging-") || n.starts_with(".roger-prev-"))
        .collect()
}

#[track_caller]
fn next_publish_cleans(env: &Env, src: &str) {
    let ck = env.path("ck");
    env.run(&["publish", src, "--to", "ck"]).expect(0);
    assert_eq!(
        leftovers(&ck),
        Vec::<String>::new(),
        "{}",
        crate::util::listing(&ck)
    );
    check_latest(&ck);
    env.run(&["publish", "--verify", "--to", "ck"]).expect(0);
    env.run(&["ledger", "--ledger", "ck/roger-ledger.jsonl", "verify"])
        .expect(0);
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Scenario {
    /// ckpt-1.pt, then ckpt-2.pt crashes.
    NewName,
    /// model.pt replaced by a new model.pt.
    SameName,
    /// checkpoint-7/ (a directory) replaced by a new checkpoint-7/.
    SameDir,
}

fn write_version(env: &Env, s: Scenario, v: u8) -> String {
    match s {
        Scenario::NewName => {
            let rel = format!("v{v}/ckpt-{v}.pt");
            env.write(&rel, torch_zip(50_000, v));
            rel
        }
        Scenario::SameName => {
            let rel = format!("v{v}/model.pt");
            env.write(&rel, torch_zip(50_000, v));
            rel
        }
        Scenario::SameDir => {
            env.write(
                &format!("v{v}/checkpoint-7/model.safetensors.bin"),
                vec![v; 30_000],
            );
            env.write(&format!("v{v}/checkpoint-7/sub/optim.bin"), vec![v; 7_000]);
            env.write(
                &format!("v{v}/checkpoint-7/trainer_state.json"),
                format!("{{\"v\":{v}}}"),
            );
            format!("v{v}/checkpoint-7")
        }
    }
}

#[test]
fn every_failpoint_leaves_a_verifiable_state_and_the_next_publish_cleans() {
    for &fp in roger::publish::failpoint::ALL {
        for s in [Scenario::NewName, Scenario::SameName, Scenario::SameDir] {
            let env = Env::new();
            let ck = env.path("ck");
            let v1 = write_version(&env, s, 1);
            env.run(&["publish", &v1, "--to", "ck"]).expect(0);
            let sha1 = check_latest(&ck);
            let v1_name = Path::new(&v1).file_name().unwrap().to_owned();
            let v2 = write_version(&env, s, 2);
            let sha2 = roger::digest::hash_path(&env.path(&v2)).unwrap().sha256;
            let mut c = env.cmd(&["publish", &v2, "--to", "ck"]);
            c.env("ROGER_FAILPOINT", fp);
            let r = env.run_cmd(c, &["publish", &v2, "--to", "ck"]);
            let ctx = format!("failpoint {fp}, {s:?}\n{}", r.report());
            if r.out.status.success() {
                // The swap-only failpoint is not on a new name's path; nothing is pruned
                // without retention.
                assert!(
                    (fp == "after_prev_link" && s == Scenario::NewName)
                        || fp == "after_prune_record",
                    "{ctx}"
                );
            } else {
                assert_eq!(r.out.status.signal(), Some(libc::SIGABRT), "{ctx}");
                assert!(r.stderr().contains(&format!("failpoint {fp}")), "{ctx}");
            }
            let now = check_latest(&ck);
            assert!(now == sha1 || now == sha2, "{ctx}");
            match s {
                Scenario::NewName => {
                    assert_eq!(sha256_file(&ck.join(&v1_name)), sha1, "{ctx}")
                }
                _ => {
                    // The name holds the whole old checkpoint or the whole new one.
                    let at_name = sha256_file(&ck.join(&v1_name));
                    assert!(at_name == sha1 || at_name == sha2, "{ctx}");
                    // ...and until latest.json moves on, the old bytes are still there.
                    if now == sha1 {
                        let l = latest(&ck);
                        let t = ck.join(l["path"].as_str().unwrap());
                        assert_eq!(sha256_file(&t), sha1, "{ctx}");
                    }
                }
            }
            let v3 = write_version(&env, s, 3);
            next_publish_cleans(&env, &v3);
        }
    }
}

/// xorshift64*: enough randomness for kill timing without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn kill_9_at_random_moments_never_leaves_a_torn_checkpoint() {
    const SIZE: usize = 64 << 20;
    const KILLS: usize = 60;
    let env = Env::new();
    let ck = env.path("ck");
    env.write("a/model.pt", torch_zip(SIZE, 0xAA));
    env.write("b/model.pt", torch_zip(SIZE, 0xBB));
    let sha_a = sha256_file(&env.path("a/model.pt"));
    let sha_b = sha256_file(&env.path("b/model.pt"));
    // Calibrate: how long a whole publish takes here, now.
    let mut full = Duration::ZERO;
    for src in ["a/model.pt", "b/model.pt"] {
        let t = Instant::now();
        env.run(&["publish", src, "--to", "ck"]).expect(0);
        full = full.max(t.elapsed());
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill -9 test: seed {seed}, a full publish takes {full:?}");
    let mut rng = Rng(seed);
    // The kill window adapts to how fast publishes run right now (the machine is shared):
    // narrower when a kill came too late, wider when it landed mid-run.
    let mut window = full.as_micros() as u64;
    let (mut mid_run, mut with_leftovers) = (0, 0);
    for i in 0..KILLS {
        let src = if i % 2 == 0 {
            "a/model.pt"
        } else {
            "b/model.pt"
        };
        let mut child = Command::new(roger_bin())
            .args(["publish", src, "--to", "ck"])
            .current_dir(env.dir.path())
            .env_remove("ROGER_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(rng.next() % window.max(1)));
        if child.try_wait().unwrap().is_none() {
            mid_run += 1;
            window = window * 21 / 20;
        } else {
            window = window * 4 / 5;
        }
        let _ = child.kill(); // SIGKILL
        child.wait().unwrap();
        let ctx = format!("kill {i} (seed {seed})\n{}", crate::util::listing(&ck));
        let at_name = sha256_file(&ck.join("model.pt"));
        assert!(at_name == sha_a || at_name == sha_b, "torn model.pt: {ctx}");
        let l = latest(&ck);
        let recorded = l["sha256"].as_str().unwrap().to_string();
        assert!(recorded == sha_a || recorded == sha_b, "{ctx}");
        if l["path"] == "model.pt" {
            assert_eq!(at_name, recorded, "latest.json does not verify: {ctx}");
        } else {
            assert_eq!(check_latest(&ck), recorded, "{ctx}");
        }
        if !leftovers(&ck).is_empty() {
            with_leftovers += 1;
        }
    }
    eprintln!(
        "{mid_run}/{KILLS} kills landed while roger ran; {with_leftovers} left staging files"
    );
    assert!(
        mid_run >= KILLS / 2,
        "only {mid_run} kills landed mid-publish"
    );
    assert!(with_leftovers >= 1, "no kill landed mid-copy");
    next_publish_cleans(&env, "a/model.pt");
    assert_eq!(sha256_file(&ck.join("model.pt")), sha_a);
}

#[test]
fn truncation_after_fsync_is_caught_and_nothing_is_published() {
    for name in ["ckpt-2.pt", "ckpt-1.pt"] {
        let env = Env::new();
        let ck = env.path("ck");
        env.write("v1/ckpt-1.pt", torch_zip(300_000, 1));
        env.run(&["publish", "v1/ckpt-1.pt", "--to", "ck"])
            .expect(0);
        let sha1 = check_latest(&ck);
        let src = format!("v2/{name}");
        env.write(&src, torch_zip(300_000, 2));
        let mut c = env.cmd(&["publish", &src, "--to", "ck"]);
        c.env("ROGER_FAULT_TRUNCATE_AFTER_FSYNC", "4096");
        env.run_cmd(c, &["publish", &src, "--to", "ck"])
            .expect(1)
            .stderr_has("verification from disk failed")
            .stderr_has("4096 bytes on disk")
            .stderr_has("nothing was published");
        assert_eq!(check_latest(&ck), sha1);
        assert_eq!(sha256_file(&ck.join("ckpt-1.pt")), sha1);
        assert!(!ck.join("ckpt-2.pt").exists());
        assert_eq!(leftovers(&ck), Vec::<String>::new());
        // The bad copy went into the quarantine (moved, never under the real name).
        assert!(names_in(&ck.join(".roger-rejected")).is_empty());
        let items = names_in(&ck.join(".roger/quarantine"));
        assert_eq!(items.len(), 1, "{}", crate::util::listing(&ck));
        let item_dir = ck.join(".roger/quarantine").join(&items[0]);
        let held: Vec<String> = names_in(&item_dir)
            .into_iter()
            .filter(|n| n != "meta.json")
            .collect();
        assert_eq!(held.len(), 1);
        assert!(held[0].starts_with(&format!("{name}.")));
        let evidence = item_dir.join(&held[0]);
        assert_eq!(std::fs::metadata(&evidence).unwrap().len(), 4096);
        let recs = ledger_records(&ck.join("roger-ledger.jsonl"));
        let quarantined = &recs[recs.len() - 2];
        assert_eq!(quarantined["kind"], "quarantine");
        assert!(quarantined["reason"]
            .as_str()
            .unwrap()
            .contains("publish verification from disk failed"));
        let last = recs.last().unwrap();
        assert_eq!(last["kind"], "note");
        assert_eq!(last["event"], "publish-rejected");
        assert_eq!(
            last["evidence"],
            std::fs::canonicalize(&evidence)
                .unwrap()
                .display()
                .to_string()
        );
        assert!(last["reason"]
            .as_str()
            .unwrap()
            .contains("4096 bytes on disk"));
        assert_eq!(recs.iter().filter(|r| r["kind"] == "publish").count(), 1);
    }
}

#[test]
fn the_verify_read_comes_from_disk() {
    let env = Env::new();
    let size = 16usize << 20;
    env.write("ckpt-9.pt", torch_zip(size, 9));
    let out = env
        .run(&["publish", "ckpt-9.pt", "--to", "ck", "--json"])
        .expect(0);
    let o: serde_json::Value = serde_json::from_str(out.stdout().trim()).unwrap();
    let total = o["pages_total"].as_u64().unwrap();
    let resident = o["pages_resident_before_verify"].as_u64().unwrap();
    assert_eq!(o["verify_bytes_read"], o["size"]);
    eprintln!("verify used O_DIRECT: {}", o["verify_direct_io"]);
    assert_eq!(total, o["size"].as_u64().unwrap().div_ceil(4096));
    let tmpfs = nix::sys::statfs::statfs(env.dir.path())
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
    if tmpfs {
        eprintln!("temp dir is on tmpfs: its pages cannot be evicted, residency not checked");
    } else {
        assert!(
            resident * 20 < total,
            "{resident}/{total} pages still cached before the re-read"
        );
    }
}

#[test]
fn free_space_precheck_refuses_and_touches_nothing() {
    let env = Env::new();
    env.write("ckpt-1.pt", torch_zip(100_000, 1));
    let mut c = env.cmd(&["publish", "ckpt-1.pt", "--to", "ck"]);
    c.env("ROGER_FAKE_FREE_BYTES", "1000000");
    env.run_cmd(c, &["publish", "ckpt-1.pt", "--to", "ck"])
        .expect(1)
        .stderr_has("not enough free space")
        .stderr_has("nothing was touched");
    assert!(!env.path("ck").exists());
    env.run(&["publish", "ckpt-1.pt", "--to", "ck"]).expect(0);
    let before = names_in(&env.path("ck"));
    let ledger_before = env.read("ck/roger-ledger.jsonl");
    env.write("ckpt-2.pt", torch_zip(100_000, 2));
    let mut c = env.cmd(&["publish", "ckpt-2.pt", "--to", "ck"]);
    c.env("ROGER_FAKE_FREE_BYTES", "1000000");
    env.run_cmd(c, &["publish", "ckpt-2.pt", "--to", "ck"])
        .expect(1);
    assert_eq!(names_in(&env.path("ck")), before);
    assert_eq!(env.read("ck/roger-ledger.jsonl"), ledger_before);
}

#[test]
fn enospc_on_a_tiny_filesystem_fails_cleanly() {
    let env = Env::new();
    let tiny = env.path("tiny");
    let Some(_guard) =
        crate::util::mount_tmpfs(&tiny, "8m", "enospc_on_a_tiny_filesystem_fails_cleanly")
    else {
        return;
    };
    env.write(
        "roger.toml",
        "[run]\nname = \"tiny\"\ncheckpoint_dir = \"tiny\"\n[publish]\nmargin = \"64KiB\"\nkeep_last = 5\n",
    );
    env.write("ckpt-1.pt", torch_zip(2 << 20, 1));
    env.write("ckpt-2.pt", torch_zip(12 << 20, 2));
    env.write("ckpt-3.pt", torch_zip(1 << 20, 3));
    env.run(&["publish", "ckpt-1.pt"]).expect(0);
    let sha1 = check_latest(&tiny);
    // The precheck sees it cannot fit.
    env.run(&["publish", "ckpt-2.pt"])
        .expect(1)
        .stderr_has("not enough free space");
    // With the precheck fooled, the copy runs into the real ENOSPC mid-write.
    let mut c = env.cmd(&["publish", "ckpt-2.pt"]);
    c.env("ROGER_FAKE_FREE_BYTES", "1000000000000");
    env.run_cmd(c, &["publish", "ckpt-2.pt"])
        .expect(1)
        .stderr_has("No space left on device");
    assert_eq!(check_latest(&tiny), sha1);
    assert_eq!(sha256_file(&tiny.join("ckpt-1.pt")), sha1);
    assert!(!tiny.join("ckpt-2.pt").exists());
    assert_eq!(
        leftovers(&tiny),
        Vec::<String>::new(),
        "staging copy removed"
    );
    // The ledger (beside roger.toml) has only the one publish; a publish that fits works.
    let recs = ledger_records(&env.path("roger-ledger.jsonl"));
    assert_eq!(recs.iter().filter(|r| r["kind"] == "publish").count(), 1);
    env.run(&["publish", "ckpt-3.pt"]).expect(0);
    assert_eq!(latest(&tiny)["path"], "ckpt-3.pt");
}

#[test]
fn a_live_publishers_staging_copy_is_not_cleaned() {
    // Stand in for a live publisher: hold the destination's lock with a staging file in
    // progress. A second publish waits for the lock instead of deleting that file; once the
    // holder is gone, the file is a leftover and is cleaned.
    let env = Env::new();
    env.write("ckpt-1.pt", torch_zip(1000, 1));
    env.run(&["publish", "ckpt-1.pt", "--to", "ck"]).expect(0);
    let live = env.write("ck/.roger-staging-1-1-ckpt-2.pt", b"half written");
    let lock_file = std::fs::OpenOptions::new()
        .write(true)
        .open(env.path("ck/.roger-publish.lock"))
        .unwrap();
    let held = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .unwrap();
    env.write("ckpt-3.pt", torch_zip(1000, 3));
    let mut child = env
        .cmd(&["publish", "ckpt-3.pt", "--to", "ck"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "publish did not wait for the lock"
    );
    assert!(live.exists(), "a live staging file was removed");
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "publish still blocked after the lock was released"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    assert!(!live.exists(), "leftover not cleaned");
    assert_eq!(latest(&env.path("ck"))["path"], "ckpt-3.pt");
}
