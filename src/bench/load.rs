//! What the GPU did while the bench worker ran: which physical GPU it was (by UUID, so
//! `CUDA_VISIBLE_DEVICES=3` reads GPU 3, not NVML's GPU 0), and from the parent's samples
//! taken during the run the union of throttle reasons, the lowest SM clock under load, the
//! hottest and most power-hungry moments, and who else used the GPU. Pure.

use crate::gpu::checks::{throttle_class, ThrottleClass};
use crate::gpu::{GpuInfo, GpuSnapshot};
use serde::Serialize;

/// Which NVML GPU the worker ran on: its CUDA UUID when it reported one; else the
/// `CUDA_VISIBLE_DEVICES` entry at the CUDA ordinal (a UUID or an index; indices are taken
/// as NVML's PCI order, which CUDA follows under CUDA_DEVICE_ORDER=PCI_BUS_ID); else the
/// ordinal itself.
pub fn target_gpu(
    gpus: &[GpuInfo],
    worker_uuid: Option<&str>,
    ordinal: usize,
    cuda_visible: Option<&str>,
) -> Result<u32, String> {
    let by_uuid = |u: &str| {
        let u = u.trim().to_ascii_lowercase();
        gpus.iter()
            .find(|g| !g.uuid.is_empty() && g.uuid.to_ascii_lowercase().starts_with(&u))
            .map(|g| g.index)
    };
    if let Some(u) = worker_uuid.filter(|u| !u.is_empty()) {
        return by_uuid(u).ok_or_else(|| {
            format!("the bench ran on {u}, which the GPU reader does not list (a MIG instance or another container's view): its telemetry is not attributed")
        });
    }
    let visible = cuda_visible.map(str::trim).filter(|v| !v.is_empty());
    let Some(list) = visible else {
        return gpus
            .iter()
            .find(|g| g.index as usize == ordinal)
            .map(|g| g.index)
            .ok_or_else(|| format!("the reader lists no GPU {ordinal}"));
    };
    let entry = list.split(',').nth(ordinal).map(str::trim).ok_or_else(|| {
        format!("CUDA_VISIBLE_DEVICES={list} has no entry for CUDA device {ordinal}")
    })?;
    if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
        return by_uuid(entry).ok_or_else(|| {
            format!("CUDA_VISIBLE_DEVICES names {entry}, which the reader does not list")
        });
    }
    let i: u32 = entry.parse().map_err(|_| {
        format!("CUDA_VISIBLE_DEVICES entry {entry:?} is neither a UUID nor an index")
    })?;
    gpus.iter()
        .find(|g| g.index == i)
        .map(|g| g.index)
        .ok_or_else(|| {
            format!("CUDA_VISIBLE_DEVICES names GPU {i}, which the reader does not list")
        })
}

/// A sample counts as "under load" at this utilisation or more.
pub const LOADED_UTIL: u32 = 50;

/// The GPU over the worker's run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Load {
    pub gpu: u32,
    pub samples: usize,
    /// Samples at `LOADED_UTIL`% or more: the ones clocks and throttle reasons are taken from.
    pub loaded_samples: usize,
    /// Every throttle reason seen under load, in first-seen order.
    pub throttle: Vec<String>,
    pub min_sm_clock_mhz: Option<u32>,
    pub max_sm_clock_mhz: Option<u32>,
    pub max_temperature_c: Option<u32>,
    pub max_power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    /// PIDs other than the worker seen on the GPU.
    pub other_pids: Vec<u32>,
    /// The PIDs are the host's (roger in a container): only a count is known.
    pub other_processes_uncertain: bool,
}

