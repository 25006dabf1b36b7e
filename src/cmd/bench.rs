//! `roger bench`: measure GEMM TFLOPS (cuBLAS on a GPU, matrixmultiply on a CPU) and device
//! bandwidth, compare with the GPU's spec, and arbitrate MFU: is the GPU slow, or the code?

use crate::bench::load::{self, Load};
use crate::bench::{self, libs, Arbitration, DtypeSummary, Measured};
use crate::cmd::Global;
use crate::gpu::checks::{self, Finding, Level};
use crate::gpu::spec::{self, Dtype};
use crate::ledger::{Entry, Kind, Ledger};
use crate::outln;
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// A GPU when the CUDA driver loads, else the CPU.
    Auto,
    Gpu,
    Cpu,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Where to measure: auto (the GPU when a driver is present, else the CPU, said loudly
    /// and judged unknown), gpu, cpu.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    pub device: Device,
    /// Square sizes (default: [bench] sizes on a GPU; 128,256,512 on a CPU).
    #[arg(long, value_delimiter = ',', value_parser = positive_usize)]
    pub sizes: Vec<usize>,
    /// Timed runs per size (default: [bench] iters on a GPU; 3 on a CPU).
    #[arg(long, value_parser = positive_usize)]
    pub iters: Option<usize>,
    /// Dtypes on a GPU.
    #[arg(long, value_delimiter = ',', default_value = "fp32,tf32,fp16,bf16", value_parser = parse_dtype)]
    pub dtypes: Vec<Dtype>,
    /// GPU index.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    /// Model parameter count for MFU (default: [bench] params).
    #[arg(long, value_parser = positive_f64)]
    pub params: Option<f64>,
    /// The run's throughput (default: the median of the last 20 values in the run's log).
    #[arg(long, value_parser = positive_f64)]
    pub tokens_per_s: Option<f64>,
    /// GPUs the run uses (default: [bench] gpus).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus: Option<u32>,
    /// Limit for the GPU worker.
    #[arg(long, default_value = "10m", value_parser = crate::config::units::parse_duration)]
    pub timeout: Duration,
    /// The measurements and verdict as JSON.
    #[arg(long)]
    pub json: bool,
    /// Do not write the result to the ledger.
    #[arg(long)]
    pub no_ledger: bool,
    /// Internal: run the CUDA measurement in this process and print JSON.
    #[arg(long, hide = true)]
    pub worker: bool,
}

fn positive_usize(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("expected a whole number >= 1, got {s:?}")),
    }
}

fn positive_f64(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "expected a finite number > 0 (e.g. 124e6), got {s:?}"
        )),
    }
}

fn parse_dtype(s: &str) -> Result<Dtype, String> {
    Dtype::parse(s).ok_or_else(|| format!("unknown dtype {s:?}: expected fp32, tf32, fp16 or bf16"))
}

#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub measured: Measured,
    /// Where cuBLAS was loaded from, when it was not on the loader's path.
    pub cublas: Option<String>,
    /// Why the GPU bench could not run at all (the status is then "unknown").
    pub gpu_error: Option<String>,
    /// The reader that sampled the GPU during the run ("NVML (libnvidia-ml.so.1 ...)").
    pub gpu_reader: Option<String>,
    /// The GPU while the worker ran, sampled by the parent.
    pub load: Option<Load>,
    pub spec_model: Option<String>,
    /// Why there is no spec to compare with (MIG, laptop, variant, not in the table).
    pub spec_note: Option<String>,
    pub summaries: Vec<DtypeSummary>,
    pub bandwidth_spec_gbs: Option<f64>,
    pub bandwidth_ratio: Option<f64>,
    pub gpu_state: Vec<String>,
    pub arbitration: Option<Arbitration>,
    pub rule: &'static str,
    pub findings: Vec<Finding>,
    pub status: String,
    pub exit_code: u8,
}

