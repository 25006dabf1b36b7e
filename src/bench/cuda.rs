//! The cuBLAS GEMM and bandwidth measurement. It runs in a child process (`roger bench
//! --worker`): cudarc panics when a library or symbol is missing; the worker binds both
//! libraries first under `catch_unwind` and turns such a panic into one line naming the
//! library and the symbol, which the parent reports as "unknown" with that reason. fp32 via Sgemm (default math, no
//! TF32), tf32 via GemmEx with CUBLAS_COMPUTE_32F_FAST_TF32, fp16/bf16 via GemmEx with FP32
//! accumulate. Inputs are random; each size is warmed up, then each run is timed with CUDA
//! events created with timing enabled.

use super::{median, tflops, GemmResult, Measured};
use crate::gpu::spec::Dtype;
use anyhow::{anyhow, Context, Result};
use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::{sys as drv, CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use std::ffi::c_void;
use std::sync::Arc;

/// Host bytes of `n` random elements of `d` in (-1, 1).
fn random_bytes(d: Dtype, n: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = Vec::with_capacity(n * d.size());
    for _ in 0..n {
        let v = rng.f32() * 2.0 - 1.0;
        match d {
            Dtype::Fp32 | Dtype::Tf32 => out.extend_from_slice(&v.to_le_bytes()),
            Dtype::Bf16 => out.extend_from_slice(&((v.to_bits() >> 16) as u16).to_le_bytes()),
            Dtype::Fp16 => {
                // sign | exponent 10..=14 (magnitudes 2^-5 .. <1) | random mantissa.
                let bits = ((rng.u16(0..2)) << 15) | (rng.u16(10..15) << 10) | rng.u16(0..1024);
                out.extend_from_slice(&bits.to_le_bytes());
            }
        }
    }
    out
}

struct Bufs {
    a: CudaSlice<u8>,
    b: CudaSlice<u8>,
    c: CudaSlice<u8>,
}

fn gemm(
    blas_h: &CudaBlas,
    stream: &Arc<CudaStream>,
    d: Dtype,
    n: usize,
    bufs: &mut Bufs,
) -> Result<()> {
    let n_i = n as i32;
    let (a, _ra) = bufs.a.device_ptr(stream);
    let (b, _rb) = bufs.b.device_ptr(stream);
    let (c, _rc) = bufs.c.device_ptr_mut(stream);
    let alpha = 1f32;
    let beta = 0f32;
    let op = blas_sys::cublasOperation_t::CUBLAS_OP_N;
    // SAFETY: a, b, c are live device buffers of n*n elements of `d`; alpha/beta are host f32.
    unsafe {
        match d {
            Dtype::Fp32 => blas::sgemm(
                *blas_h.handle(),
                op,
                op,
                n_i,
                n_i,
                n_i,
                &alpha,
                a as *const f32,
                n_i,
                b as *const f32,
                n_i,
                &beta,
                c as *mut f32,
                n_i,
            ),
            _ => {
                let (ty, compute) = match d {
                    Dtype::Tf32 => (
                        blas_sys::cudaDataType::CUDA_R_32F,
                        blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
                    ),
                    Dtype::Fp16 => (
                        blas_sys::cudaDataType::CUDA_R_16F,
                        blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    ),
                    _ => (
                        blas_sys::cudaDataType::CUDA_R_16BF,
                        blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    ),
                };
                blas::gemm_ex(
                    *blas_h.handle(),
                    op,
                    op,
                    n_i,
                    n_i,
                    n_i,
                    &alpha as *const f32 as *const c_void,
                    a as *const c_void,
                    ty,
                    n_i,
                    b as *const c_void,
                    ty,
                    n_i,
                    &beta as *const f32 as *const c_void,
                    c as *mut c_void,
                    ty,
                    n_i,
                    compute,
                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
        }
    }
    .map_err(|e| anyhow!("cuBLAS {} GEMM at {n}: {e:?}", d.as_str()))
}

/// GEMMs per timed batch: at small sizes one GEMM is microseconds and the launch and event
/// overhead would be most of the time, so a batch of about an 8192³ GEMM's work is timed
/// between one event pair (1 at 8192, 8 at 4096, 64 at 2048, 256 at 1024 and below).
pub fn batch_for(n: usize) -> usize {
    let ratio = (8192.0 / n.max(1) as f64).powi(3);
    (ratio.ceil() as usize).clamp(1, 256)
}

fn timed(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let timing = Some(drv::CUevent_flags::CU_EVENT_DEFAULT);
    let start = ctx.new_event(timing)?;
    let end = ctx.new_event(timing)?;
    start.record(stream)?;
    f()?;
    end.record(stream)?;
    Ok(start.elapsed_ms(&end)? as f64 / 1000.0)
}

fn measure_dtype(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    blas_h: &CudaBlas,
    d: Dtype,
    sizes: &[usize],
    iters: usize,
    out: &mut Measured,
) {
    for &n in sizes {
        let r = (|| -> Result<GemmResult> {
            let bytes = n * n * d.size();
            let mut bufs = Bufs {
                a: stream.memcpy_stod(&random_bytes(d, n * n, 1))?,
                b: stream.memcpy_stod(&random_bytes(d, n * n, 2))?,
                c: stream.alloc_zeros::<u8>(bytes)?,
            };
            for _ in 0..3 {
                gemm(blas_h, stream, d, n, &mut bufs)?;
            }
            stream.synchronize()?;
            let batch = batch_for(n);
            let mut t = Vec::with_capacity(iters);
            for _ in 0..iters.max(1) {
                let secs = timed(ctx, stream, || {
                    for _ in 0..batch {
                        gemm(blas_h, stream, d, n, &mut bufs)?;
                    }
                    Ok(())
                })?;
                t.push(tflops(n, secs.max(1e-9) / batch as f64));
            }
            let best = t.iter().cloned().fold(0.0, f64::max);
            Ok(GemmResult {
                dtype: d,
                size: n,
                iters: t.len(),
                best_tflops: best,
                median_tflops: median(&t),
            })
        })();
        match r {
            Ok(g) => out.gemm.push(g),
            Err(e) => {
                out.errors.push(format!("{} at {n}: {e:#}", d.as_str()));
                return;
            }
        }
    }
}

/// Device-to-device copy bandwidth (bytes read + written) over a buffer of `bytes`.
fn bandwidth(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    bytes: usize,
    iters: usize,
) -> Result<f64> {
    let src = stream.alloc_zeros::<u8>(bytes)?;
    let mut dst = stream.alloc_zeros::<u8>(bytes)?;
    stream.memcpy_dtod(&src, &mut dst)?;
    stream.synchronize()?;
    let mut best = 0f64;
    for _ in 0..iters.max(1) {
        let secs = timed(ctx, stream, || Ok(stream.memcpy_dtod(&src, &mut dst)?))?;
        best = best.max(2.0 * bytes as f64 / secs.max(1e-9) / 1e9);
    }
    Ok(best)
}

/// The worker's whole job: GPU `ordinal`, the dtypes at the sizes, then bandwidth.
pub fn run_worker(
    ordinal: usize,
    dtypes: &[Dtype],
    sizes: &[usize],
    iters: usize,
    bw_bytes: usize,
) -> Result<Measured> {
    let ctx = CudaContext::new(ordinal).context("CUDA context")?;
    let stream = ctx.default_stream();
    let blas_h = CudaBlas::new(stream.clone()).map_err(|e| anyhow!("cuBLAS init: {e:?}"))?;
    let mut out = Measured {
        device: "gpu".into(),
        name: ctx.name().unwrap_or_else(|_| "unknown GPU".into()),
        uuid: ctx.uuid().ok().map(|u| uuid_string(&u.bytes)),
        ..Default::default()
    };
    for &d in dtypes {
        measure_dtype(&ctx, &stream, &blas_h, d, sizes, iters, &mut out);
    }
    match bandwidth(&ctx, &stream, bw_bytes, iters) {
        Ok(b) => out.bandwidth_gbs = Some(b),
        Err(e) => out.errors.push(format!("bandwidth: {e:#}")),
    }
    Ok(out)
}

/// A CUDA UUID as NVML prints it: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
pub fn uuid_string(bytes: &[std::ffi::c_char; 16]) -> String {
    let h: Vec<String> = bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// The text of a panic payload (`panic!`/`expect` messages are `&str` or `String`).
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// A cudarc load panic in words: which file lacks which symbol, or which library is absent.
pub fn explain_load_panic(msg: &str) -> String {
    let re = regex::Regex::new(r"([^\s\x22]+): undefined symbol: (\w+)").expect("valid regex");
    if let Some(c) = re.captures(msg) {
        return format!(
            "{} lacks {}: roger's CUDA bench binds the CUDA 12.0 API, so the CUDA driver and cuBLAS must be from CUDA 12.0 or newer (this one is older or incomplete)",
            &c[1], &c[2]
        );
    }
    if msg.contains("Unable to dynamically load") {
        return format!("a CUDA library could not be loaded: {msg}");
    }
    format!("loading the CUDA libraries failed: {msg}")
}

/// Bind every symbol of the CUDA driver and cuBLAS now, so a missing library or symbol is an
/// error with a reason instead of a panic in the middle of the measurement.
pub fn load_libraries() -> Result<()> {
    // SAFETY: culib() only dlopens and resolves symbols; it panics (caught here) when one is
    // missing and leaves its OnceLock empty.
    std::panic::catch_unwind(|| unsafe {
        cudarc::driver::sys::culib();
        cudarc::cublas::sys::culib();
    })
    .map_err(|p| anyhow!(explain_load_panic(&panic_text(p.as_ref()))))
}

/// In the worker: a panic prints one line (where and what), never backtrace frames, so the
/// parent's tail of stderr holds the message.
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map_or(String::new(), |l| format!(" at {}:{}", l.file(), l.line()));
        eprintln!(
            "roger bench worker: panic{at}: {}",
            panic_text(info.payload()).replace('\n', " ")
        );
    }));
}

