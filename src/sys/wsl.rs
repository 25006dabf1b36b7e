//! WSL: detection, the Windows host drive behind a WSL2 VHDX, and the Windows-side
//! `nvidia-smi.exe` (the Linux side cannot see Windows processes' VRAM).
//!
//! On WSL2 the root filesystem is a VHDX whose `df` size is virtual: it can claim hundreds
//! of GiB free while the Windows drive that stores it is nearly full. The real headroom of
//! a path on the VHDX is the smaller of the two.
//!
//! Test seam: `ROGER_PROC_VERSION=FILE` replaces /proc/version (test-only).

use super::disk::Space;
use super::fskind::{classify, FsClass, Mount};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wsl {
    /// 1 or 2.
    pub version: u8,
    pub distro: Option<String>,
    /// Windows programs can be run from Linux (binfmt_misc WSLInterop is registered).
    pub interop: bool,
}

/// Pure detection from /proc/version text, `WSL_DISTRO_NAME` and the interop flag.
pub fn detect_from(proc_version: &str, distro: Option<&str>, interop: bool) -> Option<Wsl> {
    let v = proc_version.to_ascii_lowercase();
    if !v.contains("microsoft") && distro.is_none() {
        return None;
    }
    // WSL2 kernels: "...-microsoft-standard-WSL2"; WSL1: "4.4.0-19041-Microsoft".
    let version = if v.contains("wsl2") || v.contains("microsoft-standard") {
        2
    } else if v.contains("microsoft") {
        1
    } else {
        2
    };
    Some(Wsl {
        version,
        distro: distro.filter(|d| !d.is_empty()).map(str::to_string),
        interop,
    })
}

/// Detect WSL on this machine.
pub fn detect() -> Option<Wsl> {
    let path = std::env::var_os("ROGER_PROC_VERSION")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/proc/version"));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let distro = std::env::var("WSL_DISTRO_NAME").ok();
    let interop = Path::new("/proc/sys/fs/binfmt_misc/WSLInterop").exists()
        || Path::new("/proc/sys/fs/binfmt_misc/WSLInterop-late").exists();
    detect_from(&text, distro.as_deref(), interop)
}

/// The Windows drive backing the VHDX: the configured one (`[disk] host`), else `/mnt/c`
/// when it is a drvfs mount, else the first drvfs mount.
pub fn host_drive(configured: Option<&Path>, mounts: &[Mount]) -> Option<PathBuf> {
    if let Some(p) = configured {
        return Some(p.to_path_buf());
    }
    let drvfs: Vec<&Mount> = mounts
        .iter()
        .filter(|m| classify(m) == FsClass::Drvfs)
        .collect();
    drvfs
        .iter()
        .find(|m| m.mount_point == Path::new("/mnt/c"))
        .or_else(|| drvfs.first())
        .map(|m| m.mount_point.clone())
}

/// Which side limits a path's free space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// The filesystem's own free space.
    Path,
    /// The Windows host drive under the VHDX has less.
    Host,
}

/// The headroom of a path: its own free space, or the host drive's when the path is on the
/// Linux side of WSL2 (not itself a drvfs mount) and the host has less.
pub fn headroom(path: Space, class: FsClass, host: Option<Space>) -> (u64, Limit) {
    match host {
        Some(h) if class != FsClass::Drvfs && h.avail < path.avail => (h.avail, Limit::Host),
        _ => (path.avail, Limit::Path),
    }
}

/// Free space of the host drive on WSL, when there is one: (drive, space or why not).
pub fn host_disk(
    configured: Option<&Path>,
    mounts: &[Mount],
) -> Option<(PathBuf, anyhow::Result<Space>)> {
    let drive = host_drive(configured, mounts)?;
    let space = if drive.exists() {
        super::disk::space_of(&drive)
    } else {
        Err(anyhow::anyhow!("{} does not exist", drive.display()))
    };
    Some((drive, space))
}

/// The Windows-side nvidia-smi.exe: on PATH (WSL appends the Windows PATH), else the usual
/// install places under the host drive.
pub fn windows_nvidia_smi(host: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = super::bounded::which("nvidia-smi.exe") {
        return Some(p);
    }
    let drive = host.unwrap_or(Path::new("/mnt/c"));
    [
        "Windows/System32/nvidia-smi.exe",
        "Program Files/NVIDIA Corporation/NVSMI/nvidia-smi.exe",
    ]
    .iter()
    .map(|rel| drive.join(rel))
    .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fskind::parse_mountinfo;

    #[test]
    fn detects_versions() {
        let w2 = "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@1c602f52c2e4) (gcc)";
        assert_eq!(detect_from(w2, Some("Ubuntu"), true).unwrap().version, 2);
        assert_eq!(detect_from(w2, None, false).unwrap().distro, None);
        let w1 =
            "Linux version 4.4.0-19041-Microsoft (Microsoft@Microsoft.com) (gcc version 5.4.0)";
        assert_eq!(detect_from(w1, None, false).unwrap().version, 1);
        let native = "Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)";
        assert!(detect_from(native, None, false).is_none());
        // Custom WSL kernels may drop "microsoft"; the distro variable still says WSL.
        assert!(detect_from(native, Some("Ubuntu"), true).is_some());
    }

    #[test]
    fn host_drive_prefers_configured_then_mnt_c() {
        let text = "\
1 0 8:48 / / rw - ext4 /dev/sdd rw
2 1 0:40 / /usr/lib/wsl/drivers ro - 9p none ro,aname=drivers;fmask=222
3 1 0:54 / /mnt/d rw - 9p D:\\134 rw,aname=drvfs;path=D:\\
4 1 0:55 / /mnt/c rw - 9p C:\\134 rw,aname=drvfs;path=C:\\
";
        let m = parse_mountinfo(text);
        assert_eq!(host_drive(None, &m), Some(PathBuf::from("/mnt/c")));
        assert_eq!(
            host_drive(Some(Path::new("/mnt/e")), &m),
            Some(PathBuf::from("/mnt/e"))
        );
        let native = parse_mountinfo("1 0 8:1 / / rw - ext4 /dev/sda rw\n");
        assert_eq!(host_drive(None, &native), None);
    }

    #[test]
    fn headroom_takes_the_smaller_side() {
        let vhdx = Space {
            total: 1 << 40,
            avail: 900 << 30,
        };
        let host = Space {
            total: 500 << 30,
            avail: 10 << 30,
        };
        assert_eq!(
            headroom(vhdx, FsClass::Ext4, Some(host)),
            (10 << 30, Limit::Host)
        );
        assert_eq!(
            headroom(vhdx, FsClass::Ext4, None),
            (900 << 30, Limit::Path)
        );
        // A path on the drive itself is already the host's own free space.
        assert_eq!(
            headroom(host, FsClass::Drvfs, Some(host)),
            (10 << 30, Limit::Path)
        );
    }
}
