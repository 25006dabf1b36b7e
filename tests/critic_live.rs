//! `roger critic` as a live run meets it (issue 18): verdicts filed before these rules still
//! replay as filed; a spike between two `--once` reads is reported by the second; a phase
//! that has just begun passes with its trend checks waiting.

use crate::critic::{check, json_out};
use crate::util::{repo_root, Env};

const PHASE: &str = r#"
[run]
name = "live"
log = "train.jsonl"

[[phase]]
name = "main"
from = 100
loss = [2.5, 6.0]
loss_slope = [-2.0, 0.05]
loss_spike = 1.5
grad_norm_spike = 5.0
stale = "10m"
window = 50
"#;

fn line(step: u64, loss: f64, grad: f64) -> String {
    format!(
        "{{\"step\": {step}, \"time\": {}, \"loss\": {loss}, \"grad_norm\": {grad}}}\n",
        1_700_000_000 + step
    )
}

/// Seven verdicts filed by roger before issue 18 (tests/fixtures/critic_v0: NaN newest, a
/// loss below its band, no lr logged, a phase just begun, an explosion filling the window,
/// noisy per-step loss, a spike between reads): the new rules must not rewrite them.
#[test]
fn verdicts_filed_before_issue_18_replay_as_filed() {
    let env = Env::new();
    env.write(
        "v0.jsonl",
        std::fs::read(repo_root().join("tests/fixtures/critic_v0/ledger.jsonl")).unwrap(),
    );
    env.run(&["critic", "--replay", "--ledger", "v0.jsonl"])
        .expect(0)
        .stdout_has("replayed 7 critic verdict(s), 0 differ");
}

/// Issue 18 item 3 with `--once`: the second read starts after the first verdict's step
/// (from the ledger), so the spike at step 600, over by then, is still reported.
#[test]
fn once_reports_a_spike_that_happened_since_the_last_verdict() {
    let env = Env::new();
    env.write("roger.toml", PHASE);
    let mut log: String = (10..50).map(|i| line(10 * i, 3.0, 0.5)).collect();
    env.write("train.jsonl", &log);
    let first = env.run(&[
        "critic",
        "--once",
        "--json",
        "--now",
        "2023-11-14T22:26:40Z",
    ]);
    let v = json_out(&first.expect(0));
    assert_eq!(v["step"], 490);
    log.extend((50..80).map(|i| {
        let spike = i == 60;
        line(
            10 * i,
            if spike { 9.0 } else { 3.0 },
            if spike { 6.0 } else { 0.5 },
        )
    }));
    env.write("train.jsonl", &log);
    let second = env.run(&[
        "critic",
        "--once",
        "--json",
        "--now",
        "2023-11-14T22:26:40Z",
    ]);
    let v = json_out(&second.expect(1));
    for name in ["loss_spike", "grad_norm"] {
        let c = check(&v, name);
        assert_eq!(c["status"], "warn", "{c:#}");
        assert!(c["reason"].as_str().unwrap().contains("step 600"), "{c:#}");
    }
    env.run(&["critic", "--replay"])
        .expect(0)
        .stdout_has("replayed 2 critic verdict(s), 0 differ");
}

/// Issue 18 item 6: three samples into a phase, loss_slope and loss_spike wait for data;
/// the verdict is PASS (exit 0) and names them.
#[test]
fn a_phase_just_begun_passes_with_its_trend_checks_waiting() {
    let env = Env::new();
    env.write("roger.toml", PHASE);
    env.write(
        "train.jsonl",
        (10..13).map(|i| line(10 * i, 3.0, 0.5)).collect::<String>(),
    );
    let run = env
        .run(&["critic", "--once", "--now", "2023-11-14T22:16:00Z"])
        .expect(0)
        .stdout_has("PASS  step 120");
    let out = run.stdout();
    let waiting: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("waiting"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert!(
        waiting.contains(&"loss_slope") && waiting.contains(&"loss_spike"),
        "{}",
        run.report()
    );
}
