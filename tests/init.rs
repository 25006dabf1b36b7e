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
        // The run it came from passes; the whisper run overfits (eval loss best at step
        // 1000, above it at the four evals after while the train loss falls), which init
        // says and the critic's eval check fails on.
        let overfits = rel.contains("whisper");
        let judged = env
            .run(&["critic", "--once", "--json"])
            .expect(if overfits { 2 } else { 0 });
        let v: serde_json::Value = serde_json::from_str(judged.stdout().trim()).unwrap();
        for c in v["checks"].as_array().unwrap() {
            let status = c["status"].as_str().unwrap();
            let ok = (status != "fail" && status != "warn") || (overfits && c["check"] == "eval");
            assert!(ok, "{rel}: {c}\n{}", judged.report());
        }
        if overfits {
            assert!(
                init.stderr()
                    .contains("note: the eval check will fail on this run as logged: overfitting"),
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

/// Issue 36 item 3: `init --force` truncated roger.toml in place, so a crash mid-write lost the
/// user's config. Killed by the kernel in the middle of its write (a 64-byte file size limit:
/// SIGXFSZ), it must leave the old file whole, the same file; and a finished `--force` replaces
/// the file by rename (a hard link to the old one keeps the old bytes), never rewriting it.
#[test]
fn init_force_replaces_by_rename_and_a_crash_mid_write_leaves_the_old_config() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    let env = Env::new();
    let log = repo_root().join("tests/fixtures/lightning_metrics.csv");
    let log = log.to_str().unwrap();
    let mine = "# mine: the config I tuned for a week\n[run]\nname = \"mine\"\n".repeat(4);
    env.write("roger.toml", &mine);
    let ino = std::fs::metadata(env.path("roger.toml")).unwrap().ino();
    let args = ["init", "--log", log, "--force"];
    let mut c = env.cmd(&args);
    // SAFETY: setrlimit is async-signal-safe; the child only calls it before exec.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = env.run_cmd(c, &args);
    assert_eq!(
        env.read("roger.toml"),
        mine,
        "a write cut short damaged the old config\n{}",
        r.report()
    );
    assert_eq!(
        std::fs::metadata(env.path("roger.toml")).unwrap().ino(),
        ino
    );
    // Finished: a new file renamed over the old one, not the old one rewritten.
    std::fs::hard_link(env.path("roger.toml"), env.path("old.toml")).unwrap();
    env.run(&args).expect(0);
    assert!(env.read("roger.toml").contains("[[phase]]"));
    assert_eq!(
        env.read("old.toml"),
        mine,
        "the old file was rewritten in place"
    );
    assert_ne!(
        std::fs::metadata(env.path("roger.toml")).unwrap().ino(),
        ino
    );
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
    out.stderr_has("using ./train.log (")
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

/// A trainer_state.json whose `log_history` starts at `from` (logging switched on late, or
/// an older part of the history dropped), the rest byte-for-byte the real run's numbers.
fn logged_from(state: &str, from: u64) -> String {
    let mut v: serde_json::Value = serde_json::from_str(state).unwrap();
    let h = v["log_history"].as_array_mut().unwrap();
    h.retain(|e| e["step"].as_u64().is_some_and(|s| s >= from));
    serde_json::to_string_pretty(&v).unwrap()
}

/// The number after `key` in init's schedule summary line (`peak 5e-5, warmup 109, ...`).
fn summary_number(stderr: &str, key: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.contains("init: schedule:"))
        .unwrap_or_else(|| panic!("no schedule line: {stderr}"));
    // The first `key` followed by a number (`of peak (rms` is words).
    line.match_indices(&format!("{key} "))
        .find_map(|(at, m)| {
            let rest = &line[at + m.len()..];
            let end = rest.find([',', ';', ' ', ')']).unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
        .unwrap_or_else(|| panic!("no number after {key} in {line}"))
}

/// The check `name` of a `critic --once --json` answer.
fn check(stdout: &str, name: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} check: {v}"))
}

/// Issue 29: two HF runs with an exact cosine and an exact linear schedule, logged from late
/// in the warmup or after it, got "no schedule kind fits" (the highest logged lr taken as
/// the peak, warmup 0 once the first lr was half of it). Peak and warmup are parameters of
/// the fit now: the schedule comes back as declared, the worst sample off by ~0, the run
/// passes and the same run with its lr doubled fails. The top-level
/// `num_input_tokens_seen: 0` is no tokens series, and the loss band (the loss stays within
/// a few % of 2.0) is narrow enough that a halved loss fails.
#[test]
fn init_fits_hf_runs_whose_logging_started_late_exactly() {
    let real = repo_root().join("tests/fixtures/real");
    let qwen = std::fs::read_to_string(real.join("hf-qwen3-8b-cpt.json")).unwrap();
    let whisper = std::fs::read_to_string(real.join("hf-whisper-5k.json")).unwrap();
    // (log, from, kind, peak, warmup when the log shows it, total)
    type Case<'a> = (&'a str, u64, &'a str, f64, Option<u64>, u64);
    let cases: &[Case] = &[
        (&qwen, 100, "cosine", 5e-5, Some(109), 2178),
        (&qwen, 300, "cosine", 5e-5, Some(109), 2178),
        (&qwen, 1500, "cosine", 5e-5, Some(109), 2178),
        (&whisper, 400, "linear", 1e-5, Some(500), 5000),
        // After the warmup a linear decay shows only its slope: the curve is exact.
        (&whisper, 1000, "linear", 1e-5, None, 5000),
    ];
    for &(state, from, kind, peak, warmup, total) in cases {
        let env = Env::new();
        env.write("trainer_state.json", logged_from(state, from));
        let init = env.run(&["init", "--log", "trainer_state.json"]).expect(0);
        let err = init.stderr();
        let cfg = env.read("roger.toml");
        let what = format!("{kind} from step {from}\n{}", init.report());
        assert!(cfg.contains(&format!("kind = \"{kind}\"")), "{what}");
        assert_eq!(summary_number(&err, "total"), total as f64, "{what}");
        if let Some(w) = warmup {
            assert_eq!(summary_number(&err, "peak"), peak, "{what}");
            assert_eq!(summary_number(&err, "warmup"), w as f64, "{what}");
        }
        let worst = summary_number(&err, "worst");
        assert!(worst < 1e-5, "worst sample {worst:e} of peak: {what}");
        assert!(
            !cfg.contains("tokens = "),
            "a top-level scalar as a series: {cfg}"
        );
        env.run(&["critic", "--once", "--json"])
            .expect(if std::ptr::eq(state, &*whisper) { 2 } else { 0 });
        env.write(
            "doubled.json",
            doubled(&logged_from(state, from), Lr::Json("learning_rate")),
        );
        let bad = env.run(&["critic", "--once", "--json", "--log", "doubled.json"]);
        assert_eq!(
            check(&bad.stdout(), "lr")["status"],
            "fail",
            "{what}\n{}",
            bad.report()
        );
    }
    // The loss band from the run's own noise: the qwen loss stays near 2.0, so a halving
    // (from step 1000 on) fails while the run passes.
    let env = Env::new();
    env.write("trainer_state.json", logged_from(&qwen, 300));
    env.run(&["init", "--log", "trainer_state.json"]).expect(0);
    let cfg = env.read("roger.toml");
    assert!(cfg.contains("loss band from this run's own noise"), "{cfg}");
    let mut v: serde_json::Value = serde_json::from_str(&logged_from(&qwen, 300)).unwrap();
    for e in v["log_history"].as_array_mut().unwrap() {
        if e["step"].as_u64().is_some_and(|s| s >= 1000) {
            if let Some(l) = e.get("loss").and_then(|l| l.as_f64()) {
                e["loss"] = serde_json::json!(l / 2.0);
            }
        }
    }
    env.write("halved.json", serde_json::to_string_pretty(&v).unwrap());
    let bad = env.run(&["critic", "--once", "--json", "--log", "halved.json"]);
    assert_eq!(
        check(&bad.stdout(), "loss")["status"],
        "fail",
        "{cfg}\n{}",
        bad.report()
    );
}

/// Issue 29 point 5: on a finished run with lr doubled throughout, the lr check looked at the
/// window's last samples only, where the decayed lr is ~0 and 2 x ~0 is within tolerance,
/// and passed. The engineer's config for the real qwen run (tolerance 0.02, a 20-sample
/// window) now fails it, still fails a mid-run cut, and passes the healthy run.
#[test]
fn a_finished_run_with_its_lr_doubled_fails_the_lr_check() {
    let real = repo_root().join("tests/fixtures/real");
    let state = std::fs::read_to_string(real.join("hf-qwen3-8b-cpt.json")).unwrap();
    let cfg = std::fs::read_to_string(real.join("hf-qwen3-8b-cpt.toml"))
        .unwrap()
        .replace("window = 50", "window = 20");
    let env = Env::new();
    env.write("roger.toml", &cfg);
    env.write("hf-qwen3-8b-cpt.json", &state);
    let ok = env.run(&["critic", "--once", "--json"]).expect(0);
    let lr = check(&ok.stdout(), "lr");
    assert!(
        lr["reason"]
            .as_str()
            .unwrap()
            .contains("from earlier in the finished run"),
        "{lr}"
    );
    env.write("doubled.json", doubled(&state, Lr::Json("learning_rate")));
    let bad = env
        .run(&["critic", "--once", "--json", "--log", "doubled.json"])
        .expect(2);
    let lr = check(&bad.stdout(), "lr");
    assert_eq!(lr["status"], "fail", "{}", bad.report());
    assert!(
        lr["reason"].as_str().unwrap().contains("distinguishable"),
        "{lr}"
    );
    // Cut mid-run (step 1000 of 2178): the window itself shows it.
    let mut v: serde_json::Value =
        serde_json::from_str(&doubled(&state, Lr::Json("learning_rate"))).unwrap();
    v["log_history"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["step"].as_u64().is_some_and(|s| s <= 1000));
    v["global_step"] = serde_json::json!(1000);
    env.write("cut.json", serde_json::to_string_pretty(&v).unwrap());
    let cut = env
        .run(&["critic", "--once", "--json", "--log", "cut.json"])
        .expect(2);
    assert_eq!(
        check(&cut.stdout(), "lr")["status"],
        "fail",
        "{}",
        cut.report()
    );
}

/// Issue 29: `init --format text` on a shape roger does not know dead-ended in "format =
/// text needs [metrics] patterns". `--pattern` (repeatable, named groups) gives them, and
/// `--config FILE` takes them (and the format) from an existing config.
#[test]
fn init_reads_an_unknown_text_shape_with_patterns_or_a_config() {
    let env = Env::new();
    let mut log = String::new();
    for step in 0..=300u64 {
        let lr = if step < 30 {
            3e-4 * step as f64 / 30.0
        } else {
            3e-4
        };
        let loss = 4.0 - step as f64 * 0.003 + 0.01 * ((step * 7919) % 13) as f64 / 13.0;
        log.push_str(&format!(
            "[rank0] it={step} | L={loss:.4} | LR={lr:.6e} | ok\n"
        ));
        if step % 100 == 0 {
            log.push_str(&format!("[rank0] eval it={step} | EL={:.4}\n", loss + 0.1));
        }
    }
    env.write("run.out", &log);
    // No named shape: the general key/value reader takes it, maps what it can by meaning
    // (`it` is a step, `LR` an lr) and says what it could not (`L` means nothing known).
    env.run(&["init", "--log", "run.out", "--out", "-"])
        .expect(0)
        .stderr_has("format: key-value")
        .stderr_has(r#"lr <- "lr" (by meaning"#)
        .stderr_has("loss: not in the log")
        .stderr_has("not judged: l");
    env.run(&["init", "--log", "run.out", "--format", "text"])
        .expect(1)
        .stderr_has("--pattern REGEX");
    env.run(&["init", "--log", "run.out", "--pattern", r"it=(\d+)"])
        .expect(1)
        .stderr_has("--pattern #1")
        .stderr_has("(?P<step>");
    let train = r"\] it=(?P<step>\d+) \| L=(?P<loss>[\d.]+) \| LR=(?P<lr>[\d.e+-]+)";
    let eval = r"eval it=(?P<step>\d+) \| EL=(?P<eval_loss>[\d.]+)";
    let init = env
        .run(&[
            "init",
            "--log",
            "run.out",
            "--pattern",
            train,
            "--pattern",
            eval,
        ])
        .expect(0);
    let cfg = env.read("roger.toml");
    assert!(cfg.contains("format = \"text\""), "{cfg}");
    assert!(cfg.contains("(?P<eval_loss>"), "{cfg}");
    assert!(
        init.stderr().contains("read 305 samples"),
        "{}",
        init.report()
    );
    assert!(
        cfg.contains("kind = \"constant\""),
        "{cfg}\n{}",
        init.report()
    );
    assert!(cfg.contains("warmup_steps = 30"), "{cfg}");
    env.run(&["critic", "--once"]).expect(0);
    // The same mapping from that config, for the next run's log.
    env.write("next/run.out", &log);
    let from_cfg = env
        .run(&[
            "--config",
            "roger.toml",
            "init",
            "--log",
            "next/run.out",
            "--out",
            "next/roger.toml",
        ])
        .expect(0);
    from_cfg.stderr_has("key mapping from roger.toml");
    let next = env.read("next/roger.toml");
    assert!(next.contains("(?P<eval_loss>"), "{next}");
    assert!(next.contains("kind = \"constant\""), "{next}");
}

/// Issue 29: `--from-run LEDGER` required the config to be roger.toml beside the ledger.
/// The verdicts record the config's path (and hash): found through them, and a config that
/// moved or changed since is refused with what happened.
#[test]
fn init_from_run_finds_the_config_through_the_ledger() {
    let env = Env::new();
    let log = std::fs::read(
        repo_root().join("tests/fixtures/real/text-megatron-deepspeed-qwen7b-500.txt"),
    );
    env.write("runs/a/train.log", log.unwrap());
    env.write("configs/README", "the runs' configs\n");
    env.run(&[
        "init",
        "--log",
        "runs/a/train.log",
        "--out",
        "configs/a.toml",
    ])
    .expect(0);
    // The ledger elsewhere than the config (the config names it).
    let cfg = env.read("configs/a.toml");
    env.write(
        "configs/a.toml",
        cfg.replace("[run]\n", "[run]\nledger = \"../ledgers/a.jsonl\"\n"),
    );
    env.run(&["--config", "configs/a.toml", "critic", "--once"])
        .expect(0);
    let ledger = env.read("ledgers/a.jsonl");
    assert!(ledger.contains("\"config_path\""), "{ledger}");
    let next = env
        .run(&["init", "--from-run", "ledgers/a.jsonl", "--out", "b.toml"])
        .expect(0);
    let b = env.read("b.toml");
    assert!(b.contains("configs/a.toml"), "{b}\n{}", next.report());
    assert!(b.contains("last verdict #1 pass"), "{b}");
    // Changed since the verdict: not that run's config.
    env.write(
        "configs/a.toml",
        env.read("configs/a.toml")
            .replace("window = 20", "window = 21"),
    );
    env.run(&["init", "--from-run", "ledgers/a.jsonl", "--out", "c.toml"])
        .expect(1)
        .stderr_has("has changed since the run was judged");
    // Moved away.
    std::fs::rename(env.path("configs/a.toml"), env.path("a-moved.toml")).unwrap();
    env.run(&["init", "--from-run", "ledgers/a.jsonl", "--out", "c.toml"])
        .expect(1)
        .stderr_has("is not there: moved or deleted?");
}

/// Issue 29: init --log DIR must never pick a file roger wrote, and say (and write into the
/// config's header) what it passed over: the notification outbox and publish's `.roger-*`
/// folders too.
#[test]
fn init_lists_every_file_of_rogers_it_passed_over() {
    let env = Env::new();
    let log = std::fs::read(repo_root().join("tests/fixtures/real/text-llmc-gpt2-124m.txt"));
    env.write("train.log", log.unwrap());
    env.write(
        "roger-outbox.jsonl",
        "{\"op\":\"queued\",\"key\":\"k\",\"channel\":\"slack\",\"at\":\"2026-01-01T00:00:00Z\",\"payload\":{}}\n",
    );
    env.write(
        "sent.jsonl",
        "{\"op\":\"sent\",\"key\":\"k\",\"attempt\":1,\"at\":\"2026-01-01T00:00:01Z\"}\n",
    );
    env.write(
        ".roger-staging-100/metrics.jsonl",
        "{\"step\": 1, \"loss\": 2.0}\n",
    );
    env.write(".roger-publish-intent.json", "{}\n");
    let out = env
        .run(&["init", "--log", ".", "--out", "r.toml"])
        .expect(0);
    out.stderr_has("using ./train.log (")
        .stderr_has("passed over ./roger-outbox.jsonl (roger's notification outbox)")
        .stderr_has("passed over ./sent.jsonl (roger's notification outbox: its first line is an outbox entry)")
        .stderr_has("passed over ./.roger-staging-100 (roger's publish folder)");
    let cfg = env.read("r.toml");
    assert!(
        cfg.contains("# Passed over (roger's own, never a training log): ./roger-outbox.jsonl"),
        "{cfg}"
    );
}

/// The log with its lr doubled, `spec` as in init.expect.toml (`json:KEY`, `csv:COL`,
/// `text:TAG`), written as the trainer would (a number printed in E notation stays so).
fn double_lr(text: &str, spec: &str) -> String {
    let (kind, key) = spec.split_once(':').unwrap();
    match kind {
        "json" => doubled(text, Lr::Json(Box::leak(key.to_string().into_boxed_str()))),
        "csv" => doubled(text, Lr::Csv(Box::leak(key.to_string().into_boxed_str()))),
        "text" => text
            .lines()
            .map(|l| match l.find(key) {
                Some(at) => {
                    let start = at + key.len();
                    let end = l[start..]
                        .find([' ', '|', ','])
                        .map_or(l.len(), |e| start + e);
                    match l[start..end].parse::<f64>() {
                        Ok(x) if l[start..end].contains(['E', 'e']) => {
                            format!("{}{:.3E}{}", &l[..start], x * 2.0, &l[end..])
                        }
                        Ok(x) => format!("{}{:.6}{}", &l[..start], x * 2.0, &l[end..]),
                        Err(_) => l.to_string(),
                    }
                }
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => panic!("lr spec {other}"),
    }
}

/// The first `share` of the run: its first lines (a CSV keeps its header; a text log, up to
/// the `share` of its lines holding `tag`, past a launch preamble), or the first entries of
/// a trainer_state's history.
fn cut(text: &str, share: f64, tag: Option<&str>) -> String {
    if text.trim_start().starts_with('{') && text.contains("\"log_history\"") {
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        let h = v["log_history"].as_array_mut().unwrap();
        let keep = (h.len() as f64 * share) as usize;
        h.truncate(keep);
        let last = h.iter().rev().find_map(|e| e["step"].as_u64()).unwrap_or(0);
        v["global_step"] = serde_json::json!(last);
        return serde_json::to_string_pretty(&v).unwrap();
    }
    let lines: Vec<&str> = text.lines().collect();
    let keep = match tag {
        Some(t) => {
            let at: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].contains(t)).collect();
            at[(at.len() as f64 * share) as usize] + 1
        }
        None => ((lines.len() as f64 * share) as usize).max(2),
    };
    lines[..keep].join("\n") + "\n"
}

/// Issue 29's corpus test: `init` on every log of tests/fixtures/real against what its
/// source states (init.expect.toml): the format detected; the schedule's kind, peak, warmup,
/// total and floor; the healthy run passes with the config init wrote; and the run with its
/// lr doubled, cut mid-run, fails the lr check.
#[test]
fn init_on_the_real_corpus() {
    let dir = repo_root().join("tests/fixtures/real");
    let table: toml::Table =
        toml::from_str(&std::fs::read_to_string(dir.join("init.expect.toml")).unwrap()).unwrap();
    let mut logs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".toml") && !n.ends_with(".md"))
        .collect();
    logs.sort();
    let mut missing = Vec::new();
    for name in &logs {
        let Some(want) = table.get(name).and_then(|w| w.as_table()) else {
            missing.push(name.clone());
            continue;
        };
        let s = |k: &str| want.get(k).and_then(|v| v.as_str());
        let f = |k: &str| {
            want.get(k)
                .and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)))
        };
        let env = Env::new();
        let bytes = std::fs::read(dir.join(name)).unwrap();
        env.write(name, &bytes);
        let init = env.run(&["init", "--log", name]).expect(0);
        let err = init.stderr();
        let cfg = env.read("roger.toml");
        let what = format!("{name}\n{}", init.report());
        let format = s("format").expect("format");
        assert!(
            cfg.contains(&format!("format = \"{format}\"")),
            "format: {what}"
        );
        let fits = want.get("fit").and_then(|v| v.as_bool()).unwrap_or(true);
        if let Some(kind) = s("kind") {
            assert!(cfg.contains(&format!("kind = \"{kind}\"")), "kind: {what}");
            let within = f("within").unwrap_or(0.0);
            for (key, said) in [
                ("peak_lr", "peak"),
                ("warmup_steps", "warmup"),
                ("total_steps", "total"),
                ("min_lr", "min"),
            ] {
                let Some(truth) = f(key) else { continue };
                let got = summary_number(&err, said);
                let off = (got - truth).abs() / truth.abs().max(f64::MIN_POSITIVE);
                assert!(
                    got == truth || off <= within,
                    "{key}: init {got}, the source {truth} (within {within}): {what}"
                );
            }
        } else if s("lr").is_none() {
            assert!(cfg.contains("# [schedule] not proposed"), "{what}");
        } else if !fits {
            assert!(
                cfg.contains("\n[schedule]"),
                "a fit of what the log shows: {what}"
            );
        }
        let healthy = env.run(&["critic", "--once", "--json"]);
        if want.get("passes").and_then(|v| v.as_bool()) == Some(true) {
            assert_eq!(
                healthy.code(),
                0,
                "the healthy run: {what}\n{}",
                healthy.report()
            );
        } else {
            assert!(s("why").is_some(), "{name}: say why it does not pass");
        }
        let Some(spec) = s("lr") else { continue };
        let text = String::from_utf8_lossy(&bytes);
        let tag = spec.strip_prefix("text:");
        env.write("doubled-cut", double_lr(&cut(&text, 0.6, tag), spec));
        let bad = env.run(&["critic", "--once", "--json", "--log", "doubled-cut"]);
        let v: serde_json::Value = serde_json::from_str(bad.stdout().trim()).unwrap();
        let lr = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "lr");
        assert_eq!(
            lr.map(|c| c["status"].clone()),
            Some("fail".into()),
            "lr doubled, cut mid-run: {what}\n{}",
            bad.report()
        );
    }
    assert!(
        missing.is_empty(),
        "logs without expected values in tests/fixtures/real/init.expect.toml (write what their source states): {missing:?}"
    );
}

