//! The two file-system idioms every writer shares, written once: replacing a file atomically
//! ([`write_atomic`], [`AtomicFile`]) and making directory entries durable ([`fsync_dir`],
//! [`fsync_tree`], [`create_dirs_durably`]). No other module renames a temporary over a file to replace its
//! content, or fsyncs a directory by hand. The other renames outside `sys/` move a whole item
//! after its check (a verified staging copy to its real name in `publish/place.rs`, a
//! downloaded checkpoint in `remote/upload.rs`, quarantine's moves, ...); only the files in
//! ARCHITECTURE.md's rename table may call one, which `tests/layout.rs` checks.
//!
//! One rule for directories that cannot be fsynced: drvfs and 9p (WSL2's `/mnt/c`) answer
//! EINVAL, and other filesystems may answer ENOTSUP or ENOSYS. The rename or create already
//! happened and readers see it; only its survival of a power cut cannot be promised. So that
//! is a warning, said once per process, and the caller gets [`DirSync::Unsupported`] to
//! record — never an error after the work is done.

use anyhow::{Context, Result};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// What a directory fsync achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirSync {
    Ok,
    /// The filesystem cannot fsync a directory; the text says so (for a ledger record).
    Unsupported(String),
}

impl DirSync {
    pub fn text(&self) -> &str {
        match self {
            DirSync::Ok => "ok",
            DirSync::Unsupported(w) => w,
        }
    }
    /// The first warning of two wins.
    pub fn and(self, other: DirSync) -> DirSync {
        match self {
            DirSync::Ok => other,
            w => w,
        }
    }
}

/// Said once: every later directory of the same process is as unsyncable as the first.
static WARNED: AtomicBool = AtomicBool::new(false);

/// The answers of a filesystem that has no directory fsync at all (as opposed to one that
/// failed to write): 9p without `.L` and drvfs give EINVAL (the VFS answer for "no fsync
/// operation"), a FUSE daemon may give any of these (the kernel turns only ENOSYS into
/// success itself), network filesystems ENOTSUP.
fn cannot_fsync_dirs(e: &std::io::Error) -> Option<&'static str> {
    match e.raw_os_error()? {
        libc::EINVAL => Some("EINVAL"),
        libc::ENOTSUP => Some("ENOTSUP"),
        libc::ENOSYS => Some("ENOSYS"),
        _ => None,
    }
}

/// fsync `dir` so the entries made in it (creates, renames, unlinks) survive a power cut.
/// A filesystem that cannot (see [`cannot_fsync_dirs`]) is warned about once per process
/// and answered with [`DirSync::Unsupported`]; any other failure is an error.
pub fn fsync_dir(dir: &Path) -> Result<DirSync> {
    let f = File::open(dir).with_context(|| format!("opening directory {}", dir.display()))?;
    crate::sys::opcount::count(crate::sys::opcount::Op::Fsync);
    match f.sync_all() {
        Ok(()) => Ok(DirSync::Ok),
        Err(e) => match cannot_fsync_dirs(&e) {
            Some(errno) => {
                let w = format!(
                    "fsync of directory {} is not supported here ({errno}; drvfs/9p?): renames in it may not survive a power cut",
                    dir.display()
                );
                if !WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!("{w} (said once per run)");
                }
                Ok(DirSync::Unsupported(w))
            }
            None => Err(e).with_context(|| format!("fsync of directory {}", dir.display())),
        },
    }
}

/// fsync every directory under `root` (deepest first) and `root` itself, so that every entry
/// of a tree built under a staging name (each file already fsynced) survives a power cut once
/// the tree is renamed into place. A filesystem that cannot fsync directories: the first
/// [`DirSync::Unsupported`], as for [`fsync_dir`].
pub fn fsync_tree(root: &Path) -> Result<DirSync> {
    let mut dirs = vec![root.to_path_buf()];
    let mut i = 0;
    while i < dirs.len() {
        let rd = std::fs::read_dir(&dirs[i])
            .with_context(|| format!("reading directory {}", dirs[i].display()))?;
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
        }
        i += 1;
    }
    let mut sync = DirSync::Ok;
    for d in dirs.iter().rev() {
        sync = sync.and(fsync_dir(d)?);
    }
    Ok(sync)
}

