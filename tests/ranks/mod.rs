//! Many ranks, one verdict (issue 14): the real `roger watch` over a real 4-rank torchrun
//! job (CPU, gloo; tests/ranks/train_ddp.py). A rank hung before its all_reduce is named
//! with its function from stacks taken on every rank; a rank at half speed is a straggler;
//! the critic judges rank 0 and hears the others. That healthy runs under CPU load are not
//! stragglers is tested in its own binary (tests/under_load.rs), so its load overlaps no test.

pub(crate) mod job;

use crate::util::{roger_bin, Env};
use job::{ledger, setup, stragglers, torch_ready, watch, STRAGGLER_RULE};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

fn unix(ts: &str) -> f64 {
    let t = chrono::DateTime::parse_from_rfc3339(ts).unwrap();
    t.timestamp() as f64 + f64::from(t.timestamp_subsec_millis()) / 1000.0
}

#[test]
fn a_hung_rank_is_named_from_every_ranks_stack_and_the_job_resumes_whole() {
    if !torch_ready("a_hung_rank_is_named_from_every_ranks_stack_and_the_job_resumes_whole") {
        return;
    }
    // The stale limit leaves room for torchrun's own shutdown after the last step: on a loaded
    // 2-core machine it took over 6 s (2 of 6 runs), read as a wedge, and the budget ran out.
    const STALE: f64 = 12.0;
    let env = setup(
        &format!("stale = \"{STALE}s\"\ngrind_limit = \"90s\"\nmax_relaunches = 2\nhysteresis = 1"),
        "",
    );
    // Flight Recorder dumps are NCCL's (not written by gloo on CPU): stand-ins at the path
    // the ranks' environment names, to see roger collect what is there.
    let fr = env.path("fr_");
    for r in 0..4 {
        std::fs::write(format!("{}{r}", fr.display()), format!("trace of rank {r}")).unwrap();
    }
    let run = watch(
        &env,
        &[
            ("STEPS", "24"),
            ("CKPT_EVERY", "5"),
            ("HANG_RANK", "2"),
            ("HANG_AT", "13"),
            ("WORK_ITERS", "100"),
            ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", fr.to_str().unwrap()),
        ],
        Duration::from_secs(240),
    );
    let report = run.report();
    assert_eq!(run.code(), 0, "the resumed job finishes\n{report}");
    let recs = ledger(&env);
    let map = recs
        .iter()
        .find(|r| r["event"] == "ranks")
        .unwrap_or_else(|| panic!("no rank map recorded\n{report}"));
    assert_eq!(map["ranks"].as_array().unwrap().len(), 4);
    assert!(
        run.stderr()
            .contains("ranks: 4 rank(s) of world size 4: 0 pid"),
        "{report}"
    );
    let kill = recs
        .iter()
        .find(|r| r["kind"] == "kill" && r["reason"] == "wedge")
        .unwrap_or_else(|| panic!("no wedge kill\n{report}"));
    let mut shown = kill.clone();
    shown.as_object_mut().unwrap().remove("samples");
    eprintln!("kill record (samples left out): {shown}");
    // Rank 2 named, in its function; every other rank's stack in the collective.
    assert_eq!(kill["odd_ranks"], serde_json::json!([2]), "{kill:#}");
    let stacks = kill["stacks"].as_str().unwrap();
    assert!(
        stacks.starts_with("rank 2 in `slow_loader` (train_ddp.py:"),
        "{stacks}"
    );
    assert!(
        stacks.ends_with("ranks 0,1,3 in `all_reduce` (distributed_c10d.py:1541)")
            || stacks.contains("ranks 0,1,3 in `all_reduce`"),
        "{stacks}"
    );
    assert!(
        run.stderr()
            .contains("stacks of the ranks: rank 2 in `slow_loader`"),
        "{report}"
    );
    for r in 0..4 {
        let f = kill["rank_evidence"][r.to_string()].as_str().unwrap();
        let dump = std::fs::read_to_string(env.dir.path().join(f)).unwrap();
        assert!(dump.contains("MainThread"), "rank {r}'s dump kept: {dump}");
        let fr = kill["flight_recorder"][r.to_string()].as_str().unwrap();
        assert_eq!(
            std::fs::read_to_string(env.dir.path().join(fr)).unwrap(),
            format!("trace of rank {r}")
        );
    }
    // Within the stale limit plus two intervals of the hang (before the hook's own time).
    let hang: f64 = env
        .read("hang-started")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let silent = kill["silent_s"].as_f64().unwrap();
    assert!(silent <= STALE + 2.0, "silent {silent}s");
    // The kill was decided (evidence files are stamped then, before the hook runs) within
    // the stale limit plus two intervals of the hang: one interval for the sentinel to see
    // the last step, one for the sample that finds the silence past the limit.
    let file = kill["evidence"].as_str().unwrap();
    let stamp = file.rsplit('/').next().unwrap().split('-').next().unwrap();
    let decided = chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%S%.3fZ")
        .unwrap()
        .and_utc();
    let decided = decided.timestamp() as f64 + f64::from(decided.timestamp_subsec_millis()) / 1e3;
    let killed_at = unix(kill["ts"].as_str().unwrap());
    eprintln!(
        "hang → kill decided: {:.1}s, kill record written (after the hook on 5 processes): {:.1}s; silent {silent}s seen by the sentinel",
        decided - hang,
        killed_at - hang
    );
    assert!(
        decided - hang <= STALE + 2.0 + 0.3,
        "{}s from hang to kill",
        decided - hang
    );
    // All 4 ranks (and the launcher) stopped before the relaunch, none left alive.
    let ranks: Vec<u64> = kill["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["pid"].as_u64().unwrap())
        .collect();
    let stopped = recs
        .iter()
        .find(|r| r["event"] == "stopped" && r["seq"].as_u64() > kill["seq"].as_u64())
        .unwrap();
    let relaunch = recs.iter().find(|r| r["kind"] == "relaunch").unwrap();
    assert!(stopped["seq"].as_u64() < relaunch["seq"].as_u64());
    assert_eq!(stopped["survivors"], serde_json::json!([]));
    let signalled: Vec<u64> = [&stopped["sigterm"], &stopped["sigkill"]]
        .iter()
        .flat_map(|v| v.as_array().unwrap().iter().filter_map(|p| p.as_u64()))
        .collect();
    for p in &ranks {
        assert!(
            signalled.contains(p),
            "rank pid {p} not stopped: {stopped:#}"
        );
    }
    // Resumed from the last good checkpoint (step 10; rank 2 hung at 13).
    assert_eq!(relaunch["ckpt_step"], 10, "{relaunch:#}");
    let rank0 = env.read("logs/rank0.jsonl");
    let steps: Vec<u64> = rank0
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["step"].as_u64())
        .collect();
    let resumed = steps.windows(2).find(|w| w[1] <= w[0]).map(|w| w[1]);
    assert_eq!(resumed, Some(11), "{steps:?}");
    assert_eq!(steps.last(), Some(&24));
}

