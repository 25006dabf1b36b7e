//! `roger critic` end to end: the real binary on fixture logs in every format, the bundled
//! example, a real Hugging Face Trainer state (overfitting), a resumed run whose LR restarted,
//! replay (and a tampered observation), and the daemon on a log another process appends to.

use crate::util::{repo_root, Env};
use roger::ledger::{Ledger, Record};
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn fixture(name: &str) -> std::path::PathBuf {
    repo_root().join("tests/fixtures").join(name)
}

fn verdicts(env: &Env) -> Vec<Record> {
    Ledger::new(env.path("roger-ledger.jsonl"))
        .records()
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == roger::ledger::Kind::Verdict)
        .collect()
}

pub(crate) fn check<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {v:#}"))
}

pub(crate) fn json_out(run: &crate::util::Run) -> Value {
    serde_json::from_str(run.stdout().trim()).unwrap_or_else(|e| panic!("{e}\n{}", run.report()))
}

#[test]
fn example_quick_start_passes_and_replays() {
    let env = Env::new();
    env.write(
        "roger.example.toml",
        std::fs::read(repo_root().join("roger.example.toml")).unwrap(),
    );
    env.write(
        "examples/train_log.jsonl",
        std::fs::read(repo_root().join("examples/train_log.jsonl")).unwrap(),
    );
    let run = env
        .run(&["--config", "roger.example.toml", "critic", "--once"])
        .expect(0)
        .stdout_has("PASS  step 1200  phase main")
        .stdout_has("stale        finished at step 1200: the run reached total_steps = 1200");
    // One line per check after the header.
    assert_eq!(run.stdout().lines().count(), 1 + 9, "{}", run.report());
    env.run(&["--config", "roger.example.toml", "critic", "--replay"])
        .expect(0)
        .stdout_has("replayed 1 critic verdict(s), 0 differ");
}

const WHISPER: &str = r#"
[run]
name = "whisper-large-v2-ja"
log = "trainer_state.json"
format = "hf-trainer-state"

[schedule]
kind = "linear"
peak_lr = 1e-5
min_lr = 0.0
warmup_steps = 500
total_steps = 5000

[[phase]]
name = "warmup"
from = 0
to = 500
loss = [0.05, 1.0]
stale = "10m"
window = 20

[[phase]]
name = "main"
from = 500
loss = [0.00005, 1.0]
stale = "10m"
window = 20

[[quiet]]
name = "eval"
every = 1000
duration = "30m"
"#;

#[test]
fn real_hf_trainer_state_lr_passes_and_overfitting_fails() {
    let env = Env::new();
    env.write("roger.toml", WHISPER);
    env.write(
        "trainer_state.json",
        std::fs::read(fixture("hf_whisper_trainer_state.json")).unwrap(),
    );
    let run = env.run(&["critic", "--once", "--json"]).expect(2);
    let v = json_out(&run);
    assert_eq!(v["status"], "fail");
    assert_eq!(check(&v, "lr")["status"], "pass", "{v:#}");
    let eval = check(&v, "eval");
    assert_eq!(eval["status"], "fail");
    let reason = eval["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("overfitting: eval loss 0.42 at step 5000 is 0.099 (+30.8%) above its best 0.321 at step 1000, 4 eval(s) in a row"),
        "{reason}"
    );
    assert!(reason.contains("while train loss fell"), "{reason}");
    assert_eq!(check(&v, "stale")["status"], "pass");
    assert_eq!(v["checks"][0]["check"], "eval", "worst first");
}

/// The lr check at every point of the real run: trainers log the LR of a neighbouring step
/// (here 2-4 steps behind) and decay to 0 — step slack plus a fraction of peak absorb both.
#[test]
fn real_hf_trainer_state_lr_passes_at_every_step() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/whisper.toml");
    let cfg = roger::config::Config::parse(WHISPER, &path).unwrap();
    let out = roger::metrics::read_all(
        &fixture("hf_whisper_trainer_state.json"),
        cfg.run.format,
        &cfg.metrics,
    )
    .unwrap();
    assert_eq!(out.garbage_total, 0, "{:?}", out.garbage);
    assert!(out.samples.len() > 200);
    let mut h = roger::critic::History::new(&cfg);
    let mut judged = 0;
    for s in out.samples {
        let has_lr = s.get("lr").is_some();
        h.push(s);
        let obs = roger::critic::observe(&h, &cfg, 0.0, None);
        let r = roger::critic::checks::lr(&obs).unwrap();
        if has_lr {
            assert_eq!(r.status, roger::critic::Status::Pass, "{}", r.reason);
            judged += 1;
        }
    }
    assert_eq!(judged, 200);
}

