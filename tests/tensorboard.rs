//! `format = "tensorboard"` and `format = "mlflow"` end to end: the real binary on event
//! files and MLflow runs written by the real writers (committed fixtures, and pip
//! `tensorboardX` / `mlflow-skinny` at test time; missing, they skip with a reason, or fail under CI).

use crate::critic::{check, json_out};
use crate::util::{repo_root, Env};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

const NOW: &str = "2023-11-14T22:14:00Z"; // a minute after the fixtures' last step

fn tb_config(log: &str) -> String {
    tb_config_with(log, "grad_norm_max = 5.0\n")
}

fn tb_config_with(log: &str, extra: &str) -> String {
    format!(
        "[run]\nname = \"tb\"\nlog = \"{log}\"\nformat = \"tensorboard\"\n\
         [metrics]\nloss = \"train/loss\"\nlr = \"lr-AdamW\"\ngrad_norm = \"train/grad_norm\"\n\
         [[phase]]\nname = \"main\"\nfrom = 0\nwindow = 10\nloss = [0.5, 6.0]\nloss_spike = 2.0\n\
         stale = \"10m\"\n{extra}"
    )
}

fn copy_fixture(env: &Env, name: &str, to: &str) {
    let dir = repo_root().join("tests/fixtures/tensorboard").join(name);
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        env.write(
            &format!("{to}/{}", e.file_name().to_string_lossy()),
            std::fs::read(e.path()).unwrap(),
        );
    }
}

/// Whether `python3 -c "import <module>"` works; when not, says so through `util::missing`.
pub(crate) fn python_has(module: &str, test: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .env("MLFLOW_ALLOW_FILE_STORE", "true")
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        crate::util::missing(
            test,
            &format!("python3's {module} module"),
            &format!(
                "python3 -m pip install {}; .ci/run does",
                if module == "mlflow" {
                    "mlflow-skinny"
                } else {
                    module
                }
            ),
        );
    }
    ok
}

fn write_events(env: &Env, args: &[&str]) {
    let script = repo_root().join("tests/fixtures/tensorboard/write_events.py");
    let st = Command::new("python3")
        .arg(script)
        .args(args)
        .current_dir(env.dir.path())
        .status()
        .unwrap();
    assert!(st.success(), "write_events.py {args:?}");
}

/// The committed files of every kind the writers produce, judged by the real binary.
#[test]
fn committed_event_files_of_each_kind_pass() {
    for name in [
        "simple",
        "tensor_float",
        "tensor_double",
        "tensor_half",
        "tensor_content",
        "restart",
    ] {
        let env = Env::new();
        // The tensor fixtures log no grad norm.
        let grad = ["simple", "restart"].contains(&name);
        let extra = if grad { "grad_norm_max = 5.0\n" } else { "" };
        env.write("roger.toml", tb_config_with("runs", extra));
        copy_fixture(&env, name, "runs");
        let run = env
            .run(&["critic", "--once", "--json", "--now", NOW])
            .expect(0);
        let v = json_out(&run);
        assert_eq!(v["step"], 39, "{name}: {v:#}");
        assert_eq!(check(&v, "loss")["status"], "pass", "{name}");
        assert_eq!(check(&v, "stale")["status"], "pass", "{name}: {v:#}");
        if grad {
            assert_eq!(check(&v, "grad_norm")["status"], "pass", "{name}: {v:#}");
        }
    }
}

