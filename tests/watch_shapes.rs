//! The watch against real process shapes: a run whose work is all in short-lived children,
//! and a GPU reader that spawns processes (a fake `nvidia-smi` on PATH). Neither may be
//! killed as a wedge; sampling follows `interval` whatever the reader spawns. Assertions are
//! on outcomes (ledger records, states, call counts bounded by elapsed time), never durations.

use crate::util::{self, Env, Run};
use crate::watch::records;
use roger::ledger::{Kind, Record};
use std::process::Command;
use std::time::{Duration, Instant};

const BASE: &str = r#"
[run]
name = "shapes"
log = "train.jsonl"
checkpoint_dir = "ckpt"
"#;

/// `busy_cpu` is low so that a loaded test machine (a spinner getting a fifth of a core)
/// still reads as busy: these tests are about what is counted, not about the threshold.
fn config(env: &Env, gpu: &str, watch: &str) {
    env.write(
        "roger.toml",
        format!(
            "{BASE}[gpu]\n{gpu}\n[watch]\ngrace = \"2s\"\nstale = \"2s\"\ngrind_limit = \"120s\"\nbusy_cpu = 0.03\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n{watch}\n"
        ),
    );
}

/// Run `roger watch --json -- argv` to its end (killed after 120 s so a hang fails), with
/// `path` prepended to PATH when given. Returns the run and its wall time.
fn watch(env: &Env, argv: &[String], path: Option<&std::path::Path>) -> (Run, Duration) {
    let mut args = vec![
        "--config".to_string(),
        env.path("roger.toml").display().to_string(),
        "watch".into(),
        "--json".into(),
        "--".into(),
    ];
    args.extend(argv.iter().cloned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut c = env.cmd(&refs);
    c.env("ROGER_BIN", util::roger_bin())
        .env_remove("SLURM_RESTART_COUNT")
        .env("RUST_LOG", "info");
    if let Some(dir) = path {
        let old = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{}:{old}", dir.display()));
    }
    let out_path = env.path("watch.out");
    let err_path = env.path("watch.err");
    c.stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let t0 = Instant::now();
    let mut child = c.spawn().expect("spawn roger");
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let wall = t0.elapsed();
    let run = Run {
        argv: std::iter::once("roger".to_string()).chain(args).collect(),
        out: std::process::Output {
            status,
            stdout: std::fs::read(&out_path).unwrap_or_default(),
            stderr: std::fs::read(&err_path).unwrap_or_default(),
        },
        listing: util::listing(env.dir.path()),
    };
    (run, wall)
}

/// No kill record, no wedge state reported, and the watch ended with the run's exit 0.
#[track_caller]
fn never_killed(env: &Env, run: &Run) {
    let recs = records(env);
    let kills: Vec<&Record> = recs.iter().filter(|r| r.kind == Kind::Kill).collect();
    assert!(kills.is_empty(), "killed: {kills:?}\n{}", run.report());
    assert!(
        !run.stdout().contains("\"state\":\"wedge\""),
        "reported a wedge\n{}",
        run.report()
    );
    assert_eq!(run.code(), 0, "\n{}", run.report());
}

fn no_timeout(test: &str) {
    crate::util::missing(
        test,
        "sh and coreutils' `timeout`",
        "apt-get install coreutils",
    );
}

/// Whether `sh` and coreutils' `timeout` are here (they are on any Linux CI).
fn have_timeout() -> bool {
    Command::new("timeout")
        .args(["1", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn work_done_only_by_short_lived_children_is_not_idleness() {
    if !have_timeout() {
        no_timeout("work_done_only_by_short_lived_children_is_not_idleness");
        return;
    }
    let env = Env::new();
    // Children that live about one interval: each sample sees a fresh one, so the CPU summed
    // over live processes barely moves although one core is busy the whole time.
    config(
        &env,
        "source = \"none\"",
        "interval = \"300ms\"\nhysteresis = 3",
    );
    let log = env.path("train.jsonl").display().to_string();
    let script = format!(
        r#"echo '{{"step": 1, "loss": 2.0}}' >> {log}
sleep 1
echo '{{"step": 2, "loss": 1.9}}' >> {log}
i=0
while [ $i -lt 30 ]; do
  timeout 0.3 sh -c 'while :; do :; done'
  i=$((i+1))
done
echo '{{"step": 3, "loss": 1.8}}' >> {log}
"#
    );
    let (run, _) = watch(&env, &["sh".into(), "-c".into(), script], None);
    never_killed(&env, &run);
    assert!(
        env.read("train.jsonl").contains("\"step\": 3"),
        "the children's loop ran to its end\n{}",
        run.report()
    );
    // The silence was judged (past the 2 s stale limit) and judged busy: the children's
    // work was seen, not the test passing because nothing was ever judged.
    assert!(
        run.stdout().contains("\"state\":\"grind\""),
        "never judged busy\n{}",
        run.report()
    );
}

/// A fake `nvidia-smi` that appends each call to `calls.txt` and reports one idle GPU.
fn fake_smi(env: &Env) -> std::path::PathBuf {
    let calls = env.path("calls.txt").display().to_string();
    let bin = env.write(
        "bin/nvidia-smi",
        format!(
            r#"#!/bin/sh
echo "$*" >> {calls}
case "$*" in
  *--query-gpu*) echo "0, NVIDIA H100 80GB HBM3, GPU-aaaa, 1000, 81559, 0, 0, 40, 70.00, 700.00, 1980, 1980, 0x0000000000000000, 0, 0" ;;
esac
"#
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin.parent().unwrap().to_path_buf()
}

#[test]
fn a_gpu_reader_that_spawns_processes_does_not_speed_up_sampling() {
    let env = Env::new();
    let dir = fake_smi(&env);
    config(
        &env,
        "source = \"smi\"",
        "interval = \"1s\"\nhysteresis = 3",
    );
    let train = vec![
        crate::watch::fake_train().display().to_string(),
        "--log".into(),
        env.path("train.jsonl").display().to_string(),
        "--ckpt-dir".into(),
        env.path("ckpt").display().to_string(),
        "--steps".into(),
        "12".into(),
        "--step-ms".into(),
        "100".into(),
        "--save-every".into(),
        "0".into(),
        // 300 ms busy / 300 ms asleep for 8 s, silent: half a core on average.
        "--pulse-at".into(),
        "5".into(),
        "--pulse-ms".into(),
        "300".into(),
        "--pulse-for".into(),
        "8000".into(),
    ];
    let (run, wall) = watch(&env, &train, Some(&dir));
    never_killed(&env, &run);
    let calls = env.read("calls.txt").lines().count();
    let samples = run.stderr().matches("(this sample: ").count();
    // One sample per interval (each sample reads nvidia-smi twice), plus slack for the first
    // sample and the one the run's exit wakes early.
    let bound = wall.as_secs_f64() / 1.0 + 3.0;
    eprintln!(
        "{samples} samples, {calls} nvidia-smi calls in {:.1}s at interval 1s",
        wall.as_secs_f64()
    );
    assert!(
        samples as f64 <= bound && calls as f64 <= 2.0 * bound,
        "{samples} samples and {calls} nvidia-smi calls in {:.1}s at interval 1s\n{}",
        wall.as_secs_f64(),
        run.report()
    );
    assert!(calls >= 2, "the fake nvidia-smi was used\n{}", run.report());
    assert!(
        run.stdout().contains("\"state\":\"grind\""),
        "the pulses were judged busy\n{}",
        run.report()
    );
}

/// A writable cgroup2 directory for one test, killed and removed on drop.
struct TestCgroup(std::path::PathBuf);

impl TestCgroup {
    fn new(test: &str) -> Option<TestCgroup> {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mount = mounts.lines().find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            post.starts_with("cgroup2 ")
                .then(|| pre.split(' ').nth(4).map(std::path::PathBuf::from))?
        });
        let Some(mount) = mount else {
            crate::util::missing(
                test,
                "a cgroup2 mount",
                "a systemd host mounts one at /sys/fs/cgroup",
            );
            return None;
        };
        let dir = mount.join(format!("roger-{test}-{}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => Some(TestCgroup(dir)),
            Err(e) => {
                crate::util::missing(
                    test,
                    &format!("a writable cgroup2 mount ({})", mount.display()),
                    &format!(
                        "run as root outside a read-only container cgroup; creating one said: {e}"
                    ),
                );
                None
            }
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn an_attached_run_in_its_own_cgroup_is_judged_by_the_cgroups_counters() {
    let test = "own_cgroup";
    if !have_timeout() {
        no_timeout(test);
        return;
    }
    let Some(cg) = TestCgroup::new(test) else {
        return;
    };
    let env = Env::new();
    config(
        &env,
        "source = \"none\"",
        "interval = \"300ms\"\nhysteresis = 3",
    );
    let log = env.path("train.jsonl").display().to_string();
    // The run moves itself into the cgroup, then hands its work to workers orphaned out of
    // its tree (reaped by init, never seen by roger): only the cgroup knows they work.
    let script = format!(
        r#"echo $$ > {cg}/cgroup.procs
echo '{{"step": 1, "loss": 2.0}}' >> {log}
sleep 1
echo '{{"step": 2, "loss": 1.9}}' >> {log}
while :; do
  (timeout 0.3 sh -c 'while :; do :; done' &)
  sleep 0.3
done
"#,
        cg = cg.0.display()
    );
    use std::os::unix::process::CommandExt;
    let mut run = Command::new("sh")
        .arg("-c")
        .arg(script)
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = run.id().to_string();
    let args = [
        "--config",
        &env.path("roger.toml").display().to_string(),
        "watch",
        "--json",
        "--pid",
        &pid,
    ]
    .map(String::from);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out_path = env.path("watch.out");
    let err_path = env.path("watch.err");
    let mut watch = env.cmd(&refs);
    watch
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let mut watch = watch.spawn().unwrap();
    // Judged busy, then watched for longer than the wedge hysteresis (3 x 300 ms).
    let t0 = Instant::now();
    while !env.read("watch.out").contains("\"state\":\"grind\"")
        && t0.elapsed() < Duration::from_secs(60)
        && watch.try_wait().unwrap().is_none()
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(4));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = watch.wait().unwrap();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(run.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = run.wait();
    let report = Run {
        argv: std::iter::once("roger".to_string()).chain(args).collect(),
        out: std::process::Output {
            status,
            stdout: std::fs::read(&out_path).unwrap_or_default(),
            stderr: std::fs::read(&err_path).unwrap_or_default(),
        },
        listing: util::listing(env.dir.path()),
    };
    let recs = records(&env);
    assert!(
        !recs.iter().any(|r| r.kind == Kind::Kill),
        "killed\n{}",
        report.report()
    );
    assert!(
        report.stdout().contains("\"state\":\"grind\"")
            && !report.stdout().contains("\"state\":\"wedge\""),
        "not judged busy from the cgroup\n{}",
        report.report()
    );
}
