//! Cleaning a log file in place, atomically: the clean copy is written beside it and fsynced,
//! the original is kept (hard link) as evidence, the clean copy is renamed over the name,
//! and only once the clean file re-hashes to what was written, and re-cleaning the evidence
//! gives the same bytes, is the evidence removed (unless asked to keep it).

use super::clean::{clean_stream, CleanStats};
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

fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsync of directory {}", dir.display()))
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
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = sibling(path, &format!(".roger-clean-{}.tmp", std::process::id()));
    let result = write_clean_copy(path, &tmp);
    let (sha256, stats) = match result {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    let meta1 = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta1.len() != meta0.len() || meta1.modified().ok() != meta0.modified().ok() {
        let _ = std::fs::remove_file(&tmp);
        bail!(
            "{} changed while it was being cleaned (a live log?): left untouched; clean a copy, or use `roger hygiene clean {} > clean.log`",
            path.display(),
            path.display()
        );
    }
    let evidence = free_evidence_name(path);
    if let Err(e) = std::fs::hard_link(path, &evidence) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| {
            format!(
                "keeping the original as {} (needed as evidence until the clean copy is verified)",
                evidence.display()
            )
        });
    }
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} over {}", tmp.display(), path.display()))?;
    fsync_dir(&dir)?;

    let (on_disk, _) = crate::digest::hash_file(path)?;
    let (again, _) = clean_hash(&evidence)?;
    if on_disk != sha256 || again != sha256 {
        std::fs::rename(&evidence, path).with_context(|| {
            format!(
                "restoring the original from {} after a failed verification",
                evidence.display()
            )
        })?;
        fsync_dir(&dir)?;
        bail!(
            "{}: the clean copy did not verify (written {}, on disk {}, re-clean {}); the original was put back",
            path.display(),
            &sha256[..12],
            &on_disk[..12],
            &again[..12]
        );
    }
    let evidence = if keep_original {
        Some(evidence)
    } else {
        std::fs::remove_file(&evidence)
            .with_context(|| format!("removing the verified original {}", evidence.display()))?;
        fsync_dir(&dir)?;
        None
    };
    Ok(InPlace {
        path: path.to_path_buf(),
        stats,
        sha256,
        evidence,
    })
}

fn write_clean_copy(src: &Path, tmp: &Path) -> Result<(String, CleanStats)> {
    let input = File::open(src).with_context(|| format!("opening {}", src.display()))?;
    let out = File::options()
        .write(true)
        .create_new(true)
        .open(tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let perms = std::fs::metadata(src)?.permissions();
    let mut w = Hashing {
        inner: BufWriter::with_capacity(1 << 20, out),
        hash: Sha256::new(),
    };
    let stats = clean_stream(input, &mut w)
        .with_context(|| format!("cleaning {} into {}", src.display(), tmp.display()))?;
    let file = w
        .inner
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("writing {}", tmp.display()))?;
    file.set_permissions(perms)?;
    file.sync_all()
        .with_context(|| format!("fsync of {}", tmp.display()))?;
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
