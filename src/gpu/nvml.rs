//! NVML through nvml-wrapper: libnvidia-ml is loaded at run time, so a machine without the
//! driver gets `GpuError::NoGpu("no NVIDIA driver: ...")`, never a panic. Metrics a GPU does
//! not support become None ("n/a"). Under WDDM (WSL2, Windows) NVML cannot say how much VRAM
//! a process holds: that is None too, and the probe says so instead of showing 0.
//!
//! `spawn_xid_listener` follows critical XID events live (for `watch`).

use super::checks::decode_throttle;
use super::xid::Xid;
use super::{GpuError, GpuInfo, GpuProcess, GpuReader, GpuSnapshot};
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

pub struct NvmlGpu {
    nvml: Nvml,
    /// The library name that loaded ("libnvidia-ml.so.1").
    pub lib_name: String,
    /// The same library through dlopen, for entry points nvml-wrapper 0.10 lacks.
    raw: Option<RawNvml>,
}

/// NVML's library names, versioned first: NVIDIA's container toolkit often mounts only
/// `libnvidia-ml.so.1` (the unversioned name comes with the dev package).
pub const LIB_NAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// Map an init failure onto "no GPU here" (no library, no driver) or "failed".
pub fn init_error(e: NvmlError) -> GpuError {
    match e {
        NvmlError::LibloadingError(e) => GpuError::NoGpu(format!(
            "no NVIDIA driver: {} could not be loaded ({e})",
            LIB_NAMES.join(" nor ")
        )),
        NvmlError::DriverNotLoaded => {
            GpuError::NoGpu("no NVIDIA driver: the kernel driver is not loaded".into())
        }
        NvmlError::LibraryNotFound => {
            GpuError::NoGpu("no NVIDIA driver: NVML library not found".into())
        }
        NvmlError::NoPermission => {
            GpuError::Failed("NVML: no permission to open the GPU devices".into())
        }
        other => GpuError::Failed(format!("NVML init: {other}")),
    }
}

/// `Nvml::init` on the first of `LIB_NAMES` that loads; a library that loads but fails to
/// initialise is the answer (the next name is the same driver).
pub fn init() -> Result<(Nvml, String), GpuError> {
    let mut last = None;
    for name in LIB_NAMES {
        // nvml-wrapper calls nvmlShutdown with `expect` when it drops: a library without it
        // (a stub, a broken install) would panic roger. Check before initialising.
        if let Ok(lib) = super::dl::Library::open(name) {
            let missing = lib.missing(&["nvmlInit_v2", "nvmlShutdown"]);
            if !missing.is_empty() {
                return Err(GpuError::Failed(format!(
                    "{name} lacks {}: not a usable NVML library",
                    missing.join(", ")
                )));
            }
        }
        match Nvml::builder().lib_path(std::ffi::OsStr::new(name)).init() {
            Ok(n) => return Ok((n, name.to_string())),
            Err(NvmlError::LibloadingError(e)) => last = Some(NvmlError::LibloadingError(e)),
            Err(e) => {
                return Err(match init_error(e) {
                    GpuError::NoGpu(w) => GpuError::NoGpu(format!("{name}: {w}")),
                    GpuError::Failed(w) => GpuError::Failed(format!("{name}: {w}")),
                })
            }
        }
    }
    Err(init_error(last.unwrap_or(NvmlError::LibraryNotFound)))
}

impl NvmlGpu {
    pub fn open() -> Result<NvmlGpu, GpuError> {
        let (nvml, lib_name) = init()?;
        let raw = RawNvml::open(&lib_name);
        Ok(NvmlGpu {
            nvml,
            lib_name,
            raw,
        })
    }

    /// "NVML (libnvidia-ml.so.1 from /usr/lib/...)" for reports.
    pub fn describe(&self) -> String {
        match self
            .raw
            .as_ref()
            .and_then(|r| r.lib.path_via("nvmlInit_v2"))
        {
            Some(p) => format!("NVML ({} at {})", self.lib_name, p.display()),
            None => format!("NVML ({})", self.lib_name),
        }
    }
}