pub fn run(global: &Global, args: BenchArgs) -> Result<u8> {
    let cfg = crate::config::discover(global.config.as_deref())?;
    let bc = cfg.as_ref().map(|c| c.bench.clone()).unwrap_or_default();
    if args.worker {
        let sizes = if args.sizes.is_empty() {
            bc.sizes.clone()
        } else {
            args.sizes.clone()
        };
        bench::cuda::quiet_panics();
        bench::cuda::load_libraries()?;
        let bw = 1usize << 30;
        let m = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            bench::cuda::run_worker(
                args.gpu,
                &args.dtypes,
                &sizes,
                args.iters.unwrap_or(bc.iters),
                bw,
            )
        }))
        .map_err(|p| {
            anyhow::anyhow!(
                "the CUDA bench panicked: {}",
                bench::cuda::panic_text(p.as_ref())
            )
        })??;
        outln!("{}", serde_json::to_string(&m)?);
        return Ok(crate::exit::OK);
    }
    let use_gpu = match args.device {
        Device::Cpu => false,
        Device::Gpu => true,
        Device::Auto => libs::driver_present(),
    };
    let mut findings = Vec::new();
    // Auto mode on a machine expected to have a GPU but without a driver measured the CPU:
    // say so loudly, and never call that "ok" for the GPU.
    let cpu_instead = args.device == Device::Auto
        && !use_gpu
        && cfg.as_ref().is_none_or(|c| c.gpu.source != "none");
    if cpu_instead {
        let words = "no NVIDIA driver (libcuda.so could not be loaded): measured the CPU, not a GPU; the GPU is not judged (--device cpu, or [gpu] source = \"none\", for a CPU-only machine)";
        crate::warnln!("{words}");
        findings.push(Finding::new(Level::Info, "device", words));
    }
    let mut cublas = None;
    let mut gpu_state = Vec::new();
    let mut bad_throttle = Vec::new();
    let mut causes = Vec::new();
    let mut gpu_error = None;
    let mut gpu_reader = None;
    let mut load = None;
    let measured = if use_gpu {
        let gpu_cfg = cfg.as_ref().map(|c| c.gpu.clone()).unwrap_or_default();
        let job = bench::gpu::Job {
            gpu: args.gpu,
            sizes: if args.sizes.is_empty() {
                bc.sizes.clone()
            } else {
                args.sizes.clone()
            },
            iters: args.iters.unwrap_or(bc.iters),
            dtypes: args.dtypes.clone(),
            timeout: args.timeout,
        };
        match bench::gpu::run(&job, &gpu_cfg) {
            Ok(run) => {
                cublas = run.cublas;
                gpu_reader = run.reader;
                if let Some(l) = &run.load {
                    let (bad, why, state) = load::causes(l);
                    bad_throttle = bad;
                    causes = why;
                    gpu_state = state;
                }
                if let Some(note) = run.load_note {
                    findings.push(Finding::new(Level::Info, "telemetry", note));
                }
                load = run.load;
                run.measured
            }
            Err(why) => {
                eprintln!("roger: bench: unknown: {why}");
                findings.push(Finding::new(Level::Info, "bench", why.clone()));
                gpu_error = Some(why);
                Measured {
                    device: "gpu".into(),
                    name: "unknown GPU".into(),
                    ..Default::default()
                }
            }
        }
    } else {
        let sizes = if args.sizes.is_empty() {
            vec![128, 256, 512]
        } else {
            args.sizes.clone()
        };
        bench::cpu::run(&sizes, args.iters.unwrap_or(3))
    };
    for e in &measured.errors {
        findings.push(Finding::new(Level::Info, "bench", e.clone()));
    }
    let (spec, spec_note) = if measured.device == "gpu" && gpu_error.is_none() {
        match spec::match_spec(&measured.name) {
            Ok(s) => (Some(s), None),
            Err(why) => (None, Some(why)),
        }
    } else {
        (None, None)
    };
    let mut summaries = bench::summarise(&measured, spec);
    if measured.device == "gpu" {
        let tf32_env = std::env::var("NVIDIA_TF32_OVERRIDE").ok();
        findings.extend(bench::tf32_override(&mut summaries, tf32_env.as_deref()));
    }
    findings.extend(bench::verdict(
        &summaries,
        bc.warn_ratio,
        bc.fail_ratio,
        &causes,
    ));
    let bandwidth_spec_gbs = spec.map(|s| s.mem_bw);
    let bandwidth_ratio = measured
        .bandwidth_gbs
        .zip(bandwidth_spec_gbs)
        .map(|(m, s)| m / s);
    let arbitration = if measured.device == "gpu" {
        arbitrate(
            &args,
            cfg.as_ref(),
            &bc,
            &summaries,
            &bad_throttle,
            &mut findings,
        )?
    } else {
        if args.params.or(bc.params).is_some() {
            findings.push(Finding::new(
                Level::Info,
                "mfu",
                "MFU arbitration needs a GPU bench: a CPU GEMM says nothing about the training GPU",
            ));
        }
        None
    };
    if let Some(why) = &spec_note {
        findings.push(Finding::new(Level::Info, "spec", why.clone()));
    }
    let unknown_gpu = measured.device == "gpu" && spec.is_none();
    let (status, code) = match checks::worst(&findings) {
        Level::Fail => ("fail", crate::exit::FAIL),
        Level::Warn => ("warn", crate::exit::WARN),
        _ if unknown_gpu || cpu_instead || summaries.is_empty() => {
            ("unknown", crate::exit::UNKNOWN)
        }
        _ => ("ok", crate::exit::OK),
    };
    let report = BenchReport {
        measured,
        cublas,
        gpu_error,
        gpu_reader,
        load,
        spec_model: spec.map(|s| s.model.to_string()),
        spec_note,
        summaries,
        bandwidth_spec_gbs,
        bandwidth_ratio,
        gpu_state,
        arbitration,
        rule: bench::RULE,
        findings,
        status: status.into(),
        exit_code: code,
    };
    if let (Some(c), false) = (&cfg, args.no_ledger) {
        let ledger = Ledger::new(c.ledger_path());
        let e = Entry::new(Kind::Bench, "bench", &c.run.name)
            .field("status", &report.status)
            .field("device", &report.measured.device)
            .field("name", &report.measured.name)
            .field("summaries", &report.summaries)
            .field("bandwidth_gbs", report.measured.bandwidth_gbs)
            .field("gpu_error", &report.gpu_error)
            .field("load", &report.load)
            .field("arbitration", &report.arbitration);
        ledger.append(e, chrono::Utc::now()).with_context(|| {
            format!(
                "writing the bench to the ledger {}",
                ledger.path().display()
            )
        })?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_human(&report);
    }
    Ok(report.exit_code)
}

