//! Issue 37 points 3, 5 and 8: the trainers people use, on their own verbatim public logs
//! (tests/fixtures/real-trainers/: one directory per run, the files as the trainer wrote them;
//! SOURCES.md says where each came from, TRUTH.md what each run did). Each run goes through
//! `roger init` → `roger check` → `roger critic --once`, against `<run>.expect.toml`, written
//! from the source: the format, the trainer, the axis unit and planned total from the run's
//! own arguments, which lr key is "the" lr, whether the healthy run passes (and, finished, is
//! not stale two hours later), and a copy with a NaN injected (or the lr doubled) failing.
//! The schedule is compared to the source's; what roger cannot do yet is an expected failure
//! with its reason (`unreadable`, `[schedule] expected_failure`), and one that starts working
//! fails here until its mark is taken off, so no mark outlives what it excuses.

use crate::util::{repo_root, Env};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    /// The log in the run's directory that init is given.
    log: String,
    /// Roger cannot read this log yet: why (init must fail, or the test says it now reads).
    unreadable: Option<String>,
    format: Option<String>,
    /// A substring of init's `trainer:` line.
    trainer: Option<String>,
    #[serde(default = "step")]
    unit: String,
    /// `[metrics] planned_total` init writes, from the run's own arguments.
    planned_total: Option<u64>,
    /// The lr key init writes (absent: the log has no lr).
    lr: Option<String>,
    /// The eval score key init writes (higher is better: top-1, mAP).
    eval_score: Option<String>,
    #[serde(default)]
    passes: bool,
    why: Option<String>,
    /// The run reached its planned end: the critic two hours after its last write still passes
    /// its stale check.
    #[serde(default)]
    finished: bool,
    /// How the failing copy is made: `nan` (the loss key NaN at 60% of the samples, the file
    /// cut there) or `lr` (the lr doubled from 60% on).
    inject: String,
    /// The loss key (CSV column or JSON key) the NaN goes into.
    loss: Option<String>,
    schedule: Option<Schedule>,
}

