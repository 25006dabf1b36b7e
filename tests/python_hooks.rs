//! Issue 30 §2: the training hooks as an importable package (python/roger_guard), each tested
//! against the real library on CPU with the real `roger` binary (ROGER_BIN): the plain
//! helpers, a Hugging Face `transformers.Trainer` and a Lightning `Trainer`, the examples that
//! now import the package, a Trainer under `roger watch` rolled back by the critic and
//! resumed by the callback, and one answering the watch's preemption hand-off. Python is Debian's /usr/bin/python3 with its python3-torch (1.13);
//! transformers and Lightning are the versions `.ci/run` pins. The drivers are in
//! tests/fixtures/python_hooks/.

use crate::util::{self, repo_root, Env};
use crate::watch::{records, roger, wait_child};
use roger::ledger::{Kind, Record};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const PY: &str = "/usr/bin/python3";
const ROGER_TOML: &str = "[run]\nname = \"hooks\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ckpt\"\n[gpu]\nsource = \"none\"\n";
const PIP: &str = "pip install transformers==4.44.2 accelerate==0.33.0 pytorch-lightning==2.0.9 torchmetrics==1.2.1 for /usr/bin/python3 beside apt's python3-torch; .ci/run does";

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/python_hooks").join(name)
}

/// PYTHONPATH: the package, and the fixtures (torch_py311).
fn pythonpath() -> String {
    format!(
        "{}:{}",
        repo_root().join("python").display(),
        repo_root().join("tests/fixtures/python_hooks").display()
    )
}

/// A Python command in the test's directory, with the package and the real roger, and none
/// of the variables `roger watch` would set.
fn python(env: &Env, py: &str) -> Command {
    let mut c = Command::new(py);
    c.current_dir(env.dir.path())
        .env("PYTHONPATH", pythonpath())
        .env("ROGER_BIN", util::roger_bin())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .stdin(Stdio::null());
    for v in [
        "ROGER_CONFIG",
        "ROGER_RESUME_CKPT",
        "ROGER_RESUME_STEP",
        "ROGER_DIVERGED_AT",
        "ROGER_SAVE_NOW",
        "ROGER_SAVE_S",
    ] {
        c.env_remove(v);
    }
    c
}

/// Can /usr/bin/python3 import these (after the torch 1.13 / Python 3.11 fixture)?
fn ready(test: &str, modules: &str, component: &str) -> bool {
    let ok = Command::new(PY)
        .env("PYTHONPATH", pythonpath())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(["-c", &format!("import torch_py311\nimport {modules}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        util::missing(test, component, PIP);
    }
    ok
}

fn python_ready(test: &str) -> bool {
    ready(test, "json", &format!("{PY} (Python >= 3.10)"))
}

fn run(mut c: Command, what: &str, limit: Duration) -> Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    // Drained on threads: a chatty child must not block on a full pipe.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t1 = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut v).ok();
        v
    });
    let t2 = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut v).ok();
        v
    });
    let status = wait_child(&mut child, limit);
    Output {
        status,
        stdout: t1.join().unwrap(),
        stderr: t2.join().unwrap(),
    }
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn steps_of(recs: &[Record], kind: Kind) -> BTreeSet<u64> {
    recs.iter()
        .filter(|r| r.kind == kind)
        .filter_map(|r| r.step)
        .collect()
}

fn waited_notes(recs: &[Record]) -> Vec<&Record> {
    recs.iter()
        .filter(|r| r.kind == Kind::Note && r.str_field("event") == Some("publish-waited"))
        .collect()
}

/// The `step` of every line of a JSON-lines log that has a loss, in order.
fn logged_steps(env: &Env, rel: &str) -> Vec<u64> {
    env.read(rel)
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            v.get("loss")?.as_f64()?;
            v["step"].as_u64()
        })
        .collect()
}

