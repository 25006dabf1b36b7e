//! `roger publish` end to end: records, latest.json, verify, retention, refusals, and the
//! crash-safety proof (failpoints, kill -9, truncation after fsync, ENOSPC).

use crate::util::Env;
use serde_json::Value;
use std::path::Path;

/// A structurally valid torch zip (one stored member + central directory + EOCD) whose
/// payload is `fill` bytes of `byte`.
pub fn torch_zip(fill: usize, byte: u8) -> Vec<u8> {
    let name = b"archive/data.pkl";
    let mut z = Vec::with_capacity(fill + 200);
    z.extend_from_slice(b"PK\x03\x04");
    z.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    z.extend_from_slice(&(fill as u32).to_le_bytes());
    z.extend_from_slice(&(fill as u32).to_le_bytes());
    z.extend_from_slice(&(name.len() as u16).to_le_bytes());
    z.extend_from_slice(&[0, 0]);
    z.extend_from_slice(name);
    z.resize(z.len() + fill, byte);
    let cd = z.len() as u32;
    z.extend_from_slice(b"PK\x01\x02");
    z.extend_from_slice(&[0; 24]);
    z.extend_from_slice(&(name.len() as u16).to_le_bytes());
    z.extend_from_slice(&[0; 16]);
    z.extend_from_slice(name);
    let cd_size = z.len() as u32 - cd;
    z.extend_from_slice(b"PK\x05\x06");
    z.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
    z.extend_from_slice(&cd_size.to_le_bytes());
    z.extend_from_slice(&cd.to_le_bytes());
    z.extend_from_slice(&[0, 0]);
    z
}

pub fn sha256_file(p: &Path) -> String {
    roger::digest::hash_path(p).unwrap().sha256
}

pub fn latest(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("latest.json")).expect("latest.json exists");
    serde_json::from_str(&text).expect("latest.json parses")
}

pub fn ledger_records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn file_publish_writes_manifest_record_and_verifies() {
    let env = Env::new();
    env.write("ckpt-100.pt", torch_zip(100_000, 1));
    let out = env
        .run(&["publish", "ckpt-100.pt", "--to", "ck", "--json"])
        .expect(0);
    let o: Value = serde_json::from_str(out.stdout().trim()).unwrap();
    let ck = std::fs::canonicalize(env.path("ck")).unwrap();
    let target = ck.join("ckpt-100.pt");
    assert_eq!(o["path"], target.display().to_string());
    assert_eq!(o["step"], 100);
    assert_eq!(o["formats"][0], "torch-zip");
    assert_eq!(o["verify_bytes_read"], o["size"]);
    let sha = sha256_file(&target);
    assert_eq!(o["sha256"], sha.as_str());
    let l = latest(&ck);
    assert_eq!(l["path"], "ckpt-100.pt");
    assert_eq!(l["sha256"], sha.as_str());
    assert_eq!(l["step"], 100);
    let recs = ledger_records(&ck.join("roger-ledger.jsonl"));
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r["kind"], "publish");
    assert_eq!(r["run"], "ck");
    assert_eq!(r["path"], target.display().to_string());
    assert_eq!(r["sha256"], sha.as_str());
    assert_eq!(r["size"], o["size"]);
    assert_eq!(r["layout"], "file");
    assert_eq!(r["files"], 1);
    assert_eq!(r["in_place"], false);
    assert_eq!(r["dir_fsync"], "ok");
    assert_eq!(r["dir"], ck.display().to_string());
    env.run(&["publish", "--verify", "--to", "ck"])
        .expect(0)
        .stdout_has("matches publish record #1");
    // Without a config or --to, `--verify PATH` finds the record in PATH's directory.
    env.run(&["publish", "--verify", "ck/ckpt-100.pt"])
        .expect(0)
        .stdout_has("matches publish record #1");
    // A destination directory (it holds latest.json): what it points to, its own ledger.
    for dir in ["ck", "ck/"] {
        env.run(&["publish", "--verify", dir])
            .expect(0)
            .stdout_has("matches publish record #1");
    }
    // Bytes changed after publish: --verify says so.
    let mut bytes = std::fs::read(&target).unwrap();
    bytes[500] ^= 0xff;
    std::fs::write(&target, bytes).unwrap();
    env.run(&["publish", "--verify", "--to", "ck"])
        .expect(1)
        .stderr_has("does not match its publish record #1");
    env.run(&["ledger", "--ledger", "ck/roger-ledger.jsonl", "verify"])
        .expect(0);
}