#[test]
fn resumed_run_whose_lr_restarts_from_warmup_fails_on_lr() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"r\"\nlog = \"train.jsonl\"\n[schedule]\nkind = \"cosine\"\npeak_lr = 6e-4\nmin_lr = 6e-5\nwarmup_steps = 200\ntotal_steps = 5000\n[[phase]]\nname = \"main\"\nfrom = 0\nloss = [2.5, 12.0]\nwindow = 10\n",
    );
    env.write(
        "train.jsonl",
        std::fs::read(fixture("resumed_lr_restart.jsonl")).unwrap(),
    );
    let run = env.run(&["critic"]).expect(2);
    let first = run.stdout().lines().nth(1).unwrap_or_default().to_string();
    assert!(first.starts_with("fail    lr "), "{}", run.report());
    assert!(first.contains("restart the schedule"), "{}", run.report());
    // The abandoned steps 1610..2000 are not in the window; the resume is the timeline.
    let v = &verdicts(&env)[0];
    assert_eq!(v.step, Some(1600));
}

#[test]
fn lightning_csv_with_empty_cells() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"pl\"\nlog = \"metrics.csv\"\nformat = \"csv\"\n[metrics]\nloss = \"train_loss\"\neval_loss = \"val_loss\"\nlr = \"lr-AdamW\"\n[schedule]\nkind = \"constant\"\npeak_lr = 1e-3\nwarmup_steps = 100\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [0.5, 5.0]\ngrad_norm_max = 2.0\nstale = \"1h\"\nwindow = 30\n",
    );
    env.write(
        "metrics.csv",
        std::fs::read(fixture("lightning_metrics.csv")).unwrap(),
    );
    let run = env.run(&["critic", "--json"]).expect(0);
    let v = json_out(&run);
    assert_eq!(v["step"], 600);
    assert_eq!(check(&v, "lr")["status"], "pass");
    assert_eq!(check(&v, "eval")["status"], "pass", "val rows become evals");
    assert_eq!(check(&v, "grad_norm")["status"], "pass");
    assert_eq!(v["seq"], 1);
}

#[test]
fn text_log_with_colours_progress_bars_and_a_bad_line() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"nano\"\nlog = \"train.log\"\nformat = \"text\"\n[metrics]\npatterns = [{ regex = 'iter (\\d+): loss ([^,]+),', fields = [\"step\", \"loss\"] }]\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [3.0, 11.0]\nloss_slope = [-50.0, 0.0]\nwindow = 50\n",
    );
    env.write(
        "train.log",
        std::fs::read(fixture("nanogpt_train.log")).unwrap(),
    );
    env.run(&["critic", "--json"])
        .expect(0)
        .stderr_has("train.log:7: matched a pattern but `loss` is \"3.x1\", expected a number");
    let v = &verdicts(&env)[0];
    assert_eq!(v.step, Some(400));
    let obs = v.get("observation").unwrap();
    assert_eq!(
        obs["window"].as_array().unwrap().len(),
        41,
        "iter 0..400 by 10"
    );
    assert_eq!(obs["garbage_total"], 1);
}

#[test]
fn nan_loss_fails_at_once_and_survives_the_ledger() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"n\"\nlog = \"train.jsonl\"\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [1.0, 5.0]\n",
    );
    let mut log = String::new();
    for s in 0..10 {
        log.push_str(&format!("{{\"step\": {s}, \"loss\": 2.0}}\n"));
    }
    log.push_str("this line is not json\n");
    log.push_str("{\"step\": 10, \"loss\": NaN}\n{\"step\": 11, \"loss\": \"nan\"}\n");
    env.write("train.jsonl", log);
    env.run(&["critic"])
        .expect(2)
        .stdout_has(
            "fail    loss         loss is NaN at step 11 (2 sample(s) in a row since step 10)",
        )
        .stderr_has("train.jsonl:11: expected a JSON object");
    let v = &verdicts(&env)[0];
    let loss = v.get("checks").unwrap().as_array().unwrap()[0].clone();
    assert_eq!(loss["diverged_at"], 10);
    assert_eq!(
        v.get("observation").unwrap()["window"][10]["values"]["loss"],
        "NaN"
    );
    env.run(&["critic", "--replay"])
        .expect(0)
        .stdout_has("0 differ");
}

