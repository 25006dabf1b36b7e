//! Benchmark (not a test) of `[cluster]` (docs/cluster.md) on one machine: N "nodes", each
//! its own directory, its own release `roger watch` and a trainer that, like a synchronous
//! data-parallel rank, starts its next step only when every node's trainer finished this one
//! (a barrier through files). One store directory for the job.
//!
//! 1. Overhead: roger's own CPU (schedstat) and peak RSS over `--seconds`, for node 0 of the
//!    job and, in the same invocation, for one watch without `[cluster]` (the baseline), both
//!    sampling every `--interval`; and the store calls each node makes per minute.
//! 2. Detection: node 1's machine is lost (its roger and trainer SIGKILLed together); from the
//!    kill to every other node's `node_lost` record, to its `cluster_verdict`, and to its exit
//!    76, against `lost_after` and two samples.
//! 3. Back to work: every node's watch is started again at once (the scheduler's requeue, in
//!    miniature), and the time from the verdict to each node's first new step is measured.
//!
//! ```sh
//! cargo build --release --bin roger --example bench_cluster
//! target/release/examples/bench_cluster [--nodes 3] [--seconds 60] [--interval 1s] [--lost-after 10s]
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The trainer: its pid first, then a step every 200 ms, each ended at a barrier with the
/// other nodes' trainers ($SYNC/rank-K holds K's last step).
const TRAIN: &str = r#"echo $$ > child.pid; i=$(wc -l < train.jsonl 2>/dev/null || echo 0); while :; do i=$((i+1)); echo "{\"step\": $i, \"loss\": 1.0}" >> train.jsonl; echo $i > "$SYNC/rank-$K.tmp"; mv "$SYNC/rank-$K.tmp" "$SYNC/rank-$K"; while :; do ok=1; for k in $(seq 0 $((N - 1))); do [ "$(cat "$SYNC/rank-$k" 2>/dev/null || echo 0)" -ge $i ] || ok=0; done; [ $ok = 1 ] && break; sleep 0.02; done; sleep 0.2; done"#;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn secs(s: &str) -> f64 {
    let (n, mul) = match s.strip_suffix("ms") {
        Some(n) => (n, 0.001),
        None => (s.trim_end_matches('s'), 1.0),
    };
    n.parse::<f64>().expect("a duration like 1s or 500ms") * mul
}

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

struct Node {
    dir: PathBuf,
    watch: Child,
}

fn write_config(dir: &Path, cluster: Option<(&Path, u32, u32)>, interval: &str, lost: &str) {
    let mut cfg = format!(
        "[run]\nname = \"job\"\nlog = \"train.jsonl\"\n[gpu]\nsource = \"none\"\n\
         [watch]\ninterval = \"{interval}\"\nhysteresis = 2\ngrace = \"5s\"\nstale = \"600s\"\n"
    );
    if let Some((store, k, n)) = cluster {
        cfg.push_str(&format!(
            "[cluster]\nstore = \"{}\"\nnode = {k}\nnodes = {n}\nlost_after = \"{lost}\"\non_fault = \"requeue\"\n",
            store.display()
        ));
    }
    std::fs::write(dir.join("roger.toml"), cfg).unwrap();
}

fn start(roger: &Path, dir: &Path, sync: &Path, k: u32, n: u32) -> Child {
    Command::new(roger)
        .current_dir(dir)
        .env("SYNC", sync)
        .env("K", k.to_string())
        .env("N", n.to_string())
        .env("RUST_LOG", "roger=warn")
        .args(["--config", "roger.toml", "watch", "--", "sh", "-c", TRAIN])
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("watch.err"))
                .unwrap(),
        )
        .spawn()
        .expect("starting roger watch")
}

