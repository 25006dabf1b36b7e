//! Which kind of filesystem holds a path: from /proc/self/mountinfo (the only place that
//! tells WSL's drvfs from other 9p mounts) with statfs magic as the fallback. Checkpoints on
//! 9p/drvfs are at risk (slow fsync, truncation under memory pressure), so callers warn.
//!
//! Test seam: `ROGER_MOUNTINFO=FILE` replaces /proc/self/mountinfo (test-only).

use serde::Serialize;
use std::path::{Component, Path, PathBuf};

/// The filesystem families roger cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FsClass {
    /// WSL's Windows drive mount (9p with `aname=drvfs`, or WSL1's `drvfs` type).
    Drvfs,
    /// Plain 9p / v9fs (e.g. WSL's /usr/lib/wsl/drivers, QEMU shares).
    #[serde(rename = "9p")]
    NineP,
    Virtiofs,
    Fuse,
    Nfs,
    Cifs,
    Overlay,
    Tmpfs,
    Ext4,
    Xfs,
    Btrfs,
    Zfs,
    Other,
}

impl FsClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FsClass::Drvfs => "drvfs",
            FsClass::NineP => "9p",
            FsClass::Virtiofs => "virtiofs",
            FsClass::Fuse => "fuse",
            FsClass::Nfs => "nfs",
            FsClass::Cifs => "cifs",
            FsClass::Overlay => "overlay",
            FsClass::Tmpfs => "tmpfs",
            FsClass::Ext4 => "ext4",
            FsClass::Xfs => "xfs",
            FsClass::Btrfs => "btrfs",
            FsClass::Zfs => "zfs",
            FsClass::Other => "other",
        }
    }

    /// 9p and drvfs: checkpoints and the ledger should not live here.
    pub fn is_9p(self) -> bool {
        matches!(self, FsClass::Drvfs | FsClass::NineP)
    }

    /// A short note on what the kind means for checkpoints, where it matters.
    pub fn caution(self) -> Option<&'static str> {
        match self {
            FsClass::Drvfs => Some("Windows drive over 9p: slow, fsync is weak, writes can be truncated under memory pressure; keep checkpoints on the Linux filesystem"),
            FsClass::NineP => Some("9p network share: slow, fsync is weak, writes can be truncated under memory pressure"),
            FsClass::Tmpfs => Some("tmpfs lives in RAM: gone on reboot"),
            FsClass::Nfs | FsClass::Cifs => Some("network filesystem: rename/fsync semantics depend on the server"),
            FsClass::Fuse | FsClass::Virtiofs => Some("FUSE/virtiofs: durability depends on the backing daemon"),
            _ => None,
        }
    }
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
    pub super_options: String,
}

/// What a path lives on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FsKind {
    pub class: FsClass,
    /// The raw type (`9p`, `fuse.sshfs`, `ext4`, or `magic 0x...` from statfs).
    pub fstype: String,
    pub mount_point: Option<PathBuf>,
    pub source: Option<String>,
}

