//! Every schedule kind against the scheduler it is named after, with that scheduler's formula
//! written out here from the PyTorch (`torch.optim.lr_scheduler`) or Hugging Face
//! (`transformers.optimization`) documentation and source — never roger's own function — at
//! steps that include the warmup's end, the drops, the restarts and the last step.

use super::expected;
use crate::config::{Config, ScheduleConfig};
use std::f64::consts::PI;
use std::path::Path;

fn sched(body: &str) -> ScheduleConfig {
    let text = format!("[run]\nname = \"t\"\n[schedule]\n{body}");
    Config::parse(&text, Path::new("/r/roger.toml"))
        .unwrap_or_else(|e| panic!("{e:#}"))
        .schedule
        .expect("a schedule")
}

/// roger's curve equals the reference at each step (relative 1e-9 of the peak).
fn agrees(s: &ScheduleConfig, reference: impl Fn(u64) -> f64, steps: &[u64]) {
    for &step in steps {
        let (got, want) = (expected(s, step), reference(step));
        assert!(
            (got - want).abs() <= 1e-9 * s.peak_lr,
            "{:?} step {step}: roger {got}, reference {want}",
            s.kind
        );
    }
}

/// HF: `current_step / max(1, num_warmup_steps)` below the warmup's end.
fn hf_warmup(step: u64, warmup: u64) -> Option<f64> {
    (step < warmup).then(|| step as f64 / (warmup.max(1)) as f64)
}

#[test]
fn constant_with_warmup_is_hf_get_constant_schedule_with_warmup() {
    let lr0 = 3e-4;
    let lambda = |step: u64| hf_warmup(step, 50).unwrap_or(1.0);
    let steps = [0, 1, 25, 49, 50, 51, 10_000];
    for kind in ["constant", "constant-with-warmup"] {
        let s = sched(&format!(
            "kind = \"{kind}\"\npeak_lr = {lr0}\nwarmup_steps = 50\n"
        ));
        agrees(&s, |st| lr0 * lambda(st), &steps);
    }
}

#[test]
fn cosine_and_linear_are_hf_with_warmup() {
    let (lr0, w, t) = (1e-3, 100u64, 1100u64);
    // get_cosine_schedule_with_warmup (num_cycles = 0.5).
    let cosine = |step: u64| {
        hf_warmup(step, w).unwrap_or_else(|| {
            let progress = (step - w) as f64 / (t - w).max(1) as f64;
            (0.5 * (1.0 + (PI * 0.5 * 2.0 * progress).cos())).max(0.0)
        })
    };
    // get_linear_schedule_with_warmup.
    let linear = |step: u64| {
        hf_warmup(step, w)
            .unwrap_or_else(|| (t as f64 - step as f64).max(0.0) / (t - w).max(1) as f64)
    };
    let steps = [0, 50, 99, 100, 101, 350, 600, 1099, 1100];
    let body = |k: &str| {
        format!("kind = \"{k}\"\npeak_lr = {lr0}\nwarmup_steps = {w}\ntotal_steps = {t}\n")
    };
    agrees(&sched(&body("cosine")), |s| lr0 * cosine(s), &steps);
    agrees(&sched(&body("linear")), |s| lr0 * linear(s), &steps);
}

#[test]
fn inverse_sqrt_is_hf_get_inverse_sqrt_schedule() {
    let (lr0, w) = (1e-3, 400u64);
    // timescale defaults to num_warmup_steps; shift = timescale - num_warmup_steps.
    let lambda = |step: u64| {
        hf_warmup(step, w).unwrap_or_else(|| {
            let (timescale, shift) = (w as f64, 0.0);
            1.0 / ((step as f64 + shift) / timescale).sqrt()
        })
    };
    let s = sched(&format!(
        "kind = \"inverse-sqrt\"\npeak_lr = {lr0}\nwarmup_steps = {w}\n"
    ));
    agrees(
        &s,
        |st| lr0 * lambda(st),
        &[0, 200, 399, 400, 401, 1600, 90_000],
    );
}