/// Fold the samples of GPU `gpu` taken while the worker (`worker_pid`) ran.
pub fn summarise(snaps: &[GpuSnapshot], gpu: u32, worker_pid: Option<u32>) -> Load {
    let mut l = Load {
        gpu,
        ..Default::default()
    };
    for s in snaps {
        let Some(g) = s.gpus.iter().find(|g| g.index == gpu && g.error.is_none()) else {
            continue;
        };
        l.samples += 1;
        l.max_temperature_c = l.max_temperature_c.max(g.temperature_c);
        l.max_power_w = match (l.max_power_w, g.power_w) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        l.power_limit_w = g.power_limit_w.or(l.power_limit_w);
        l.max_sm_clock_mhz = l.max_sm_clock_mhz.max(g.sm_clock_max_mhz);
        if g.util.is_some_and(|u| u >= LOADED_UTIL) {
            l.loaded_samples += 1;
            for t in &g.throttle {
                if !l.throttle.contains(t) {
                    l.throttle.push(t.clone());
                }
            }
            if let Some(c) = g.sm_clock_mhz {
                l.min_sm_clock_mhz = Some(l.min_sm_clock_mhz.map_or(c, |m: u32| m.min(c)));
            }
        }
        let here: Vec<u32> = s
            .processes
            .iter()
            .filter(|p| p.gpu == gpu)
            .map(|p| p.pid)
            .collect();
        if s.foreign_pids {
            // The worker is one of them under a host PID we cannot know.
            l.other_processes_uncertain = true;
            if here.len() > 1 + l.other_pids.len() {
                l.other_pids = here.iter().skip(1).copied().collect();
            }
        } else {
            for p in here {
                if Some(p) != worker_pid && p != std::process::id() && !l.other_pids.contains(&p) {
                    l.other_pids.push(p);
                }
            }
        }
    }
    l
}

/// SM clock under load below this share of its maximum is named as a cause.
pub const LOW_CLOCK_SHARE: f64 = 0.9;

