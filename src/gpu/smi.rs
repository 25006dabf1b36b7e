//! `nvidia-smi` as a GPU source (the fallback when NVML cannot be loaded, and the way to
//! ask the Windows side through `nvidia-smi.exe` on WSL). Parsing is pure; each run is
//! bounded in time so a wedged driver cannot wedge roger.

use super::checks::decode_throttle;
use super::{GpuError, GpuInfo, GpuProcess, GpuReader, GpuSnapshot};
use std::path::{Path, PathBuf};
use std::time::Duration;

const THROTTLE_OLD: &str = "clocks_throttle_reasons.active";
const THROTTLE_NEW: &str = "clocks_event_reasons.active";

/// The GPU fields asked for, in order; `{throttle}` is the driver's name for the reasons.
pub fn gpu_fields(throttle: &str) -> String {
    [
        "index",
        "name",
        "uuid",
        "memory.used",
        "memory.total",
        "utilization.gpu",
        "utilization.memory",
        "temperature.gpu",
        "power.draw",
        "power.limit",
        "clocks.sm",
        "clocks.max.sm",
        throttle,
        "ecc.errors.uncorrected.volatile.total",
        "ecc.errors.corrected.volatile.total",
    ]
    .join(",")
}

pub const APP_FIELDS: &str = "pid,gpu_uuid,used_memory";

/// A value, or None for "[N/A]", "[Not Supported]", "N/A", "" and the like.
fn val(s: &str) -> Option<&str> {
    let t = s.trim();
    if t.is_empty() || t.starts_with('[') || t.eq_ignore_ascii_case("n/a") {
        None
    } else {
        Some(t)
    }
}

fn num<T: std::str::FromStr>(s: &str) -> Option<T> {
    val(s).and_then(|v| v.parse().ok())
}

const MIB: u64 = 1 << 20;

/// Parse `--query-gpu` output (`--format=csv,noheader,nounits`).
pub fn parse_gpus(text: &str) -> Result<Vec<GpuInfo>, String> {
    let mut gpus = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 15 {
            return Err(format!(
                "nvidia-smi line {}: expected 15 comma-separated fields, got {}: {line:?}",
                i + 1,
                f.len()
            ));
        }
        let index =
            num(f[0]).ok_or_else(|| format!("nvidia-smi line {}: bad index {:?}", i + 1, f[0]))?;
        let throttle = val(f[12])
            .and_then(|t| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok())
            .map(decode_throttle)
            .unwrap_or_default();
        gpus.push(GpuInfo {
            index,
            name: f[1].to_string(),
            uuid: f[2].to_string(),
            memory_used: num::<u64>(f[3]).map(|m| m.saturating_mul(MIB)),
            memory_total: num::<u64>(f[4]).map(|m| m.saturating_mul(MIB)),
            util: num(f[5]),
            memory_util: num(f[6]),
            temperature_c: num(f[7]),
            power_w: num(f[8]),
            power_limit_w: num(f[9]),
            sm_clock_mhz: num(f[10]),
            sm_clock_max_mhz: num(f[11]),
            throttle,
            ecc_uncorrected: num(f[13]),
            ecc_corrected: num(f[14]),
            ..Default::default()
        });
    }
    Ok(gpus)
}

/// Parse `--query-compute-apps=pid,gpu_uuid,used_memory` output; GPUs by UUID.
pub fn parse_apps(text: &str, gpus: &[GpuInfo]) -> Result<Vec<GpuProcess>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.contains("No running") {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 3 {
            return Err(format!(
                "nvidia-smi apps line {}: expected pid, gpu_uuid, used_memory: {line:?}",
                i + 1
            ));
        }
        let pid = num(f[0])
            .ok_or_else(|| format!("nvidia-smi apps line {}: bad pid {:?}", i + 1, f[0]))?;
        // A row whose GPU is not listed (a GPU gone since the first query, a blank UUID)
        // still holds VRAM, but on no GPU we know: never GPU 0's.
        let gpu = gpus
            .iter()
            .find(|g| g.uuid == f[1])
            .map_or(super::UNKNOWN_GPU, |g| g.index);
        out.push(GpuProcess {
            pid,
            gpu,
            used_memory: num::<u64>(f[2]).map(|m| m.saturating_mul(MIB)),
        });
    }
    Ok(out)
}

/// Reads GPUs by running nvidia-smi (or nvidia-smi.exe).
pub struct SmiGpu {
    pub program: PathBuf,
    pub timeout: Duration,
    pub source: String,
}

impl SmiGpu {
    /// `nvidia-smi` on PATH.
    pub fn find() -> Result<SmiGpu, GpuError> {
        let program = crate::sys::bounded::which("nvidia-smi")
            .ok_or_else(|| GpuError::NoGpu("nvidia-smi is not on PATH".into()))?;
        Ok(SmiGpu::with(program, "nvidia-smi"))
    }

    pub fn with(program: PathBuf, source: &str) -> SmiGpu {
        SmiGpu {
            program,
            timeout: Duration::from_secs(20),
            source: source.into(),
        }
    }