fn step() -> String {
    "step".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Schedule {
    /// As the source declares it (a kind roger may not have yet: `multistep`, `yolo-linear`).
    kind: String,
    peak_lr: Option<f64>,
    warmup_steps: Option<f64>,
    total_steps: Option<f64>,
    #[serde(default)]
    within: f64,
    /// init cannot propose this schedule yet: why.
    expected_failure: Option<String>,
}

const DIR: &str = "tests/fixtures/real-trainers";

fn runs() -> Vec<(String, Expect)> {
    let dir = repo_root().join(DIR);
    let mut out: Vec<(String, Expect)> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let run = name.strip_suffix(".expect.toml")?.to_string();
            let text = std::fs::read_to_string(dir.join(&name)).unwrap();
            let e: Expect = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            Some((run, e))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// `init: schedule: KIND fits …; peak P, warmup W, min M, total T`: the kind and numbers.
fn fitted(stderr: &str) -> Option<(String, Vec<(String, f64)>)> {
    let line = stderr.lines().find(|l| l.contains("init: schedule: "))?;
    let rest = line.split("init: schedule: ").nth(1)?;
    let kind = rest.split_whitespace().next()?.to_string();
    if kind == "not" {
        return None;
    }
    let tail = rest.rsplit("; ").next()?;
    let nums = tail
        .split(", ")
        .filter_map(|kv| {
            let (k, v) = kv.split_once(' ')?;
            Some((k.to_string(), v.parse::<f64>().ok()?))
        })
        .collect();
    Some((kind, nums))
}

/// Whether init's fit is the source's schedule, and in what it differs.
fn schedule_matches(want: &Schedule, stderr: &str) -> Result<(), String> {
    let Some((kind, nums)) = fitted(stderr) else {
        return Err("init proposed no schedule".into());
    };
    if kind != want.kind {
        return Err(format!("init fitted {kind}, the source's is {}", want.kind));
    }
    for (key, truth) in [
        ("peak", want.peak_lr),
        ("warmup", want.warmup_steps),
        ("total", want.total_steps),
    ] {
        let Some(truth) = truth else { continue };
        let got = nums.iter().find(|(k, _)| k == key).map(|(_, v)| *v);
        let ok = got.is_some_and(|g| g == truth || (g - truth).abs() <= want.within * truth.abs());
        if !ok {
            return Err(format!("{key}: init {got:?}, the source {truth}"));
        }
    }
    Ok(())
}

/// The sample rows of a CSV (after its header) or the lines of a JSON-lines log that carry
/// `key`, by index into the file's lines.
fn rows_with(text: &str, key: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let pair = format!(" {key}: ");
    if text.contains(&pair) {
        // Printed key/value lines (detectron2's and MMEngine's text logs).
        (0..lines.len())
            .filter(|&i| lines[i].contains(&pair))
            .collect()
    } else if lines[0].trim_start().starts_with('{') {
        (0..lines.len())
            .filter(|&i| lines[i].contains(&format!("\"{key}\": ")))
            .collect()
    } else {
        (1..lines.len())
            .filter(|&i| !lines[i].trim().is_empty())
            .collect()
    }
}

/// `line` with the value of `key` (a CSV column by the header, or a JSON key) replaced.
fn set_value(header: &str, line: &str, key: &str, f: &dyn Fn(&str) -> String) -> String {
    let pair = format!(" {key}: ");
    if let Some(at) = line.find(&pair).map(|a| a + pair.len()) {
        let end = line[at..]
            .find(char::is_whitespace)
            .map_or(line.len(), |e| at + e);
        format!("{}{}{}", &line[..at], f(&line[at..end]), &line[end..])
    } else if line.trim_start().starts_with('{') {
        let pat = format!("\"{key}\": ");
        let at = line.find(&pat).unwrap() + pat.len();
        let end = line[at..].find([',', '}']).map_or(line.len(), |e| at + e);
        format!("{}{}{}", &line[..at], f(&line[at..end]), &line[end..])
    } else {
        let col = header
            .split(',')
            .position(|h| h.trim() == key)
            .unwrap_or_else(|| panic!("no column {key} in {header}"));
        let mut cells: Vec<String> = line.split(',').map(String::from).collect();
        cells[col] = f(&cells[col]);
        cells.join(",")
    }
}

/// The failing copy: NaN in the loss at 60% of the samples (the file cut after it), or the
/// lr doubled from 60% on (the file cut at 80%).
fn injected(text: &str, how: &str, key: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let rows = rows_with(text, key);
    let at = rows[rows.len() * 6 / 10];
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let end = match how {
        "nan" => {
            out[at] = set_value(lines[0], lines[at], key, &|_| "NaN".into());
            at + 1
        }
        "lr" => {
            let stop = rows[rows.len() * 8 / 10];
            for &r in rows.iter().filter(|&&r| r >= at && r <= stop) {
                out[r] = set_value(lines[0], lines[r], key, &|v| {
                    // Lightning's sparse rows: a row of other metrics leaves the lr empty.
                    if v.trim().is_empty() {
                        return v.to_string();
                    }
                    let x: f64 = v.trim().parse().unwrap();
                    format!("{:e}", x * 2.0)
                });
            }
            stop + 1
        }
        other => panic!("inject {other}"),
    };
    out[..end].join("\n") + "\n"
}

fn status(stdout: &str) -> (String, Value) {
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (v["status"].as_str().unwrap_or("").to_string(), v)
}

fn check_status(v: &Value, name: &str) -> Option<String> {
    v["checks"]
        .as_array()?
        .iter()
        .find(|c| c["check"] == name)
        .map(|c| c["status"].as_str().unwrap_or("").to_string())
}

#[test]
fn trainers_logs_through_init_check_and_critic() {
    let runs = runs();
    assert!(
        runs.len() >= 12,
        "issue 37: at least 12 public logs, found {}",
        runs.len()
    );
    let mut problems = Vec::new();
    let mut table =
        String::from("| run | init | schedule | healthy | injected |\n|---|---|---|---|---|\n");
    for (run, want) in &runs {
        let env = Env::new();
        copy_dir(&repo_root().join(DIR).join(run), &env.path(run));
        let log = format!("{run}/{}", want.log);
        assert!(env.path(&log).is_file(), "{run}: no {log}");
        let init = env.run(&["init", "--log", &log]);
        let what = format!("{run}\n{}", init.report());
        if let Some(why) = &want.unreadable {
            if init.code() == 0 {
                problems.push(format!("{run}: marked unreadable ({why}) but init now reads it: take the mark off and write its expectations\n{what}"));
            }
            table.push_str(&format!("| {run} | expected failure: {why} | | | |\n"));
            continue;
        }
        if init.code() != 0 {
            problems.push(format!("init failed: {what}"));
            continue;
        }
        let cfg = env.read("roger.toml");
        let err = init.stderr();
        let mut bad = |ok: bool, msg: String| {
            if !ok {
                problems.push(format!("{run}: {msg}\n{what}\n{cfg}"));
            }
        };
        if let Some(f) = &want.format {
            bad(
                cfg.contains(&format!("format = \"{f}\"")),
                format!("format {f}"),
            );
        }
        if let Some(t) = &want.trainer {
            bad(
                err.lines()
                    .any(|l| l.contains("trainer: ") && l.contains(t.as_str())),
                format!("trainer {t}"),
            );
        }
        bad(
            (want.unit == "epoch") == cfg.contains("unit = \"epoch\""),
            format!("unit {}", want.unit),
        );
        match want.planned_total {
            Some(t) => bad(
                cfg.contains(&format!("planned_total = {t}  # ")),
                format!("planned_total {t}"),
            ),
            None => bad(!cfg.contains("planned_total"), "no planned_total".into()),
        }
        if let Some(lr) = &want.lr {
            bad(
                cfg.contains(&format!("lr = \"{lr}\"")),
                format!("lr key {lr}"),
            );
        }
        if let Some(k) = &want.eval_score {
            bad(
                cfg.contains(&format!("eval_score = \"{k}\"")),
                format!("eval_score key {k}"),
            );
        }
        env.run(&["check"]).expect(0);

        // The schedule against the source's.
        let sched = match &want.schedule {
            None => "-".to_string(),
            Some(s) => match (schedule_matches(s, &err), &s.expected_failure) {
                (Ok(()), None) => "matches".into(),
                (Err(e), None) => {
                    bad(false, format!("schedule: {e}"));
                    format!("MISMATCH: {e}")
                }
                (Err(_), Some(why)) => format!("expected failure: {why}"),
                (Ok(()), Some(why)) => {
                    bad(false, format!("schedule marked as an expected failure ({why}) now matches the source: take the mark off"));
                    "XPASS".into()
                }
            },
        };

        // The healthy run as it was at its last write, and two hours later if it finished.
        let healthy = env.run(&["critic", "--once", "--json"]);
        let (st, v) = status(&healthy.stdout());
        if want.passes {
            bad(
                st == "pass",
                format!("the healthy run: {st}\n{}", healthy.report()),
            );
        } else {
            bad(want.why.is_some(), "say why it does not pass".into());
        }
        if want.finished {
            let mtime = std::fs::metadata(env.path(&log))
                .unwrap()
                .modified()
                .unwrap();
            let later: chrono::DateTime<chrono::Utc> =
                (mtime + std::time::Duration::from_secs(2 * 3600)).into();
            let now = later.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let r = env.run(&["critic", "--once", "--json", "--now", &now]);
            let (_, v2) = status(&r.stdout());
            bad(
                check_status(&v2, "stale").as_deref() == Some("pass"),
                format!(
                    "finished, two hours later: stale {:?}\n{}",
                    check_status(&v2, "stale"),
                    r.report()
                ),
            );
        }
        let _ = v;

        // The failing copy.
        let key = match want.inject.as_str() {
            "nan" => want.loss.clone().expect("inject = nan needs loss"),
            _ => want.lr.clone().expect("inject = lr needs lr"),
        };
        let text = std::fs::read_to_string(env.path(&log)).unwrap();
        let bad_log = format!("{run}/injected-{}", want.log.rsplit('/').next().unwrap());
        env.write(&bad_log, injected(&text, &want.inject, &key));
        let r = env.run(&["critic", "--once", "--json", "--log", &bad_log]);
        let (st, v) = status(&r.stdout());
        let which = if want.inject == "nan" { "loss" } else { "lr" };
        let got = check_status(&v, which);
        bad(
            st == "fail" && got.as_deref() == Some("fail"),
            format!(
                "{} injected: {st}, {which} {got:?}\n{}",
                want.inject,
                r.report()
            ),
        );
        table.push_str(&format!(
            "| {run} | {} | {sched} | {} | {} {st} |\n",
            want.trainer.as_deref().unwrap_or("-"),
            if want.passes {
                "pass"
            } else {
                "(not asserted)"
            },
            want.inject
        ));
    }
    eprintln!("{table}");
    assert!(problems.is_empty(), "{}\n\n{table}", problems.join("\n\n"));
}

/// The fixtures are the trainers' files unedited: SOURCES.md names every file of every run
/// with its size in bytes, and every run has its expectations.
#[test]
fn every_trainer_fixture_is_listed_in_sources() {
    let dir: PathBuf = repo_root().join(DIR);
    let sources = std::fs::read_to_string(dir.join("SOURCES.md")).unwrap();
    let runs = runs();
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        if !e.file_type().unwrap().is_dir() {
            continue;
        }
        let run = e.file_name().to_string_lossy().into_owned();
        assert!(
            runs.iter().any(|(r, _)| *r == run),
            "{run}: no {run}.expect.toml"
        );
        let mut stack = vec![e.path()];
        while let Some(d) = stack.pop() {
            for f in std::fs::read_dir(&d).unwrap() {
                let f = f.unwrap();
                if f.file_type().unwrap().is_dir() {
                    stack.push(f.path());
                    continue;
                }
                let rel = f.path().strip_prefix(&dir).unwrap().display().to_string();
                let size = f.metadata().unwrap().len();
                assert!(
                    sources.contains(&format!("`{rel}` ({size} bytes")),
                    "SOURCES.md must list `{rel}` ({size} bytes, …)"
                );
            }
        }
    }
}

/// Issue 37 point 5: an MLflow run logging one point per epoch, its planned epochs in the
/// run's `params/`. init says the axis counts epochs and takes the plan as the total; the
/// critic labels the axis, and the finished run is not stale hours later.
#[test]
fn an_mlflow_run_per_epoch_counts_epochs_to_its_planned_total() {
    let env = Env::new();
    let run = "mlruns/1/5f1c0e7a9b2d4c6e8f0a1b2c3d4e5f60";
    env.write(
        &format!("{run}/meta.yaml"),
        "run_id: 5f1c0e7a9b2d4c6e8f0a1b2c3d4e5f60\nrun_name: per-epoch\nstatus: 3\n",
    );
    env.write(&format!("{run}/params/epochs"), "12");
    env.write(&format!("{run}/params/lr"), "0.001");
    let t0: u64 = 1_735_689_600_000;
    let (mut loss, mut val, mut lr) = (String::new(), String::new(), String::new());
    for e in 1..=12u64 {
        let t = t0 + e * 600_000;
        loss.push_str(&format!("{t} {} {e}\n", 2.0 / (1.0 + e as f64 * 0.3)));
        val.push_str(&format!("{t} {} {e}\n", 2.1 / (1.0 + e as f64 * 0.25)));
        lr.push_str(&format!("{t} 0.001 {e}\n"));
    }
    env.write(&format!("{run}/metrics/train_loss"), &loss);
    env.write(&format!("{run}/metrics/val_loss"), &val);
    env.write(&format!("{run}/metrics/lr"), &lr);
    let init = env.run(&["init", "--log", run]).expect(0);
    let cfg = env.read("roger.toml");
    let what = format!("{}\n{cfg}", init.report());
    assert!(
        cfg.contains("unit = \"epoch\"") && cfg.contains("planned_total = 12  # epochs: 12 in "),
        "{what}"
    );
    init.stderr_has("the steps count epochs: 12 planned (epochs: 12 in ")
        .stderr_has("total epochs: 12, as the run's arguments declare it; the log reached it: finished at epoch 12");
    env.run(&["check"]).expect(0);
    // Two hours after its last point: finished, not stale; the headline counts epochs.
    let later = chrono::DateTime::<chrono::Utc>::from_timestamp(
        ((t0 + 12 * 600_000) / 1000 + 7200) as i64,
        0,
    )
    .unwrap()
    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let r = env.run(&["critic", "--once", "--now", &later]);
    assert_eq!(r.code(), 0, "{}", r.report());
    let st = env.run(&["status", "--now", &later]);
    assert!(st.stdout().contains("epoch 12 of 12"), "{}", st.report());
    r.stdout_has("epoch 12/12")
        .stdout_has("finished at step 12");
}