#[test]
fn a_corrupt_record_is_named_on_stderr_and_the_rest_judged() {
    let env = Env::new();
    env.write("roger.toml", tb_config("runs"));
    copy_fixture(&env, "simple", "runs");
    let file = std::fs::read_dir(env.path("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let run = env
        .run(&["critic", "--once", "--json", "--now", NOW])
        .expect(0)
        .stderr_has(&format!(
            "roger: warning: skipped ./runs/{}:",
            file.file_name().unwrap().to_string_lossy()
        ))
        .stderr_has("at byte offset ")
        .stderr_has("fails its CRC-32C");
    assert_eq!(json_out(&run)["step"], 39, "read on after the bad record");
}

/// tensorboardX writes a NaN from step 30: the critic fails and names the onset.
#[test]
fn tensorboardx_nan_loss_fails_with_its_onset() {
    if !python_has("tensorboardX", "tensorboardx_nan_loss_fails_with_its_onset") {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", tb_config("runs"));
    write_events(&env, &["simple", "runs", "0", "40", "--nan-from", "30"]);
    let run = env.run(&["critic", "--once", "--json"]).expect(2);
    let v = json_out(&run);
    let loss = check(&v, "loss");
    assert_eq!(loss["status"], "fail", "{v:#}");
    assert_eq!(loss["diverged_at"], 30, "{v:#}");
}

/// The daemon tails an event file tensorboardX is still writing: a pass on the first half,
/// then the NaN of the second half.
#[test]
fn daemon_tails_an_event_file_being_written() {
    if !python_has("tensorboardX", "daemon_tails_an_event_file_being_written") {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", tb_config("runs"));
    let script = repo_root().join("tests/fixtures/tensorboard/write_events.py");
    let mut writer = Command::new("python3")
        .arg(script)
        .args(["live", "runs", "0", "20", "40", "30"])
        .current_dir(env.dir.path())
        .spawn()
        .unwrap();
    let mut daemon = env
        .cmd(&["critic", "--daemon", "--interval", "200ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let verdicts = || -> Vec<roger::ledger::Record> {
        crate::watch::records(&env)
            .into_iter()
            .filter(|r| r.kind == roger::ledger::Kind::Verdict)
            .collect()
    };
    crate::watch::poll_until("a pass at step 19", Duration::from_secs(60), || {
        verdicts()
            .iter()
            .any(|r| r.step == Some(19) && r.str_field("status") == Some("pass"))
    });
    env.write("go", "");
    crate::watch::poll_until("the NaN fail", Duration::from_secs(60), || {
        verdicts()
            .iter()
            .any(|r| r.str_field("status") == Some("fail"))
    });
    let fail = verdicts()
        .into_iter()
        .find(|r| r.str_field("status") == Some("fail"))
        .unwrap();
    let loss = fail
        .get("checks")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "loss")
        .cloned()
        .unwrap();
    assert_eq!(loss["diverged_at"], 30, "{loss:#}");
    assert!(crate::watch::wait_child(&mut writer, Duration::from_secs(60)).success());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = crate::watch::wait_child(&mut daemon, Duration::from_secs(30));
    assert_eq!(st.code(), Some(0));
}

/// A run restarted into a second file (a resume from step 20): judged on the new timeline.
#[test]
fn a_restart_into_a_second_file_is_followed() {
    if !python_has("tensorboardX", "a_restart_into_a_second_file_is_followed") {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", tb_config("runs"));
    write_events(&env, &["simple", "runs", "0", "30", "--nan-from", "25"]);
    let first = json_out(&env.run(&["critic", "--once", "--json"]).expect(2));
    assert_eq!(first["step"], 29);
    std::thread::sleep(Duration::from_millis(1100)); // a later start time in the new name
    write_events(&env, &["simple", "runs", "20", "40"]);
    let run = env.run(&["critic", "--once", "--json"]).expect(0);
    let v = json_out(&run);
    assert_eq!(v["step"], 39, "{v:#}");
    assert_eq!(
        check(&v, "loss")["status"],
        "pass",
        "the NaN was abandoned by the resume"
    );
}

/// `init --log DIR` maps the tags of every event file in the directory: HF's Trainer writes a
/// final `trainer.evaluate()` into a second file holding only eval/*, and init had taken its
/// mapping from that newest file alone (no loss, no lr).
#[test]
fn init_maps_the_tags_of_every_event_file_of_a_directory() {
    if !python_has(
        "tensorboardX",
        "init_maps_the_tags_of_every_event_file_of_a_directory",
    ) {
        return;
    }
    let env = Env::new();
    write_events(&env, &["simple", "runs", "0", "30"]);
    std::thread::sleep(Duration::from_millis(1100)); // a later start time in the new name
    write_events(&env, &["eval", "runs", "29"]);
    let init = env.run(&["init", "--log", "runs"]).expect(0);
    let cfg = roger::config::Config::load(&env.path("roger.toml")).unwrap();
    assert_eq!(cfg.metrics.loss, "train/loss", "{}", init.report());
    assert_eq!(cfg.metrics.lr.first(), "lr-AdamW", "{}", init.report());
    assert_eq!(cfg.metrics.eval_loss, "eval/loss", "{}", init.report());
    assert!(
        init.stderr().contains("tags of all 2 event files"),
        "{}",
        init.report()
    );
}

/// Real HF Trainer logging dirs (tests/fixtures/tensorboard_real/SOURCES.md): init fits the
/// schedule their args name, and two hours after the last write the finished run passes.
#[test]
fn real_hf_trainer_event_directories_are_fitted_as_their_args_say() {
    // (dir, peak, warmup, total: from each run's args)
    for (dir, peak, warmup, total) in [
        ("agnews-lora-run0", 5e-6, 0u64, 1200u64),
        ("enzyme-kcat-logs", 5e-5, 500, 1281),
    ] {
        let env = Env::new();
        let from = repo_root()
            .join("tests/fixtures/tensorboard_real")
            .join(dir);
        let mut newest = std::time::SystemTime::UNIX_EPOCH;
        for e in std::fs::read_dir(&from).unwrap().flatten() {
            let to = env.write(
                &format!("{dir}/{}", e.file_name().to_string_lossy()),
                std::fs::read(e.path()).unwrap(),
            );
            newest = newest.max(std::fs::metadata(to).unwrap().modified().unwrap());
        }
        let init = env.run(&["init", "--log", dir]).expect(0);
        let cfg = roger::config::Config::load(&env.path("roger.toml")).unwrap();
        let s = cfg
            .schedule
            .clone()
            .unwrap_or_else(|| panic!("{dir}: no schedule\n{}", init.report()));
        assert_eq!(
            roger::config::kind_name(s.kind),
            "linear",
            "{dir}\n{}",
            init.report()
        );
        let near = |got: f64, want: f64| (got - want).abs() <= 0.05 * want.max(1.0);
        assert!(near(s.peak_lr / peak, 1.0), "{dir}: peak {}", s.peak_lr);
        assert!(
            near(s.warmup_steps as f64, warmup as f64),
            "{dir}: warmup {}",
            s.warmup_steps
        );
        let t = s.total_steps.unwrap_or(0) as f64;
        assert!(near(t, total as f64), "{dir}: total {t}");
        // The total is the Trainer's own, from its args (max_steps, or num_train_epochs x
        // the updates per epoch train/epoch shows), not the fit's.
        assert_eq!(
            cfg.metrics.planned_total,
            Some(total),
            "{dir}\n{}",
            init.report()
        );
        let later: chrono::DateTime<chrono::Utc> = (newest + Duration::from_secs(2 * 3600)).into();
        let now = later.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let r = env.run(&["critic", "--once", "--json", "--now", &now]);
        let v = json_out(&r);
        assert_eq!(v["status"], "pass", "{dir}\n{}", r.report());
        assert_eq!(check(&v, "lr")["status"], "pass", "{dir}\n{}", r.report());
    }
}

/// A real YOLOv8 run's TensorBoard events (tests/fixtures/tensorboard_real/SOURCES.md): YOLO
/// known by its tags (init had mapped nothing and refused), its epochs from args.yaml, and the
/// finished run passing two hours after.
#[test]
fn a_real_yolo_event_file_is_read_as_yolo_by_epoch() {
    let env = Env::new();
    let dir = "yolov8-fire-smoke-train";
    let from = repo_root()
        .join("tests/fixtures/tensorboard_real")
        .join(dir);
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    for e in std::fs::read_dir(&from).unwrap().flatten() {
        let to = env.write(
            &format!("{dir}/{}", e.file_name().to_string_lossy()),
            std::fs::read(e.path()).unwrap(),
        );
        newest = newest.max(std::fs::metadata(to).unwrap().modified().unwrap());
    }
    let init = env.run(&["init", "--log", dir]).expect(0);
    assert!(
        init.stderr()
            .contains("trainer: Ultralytics YOLO TensorBoard events"),
        "{}",
        init.report()
    );
    let cfg = roger::config::Config::load(&env.path("roger.toml")).unwrap();
    assert_eq!(cfg.metrics.loss, "train/box_loss");
    assert_eq!(cfg.metrics.eval_loss, "val/box_loss");
    assert_eq!(cfg.metrics.unit, roger::config::StepUnit::Epoch);
    assert_eq!(cfg.metrics.planned_total, Some(25), "{}", init.report());
    let later: chrono::DateTime<chrono::Utc> = (newest + Duration::from_secs(2 * 3600)).into();
    let now = later.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let r = env.run(&["critic", "--once", "--json", "--now", &now]);
    let v = json_out(&r);
    assert_eq!(v["status"], "pass", "{}", r.report());
    assert_eq!(check(&v, "stale")["status"], "pass", "{}", r.report());
}

fn mlflow_config(log: &str, format: &str) -> String {
    format!(
        "[run]\nname = \"m\"\nlog = \"{log}\"\nformat = \"{format}\"\n\
         [metrics]\nloss = \"train/loss\"\ntime = \"time\"\n\
         [[phase]]\nname = \"main\"\nfrom = 0\nwindow = 10\nloss = [0.5, 6.0]\nloss_spike = 2.0\n\
         stale = \"10m\"\n"
    )
}

/// The same numbers logged by the real MLflow client and as JSONL: the same verdicts.
#[test]
fn an_mlflow_run_is_judged_like_the_jsonl_of_the_same_numbers() {
    if !python_has(
        "mlflow",
        "an_mlflow_run_is_judged_like_the_jsonl_of_the_same_numbers",
    ) {
        return;
    }
    for (steps, nan_from, code) in [(40, -1, 0), (40, 30, 2)] {
        let env = Env::new();
        let out = Command::new("python3")
            .arg(repo_root().join("tests/fixtures/mlflow/write_run.py"))
            .args([
                "mlruns",
                "train.jsonl",
                &steps.to_string(),
                &nan_from.to_string(),
            ])
            .current_dir(env.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run_dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        env.write("mlflow.toml", mlflow_config(&run_dir, "mlflow"));
        env.write("jsonl.toml", mlflow_config("train.jsonl", "jsonl"));
        let judge = |cfg: &str| -> Value {
            let run = env
                .run(&["--config", cfg, "critic", "--once", "--json", "--now", NOW])
                .expect(code);
            json_out(&run)
        };
        let (m, j) = (judge("mlflow.toml"), judge("jsonl.toml"));
        assert_eq!(m["step"], steps - 1);
        assert_eq!(m["status"], j["status"]);
        assert_eq!(m["checks"], j["checks"], "mlflow {m:#}\njsonl {j:#}");
    }
}
