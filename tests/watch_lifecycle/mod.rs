//! `roger watch` across launches and lifetimes: stale verdicts after a rollback, an attached
//! run reaped by its own parent, a second watch on a live run (and after a `kill -9` of the
//! first), what reaches stderr, what a kill record names, a dry run under SIGINT, and how the
//! loop breakers count. Real binary, real `examples/fake_train` children, generous deadlines;
//! assertions are on ledger records and on which processes exist, never on timings. This file
//! is the shared harness; the tests are in the files below, by theme.

mod exits;
mod one_run;
mod stops;
mod verdicts;

use crate::util::{self, Env, Run};
pub(crate) use crate::watch::{
    alive, event, fake_train, of, pids, poll_until, records, roger, wait_child,
};
use roger::ledger::{Entry, Kind, Ledger, Record};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

fn ledger(env: &Env) -> Ledger {
    Ledger::new(env.path("roger-ledger.jsonl"))
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
