//! `critic --once` reads only what a verdict needs (the summary cache beside the ledger, the
//! first look from the end of a big log), and its verdicts and observations are those of a
//! full read (`--full-read`): on every fixture log, cut and grown, on a log resumed in the
//! middle of its window, and after the log is truncated, rotated or replaced.

use crate::util::{repo_root, Env};
use roger::ledger::Ledger;
use serde_json::Value;

const NOW: &str = "2025-06-01T00:00:00Z";

/// (log, config) pairs: the real corpus's line logs, the bundled example, the committed
/// TensorBoard files.
fn fixtures() -> Vec<(String, String, String)> {
    let real = repo_root().join("tests/fixtures/real");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&real).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name
            .strip_suffix(".jsonl")
            .or_else(|| name.strip_suffix(".csv"))
            .or_else(|| name.strip_suffix(".txt"))
        else {
            continue;
        };
        let cfg = std::fs::read_to_string(real.join(format!("{stem}.toml"))).unwrap();
        out.push((
            name.clone(),
            std::fs::read_to_string(e.path()).unwrap(),
            cfg,
        ));
    }
    out.sort();
    let example = std::fs::read_to_string(repo_root().join("roger.example.toml"))
        .unwrap()
        .replace("examples/train_log.jsonl", "train_log.jsonl")
        .replace("examples/roger-ledger.jsonl", "roger-ledger.jsonl");
    out.push((
        "train_log.jsonl".into(),
        std::fs::read_to_string(repo_root().join("examples/train_log.jsonl")).unwrap(),
        example,
    ));
    out.push(("resumed.jsonl".into(), resumed_log(), RESUMED_TOML.into()));
    out
}

const RESUMED_TOML: &str = "[run]\nname = \"r\"\nlog = \"resumed.jsonl\"\n\
[[phase]]\nname = \"all\"\nfrom = 0\nwindow = 40\nloss = [0.5, 6.0]\nloss_spike = 2.0\n\
grad_norm_max = 5.0\nstale = \"1d\"\n";

/// 3000 steps with an eval every 500, a NaN stretch at 2900..2950, then a resume from
/// step 2890 (inside the window of 40) that goes on cleanly to 2990.
fn resumed_log() -> String {
    let mut s = String::new();
    let t0 = 1_748_700_000.0;
    let mut line = |step: u64, t: f64, loss: &str| {
        s.push_str(&format!(
            "{{\"step\": {step}, \"time\": {t}, \"loss\": {loss}, \"grad_norm\": 0.7, \"lr\": 0.0003}}\n"
        ));
        if step.is_multiple_of(500) && step > 0 {
            s.push_str(&format!(
                "{{\"step\": {step}, \"time\": {t}, \"eval_loss\": 2.5}}\n"
            ));
        }
    };
    for step in 0..2950 {
        let loss = if step >= 2900 {
            "NaN".to_string()
        } else {
            format!("{}", 3.0 - step as f64 * 1e-4)
        };
        line(step, t0 + step as f64, &loss);
    }
    for step in 2890..2990 {
        line(step, t0 + 3000.0 + step as f64, "2.8");
    }
    s
}

/// Run `critic --once --json` (plus `extra`) and return (verdict, observation of the record
/// it filed).
fn judge(env: &Env, extra: &[&str]) -> (Value, Value) {
    let (v, obs, _) = judge_err(env, extra);
    (v, obs)
}

/// [`judge`], with stderr.
fn judge_err(env: &Env, extra: &[&str]) -> (Value, Value, String) {
    // --heartbeat: every call files its verdict, whose observation is compared here.
    let mut args = vec!["critic", "--once", "--json", "--heartbeat", "--now", NOW];
    args.extend_from_slice(extra);
    let run = env.run(&args);
    assert!(run.code() <= 3, "{}", run.report());
    let v: Value = serde_json::from_str(run.stdout().trim())
        .unwrap_or_else(|e| panic!("{e}\n{}", run.report()));
    let last = Ledger::new(env.path("roger-ledger.jsonl"))
        .records()
        .unwrap()
        .pop()
        .unwrap();
    (v, last.get("observation").unwrap().clone(), run.stderr())
}

/// The top-level fields in which two observations differ, for the failure message.
fn differing(a: &Value, b: &Value) -> Vec<String> {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return vec![format!("{a} vs {b}")];
    };
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {v} vs {}", b.get(k).unwrap_or(&Value::Null)))
        .collect()
}

