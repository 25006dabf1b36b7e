//! `roger watch` end to end: the real binary supervising `examples/fake_train`, which publishes
//! through the real `roger publish`. Short intervals; every wait is a poll with a generous
//! deadline, and assertions are on ledger records, never on timings.

use crate::util::{self, Env, Run};
use roger::ledger::{Entry, Kind, Ledger, Record};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

static BUILD: Once = Once::new();

/// `cargo build --example fake_train` once per test binary; its path beside the roger binary.
pub(crate) fn fake_train() -> PathBuf {
    BUILD.call_once(|| {
        let st = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--example", "fake_train"])
            .current_dir(util::repo_root())
            .status()
            .expect("running cargo build --example fake_train");
        assert!(st.success(), "building fake_train failed");
    });
    let bin = util::roger_bin();
    let p = bin.parent().unwrap().join("examples").join("fake_train");
    assert!(p.exists(), "{} missing", p.display());
    p
}

const BASE: &str = r#"
[run]
name = "fake"
log = "train.jsonl"
checkpoint_dir = "ckpt"
[publish]
keep_last = 20
[gpu]
source = "none"
"#;

/// A config with `[watch]` test timings plus `extra` lines in `[watch]`.
fn setup(env: &Env, extra: &str) {
    env.write(
        "roger.toml",
        format!(
            "{BASE}[watch]\ninterval = \"100ms\"\nhysteresis = 2\ngrace = \"2s\"\nstale = \"2s\"\ngrind_limit = \"6s\"\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n{extra}\n"
        ),
    );
}

/// fake_train's argv with the common flags.
fn train_argv(env: &Env, cues: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        fake_train().display().to_string(),
        "--log".into(),
        env.path("train.jsonl").display().to_string(),
        "--ckpt-dir".into(),
        env.path("ckpt").display().to_string(),
        "--config".into(),
        env.path("roger.toml").display().to_string(),
        "--pid-file".into(),
        env.path("pids.txt").display().to_string(),
        "--term-file".into(),
        env.path("term.txt").display().to_string(),
        "--steps".into(),
        "40".into(),
        "--save-every".into(),
        "10".into(),
    ];
    v.extend(cues.iter().map(|s| s.to_string()));
    v
}

pub(crate) fn roger(env: &Env, args: &[String]) -> Command {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut c = env.cmd(&refs);
    c.env("ROGER_BIN", util::roger_bin())
        .env_remove("SLURM_RESTART_COUNT");
    c
}

/// Run to completion (killed after 90 s so a hang fails instead of blocking the suite).
fn finish(env: &Env, mut c: Command, args: &[String]) -> Run {
    let out_path = env.path("watch.out");
    let err_path = env.path("watch.err");
    c.stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let mut child = c.spawn().expect("spawn roger");
    let status = wait_child(&mut child, Duration::from_secs(90));
    Run {
        argv: std::iter::once("roger".to_string())
            .chain(args.iter().cloned())
            .collect(),
        out: std::process::Output {
            status,
            stdout: std::fs::read(&out_path).unwrap_or_default(),
            stderr: std::fs::read(&err_path).unwrap_or_default(),
        },
        listing: util::listing(env.dir.path()),
    }
}

pub(crate) fn wait_child(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            return child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn watch_args(env: &Env, pre: &[&str], train: Vec<String>) -> Vec<String> {
    let mut v = vec![
        "--config".to_string(),
        env.path("roger.toml").display().to_string(),
        "watch".into(),
    ];
    v.extend(pre.iter().map(|s| s.to_string()));
    v.push("--".into());
    v.extend(train);
    v
}

pub(crate) fn records(env: &Env) -> Vec<Record> {
    Ledger::new(env.path("roger-ledger.jsonl"))
        .records()
        .unwrap()
}

pub(crate) fn of(recs: &[Record], kind: Kind) -> Vec<&Record> {
    recs.iter().filter(|r| r.kind == kind).collect()
}

pub(crate) fn event<'a>(recs: &'a [Record], name: &str) -> Vec<&'a Record> {
    recs.iter()
        .filter(|r| r.kind == Kind::Watch && r.str_field("event") == Some(name))
        .collect()
}

