//! `roger watch` across launches and lifetimes: stale verdicts after a rollback, an attached
//! run reaped by its own parent, a second watch on a live run (and after a `kill -9` of the
//! first), what reaches stderr, what a kill record names, a dry run under SIGINT, and how the
//! loop breakers count. Real binary, real `examples/fake_train` children, generous deadlines;
//! assertions are on ledger records and on which processes exist, never on timings.

use crate::util::{self, Env, Run};
use roger::ledger::{Entry, Kind, Ledger, Record};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

static BUILD: Once = Once::new();

fn fake_train() -> PathBuf {
    BUILD.call_once(|| {
        let st = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--example", "fake_train"])
            .current_dir(util::repo_root())
            .status()
            .expect("running cargo build --example fake_train");
        assert!(st.success(), "building fake_train failed");
    });
    let p = util::roger_bin()
        .parent()
        .unwrap()
        .join("examples")
        .join("fake_train");
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

/// `[schedule]` declaring the run's length: how roger tells a finished run from a crash when
/// the exit status is lost.
fn schedule(total: u64) -> String {
    format!("[schedule]\nkind = \"constant\"\npeak_lr = 0.0006\ntotal_steps = {total}\n")
}

fn setup(env: &Env, top: &str, watch: &str) {
    env.write(
        "roger.toml",
        format!(
            "{BASE}{top}[watch]\ninterval = \"100ms\"\nhysteresis = 2\ngrace = \"2s\"\nstale = \"3s\"\ngrind_limit = \"6s\"\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n{watch}\n"
        ),
    );
}

fn train_argv(env: &Env, steps: u64, step_ms: u64, cues: &[&str]) -> Vec<String> {
    let p = |r: &str| env.path(r).display().to_string();
    let mut v: Vec<String> = vec![
        fake_train().display().to_string(),
        "--log".into(),
        p("train.jsonl"),
        "--ckpt-dir".into(),
        p("ckpt"),
        "--config".into(),
        p("roger.toml"),
        "--pid-file".into(),
        p("pids.txt"),
        "--term-file".into(),
        p("term.txt"),
        "--steps".into(),
        steps.to_string(),
        "--step-ms".into(),
        step_ms.to_string(),
        "--save-every".into(),
        "10".into(),
    ];
    v.extend(cues.iter().map(|s| s.to_string()));
    v
}

/// `command = [...]` for `[watch]`.
fn command_line(argv: &[String]) -> String {
    format!(
        "command = [{}]",
        argv.iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn watch_args(env: &Env, pre: &[&str], train: Vec<String>) -> Vec<String> {
    let mut v = vec![
        "--config".to_string(),
        env.path("roger.toml").display().to_string(),
        "watch".into(),
    ];
    v.extend(pre.iter().map(|s| s.to_string()));
    if !train.is_empty() {
        v.push("--".into());
        v.extend(train);
    }
    v
}

fn roger(env: &Env, args: &[String]) -> Command {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut c = env.cmd(&refs);
    c.env("ROGER_BIN", util::roger_bin())
        .env_remove("SLURM_RESTART_COUNT");
    c
}

/// Start roger with stdout and stderr in files named after `tag`.
fn spawn(env: &Env, mut c: Command, tag: &str) -> Child {
    c.stdout(std::fs::File::create(env.path(&format!("{tag}.out"))).unwrap())
        .stderr(std::fs::File::create(env.path(&format!("{tag}.err"))).unwrap());
    c.spawn().expect("spawn roger")
}

/// Wait for a started roger (killed after `limit` so a hang fails instead of blocking).
fn collect(env: &Env, mut child: Child, tag: &str, args: &[String], limit: Duration) -> Run {
    let status = wait_child(&mut child, limit);
    Run {
        argv: std::iter::once("roger".to_string())
            .chain(args.iter().cloned())
            .collect(),
        out: std::process::Output {
            status,
            stdout: std::fs::read(env.path(&format!("{tag}.out"))).unwrap_or_default(),
            stderr: std::fs::read(env.path(&format!("{tag}.err"))).unwrap_or_default(),
        },
        listing: util::listing(env.dir.path()),
    }
}

fn finish(env: &Env, c: Command, args: &[String]) -> Run {
    let child = spawn(env, c, "watch");
    collect(env, child, "watch", args, Duration::from_secs(90))
}

fn wait_child(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
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

fn ledger(env: &Env) -> Ledger {
    Ledger::new(env.path("roger-ledger.jsonl"))
}

fn records(env: &Env) -> Vec<Record> {
    ledger(env).records().unwrap()
}

fn of(recs: &[Record], kind: Kind) -> Vec<&Record> {
    recs.iter().filter(|r| r.kind == kind).collect()
}

fn event<'a>(recs: &'a [Record], name: &str) -> Vec<&'a Record> {
    recs.iter()
        .filter(|r| r.kind == Kind::Watch && r.str_field("event") == Some(name))
        .collect()
}

fn pids(env: &Env) -> Vec<u32> {
    env.read("pids.txt")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit(')').next().unwrap_or("").split_whitespace().next();
            !matches!(state, Some("Z") | Some("X"))
        })
        .unwrap_or(false)
}

fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}

/// (step, the line's own time) for every line of the log.
fn log_lines(env: &Env) -> Vec<(u64, f64)> {
    env.read("train.jsonl")
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some((v["step"].as_u64()?, v["time"].as_f64()?))
        })
        .collect()
}

fn steps_logged(env: &Env) -> Vec<u64> {
    log_lines(env).into_iter().map(|(s, _)| s).collect()
}

fn poll_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// A critic `fail` verdict on the loss at `step` (diverged at `diverged_at`), observing data
/// whose newest sample was logged at `sampled_at` (when it says), the way `roger critic`
/// files one.
fn file_loss_fail(env: &Env, step: u64, diverged_at: u64, sampled_at: Option<f64>) -> Record {
    let check = serde_json::json!([{
        "check": "loss", "status": "fail", "observed": "NaN", "expected": "finite",
        "reason": "loss is NaN", "diverged_at": diverged_at
    }]);
    let mut e = Entry::new(Kind::Verdict, "critic", "fake")
        .step(Some(step))
        .field("status", "fail")
        .field("checks", check);
    if let Some(t) = sampled_at {
        e = e.field(
            "observation",
            serde_json::json!({"step": step, "last_sample_at": t}),
        );
    }
    ledger(env).append(e, chrono::Utc::now()).unwrap()
}

