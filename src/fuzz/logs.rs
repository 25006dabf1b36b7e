//! The four log formats (JSONL, CSV, text patterns, HF trainer_state.json), the number and
//! time readers under them, the line splitter, the incremental tail, and the critic that
//! judges whatever they produce: a training log is written by someone else's code.

use super::{iters, line_seeds, repo_file, run, Gen};
use crate::config::{Config, MetricsConfig, TextPattern};
use crate::critic::observe::{observe, History};
use crate::metrics::lines::{feed, one_line};
use crate::metrics::{csv::CsvParser, jsonl::JsonlParser, text::TextParser};
use crate::metrics::{hf_state, num, Batch, LineParser, Record};
use std::path::Path;
use std::sync::OnceLock;

/// A config with every check on, so parsed samples reach every critic check.
pub(super) fn example_config() -> &'static Config {
    static CFG: OnceLock<Config> = OnceLock::new();
    CFG.get_or_init(|| {
        let text = String::from_utf8(repo_file("roger.example.toml")).expect("UTF-8");
        Config::parse(&text, Path::new("/fuzz/roger.toml")).expect("the example config parses")
    })
}

/// What the watch does with parsed samples: keep a history and judge it.
pub(super) fn judge_all(records: &[Record]) {
    let cfg = example_config();
    let mut h = History::new(cfg);
    for r in records {
        h.push(*r);
    }
    let now = records.iter().filter_map(|r| r.time).fold(0.0, f64::max);
    let obs = observe(&h, cfg, now + 1.0, None);
    let v = crate::critic::judge(&obs);
    let _ = serde_json::to_string(&v);
}

/// A whole buffer through a line parser as the readers do: complete lines, then the
/// unterminated rest as a final line.
fn lines(parser: &mut dyn LineParser, data: &[u8]) -> Batch {
    let path = Path::new("/fuzz/train.log");
    let mut out = Batch::default();
    let mut line_no = 0;
    let used = feed(parser, data, &mut line_no, path, &mut out);
    if used < data.len() {
        one_line(parser, &data[used..], line_no + 1, path, &mut out);
    }
    out
}

const METRIC_KEYS: &[&str] = &[
    "step",
    "loss",
    "lr",
    "grad_norm",
    "tokens_per_s",
    "vram_gib",
    "eval_loss",
    "time",
    "learning_rate",
    "train/loss",
    "epoch",
];

fn jsonl_dict() -> Vec<&'static str> {
    let mut d: Vec<&str> = vec![
        "\"step\": ",
        "\"loss\": ",
        "\"lr\":",
        "\"time\": \"2024-05-01T00:00:00Z\"",
        "\"time\": \"2024-13-45T99:99:99+99:99\"",
        "{\"train\": {\"loss\": 1}}",
        "\"eval_loss\": null",
        "true",
        "null",
        "[]",
        "{}",
        "\"\\u00e9\"",
        "\"\\ud800\"",
        "\"\\u0000\"",
        "\\",
        "{",
        "}",
        ":",
        ",",
    ];
    d.extend(METRIC_KEYS);
    d
}