pub(crate) fn pids(env: &Env) -> Vec<u32> {
    env.read("pids.txt")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit(')').next().unwrap_or("").split_whitespace().next();
            !matches!(state, Some("Z") | Some("X"))
        })
        .unwrap_or(false)
}

fn steps_logged(env: &Env) -> Vec<u64> {
    env.read("train.jsonl")
        .lines()
        .filter_map(|l| {
            let at = l.find("\"step\": ")? + 8;
            l[at..].split(',').next()?.trim().parse().ok()
        })
        .collect()
}

pub(crate) fn poll_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(30));
    }
}

#[test]
fn wedge_is_killed_after_its_record_and_resumes_from_the_last_good_checkpoint() {
    let env = Env::new();
    setup(
        &env,
        "evidence_hook = [\"sh\", \"-c\", \"echo stack of {pid}\"]",
    );
    let args = watch_args(&env, &["--json"], train_argv(&env, &["--wedge-at", "25"]));
    let run = finish(&env, roger(&env, &args), &args).expect(0);
    let recs = records(&env);
    let kill = of(&recs, Kind::Kill);
    let kill = kill
        .iter()
        .find(|k| k.str_field("reason") == Some("wedge"))
        .unwrap_or_else(|| panic!("no wedge kill\n{}", run.report()));
    let relaunch = of(&recs, Kind::Relaunch)[0];
    assert!(kill.seq < relaunch.seq, "{}", run.report());
    // The record was on disk before the signal: the child saw SIGTERM after the record's time.
    let term_ms: i64 = env.read("term.txt").trim().parse().expect("term.txt");
    assert!(kill.ts.timestamp_millis() <= term_ms, "{}", run.report());
    assert!(kill.get("samples").is_some() && kill.get("limit").is_some());
    // The evidence hook ran before the kill; its output sits beside the ledger.
    let evidence = PathBuf::from(kill.str_field("evidence").expect("evidence path"));
    assert!(evidence.starts_with(env.path("roger-evidence")));
    let text = std::fs::read_to_string(&evidence).unwrap();
    assert!(
        text.contains(&format!("stack of {}", pids(&env)[0])),
        "{text}"
    );
    // Resumed from the newest checkpoint published before the kill.
    let last_pub = of(&recs, Kind::Publish)
        .into_iter()
        .rev()
        .find(|p| p.seq < kill.seq)
        .unwrap();
    assert_eq!(relaunch.u64_field("ckpt_step"), last_pub.step);
    assert_eq!(last_pub.step, Some(20), "{}", run.report());
    let steps = steps_logged(&env);
    let wedge_pos = steps.iter().position(|&s| s == 24).unwrap();
    assert_eq!(steps[wedge_pos + 1], 21, "the relaunch resumed at step 20");
    assert_eq!(*steps.last().unwrap(), 40);
    run.stdout_has("\"event\":\"kill\"")
        .stdout_has("\"event\":\"relaunch\"")
        .stdout_has("\"state\":\"wedge\"");
}

#[test]
fn a_grind_within_its_limit_is_left_alone() {
    let env = Env::new();
    // A low busy threshold: on a loaded 2-core machine the busy loop got 8-10% of a core.
    setup(&env, "busy_cpu = 0.03");
    // 4 s of busy loop with nothing logged: past the 2 s stale limit, inside the 6 s grind limit.
    let args = watch_args(
        &env,
        &["--json"],
        train_argv(&env, &["--grind-at", "15", "--grind-ms", "4000"]),
    );
    let run = finish(&env, roger(&env, &args), &args).expect(0);
    let recs = records(&env);
    assert!(of(&recs, Kind::Kill).is_empty(), "{}", run.report());
    assert!(of(&recs, Kind::Relaunch).is_empty());
    run.stdout_has("\"state\":\"grind\"");
}