#[test]
fn replay_detects_a_tampered_observation() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"t\"\nlog = \"train.jsonl\"\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [1.0, 5.0]\nstale = \"1h\"\n",
    );
    env.write(
        "train.jsonl",
        "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\": 2.1}\n",
    );
    env.run(&["critic"]).expect(0);
    env.run(&["critic", "--heartbeat"]).expect(0);
    env.run(&["critic", "--replay", "--ledger", "roger-ledger.jsonl"])
        .expect(0)
        .stdout_has("replayed 2 critic verdict(s), 0 differ");
    let text = env.read("roger-ledger.jsonl");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert!(lines[1].contains("\"loss\":2.1"), "{}", lines[1]);
    lines[1] = lines[1].replacen("\"loss\":2.1", "\"loss\":9.1", 1);
    env.write("roger-ledger.jsonl", lines.join("\n") + "\n");
    env.run(&["critic", "--replay"])
        .expect(2)
        .stdout_has("seq 2 step 2: archived pass, recomputed fail: status pass → fail")
        .stdout_has("1 differ");
}

#[test]
fn vram_from_a_gpu_recording_when_the_log_has_none() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"g\"\nlog = \"train.jsonl\"\n[[phase]]\nname = \"all\"\nfrom = 0\nvram_max_gib = 70\n[gpu]\nsource = \"replay\"\nreplay = \"gpu.json\"\n",
    );
    env.write(
        "gpu.json",
        r#"{"snapshots":[{"gpus":[{"index":0,"name":"NVIDIA H100","uuid":"GPU-1","memory_used":80530636800,"memory_total":85899345920}],"processes":[{"pid":4242,"gpu":0,"used_memory":64424509440}],"source":"nvml"}]}"#,
    );
    env.write("train.jsonl", "{\"step\": 1, \"loss\": 2.0}\n");
    env.run(&["critic"])
        .expect(1)
        .stdout_has("warn    vram         VRAM 75 GiB (read from the GPU: total memory used");
    env.run(&["critic", "--pid", "4242"])
        .expect(0)
        .stdout_has("VRAM 60 GiB (read from the GPU: memory of PID(s) 4242");
}

#[test]
fn no_data_is_unknown_and_bad_settings_are_named() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"u\"\nlog = \"nope.jsonl\"\n[[phase]]\nname = \"all\"\nfrom = 0\n",
    );
    env.run(&["critic"])
        .expect(3)
        .stdout_has("unknown log")
        .stderr_has("nope.jsonl does not exist (yet)");
    env.write(
        "roger.toml",
        "[run]\nname = \"u\"\nlog = \"nope.jsonl\"\n[critic]\neval_window = 1\n",
    );
    env.run(&["critic"])
        .expect(3)
        .stderr_has("roger.toml:5:1: [critic] expected eval_window >= 2");
    env.write("roger.toml", "[run]\nname = \"u\"\n");
    env.run(&["critic"])
        .expect(3)
        .stderr_has("set [run] log or pass --log");
    env.run(&["critic", "--replay", "--ledger", "empty.jsonl"])
        .expect(3)
        .stdout_has("replayed 0 critic verdict(s)");
}

#[test]
fn now_flag_judges_a_copied_log_as_of_then() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"c\"\nlog = \"train.jsonl\"\n[[phase]]\nname = \"all\"\nfrom = 0\nstale = \"5m\"\n",
    );
    // 2024-05-01T00:00:00Z and 00:01:00Z.
    env.write(
        "train.jsonl",
        "{\"step\": 1, \"loss\": 2.0, \"time\": 1714521600}\n{\"step\": 2, \"loss\": 2.0, \"time\": \"2024-05-01T00:01:00Z\"}\n",
    );
    env.run(&["critic", "--now", "2024-05-01T00:03:00Z"])
        .expect(0)
        .stdout_has("step 2 advanced 2m ago (limit 5m)");
    env.run(&["critic"])
        .expect(2)
        .stdout_has("fail    stale")
        .stdout_has("unknown loss         stale data, cannot vouch");
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stale_fails(recs: &[Record]) -> usize {
    recs.iter()
        .filter(|r| {
            r.get("checks").and_then(Value::as_array).is_some_and(|c| {
                c.iter()
                    .any(|c| c["check"] == "stale" && c["status"] == "fail")
            })
        })
        .count()
}

