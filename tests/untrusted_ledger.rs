//! A ledger edited by hand or by another tool is input roger did not write: non-ASCII `hash`
//! and `prev` values must be reported as broken records by every reader, never a panic
//! (issue 10, item 11).

use crate::publish::torch_zip;
use crate::util::{Env, Run};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// 11 ASCII bytes then a 2-byte char: byte 12 falls inside `é`, where a 12-byte prefix cut lands.
const NON_ASCII: &str = "abcdefghijkééé";

#[track_caller]
fn no_panic(run: Run, code: i32) -> Run {
    assert!(
        !run.stderr().contains("panicked"),
        "roger panicked\n{}",
        run.report()
    );
    run.expect(code)
}

/// The ledger's lines, each with its parsed record.
fn lines(env: &Env, rel: &str) -> Vec<(String, Map<String, Value>)> {
    env.read(rel)
        .lines()
        .map(|l| match serde_json::from_str(l).unwrap() {
            Value::Object(m) => (l.to_string(), m),
            _ => unreachable!(),
        })
        .collect()
}

/// Replace one string field's value in the line text, keeping roger's key order.
fn set(line: &mut String, rec: &mut Map<String, Value>, key: &str, value: &str) {
    let old = format!("\"{key}\":{}", Value::from(rec[key].as_str().unwrap()));
    assert!(line.contains(&old), "{old} in {line}");
    *line = line.replace(&old, &format!("\"{key}\":{}", Value::from(value)));
    rec.insert(key.into(), value.into());
}

/// The hash roger stores: SHA-256 of the record without `hash`, keys sorted, compact.
fn seal(line: &mut String, rec: &mut Map<String, Value>) {
    let mut body = rec.clone();
    body.remove("hash");
    let text = serde_json::to_string(&Value::Object(body)).unwrap();
    let hex: String = Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    set(line, rec, "hash", &hex);
}

type Lines = [(String, Map<String, Value>)];

/// Rewrite the ledger at `rel` after `edit`.
fn edit_ledger(env: &Env, rel: &str, edit: impl FnOnce(&mut Lines)) {
    let mut all = lines(env, rel);
    edit(&mut all);
    let text: String = all.iter().map(|(l, _)| format!("{l}\n")).collect();
    env.write(rel, text);
}

/// Two notes, then `edit`.
fn ledger_with(env: &Env, edit: impl FnOnce(&mut Lines)) {
    for msg in ["one", "two"] {
        env.run(&["ledger", "--ledger", "l.jsonl", "note", msg, "--run", "r"])
            .expect(0);
    }
    edit_ledger(env, "l.jsonl", edit);
}

#[test]
fn non_ascii_hash_is_a_broken_record_for_tail_and_verify() {
    let env = Env::new();
    ledger_with(&env, |r| {
        let (l, m) = &mut r[0];
        set(l, m, "hash", NON_ASCII);
    });
    no_panic(env.run(&["ledger", "--ledger", "l.jsonl", "tail"]), 0).stdout_has("note: two");
    no_panic(env.run(&["ledger", "--ledger", "l.jsonl", "verify"]), 1)
        .stderr_has("first bad record: seq 1")
        .stderr_has("hash mismatch");
    let v = no_panic(
        env.run(&["ledger", "--ledger", "l.jsonl", "verify", "--json"]),
        1,
    );
    assert!(v.stdout().contains("\"intact\":false"), "{}", v.report());
}

#[test]
fn non_ascii_prev_with_a_matching_hash_is_a_broken_chain() {
    let env = Env::new();
    ledger_with(&env, |r| {
        // A record whose own hash is right but whose prev is not hex: the chain check's turn.
        let (l, m) = &mut r[1];
        set(l, m, "prev", NON_ASCII);
        seal(l, m);
    });
    no_panic(env.run(&["ledger", "--ledger", "l.jsonl", "tail"]), 0).stdout_has("note: one");
    no_panic(env.run(&["ledger", "--ledger", "l.jsonl", "verify"]), 1)
        .stderr_has("first bad record: seq 2")
        .stderr_has("chain broken");
}

#[test]
fn publish_with_keep_last_on_a_ledger_with_a_non_ascii_hash_finishes() {
    let env = Env::new();
    for step in [100u64, 200, 300] {
        env.write(&format!("ckpt-{step}.pt"), torch_zip(1000, step as u8));
    }
    for step in [100u64, 200] {
        env.run(&["publish", &format!("ckpt-{step}.pt"), "--to", "ck"])
            .expect(0);
    }
    let rel = "ck/roger-ledger.jsonl";
    edit_ledger(&env, rel, |r| {
        let (l, m) = &mut r[0];
        set(l, m, "hash", NON_ASCII);
    });
    // Retention reads the whole ledger after latest.json is written: it must not die there.
    no_panic(
        env.run(&["publish", "ckpt-300.pt", "--to", "ck", "--keep-last", "1"]),
        0,
    );
    let latest: Value = serde_json::from_str(&env.read("ck/latest.json")).unwrap();
    assert_eq!(latest["path"], "ckpt-300.pt");
    let after = lines(&env, rel);
    assert!(
        after
            .iter()
            .any(|(_, r)| r["kind"] == "publish" && r["step"] == 300),
        "the publish of 300 is recorded"
    );
    // The edit stays visible: verify still names it.
    no_panic(env.run(&["ledger", "--ledger", rel, "verify"]), 1)
        .stderr_has("first bad record: seq 1");
}
