//! `roger quarantine`: the whole life of an item through the real binary — add, prove (fail,
//! pass, timeout), release rules, purge rules, untrusted-output scans, and the cross-filesystem
//! refusal (a real tmpfs when root).

use crate::util::Env;
use serde_json::Value;

const Q: [&str; 5] = ["quarantine", "--dir", "q", "--ledger", "l.jsonl"];

fn q<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    Q.iter().copied().chain(extra.iter().copied()).collect()
}

fn ledger(env: &Env) -> Vec<Value> {
    env.read("l.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn only_id(env: &Env) -> String {
    let r = env.run(&q(&["list", "--json"])).expect(0);
    let v: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{}", r.report());
    v[0]["id"].as_str().unwrap().to_string()
}

#[test]
fn add_prove_release_round_trip() {
    let env = Env::new();
    env.write("ck/ckpt-100.bin", "weights");
    env.run(&q(&[
        "add",
        "ck/ckpt-100.bin",
        "--reason",
        "hash mismatch after copy",
    ]))
    .expect(0)
    .stdout_has("quarantined");
    assert!(!env.path("ck/ckpt-100.bin").exists(), "moved, not copied");
    let id = only_id(&env);
    let meta: Value = serde_json::from_str(&env.read(&format!("q/{id}/meta.json"))).unwrap();
    assert_eq!(meta["reason"], "hash mismatch after copy");
    assert_eq!(meta["size"], 7);
    assert_eq!(meta["proofs"], serde_json::json!([]));
    let rec = &ledger(&env)[0];
    assert_eq!(rec["kind"], "quarantine");
    assert!(rec["original_path"]
        .as_str()
        .unwrap()
        .ends_with("ck/ckpt-100.bin"));
    assert!(rec["quarantined_path"].as_str().unwrap().contains(&id));

    env.run(&q(&["release", &id]))
        .expect(1)
        .stderr_has("has no proof");
    // A failing trial: exit 2, output tail recorded.
    env.run(&q(&[
        "prove",
        &id[..10],
        "--",
        "sh",
        "-c",
        "echo loading {path}; echo boom >&2; exit 4",
    ]))
    .expect(2)
    .stdout_has("FAILED: exit 4")
    .stdout_has("boom");
    env.run(&q(&["release", &id]))
        .expect(1)
        .stderr_has("latest proof failed (exit 4)");
    // A passing trial sees the path in the environment.
    env.run(&q(&[
        "prove",
        &id,
        "--",
        "sh",
        "-c",
        "grep -q weights \"$ROGER_QUARANTINE_PATH\"",
    ]))
    .expect(0)
    .stdout_has("PASSED");
    env.run(&q(&["show", &id]))
        .expect(0)
        .stdout_has("proven good")
        .stdout_has("proof #1")
        .stdout_has("| boom");
    // Something is at the original path now: refused, both kept.
    env.write("ck/ckpt-100.bin", "newer weights");
    env.run(&q(&["release", &id]))
        .expect(1)
        .stderr_has("exists now");
    std::fs::remove_file(env.path("ck/ckpt-100.bin")).unwrap();
    env.run(&q(&["release", &id]))
        .expect(0)
        .stdout_has("released");
    assert_eq!(env.read("ck/ckpt-100.bin"), "weights");
    assert!(!env.path(&format!("q/{id}")).exists());
    let kinds: Vec<String> = ledger(&env)
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["quarantine", "proof", "proof", "release"]);
    let rel = &ledger(&env)[3];
    assert_eq!(rel["restored_to"], ledger(&env)[0]["original_path"]);
    let proof = &ledger(&env)[1];
    assert_eq!(proof["exit_code"], 4);
    assert!(proof["output_tail"].as_str().unwrap().contains("boom"));
    env.run(&["ledger", "--ledger", "l.jsonl", "verify"])
        .expect(0);
}

#[test]
fn forced_release_and_timeout() {
    let env = Env::new();
    env.write("eval.json", "{}");
    env.run(&q(&["add", "eval.json", "--reason", "suspect"]))
        .expect(0);
    let id = only_id(&env);
    env.run(&q(&[
        "prove",
        &id,
        "--timeout",
        "500ms",
        "--",
        "sleep",
        "30",
    ]))
    .expect(2)
    .stdout_has("timed out");
    let kinds: Vec<String> = ledger(&env)
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        ["quarantine", "kill", "proof"],
        "the kill is recorded first"
    );
    env.run(&q(&["release", &id, "--force"])).expect(2);
    env.run(&q(&[
        "release",
        &id,
        "--force",
        "--reason",
        "checked by hand",
    ]))
    .expect(0);
    assert_eq!(ledger(&env)[3]["reason"], "forced: checked by hand");
    assert_eq!(ledger(&env)[3]["forced"], true);
}

