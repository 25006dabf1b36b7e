//! Cleaning a log file in place, atomically: the clean copy is written beside it, the original
//! is kept as evidence (a hard link, or a verified copy where links are refused), re-cleaning
//! the evidence must give the same bytes, the clean copy replaces the name (fsx, durable), and
//! only once it re-hashes from disk to what was written is the evidence removed (unless asked
//! to keep it).

use super::clean::{clean_stream, CleanStats};
use crate::sys::fsx::{self, AtomicFile, Durability, Replace};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, Serialize)]
pub struct InPlace {
    pub path: PathBuf,
    pub stats: CleanStats,
    pub sha256: String,
    /// The original, when kept.
    pub evidence: Option<PathBuf>,
}

/// A writer that hashes what passes through.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn clean_hash(src: &Path) -> Result<(String, CleanStats)> {
    let f = File::open(src).with_context(|| format!("opening {}", src.display()))?;
    let mut sink = Hashing {
        inner: std::io::sink(),
        hash: Sha256::new(),
    };
    let stats = clean_stream(f, &mut sink).with_context(|| format!("reading {}", src.display()))?;
    Ok((crate::digest::hex(&sink.hash.finalize()), stats))
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}{suffix}"))
}

/// A name for the evidence that does not exist yet: `FILE.orig`, `FILE.orig.1`, ...
fn free_evidence_name(path: &Path) -> PathBuf {
    let base = sibling(path, ".orig");
    if !base.exists() {
        return base;
    }
    (1..)
        .map(|i| sibling(path, &format!(".orig.{i}")))
        .find(|p| !p.exists())
        .expect("some suffix is free")
}

/// Text logs hold no NUL bytes; a checkpoint or an archive does, and "cleaning" it in place
/// would destroy it.
fn refuse_binary(path: &Path) -> Result<()> {
    use std::io::Read;
    let mut head = Vec::with_capacity(64 * 1024);
    std::fs::File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_end(&mut head))
        .with_context(|| format!("reading {}", path.display()))?;
    if let Some(at) = head.iter().position(|&b| b == 0) {
        bail!(
            "{}: looks binary (a NUL byte at offset {at}), expected a text log: left untouched",
            path.display()
        );
    }
    Ok(())
}

/// Clean `path` in place. Refuses a file that changes while it is being cleaned (a live log:
/// renaming over it would lose what the writer appends to the old inode).
pub fn clean_in_place(path: &Path, keep_original: bool) -> Result<InPlace> {
    let meta0 = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta0.is_file() {
        bail!("{}: not a regular file", path.display());
    }
    refuse_binary(path)?;
    let dir = fsx::parent_dir(path).to_path_buf();
    // Durable: the clean copy replaces the user's log, and the original is removed once it
    // verified. Created private; write_clean_copy gives it the original's mode.
    let mut clean = AtomicFile::create(path, Replace::new(Durability::Durable, 0o600))?;
    // On every error below until the commit, dropping `clean` removes the temporary.
    let (sha256, stats) = write_clean_copy(path, &mut clean)?;
    if crate::sys::fsx::changed(path, &meta0)? {
        bail!(
            "{} changed while it was being cleaned (a live log?): left untouched; clean a copy, or use `roger hygiene clean {} > clean.log`",
            path.display(),
            path.display()
        );
    }
    let evidence = free_evidence_name(path);
    crate::sys::fsx::link_or_copy(path, &evidence, &meta0).with_context(|| {
        format!(
            "keeping the original as {} (needed as evidence until the clean copy is verified)",
            evidence.display()
        )
    })?;
    // The evidence must be what was cleaned before it is the only original left.
    let again = clean_hash(&evidence).map(|(h, _)| h);
    if again.as_ref().ok() != Some(&sha256) {
        let _ = std::fs::remove_file(&evidence);
        let again = again?;
        bail!(
            "{}: the kept original does not re-clean to the clean copy (written {}, re-clean {}): left untouched",
            path.display(),
            &sha256[..12],
            &again[..12]
        );
    }
    clean.commit().with_context(|| {
        format!(
            "replacing {} with its clean copy (the original is kept as {})",
            path.display(),
            evidence.display()
        )
    })?;

    let (on_disk, _) = crate::digest::hash_file(path)?;
    if on_disk != sha256 {
        std::fs::rename(&evidence, path).with_context(|| {
            format!(
                "restoring the original from {} after a failed verification",
                evidence.display()
            )
        })?;
        fsx::fsync_dir(&dir)?;
        bail!(
            "{}: the clean copy did not verify (written {}, on disk {}); the original was put back",
            path.display(),
            &sha256[..12],
            &on_disk[..12]
        );
    }
    let evidence = if keep_original {
        Some(evidence)
    } else {
        std::fs::remove_file(&evidence)
            .with_context(|| format!("removing the verified original {}", evidence.display()))?;
        fsx::fsync_dir(&dir)?;
        None
    };
    Ok(InPlace {
        path: path.to_path_buf(),
        stats,
        sha256,
        evidence,
    })
}

fn write_clean_copy(src: &Path, clean: &mut AtomicFile) -> Result<(String, CleanStats)> {
    let tmp = clean.temp_path().to_path_buf();
    let input = File::open(src).with_context(|| format!("opening {}", src.display()))?;
    let perms = std::fs::metadata(src)?.permissions();
    let file = clean.file();
    // The original's mode (it stays readable by whoever could read it; an open fd keeps
    // writing even to a read-only mode).
    file.set_permissions(perms)
        .with_context(|| format!("setting the mode of {}", tmp.display()))?;
    let mut w = Hashing {
        inner: BufWriter::with_capacity(1 << 20, &mut *file),
        hash: Sha256::new(),
    };
    let stats = clean_stream(input, &mut w)
        .with_context(|| format!("cleaning {} into {}", src.display(), tmp.display()))?;
    w.inner
        .flush()
        .with_context(|| format!("writing {}", tmp.display()))?;
    Ok((crate::digest::hex(&w.hash.finalize()), stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_cleans_and_drops_the_verified_original() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("train.log");
        std::fs::write(&p, "\x1b[32mstep 1\x1b[0m\n 5%\r100%\n").unwrap();
        let r = clean_in_place(&p, false).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "step 1\n100%\n");
        assert!(r.evidence.is_none());
        assert!(!dir.path().join("train.log.orig").exists());
        let r = clean_in_place(&p, true).unwrap();
        assert_eq!(r.evidence.unwrap(), dir.path().join("train.log.orig"));
        let r = clean_in_place(&p, true).unwrap();
        assert_eq!(r.evidence.unwrap(), dir.path().join("train.log.orig.1"));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn refuses_a_binary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ckpt.pt");
        let bytes = b"PK\x03\x04\x00\x00\x1b[31mdata\r\n".to_vec();
        std::fs::write(&p, &bytes).unwrap();
        let err = clean_in_place(&p, false).unwrap_err().to_string();
        assert!(
            err.contains("looks binary (a NUL byte at offset 4)"),
            "{err}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), bytes);
    }

    #[test]
    fn refuses_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let err = clean_in_place(dir.path(), false).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }
}