/// The slow rank's share of the others' speed. Not 0.7: a 30%-slower rank reads about 0.72
/// against the 0.75 threshold (the median of 4 ranks includes the slow one), 105 of its 273
/// windows were at or above 0.75 and 2 of 15 loaded runs had no verdict. At half speed: 17 of
/// 17 flagged (docs/ranks.md, "Stragglers warn, never kill", has the spread).
const SLOW_SHARE: &str = "0.5";

/// Rank 1's speed relative to the median rank's in each `window_s` window of the ranks' logs,
/// computed as roger's rule does (1 / the median of a rank's step times; windows with fewer
/// than 3 steps from some rank left out): what the test measured, printed whatever the verdict.
fn relative_speeds(env: &Env, window_s: f64) -> Vec<f64> {
    let logs: Vec<Vec<(f64, f64)>> = (0..4)
        .map(|r| {
            env.read(&format!("logs/rank{r}.jsonl"))
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter_map(|v| Some((v["t"].as_f64()?, v["step_time"].as_f64()?)))
                .collect()
        })
        .collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let Some(t0) = logs[0].first().map(|p| p.0) else {
        return Vec::new();
    };
    let end = logs[0].last().unwrap().0;
    let mut out = Vec::new();
    let mut from = t0;
    while from + window_s <= end {
        let times: Vec<Vec<f64>> = logs
            .iter()
            .map(|l| {
                l.iter()
                    .filter(|(t, _)| *t >= from && *t < from + window_s)
                    .map(|p| p.1)
                    .collect()
            })
            .collect();
        if times.iter().all(|t| t.len() >= 3) {
            let speed: Vec<f64> = times.into_iter().map(|t| 1.0 / median(t)).collect();
            out.push((speed[1] / median(speed.clone()) * 1000.0).round() / 1000.0);
        }
        from += window_s;
    }
    out
}

