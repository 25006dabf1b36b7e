//! A test observation: phase "main" with the example config's thresholds, for the checks'
//! unit tests.

use super::{Num, ObsSample, Observation, Settings, Thresholds};
use crate::config::{DecayShape, ScheduleConfig, ScheduleKind};

/// An observation in phase "main" (steps 100..) with the example's thresholds.
pub fn obs_with(samples: Vec<(u64, Vec<(&str, f64)>)>) -> Observation {
    Observation {
        now: 1_700_000_000.0,
        config_hash: "h".into(),
        step: samples.last().map(|s| s.0),
        phase: Some(Thresholds {
            name: "main".into(),
            from: 100,
            to: None,
            loss: Some([2.5, 6.0]),
            loss_slope: Some([-2.0, 0.05]),
            loss_spike: Some(1.5),
            grad_norm_max: Some(2.0),
            grad_norm_spike: Some(5.0),
            tokens_per_s_min: Some(40000.0),
            vram_max_gib: Some(70.0),
            stale_s: Some(600.0),
            window: 50,
            loss_slope_min_span: Some(100),
        }),
        schedule: Some(ScheduleConfig {
            kind: ScheduleKind::Cosine,
            peak_lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: 100,
            total_steps: Some(1100),
            decay_steps: None,
            decay_shape: DecayShape::Linear,
            tolerance: 0.02,
            step_slack: 2,
            ..Default::default()
        }),
        total_steps: None,
        quiet: vec![],
        settings: Settings {
            grad_nonfinite_consecutive: 3,
            eval_window: 3,
            band_samples: 5,
            min_samples: 5,
            loss_slope_confidence: Some(0.95),
            eval_margin: Some(0.02),
            eval_noise: Some(1.0),
        },
        window: samples
            .into_iter()
            .map(|(step, vals)| ObsSample {
                step,
                values: vals
                    .into_iter()
                    .map(|(k, v)| (k.to_string().into(), Num(v)))
                    .collect(),
            })
            .collect(),
        run_lr: Vec::new(),
        lr_resolution: None,
        evals: vec![],
        near_best: None,
        last_sample_at: Some(1_700_000_000.0),
        advanced_at: Some(1_700_000_000.0),
        gpu_vram: None,
        onsets: Default::default(),
        between: None,
        samples_total: 0,
        garbage_total: 0,
        rules: super::RULES,
        ranks: Vec::new(),
    }
}
