//! The edge of `roger probe`: reads the GPUs, /proc, the disks, mountinfo, WSL and the
//! kernel log, and feeds the pure judges in `probe/mod.rs`.

use super::*;
use crate::config::Config;
use crate::gpu::xid;
use crate::gpu::{GpuError, GpuReader};
use crate::sys::host::{self, Pressure};
use crate::sys::pidinfo;
use crate::sys::wsl;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The run's paths worth checking, by role.
pub fn config_paths(cfg: Option<&Config>) -> Vec<(String, PathBuf)> {
    let Some(c) = cfg else {
        return vec![(
            "run dir".into(),
            std::env::current_dir().unwrap_or_else(|_| ".".into()),
        )];
    };
    let mut v = vec![("run dir".to_string(), c.base_dir())];
    if let Some(d) = &c.run.checkpoint_dir {
        v.push(("checkpoints".into(), d.clone()));
    }
    v.push(("ledger".into(), c.ledger_path()));
    if let Some(l) = &c.run.log {
        let now = crate::metrics::locate::resolve(l).unwrap_or_else(|| l.clone());
        v.push(("log".into(), now));
    }
    v.push(("quarantine".into(), c.quarantine_dir()));
    v
}

/// PIDs the ledger's watch/relaunch records name (`pid`, `child_pid`, `pgid`, `pids`).
pub fn known_pids(ledger: Option<&Path>) -> BTreeSet<u32> {
    use crate::ledger::{Kind, Ledger};
    let mut out = BTreeSet::new();
    let Some(path) = ledger.filter(|p| p.exists()) else {
        return out;
    };
    let Ok(records) = Ledger::new(path).records() else {
        return out;
    };
    for r in records
        .iter()
        .filter(|r| matches!(r.kind, Kind::Watch | Kind::Relaunch))
    {
        for key in ["pid", "child_pid", "pgid"] {
            if let Some(p) = r.u64_field(key) {
                out.insert(p as u32);
            }
        }
        if let Some(arr) = r.get("pids").and_then(|v| v.as_array()) {
            out.extend(arr.iter().filter_map(|v| v.as_u64()).map(|p| p as u32));
        }
    }
    out
}

/// What `collect` needs besides the reader.
pub struct ProbeInputs<'a> {
    pub cfg: Option<&'a Config>,
    pub disk: DiskConfig,
    /// A GPU is expected (`[gpu] source` is not "none"): seeing none is "unknown", not ok.
    pub gpu_expected: bool,
}

