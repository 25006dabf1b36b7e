//! Issue 18 item 7 (and the metrics part of 6), end to end: the configs real runs need, run
//! through the real binary — new schedule kinds judged on logs whose lr is computed here
//! from the PyTorch / HF formulas, parameter groups, total_steps and warmup_ratio from the
//! log, Lightning's version_N directories, elapsed clocks, derived tokens/s, partial lines,
//! stepless entries and the true count of unreadable lines.

use crate::critic::check;
use crate::util::Env;
use serde_json::Value;
use std::f64::consts::PI;

fn critic_json(env: &Env) -> (crate::util::Run, Value) {
    let run = env.run(&["critic", "--json"]);
    let v = serde_json::from_str(run.stdout().trim())
        .unwrap_or_else(|e| panic!("{e}\n{}", run.report()));
    (run, v)
}

fn jsonl(lines: impl IntoIterator<Item = Value>) -> String {
    lines.into_iter().map(|l| format!("{l}\n")).collect()
}

const PHASE: &str =
    "[[phase]]\nname = \"all\"\nfrom = 0\nloss = [0.5, 5.0]\nstale = \"1h\"\nwindow = 40\n";

#[test]
fn new_schedule_keys_are_validated_with_file_line_and_column() {
    let env = Env::new();
    let head = "[run]\nname = \"t\"\n[schedule]\n";
    // Valid: each new kind and key is accepted by `roger check`.
    for body in [
        "kind = \"polynomial\"\npeak_lr = 1e-3\nmin_lr = 1e-5\npower = 2.0\nwarmup_ratio = 0.05\ntotal_steps = 1000\n",
        "kind = \"step\"\npeak_lr = 0.1\nstep_size = 30\ngamma = 0.5\n",
        "kind = \"multistep\"\npeak_lr = 0.1\nmilestones = [30, 80]\n",
        "kind = \"one-cycle\"\npeak_lr = 1e-3\ntotal_steps = 1000\npct_start = 0.25\ndiv_factor = 10.0\nfinal_div_factor = 100.0\nanneal = \"linear\"\n",
        "kind = \"cosine-restarts\"\npeak_lr = 1e-3\ntotal_steps = 1000\nnum_cycles = 3\n",
        "kind = \"sgdr\"\npeak_lr = 1e-3\nt_0 = 100\nt_mult = 2\n",
        "kind = \"constant-with-warmup\"\npeak_lr = 1e-3\nwarmup_steps = 10\n",
        "kind = \"plateau\"\npeak_lr = 1e-3\nfactor = 0.5\n",
        "kind = \"cosine\"\npeak_lr = 1e-3\ntotal_steps = 500\nsteps_per_epoch = 50\n",
    ] {
        env.write("roger.toml", format!("{head}{body}"));
        env.run(&["--config", "roger.toml", "check"]).expect(0);
    }
    // Bad values: the error names the file, the key's line and column, and what is expected.
    for (body, want) in [
        ("kind = \"step\"\npeak_lr = 0.1\nstep_size = 0\n", "roger.toml:6:1: [schedule] expected step_size >= 1 for kind = \"step\""),
        ("kind = \"step\"\npeak_lr = 0.1\nstep_size = 3\ngamma = 1.5\n", "roger.toml:7:1: [schedule] expected 0 < gamma <= 1, got 1.5"),
        ("kind = \"multistep\"\npeak_lr = 0.1\nmilestones = [80, 30]\n", "roger.toml:6:1: [schedule] expected milestones in increasing order"),
        ("kind = \"cosine\"\npeak_lr = 1e-3\ntotal_steps = 100\nwarmup_ratio = 1.5\n", "roger.toml:7:1: [schedule] expected 0 <= warmup_ratio < 1"),
        ("kind = \"cosine\"\npeak_lr = 1e-3\ntotal_steps = 100\nwarmup_steps = 5\nwarmup_ratio = 0.1\n", "roger.toml:7:1: [schedule] set warmup_steps or warmup_ratio, not both"),
        ("kind = \"one-cycle\"\npeak_lr = 1e-3\ntotal_steps = 100\npct_start = 1.0\n", "roger.toml:7:1: [schedule] expected 0 < pct_start < 1"),
        ("kind = \"one-cycle\"\npeak_lr = 1e-3\ntotal_steps = 100\nwarmup_steps = 10\n", "roger.toml:7:1: [schedule] one-cycle rises on its own"),
        ("kind = \"sgdr\"\npeak_lr = 1e-3\n", "roger.toml:4:1: [schedule] expected t_0 >= 1 for kind = \"sgdr\""),
        ("kind = \"plateau\"\npeak_lr = 1e-3\nfactor = 2.0\n", "roger.toml:6:1: [schedule] expected 0 < factor < 1"),
        ("kind = \"cosine\"\npeak_lr = 1e-3\ntotal_steps = 100\nstep_size = 10\n", "roger.toml:7:1: [schedule] step_size applies to kind = step only"),
        ("kind = \"cosine\"\npeak_lr = 1e-3\ntotal_steps = 100\nsteps_per_epoch = 0\n", "roger.toml:7:1: [schedule] expected steps_per_epoch >= 1"),
        ("kind = \"polynomial\"\npeak_lr = 1e-3\n", "roger.toml:4:1: [schedule] kind = \"polynomial\" needs total_steps"),
        ("kind = \"cosine\"\npeak_lr = 1e-3\ntotal_steps = 100\ngroup_scale = [1.0, 0.1]\n", "roger.toml:7:1: [schedule] group_scale has 2 entries but [metrics] lr names 1 key(s)"),
        ("kind = \"cosine\"\npeak_lr = 1e-3\ntotal_steps = 100\nnum_cylces = 2\n", "roger.toml:7:1: unknown field `num_cylces`"),
        ("kind = \"cosine-restart\"\npeak_lr = 1e-3\n", "roger.toml:4:8: unknown variant `cosine-restart`"),
        ("kind = \"polynomial\"\npeak_lr = 1e-3\ntotal_steps = 100\npower = -1.0\n", "roger.toml:7:1: [schedule] expected power > 0"),
        ("kind = \"one-cycle\"\npeak_lr = 1e-3\ntotal_steps = 100\ndiv_factor = 0.5\n", "roger.toml:7:1: [schedule] expected div_factor >= 1"),
        ("kind = \"one-cycle\"\npeak_lr = 1e-3\ntotal_steps = 100\nfinal_div_factor = -3.0\n", "roger.toml:7:1: [schedule] expected final_div_factor >= 1"),
        ("kind = \"one-cycle\"\npeak_lr = 1e-3\ntotal_steps = 100\nanneal = \"cosine\"\n", "roger.toml:7:10: unknown variant `cosine`"),
        ("kind = \"cosine-restarts\"\npeak_lr = 1e-3\ntotal_steps = 100\nnum_cycles = 0\n", "roger.toml:7:1: [schedule] expected num_cycles >= 1"),
        ("kind = \"sgdr\"\npeak_lr = 1e-3\nt_0 = 10\nt_mult = 0\n", "roger.toml:7:1: [schedule] expected t_mult >= 1"),
        ("kind = \"plateau\"\npeak_lr = 1e-3\nsteps_per_epoch = 10\n", "roger.toml:6:1: [schedule] steps_per_epoch is not used by this kind"),
        ("kind = \"step\"\npeak_lr = 1e-3\nstep_size = 5\nmilestones = [3]\n", "roger.toml:7:1: [schedule] milestones applies to kind = multistep only"),
        ("kind = \"cosine\"\npeak_lr = 1e-3\ntotal_steps = 100\nstep_slack = 20000\n", "roger.toml:7:1: [schedule] expected step_slack <= 10000"),
    ] {
        env.write("roger.toml", format!("{head}{body}"));
        let run = env.run(&["--config", "roger.toml", "check"]);
        assert_ne!(run.code(), 0, "{body}\n{}", run.report());
        assert!(run.stderr().contains(want), "want {want:?}\n{}", run.report());
    }
    for (metrics, want) in [
        (
            "clock = \"lunar\"\n",
            "roger.toml:4:9: unknown variant `lunar`",
        ),
        ("lr = []\n", "roger.toml:4:6: expected at least one key"),
        (
            "step_time_unit = \"min\"\n",
            "roger.toml:4:18: unknown variant `min`",
        ),
        (
            "lr = [\"a\", \"b\", \"c\", \"d\", \"e\"]\n",
            "roger.toml:4:1: [metrics] lr lists 5 keys: expected at most 4",
        ),
        (
            "step_time = \"dt\"\n",
            "roger.toml:4:1: [metrics] step_time needs tokens_per_step",
        ),
        (
            "tokens_per_step = -5.0\nstep_time = \"dt\"\n",
            "roger.toml:4:1: [metrics] expected tokens_per_step > 0",
        ),
    ] {
        env.write(
            "roger.toml",
            format!("[run]\nname = \"t\"\n[metrics]\n{metrics}"),
        );
        let run = env.run(&["--config", "roger.toml", "check"]);
        assert!(
            run.stderr().contains(want),
            "want {want:?}\n{}",
            run.report()
        );
    }
    env.write(
        "roger.toml",
        "[run]\nname = \"t\"\nlog = \"v{version}/{version}.csv\"\n",
    );
    let run = env.run(&["--config", "roger.toml", "check"]);
    assert!(
        run.stderr().contains("roger.toml:3:1: [run] log"),
        "{}",
        run.report()
    );
}

