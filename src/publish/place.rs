//! Side effects in the destination directory: the publish lock, cleaning leftovers of killed
//! publishes, copying into and verifying the staging copy, swapping it into place, and setting
//! a bad copy aside as evidence.

use super::chain::Check;
use super::copy::{self, Reread};
use super::names;
use super::source::SrcFile;
use super::Layout;
use crate::sys::fsx;
use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, Utc};
use std::fs::File;
use std::path::{Path, PathBuf};

/// The staging copy; removed on drop (an error path) unless disarmed. A crash leaves it for
/// the next publish to clean.
pub struct Staging {
    path: PathBuf,
    armed: bool,
}

impl Staging {
    pub fn new(path: PathBuf) -> Staging {
        Staging { path, armed: true }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// From here on the staging copy is someone else's business (renamed or set aside).
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.armed {
            let _ = remove_any(&self.path);
        }
    }
}

/// One publisher per destination at a time; held until dropped. Leftover staging names are
/// only cleaned under it, so a live publisher's staging copy is never taken for a leftover.
/// An existing lock file is opened read-only (flock needs no write access), so one created
/// by another user (`sudo roger publish`) does not lock everyone else out; a new one goes to
/// the directory's owner.
pub fn lock(dest: &Path) -> Result<nix::fcntl::Flock<File>> {
    let p = dest.join(names::LOCK_FILE);
    let f = match File::open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&p)
                .with_context(|| format!("opening {}", p.display()))?;
            crate::sys::owner::give_to_dir_owner(&f, dest);
            f
        }
        Err(e) => return Err(e).with_context(|| format!("opening {}", p.display())),
    };
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow!("locking {}: {e}", p.display()))
}

