//! SHA-256 of checkpoints: a file's bytes, or for a directory (HF `checkpoint-N/`, torch DCP)
//! a digest over its sorted manifest of (relative path, size, sha256) lines. Publish hashes
//! while copying and must combine per-file hashes with [`dir_digest`] so both agree.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// A hash's first 12 characters, for messages. Hashes read from a file are whatever the file
/// held, so the cut lands on a char boundary (a byte index panics inside a multi-byte char).
pub fn short(hash: &str) -> &str {
    &hash[..hash.floor_char_boundary(12)]
}

/// Lower-case hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// 4 MiB: large sequential reads; checkpoints are big.
pub const BUF_SIZE: usize = 4 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    /// Relative to the checkpoint root, `/`-separated (empty for a single-file checkpoint).
    pub rel: String,
    pub size: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathDigest {
    pub sha256: String,
    pub size: u64,
    pub files: Vec<FileDigest>,
}

pub fn hash_reader(mut r: impl Read) -> std::io::Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; BUF_SIZE];
    let mut n = 0u64;
    loop {
        let k = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((crate::digest::hex(&h.finalize()), n))
}

pub fn hash_file(path: &Path) -> Result<(String, u64)> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    hash_reader(f).with_context(|| format!("reading {}", path.display()))
}

/// Regular files under `root`, sorted by relative path (symlinks are refused: a checkpoint
/// that points outside itself cannot be verified).
pub fn list_files(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
            let ft = entry.file_type()?;
            let path = entry.path();
            if ft.is_dir() {
                stack.push(path);
            } else if ft.is_file() {
                let rel = path
                    .strip_prefix(root)
                    .expect("walk stays under root")
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push((rel, path));
            } else {
                anyhow::bail!(
                    "{}: not a regular file or directory (symlink or special file); a checkpoint must be self-contained",
                    path.display()
                );
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The directory digest: sha256 over "sha256  size  rel\n" lines in sorted order.
pub fn dir_digest(files: &[FileDigest]) -> String {
    let mut sorted: Vec<&FileDigest> = files.iter().collect();
    sorted.sort_by(|a, b| a.rel.cmp(&b.rel));
    let mut h = Sha256::new();
    for f in sorted {
        h.update(format!("{}  {}  {}\n", f.sha256, f.size, f.rel).as_bytes());
    }
    crate::digest::hex(&h.finalize())
}

/// Hash a file or a directory checkpoint from disk.
pub fn hash_path(path: &Path) -> Result<PathDigest> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.is_dir() {
        let mut files = Vec::new();
        for (rel, p) in list_files(path)? {
            let (sha256, size) = hash_file(&p)?;
            files.push(FileDigest { rel, size, sha256 });
        }
        Ok(PathDigest {
            sha256: dir_digest(&files),
            size: files.iter().map(|f| f.size).sum(),
            files,
        })
    } else {
        let (sha256, size) = hash_file(path)?;
        Ok(PathDigest {
            sha256: sha256.clone(),
            size,
            files: vec![FileDigest {
                rel: String::new(),
                size,
                sha256,
            }],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        let (h, n) = hash_reader(&b"abc"[..]).unwrap();
        assert_eq!(
            h,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(n, 3);
    }

    #[test]
    fn dir_digest_is_order_independent_and_content_sensitive() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a.bin"), b"aaa").unwrap();
        std::fs::write(dir.path().join("sub/b.bin"), b"bbb").unwrap();
        let d1 = hash_path(dir.path()).unwrap();
        assert_eq!(d1.size, 6);
        assert_eq!(d1.files[1].rel, "sub/b.bin");
        let mut rev = d1.files.clone();
        rev.reverse();
        assert_eq!(dir_digest(&rev), d1.sha256);
        std::fs::write(dir.path().join("sub/b.bin"), b"bbc").unwrap();
        assert_ne!(hash_path(dir.path()).unwrap().sha256, d1.sha256);
    }
}
