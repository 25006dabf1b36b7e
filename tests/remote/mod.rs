//! Checkpoints in a bucket, end to end: the real `roger` against a real S3 server (moto on
//! loopback, started and stopped by each test), with the fault proxy between them where a
//! test needs the network to misbehave. Publish → upload → verify → latest.json → mirror;
//! faults (resets, SlowDown, a truncating proxy, a corrupted GET, refused connections, wrong
//! credentials, no bucket, `kill -9` mid-upload, a full disk while a download stages, two
//! machines racing on latest.json); the fresh-machine resume; `roger fetch`; the preemption
//! hand-off; and that no secret reaches the ledger, a report, status or stderr.

mod creds;
mod endpoint;
mod faults;
mod fresh;

use crate::util::faultproxy::FaultProxy;
use crate::util::s3::{self, S3Server};
use crate::util::{Env, Run};
use roger::ledger::{Kind, Ledger, Record};
use std::path::PathBuf;
use std::time::Duration;

pub(crate) const BUCKET: &str = "ckpts";
pub(crate) const PREFIX: &str = "runs/r1";

/// A bucket on a fresh moto (None: moto is missing and this is not CI).
pub(crate) fn server(test: &str) -> Option<S3Server> {
    let s = S3Server::start(test)?;
    s.create_bucket(BUCKET);
    Some(s)
}

/// roger.toml for run `r1` with its bucket at `endpoint`; `extra` is appended.
pub(crate) fn config(env: &Env, endpoint: &str, extra: &str) -> PathBuf {
    env.write(
        "roger.toml",
        format!(
            "[run]\nname = \"r1\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ck\"\n\
             [publish]\nkeep_last = 2\nremote = \"s3://{BUCKET}/{PREFIX}/\"\n\
             [remote]\nendpoint = \"{endpoint}\"\npart_size = \"5MiB\"\nconcurrency = 3\nmax_retries = 4\ntimeout = \"20s\"\n\
             [gpu]\nsource = \"none\"\n{extra}"
        ),
    )
}

/// A roger command with the test credentials (and none of the developer's), fast backoff.
pub(crate) fn cmd(env: &Env, args: &[&str]) -> std::process::Command {
    let mut c = env.cmd(args);
    s3::apply_env(&mut c);
    c.env("ROGER_UPLOAD_BACKOFF_MS", "50")
        .env("ROGER_BIN", crate::util::roger_bin());
    c
}

pub(crate) fn run(env: &Env, args: &[&str]) -> Run {
    env.run_cmd(cmd(env, args), args)
}