#[test]
fn a_sigterm_ignoring_run_is_sigkilled_after_the_grace() {
    let env = Env::new();
    setup(&env, "");
    let args = watch_args(
        &env,
        &[],
        train_argv(&env, &["--wedge-at", "12", "--ignore-term"]),
    );
    let run = finish(&env, roger(&env, &args), &args).expect(0);
    let recs = records(&env);
    let first = pids(&env)[0];
    let stopped = event(&recs, "stopped");
    let s = stopped[0];
    let list = |k: &str| -> Vec<u64> {
        s.get(k)
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
            .unwrap_or_default()
    };
    assert_eq!(list("sigterm"), vec![first as u64], "{}", run.report());
    assert_eq!(list("sigkill"), vec![first as u64], "{}", run.report());
    assert!(
        s.get("took_s").unwrap().as_f64().unwrap() >= 2.0,
        "grace honoured"
    );
    assert!(env.read("term.txt").is_empty(), "SIGTERM was ignored");
    assert!(!alive(first));
}

#[test]
fn a_leftover_child_is_cleaned_before_the_relaunch() {
    let env = Env::new();
    setup(&env, "");
    let child_file = env.path("child.pid").display().to_string();
    let args = watch_args(
        &env,
        &[],
        train_argv(&env, &["--crash-at", "15", "--leave-child", &child_file]),
    );
    let run = finish(&env, roger(&env, &args), &args).expect(0);
    let child: u64 = env.read("child.pid").trim().parse().unwrap();
    let recs = records(&env);
    let kill = of(&recs, Kind::Kill)
        .into_iter()
        .find(|k| k.str_field("reason") == Some("zombie"))
        .unwrap_or_else(|| panic!("no zombie kill\n{}", run.report()));
    let targets: Vec<u64> = kill
        .get("targets")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.get("pid").and_then(|p| p.as_u64()))
        .collect();
    assert!(targets.contains(&child), "{}", run.report());
    let relaunch = of(&recs, Kind::Relaunch)[0];
    assert!(kill.seq < relaunch.seq);
    let exited = event(&recs, "exited")[0];
    assert_eq!(exited.get("code").and_then(|c| c.as_i64()), Some(3));
    assert!(exited.seq < relaunch.seq);
    assert!(!alive(child as u32), "the leftover is gone");
}

#[test]
fn exit_0_ends_the_watch_without_a_relaunch() {
    let env = Env::new();
    setup(&env, "");
    let args = watch_args(&env, &[], train_argv(&env, &[]));
    let run = finish(&env, roger(&env, &args), &args)
        .expect(0)
        .stdout_has("done (0): the run exited 0");
    let recs = records(&env);
    assert!(of(&recs, Kind::Relaunch).is_empty(), "{}", run.report());
    assert!(of(&recs, Kind::Kill).is_empty());
    assert_eq!(event(&recs, "done").len(), 1);
    assert_eq!(
        of(&recs, Kind::Publish).len(),
        4,
        "published via roger publish"
    );
}

#[test]
fn dry_run_records_but_never_signals() {
    let env = Env::new();
    setup(&env, "");
    let args = watch_args(
        &env,
        &["--dry-run"],
        train_argv(&env, &["--wedge-at", "12", "--wedge-ms", "4000"]),
    );
    let run = finish(&env, roger(&env, &args), &args).expect(0);
    let recs = records(&env);
    let kills = of(&recs, Kind::Kill);
    assert_eq!(kills.len(), 1, "{}", run.report());
    assert_eq!(
        kills[0].get("dry_run").and_then(|v| v.as_bool()),
        Some(true)
    );
    assert!(event(&recs, "stopped").is_empty());
    assert!(of(&recs, Kind::Relaunch).is_empty());
    assert!(
        env.read("term.txt").is_empty(),
        "no SIGTERM reached the run"
    );
    assert_eq!(pids(&env).len(), 1);
    assert_eq!(*steps_logged(&env).last().unwrap(), 40);
}

