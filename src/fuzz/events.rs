//! TensorBoard event files and MLflow metric files: binary framing, protobuf and
//! `timestamp value step` lines written by someone else's code, read through the real tail
//! (from a file, as the critic and the watch read them) and judged.

use super::logs::judge_all;
use super::{iters, repo_file, run, Gen};
use crate::config::{LogFormat, MetricsConfig};
use crate::metrics::tail::Tail;
use crate::metrics::{tb_event, tfrecord};
use std::path::Path;

fn metrics() -> MetricsConfig {
    MetricsConfig {
        loss: "train/loss".into(),
        lr: "lr-AdamW".into(),
        grad_norm: "train/grad_norm".into(),
        ..Default::default()
    }
}

/// Every committed event file (real writers), plus a few framed by hand.
fn event_seeds() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tensorboard");
    let mut seeds = Vec::new();
    for dir in std::fs::read_dir(&root).expect("tensorboard fixtures") {
        let dir = dir.expect("entry").path();
        if dir.is_dir() {
            for f in crate::metrics::tensorboard::event_files(&dir) {
                let rel = f
                    .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                    .expect("in the repo");
                seeds.push(repo_file(&rel.to_string_lossy()));
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
fn fuzz_tensorboard_events() {
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
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("events.out.tfevents.1.fuzz");
    let n = run(
        "tensorboard_events",
        iters(2_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &|b: &[u8]| {
            // The pure layers, on the bytes as they are…
            let (items, used) = tfrecord::scan(b);
            assert!(used <= b.len());
            for item in items {
                if let tfrecord::Item::Record(_, payload) = item {
                    if let Ok(ev) = tb_event::decode(payload) {
                        tb_event::scalars(&ev).for_each(drop);
                    }
                }
            }
            // …and the real tail over a file: whole, then grown by its own bytes (a torn
            // record completed by the next write), then truncated.
            std::fs::write(&file, b).expect("write");
            let mut tail = Tail::new(&file, LogFormat::Tensorboard, &metrics()).expect("tail");
            let mut records = Vec::new();
            if let Ok(p) = tail.poll() {
                records.extend(p.batch.records);
            }
            let grown = [b, b].concat();
            std::fs::write(&file, &grown).expect("write");
            if let Ok(p) = tail.poll() {
                records.extend(p.batch.records);
            }
            std::fs::write(&file, &b[..b.len() / 2]).expect("write");
            let _ = tail.poll();
            judge_all(&records);
        },
    );
    assert!(n > 0);
}

#[test]
fn fuzz_mlflow_metric_files() {
    let run_dir = "tests/fixtures/mlflow/run/metrics";
    let seeds = vec![
        repo_file(&format!("{run_dir}/lr")),
        repo_file(&format!("{run_dir}/train/loss")),
        b"1700000000000 NaN 0\n1700000001000 Infinity 1\n1700000002000 -inf\n".to_vec(),
    ];
    let dict = [
        " ",
        "\n",
        "NaN",
        "-Infinity",
        "1e308",
        "-1",
        "18446744073709551616",
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("metrics/train")).expect("mkdir");
    let n = run(
        "mlflow_metric_files",
        iters(2_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &dict),
        &|b: &[u8]| {
            let half = b.len() / 2;
            std::fs::write(dir.path().join("metrics/train/loss"), &b[..half]).expect("write");
            std::fs::write(dir.path().join("metrics/lr-AdamW"), b).expect("write");
            let mut tail = Tail::new(dir.path(), LogFormat::Mlflow, &metrics()).expect("tail");
            let mut records = Vec::new();
            if let Ok(p) = tail.poll() {
                records.extend(p.batch.records);
            }
            // The rest of the line arrives; then the file is rewritten shorter.
            std::fs::write(dir.path().join("metrics/train/loss"), b).expect("write");
            if let Ok(p) = tail.poll() {
                records.extend(p.batch.records);
            }
            std::fs::write(dir.path().join("metrics/lr-AdamW"), &b[..half]).expect("write");
            let _ = tail.poll();
            judge_all(&records);
        },
    );
    assert!(n > 0);
}