fn records(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("roger-ledger.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn ts(r: &serde_json::Value) -> f64 {
    chrono::DateTime::parse_from_rfc3339(r["ts"].as_str().unwrap())
        .unwrap()
        .timestamp_millis() as f64
        / 1000.0
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn steps(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("train.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn kill_tree(n: &mut Node) {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let _ = kill(Pid::from_raw(n.watch.id() as i32), Signal::SIGKILL);
    if let Ok(p) = std::fs::read_to_string(n.dir.join("child.pid")) {
        if let Ok(p) = p.trim().parse::<i32>() {
            let _ = kill(Pid::from_raw(-p), Signal::SIGKILL);
        }
    }
    let _ = n.watch.wait();
}

/// roger's own CPU (% of one core) and peak RSS (MiB) over `seconds`.
fn measure(pid: u32, seconds: f64) -> (f64, f64) {
    let ns0 = schedstat_ns(pid).expect("roger schedstat");
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let ns1 = schedstat_ns(pid).expect("roger still running");
    let wall = t0.elapsed().as_secs_f64();
    let hwm = status_kib(pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0;
    ((ns1 - ns0) as f64 / 1e9 / wall * 100.0, hwm)
}

fn main() {
    let nodes: u32 = arg("--nodes").map_or(3, |v| v.parse().unwrap());
    let seconds = arg("--seconds").map_or(60.0, |v| v.parse().unwrap());
    let interval = arg("--interval").unwrap_or_else(|| "1s".into());
    let lost = arg("--lost-after").unwrap_or_else(|| "10s".into());
    assert!(nodes >= 2, "--nodes 2 or more");
    let me = std::env::current_exe().expect("current exe");
    let roger = me.parent().unwrap().parent().unwrap().join("roger");
    assert!(
        roger.exists(),
        "{} missing: build it with --release",
        roger.display()
    );
    let root = std::env::temp_dir().join(format!("roger-bench-cluster-{}", std::process::id()));
    let store = root.join("store");
    let sync = root.join("barrier");
    std::fs::create_dir_all(&sync).unwrap();

    // 1. Overhead: the baseline (no [cluster]) and node 0 of the job, sampled at once.
    let base_dir = root.join("baseline");
    let base_sync = root.join("barrier-baseline");
    std::fs::create_dir_all(&base_dir).unwrap();
    std::fs::create_dir_all(&base_sync).unwrap();
    write_config(&base_dir, None, &interval, &lost);
    let mut base = start(&roger, &base_dir, &base_sync, 0, 1);
    let mut job: Vec<Node> = (0..nodes)
        .map(|k| {
            let dir = root.join(format!("node-{k}"));
            std::fs::create_dir_all(&dir).unwrap();
            write_config(&dir, Some((&store, k, nodes)), &interval, &lost);
            let watch = start(&roger, &dir, &sync, k, nodes);
            Node { dir, watch }
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let (pb, pj) = (base.id(), job[0].watch.id());
    let h = std::thread::spawn(move || measure(pb, seconds));
    let (job_cpu, job_rss) = measure(pj, seconds);
    let (base_cpu, base_rss) = h.join().unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(base.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = base.wait();
    let per_min = 60.0 / secs(&interval);
    println!(
        "overhead over {seconds:.0}s, sampling every {interval} ({nodes} nodes, a step every ~200 ms at a barrier):"
    );
    println!(
        "  CPU: node 0 with [cluster] {job_cpu:.3}% of one core; one watch without it {base_cpu:.3}% (ratio {:.2})",
        job_cpu / base_cpu.max(1e-9)
    );
    println!("  peak RSS: node 0 {job_rss:.1} MiB; without [cluster] {base_rss:.1} MiB");
    println!(
        "  store calls per node: {:.0}/min ({per_min:.0} samples × (1 record written + {} read + 1 verdict listing))",
        per_min * f64::from(nodes + 2),
        nodes
    );

    // 2. Detection: node 1's machine is lost.
    let l = secs(&lost);
    let i = secs(&interval);
    let killed_at = unix_now();
    kill_tree(&mut job[1]);
    println!("detection (lost_after {lost}, interval {interval}; the bound is lost_after + 2 samples = {:.1}s):", l + 2.0 * i);
    let mut verdict_at = Vec::new();
    for (k, n) in job.iter_mut().enumerate().filter(|(k, _)| *k != 1) {
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = n.watch.try_wait().unwrap() {
                break st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "node {k} never stopped"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let exited = unix_now() - killed_at;
        let recs = records(&n.dir);
        let at = |ev: &str| {
            recs.iter()
                .find(|r| r["event"] == ev && ts(r) >= killed_at - 1.0)
                .map(|r| ts(r) - killed_at)
        };
        let (named, verdict) = (at("node_lost"), at("cluster_verdict"));
        println!(
            "  node {k}: named node 1 lost after {:.2}s, verdict recorded after {:.2}s, exited {} after {exited:.2}s",
            named.unwrap_or(f64::NAN),
            verdict.unwrap_or(f64::NAN),
            st.code().map_or("by a signal".into(), |c| format!("with {c}"))
        );
        if let Some(v) = verdict {
            verdict_at.push(killed_at + v);
        }
    }

    // 3. Back to work: every node's watch again (node 1 on a "new machine": same directory).
    let restarted = unix_now();
    let before: Vec<usize> = job.iter().map(|n| steps(&n.dir)).collect();
    for (k, n) in job.iter_mut().enumerate() {
        n.watch = start(&roger, &n.dir, &sync, k as u32, nodes);
    }
    let first_verdict = verdict_at.iter().cloned().fold(f64::INFINITY, f64::min);
    println!(
        "back to work (every watch started {:.2}s after the first verdict, as a requeue would):",
        restarted - first_verdict
    );
    for (k, n) in job.iter_mut().enumerate() {
        let t0 = Instant::now();
        while steps(&n.dir) <= before[k] + 1 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "node {k} never stepped"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        println!(
            "  node {k}: stepping again {:.2}s after the first verdict ({:.2}s after its watch started)",
            unix_now() - first_verdict,
            unix_now() - restarted
        );
    }
    for n in &mut job {
        kill_tree(n);
    }
    let _ = std::fs::remove_dir_all(&root);
}
