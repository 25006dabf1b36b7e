//! Issue 37 point 5: a Lightning run plans epochs (`max_epochs`) while its metrics.csv counts
//! global steps. A real Lightning Trainer (tests/fixtures/lightning_epochs_train.py, CPU, the
//! versions .ci/run pins) writes the log; `roger init` turns the planned epochs into the last
//! step from the log's own epoch column, and two hours after the run ended the critic says it
//! finished, not that it is stale. Planned epochs in the module's hparams.yaml and in a
//! LightningCLI-style config.yaml (`trainer: max_epochs`), with and without validation rows.

use crate::critic::{check, json_out};
use crate::util::{self, repo_root, Env};
use std::process::{Command, Stdio};

const PY: &str = "/usr/bin/python3";

fn lightning_ready(test: &str) -> bool {
    let ok = Command::new(PY)
        .env(
            "PYTHONPATH",
            repo_root().join("tests/fixtures/python_hooks"),
        )
        .args(["-c", "import torch_py311\nimport pytorch_lightning"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        util::missing(
            test,
            &format!("Lightning for {PY} (with python3-torch)"),
            "pip install pytorch-lightning==2.0.9 torchmetrics==1.2.1 lightning-utilities==0.10.1 beside apt's python3-torch; .ci/run does",
        );
    }
    ok
}

#[test]
fn a_lightning_run_planned_in_epochs_gets_its_last_step_and_is_finished_not_stale() {
    let test = "a_lightning_run_planned_in_epochs_gets_its_last_step_and_is_finished_not_stale";
    if !lightning_ready(test) {
        return;
    }
    // (max_epochs, batches per epoch, log_every_n_steps, no validation, LightningCLI config)
    for (epochs, batches, every, no_val, cli) in
        [(6u64, 37u64, 10u64, false, false), (4, 23, 7, true, true)]
    {
        let what = format!(
            "max_epochs {epochs}, {batches} batches, every {every}, no_val {no_val}, cli {cli}"
        );
        let env = Env::new();
        // Copied beside the run: tests/fixtures holds an `mlflow` folder that would shadow
        // the package Lightning imports.
        let script =
            std::fs::read(repo_root().join("tests/fixtures/lightning_epochs_train.py")).unwrap();
        env.write("lightning_epochs_train.py", script);
        let mut c = Command::new(PY);
        c.current_dir(env.dir.path())
            .arg("lightning_epochs_train.py")
            .env(
                "PYTHONPATH",
                repo_root().join("tests/fixtures/python_hooks"),
            )
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("MAX_EPOCHS", epochs.to_string())
            .env("BATCHES", batches.to_string())
            .env("LOG_EVERY", every.to_string());
        if no_val {
            c.env("NO_VAL", "1");
        }
        if cli {
            c.env("CLI", "1");
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let last: u64 = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("{what}: no last step printed"));
        assert_eq!(last, epochs * batches - 1, "{what}");

        let init = env.run(&["init", "--log", "logs"]).expect(0);
        let cfg = roger::config::Config::load(&env.path("roger.toml")).unwrap();
        assert_eq!(
            cfg.metrics.planned_total,
            Some(last),
            "{what}\n{}",
            init.report()
        );
        assert!(
            init.stderr().contains("steps per epoch"),
            "{what}: init says how\n{}",
            init.report()
        );
        env.run(&["check"]).expect(0);
        let log = env.path("logs/lightning_logs/version_0/metrics.csv");
        let mtime = std::fs::metadata(&log).unwrap().modified().unwrap();
        let later: chrono::DateTime<chrono::Utc> =
            (mtime + std::time::Duration::from_secs(2 * 3600)).into();
        let now = later.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let r = env.run(&["critic", "--once", "--json", "--now", &now]);
        assert_eq!(
            check(&json_out(&r), "stale")["status"],
            "pass",
            "{what}\n{}",
            r.report()
        );
    }
}