#[test]
fn attach_to_a_run_started_elsewhere_then_relaunch_it() {
    let env = Env::new();
    // The relaunch command comes from [watch] command (no cue: relaunches resume).
    let cmd: Vec<String> = train_argv(&env, &[]);
    let toml_list = format!(
        "command = [{}]",
        cmd.iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    setup(&env, &toml_list);
    let argv = train_argv(&env, &["--wedge-at", "15"]);
    let mut started = Command::new(&argv[0])
        .args(&argv[1..])
        .env("ROGER_BIN", util::roger_bin())
        .env_remove("ROGER_RESUME_CKPT")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = started.id();
    let args = vec![
        "--config".to_string(),
        env.path("roger.toml").display().to_string(),
        "watch".into(),
        "--pid".into(),
        pid.to_string(),
    ];
    let run = finish(&env, roger(&env, &args), &args);
    let _ = started.wait();
    let run = run.expect(0).stdout_has("attached to run 'fake'");
    let recs = records(&env);
    let kill = of(&recs, Kind::Kill)[0];
    assert_eq!(kill.u64_field("pid"), Some(pid as u64), "{}", run.report());
    assert_eq!(event(&recs, "start")[0].str_field("mode"), Some("attach"));
    assert_eq!(
        of(&recs, Kind::Relaunch)[0].u64_field("ckpt_step"),
        Some(10)
    );
    assert_eq!(*steps_logged(&env).last().unwrap(), 40);
}

#[test]
fn a_critic_fail_rolls_back_to_a_checkpoint_before_the_divergence() {
    let env = Env::new();
    setup(&env, "rollback_on = [\"loss\"]\nrollback_margin_steps = 5");
    let mut train = train_argv(&env, &[]);
    let n = train.iter().position(|a| a == "--steps").unwrap();
    train[n + 1] = "90".into();
    let args = watch_args(&env, &[], train);
    let mut c = roger(&env, &args);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let ledger = Ledger::new(env.path("roger-ledger.jsonl"));
    poll_until("a checkpoint at step 30", Duration::from_secs(60), || {
        ledger
            .records()
            .unwrap()
            .iter()
            .any(|r| r.kind == Kind::Publish && r.step == Some(30))
    });
    let check = serde_json::json!([{
        "check": "loss", "status": "fail", "observed": "NaN", "expected": "finite",
        "reason": "loss is NaN", "diverged_at": 25
    }]);
    ledger
        .append(
            Entry::new(Kind::Verdict, "critic", "fake")
                .step(Some(30))
                .field("status", "fail")
                .field("checks", check),
            chrono::Utc::now(),
        )
        .unwrap();
    let status = wait_child(&mut child, Duration::from_secs(90));
    assert_eq!(status.code(), Some(0), "{}", util::listing(env.dir.path()));
    let recs = records(&env);
    let kill = of(&recs, Kind::Kill)[0];
    assert_eq!(kill.str_field("reason"), Some("divergence"));
    let relaunch = of(&recs, Kind::Relaunch)[0];
    assert!(kill.seq < relaunch.seq);
    assert_eq!(relaunch.u64_field("diverged_at"), Some(25));
    // Strictly before 25 - 5 = 20: the checkpoint at step 10.
    assert_eq!(relaunch.u64_field("ckpt_step"), Some(10));
}

#[test]
fn roger_survives_sighup_and_forwards_sigterm() {
    let env = Env::new();
    setup(&env, "");
    let mut train = train_argv(&env, &[]);
    let n = train.iter().position(|a| a == "--steps").unwrap();
    train[n + 1] = "100000".into();
    let args = watch_args(&env, &[], train);
    let mut c = roger(&env, &args);
    let stderr = std::fs::File::create(env.dir.path().join("watch.err")).unwrap();
    c.stdout(Stdio::null()).stderr(stderr);
    let mut child = c.spawn().unwrap();
    poll_until("the run to log", Duration::from_secs(60), || {
        steps_logged(&env).len() > 5
    });
    let me = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(me, nix::sys::signal::Signal::SIGHUP).unwrap();
    // The warning goes through the deferred log subscriber, built by this first event.
    poll_until(
        "the SIGHUP warning on stderr",
        Duration::from_secs(30),
        || {
            let err = env.read("watch.err");
            err.lines().any(|l| {
                l.contains(" WARN ") && l.ends_with("SIGHUP received: roger keeps watching")
            })
        },
    );
    let n = steps_logged(&env).len();
    poll_until("more steps after SIGHUP", Duration::from_secs(60), || {
        steps_logged(&env).len() > n + 5
    });
    assert!(child.try_wait().unwrap().is_none(), "roger survived SIGHUP");
    nix::sys::signal::kill(me, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = wait_child(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(1));
    let recs = records(&env);
    let sig = event(&recs, "signal")[0];
    assert_eq!(sig.str_field("signal"), Some("SIGTERM"));
    assert!(!env.read("term.txt").is_empty(), "the run got the SIGTERM");
    assert!(!alive(pids(&env)[0]));
}

#[test]
fn watch_needs_something_to_watch() {
    let env = Env::new();
    setup(&env, "");
    env.run(&["watch"]).expect(1).stderr_has("nothing to watch");
    env.run(&["watch", "--pid", "999999999"])
        .expect(1)
        .stderr_has("no process with pid");
}

/// A GPU recording with one GPU at `util`% drawing `power` of a 700 W limit.
fn gpu_recording(env: &Env, util: u32, power: f64) {
    env.write(
        "gpu.json",
        format!(
            r#"{{"snapshots": [{{"gpus": [{{"index": 0, "name": "NVIDIA H100", "uuid": "GPU-0",
                "util": {util}, "power_w": {power}, "power_limit_w": 700.0}}],
                "processes": [], "source": "nvml"}}]}}"#
        ),
    );
    let toml = env.read("roger.toml").replace(
        "source = \"none\"",
        "source = \"replay\"\nreplay = \"gpu.json\"",
    );
    env.write("roger.toml", toml);
}