/// PyTorch ReduceLROnPlateau (mode min, threshold 0): × factor after `patience` bad epochs.
fn plateau_lrs(losses: &[f64], lr0: f64, factor: f64, patience: usize) -> Vec<f64> {
    let (mut lr, mut best, mut bad) = (lr0, f64::INFINITY, 0);
    losses
        .iter()
        .map(|&m| {
            if m < best {
                best = m;
                bad = 0;
            } else {
                bad += 1;
            }
            if bad > patience {
                lr *= factor;
                bad = 0;
            }
            lr
        })
        .collect()
}

#[test]
fn plateau_schedule_is_judged_by_never_rising_and_dropping_by_its_factor() {
    let env = Env::new();
    env.write(
        "roger.toml",
        format!("[run]\nname = \"p\"\nlog = \"log.jsonl\"\n[schedule]\nkind = \"plateau\"\npeak_lr = 1e-3\nfactor = 0.5\n{PHASE}"),
    );
    let losses: Vec<f64> = (0..40)
        .map(|i| if i < 10 { 3.0 - 0.1 * i as f64 } else { 2.1 })
        .collect();
    let lrs = plateau_lrs(&losses, 1e-3, 0.5, 3);
    assert!(lrs.windows(2).filter(|w| w[1] < w[0]).count() >= 2);
    let log = |lrs: &[f64]| {
        jsonl(
            lrs.iter()
                .zip(&losses)
                .enumerate()
                .map(|(i, (lr, l))| serde_json::json!({"step": i * 10, "loss": l, "lr": lr})),
        )
    };
    env.write("log.jsonl", log(&lrs));
    let (run, v) = critic_json(&env);
    assert_eq!(check(&v, "lr")["status"], "pass", "{}", run.report());
    assert!(check(&v, "lr")["reason"]
        .as_str()
        .unwrap()
        .contains("drop(s)"));
    // A drop by ×0.3 instead of ×0.5 breaks the contract.
    let mut wrong = lrs.clone();
    let at = wrong.iter().position(|l| *l < 1e-3).unwrap();
    for l in &mut wrong[at..] {
        *l *= 0.6;
    }
    env.write("log.jsonl", log(&wrong));
    let (run, v) = critic_json(&env);
    let lr = check(&v, "lr");
    assert_eq!(lr["status"], "fail", "{}", run.report());
    assert!(
        lr["reason"]
            .as_str()
            .unwrap()
            .contains("expected ×0.5 per drop"),
        "{lr:#}"
    );
    // A rise (the scheduler reset by a resume).
    let mut rise = lrs.clone();
    *rise.last_mut().unwrap() = 1e-3;
    env.write("log.jsonl", log(&rise));
    let (_, v) = critic_json(&env);
    assert!(check(&v, "lr")["reason"]
        .as_str()
        .unwrap()
        .contains("rose from"));
}

