//! `roger bench`'s domain: GEMM results per dtype and size, their ratio to the GPU's dense
//! spec, the verdict, and the MFU arbiter (is the GPU slow, or the training code?). Pure;
//! the measuring lives in `cpu.rs` (matrixmultiply) and `cuda.rs` (cuBLAS in a child process).

pub mod cpu;
pub mod cuda;
pub mod gpu;
pub mod libs;
pub mod load;

use crate::gpu::checks::{Finding, Level};
use crate::gpu::spec::{Dtype, Spec};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One dtype at one size: TFLOPS from `iters` timed runs after warm-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmResult {
    pub dtype: Dtype,
    pub size: usize,
    pub iters: usize,
    pub best_tflops: f64,
    pub median_tflops: f64,
}

/// What one measuring run produced (the CUDA worker prints this as JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// "gpu" or "cpu".
    pub device: String,
    pub name: String,
    pub gemm: Vec<GemmResult>,
    /// Device-to-device copy bandwidth (read + write), GB/s.
    pub bandwidth_gbs: Option<f64>,
    /// Dtypes or steps that could not run, with why.
    pub errors: Vec<String>,
    /// The CUDA device's UUID ("GPU-..."), to find the same GPU in NVML.
    #[serde(default)]
    pub uuid: Option<String>,
}

/// The best a dtype reached over all sizes, against spec.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DtypeSummary {
    pub dtype: Dtype,
    pub best_tflops: f64,
    /// Median at the size that gave the best.
    pub median_tflops: f64,
    pub at_size: usize,
    pub spec_tflops: Option<f64>,
    pub ratio: Option<f64>,
}

/// Median of measured timings (NaN when there are none); the critic's robust median.
pub fn median(v: &[f64]) -> f64 {
    crate::critic::stats::median(v.iter().copied()).unwrap_or(f64::NAN)
}

/// TFLOPS of an n×n×n GEMM taking `secs`.
pub fn tflops(n: usize, secs: f64) -> f64 {
    2.0 * (n as f64).powi(3) / secs / 1e12
}

pub fn summarise(m: &Measured, spec: Option<&Spec>) -> Vec<DtypeSummary> {
    let mut out = Vec::new();
    for d in Dtype::ALL {
        let best = m
            .gemm
            .iter()
            .filter(|r| r.dtype == d)
            .max_by(|a, b| a.best_tflops.total_cmp(&b.best_tflops));
        if let Some(r) = best {
            let spec_tflops = spec.and_then(|s| s.peak(d));
            out.push(DtypeSummary {
                dtype: d,
                best_tflops: r.best_tflops,
                median_tflops: r.median_tflops,
                at_size: r.size,
                spec_tflops,
                ratio: spec_tflops.map(|p| r.best_tflops / p),
            });
        }
    }
    out
}

/// The bench verdict: the worst dtype's share of spec against `[bench] warn_ratio/fail_ratio`,
/// with the causes seen on the GPU (bad throttle reasons, power cap, other processes).
pub fn verdict(
    sums: &[DtypeSummary],
    warn_ratio: f64,
    fail_ratio: f64,
    causes: &[String],
) -> Vec<Finding> {
    let mut out = Vec::new();
    for s in sums {
        let Some(r) = s.ratio else { continue };
        let level = if r < fail_ratio {
            Level::Fail
        } else if r < warn_ratio {
            Level::Warn
        } else {
            Level::Ok
        };
        if level > Level::Ok {
            let why = if causes.is_empty() {
                "no cause visible from the driver (check clocks, PCIe/NVLink, driver version)"
                    .to_string()
            } else {
                causes.join("; ")
            };
            out.push(Finding::new(
                level,
                "gemm",
                format!("{} GEMM reached {:.1} TFLOPS = {:.0}% of the {:.1} TFLOPS spec (below {:.0}%): likely causes: {why}", s.dtype.as_str(), s.best_tflops, r * 100.0, s.spec_tflops.unwrap_or(0.0), if level == Level::Fail { fail_ratio } else { warn_ratio } * 100.0),
            ));
        }
    }
    out
}

/// `NVIDIA_TF32_OVERRIDE=0` makes cuBLAS run TF32 requests in full FP32: the tf32 row then
/// measures FP32 and must not be judged against the TF32 spec. Drops its ratio and says so.
pub fn tf32_override(sums: &mut [DtypeSummary], env_value: Option<&str>) -> Option<Finding> {
    if env_value.map(str::trim) != Some("0") {
        return None;
    }
    let s = sums.iter_mut().find(|s| s.dtype == Dtype::Tf32)?;
    s.spec_tflops = None;
    s.ratio = None;
    Some(Finding::new(
        Level::Info,
        "tf32",
        format!(
            "NVIDIA_TF32_OVERRIDE=0 is set: cuBLAS ran the tf32 GEMM in full fp32 ({:.1} TFLOPS), so it is not compared with the tf32 spec; unset it to measure tf32",
            s.best_tflops
        ),
    ))
}

