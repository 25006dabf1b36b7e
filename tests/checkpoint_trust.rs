//! Issue 10, items 5, 6, 7, 9: the last good checkpoint is never pruned nor mis-chosen, and
//! roger's own files cannot be published over. The real binary (publish, critic, hygiene,
//! watch with a one-line shell run that writes down the resume point it was handed) in temp
//! dirs; critic verdicts come from the real critic or are appended through the ledger API.

use crate::util::{Env, Run};
use roger::ledger::{Entry, Kind, Ledger, Record};
use std::process::Stdio;
use std::time::{Duration, Instant};

fn config(env: &Env, publish: &str) {
    env.write(
        "roger.toml",
        format!(
            "[run]\nname = \"r\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ck\"\n\n[publish]\n{publish}\n\n[gpu]\nsource = \"none\"\n\n[disk]\nwarn_free = \"1KB\"\nfail_free = \"0\"\nprune_goal_free = \"1000TB\"\n\n[watch]\ninterval = \"100ms\"\nbackoff_initial = \"100ms\"\n\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [1.0, 5.0]\nwindow = 10\n"
        ),
    );
}

fn publish(env: &Env, name: &str, extra: &[&str]) -> Run {
    let src = env.write(&format!("out/{name}"), format!("weights of {name}"));
    let mut args = vec!["publish", src.to_str().unwrap()];
    args.extend_from_slice(extra);
    env.run(&args)
}

fn ledger(env: &Env) -> Ledger {
    Ledger::new(env.path("roger-ledger.jsonl"))
}

fn records(env: &Env) -> Vec<Record> {
    ledger(env).records().unwrap()
}

/// A critic `fail` verdict about `step`, its loss check naming `diverged_at`.
fn fail_verdict(env: &Env, step: u64, diverged_at: Option<u64>) {
    let mut check = serde_json::json!({"check": "loss", "status": "fail", "observed": "NaN",
        "expected": "finite", "reason": "loss is NaN"});
    if let Some(d) = diverged_at {
        check["diverged_at"] = d.into();
    }
    ledger(env)
        .append(
            Entry::new(Kind::Verdict, "critic", "r")
                .step(Some(step))
                .field("status", "fail")
                .field("checks", vec![check]),
            chrono::Utc::now(),
        )
        .unwrap();
}

