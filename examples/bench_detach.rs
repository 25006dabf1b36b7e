//! Benchmark (not a test): how long the caller of `roger publish --detach` (a training loop's
//! `on_save`) is blocked, p50 and p99 over CALLS calls, on an idle disk and while earlier
//! publishes are in flight on the same disk: one (same destination), four (four destinations,
//! four publishers copying at once) and a bucket upload (moto_server on loopback). The caller
//! is timed from spawn to exit of the real binary, as a Python helper pays it.
//!
//! Run: `CARGO_BUILD_JOBS=1 cargo build --release --bin roger --example bench_detach &&
//! target/release/examples/bench_detach [--big-mib N] [--calls N] [--dir DIR]
//! [--cases idle,one,four,bucket] [--roger PATH]` (defaults: 1024 MiB in flight per earlier
//! publish, 20 calls, a directory under /tmp, all cases, the roger beside this example).
//! The in-flight checkpoints are hard links of one file (no extra source space); each case
//! waits for its queue (and upload) to drain before the next. The bucket case needs
//! `moto_server` on PATH (pip install "moto[server]") and is skipped, saying so, without it.
//! It says whether the earlier work was still in flight when the last timed call returned.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn write_random(path: &Path, mib: u64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut buf = vec![0u8; 1 << 20];
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ mib;
    for _ in 0..mib {
        for b in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
        }
        f.write_all(&buf).unwrap();
    }
    f.into_inner().unwrap().sync_all().unwrap();
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The p-th percentile (nearest rank) of `v`, in ms.
fn pct(v: &[Duration], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort();
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1].as_secs_f64() * 1e3
}

struct Bench {
    roger: PathBuf,
    dir: PathBuf,
    calls: usize,
    /// Extra environment for every roger (the bucket's credentials).
    env: Vec<(String, String)>,
}