    fn query(&self, args: &[&str]) -> Result<String, GpuError> {
        let o = crate::sys::bounded::run(&self.program, args, self.timeout)
            .map_err(|e| GpuError::Failed(format!("{e:#}")))?;
        if o.success() {
            return Ok(o.stdout);
        }
        let msg = format!(
            "{} {}: exit {:?}: {}{}",
            self.program.display(),
            args.join(" "),
            o.code,
            o.stdout.trim(),
            o.stderr.trim()
        );
        if o.stdout
            .contains("couldn't communicate with the NVIDIA driver")
            || o.stdout.contains("No devices were found")
        {
            Err(GpuError::NoGpu(msg))
        } else {
            Err(GpuError::Failed(msg))
        }
    }

    fn query_gpus(&self) -> Result<String, GpuError> {
        let mut last = None;
        for throttle in [THROTTLE_OLD, THROTTLE_NEW] {
            let q = format!("--query-gpu={}", gpu_fields(throttle));
            match self.query(&[&q, "--format=csv,noheader,nounits"]) {
                Ok(t) => return Ok(t),
                // Drivers that renamed the field reject the old name; try the new one.
                Err(GpuError::Failed(m)) if m.contains("valid field") => {
                    last = Some(GpuError::Failed(m))
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("one attempt made"))
    }
}

impl GpuReader for SmiGpu {
    fn read(&mut self) -> Result<GpuSnapshot, GpuError> {
        let gpus = parse_gpus(&self.query_gpus()?).map_err(GpuError::Failed)?;
        if gpus.is_empty() {
            return Err(GpuError::NoGpu(format!(
                "{} lists no GPUs",
                self.program.display()
            )));
        }
        let q = format!("--query-compute-apps={APP_FIELDS}");
        let apps = self.query(&[&q, "--format=csv,noheader,nounits"])?;
        let processes = parse_apps(&apps, &gpus).map_err(GpuError::Failed)?;
        Ok(GpuSnapshot {
            gpus,
            processes,
            source: self.source.clone(),
            foreign_pids: super::pidns::foreign_here().is_some(),
        })
    }

    fn describe(&self) -> String {
        format!("{} ({})", self.source, self.program.display())
    }
}

/// Is this path a Windows executable reached through WSL interop?
pub fn is_windows_exe(p: &Path) -> bool {
    p.extension().is_some_and(|e| e.eq_ignore_ascii_case("exe"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: &str = "0, NVIDIA H100 80GB HBM3, GPU-aaaa, 61234, 81559, 98, 71, 74, 689.52, 700.00, 1980, 1980, 0x0000000000000004, 0, 0\n\
1, NVIDIA H100 80GB HBM3, GPU-bbbb, 5, 81559, 0, 0, 33, 70.10, 700.00, 345, 1980, 0x0000000000000001, [N/A], [Not Supported]\n";

    #[test]
    fn parses_gpu_rows() {
        let g = parse_gpus(H100).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].memory_used, Some(61234 * MIB));
        assert_eq!(g[0].power_w, Some(689.52));
        assert_eq!(g[0].throttle, vec!["sw_power_cap"]);
        assert_eq!(g[1].throttle, vec!["gpu_idle"]);
        assert_eq!(g[1].ecc_uncorrected, None);
        assert_eq!(g[1].ecc_corrected, None);
    }

    #[test]
    fn parses_apps_with_wddm_na() {
        let g = parse_gpus(H100).unwrap();
        let a = parse_apps("4242, GPU-bbbb, 1024\r\n77, GPU-aaaa, [N/A]\n", &g).unwrap();
        assert_eq!(
            a[0],
            GpuProcess {
                pid: 4242,
                gpu: 1,
                used_memory: Some(1024 * MIB)
            }
        );
        assert_eq!(a[1].used_memory, None);
        assert!(parse_apps("", &g).unwrap().is_empty());
    }

    #[test]
    fn apps_on_an_unknown_gpu_are_not_charged_to_gpu_0() {
        // Recorded shape: a process row whose GPU UUID is not in the GPU list (it was on
        // GPU 0 before: 2 GiB charged to the wrong device).
        let g = parse_gpus(H100).unwrap();
        let a = parse_apps(
            "4242, GPU-bbbb, 1024\n5151, GPU-ffffffff-0000-1111-2222-333333333333, 2048\n",
            &g,
        )
        .unwrap();
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!((a[0].pid, a[0].gpu), (4242, 1));
        assert_eq!((a[1].pid, a[1].gpu), (5151, crate::gpu::UNKNOWN_GPU));
    }

    #[test]
    fn bad_rows_are_explained() {
        let e = parse_gpus("0, x, y\n").unwrap_err();
        assert!(e.contains("expected 15"), "{e}");
        assert!(parse_apps("x, y, 1\n", &[])
            .unwrap_err()
            .contains("bad pid"));
    }

    /// Found by the fuzz harness (b76a294): a memory value in MiB past u64 once in bytes
    /// (debug builds panicked on the overflow; release wrapped to nonsense). Saturates.
    #[test]
    fn regress_smi_memory_past_u64_in_bytes() {
        let g = parse_gpus("0,,,,,,,,,,,,,,\n1,,,,24897202737452,,,,,,,,,,").unwrap();
        assert_eq!(g[1].memory_total, Some(u64::MAX));
        let a = parse_apps("1, GPU-x, 24897202737452\n", &g).unwrap();
        assert_eq!(a[0].used_memory, Some(u64::MAX));
    }
}
