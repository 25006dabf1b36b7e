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
pub fn roger_bin() -> PathBuf {
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

/// The `publish` record of the newest publish into `dest` (its ledger is the default one there).
fn publish_record(dest: &Path) -> roger::ledger::Record {
    let recs = roger::ledger::Ledger::new(dest.join("roger-ledger.jsonl"))
        .records()
        .unwrap();
    recs.into_iter()
        .rev()
        .find(|r| r.kind == roger::ledger::Kind::Publish)
        .expect("a publish record")
}

fn f64_field(r: &roger::ledger::Record, k: &str) -> f64 {
    r.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN)
}

fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Blocked time of `--detach` and its end-to-end time, against a blocking publish. The two
/// alternate which goes first from one repetition to the next (the VM's disk drifts), and the
/// detached time is taken apart with its `publish` record: `duration_s` (the publish itself,
/// the same code a blocking publish runs), `queued_s` (queue entry written → record).
pub fn detach(args: &[String]) {
    let a = parse(args, "detach");
    let src = a.root.join("ckpt-1000.bin");
    write_source(&src, a.mib << 20);
    header("detach", &a);
    let s = src.to_str().unwrap();
    let (mut blocking, mut blocked, mut e2e, mut ratios) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut b_pub, mut d_pub, mut start, mut tail, mut pres) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for rep in 0..a.reps {
        let d1 = a.root.join(format!("blocking-{rep}"));
        let d2 = a.root.join(format!("detach-{rep}"));
        let load = loadavg();
        let run_blocking = |blocking: &mut Vec<Duration>| {
            drop_caches();
            // The training loop calls roger at every save: its binary is cached, the fresh
            // checkpoint is not (dropped above).
            roger(&["--version"]);
            let t = Instant::now();
            roger(&["publish", s, "--to", d1.to_str().unwrap()]);
            blocking.push(t.elapsed());
        };
        if rep % 2 == 0 {
            run_blocking(&mut blocking);
        }
        drop_caches();
        roger(&["--version"]);
        let (t, wall0) = (Instant::now(), chrono::Utc::now());
        roger(&["publish", "--detach", s, "--to", d2.to_str().unwrap()]);
        let k = t.elapsed();
        blocked.push(k);
        let d2 = std::fs::canonicalize(&d2).unwrap();
        while !queue::pending(&d2).unwrap().is_empty() {
            // Listing a directory: cheap enough not to take CPU from the publisher.
            std::thread::sleep(Duration::from_millis(5));
        }
        let (e, wall1) = (t.elapsed(), chrono::Utc::now());
        e2e.push(e);
        if rep % 2 == 1 {
            run_blocking(&mut blocking);
        }
        assert!(d2.join("ckpt-1000.bin").exists() && d2.join("latest.json").exists());
        let (rb, rd) = (publish_record(&d1), publish_record(&d2));
        let (bd, dd, qs) = (
            f64_field(&rb, "duration_s"),
            f64_field(&rd, "duration_s"),
            f64_field(&rd, "queued_s"),
        );
        let at = |v: &str| {
            chrono::DateTime::parse_from_rfc3339(v)
                .unwrap()
                .with_timezone(&chrono::Utc)
        };
        let queued_at = at(rd.str_field("queued_at").unwrap());
        let ms = |d: chrono::TimeDelta| d.num_microseconds().unwrap_or(0) as f64 / 1e6;
        // Caller started → its queue entry's time stamp (start-up, checks; then the caller
        // goes on with the durable writes while the publisher starts).
        let pre = ms(queued_at - wall0);
        // Queue entry's time stamp → the publisher's publish began.
        let st = qs - dd;
        // Publish record written → the queue entry gone (and seen gone by this 5 ms poll).
        let tl = ms(wall1 - rd.ts);
        b_pub.push(bd);
        d_pub.push(dd);
        start.push(st);
        pres.push(pre);
        tail.push(tl);
        ratios.push(secs(e) / secs(blocking[rep]));
        println!(
            "  rep {rep} ({} first; load {load}): blocking {:.2}s (its publish {bd:.2}s); --detach: blocked {:.1} ms, published after {:.2}s = caller start {:.0} ms + publisher start {:.0} ms + publish {dd:.2}s + queue tail {:.0} ms; ratio {:.3}",
            if rep % 2 == 0 { "blocking" } else { "detached" },
            secs(blocking[rep]),
            secs(k) * 1000.0,
            secs(e),
            pre * 1000.0,
            st * 1000.0,
            tl * 1000.0,
            ratios[rep]
        );
        let _ = std::fs::remove_dir_all(&d1);
        let _ = std::fs::remove_dir_all(&d2);
    }
    let (b, k, e) = (median(blocking), median(blocked), median(e2e));
    println!("median of {}:", a.reps);
    println!(
        "  blocking roger publish:           {:.2}s (the publish inside it {:.2}s)",
        secs(b),
        median_f(b_pub)
    );
    println!(
        "  roger publish --detach, blocked:  {:.1} ms",
        secs(k) * 1000.0
    );
    println!(
        "  roger publish --detach, published after {:.2}s (caller start {:.0} ms, publisher start {:.0} ms, publish {:.2}s, queue tail {:.0} ms)",
        secs(e),
        median_f(pres) * 1000.0,
        median_f(start) * 1000.0,
        median_f(d_pub),
        median_f(tail) * 1000.0
    );
    println!(
        "  ratio detached end-to-end / blocking: of the medians {:.3}, median of the per-rep ratios {:.3}   caller blocked / blocking = {:.4}",
        secs(e) / secs(b),
        median_f(ratios),
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
        remote: None,
    }
}

