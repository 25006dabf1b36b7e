//! Tests that load the whole machine on purpose: their own test binary. Cargo runs test
//! binaries one after another, so the load here (stress-ng on every core) never overlaps the
//! integration tests, whose timings it would skew; and nothing of theirs skews it. Run with
//! everything else by `cargo test`; alone with `cargo test --test under_load`.

mod util;

#[path = "ranks/job.rs"]
mod job;

use job::{ledger, setup, stragglers, torch_ready, watch, STRAGGLER_RULE};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::Env;

/// Seconds between rank 0's first and last logged step.
fn stepped_s(env: &Env) -> f64 {
    let t: Vec<f64> = env
        .read("logs/rank0.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["t"].as_f64())
        .collect();
    match (t.first(), t.last()) {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    }
}

/// Healthy runs under a CPU hog: no straggler verdict in any. Runs go 4 at a time.
#[test]
fn healthy_runs_under_cpu_load_are_never_stragglers() {
    const TEST: &str = "healthy_runs_under_cpu_load_are_never_stragglers";
    if !torch_ready(TEST) {
        return;
    }
    let Ok(mut hog) = Command::new("stress-ng")
        .args(["--cpu", "2", "--timeout", "600s", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        util::missing(TEST, "stress-ng", "apt-get install stress-ng; .ci/run does");
        return;
    };
    let runs: usize = std::env::var("ROGER_HEALTHY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut flagged = Vec::new();
    let mut maps_seen = 0usize;
    let mut windows = 0usize;
    let t0 = Instant::now();
    for batch in (0..runs).collect::<Vec<_>>().chunks(4) {
        let results: Vec<(usize, Vec<Value>, String, i32, f64)> = std::thread::scope(|s| {
            let hs: Vec<_> = batch
                .iter()
                .map(|i| {
                    s.spawn(move || {
                        let env = setup("stale = \"60s\"", STRAGGLER_RULE);
                        let run = watch(&env, &[("RUN_S", "9")], Duration::from_secs(300));
                        (*i, ledger(&env), run.report(), run.code(), stepped_s(&env))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, recs, report, code, stepped) in results {
            assert_eq!(code, 0, "run {i}\n{report}");
            // At least 4 windows of steps: the rule (3 windows) had the chance to flag.
            assert!(
                stepped >= 8.0,
                "run {i} stepped only {stepped:.1}s\n{report}"
            );
            maps_seen += report.matches("rank(s) of world size 4").count();
            windows += (stepped / 2.0) as usize;
            let s = stragglers(&recs);
            if !s.is_empty() {
                flagged.push((i, serde_json::to_string(&s).unwrap()));
            }
        }
    }
    let _ = hog.kill();
    let _ = hog.wait();
    eprintln!(
        "{runs} healthy runs under stress-ng --cpu 2 in {:.0}s ({windows} windows of 2 s judged): {} with a straggler verdict",
        t0.elapsed().as_secs_f64(),
        flagged.len()
    );
    assert!(maps_seen >= runs, "every run's rank map was seen");
    assert!(flagged.is_empty(), "false straggler verdicts: {flagged:?}");
}