#[test]
fn each_parameter_group_is_judged_against_its_scale() {
    let env = Env::new();
    let (peak, w, t) = (2e-2, 50u64, 1000u64);
    // HF get_cosine_schedule_with_warmup.
    let cosine = |s: u64| {
        if s < w {
            peak * s as f64 / w as f64
        } else {
            peak * 0.5 * (1.0 + (PI * (s - w) as f64 / (t - w) as f64).cos())
        }
    };
    env.write(
        "roger.toml",
        format!("[run]\nname = \"g\"\nlog = \"log.jsonl\"\n[metrics]\nlr = [\"lr-AdamW\", \"lr-Muon\"]\n[schedule]\nkind = \"cosine\"\npeak_lr = {peak}\nwarmup_steps = {w}\ntotal_steps = {t}\ngroup_scale = [0.1, 1.0]\n{PHASE}"),
    );
    let log = |muon_scale: f64| {
        jsonl((0..40u64).map(|i| {
            let s = 100 + 10 * i;
            serde_json::json!({"step": s, "loss": 2.0, "lr-AdamW": 0.1 * cosine(s), "lr-Muon": muon_scale * cosine(s)})
        }))
    };
    env.write("log.jsonl", log(1.0));
    let (run, v) = critic_json(&env);
    let lr = check(&v, "lr");
    assert_eq!(lr["status"], "pass", "{}", run.report());
    assert!(
        lr["reason"]
            .as_str()
            .unwrap()
            .starts_with("lr of 2 parameter groups"),
        "{lr:#}"
    );
    // Muon logged at AdamW's tenth: group 2 fails, and is named.
    env.write("log.jsonl", log(0.1));
    let (run, v) = critic_json(&env);
    let lr = check(&v, "lr");
    assert_eq!(lr["status"], "fail", "{}", run.report());
    assert!(
        lr["reason"]
            .as_str()
            .unwrap()
            .starts_with("lr of 2 parameter groups: group 2 (×1): lr "),
        "{lr:#}"
    );
}

