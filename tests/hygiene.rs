//! `roger hygiene`: clean as a filter and in place, the disk verdict and forecast (a real
//! tmpfs when root), prune through the shared retention, and flap detection — all through
//! the real binary.

use crate::util::Env;
use chrono::{Duration, Utc};
use roger::ledger::{Entry, Kind, Ledger};
use std::process::Command;

const TQDM: &str = "\x1b[1mepoch 1\x1b[0m\n  0%|          | 0/3 [00:00<?, ?it/s]\r 33%|###3      | 1/3\r100%|##########| 3/3\n\x1b]0;title\x07loss 2.5\r\n";
const CLEAN: &str = "epoch 1\n100%|##########| 3/3\nloss 2.5\n";

#[test]
fn clean_filters_a_file_and_stdin() {
    let env = Env::new();
    let log = env.write("train.log", TQDM);
    env.run(&["hygiene", "clean", "train.log"])
        .expect(0)
        .stdout_has(CLEAN);
    let mut c: Command = env.cmd(&["hygiene", "clean", "-", "--stats"]);
    c.stdin(std::fs::File::open(&log).unwrap());
    let r = env
        .run_cmd(c, &["hygiene", "clean", "-", "--stats"])
        .expect(0);
    assert_eq!(r.stdout(), CLEAN, "{}", r.report());
    assert!(
        r.stderr()
            .contains("3 lines, 3 escapes, 2 redraws collapsed"),
        "{}",
        r.report()
    );
    env.run(&["hygiene", "clean", "nope.log"])
        .expect(1)
        .stderr_has("opening nope.log");
}

#[test]
fn clean_in_place_is_atomic_and_keeps_evidence_on_request() {
    let env = Env::new();
    env.write("train.log", TQDM);
    env.run(&[
        "hygiene",
        "clean",
        "train.log",
        "--in-place",
        "--keep-original",
    ])
    .expect(0)
    .stderr_has("original kept as train.log.orig");
    assert_eq!(env.read("train.log"), CLEAN);
    assert_eq!(env.read("train.log.orig"), TQDM);
    env.write("other.log", TQDM);
    env.run(&["hygiene", "clean", "-i", "other.log"]).expect(0);
    assert_eq!(env.read("other.log"), CLEAN);
    assert!(!env.path("other.log.orig").exists());
    env.run(&["hygiene", "clean", "--in-place"])
        .expect(1)
        .stderr_has("needs a FILE");
}

fn config(env: &Env, disk: &str) {
    env.write(
        "roger.toml",
        format!(
            "[run]\nname = \"r\"\nlog = \"train.log\"\ncheckpoint_dir = \"ck\"\n\n[publish]\nkeep_last = 1\n\n[disk]\n{disk}\n"
        ),
    );
    std::fs::create_dir_all(env.path("ck")).unwrap();
}

fn publish_record(ledger: &Ledger, step: u64, size: u64, ago_s: i64) {
    ledger
        .append(
            Entry::new(Kind::Publish, "publish", "r")
                .step(Some(step))
                .field("path", format!("/nowhere/ckpt-{step}.pt"))
                .field("sha256", "0".repeat(64))
                .field("size", size),
            Utc::now() - Duration::seconds(ago_s),
        )
        .unwrap();
}