#[test]
fn a_silent_run_on_a_hot_gpu_is_grind_until_the_grind_limit() {
    let env = Env::new();
    setup(&env, "grind_limit = \"4s\"");
    let toml = env.read("roger.toml").replace("grind_limit = \"6s\"\n", "");
    env.write("roger.toml", toml);
    gpu_recording(&env, 99, 520.0);
    let args = watch_args(&env, &["--json"], train_argv(&env, &["--wedge-at", "12"]));
    let run = finish(&env, roger(&env, &args), &args).expect(0);
    let recs = records(&env);
    let kill = of(&recs, Kind::Kill)[0];
    let reasons = kill.get("reasons").unwrap().to_string();
    assert!(reasons.contains("past the grind limit"), "{}", run.report());
    assert!(reasons.contains("GPU at 99%"), "{reasons}");
    run.stdout_has("\"state\":\"grind\"");
}

#[test]
fn an_nccl_style_hang_pinned_gpu_at_low_power_is_a_wedge() {
    let env = Env::new();
    setup(&env, "");
    gpu_recording(&env, 100, 90.0);
    let args = watch_args(&env, &["--json"], train_argv(&env, &["--wedge-at", "12"]));
    let run = finish(&env, roger(&env, &args), &args).expect(0);
    let recs = records(&env);
    let kill = of(&recs, Kind::Kill)[0];
    let reasons = kill.get("reasons").unwrap().to_string();
    assert!(reasons.contains("NCCL-style hang"), "{}", run.report());
    assert!(
        !reasons.contains("grind limit") && reasons.contains("idle"),
        "a spin is not work: no grind allowance\n{reasons}"
    );
}

#[test]
fn slurm_requeues_count_against_the_relaunch_budget() {
    let env = Env::new();
    setup(&env, "max_relaunches = 2");
    let args = watch_args(&env, &[], train_argv(&env, &["--crash-at", "15"]));
    let mut c = roger(&env, &args);
    c.env("SLURM_RESTART_COUNT", "2");
    let run = finish(&env, c, &args).expect(75);
    let recs = records(&env);
    let b = of(&recs, Kind::Breaker);
    assert_eq!(
        b[0].str_field("breaker"),
        Some("budget"),
        "{}",
        run.report()
    );
    assert!(b[0]
        .str_field("evidence")
        .unwrap()
        .contains("2 by SLURM requeue"));
    assert!(of(&recs, Kind::Relaunch).is_empty());
    assert_eq!(
        event(&recs, "start")[0].u64_field("slurm_restart_count"),
        Some(2)
    );
}

