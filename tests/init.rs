//! `roger init` end to end: on every fixture log (the real HF runs included) the written
//! config validates, `critic --once` passes on the run it came from, and fails on the same
//! run with its lr doubled.

use crate::util::{repo_root, Env};

/// Fixture logs: (path under tests/fixtures, how its lr is spelled, whether init fits a
/// schedule to it).
const FIXTURES: &[(&str, Lr, bool)] = &[
    (
        "hf_whisper_trainer_state.json",
        Lr::Json("learning_rate"),
        true,
    ),
    ("real/hf-whisper-5k.json", Lr::Json("learning_rate"), true),
    ("real/hf-qwen3-8b-cpt.json", Lr::Json("learning_rate"), true),
    ("lightning_metrics.csv", Lr::Csv("lr-AdamW"), true),
    (
        "real/csv-lightning-byol3d-spikes.csv",
        Lr::Csv("train/lr"),
        true,
    ),
    (
        "real/jsonl-llamafactory-qwen3-8b-cpt.jsonl",
        Lr::Json("lr"),
        true,
    ),
    ("real/text-llmc-gpt2-124m.txt", Lr::Text("lr:"), true),
    // A resumed run whose schedule restarted: nothing fits, and init says so.
    ("resumed_lr_restart.jsonl", Lr::Json("lr"), false),
    // nanoGPT prints no lr: no schedule, the bands still work.
    ("nanogpt_train.log", Lr::None, false),
];

