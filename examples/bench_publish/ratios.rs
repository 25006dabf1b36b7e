//! The `ratios` mode of bench_publish (issue 27's two goals in one invocation): the release
//! `roger publish` binary on a 1 GiB file against `cp SRC DST && sync`, and on an 8-shard
//! 4 GiB directory against a parallel `cp && sync` (one `cp` per shard at once), each pair
//! alternating which goes first, page cache dropped before every run (as root); medians,
//! peak RSS of each publish (wait4's ru_maxrss), CPU seconds. With `ROGER_BASELINE_BIN` set
//! to another roger binary (an older commit's build) it runs that one in the same rotation,
//! so old and new are compared on the same disk minutes. Then the arithmetic of what a
//! verified publish must do beyond a copy: SHA-256 per core (measured here), O_DIRECT read
//! rate of the source (measured here), bytes written, read back and hashed.

use super::{drop_caches, gbps, loadavg, median, write_source};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// What one timed child took: wall time, CPU seconds (user+sys), peak RSS in KiB.
#[derive(Clone, Copy)]
struct Run {
    wall: Duration,
    cpu: f64,
    rss_kib: i64,
}

/// Spawn and reap `cmd` with wait4, so its own rusage (peak RSS included) is known.
// The child is reaped by wait4 below: `Child::wait` would not report its rusage.
#[allow(clippy::zombie_processes)]
fn timed(cmd: &mut Command) -> Run {
    let t = Instant::now();
    let child = cmd
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let (mut status, pid) = (0, child.id() as i32);
    // SAFETY: rusage is plain integers: all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child fills the status and the rusage we pass.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall = t.elapsed();
    assert!(
        r == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{cmd:?} failed (status {status})"
    );
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Run {
        wall,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        rss_kib: ru.ru_maxrss,
    }
}

fn publish_cmd(bin: &Path, src: &Path, dest: &Path) -> Command {
    let mut c = Command::new(bin);
    c.arg("publish").arg(src).arg("--to").arg(dest);
    c
}

fn cp_cmd(srcs: &[PathBuf], dest: &Path) -> Command {
    std::fs::create_dir_all(dest).unwrap();
    let mut script = String::new();
    for s in srcs {
        script += &format!("cp '{}' '{}'/ & ", s.display(), dest.display());
    }
    script += "wait; sync";
    let mut c = Command::new("sh");
    c.arg("-c").arg(script);
    c
}

/// The contenders of one goal, in the order of the first repetition.
struct Goal {
    name: &'static str,
    srcs: Vec<PathBuf>,
    /// What roger publishes (the file, or the directory of shards).
    what: PathBuf,
    bytes: u64,
}

struct Tally {
    label: String,
    runs: Vec<Run>,
}

impl Tally {
    fn median(&self) -> Duration {
        median(self.runs.iter().map(|r| r.wall).collect())
    }
    fn cpu(&self) -> f64 {
        self.runs.iter().map(|r| r.cpu).sum::<f64>() / self.runs.len() as f64
    }
    fn peak_rss_mib(&self) -> f64 {
        self.runs.iter().map(|r| r.rss_kib).max().unwrap_or(0) as f64 / 1024.0
    }
}

/// SHA-256 in memory on one core, GB/s (1 GiB hashed).
pub fn sha256_per_core() -> f64 {
    let block = vec![0x5au8; 256 << 20];
    let t = Instant::now();
    let mut h = Sha256::new();
    for _ in 0..4 {
        h.update(&block);
    }
    let _ = h.finalize();
    gbps(4 * block.len() as u64, t.elapsed())
}

/// GB/s of a cold O_DIRECT read of `path` into one of publish's own buffers (`AlignedBuf`:
/// 2 MiB-aligned, huge pages where the kernel offers them), 4 MiB at a time.
fn huge_page_read(path: &Path) -> f64 {
    drop_caches();
    let f = roger::publish::direct::DirectFile::open(path).expect("open the source");
    let mut buf = roger::publish::io::AlignedBuf::new(4 << 20);
    let t = Instant::now();
    let mut off = 0u64;
    loop {
        let k = f.read_at(&mut buf, off, 4 << 20).expect("read");
        off += k as u64;
        if k < 4 << 20 {
            break;
        }
    }
    gbps(off, t.elapsed())
}