#[test]
fn polynomial_is_hf_get_polynomial_decay_schedule_with_warmup() {
    let (lr_init, lr_end, power, w, t) = (1e-3, 1e-5, 2.0, 100u64, 1100u64);
    let lambda = |step: u64| {
        if let Some(v) = hf_warmup(step, w) {
            v
        } else if step > t {
            lr_end / lr_init
        } else {
            let lr_range = lr_init - lr_end;
            let decay_steps = (t - w) as f64;
            let pct_remaining = 1.0 - (step - w) as f64 / decay_steps;
            let decay = lr_range * pct_remaining.powf(power) + lr_end;
            decay / lr_init
        }
    };
    let s = sched(&format!(
        "kind = \"polynomial\"\npeak_lr = {lr_init}\nmin_lr = {lr_end}\npower = {power}\nwarmup_steps = {w}\ntotal_steps = {t}\n"
    ));
    agrees(
        &s,
        |st| lr_init * lambda(st),
        &[0, 50, 99, 100, 101, 600, 1099, 1100, 1101, 5000],
    );
    // power 1 (HF's default) is linear decay to lr_end.
    let s = sched(&format!(
        "kind = \"polynomial\"\npeak_lr = {lr_init}\nmin_lr = {lr_end}\nwarmup_steps = {w}\ntotal_steps = {t}\n"
    ));
    let mid = lr_init - (lr_init - lr_end) * 0.5;
    assert!((expected(&s, 600) - mid).abs() < 1e-15);
}

#[test]
fn step_is_torch_steplr() {
    // StepLR: lr = base_lr * gamma ** (last_epoch // step_size).
    let (base, gamma, size) = (0.1, 0.5f64, 30u64);
    let s = sched(&format!(
        "kind = \"step\"\npeak_lr = {base}\nstep_size = {size}\ngamma = {gamma}\n"
    ));
    agrees(
        &s,
        |e| base * gamma.powi((e / size) as i32),
        &[0, 29, 30, 31, 59, 60, 61, 300],
    );
    // After a warmup (SequentialLR([LinearLR, StepLR], milestones=[w])): StepLR's counter
    // starts at the milestone.
    let w = 10u64;
    let s = sched(&format!(
        "kind = \"step\"\npeak_lr = {base}\nstep_size = {size}\ngamma = {gamma}\nwarmup_steps = {w}\n"
    ));
    agrees(
        &s,
        |e| {
            if e < w {
                base * e as f64 / w as f64
            } else {
                base * gamma.powi(((e - w) / size) as i32)
            }
        },
        &[0, 9, 10, 39, 40, 41, 70],
    );
}

#[test]
fn multistep_is_torch_multisteplr() {
    // MultiStepLR: lr = base_lr * gamma ** bisect_right(milestones, last_epoch).
    let (base, gamma, milestones) = (0.05, 0.1f64, [30u64, 80]);
    let bisect_right = |e: u64| milestones.iter().take_while(|&&m| m <= e).count();
    let s = sched(&format!(
        "kind = \"multistep\"\npeak_lr = {base}\nmilestones = [30, 80]\ngamma = {gamma}\n"
    ));
    agrees(
        &s,
        |e| base * gamma.powi(bisect_right(e) as i32),
        &[0, 29, 30, 31, 79, 80, 81, 1000],
    );
}

/// OneCycleLR.get_lr (three_phase = False), as in torch/optim/lr_scheduler.py.
fn torch_one_cycle(
    step: u64,
    max_lr: f64,
    total: u64,
    pct_start: f64,
    div: f64,
    final_div: f64,
    cos: bool,
) -> f64 {
    let initial_lr = max_lr / div;
    let min_lr = initial_lr / final_div;
    let phases = [
        (pct_start * total as f64 - 1.0, initial_lr, max_lr),
        (total as f64 - 2.0 + 1.0, max_lr, min_lr),
    ];
    let anneal = |start: f64, end: f64, pct: f64| {
        if cos {
            let cos_out = (PI * pct).cos() + 1.0;
            end + (start - end) / 2.0 * cos_out
        } else {
            (end - start) * pct + start
        }
    };
    let step_num = step as f64;
    let mut start_step = 0.0;
    for (i, &(end_step, start_lr, end_lr)) in phases.iter().enumerate() {
        if step_num <= end_step || i == phases.len() - 1 {
            let pct = (step_num - start_step) / (end_step - start_step);
            return anneal(start_lr, end_lr, pct);
        }
        start_step = end_step;
    }
    unreachable!()
}

