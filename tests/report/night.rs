//! The scripted night: four launches of fake_train under the real watch and critic daemon
//! (a wedge, a crash, a NaN the critic fails and the watch rolls back, then a clean finish),
//! and a publish rejected by its own verification in the middle. Then `roger report` is
//! checked against the raw ledger and log: each incident listed, the goodput buckets equal
//! to what the timestamps say, the digest, `ledger tail`, the same bytes twice, the browser.

use super::{model, report};
use crate::util::Env;
use crate::watch::{fake_train, records, roger, wait_child};
use roger::ledger::{Kind, Record};
use std::process::Stdio;
use std::time::{Duration, Instant};

pub(crate) const RUN: &str = "llama-8b-demo";

pub(crate) fn config() -> String {
    format!(
        r#"[run]
name = "{RUN}"
log = "train.jsonl"
checkpoint_dir = "ck"

[publish]
keep_last = 6

[gpu]
source = "none"

[schedule]
kind = "constant"
peak_lr = 0.0006
total_steps = 400

[watch]
interval = "100ms"
hysteresis = 2
grace = "2s"
stale = "2s"
backoff_initial = "100ms"
backoff_max = "200ms"
rollback_on = ["loss"]
evidence_hook = ["sh", "-c", "echo stack of pid {{pid}}"]

[[phase]]
name = "warmup"
from = 0
to = 100
loss = [2.0, 12.0]
window = 10

[[phase]]
name = "main"
from = 100
loss = [2.0, 10.5]
grad_norm_max = 2.0
tokens_per_s_min = 40000
vram_max_gib = 70
window = 10
"#
    )
}

/// The trainer: each launch picks its cue by counting launches in a file.
fn trainer(env: &Env) -> String {
    let script = format!(
        "#!/bin/sh\nn=$(cat launches 2>/dev/null || echo 0); n=$((n+1)); echo $n > launches\n\
         case $n in 1) cue='--wedge-at 60';; 2) cue='--crash-at 150';; 3) cue='--nan-at 250';; *) cue='';; esac\n\
         exec {} --log {} --ckpt-dir {} --config {} --steps 400 --step-ms 20 --save-every 25 --eval-every 50 --vram-gib 61 --cues-on-resume $cue\n",
        fake_train().display(),
        env.path("train.jsonl").display(),
        env.path("ck").display(),
        env.path("roger.toml").display()
    );
    let p = env.write("train.sh", script);
    p.display().to_string()
}

