//! The training's metrics logs, written by someone else's code: JSONL, CSV, text patterns, HF
//! trainer_state.json, TensorBoard event files, MLflow metric files, the number and time
//! readers under them and the incremental tail; each then judged by the critic.

use super::{iters, line_seeds, repo_file, run, scratch, Gen};
use roger::metrics::{tb_event, tfrecord};
use roger::untrusted as u;
use std::path::Path;

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
fn jsonl() {
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
    super::seeds_read("jsonl", &seeds, u::jsonl);
    let dict = jsonl_dict();
    run(
        "jsonl",
        iters(1_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &u::jsonl,
    );
}

#[test]
fn csv() {
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
    super::seeds_read("csv", &seeds, u::csv);
    let mut dict: Vec<&str> = vec![",", "\"", "\"\"", ",,,,", "\r\n", "step,loss\n"];
    dict.extend(METRIC_KEYS);
    run(
        "csv",
        iters(1_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &u::csv,
    );
}

#[test]
fn text_patterns() {
    let mut seeds = line_seeds(&repo_file("tests/fixtures/nanogpt_train.log"), 3);
    seeds.push(b"step 10 loss 2.5 lr 1e-4 time 2024-05-01T00:00:00Z\n".to_vec());
    seeds.push(b"{'loss': 2.31, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 3}\n".to_vec());
    super::seeds_read("text", &seeds, u::text);
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
    run(
        "text",
        iters(500),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &u::text,
    );
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
fn hf_trainer_state() {
    let (full, seeds) = hf_seeds();
    super::seeds_read("hf_trainer_state", &seeds, u::hf_trainer_state);
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
    run(
        "hf_trainer_state",
        iters(1_000),
        &mut |g: &mut Gen| {
            if g.chance(200) {
                let mut x = full.clone();
                g.mutate(&mut x, &dict, &seeds);
                x
            } else {
                g.mutated(&seeds, &dict)
            }
        },
        &u::hf_trainer_state,
    );
}

#[test]
fn numbers_and_times() {
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
    run(
        "numbers_and_times",
        iters(5_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &u::numbers_and_times,
    );
}

/// The incremental reader over a file that grows, is truncated, replaced and rotated with
/// mutated content between polls.
#[test]
fn tail() {
    let dir = scratch();
    let seeds = line_seeds(&repo_file("examples/train_log.jsonl"), 5);
    let dict = jsonl_dict();
    run(
        "tail",
        iters(30),
        &mut |g: &mut Gen| {
            let mut script = Vec::new();
            for _ in 0..g.rng.usize(1..8) {
                script.push(u::TAIL_STEP);
                script.push(g.rng.u8(..4));
                let chunk = g.mutated(&seeds, &dict);
                script.extend(chunk.iter().filter(|&&b| b != u::TAIL_STEP));
            }
            script
        },
        &|b: &[u8]| u::log_tail(dir.path(), b),
    );
}

/// Every committed event file (real writers), plus a few framed by hand.
pub fn event_seeds() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tensorboard");
    let mut seeds = Vec::new();
    for dir in std::fs::read_dir(&root).expect("tensorboard fixtures") {
        let dir = dir.expect("entry").path();
        if dir.is_dir() {
            for f in std::fs::read_dir(&dir).expect("fixture dir") {
                let f = f.expect("entry").path();
                let name = f.file_name().unwrap().to_string_lossy().into_owned();
                if name.contains("tfevents") {
                    seeds.push(std::fs::read(&f).expect("read an event file"));
                }
            }
        }
    }
    assert!(!seeds.is_empty(), "no event files under {}", root.display());
    let mut hand = Vec::new();
    for (step, loss) in [(0, f32::NAN), (1, f32::INFINITY), (2, -0.0), (3, 1e30)] {
        let payload = tb_event::encode_scalars(1.7e9 + step as f64, step, &[("train/loss", loss)]);
        tfrecord::frame(&payload, &mut hand);
    }
    seeds.push(hand);
    seeds
}

#[test]
fn tensorboard_events() {
    let seeds = event_seeds();
    let dict = [
        "\u{0}\u{0}\u{0}\u{0}",
        "\u{ff}\u{ff}\u{ff}\u{ff}\u{ff}\u{ff}\u{ff}\u{7f}",
        "train/loss",
        "lr-AdamW",
        "\u{8}",
        "\u{10}",
        "\u{1a}",
        "\u{12}",
    ];
    let dir = scratch();
    super::seeds_read("tensorboard", &seeds, |b| u::tensorboard(dir.path(), b));
    run(
        "tensorboard_events",
        iters(200),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &|b: &[u8]| u::tensorboard(dir.path(), b),
    );
}

pub fn mlflow_seeds() -> Vec<Vec<u8>> {
    let run_dir = "tests/fixtures/mlflow/run/metrics";
    vec![
        repo_file(&format!("{run_dir}/lr")),
        repo_file(&format!("{run_dir}/train/loss")),
        b"1700000000000 NaN 0\n1700000001000 Infinity 1\n1700000002000 -inf\n".to_vec(),
    ]
}

#[test]
fn mlflow_metric_files() {
    let seeds = mlflow_seeds();
    let dict = [
        " ",
        "\n",
        "NaN",
        "-Infinity",
        "1e308",
        "-1",
        "18446744073709551616",
    ];
    let dir = scratch();
    super::seeds_read("mlflow", &seeds, |b| u::mlflow(dir.path(), b));
    run(
        "mlflow_metric_files",
        iters(200),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &|b: &[u8]| u::mlflow(dir.path(), b),
    );
}
