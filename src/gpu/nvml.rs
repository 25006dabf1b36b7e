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
}

/// Map an init failure onto "no GPU here" (no library, no driver) or "failed".
pub fn init_error(e: NvmlError) -> GpuError {
    match e {
        NvmlError::LibloadingError(e) => GpuError::NoGpu(format!(
            "no NVIDIA driver: libnvidia-ml.so could not be loaded ({e})"
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

impl NvmlGpu {
    pub fn open() -> Result<NvmlGpu, GpuError> {
        Nvml::init()
            .map(|nvml| NvmlGpu { nvml })
            .map_err(init_error)
    }
}

fn gpu_info(d: &Device, index: u32) -> Result<GpuInfo, GpuError> {
    let name = d.name().map_err(|e| match e {
        NvmlError::GpuLost => {
            GpuError::Failed(format!("GPU {index} has fallen off the bus (GpuLost)"))
        }
        e => GpuError::Failed(format!("GPU {index} name: {e}")),
    })?;
    let mem = d.memory_info().ok();
    let util = d.utilization_rates().ok();
    Ok(GpuInfo {
        index,
        name,
        uuid: d.uuid().unwrap_or_default(),
        memory_used: mem.as_ref().map(|m| m.used),
        memory_total: mem.as_ref().map(|m| m.total),
        util: util.as_ref().map(|u| u.gpu),
        memory_util: util.as_ref().map(|u| u.memory),
        temperature_c: d.temperature(TemperatureSensor::Gpu).ok(),
        power_w: d.power_usage().ok().map(|mw| mw as f64 / 1000.0),
        power_limit_w: d.enforced_power_limit().ok().map(|mw| mw as f64 / 1000.0),
        sm_clock_mhz: d.clock_info(Clock::SM).ok(),
        sm_clock_max_mhz: d.max_clock_info(Clock::SM).ok(),
        throttle: d
            .current_throttle_reasons()
            .map(|r| decode_throttle(r.bits()))
            .unwrap_or_default(),
        ecc_uncorrected: d
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .ok(),
        ecc_corrected: d
            .total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .ok(),
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
            ..Default::default()
        };
        for i in 0..n {
            let d = self
                .nvml
                .device_by_index(i)
                .map_err(|e| GpuError::Failed(format!("NVML GPU {i}: {e}")))?;
            snap.gpus.push(gpu_info(&d, i)?);
            snap.processes.extend(processes(&d, i));
        }
        Ok(snap)
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
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                let _ = ready_tx.send(Err(init_error(e)));
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
                let d = nvml
                    .device_by_index(i)
                    .map_err(|e| GpuError::Failed(e.to_string()))?;
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