/// Remove a file or a directory tree; absent is fine.
pub fn remove_any(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if meta.is_dir() {
        super::failpoint::count(super::failpoint::Op::RemoveDir);
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
    .with_context(|| format!("removing {}", path.display()))
}

fn tree_size(path: &Path) -> u64 {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => crate::digest::list_files(path)
            .map(|fs| fs.iter().map(|(_, p)| tree_size(p)).sum())
            .unwrap_or(0),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

fn staging_entries(dest: &Path) -> Vec<(String, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(dest) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
        .filter(|(n, _)| names::is_staging(n))
        .collect()
}

/// Bytes held by leftover staging copies (they are removed before copying).
pub fn reclaimable(dest: &Path) -> u64 {
    staging_entries(dest)
        .iter()
        .map(|(_, p)| tree_size(p))
        .sum()
}

/// Remove roger's own leftovers: staging copies (only called under the lock, so none is
/// live) and hard-linked twins latest.json no longer points to.
pub fn clean_leftovers(
    dest: &Path,
    latest: Option<&super::manifest::Latest>,
) -> Result<Vec<String>> {
    let mut cleaned = Vec::new();
    for (name, path) in staging_entries(dest) {
        remove_any(&path)?;
        cleaned.push(name);
    }
    let rd = std::fs::read_dir(dest).with_context(|| format!("listing {}", dest.display()))?;
    for e in rd.flatten() {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if name.starts_with(names::PREV_PREFIX) && latest.is_none_or(|l| l.path != name) {
            remove_any(&e.path())?;
            cleaned.push(name);
        }
    }
    Ok(cleaned)
}

fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(a? + b?)
}

fn add(total: &mut Reread, r: &Reread) {
    total.bytes_read += r.bytes_read;
    total.size += r.size;
    total.pages_resident = sum(total.pages_resident, r.pages_resident);
    total.pages_total = sum(total.pages_total, r.pages_total);
    total.direct_io &= r.direct_io;
}

fn digest(rel: &str, r: &Reread) -> crate::digest::FileDigest {
    crate::digest::FileDigest {
        rel: rel.to_string(),
        size: r.size,
        sha256: r.sha256.clone(),
    }
}

/// fsync every directory under `root` (deepest first) and `root` itself (one helper for
/// every writer of a directory tree: [`fsx::fsync_tree`]).
pub use crate::sys::fsx::fsync_tree as fsync_dirs;

/// What `copy_and_verify` wrote and read back.
pub struct Copied {
    /// Each file's digest, as the copy pass hashed it.
    pub written: Vec<crate::digest::FileDigest>,
    /// What re-reading each file from disk found.
    pub checks: Vec<Check>,
    /// The re-reads summed up.
    pub reread: Reread,
    /// Until every file and directory of the copy was fsynced.
    pub copy: std::time::Duration,
    /// Until the last file was verified too.
    pub total: std::time::Duration,
}

/// Copy the source's files into `staging` (a file, or a new directory), hashing as it goes,
/// several files at once, and verify each file from disk (cache dropped, re-read, SHA-256
/// chain checked) as soon as it is fsynced and closed, while the next ones copy
/// (`parallel`); every directory fsynced once all files are in.
pub fn copy_and_verify(src: &[SrcFile], layout: Layout, staging: &Path) -> Result<Copied> {
    if layout == Layout::Dir {
        std::fs::create_dir(staging)
            .with_context(|| format!("creating staging directory {}", staging.display()))?;
    }
    let mut jobs = Vec::with_capacity(src.len());
    for f in src {
        let dst = match layout {
            Layout::File => staging.to_path_buf(),
            Layout::Dir => staging.join(&f.rel),
        };
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)?;
        }
        jobs.push((f.path.clone(), dst));
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let workers = super::parallel::workers(jobs.len(), cores, super::parallel::MEMORY_BUDGET);
    let done = super::parallel::copy_and_verify(&jobs, workers, || {
        if layout == Layout::Dir {
            fsync_dirs(staging)?;
        }
        super::failpoint::hit("after_fsync");
        Ok(())
    })?;
    let mut reread = Reread {
        pages_resident: Some(0),
        pages_total: Some(0),
        direct_io: true,
        ..Reread::default()
    };
    for c in &done.checks {
        add(
            &mut reread,
            &Reread {
                sha256: String::new(),
                size: c.size,
                bytes_read: c.bytes_read,
                pages_resident: c.resident.map(|r| r.0),
                pages_total: c.resident.map(|r| r.1),
                direct_io: c.direct,
            },
        );
    }
    let written = src
        .iter()
        .zip(&done.marks)
        .map(|(f, marks)| crate::digest::FileDigest {
            rel: f.rel.clone(),
            size: marks.size,
            sha256: marks.sha256.clone(),
        })
        .collect();
    Ok(Copied {
        written,
        checks: done.checks,
        reread,
        copy: done.copy,
        total: done.total,
    })
}

/// In place: the checkpoint already sits in the destination. fsync each file, then hash it
/// from disk with its cache dropped.
pub fn sync_and_reread(
    src: &[SrcFile],
    layout: Layout,
) -> Result<(Vec<crate::digest::FileDigest>, Reread)> {
    for f in src {
        let file = File::open(&f.path).with_context(|| format!("opening {}", f.path.display()))?;
        copy::sync_and_close(file, &f.path)?;
    }
    if layout == Layout::Dir {
        if let Some(root) = src[0].path.ancestors().nth(src[0].rel.split('/').count()) {
            fsync_dirs(root)?;
        }
    }
    let mut total = Reread {
        pages_resident: Some(0),
        pages_total: Some(0),
        direct_io: true,
        ..Reread::default()
    };
    let mut digests = Vec::new();
    for f in src {
        let r = copy::reread_from_disk(&f.path)?;
        add(&mut total, &r);
        digests.push(digest(&f.rel, &r));
    }
    Ok((digests, total))
}