#[test]
fn fuzz_jsonl() {
    let mut seeds = line_seeds(&repo_file("examples/train_log.jsonl"), 3);
    seeds.truncate(40);
    seeds.extend(line_seeds(
        &repo_file("tests/fixtures/resumed_lr_restart.jsonl"),
        4,
    ));
    seeds.push(b"{\"step\": 1, \"train\": {\"loss\": 2.5, \"lr\": 1e-4}, \"time\": \"2024-05-01T00:00:00.5Z\"}\n".to_vec());
    seeds.push(
        b"{\"step\":\"7\",\"loss\":\"NaN\",\"grad_norm\":\"inf\",\"eval_loss\":null}\n".to_vec(),
    );
    let dict = jsonl_dict();
    let nested = MetricsConfig {
        loss: "train/loss".into(),
        lr: "train.lr".into(),
        ..MetricsConfig::default()
    };
    let n = run(
        "jsonl",
        iters(10_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &|b: &[u8]| {
            let out = lines(&mut JsonlParser::new(&MetricsConfig::default()), b);
            judge_all(&out.records);
            lines(&mut JsonlParser::new(&nested), b);
        },
    );
    assert!(n > 0);
}

#[test]
fn fuzz_csv() {
    let text = repo_file("tests/fixtures/lightning_metrics.csv");
    let header_end = text.iter().position(|&b| b == b'\n').unwrap() + 1;
    let (header, rows) = text.split_at(header_end);
    let mut seeds: Vec<Vec<u8>> = line_seeds(rows, 4)
        .into_iter()
        .map(|r| [header, &r[..]].concat())
        .collect();
    seeds.push(
        b"step,loss,\"lr\",\"a,b\",time\n1,2.5,\"1e-4\",\"x\"\"y\",2024-05-01T00:00:00Z\n".to_vec(),
    );
    seeds.push(b"\"step\",\"loss\"\r\n\"1\",\"NaN\"\r\n2,inf\r\n".to_vec());
    let mut dict: Vec<&str> = vec![",", "\"", "\"\"", ",,,,", "\r\n", "step,loss\n"];
    dict.extend(METRIC_KEYS);
    let lightning = MetricsConfig {
        loss: "train_loss".into(),
        lr: "lr-AdamW".into(),
        eval_loss: "val_loss".into(),
        ..MetricsConfig::default()
    };
    let n = run(
        "csv",
        iters(10_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &|b: &[u8]| {
            let out = lines(&mut CsvParser::new(&lightning), b);
            judge_all(&out.records);
            lines(&mut CsvParser::new(&MetricsConfig::default()), b);
        },
    );
    assert!(n > 0);
}

#[test]
fn fuzz_text_patterns() {
    let nanogpt = MetricsConfig {
        patterns: vec![
            TextPattern {
                regex: r"iter (\d+): loss ([^,]+),".into(),
                fields: vec!["step".into(), "loss".into()],
            },
            TextPattern {
                regex: r"step (?P<step>\S+) .*?lr (?P<lr>\S+)(?: time (?P<time>\S+))?".into(),
                fields: vec![],
            },
            TextPattern {
                regex: r"\{'loss': (?P<loss>[^,]+), .*'epoch': (?P<step>[^}]+)\}".into(),
                fields: vec![],
            },
        ],
        ..MetricsConfig::default()
    };
    let parser = TextParser::new(&nanogpt).expect("patterns compile");
    let mut seeds = line_seeds(&repo_file("tests/fixtures/nanogpt_train.log"), 3);
    seeds.push(b"step 10 loss 2.5 lr 1e-4 time 2024-05-01T00:00:00Z\n".to_vec());
    seeds
        .push(b"{'loss': 2.31, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.5}\n".to_vec());
    let dict = [
        "iter ",
        ": loss ",
        ", time ",
        "step ",
        " lr ",
        " time ",
        "'epoch': ",
        "\x1b[0m",
        "\r",
        "%|",
    ];
    let n = run(
        "text",
        iters(5_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &|b: &[u8]| {
            let out = lines(&mut parser.clone(), b);
            judge_all(&out.records);
        },
    );
    assert!(n > 0);
}

/// Small trainer_state.json documents cut from the real one (the whole file is a seed too,
/// picked rarely: it is 26 KB and parsing it dominates).
fn hf_seeds() -> (Vec<u8>, Vec<Vec<u8>>) {
    let full = repo_file("tests/fixtures/hf_whisper_trainer_state.json");
    let doc: serde_json::Value = serde_json::from_slice(&full).expect("fixture parses");
    let history = doc["log_history"].as_array().expect("log_history").clone();
    let mut seeds = Vec::new();
    for chunk in history.chunks(4).take(12) {
        let mut d = doc.clone();
        d["log_history"] = serde_json::Value::Array(chunk.to_vec());
        seeds.push(serde_json::to_vec_pretty(&d).unwrap());
    }
    seeds.push(
        br#"{"log_history": [{"loss": NaN, "step": 1}, {"loss": Infinity, "grad_norm": -Infinity, "step": 2}, {"eval_loss": "NaN", "step": 2}]}"#
            .to_vec(),
    );
    (full, seeds)
}

#[test]
fn fuzz_hf_trainer_state() {
    let (full, seeds) = hf_seeds();
    let dict = [
        "NaN",
        "Infinity",
        "-Infinity",
        "\"NaN\"",
        "\"log_history\": ",
        "\"step\": ",
        "\"loss\": ",
        "\"learning_rate\": ",
        "\"eval_loss\": ",
        "\"grad_norm\": ",
        "\"epoch\": ",
        "\"total_flos\": ",
        "\"",
        "\\\"",
        "{",
        "}",
        "[",
        "]",
    ];
    let mapped = MetricsConfig {
        lr: "learning_rate".into(),
        ..MetricsConfig::default()
    };
    let n = run(
        "hf_trainer_state",
        iters(10_000),
        &mut |g: &mut Gen| {
            if g.chance(200) {
                let mut x = full.clone();
                g.mutate(&mut x, &dict, &seeds);
                x
            } else {
                g.mutated(&seeds, &dict)
            }
        },
        &|b: &[u8]| {
            let p = Path::new("/fuzz/trainer_state.json");
            let out = hf_state::parse(b, p, &MetricsConfig::default());
            judge_all(&out.records);
            hf_state::parse(b, p, &mapped);
        },
    );
    assert!(n > 0);
}

#[test]
fn fuzz_numbers_and_times() {
    let seeds: Vec<Vec<u8>> = [
        "2.5",
        "-1.25e-3",
        "1714521600.0",
        "2024-05-01T00:00:00Z",
        "2024-05-01 00:00:00.123+02:00",
        "1,234.5",
        "  42  ",
        "\x1b[1miter 0: loss 10.8000\x1b[0m",
        "12%|#2 | 0/400\r13%|#3 | 0/400",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let dict = ["e", "E", "+", "-", ".", "T", "Z", ":", "\x1b[", "\r", "%"];
    let n = run(
        "numbers_and_times",
        iters(50_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &|b: &[u8]| {
            num::parse_num(b);
            num::decimal_prefix(b);
            num::parse_time(b);
            num::clean_line(b);
        },
    );
    assert!(n > 0);
}

/// The incremental reader over a file that grows, is truncated, replaced and rotated with
/// fuzzed content between polls.
#[test]
fn fuzz_tail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("train.jsonl");
    let seeds = line_seeds(&repo_file("examples/train_log.jsonl"), 5);
    let dict = jsonl_dict();
    let n = run(
        "tail",
        iters(300),
        // The input is a script: chunks separated by 0x01 bytes; each chunk's first byte
        // picks append / truncate-and-write / rotate / partial write.
        &mut |g: &mut Gen| {
            let mut script = Vec::new();
            for _ in 0..g.rng.usize(1..8) {
                script.push(1);
                script.push(g.rng.u8(..4));
                let chunk = g.mutated(&seeds, &dict);
                script.extend(chunk.iter().filter(|&&b| b != 1));
            }
            script
        },
        &|script: &[u8]| {
            use std::io::Write;
            let _ = std::fs::remove_file(&path);
            let mut tail = crate::metrics::tail::Tail::new(
                &path,
                crate::config::LogFormat::Jsonl,
                &MetricsConfig::default(),
            )
            .expect("tail");
            for step in script.split(|&b| b == 1).filter(|s| !s.is_empty()) {
                let (op, data) = (step[0], &step[1..]);
                match op {
                    0 => {
                        let mut f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&path)
                            .unwrap();
                        f.write_all(data).unwrap();
                    }
                    1 => std::fs::write(&path, data).unwrap(),
                    2 => {
                        let _ = std::fs::rename(&path, path.with_extension("1"));
                        std::fs::write(&path, data).unwrap();
                    }
                    _ => {
                        let mut f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&path)
                            .unwrap();
                        f.write_all(&data[..data.len() / 2]).unwrap();
                    }
                }
                // An error (a vanished file) is an answer; only a panic is a bug.
                if let Ok(poll) = tail.poll() {
                    judge_all(&poll.batch.records);
                }
            }
        },
    );
    assert!(n > 0);
}