#[derive(Clone, Copy)]
enum Lr {
    Json(&'static str),
    Csv(&'static str),
    Text(&'static str),
    None,
}

fn double(v: f64) -> String {
    format!("{:e}", v * 2.0)
}

/// The same log with every logged lr doubled, written in the log's own format.
fn doubled(text: &str, lr: Lr) -> String {
    match lr {
        Lr::Json(key) if text.trim_start().starts_with("{\n") => {
            let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
            for e in v["log_history"].as_array_mut().unwrap() {
                if let Some(x) = e.get(key).and_then(|x| x.as_f64()) {
                    e[key] = serde_json::json!(x * 2.0);
                }
            }
            serde_json::to_string_pretty(&v).unwrap()
        }
        Lr::Json(key) => text
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                if let Some(x) = v.get(key).and_then(|x| x.as_f64()) {
                    v[key] = serde_json::json!(x * 2.0);
                }
                v.to_string()
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Lr::Csv(col) => {
            let mut lines = text.lines();
            let header = lines.next().unwrap();
            let i = header.split(',').position(|h| h == col).unwrap();
            std::iter::once(header.to_string())
                .chain(lines.map(|l| {
                    let mut cells: Vec<String> = l.split(',').map(String::from).collect();
                    if let Ok(x) = cells[i].parse::<f64>() {
                        cells[i] = double(x);
                    }
                    cells.join(",")
                }))
                .collect::<Vec<_>>()
                .join("\n")
        }
        Lr::Text(tag) => text
            .lines()
            .map(|l| match l.find(tag) {
                Some(at) => {
                    let start = at + tag.len();
                    let end = l[start..].find(' ').map_or(l.len(), |e| start + e);
                    let x: f64 = l[start..end].parse().unwrap();
                    format!("{}{:.6}{}", &l[..start], x * 2.0, &l[end..])
                }
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Lr::None => text.to_string(),
    }
}

#[test]
fn init_on_every_fixture_then_critic_passes_and_catches_a_doubled_lr() {
    for &(rel, lr, fits) in FIXTURES {
        let env = Env::new();
        let src = repo_root().join("tests/fixtures").join(rel);
        let name = src.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&src).unwrap();
        env.write(&name, &text);
        let init = env.run(&["init", "--log", &name]).expect(0);
        let cfg = env.read("roger.toml");
        assert!(cfg.contains("[[phase]]"), "{rel}: {cfg}");
        env.run(&["check"]).expect(0);
        if fits {
            assert!(cfg.contains("[schedule]"), "{rel}\n{}", init.report());
            assert!(init.stderr().contains("% of"), "{rel}: fit quality said");
        } else {
            assert!(!cfg.contains("\n[schedule]"), "{rel}: {cfg}");
            assert!(cfg.contains("# [schedule] not proposed:"), "{rel}: {cfg}");
        }
        // The run it came from passes; the whisper run's evals really rose at its end
        // (trainer_state's best checkpoint is step 3000), which init says and the critic warns.
        let overfits = rel.contains("whisper");
        let judged = env
            .run(&["critic", "--once", "--json"])
            .expect(if overfits { 1 } else { 0 });
        let v: serde_json::Value = serde_json::from_str(judged.stdout().trim()).unwrap();
        for c in v["checks"].as_array().unwrap() {
            let status = c["status"].as_str().unwrap();
            let ok = status != "fail" && (status != "warn" || (overfits && c["check"] == "eval"));
            assert!(ok, "{rel}: {c}\n{}", judged.report());
        }
        if overfits {
            assert!(
                init.stderr().contains("eval loss rose"),
                "{}",
                init.report()
            );
        }
        if !fits {
            continue;
        }
        env.write(&format!("doubled-{name}"), doubled(&text, lr));
        let bad = env
            .run(&[
                "critic",
                "--once",
                "--json",
                "--log",
                &format!("doubled-{name}"),
            ])
            .expect(2);
        let v: serde_json::Value = serde_json::from_str(bad.stdout().trim()).unwrap();
        let lr_check = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "lr")
            .unwrap_or_else(|| panic!("{rel}: no lr check\n{}", bad.report()));
        assert_eq!(lr_check["status"], "fail", "{rel}\n{}", bad.report());
    }
}

#[test]
fn init_never_overwrites_without_force() {
    let env = Env::new();
    let log = repo_root().join("tests/fixtures/lightning_metrics.csv");
    let log = log.to_str().unwrap();
    env.write("roger.toml", "# mine\n");
    env.run(&["init", "--log", log])
        .expect(1)
        .stderr_has("exists; not overwriting it (pass --force");
    assert_eq!(env.read("roger.toml"), "# mine\n");
    env.run(&["init", "--log", log, "--force"]).expect(0);
    assert!(env.read("roger.toml").contains("[[phase]]"));
    // --out - prints and writes nothing.
    env.run(&["init", "--log", log, "--out", "-"])
        .expect(0)
        .stdout_has("format = \"csv\"");
}

#[test]
fn init_finds_the_log_in_a_directory_and_says_why_it_cannot_read_one() {
    let env = Env::new();
    let state = std::fs::read(repo_root().join("tests/fixtures/hf_whisper_trainer_state.json"));
    env.write("out/checkpoint-5000/trainer_state.json", state.unwrap());
    env.run(&["init", "--log", "out"])
        .expect(0)
        .stderr_has("checkpoint-5000/trainer_state.json");
    let cfg = env.read("roger.toml");
    assert!(cfg.contains("name = \"checkpoint-5000\""), "{cfg}");
    assert!(cfg.contains("kind = \"linear\""), "{cfg}");
    assert!(cfg.contains("warmup_steps = 500"), "{cfg}");

    env.write("junk.txt", "hello\nworld\n");
    env.run(&["init", "--log", "junk.txt", "--out", "j.toml"])
        .expect(1)
        .stderr_has("cannot tell the log's format");
}

#[test]
fn init_from_a_finished_run_takes_its_mapping_and_refuses_a_failed_one() {
    let env = Env::new();
    let log = std::fs::read(repo_root().join("tests/fixtures/real/text-llmc-gpt2-124m.txt"));
    env.write("prev/train.txt", log.unwrap());
    env.run(&[
        "init",
        "--log",
        "prev/train.txt",
        "--out",
        "prev/roger.toml",
    ])
    .expect(0);
    env.run(&["--config", "prev/roger.toml", "critic", "--once"])
        .expect(0);
    let next = env
        .run(&[
            "init",
            "--from-run",
            "prev/roger-ledger.jsonl",
            "--out",
            "next.toml",
        ])
        .expect(0);
    let cfg = env.read("next.toml");
    assert!(
        cfg.contains("# Baseline: run \"prev\""),
        "{cfg}\n{}",
        next.report()
    );
    assert!(cfg.contains("last verdict #1 pass"), "{cfg}");
    assert!(cfg.contains("name = \"prev-next\""), "{cfg}");
    assert!(
        cfg.contains("s:(?P<step>"),
        "the previous run's patterns: {cfg}"
    );

    // A run whose last verdict failed is no baseline.
    let bad = std::fs::read_to_string(env.path("prev/roger.toml"))
        .unwrap()
        .replace("peak_lr = 6e-4", "peak_lr = 3e-4");
    env.write("prev/roger.toml", bad);
    env.run(&["--config", "prev/roger.toml", "critic", "--once"])
        .expect(2);
    env.run(&[
        "init",
        "--from-run",
        "prev/roger-ledger.jsonl",
        "--out",
        "again.toml",
    ])
    .expect(1)
    .stderr_has("is not a good baseline: its last verdict");
}

/// Wall times of the committed TensorBoard and MLflow fixtures are fixed: a minute after
/// their last step.
const TB_NOW: &str = "2023-11-14T22:14:00Z";

/// Copy a fixture directory (recursively) into the test's directory at `to`.
fn copy_dir(env: &Env, from: &std::path::Path, to: &str) {
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let rel = format!("{to}/{}", e.file_name().to_string_lossy());
        if e.path().is_dir() {
            copy_dir(env, &e.path(), &rel);
        } else {
            env.write(&rel, std::fs::read(e.path()).unwrap());
        }
    }
}

/// The same event file with every `lr-AdamW` scalar doubled, written with roger's encoder
/// (events without scalars are kept as they were).
fn doubled_events(bytes: &[u8]) -> Vec<u8> {
    use roger::metrics::{tb_event, tfrecord};
    let (items, used) = tfrecord::scan(bytes);
    assert_eq!(used, bytes.len(), "a whole fixture");
    let mut out = Vec::new();
    for item in items {
        let tfrecord::Item::Record(_, payload) = item else {
            panic!("damaged fixture: {item:?}");
        };
        let event = tb_event::decode(payload).unwrap();
        let scalars: Vec<(&str, f32)> = tb_event::scalars(&event)
            .map(|(tag, v)| (tag, if tag == "lr-AdamW" { v * 2.0 } else { v } as f32))
            .collect();
        if scalars.is_empty() {
            tfrecord::frame(payload, &mut out);
        } else {
            let encoded = tb_event::encode_scalars(event.wall_time, event.step, &scalars);
            tfrecord::frame(&encoded, &mut out);
        }
    }
    out
}

/// `roger init` on TensorBoard logs (every committed kind; found as a SummaryWriter's
/// subdirectory of `runs/`, or named as one event file) and on an MLflow run (found under
/// `mlruns/`): format and keys detected, the config judges its own run pass and the same
/// run with its lr doubled fail.
#[test]
fn init_on_tensorboard_and_mlflow_runs_then_critic_passes_and_catches_a_doubled_lr() {
    let tb = repo_root().join("tests/fixtures/tensorboard");
    let kinds = [
        "simple",
        "restart",
        "tensor_float",
        "tensor_double",
        "tensor_half",
        "tensor_content",
    ];
    for kind in kinds {
        for as_file in [false, true] {
            if as_file && kind == "restart" {
                continue; // two files: the directory is the log
            }
            let env = Env::new();
            copy_dir(&env, &tb.join(kind), &format!("runs/{kind}"));
            let file = std::fs::read_dir(tb.join(kind))
                .unwrap()
                .flatten()
                .next()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .into_owned();
            let log = if as_file {
                format!("runs/{kind}/{file}")
            } else {
                "runs".to_string()
            };
            let what = format!("{kind} (--log {log})");
            let init = env.run(&["init", "--log", &log]).expect(0);
            let cfg = env.read("roger.toml");
            assert!(cfg.contains("format = \"tensorboard\""), "{what}: {cfg}");
            let named = if as_file {
                log.clone()
            } else {
                format!("runs/{kind}")
            };
            assert!(cfg.contains(&format!("log = \"{named}\"")), "{what}: {cfg}");
            assert!(cfg.contains("loss = \"train/loss\""), "{what}: {cfg}");
            assert!(cfg.contains("lr = \"lr-AdamW\""), "{what}: {cfg}");
            assert!(cfg.contains("kind = \"constant\""), "{what}: {cfg}");
            if ["simple", "restart"].contains(&kind) {
                assert!(cfg.contains("grad_norm = \"train/grad_norm\""), "{what}");
            }
            assert!(
                init.stderr().contains("step, time <- each point's own"),
                "{what}: {}",
                init.report()
            );
            env.run(&["check"]).expect(0);
            let good = env.run(&["critic", "--once", "--json", "--now", TB_NOW]);
            let v: serde_json::Value = serde_json::from_str(good.stdout().trim()).unwrap();
            assert_eq!(v["step"], 39, "{what}: {}", good.report());
            for c in v["checks"].as_array().unwrap() {
                assert_eq!(c["status"], "pass", "{what}: {c}\n{}", good.report());
            }
            assert_eq!(good.code(), 0, "{what}");

            let mut files: Vec<_> = std::fs::read_dir(tb.join(kind))
                .unwrap()
                .flatten()
                .collect();
            files.sort_by_key(|e| e.file_name());
            for e in &files {
                let name = e.file_name().to_string_lossy().into_owned();
                let bytes = doubled_events(&std::fs::read(e.path()).unwrap());
                env.write(&format!("doubled/{name}"), bytes);
            }
            let bad_log = if as_file {
                format!("doubled/{file}")
            } else {
                "doubled".into()
            };
            let bad = env
                .run(&[
                    "critic", "--once", "--json", "--now", TB_NOW, "--log", &bad_log,
                ])
                .expect(2);
            let v: serde_json::Value = serde_json::from_str(bad.stdout().trim()).unwrap();
            let lr = v["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["check"] == "lr")
                .unwrap_or_else(|| panic!("{what}: no lr check\n{}", bad.report()));
            assert_eq!(lr["status"], "fail", "{what}\n{}", bad.report());
        }
    }

    // MLflow: the committed run (nested key train/loss), found two levels under mlruns/.
    let env = Env::new();
    let run = "mlruns/0/0d61d91b05bb461ea3e9c67307b012cf";
    copy_dir(&env, &repo_root().join("tests/fixtures/mlflow/run"), run);
    let init = env.run(&["init", "--log", "mlruns"]).expect(0);
    init.stderr_has(&format!("using {run}"));
    let cfg = env.read("roger.toml");
    assert!(cfg.contains("format = \"mlflow\""), "{cfg}");
    assert!(cfg.contains(&format!("log = \"{run}\"")), "{cfg}");
    assert!(cfg.contains("name = \"thundering-dove-566\""), "{cfg}");
    assert!(cfg.contains("loss = \"train/loss\""), "{cfg}");
    assert!(cfg.contains("lr = \"lr\""), "{cfg}");
    assert!(cfg.contains("kind = \"constant\""), "{cfg}");
    env.run(&["check"]).expect(0);
    let good = env
        .run(&["critic", "--once", "--json", "--now", TB_NOW])
        .expect(0);
    let v: serde_json::Value = serde_json::from_str(good.stdout().trim()).unwrap();
    assert_eq!(v["step"], 39, "{}", good.report());
    for c in v["checks"].as_array().unwrap() {
        assert_eq!(c["status"], "pass", "{c}\n{}", good.report());
    }
    copy_dir(&env, &env.path(run), "doubled");
    let lr: String = env
        .read("doubled/metrics/lr")
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let x: f64 = f[1].parse().unwrap();
            format!("{} {} {}\n", f[0], x * 2.0, f[2])
        })
        .collect();
    env.write("doubled/metrics/lr", lr);
    let bad = env
        .run(&[
            "critic", "--once", "--json", "--now", TB_NOW, "--log", "doubled",
        ])
        .expect(2);
    let v: serde_json::Value = serde_json::from_str(bad.stdout().trim()).unwrap();
    let lr = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "lr")
        .unwrap_or_else(|| panic!("no lr check\n{}", bad.report()));
    assert_eq!(lr["status"], "fail", "{}", bad.report());
}

