//! The `detach` and `sharded` modes of bench_publish (see main.rs).

use super::{drop_caches, gbps, loadavg, median, sh, write_source};
use roger::publish::{publish, queue, Request};
use roger::sys::disk::RealDisk;
use roger::sys::SystemClock;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

struct Args {
    mib: u64,
    reps: usize,
    root: PathBuf,
}

fn parse(args: &[String], what: &str) -> Args {
    let mib = args.first().map_or(1024, |s| s.parse().expect("SIZE_MIB"));
    let reps = args.get(1).map_or(3, |s| s.parse().expect("REPS"));
    let root = args.get(2).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("target/bench-{what}")),
        PathBuf::from,
    );
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    Args { mib, reps, root }
}

fn header(what: &str, a: &Args) {
    let cold = drop_caches();
    println!(
        "bench_publish {what}: {} MiB, {} repetitions, in {}; page cache {}; load average {} ({} CPUs)",
        a.mib,
        a.reps,
        a.root.display(),
        if cold { "dropped before every timed run (root)" } else { "NOT dropped (not root)" },
        loadavg(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}

/// The release `roger` next to this example (target/release/roger).
fn roger_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("roger");
    assert!(
        bin.exists(),
        "{} missing: cargo build --release --bin roger",
        bin.display()
    );
    bin
}

fn roger(args: &[&str]) {
    let st = Command::new(roger_bin())
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "roger {args:?} failed");
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Blocked time of `--detach` and its end-to-end time, against a blocking publish.
pub fn detach(args: &[String]) {
    let a = parse(args, "detach");
    let src = a.root.join("ckpt-1000.bin");
    write_source(&src, a.mib << 20);
    header("detach", &a);
    let s = src.to_str().unwrap();
    let (mut blocking, mut blocked, mut e2e) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..a.reps {
        let d1 = a.root.join(format!("blocking-{rep}"));
        drop_caches();
        roger(&["--version"]);
        let t = Instant::now();
        roger(&["publish", s, "--to", d1.to_str().unwrap()]);
        blocking.push(t.elapsed());

        let d2 = a.root.join(format!("detach-{rep}"));
        drop_caches();
        // The training loop calls roger at every save: its binary is cached, the fresh
        // checkpoint is not (dropped above).
        roger(&["--version"]);
        let t = Instant::now();
        roger(&["publish", "--detach", s, "--to", d2.to_str().unwrap()]);
        blocked.push(t.elapsed());
        let d2 = std::fs::canonicalize(&d2).unwrap();
        while !queue::pending(&d2).unwrap().is_empty() {
            // Coarse enough not to take CPU from the publisher on a small machine.
            std::thread::sleep(Duration::from_millis(20));
        }
        e2e.push(t.elapsed());
        assert!(d2.join("ckpt-1000.bin").exists() && d2.join("latest.json").exists());
        println!(
            "  rep {rep}: blocking publish {:.2}s; --detach: caller blocked {:.1} ms, published after {:.2}s",
            secs(blocking[rep]),
            blocked[rep].as_secs_f64() * 1000.0,
            secs(e2e[rep])
        );
        let _ = std::fs::remove_dir_all(&d1);
        let _ = std::fs::remove_dir_all(&d2);
    }
    let (b, k, e) = (median(blocking), median(blocked), median(e2e));
    println!("median of {}:", a.reps);
    println!("  blocking roger publish:           {:.2}s", secs(b));
    println!(
        "  roger publish --detach, blocked:  {:.1} ms",
        secs(k) * 1000.0
    );
    println!("  roger publish --detach, published after {:.2}s", secs(e));
    println!(
        "  ratio detached end-to-end / blocking = {:.3}   caller blocked / blocking = {:.4}",
        secs(e) / secs(b),
        secs(k) / secs(b)
    );
    println!("load average after: {}", loadavg());
    let _ = std::fs::remove_dir_all(&a.root);
}

fn request(src: &Path, dest: &Path) -> Request {
    Request {
        src: src.to_path_buf(),
        dest: dest.to_path_buf(),
        step: None,
        run: "bench".into(),
        ledger: dest.join("roger-ledger.jsonl"),
        retention: None,
        margin: 0,
        quarantine_dir: dest.join(".roger/quarantine"),
        rollback_margin: 0,
        config: None,
        queue: None,
    }
}

/// An 8-shard directory: roger against a parallel `cp -r && sync` and against one file of
/// the same size.
pub fn sharded(args: &[String]) {
    let a = parse(args, "sharded");
    let shards = 8u64;
    let dir = a.root.join("checkpoint-1000");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..shards {
        write_source(
            &dir.join(format!("model-{:05}-of-{shards:05}.safetensors.bin", i + 1)),
            (a.mib << 20) / shards,
        );
    }
    let file = a.root.join("ckpt-1000.bin");
    write_source(&file, (a.mib << 20) / shards * shards);
    header("sharded", &a);
    let size = (a.mib << 20) / shards * shards;
    let (mut rdir, mut cp, mut rfile) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..a.reps {
        let d = a.root.join(format!("roger-dir-{rep}"));
        drop_caches();
        let t = Instant::now();
        let o = publish(&request(&dir, &d), &RealDisk, &SystemClock).expect("publish dir");
        rdir.push(t.elapsed());
        assert_eq!(o.files as u64, shards);

        let c = a.root.join(format!("cp-{rep}"));
        drop_caches();
        let t = Instant::now();
        sh(&format!(
            "mkdir -p '{c}' && for f in '{d}'/*; do cp \"$f\" '{c}'/ & done; wait; sync",
            c = c.display(),
            d = dir.display()
        ));
        cp.push(t.elapsed());

        let f = a.root.join(format!("roger-file-{rep}"));
        drop_caches();
        let t = Instant::now();
        publish(&request(&file, &f), &RealDisk, &SystemClock).expect("publish file");
        rfile.push(t.elapsed());
        println!(
            "  rep {rep}: roger dir {:.2}s (copy {} ms, verify {} ms)  parallel cp -r && sync {:.2}s  roger single file {:.2}s",
            secs(rdir[rep]),
            o.timings_ms.copy,
            o.timings_ms.verify,
            secs(cp[rep]),
            secs(rfile[rep])
        );
        for p in [d, c, f] {
            let _ = std::fs::remove_dir_all(p);
        }
    }
    let (r, c, f) = (median(rdir), median(cp), median(rfile));
    println!("median of {}:", a.reps);
    println!(
        "  roger publish, {shards}-shard directory: {:.2}s ({:.2} GB/s)",
        secs(r),
        gbps(size, r)
    );
    println!("  parallel cp -r && sync:            {:.2}s", secs(c));
    println!("  roger publish, one file, same size: {:.2}s", secs(f));
    println!(
        "  ratio dir / parallel cp = {:.2}   ratio dir / single file = {:.2}",
        secs(r) / secs(c),
        secs(r) / secs(f)
    );
    println!("load average after: {}", loadavg());
    let _ = std::fs::remove_dir_all(&a.root);
}