/// An 8-shard directory: roger against a parallel `cp -r && sync`, against the same followed
/// by an O_DIRECT read-back of the copy (`dd iflag=direct`, one per shard at once: the I/O
/// of a copy verified from disk, without the hashing), and against one file of the same
/// size. The order of the four rotates from one repetition to the next (the VM's disk drifts).
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
    let (mut rdir, mut cp, mut cpread, mut rfile) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut ratios, mut dir_cpu, mut cp_cpu) = (Vec::new(), 0.0, 0.0);
    let cp_script = |c: &Path| {
        format!(
            "mkdir -p '{c}' && for f in '{d}'/*; do cp \"$f\" '{c}'/ & done; wait; sync",
            c = c.display(),
            d = dir.display()
        )
    };
    for rep in 0..a.reps {
        let load = loadavg();
        let (d, c, c2, f) = (
            a.root.join(format!("roger-dir-{rep}")),
            a.root.join(format!("cp-{rep}")),
            a.root.join(format!("cpread-{rep}")),
            a.root.join(format!("roger-file-{rep}")),
        );
        let mut copy_verify = (0, 0);
        for k in 0..4 {
            drop_caches();
            match (k + rep) % 4 {
                0 => {
                    let c0 = super::cpu(libc::RUSAGE_SELF);
                    let t = Instant::now();
                    let o =
                        publish(&request(&dir, &d), &RealDisk, &SystemClock).expect("publish dir");
                    rdir.push(t.elapsed());
                    dir_cpu += super::cpu(libc::RUSAGE_SELF) - c0;
                    assert_eq!(o.files as u64, shards);
                    assert_eq!(o.verify_bytes_read, size);
                    copy_verify = (o.timings_ms.copy, o.timings_ms.verify);
                }
                1 => {
                    let c0 = super::cpu(libc::RUSAGE_CHILDREN);
                    let t = Instant::now();
                    sh(&cp_script(&c));
                    cp.push(t.elapsed());
                    cp_cpu += super::cpu(libc::RUSAGE_CHILDREN) - c0;
                }
                2 => {
                    let t = Instant::now();
                    sh(&format!(
                        "{} && for f in '{c}'/*; do dd if=\"$f\" of=/dev/null bs=4M iflag=direct status=none & done; wait",
                        cp_script(&c2),
                        c = c2.display()
                    ));
                    cpread.push(t.elapsed());
                }
                _ => {
                    let t = Instant::now();
                    publish(&request(&file, &f), &RealDisk, &SystemClock).expect("publish file");
                    rfile.push(t.elapsed());
                }
            }
        }
        ratios.push(secs(rdir[rep]) / secs(cp[rep]));
        println!(
            "  rep {rep} (load {load}): roger dir {:.2}s (all copies durable at {} ms, last verify {} ms later)  parallel cp -r && sync {:.2}s  same + O_DIRECT read-back {:.2}s  roger single file {:.2}s  dir / cp = {:.2}",
            secs(rdir[rep]),
            copy_verify.0,
            copy_verify.1,
            secs(cp[rep]),
            secs(cpread[rep]),
            secs(rfile[rep]),
            ratios[rep]
        );
        for p in [d, c, c2, f] {
            let _ = std::fs::remove_dir_all(p);
        }
    }
    let (r, c, cr, f) = (median(rdir), median(cp), median(cpread), median(rfile));
    let n = a.reps as f64;
    println!("median of {}:", a.reps);
    println!(
        "  roger publish, {shards}-shard directory: {:.2}s ({:.2} GB/s, {:.2} CPU s per run)",
        secs(r),
        gbps(size, r),
        dir_cpu / n
    );
    println!(
        "  parallel cp -r && sync:            {:.2}s ({:.2} CPU s per run)",
        secs(c),
        cp_cpu / n
    );
    println!(
        "  parallel cp -r && sync, then O_DIRECT read-back: {:.2}s",
        secs(cr)
    );
    println!("  roger publish, one file, same size: {:.2}s", secs(f));
    println!(
        "  ratio dir / parallel cp: of the medians {:.2}, median of the per-rep ratios {:.2}   dir / (cp + read-back) = {:.2}   dir / single file = {:.2}",
        secs(r) / secs(c),
        median_f(ratios),
        secs(r) / secs(cr),
        secs(r) / secs(f)
    );
    println!("load average after: {}", loadavg());
    let _ = std::fs::remove_dir_all(&a.root);
}
