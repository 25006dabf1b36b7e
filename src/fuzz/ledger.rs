//! The ledger and `latest.json`: roger writes them, but people and other tools edit them, and
//! a torn write or a bad disk garbles them. Every reader of their records must answer with a
//! problem, never a panic (issue 10, item 11 was a byte-sliced hash).

use super::{iters, run, Gen, NUMBERS, WEIRD};
use crate::checkpoints::{self, Checkpoint};
use crate::ledger::{scan_bytes, Entry, Kind, Ledger, Record};
use crate::publish::manifest::Latest;
use chrono::{TimeZone, Utc};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Ledgers with every kind of record the readers look into, written by the real append.
fn seed_ledgers() -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().expect("temp dir");
    let t = |i: i64| Utc.timestamp_opt(1_700_000_000 + i, 0).unwrap();
    let obs = {
        let cfg = super::logs::example_config();
        let mut h = crate::critic::History::new(cfg);
        for s in 0..12u64 {
            h.push(crate::metrics::Record {
                step: s * 10,
                time: Some(1_700_000_000.0 + s as f64),
                values: {
                    let mut v = [None; 11];
                    v[0] = Some(3.0 - s as f64 * 0.01);
                    v[1] = Some(1e-4);
                    v[2] = Some(1.0);
                    v
                },
            });
        }
        crate::critic::observe(&h, cfg, 1_700_000_100.0, None)
    };
    let verdict = crate::critic::judge(&obs);
    let entries = |run: &str| -> Vec<Entry> {
        vec![
            Entry::new(Kind::Watch, "watch", run)
                .field("event", "start")
                .field("pid", 4242)
                .field("pgid", 4242),
            Entry::new(Kind::Publish, "publish", run)
                .step(Some(100))
                .field("path", "/ck/ckpt-100.pt")
                .field("sha256", "ab".repeat(32))
                .field("size", 1130),
            Entry::new(Kind::Verdict, "critic", run)
                .step(Some(150))
                .field("status", verdict.status.as_str())
                .field("checks", &verdict.checks)
                .field("observation", &obs),
            Entry::new(Kind::Publish, "publish", run)
                .step(Some(200))
                .field("path", "/ck/ckpt-200.pt")
                .field("sha256", "cd".repeat(32))
                .field("size", 1130),
            Entry::new(Kind::Prune, "publish", run)
                .step(Some(100))
                .field("path", "/ck/ckpt-100.pt")
                .field("size", 1130)
                .field("reason", "keep_last=1"),
            Entry::new(Kind::Quarantine, "quarantine", run)
                .field("original_path", "/ck/ckpt-200.pt")
                .field("sha256", "cd".repeat(32)),
            Entry::new(Kind::Release, "quarantine", run).field("restored_to", "/ck/ckpt-200.pt"),
            Entry::new(Kind::Kill, "watch", run)
                .step(Some(210))
                .field("reason", "divergence")
                .field("pids", vec![4242, 4243]),
            Entry::new(Kind::Relaunch, "watch", run)
                .field("from", "/ck/ckpt-200.pt")
                .field("child_pid", 5151),
            Entry::new(Kind::Note, "ledger", run).field("message", "lowered LR by hand: é 😀"),
        ]
    };
    let mut out = Vec::new();
    for (i, run) in ["r", "llama-7b"].iter().enumerate() {
        let l = Ledger::new(dir.path().join(format!("l{i}.jsonl")));
        for (j, e) in entries(run).into_iter().enumerate() {
            l.append(e, t(j as i64)).expect("append");
        }
        out.push(std::fs::read(l.path()).expect("read back"));
    }
    out
}