/// The directory a relative or absolute path's entry lives in (`.` for a bare name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// `create_dir_all`, with each directory it creates made durable in its parent: a file
/// fsynced into a new directory must not vanish with the directory at a power cut.
pub fn create_dirs_durably(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating directory {}", dir.display()))?;
    for d in missing.iter().rev() {
        crate::sys::opcount::count(crate::sys::opcount::Op::MakeDir);
        fsync_dir(parent_dir(d))?;
    }
    Ok(())
}

/// How much a replaced file must survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the new contents before the rename and the directory after it: once the call
    /// returned, a power cut leaves the new file. For records nothing else can rebuild.
    Durable,
    /// Rename only: readers see the old file or the new, never half of one, but a power cut
    /// may leave the old one (or, on some filesystems, an empty one). For files rebuilt from
    /// their sources or rewritten every few seconds.
    Atomic,
}

/// How to replace a file: durability, the new file's mode (as for open(2): the umask
/// applies, as it does to `File::create`), and how its temporary is named.
#[derive(Debug, Clone, Copy)]
pub struct Replace<'a> {
    pub durability: Durability,
    pub mode: u32,
    /// The temporary is `<temp_prefix><name>.<random>.tmp` beside the file: hidden, and never
    /// the file's own suffix (a Prometheus collector reads only `*.prom`).
    pub temp_prefix: &'a str,
}

impl Replace<'static> {
    pub const fn new(durability: Durability, mode: u32) -> Self {
        Replace {
            durability,
            mode,
            temp_prefix: ".roger-tmp-",
        }
    }
}

impl<'a> Replace<'a> {
    /// Name the temporary with `prefix` (a caller that cleans up its own leftovers by name).
    pub const fn temp_prefix(self, prefix: &'a str) -> Replace<'a> {
        Replace {
            temp_prefix: prefix,
            ..self
        }
    }
}

/// Replace `path` with `bytes` atomically (see [`Replace`]). The temporary is created
/// `O_EXCL` with a random name in the same directory, so concurrent writers never share
/// one, and is removed on every error.
pub fn write_atomic(path: &Path, bytes: &[u8], how: Replace<'_>) -> Result<DirSync> {
    let mut f = AtomicFile::create(path, how)?;
    f.file()
        .write_all(bytes)
        .with_context(|| format!("writing {}", f.temp_path().display()))?;
    f.commit()
}

/// A file being written beside `path`, to be renamed over it by [`AtomicFile::commit`]
/// (dropped uncommitted, the temporary is removed): for writers that stream.
pub struct AtomicFile {
    tmp: tempfile::NamedTempFile,
    path: PathBuf,
    durability: Durability,
}

impl AtomicFile {
    pub fn create(path: &Path, how: Replace<'_>) -> Result<AtomicFile> {
        let dir = parent_dir(path);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .with_context(|| format!("{}: not a file name", path.display()))?;
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{}{name}.", how.temp_prefix))
            .suffix(".tmp")
            .permissions(std::fs::Permissions::from_mode(how.mode))
            .tempfile_in(dir)
            .with_context(|| format!("creating a temporary beside {}", path.display()))?;
        Ok(AtomicFile {
            tmp,
            path: path.to_path_buf(),
            durability: how.durability,
        })
    }

    pub fn file(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// fsync (when durable), rename over the file, fsync the directory (when durable).
    pub fn commit(self) -> Result<DirSync> {
        let AtomicFile {
            tmp,
            path,
            durability,
        } = self;
        if durability == Durability::Durable {
            // An fsync error is not retried: the temporary is dropped (removed) with it.
            crate::sys::opcount::count(crate::sys::opcount::Op::Fsync);
            tmp.as_file()
                .sync_all()
                .with_context(|| format!("fsync of {}", tmp.path().display()))?;
        }
        tmp.persist(&path).map_err(|e| {
            anyhow::Error::new(e.error)
                .context(format!("renaming a temporary over {}", path.display()))
        })?;
        match durability {
            Durability::Durable => fsync_dir(parent_dir(&path)),
            Durability::Atomic => Ok(DirSync::Ok),
        }
    }
}

/// Whether `path` is no longer the file `before` described (size or mtime moved).
pub fn changed(path: &Path, before: &std::fs::Metadata) -> Result<bool> {
    let now = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(now.len() != before.len() || now.modified().ok() != before.modified().ok())
}

/// Filesystems that refuse hard links: drvfs and 9p on WSL2 (EPERM), FUSE without `link`
/// (ENOSYS), others ENOTSUP; EMLINK is a file at its link limit. A copy serves instead.
pub fn links_refused(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::ENOSYS | libc::ENOTSUP | libc::EMLINK)
    )
}