#[test]
fn one_cycle_is_torch_onecyclelr() {
    let (max_lr, total) = (2e-3, 1000u64);
    let steps = [0, 1, 100, 248, 249, 250, 251, 500, 900, 998, 999];
    for (anneal, cos) in [("cos", true), ("linear", false)] {
        let s = sched(&format!(
            "kind = \"one-cycle\"\npeak_lr = {max_lr}\ntotal_steps = {total}\npct_start = 0.25\ndiv_factor = 10.0\nfinal_div_factor = 100.0\nanneal = \"{anneal}\"\n"
        ));
        agrees(
            &s,
            |st| torch_one_cycle(st, max_lr, total, 0.25, 10.0, 100.0, cos),
            &steps,
        );
    }
    // PyTorch's defaults: pct_start 0.3, div_factor 25, final_div_factor 1e4, cos.
    let s = sched(&format!(
        "kind = \"one-cycle\"\npeak_lr = {max_lr}\ntotal_steps = {total}\n"
    ));
    agrees(
        &s,
        |st| torch_one_cycle(st, max_lr, total, 0.3, 25.0, 1e4, true),
        &steps,
    );
    // Past the last step the final lr holds (PyTorch raises there).
    assert_eq!(expected(&s, 5000), max_lr / 25.0 / 1e4);
}

#[test]
fn cosine_restarts_is_hf_hard_restarts() {
    let (lr0, w, t, cycles) = (1e-3, 64u64, 1088u64, 4u64);
    // get_cosine_with_hard_restarts_schedule_with_warmup.
    let lambda = |step: u64| {
        if let Some(v) = hf_warmup(step, w) {
            return v;
        }
        let progress = (step - w) as f64 / (t - w).max(1) as f64;
        if progress >= 1.0 {
            return 0.0;
        }
        (0.5 * (1.0 + (PI * ((cycles as f64 * progress) % 1.0)).cos())).max(0.0)
    };
    let s = sched(&format!(
        "kind = \"cosine-restarts\"\npeak_lr = {lr0}\nwarmup_steps = {w}\ntotal_steps = {t}\nnum_cycles = {cycles}\n"
    ));
    // Cycles of 256 steps: restarts at 320, 576, 832.
    agrees(
        &s,
        |st| lr0 * lambda(st),
        &[
            0, 63, 64, 65, 192, 319, 320, 321, 575, 576, 831, 832, 1087, 1088, 2000,
        ],
    );
}

#[test]
fn sgdr_is_torch_cosine_annealing_warm_restarts() {
    // CosineAnnealingWarmRestarts: eta_min + (eta_max - eta_min)(1 + cos(pi T_cur / T_i)) / 2,
    // T_cur reset at each restart, T_i = T_0 * T_mult^i (PyTorch's closed form for T_mult > 1).
    let torch = |epoch: u64, t0: u64, t_mult: u64, eta_max: f64, eta_min: f64| {
        let e = epoch as f64;
        let (t_0, m) = (t0 as f64, t_mult as f64);
        let (t_cur, t_i) = if e >= t_0 {
            if t_mult == 1 {
                (e % t_0, t_0)
            } else {
                let n = ((e / t_0 * (m - 1.0) + 1.0).ln() / m.ln()).floor();
                (e - t_0 * (m.powf(n) - 1.0) / (m - 1.0), t_0 * m.powf(n))
            }
        } else {
            (e, t_0)
        };
        eta_min + (eta_max - eta_min) * (1.0 + (PI * t_cur / t_i).cos()) / 2.0
    };
    for t_mult in [1u64, 2, 3] {
        let s = sched(&format!(
            "kind = \"sgdr\"\npeak_lr = 1e-3\nmin_lr = 1e-5\nt_0 = 100\nt_mult = {t_mult}\n"
        ));
        agrees(
            &s,
            |e| torch(e, 100, t_mult, 1e-3, 1e-5),
            &[
                0, 1, 50, 99, 100, 101, 199, 200, 299, 300, 301, 399, 400, 1299, 1300, 5000,
            ],
        );
    }
}

