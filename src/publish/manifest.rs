//! `latest.json`: which checkpoint in this directory is current. Replaced atomically (staging
//! file, fsync, rename, directory fsync) so a reader sees the old manifest or the new one,
//! never a torn one. `path` is relative to the manifest's own directory.

use super::names;
use crate::sys::fsx::{self, DirSync, Durability, Replace};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
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

/// Replace `dir/name` with `value` as pretty JSON. Durable: latest.json is what a restart
/// resumes from, and the ledger record before it already says the publish happened. The
/// temporary carries the staging prefix, so a crash's leftover is cleaned like any staging.
pub fn write_json(dir: &Path, name: &str, value: &impl Serialize) -> Result<DirSync> {
    let mut text = serde_json::to_string_pretty(value).context("serialising")?;
    text.push('\n');
    fsx::write_atomic(
        &dir.join(name),
        text.as_bytes(),
        Replace::new(Durability::Durable, 0o644).temp_prefix(names::STAGING_PREFIX),
    )
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