/// Item 3: after a rollback, a critic still reading the dead run's data files another fail
/// about a step the new launch has not produced — once while roger backs off (the new launch's
/// first tick then sees the dead run's last step in the log), and twice after the launch (with
/// the dead run's sample time, and with no time at all). The new launch, loading for 1.5 s
/// before its first step, must not be killed for any of them.
#[test]
fn a_stale_verdict_after_a_rollback_does_not_kill_the_relaunched_run() {
    let env = Env::new();
    setup(
        &env,
        "",
        "rollback_on = [\"loss\"]\nrollback_margin_steps = 5",
    );
    let toml = env
        .read("roger.toml")
        .replace("backoff_initial = \"100ms\"", "backoff_initial = \"1s\"")
        .replace("backoff_max = \"200ms\"", "backoff_max = \"1s\"");
    env.write("roger.toml", toml);
    let args = watch_args(
        &env,
        &[],
        train_argv(&env, 70, 100, &["--start-ms", "1500"]),
    );
    let child = spawn(&env, roger(&env, &args), "watch");
    let l = ledger(&env);
    poll_until("a checkpoint at step 30", Duration::from_secs(60), || {
        l.records()
            .unwrap()
            .iter()
            .any(|r| r.kind == Kind::Publish && r.step == Some(30))
    });
    let at30 = log_lines(&env)
        .into_iter()
        .find(|(s, _)| *s == 30)
        .unwrap()
        .1;
    let first = file_loss_fail(&env, 30, 25, Some(at30));
    poll_until("the relaunch record", Duration::from_secs(60), || {
        !of(&l.records().unwrap(), Kind::Relaunch).is_empty()
    });
    // The critic, still behind, files the same failure again: about the dead run's step 30.
    let stale = file_loss_fail(&env, 30, 25, Some(at30));
    poll_until("the relaunched run", Duration::from_secs(60), || {
        !event(&l.records().unwrap(), "launched").is_empty()
    });
    let staler = file_loss_fail(&env, 30, 25, Some(at30));
    let timeless = file_loss_fail(&env, 30, 25, None);
    let run = collect(&env, child, "watch", &args, Duration::from_secs(90)).expect(0);
    let recs = records(&env);
    let kills: Vec<&Record> = of(&recs, Kind::Kill)
        .into_iter()
        .filter(|k| k.str_field("reason") == Some("divergence"))
        .collect();
    assert_eq!(kills.len(), 1, "only the real divergence\n{}", run.report());
    assert!(kills[0].seq > first.seq && kills[0].seq < stale.seq);
    assert_eq!(of(&recs, Kind::Relaunch).len(), 1, "{}", run.report());
    assert_eq!(pids(&env).len(), 2);
    assert_eq!(*steps_logged(&env).last().unwrap(), 70);
    // The ignored verdicts are accounted for, with why.
    let ignored = event(&recs, "verdict_ignored");
    for v in [&stale, &staler, &timeless] {
        assert!(
            ignored
                .iter()
                .any(|r| r.u64_field("verdict_seq") == Some(v.seq)),
            "verdict #{} not accounted for\n{}",
            v.seq,
            run.report()
        );
    }
}

