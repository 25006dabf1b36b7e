//! Benchmark of "read only what a verdict needs", for README numbers: the real `roger
//! critic --once` on a generated JSONL log (default 1 GiB, from page cache) — the first call
//! (no summary cache: judged from a stretch at the end), a repeated call on the unchanged
//! log (the summary cache), a call after 1000 lines were appended, and `--full-read` — side by
//! side with `wc -l` and `tail -n 1000` on the same file, best of 3 each; then `tail -n 1000`
//! and the repeated call alternating (`--pairs`, default 51), medians.
//!
//!     cargo build --release --bin roger --example bench_read_less
//!     target/release/examples/bench_read_less [--size-mib 1024] [--dir /tmp] [--pairs 51]
//!
//! Wall-clock numbers on a shared machine depend on its load; the CPU time of each command
//! (user + system, all threads) is printed beside them.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = "[run]\nname = \"bench\"\nlog = \"train.jsonl\"\n\
[[phase]]\nname = \"all\"\nfrom = 0\nloss = [0.5, 12.0]\nloss_spike = 3.0\ngrad_norm_max = 10.0\n\
stale = \"1h\"\nwindow = 50\n";

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn line(step: u64) -> String {
    let loss = 2.5 + 8.0 * (-(step as f64) / 5000.0).exp();
    format!(
        "{{\"step\": {step}, \"loss\": {loss:.5}, \"lr\": 3.0e-4, \"grad_norm\": {:.4}, \
\"tokens_per_s\": 52000.0, \"vram_gib\": 38.21, \"time\": {:.3}, \"note\": \"padding to a realistic line length\"}}\n",
        0.4 + (step % 7) as f64 * 0.01,
        1.7e9 + step as f64 * 0.3
    )
}

fn generate(path: &Path, bytes: u64) -> std::io::Result<u64> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let (mut written, mut step) = (0u64, 0u64);
    while written < bytes {
        let l = line(step);
        w.write_all(l.as_bytes())?;
        written += l.len() as u64;
        step += 1;
    }
    w.flush()?;
    Ok(step)
}

fn children_cpu() -> f64 {
    // SAFETY: rusage is plain integers: all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we hand it.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// Best wall time of `n` runs of `cmd` (with `before` run untimed first), and its CPU time.
fn best_of(
    n: usize,
    mut before: impl FnMut(),
    mut cmd: impl FnMut() -> Command,
) -> (Duration, f64) {
    let mut best = (Duration::MAX, 0.0);
    for _ in 0..n {
        before();
        let c0 = children_cpu();
        let t0 = Instant::now();
        let st = cmd()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("spawn");
        let wall = t0.elapsed();
        let cpu = children_cpu() - c0;
        assert!(st.code().is_some_and(|c| c <= 3), "{st:?}");
        if wall < best.0 {
            best = (wall, cpu);
        }
    }
    best
}

fn main() {
    let mib: u64 = arg("--size-mib").map_or(1024, |s| s.parse().expect("--size-mib N"));
    let dir = PathBuf::from(arg("--dir").unwrap_or_else(|| "/tmp".into()))
        .join(format!("roger-bench-read-less-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    let roger = std::env::current_exe()
        .expect("exe")
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .join("roger");
    assert!(
        roger.exists(),
        "build it first: cargo build --release --bin roger"
    );
    let log = dir.join("train.jsonl");
    let steps = generate(&log, mib << 20).expect("generate");
    std::fs::write(dir.join("roger.toml"), CONFIG).expect("config");
    let size = std::fs::metadata(&log).expect("log").len();
    // Warm the page cache, as a monitor calling every few minutes finds it.
    let _ = Command::new("cat").arg(&log).stdout(Stdio::null()).status();
    println!(
        "log: {:.0} MiB, {steps} lines, {} (page cache warm)\n",
        size as f64 / 1048576.0,
        log.display()
    );
    let cache = dir.join("roger-ledger.jsonl.critic-cache");
    let once = |extra: &'static [&'static str]| {
        let (roger, dir) = (roger.clone(), dir.clone());
        move || {
            let mut c = Command::new(&roger);
            c.current_dir(&dir)
                .args(["critic", "--once", "--now", "2023-11-14T22:15:00Z"])
                .args(extra);
            c
        }
    };
    let rm_cache = || {
        let _ = std::fs::remove_file(&cache);
    };
    let wc = best_of(
        3,
        || {},
        || {
            let mut c = Command::new("wc");
            c.arg("-l").arg(&log);
            c
        },
    );
    let tail = best_of(
        3,
        || {},
        || {
            let mut c = Command::new("tail");
            c.args(["-n", "1000"]).arg(&log);
            c
        },
    );
    let first = best_of(3, rm_cache, once(&[]));
    let repeated = best_of(3, || {}, once(&[]));
    let mut next = steps;
    let appended = best_of(
        3,
        || {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&log)
                .expect("log");
            for _ in 0..1000 {
                f.write_all(line(next).as_bytes()).expect("append");
                next += 1;
            }
        },
        once(&[]),
    );
    // The comparison, fairly on a busy machine: tail and the repeated check alternating,
    // many times; the median of each and of the per-pair ratio.
    let pairs: usize = arg("--pairs").map_or(51, |s| s.parse().expect("--pairs N"));
    let mut walls = (Vec::new(), Vec::new(), Vec::new());
    let repeat = once(&[]);
    for _ in 0..pairs {
        let t = best_of(
            1,
            || {},
            || {
                let mut c = Command::new("tail");
                c.args(["-n", "1000"]).arg(&log);
                c
            },
        );
        let r = best_of(1, || {}, &repeat);
        walls.0.push(t.0.as_secs_f64());
        walls.1.push(r.0.as_secs_f64());
        walls.2.push(r.0.as_secs_f64() / t.0.as_secs_f64());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let full = best_of(3, || {}, once(&["--full-read"]));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let row = |name: &str, (wall, cpu): (Duration, f64)| {
        println!(
            "{name:<44} {:>9.1} ms  cpu {:>8.1} ms   {:>7.2}x wc -l   {:>7.2}x tail -n 1000",
            ms(wall),
            cpu * 1e3,
            ms(wall) / ms(wc.0),
            ms(wall) / ms(tail.0)
        );
    };
    row("wc -l", wc);
    row("tail -n 1000", tail);
    row("critic --once, first call (no cache)", first);
    row("critic --once, repeated", repeated);
    row("critic --once, 1000 lines appended since", appended);
    row("critic --once --full-read", full);
    println!(
        "\n{pairs} alternating rounds: tail -n 1000 median {:.3} ms, repeated critic --once \
         median {:.3} ms, median ratio {:.2}x",
        median(&mut walls.0) * 1e3,
        median(&mut walls.1) * 1e3,
        median(&mut walls.2),
    );
    let _ = std::fs::remove_dir_all(&dir);
}
