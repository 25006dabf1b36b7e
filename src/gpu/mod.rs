//! GPU data as plain types and the `GpuReader` trait every consumer (probe, critic VRAM
//! check, watch) reads through. Real sources load the driver at run time; with no driver the
//! answer is a clear "no GPU", never a panic.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub memory_used: Option<u64>,
    pub memory_total: Option<u64>,
    /// Percent, 0-100.
    pub util: Option<u32>,
    pub memory_util: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    /// Throttle reason names as reported (e.g. "sw_power_cap", "hw_slowdown").
    #[serde(default)]
    pub throttle: Vec<String>,
    pub ecc_uncorrected: Option<u64>,
    pub ecc_corrected: Option<u64>,
    /// The GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST, XID 79): a fail, not "unknown".
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost: bool,
    /// Why this GPU could not be read; the other GPUs are still reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GpuProcess::gpu` of a process whose GPU the driver's listing does not name.
pub const UNKNOWN_GPU: u32 = u32::MAX;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub gpu: u32,
    /// None where the driver cannot say (WDDM: WSL2 and Windows).
    pub used_memory: Option<u64>,
}

/// One reading of every GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSnapshot {
    pub gpus: Vec<GpuInfo>,
    pub processes: Vec<GpuProcess>,
    /// Where it came from: "nvml", "nvidia-smi", "replay", "fake".
    pub source: String,
    /// roger runs in another PID namespace than the driver's (a container): the PIDs above
    /// are the host's, so they cannot be matched to /proc or to the run's own PIDs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub foreign_pids: bool,
}

impl GpuSnapshot {
    /// VRAM held by the given PIDs, summed over GPUs (None if the driver cannot say, or its
    /// PIDs are from another PID namespace and so say nothing about ours).
    pub fn memory_of(&self, pids: &[u32]) -> Option<u64> {
        if self.foreign_pids {
            return None;
        }
        let mine: Vec<&GpuProcess> = self
            .processes
            .iter()
            .filter(|p| pids.contains(&p.pid))
            .collect();
        if mine.iter().any(|p| p.used_memory.is_none()) {
            return None;
        }
        // Saturating: a driver's (or a recording's) absurd number must not overflow.
        Some(
            mine.iter()
                .filter_map(|p| p.used_memory)
                .fold(0u64, u64::saturating_add),
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuError {
    /// No NVIDIA driver / no GPU: a normal answer on CPU machines.
    NoGpu(String),
    /// A driver is there but the read failed.
    Failed(String),
}

impl std::fmt::Display for GpuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuError::NoGpu(why) => write!(f, "no GPU: {why}"),
            GpuError::Failed(why) => write!(f, "GPU read failed: {why}"),
        }
    }
}

impl std::error::Error for GpuError {}

pub trait GpuReader {
    fn read(&mut self) -> Result<GpuSnapshot, GpuError>;
    /// Which reader this is, in words, for reports ("NVML (libnvidia-ml.so.1 at ...)").
    fn describe(&self) -> String {
        String::new()
    }
    /// Why this reader stands in for the one tried first (`auto` fell back), if it does.
    fn fallback(&self) -> Option<String> {
        None
    }
}

/// A reader that always answers "no GPU" with the given reason.
pub struct NoGpu(pub String);

impl GpuReader for NoGpu {
    fn read(&mut self) -> Result<GpuSnapshot, GpuError> {
        Err(GpuError::NoGpu(self.0.clone()))
    }
}

/// Plays back a fixed sequence of snapshots (the last one repeats): for tests.
pub struct FakeGpu {
    pub snapshots: Vec<Result<GpuSnapshot, GpuError>>,
    next: usize,
}

impl FakeGpu {
    pub fn new(snapshots: Vec<Result<GpuSnapshot, GpuError>>) -> FakeGpu {
        FakeGpu { snapshots, next: 0 }
    }
}

