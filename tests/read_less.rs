//! `critic --once` reads only what a verdict needs (the summary cache beside the ledger, the
//! first look from the end of a big log), and its verdicts and observations are those of a
//! full read (`--full-read`): on every fixture log, cut and grown, on a log resumed in the
//! middle of its window, and after the log is truncated, rotated or replaced.

use crate::util::{repo_root, Env};
use roger::ledger::Ledger;
use serde_json::Value;

pub(crate) const NOW: &str = "2025-06-01T00:00:00Z";

/// (log, config) pairs: the real corpus's line logs, the bundled example, the committed
/// TensorBoard files.
pub(crate) fn fixtures() -> Vec<(String, String, String)> {
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
    std::fs::remove_file(&cache).unwrap_or_else(|e| {
        panic!(
            "{log} {what}: the critic wrote no cache {}: {e}",
            cache.display()
        )
    });
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

/// TensorBoard config for the committed event files.
const TB_TOML: &str = "[run]\nname = \"tb\"\nlog = \"runs\"\nformat = \"tensorboard\"\n\
     [metrics]\nloss = \"train/loss\"\n[[phase]]\nname = \"a\"\nfrom = 0\nwindow = 10\n\
     loss = [0.5, 6.0]\nstale = \"1h\"\n";

/// The end offsets of the TFRecord records of `bytes` (u64 length, u32 CRC, data, u32 CRC).
fn record_ends(bytes: &[u8]) -> Vec<usize> {
    let (mut at, mut ends) = (0, Vec::new());
    while at + 12 <= bytes.len() {
        let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
        at += 12 + len + 4;
        ends.push(at);
    }
    ends
}

/// Event files and MLflow runs go on from the summary cache too: a check, then the rest of
/// the log appended, then a check that resumes (the cache is used) and judges as a full
/// read does; and the first check (whole file) judges as a full read.
#[test]
fn event_files_and_mlflow_runs_go_on_from_the_cache_and_judge_the_same() {
    for name in ["simple", "tensor_half", "restart"] {
        let dir = repo_root().join("tests/fixtures/tensorboard").join(name);
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        // The run as it stood at a third, two thirds and the end of its records: the files
        // before the one being written whole, that one cut, the later ones not started yet.
        let records: Vec<(usize, usize)> = files
            .iter()
            .enumerate()
            .flat_map(|(i, f)| {
                let ends = record_ends(&std::fs::read(f).unwrap());
                ends.into_iter().map(move |e| (i, e))
            })
            .collect();
        for cut in [1, 2, 3] {
            let env = Env::new();
            env.write("roger.toml", TB_TOML);
            let (at_file, at) = records[records.len() * cut / 3 - 1];
            let mut rest = Vec::new();
            for (i, f) in files.iter().enumerate() {
                let bytes = std::fs::read(f).unwrap();
                let to = format!("runs/{}", f.file_name().unwrap().to_string_lossy());
                match i.cmp(&at_file) {
                    std::cmp::Ordering::Less => drop(env.write(&to, &bytes)),
                    std::cmp::Ordering::Equal => {
                        env.write(&to, &bytes[..at]);
                        rest.push((to, bytes[at..].to_vec(), true));
                    }
                    std::cmp::Ordering::Greater => rest.push((to, bytes, false)),
                }
            }
            let what = format!("{name} cut {cut}/3");
            compare_with_cache(&env, &what);
            for (to, more, append) in &rest {
                if *append {
                    let mut f = std::fs::OpenOptions::new()
                        .append(true)
                        .open(env.path(to))
                        .unwrap();
                    std::io::Write::write_all(&mut f, more).unwrap();
                } else {
                    env.write(to, more);
                }
            }
            compare_with_cache(&env, &format!("{what}, then the rest"));
        }
    }
    // An event file truncated, or rewritten in place: the cache is not used.
    let simple = repo_root().join("tests/fixtures/tensorboard/simple");
    let file = std::fs::read_dir(&simple)
        .unwrap()
        .flatten()
        .next()
        .unwrap();
    let bytes = std::fs::read(file.path()).unwrap();
    let to = format!("runs/{}", file.file_name().to_string_lossy());
    for (change, why) in [
        ("truncated", "was truncated"),
        ("rewritten", "was rewritten"),
    ] {
        let env = Env::new();
        env.write("roger.toml", TB_TOML);
        env.write(&to, &bytes);
        judge(&env, &[]);
        let path = env.path(&to);
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        if change == "truncated" {
            f.set_len(bytes.len() as u64 / 2).unwrap();
        } else {
            std::os::unix::fs::FileExt::write_all_at(&f, b"\x01", 20).unwrap();
        }
        let (_, _, stderr) = judge_err(&env, &[]);
        assert!(stderr.contains(why), "{change}: {stderr}");
    }
    let run = repo_root().join("tests/fixtures/mlflow/run");
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"ml\"\nlog = \"run\"\nformat = \"mlflow\"\n\
         [metrics]\nloss = \"train/loss\"\n[[phase]]\nname = \"a\"\nfrom = 0\nwindow = 10\n\
         loss = [0.5, 6.0]\nstale = \"1h\"\n",
    );
    let mut rest = Vec::new();
    for key in ["lr", "train/loss"] {
        let text = std::fs::read_to_string(run.join("metrics").join(key)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let (head, tail) = lines.split_at(lines.len() / 2);
        let to = format!("run/metrics/{key}");
        env.write(
            &to,
            head.iter().map(|l| format!("{l}\n")).collect::<String>(),
        );
        rest.push((
            env.path(&to),
            tail.iter().map(|l| format!("{l}\n")).collect::<String>(),
        ));
    }
    compare_with_cache(&env, "mlflow half");
    for (path, more) in &rest {
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        std::io::Write::write_all(&mut f, more.as_bytes()).unwrap();
    }
    compare_with_cache(&env, "mlflow, then the rest");
    // A metric file rewritten in place (same length, another first value): not used.
    let loss = env.path("run/metrics/train/loss");
    let text = std::fs::read_to_string(&loss).unwrap();
    std::fs::write(&loss, text.replacen(" 4.5 0", " 9.5 0", 1)).unwrap();
    let (_, _, stderr) = judge_err(&env, &[]);
    assert!(stderr.contains("was rewritten"), "{stderr}");
}

/// A check that goes on from the cache (when there is one) judges as a full read does.
fn compare_with_cache(env: &Env, what: &str) {
    let had_cache = env.path("roger-ledger.jsonl.critic-cache").exists();
    let ledger = std::fs::read(env.path("roger-ledger.jsonl")).unwrap_or_default();
    let (fast, fast_obs, stderr) = judge_err(env, &[]);
    assert!(!stderr.contains("not used"), "{what}: {stderr}");
    assert!(
        env.path("roger-ledger.jsonl.critic-cache").exists(),
        "{what}: no cache kept"
    );
    let cache = std::fs::read(env.path("roger-ledger.jsonl.critic-cache")).unwrap();
    std::fs::write(env.path("roger-ledger.jsonl"), &ledger).unwrap();
    let (full, full_obs) = judge(env, &["--full-read"]);
    assert_eq!(fast, full, "{what} (cache used: {had_cache})");
    assert_eq!(
        fast_obs,
        full_obs,
        "{what}: {:?}",
        differing(&fast_obs, &full_obs)
    );
    // Go on from the fast read's cache next time, as a monitor calling again would.
    std::fs::write(env.path("roger-ledger.jsonl.critic-cache"), cache).unwrap();
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
    env.append(
        "train.jsonl",
        "{\"step\": 3, \"time\": 1748735200, \"loss\": 2.2}\n",
    );
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