/// Read the machine and judge it.
pub fn collect(inputs: &ProbeInputs, reader: &mut dyn GpuReader) -> ProbeReport {
    let mut findings = Vec::new();
    let (snap, gpu_error, no_gpu) = match reader.read() {
        Ok(s) => (Some(s), None, false),
        Err(e @ GpuError::NoGpu(_)) => (None, Some(e.to_string()), true),
        Err(e) => (None, Some(e.to_string()), false),
    };
    if let Some(e) = &gpu_error {
        // Not judged either way: a failed read makes the status "unknown" unless worse is found.
        let words = if no_gpu && inputs.gpu_expected {
            format!("no GPU visible: {e}; on a machine without one set [gpu] source = \"none\"")
        } else {
            e.clone()
        };
        findings.push(Finding::new(Level::Info, "gpu", words));
    }
    let gpu_reader = Some(reader.describe()).filter(|d| !d.is_empty());
    let gpu_fallback = reader.fallback();
    if let Some(why) = &gpu_fallback {
        findings.push(Finding::new(Level::Warn, "reader", why.clone()));
    }
    let pid_namespace = snap
        .as_ref()
        .filter(|s| s.foreign_pids)
        .map(|_| crate::gpu::pidns::current_link().unwrap_or_else(|| "unknown".into()));
    let known = known_pids(inputs.cfg.map(|c| c.ledger_path()).as_deref());
    let mut holders = Vec::new();
    if let Some(s) = &snap {
        for g in &s.gpus {
            findings.extend(checks::judge_gpu(g));
        }
        if let Some(ns) = &pid_namespace {
            findings.push(Finding::new(Level::Info, "pid_namespace", format!(
                "roger runs in its own PID namespace ({ns}, a container) and the driver reports host PIDs: {} VRAM holder(s) listed but not matched to processes here, so none is judged orphaned or part of a run",
                s.processes.len()
            )));
        }
        for p in &s.processes {
            if pid_namespace.is_some() {
                holders.push(Holder {
                    pid: p.pid,
                    gpu: p.gpu,
                    used_memory: p.used_memory,
                    cmdline: None,
                    visible: false,
                    ppid: None,
                    parent_comm: None,
                    known_run: false,
                    orphaned: None,
                });
                continue;
            }
            let info = pidinfo::pid_info(p.pid);
            let anc = if info.visible {
                pidinfo::ancestors(p.pid)
            } else {
                Vec::new()
            };
            let (known_run, orphaned) = judge_holder(&info, &anc, &known);
            holders.push(Holder {
                pid: p.pid,
                gpu: p.gpu,
                used_memory: p.used_memory,
                cmdline: info.cmdline,
                visible: info.visible,
                ppid: info.ppid,
                parent_comm: info.parent_comm,
                known_run,
                orphaned,
            });
        }
    }
    if pid_namespace.is_none() {
        findings.extend(judge_holders(&holders));
    }
    let per_process_vram_unavailable = holders.iter().any(|h| h.used_memory.is_none());
    if per_process_vram_unavailable {
        findings.push(Finding::new(Level::Info, "vram", "per-process VRAM is not available from the driver (WDDM: WSL2/Windows); shown as n/a, not 0"));
    }

    let (memory, memory_error) = match host::memory() {
        Ok(m) => {
            let (p, what) = host::pressure(&m);
            let level = match p {
                Pressure::Ok => Level::Ok,
                Pressure::Warn => Level::Warn,
                Pressure::Fail => Level::Fail,
            };
            if level != Level::Ok {
                findings.push(Finding::new(level, "memory", what));
            }
            (Some(m), None)
        }
        Err(e) => (None, Some(format!("{e:#}"))),
    };

    let wsl = wsl::detect();
    let mounts = fskind::read_mounts().unwrap_or_default();
    let host = wsl
        .as_ref()
        .and_then(|_| wsl::host_disk(inputs.disk.host.as_deref(), &mounts));
    let host_space = host.as_ref().and_then(|(_, s)| s.as_ref().ok().copied());
    let mut paths = Vec::new();
    for (role, path) in config_paths(inputs.cfg) {
        paths.push(path_report(&role, &path, host_space));
    }
    if let Some((drive, space)) = &host {
        let mut r = path_report("host drive", drive, None);
        if let Err(e) = space {
            r.space = None;
            r.headroom = None;
            r.error = Some(format!("{e:#}"));
        }
        paths.push(r);
    }
    for p in &paths {
        findings.extend(judge_path(p, &inputs.disk));
    }

    let host_view = wsl
        .as_ref()
        .and_then(|_| wsl::windows_nvidia_smi(host.as_ref().map(|(d, _)| d.as_path())))
        .map(|exe| {
            let mut r = crate::gpu::smi::SmiGpu::with(exe.clone(), "nvidia-smi.exe");
            match r.read() {
                Ok(s) => HostView {
                    program: exe,
                    snapshot: Some(s),
                    error: None,
                },
                Err(e) => HostView {
                    program: exe,
                    snapshot: None,
                    error: Some(e.to_string()),
                },
            }
        });

    let kernel_xids = xid::read_kernel_xids();
    findings.extend(xid::findings(&kernel_xids.xids));

    // No GPU where one is expected is "could not judge", never "ok".
    let (word, code) = status(
        &findings,
        gpu_error.is_some() && (!no_gpu || inputs.gpu_expected),
    );
    ProbeReport {
        gpu_source: snap.as_ref().map(|s| s.source.clone()),
        gpu_reader,
        gpu_fallback,
        pid_namespace,
        gpus: snap.map(|s| s.gpus).unwrap_or_default(),
        gpu_error,
        no_gpu,
        holders,
        per_process_vram_unavailable,
        host_view,
        memory,
        memory_error,
        wsl,
        paths,
        kernel_xids,
        findings,
        status: word.into(),
        exit_code: code,
        ranks: None,
    }
}

fn path_report(role: &str, path: &Path, host: Option<Space>) -> PathReport {
    let fs = fskind::kind_of(path);
    match crate::sys::disk::space_of(path) {
        Ok(space) => {
            let (headroom, limited_by) = wsl::headroom(space, fs.class, host);
            PathReport {
                role: role.into(),
                path: path.to_path_buf(),
                fs,
                space: Some(space),
                headroom: Some(headroom),
                limited_by: Some(limited_by),
                error: None,
            }
        }
        Err(e) => PathReport {
            role: role.into(),
            path: path.to_path_buf(),
            fs,
            space: None,
            headroom: None,
            limited_by: None,
            error: Some(format!("{e:#}")),
        },
    }
}