fn arbitrate(
    args: &BenchArgs,
    cfg: Option<&crate::config::Config>,
    bc: &crate::config::BenchConfig,
    sums: &[DtypeSummary],
    bad: &[String],
    findings: &mut Vec<Finding>,
) -> Result<Option<Arbitration>> {
    let Some(params) = args.params.or(bc.params) else {
        return Ok(None);
    };
    let tps = match args.tokens_per_s {
        Some(t) => Some(t),
        None => match cfg.and_then(|c| c.run.log.clone().map(|l| (c, l))) {
            Some((c, log)) if log.exists() => bench::run_tokens_per_s(c, &log)?,
            _ => None,
        },
    };
    let Some(tps) = tps else {
        findings.push(Finding::new(Level::Info, "mfu", "no tokens/s: pass --tokens-per-s or point [run] log at a metrics log with the [metrics] tokens_per_s key"));
        return Ok(None);
    };
    let dtype = Dtype::parse(&bc.dtype).unwrap_or(Dtype::Bf16);
    let Some(s) = sums.iter().find(|s| s.dtype == dtype).or_else(|| {
        sums.iter()
            .max_by(|a, b| a.best_tflops.total_cmp(&b.best_tflops))
    }) else {
        return Ok(None);
    };
    let attn = match (bc.layers, bc.hidden, bc.seq_len) {
        (Some(l), Some(h), Some(q)) => Some((l, h, q)),
        _ => None,
    };
    let fpt = bench::flops_per_token(params, attn);
    let a = bench::arbitrate(
        s.dtype,
        tps,
        fpt,
        args.gpus.unwrap_or(bc.gpus),
        s.best_tflops,
        s.spec_tflops,
        bc.warn_ratio,
        bc.slow_code_share,
        bad,
    );
    if a.slow_side == "code" {
        findings.push(Finding::new(Level::Warn, "mfu", a.explanation.clone()));
    }
    Ok(Some(a))
}