#[test]
fn a_rank_at_half_speed_is_a_straggler_and_probe_shows_the_ranks() {
    if !torch_ready("a_rank_at_half_speed_is_a_straggler_and_probe_shows_the_ranks") {
        return;
    }
    let env = setup("stale = \"60s\"", STRAGGLER_RULE);
    let dir = env.dir.path().to_path_buf();
    // While it runs: `roger probe --pid` on the launcher shows the rank map.
    let prober = std::thread::spawn(move || {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(90) {
            std::thread::sleep(Duration::from_millis(500));
            let text = std::fs::read_to_string(dir.join("roger-ledger.jsonl")).unwrap_or_default();
            let recs: Vec<Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            if !recs.iter().any(|r| r["event"] == "ranks") {
                continue;
            }
            let pid = recs.iter().find(|r| r["event"] == "start").unwrap()["pid"].to_string();
            let out = Command::new(roger_bin())
                .args([
                    "probe",
                    "--pid",
                    &pid,
                    "--json",
                    "--no-ledger",
                    "--source",
                    "none",
                ])
                .current_dir(&dir)
                .output()
                .unwrap();
            return Some(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        None
    });
    let run = watch(
        &env,
        &[
            ("STEPS", "150"),
            ("WORK_ITERS", "100"),
            ("SLOW_RANK", "1"),
            ("SLOW_SHARE", SLOW_SHARE),
        ],
        Duration::from_secs(240),
    );
    let report = run.report();
    assert_eq!(run.code(), 0, "{report}");
    let recs = ledger(&env);
    let s = stragglers(&recs);
    eprintln!(
        "rank 1 at SLOW_SHARE {SLOW_SHARE}: relative speed per 2 s window of its log {:?}; in the verdict {}",
        relative_speeds(&env, 2.0),
        s.first().map_or("none".into(), |v| v["checks"][0]["reason"].to_string())
    );
    assert!(!s.is_empty(), "no straggler verdict\n{report}");
    assert!(s.iter().all(|v| v["rank"] == 1), "only rank 1: {s:?}");
    assert_eq!(s[0]["status"], "warn");
    let reason = s[0]["checks"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("rank 1 is a straggler: its speed was 0."),
        "{reason}"
    );
    assert!(run.stderr().contains("rank 1 is a straggler"), "{report}");
    assert!(
        !recs.iter().any(|r| r["kind"] == "kill"),
        "a straggler is never killed"
    );
    let probe = prober.join().unwrap().expect("the rank map never appeared");
    let p: Value = serde_json::from_str(&probe).unwrap();
    let ranks: Vec<u64> = p["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, vec![0, 1, 2, 3], "{probe}");
    assert_eq!(p["ranks"][2]["world_size"], 4);
    assert_eq!(p["ranks"][3]["local_rank"], 3);
}

#[test]
fn the_critic_judges_rank_0s_curves_and_hears_a_stopped_rank() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"ddp\"\nlog = \"logs/rank{rank}.jsonl\"\n\n[[phase]]\nname = \"main\"\nfrom = 0\nstale = \"10m\"\nloss = [0.1, 5.0]\n",
    );
    let lines = |from: u64, to: u64, loss: f64| -> String {
        (from..=to)
            .map(|s| format!("{{\"step\": {s}, \"loss\": {loss}}}\n"))
            .collect()
    };
    env.write("logs/rank0.jsonl", lines(1, 50, 2.0));
    env.write("logs/rank1.jsonl", lines(1, 50, 2.0));
    // Rank 3 logs a loss out of band: not judged (the curves are rank 0's).
    env.write("logs/rank3.jsonl", lines(1, 50, 99.0));
    let run = env.run(&["critic", "--once", "--json"]);
    let v: Value = serde_json::from_str(run.stdout().trim()).unwrap();
    let status = |c: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["check"] == c)
            .map(|x| x["status"].clone())
    };
    assert_eq!(status("loss"), Some("pass".into()), "{}", run.report());
    assert_eq!(status("stale"), Some("pass".into()), "{}", run.report());
    // Rank 3's log stopped 20 minutes ago at step 20 while rank 0 is at 50: stale.
    env.write("logs/rank3.jsonl", lines(1, 20, 2.0));
    let old = std::time::SystemTime::now() - Duration::from_secs(1200);
    std::fs::File::options()
        .append(true)
        .open(env.path("logs/rank3.jsonl"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let run = env.run(&["critic", "--once"]);
    assert_eq!(run.code(), 2, "{}", run.report());
    assert!(
        run.stdout()
            .contains("rank 3's log has not changed for 20m"),
        "{}",
        run.report()
    );
}