#[test]
fn total_steps_and_warmup_ratio_come_from_the_trainer_state() {
    let env = Env::new();
    let (peak, max_steps, ratio) = (5e-5, 400u64, 0.1);
    let w = (max_steps as f64 * ratio).ceil() as u64; // HF: ceil(ratio × max_steps)
    let linear = |s: u64| {
        if s < w {
            peak * s as f64 / w as f64
        } else {
            peak * (max_steps - s) as f64 / (max_steps - w) as f64
        }
    };
    let history: Vec<Value> = (1..=max_steps / 10)
        .map(|i| serde_json::json!({"step": i * 10, "loss": 1.0, "learning_rate": linear(i * 10), "epoch": i as f64 / 40.0}))
        .chain([serde_json::json!({"predict_loss": 0.9, "predict_runtime": 3.2})])
        .collect();
    env.write(
        "trainer_state.json",
        serde_json::json!({"global_step": max_steps, "max_steps": max_steps, "log_history": history}).to_string(),
    );
    env.write(
        "roger.toml",
        format!("[run]\nname = \"hf\"\nlog = \"trainer_state.json\"\nformat = \"hf-trainer-state\"\n[schedule]\nkind = \"linear\"\npeak_lr = {peak}\nwarmup_ratio = {ratio}\n{PHASE}"),
    );
    let (run, v) = critic_json(&env);
    assert_eq!(check(&v, "lr")["status"], "pass", "{}", run.report());
    let stale = check(&v, "stale");
    assert!(
        stale["reason"]
            .as_str()
            .unwrap()
            .contains("reached total_steps = 400"),
        "{stale:#}"
    );
    // The predict entry has no step: skipped quietly, not reported as unreadable.
    assert!(!run.stderr().contains("skipped"), "{}", run.report());
    // A run not finished yet by the log's own total: no "reached total_steps".
    let cut: Vec<Value> = history[..20].to_vec();
    env.write(
        "trainer_state.json",
        serde_json::json!({"global_step": 200, "max_steps": max_steps, "log_history": cut})
            .to_string(),
    );
    let (run, v) = critic_json(&env);
    assert_eq!(check(&v, "lr")["status"], "pass", "{}", run.report());
    assert!(!check(&v, "stale")["reason"]
        .as_str()
        .unwrap()
        .contains("reached"));
}