/// `nvmlMemory_v2_t`: v2 reports reserved memory apart; v1 counts it as used.
#[repr(C)]
struct MemoryV2 {
    version: u32,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

/// NVML_STRUCT_VERSION(Memory, 2): the struct size with the version in the top byte.
const MEMORY_V2_VERSION: u32 = std::mem::size_of::<MemoryV2>() as u32 | (2 << 24);

/// nvmlDevice_t is an opaque pointer; nvml-wrapper does not export its type.
type Handle = *mut std::ffi::c_void;
type MemoryV2Fn = unsafe extern "C" fn(Handle, *mut MemoryV2) -> u32;
type ReasonsFn = unsafe extern "C" fn(Handle, *mut u64) -> u32;

/// Entry points nvml-wrapper 0.10 does not offer: memory_info v2, and the raw clock-event
/// mask (its `current_throttle_reasons` drops bits it does not know via from_bits_truncate).
struct RawNvml {
    lib: super::dl::Library,
    memory_v2: Option<MemoryV2Fn>,
    reasons: Option<ReasonsFn>,
}

impl RawNvml {
    fn open(name: &str) -> Option<RawNvml> {
        let lib = super::dl::Library::open(name).ok()?;
        // SAFETY: the symbols, when present, have these C signatures (nvml.h); `lib` is kept
        // alongside, so the pointers stay valid.
        let (memory_v2, reasons) = unsafe {
            (
                lib.function::<MemoryV2Fn>("nvmlDeviceGetMemoryInfo_v2"),
                lib.function::<ReasonsFn>("nvmlDeviceGetCurrentClocksEventReasons")
                    .or_else(|| lib.function("nvmlDeviceGetCurrentClocksThrottleReasons")),
            )
        };
        Some(RawNvml {
            lib,
            memory_v2,
            reasons,
        })
    }

    /// (used, total) from memory_info v2, or None where the driver lacks it.
    fn memory(&self, d: &Device) -> Option<(u64, u64)> {
        let f = self.memory_v2?;
        let mut m = MemoryV2 {
            version: MEMORY_V2_VERSION,
            total: 0,
            reserved: 0,
            free: 0,
            used: 0,
        };
        // SAFETY: the handle is live for d's lifetime; m is a valid, versioned out-struct.
        (unsafe { f(d.handle() as Handle, &mut m) } == 0).then_some((m.used, m.total))
    }

    fn reasons(&self, d: &Device) -> Option<u64> {
        let f = self.reasons?;
        let mut mask = 0u64;
        // SAFETY: as above; mask is a valid out-pointer.
        (unsafe { f(d.handle() as Handle, &mut mask) } == 0).then_some(mask)
    }
}

/// What a GPU that could not be read is reported as: lost (off the bus) or unreadable.
pub fn unreadable(index: u32, what: &str, e: &NvmlError) -> GpuInfo {
    let lost = matches!(e, NvmlError::GpuLost);
    GpuInfo {
        index,
        name: "unknown".into(),
        lost,
        error: Some(if lost {
            format!("GPU {index} has fallen off the bus (NVML: GPU is lost, reading its {what})")
        } else {
            format!("GPU {index}: NVML could not read its {what}: {e}")
        }),
        ..Default::default()
    }
}

fn gpu_info(d: &Device, index: u32, raw: Option<&RawNvml>) -> Result<GpuInfo, NvmlError> {
    let name = d.name()?;
    let mem = raw
        .and_then(|r| r.memory(d))
        .or_else(|| d.memory_info().ok().map(|m| (m.used, m.total)));
    let util = d.utilization_rates().ok();
    let reasons = raw
        .and_then(|r| r.reasons(d))
        .or_else(|| d.current_throttle_reasons().ok().map(|r| r.bits()));
    Ok(GpuInfo {
        index,
        name,
        uuid: d.uuid().unwrap_or_default(),
        memory_used: mem.map(|m| m.0),
        memory_total: mem.map(|m| m.1),
        util: util.as_ref().map(|u| u.gpu),
        memory_util: util.as_ref().map(|u| u.memory),
        temperature_c: d.temperature(TemperatureSensor::Gpu).ok(),
        power_w: d.power_usage().ok().map(|mw| mw as f64 / 1000.0),
        power_limit_w: d.enforced_power_limit().ok().map(|mw| mw as f64 / 1000.0),
        sm_clock_mhz: d.clock_info(Clock::SM).ok(),
        sm_clock_max_mhz: d.max_clock_info(Clock::SM).ok(),
        throttle: reasons.map(decode_throttle).unwrap_or_default(),
        ecc_uncorrected: d
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .ok(),
        ecc_corrected: d
            .total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .ok(),
        lost: false,
        error: None,
    })
}

fn processes(d: &Device, index: u32) -> Vec<GpuProcess> {
    // Older drivers lack the v3 entry point nvml-wrapper uses first.
    let list = match d.running_compute_processes() {
        Err(NvmlError::FailedToLoadSymbol(_)) => d.running_compute_processes_v2(),
        other => other,
    };
    list.unwrap_or_default()
        .into_iter()
        .map(|p| GpuProcess {
            pid: p.pid,
            gpu: index,
            used_memory: match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            },
        })
        .collect()
}