#[test]
fn daemon_follows_an_appended_log_files_stale_once_and_stops_on_sigterm() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"d\"\nlog = \"train.jsonl\"\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [0.1, 10.0]\nstale = \"1s\"\nwindow = 20\n[critic]\ndisk_check = true\n",
    );
    env.write("train.jsonl", "{\"step\": 1, \"loss\": 2.0}\n");
    let mut daemon = env.cmd(&["critic", "--daemon", "--interval", "200ms"]);
    daemon.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = daemon.spawn().unwrap();
    // Another process appends 15 lines, 100 ms apart, then the "training" stops.
    let appender = std::process::Command::new("sh")
        .arg("-c")
        .arg("i=2; while [ $i -le 16 ]; do echo \"{\\\"step\\\": $i, \\\"loss\\\": 2.0}\" >> train.jsonl; i=$((i+1)); sleep 0.1; done")
        .current_dir(env.dir.path())
        .status()
        .unwrap();
    assert!(appender.success());
    wait_for("a stale verdict", Duration::from_secs(30), || {
        stale_fails(&verdicts(&env)) > 0
    });
    let recs = verdicts(&env);
    let stale = recs
        .iter()
        .find(|r| stale_fails(std::slice::from_ref(r)) > 0)
        .unwrap();
    assert_eq!(stale.step, Some(16), "every appended line was read");
    assert!(
        recs.iter().any(|r| r.str_field("status") == Some("pass")),
        "live verdicts passed"
    );
    // Identical stale verdicts are not filed again on every tick.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(stale_fails(&verdicts(&env)), 1);

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "daemon ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("stale: no new step for"), "{stdout}");
    // [critic] disk_check: hygiene's disk check ran from the daemon and filed its first status.
    let all = Ledger::new(env.path("roger-ledger.jsonl"))
        .records()
        .unwrap();
    assert!(all.iter().any(|r| r.kind == roger::ledger::Kind::Hygiene
        && r.source == "critic"
        && r.str_field("check") == Some("disk")));
}

#[test]
fn flapping_checks_are_named_from_the_verdict_history() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"f\"\nlog = \"train.jsonl\"\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [1.0, 5.0]\nstale = \"1h\"\n",
    );
    env.write("train.jsonl", "{\"step\": 1, \"loss\": 2.0}\n");
    let ledger = Ledger::new(env.path("roger-ledger.jsonl"));
    for i in 0..12 {
        let status = if i % 2 == 0 { "pass" } else { "fail" };
        let entry = roger::ledger::Entry::new(roger::ledger::Kind::Verdict, "critic", "f")
            .step(Some(i))
            .field("status", status)
            .field(
                "checks",
                serde_json::json!([{"check": "loss", "status": status}]),
            );
        ledger.append(entry, chrono::Utc::now()).unwrap();
    }
    env.run(&["critic"])
        .expect(0)
        .stdout_has("flapping     loss (see `roger hygiene flap`)");
    let v = verdicts(&env).pop().unwrap();
    assert_eq!(v.get("flapping").unwrap(), &serde_json::json!(["loss"]));
}

/// Issue 29: a finished HF run judged two hours after its end. The real trainer_state.json has
/// `global_step == max_steps` (2178) but its last loss entry is at 2175 (logged every 5 steps);
/// only the closing summary entry is at 2178. Not stale: it finished. The same run cut short
/// (log_history truncated at step 1000, `global_step` 1000, as a crash leaves it) stays stale.
#[test]
fn finished_hf_run_is_not_stale_hours_later_but_a_short_one_is() {
    let config = "[run]\nname = \"q\"\nlog = \"trainer_state.json\"\nformat = \"hf-trainer-state\"\n[metrics]\nstep = \"step\"\nloss = \"loss\"\n[[phase]]\nname = \"all\"\nfrom = 0\nstale = \"1h\"\n";
    let real: Value =
        serde_json::from_slice(&std::fs::read(fixture("real/hf-qwen3-8b-cpt.json")).unwrap())
            .unwrap();
    let mut short = real.clone();
    let history = short["log_history"].as_array_mut().unwrap();
    history.retain(|e| e["step"].as_u64().is_some_and(|s| s <= 1000) && e.get("loss").is_some());
    short["global_step"] = 1000.into();
    // The entries carry no time: the file's mtime (2024-05-01T00:00:00Z) stands in.
    let ended = std::time::UNIX_EPOCH + Duration::from_secs(1_714_521_600);
    for (doc, want, words) in [
        (
            &real,
            "pass",
            "finished at step 2178: the run reached total_steps = 2178",
        ),
        (&short, "fail", "no new step for 2h (step 1000)"),
    ] {
        let env = Env::new();
        env.write("roger.toml", config);
        let log = env.write("trainer_state.json", serde_json::to_vec(doc).unwrap());
        let v = judged_two_hours_after(&env, &log, ended);
        let stale = check(&v, "stale");
        assert_eq!(stale["status"], want, "{v:#}");
        assert!(stale["reason"].as_str().unwrap().contains(words), "{v:#}");
    }
}