fn log_tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len() - 50..].join("\n") + "\n"
}

/// Issue 29: `init --log .` beside a run roger already watched took roger's own ledger for
/// the newest log (and one level down, other ledgers); it passes them over and says so.
#[test]
fn init_on_a_directory_never_picks_rogers_own_files() {
    let env = Env::new();
    let log = std::fs::read(repo_root().join("tests/fixtures/real/text-llmc-gpt2-124m.txt"));
    env.write("train.log", log.unwrap());
    env.run(&["init", "--log", "train.log"]).expect(0);
    // The real roger writes the ledger and its summary cache, both newer than the log.
    env.run(&["critic", "--once"]).expect(0);
    let ledger = env.read("roger-ledger.jsonl");
    env.write("old/old.ledger.jsonl", &ledger);
    // A ledger under a log's name is known by its first record.
    env.write("copy.jsonl", &ledger);
    env.write("roger.prom", "roger_up 1\n");
    env.write(".roger-queue/x.json", "{}\n");
    // Evidence roger kept of the run (a copy of its log tail) is no log to configure.
    env.write(".roger/evidence.log", log_tail(&env.read("train.log")));
    let out = env
        .run(&["init", "--log", ".", "--out", "again.toml"])
        .expect(0);
    out.stderr_has("train.log (the newest log in .)")
        .stderr_has("passed over ./roger-ledger.jsonl (a roger ledger)")
        .stderr_has("passed over ./old/old.ledger.jsonl (a roger ledger)")
        .stderr_has("passed over ./copy.jsonl (a roger ledger: its first line is a ledger record)")
        .stderr_has("passed over ./.roger (roger's evidence and quarantine folder)");
    let cfg = env.read("again.toml");
    assert!(cfg.contains("log = \"train.log\""), "{cfg}");
}

/// Issue 29: the shapes' line counts came from the 256 KiB head detection reads, printed and
/// written into the config as if they were the file's. The llm.c fixture is longer than that.
#[test]
fn init_counts_a_text_logs_lines_over_the_whole_file() {
    let env = Env::new();
    let log = std::fs::read(repo_root().join("tests/fixtures/real/text-llmc-gpt2-124m.txt"));
    let log = log.unwrap();
    assert!(log.len() > 256 * 1024, "the fixture must outgrow the head");
    let text = String::from_utf8_lossy(&log);
    let train = text.lines().filter(|l| l.contains(" trl:")).count();
    let eval = text.lines().filter(|l| l.contains(" tel:")).count();
    env.write("train.log", &log);
    let want = format!("llm.c train line ({train} lines), llm.c eval line ({eval} lines)");
    env.run(&["init", "--log", "train.log"])
        .expect(0)
        .stderr_has(&want);
    let cfg = env.read("roger.toml");
    assert!(cfg.contains(&want), "{cfg}");
}