/// Recompute each parseable line's hash (and, sometimes, its chain link and seq) after a
/// mutation, so the edit reaches the chain checks and the record readers behind them.
fn reseal(g: &mut Gen, bytes: &[u8]) -> Vec<u8> {
    let relink = g.chance(2);
    let mut prev = crate::ledger::GENESIS.to_string();
    let mut out = Vec::with_capacity(bytes.len());
    for (n, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        let Ok(Value::Object(mut m)) = serde_json::from_slice::<Value>(body) else {
            out.extend_from_slice(line);
            continue;
        };
        if relink {
            m.insert("prev".into(), prev.clone().into());
            m.insert("seq".into(), (n as u64 + 1).into());
        }
        m.remove("hash");
        let hash = sha_hex(&serde_json::to_string(&m).unwrap());
        m.insert("hash".into(), hash.clone().into());
        prev = hash;
        out.extend(serde_json::to_vec(&m).unwrap());
        if line.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    out
}

fn sha_hex(s: &str) -> String {
    crate::digest::hex(&Sha256::digest(s.as_bytes()))
}

fn ledger_dict() -> Vec<&'static str> {
    let mut d = vec![
        "\"hash\":\"",
        "\"prev\":\"",
        "\"seq\":",
        "\"step\":",
        "\"ts\":\"2026-01-01T00:00:00.000Z\"",
        "\"ts\":\"+275760-09-13T00:00:00.000Z\"",
        "\"kind\":\"publish\"",
        "\"kind\":\"verdict\"",
        "\"kind\":\"prune\"",
        "\"kind\":\"quarantine\"",
        "\"kind\":\"relaunch\"",
        "\"kind\":\"kill\"",
        "\"source\":\"critic\"",
        "\"run\":\"r\"",
        "\"sha256\":\"",
        "\"path\":\"",
        "\"path\":\"/\"",
        "\"path\":\"\"",
        "\"size\":",
        "\"status\":\"fail\"",
        "\"observation\":{}",
        "\"pid\":",
        "\"window\":[]",
        "\0\0\0\0",
        "{\"seq\":",
    ];
    d.extend(NUMBERS);
    d.extend(WEIRD);
    d
}

/// Everything that decides from ledger records, fed whatever the scan let through.
fn read_records(records: &[Record]) {
    for run in ["r", "llama-7b"] {
        // The report's model and its three printers.
        let cfg = crate::config::Config::parse(
            &format!("[run]\nname = \"{run}\"\n[schedule]\nkind = \"cosine\"\npeak_lr = 0.001\ntotal_steps = 1000\n"),
            Path::new("/fuzz/roger.toml"),
        )
        .expect("fuzz config");
        let inputs = crate::report::Inputs {
            config: &cfg,
            records,
            ledger_problem: None,
            disk: None,
            verify: None,
            since: None,
            now: chrono::DateTime::from_timestamp(1_700_000_500, 0).unwrap_or_default(),
        };
        let night = crate::report::Night::gather(&inputs, &[]);
        crate::report::html::page(&night, Some(Path::new("/fuzz")));
        crate::report::text::digest(&night, false);
        checkpoints::published(records, run);
        checkpoints::quarantined(records);
        let mut ok = |_: &Checkpoint| Ok(());
        checkpoints::last_good(records, run, None, &mut ok);
        checkpoints::last_good(records, run, Some(150), &mut ok);
        let policy = crate::config::PublishConfig {
            keep_last: 1,
            keep_every: 100,
            ..Default::default()
        };
        let guard = crate::publish::retention::Guard {
            latest: None,
            rollback_margin: 10,
        };
        crate::publish::retention::plan(records, run, Path::new("/ck"), &policy, &guard, &mut ok);
        crate::sentinel::calibrate::prior_gap(records, run);
        for r in records {
            crate::watch::resume::rollback_trigger(r, run, &["fail".to_string()]);
        }
    }
    let verdicts: Vec<&Record> = records.iter().filter(|r| r.kind == Kind::Verdict).collect();
    crate::hygiene::flap::flap_states(&verdicts, &Default::default());
    crate::critic::replay::replay(records);
    for r in records {
        crate::report::sentence::line(r);
        serde_json::to_string(r).expect("a record serialises");
    }
}

#[test]
fn fuzz_ledger() {
    let seeds = seed_ledgers();
    let dict = ledger_dict();
    let n = run(
        "ledger",
        iters(2_000),
        &mut |g: &mut Gen| {
            let x = g.mutated(&seeds, &dict);
            if g.chance(2) {
                reseal(g, &x)
            } else {
                x
            }
        },
        &|b: &[u8]| {
            let scan = scan_bytes(b);
            scan.first_break();
            serde_json::to_string(&scan.problems).expect("problems serialise");
            read_records(&scan.records);
        },
    );
    assert!(n > 0);
}

