//! Benchmark of TensorBoard ingestion, for README numbers: an event file of 1 M scalars
//! (250 000 steps × 4 tags, one event per scalar as `SummaryWriter.add_scalar` writes them)
//! read by roger (`metrics::read_all`, format = "tensorboard") and by TensorBoard's own
//! `EventAccumulator` (pip `tensorboard`, size_guidance 0 = keep every scalar) on the same
//! file, best of 3 each; EventAccumulator's time is its `Reload()` alone (no interpreter
//! start-up or imports).
//!
//!     cargo run --release --example bench_tensorboard [-- --steps 250000 --dir /tmp]

use roger::config::{LogFormat, MetricsConfig};
use roger::metrics::{tb_event, tfrecord};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const TAGS: [&str; 4] = ["train/loss", "train/lr", "train/grad_norm", "train/epoch"];

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

const PY: &str = r#"
import sys, time
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
best = None
for _ in range(3):
    t0 = time.perf_counter()
    ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
    ea.Reload()
    dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
n = sum(len(ea.Scalars(t)) for t in ea.Tags()["scalars"])
print(best, n)
"#;

fn main() {
    let steps: u64 = arg("--steps").map_or(250_000, |s| s.parse().expect("--steps N"));
    let dir = PathBuf::from(arg("--dir").unwrap_or_else(|| "/tmp".into()))
        .join(format!("roger-bench-tb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    let file = dir.join("events.out.tfevents.1700000000.bench");
    let mut out = Vec::new();
    let first = tb_event::Event {
        wall_time: 1.7e9,
        step: 0,
        file_version: Some("brain.Event:2".into()),
        summary: None,
    };
    tfrecord::frame(&prost::Message::encode_to_vec(&first), &mut out);
    for step in 0..steps {
        let t = 1.7e9 + step as f64 * 0.1;
        let loss = 2.5 + 8.0 * (-(step as f64) / 5000.0).exp();
        let values = [loss as f32, 3e-4, 0.5, step as f32 / 1000.0];
        for (tag, v) in TAGS.iter().zip(values) {
            tfrecord::frame(
                &tb_event::encode_scalars(t, step as i64, &[(tag, v)]),
                &mut out,
            );
        }
    }
    std::fs::File::create(&file)
        .and_then(|mut f| f.write_all(&out))
        .expect("write events");
    let scalars = steps * TAGS.len() as u64;
    println!(
        "event file: {scalars} scalars, {:.1} MiB, {}",
        out.len() as f64 / 1048576.0,
        file.display()
    );
    let metrics = MetricsConfig {
        loss: "train/loss".into(),
        lr: "train/lr".into(),
        grad_norm: "train/grad_norm".into(),
        ..Default::default()
    };
    let mut best = Duration::MAX;
    let mut records = 0;
    for _ in 0..3 {
        let t0 = Instant::now();
        let read = roger::metrics::read_all(&dir, LogFormat::Tensorboard, &metrics).expect("read");
        best = best.min(t0.elapsed());
        records = read.samples.len();
    }
    assert_eq!(records as u64, steps, "one sample per step");
    println!(
        "roger read_all:                 {:>8.1} ms  ({:.1} M scalars/s)",
        best.as_secs_f64() * 1e3,
        scalars as f64 / best.as_secs_f64() / 1e6
    );
    let py = Command::new("python3").args(["-c", PY]).arg(&dir).output();
    match py {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let mut parts = text.split_whitespace();
            let secs: f64 = parts.next().and_then(|s| s.parse().ok()).expect("seconds");
            let n: u64 = parts.next().and_then(|s| s.parse().ok()).expect("count");
            assert_eq!(n, scalars, "EventAccumulator read every scalar");
            println!(
                "EventAccumulator.Reload():      {:>8.1} ms  ({:.2} M scalars/s)",
                secs * 1e3,
                scalars as f64 / secs / 1e6
            );
            println!("roger is {:.1}x faster", secs / best.as_secs_f64());
        }
        other => println!("EventAccumulator skipped (pip install tensorboard): {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
