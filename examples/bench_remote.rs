//! Benchmark of the bucket upload, for README numbers: the real uploader (`roger publish
//! --upload-drain`, the process a publish with a remote starts in the background: multipart
//! upload with per-part SHA-256, then the verify re-read with ranged GETs, the bucket's
//! latest.json and the ledger mirror) against `aws s3 cp` (awscli, which does not verify) with
//! the same part size and concurrency, to the same loopback S3 server (moto), alternating,
//! in one invocation. Prints wall seconds, the ratio, the verify re-read's share (from the
//! uploader's `verified` record) and each side's peak RSS (wait4's ru_maxrss).
//!
//!     cargo build --release --bin roger --example bench_remote
//!     target/release/examples/bench_remote [--size-mib 1024] [--rounds 3] [--dir /tmp]
//!
//! Needs `moto_server` and `aws` on PATH (pip install "moto[server]" awscli).

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PART_MIB: u64 = 16;
const CONCURRENCY: usize = 8;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn roger_bin() -> PathBuf {
    let me = std::env::current_exe().expect("current_exe");
    me.parent()
        .and_then(Path::parent)
        .map(|d| d.join("roger"))
        .expect("target dir")
}

/// Run to completion; wall seconds and peak RSS (MiB) of the child and its waited-for
/// descendants (wait4).
// wait4 below reaps it (std's wait would not give the rusage).
#[allow(clippy::zombie_processes)]
fn timed(mut cmd: Command) -> (f64, f64, bool) {
    let t0 = Instant::now();
    let child = cmd.stdout(Stdio::null()).spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own child; status and ru point to live locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4");
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (t0.elapsed().as_secs_f64(), ru.ru_maxrss as f64 / 1024.0, ok)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn main() {
    let size_mib: u64 = arg("--size-mib").map_or(1024, |v| v.parse().expect("--size-mib N"));
    let rounds: usize = arg("--rounds").map_or(3, |v| v.parse().expect("--rounds N"));
    let base = PathBuf::from(arg("--dir").unwrap_or_else(|| "/tmp".into()));
    let dir = tempfile::Builder::new()
        .prefix("bench-remote-")
        .tempdir_in(&base)
        .unwrap();
    let d = dir.path();
    let port = free_port();
    let mut moto = Command::new("timeout")
        .args([
            "3600",
            "moto_server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("moto_server (pip install 'moto[server]')");
    let endpoint = format!("http://127.0.0.1:{port}");
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "moto_server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIABENCH"),
        ("AWS_SECRET_ACCESS_KEY", "bench-secret"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ];
    let aws_config = d.join("aws-config");
    std::fs::write(
        &aws_config,
        format!(
            "[default]\nregion = us-east-1\ns3 =\n  multipart_chunksize = {PART_MIB}MB\n  multipart_threshold = {PART_MIB}MB\n  max_concurrent_requests = {CONCURRENCY}\n"
        ),
    )
    .unwrap();
    let aws = |args: &[&str]| {
        let mut c = Command::new("aws");
        c.args(args)
            .args(["--endpoint-url", &endpoint])
            .env("AWS_CONFIG_FILE", &aws_config)
            .envs(env);
        c
    };
    assert!(aws(&["s3", "mb", "s3://bench"]).status().unwrap().success());

    // The checkpoint: incompressible bytes, written once, warm in the page cache for both.
    let src = d.join("ckpt-1.bin");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&src).unwrap());
        let mut buf = vec![0u8; 1 << 20];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..size_mib {
            for b in buf.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
            }
            f.write_all(&buf).unwrap();
        }
    }
    println!(
        "{size_mib} MiB to moto on loopback, part {PART_MIB} MiB, {CONCURRENCY} in flight, {rounds} round(s), alternating"
    );
    let roger = roger_bin();
    // (roger wall, upload, verify, aws wall, roger RSS, aws RSS)
    type Row = (f64, f64, f64, f64, f64, f64);
    let mut rows: Vec<Row> = Vec::new();
    for round in 1..=rounds {
        // roger: publish locally (its uploader held off by our lock), then the uploader in
        // the foreground, measured.
        let run = d.join(format!("run{round}"));
        let dest = run.join("ck");
        std::fs::create_dir_all(dest.join(".roger-upload")).unwrap();
        std::fs::write(
            run.join("roger.toml"),
            format!(
                "[run]\nname = \"bench\"\ncheckpoint_dir = \"ck\"\n[publish]\nremote = \"s3://bench/r{round}/\"\n[remote]\nendpoint = \"{endpoint}\"\npart_size = \"{PART_MIB}MiB\"\nconcurrency = {CONCURRENCY}\n"
            ),
        )
        .unwrap();
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dest.join(".roger-upload/uploader.lock"))
            .unwrap();
        // SAFETY: flock on a file we own.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        let ok = Command::new(&roger)
            .arg("--config")
            .arg(run.join("roger.toml"))
            .args(["publish", "--no-prune"])
            .arg(&src)
            .envs(env)
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "roger publish");
        drop(lock);
        let mut c = Command::new(&roger);
        c.args(["publish", "--upload-drain", "--to"])
            .arg(&dest)
            .envs(env)
            .stderr(Stdio::null());
        let (r_wall, r_rss, ok) = timed(c);
        assert!(ok, "roger publish --upload-drain");
        let ledger = std::fs::read_to_string(run.join("roger-ledger.jsonl")).unwrap();
        let verified: serde_json::Value = ledger
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|r| r["event"] == "verified")
            .expect("a verified record");
        let up = verified["upload_s"].as_f64().unwrap();
        let ver = verified["verify_s"].as_f64().unwrap();
        let (a_wall, a_rss, ok) = timed(aws(&[
            "s3",
            "cp",
            "--only-show-errors",
            src.to_str().unwrap(),
            &format!("s3://bench/aws{round}/ckpt-1.bin"),
        ]));
        assert!(ok, "aws s3 cp");
        println!(
            "round {round}: roger {r_wall:.2} s (upload {up:.2} s + verify {ver:.2} s), peak RSS {r_rss:.0} MiB | aws s3 cp {a_wall:.2} s, peak RSS {a_rss:.0} MiB | ratio {:.2}x",
            r_wall / a_wall
        );
        rows.push((r_wall, up, ver, a_wall, r_rss, a_rss));
    }
    let med = |f: &dyn Fn(&Row) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (rw, up, ver, aw) = (med(&|r| r.0), med(&|r| r.1), med(&|r| r.2), med(&|r| r.3));
    let rss = rows.iter().map(|r| r.4).fold(0.0, f64::max);
    println!(
        "median: roger (upload + verify) {rw:.2} s vs aws s3 cp {aw:.2} s = {:.2}x; upload alone {up:.2} s = {:.2}x; the verify re-read is {:.0}% of roger's time; roger's peak RSS {rss:.0} MiB (bound: part {PART_MIB} MiB x {CONCURRENCY})",
        rw / aw,
        up / aw,
        100.0 * ver / rw
    );
    // The whole group: `timeout` and moto under it.
    // SAFETY: kill(2) on our own child's process group; no memory is touched.
    unsafe { libc::kill(-(moto.id() as i32), libc::SIGKILL) };
    let _ = moto.wait();
}
