//! Benchmark (not a test): `roger publish` of a 1 GiB file against `cp SRC DST && sync &&
//! sha256sum DST` and bare `cp SRC DST && sync`, in the same run, plus SHA-256 alone.
//!
//! Run: `cargo run --release --example bench_publish [-- SIZE_MIB [REPS [DIR]]]`
//! (defaults 1024 MiB, 3 repetitions, a directory under target/). As root it syncs and drops
//! the page cache (`echo 3 > /proc/sys/vm/drop_caches`) before every timed run, so each one
//! starts from a cold cache; otherwise it says it could not. roger is timed through the
//! library (`roger::publish::publish`), the same code the command runs, verify-from-disk
//! included.
//!
//! Two more modes (build the binary too: `cargo build --release --bin roger --example
//! bench_publish`):
//! - `bench_publish detach SIZE_MIB REPS [DIR]`: how long the caller of `roger publish
//!   --detach` (the real binary) is blocked, and when the queue has drained, against a
//!   blocking `roger publish` of the same file (alternating which goes first), the detached
//!   time taken apart (publisher start, publish, queue tail) from its ledger record; medians.
//! - `bench_publish sharded SIZE_MIB REPS [DIR]`: an 8-shard directory of SIZE in total,
//!   published by roger (several shards in flight, each verified while the next copy),
//!   against a parallel `cp -r && sync` (one `cp` per shard at once), the same followed by an
//!   O_DIRECT read-back of the copy, and roger publishing one file of the same size (order
//!   rotating per repetition); medians, CPU seconds.
//! - `bench_publish ratios [REPS [DIR]]`: issue 27's two goals in one invocation, through the
//!   release binary: `roger publish` of a 1 GiB file / `cp && sync`, and of an 8-shard 4 GiB
//!   directory / a parallel `cp && sync`, alternating, medians, peak RSS, and the arithmetic
//!   of what verifying from disk adds (`ROGER_BASELINE_BIN=/path/to/old/roger` adds an older
//!   build to the same rotation).

mod modes;
mod ratios;