fn without_counts(mut obs: Value) -> Value {
    obs["samples_total"] = Value::Null;
    obs["garbage_total"] = Value::Null;
    obs
}

/// The fast ways and the full read, on the same log, from the same ledger.
fn compare(env: &Env, log: &str, what: &str) {
    let ledger = env.read("roger-ledger.jsonl");
    let cache = env.path("roger-ledger.jsonl.critic-cache");
    let fast = judge(env, &[]);
    std::fs::write(env.path("roger-ledger.jsonl"), &ledger).unwrap();
    let full = judge(env, &["--full-read"]);
    assert_eq!(fast.0, full.0, "{log} {what}: verdicts differ");
    // A log timed by its mtime that changed is read afresh, from the end: its counts then
    // cover what was read (exact counts through the cache: the test below).
    let (fast_obs, full_obs) = (without_counts(fast.1), without_counts(full.1.clone()));
    assert!(
        fast_obs == full_obs,
        "{log} {what}: observations differ: {:?}",
        differing(&fast_obs, &full_obs)
    );
    // No cache: the first look (from the end, when the log allows it).
    std::fs::write(env.path("roger-ledger.jsonl"), &ledger).unwrap();
    std::fs::remove_file(&cache).unwrap();
    let first = judge(env, &[]);
    assert_eq!(first.0, full.0, "{log} {what}: first-look verdict differs");
    let (first, full) = (without_counts(first.1), without_counts(full.1));
    assert!(
        first == full,
        "{log} {what}: first-look observation differs: {:?}",
        differing(&first, &full)
    );
}

#[test]
fn cached_and_first_look_verdicts_equal_a_full_read_on_every_fixture() {
    for (log, text, cfg) in fixtures() {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for cut in [lines.len() / 3, 2 * lines.len() / 3, lines.len()] {
            let env = Env::new();
            env.write("roger.toml", &cfg);
            env.write(&log, lines[..cut].concat());
            judge(&env, &["--full-read"]); // builds the cache
            env.write(&log, text.as_bytes()); // grown to the whole log (same inode)
            compare(&env, &log, &format!("cut at line {cut}"));
        }
    }
}

#[test]
fn the_cache_never_serves_a_stale_verdict() {
    let text = resumed_log();
    let healthy: String = text.lines().take(2000).map(|l| format!("{l}\n")).collect();
    for change in [
        "appended",
        "unchanged",
        "truncated",
        "rotated",
        "replaced",
        "rewritten-same-size",
    ] {
        let env = Env::new();
        env.write("roger.toml", RESUMED_TOML);
        let log = env.path("resumed.jsonl");
        std::fs::write(&log, &text).unwrap();
        let (v, _) = judge(&env, &["--full-read"]);
        assert_eq!(v["status"], "pass", "{v:#}");
        match change {
            "appended" => {
                let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
                let more = "{\"step\": 2990, \"time\": 1748705000, \"loss\": NaN}\n";
                std::io::Write::write_all(&mut f, more.as_bytes()).unwrap();
            }
            "unchanged" => {}
            // A shorter log whose loss is out of band now.
            "truncated" => {
                std::fs::write(&log, healthy.replace("\"loss\": 2.", "\"loss\": 9.")).unwrap()
            }
            "rotated" => {
                std::fs::rename(&log, env.path("resumed.jsonl.1")).unwrap();
                std::fs::write(&log, healthy.replace("\"loss\": 2.", "\"loss\": 9.")).unwrap();
            }
            // The same inode, longer, other first bytes.
            "replaced" => {
                std::fs::write(&log, format!("{{\"step\": 0, \"loss\": 9.0}}\n{text}")).unwrap()
            }
            "rewritten-same-size" => {
                std::fs::write(&log, text.replacen("\"loss\": 3,", "\"loss\": 9,", 1)).unwrap()
            }
            _ => unreachable!(),
        }
        let ledger = env.read("roger-ledger.jsonl");
        let (v, obs, stderr) = judge_err(&env, &[]);
        let cached = (v, obs);
        let used = !stderr.contains("not used");
        assert_eq!(
            used,
            ["appended", "unchanged"].contains(&change),
            "{change}: {stderr}"
        );
        std::fs::write(env.path("roger-ledger.jsonl"), &ledger).unwrap();
        let full = judge(&env, &["--full-read"]);
        assert_eq!(cached.0, full.0, "{change}");
        assert_eq!(cached.1, full.1, "{change}");
        if ["appended", "truncated", "rotated"].contains(&change) {
            assert_eq!(full.0["status"], "fail", "{change}: {:#}", full.0);
        }
    }
}

