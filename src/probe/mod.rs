//! `roger probe`'s domain: read the GPUs, who holds their VRAM (and whether it looks
//! orphaned), host memory, the disks and filesystem kinds of the run's paths, WSL's host
//! drive and the Windows-side view of VRAM; then judge it all into findings. Judgement is in
//! the pure `judge_*` functions; `collect.rs` is the edge that reads the machine.

mod collect;
pub use collect::{collect, ProbeInputs};

use crate::config::DiskConfig;
use crate::gpu::checks::{self, Finding, Level};
use crate::gpu::xid::KernelXids;
use crate::gpu::{GpuInfo, GpuSnapshot};
use crate::sys::disk::Space;
use crate::sys::fskind::{self, FsKind};
use crate::sys::host::Memory;
use crate::sys::pidinfo::PidInfo;
use crate::sys::wsl::{Limit, Wsl};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// A process holding VRAM, with what /proc and the ledger say about it.
#[derive(Debug, Clone, Serialize)]
pub struct Holder {
    pub pid: u32,
    pub gpu: u32,
    /// None under WDDM (WSL2/Windows): the driver does not report per-process VRAM.
    pub used_memory: Option<u64>,
    pub cmdline: Option<String>,
    pub visible: bool,
    pub ppid: Option<u32>,
    pub parent_comm: Option<String>,
    /// Part of a run the ledger knows (a watch/relaunch record names it or an ancestor).
    pub known_run: bool,
    /// Why it looks orphaned, if it does.
    pub orphaned: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PathReport {
    /// What the path is for: "checkpoints", "ledger", "log", "run dir", "quarantine", "host drive".
    pub role: String,
    pub path: PathBuf,
    pub fs: FsKind,
    pub space: Option<Space>,
    /// Free space that really counts (the host drive's on WSL2 when it has less).
    pub headroom: Option<u64>,
    pub limited_by: Option<Limit>,
    pub error: Option<String>,
}

/// The Windows side's view through nvidia-smi.exe (WSL interop).
#[derive(Debug, Clone, Serialize)]
pub struct HostView {
    pub program: PathBuf,
    pub snapshot: Option<GpuSnapshot>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub gpu_source: Option<String>,
    /// The reader in words: "NVML (libnvidia-ml.so.1 at /usr/lib/...)", "nvidia-smi (...)".
    pub gpu_reader: Option<String>,
    /// Why `auto` is not reading through NVML (it fell back to nvidia-smi).
    pub gpu_fallback: Option<String>,
    /// roger's PID namespace when it is not the host's (a container): GPU PIDs are the host's.
    pub pid_namespace: Option<String>,
    pub gpus: Vec<GpuInfo>,
    /// Why no GPU could be read (None when it could).
    pub gpu_error: Option<String>,
    pub no_gpu: bool,
    pub holders: Vec<Holder>,
    /// Per-process VRAM is not reported (WDDM).
    pub per_process_vram_unavailable: bool,
    pub host_view: Option<HostView>,
    pub memory: Option<Memory>,
    pub memory_error: Option<String>,
    pub wsl: Option<Wsl>,
    pub paths: Vec<PathReport>,
    pub kernel_xids: KernelXids,
    pub findings: Vec<Finding>,
    /// ok | warn | fail | unknown.
    pub status: String,
    pub exit_code: u8,
    /// `--pid`: the ranks in that process's tree (torchrun's workers), with their GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Vec<crate::ranks::Rank>>,
}

/// Init-like processes an orphan is reparented to (PID 1 or a subreaper).
const INIT_LIKE: [&str; 8] = [
    "systemd",
    "init",
    "tini",
    "docker-init",
    "dumb-init",
    "catatonit",
    "s6-svscan",
    "runit",
];

/// Why a VRAM holder looks orphaned, or None. `known` holds PIDs the ledger's watch/relaunch
/// records name; `ledger_knows_runs` says whether there are any (else that test is skipped).
pub fn judge_holder(
    info: &PidInfo,
    ancestors: &[u32],
    known: &BTreeSet<u32>,
) -> (bool, Option<String>) {
    let known_run = known.contains(&info.pid) || ancestors.iter().any(|a| known.contains(a));
    if known_run {
        return (true, None);
    }
    if info.visible {
        let reparented = info.ppid == Some(1)
            || info
                .parent_comm
                .as_deref()
                .is_some_and(|c| INIT_LIKE.contains(&c));
        let leader_gone = info.pgid != Some(info.pid) && info.pgid_leader_alive == Some(false);
        if reparented && leader_gone {
            return (
                false,
                Some(format!(
                    "parent gone: reparented to {} and its process group leader {} has exited",
                    info.parent_comm
                        .as_deref()
                        .map_or("PID 1".to_string(), |c| format!(
                            "{c} (PID {})",
                            info.ppid.unwrap_or(1)
                        )),
                    info.pgid.unwrap_or(0)
                )),
            );
        }
    }
    if !known.is_empty() {
        return (false, Some("not part of any run the ledger knows".into()));
    }
    (false, None)
}

/// Findings about VRAM holders.
pub fn judge_holders(holders: &[Holder]) -> Vec<Finding> {
    let mut out = Vec::new();
    for h in holders {
        if let Some(why) = &h.orphaned {
            let mem = h.used_memory.map_or("n/a".into(), fmt_bytes);
            out.push(Finding::new(
                Level::Warn,
                "orphan",
                format!(
                    "PID {} on GPU {} holds {mem} of VRAM and looks orphaned ({why}): {}",
                    h.pid,
                    h.gpu,
                    h.cmdline.as_deref().unwrap_or("command line not visible")
                ),
            ));
        } else if !h.visible {
            out.push(Finding::new(Level::Info, "vram", format!("PID {} on GPU {} holds VRAM but is not visible here (exited, or another PID namespace)", h.pid, h.gpu)));
        }
    }
    out
}

/// Findings for one path: 9p/drvfs under checkpoints or the ledger warns; free space
/// against `[disk] warn_free/fail_free`.
pub fn judge_path(p: &PathReport, disk: &DiskConfig) -> Vec<Finding> {
    let mut out = Vec::new();
    let critical_role = p.role == "checkpoints" || p.role == "ledger";
    if p.fs.class.is_9p() {
        let level = if critical_role {
            Level::Warn
        } else {
            Level::Info
        };
        out.push(Finding::new(
            level,
            "fs",
            format!(
                "{} {} is on {} ({}): {}",
                p.role,
                p.path.display(),
                p.fs.class.as_str(),
                p.fs.fstype,
                p.fs.class.caution().unwrap_or("")
            ),
        ));
    } else if let Some(c) = p.fs.class.caution().filter(|_| critical_role) {
        out.push(Finding::new(
            Level::Info,
            "fs",
            format!(
                "{} {} is on {}: {c}",
                p.role,
                p.path.display(),
                p.fs.class.as_str()
            ),
        ));
    }
    match (p.headroom, &p.error) {
        (Some(free), _) => {
            let by = if p.limited_by == Some(Limit::Host) {
                " (limited by the Windows host drive under the WSL2 VHDX)"
            } else {
                ""
            };
            let level = if free < disk.fail_free.0 {
                Level::Fail
            } else if free < disk.warn_free.0 {
                Level::Warn
            } else {
                Level::Ok
            };
            if level != Level::Ok {
                let limit = if level == Level::Fail {
                    disk.fail_free.0
                } else {
                    disk.warn_free.0
                };
                out.push(Finding::new(
                    level,
                    "disk",
                    format!(
                        "{} {}: {} free{by}, below the {} level of {}",
                        p.role,
                        p.path.display(),
                        fmt_bytes(free),
                        level.as_str(),
                        fmt_bytes(limit)
                    ),
                ));
            }
        }
        (None, Some(e)) => out.push(Finding::new(
            Level::Info,
            "disk",
            format!("{} {}: free space unknown: {e}", p.role, p.path.display()),
        )),
        (None, None) => {}
    }
    out
}

/// The status word and exit code: worst finding; unknown when the GPU read itself failed
/// and nothing worse was found.
pub fn status(findings: &[Finding], gpu_failed: bool) -> (&'static str, u8) {
    match checks::worst(findings) {
        Level::Fail => ("fail", crate::exit::FAIL),
        Level::Warn => ("warn", crate::exit::WARN),
        _ if gpu_failed => ("unknown", crate::exit::UNKNOWN),
        _ => ("ok", crate::exit::OK),
    }
}

pub fn fmt_bytes(b: u64) -> String {
    const G: f64 = (1u64 << 30) as f64;
    const M: f64 = (1u64 << 20) as f64;
    let f = b as f64;
    if f >= 1024.0 * G {
        format!("{:.1} TiB", f / G / 1024.0)
    } else if f >= G {
        format!("{:.1} GiB", f / G)
    } else {
        format!("{:.0} MiB", f / M)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Bytes;
    use crate::sys::fskind::FsClass;

    fn info(pid: u32, ppid: u32, pgid: u32, leader_alive: bool) -> PidInfo {
        PidInfo {
            pid,
            visible: true,
            cmdline: Some("python train.py".into()),
            ppid: Some(ppid),
            pgid: Some(pgid),
            parent_comm: Some("bash".into()),
            pgid_leader_alive: Some(leader_alive),
        }
    }

    #[test]
    fn orphan_needs_reparenting_and_a_dead_group_leader() {
        let none = BTreeSet::new();
        assert!(judge_holder(&info(50, 1, 40, false), &[1], &none)
            .1
            .unwrap()
            .contains("parent gone"));
        // Detached on purpose (own group), or parent alive: not orphaned.
        assert_eq!(judge_holder(&info(50, 1, 50, true), &[1], &none).1, None);
        assert_eq!(
            judge_holder(&info(50, 30, 40, false), &[30, 1], &none).1,
            None
        );
        let mut i = info(50, 900, 40, false);
        i.parent_comm = Some("systemd".into());
        assert!(judge_holder(&i, &[900, 1], &none).1.is_some());
    }

    #[test]
    fn ledger_known_runs() {
        let known: BTreeSet<u32> = [30].into();
        assert_eq!(
            judge_holder(&info(50, 30, 30, true), &[30, 1], &known),
            (true, None)
        );
        let (k, why) = judge_holder(&info(60, 20, 20, true), &[20, 1], &known);
        assert!(!k && why.unwrap().contains("ledger"));
        let invisible = PidInfo {
            pid: 70,
            visible: false,
            cmdline: None,
            ppid: None,
            pgid: None,
            parent_comm: None,
            pgid_leader_alive: None,
        };
        assert!(judge_holder(&invisible, &[], &known).1.is_some());
        assert_eq!(judge_holder(&invisible, &[], &BTreeSet::new()).1, None);
    }

    fn path(role: &str, class: FsClass, free: u64) -> PathReport {
        PathReport {
            role: role.into(),
            path: "/x".into(),
            fs: FsKind {
                class,
                fstype: "9p".into(),
                mount_point: None,
                source: None,
            },
            space: None,
            headroom: Some(free),
            limited_by: Some(Limit::Path),
            error: None,
        }
    }

    #[test]
    fn paths_judged() {
        let disk = DiskConfig {
            warn_free: Bytes(20 << 30),
            fail_free: Bytes(5 << 30),
            ..Default::default()
        };
        assert!(judge_path(&path("checkpoints", FsClass::Ext4, 100 << 30), &disk).is_empty());
        assert_eq!(
            checks::worst(&judge_path(
                &path("checkpoints", FsClass::Drvfs, 100 << 30),
                &disk
            )),
            Level::Warn
        );
        assert_eq!(
            checks::worst(&judge_path(&path("log", FsClass::Drvfs, 100 << 30), &disk)),
            Level::Info
        );
        assert_eq!(
            checks::worst(&judge_path(&path("log", FsClass::Ext4, 10 << 30), &disk)),
            Level::Warn
        );
        assert_eq!(
            checks::worst(&judge_path(&path("log", FsClass::Ext4, 1 << 30), &disk)),
            Level::Fail
        );
    }

    #[test]
    fn status_words() {
        assert_eq!(status(&[], false), ("ok", 0));
        assert_eq!(status(&[], true), ("unknown", 3));
        assert_eq!(
            status(&[Finding::new(Level::Warn, "x", "")], true),
            ("warn", 1)
        );
    }
}