use roger::publish::{publish, Request};
use roger::sys::disk::RealDisk;
use roger::sys::SystemClock;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn drop_caches() -> bool {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

pub fn sh(script: &str) {
    let st = Command::new("sh")
        .arg("-c")
        .arg(script)
        .status()
        .expect("sh");
    assert!(st.success(), "{script} failed");
}

/// CPU seconds (user + system) used so far by this process or by its waited-for children.
pub fn cpu(who: i32) -> f64 {
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we pass.
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

pub fn write_source(path: &Path, size: u64) {
    let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path).unwrap());
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..size / buf.len() as u64 {
        for c in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&buf).unwrap();
    }
    f.flush().unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("detach") => return modes::detach(&args[1..]),
        Some("sharded") => return modes::sharded(&args[1..]),
        Some("ratios") => return ratios::ratios(&args[1..]),
        _ => {}
    }
    let mib: u64 = args.first().map_or(1024, |s| s.parse().expect("SIZE_MIB"));
    let reps: usize = args.get(1).map_or(3, |s| s.parse().expect("REPS"));
    let root = args.get(2).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-publish"),
        PathBuf::from,
    );
    let size = mib << 20;
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let src = root.join("ckpt-1000.bin");
    println!(
        "bench_publish: {mib} MiB source in {}, {reps} repetitions each",
        root.display()
    );

    // SHA-256 alone, in memory.
    #[cfg(target_arch = "x86_64")]
    let sha_ni = std::arch::is_x86_feature_detected!("sha");
    #[cfg(not(target_arch = "x86_64"))]
    let sha_ni = false;
    let hash_rate = ratios::sha256_per_core();
    println!(
        "sha256 alone (sha2 crate, CPU SHA extensions detected: {sha_ni}): {hash_rate:.2} GB/s"
    );

    write_source(&src, size);
    let cold = drop_caches();
    println!(
        "page cache: {}",
        if cold {
            "synced and dropped before every timed run (root)"
        } else {
            "could NOT be dropped (not root): runs start warm"
        }
    );

    println!(
        "load average before: {} ({} CPUs)",
        loadavg(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let (mut roger_t, mut cp_sha_t, mut cp_t) = (Vec::new(), Vec::new(), Vec::new());
    let (mut roger_cpu, mut cp_sha_cpu, mut cp_cpu) = (0.0, 0.0, 0.0);
    for rep in 0..reps {
        let dst = root.join(format!("dst-{rep}"));
        std::fs::create_dir_all(&dst).unwrap();
        let req = Request {
            src: src.clone(),
            dest: root.join(format!("roger-{rep}")),
            step: None,
            run: "bench".into(),
            ledger: root.join(format!("roger-{rep}/roger-ledger.jsonl")),
            retention: None,
            margin: 0,
            quarantine_dir: root.join(format!("roger-{rep}/.roger/quarantine")),
            rollback_margin: 0,
            config: None,
            queue: None,
            remote: None,
        };
        drop_caches();
        let c0 = cpu(libc::RUSAGE_SELF);
        let t = Instant::now();
        let out = publish(&req, &RealDisk, &SystemClock).expect("publish");
        roger_t.push(t.elapsed());
        roger_cpu += cpu(libc::RUSAGE_SELF) - c0;
        assert_eq!(out.verify_bytes_read, size);

        let d = dst.join("a.bin");
        drop_caches();
        let c0 = cpu(libc::RUSAGE_CHILDREN);
        let t = Instant::now();
        sh(&format!(
            "cp '{}' '{}' && sync && sha256sum '{}' >/dev/null",
            src.display(),
            d.display(),
            d.display()
        ));
        cp_sha_t.push(t.elapsed());
        cp_sha_cpu += cpu(libc::RUSAGE_CHILDREN) - c0;

        let d = dst.join("b.bin");
        drop_caches();
        let c0 = cpu(libc::RUSAGE_CHILDREN);
        let t = Instant::now();
        sh(&format!("cp '{}' '{}' && sync", src.display(), d.display()));
        cp_t.push(t.elapsed());
        cp_cpu += cpu(libc::RUSAGE_CHILDREN) - c0;
        println!(
            "  rep {rep}: roger {:.2}s  cp+sync+sha256sum {:.2}s  cp+sync {:.2}s  (roger copy {} ms, verify {} ms, commit {} ms; pages cached before verify: {:?}/{:?})",
            roger_t[rep].as_secs_f64(),
            cp_sha_t[rep].as_secs_f64(),
            cp_t[rep].as_secs_f64(),
            out.timings_ms.copy,
            out.timings_ms.verify,
            out.timings_ms.commit,
            out.pages_resident_before_verify,
            out.pages_total
        );
        let _ = std::fs::remove_dir_all(&dst);
        let _ = std::fs::remove_dir_all(root.join(format!("roger-{rep}")));
    }
    let (r, cs, c) = (median(roger_t), median(cp_sha_t), median(cp_t));
    println!("median of {reps}:");
    println!("  roger publish (copy+hash, fsync, drop cache, re-read+hash, rename, dir fsync, latest.json, ledger): {:.2}s ({:.2} GB/s)", r.as_secs_f64(), gbps(size, r));
    println!("  cp && sync && sha256sum: {:.2}s", cs.as_secs_f64());
    println!("  cp && sync:              {:.2}s", c.as_secs_f64());
    println!(
        "  ratio roger / (cp+sync+sha256sum) = {:.2}   ratio roger / (cp+sync) = {:.2}",
        r.as_secs_f64() / cs.as_secs_f64(),
        r.as_secs_f64() / c.as_secs_f64()
    );
    let n = reps as f64;
    println!(
        "  CPU seconds per run (user+sys): roger {:.2}  cp+sync+sha256sum {:.2}  cp+sync {:.2}",
        roger_cpu / n,
        cp_sha_cpu / n,
        cp_cpu / n
    );
    println!("load average after: {}", loadavg());
    let _ = std::fs::remove_dir_all(&root);
}