#[test]
fn purge_spares_unproven_unless_forced() {
    let env = Env::new();
    env.write("a.json", "{\"a\": 1}");
    env.write("b.json", "{\"b\": 2}");
    env.run(&q(&["add", "a.json", "--reason", "x"])).expect(0);
    env.run(&q(&["add", "b.json", "--reason", "y"])).expect(0);
    let r = env.run(&q(&["list", "--json"])).expect(0);
    let items: Value = serde_json::from_str(&r.stdout()).unwrap();
    let a = items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["original_path"].as_str().unwrap().ends_with("a.json"))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    env.run(&q(&["prove", &a, "--", "false"])).expect(2);
    // Nothing is a week old.
    env.run(&q(&["purge"])).expect(0).stdout_has("younger than");
    env.run(&q(&["purge", "--older-than", "0s", "--dry-run"]))
        .expect(0)
        .stdout_has("would purge")
        .stdout_has("unproven: it may be the only good copy");
    assert_eq!(
        env.run(&q(&["list", "--json"]))
            .stdout()
            .matches("\"id\"")
            .count(),
        2
    );
    env.run(&q(&["purge", "--older-than", "0s"]))
        .expect(0)
        .stdout_has("purged");
    assert_eq!(
        env.run(&q(&["list", "--json"]))
            .stdout()
            .matches("\"id\"")
            .count(),
        1
    );
    env.run(&q(&["purge", "--older-than", "0s", "--force"]))
        .expect(0);
    env.run(&q(&["list"])).expect(0).stdout_has("is empty");
    let purges: Vec<Value> = ledger(&env)
        .into_iter()
        .filter(|r| r["kind"] == "purge")
        .collect();
    assert_eq!(purges.len(), 2);
    assert_eq!(purges[0]["proof"], "proven bad");
    assert_eq!(purges[1]["forced"], true);
}

#[test]
fn scan_quarantines_untrusted_outputs() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"r\"\n\n[quarantine]\ndir = \"q\"\noutputs = [\"eval/results.json\", \"eval/good.json\", \"eval/metrics.jsonl\", \"eval/absent.json\"]\n",
    );
    env.write("eval/results.json", "{\"acc\": NaN, \"n\": 100}\n");
    env.write("eval/good.json", "{\"acc\": 0.71, \"n\": 100}\n");
    env.write("eval/metrics.jsonl", "{\"step\": 1}\n{\"step\": 2, \"lo");
    let r = env.run(&["quarantine", "scan"]).expect(2);
    let out = r.stdout();
    assert!(out.contains("QUARANTINED"), "{}", r.report());
    assert!(
        out.contains("holds NaN at line 1 column 9"),
        "{}",
        r.report()
    );
    assert!(
        out.contains("last line 2 is unterminated"),
        "{}",
        r.report()
    );
    assert!(out.contains("trusted      ") && out.contains("good.json"));
    assert!(out.contains("missing      ") && out.contains("absent.json"));
    assert!(!env.path("eval/results.json").exists());
    assert!(env.path("eval/good.json").exists());
    let recs: Vec<Value> = env
        .read("roger-ledger.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 2);
    assert!(recs[0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("untrusted output: holds NaN"));
    // Clean outputs scan clean; a crash makes even parseable ones untrusted.
    env.run(&["quarantine", "scan", "eval/good.json"]).expect(0);
    env.run(&[
        "quarantine",
        "scan",
        "eval/good.json",
        "--crashed",
        "--since",
        "2000-01-01T00:00:00Z",
    ])
    .expect(2)
    .stdout_has("crashed before finishing");
    assert!(!env.path("eval/good.json").exists());
}

#[test]
fn refuses_to_move_across_filesystems() {
    let env = Env::new();
    let mnt = env.path("other-fs");
    let Some(_guard) = crate::util::mount_tmpfs(&mnt, "4m", "refuses_to_move_across_filesystems")
    else {
        return;
    };
    env.write("ckpt.bin", "weights");
    env.run(&[
        "quarantine",
        "--dir",
        "other-fs/q",
        "--ledger",
        "l.jsonl",
        "add",
        "ckpt.bin",
        "--reason",
        "x",
    ])
    .expect(1)
    .stderr_has("another filesystem")
    .stderr_has("EXDEV");
    assert_eq!(env.read("ckpt.bin"), "weights", "left where it was");
    assert!(!env.path("l.jsonl").exists(), "nothing recorded");
}
