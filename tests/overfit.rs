//! Overfitting as a verdict (issue 37 point 7), end to end on the real Whisper fine-tune
//! (`tests/fixtures/real/hf-whisper-5k.json`: eval loss best 0.321 at step 1000, then 0.3585,
//! 0.3937, 0.4123, 0.42 while the train loss falls to 2e-4): `init` proposes the eval check;
//! `critic --once` on the trainer_state as it stood at each save passes at 1000, warns at 2000
//! (the first eval above its best), fails at 4000 (three in a row), naming step 1000 and the
//! checkpoint published there; retention keeps it, `fetch --best` and `{best_ckpt}` give it,
//! status and report show it, replay agrees. A healthy real run (llm.c, eval falling) passes.

use crate::util::{repo_root, Env};
use serde_json::Value;

fn real(name: &str) -> std::path::PathBuf {
    repo_root().join("tests/fixtures/real").join(name)
}

/// The trainer_state.json as written at the save of `step`: its log history up to `step`.
fn whisper_at(step: u64) -> String {
    let text = std::fs::read_to_string(real("hf-whisper-5k.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["log_history"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["step"].as_u64().is_some_and(|s| s <= step));
    v["global_step"] = step.into();
    serde_json::to_string_pretty(&v).unwrap()
}

fn eval_check(run: &crate::util::Run) -> Value {
    let v: Value = serde_json::from_str(run.stdout().trim())
        .unwrap_or_else(|e| panic!("{e}\n{}", run.report()));
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "eval")
        .cloned()
        .unwrap_or_else(|| panic!("no eval check\n{}", run.report()))
}

#[test]
fn whisper_overfits_init_proposes_the_check_critic_warns_then_fails_at_the_best_checkpoint() {
    let env = Env::new();
    env.write("trainer_state.json", whisper_at(5000));
    let init = env.run(&["init", "--log", "trainer_state.json"]).expect(0);
    let cfg = env.read("roger.toml");
    assert!(cfg.contains("[critic]\neval_window = 3"), "{cfg}");
    assert!(cfg.contains("eval_margin = 0.005"), "{cfg}");
    assert!(cfg.contains("eval_noise = 2.0"), "{cfg}");
    assert!(
        cfg.contains("best 0.321 at step 1000"),
        "the proposal says the run's best: {cfg}"
    );
    init.stderr_has("eval check (overfitting): 5 evals of eval_loss in steps 1000..5000")
        .stderr_has("note: the eval check will fail on this run as logged: overfitting");
    // Checkpoints published as the run saved them; retention keeps one.
    let toml = format!(
        "{}\n[publish]\nkeep_last = 1\n",
        cfg.replacen("[run]\n", "[run]\ncheckpoint_dir = \"ck\"\n", 1)
    );
    env.write("roger.toml", &toml);
    env.run(&["check"]).expect(0);
    let publish = |step: u64| {
        let src = env.write(&format!("out/ckpt-{step}.bin"), format!("weights {step}"));
        env.run(&["-q", "publish", src.to_str().unwrap()]).expect(0);
    };
    let once = |step: u64, code: i32| {
        env.write("trainer_state.json", whisper_at(step));
        env.run(&["critic", "--once", "--json"]).expect(code)
    };
    publish(500);
    let at_1000 = eval_check(&once(1000, 0));
    assert_eq!(at_1000["status"], "unknown", "one eval: waiting {at_1000}");
    publish(1000);
    // Not before its best has been left...
    let warn = eval_check(&once(2000, 1));
    assert_eq!(warn["status"], "warn", "{warn}");
    let reason = warn["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("overfitting: eval loss 0.3585 at step 2000 is 0.0375 (+11.7%) above its best 0.321 at step 1000, 1 eval(s) in a row"),
        "{reason}"
    );
    assert!(reason.contains("while train loss fell"), "{reason}");
    let ck1000 = env.path("ck/ckpt-1000.bin");
    assert!(
        reason.contains(&format!("checkpoint {} is at that step", ck1000.display())),
        "{reason}"
    );
    // Later saves: keep_last = 1 would prune step 1000; the standing verdict keeps it.
    publish(1500);
    publish(2000);
    assert!(ck1000.exists(), "retention kept the best-eval checkpoint");
    assert!(!env.path("ck/ckpt-1500.bin").exists());
    assert_eq!(eval_check(&once(3000, 1))["status"], "warn", "2 in a row");
    let fail = eval_check(&once(4000, 2));
    assert_eq!(fail["status"], "fail", "{fail}");
    assert!(
        fail["reason"]
            .as_str()
            .unwrap()
            .contains("3 eval(s) in a row above best + margin"),
        "{fail}"
    );
    assert_eq!(fail["began_at"], 2000, "from the first eval above");
    // The record marks it.
    let recs = roger::ledger::Ledger::new(env.path("roger-ledger.jsonl"))
        .records()
        .unwrap();
    let last = recs
        .iter()
        .rev()
        .find(|r| r.kind == roger::ledger::Kind::Verdict)
        .unwrap();
    let best = last.get("best").expect("the verdict marks the best");
    assert_eq!(best["step"], 1000);
    assert_eq!(best["checkpoint"]["relation"], "at");
    assert_eq!(best["checkpoint"]["path"], ck1000.display().to_string());
    assert_eq!(best["newest_step"], 4000);
    env.run(&["critic", "--replay"])
        .expect(0)
        .stdout_has("0 differ");
    // fetch --best: the local copy, verified.
    env.run(&["fetch", "--best"])
        .expect(0)
        .stdout_has(&format!("best {}", ck1000.display()))
        .stdout_has("the checkpoint at the best eval (step 1000, loss 0.321)");
    // status and report show it.
    env.run(&["status"]).stdout_has(
        "best eval   best eval loss 0.321 at step 1000, now 0.4123 at step 4000 (+28.4%",
    );
    env.run(&["report", "--text"]).stdout_has(&format!(
        "overfitting (verdict #{} FAIL): best eval loss 0.321 at step 1000, now 0.4123 at step 4000 (+28.4%, 3 eval(s) above best + 0.0016); checkpoint {} is at that step",
        last.seq,
        ck1000.display()
    ));
}

/// With no checkpoint at the best step, the newest before it is named, and said to be so.
#[test]
fn the_checkpoint_before_the_best_eval_is_named_as_before() {
    let env = Env::new();
    env.write("trainer_state.json", whisper_at(2000));
    env.run(&["init", "--log", "trainer_state.json"]).expect(0);
    let cfg = env.read("roger.toml");
    env.write(
        "roger.toml",
        cfg.replacen("[run]\n", "[run]\ncheckpoint_dir = \"ck\"\n", 1),
    );
    let src = env.write("out/ckpt-750.bin", "weights 750");
    env.run(&["-q", "publish", src.to_str().unwrap()]).expect(0);
    let src = env.write("out/ckpt-1250.bin", "weights 1250");
    env.run(&["-q", "publish", src.to_str().unwrap()]).expect(0);
    let warn = eval_check(&env.run(&["critic", "--once", "--json"]).expect(1));
    let reason = warn["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "checkpoint {} (step 750) is the newest before it",
            env.path("ck/ckpt-750.bin").display()
        )),
        "{reason}"
    );
}