/// Parse mountinfo text. Lines that do not have the `-` separator are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            if sep < 6 || fields.len() < sep + 3 {
                return None;
            }
            Some(Mount {
                mount_point: PathBuf::from(unescape(fields[4])),
                fstype: fields[sep + 1].to_string(),
                source: unescape(fields[sep + 2]),
                super_options: fields.get(sep + 3).copied().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The class of a mount, from its type and superblock options.
pub fn classify(m: &Mount) -> FsClass {
    let t = m.fstype.as_str();
    match t {
        "drvfs" => FsClass::Drvfs,
        "9p" | "v9fs" => {
            let drvfs = m
                .super_options
                .split([',', ';'])
                .any(|o| o == "aname=drvfs");
            if drvfs {
                FsClass::Drvfs
            } else {
                FsClass::NineP
            }
        }
        "virtiofs" => FsClass::Virtiofs,
        "nfs" | "nfs4" => FsClass::Nfs,
        "cifs" | "smb3" | "smbfs" => FsClass::Cifs,
        "overlay" | "overlayfs" => FsClass::Overlay,
        "tmpfs" | "ramfs" => FsClass::Tmpfs,
        "ext4" | "ext3" | "ext2" => FsClass::Ext4,
        "xfs" => FsClass::Xfs,
        "btrfs" => FsClass::Btrfs,
        "zfs" => FsClass::Zfs,
        _ if t == "fuse" || t == "fuseblk" || t.starts_with("fuse.") => FsClass::Fuse,
        _ => FsClass::Other,
    }
}

/// The class for a statfs `f_type` magic number.
pub fn from_magic(magic: u64) -> FsClass {
    match magic {
        0x0102_1997 => FsClass::NineP,
        0x6573_5546 => FsClass::Fuse,
        0x6969 => FsClass::Nfs,
        0xFF53_4D42 | 0xFE53_4D42 => FsClass::Cifs,
        0x794c_7630 => FsClass::Overlay,
        0x0102_1994 => FsClass::Tmpfs,
        0xEF53 => FsClass::Ext4,
        0x5846_5342 => FsClass::Xfs,
        0x9123_683E => FsClass::Btrfs,
        0x2fc1_2fc1 => FsClass::Zfs,
        _ => FsClass::Other,
    }
}

/// The mount holding an absolute, normalised path: the longest mount point that is a
/// component-wise prefix (the last one listed wins a tie: it is mounted on top).
pub fn mount_of<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    let mut best: Option<&Mount> = None;
    for m in mounts {
        if path.starts_with(&m.mount_point) {
            let longer = best.is_none_or(|b| {
                m.mount_point.components().count() >= b.mount_point.components().count()
            });
            if longer {
                best = Some(m);
            }
        }
    }
    best
}

/// The kind of filesystem under `path`, judged from mountinfo text.
pub fn kind_in(mounts: &[Mount], path: &Path) -> Option<FsKind> {
    let m = mount_of(mounts, path)?;
    Some(FsKind {
        class: classify(m),
        fstype: m.fstype.clone(),
        mount_point: Some(m.mount_point.clone()),
        source: Some(m.source.clone()),
    })
}

/// An absolute path with `..`/symlinks resolved as far as it exists; the rest is appended
/// (a checkpoint dir that does not exist yet still lands on the right mount).
pub fn resolve(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut existing = abs.clone();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            let mut out = c;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return normalise(&out);
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => return normalise(&abs),
        }
    }
}

fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The mount table: `ROGER_MOUNTINFO` (tests) or /proc/self/mountinfo.
pub fn read_mounts() -> Option<Vec<Mount>> {
    let path = std::env::var_os("ROGER_MOUNTINFO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/proc/self/mountinfo"));
    std::fs::read_to_string(path)
        .ok()
        .map(|t| parse_mountinfo(&t))
}

/// The filesystem kind of a real path: mountinfo first, statfs magic when that fails.
pub fn kind_of(path: &Path) -> FsKind {
    let p = resolve(path);
    if let Some(k) = read_mounts().and_then(|m| kind_in(&m, &p)) {
        return k;
    }
    statfs_kind(&p)
}