#[test]
fn without_config_to_is_required_and_bad_sources_are_refused() {
    let env = Env::new();
    env.write("ckpt-1.pt", torch_zip(1000, 1));
    env.run(&["publish", "ckpt-1.pt"])
        .expect(1)
        .stderr_has("--to DIR is required without a config");
    let z = torch_zip(1000, 1);
    env.write("ckpt-2.pt", &z[..z.len() - 10]);
    env.run(&["publish", "ckpt-2.pt", "--to", "ck"])
        .expect(1)
        .stderr_has("end-of-central-directory record missing");
    env.run(&["publish", "missing.pt", "--to", "ck"])
        .expect(1)
        .stderr_has("missing.pt");
    assert!(!env.path("ck").exists(), "nothing touched");
}

#[test]
fn retention_prunes_with_records_and_never_latest() {
    let env = Env::new();
    for step in [500u64, 1000, 1500, 2000, 2500] {
        let name = format!("ckpt-{step}.pt");
        env.write(&name, torch_zip(2000, step as u8));
        env.run(&[
            "publish",
            &name,
            "--to",
            "ck",
            "--keep-last",
            "2",
            "--keep-every",
            "1000",
        ])
        .expect(0);
    }
    // 500 and 1500 go (not newest 2, not multiples of 1000).
    let ck = std::fs::canonicalize(env.path("ck")).unwrap();
    assert_eq!(
        names_in(&ck),
        [
            ".roger-publish.lock",
            "ckpt-1000.pt",
            "ckpt-2000.pt",
            "ckpt-2500.pt",
            "latest.json",
            "roger-ledger.jsonl"
        ]
    );
    let prunes: Vec<Value> = ledger_records(&ck.join("roger-ledger.jsonl"))
        .into_iter()
        .filter(|r| r["kind"] == "prune")
        .collect();
    assert_eq!(prunes.len(), 2);
    assert_eq!(
        prunes[0]["path"],
        ck.join("ckpt-500.pt").display().to_string()
    );
    assert_eq!(prunes[0]["size"], torch_zip(2000, 0).len());
    assert!(prunes[0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("retention: keep_last=2, keep_every=1000"));
    // keep_last 0 still never deletes what latest.json points to.
    env.run(&["publish", "ckpt-2500.pt", "--to", "ck", "--keep-last", "0"])
        .expect(0);
    assert!(ck.join("ckpt-2500.pt").exists());
    assert!(!ck.join("ckpt-2000.pt").exists());
}
mod crash;
mod dcp;
mod recover;

#[test]
fn directory_checkpoint_is_published_whole_and_hashed_as_a_tree() {
    let env = Env::new();
    env.write("out/checkpoint-12000/model.safetensors", {
        let data = vec![5u8; 4096];
        let header =
            "{\"w\":{\"dtype\":\"U8\",\"shape\":[4096],\"data_offsets\":[0,4096]}}".to_string();
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(&data);
        v
    });
    env.write(
        "out/checkpoint-12000/optimizer/state.bin",
        vec![1u8; 10_000],
    );
    env.write("out/checkpoint-12000/trainer_state.json", "{}");
    let out = env
        .run(&["publish", "out/checkpoint-12000/", "--to", "ck", "--json"])
        .expect(0);
    let o: Value = serde_json::from_str(out.stdout().trim()).unwrap();
    let ck = std::fs::canonicalize(env.path("ck")).unwrap();
    let target = ck.join("checkpoint-12000");
    assert_eq!(o["layout"], "dir");
    assert_eq!(o["files"], 3);
    assert_eq!(o["step"], 12000);
    let d = roger::digest::hash_path(&target).unwrap();
    assert_eq!(
        d,
        roger::digest::hash_path(&env.path("out/checkpoint-12000")).unwrap()
    );
    assert_eq!(o["sha256"], d.sha256.as_str());
    assert_eq!(latest(&ck)["path"], "checkpoint-12000");
    let r = &ledger_records(&ck.join("roger-ledger.jsonl"))[0];
    assert_eq!(
        (r["layout"].as_str(), r["files"].as_u64()),
        (Some("dir"), Some(3))
    );
    env.run(&["publish", "--verify", "--to", "ck"]).expect(0);
    // A truncated safetensors inside a directory is refused by name.
    let st = std::fs::read(env.path("out/checkpoint-12000/model.safetensors")).unwrap();
    env.write(
        "out/checkpoint-13000/model.safetensors",
        &st[..st.len() - 100],
    );
    env.run(&["publish", "out/checkpoint-13000", "--to", "ck"])
        .expect(1)
        .stderr_has("checkpoint-13000/model.safetensors: refusing to publish");
    // Republishing the same name replaces the whole tree (a file gone from the new one is gone).
    std::fs::remove_file(env.path("out/checkpoint-12000/trainer_state.json")).unwrap();
    env.run(&["publish", "out/checkpoint-12000", "--to", "ck"])
        .expect(0);
    assert!(!target.join("trainer_state.json").exists());
    assert_eq!(
        names_in(&ck),
        [
            ".roger-publish.lock",
            "checkpoint-12000",
            "latest.json",
            "roger-ledger.jsonl"
        ]
    );
}

#[test]
fn in_place_publish_records_without_copying() {
    let env = Env::new();
    let src = env.write("ck/step_300.pt", torch_zip(50_000, 3));
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&src).unwrap());
    let out = env
        .run(&["publish", "ck/step_300.pt", "--to", "ck", "--json"])
        .expect(0);
    let o: Value = serde_json::from_str(out.stdout().trim()).unwrap();
    assert_eq!(o["in_place"], true);
    assert_eq!(o["step"], 300);
    assert_eq!(o["verify_bytes_read"], o["size"]);
    let same = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&src).unwrap());
    assert_eq!(ino, same, "not copied");
    assert_eq!(latest(&env.path("ck"))["path"], "step_300.pt");
    let r = &ledger_records(&env.path("ck/roger-ledger.jsonl"))[0];
    assert_eq!(r["in_place"], true);
    assert_eq!(r["sha256"], sha256_file(&src).as_str());
}