#[test]
fn lightning_per_epoch_cosine_in_the_newest_version_directory() {
    let env = Env::new();
    let (epochs, per, eta_max) = (8u64, 25u64, 1e-3);
    // CosineAnnealingLR(T_max=epochs), stepped once per epoch.
    let lr_at =
        |step: u64| eta_max * (1.0 + (PI * (step / per) as f64 / epochs as f64).cos()) / 2.0;
    let csv = |shift: f64| {
        let mut s = String::from("epoch,step,train_loss,lr-AdamW\n");
        for step in (0..epochs * per).step_by(5) {
            s.push_str(&format!(
                "{},{step},2.0,{}\n",
                step / per,
                lr_at(step) * shift
            ));
        }
        s
    };
    // version_1 is an older launch with a wrong lr; version_10 is the newest and right.
    env.write("lightning_logs/version_1/metrics.csv", csv(3.0));
    env.write("lightning_logs/version_10/metrics.csv", csv(1.0));
    env.write("lightning_logs/version_2/metrics.csv", csv(3.0));
    let cfg = |staircase: &str| {
        format!("[run]\nname = \"pl\"\nlog = \"lightning_logs/version_{{version}}/metrics.csv\"\nformat = \"csv\"\n[metrics]\nloss = \"train_loss\"\nlr = \"lr-AdamW\"\n[schedule]\nkind = \"cosine\"\npeak_lr = {eta_max}\ntotal_steps = {}\n{staircase}{PHASE}", epochs * per)
    };
    env.write("roger.toml", cfg(&format!("steps_per_epoch = {per}\n")));
    let (run, v) = critic_json(&env);
    assert_eq!(v["step"], 195, "{}", run.report());
    assert_eq!(check(&v, "lr")["status"], "pass", "{}", run.report());
    // Judged as a per-step cosine, the staircase is off the curve.
    env.write("roger.toml", cfg(""));
    let (run, v) = critic_json(&env);
    assert_eq!(check(&v, "lr")["status"], "fail", "{}", run.report());
}

