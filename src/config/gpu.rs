//! `[bench]`: what the model is (for MFU). `[gpu]` (which GPU source to read) is
//! `gpu::source::GpuConfig`, embedded by the config.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BenchConfig {
    /// Model parameter count, for MFU (6·N·tokens/s).
    pub params: Option<f64>,
    pub layers: Option<u64>,
    pub hidden: Option<u64>,
    pub seq_len: Option<u64>,
    pub gpus: u32,
    /// Measured GEMM below these shares of spec warn / fail.
    pub warn_ratio: f64,
    pub fail_ratio: f64,
    /// Training TFLOPS below this share of the measured GEMM blames the code / input pipeline.
    pub slow_code_share: f64,
    /// Square GEMM sizes on a GPU (the largest should saturate it).
    pub sizes: Vec<usize>,
    /// Timed runs per size (after 3 warm-up runs).
    pub iters: usize,
    /// The dtype training runs in: its spec peak is the MFU denominator.
    pub dtype: String,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            params: None,
            layers: None,
            hidden: None,
            seq_len: None,
            gpus: 1,
            warn_ratio: 0.6,
            fail_ratio: 0.35,
            slow_code_share: 0.3,
            sizes: vec![1024, 2048, 4096, 8192],
            iters: 10,
            dtype: "bf16".into(),
        }
    }
}