#[test]
fn disk_levels_and_forecast() {
    let env = Env::new();
    config(&env, "warn_free = \"1KB\"\nfail_free = \"0\"");
    let r = env.run(&["hygiene", "disk"]).expect(0);
    assert!(r.stdout().contains("disk: pass"), "{}", r.report());
    assert!(r.stdout().contains("checkpoints"));
    assert!(r.stdout().contains("growth: unknown"));
    // Absolute level.
    config(&env, "warn_free = \"1000TB\"\nfail_free = \"500TB\"");
    env.run(&["hygiene", "disk"])
        .expect(2)
        .stdout_has("below fail_free");
    // Forecast: 1 PB every 30 minutes fills any disk within the hour.
    config(
        &env,
        "warn_free = \"1KB\"\nfail_free = \"0\"\nfail_hours = 2.0",
    );
    let ledger = Ledger::new(env.path("roger-ledger.jsonl"));
    publish_record(&ledger, 100, 1 << 50, 1800);
    publish_record(&ledger, 200, 1 << 50, 0);
    let r = env.run(&["hygiene", "disk", "--json"]).expect(2);
    let v: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(v["disk"]["status"], "fail");
    let cadence = v["disk"]["growth"]["cadence_s"].as_f64().unwrap();
    assert!((cadence - 1800.0).abs() < 1.0, "{cadence}");
    let ck = &v["disk"]["targets"][0];
    assert_eq!(ck["role"], "checkpoints");
    assert!(
        ck["hours_to_full"].as_f64().unwrap() < 2.0,
        "{}",
        r.report()
    );
    assert!(ck["reason"].as_str().unwrap().contains("under fail_hours"));
    // The log on the same filesystem is forecast with the same rate.
    assert_eq!(v["disk"]["targets"][1]["same_fs_as"], "checkpoints");
    env.run(&["hygiene", "disk"])
        .expect(2)
        .stdout_has("growth: 1024.0 TiB per checkpoint every 30m");
}

/// A real small filesystem: a tmpfs of 8 MiB with 6 MiB used (skipped when not root).
#[test]
fn disk_forecast_on_a_real_small_filesystem() {
    let env = Env::new();
    let mnt = env.path("small");
    let Some(_guard) =
        crate::util::mount_tmpfs(&mnt, "8m", "disk_forecast_on_a_real_small_filesystem")
    else {
        return;
    };
    std::fs::write(mnt.join("filler"), vec![7u8; 6 << 20]).unwrap();
    env.write(
        "roger.toml",
        "[run]\nname = \"r\"\ncheckpoint_dir = \"small/ck\"\nledger = \"small/l.jsonl\"\n\n[quarantine]\ndir = \"small/q\"\n\n[disk]\nwarn_free = \"1MiB\"\nfail_free = \"512KiB\"\nwarn_hours = 12.0\nfail_hours = 0.5\n",
    );
    // 1 MiB checkpoints every 30 minutes: 2 MiB/h against ~2 MiB free, about an hour left.
    let ledger = Ledger::new(mnt.join("l.jsonl"));
    publish_record(&ledger, 100, 1 << 20, 3600);
    publish_record(&ledger, 200, 1 << 20, 1800);
    publish_record(&ledger, 300, 1 << 20, 0);
    let r = env.run(&["hygiene", "disk", "--json"]).expect(1);
    let v: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    let ck = &v["disk"]["targets"][0];
    assert_eq!(ck["status"], "warn", "{}", r.report());
    assert_eq!(ck["total"], 8 << 20);
    let h = ck["hours_to_full"].as_f64().unwrap();
    assert!((0.5..2.0).contains(&h), "{h} h\n{}", r.report());
    // Absolute: fill it further and it fails on free space alone.
    std::fs::write(mnt.join("filler2"), vec![7u8; (1 << 20) + (600 << 10)]).unwrap();
    env.run(&["hygiene", "disk"])
        .expect(2)
        .stdout_has("below fail_free");
}