/// `path` under the new name `evidence` as well, as it was when `meta0` was read. A hard link
/// is the file itself: the same bytes, mode, owner and times, never replacing another file,
/// with only its name to make durable (the caller's directory fsync). Where links are refused
/// (drvfs, 9p), a copy keeps the same promises: created O_EXCL and private until whole;
/// fsynced before this returns; read back from disk and compared with what was read from
/// `path`, which must not have changed since `meta0`; the mode and times (and owner, where
/// allowed) given to it. A failed copy is removed.
pub fn link_or_copy(path: &Path, evidence: &Path, meta0: &std::fs::Metadata) -> Result<()> {
    match std::fs::hard_link(path, evidence) {
        Ok(()) => return Ok(()),
        Err(e) if links_refused(&e) => {
            tracing::debug!("hard link refused ({e}): keeping a copy of the original instead");
        }
        Err(e) => return Err(e.into()),
    }
    let copied = copy_evidence(path, evidence, meta0);
    if copied.is_err() {
        let _ = std::fs::remove_file(evidence);
    }
    copied
}

fn copy_evidence(path: &Path, evidence: &Path, meta0: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut out = File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(evidence)
        .with_context(|| format!("creating {}", evidence.display()))?;
    let mut input = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hash = sha2::Sha256::default();
    let mut buf = vec![0u8; crate::digest::BUF_SIZE];
    loop {
        let n = std::io::Read::read(&mut input, &mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        sha2::Digest::update(&mut hash, &buf[..n]);
        out.write_all(&buf[..n])
            .with_context(|| format!("writing {}", evidence.display()))?;
    }
    let read = crate::digest::hex(&sha2::Digest::finalize(hash));
    if changed(path, meta0)? {
        anyhow::bail!("{} changed while it was being copied", path.display());
    }
    // The owner first (chown clears set-id bits), then the mode. Only root may give a file
    // away; anyone else already owns the copy, so a refusal changes nothing.
    if let Err(e) = std::os::unix::fs::fchown(&out, Some(meta0.uid()), Some(meta0.gid())) {
        tracing::debug!("{}: owner not copied: {e}", evidence.display());
    }
    out.set_permissions(meta0.permissions())
        .with_context(|| format!("setting the mode of {}", evidence.display()))?;
    let mut times = std::fs::FileTimes::new();
    if let Ok(t) = meta0.modified() {
        times = times.set_modified(t);
    }
    if let Ok(t) = meta0.accessed() {
        times = times.set_accessed(t);
    }
    out.set_times(times)
        .with_context(|| format!("setting the times of {}", evidence.display()))?;
    out.sync_all()
        .with_context(|| format!("fsync of {}", evidence.display()))?;
    drop(out);
    let (on_disk, _) = crate::digest::hash_file(evidence)?;
    if on_disk != read {
        anyhow::bail!(
            "{}: the copy reads back differently (sha256 {} read, {} on disk)",
            evidence.display(),
            &read[..12],
            &on_disk[..12]
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_with_the_mode_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        std::fs::write(&p, "old").unwrap();
        for d in [Durability::Durable, Durability::Atomic] {
            let s = write_atomic(&p, b"new", Replace::new(d, 0o600)).unwrap();
            assert_eq!(s, DirSync::Ok);
            assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
            assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
            assert_eq!(names(dir.path()), ["r.json"]);
        }
    }

    #[test]
    fn siblings_with_one_stem_do_not_share_a_temporary() {
        // `with_extension("tmp")` made r.json and r.yaml race on r.tmp.
        let dir = tempfile::tempdir().unwrap();
        let a = AtomicFile::create(
            &dir.path().join("r.json"),
            Replace::new(Durability::Atomic, 0o644),
        )
        .unwrap();
        let b = AtomicFile::create(
            &dir.path().join("r.yaml"),
            Replace::new(Durability::Atomic, 0o644),
        )
        .unwrap();
        let c = AtomicFile::create(
            &dir.path().join("r.json"),
            Replace::new(Durability::Atomic, 0o644),
        )
        .unwrap();
        assert_ne!(a.temp_path(), b.temp_path());
        assert_ne!(a.temp_path(), c.temp_path());
        let n = a
            .temp_path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            n.starts_with(".roger-tmp-r.json.") && n.ends_with(".tmp"),
            "{n}"
        );
    }

    #[test]
    fn an_uncommitted_or_failed_write_removes_its_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = AtomicFile::create(
            &dir.path().join("x"),
            Replace::new(Durability::Durable, 0o644).temp_prefix(".mine-"),
        )
        .unwrap();
        f.file().write_all(b"half").unwrap();
        assert!(f
            .temp_path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".mine-x."));
        drop(f);
        assert!(names(dir.path()).is_empty());
        // The rename fails: the target is a non-empty directory.
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/inner"), "").unwrap();
        let e = write_atomic(
            &dir.path().join("d"),
            b"x",
            Replace::new(Durability::Durable, 0o644),
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("renaming a temporary over"),
            "{e:#}"
        );
        assert_eq!(names(dir.path()), ["d"]);
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let e = write_atomic(
            Path::new("/nonexistent-roger/x"),
            b"",
            Replace::new(Durability::Atomic, 0o644),
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("beside /nonexistent-roger/x"),
            "{e:#}"
        );
        let e = fsync_dir(Path::new("/nonexistent-roger")).unwrap_err();
        assert!(
            format!("{e:#}").contains("opening directory /nonexistent-roger"),
            "{e:#}"
        );
    }

    #[test]
    fn what_counts_as_a_filesystem_without_directory_fsync() {
        use std::io::Error;
        for errno in [libc::EINVAL, libc::ENOTSUP, libc::ENOSYS] {
            assert!(cannot_fsync_dirs(&Error::from_raw_os_error(errno)).is_some());
        }
        // A failed write-back is a real error, never tolerated.
        for errno in [libc::EIO, libc::ENOSPC, libc::EROFS, libc::EBADF] {
            assert!(cannot_fsync_dirs(&Error::from_raw_os_error(errno)).is_none());
        }
    }

    #[test]
    fn creates_missing_directories_and_syncs_them() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        create_dirs_durably(&deep).unwrap();
        assert!(deep.is_dir());
        create_dirs_durably(&deep).unwrap();
        assert_eq!(fsync_dir(&deep).unwrap(), DirSync::Ok);
        assert_eq!(parent_dir(Path::new("x")), Path::new("."));
        assert_eq!(parent_dir(Path::new("a/x")), Path::new("a"));
    }

    #[test]
    fn dir_sync_keeps_the_first_warning() {
        let w = DirSync::Unsupported("EINVAL on /mnt/c".into());
        assert_eq!(DirSync::Ok.and(DirSync::Ok).text(), "ok");
        assert_eq!(DirSync::Ok.and(w.clone()), w);
        assert_eq!(w.clone().and(DirSync::Unsupported("other".into())), w);
        assert_eq!(w.clone().and(DirSync::Ok).text(), "EINVAL on /mnt/c");
    }

    #[test]
    fn the_copied_evidence_is_the_original_in_bytes_mode_and_times() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("train.log");
        std::fs::write(&p, "step 1\r\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let meta = std::fs::metadata(&p).unwrap();
        let ev = dir.path().join("train.log.orig");
        copy_evidence(&p, &ev, &meta).unwrap();
        let m = std::fs::metadata(&ev).unwrap();
        assert_eq!(std::fs::read(&ev).unwrap(), b"step 1\r\n");
        assert_eq!(m.permissions().mode() & 0o7777, 0o640);
        assert_eq!(m.modified().unwrap(), old);
        // Never replaces a file that is there.
        let e = copy_evidence(&p, &ev, &meta).unwrap_err();
        assert!(format!("{e:#}").contains("File exists"), "{e:#}");
        // The original moved on since it was cleaned: refused.
        std::fs::write(&p, "step 1\r\nstep 2\n").unwrap();
        let e = copy_evidence(&p, &dir.path().join("x"), &meta).unwrap_err();
        assert!(
            e.to_string().contains("changed while it was being copied"),
            "{e}"
        );
        assert!(links_refused(&std::io::Error::from_raw_os_error(
            libc::EPERM
        )));
        assert!(!links_refused(&std::io::Error::from_raw_os_error(
            libc::EEXIST
        )));
    }
}