/// An append onto whatever the file holds: the foreign-file refusal and the tail read that
/// finds the record to chain to. Files on /dev/shm when there is one (each append fsyncs).
#[test]
fn fuzz_ledger_append() {
    let seeds = seed_ledgers();
    let dict = ledger_dict();
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("temp dir");
    let path = dir.path().join("l.jsonl");
    let n = run(
        "ledger_append",
        iters(1_000),
        &mut |g: &mut Gen| {
            let x = g.mutated(&seeds, &dict);
            if g.chance(2) {
                reseal(g, &x)
            } else {
                x
            }
        },
        &|b: &[u8]| {
            std::fs::write(&path, b).expect("write");
            let l = Ledger::new(&path);
            let now = Utc.timestamp_opt(1_800_000_000, 0).unwrap();
            // Refusing (a foreign file, seq exhausted) is an answer; only a panic is a bug.
            if l.append(Entry::new(Kind::Note, "fuzz", "r"), now).is_ok() {
                read_records(&l.records().expect("read back"));
            }
        },
    );
    assert!(n > 0);
}

#[test]
fn fuzz_latest_json() {
    let good = json!({
        "path": "ckpt-300.pt",
        "sha256": "f2c988d1ccdb8107b9988bc9df145f9bbac87c952c8bad53e1dd24402c7ffdc3",
        "size": 1130,
        "step": 300,
        "published_at": "2026-12-03T08:28:32.875Z"
    });
    let mut dir_ck = good.clone();
    dir_ck["path"] = "run/step-000300".into();
    dir_ck["step"] = Value::Null;
    let seeds: Vec<Vec<u8>> = [good, dir_ck]
        .iter()
        .flat_map(|v| {
            [
                serde_json::to_vec_pretty(v).unwrap(),
                serde_json::to_vec(v).unwrap(),
            ]
        })
        .collect();
    let mut dict = vec![
        "\"path\": \"../../etc/passwd\"",
        "\"path\": \"/abs\"",
        "\"path\": \"\"",
        "\"sha256\": ",
        "\"size\": ",
        "\"step\": ",
        "\"step\": null",
        "\"extra\": {}",
    ];
    dict.extend(NUMBERS);
    dict.extend(WEIRD);
    let n = run(
        "latest_json",
        iters(30_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &|b: &[u8]| {
            let text = String::from_utf8_lossy(b);
            if let Ok(l) = serde_json::from_str::<Latest>(&text) {
                l.target(Path::new("/ck"));
                let mut m = Map::new();
                m.insert("latest".into(), serde_json::to_value(&l).unwrap());
            }
        },
    );
    assert!(n > 0);
}

/// Regression (issue 10, item 11): a record's hash cut to 12 bytes for the mismatch message
/// inside a 2-byte char.
#[test]
fn regress_non_ascii_hash_in_ledger() {
    let line = r#"{"seq":1,"ts":"2026-01-01T00:00:00.000Z","kind":"note","source":"s","run":"r","prev":"0000000000000000000000000000000000000000000000000000000000000000","hash":"abcdefghijkéé"}"#;
    let scan = scan_bytes(format!("{line}\n").as_bytes());
    let p = scan.first_break().expect("a broken record");
    assert!(p.what.contains("stored abcdefghijk,"), "{}", p.what);
}

/// Regression (issue 10, item 11): a publish record's sha256 cut for the "bytes changed"
/// message inside a 2-byte char.
#[test]
fn regress_non_ascii_sha256_in_publish_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ckpt-1.pt");
    std::fs::write(&p, b"weights").unwrap();
    let c = Checkpoint {
        path: p,
        sha256: "abcdefghijkééé".into(),
        size: 7,
        step: Some(1),
        seq: 1,
    };
    let why = checkpoints::verify_on_disk(&c).unwrap_err();
    assert!(why.contains("recorded abcdefghijk size 7"), "{why}");
}