impl GpuReader for FakeGpu {
    fn read(&mut self) -> Result<GpuSnapshot, GpuError> {
        let i = self.next.min(self.snapshots.len().saturating_sub(1));
        self.next += 1;
        self.snapshots
            .get(i)
            .cloned()
            .unwrap_or_else(|| Err(GpuError::NoGpu("fake with no snapshots".into())))
    }
}

pub mod checks;
pub mod dl;
pub mod nvml;
pub mod pidns;
pub mod replay;
pub mod smi;
pub mod source;
pub mod spec;
pub mod xid;

/// The reader the config asks for: "auto" tries NVML, then `nvidia-smi`; "nvml" and "smi"
/// only that one; "replay" needs `[gpu] replay = FILE`; "none" never reads.
pub fn open_reader(cfg: &source::GpuConfig) -> Box<dyn GpuReader> {
    match cfg.source.as_str() {
        "replay" => match &cfg.replay {
            Some(p) => match replay::ReplayGpu::open(p) {
                Ok(r) => Box::new(r),
                Err(e) => Box::new(FailedGpu(e)),
            },
            None => Box::new(FailedGpu(GpuError::Failed(
                "[gpu] source = \"replay\" needs `replay = FILE`".into(),
            ))),
        },
        "none" => Box::new(NoGpu("disabled in config ([gpu] source = \"none\")".into())),
        "nvml" => match nvml::NvmlGpu::open() {
            Ok(r) => Box::new(r),
            Err(e) => Box::new(FailedGpu(e)),
        },
        "smi" => match smi::SmiGpu::find() {
            Ok(r) => Box::new(r),
            Err(e) => Box::new(FailedGpu(e)),
        },
        _ => open_auto(),
    }
}

/// NVML when it loads; else nvidia-smi on PATH (saying why NVML did not load); else "no
/// GPU" with both reasons.
fn open_auto() -> Box<dyn GpuReader> {
    let nvml_err = match nvml::NvmlGpu::open() {
        Ok(r) => return Box::new(r),
        Err(e) => e,
    };
    match smi::SmiGpu::find() {
        Ok(r) => {
            let why = format!("NVML did not load ({nvml_err}); reading the GPUs through nvidia-smi instead (slower; no XID events)");
            tracing::warn!("{why}");
            Box::new(Fallback {
                inner: Box::new(r),
                why,
            })
        }
        Err(smi_err) => {
            let smi_err = match smi_err {
                GpuError::NoGpu(w) | GpuError::Failed(w) => w,
            };
            Box::new(FailedGpu(match nvml_err {
                GpuError::NoGpu(w) => GpuError::NoGpu(format!("{w}; {smi_err}")),
                GpuError::Failed(w) => GpuError::Failed(format!("{w}; {smi_err}")),
            }))
        }
    }
}

/// A reader standing in for the one `auto` tried first.
pub struct Fallback {
    pub inner: Box<dyn GpuReader>,
    pub why: String,
}

impl GpuReader for Fallback {
    fn read(&mut self) -> Result<GpuSnapshot, GpuError> {
        self.inner.read()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn fallback(&self) -> Option<String> {
        Some(self.why.clone())
    }
}

/// A reader whose setup failed: every read reports why.
pub struct FailedGpu(pub GpuError);

impl GpuReader for FailedGpu {
    fn read(&mut self) -> Result<GpuSnapshot, GpuError> {
        Err(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_pids_give_no_vram_for_the_run_not_zero() {
        let mut s = GpuSnapshot {
            processes: vec![GpuProcess {
                pid: 812_345,
                gpu: 0,
                used_memory: Some(20 << 30),
            }],
            source: "nvml".into(),
            ..Default::default()
        };
        // The run's trainer is PID 40 here and 812345 on the host: 0 bytes was read before.
        assert_eq!(s.memory_of(&[40]), Some(0));
        s.foreign_pids = true;
        assert_eq!(s.memory_of(&[40]), None);
    }
}
