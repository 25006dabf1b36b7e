//! `latest.json`: which checkpoint in this directory is current. Replaced atomically (staging
//! file, fsync, rename, directory fsync) so a reader sees the old manifest or the new one,
//! never a torn one. `path` is relative to the manifest's own directory.

use super::copy::{self, DirSync};
use super::names;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::names::MANIFEST_FILE as FILE;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latest {
    /// File or directory name, relative to the directory holding latest.json.
    pub path: String,
    pub sha256: String,
    pub size: u64,
    pub step: Option<u64>,
    /// RFC 3339.
    pub published_at: String,
}

impl Latest {
    /// The checkpoint it points to.
    pub fn target(&self, dir: &Path) -> PathBuf {
        dir.join(&self.path)
    }
}

/// The current manifest of `dir`, if there is one; a file that does not parse is an error
/// naming it (never silently treated as absent).
pub fn read(dir: &Path) -> Result<Option<Latest>> {
    let p = dir.join(FILE);
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .with_context(|| format!("{}: not a valid latest.json manifest", p.display()))
}

/// Replace `dir/latest.json` atomically.
pub fn write(dir: &Path, latest: &Latest) -> Result<DirSync> {
    write_json(dir, FILE, latest)
}

/// Replace `dir/name` with `value` as pretty JSON, atomically and durably: staging file,
/// fsync, rename, directory fsync.
pub fn write_json(dir: &Path, name: &str, value: &impl Serialize) -> Result<DirSync> {
    let staging = dir.join(names::staging_name(name));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&staging)
            .with_context(|| format!("creating {}", staging.display()))?;
        let mut text = serde_json::to_string_pretty(value).context("serialising")?;
        text.push('\n');
        f.write_all(text.as_bytes())
            .with_context(|| format!("writing {}", staging.display()))?;
        f.sync_all()
            .with_context(|| format!("fsync of {}", staging.display()))?;
        copy::close(f).with_context(|| format!("closing {}", staging.display()))?;
        std::fs::rename(&staging, dir.join(name))
            .with_context(|| format!("renaming {} into place", staging.display()))
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&staging);
        return Err(e);
    }
    copy::fsync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_manifest() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let l = Latest {
            path: "ckpt-5.pt".into(),
            sha256: "ab".repeat(32),
            size: 5,
            step: Some(5),
            published_at: "2026-01-01T00:00:00Z".into(),
        };
        assert_eq!(write(dir.path(), &l).unwrap(), DirSync::Ok);
        assert_eq!(read(dir.path()).unwrap(), Some(l.clone()));
        assert_eq!(l.target(dir.path()), dir.path().join("ckpt-5.pt"));
        // No staging file left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        std::fs::write(dir.path().join(FILE), "{\"path\":").unwrap();
        let e = format!("{:#}", read(dir.path()).unwrap_err());
        assert!(e.contains("not a valid latest.json"), "{e}");
    }
}
