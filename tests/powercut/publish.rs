//! Power cut before every write, fsync, rename, create, link and unlink of a `roger publish`
//! (and after it returned): no real name ever holds a torn checkpoint, latest.json always
//! verifies, the ledger stays intact, and the next command leaves latest.json, the ledger,
//! the files and retention agreeing (repairing with a record where needed).

use super::state::State;
use super::{prepared, sha, Cut, Rig};
use crate::publish::torch_zip;
use roger::ledger::{Kind, Ledger};
use std::path::{Path, PathBuf};

/// Checkpoints and the ledger live on the power-cut disk; sources outside it.
const CONFIG: &str = r#"
[run]
name = "r"
checkpoint_dir = "disk/ck"
ledger = "disk/ck/roger-ledger.jsonl"
[publish]
keep_last = 1
"#;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Scenario {
    /// The first publish, into a directory that does not exist yet.
    First,
    /// ckpt-1.pt published, then ckpt-2.pt (retention prunes ckpt-1.pt).
    NewName,
    /// model.pt replaced by a new model.pt.
    SameName,
    /// checkpoint-7/ replaced by a new checkpoint-7/.
    SameDir,
}

fn source(rig: &Rig, s: Scenario, v: u8) -> String {
    match s {
        Scenario::First | Scenario::NewName => {
            rig.write(&format!("v{v}/ckpt-{v}.pt"), torch_zip(12_000, v));
            format!("v{v}/ckpt-{v}.pt")
        }
        Scenario::SameName => {
            rig.write(&format!("v{v}/model.pt"), torch_zip(12_000, v));
            format!("v{v}/model.pt")
        }
        Scenario::SameDir => {
            let d = format!("v{v}/checkpoint-7");
            rig.write(&format!("{d}/weights.bin"), vec![v; 9_000]);
            rig.write(&format!("{d}/sub/optim.bin"), vec![v; 2_000]);
            d
        }
    }
}

fn ck(rig: &Rig) -> PathBuf {
    rig.disk().join("ck")
}

fn ledger(rig: &Rig) -> Ledger {
    Ledger::new(ck(rig).join("roger-ledger.jsonl"))
}

fn roger_owned(name: &str) -> bool {
    name.starts_with('.') || name == "latest.json" || name == "roger-ledger.jsonl"
}

/// Right after the power comes back, before any command: every real name holds a whole
/// known version, latest.json verifies, the ledger is intact. Returns latest.json's sha256.
fn sound(rig: &Rig, known: &[String], cut: &Cut) -> Option<String> {
    let ctx = cut.ctx();
    let dir = ck(rig);
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if roger_owned(&name) {
                continue;
            }
            let got = sha(&e.path());
            assert!(
                got.as_ref().is_some_and(|g| known.contains(g)),
                "{name} holds a torn or unknown checkpoint ({got:?})\n{ctx}"
            );
        }
    }
    let scan = ledger(rig).scan().unwrap();
    assert!(scan.first_break().is_none(), "{:?}\n{ctx}", scan.problems);
    let text = std::fs::read_to_string(dir.join("latest.json")).ok()?;
    let l: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("latest.json torn: {e}\n{ctx}"));
    let want = l["sha256"].as_str().unwrap().to_string();
    let target = dir.join(l["path"].as_str().unwrap());
    assert_eq!(
        sha(&target).as_deref(),
        Some(want.as_str()),
        "latest.json's target\n{ctx}"
    );
    Some(want)
}

/// After the next command: latest.json's checkpoint has its record and is the last good one,
/// nothing pruned is still there. Returns latest.json's sha256.
fn agree(rig: &Rig, what: &str) -> String {
    let dir = std::fs::canonicalize(ck(rig)).unwrap();
    let l: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("latest.json")).unwrap()).unwrap();
    let target = dir.join(l["path"].as_str().unwrap());
    let want = l["sha256"].as_str().unwrap().to_string();
    assert_eq!(sha(&target).as_deref(), Some(want.as_str()), "{what}");
    let records = ledger(rig).records().unwrap();
    let good =
        roger::checkpoints::last_good(&records, "r", None, &mut roger::checkpoints::verify_on_disk);
    let chosen = good
        .chosen
        .unwrap_or_else(|| panic!("no last good checkpoint {:?}\n{what}", good.skipped));
    assert_eq!(
        (chosen.path, chosen.sha256),
        (target, want.clone()),
        "{what}"
    );
    let published = roger::checkpoints::published(&records, "r");
    for r in records.iter().filter(|r| r.kind == Kind::Prune) {
        let p = Path::new(r.str_field("path").unwrap());
        assert!(
            published.iter().any(|c| c.path == p) || !p.exists(),
            "pruned {} is still there\n{what}",
            p.display()
        );
    }
    want
}