/// Training FLOPs per token: 6N (forward + backward, PaLM appendix B) plus the attention
/// term 12·L·H·S when layers, hidden size and sequence length are known.
pub fn flops_per_token(params: f64, attn: Option<(u64, u64, u64)>) -> f64 {
    let attn = attn.map_or(0.0, |(l, h, s)| 12.0 * l as f64 * h as f64 * s as f64);
    6.0 * params + attn
}

/// Model FLOPs utilisation: tokens/s × FLOPs/token ÷ (peak × GPUs).
pub fn mfu(tokens_per_s: f64, flops_per_token: f64, peak_tflops: f64, gpus: u32) -> f64 {
    tokens_per_s * flops_per_token / (peak_tflops * 1e12 * gpus.max(1) as f64)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Arbitration {
    pub dtype: Dtype,
    pub tokens_per_s: f64,
    pub flops_per_token: f64,
    /// Achieved training TFLOPS per GPU.
    pub train_tflops_per_gpu: f64,
    pub mfu: Option<f64>,
    pub measured_tflops: f64,
    /// Training TFLOPS per GPU ÷ measured GEMM TFLOPS.
    pub share_of_measured: f64,
    pub gemm_ratio: Option<f64>,
    /// "gpu", "code", or "neither".
    pub slow_side: String,
    pub explanation: String,
}

/// The rule: GEMM well below spec with bad throttle flags → the GPU; GEMM normal but the
/// training's FLOPs far below the measured GEMM → the code or the input pipeline.
pub const RULE: &str = "GEMM well below spec (with bad throttle flags) → the GPU is slow; GEMM normal but training FLOPs far below the measured GEMM → the code or the input pipeline";

#[allow(clippy::too_many_arguments)]
pub fn arbitrate(
    dtype: Dtype,
    tokens_per_s: f64,
    fpt: f64,
    gpus: u32,
    measured_tflops: f64,
    spec_tflops: Option<f64>,
    warn_ratio: f64,
    slow_code_share: f64,
    bad_throttle: &[String],
) -> Arbitration {
    let train = tokens_per_s * fpt / gpus.max(1) as f64 / 1e12;
    let gemm_ratio = spec_tflops.map(|p| measured_tflops / p);
    let share = train / measured_tflops;
    let (side, why) = if gemm_ratio.is_some_and(|r| r < warn_ratio) {
        let t = if bad_throttle.is_empty() {
            "no bad throttle flag seen".to_string()
        } else {
            format!("throttling: {}", bad_throttle.join(", "))
        };
        (
            "gpu",
            format!(
                "the GPU: its GEMM reaches only {:.0}% of spec ({t})",
                gemm_ratio.unwrap_or(0.0) * 100.0
            ),
        )
    } else if share < slow_code_share {
        ("code", format!("the code or the input pipeline: the GPU does {measured_tflops:.1} TFLOPS on GEMM but training uses {train:.1} ({:.0}%, below {:.0}%)", share * 100.0, slow_code_share * 100.0))
    } else {
        (
            "neither",
            format!(
                "neither stands out: training uses {:.0}% of the measured GEMM",
                share * 100.0
            ),
        )
    };
    Arbitration {
        dtype,
        tokens_per_s,
        flops_per_token: fpt,
        train_tflops_per_gpu: train,
        mfu: spec_tflops.map(|p| mfu(tokens_per_s, fpt, p, gpus)),
        measured_tflops,
        share_of_measured: share,
        gemm_ratio,
        slow_side: side.into(),
        explanation: why,
    }
}

/// The run's throughput from its own metrics log (any format the critic reads): the median
/// of the last 20 finite, positive tokens/s values.
pub fn run_tokens_per_s(cfg: &crate::config::Config, log: &Path) -> Result<Option<f64>> {
    let read = crate::metrics::read_all(log, cfg.run.format, &cfg.metrics)?;
    let mut v: Vec<f64> = read
        .samples
        .iter()
        .filter_map(|s| s.values.get("tokens_per_s").copied())
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    let n = v.len();
    if n == 0 {
        return Ok(None);
    }
    let last = v.split_off(n.saturating_sub(20));
    Ok(Some(median(&last)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::spec::lookup;

    fn r(d: Dtype, size: usize, best: f64) -> GemmResult {
        GemmResult {
            dtype: d,
            size,
            iters: 10,
            best_tflops: best,
            median_tflops: best * 0.98,
        }
    }

    #[test]
    fn summary_takes_best_size_and_ratio() {
        let m = Measured {
            device: "gpu".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            gemm: vec![
                r(Dtype::Bf16, 4096, 650.0),
                r(Dtype::Bf16, 8192, 742.0),
                r(Dtype::Fp32, 8192, 50.0),
            ],
            ..Default::default()
        };
        let s = summarise(&m, lookup(&m.name));
        assert_eq!(s[0].dtype, Dtype::Fp32);
        let bf = &s[1];
        assert_eq!((bf.at_size, bf.best_tflops), (8192, 742.0));
        assert!((bf.ratio.unwrap() - 0.75).abs() < 0.01);
        assert!(verdict(&s, 0.6, 0.35, &[]).is_empty());
        let slow = summarise(
            &Measured {
                gemm: vec![r(Dtype::Bf16, 8192, 300.0)],
                ..m.clone()
            },
            lookup(&m.name),
        );
        let v = verdict(&slow, 0.6, 0.35, &["hw_thermal_slowdown on GPU 0".into()]);
        assert_eq!(v[0].level, Level::Fail);
        assert!(v[0].message.contains("hw_thermal_slowdown"));
        assert!(summarise(&m, None)[0].ratio.is_none());
    }

    #[test]
    fn tf32_override_is_reported_not_failed() {
        let m = Measured {
            device: "gpu".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            gemm: vec![r(Dtype::Tf32, 8192, 50.0), r(Dtype::Bf16, 8192, 742.0)],
            ..Default::default()
        };
        let mut s = summarise(&m, lookup(&m.name));
        // Without the override the fp32-speed tf32 row fails (the old behaviour).
        assert_eq!(verdict(&s, 0.6, 0.35, &[])[0].level, Level::Fail);
        assert!(tf32_override(&mut s, Some("1")).is_none());
        let f = tf32_override(&mut s, Some("0")).unwrap();
        assert!(f.message.contains("NVIDIA_TF32_OVERRIDE=0") && f.message.contains("50.0"));
        assert!(verdict(&s, 0.6, 0.35, &[]).is_empty());
        assert!(s[1].ratio.is_some());
    }

    #[test]
    fn mfu_matches_palm() {
        // 124M params, 1024 seq, 12 layers, 768 hidden: 6N + 12LHS.
        let fpt = flops_per_token(124e6, Some((12, 768, 1024)));
        assert_eq!(fpt, 6.0 * 124e6 + 12.0 * 12.0 * 768.0 * 1024.0);
        assert_eq!(flops_per_token(1e9, None), 6e9);
        // 100k tokens/s × 6e9 FLOPs = 600 TFLOPS over 2 GPUs of 1000 peak = 30%.
        assert!((mfu(100_000.0, 6e9, 1000.0, 2) - 0.3).abs() < 1e-12);
        assert_eq!(tflops(1000, 2e-3), 1.0);
    }

    #[test]
    fn arbiter_sides() {
        let gpu = arbitrate(
            Dtype::Bf16,
            1e5,
            6e9,
            1,
            300.0,
            Some(989.4),
            0.6,
            0.3,
            &["hw_slowdown".into()],
        );
        assert_eq!(gpu.slow_side, "gpu");
        assert!(gpu.explanation.contains("hw_slowdown"));
        let code = arbitrate(Dtype::Bf16, 1e4, 6e9, 1, 750.0, Some(989.4), 0.6, 0.3, &[]);
        assert_eq!(code.slow_side, "code");
        assert!((code.train_tflops_per_gpu - 60.0).abs() < 1e-9);
        let fine = arbitrate(Dtype::Bf16, 6e4, 6e9, 1, 750.0, Some(989.4), 0.6, 0.3, &[]);
        assert_eq!(fine.slow_side, "neither");
        assert!((fine.mfu.unwrap() - 360.0 / 989.4).abs() < 1e-9);
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn tokens_per_s_is_the_median_of_the_last_values_in_any_log_format() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        let mut text = String::new();
        for i in 0..30 {
            text.push_str(&format!(
                "{{\"step\": {i}, \"perf\": {{\"tps\": {}}}}}\n",
                if i < 10 { 1.0 } else { 1000.0 + i as f64 }
            ));
        }
        text.push_str("{\"step\": 31, \"perf\": {\"tps\": NaN}}\nnot json\n");
        std::fs::write(&p, text).unwrap();
        let cfg_path = dir.path().join("roger.toml");
        std::fs::write(
            &cfg_path,
            "[run]\nname = \"r\"\nlog = \"log.jsonl\"\n[metrics]\ntokens_per_s = \"perf/tps\"\n",
        )
        .unwrap();
        let cfg = crate::config::Config::load(&cfg_path).unwrap();
        assert_eq!(run_tokens_per_s(&cfg, &p).unwrap(), Some(1019.5));
        let csv = dir.path().join("m.csv");
        std::fs::write(&csv, "step,perf/tps\n1,10\n2,\n3,30\n").unwrap();
        let mut cfg_csv = cfg.clone();
        cfg_csv.run.format = crate::config::LogFormat::Csv;
        assert_eq!(run_tokens_per_s(&cfg_csv, &csv).unwrap(), Some(20.0));
        assert!(run_tokens_per_s(&cfg, &dir.path().join("none")).is_err());
    }
}