fn poll(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() > limit {
            eprintln!("gave up waiting for {what}");
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Run the night in `env`; returns when the watch is done and the critic judged step 400.
pub(crate) fn run_night(env: &Env) -> Vec<Record> {
    env.write("roger.toml", config());
    let script = trainer(env);
    let mut w = roger(env, &["watch".into(), "--".into(), "sh".into(), script]);
    w.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let mut watch = w.spawn().unwrap();
    let mut c = env.cmd(&["critic", "--daemon", "--interval", "1s"]);
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("critic.err")).unwrap());
    let mut critic = c.spawn().unwrap();
    // After the first relaunch, a publish whose copy comes out short: rejected on record.
    poll("the first relaunch", Duration::from_secs(90), || {
        records(env).iter().any(|r| r.kind == Kind::Relaunch)
    });
    let src = env.write("out/ckpt-manual.bin", vec![7u8; 4096]);
    env.cmd(&["publish", src.to_str().unwrap(), "--to", "ck"])
        .env("ROGER_FAULT_TRUNCATE_AFTER_FSYNC", "100")
        .output()
        .unwrap();
    let status = wait_child(&mut watch, Duration::from_secs(150));
    poll(
        "the critic's verdict on step 400",
        Duration::from_secs(30),
        || {
            records(env)
                .iter()
                .any(|r| r.kind == Kind::Verdict && r.step == Some(400))
        },
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(critic.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    wait_child(&mut critic, Duration::from_secs(30));
    assert_eq!(
        status.code(),
        Some(0),
        "watch: {}\n{}",
        env.read("watch.err"),
        crate::util::listing(env.dir.path())
    );
    records(env)
}

/// Unix seconds of each logged step, in log order (a bare NaN loss read as null).
pub(crate) fn log_times(env: &Env) -> Vec<(u64, f64)> {
    env.read("train.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l.replace("NaN", "null")).ok())
        .filter_map(|v| Some((v["step"].as_u64()?, v["time"].as_f64()?)))
        .collect()
}

fn unix(r: &Record) -> f64 {
    r.ts.timestamp_millis() as f64 / 1000.0
}

/// Goodput's detect and restart, from the raw files: for each kill or crash, the last logged
/// step before it → the record, and the record → the first step after the next launch.
fn expected_detect_restart(recs: &[Record], log: &[(u64, f64)]) -> (f64, f64, usize) {
    let mut detect = 0.0;
    let mut restart = 0.0;
    let mut n = 0;
    let mut pending: Option<f64> = None;
    for r in recs {
        let is_kill = r.kind == Kind::Kill && r.str_field("reason") != Some("leftover");
        let is_crash = r.kind == Kind::Watch
            && r.str_field("event") == Some("exited")
            && r.get("code").and_then(|c| c.as_i64()) != Some(0);
        if is_kill || is_crash {
            let t = unix(r);
            let before = log
                .iter()
                .map(|s| s.1)
                .filter(|s| *s <= t)
                .fold(f64::MIN, f64::max);
            detect += t - before;
            pending = Some(t);
            n += 1;
        }
        if r.kind == Kind::Watch && r.str_field("event") == Some("launched") {
            if let Some(t) = pending.take() {
                let launched = unix(r);
                let after = log
                    .iter()
                    .map(|s| s.1)
                    .filter(|s| *s > launched)
                    .fold(f64::MAX, f64::min);
                restart += after - t;
            }
        }
    }
    (detect, restart, n)
}

#[test]
fn a_scripted_night_is_reported_as_it_happened() {
    let env = Env::new();
    let recs = run_night(&env);
    if let Some(keep) = std::env::var_os("ROGER_KEEP_NIGHT") {
        let _ = std::process::Command::new("cp")
            .arg("-a")
            .arg(env.dir.path())
            .arg(keep)
            .status();
    }
    let kinds: Vec<&str> = recs
        .iter()
        .filter(|r| r.kind == Kind::Kill)
        .filter_map(|r| r.str_field("reason"))
        .collect();
    assert!(
        kinds.contains(&"wedge") && kinds.contains(&"divergence"),
        "{kinds:?}"
    );
    let last = recs.last().unwrap().ts;
    let now =
        (last + chrono::Duration::seconds(60)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let m = model(&env, Some(&now));

    // The headline: finished, on declared total_steps, nothing standing.
    let h = &m["headline"];
    assert_eq!(h["state"], "OK", "{h:#}");
    assert_eq!(h["step"], 400);
    assert_eq!(h["total_steps"], 400);
    assert_eq!(h["relaunches"], 3, "{h:#}");
    assert!(
        h["why"]
            .as_str()
            .unwrap()
            .starts_with("finished at step 400; roger handled 4 incidents"),
        "{h:#}"
    );

    // Each incident, in order, with what roger did.
    let inc = m["incidents"].as_array().unwrap();
    let kinds: Vec<&str> = inc.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    for k in ["wedge", "crash", "divergence", "rejected publish"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    for i in inc.iter().filter(|i| i["kind"] != "rejected publish") {
        let actions = i["actions"].to_string();
        assert!(
            actions.contains("relaunched from the checkpoint of step"),
            "{i:#}"
        );
        assert!(i["down_s"].as_f64().unwrap() > 0.0, "{i:#}");
    }
    let wedge = inc.iter().find(|i| i["kind"] == "wedge").unwrap();
    assert_eq!(wedge["evidence"].as_array().unwrap().len(), 1, "{wedge:#}");
    let div = inc.iter().find(|i| i["kind"] == "divergence").unwrap();
    assert!(div["step"].as_u64().unwrap() >= 250, "{div:#}");
    // Its numbers are the ledger's: the onset the kill names, where the relaunch went back to.
    let dkill = recs
        .iter()
        .find(|r| r.kind == Kind::Kill && r.str_field("reason") == Some("divergence"))
        .unwrap();
    let back = recs
        .iter()
        .find(|r| r.kind == Kind::Relaunch && r.seq > dkill.seq)
        .unwrap();
    assert_eq!(
        div["began_at"].as_u64(),
        dkill.u64_field("diverged_at"),
        "{div:#}"
    );
    assert_eq!(
        div["rolled_back_to"].as_u64(),
        back.u64_field("ckpt_step"),
        "{div:#}"
    );

    // Goodput against the raw timestamps (one watch interval of slack).
    let log = log_times(&env);
    let (detect, restart, n) = expected_detect_restart(&recs, &log);
    assert_eq!(n, 3, "a wedge, a crash and a rollback");
    let g = &m["goodput"];
    let got = |k: &str| g[k].as_f64().unwrap();
    assert!(
        (got("detect_s") - detect).abs() <= 0.1,
        "detect {} vs {detect}: {g:#}",
        got("detect_s")
    );
    assert!(
        (got("restart_s") - restart).abs() <= 0.1,
        "restart {} vs {restart}: {g:#}",
        got("restart_s")
    );
    // The wedge's detection is the silence the watch itself measured at the kill.
    let kill = recs
        .iter()
        .find(|r| r.str_field("reason") == Some("wedge"))
        .unwrap();
    let silent = kill.get("silent_s").and_then(|s| s.as_f64()).unwrap();
    let wedge_detect = unix(kill)
        - log
            .iter()
            .map(|s| s.1)
            .filter(|s| *s <= unix(kill))
            .fold(f64::MIN, f64::max);
    assert!(
        (wedge_detect - silent).abs() <= 0.1 + 0.1,
        "wedge detect {wedge_detect} vs silent_s {silent}"
    );
    let first = log.first().unwrap().1.min(unix(&recs[0]));
    let done = recs
        .iter()
        .rev()
        .find(|r| r.str_field("event") == Some("done"))
        .map(unix)
        .unwrap();
    assert!((got("wall_s") - (done - first)).abs() <= 0.1, "{g:#}");
    let parts = [
        "training_s",
        "detect_s",
        "restart_s",
        "recomputed_s",
        "grind_s",
        "publish_s",
    ];
    let sum: f64 = parts.iter().map(|k| got(k)).sum();
    assert!((sum - got("wall_s")).abs() < 1e-6, "{g:#}");
    assert!(g["recomputed_steps"].as_u64().unwrap() > 0);

    // A copy of the three files elsewhere (another machine, after the run) tells the same.
    for f in ["roger.toml", "train.jsonl", "roger-ledger.jsonl"] {
        std::fs::create_dir_all(env.path("copy")).unwrap();
        std::fs::copy(env.path(f), env.path(&format!("copy/{f}"))).unwrap();
    }
    let r = env
        .run(&[
            "--config",
            "copy/roger.toml",
            "report",
            "--json",
            "--now",
            &now,
        ])
        .expect(0);
    let copy: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(copy["incidents"], m["incidents"]);
    assert_eq!(copy["goodput"], m["goodput"]);

    // --since: incidents and goodput from then on; the headline still covers the run.
    let after =
        (last + chrono::Duration::seconds(1)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let r = report(&env, Some(&now), &["--json", "--since", &after]).expect(0);
    let since: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(
        since["incidents"].as_array().unwrap().len(),
        0,
        "{}",
        r.report()
    );
    assert_eq!(since["headline"]["relaunches"], 3);
    let r = report(&env, Some(&now), &["--json", "--since", "1h"]).expect(0);
    let hour: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(hour["incidents"], m["incidents"]);
    // report judges: a usage error is UNKNOWN (3), not 2 ("stopped").
    report(&env, Some(&now), &["--since", "yesterday"]).expect(3);

    // The digest: same story, at most 20 lines, no colour into a pipe.
    let text = report(&env, Some(&now), &["--text"]).expect(0).stdout();
    assert!(text.lines().count() <= 20, "{text}");
    assert!(
        text.starts_with(&format!("roger · {RUN} · OK: finished at step 400")),
        "{text}"
    );
    for k in [
        "wedge at step",
        "crash at step",
        // When it began (the verdict's onset), when the critic saw it, where it went back to.
        "divergence: began at step",
        "rejected publish",
    ] {
        assert!(text.contains(k), "{k}: {text}");
    }
    assert!(!text.contains('\x1b'));

    // ledger tail speaks sentences; --json gives the records.
    let tail = env.run(&["ledger", "tail", "-n", "400"]).expect(0).stdout();
    assert!(tail.contains("kill (wedge) at step"), "{tail}");
    assert!(tail.contains("relaunch #1 from"), "{tail}");
    assert!(tail.contains("critic verdict fail at step"), "{tail}");
    assert!(!tail.contains("{\""), "no JSON in the human tail: {tail}");
    let json = env
        .run(&["ledger", "tail", "-n", "1", "--json"])
        .expect(0)
        .stdout();
    assert!(json.trim().starts_with("{\"seq\""), "{json}");

    // The page: written where asked, the same bytes twice.
    let a = report(&env, Some(&now), &["--out", "a.html"]).expect(0);
    assert_eq!(a.stdout().trim(), "a.html");
    report(&env, Some(&now), &["--out", "b.html"]).expect(0);
    let page = std::fs::read(env.path("a.html")).unwrap();
    assert_eq!(
        page,
        std::fs::read(env.path("b.html")).unwrap(),
        "not deterministic"
    );
    // Default: beside the ledger. The clock is not pinned, so the disk is measured now: this
    // machine's own free space may warn (exit 1), and nothing else may.
    let d = report(&env, None, &[]);
    assert!(
        d.code() == 0 || (d.code() == 1 && d.stderr().contains("ATTENTION: disk")),
        "{}",
        d.report()
    );
    assert!(
        d.stdout().trim().ends_with("roger-report.html"),
        "{}",
        d.report()
    );
    assert!(env.path("roger-report.html").exists());

    super::browser::check_page(
        &env,
        &env.path("a.html"),
        &["wedge", "crash", "divergence", "rejected-publish"],
    );
    if std::env::var_os("ROGER_UPDATE_DOCS").is_some() {
        // docs/ assets: the live page (disk measured now), its screenshot and the digest.
        super::browser::screenshot_to_docs(&env, &env.path("roger-report.html"));
        let digest = report(&env, None, &["--text"]).stdout();
        std::fs::write(
            crate::util::repo_root().join("docs/report-night.txt"),
            digest,
        )
        .unwrap();
    }
}

#[test]
fn eta_of_a_steady_run_is_within_five_percent() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"steady\"\nlog = \"train.jsonl\"\n\n[schedule]\nkind = \"constant\"\npeak_lr = 0.0006\ntotal_steps = 120\n",
    );
    let mut t = std::process::Command::new(fake_train());
    t.args(["--log", env.path("train.jsonl").to_str().unwrap()])
        .args(["--ckpt-dir", env.path("ck").to_str().unwrap()])
        .args(["--steps", "120", "--step-ms", "100", "--save-every", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut trainer = t.spawn().unwrap();
    assert!(poll("step 30", Duration::from_secs(60), || log_times(&env)
        .len()
        >= 30));
    let m = model(&env, None);
    let st = wait_child(&mut trainer, Duration::from_secs(120));
    assert!(st.success());
    // Measured from the newest step the report saw, so the report's own latency is no error.
    let h = &m["headline"];
    let seen = h["step"].as_u64().unwrap();
    let log = log_times(&env);
    let seen_at = log.iter().find(|s| s.0 == seen).unwrap().1;
    let finished = log.last().unwrap().1;
    let ms = |k: &str| {
        chrono::DateTime::parse_from_rfc3339(h["eta"][k].as_str().unwrap())
            .unwrap()
            .timestamp_millis() as f64
            / 1000.0
    };
    let predicted = ms("finish_at") - seen_at;
    let truth = finished - seen_at;
    assert!(
        (predicted - truth).abs() <= 0.05 * truth,
        "predicted {predicted:.2}s to go from step {seen}, it took {truth:.2}s"
    );
}