#[test]
fn vram_held_by_another_process_stops_the_relaunch_when_configured() {
    let env = Env::new();
    setup(
        &env,
        "on_foreign_vram = \"stop\"\ngpu_release_timeout = \"300ms\"",
    );
    // First reading: the driver lists no processes (every GPU is the run's); from then on a
    // process outside the run holds 20 GiB on GPU 0.
    env.write(
        "gpu.json",
        r#"{"snapshots": [
            {"gpus": [{"index": 0, "name": "NVIDIA H100", "uuid": "GPU-0", "util": 0}], "processes": [], "source": "nvml"},
            {"gpus": [{"index": 0, "name": "NVIDIA H100", "uuid": "GPU-0", "util": 0}],
             "processes": [{"pid": 4000000, "gpu": 0, "used_memory": 21474836480}], "source": "nvml"}
        ]}"#,
    );
    let toml = env.read("roger.toml").replace(
        "source = \"none\"",
        "source = \"replay\"\nreplay = \"gpu.json\"",
    );
    env.write("roger.toml", toml);
    let args = watch_args(&env, &[], train_argv(&env, &["--crash-at", "15"]));
    let run = finish(&env, roger(&env, &args), &args).expect(75);
    let recs = records(&env);
    let b = of(&recs, Kind::Breaker);
    assert_eq!(
        b[0].str_field("breaker"),
        Some("foreign_vram"),
        "{}",
        run.report()
    );
    assert!(b[0].str_field("evidence").unwrap().contains("[4000000]"));
    assert!(
        of(&recs, Kind::Relaunch).is_empty(),
        "no relaunch into a certain OOM"
    );
}

#[test]
fn outputs_of_a_crashed_run_are_quarantined_and_the_disk_is_checked_each_tick() {
    let env = Env::new();
    env.write(
        "roger.toml",
        format!(
            "{BASE}[quarantine]\noutputs = [\"out/eval.json\"]\n[watch]\ninterval = \"100ms\"\nhysteresis = 2\nstale = \"2s\"\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\nbreaker_crashes = 2\nbreaker_within = \"20s\"\nallow_from_scratch = true\ndisk_check = true\n"
        ),
    );
    // A run that dies halfway through writing its eval result.
    let script =
        "sleep 0.5; mkdir -p out; printf '{\"acc\": 0.71, \"n\": ' > out/eval.json; exit 3";
    let args = watch_args(&env, &[], vec!["sh".into(), "-c".into(), script.into()]);
    let run = finish(&env, roger(&env, &args), &args).expect(75);
    let recs = records(&env);
    let q = of(&recs, Kind::Quarantine);
    assert!(!q.is_empty(), "{}", run.report());
    assert!(q[0]
        .str_field("original_path")
        .unwrap()
        .ends_with("out/eval.json"));
    assert!(q[0]
        .str_field("reason")
        .unwrap()
        .contains("untrusted output"));
    let first_relaunch = of(&recs, Kind::Relaunch)[0].seq;
    assert!(q[0].seq < first_relaunch, "quarantined before the relaunch");
    let disk: Vec<&Record> = of(&recs, Kind::Hygiene)
        .into_iter()
        .filter(|r| r.str_field("check") == Some("disk"))
        .collect();
    assert_eq!(
        disk.len(),
        1,
        "one disk record: its status did not change\n{}",
        run.report()
    );
    assert!(disk[0].str_field("status").is_some());
}

/// fake_train's pid file takes one whole line per trainer even when many append at once
/// (two node-local trainers once wrote "2968929690": a number and its newline were two
/// writes, interleaved under load).
#[test]
fn trainers_starting_together_each_append_a_whole_pid_line() {
    let env = Env::new();
    env.write("roger.toml", BASE);
    let n = 24;
    let kids: Vec<Child> = (0..n)
        .map(|i| {
            Command::new(fake_train())
                .args(["--log"])
                .arg(env.path(&format!("t{i}.jsonl")))
                .arg("--ckpt-dir")
                .arg(env.path(&format!("ck{i}")))
                .arg("--pid-file")
                .arg(env.path("pids.txt"))
                .args(["--steps", "1", "--step-ms", "1", "--no-publish"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut want: Vec<u32> = kids.iter().map(Child::id).collect();
    for mut k in kids {
        k.wait().unwrap();
    }
    let mut got = pids(&env);
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "{}", env.read("pids.txt"));
}