#[test]
fn prune_until_goal_sparing_latest_last_good_and_quarantined() {
    let env = Env::new();
    config(
        &env,
        "warn_free = \"1KB\"\nfail_free = \"0\"\nprune_goal_free = \"1000TB\"",
    );
    for step in [100, 200, 300, 400] {
        let src = env.write(&format!("out/ckpt-{step}.bin"), format!("weights {step}"));
        env.run(&[
            "publish",
            src.to_str().unwrap(),
            "--step",
            &step.to_string(),
            "--no-prune",
        ])
        .expect(0);
    }
    env.run(&[
        "quarantine",
        "add",
        "ck/ckpt-200.bin",
        "--reason",
        "suspect",
    ])
    .expect(0);
    // Someone pointed latest.json back at the oldest checkpoint (a rollback by hand).
    let latest = env
        .read("ck/latest.json")
        .replace("ckpt-400.bin", "ckpt-100.bin");
    env.write("ck/latest.json", latest);
    let r = env
        .run(&["hygiene", "disk", "--prune", "--dry-run"])
        .expect(0);
    let out = r.stdout();
    assert!(
        out.contains("would remove 1 checkpoint(s)"),
        "{}",
        r.report()
    );
    assert!(out.contains("NOT reachable"), "{}", r.report());
    assert!(
        out.contains("ckpt-100.bin: latest.json points to it"),
        "{}",
        r.report()
    );
    assert!(out.contains("ckpt-400.bin: the last good checkpoint"));
    assert!(out.contains("ckpt-200.bin: quarantined"));
    assert!(
        env.path("ck/ckpt-300.bin").exists(),
        "dry run removes nothing"
    );
    env.run(&["hygiene", "disk", "--prune"])
        .expect(0)
        .stdout_has("removed 1 checkpoint(s)");
    assert!(env.path("ck/ckpt-100.bin").exists());
    assert!(!env.path("ck/ckpt-300.bin").exists());
    assert!(env.path("ck/ckpt-400.bin").exists());
    let tail = env
        .run(&["ledger", "tail", "--kind", "prune", "--json"])
        .expect(0)
        .stdout();
    let prunes: Vec<serde_json::Value> = tail
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(prunes.len(), 1);
    assert_eq!(prunes[0]["source"], "hygiene");
    assert_eq!(prunes[0]["step"], 300);
    assert!(prunes[0]["path"]
        .as_str()
        .unwrap()
        .ends_with("ck/ckpt-300.bin"));
    assert_eq!(prunes[0]["size"], 11);
    env.run(&["ledger", "verify"]).expect(0);
}

#[test]
fn prune_never_touches_another_destination_directory() {
    let env = Env::new();
    config(
        &env,
        "warn_free = \"1KB\"\nfail_free = \"0\"\nprune_goal_free = \"1000TB\"",
    );
    // The same run publishes to its checkpoint dir and to a backup (same ledger), backup last.
    for (step, to) in [(100, "ck"), (200, "ck"), (100, "backup"), (200, "backup")] {
        let src = env.write(&format!("out/ckpt-{step}.bin"), format!("weights {step}"));
        env.run(&[
            "publish",
            src.to_str().unwrap(),
            "--to",
            to,
            "--step",
            &step.to_string(),
            "--no-prune",
        ])
        .expect(0);
    }
    env.run(&["hygiene", "disk", "--prune"])
        .expect(0)
        .stdout_has("removed 1 checkpoint(s)");
    assert!(
        !env.path("ck/ckpt-100.bin").exists(),
        "ck keeps its newest only"
    );
    assert!(env.path("ck/ckpt-200.bin").exists());
    for step in [100, 200] {
        let p = env.path(&format!("backup/ckpt-{step}.bin"));
        assert!(p.exists(), "{} was pruned by the prune of ck", p.display());
    }
    env.run(&["publish", "--verify", "backup/ckpt-200.bin"])
        .expect(0);
}

fn verdict(ledger: &Ledger, i: u64, lr: &str) {
    let checks = serde_json::json!([
        {"check": "loss", "status": "pass", "observed": 2.0, "expected": "[1, 3]", "reason": "in band"},
        {"check": "lr", "status": lr, "observed": 1e-4, "expected": "1e-4", "reason": ""},
    ]);
    ledger
        .append(
            Entry::new(Kind::Verdict, "critic", "r")
                .step(Some(i * 10))
                .field("status", lr)
                .field("checks", checks),
            Utc::now(),
        )
        .unwrap();
}