fn statfs_kind(path: &Path) -> FsKind {
    let mut p = path;
    while !p.exists() {
        match p.parent() {
            Some(parent) => p = parent,
            None => break,
        }
    }
    match nix::sys::statfs::statfs(p) {
        Ok(st) => {
            let magic = st.filesystem_type().0 as u64;
            FsKind {
                class: from_magic(magic),
                fstype: format!("magic {magic:#x}"),
                mount_point: None,
                source: None,
            }
        }
        Err(e) => FsKind {
            class: FsClass::Other,
            fstype: format!("unknown (statfs: {e})"),
            mount_point: None,
            source: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WSL2: &str = "\
61 1 8:48 / / rw,relatime - ext4 /dev/sdd rw,discard,errors=remount-ro,data=ordered
72 61 0:40 / /usr/lib/wsl/drivers ro,nosuid,nodev,noatime - 9p none ro,dirsync,aname=drivers;fmask=222;dmask=222,mmap,access=client,msize=65536,trans=fd,rfd=7,wfd=7
90 61 0:54 / /mnt/c rw,noatime - 9p C:\\134 rw,dirsync,aname=drvfs;path=C:\\;uid=1000;gid=1000;symlinkroot=/mnt/,mmap,access=client,msize=65536,trans=fd,rfd=5,wfd=5
91 61 0:55 / /mnt/my\\040data rw - ext4 /dev/sde rw
";

    #[test]
    fn drvfs_is_told_from_other_9p() {
        let m = parse_mountinfo(WSL2);
        assert_eq!(m.len(), 4);
        let k = kind_in(&m, Path::new("/mnt/c/Users/me/ckpt")).unwrap();
        assert_eq!(k.class, FsClass::Drvfs);
        assert_eq!(k.source.as_deref(), Some("C:\\"));
        let k = kind_in(&m, Path::new("/usr/lib/wsl/drivers/x")).unwrap();
        assert_eq!(k.class, FsClass::NineP);
        assert_eq!(
            kind_in(&m, Path::new("/home/me")).unwrap().class,
            FsClass::Ext4
        );
        // /mnt/cx is not under /mnt/c: component-wise prefix.
        assert_eq!(
            kind_in(&m, Path::new("/mnt/cx")).unwrap().mount_point,
            Some(PathBuf::from("/"))
        );
        assert_eq!(
            kind_in(&m, Path::new("/mnt/my data/a"))
                .unwrap()
                .mount_point,
            Some(PathBuf::from("/mnt/my data"))
        );
    }

    #[test]
    fn classes_from_types() {
        let mk = |t: &str, o: &str| Mount {
            mount_point: "/".into(),
            fstype: t.into(),
            source: "x".into(),
            super_options: o.into(),
        };
        assert_eq!(classify(&mk("drvfs", "rw")), FsClass::Drvfs);
        assert_eq!(classify(&mk("fuse.sshfs", "rw")), FsClass::Fuse);
        assert_eq!(classify(&mk("nfs4", "rw")), FsClass::Nfs);
        assert_eq!(classify(&mk("smb3", "rw")), FsClass::Cifs);
        assert_eq!(classify(&mk("virtiofs", "rw")), FsClass::Virtiofs);
        assert_eq!(classify(&mk("overlay", "rw")), FsClass::Overlay);
        assert_eq!(classify(&mk("9p", "aname=drvfs,x")), FsClass::Drvfs);
        assert!(FsClass::Drvfs.is_9p() && FsClass::NineP.is_9p() && !FsClass::Fuse.is_9p());
    }

    #[test]
    fn magic_numbers() {
        assert_eq!(from_magic(0x01021997), FsClass::NineP);
        assert_eq!(from_magic(0x65735546), FsClass::Fuse);
        assert_eq!(from_magic(0xEF53), FsClass::Ext4);
        assert_eq!(from_magic(0x794c7630), FsClass::Overlay);
        assert_eq!(from_magic(0xFE534D42), FsClass::Cifs);
        assert_eq!(from_magic(1), FsClass::Other);
    }

    #[test]
    fn later_mount_on_same_point_wins() {
        let text = "1 0 0:1 / / rw - ext4 a rw\n2 1 0:2 / /x rw - ext4 b rw\n3 1 0:3 / /x rw - tmpfs c rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(
            kind_in(&m, Path::new("/x/y")).unwrap().class,
            FsClass::Tmpfs
        );
    }

    #[test]
    fn resolve_appends_missing_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/../b/c");
        let r = resolve(&p);
        assert_eq!(r, dir.path().canonicalize().unwrap().join("b/c"));
    }

    #[test]
    fn real_root_has_a_kind() {
        let k = kind_of(Path::new("/"));
        assert!(!k.fstype.is_empty());
    }
}

#[cfg(test)]
mod fixture_tests {
    use super::*;

    fn fixture(name: &str) -> Vec<Mount> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/mountinfo")
            .join(name);
        parse_mountinfo(&std::fs::read_to_string(p).unwrap())
    }

    #[test]
    fn fixtures_classify() {
        let class = |f: &str, p: &str| kind_in(&fixture(f), Path::new(p)).unwrap().class;
        assert_eq!(class("wsl2.txt", "/mnt/c/runs"), FsClass::Drvfs);
        assert_eq!(class("wsl2.txt", "/usr/lib/wsl/drivers"), FsClass::NineP);
        assert_eq!(class("wsl2.txt", "/home/me"), FsClass::Ext4);
        assert_eq!(class("native_ext4.txt", "/data/ckpt"), FsClass::Xfs);
        assert_eq!(class("native_ext4.txt", "/home"), FsClass::Ext4);
        assert_eq!(class("nfs.txt", "/shared/ckpt"), FsClass::Nfs);
        assert_eq!(class("nfs.txt", "/scratch"), FsClass::Fuse);
        assert_eq!(class("overlay.txt", "/app"), FsClass::Overlay);
        assert_eq!(class("overlay.txt", "/workspace/ckpt"), FsClass::Ext4);
    }
}