/// The next command repairs what needs it, a second finds nothing more, and the next
/// publish leaves everything agreeing and no leftovers.
fn follow_up(r: &Rig, ctx: &str, old: Option<&String>, new: &String, v3_sha: &str, v3: &str) {
    let verify = r.roger(&["publish", "--verify"]);
    let what = format!("{ctx}\n--- publish --verify\n{}", verify.report());
    if std::fs::metadata(ck(r).join("latest.json")).is_err() {
        assert_eq!(verify.code(), 1, "{what}");
    } else {
        assert_eq!(verify.code(), 0, "{what}");
        let after = agree(r, &what);
        assert!(Some(&after) == old || &after == new, "{what}");
        let n = ledger(r).records().unwrap().len();
        r.roger(&["publish", "--verify"]).expect(0);
        assert_eq!(
            ledger(r).records().unwrap().len(),
            n,
            "repaired twice\n{what}"
        );
    }
    let next = r.roger(&["publish", v3]);
    let what = format!("{what}\n--- the next publish\n{}", next.report());
    assert_eq!(next.code(), 0, "{what}");
    assert_eq!(agree(r, &what), v3_sha, "{what}");
    let left: Vec<String> = std::fs::read_dir(ck(r))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".roger-") && n != ".roger-publish.lock")
        .collect();
    assert!(left.is_empty(), "leftovers {left:?}\n{what}");
    r.roger(&["ledger", "verify"]).expect(0);
}

struct Setup {
    rig: Rig,
    base: State,
    shas: Vec<String>,
    v2: String,
    v3: String,
    old: Option<String>,
    new: String,
}

fn setup(s: Scenario, test: &str) -> Option<Setup> {
    let rig = Rig::new(test)?;
    rig.write("roger.toml", CONFIG);
    let v1 = source(&rig, s, 1);
    let v2 = source(&rig, s, 2);
    let v3 = source(&rig, s, 3);
    let shas: Vec<String> = [&v1, &v2, &v3]
        .iter()
        .map(|v| sha(&rig.path(v)).unwrap())
        .collect();
    let base = prepared(&rig, &|r: &Rig| {
        if s != Scenario::First {
            r.roger(&["publish", &v1]).expect(0);
        }
    });
    let old = (s != Scenario::First).then(|| shas[0].clone());
    let new = shas[1].clone();
    Some(Setup {
        rig,
        base,
        shas,
        v2,
        v3,
        old,
        new,
    })
}

fn scenario(s: Scenario) -> u64 {
    let test = format!("power_cut_at_every_step_of_a_publish ({s:?})");
    let Some(Setup {
        rig,
        base,
        shas,
        v2,
        v3,
        old,
        new,
    }) = setup(s, &test)
    else {
        return 0;
    };
    rig.cut_everywhere(
        &base,
        &|r: &Rig| r.roger(&["publish", &v2]),
        &mut |r: &Rig, cut: &Cut| {
            let ctx = cut.ctx();
            let now = sound(r, &shas, cut);
            assert!(
                now == old || now.as_ref() == Some(&new),
                "latest.json names neither version\n{ctx}"
            );
            if cut.finished {
                assert!(cut.run.out.status.success(), "{ctx}");
                assert_eq!(
                    now.as_ref(),
                    Some(&new),
                    "a returned publish was lost\n{ctx}"
                );
            }
            follow_up(r, &ctx, old.as_ref(), &new, &shas[2], &v3);
        },
    );
    eprintln!("publish {s:?}: {} power cuts tried", rig.cuts.get());
    rig.cuts.get()
}

#[test]
fn power_cut_at_every_step_of_a_first_publish() {
    scenario(Scenario::First);
}

#[test]
fn power_cut_at_every_step_of_a_publish_with_retention() {
    scenario(Scenario::NewName);
}

#[test]
fn power_cut_at_every_step_of_a_same_name_publish() {
    scenario(Scenario::SameName);
}

#[test]
fn power_cut_at_every_step_of_a_directory_publish() {
    scenario(Scenario::SameDir);
}

/// A second power cut at every step of the repair that follows the first: the repair is as
/// crash-safe as the publish.
fn twice(s: Scenario) -> u64 {
    let test = format!("power_cut_again_during_the_repair ({s:?})");
    let Some(Setup {
        rig,
        base,
        shas,
        v2,
        v3,
        old,
        new,
    }) = setup(s, &test)
    else {
        return 0;
    };
    for n in 1.. {
        let (first, rebooted) = rig.cut_at(&base, n, &|r: &Rig| r.roger(&["publish", &v2]));
        rig.cut_everywhere(
            &rebooted,
            &|r: &Rig| r.roger(&["publish", "--verify"]),
            &mut |r: &Rig, cut: &Cut| {
                let ctx = format!(
                    "{}\n=== then, during the repair:\n{}",
                    first.ctx(),
                    cut.ctx()
                );
                let now = sound(r, &shas, cut);
                assert!(now == old || now.as_ref() == Some(&new), "{ctx}");
                follow_up(r, &ctx, old.as_ref(), &new, &shas[2], &v3);
            },
        );
        if first.finished {
            break;
        }
    }
    eprintln!(
        "publish {s:?}, cut again during the repair: {} power cuts tried",
        rig.cuts.get()
    );
    rig.cuts.get()
}

#[test]
fn power_cut_again_during_the_repair_of_a_publish_with_retention() {
    twice(Scenario::NewName);
}

#[test]
fn power_cut_again_during_the_repair_of_a_same_name_publish() {
    twice(Scenario::SameName);
}