#[test]
fn config_gives_destination_ledger_run_and_retention() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"llama\"\ncheckpoint_dir = \"ckpts\"\nledger = \"logs/ledger.jsonl\"\n[publish]\nkeep_last = 1\nmargin = \"1MiB\"\n",
    );
    for step in [10, 20] {
        let name = format!("ckpt-{step}.pt");
        env.write(&name, torch_zip(1000, step as u8));
        env.run(&["publish", &name])
            .expect(0)
            .stdout_has("published");
    }
    assert!(!env.path("ckpts/ckpt-10.pt").exists());
    assert!(env.path("ckpts/ckpt-20.pt").exists());
    let recs = ledger_records(&env.path("logs/ledger.jsonl"));
    let kinds: Vec<&str> = recs.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["publish", "publish", "prune"]);
    assert!(recs.iter().all(|r| r["run"] == "llama"));
    // --no-prune and an explicit --to override the config.
    env.write("ckpt-30.pt", torch_zip(1000, 30));
    env.run(&["publish", "ckpt-30.pt", "--no-prune"]).expect(0);
    assert!(env.path("ckpts/ckpt-20.pt").exists());
    env.run(&["publish", "ckpt-30.pt", "--to", "elsewhere"])
        .expect(0);
    assert_eq!(latest(&env.path("elsewhere"))["step"], 30);
    // Retention is per destination: the other directory's latest is untouched.
    assert!(env.path("ckpts/ckpt-30.pt").exists());
    env.run(&["publish", "--verify"]).expect(0);
    env.run(&["publish", "--verify", "ckpts/ckpt-20.pt"])
        .expect(0)
        .stdout_has("ckpt-20.pt matches publish record #2");
    env.run(&["publish", "--help"])
        .expect(0)
        .stdout_has("ROGER_FAILPOINT");
}
