//! Free space of the filesystem holding a path (statvfs), behind a trait for fakes.

use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Space {
    pub total: u64,
    /// Available to an unprivileged writer (what a training process can use).
    pub avail: u64,
}

pub trait DiskProbe {
    fn space(&self, path: &Path) -> Result<Space>;
}

pub struct RealDisk;

impl DiskProbe for RealDisk {
    fn space(&self, path: &Path) -> Result<Space> {
        space_of(path)
    }
}

/// statvfs of the nearest existing ancestor (the target may not exist yet).
pub fn space_of(path: &Path) -> Result<Space> {
    let mut p = path;
    while !p.exists() {
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => {
                p = Path::new(".");
                break;
            }
        }
    }
    let st = nix::sys::statvfs::statvfs(p).with_context(|| format!("statvfs {}", p.display()))?;
    let frag = st.fragment_size() as u64;
    Ok(Space {
        total: st.blocks() as u64 * frag,
        avail: st.blocks_available() as u64 * frag,
    })
}
