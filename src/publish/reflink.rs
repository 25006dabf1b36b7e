//! Reflink snapshots (`FICLONE`): on btrfs, XFS (reflink=1) and bcachefs a clone shares the
//! source's blocks, costs no data copy, and keeps the bytes it was taken with when the source
//! is later overwritten or deleted. `publish --detach` snapshots the source this way so the
//! caller may reuse its file at once; elsewhere (ext4, tmpfs, across filesystems) the clone is
//! refused and the caller must leave the source alone until it is published. What a
//! destination can do is learnt on the first try and remembered (`MEMORY` in its queue dir,
//! per source filesystem), so later detaches there skip a try bound to fail.

use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why no snapshot was taken, in words (for the record and stderr).
pub type Refused = String;

/// The queue dir's memory of what the destination can do, per source filesystem.
pub const MEMORY: &str = "reflink.known";

/// What the first try found for sources on one filesystem (device number).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Known {
    pub reflink: bool,
    pub why: Option<String>,
    pub learned_at: String,
}

fn memory(queue_dir: &Path) -> std::collections::BTreeMap<String, Known> {
    // Unreadable (edited, torn): as if nothing were known; the next try writes it anew.
    std::fs::read_to_string(queue_dir.join(MEMORY))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn key(dev: u64) -> String {
    format!("source device {dev}")
}

/// What is known of snapshots from sources on device `dev` into this queue dir.
pub fn remembered(queue_dir: &Path, dev: u64) -> Option<Known> {
    memory(queue_dir).remove(&key(dev))
}

/// Remember (durably: a destination that cannot clone is then never tried again) what a try
/// found.
pub fn remember(
    queue_dir: &Path,
    dev: u64,
    reflink: bool,
    why: Option<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<()> {
    let mut all = memory(queue_dir);
    all.insert(
        key(dev),
        Known {
            reflink,
            why: why.map(str::to_string),
            learned_at: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        },
    );
    super::manifest::write_json(queue_dir, MEMORY, &all)?;
    Ok(())
}

fn clone_file(src: &Path, dst: &Path) -> std::result::Result<(), std::io::Error> {
    let input = File::open(src)?;
    let out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(dst)?;
    // SAFETY: FICLONE takes the source descriptor as its argument; both fds are open.
    let r = unsafe { libc::ioctl(out.as_raw_fd(), libc::FICLONE, input.as_raw_fd()) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        drop(out);
        let _ = std::fs::remove_file(dst);
        return Err(e);
    }
    // Not synced here: the caller returns to the training loop at once, and a clone's fsync
    // waits on the filesystem's commit behind every write in flight (btrfs: seconds). The
    // publisher makes it durable as it takes the request in ([`make_durable`]).
    Ok(())
}

/// Make a snapshot the caller took durable: its files synced, then every directory of its
/// tree and the queue directory that holds it. The publisher does this as it takes the
/// request in (within about 0.1 s of the caller's return); a crash before that may lose the
/// clone, and the publish then fails its check of the snapshot against the request's stamps,
/// with the reason recorded, rather than publish other bytes.
pub fn make_durable(snapshot: &Path) -> Result<()> {
    let root = snapshot
        .parent()
        .with_context(|| format!("{} has no parent", snapshot.display()))?;
    let mut files = vec![snapshot.to_path_buf()];
    let mut i = 0;
    while i < files.len() {
        let p = files[i].clone();
        i += 1;
        if p.is_dir() {
            for e in std::fs::read_dir(&p).with_context(|| format!("reading {}", p.display()))? {
                files.push(e?.path());
            }
        } else {
            File::open(&p)
                .and_then(|f| f.sync_all())
                .with_context(|| format!("fsync of {}", p.display()))?;
        }
    }
    crate::sys::fsx::fsync_tree(root)?;
    if let Some(queue_dir) = root.parent() {
        crate::sys::fsx::fsync_dir(queue_dir)?;
    }
    Ok(())
}

/// Clone `src` (a file, or a tree given as its files `(rel, path)`) to `dst`, which must not
/// exist. `Ok(Err(why))`: the filesystem cannot clone (nothing is left behind); `Err`: a real
/// failure.
pub fn snapshot(
    src: &Path,
    files: &[(String, &Path)],
    dst: &Path,
) -> Result<std::result::Result<(), Refused>> {
    let refused = |e: &std::io::Error| {
        matches!(
            e.raw_os_error(),
            Some(libc::EOPNOTSUPP | libc::EXDEV | libc::EINVAL | libc::ENOTTY | libc::ENOSYS)
        )
    };
    let is_dir = src.is_dir();
    if is_dir {
        super::failpoint::count(super::failpoint::Op::MakeDir);
        std::fs::create_dir(dst).with_context(|| format!("creating {}", dst.display()))?;
    }
    for (rel, path) in files {
        let to = if is_dir {
            dst.join(rel)
        } else {
            dst.to_path_buf()
        };
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        if let Err(e) = clone_file(path, &to) {
            let _ = super::place::remove_any(dst);
            if refused(&e) {
                return Ok(Err(format!(
                    "no reflink snapshot ({e}: the filesystem cannot clone, or the source is on another filesystem than the destination)"
                )));
            }
            return Err(e)
                .with_context(|| format!("cloning {} to {}", path.display(), to.display()));
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filesystem_without_reflinks_refuses_cleanly() {
        // /tmp here is ext4 or tmpfs: no FICLONE. (The reflink itself is tested on a btrfs
        // loop image in tests/publish/detach.rs.)
        let d = tempfile::tempdir().unwrap();
        let fs = nix::sys::statfs::statfs(d.path())
            .unwrap()
            .filesystem_type();
        if fs == nix::sys::statfs::BTRFS_SUPER_MAGIC || fs == nix::sys::statfs::XFS_SUPER_MAGIC {
            eprintln!("SKIPPED: the temp dir is on a reflink-capable filesystem");
            return;
        }
        let src = d.path().join("a");
        std::fs::write(&src, b"bytes").unwrap();
        let dst = d.path().join("snap");
        let r = snapshot(&src, &[(String::new(), src.as_path())], &dst).unwrap();
        assert!(r.unwrap_err().contains("no reflink snapshot"));
        assert!(!dst.exists(), "nothing left behind");
    }

    #[test]
    fn what_a_try_found_is_remembered_per_source_filesystem() {
        let d = tempfile::tempdir().unwrap();
        let now = chrono::Utc::now();
        assert_eq!(remembered(d.path(), 7), None);
        remember(d.path(), 7, false, Some("no reflink snapshot (x)"), now).unwrap();
        remember(d.path(), 8, true, None, now).unwrap();
        let k = remembered(d.path(), 7).unwrap();
        assert!(!k.reflink && k.why.as_deref() == Some("no reflink snapshot (x)"));
        assert!(remembered(d.path(), 8).unwrap().reflink);
        std::fs::write(d.path().join(MEMORY), b"{torn").unwrap();
        assert_eq!(remembered(d.path(), 7), None, "unreadable: tried again");
    }
}
