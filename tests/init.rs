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