/// Regression (same class as item 11): an item.json edited to a short or non-ASCII sha256
/// made `quarantine release` panic cutting it for the "bytes changed" message.
#[test]
fn regress_short_or_non_ascii_sha256_in_quarantine_item() {
    let dir = tempfile::tempdir().unwrap();
    let held = dir.path().join("q/item/ckpt-1.pt");
    std::fs::create_dir_all(held.parent().unwrap()).unwrap();
    std::fs::write(&held, b"weights").unwrap();
    let ledger = Ledger::new(dir.path().join("l.jsonl"));
    for sha in ["abc", "abcdefghijkééé"] {
        let item: crate::quarantine::Item = serde_json::from_value(json!({
            "id": "item",
            "original_path": dir.path().join("ckpt-1.pt"),
            "quarantined_path": held,
            "reason": "r",
            "sha256": sha,
            "size": 7,
            "added_at": "2026-01-01T00:00:00Z",
            "proofs": [{"at": "2026-01-01T00:00:00Z", "command": ["true"], "exit_code": 0,
                        "passed": true, "duration_s": 0.1, "output_tail": ""}],
        }))
        .unwrap();
        let e = crate::quarantine::release::release(&item, None, "t", &ledger, Utc::now())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("its bytes changed since it was quarantined"),
            "{e}"
        );
    }
}

/// The fuzzer's find: a verdict whose archived observation declares a quiet period `every = 0`
/// (config validation refuses it, an edited ledger need not) made `critic --replay` divide by
/// zero.
#[test]
fn regress_replayed_observation_with_quiet_every_zero() {
    let input: &[u8] = b"{\"\":[{\"\":{\"\":0},\"\":\"\",\"\":\"\"},{\"\":\"\",\"\":\"\",\"\":{\"\":0},\"\":\"\",\"\":{\"\":0},\"\":\"\",\"\":\"\"},{\"\":\"\",\"\":{\"\":[],\"\":0,\"\":3},\"\":{\"\":9,\"\":0},\"\":\"\",\"\":\"\"}],\"hash\":\"\",\"kind\":\"verdict\",\"observation\":{\"advanced_at\":0,\"config_hash\":\"\",\"evals\":[],\"garbage_total\":0,\"\":null,\"\":0,\"now\":1,\"phase\":{\"from\":0,\"\":8,\"\":[],\"\":null,\"\":null,\"name\":\"\",\"stale_s\":3,\"\":0,\"\":0,\"window\":0},\"quiet\":[{\"duration_s\":0,\"every\":0,\"name\":\"\"}],\"samples_total\":2,\"\":{\"\":\"\",\"\":null,\"\":\"\",\"\":0,\"\":0.6,\"\":2,\"\":0.2,\"\":2,\"\":0},\"settings\":{\"band_samples\":5,\"eval_window\":3,\"grad_nonfinite_consecutive\":3,\"min_samples\":5},\"step\":1,\"window\":[{\"step\":0,\"values\":{\"\":0,\"\":1}},{\"step\":0,\"values\":{\"\":0.1}},{\"step\":0,\"values\":{\"o\":0.01}},{\"step\":30,\"values\":{\"\":1.01}},{\"step\":40,\"values\":{\"g\":1}},{\"step\":60,\"values\":{\"\":94,\"\":1}},{\"step\":70,\"values\":{\"\":1.01}},{\"step\":80,\"values\":{\"gd\":1}},{\"step\":90,\"values\":{\"gm\":1,\"\":1}},{\"step\":0,\"values\":{\"nr\":0}},{\"step\":1,\"values\":{\"\":1.01}}]},\"prev\":\"50\",\"run\":\"r\",\"seq\":3,\"source\":\"critic\",\"s\":\"\",\"sp\":1,\"ts\":\"2023-11-14T22:13:22.000Z\"}\n";
    let scan = scan_bytes(input);
    assert_eq!(scan.records.len(), 1);
    let replayed = crate::critic::replay::replay(&scan.records);
    assert!(replayed[0].recomputed.is_some(), "{:?}", replayed[0]);
}
