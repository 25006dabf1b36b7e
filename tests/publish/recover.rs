//! Every failpoint × what the next command sees (issue 10 item 8). A publish is aborted at
//! each step boundary; then the next roger command — another publish, `publish --verify`,
//! `hygiene disk` or a `watch` launch — runs on what it left. Afterwards latest.json, the
//! ledger, the files and the last good checkpoint must agree, whatever needed repair must
//! have a ledger record saying so, and a second command must find nothing more to repair.

use super::{latest, ledger_records, names_in, sha256_file, torch_zip};
use crate::util::Env;
use roger::publish::failpoint;
use serde_json::Value;
use std::path::{Path, PathBuf};

const CONFIG: &str = r#"
[run]
name = "r"
log = "train.jsonl"
checkpoint_dir = "ck"
[publish]
keep_last = 1
[gpu]
source = "none"
[watch]
interval = "100ms"
grace = "2s"
"#;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Scenario {
    /// ckpt-1.pt published, then ckpt-2.pt (retention prunes ckpt-1.pt).
    NewName,
    /// model.pt replaced by a new model.pt.
    SameName,
    /// checkpoint-7/ replaced by a new checkpoint-7/.
    SameDir,
    /// ckpt-2.pt saved into the checkpoint directory by the trainer, published in place.
    InPlace,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Next {
    Publish,
    Verify,
    Hygiene,
    Watch,
}

fn version(env: &Env, s: Scenario, v: u8) -> String {
    match s {
        Scenario::NewName => {
            env.write(&format!("v{v}/ckpt-{v}.pt"), torch_zip(30_000, v));
            format!("v{v}/ckpt-{v}.pt")
        }
        Scenario::InPlace if v > 1 => {
            env.write(&format!("ck/ckpt-{v}.pt"), torch_zip(30_000, v));
            format!("ck/ckpt-{v}.pt")
        }
        Scenario::InPlace => {
            env.write("v1/ckpt-1.pt", torch_zip(30_000, v));
            "v1/ckpt-1.pt".into()
        }
        Scenario::SameName => {
            env.write(&format!("v{v}/model.pt"), torch_zip(30_000, v));
            format!("v{v}/model.pt")
        }
        Scenario::SameDir => {
            let d = format!("v{v}/checkpoint-7");
            env.write(&format!("{d}/model.safetensors.bin"), vec![v; 20_000]);
            env.write(&format!("{d}/sub/optim.bin"), vec![v; 3_000]);
            d
        }
    }
}

