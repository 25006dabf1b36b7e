//! `[gpu]` of roger.toml: which GPU source to read. The GPU readers own it; the config embeds it.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuConfig {
    /// "auto" (NVML, then nvidia-smi), "nvml", "smi", "none", or "replay".
    pub source: String,
    /// For `source = "replay"`: a recording made by `roger probe --record`.
    pub replay: Option<PathBuf>,
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig {
            source: "auto".into(),
            replay: None,
        }
    }
}