/// How the bytes read back differ from the bytes written, if they do. Pure.
pub fn mismatch(written: &[crate::digest::FileDigest], checks: &[Check]) -> Option<String> {
    for (w, c) in written.iter().zip(checks) {
        let what = if w.rel.is_empty() {
            "the copy"
        } else {
            w.rel.as_str()
        };
        if w.size != c.size {
            return Some(format!(
                "{what}: {} bytes on disk, {} were written and fsynced",
                c.size, w.size
            ));
        }
        if let Some((a, b)) = c.bad {
            return Some(format!(
                "{what}: bytes {a}..{b} on disk differ from the bytes written and hashed (sha256 {}): its SHA-256 from disk would not match",
                &w.sha256[..16]
            ));
        }
        if c.bytes_read != c.size {
            return Some(format!(
                "{what}: only {} of {} bytes could be re-read",
                c.bytes_read, c.size
            ));
        }
    }
    (written.len() != checks.len()).then(|| "file count differs".to_string())
}

/// Keep a copy that failed verification as evidence, never under the real name.
/// (One function so the lead can redirect it into `roger quarantine`.)
pub fn set_aside_bad_copy(
    staging: &Path,
    dest: &Path,
    name: &str,
    now: DateTime<Utc>,
) -> Result<PathBuf> {
    let dir = dest.join(names::REJECTED_DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let base = format!("{name}.{}", now.timestamp());
    let mut to = dir.join(&base);
    let mut n = 1;
    while to.exists() {
        to = dir.join(format!("{base}.{n}"));
        n += 1;
    }
    std::fs::rename(staging, &to)
        .with_context(|| format!("setting the bad copy aside at {}", to.display()))?;
    let _ = fsx::fsync_dir(&dir);
    let _ = fsx::fsync_dir(dest);
    Ok(to)
}

/// A twin of `target` (file or tree) under the `.roger-prev-` name: hard links (same bytes,
/// no copy), or where the filesystem refuses them (drvfs, 9p) a verified, fsynced copy, so
/// latest.json can name it while the new checkpoint takes `target`'s name.
pub fn link_prev(target: &Path, dest: &Path, name: &str) -> Result<PathBuf> {
    let prev = dest.join(names::prev_name(name));
    remove_any(&prev)?;
    let twin = |p: &Path, to: &Path| {
        let meta = std::fs::metadata(p).with_context(|| format!("reading {}", p.display()))?;
        fsx::link_or_copy(p, to, &meta)
            .with_context(|| format!("keeping {} as {}", p.display(), to.display()))
    };
    if target.is_dir() {
        std::fs::create_dir(&prev)?;
        for (rel, p) in crate::digest::list_files(target)? {
            let to = prev.join(&rel);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            twin(&p, &to)?;
        }
        fsync_dirs(&prev)?;
    } else {
        twin(target, &prev)?;
    }
    Ok(prev)
}

pub fn remove_stale_prev(dest: &Path, name: &str) {
    let _ = remove_any(&dest.join(names::prev_name(name)));
}

/// Atomically put the verified staging copy under its real name. A directory replaces an
/// existing one with RENAME_EXCHANGE (the name never goes missing), then the old tree, now
/// under the staging name, is removed.
pub fn rename_into_place(staging: &Path, target: &Path, layout: Layout) -> Result<()> {
    let existing = std::fs::symlink_metadata(target).ok();
    match (layout, existing) {
        (Layout::File, Some(m)) if m.is_dir() => bail!(
            "{} is a directory; refusing to replace it with a file",
            target.display()
        ),
        (Layout::Dir, Some(m)) if !m.is_dir() => bail!(
            "{} exists and is not a directory; refusing to replace it with one",
            target.display()
        ),
        (Layout::Dir, Some(_)) => {
            rename_exchange(staging, target).with_context(|| {
                format!("exchanging {} with {}", staging.display(), target.display())
            })?;
            remove_any(staging)
        }
        _ => std::fs::rename(staging, target)
            .with_context(|| format!("renaming {} to {}", staging.display(), target.display())),
    }
}

/// renameat2(RENAME_EXCHANGE) as the system call: glibc has had a wrapper only since 2.28,
/// and the wheel's binary links against glibc 2.17 (manylinux2014; tests/install.rs), where
/// the kernel (3.15+) has the call but libc has no symbol for it.
fn rename_exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two NUL-terminated paths that outlive the call, AT_FDCWD for both directories;
    // the kernel reads the paths and touches no other memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::FileDigest;

    fn d(rel: &str, size: u64, sha: char) -> FileDigest {
        FileDigest {
            rel: rel.into(),
            size,
            sha256: sha.to_string().repeat(64),
        }
    }

    fn check(size: u64, bad: Option<(u64, u64)>, bytes_read: u64) -> Check {
        Check {
            size,
            bad,
            bytes_read,
            resident: None,
            direct: true,
        }
    }

    #[test]
    fn mismatch_names_the_file_and_what_differs() {
        assert_eq!(mismatch(&[d("", 5, 'a')], &[check(5, None, 5)]), None);
        let m = mismatch(&[d("", 5, 'a')], &[check(3, None, 0)]).unwrap();
        assert_eq!(m, "the copy: 3 bytes on disk, 5 were written and fsynced");
        let m = mismatch(&[d("x/y.bin", 5, 'a')], &[check(5, Some((0, 5)), 5)]).unwrap();
        assert!(
            m.starts_with(
                "x/y.bin: bytes 0..5 on disk differ from the bytes written and hashed (sha256 aaaa"
            ),
            "{m}"
        );
        let m = mismatch(&[d("", 5, 'a')], &[check(5, None, 4)]).unwrap();
        assert_eq!(m, "the copy: only 4 of 5 bytes could be re-read");
        assert_eq!(
            mismatch(&[d("", 5, 'a')], &[]).unwrap(),
            "file count differs"
        );
    }

    #[test]
    fn leftovers_and_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join(".roger-staging-1-2-ckpt.pt"), vec![0u8; 1000]).unwrap();
        std::fs::create_dir(p.join(".roger-staging-1-3-checkpoint-5")).unwrap();
        std::fs::write(p.join(".roger-staging-1-3-checkpoint-5/a"), vec![0u8; 24]).unwrap();
        std::fs::write(p.join(".roger-prev-a.pt"), b"old").unwrap();
        std::fs::write(p.join(".roger-prev-b.pt"), b"old").unwrap();
        std::fs::write(p.join("ckpt-1.pt"), b"keep").unwrap();
        assert_eq!(reclaimable(p), 1024);
        let latest = super::super::manifest::Latest {
            path: ".roger-prev-b.pt".into(),
            sha256: String::new(),
            size: 3,
            step: None,
            published_at: String::new(),
        };
        let mut cleaned = clean_leftovers(p, Some(&latest)).unwrap();
        cleaned.sort();
        assert_eq!(cleaned.len(), 3, "{cleaned:?}");
        assert!(
            p.join(".roger-prev-b.pt").exists(),
            "latest.json points at it"
        );
        assert!(p.join("ckpt-1.pt").exists());
        std::fs::write(p.join("bad"), b"x").unwrap();
        let now = chrono::TimeZone::timestamp_opt(&Utc, 1_700_000_000, 0).unwrap();
        let a = set_aside_bad_copy(&p.join("bad"), p, "ckpt.pt", now).unwrap();
        assert_eq!(a, p.join(".roger-rejected/ckpt.pt.1700000000"));
        std::fs::write(p.join("bad"), b"y").unwrap();
        let b = set_aside_bad_copy(&p.join("bad"), p, "ckpt.pt", now).unwrap();
        assert_eq!(b, p.join(".roger-rejected/ckpt.pt.1700000000.1"));
    }

    #[test]
    fn directory_exchange_keeps_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir(p.join("ck")).unwrap();
        std::fs::write(p.join("ck/a"), b"old").unwrap();
        std::fs::create_dir(p.join(".s")).unwrap();
        std::fs::write(p.join(".s/a"), b"new").unwrap();
        rename_into_place(&p.join(".s"), &p.join("ck"), Layout::Dir).unwrap();
        assert_eq!(std::fs::read(p.join("ck/a")).unwrap(), b"new");
        assert!(!p.join(".s").exists());
        std::fs::write(p.join(".f"), b"x").unwrap();
        assert!(rename_into_place(&p.join(".f"), &p.join("ck"), Layout::File).is_err());
    }
}
