//! Issue 37 point 2: logs no named shape knows, read by the general key/value reader and the
//! name-by-meaning mapping: real detectron2 and MMEngine logs (`iter: 19  total_loss: …  lr:
//! …`, `Epoch(train) [1][ 10/196]  lr: …  loss: …`), and a real Hugging Face Trainer's
//! TensorBoard tags (`train/loss`, `train/learning_rate`, ...). `init` says the mapping it chose
//! (on stderr and in the config's comments), `check` accepts the config, and the critic reads
//! the log the same way: a NaN in it fails.

use crate::util::{repo_root, Env};
use serde_json::Value;

fn real(name: &str) -> String {
    std::fs::read_to_string(repo_root().join("tests/fixtures/real").join(name)).unwrap()
}

fn check<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {v}"))
}

fn said_all(out: &str, wanted: &[&str], report: &str) {
    for s in wanted {
        assert!(out.contains(s), "{s:?} not said\n{report}");
    }
}

#[test]
fn a_detectron2_log_is_read_by_meaning_and_a_nan_in_it_fails() {
    let env = Env::new();
    let text = real("kv-detectron2-maskrcnn-balloon.txt");
    env.write("log.txt", &text);
    let init = env.run(&["init", "--log", "log.txt"]).expect(0);
    said_all(
        &init.stderr(),
        &[
            "format: key-value",
            r#"step <- "iter" (by meaning: "iter" reads as step)"#,
            r#"loss <- "total_loss" (by meaning: "total_loss" reads as loss)"#,
            r#"lr <- "lr" (by meaning"#,
            "not judged: eta, loss_cls, loss_box_reg",
            "read 15 samples, steps 19..299",
        ],
        &init.report(),
    );
    let cfg = env.read("roger.toml");
    said_all(
        &cfg,
        &[
            "format = \"key-value\"",
            "step = \"iter\"                # by meaning: \"iter\" reads as step",
            "loss = \"total_loss\"",
            "time = \"\"",
        ],
        &cfg,
    );
    env.run(&["check"]).expect(0);
    let judged = env.run(&["critic", "--once", "--json"]).expect(0);
    let v: Value = serde_json::from_str(judged.stdout().trim()).unwrap();
    assert_eq!(v["step"].as_u64(), Some(299), "{}", judged.report());
    assert_eq!(check(&v, "loss")["status"], "pass", "{}", judged.report());

    // The same log diverging at iteration 159 (`total_loss: nan` on that line and every one
    // after, as a diverged run prints): the critic, reading it with init's mapping, fails (a
    // NaN is a sample, not a gap).
    let at = text.find("iter: 159 ").expect("the fixture has iter 159");
    let tail: String = text[at..]
        .lines()
        .map(|l| match l.find("total_loss: ") {
            Some(i) => {
                let v = i + "total_loss: ".len();
                let end = v + l[v..].find(' ').unwrap();
                format!("{}nan{}\n", &l[..v], &l[end..])
            }
            None => format!("{l}\n"),
        })
        .collect();
    let poisoned = format!("{}{tail}", &text[..at]);
    assert_ne!(poisoned, text);
    env.write("nan.txt", &poisoned);
    let bad = env
        .run(&["critic", "--once", "--json", "--log", "nan.txt"])
        .expect(2);
    let v: Value = serde_json::from_str(bad.stdout().trim()).unwrap();
    assert_eq!(check(&v, "loss")["status"], "fail", "{}", bad.report());
    assert!(
        check(&v, "loss")["reason"]
            .as_str()
            .unwrap()
            .contains("since step 159"),
        "{}",
        bad.report()
    );
}

#[test]
fn mmengine_epoch_counters_become_one_run_wide_iteration() {
    let env = Env::new();
    env.write("20230818_202715.log", real("kv-mmengine-two-epochs.txt"));
    let init = env
        .run(&["init", "--log", "20230818_202715.log", "--out", "-"])
        .expect(0);
    // [1][5/5] and [2][5/5]: iterations 5 and 10; the Epoch(val) lines are not samples.
    said_all(
        &init.stderr(),
        &[
            r#"step <- "iter""#,
            "read 2 samples, steps 5..10",
            "not judged: epoch, eta, data_time, memory",
        ],
        &init.report(),
    );

    let env = Env::new();
    env.write("train.log", real("kv-mmengine-deepspeed-prefix.txt"));
    env.run(&["init", "--log", "train.log"]).expect(0);
    env.run(&["check"]).expect(0);
    let judged = env.run(&["critic", "--once", "--json"]);
    let v: Value = serde_json::from_str(judged.stdout().trim()).unwrap();
    assert_eq!(v["step"].as_u64(), Some(190), "{}", judged.report());
    assert_eq!(check(&v, "lr")["status"], "pass", "{}", judged.report());
}

/// A mapped value that looks numeric but does not parse is reported with its line, never
/// skipped in silence; the line's other fields are still read.
#[test]
fn an_unparsable_mapped_value_is_reported() {
    let env = Env::new();
    let mut text = real("kv-mmengine-deepspeed-prefix.txt");
    text = text.replacen("loss: 2.5746", "loss: 2.57.46", 1);
    env.write("train.log", &text);
    env.write(
        "roger.toml",
        "[run]\nname = \"x\"\nlog = \"train.log\"\nformat = \"key-value\"\n\n[metrics]\nstep = \"iter\"\nloss = \"loss\"\nlr = \"lr\"\ntime = \"\"\n",
    );
    let judged = env.run(&["critic", "--once"]);
    assert!(
        judged.report().contains("\"2.57.46\" is not a number"),
        "{}",
        judged.report()
    );
}

/// The headline of issue 37: TensorBoard written by a real Hugging Face Trainer. Its tags
/// are mapped (lr among them), a schedule is proposed, and the critic passes the run.
#[test]
fn tensorboard_of_a_real_hf_trainer_has_its_lr_found() {
    let env = Env::new();
    let src = repo_root().join("tests/fixtures/hf_tensorboard");
    std::fs::create_dir_all(env.path("out/runs")).unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with("events.out.tfevents")
        {
            std::fs::copy(e.path(), env.path("out/runs").join(e.file_name())).unwrap();
        }
    }
    let init = env.run(&["init", "--log", "out"]).expect(0);
    said_all(
        &init.stderr(),
        &[
            r#"lr <- "train/learning_rate""#,
            r#"loss <- "train/loss""#,
            r#"grad_norm <- "train/grad_norm""#,
            r#"eval_loss <- "eval/loss""#,
            "read 30 samples, steps 2..60",
        ],
        &init.report(),
    );
    let cfg = env.read("roger.toml");
    assert!(cfg.contains("[schedule]"), "{cfg}");
    env.run(&["check"]).expect(0);
    let judged = env.run(&["critic", "--once", "--json"]);
    let v: Value = serde_json::from_str(judged.stdout().trim()).unwrap();
    assert_eq!(check(&v, "lr")["status"], "pass", "{}", judged.report());
}