/// The reason a failed worker gives: its `roger: error:` line, else its last stderr lines.
pub fn worker_failure(code: Option<i32>, stderr: &str) -> String {
    if let Some(l) = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("roger: error: "))
    {
        return l.trim_start_matches("roger: error: ").to_string();
    }
    let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    format!(
        "the CUDA bench worker failed (exit {}): {}",
        code.map_or("by signal".into(), |c| c.to_string()),
        if tail.is_empty() {
            "no message".to_string()
        } else {
            tail.join(" | ")
        }
    )
}

/// Run the measurement in a child `roger bench --worker` (with `ld` put first on its
/// LD_LIBRARY_PATH), bounded by `timeout`; a panic or missing library there is an error here.
pub fn run_in_child(
    gpu: usize,
    sizes: &[usize],
    iters: usize,
    dtypes: &[Dtype],
    timeout: std::time::Duration,
    ld: Option<&std::path::Path>,
    on_spawn: impl FnOnce(u32),
) -> Result<Measured> {
    let exe = std::env::current_exe().context("finding roger's own executable")?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args([
        "bench",
        "--worker",
        "--no-ledger",
        "--gpu",
        &gpu.to_string(),
    ])
    .arg(format!(
        "--sizes={}",
        sizes
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",")
    ))
    .arg(format!("--iters={iters}"))
    .arg(format!(
        "--dtypes={}",
        dtypes
            .iter()
            .map(|d| d.as_str())
            .collect::<Vec<_>>()
            .join(",")
    ));
    if let Some(dir) = ld {
        cmd.env("LD_LIBRARY_PATH", super::libs::library_path_with(dir));
    }
    // Backtrace frames would push the message out of the tail the parent reports.
    cmd.env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    let o = crate::sys::bounded::run_command_observed(cmd, timeout, on_spawn)?;
    if !o.success() {
        anyhow::bail!("{}", worker_failure(o.code, &o.stderr));
    }
    let line = o.stdout.lines().last().unwrap_or("");
    serde_json::from_str(line).map_err(|e| {
        anyhow!(
            "the CUDA bench worker printed no result ({e}): {}",
            o.stdout.trim()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_gemms_are_timed_in_batches() {
        assert_eq!(batch_for(8192), 1);
        assert_eq!(batch_for(4096), 8);
        assert_eq!(batch_for(2048), 64);
        assert_eq!(batch_for(1024), 256);
        assert_eq!(batch_for(64), 256);
        assert_eq!(batch_for(16384), 1);
        assert_eq!(batch_for(6000), 3);
    }

    #[test]
    fn uuid_reads_as_nvml_writes_it() {
        let b: [std::ffi::c_char; 16] = [
            0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xff,
        ]
        .map(|x: u8| x as _);
        assert_eq!(uuid_string(&b), "GPU-deadbeef-0001-0203-0405-060708090aff");
    }

    #[test]
    fn load_panics_and_worker_failures_are_explained() {
        let msg = r#"Expected symbol in library: DlSym { desc: "/tmp/x/libcuda.so.1: undefined symbol: cuMemcpyDtoD_v2" }"#;
        let e = explain_load_panic(msg);
        assert!(
            e.starts_with("/tmp/x/libcuda.so.1 lacks cuMemcpyDtoD_v2"),
            "{e}"
        );
        assert!(e.contains("CUDA 12.0 or newer"), "{e}");
        assert!(
            explain_load_panic("Unable to dynamically load the \"cublas\" shared library")
                .contains("could not be loaded")
        );
        let stderr = "roger bench worker: panic at x.rs:1: boom\nroger: error: CUDA context: DriverError(CUDA_ERROR_UNKNOWN)\n";
        assert_eq!(
            worker_failure(Some(3), stderr),
            "CUDA context: DriverError(CUDA_ERROR_UNKNOWN)"
        );
        let w = worker_failure(None, "a\nb\n");
        assert!(w.contains("by signal") && w.contains("a | b"), "{w}");
        let payload: Box<dyn std::any::Any + Send> = Box::new("static");
        assert_eq!(panic_text(payload.as_ref()), "static");
    }

    #[test]
    fn random_inputs_are_nonzero_and_in_range() {
        let f = random_bytes(Dtype::Fp32, 100, 1);
        assert_eq!(f.len(), 400);
        let v: Vec<f32> = f
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)) && v.iter().any(|x| *x != 0.0));
        let bf = random_bytes(Dtype::Bf16, 100, 1);
        let back: Vec<f32> = bf
            .chunks(2)
            .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
            .collect();
        assert!(back.iter().all(|x| x.abs() <= 1.0) && back.iter().any(|x| *x != 0.0));
        let h = random_bytes(Dtype::Fp16, 100, 1);
        assert!(h.chunks(2).all(|c| {
            let exp = (u16::from_le_bytes([c[0], c[1]]) >> 10) & 0x1f;
            (10..15).contains(&exp)
        }));
    }
}
