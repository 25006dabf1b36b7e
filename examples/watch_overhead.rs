//! Benchmark: what `roger watch` itself costs. Starts the (release) roger watching
//! `fake_train` with `[watch] interval = "1s"`, and every second reads roger's own
//! /proc/PID/stat (utime + stime, not its children's), /proc/PID/schedstat (CPU ns) and
//! /proc/PID/status (VmRSS, VmHWM).
//! Prints CPU % of one core and RSS over the window.
//!
//! ```sh
//! cargo build --release --bin roger --example fake_train --example watch_overhead
//! target/release/examples/watch_overhead [--seconds 60]
//! ```

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn stat_cpu_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = s[s.rfind(')')? + 1..].split_whitespace().collect();
    // Fields 14 and 15 (utime, stime); rest[0] is field 3.
    Some(rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?)
}

/// Nanoseconds on CPU (all threads), from /proc/PID/schedstat: finer than clock ticks.
fn schedstat_ns(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn main() {
    let mut seconds = 60u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--seconds" {
            seconds = args.next().and_then(|v| v.parse().ok()).unwrap_or(60);
        }
    }
    let me = std::env::current_exe().expect("current exe");
    let examples = me.parent().expect("examples dir").to_path_buf();
    let roger: PathBuf = examples.parent().expect("profile dir").join("roger");
    let fake = examples.join("fake_train");
    for p in [&roger, &fake] {
        assert!(
            p.exists(),
            "{} missing: build it with --release first",
            p.display()
        );
    }
    let dir = std::env::temp_dir().join(format!("roger-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("roger.toml"),
        "[run]\nname = \"overhead\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ckpt\"\n\
         [gpu]\nsource = \"none\"\n[watch]\ninterval = \"1s\"\nstale = \"30s\"\n",
    )
    .unwrap();
    let ticks = 100.0; // USER_HZ on Linux
    let mut child = Command::new(&roger)
        .current_dir(&dir)
        .env("ROGER_BIN", &roger)
        .env("RUST_LOG", "roger=warn")
        .args(["--config", "roger.toml", "watch", "--"])
        .arg(&fake)
        .args([
            "--log",
            "train.jsonl",
            "--ckpt-dir",
            "ckpt",
            "--steps",
            "100000000",
        ])
        .args(["--step-ms", "100", "--save-every", "100"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting roger watch");
    let pid = child.id();
    std::thread::sleep(Duration::from_secs(3)); // past start-up
    let t0 = Instant::now();
    let c0 = stat_cpu_ticks(pid).expect("roger stat");
    let ns0 = schedstat_ns(pid);
    let mut rss = Vec::new();
    let mut per_second = Vec::new();
    let mut last = c0;
    for _ in 0..seconds {
        std::thread::sleep(Duration::from_secs(1));
        let c = stat_cpu_ticks(pid).expect("roger still running");
        per_second.push((c - last) as f64 / ticks * 100.0);
        last = c;
        rss.push(status_kib(pid, "VmRSS:").unwrap_or(0));
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu_pct = (last - c0) as f64 / ticks / wall * 100.0;
    let ns_pct = schedstat_ns(pid)
        .zip(ns0)
        .map(|(b, a)| (b - a) as f64 / 1e9 / wall * 100.0);
    let hwm = status_kib(pid, "VmHWM:").unwrap_or(0);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let mean_rss = rss.iter().sum::<u64>() as f64 / rss.len().max(1) as f64;
    let max_sec = per_second.iter().cloned().fold(0.0, f64::max);
    println!("roger watch overhead over {wall:.1}s, sampling every 1s (fake_train stepping every 100 ms):");
    println!(
        "  CPU: {cpu_pct:.3}% of one core on average ({} ticks of 10 ms; busiest second {max_sec:.1}%)",
        last - c0
    );
    if let Some(p) = ns_pct {
        println!("  CPU (schedstat, ns resolution): {p:.3}% of one core");
    }
    println!(
        "  RSS: mean {:.1} MiB, max {:.1} MiB, peak (VmHWM) {:.1} MiB",
        mean_rss / 1024.0,
        *rss.iter().max().unwrap_or(&0) as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
}