/// Starts `shell` (a `bash -c` / `nohup` wrapper whose own process reaps the trainer), waits
/// for the trainer's pid, and watches it with `--pid`.
fn watch_reaped_by_parent(env: &Env, shell: &[String]) -> (Run, Child) {
    let mut wrapper = Command::new(&shell[0])
        .args(&shell[1..])
        .env("ROGER_BIN", util::roger_bin())
        .env_remove("ROGER_RESUME_CKPT")
        .env_remove("ROGER_CONFIG")
        .current_dir(env.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    poll_until("the trainer's pid", Duration::from_secs(30), || {
        !pids(env).is_empty()
    });
    let pid = pids(env)[0];
    let args = vec![
        "--config".to_string(),
        env.path("roger.toml").display().to_string(),
        "watch".into(),
        "--pid".into(),
        pid.to_string(),
    ];
    let run = finish(env, roger(env, &args), &args);
    let _ = wait_child(&mut wrapper, Duration::from_secs(30));
    (run, wrapper)
}

fn shell_quote(argv: &[String]) -> String {
    argv.iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Item 4 and the class test: a run under `bash -c` / `nohup` whose parent reaps it. roger
/// sees no exit status; the log reached total_steps, so the run finished: never relaunched.
#[test]
fn an_attached_run_reaped_by_its_parent_after_finishing_is_not_relaunched() {
    type Wrap = fn(&str) -> Vec<String>;
    let wrappers: [(&str, Wrap); 2] = [
        ("bash -c", |t| {
            vec!["bash".into(), "-c".into(), format!("{t}; echo finished")]
        }),
        ("nohup", |t| {
            vec![
                "sh".into(),
                "-c".into(),
                format!("nohup {t} >/dev/null 2>&1 & wait"),
            ]
        }),
    ];
    for (name, wrap) in wrappers {
        let env = Env::new();
        let train = train_argv(&env, 40, 100, &[]);
        setup(&env, &schedule(40), &command_line(&train));
        let (run, _) = watch_reaped_by_parent(&env, &wrap(&shell_quote(&train)));
        let run = run.expect(0);
        let recs = records(&env);
        assert!(
            of(&recs, Kind::Relaunch).is_empty(),
            "{name}: a finished run was relaunched\n{}",
            run.report()
        );
        assert_eq!(pids(&env).len(), 1, "{name}: one trainer\n{}", run.report());
        let exited = event(&recs, "exited");
        assert_eq!(exited.len(), 1, "{name}\n{}", run.report());
        assert_eq!(exited[0].get("exit_status_known"), Some(&false.into()));
        let done = event(&recs, "done");
        let reason = done[0].str_field("reason").unwrap();
        assert!(
            reason.contains("exit status unknown") && reason.contains("total_steps = 40"),
            "{name}: {reason}"
        );
    }
}

/// Item 4, the other side: reaped by its parent *before* total_steps is a crash, relaunched.
#[test]
fn an_attached_run_reaped_by_its_parent_before_total_steps_is_relaunched() {
    let env = Env::new();
    let train = train_argv(&env, 40, 60, &[]);
    setup(&env, &schedule(40), &command_line(&train));
    let mut first = train.clone();
    first.extend(["--crash-at".to_string(), "15".to_string()]);
    let shell = vec![
        "bash".to_string(),
        "-c".into(),
        format!("{}; echo crashed", shell_quote(&first)),
    ];
    let (run, _) = watch_reaped_by_parent(&env, &shell);
    let run = run.expect(0);
    let recs = records(&env);
    assert_eq!(of(&recs, Kind::Relaunch).len(), 1, "{}", run.report());
    let exited = event(&recs, "exited");
    assert_eq!(exited[0].get("exit_status_known"), Some(&false.into()));
    assert!(exited[0]
        .str_field("judged")
        .unwrap()
        .contains("short of total_steps = 40"));
    assert_eq!(*steps_logged(&env).last().unwrap(), 40);
}

/// Item 10 and the class test: a second `roger watch` on a run that already has a live watch
/// is refused (the per-run lock) and never starts a second trainer.
#[test]
fn a_second_watch_on_a_live_watch_is_refused_and_starts_no_trainer() {
    let env = Env::new();
    setup(&env, "", "");
    let args = watch_args(&env, &[], train_argv(&env, 100_000, 50, &[]));
    let mut first = spawn(&env, roger(&env, &args), "first");
    poll_until("the run to log", Duration::from_secs(60), || {
        steps_logged(&env).len() > 3
    });
    let second = spawn(&env, roger(&env, &args), "second");
    // Old roger started a second trainer here; give it every chance to.
    let mut second = second;
    let t0 = Instant::now();
    while second.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(20) {
        if pids(&env).len() > 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let trainers = pids(&env);
    let run = collect(&env, second, "second", &args, Duration::from_secs(5));
    signal(first.id(), nix::sys::signal::Signal::SIGTERM);
    wait_child(&mut first, Duration::from_secs(30));
    for p in &trainers {
        signal(*p, nix::sys::signal::Signal::SIGKILL);
    }
    assert_eq!(trainers.len(), 1, "a second trainer\n{}", run.report());
    run.expect(1).stderr_has("another roger watch");
}

/// Item 10: `kill -9` of the watch leaves its trainer running; the next `roger watch` with the
/// same config and command attaches to that trainer (and says so) instead of starting another.
#[test]
fn a_watch_restarted_after_kill_9_attaches_to_the_live_trainer() {
    let env = Env::new();
    setup(&env, &schedule(60), "");
    let args = watch_args(&env, &[], train_argv(&env, 60, 100, &[]));
    let mut first = spawn(&env, roger(&env, &args), "first");
    poll_until("the run to log", Duration::from_secs(60), || {
        steps_logged(&env).len() > 5
    });
    signal(first.id(), nix::sys::signal::Signal::SIGKILL);
    wait_child(&mut first, Duration::from_secs(30));
    let trainer = pids(&env)[0];
    assert!(
        alive(trainer),
        "the trainer outlives a kill -9 of its watch"
    );
    let run = finish(&env, roger(&env, &args), &args);
    let trainers = pids(&env);
    for p in &trainers {
        signal(*p, nix::sys::signal::Signal::SIGKILL);
    }
    assert_eq!(trainers, vec![trainer], "one trainer\n{}", run.report());
    let run = run
        .expect(0)
        .stderr_has("attaching to it instead of starting another");
    let recs = records(&env);
    let adopted = event(&recs, "adopted");
    assert_eq!(adopted.len(), 1, "{}", run.report());
    assert_eq!(adopted[0].u64_field("pid"), Some(trainer as u64));
    let steps = steps_logged(&env);
    assert!(
        steps.windows(2).all(|w| w[1] == w[0] + 1),
        "no rewinds: one copy of the run"
    );
    assert_eq!(*steps.last().unwrap(), 60);
    assert!(of(&recs, Kind::Relaunch).is_empty());
}

/// Item 14: with stdout discarded (`nohup roger watch ... >/dev/null`), the breaker's reason
/// and the final `done (75)` still reach stderr.
#[test]
fn a_breaker_and_its_done_line_reach_stderr() {
    let env = Env::new();
    setup(&env, "", "breaker_crashes = 2\nbreaker_within = \"20s\"");
    let args = watch_args(
        &env,
        &[],
        train_argv(&env, 40, 30, &["--crash-at", "15", "--crash-on-resume"]),
    );
    let mut c = roger(&env, &args);
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let mut child = c.spawn().unwrap();
    let status = wait_child(&mut child, Duration::from_secs(90));
    let err = env.read("watch.err");
    assert_eq!(status.code(), Some(75), "{err}");
    assert!(err.contains("breaker crash_loop open"), "{err}");
    assert!(err.contains("done (75): breaker open: crash_loop"), "{err}");
}

/// Item 15: a divergence kill names the check, the step and the verdict's seq — in the record's
/// `reasons` and on stderr — instead of the sentinel's working-state words.
#[test]
fn a_divergence_kill_names_the_check_step_and_verdict() {
    let env = Env::new();
    setup(
        &env,
        "",
        "rollback_on = [\"loss\"]\nrollback_margin_steps = 5",
    );
    let args = watch_args(&env, &[], train_argv(&env, 60, 60, &[]));
    let child = spawn(&env, roger(&env, &args), "watch");
    let l = ledger(&env);
    poll_until("a checkpoint at step 30", Duration::from_secs(60), || {
        l.records()
            .unwrap()
            .iter()
            .any(|r| r.kind == Kind::Publish && r.step == Some(30))
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let v = file_loss_fail(&env, 30, 25, Some(now));
    let run = collect(&env, child, "watch", &args, Duration::from_secs(90)).expect(0);
    let recs = records(&env);
    let kill = of(&recs, Kind::Kill)[0];
    let reasons = kill.get("reasons").unwrap().to_string();
    let want = format!("critic verdict #{} failed check 'loss' at step 30", v.seq);
    assert!(reasons.contains(&want), "{reasons}\n{}", run.report());
    assert!(reasons.contains("diverged at step 25"), "{reasons}");
    assert!(!reasons.contains("new step"), "{reasons}");
    assert_eq!(kill.u64_field("verdict_seq"), Some(v.seq));
    assert_eq!(kill.str_field("check"), Some("loss"));
    run.stderr_has(&format!("kill (divergence: {want}"));
}

/// Item 16: a dry run told to stop (SIGINT) signals nothing; the run keeps going.
#[test]
fn a_dry_run_stopped_by_sigint_never_signals_the_run() {
    let env = Env::new();
    setup(&env, "", "");
    let args = watch_args(&env, &["--dry-run"], train_argv(&env, 100_000, 50, &[]));
    let mut child = spawn(&env, roger(&env, &args), "watch");
    poll_until("the run to log", Duration::from_secs(60), || {
        steps_logged(&env).len() > 3
    });
    signal(child.id(), nix::sys::signal::Signal::SIGINT);
    let status = wait_child(&mut child, Duration::from_secs(60));
    let trainer = pids(&env)[0];
    let n = steps_logged(&env).len();
    let still = alive(trainer);
    let more = {
        let t0 = Instant::now();
        while steps_logged(&env).len() <= n + 3 && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
        steps_logged(&env).len() > n + 3
    };
    signal(trainer, nix::sys::signal::Signal::SIGKILL);
    assert_eq!(status.code(), Some(1));
    assert!(
        env.read("term.txt").is_empty(),
        "the dry run sent SIGTERM to the run"
    );
    assert!(still && more, "the run kept going after the dry run ended");
    let recs = records(&env);
    let sig = event(&recs, "signal");
    assert_eq!(sig[0].get("forwarded_to"), Some(&serde_json::json!([])));
    assert!(event(&recs, "stopped").is_empty());
}

/// Item 17: a crash loop is counted over relaunches (the first launch started the relaunching,
/// it is not part of the loop) and named for what happened.
#[test]
fn a_crash_loop_counts_relaunches_and_says_so() {
    let env = Env::new();
    setup(&env, "", "breaker_crashes = 2\nbreaker_within = \"20s\"");
    let args = watch_args(
        &env,
        &[],
        train_argv(&env, 40, 30, &["--crash-at", "15", "--crash-on-resume"]),
    );
    let run = finish(&env, roger(&env, &args), &args).expect(75);
    let recs = records(&env);
    let b = of(&recs, Kind::Breaker);
    assert_eq!(b.len(), 1, "{}", run.report());
    assert_eq!(b[0].str_field("breaker"), Some("crash_loop"));
    let evidence = b[0].str_field("evidence").unwrap();
    assert!(
        evidence.contains("2 consecutive relaunches crashed"),
        "{evidence}"
    );
    assert_eq!(of(&recs, Kind::Relaunch).len(), 2, "{}", run.report());
    assert_eq!(pids(&env).len(), 3, "the first launch and two relaunches");
}

/// Item 10, the other side: the earlier watch was killed and its trainer is gone too. The next
/// watch records that the earlier one died, then starts the run (from its last checkpoint).
#[test]
fn a_watch_after_a_dead_watch_and_a_dead_trainer_records_it_and_goes_on() {
    let env = Env::new();
    setup(&env, "", "");
    let args = watch_args(&env, &[], train_argv(&env, 40, 60, &[]));
    let mut first = spawn(&env, roger(&env, &args), "first");
    let l = ledger(&env);
    poll_until("a checkpoint", Duration::from_secs(60), || {
        !of(&l.records().unwrap(), Kind::Publish).is_empty()
    });
    signal(first.id(), nix::sys::signal::Signal::SIGKILL);
    wait_child(&mut first, Duration::from_secs(30));
    let trainer = pids(&env)[0];
    signal(trainer, nix::sys::signal::Signal::SIGKILL);
    poll_until("the trainer to die", Duration::from_secs(30), || {
        !alive(trainer)
    });
    let run = finish(&env, roger(&env, &args), &args).expect(0);
    let recs = records(&env);
    let died = event(&recs, "previous_watch_died");
    assert_eq!(died.len(), 1, "{}", run.report());
    assert_eq!(died[0].u64_field("pid"), Some(trainer as u64));
    assert!(event(&recs, "adopted").is_empty());
    assert_eq!(pids(&env).len(), 2, "a new trainer, as the old one is gone");
    let run = run.stderr_has("the earlier watch of this run died");
    assert_eq!(*steps_logged(&env).last().unwrap(), 40, "{}", run.report());
}