#[test]
fn flap_reports_the_flapping_check() {
    let env = Env::new();
    let ledger = Ledger::new(env.path("l.jsonl"));
    env.run(&["hygiene", "flap", "--ledger", "l.jsonl"])
        .expect(3)
        .stderr_has("no verdict records");
    for i in 0..8 {
        verdict(&ledger, i, "pass");
    }
    env.run(&["hygiene", "flap", "--ledger", "l.jsonl", "--all"])
        .expect(0)
        .stdout_has("0 of 2 checks flapping")
        .stdout_has("PPPPPPPP");
    for i in 8..20 {
        verdict(&ledger, i, if i % 2 == 0 { "warn" } else { "pass" });
    }
    let r = env
        .run(&["hygiene", "flap", "--ledger", "l.jsonl"])
        .expect(1)
        .stdout_has("1 of 2 checks flapping");
    assert!(r.stdout().contains("lr "), "{}", r.report());
    assert!(r.stdout().contains("FLAPPING"));
    assert!(
        !r.stdout().contains("loss "),
        "steady checks only with --all"
    );
    let r = env
        .run(&["hygiene", "flap", "--ledger", "l.jsonl", "--json"])
        .expect(1);
    let v: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(v["checks"][1]["check"], "lr");
    assert_eq!(v["checks"][1]["flapping"], true);
    env.run(&["hygiene", "flap", "--ledger", "l.jsonl", "--run", "other"])
        .expect(3);
}

fn jsonl_log(env: &Env, name: &str, tps: impl Fn(u64) -> f64) {
    let text: String = (0..60u64)
        .map(|i| {
            let step = i * 10;
            format!(
                "{{\"step\": {step}, \"loss\": {}, \"tokens_per_s\": {}, \"grad_norm\": 1.0}}\n",
                4.0 - step as f64 / 1000.0,
                tps(step)
            )
        })
        .collect();
    env.write(name, text);
}

#[test]
fn regress_against_a_baseline_log() {
    let env = Env::new();
    jsonl_log(&env, "base.jsonl", |_| 50_000.0);
    jsonl_log(&env, "same.jsonl", |_| 49_000.0);
    jsonl_log(&env, "slow.jsonl", |s| {
        if s >= 400 {
            40_000.0
        } else {
            50_000.0
        }
    });
    env.run(&[
        "hygiene",
        "regress",
        "--baseline",
        "base.jsonl",
        "--log",
        "same.jsonl",
    ])
    .expect(0)
    .stdout_has("regress: pass");
    let r = env
        .run(&[
            "hygiene",
            "regress",
            "--baseline",
            "base.jsonl",
            "--log",
            "slow.jsonl",
        ])
        .expect(2);
    assert!(
        r.stdout().contains("fail    tokens_per_s"),
        "{}",
        r.report()
    );
    assert!(
        r.stdout().contains("step 400: 40000 vs 50000 (-20.0%)"),
        "{}",
        r.report()
    );
    let r = env
        .run(&[
            "hygiene",
            "regress",
            "--baseline",
            "base.jsonl",
            "--log",
            "slow.jsonl",
            "--json",
        ])
        .expect(2);
    let v: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(v["metrics"][1]["regressed_count"], 20);
    env.run(&[
        "hygiene",
        "regress",
        "--baseline",
        "nope.jsonl",
        "--log",
        "slow.jsonl",
    ])
    .expect(3)
    .stderr_has("nope.jsonl");
}

#[test]
fn regress_against_a_baseline_ledger() {
    let env = Env::new();
    jsonl_log(&env, "slow.jsonl", |s| {
        if s >= 400 {
            40_000.0
        } else {
            50_000.0
        }
    });
    let ledger = Ledger::new(env.path("base-ledger.jsonl"));
    // The baseline's critic archived 10-sample windows every 100 steps.
    for tick in 1..6u64 {
        let window: Vec<serde_json::Value> = (0..10u64)
            .map(|i| {
                let step = tick * 100 + i * 10;
                serde_json::json!({"step": step, "values": {"loss": 4.0 - step as f64 / 1000.0, "tokens_per_s": 50000.0}})
            })
            .collect();
        ledger
            .append(
                Entry::new(Kind::Verdict, "critic", "base")
                    .step(Some(tick * 100 + 90))
                    .field("status", "pass")
                    .field("observation", serde_json::json!({"window": window})),
                Utc::now(),
            )
            .unwrap();
    }
    let r = env
        .run(&[
            "hygiene",
            "regress",
            "--baseline",
            "base-ledger.jsonl",
            "--log",
            "slow.jsonl",
        ])
        .expect(2);
    assert!(
        r.stdout()
            .contains("baseline base-ledger.jsonl: 50 samples"),
        "{}",
        r.report()
    );
    let empty = Ledger::new(env.path("empty-ledger.jsonl"));
    empty
        .append(
            Entry::new(Kind::Note, "ledger", "x").field("message", "hi"),
            Utc::now(),
        )
        .unwrap();
    env.run(&[
        "hygiene",
        "regress",
        "--baseline",
        "empty-ledger.jsonl",
        "--log",
        "slow.jsonl",
    ])
    .expect(3)
    .stderr_has("give the baseline run's metrics log instead");
}

