//! The machine is lost: a watched run publishes to the bucket; its whole directory goes; a
//! new `roger watch` in an empty directory with the same config rebuilds the ledger from the
//! bucket, resumes from the newest verified step, counts the relaunches from before the loss
//! against the budget, and `ledger verify` passes on the rebuilt chain. And the kubelet's
//! sequence against a watch with a bucket, then a second "pod" resuming from it.

use super::*;
use crate::util::kubelet;
use crate::util::Env;
use crate::watch::{fake_train, poll_until, wait_child};

fn watch(env: &Env, train: &[&str]) -> std::process::Child {
    let cfg = env.path("roger.toml");
    let mut args: Vec<String> = vec![
        "--config".into(),
        cfg.display().to_string(),
        "watch".into(),
        "--".into(),
        fake_train().display().to_string(),
        "--log".into(),
        env.path("train.jsonl").display().to_string(),
        "--ckpt-dir".into(),
        env.path("ck").display().to_string(),
        "--config".into(),
        cfg.display().to_string(),
        "--save-every".into(),
        "10".into(),
    ];
    args.extend(train.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut c = cmd(env, &refs);
    c.env_remove("SLURM_RESTART_COUNT")
        .env_remove("SLURM_JOB_ID")
        .stdout(std::fs::File::create(env.path("watch.out")).unwrap())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    c.spawn().unwrap()
}

fn steps(env: &Env) -> Vec<u64> {
    env.read("train.jsonl")
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            v["step"].as_u64()
        })
        .collect()
}

const WATCH: &str = "[watch]\ninterval = \"200ms\"\nhysteresis = 2\nbackoff_initial = \"0s\"\n";

#[test]
fn a_new_machine_resumes_from_the_bucket_with_the_ledger_and_the_budget_of_the_old_one() {
    let Some(s) = server("a_new_machine_resumes_from_the_bucket") else {
        return;
    };
    // Machine A: crashes once at step 25 (a relaunch), finishes at 40.
    let a = Env::new();
    config(&a, &s.endpoint(), &format!("{WATCH}max_relaunches = 2\n"));
    let mut w = watch(
        &a,
        &["--steps", "40", "--step-ms", "20", "--crash-at", "25"],
    );
    let st = wait_child(&mut w, LIMIT);
    assert_eq!(st.code(), Some(0), "{}", a.read("watch.err"));
    wait(&a).expect(0);
    assert_eq!(remote_latest(&s).unwrap()["step"], 40);
    let config_text = a.read("roger.toml");
    drop(a); // the machine and its disk are gone

    // Machine B, an empty directory: resumes at 40; its one crash finds the budget spent
    // (1 relaunch before the loss + the loss itself = max_relaunches 2).
    let b = Env::new();
    b.write("roger.toml", &config_text);
    let mut w = watch(
        &b,
        &[
            "--steps",
            "60",
            "--step-ms",
            "20",
            "--crash-at",
            "45",
            "--cues-on-resume",
        ],
    );
    let st = wait_child(&mut w, LIMIT);
    let err = b.read("watch.err");
    assert_eq!(st.code(), Some(75), "the budget breaker: {err}");
    assert!(err.contains("rebuilt"), "{err}");
    assert!(
        err.contains("fetched step 40 from s3://ckpts/runs/r1/checkpoints/ckpt-40.json"),
        "{err}"
    );
    assert_eq!(steps(&b).first(), Some(&41), "resumed after step 40");
    let recs = records(&b);
    let breaker = recs.iter().find(|r| r.kind == Kind::Breaker).unwrap();
    assert_eq!(
        breaker.str_field("breaker"),
        Some("budget"),
        "{:?}",
        breaker.fields
    );
    run(&b, &["--config", "roger.toml", "ledger", "verify"]).expect(0);
    let ev = events(&b);
    assert!(
        ev.starts_with(&[])
            && ev.contains(&"ledger_rebuilt".into())
            && ev.contains(&"fetched".into()),
        "{ev:?}"
    );
    // The rebuilt ledger holds machine A's records, byte for byte, then B's.
    let mirror_len = recs
        .iter()
        .find(|r| r.str_field("event") == Some("ledger_rebuilt"))
        .unwrap()
        .u64_field("records")
        .unwrap();
    assert!(mirror_len > 10, "{mirror_len}");
    drop(b);

    // Machine C: a fresh start with the budget the config gives: resumes and finishes.
    let c = Env::new();
    c.write(
        "roger.toml",
        config_text.replace("max_relaunches = 2", "max_relaunches = 10")
            + "[export]\ntextfile = \"roger.prom\"\n",
    );
    let mut w = watch(&c, &["--steps", "60", "--step-ms", "20"]);
    let st = wait_child(&mut w, LIMIT);
    assert_eq!(st.code(), Some(0), "{}", c.read("watch.err"));
    assert_eq!(steps(&c).first(), Some(&41));
    assert_eq!(steps(&c).last(), Some(&60));
    run(&c, &["--config", "roger.toml", "ledger", "verify"]).expect(0);
    wait(&c).expect(0);
    assert_eq!(remote_latest(&s).unwrap()["step"], 60);
    // The watch's Prometheus textfile has the bucket side.
    let prom = c.read("roger.prom");
    assert!(
        prom.contains("roger_remote_verified_step{run=\"r1\",source=\"watch\"}"),
        "{prom}"
    );
    assert!(prom.contains("roger_remote_queued{"), "{prom}");
}