fn story(env: &Env, out: &Output) -> String {
    let recs = records(env);
    format!(
        "stderr:\n{}\nledger:\n{}",
        String::from_utf8_lossy(&out.stderr),
        recs.iter()
            .map(|r| format!("#{} {:?} step {:?} {:?}", r.seq, r.kind, r.step, r.fields))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

#[test]
fn roger_guard_imports_with_the_standard_library_only() {
    let test = "roger_guard_imports_with_the_standard_library_only";
    if !python_ready(test) {
        return;
    }
    let env = Env::new();
    // -S: no site-packages at all, so an import of anything outside the standard library fails.
    let mut c = python(&env, PY);
    c.args([
        "-S",
        "-c",
        "import sys, roger_guard, roger_guard._core, roger_guard._lightning\n\
         print(sorted(m for m in sys.modules if m.split('.')[0] not in sys.stdlib_module_names and not m.startswith('roger_guard') and m != '__main__'))\n\
         try:\n    import roger_guard.hf\nexcept ModuleNotFoundError as e:\n    print(e.name)\n",
    ]);
    let out = ok(run(c, "python3 -S", Duration::from_secs(60)), "python3 -S");
    // Nothing outside the standard library; the HF module is where transformers is imported.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "[]\ntransformers"
    );
}

#[test]
fn the_plain_helpers_publish_wait_resume_and_answer_each_save_request_once() {
    let test = "the_plain_helpers_publish_wait_resume_and_answer_each_save_request_once";
    if !python_ready(test) {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", ROGER_TOML);
    let mut c = python(&env, PY);
    c.arg(fixture("helpers.py"));
    let out = ok(run(c, "helpers.py", Duration::from_secs(120)), "helpers.py");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let recs = records(&env);
    let why = story(&env, &out);
    assert_eq!(got["detach_rc"], 0, "{why}");
    // Queued with --detach, then --wait: published by the time wait() returned.
    assert_eq!(
        steps_of(&recs, Kind::PublishQueued),
        BTreeSet::from([10]),
        "{why}"
    );
    assert_eq!(
        steps_of(&recs, Kind::Publish),
        BTreeSet::from([10, 20]),
        "{why}"
    );
    let published = got["published"].as_array().unwrap();
    for f in ["ckpt-10.bin", "ckpt-20.bin", "latest.json"] {
        assert!(published.iter().any(|p| p == f), "{f} not in {published:?}");
    }
    let wait = waited_notes(&recs);
    assert_eq!(wait.len(), 1, "{why}");
    let queued = recs.iter().find(|r| r.kind == Kind::PublishQueued).unwrap();
    let published_10 = recs
        .iter()
        .find(|r| r.kind == Kind::Publish && r.step == Some(10))
        .unwrap();
    assert!(
        queued.seq < published_10.seq && published_10.seq < wait[0].seq,
        "{why}"
    );
    // roger's own words reach the caller.
    let missing = got["missing_source"].as_str().unwrap();
    assert!(
        missing.starts_with("PublishError: ")
            && missing.contains("source checkpoint staging/nope.bin"),
        "{missing}"
    );
    assert_eq!(
        got["resume"],
        serde_json::json!([env.path("ckpt/ckpt-10.bin").display().to_string(), 10, 15])
    );
    // Onset 15: 3 before it, 5 after; never before the resumed step 10.
    assert_eq!(got["skip"], serde_json::json!([12, 20]));
    assert_eq!(got["skip_clamped"], serde_json::json!([11, 20]));
    assert_eq!(
        got["bad_diverged"],
        "ValueError: ROGER_DIVERGED_AT='fifteen': expected a step number"
    );
    assert!(
        got["gone_resume"]
            .as_str()
            .unwrap()
            .starts_with("FileNotFoundError: ROGER_RESUME_CKPT="),
        "{}",
        got["gone_resume"]
    );
    assert_eq!(got["fresh"], serde_json::json!([null, null, null, null]));
    // No file; notice 1 (answered once); notice 1 rewritten (already answered); notice 2;
    // then USR1 through the flag handler (answered once).
    assert_eq!(got["installed"], true);
    assert_eq!(
        got["save_requested"],
        serde_json::json!([false, true, false, false, false, true, false, true, false])
    );
    assert_eq!(
        got["bad_bin"],
        "RogerNotFound: ROGER_BIN='/nonexistent/roger' is not an executable file"
    );
}

#[test]
fn roger_is_found_beside_the_interpreter_of_a_venv_then_on_path() {
    let test = "roger_is_found_beside_the_interpreter_of_a_venv_then_on_path";
    if !python_ready(test) {
        return;
    }
    let env = Env::new();
    let venv = env.path("venv");
    let st = Command::new(PY)
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(st.success(), "python3 -m venv --without-pip");
    let vpy = venv.join("bin/python").display().to_string();
    let which = |path: &str| {
        let mut c = python(&env, &vpy);
        c.env_remove("ROGER_BIN").env("PATH", path).args([
            "-c",
            "import roger_guard\ntry:\n    print(roger_guard.roger_bin())\nexcept roger_guard.RogerNotFound as e:\n    print('not found:', e)",
        ]);
        let out = ok(
            run(c, "roger_bin()", Duration::from_secs(60)),
            "roger_bin()",
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(util::roger_bin(), elsewhere.join("roger")).unwrap();
    let path = format!("{}:/usr/bin:/bin", elsewhere.display());
    // Not in the venv: PATH.
    assert_eq!(which(&path), elsewhere.join("roger").display().to_string());
    // In the venv's scripts dir (where the wheel puts it): that one, even with another on PATH.
    std::os::unix::fs::symlink(util::roger_bin(), venv.join("bin/roger")).unwrap();
    assert_eq!(which(&path), venv.join("bin/roger").display().to_string());
    // `python -m roger_guard ARGS` runs that roger (the venv's scripts dir need not be on PATH).
    let mut c = python(&env, &vpy);
    c.env_remove("ROGER_BIN")
        .env("PATH", "/usr/bin:/bin")
        .args(["-m", "roger_guard", "--version"]);
    let out = ok(
        run(c, "python -m roger_guard", Duration::from_secs(60)),
        "python -m roger_guard --version",
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("roger "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    std::fs::remove_file(venv.join("bin/roger")).unwrap();
    let none = which("/usr/bin:/bin");
    assert!(
        none.starts_with(
            "not found: no `roger` binary: set ROGER_BIN, or install roger into this environment \
             (`pip install ./python` from a checkout; `pip install roger-guard` once released)"
        ),
        "{none}"
    );
}

#[test]
fn a_real_hf_trainer_publishes_each_save_answers_save_now_and_resumes() {
    let test = "a_real_hf_trainer_publishes_each_save_answers_save_now_and_resumes";
    if !ready(
        test,
        "roger_guard.hf",
        &format!("transformers for {PY} (with python3-torch)"),
    ) {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", ROGER_TOML);
    let mut c = python(&env, PY);
    c.arg(fixture("hf_train.py"))
        .env("STEPS", "12")
        .env("SAVE_STEPS", "4")
        .env("CUE_SAVE_FILE_AT", "6")
        .env("CUE_SIGNAL_AT", "9")
        .env("ROGER_SAVE_NOW", env.path("save-now"));
    let out = ok(
        run(c, "hf_train.py", Duration::from_secs(180)),
        "hf_train.py",
    );
    let recs = records(&env);
    let why = story(&env, &out);
    // save_steps 4, 8, 12; the save-now file at 6 and USR1 at 9, each answered once (by the
    // step's own save: never again at 7 or 10).
    let want = BTreeSet::from([4, 6, 8, 9, 12]);
    assert_eq!(steps_of(&recs, Kind::PublishQueued), want, "{why}");
    assert_eq!(steps_of(&recs, Kind::Publish), want, "{why}");
    for r in recs.iter().filter(|r| r.kind == Kind::PublishQueued) {
        let p = r.str_field("path").unwrap_or_default();
        assert!(
            p.ends_with(&format!("out/checkpoint-{}", r.step.unwrap())),
            "{p}\n{why}"
        );
    }
    // The save's own time reaches the record (for the notice-window check).
    for r in recs.iter().filter(|r| r.kind == Kind::Publish) {
        assert!(r.get("save_s").is_some(), "no save_s in #{}\n{why}", r.seq);
    }
    // on_train_end waited for the queue.
    let last_queued = recs
        .iter()
        .rfind(|r| r.kind == Kind::PublishQueued)
        .unwrap();
    assert!(
        waited_notes(&recs).iter().any(|n| n.seq > last_queued.seq),
        "{why}"
    );
    assert!(
        env.path("ckpt/checkpoint-12/trainer_state.json").is_file(),
        "{why}"
    );
    assert_eq!(
        logged_steps(&env, "train.jsonl"),
        (1..=12).collect::<Vec<_>>()
    );

    // Relaunched from the published checkpoint-8: the Trainer goes on at step 9.
    let mut c = python(&env, PY);
    c.arg(fixture("hf_train.py"))
        .env("STEPS", "12")
        .env("SAVE_STEPS", "4")
        .env("OUT", "out2")
        .env("LOG", "resumed.jsonl")
        .env("ROGER_RESUME_CKPT", env.path("ckpt/checkpoint-8"))
        .env("ROGER_RESUME_STEP", "8");
    let out = ok(
        run(c, "hf_train.py resumed", Duration::from_secs(180)),
        "resumed",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        logged_steps(&env, "resumed.jsonl"),
        (9..=12).collect::<Vec<_>>(),
        "{err}"
    );
    assert!(!err.contains("starts at step 0"), "{err}");
    assert!(env.path("out2/checkpoint-12").is_dir(), "{err}");
    assert!(!env.path("out2/checkpoint-4").exists(), "{err}");
}

/// Also under DDP: a save request that reached one rank is answered by all of them.
#[test]
fn a_real_lightning_trainer_publishes_answers_save_now_resumes_and_waits_on_exception() {
    let test = "a_real_lightning_trainer_publishes_answers_save_now_resumes_and_waits_on_exception";
    if !ready(
        test,
        "roger_guard.lightning",
        &format!("Lightning for {PY} (with python3-torch)"),
    ) {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", ROGER_TOML);
    let mut c = python(&env, PY);
    c.arg(fixture("lightning_train.py"))
        .env("STEPS", "12")
        .env("EVERY", "4")
        .env("CUE_SAVE_FILE_AT", "6")
        .env("CUE_SIGNAL_AT", "9")
        .env("ROGER_SAVE_NOW", env.path("save-now"));
    let out = ok(
        run(c, "lightning_train.py", Duration::from_secs(180)),
        "lightning_train.py",
    );
    let recs = records(&env);
    let why = story(&env, &out);
    let want = BTreeSet::from([4, 6, 8, 9, 12]);
    assert_eq!(steps_of(&recs, Kind::PublishQueued), want, "{why}");
    assert_eq!(steps_of(&recs, Kind::Publish), want, "{why}");
    assert!(env.path("ckpt/step_12.ckpt").is_file(), "{why}");
    let last_queued = recs
        .iter()
        .rfind(|r| r.kind == Kind::PublishQueued)
        .unwrap();
    assert!(
        waited_notes(&recs).iter().any(|n| n.seq > last_queued.seq),
        "on_train_end did not wait\n{why}"
    );
    assert_eq!(
        logged_steps(&env, "train.jsonl"),
        (1..=12).collect::<Vec<_>>()
    );

    // The training fails at step 7: on_exception still waits for the queued step 4.
    let mut c = python(&env, PY);
    c.arg(fixture("lightning_train.py"))
        .env("STEPS", "12")
        .env("EVERY", "4")
        .env("RAISE_AT", "7")
        .env("DIRPATH", "saves-failed")
        .env("LOG", "failed.jsonl");
    let out = run(c, "lightning_train.py failing", Duration::from_secs(180));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("RuntimeError: cue: the training fails at step 7"),
        "{err}"
    );
    let recs2 = records(&env);
    let before = recs.len();
    let new = &recs2[before..];
    let queued: Vec<&Record> = new
        .iter()
        .filter(|r| r.kind == Kind::PublishQueued)
        .collect();
    assert_eq!(queued.len(), 1, "{}", story(&env, &out));
    assert_eq!(
        queued[0].str_field("path"),
        Some(
            env.path("saves-failed/step_4.ckpt")
                .display()
                .to_string()
                .as_str()
        )
    );
    let wait = new
        .iter()
        .find(|r| r.kind == Kind::Note && r.str_field("event") == Some("publish-waited"))
        .unwrap_or_else(|| panic!("on_exception did not wait\n{}", story(&env, &out)));
    assert!(
        new.iter()
            .any(|r| r.kind == Kind::Publish && r.step == Some(4) && r.seq < wait.seq),
        "{}",
        story(&env, &out)
    );

    // Two DDP processes (gloo), the save signal to rank 1 only: the ranks agree, so rank 0
    // (the one that writes) saves step 9 too.
    let ddp = Env::new();
    ddp.write("roger.toml", ROGER_TOML);
    let mut c = python(&ddp, PY);
    c.arg(fixture("lightning_train.py"))
        .env("STEPS", "12")
        .env("EVERY", "4")
        .env("DEVICES", "2")
        .env("CUE_SIGNAL_AT", "9")
        .env("CUE_SIGNAL_RANK", "1")
        .env("ROGER_SAVE_NOW", ddp.path("save-now"));
    let out = ok(
        run(c, "lightning DDP", Duration::from_secs(240)),
        "lightning DDP",
    );
    assert_eq!(
        steps_of(&records(&ddp), Kind::Publish),
        BTreeSet::from([4, 8, 9, 12]),
        "{}",
        story(&ddp, &out)
    );

    // Relaunched from the published step_8.ckpt: goes on at step 9.
    let mut c = python(&env, PY);
    c.arg(fixture("lightning_train.py"))
        .env("STEPS", "12")
        .env("EVERY", "4")
        .env("DIRPATH", "saves-resumed")
        .env("LOG", "resumed.jsonl")
        .env("ROGER_RESUME_CKPT", env.path("ckpt/step_8.ckpt"))
        .env("ROGER_RESUME_STEP", "8");
    let out = ok(
        run(c, "lightning resumed", Duration::from_secs(180)),
        "resumed",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        logged_steps(&env, "resumed.jsonl"),
        (9..=12).collect::<Vec<_>>(),
        "{err}"
    );
    assert!(!err.contains("starts at step 0"), "{err}");
}

#[test]
fn the_examples_import_roger_guard_and_publish() {
    let test = "the_examples_import_roger_guard_and_publish";
    if !python_ready(test) {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", ROGER_TOML);
    let ex = repo_root().join("examples");
    // Standard library only: publishes at 100 and 200, waits at the end.
    let mut c = python(&env, PY);
    c.arg(ex.join("train_loop.py"))
        .env("TOTAL_STEPS", "210")
        .env("TRAIN_LOG", "train.jsonl");
    let out = ok(
        run(c, "train_loop.py", Duration::from_secs(120)),
        "train_loop.py",
    );
    let recs = records(&env);
    assert_eq!(
        steps_of(&recs, Kind::Publish),
        BTreeSet::from([100, 200]),
        "{}",
        story(&env, &out)
    );
    assert_eq!(waited_notes(&recs).len(), 1, "{}", story(&env, &out));
    if !ready(
        test,
        "torch, roger_guard.hf",
        &format!("transformers for {PY} (with python3-torch)"),
    ) {
        return;
    }
    let mut c = python(&env, PY);
    c.arg(ex.join("publish/torch_save_detach.py"))
        .env("CKPT_STAGING", "staging-torch")
        .env("CKPT_DIR", "ckpt-torch");
    let out = ok(
        run(c, "torch_save_detach.py", Duration::from_secs(120)),
        "torch_save_detach.py",
    );
    for s in [100, 200, 300] {
        assert!(
            env.path(&format!("ckpt-torch/ckpt-{s}.pt")).is_file(),
            "{}",
            story(&env, &out)
        );
    }
    let mut c = python(&env, PY);
    c.arg(ex.join("publish/hf_trainer_callback.py"))
        .env("MAX_STEPS", "20")
        .env("TRAIN_LOG", "hf.jsonl");
    let out = ok(
        run(c, "hf_trainer_callback.py", Duration::from_secs(180)),
        "hf_trainer_callback.py",
    );
    for s in [10, 20] {
        assert!(
            env.path(&format!("ckpt/checkpoint-{s}/trainer_state.json"))
                .is_file(),
            "{}",
            story(&env, &out)
        );
    }
    assert_eq!(logged_steps(&env, "hf.jsonl"), (1..=20).collect::<Vec<_>>());
}

/// The end-to-end case: a real Trainer under `roger watch` with `roger critic --daemon`
/// beside it. On cue the loss reads 1000x from step 21 (POISON_AT) and the run wedges at step
/// 26 (WEDGE_AT), so it is still there, wedged or about to be, when the critic's fail lands:
/// the watch kills it for the verdict, relaunches it from the last good checkpoint before the
/// onset, and the callback's train() resumes the Trainer there; skip_window() keeps the
/// relaunch off the poisoned data, so it finishes.
#[test]
fn a_real_hf_trainer_under_watch_is_killed_after_the_verdict_and_resumed_by_the_callback() {
    let test =
        "a_real_hf_trainer_under_watch_is_killed_after_the_verdict_and_resumed_by_the_callback";
    if !ready(
        test,
        "roger_guard.hf",
        &format!("transformers for {PY} (with python3-torch)"),
    ) {
        return;
    }
    let env = Env::new();
    env.write(
        "roger.toml",
        r#"[run]
name = "hf"
log = "train.jsonl"
checkpoint_dir = "ckpt"

[gpu]
source = "none"

[watch]
interval = "100ms"
hysteresis = 2
grace = "5s"
stale = "120s"
grind_limit = "120s"
backoff_initial = "100ms"
backoff_max = "200ms"
rollback_on = ["loss"]
rollback_margin_steps = 0

[[phase]]
name = "all"
from = 0
to = 41
loss = [0.0, 20.0]
window = 4
"#,
    );
    let mut w = roger(
        &env,
        &[
            "watch".into(),
            "--".into(),
            PY.into(),
            fixture("hf_train.py").display().to_string(),
        ],
    );
    w.env("PYTHONPATH", pythonpath())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .env("STEPS", "40")
        .env("SAVE_STEPS", "5")
        .env("POISON_AT", "21")
        .env("WEDGE_AT", "26")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let mut watch = w.spawn().unwrap();
    let mut c = env.cmd(&["critic", "--daemon", "--interval", "1s"]);
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("critic.err")).unwrap());
    let mut critic = c.spawn().unwrap();
    let status = wait_child(&mut watch, Duration::from_secs(240));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(critic.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    wait_child(&mut critic, Duration::from_secs(30));
    let recs = records(&env);
    let err = env.read("watch.err");
    let why = format!(
        "watch stderr (training lines):\n{}\nledger:\n{}",
        err.lines()
            .filter(|l| !l.contains(" INFO "))
            .collect::<Vec<_>>()
            .join("\n"),
        recs.iter()
            .filter(|r| !matches!(r.kind, Kind::Publish | Kind::PublishQueued))
            .map(|r| format!("#{} {:?} step {:?} {:?}", r.seq, r.kind, r.step, r.fields))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(status.code(), Some(0), "{why}");

    let fail = recs
        .iter()
        .find(|r| r.kind == Kind::Verdict && r.str_field("status") == Some("fail"))
        .unwrap_or_else(|| panic!("no critic fail\n{why}"));
    let kill = recs
        .iter()
        .find(|r| r.kind == Kind::Kill)
        .unwrap_or_else(|| panic!("no kill\n{why}"));
    assert!(kill.seq > fail.seq, "{why}");
    assert_eq!(kill.str_field("reason"), Some("divergence"), "{why}");
    assert_eq!(kill.u64_field("diverged_at"), Some(21), "{why}");
    let relaunch = recs
        .iter()
        .find(|r| r.kind == Kind::Relaunch)
        .unwrap_or_else(|| panic!("no relaunch\n{why}"));
    assert_eq!(relaunch.u64_field("diverged_at"), Some(21), "{why}");
    assert_eq!(relaunch.u64_field("ckpt_step"), Some(20), "{why}");
    assert_eq!(
        relaunch.str_field("ckpt"),
        Some(
            env.path("ckpt/checkpoint-20")
                .display()
                .to_string()
                .as_str()
        ),
        "{why}"
    );
    assert_eq!(
        recs.iter().filter(|r| r.kind == Kind::Relaunch).count(),
        1,
        "{why}"
    );
    assert!(!recs.iter().any(|r| r.kind == Kind::Breaker), "{why}");

    // The log: the first launch from 1 to at most the wedge, the relaunch from 21 to 40
    // (resumed by the callback, not from scratch), without the poison.
    let rows: Vec<(u64, f64)> = env
        .read("train.jsonl")
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some((v["step"].as_u64()?, v.get("loss")?.as_f64()?))
        })
        .collect();
    let restart = rows
        .windows(2)
        .position(|w| w[1].0 <= w[0].0)
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("the log never goes back: {rows:?}\n{why}"));
    let (first, second) = rows.split_at(restart);
    assert_eq!(first[0].0, 1, "{why}");
    assert!(
        first.last().unwrap().0 <= 26,
        "the first launch ran past its wedge: {first:?}"
    );
    assert_eq!(
        second.iter().map(|r| r.0).collect::<Vec<_>>(),
        (21..=40).collect::<Vec<_>>(),
        "{why}"
    );
    assert!(
        second.iter().all(|r| r.1 < 20.0),
        "the relaunch fed the poison again: {second:?}"
    );
    assert!(
        err.contains(&format!(
            "resume from {} skip range(21, ",
            env.path("ckpt/checkpoint-20").display()
        )),
        "{why}"
    );
    assert!(
        env.path("ckpt/checkpoint-40/trainer_state.json").is_file(),
        "{why}"
    );
}

/// The preemption hand-off with a real Trainer: a SIGTERM notice to `roger watch`
/// (`[preempt]`, outside SLURM), which asks for a save by both channels (`save_now = "both"`:
/// the ROGER_SAVE_NOW file and USR1, whose handler the callback installed: without it USR1
/// would kill the training). The callback answers with `control.should_save` at the next
/// step, once, the publish lands, and roger stops the run and exits for a requeue.
#[test]
fn a_real_hf_trainer_answers_the_preemption_hand_off_with_one_save() {
    let test = "a_real_hf_trainer_answers_the_preemption_hand_off_with_one_save";
    if !ready(
        test,
        "roger_guard.hf",
        &format!("transformers for {PY} (with python3-torch)"),
    ) {
        return;
    }
    let env = Env::new();
    env.write(
        "roger.toml",
        r#"[run]
name = "pre"
log = "train.jsonl"
checkpoint_dir = "ckpt"

[gpu]
source = "none"

[watch]
interval = "100ms"
hysteresis = 2
grace = "5s"
stale = "120s"
grind_limit = "120s"

[preempt]
sigterm_window = "120s"
margin = "5s"
requeue = "exit"
save_now = "both"
"#,
    );
    let mut w = roger(
        &env,
        &[
            "watch".into(),
            "--".into(),
            PY.into(),
            fixture("hf_train.py").display().to_string(),
        ],
    );
    // No save of its own before the notice: save_steps past the end.
    w.env("PYTHONPATH", pythonpath())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .env("STEPS", "100000")
        .env("SAVE_STEPS", "100000")
        .env("STEP_SLEEP_S", "0.05")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let mut watch = w.spawn().unwrap();
    crate::watch::poll_until("5 logged steps", Duration::from_secs(120), || {
        logged_steps(&env, "train.jsonl").len() >= 5
    });
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = wait_child(&mut watch, Duration::from_secs(150));
    let recs = records(&env);
    let why = format!(
        "watch stderr:\n{}\nledger:\n{}",
        env.read("watch.err")
            .lines()
            .filter(|l| !l.contains(" INFO "))
            .collect::<Vec<_>>()
            .join("\n"),
        recs.iter()
            .filter(|r| r.kind != Kind::Verdict)
            .map(|r| format!("#{} {:?} step {:?} {:?}", r.seq, r.kind, r.step, r.fields))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let ev = |name: &str| {
        recs.iter()
            .find(|r| r.kind == Kind::Watch && r.str_field("event") == Some(name))
            .unwrap_or_else(|| panic!("no {name} record\n{why}"))
    };
    let notice = ev("preempt_notice");
    let asked = ev("preempt_save_asked");
    assert_eq!(
        asked.get("errors").and_then(|e| e.as_array()).map(Vec::len),
        Some(0),
        "{why}"
    );
    // One save for the two channels, at a step after the notice.
    let published: Vec<&Record> = recs.iter().filter(|r| r.kind == Kind::Publish).collect();
    assert_eq!(published.len(), 1, "{why}");
    let step = published[0].step.unwrap();
    assert!(published[0].seq > notice.seq, "{why}");
    assert!(step >= notice.step.unwrap_or(0), "{why}");
    let saved = ev("preempt_saved");
    assert_eq!(saved.u64_field("ckpt_step"), Some(step), "{why}");
    let requeue = ev("preempt_requeue");
    assert_eq!(
        status.code().map(|c| c as u64),
        requeue.u64_field("exit_code"),
        "{why}"
    );
    assert!(
        env.path(&format!("ckpt/checkpoint-{step}/trainer_state.json"))
            .is_file(),
        "{why}"
    );
}