/// (bad throttle reasons, causes for a slow GEMM, state lines) from a run's load.
pub fn causes(l: &Load) -> (Vec<String>, Vec<String>, Vec<String>) {
    let bad: Vec<String> = l
        .throttle
        .iter()
        .filter(|t| throttle_class(t) == ThrottleClass::Bad)
        .cloned()
        .collect();
    let mut causes: Vec<String> = bad.iter().map(|t| format!("throttle {t}")).collect();
    let mut state = vec![format!(
        "GPU {} sampled {} time(s) during the bench, {} under load (util >= {LOADED_UTIL}%)",
        l.gpu, l.samples, l.loaded_samples
    )];
    if l.loaded_samples > 0 {
        state.push(format!(
            "throttle under load: {}",
            if l.throttle.is_empty() {
                "none".into()
            } else {
                l.throttle.join(", ")
            }
        ));
    }
    if let (Some(c), Some(mx)) = (l.min_sm_clock_mhz, l.max_sm_clock_mhz) {
        let line = format!("lowest SM clock under load {c} of {mx} MHz max");
        if (c as f64) < LOW_CLOCK_SHARE * mx as f64 {
            causes.push(line.clone());
        }
        state.push(line);
    }
    if let Some(t) = l.max_temperature_c {
        state.push(format!("max temperature {t} °C"));
    }
    if let Some(p) = l.max_power_w {
        state.push(match l.power_limit_w {
            Some(lim) => format!("max power {p:.0} of {lim:.0} W"),
            None => format!("max power {p:.0} W"),
        });
    }
    if !l.other_pids.is_empty() {
        let line = if l.other_processes_uncertain {
            format!(
                "{} other process(es) on the GPU (host PIDs {:?}; roger is in a container)",
                l.other_pids.len(),
                l.other_pids
            )
        } else {
            format!("other processes on the GPU: {:?}", l.other_pids)
        };
        causes.push(line.clone());
        state.push(line);
    }
    (bad, causes, state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuProcess;

    fn gpu(index: u32, uuid: &str) -> GpuInfo {
        GpuInfo {
            index,
            uuid: uuid.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_worker_gpu_is_found_by_uuid_not_by_cuda_ordinal() {
        let gpus: Vec<GpuInfo> = (0..8)
            .map(|i| {
                gpu(
                    i,
                    &format!("GPU-{i}{i}{i}{i}aaaa-0000-1111-2222-333333333333"),
                )
            })
            .collect();
        // CUDA_VISIBLE_DEVICES=3: CUDA calls it device 0; it was read as NVML's GPU 0 before.
        let u3 = "GPU-3333aaaa-0000-1111-2222-333333333333";
        assert_eq!(target_gpu(&gpus, Some(u3), 0, Some("3")), Ok(3));
        assert_eq!(target_gpu(&gpus, None, 0, Some("3")), Ok(3));
        assert_eq!(target_gpu(&gpus, None, 1, Some("5, 2")), Ok(2));
        assert_eq!(target_gpu(&gpus, None, 0, Some("GPU-6666")), Ok(6));
        assert_eq!(target_gpu(&gpus, None, 2, None), Ok(2));
        assert!(target_gpu(&gpus, Some("GPU-ffff"), 0, None)
            .unwrap_err()
            .contains("not attributed"));
        assert!(target_gpu(&gpus, None, 1, Some("3")).is_err());
        assert!(target_gpu(&gpus, None, 0, Some("MIG-1234")).is_err());
    }

    fn sample(
        util: u32,
        clock: u32,
        throttle: &[&str],
        pids: &[u32],
        foreign: bool,
    ) -> GpuSnapshot {
        GpuSnapshot {
            gpus: vec![
                GpuInfo {
                    index: 1,
                    util: Some(util),
                    sm_clock_mhz: Some(clock),
                    sm_clock_max_mhz: Some(1980),
                    temperature_c: Some(40 + util / 2),
                    power_w: Some(util as f64 * 7.0),
                    power_limit_w: Some(700.0),
                    throttle: throttle.iter().map(|s| s.to_string()).collect(),
                    ..Default::default()
                },
                GpuInfo {
                    index: 0,
                    util: Some(100),
                    sm_clock_mhz: Some(300),
                    throttle: vec!["hw_slowdown".into()],
                    ..Default::default()
                },
            ],
            processes: pids
                .iter()
                .map(|&pid| GpuProcess {
                    pid,
                    gpu: 1,
                    used_memory: Some(1),
                })
                .collect(),
            source: "nvml".into(),
            foreign_pids: foreign,
        }
    }

    #[test]
    fn samples_during_the_run_give_the_causes_an_idle_read_missed() {
        let snaps = vec![
            sample(0, 345, &["gpu_idle"], &[], false),
            sample(99, 1980, &["sw_power_cap"], &[77], false),
            sample(
                100,
                1410,
                &["sw_power_cap", "hw_thermal_slowdown"],
                &[77, 900],
                false,
            ),
            sample(0, 345, &["gpu_idle"], &[], false),
        ];
        let l = summarise(&snaps, 1, Some(77));
        assert_eq!((l.samples, l.loaded_samples), (4, 2));
        assert_eq!(l.throttle, ["sw_power_cap", "hw_thermal_slowdown"]);
        assert_eq!(
            (l.min_sm_clock_mhz, l.max_sm_clock_mhz),
            (Some(1410), Some(1980))
        );
        assert_eq!(l.max_temperature_c, Some(90));
        assert_eq!(l.max_power_w, Some(700.0));
        assert_eq!(l.other_pids, [900]);
        let (bad, why, state) = causes(&l);
        assert_eq!(bad, ["hw_thermal_slowdown"]);
        assert!(why.iter().any(|c| c.contains("1410 of 1980")), "{why:?}");
        assert!(why.iter().any(|c| c.contains("[900]")));
        assert!(state.iter().any(|s| s.contains("max power 700 of 700 W")));

        // Full clocks, no bad flag, nobody else: no cause at all (the idle clock of the
        // samples before and after the load is not one).
        let calm = vec![
            sample(0, 345, &["gpu_idle"], &[], false),
            sample(100, 1980, &["sw_power_cap"], &[77], false),
        ];
        let (bad, why, _) = causes(&summarise(&calm, 1, Some(77)));
        assert!(bad.is_empty() && why.is_empty(), "{why:?}");
    }

    #[test]
    fn host_pids_in_a_container_are_counted_not_matched() {
        let snaps = vec![sample(100, 1980, &[], &[123456, 654321], true)];
        let l = summarise(&snaps, 1, Some(42));
        assert!(l.other_processes_uncertain);
        assert_eq!(l.other_pids.len(), 1);
        let alone = summarise(&[sample(100, 1980, &[], &[123456], true)], 1, Some(42));
        assert!(alone.other_pids.is_empty());
    }
}
