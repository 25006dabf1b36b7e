//! Issue 37 point 6: one-cycle fitted by `init` from a log that PyTorch's own `OneCycleLR`
//! wrote (tests/fixtures/one_cycle_train.py, CPU), then checked by the critic: the healthy log
//! passes its lr check, the same log with its lr doubled from half-way fails it.

use crate::critic::{check, json_out};
use crate::util::Env;
use std::process::Command;

const PY: &str = "/usr/bin/python3";

#[test]
fn torch_one_cycle_is_fitted_by_init_and_checked_by_the_critic() {
    if !crate::util::torch_ready("torch_one_cycle_is_fitted_by_init_and_checked_by_the_critic") {
        return;
    }
    // (max_lr, pct_start, total steps, log every)
    for (max_lr, pct, total, every) in [(0.05, 0.3, 600u64, 5u64), (0.003, 0.25, 2000, 10)] {
        let env = Env::new();
        let script =
            std::fs::read(crate::util::repo_root().join("tests/fixtures/one_cycle_train.py"))
                .unwrap();
        env.write("one_cycle_train.py", script);
        let out = Command::new(PY)
            .arg("one_cycle_train.py")
            .current_dir(env.path(""))
            .env("MAX_LR", max_lr.to_string())
            .env("PCT_START", pct.to_string())
            .env("TOTAL", total.to_string())
            .env("EVERY", every.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );

        let what = format!("max_lr {max_lr} pct_start {pct} total {total}");
        let init = env.run(&["init", "--log", "train.jsonl"]).expect(0);
        let err = init.stderr();
        let line = err
            .lines()
            .find(|l| l.contains("init: schedule: "))
            .unwrap_or_else(|| panic!("{what}: no schedule line\n{err}"));
        assert!(line.contains("schedule: one-cycle "), "{what}: {line}");
        let cfg = roger::config::Config::load(&env.path("roger.toml")).unwrap();
        let s = cfg.schedule.expect("a [schedule]");
        assert!((s.peak_lr - max_lr).abs() <= 0.01 * max_lr, "{what}: {s:?}");
        assert!((s.pct_start.unwrap() - pct).abs() <= 0.01, "{what}: {s:?}");
        let t = s.total_steps.unwrap() as f64;
        assert!(
            (t - total as f64).abs() <= 0.01 * total as f64,
            "{what}: {s:?}"
        );

        env.run(&["check"]).expect(0);
        let ok = env.run(&["critic", "--once", "--json"]);
        assert_eq!(
            check(&json_out(&ok), "lr")["status"],
            "pass",
            "{what}\n{}",
            ok.report()
        );

        // The same run with its lr doubled from half-way.
        let text = env.read("train.jsonl");
        let bad: String = text
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                if v["step"].as_u64().unwrap() > total / 2 {
                    v["lr"] = (v["lr"].as_f64().unwrap() * 2.0).into();
                }
                format!("{v}\n")
            })
            .collect();
        env.write("doubled.jsonl", bad);
        let r = env.run(&["critic", "--once", "--json", "--log", "doubled.jsonl"]);
        assert_eq!(
            check(&json_out(&r), "lr")["status"],
            "fail",
            "{what}\n{}",
            r.report()
        );
    }
}