/// Issue 36 item 1: with a bucket configured, `hygiene disk --prune` removed local
/// checkpoints whose bucket copy was never verified (the bucket rule lived only in publish's
/// caller). The bucket here is a closed loopback port: nothing can ever be verified, so
/// nothing may go, and each checkpoint the policy would have removed says why it stays.
#[test]
fn prune_keeps_every_checkpoint_whose_bucket_copy_is_not_verified() {
    let env = Env::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    env.write(
        "roger.toml",
        format!(
            "[run]\nname = \"r\"\nlog = \"train.log\"\ncheckpoint_dir = \"ck\"\n\n\
             [publish]\nkeep_last = 1\nremote = \"s3://ckpts/prune/\"\n\n\
             [remote]\nendpoint = \"http://127.0.0.1:{port}\"\nmax_retries = 1\ntimeout = \"2s\"\n\n\
             [disk]\nwarn_free = \"1KB\"\nfail_free = \"0\"\nprune_goal_free = \"100TB\"\n"
        ),
    );
    std::fs::create_dir_all(env.path("ck")).unwrap();
    let roger = |args: &[&str]| {
        let mut c = env.cmd(args);
        crate::util::s3::apply_env(&mut c);
        c.env("ROGER_UPLOAD_BACKOFF_MS", "20");
        env.run_cmd(c, args)
    };
    for step in [100, 200, 300] {
        let src = env.write(&format!("out/ckpt-{step}.bin"), format!("weights {step}"));
        roger(&[
            "publish",
            src.to_str().unwrap(),
            "--step",
            &step.to_string(),
            "--no-prune",
        ])
        .expect(0);
    }
    let r = roger(&["hygiene", "disk", "--prune"]).expect(0);
    assert!(
        r.stdout().contains("removed 0 checkpoint(s)"),
        "{}",
        r.report()
    );
    for step in [100, 200, 300] {
        assert!(
            env.path(&format!("ck/ckpt-{step}.bin")).exists(),
            "ckpt-{step}.bin was pruned with no verified bucket copy\n{}",
            r.report()
        );
    }
    // Why each checkpoint the policy alone would remove is kept: on stderr...
    for step in [100, 200] {
        let line = r
            .stderr()
            .lines()
            .find(|l| l.contains(&format!("ckpt-{step}.bin")))
            .map(str::to_string);
        let line = line.unwrap_or_else(|| panic!("no word on ckpt-{step}.bin\n{}", r.report()));
        assert!(
            line.contains("s3://ckpts/prune/") && line.contains("not verified"),
            "{line}"
        );
    }
    // ... and in the ledger, with no prune record.
    let records = Ledger::new(env.path("roger-ledger.jsonl"))
        .records()
        .unwrap();
    assert!(records.iter().all(|r| r.kind != Kind::Prune));
    let kept = records
        .iter()
        .rev()
        .find(|r| r.kind == Kind::Note && r.str_field("event") == Some("prune-kept"))
        .expect("a prune-kept note");
    let kept = kept.get("kept").and_then(|k| k.as_array()).unwrap();
    for step in [100, 200] {
        let k = kept
            .iter()
            .find(|k| {
                k["path"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("ckpt-{step}.bin"))
            })
            .unwrap_or_else(|| panic!("ckpt-{step}.bin missing from {kept:?}"));
        assert!(k["why"].as_str().unwrap().contains("not verified"), "{k}");
    }
    roger(&["ledger", "verify"]).expect(0);
}