/// Issue 36 defect 6: the real llm.c GPT-2 124M run at step 19552, whose lr has printed
/// 0.000000 since step 19214, against the cosine total 19560 init fits from its lr column,
/// judged two hours after its last line: finished on the schedule's floor, not stale. The same
/// log stopped at step 18999 (lr 0.000001, one printed unit above the floor) stays stale.
#[test]
fn run_ended_on_its_schedules_floor_is_finished_not_stale() {
    let ended = std::time::UNIX_EPOCH + Duration::from_secs(1_714_521_600);
    let text = std::fs::read_to_string(fixture("slices/llmc-gpt2-124m-end.txt")).unwrap();
    let upto = |last: &str| -> String {
        let end = text.find(last).expect("step in fixture");
        let end = end + text[end..].find('\n').unwrap() + 1;
        text[..end].to_string()
    };
    for (log, want, words) in [
        (
            upto("s:19552 trl:"),
            "pass",
            "finished at step 19552: the lr reached the schedule's floor 0 at step 19552, 8 step(s) before its total_steps = 19560",
        ),
        (
            upto("s:18999 trl:"),
            "fail",
            "no new step for 2h (step 18999)",
        ),
    ] {
        let env = Env::new();
        env.write(
            "roger.toml",
            "[run]\nname = \"llmc\"\nlog = \"main.log\"\nformat = \"text\"\n[metrics]\npatterns = [\n  { regex = 's:(?P<step>\\d+) trl:(?P<loss>[0-9.]+) lr:(?P<lr>[0-9.]+) norm:(?P<grad_norm>[0-9.]+)' },\n  { regex = 's:(?P<step>\\d+) tel:(?P<eval_loss>[0-9.]+)' },\n]\n[schedule]\nkind = \"cosine\"\npeak_lr = 6e-4\nmin_lr = 0.0\nwarmup_steps = 700\ntotal_steps = 19560\ntolerance = 0.02\n[[phase]]\nname = \"main\"\nfrom = 700\nstale = \"1h\"\nwindow = 50\n",
        );
        let path = env.write("main.log", &log);
        let v = judged_two_hours_after(&env, &path, ended);
        let stale = check(&v, "stale");
        assert_eq!(stale["status"], want, "{v:#}");
        assert!(stale["reason"].as_str().unwrap().contains(words), "{v:#}");
    }
}

/// `critic --once --json` at 2024-05-01T02:00Z on a log last written at `ended`.
fn judged_two_hours_after(env: &Env, log: &std::path::Path, ended: std::time::SystemTime) -> Value {
    std::fs::File::options()
        .write(true)
        .open(log)
        .unwrap()
        .set_modified(ended)
        .unwrap();
    json_out(&env.run(&[
        "critic",
        "--once",
        "--json",
        "--now",
        "2024-05-01T02:00:00Z",
    ]))
}

/// Issue 29, guard: a text log (nanoGPT, `max_iters` 400) judged two hours after its last line
/// is finished when its step reached `[schedule] total_steps`, and stale when short of it.
#[test]
fn finished_text_run_is_not_stale_hours_later_but_a_short_one_is() {
    let ended = std::time::UNIX_EPOCH + Duration::from_secs(1_714_521_600);
    for (total, want) in [(400, "pass"), (5000, "fail")] {
        let env = Env::new();
        env.write(
            "roger.toml",
            format!("[run]\nname = \"nano\"\nlog = \"train.log\"\nformat = \"text\"\n[metrics]\npatterns = [{{ regex = 'iter (\\d+): loss ([^,]+),', fields = [\"step\", \"loss\"] }}]\n[schedule]\nkind = \"constant\"\npeak_lr = 6e-4\ntotal_steps = {total}\n[[phase]]\nname = \"all\"\nfrom = 0\nstale = \"1h\"\n"),
        );
        let log = env.write(
            "train.log",
            std::fs::read(fixture("nanogpt_train.log")).unwrap(),
        );
        let v = judged_two_hours_after(&env, &log, ended);
        assert_eq!(check(&v, "stale")["status"], want, "total {total}: {v:#}");
    }
}