impl GpuReader for NvmlGpu {
    fn read(&mut self) -> Result<GpuSnapshot, GpuError> {
        let n = self
            .nvml
            .device_count()
            .map_err(|e| GpuError::Failed(format!("NVML device count: {e}")))?;
        if n == 0 {
            return Err(GpuError::NoGpu("NVML sees no GPUs".into()));
        }
        let mut snap = GpuSnapshot {
            source: "nvml".into(),
            foreign_pids: super::pidns::foreign_here().is_some(),
            ..Default::default()
        };
        // One GPU off the bus must not hide the others: each one's error is its own.
        for i in 0..n {
            let d = match self.nvml.device_by_index(i) {
                Ok(d) => d,
                Err(e) => {
                    snap.gpus.push(unreadable(i, "handle", &e));
                    continue;
                }
            };
            match gpu_info(&d, i, self.raw.as_ref()) {
                Ok(g) => {
                    snap.gpus.push(g);
                    snap.processes.extend(processes(&d, i));
                }
                Err(e) => snap.gpus.push(unreadable(i, "name", &e)),
            }
        }
        Ok(snap)
    }

    fn describe(&self) -> String {
        NvmlGpu::describe(self)
    }
}

/// Follow critical XID events on every GPU in a thread, sending each to `tx` until `stop`
/// is set (checked about once a second). Returns the thread, or why events are unavailable
/// (no driver; WSL and some drivers do not support event sets).
pub fn spawn_xid_listener(
    tx: Sender<Xid>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, GpuError> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), GpuError>>();
    let handle = std::thread::spawn(move || {
        let nvml = match init() {
            Ok((n, _)) => n,
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        let setup = || -> Result<_, GpuError> {
            let mut set = nvml
                .create_event_set()
                .map_err(|e| GpuError::Failed(format!("NVML event set: {e}")))?;
            let n = nvml
                .device_count()
                .map_err(|e| GpuError::Failed(e.to_string()))?;
            for i in 0..n {
                // A GPU that cannot be opened (off the bus) must not cost the others their
                // events; its XID 79 is in the kernel log, which probe reads.
                let Ok(d) = nvml.device_by_index(i) else {
                    continue;
                };
                set = d
                    .register_events(
                        nvml_wrapper::bitmasks::event::EventTypes::CRITICAL_XID_ERROR,
                        set,
                    )
                    .map_err(|e| {
                        GpuError::Failed(format!("NVML XID events on GPU {i}: {}", e.error))
                    })?;
            }
            Ok(set)
        };
        let set = match setup() {
            Ok(s) => {
                let _ = ready_tx.send(Ok(()));
                s
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        while !stop.load(Ordering::Relaxed) {
            match set.wait(1000) {
                Ok(ev) => {
                    let code = match ev.event_data {
                        Some(nvml_wrapper::enums::event::XidError::Value(v)) => v as u32,
                        _ => continue,
                    };
                    let device = ev
                        .device
                        .index()
                        .map_or("GPU ?".into(), |i| format!("GPU {i}"));
                    if tx.send(Xid::new(&device, code, "NVML event")).is_err() {
                        return;
                    }
                }
                Err(NvmlError::Timeout) => {}
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(500)),
            }
        }
    });
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => Err(GpuError::Failed(
            "XID listener thread died during setup".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_is_a_clear_no_gpu_not_a_panic() {
        // This machine (and CI) has no NVIDIA driver; on a GPU box this reads real GPUs.
        match NvmlGpu::open() {
            Err(GpuError::NoGpu(why)) => assert!(why.contains("no NVIDIA driver"), "{why}"),
            Err(GpuError::Failed(why)) => assert!(!why.is_empty()),
            Ok(mut g) => {
                let _ = g.read();
            }
        }
        let stop = Arc::new(AtomicBool::new(true));
        let (tx, _rx) = std::sync::mpsc::channel();
        if let Ok(h) = spawn_xid_listener(tx, stop) {
            h.join().unwrap();
        }
    }
}
