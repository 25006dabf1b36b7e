//! Issue 28 item 7: retention keeps the way back the critic vouched for. A real PyTorch loop
//! (tests/fixtures/poisoned_train.py: CPU, a small MLP) explodes on a poisoned stretch of data
//! at step 150, saving every 10 steps under `keep_last = 3`, the real `roger watch` with
//! `rollback_on = ["loss"]` and the real `roger critic --daemon` every 2 s beside it. The
//! critic's fail arrives after the run has published 150, 160 and 170; retention must not have
//! pruned every checkpoint before 150 by then (before the fix it had: the watch stopped with
//! `no_checkpoint`). The run rolls back before 150, skips the poisoned data and finishes.
//!
//! The script holds its first poisoned batch until the critic has passed a step (POISON_GATE):
//! on a fast machine the run reached step 425 before the critic's first look, whose first
//! verdict was then the fail, so nothing had ever been vouched for (CI saw `no_checkpoint`).

use crate::util::Env;
use crate::watch::{records, roger, wait_child};
use roger::ledger::{Kind, Ledger, Record};
use std::process::Stdio;
use std::time::Duration;

const PY: &str = "/usr/bin/python3";
const STEPS: u64 = 600;
const POISON_FROM: u64 = 150;
/// The script's POISON_LEN: batches 150..=179 are poisoned.
const POISON_END: u64 = 180;

fn config() -> String {
    format!(
        r#"[run]
name = "poisoned"
log = "train.jsonl"
checkpoint_dir = "ck"

[publish]
keep_last = 3

[gpu]
source = "none"

[watch]
interval = "100ms"
hysteresis = 2
grace = "5s"
stale = "30s"
backoff_initial = "100ms"
backoff_max = "200ms"
rollback_on = ["loss"]

[[phase]]
name = "all"
from = 0
to = {STEPS}
loss = [0.0, 100.0]
window = 20
"#
    )
}

/// (step, loss, batch) of every line of the training log, in log order.
fn log_rows(env: &Env) -> Vec<(u64, f64, u64)> {
    env.read("train.jsonl")
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some((
                v["step"].as_u64()?,
                v["loss"].as_f64()?,
                v["batch"].as_u64()?,
            ))
        })
        .collect()
}

fn summary(recs: &[Record]) -> String {
    recs.iter()
        .filter(|r| !matches!(r.kind, Kind::Publish | Kind::Prune))
        .map(|r| {
            let mut f = r.fields.clone();
            f.remove("observation");
            format!(
                "#{} {:?} step {:?} {}",
                r.seq,
                r.kind,
                r.step,
                serde_json::to_string(&f).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_torch_run_that_explodes_on_poisoned_data_rolls_back_under_keep_last_3() {
    if !crate::util::torch_ready(
        "a_torch_run_that_explodes_on_poisoned_data_rolls_back_under_keep_last_3",
    ) {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", config());
    let script =
        std::fs::read(crate::util::repo_root().join("tests/fixtures/poisoned_train.py")).unwrap();
    env.write("poisoned_train.py", script);
    let mut w = roger(
        &env,
        &[
            "watch".into(),
            "--".into(),
            PY.into(),
            "poisoned_train.py".into(),
        ],
    );
    let gate = env.path("poison.gate");
    w.env("STEPS", STEPS.to_string())
        .env("POISON_FROM", POISON_FROM.to_string())
        .env("POISON_GATE", &gate)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let mut watch = w.spawn().unwrap();
    let mut c = env.cmd(&["critic", "--daemon", "--interval", "2s"]);
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("critic.err")).unwrap());
    let mut critic = c.spawn().unwrap();
    // Open the gate once the critic vouched for a step with a checkpoint at or before it.
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        let vouched = Ledger::new(env.path("roger-ledger.jsonl"))
            .records()
            .unwrap_or_default()
            .iter()
            .any(|r| {
                r.kind == Kind::Verdict
                    && r.str_field("status") == Some("pass")
                    && r.step.is_some_and(|s| s >= 10)
            });
        if vouched {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(&gate, b"").unwrap();
    let status = wait_child(&mut watch, Duration::from_secs(120));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(critic.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    wait_child(&mut critic, Duration::from_secs(30));
    let recs = records(&env);
    let err = env.read("watch.err");
    let tail: Vec<&str> = err.lines().rev().take(12).collect();
    let story = format!(
        "watch stderr (last lines):\n{}\nledger (publish/prune left out):\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        summary(&recs)
    );

    // The critic failed the run on its loss, dated at the poisoned stretch.
    let fail = recs
        .iter()
        .find(|r| r.kind == Kind::Verdict && r.str_field("status") == Some("fail"))
        .unwrap_or_else(|| panic!("no critic fail\n{story}"));
    // ... and by then keep_last = 3 alone would have kept only checkpoints from the stretch on:
    // the case of the issue, not an easier one.
    let published_before_fail: Vec<u64> = recs
        .iter()
        .filter(|r| r.kind == Kind::Publish && r.seq < fail.seq)
        .filter_map(|r| r.step)
        .collect();
    assert!(
        published_before_fail
            .iter()
            .filter(|s| **s >= POISON_FROM)
            .count()
            >= 3,
        "the fail (#{}) came before three checkpoints from step {POISON_FROM} on were published: {published_before_fail:?}\n{story}",
        fail.seq
    );

    assert_eq!(status.code(), Some(0), "{story}");
    let relaunch = recs
        .iter()
        .find(|r| r.kind == Kind::Relaunch)
        .unwrap_or_else(|| panic!("no relaunch\n{story}"));
    assert_eq!(
        relaunch.u64_field("diverged_at"),
        Some(POISON_FROM),
        "{story}"
    );
    let ckpt_step = relaunch
        .u64_field("ckpt_step")
        .unwrap_or_else(|| panic!("the rollback resumed from no checkpoint\n{story}"));
    assert!(ckpt_step < POISON_FROM, "resumed from {ckpt_step}\n{story}");
    let last_pass = recs
        .iter()
        .rfind(|r| {
            r.kind == Kind::Verdict && r.str_field("status") == Some("pass") && r.seq < fail.seq
        })
        .unwrap_or_else(|| panic!("no pass before the fail\n{story}"));
    // What the last pass vouched for is what the rollback found (the clause kept it).
    assert!(
        ckpt_step <= last_pass.step.unwrap(),
        "resumed from {ckpt_step}, after the last pass (#{} at step {:?})\n{story}",
        last_pass.seq,
        last_pass.step
    );
    eprintln!(
        "critic: last pass #{} at step {:?}, fail #{} at step {:?}; rolled back to step {ckpt_step}",
        last_pass.seq, last_pass.step, fail.seq, fail.step
    );
    assert!(
        !recs.iter().any(|r| r.kind == Kind::Breaker),
        "a breaker opened\n{story}"
    );

    // The relaunched run: from the checkpoint, past the poisoned batches, healthy to the end.
    let rows = log_rows(&env);
    let restart = rows
        .windows(2)
        .rposition(|w| w[1].0 <= w[0].0)
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("the log never went back to a checkpoint\n{story}"));
    let resumed = &rows[restart..];
    assert_eq!(resumed[0].0, ckpt_step + 1, "{story}");
    assert_eq!(resumed.last().unwrap().0, STEPS, "{story}");
    for &(step, loss, batch) in resumed {
        assert!(
            !(POISON_FROM..POISON_END).contains(&batch),
            "step {step} trained on poisoned batch {batch} after the rollback"
        );
        assert!(
            (0.0..100.0).contains(&loss),
            "step {step} (batch {batch}) has loss {loss} after the rollback"
        );
    }
}