#[test]
fn the_kubelets_sigterm_hands_off_to_the_bucket_and_the_next_pod_resumes_from_it() {
    let Some(s) = server("the_kubelets_sigterm_hands_off_to_the_bucket") else {
        return;
    };
    let pod1 = Env::new();
    config(
        &pod1,
        &s.endpoint(),
        &format!("{WATCH}[preempt]\nsigterm = true\nsigterm_window = \"30s\"\nmargin = \"2s\"\nrequeue = \"exit\"\n"),
    );
    let mut w = watch(&pod1, &["--steps", "100000", "--step-ms", "30"]);
    poll_until("a checkpoint verified in the bucket", LIMIT, || {
        remote_latest(&s).is_some()
    });
    let stopped = kubelet::terminate(&mut w, Duration::from_secs(35));
    let err = pod1.read("watch.err");
    assert!(!stopped.killed, "SIGKILL needed after the grace: {err}");
    assert_eq!(stopped.status.code(), Some(76), "{err}");
    let recs = records(&pod1);
    let saved = recs
        .iter()
        .find(|r| r.str_field("event") == Some("preempt_saved"))
        .unwrap_or_else(|| panic!("no preempt_saved: {err}"));
    assert_eq!(saved.get("bucket_verified"), Some(&serde_json::json!(true)));
    let step = saved.u64_field("ckpt_step").unwrap();
    // The hand-off's checkpoint is verified in the bucket (not only on this disk).
    let verified: Vec<u64> = recs
        .iter()
        .filter(|r| r.str_field("event") == Some("verified"))
        .filter_map(|r| r.step)
        .collect();
    assert!(verified.contains(&step), "{step} not in {verified:?}");
    let config_text = pod1.read("roger.toml");
    drop(pod1);
    // The replacement pod: empty volume, same config. It resumes from the bucket's newest
    // verified checkpoint: the hand-off's, or one the run published before its stop whose
    // upload was verified after it (a loaded CI machine showed it).
    let pod2 = Env::new();
    pod2.write("roger.toml", &config_text);
    let end = step + 200;
    let mut w = watch(&pod2, &["--steps", &end.to_string(), "--step-ms", "20"]);
    let st = wait_child(&mut w, LIMIT);
    assert_eq!(st.code(), Some(0), "{}", pod2.read("watch.err"));
    let fetched = records(&pod2)
        .iter()
        .find(|r| r.str_field("event") == Some("fetched"))
        .and_then(|r| r.step)
        .unwrap_or_else(|| panic!("pod 2 fetched nothing: {}", pod2.read("watch.err")));
    assert!(
        fetched >= step,
        "fetched {fetched}, older than the hand-off's {step}"
    );
    assert_eq!(
        steps(&pod2).first(),
        Some(&(fetched + 1)),
        "resumed from the fetched step {fetched} (the hand-off's: {step})"
    );
    assert_eq!(steps(&pod2).last(), Some(&end));
    run(&pod2, &["--config", "roger.toml", "ledger", "verify"]).expect(0);
}