/// The failpoints at and after which the new checkpoint holds its name under an intent: the
/// publish is rolled forward from there, back before it.
fn named(fp: &str, s: Scenario) -> bool {
    let from = if s == Scenario::InPlace {
        "after_intent"
    } else {
        "after_rename"
    };
    let pos = |n: &str| failpoint::ALL.iter().position(|f| *f == n).unwrap();
    pos(fp) >= pos(from)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

/// Everything must agree: latest.json's target verifies and has a publish record, the last
/// good checkpoint is latest.json's, the ledger is intact, nothing pruned is still there.
/// Returns latest.json's sha256.
#[track_caller]
fn agrees(env: &Env, ctx: &str) -> String {
    let ck = std::fs::canonicalize(env.path("ck")).unwrap();
    let l = latest(&ck);
    let target = ck.join(l["path"].as_str().unwrap());
    let sha = l["sha256"].as_str().unwrap().to_string();
    let on_disk = roger::digest::hash_path(&target)
        .unwrap_or_else(|e| panic!("latest.json's target unreadable: {e:#}\n{ctx}"));
    assert_eq!(on_disk.sha256, sha, "latest.json's target torn\n{ctx}");
    env.run(&["ledger", "verify"]).expect(0);
    let ledger = roger::ledger::Ledger::new(env.path("roger-ledger.jsonl"));
    let records = ledger.records().unwrap();
    let rec = records
        .iter()
        .rev()
        .find(|r| {
            r.kind == roger::ledger::Kind::Publish
                && r.str_field("path") == Some(target.display().to_string().as_str())
        })
        .unwrap_or_else(|| panic!("no publish record for latest.json's target\n{ctx}"));
    assert_eq!(rec.str_field("sha256"), Some(sha.as_str()), "{ctx}");
    let good =
        roger::checkpoints::last_good(&records, "r", None, &mut roger::checkpoints::verify_on_disk);
    let chosen = good
        .chosen
        .unwrap_or_else(|| panic!("no last good checkpoint: {:?}\n{ctx}", good.skipped));
    assert_eq!((chosen.path, chosen.sha256), (target, sha.clone()), "{ctx}");
    for r in records
        .iter()
        .filter(|r| r.kind == roger::ledger::Kind::Prune)
    {
        let p = PathBuf::from(r.str_field("path").unwrap());
        let republished = records.iter().any(|q| {
            q.seq > r.seq
                && q.kind == roger::ledger::Kind::Publish
                && q.str_field("path") == r.str_field("path")
        });
        assert!(
            republished || !p.exists(),
            "pruned {} is still there\n{ctx}",
            p.display()
        );
    }
    sha
}

/// Records that say something was repaired or rolled back.
fn repair_records(env: &Env) -> Vec<Value> {
    ledger_records(&env.path("roger-ledger.jsonl"))
        .into_iter()
        .filter(|r| {
            r.get("repaired").is_some()
                || r["event"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("publish-") && e != "publish-rejected")
                || r["event"] == "prune-completed"
        })
        .collect()
}

fn table(s: Scenario) {
    let mut cases = 0;
    for &fp in failpoint::ALL {
        let base = Env::new();
        base.write("roger.toml", CONFIG);
        let v1 = version(&base, s, 1);
        base.run(&["publish", &v1]).expect(0);
        let sha1 = sha256_file(&base.path(&v1));
        let v2 = version(&base, s, 2);
        let sha2 = roger::digest::hash_path(&base.path(&v2)).unwrap().sha256;
        let mut c = base.cmd(&["publish", &v2]);
        c.env(failpoint::ENV, fp);
        let crashed = base.run_cmd(c, &["publish", &v2]);
        let hit = crashed.stderr().contains(&format!("failpoint {fp}"));
        // Absolute paths in the ledger name this directory: each next command gets the
        // crashed state back in the same place.
        let snapshot = tempfile::tempdir().unwrap();
        copy_tree(base.dir.path(), snapshot.path());
        for next in [Next::Publish, Next::Verify, Next::Hygiene, Next::Watch] {
            cases += 1;
            let env = &base;
            std::fs::remove_dir_all(env.dir.path()).unwrap();
            copy_tree(snapshot.path(), env.dir.path());
            let ctx = format!(
                "{s:?}, failpoint {fp} (hit: {hit}), then {next:?}\n--- the crashed publish\n{}",
                crashed.report()
            );
            let repairs_before = repair_records(env).len();
            let r = match next {
                Next::Publish => {
                    let v3 = version(env, s, 3);
                    env.run(&["publish", &v3])
                }
                Next::Verify => env.run(&["publish", "--verify"]),
                Next::Hygiene => env.run(&["hygiene", "disk"]),
                Next::Watch => env.run(&[
                    "watch",
                    "--",
                    "sh",
                    "-c",
                    "printf %s \"$ROGER_RESUME_CKPT\" > resumed.txt",
                ]),
            };
            let ctx = format!("{ctx}\n--- the next command\n{}", r.report());
            assert!(
                r.code() == 0 || (next == Next::Hygiene && r.code() < 3),
                "the next command failed\n{ctx}"
            );
            let now = agrees(env, &ctx);
            let expect = match (next, hit && named(fp, s)) {
                (Next::Publish, _) => {
                    roger::digest::hash_path(&env.path(&version_name(s, 3)))
                        .unwrap()
                        .sha256
                }
                (_, true) => sha2.clone(),
                (_, false) if hit => sha1.clone(),
                // A failpoint this scenario never reaches: the publish completed.
                (_, false) => sha2.clone(),
            };
            assert_eq!(now, expect, "{ctx}");
            if next == Next::Watch {
                let ck = std::fs::canonicalize(env.path("ck")).unwrap();
                let l = latest(&ck);
                assert_eq!(
                    env.read("resumed.txt"),
                    ck.join(l["path"].as_str().unwrap()).display().to_string(),
                    "{ctx}"
                );
            }
            if next == Next::Publish {
                let leftovers: Vec<String> = names_in(&env.path("ck"))
                    .into_iter()
                    .filter(|n| n.starts_with(".roger-") && n != ".roger-publish.lock")
                    .collect();
                assert!(leftovers.is_empty(), "{leftovers:?}\n{ctx}");
            }
            // One publish record per version, never two.
            let recs = ledger_records(&env.path("roger-ledger.jsonl"));
            let twice = recs
                .iter()
                .filter(|r| r["kind"] == "publish" && r["sha256"] == sha2.as_str())
                .count();
            assert!(twice <= 1, "{twice} publish records of v2\n{ctx}");
            // A state that needed repair got a record saying so, with the words on stderr.
            let repairs = repair_records(env);
            let needed = hit
                && !matches!(
                    fp,
                    "after_lock"
                        | "after_staging_write"
                        | "after_fsync"
                        | "after_verify"
                        | "after_manifest"
                );
            if needed {
                assert!(repairs.len() > repairs_before, "no repair record\n{ctx}");
                assert!(
                    ["repaired", "interrupted", "completed the prune"]
                        .iter()
                        .any(|w| r.stderr().contains(w)),
                    "the repair was not said on stderr\n{ctx}"
                );
            }
            // Nothing is left to repair: a second look changes nothing.
            let n = ledger_records(&env.path("roger-ledger.jsonl")).len();
            env.run(&["publish", "--verify"]).expect(0);
            assert_eq!(
                ledger_records(&env.path("roger-ledger.jsonl")).len(),
                n,
                "the second look repaired again\n{ctx}"
            );
        }
    }
    eprintln!("{s:?}: {cases} failpoint x next-command cases");
}

fn version_name(s: Scenario, v: u8) -> String {
    match s {
        Scenario::NewName => format!("v{v}/ckpt-{v}.pt"),
        Scenario::InPlace => format!("ck/ckpt-{v}.pt"),
        Scenario::SameName => format!("v{v}/model.pt"),
        Scenario::SameDir => format!("v{v}/checkpoint-7"),
    }
}

#[test]
fn every_failpoint_then_the_next_command_new_name() {
    table(Scenario::NewName);
}

#[test]
fn every_failpoint_then_the_next_command_same_name() {
    table(Scenario::SameName);
}

#[test]
fn every_failpoint_then_the_next_command_same_dir() {
    table(Scenario::SameDir);
}

#[test]
fn every_failpoint_then_the_next_command_in_place() {
    table(Scenario::InPlace);
}

#[test]
fn latest_json_ahead_of_the_ledger_as_earlier_versions_left_it_is_recorded() {
    // Earlier versions wrote latest.json before the ledger record: a crash between them left
    // latest.json naming bytes the ledger had never heard of (`publish --verify` failed and
    // the last good checkpoint skipped them, forever).
    let env = Env::new();
    env.write("roger.toml", CONFIG);
    env.write("v1/ckpt-1.pt", torch_zip(30_000, 1));
    env.write("v2/ckpt-2.pt", torch_zip(30_000, 2));
    env.run(&["publish", "v1/ckpt-1.pt", "--no-prune"])
        .expect(0);
    let ledger_then = std::fs::read(env.path("roger-ledger.jsonl")).unwrap();
    env.run(&["publish", "v2/ckpt-2.pt", "--no-prune"])
        .expect(0);
    std::fs::write(env.path("roger-ledger.jsonl"), ledger_then).unwrap();
    let r = env
        .run(&["publish", "--verify"])
        .expect(0)
        .stderr_has("repaired the ledger: latest.json names");
    let sha2 = agrees(&env, &r.report());
    assert_eq!(sha2, sha256_file(&env.path("v2/ckpt-2.pt")));
    let recs = ledger_records(&env.path("roger-ledger.jsonl"));
    let last = recs.last().unwrap();
    assert_eq!(last["kind"], "publish");
    assert_eq!(last["step"], 2);
    assert!(last["repaired"]
        .as_str()
        .unwrap()
        .contains("no publish record"));
    env.run(&["publish", "--verify"]).expect(0);
    assert_eq!(
        ledger_records(&env.path("roger-ledger.jsonl")).len(),
        recs.len()
    );

    // Bytes that do not match latest.json are said, never recorded as good.
    std::fs::write(env.path("roger-ledger.jsonl"), "").unwrap();
    env.write("ck/ckpt-2.pt", torch_zip(30_000, 9));
    env.run(&["publish", "--verify"])
        .expect(1)
        .stderr_has("but it hashes to")
        .stderr_has("not repaired");
    assert_eq!(ledger_records(&env.path("roger-ledger.jsonl")).len(), 0);
}

#[test]
fn the_intent_file_name_is_roger_s_own() {
    let env = Env::new();
    env.write("x/.roger-publish-intent.json", "{}");
    env.run(&["publish", "x/.roger-publish-intent.json", "--to", "ck"])
        .expect(1)
        .stderr_has("that name is roger's own there");
}
