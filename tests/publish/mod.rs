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