#[test]
fn elapsed_clocks_and_tokens_per_s_from_step_time() {
    let env = Env::new();
    // modded-nanogpt style: ms since start, and the average step time.
    let mut log = String::new();
    for s in (0..=300u64).step_by(10) {
        log.push_str(&format!(
            "step:{s}/1770 train_loss:{:.4} train_time:{}ms step_avg:{:.2}ms\n",
            4.0 - s as f64 / 1000.0,
            s * 250,
            250.0
        ));
    }
    env.write("train.log", log);
    env.write(
        "roger.toml",
        "[run]\nname = \"nano\"\nlog = \"train.log\"\nformat = \"text\"\n[metrics]\nclock = \"elapsed-ms\"\nstep_time_unit = \"ms\"\ntokens_per_step = 524288\npatterns = [{ regex = 'step:(\\d+)/\\d+ train_loss:([\\d.]+) train_time:(\\d+)ms step_avg:([\\d.]+)ms', fields = [\"step\", \"loss\", \"time\", \"step_time\"] }]\nstep_time = \"step_time\"\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [0.5, 5.0]\ntokens_per_s_min = 1000000\nstale = \"10m\"\nwindow = 20\n",
    );
    let (run, v) = critic_json(&env);
    let tps = check(&v, "tokens_per_s");
    assert_eq!(tps["status"], "pass", "{}", run.report());
    assert_eq!(tps["observed"]["median"], 524288.0 / 0.25, "{tps:#}");
    // The clock says 75 s since start, not 1970: fresh, and the steps 2.5 s apart.
    assert_eq!(check(&v, "stale")["status"], "pass", "{}", run.report());
    let rec = &roger::ledger::Ledger::new(env.path("roger-ledger.jsonl"))
        .records()
        .unwrap()[0];
    let obs = rec.get("observation").unwrap();
    let (last, adv) = (
        obs["last_sample_at"].as_f64().unwrap(),
        obs["advanced_at"].as_f64().unwrap(),
    );
    assert_eq!(last, adv);
    // Without the step time: steps advanced per second of the log's own clock.
    let cfg = env
        .read("roger.toml")
        .replace("step_avg:([\\d.]+)ms", "step_avg:[\\d.]+ms")
        .replace(", \"step_time\"]", "]")
        .replace("step_time = \"step_time\"\n", "")
        .replace("step_time_unit = \"ms\"\n", "");
    assert!(!cfg.contains("step_time"), "{cfg}");
    env.write("roger.toml", cfg);
    let (run, v) = critic_json(&env);
    assert_eq!(
        check(&v, "tokens_per_s")["observed"]["median"],
        524288.0 * 10.0 / 2.5,
        "{}",
        run.report()
    );
    // H:MM:SS elapsed (tqdm / HF style) and a cumulative token counter, in JSONL.
    env.write(
        "log.jsonl",
        jsonl((0..20u64).map(|i| {
            let secs = 1767 + 10 * i;
            serde_json::json!({"step": 100 + i, "loss": 2.0, "elapsed": format!("0:{:02}:{:02}", secs / 60, secs % 60), "num_input_tokens_seen": 4096 * 100 * i})
        })),
    );
    env.write(
        "roger.toml",
        "[run]\nname = \"hf\"\nlog = \"log.jsonl\"\n[metrics]\ntime = \"elapsed\"\nclock = \"elapsed\"\ntokens = \"num_input_tokens_seen\"\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [0.5, 5.0]\ntokens_per_s_min = 30000\nstale = \"10m\"\nwindow = 20\n",
    );
    let (run, v) = critic_json(&env);
    let tps = check(&v, "tokens_per_s");
    assert_eq!(tps["status"], "pass", "{}", run.report());
    assert_eq!(tps["observed"]["median"], 40960.0, "{tps:#}");
    assert_eq!(check(&v, "stale")["status"], "pass", "{}", run.report());
}

#[test]
fn a_bad_field_keeps_the_line_and_unreadable_lines_are_counted_in_full() {
    let env = Env::new();
    env.write(
        "roger.toml",
        format!("[run]\nname = \"g\"\nlog = \"log.jsonl\"\n{PHASE}"),
    );
    let mut log = String::from(
        "{\"step\": 10, \"loss\": 2.0}\n{\"step\": 20, \"loss\": 2.1, \"grad_norm\": \"n/a\"}\n",
    );
    for i in 0..150 {
        log.push_str(&format!("not json {i}\n"));
    }
    env.write("log.jsonl", log);
    let (run, v) = critic_json(&env);
    // 151 unreadable (150 lines + one field), 5 shown.
    assert!(
        run.stderr().contains("... and 146 more unreadable line(s)"),
        "{}",
        run.report()
    );
    assert!(
        run.stderr().contains("log.jsonl:2: `grad_norm` is \"n/a\""),
        "{}",
        run.report()
    );
    // The line with the bad grad norm still gave its step and loss.
    assert_eq!(v["step"], 20, "{}", run.report());
    let rec = &roger::ledger::Ledger::new(env.path("roger-ledger.jsonl"))
        .records()
        .unwrap()[0];
    let window = rec.get("observation").unwrap()["window"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(window.last().unwrap()["values"]["loss"], 2.1);
}