impl Bench {
    fn roger(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.roger);
        c.args(args)
            .current_dir(&self.dir)
            .env_remove("ROGER_CONFIG")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    fn ok(&self, args: &[&str]) {
        let out = self.roger(args).output().unwrap();
        assert!(
            out.status.success(),
            "roger {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// CALLS timed `--detach`es of fresh small checkpoints into `dest`, each after a timed
    /// `roger --version` (the floor: starting the binary on this machine now, no disk work).
    fn timed(
        &self,
        case: &str,
        dest: &str,
        config: Option<&Path>,
    ) -> (Vec<Duration>, Vec<Duration>) {
        let small = self.dir.join("small.bin");
        let (mut out, mut floor) = (Vec::new(), Vec::new());
        for i in 0..self.calls {
            let name = format!("{case}-{i}.bin");
            std::fs::hard_link(&small, self.dir.join(&name)).unwrap();
            let step = (i + 1).to_string();
            let mut args = Vec::new();
            if let Some(c) = config {
                args.extend(["--config", c.to_str().unwrap()]);
            }
            args.extend(["publish", "--detach", &name, "--to", dest, "--step", &step]);
            let t = Instant::now();
            assert!(self
                .roger(&["--version"])
                .output()
                .unwrap()
                .status
                .success());
            floor.push(t.elapsed());
            let t = Instant::now();
            let o = self.roger(&args).output().unwrap();
            out.push(t.elapsed());
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            std::thread::sleep(Duration::from_millis(50));
        }
        (out, floor)
    }

    fn wait(&self, dest: &str, config: Option<&Path>) {
        let mut args = Vec::new();
        if let Some(c) = config {
            args.extend(["--config", c.to_str().unwrap()]);
        }
        args.extend(["publish", "--wait", "--to", dest, "--timeout", "30m"]);
        self.ok(&args);
    }

    /// Whether `dest`'s queue still holds work (an earlier publish not yet ended).
    fn busy(&self, dest: &str) -> bool {
        let d = self.dir.join(dest);
        !roger::publish::queue::pending(&d)
            .unwrap_or_default()
            .is_empty()
            || roger::remote::queue::running(&d)
    }
}

fn report(case: &str, (t, floor): &(Vec<Duration>, Vec<Duration>), still: bool, note: &str) {
    println!(
        "{case:<34} p50 {:7.1} ms  p99 {:7.1} ms  max {:7.1} ms  [floor: roger --version p50 {:6.1} ms p99 {:6.1} ms]  (n={}; earlier work still in flight at the last call: {}){note}  load {}",
        pct(t, 50.0),
        pct(t, 99.0),
        pct(t, 100.0),
        pct(floor, 50.0),
        pct(floor, 99.0),
        t.len(),
        if still { "yes" } else { "NO" },
        loadavg()
    );
}

fn main() {
    let big_mib: u64 = arg("--big-mib").map_or(1024, |v| v.parse().expect("--big-mib N"));
    let calls: usize = arg("--calls").map_or(20, |v| v.parse().expect("--calls N"));
    let base = PathBuf::from(arg("--dir").unwrap_or_else(|| "/tmp".into()));
    let cases = arg("--cases").unwrap_or_else(|| "idle,one,four,bucket".into());
    let roger = arg("--roger").map(PathBuf::from).unwrap_or_else(|| {
        let me = std::env::current_exe().unwrap();
        me.parent().unwrap().parent().unwrap().join("roger")
    });
    assert!(
        roger.is_file(),
        "{} missing: build --bin roger",
        roger.display()
    );
    let roger = std::fs::canonicalize(roger).unwrap();
    let tmp = tempfile::Builder::new()
        .prefix("bench-detach-")
        .tempdir_in(&base)
        .unwrap();
    let fs = match nix::sys::statfs::statfs(tmp.path())
        .unwrap()
        .filesystem_type()
    {
        t if t == nix::sys::statfs::EXT4_SUPER_MAGIC => "ext4".to_string(),
        t if t == nix::sys::statfs::BTRFS_SUPER_MAGIC => "btrfs".to_string(),
        t if t == nix::sys::statfs::XFS_SUPER_MAGIC => "xfs".to_string(),
        other => format!("{other:?}"),
    };
    println!(
        "roger {}; {} on {}; {big_mib} MiB per earlier publish; {calls} calls per case; load {}",
        roger.display(),
        tmp.path().display(),
        fs,
        loadavg()
    );
    let mut b = Bench {
        roger,
        dir: std::fs::canonicalize(tmp.path()).unwrap(),
        calls,
        env: Vec::new(),
    };
    write_random(&b.dir.join("big.bin"), big_mib);
    write_random(&b.dir.join("small.bin"), 1);
    let big = |name: &str| {
        let p = b.dir.join(name);
        std::fs::hard_link(b.dir.join("big.bin"), &p).unwrap();
        name.to_string()
    };
    let settle = Duration::from_millis(1500);
    for case in cases.split(',') {
        match case {
            "idle" => {
                let t = b.timed("idle", "idle", None);
                report("idle disk", &t, true, "");
                b.wait("idle", None);
            }
            "one" => {
                let src = big("one-big.bin");
                b.ok(&["publish", "--detach", &src, "--to", "one", "--step", "1000"]);
                std::thread::sleep(settle);
                let t = b.timed("one", "one", None);
                let still = b.busy("one");
                report("one earlier publish in flight", &t, still, "");
                b.wait("one", None);
            }
            "four" => {
                for k in 0..4 {
                    let src = big(&format!("four-big-{k}.bin"));
                    let dest = format!("four{k}");
                    b.ok(&["publish", "--detach", &src, "--to", &dest, "--step", "1000"]);
                }
                std::thread::sleep(settle);
                let t = b.timed("four", "four0", None);
                let still = (0..4).any(|k| b.busy(&format!("four{k}")));
                report("four earlier publishes in flight", &t, still, "");
                for k in 0..4 {
                    b.wait(&format!("four{k}"), None);
                }
            }
            "bucket" => {
                if Command::new("moto_server").arg("-h").output().is_err() {
                    println!("bucket upload in flight: SKIPPED (no moto_server on PATH)");
                    continue;
                }
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                let mut moto = Command::new("timeout")
                    .args(["1800", "moto_server", "-H", "127.0.0.1", "-p"])
                    .arg(port.to_string())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                let t0 = Instant::now();
                while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                    assert!(
                        t0.elapsed() < Duration::from_secs(60),
                        "moto_server did not start"
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
                b.env = vec![
                    ("AWS_ACCESS_KEY_ID".into(), "AKIABENCH".into()),
                    ("AWS_SECRET_ACCESS_KEY".into(), "bench-secret".into()),
                    ("AWS_REGION".into(), "us-east-1".into()),
                ];
                // The bucket itself: one PUT of a bucket on loopback (moto's path style).
                let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                write!(
                    s,
                    "PUT /bench HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                let mut resp = String::new();
                std::io::Read::read_to_string(&mut s, &mut resp).unwrap();
                assert!(
                    resp.starts_with("HTTP/1.1 200"),
                    "creating the bucket: {resp}"
                );
                let config = b.dir.join("bucket.toml");
                std::fs::write(
                    &config,
                    format!(
                        "[run]\nname = \"bench\"\ncheckpoint_dir = \"bucket\"\nledger = \"bucket/roger-ledger.jsonl\"\n[publish]\nremote = \"s3://bench/r/\"\n[remote]\nendpoint = \"http://127.0.0.1:{port}\"\n"
                    ),
                )
                .unwrap();
                let src = big("bucket-big.bin");
                let cfg = config.to_str().unwrap();
                // Published in the foreground; its upload goes on in the background.
                b.ok(&[
                    "--config", cfg, "publish", &src, "--to", "bucket", "--step", "1000",
                ]);
                std::thread::sleep(Duration::from_millis(500));
                let uploading = roger::remote::queue::running(&b.dir.join("bucket"));
                let t = b.timed("bucket", "bucket", Some(&config));
                let still = roger::remote::queue::running(&b.dir.join("bucket"));
                report(
                    "bucket upload in flight",
                    &t,
                    uploading && still,
                    " (timed detaches upload too)",
                );
                b.wait("bucket", Some(&config));
                let _ = moto.kill();
                let _ = moto.wait();
                b.env.clear();
            }
            other => panic!("unknown case {other:?}: expected idle, one, four or bucket"),
        }
    }
}