/// Incompressible bytes (a new seed, new bytes).
pub(crate) fn bytes(size: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Write `staging/ckpt-STEP.dat` and publish it (blocking), returning roger's run.
pub(crate) fn publish(env: &Env, step: u64, size: usize) -> Run {
    let rel = format!("staging/ckpt-{step}.dat");
    env.write(&rel, bytes(size, step));
    run(env, &["--config", "roger.toml", "publish", &rel])
}

pub(crate) fn records(env: &Env) -> Vec<Record> {
    Ledger::new(env.path("roger-ledger.jsonl"))
        .records()
        .unwrap()
}

/// The `remote` records' events, in order.
pub(crate) fn events(env: &Env) -> Vec<String> {
    records(env)
        .iter()
        .filter(|r| r.kind == Kind::Remote)
        .filter_map(|r| r.str_field("event").map(str::to_string))
        .collect()
}

pub(crate) fn key(name: &str) -> String {
    format!("{PREFIX}/checkpoints/{name}")
}

/// The bucket's latest.json.
pub(crate) fn remote_latest(s: &S3Server) -> Option<serde_json::Value> {
    let b = s.get(BUCKET, &format!("{PREFIX}/latest.json"))?;
    serde_json::from_slice(&b).ok()
}

pub(crate) fn wait(env: &Env) -> Run {
    run(
        env,
        &[
            "--config",
            "roger.toml",
            "publish",
            "--wait",
            "--timeout",
            "120s",
        ],
    )
}

/// A proxy in front of the server.
pub(crate) fn proxy(s: &S3Server) -> FaultProxy {
    FaultProxy::start(s.addr())
}

pub(crate) fn sha256(b: &[u8]) -> String {
    use sha2::Digest;
    roger::digest::hex(&sha2::Sha256::digest(b))
}

#[test]
fn a_publish_reaches_the_bucket_verified_with_latest_json_and_the_ledger_mirrored() {
    let Some(s) = server("a_publish_reaches_the_bucket") else {
        return;
    };
    let env = Env::new();
    config(&env, &s.endpoint(), "");
    // 12 MiB: three 5 MiB parts; then a small one (a single PUT).
    publish(&env, 10, 12 << 20)
        .expect(0)
        .stdout_has("queued for s3://ckpts/runs/r1/checkpoints/ckpt-10.dat");
    publish(&env, 20, 1000).expect(0);
    wait(&env).expect(0);
    let ev = events(&env);
    assert_eq!(ev.iter().filter(|e| *e == "verified").count(), 2, "{ev:?}");
    assert_eq!(
        s.get(BUCKET, &key("ckpt-10.dat")).unwrap(),
        bytes(12 << 20, 10),
        "the bucket holds the checkpoint's bytes"
    );
    let recs = records(&env);
    let v = recs
        .iter()
        .find(|r| r.str_field("event") == Some("verified"))
        .unwrap();
    assert_eq!(v.u64_field("parts"), Some(3));
    assert_eq!(v.str_field("verify"), Some("read"));
    assert_eq!(v.u64_field("verify_bytes"), Some(12 << 20));
    assert_eq!(
        v.str_field("sha256"),
        Some(sha256(&bytes(12 << 20, 10)).as_str())
    );
    let l = remote_latest(&s).unwrap();
    assert_eq!(l["step"], 20);
    assert_eq!(l["path"], "ckpt-20.dat");
    assert_eq!(l["sha256"], sha256(&bytes(1000, 20)));
    assert!(l["etags"][0].as_str().is_some_and(|e| !e.is_empty()), "{l}");
    assert!(s.list_multipart_uploads(BUCKET).is_empty());
    // The mirror is the ledger up to its last push, byte for byte, and verifies.
    let mirror = s
        .get(BUCKET, &format!("{PREFIX}/roger-ledger.jsonl"))
        .unwrap();
    let local = std::fs::read(env.path("roger-ledger.jsonl")).unwrap();
    assert!(local.starts_with(&mirror) && mirror.len() > 100);
    assert!(roger::ledger::scan_bytes(&mirror).first_break().is_none());
    // status and report show the bucket side.
    run(&env, &["--config", "roger.toml", "status"])
        .stdout_has("bucket      s3://ckpts/runs/r1/ · newest verified step 20");
    run(&env, &["--config", "roger.toml", "report", "--text"])
        .stdout_has("bucket: s3://ckpts/runs/r1/ · newest verified step 20");
}

#[test]
fn local_retention_waits_for_the_bucket_copy_and_bucket_retention_keeps_latest_and_last_good() {
    let Some(s) = server("local_retention_waits_for_the_bucket_copy") else {
        return;
    };
    let p = proxy(&s);
    let env = Env::new();
    config(&env, &p.endpoint(), "");
    let add = |extra: &str| {
        let t = env
            .read("roger.toml")
            .replace("keep_last = 2\nremote", "keep_last = 1\nremote");
        env.write("roger.toml", format!("{t}{extra}"));
    };
    add("");
    // The bucket unreachable: nothing is verified there, so no local copy may go.
    p.refuse();
    for step in [10, 20, 30] {
        publish(&env, step, 2000).expect(0);
    }
    let left: Vec<String> = std::fs::read_dir(env.path("ck"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ckpt-"))
        .collect();
    assert_eq!(
        left.len(),
        3,
        "keep_last = 1, but nothing is in the bucket: {left:?}"
    );
    let w = wait(&env).expect(1);
    assert!(
        w.stderr().contains("not in the bucket yet"),
        "{}",
        w.report()
    );
    assert!(
        w.stderr()
            .contains("s3://ckpts/runs/r1/checkpoints/ckpt-10.dat"),
        "the error names the object: {}",
        w.report()
    );
    p.accept_again();
    wait(&env).expect(0);
    // Now verified: the next publish's retention may prune the older ones.
    publish(&env, 40, 2000).expect(0);
    wait(&env).expect(0);
    let recs = records(&env);
    let pruned: Vec<&str> = recs
        .iter()
        .filter(|r| r.kind == Kind::Prune)
        .filter_map(|r| r.str_field("path"))
        .collect();
    assert!(!pruned.is_empty(), "{:?}", events(&env));
    for path in pruned {
        let name = std::path::Path::new(path)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        assert!(
            s.get(BUCKET, &key(name)).is_some(),
            "{name} was pruned here while the bucket lacks it"
        );
    }
    // [remote] keep_last: the bucket keeps 2, never its latest.json target.
    let t = env
        .read("roger.toml")
        .replace("timeout = \"20s\"", "timeout = \"20s\"\nkeep_last = 2");
    env.write("roger.toml", t);
    publish(&env, 50, 2000).expect(0);
    wait(&env).expect(0);
    let keys = s.list(BUCKET, &format!("{PREFIX}/checkpoints/"));
    assert!(keys.contains(&key("ckpt-50.dat")), "{keys:?}");
    assert!(keys.len() <= 3, "bucket retention left {keys:?}");
    assert!(events(&env).contains(&"pruned".to_string()));
}

#[test]
fn roger_fetch_gives_a_verified_file_or_exit_1() {
    let Some(s) = server("roger_fetch_gives_a_verified_file") else {
        return;
    };
    let env = Env::new();
    config(&env, &s.endpoint(), "");
    publish(&env, 10, 6 << 20).expect(0);
    publish(&env, 20, 3000).expect(0);
    wait(&env).expect(0);
    // An init container on another machine: the config and an empty directory.
    let other = Env::new();
    other.write("roger.toml", env.read("roger.toml"));
    let r = run(
        &other,
        &[
            "--config",
            "roger.toml",
            "fetch",
            "--step",
            "10",
            "--to",
            "restore",
        ],
    )
    .expect(0);
    r.stdout_has("fetched ").stdout_has("step 10");
    assert_eq!(
        std::fs::read(other.path("restore/ckpt-10.dat")).unwrap(),
        bytes(6 << 20, 10)
    );
    run(&other, &["--config", "roger.toml", "ledger", "verify"]).expect(0);
    run(
        &other,
        &[
            "--config",
            "roger.toml",
            "fetch",
            "--step",
            "15",
            "--to",
            "restore",
        ],
    )
    .expect(1)
    .stderr_has("no good checkpoint at step 15 with a verified copy in s3://ckpts/runs/r1/");
    // No bucket configured: says which key to set.
    let bare = Env::new();
    bare.write(
        "roger.toml",
        "[run]\nname = \"r1\"\ncheckpoint_dir = \"ck\"\n",
    );
    run(&bare, &["--config", "roger.toml", "fetch"])
        .expect(1)
        .stderr_has("[publish] remote");
}

#[test]
fn two_machines_racing_on_latest_json_never_move_it_back() {
    let Some(s) = server("two_machines_racing_on_latest_json") else {
        return;
    };
    let a = Env::new();
    let b = Env::new();
    config(&a, &s.endpoint(), "");
    config(&b, &s.endpoint(), "");
    publish(&a, 30, 2000).expect(0);
    wait(&a).expect(0);
    // A zombie on a dead VM that was still saving an older step.
    publish(&b, 20, 2000).expect(0);
    wait(&b).expect(0);
    let l = remote_latest(&s).unwrap();
    assert_eq!(l["step"], 30, "latest.json went back: {l}");
    let recs = records(&b);
    let race = recs
        .iter()
        .find(|r| r.str_field("event") == Some("latest_race"))
        .expect("the lost race is recorded");
    assert!(
        race.str_field("resolved").unwrap().contains("by step"),
        "{:?}",
        race.fields
    );
    assert_eq!(race.u64_field("theirs_step"), Some(30));
    // The mirror: b's ledger is not a continuation of a's, so a's stays.
    let mirror = s
        .get(BUCKET, &format!("{PREFIX}/roger-ledger.jsonl"))
        .unwrap();
    assert!(std::fs::read(a.path("roger-ledger.jsonl"))
        .unwrap()
        .starts_with(&mirror));
    assert!(
        events(&b).contains(&"mirror_conflict".to_string()),
        "{:?}",
        events(&b)
    );
}

#[test]
fn no_secret_reaches_the_ledger_a_report_status_or_stderr() {
    let Some(s) = server("no_secret_reaches") else {
        return;
    };
    let p = proxy(&s);
    let env = Env::new();
    config(&env, &p.endpoint(), "");
    let mut seen = String::new();
    let r = publish(&env, 10, 7 << 20).expect(0);
    seen.push_str(&r.stderr());
    seen.push_str(&r.stdout());
    // Failures put error texts in the ledger and on stderr: provoke some.
    p.slow_down(30, crate::util::faultproxy::on("PUT", "partNumber"));
    let w = wait(&env);
    seen.push_str(&w.stderr());
    p.clear();
    seen.push_str(&wait(&env).expect(0).stderr());
    for args in [
        vec!["--config", "roger.toml", "status"],
        vec!["--config", "roger.toml", "report", "--text"],
        vec!["--config", "roger.toml", "report"],
        vec![
            "--config",
            "roger.toml",
            "ledger",
            "tail",
            "-n",
            "100",
            "--json",
        ],
    ] {
        let r = run(&env, &args);
        seen.push_str(&r.stdout());
        seen.push_str(&r.stderr());
    }
    seen.push_str(&env.read("roger-ledger.jsonl"));
    seen.push_str(&env.read("roger-report.html"));
    seen.push_str(&env.read("ck/.roger-upload/uploader.log"));
    for f in std::fs::read_dir(env.path("ck/.roger-upload"))
        .unwrap()
        .flatten()
    {
        seen.push_str(&std::fs::read_to_string(f.path()).unwrap_or_default());
    }
    assert!(
        seen.contains("failed"),
        "the faults left error texts to look at"
    );
    for secret in [s3::SECRET_ACCESS_KEY, s3::SESSION_TOKEN] {
        assert!(!seen.contains(secret), "{secret} leaked");
    }
    assert!(!env.read("roger-report.html").is_empty());
}

/// How long an upload may take here before a test gives up.
pub(crate) const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn a_sharded_directory_checkpoint_goes_up_file_by_file_and_comes_back_whole() {
    let Some(s) = server("a_sharded_directory_checkpoint") else {
        return;
    };
    let env = Env::new();
    config(&env, &s.endpoint(), "");
    env.write(
        "staging/checkpoint-30/model-00001-of-00002.safetensors.bin",
        bytes(6 << 20, 1),
    );
    env.write(
        "staging/checkpoint-30/model-00002-of-00002.safetensors.bin",
        bytes(4000, 2),
    );
    env.write(
        "staging/checkpoint-30/optimizer/state.bin",
        bytes(70_000, 3),
    );
    run(
        &env,
        &[
            "--config",
            "roger.toml",
            "publish",
            "staging/checkpoint-30",
            "--step",
            "30",
        ],
    )
    .expect(0);
    wait(&env).expect(0);
    let keys = s.list(BUCKET, &format!("{PREFIX}/checkpoints/checkpoint-30/"));
    assert_eq!(keys.len(), 3, "{keys:?}");
    let v = records(&env)
        .into_iter()
        .find(|r| r.str_field("event") == Some("verified"))
        .unwrap();
    assert_eq!(v.get("dir"), Some(&serde_json::json!(true)));
    // Another machine gets it back whole, hashed to the directory's recorded digest.
    let other = Env::new();
    other.write("roger.toml", env.read("roger.toml"));
    run(
        &other,
        &["--config", "roger.toml", "fetch", "--to", "restore"],
    )
    .expect(0)
    .stdout_has("step 30");
    assert_eq!(
        std::fs::read(other.path("restore/checkpoint-30/optimizer/state.bin")).unwrap(),
        bytes(70_000, 3)
    );
    assert_eq!(
        std::fs::read(other.path("restore/checkpoint-30/model-00001-of-00002.safetensors.bin"))
            .unwrap(),
        bytes(6 << 20, 1)
    );
}