#[test]
fn per_epoch_cosine_is_lightning_cosine_annealing_lr() {
    // Lightning steps CosineAnnealingLR(T_max=epochs) once per epoch (interval "epoch"):
    // eta_min + (eta_max - eta_min)(1 + cos(pi * epoch / T_max)) / 2, held for the epoch.
    let (epochs, per, eta_max, eta_min) = (10u64, 50u64, 1e-3, 1e-5);
    let s = sched(&format!(
        "kind = \"cosine\"\npeak_lr = {eta_max}\nmin_lr = {eta_min}\ntotal_steps = {}\nsteps_per_epoch = {per}\n",
        epochs * per
    ));
    let torch = |step: u64| {
        let epoch = (step / per) as f64;
        eta_min + (eta_max - eta_min) * (1.0 + (PI * epoch / epochs as f64).cos()) / 2.0
    };
    agrees(&s, torch, &[0, 1, 49, 50, 51, 99, 100, 249, 250, 499, 500]);
    // A staircase: the whole epoch holds its first step's lr.
    assert_eq!(expected(&s, 51), expected(&s, 99));
    assert!(expected(&s, 100) < expected(&s, 99));
}

#[test]
fn warmup_ratio_is_hf_ceil_of_ratio_times_total() {
    // TrainingArguments.get_warmup_steps: math.ceil(num_training_steps * warmup_ratio).
    for (ratio, total) in [(0.1, 1000u64), (0.03, 1000), (0.05, 337)] {
        let s = sched(&format!(
            "kind = \"linear\"\npeak_lr = 1e-3\nwarmup_ratio = {ratio}\ntotal_steps = {total}\n"
        ))
        .resolved(None);
        let w = (total as f64 * ratio).ceil() as u64;
        assert_eq!(s.warmup_steps, w, "ratio {ratio} of {total}");
        let hf = |step: u64| {
            hf_warmup(step, w).unwrap_or_else(|| {
                (total as f64 - step as f64).max(0.0) / (total - w).max(1) as f64
            })
        };
        agrees(
            &s,
            |st| 1e-3 * hf(st),
            &[0, w - 1, w, w + 1, total - 1, total],
        );
    }
    // total_steps from the log when the config leaves it out.
    let text = "[run]\nname = \"t\"\n[metrics]\ntotal_steps = \"max_steps\"\n[schedule]\nkind = \"cosine\"\npeak_lr = 1e-3\nwarmup_ratio = 0.1\n";
    let c = Config::parse(text, Path::new("/r/roger.toml")).unwrap();
    let s = c.schedule.unwrap().resolved(Some(500));
    assert_eq!((s.total_steps, s.warmup_steps), (Some(500), 50));
}

/// Ultralytics (ultralytics/utils/__init__.py `one_cycle`, engine/trainer.py `lf`): after the
/// warmup results.csv's epoch `x` (counted from 1) shows `lr0 · lf(x - 1)`; during it, the
/// ramp `x / warmup` of that.
#[test]
fn yolo_kinds_are_ultralytics_lf() {
    let (lr0, lrf, epochs) = (0.01, 0.01, 100u64);
    let linear = |e: f64| (1.0 - e / epochs as f64).max(0.0) * (1.0 - lrf) + lrf;
    let one_cycle = |e: f64| ((1.0 - (e * PI / epochs as f64).cos()) / 2.0) * (lrf - 1.0) + 1.0;
    let steps = [1, 2, 3, 4, 5, 50, 99, 100];
    for (kind, lf) in [
        ("yolo-linear", &linear as &dyn Fn(f64) -> f64),
        ("yolo-cos", &one_cycle),
    ] {
        let s = sched(&format!(
            "kind = \"{kind}\"\npeak_lr = {lr0}\nmin_lr = {}\nwarmup_steps = 3\ntotal_steps = {epochs}\n",
            lr0 * lrf
        ));
        let reference = |x: u64| {
            let ramp = (x as f64 / 3.0).min(1.0);
            ramp * lr0 * lf(x.saturating_sub(1) as f64)
        };
        agrees(&s, reference, &steps);
    }
}
