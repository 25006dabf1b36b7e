//! The CPU GEMM fallback (matrixmultiply's sgemm, one thread): so `roger bench` works and is
//! tested everywhere. Clearly CPU: GFLOPS, no spec ratio.

use super::{median, tflops, GemmResult, Measured};
use crate::gpu::spec::Dtype;
use std::time::Instant;

/// Random values in [-1, 1): zeros would overstate throughput on some hardware.
pub fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n).map(|_| rng.f32() * 2.0 - 1.0).collect()
}

fn sgemm(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    // SAFETY: a, b, c are n×n row-major slices of exactly n*n elements.
    unsafe {
        matrixmultiply::sgemm(
            n,
            n,
            n,
            1.0,
            a.as_ptr(),
            n as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// fp32 GEMM at each size: one warm-up, then `iters` timed runs.
pub fn run(sizes: &[usize], iters: usize) -> Measured {
    let mut gemm = Vec::new();
    for &n in sizes {
        let a = random_f32(n * n, 1);
        let b = random_f32(n * n, 2);
        let mut c = vec![0f32; n * n];
        sgemm(n, &a, &b, &mut c);
        let t: Vec<f64> = (0..iters.max(1))
            .map(|_| {
                let start = Instant::now();
                sgemm(n, &a, &b, &mut c);
                std::hint::black_box(&c);
                tflops(n, start.elapsed().as_secs_f64().max(1e-9))
            })
            .collect();
        let best = t.iter().cloned().fold(0.0, f64::max);
        gemm.push(GemmResult {
            dtype: Dtype::Fp32,
            size: n,
            iters: t.len(),
            best_tflops: best,
            median_tflops: median(&t),
        });
    }
    Measured {
        device: "cpu".into(),
        name: format!(
            "CPU ({}, 1 thread, matrixmultiply sgemm)",
            std::env::consts::ARCH
        ),
        gemm,
        bandwidth_gbs: None,
        errors: Vec::new(),
        uuid: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgemm_is_correct_and_measured() {
        let n = 3;
        let a: Vec<f32> = (0..9).map(|i| i as f32).collect();
        let id: Vec<f32> = (0..9).map(|i| if i % 4 == 0 { 1.0 } else { 0.0 }).collect();
        let mut c = vec![0f32; 9];
        sgemm(n, &a, &id, &mut c);
        assert_eq!(c, a);
        let m = run(&[32, 64], 2);
        assert_eq!(m.gemm.len(), 2);
        assert!(m
            .gemm
            .iter()
            .all(|r| r.best_tflops > 0.0 && r.best_tflops >= r.median_tflops));
        let r = random_f32(1000, 7);
        assert!(r.iter().all(|v| (-1.0..1.0).contains(v)) && r.iter().any(|v| *v != 0.0));
    }
}
