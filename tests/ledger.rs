//! `roger ledger`: concurrent appends from many processes, torn tails, tampering.

use crate::util::Env;
use std::process::Command;

#[test]
fn eight_processes_append_500_each_and_the_chain_holds() {
    let env = Env::new();
    let ledger = env.path("l.jsonl");
    let bin = crate::util::roger_bin();
    // Each writer is a shell loop of real `roger ledger note` processes racing on the flock.
    let script = format!(
        "for i in $(seq 1 500); do \"{}\" ledger --ledger \"{}\" note \"w$W-$i\" --run r >/dev/null || exit 1; done",
        bin.display(),
        ledger.display()
    );
    let children: Vec<_> = (0..8)
        .map(|w| {
            Command::new("sh")
                .arg("-c")
                .arg(&script)
                .env("W", w.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let text = env.read("l.jsonl");
    assert_eq!(text.lines().count(), 4000);
    env.run(&["ledger", "--ledger", "l.jsonl", "verify"])
        .expect(0)
        .stdout_has("intact, 4000 records, last seq 4000");
}

#[test]
fn torn_tail_is_reported_and_next_append_chains() {
    let env = Env::new();
    env.run(&["ledger", "--ledger", "l.jsonl", "note", "one", "--run", "r"])
        .expect(0);
    let mut text = env.read("l.jsonl");
    text.push_str("{\"seq\":2,\"ts\":\"2026-");
    env.write("l.jsonl", &text);
    env.run(&["ledger", "--ledger", "l.jsonl", "verify"])
        .expect(0)
        .stderr_has("torn");
    env.run(&["ledger", "--ledger", "l.jsonl", "note", "two", "--run", "r"])
        .expect(0)
        .stdout_has("#2");
    env.run(&["ledger", "--ledger", "l.jsonl", "verify"])
        .expect(0)
        .stdout_has("intact, 2 records");
    // The torn bytes are still there: nothing was rewritten.
    assert!(env.read("l.jsonl").contains("{\"seq\":2,\"ts\":\"2026-\n"));
}

#[test]
fn edited_record_is_caught_with_seq_and_offset() {
    let env = Env::new();
    for m in ["a", "b", "c"] {
        env.run(&["ledger", "--ledger", "l.jsonl", "note", m, "--run", "r"])
            .expect(0);
    }
    let text = env.read("l.jsonl");
    let second_offset = text.find('\n').unwrap() + 1;
    env.write(
        "l.jsonl",
        text.replace("\"message\":\"b\"", "\"message\":\"B\""),
    );
    env.run(&["ledger", "--ledger", "l.jsonl", "verify"])
        .expect(1)
        .stderr_has(&format!("seq 2 at line 2 (offset {second_offset})"))
        .stderr_has("edited");
}

#[test]
fn tail_filters_and_prints_json() {
    let env = Env::new();
    for m in ["a", "b", "c"] {
        env.run(&[
            "ledger", "--ledger", "l.jsonl", "note", m, "--step", "7", "--run", "r",
        ])
        .expect(0);
    }
    let run = env
        .run(&[
            "ledger", "--ledger", "l.jsonl", "tail", "-n", "2", "--kind", "note", "--json",
        ])
        .expect(0);
    let lines: Vec<serde_json::Value> = run
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["message"], "c");
    assert_eq!(lines[1]["step"], 7);
    env.run(&["ledger", "--ledger", "l.jsonl", "tail", "--kind", "kill"])
        .expect(0);
    env.run(&["ledger", "--ledger", "l.jsonl", "tail", "--kind", "bogus"])
        .expect(2);
}