fn print_human(r: &BenchReport) {
    let m = &r.measured;
    let unit = if m.device == "cpu" {
        ("GFLOPS", 1e3)
    } else {
        ("TFLOPS", 1.0)
    };
    outln!(
        "{} ({})",
        m.name,
        if m.device == "cpu" {
            "CPU fallback: no NVIDIA GPU used"
        } else {
            "GPU"
        }
    );
    if let Some(c) = &r.cublas {
        outln!("cuBLAS: {c}");
    }
    if let Some(e) = &r.gpu_error {
        outln!("GPU bench could not run: {e}");
        outln!("bench: {}", r.status);
        return;
    }
    if let Some(g) = &r.gpu_reader {
        outln!("GPU telemetry: {g}");
    }
    outln!(
        "{:<6} {:>6} {:>11} {:>11} {:>9} {:>7}",
        "dtype",
        "size",
        format!("best {}", unit.0),
        "median",
        "spec",
        "ratio"
    );
    for g in &m.gemm {
        outln!(
            "{:<6} {:>6} {:>11.1} {:>11.1}",
            g.dtype.as_str(),
            g.size,
            g.best_tflops * unit.1,
            g.median_tflops * unit.1
        );
    }
    outln!("best per dtype:");
    for s in &r.summaries {
        let spec = s.spec_tflops.map_or("n/a".into(), |v| format!("{v:.1}"));
        let ratio = s
            .ratio
            .map_or("n/a".into(), |v| format!("{:.0}%", v * 100.0));
        outln!(
            "{:<6} {:>6} {:>11.1} {:>11.1} {:>9} {:>7}  (best size)",
            s.dtype.as_str(),
            s.at_size,
            s.best_tflops * unit.1,
            s.median_tflops * unit.1,
            spec,
            ratio
        );
    }
    if let Some(b) = m.bandwidth_gbs {
        let vs = match (r.bandwidth_spec_gbs, r.bandwidth_ratio) {
            (Some(s), Some(q)) => format!(" of {s:.0} GB/s spec ({:.0}%)", q * 100.0),
            _ => String::new(),
        };
        outln!("device memory bandwidth: {b:.0} GB/s{vs}");
    }
    if !r.gpu_state.is_empty() {
        outln!("GPU state: {}", r.gpu_state.join("; "));
    }
    if let Some(a) = &r.arbitration {
        outln!("MFU: {} tokens/s × {:.3e} FLOPs/token = {:.1} TFLOPS per GPU; MFU {}; {:.0}% of the measured {} GEMM ({:.1} TFLOPS)", a.tokens_per_s, a.flops_per_token, a.train_tflops_per_gpu, a.mfu.map_or("n/a (no spec)".into(), |m| format!("{:.1}%", m * 100.0)), a.share_of_measured * 100.0, a.dtype.as_str(), a.measured_tflops);
        outln!("slow side: {}", a.explanation);
        outln!("rule: {}", r.rule);
    }
    for f in r.findings.iter().filter(|f| f.level > Level::Ok) {
        outln!("{:<5} {}: {}", f.level.as_str(), f.check, f.message);
    }
    outln!(
        "bench: {}",
        crate::colour::status(&r.status, crate::colour::stdout())
    );
}