pub fn ratios(args: &[String]) {
    let reps: usize = args.first().map_or(5, |s| s.parse().expect("REPS"));
    let root = args.get(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-ratios"),
        PathBuf::from,
    );
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let bin = super::modes::roger_bin();
    let baseline = std::env::var_os("ROGER_BASELINE_BIN").map(PathBuf::from);
    let file = root.join("ckpt-1000.bin");
    write_source(&file, 1 << 30);
    let dir = root.join("checkpoint-1000");
    std::fs::create_dir_all(&dir).unwrap();
    let mut shards = Vec::new();
    for i in 0..8 {
        let p = dir.join(format!("model-{:05}-of-00008.safetensors.bin", i + 1));
        write_source(&p, 512 << 20);
        shards.push(p);
    }
    let cold = drop_caches();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    // roger writes the staging copy with O_DIRECT from huge-page buffers only where the
    // kernel offers them, so which path ran depends on this.
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map_or_else(|_| "absent".to_string(), |s| s.trim().to_string());
    println!(
        "bench_publish ratios: {reps} repetitions, in {}; page cache {}; {cores} CPUs; transparent huge pages: {thp}; load average {}",
        root.display(),
        if cold { "dropped before every run (root)" } else { "NOT dropped (not root): runs start warm" },
        loadavg()
    );
    let goals = [
        Goal {
            name: "1 GiB file",
            srcs: vec![file.clone()],
            what: file.clone(),
            bytes: 1 << 30,
        },
        Goal {
            name: "8-shard 4 GiB directory",
            srcs: shards,
            what: dir.clone(),
            bytes: 4 << 30,
        },
    ];
    let mut results = Vec::new();
    for g in &goals {
        let mut tallies = vec![
            Tally {
                label: "roger publish".into(),
                runs: Vec::new(),
            },
            Tally {
                label: format!(
                    "{} cp && sync",
                    if g.srcs.len() > 1 { "parallel" } else { "" }
                )
                .trim()
                .into(),
                runs: Vec::new(),
            },
        ];
        if let Some(b) = &baseline {
            tallies.push(Tally {
                label: format!("baseline {}", b.display()),
                runs: Vec::new(),
            });
        }
        let n = tallies.len();
        for rep in 0..reps {
            let load = loadavg();
            let mut line = format!("  {} rep {rep} (load {load}):", g.name);
            // Rotate the order: the VM's disk drifts from minute to minute.
            for k in 0..n {
                let which = (k + rep) % n;
                let out = root.join(format!("out-{which}"));
                let _ = std::fs::remove_dir_all(&out);
                drop_caches();
                let run = match which {
                    0 => timed(&mut publish_cmd(&bin, &g.what, &out)),
                    1 => timed(&mut cp_cmd(&g.srcs, &out)),
                    _ => timed(&mut publish_cmd(baseline.as_ref().unwrap(), &g.what, &out)),
                };
                line += &format!(
                    "  {} {:.2}s ({:.0} MiB)",
                    tallies[which].label,
                    run.wall.as_secs_f64(),
                    run.rss_kib as f64 / 1024.0
                );
                tallies[which].runs.push(run);
                let _ = std::fs::remove_dir_all(&out);
            }
            println!("{line}");
        }
        let (r, c) = (tallies[0].median(), tallies[1].median());
        println!("  {} median of {reps}:", g.name);
        for t in &tallies {
            println!(
                "    {:<40} {:.2}s ({:.2} GB/s)  CPU {:.2}s  peak RSS {:.1} MiB",
                t.label,
                t.median().as_secs_f64(),
                gbps(g.bytes, t.median()),
                t.cpu(),
                t.peak_rss_mib()
            );
        }
        println!(
            "    RATIO roger publish / {} = {:.2}",
            tallies[1].label,
            r.as_secs_f64() / c.as_secs_f64()
        );
        if tallies.len() > 2 {
            let b = tallies[2].median();
            println!(
                "    baseline / {} = {:.2}   roger publish / baseline = {:.2}",
                tallies[1].label,
                b.as_secs_f64() / c.as_secs_f64(),
                r.as_secs_f64() / b.as_secs_f64()
            );
        }
        results.push((g.name, r, c, g.bytes));
    }

    // The arithmetic: what a verified publish must do that a copy does not.
    let hash = sha256_per_core();
    drop_caches();
    let t = Instant::now();
    super::sh(&format!(
        "dd if='{}' of=/dev/null bs=4M iflag=direct status=none",
        file.display()
    ));
    let read_alone = t.elapsed();
    let dd_read = gbps(1 << 30, read_alone);
    // The same read the way roger's verify reads: O_DIRECT into its huge-page buffers.
    let read = huge_page_read(&file);
    println!("arithmetic (measured in this run): SHA-256 {hash:.2} GB/s per core (sha2 crate); O_DIRECT read of the source {dd_read:.2} GB/s (dd, 4 MiB from 4 KiB pages, one at a time), {read:.2} GB/s from roger's huge-page buffers (4 MiB, one at a time): the read-back below uses the latter");
    // Can a read-back overlap a copy on this disk at all? The same read and a 1 GiB
    // `cp && sync`, alone and then at once: if at once takes as long as one after the other,
    // the device shares its bandwidth and overlapping the verify with the copy gains nothing.
    let copy_to = root.join("overlap-probe.bin");
    drop_caches();
    let t = Instant::now();
    super::sh(&format!(
        "cp '{}' '{}' && sync",
        file.display(),
        copy_to.display()
    ));
    let write_alone = t.elapsed();
    let _ = std::fs::remove_file(&copy_to);
    drop_caches();
    let t = Instant::now();
    super::sh(&format!(
        "dd if='{}' of=/dev/null bs=4M iflag=direct status=none & cp '{}' '{}' && sync; wait",
        file.display(),
        file.display(),
        copy_to.display()
    ));
    let both = t.elapsed();
    let _ = std::fs::remove_file(&copy_to);
    let apart = write_alone + read_alone;
    println!(
        "  read ‖ write (1 GiB each): at once {:.2}s, one after the other {:.2}s (cp && sync {:.2}s + O_DIRECT read {:.2}s): overlap saves {:.0}%",
        both.as_secs_f64(),
        apart.as_secs_f64(),
        write_alone.as_secs_f64(),
        read_alone.as_secs_f64(),
        100.0 * (1.0 - both.as_secs_f64() / apart.as_secs_f64())
    );
    for (name, r, c, bytes) in results {
        let gb = bytes as f64 / 1e9;
        let reread = gb / read;
        // The verify after the last fsync re-reads and re-hashes: it takes at least the longer
        // of the read and the hash of those bytes on every core.
        let rehash = gb / hash / cores.max(1) as f64;
        let verify = reread.max(rehash);
        let floor = c.as_secs_f64() + verify;
        println!(
            "  {name}: cp && sync reads {gb:.2} GB and writes {gb:.2} GB; roger publish reads {gb:.2} GB, writes {gb:.2} GB, reads {gb:.2} GB back from the device after fsync and hashes {:.2} GB ({:.2} CPU s at {hash:.2} GB/s). The verify after the fsync is at least the read-back ({reread:.2} s at the read rate above) or its re-hash ({rehash:.2} s on {cores} cores), whichever is longer: cp && sync {:.2}s + {verify:.2}s = {floor:.2}s = {:.2}x cp && sync if it cannot overlap the copy; measured {:.2}x",
            2.0 * gb,
            2.0 * gb / hash,
            c.as_secs_f64(),
            floor / c.as_secs_f64(),
            r.as_secs_f64() / c.as_secs_f64()
        );
    }
    println!("load average after: {}", loadavg());
    let _ = std::fs::remove_dir_all(&root);
}