/// Issue 37 point 6: a staircase lr (detectron2's WarmupMultiStepLR: warmup 1000 to 0.02,
/// x0.1 at 60k and 80k) is fitted as `multistep` with its milestones, checked, and judged:
/// the run passes, the same run with the lr doubled after the first drop fails the lr check.
#[test]
fn init_fits_a_staircase_lr_and_the_critic_judges_it() {
    let lr_at = |s: u64| -> f64 {
        if s < 1000 {
            0.02 * (0.001 + 0.999 * s as f64 / 1000.0)
        } else {
            0.02 * 0.1f64.powi(i32::from(s >= 60000) + i32::from(s >= 80000))
        }
    };
    let log = |factor_after: f64| -> String {
        (0..=4500u64)
            .map(|i| i * 20)
            .map(|s| {
                let f = if s >= 65000 { factor_after } else { 1.0 };
                let loss = 2.0 / (1.0 + s as f64 / 20000.0);
                format!(
                    "{{\"step\": {s}, \"loss\": {loss:.4}, \"lr\": {:e}}}\n",
                    f * lr_at(s)
                )
            })
            .collect()
    };
    let env = Env::new();
    env.write("metrics.jsonl", log(1.0));
    let init = env.run(&["init", "--log", "metrics.jsonl"]).expect(0);
    let cfg = env.read("roger.toml");
    assert!(
        cfg.contains("kind = \"multistep\""),
        "{cfg}\n{}",
        init.report()
    );
    assert!(cfg.contains("milestones = [59000, 79000]"), "{cfg}");
    assert!(cfg.contains("gamma = 0.1"), "{cfg}");
    assert!(
        init.stderr()
            .contains("drops at [59000, 79000] steps after warmup by x0.1"),
        "{}",
        init.report()
    );
    env.run(&["check"]).expect(0);
    let judged = env.run(&[
        "critic",
        "--once",
        "--json",
        "--now",
        "2024-05-01T00:00:00Z",
    ]);
    let v: serde_json::Value = serde_json::from_str(judged.stdout().trim()).unwrap();
    assert_eq!(check(&judged.stdout(), "lr")["status"], "pass", "{v:#}");
    env.write("doubled.jsonl", log(2.0));
    let bad = env.run(&[
        "critic",
        "--once",
        "--json",
        "--log",
        "doubled.jsonl",
        "--now",
        "2024-05-01T00:00:00Z",
    ]);
    assert_eq!(
        check(&bad.stdout(), "lr")["status"],
        "fail",
        "{}",
        bad.report()
    );
}