/// A healthy real run whose eval loss keeps falling (llm.c GPT-2 124M, 30 evals): init
/// proposes the check and the critic's eval check passes.
#[test]
fn a_healthy_real_run_whose_eval_keeps_falling_passes() {
    let env = Env::new();
    env.write(
        "train.txt",
        std::fs::read(real("text-llmc-gpt2-124m.txt")).unwrap(),
    );
    let init = env.run(&["init", "--log", "train.txt"]).expect(0);
    assert!(env.read("roger.toml").contains("eval_window = 3"));
    assert!(
        !init.stderr().contains("the eval check will"),
        "{}",
        init.report()
    );
    let run = env.run(&["critic", "--once", "--json"]);
    let eval = eval_check(&run);
    assert_eq!(eval["status"], "pass", "{eval}");
    assert!(
        eval["reason"]
            .as_str()
            .unwrap()
            .contains("is its best so far"),
        "{eval}"
    );
}

/// `fetch --best` on a machine without the checkpoint: the ledger from the bucket, the marked
/// step's verified copy downloaded (moto on loopback; skipped off CI without it).
#[test]
fn fetch_best_downloads_the_marked_checkpoint_from_the_bucket() {
    use crate::remote::{bytes, config, publish, run, server, wait};
    let Some(s) = server("fetch_best_downloads_the_marked_checkpoint") else {
        return;
    };
    let env = Env::new();
    config(&env, &s.endpoint(), "");
    let line = |step: u64, k: &str, v: f64| format!("{{\"step\": {step}, \"{k}\": {v}}}\n");
    let mut log = String::new();
    for (step, train, eval) in [(10, 1.0, 0.50), (20, 0.5, 0.40), (30, 0.2, 0.46)] {
        log.push_str(&line(step, "loss", train));
        log.push_str(&line(step, "eval_loss", eval));
    }
    env.write("train.jsonl", &log);
    publish(&env, 10, 3000).expect(0);
    publish(&env, 20, 3000).expect(0);
    wait(&env).expect(0);
    let v = run(
        &env,
        &["--config", "roger.toml", "critic", "--once", "--json"],
    )
    .expect(1);
    assert!(
        v.stdout().contains("is at that step"),
        "the warn names ckpt-20: {}",
        v.report()
    );
    // Two more saves (keep_last = 2): the best one stays here, and the ledger is mirrored.
    publish(&env, 30, 3000).expect(0);
    publish(&env, 40, 3000).expect(0);
    wait(&env).expect(0);
    assert!(env.path("ck/ckpt-20.dat").exists(), "kept by the verdict");
    // The first machine is gone: another one with the config only.
    std::fs::remove_dir_all(env.path("ck")).unwrap();
    let other = Env::new();
    other.write("roger.toml", env.read("roger.toml"));
    let r = run(
        &other,
        &[
            "--config",
            "roger.toml",
            "fetch",
            "--best",
            "--to",
            "restore",
        ],
    )
    .expect(0);
    r.stderr_has("no ledger here: rebuilt")
        .stderr_has("not usable here")
        .stdout_has("fetched ")
        .stdout_has("the checkpoint at the best eval (step 20, loss 0.4)");
    assert_eq!(
        std::fs::read(other.path("restore/ckpt-20.dat")).unwrap(),
        bytes(3000, 20)
    );
    // No standing verdict: exit 1 saying so.
    let bare = Env::new();
    bare.write(
        "roger.toml",
        "[run]\nname = \"r1\"\ncheckpoint_dir = \"ck\"\n",
    );
    run(&bare, &["--config", "roger.toml", "fetch", "--best"])
        .expect(1)
        .stderr_has("no standing overfitting verdict of run \"r1\"");
}