/// Event files are read whole each time (no cache): the same verdict as `--full-read`.
#[test]
fn event_files_judge_the_same_either_way() {
    for name in ["simple", "tensor_half", "restart"] {
        let env = Env::new();
        env.write(
            "roger.toml",
            "[run]\nname = \"tb\"\nlog = \"runs\"\nformat = \"tensorboard\"\n\
             [metrics]\nloss = \"train/loss\"\n[[phase]]\nname = \"a\"\nfrom = 0\nwindow = 10\n\
             loss = [0.5, 6.0]\nstale = \"1h\"\n",
        );
        let dir = repo_root().join("tests/fixtures/tensorboard").join(name);
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let to = format!("runs/{}", e.file_name().to_string_lossy());
            env.write(&to, std::fs::read(e.path()).unwrap());
        }
        judge(&env, &[]);
        compare_without_cache(&env, name);
    }
}

fn compare_without_cache(env: &Env, what: &str) {
    let ledger = env.read("roger-ledger.jsonl");
    let fast = judge(env, &[]);
    std::fs::write(env.path("roger-ledger.jsonl"), &ledger).unwrap();
    let full = judge(env, &["--full-read"]);
    assert_eq!(fast, full, "{what}");
    assert!(!env.path("roger-ledger.jsonl.critic-cache").exists());
}

/// A repeated check files only what is new, as the daemon does: no new samples and the same
/// statuses as its last filing (still the ledger's newest record) files nothing and says so;
/// a new sample, a changed status, another writer's record, or `--heartbeat` files again.
#[test]
fn a_repeated_check_files_only_what_changed() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"t\"\nlog = \"train.jsonl\"\n[[phase]]\nname = \"all\"\nfrom = 0\n\
         loss = [1.0, 5.0]\nstale = \"1h\"\n",
    );
    env.write(
        "train.jsonl",
        "{\"step\": 1, \"time\": 1748735000, \"loss\": 2.0}\n\
         {\"step\": 2, \"time\": 1748735100, \"loss\": 2.1}\n",
    );
    let verdicts = || {
        Ledger::new(env.path("roger-ledger.jsonl"))
            .records()
            .unwrap()
            .iter()
            .filter(|r| r.kind == roger::ledger::Kind::Verdict)
            .count()
    };
    let once = |now: &str, extra: &[&str]| {
        let mut args = vec!["critic", "--once", "--now", now];
        args.extend_from_slice(extra);
        env.run(&args)
    };
    let t0 = "2025-06-01T00:00:00Z";
    once(t0, &[]).expect(0).stdout_has("(ledger seq 1,");
    assert_eq!(verdicts(), 1);
    once(t0, &[])
        .expect(0)
        .stdout_has("unchanged since ledger seq 1 of ");
    let j = once(t0, &["--json"]).expect(0);
    let v: Value = serde_json::from_str(j.stdout().trim()).unwrap();
    assert_eq!(
        (v["seq"].as_u64(), v["unchanged"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(verdicts(), 1, "nothing new: nothing filed");
    // --heartbeat files anyway.
    once(t0, &["--heartbeat"])
        .expect(0)
        .stdout_has("(ledger seq 2,");
    // A new sample is filed.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(env.path("train.jsonl"))
        .unwrap();
    std::io::Write::write_all(
        &mut f,
        b"{\"step\": 3, \"time\": 1748735200, \"loss\": 2.2}\n",
    )
    .unwrap();
    once(t0, &[]).expect(0).stdout_has("(ledger seq 3,");
    // Two hours later, no new sample: stale fails now, a changed status, filed.
    let t2 = "2025-06-01T02:00:00Z";
    once(t2, &[]).expect(2).stdout_has("(ledger seq 4,");
    once(t2, &[])
        .expect(2)
        .stdout_has("unchanged since ledger seq 4");
    // Another writer's record after ours: ours is no longer the newest, so file.
    Ledger::new(env.path("roger-ledger.jsonl"))
        .append(
            roger::ledger::Entry::new(roger::ledger::Kind::Note, "test", "t"),
            chrono::Utc::now(),
        )
        .unwrap();
    once(t2, &[]).expect(2).stdout_has("(ledger seq 6,");
    assert_eq!(verdicts(), 5);
    env.run(&["ledger", "verify"]).expect(0);
}