/// `roger watch` over a run that only writes down the resume point it was handed and exits 0.
fn resume_point(env: &Env) -> String {
    let out = watch_to_the_end(
        env,
        &["sh", "-c", "printf %s \"$ROGER_RESUME_CKPT\" > resumed.txt"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.read("resumed.txt")
}

/// `roger watch -- CMD...` run to its end (bounded), stderr captured.
fn watch_to_the_end(env: &Env, cmd: &[&str]) -> std::process::Output {
    let mut args = vec!["watch", "--"];
    args.extend_from_slice(cmd);
    let mut c = env.cmd(&args);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!(
                "roger watch did not finish\n{}",
                crate::util::listing(env.dir.path())
            );
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    child.wait_with_output().unwrap()
}

/// Item 5: with keep_last = 2, the only checkpoint before a standing fail outlives the
/// publishes after it; the diverged ones are pruned instead.
#[test]
fn publish_retention_keeps_the_last_good_checkpoint_before_a_standing_fail() {
    let env = Env::new();
    config(&env, "keep_last = 2");
    publish(&env, "ckpt-100.bin", &[]).expect(0);
    fail_verdict(&env, 150, None);
    publish(&env, "ckpt-200.bin", &[]).expect(0);
    publish(&env, "ckpt-300.bin", &[]).expect(0);
    assert!(
        env.path("ck/ckpt-100.bin").exists(),
        "{}",
        crate::util::listing(env.dir.path())
    );
    let r = publish(&env, "ckpt-400.bin", &["--json"]).expect(0);
    let out: serde_json::Value = serde_json::from_str(r.stdout().trim()).unwrap();
    let pruned: Vec<&str> = out["pruned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(pruned.len(), 1, "{}", r.report());
    assert!(pruned[0].ends_with("ck/ckpt-200.bin"), "{}", r.report());
    assert!(env.path("ck/ckpt-100.bin").exists(), "{}", r.report());
    assert!(env.path("ck/ckpt-300.bin").exists() && env.path("ck/ckpt-400.bin").exists());
}

/// Items 5 and 7: `hygiene disk --prune` keeps the newest checkpoint before the onset of a
/// standing fail, not the newest before the step the verdict was filed at.
#[test]
fn hygiene_prune_keeps_the_newest_checkpoint_before_the_onset() {
    let env = Env::new();
    config(&env, "keep_last = 1");
    for name in ["ckpt-70.bin", "ckpt-90.bin", "ckpt-110.bin"] {
        publish(&env, name, &["--no-prune"]).expect(0);
    }
    // The critic noticed at step 120 a NaN that began at step 80.
    fail_verdict(&env, 120, Some(80));
    let r = env.run(&["hygiene", "disk", "--prune"]);
    assert!(env.path("ck/ckpt-70.bin").exists(), "{}", r.report());
    assert!(!env.path("ck/ckpt-90.bin").exists(), "{}", r.report());
    assert!(
        env.path("ck/ckpt-110.bin").exists(),
        "latest.json points to it"
    );
    assert!(
        r.stdout().contains("ckpt-70.bin: the last good checkpoint"),
        "{}",
        r.report()
    );
}

/// Item 5: hygiene prunes under the publish lock, so it never races a publish's retention.
#[test]
fn hygiene_prune_waits_for_the_publish_lock() {
    let env = Env::new();
    config(&env, "keep_last = 1");
    for name in ["ckpt-1.bin", "ckpt-2.bin"] {
        publish(&env, name, &["--no-prune"]).expect(0);
    }
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(env.path("ck/.roger-publish.lock"))
        .unwrap();
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let mut c = env.cmd(&["hygiene", "disk", "--prune"]);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "hygiene finished while a publish held the lock"
        );
        assert!(env.path("ck/ckpt-1.bin").exists());
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(held);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(
        !env.path("ck/ckpt-1.bin").exists(),
        "pruned once the lock was free"
    );
}

/// Item 6: a checkpoint whose name carries no step (Lightning's `last.ckpt`) published after a
/// standing fail is not the resume point.
#[test]
fn a_stepless_checkpoint_published_after_a_fail_is_not_resumed_from() {
    let env = Env::new();
    config(&env, "keep_last = 5");
    publish(&env, "ckpt-100.bin", &[]).expect(0);
    fail_verdict(&env, 150, Some(150));
    let src = env.write("out/last.ckpt", b"\x80\x02diverged weights");
    env.run(&["publish", src.to_str().unwrap()]).expect(0);
    let resumed = resume_point(&env);
    assert!(
        resumed.ends_with("ck/ckpt-100.bin"),
        "resumed from {resumed:?}"
    );
    assert!(
        records(&env).iter().any(|r| r.kind == Kind::Publish
            && r.str_field("path")
                .is_some_and(|p| p.ends_with("last.ckpt"))),
        "last.ckpt was published"
    );
}

/// Item 7: a NaN that began at step 80 is reported from step 80 however small the window and
/// however many steps one read covers; replay agrees; the checkpoint saved after the onset is
/// passed over for the one before it, and retention keeps that one while the NaN run goes on.
#[test]
fn the_onset_is_found_beyond_the_window_and_drives_resume_and_retention() {
    let env = Env::new();
    config(&env, "keep_last = 2");
    let mut log = String::new();
    for s in 0..200u64 {
        if s < 80 {
            log.push_str(&format!("{{\"step\": {s}, \"loss\": 3.0}}\n"));
        } else {
            log.push_str(&format!("{{\"step\": {s}, \"loss\": NaN}}\n"));
        }
    }
    env.write("train.jsonl", log);
    publish(&env, "ckpt-70.bin", &[]).expect(0);
    publish(&env, "ckpt-90.bin", &[]).expect(0);
    let r = env.run(&["critic"]).expect(2).stdout_has("since step 80");
    let v = records(&env)
        .into_iter()
        .rfind(|r| r.kind == Kind::Verdict)
        .unwrap();
    let loss = v.get("checks").unwrap().as_array().unwrap()[0].clone();
    assert_eq!(loss["check"], "loss", "{}", r.report());
    assert_eq!(loss["diverged_at"], 80, "{loss:#}");
    assert!(
        loss["reason"]
            .as_str()
            .unwrap()
            .contains("120 sample(s) in a row since step 80"),
        "{loss:#}"
    );
    env.run(&["critic", "--replay"])
        .expect(0)
        .stdout_has("0 differ");
    // ckpt-90 was saved by the already-diverged run.
    let resumed = resume_point(&env);
    assert!(
        resumed.ends_with("ck/ckpt-70.bin"),
        "resumed from {resumed:?}"
    );
    // The NaN run keeps publishing: keep_last = 2 must not take ckpt-70.
    for name in ["ckpt-200.bin", "ckpt-210.bin", "ckpt-220.bin"] {
        publish(&env, name, &[]).expect(0);
    }
    assert!(
        env.path("ck/ckpt-70.bin").exists(),
        "{}",
        crate::util::listing(env.dir.path())
    );
}

/// Item 9: a checkpoint named like a file roger owns in the destination is refused, and the
/// file is left as it was.
#[test]
fn names_roger_owns_in_the_destination_are_refused() {
    let env = Env::new();
    config(&env, "keep_last = 5");
    publish(&env, "ckpt-1.bin", &[]).expect(0);
    // The ledger of this config lives in the run dir; give the destination one too, the
    // default name a config-less publish to `ck` would use.
    let before_ledger = env.read("roger-ledger.jsonl");
    let names = [
        "roger-ledger.jsonl",
        "roger-ledger.jsonl.lock",
        "latest.json",
        ".roger-publish.lock",
        ".roger-staging-1-2-x.bin",
        ".roger-rejected",
        ".roger",
        "roger.toml",
        "roger-evidence",
        "LATEST.JSON",
    ];
    for name in names {
        let r = publish(&env, name, &["--to", "ck"]).expect(1);
        assert!(r.stderr().contains("roger's own"), "{name}: {}", r.report());
    }
    // Without a config the ledger is DIR/roger-ledger.jsonl: publishing over it must fail and
    // leave it intact.
    let bare = Env::new();
    let src = bare.write("out/ckpt-5.bin", "w5");
    bare.run(&["publish", src.to_str().unwrap(), "--to", "ck"])
        .expect(0);
    let ledger_before = bare.read("ck/roger-ledger.jsonl");
    let evil = bare.write("out/roger-ledger.jsonl", "{\"not\": \"a ledger\"}\n");
    bare.run(&["publish", evil.to_str().unwrap(), "--to", "ck"])
        .expect(1)
        .stderr_has("roger's own");
    assert_eq!(bare.read("ck/roger-ledger.jsonl"), ledger_before);
    bare.run(&["ledger", "verify", "--ledger", "ck/roger-ledger.jsonl"])
        .expect(0);
    // A ledger at a custom name in the destination is protected by its name too.
    let custom = Env::new();
    custom.write(
        "roger.toml",
        "[run]\nname = \"c\"\ncheckpoint_dir = \"ck\"\nledger = \"ck/my-ledger.jsonl\"\n",
    );
    let src = custom.write("out/ckpt-1.bin", "w1");
    custom.run(&["publish", src.to_str().unwrap()]).expect(0);
    let evil = custom.write("out/my-ledger.jsonl", "x\n");
    custom
        .run(&["publish", evil.to_str().unwrap()])
        .expect(1)
        .stderr_has("roger's own");
    custom.run(&["ledger", "verify"]).expect(0);
    assert_eq!(env.read("roger-ledger.jsonl"), before_ledger);
}

/// `cargo build --example fake_train` once; its path beside the roger binary.
fn fake_train() -> std::path::PathBuf {
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        let st = std::process::Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--example", "fake_train"])
            .current_dir(crate::util::repo_root())
            .status()
            .expect("running cargo build --example fake_train");
        assert!(st.success(), "building fake_train failed");
    });
    let p = crate::util::roger_bin()
        .parent()
        .unwrap()
        .join("examples")
        .join("fake_train");
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// Item 7 end to end: the real critic daemon reads a NaN run in reads far longer than its
/// window; the watch rolls back to the checkpoint before the onset (step 80), not to one the
/// diverged run saved, and says `diverged_at` 80.
#[test]
fn a_watched_nan_run_rolls_back_to_before_its_onset() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"r\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ck\"\n\n[publish]\nkeep_last = 50\n\n[gpu]\nsource = \"none\"\n\n[watch]\ninterval = \"100ms\"\nhysteresis = 2\ngrace = \"2s\"\nstale = \"20s\"\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\nrollback_on = [\"loss\"]\n\n[[phase]]\nname = \"all\"\nfrom = 0\nwindow = 10\n",
    );
    let train = fake_train();
    let cfg = env.path("roger.toml").display().to_string();
    let watch_args: Vec<String> = [
        "watch",
        "--",
        train.to_str().unwrap(),
        "--log",
        env.path("train.jsonl").to_str().unwrap(),
        "--ckpt-dir",
        env.path("ck").to_str().unwrap(),
        "--config",
        &cfg,
        "--steps",
        "400",
        "--step-ms",
        "10",
        "--save-every",
        "10",
        "--nan-at",
        "80",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let refs: Vec<&str> = watch_args.iter().map(String::as_str).collect();
    let mut w = env.cmd(&refs);
    w.env("ROGER_BIN", crate::util::roger_bin())
        .env_remove("SLURM_RESTART_COUNT")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut watch = w.spawn().unwrap();
    // The critic reads every 2 s: each read covers far more new steps than the window of 10.
    let mut c = env.cmd(&["critic", "--daemon", "--interval", "2s"]);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut critic = c.spawn().unwrap();
    let t0 = Instant::now();
    let relaunch = loop {
        if let Some(r) = records(&env).into_iter().find(|r| r.kind == Kind::Relaunch) {
            break Some(r);
        }
        if t0.elapsed() > Duration::from_secs(120) || watch.try_wait().unwrap().is_some() {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for child in [&mut watch, &mut critic] {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let _ = critic.wait();
    let t1 = Instant::now();
    while watch.try_wait().unwrap().is_none() && t1.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let recs = records(&env);
    let relaunch = relaunch.unwrap_or_else(|| {
        panic!(
            "no relaunch; ledger kinds: {:?}",
            recs.iter().map(|r| r.kind).collect::<Vec<_>>()
        )
    });
    let trigger = recs
        .iter()
        .find(|r| r.kind == Kind::Verdict && r.str_field("status") == Some("fail"))
        .unwrap();
    let first_fail_step = trigger.step.unwrap();
    assert!(
        first_fail_step >= 80,
        "the first fail is at step {first_fail_step}"
    );
    assert_eq!(
        relaunch.u64_field("diverged_at"),
        Some(80),
        "first fail verdict at step {first_fail_step}: {:#}",
        trigger.get("checks").unwrap()
    );
    assert_eq!(
        relaunch.u64_field("ckpt_step"),
        Some(70),
        "{:?}",
        relaunch.fields
    );
}

/// The run's own `roger publish` killed after its rename but before its record (as roger's
/// own SIGKILL of the tree can do): the relaunch must resume from that checkpoint, finished and
/// recorded first, not from scratch or an older one.
#[test]
fn a_relaunch_finishes_a_publish_the_dead_run_left_half_done() {
    let env = Env::new();
    config(&env, "keep_last = 5");
    env.write("out/ckpt-10.bin", "weights of step 10");
    let roger = crate::util::roger_bin();
    let script = format!(
        "if [ -e launched ]; then printf %s \"$ROGER_RESUME_CKPT\" > resumed.txt; exit 0; fi; \
         touch launched; ROGER_FAILPOINT=after_rename {} publish out/ckpt-10.bin; exit 1",
        roger.display()
    );
    let out = watch_to_the_end(&env, &["sh", "-c", &script]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let resumed = env.read("resumed.txt");
    assert!(
        resumed.ends_with("ck/ckpt-10.bin"),
        "resumed from {resumed:?}\n{stderr}"
    );
    assert!(
        records(&env).iter().any(|r| r.kind == Kind::Publish
            && r.get("repaired").is_some()
            && r.str_field("path")
                .is_some_and(|p| p.ends_with("ckpt-10.bin"))),
        "the finished publish is recorded as a repair\n{stderr}"
    );
}
