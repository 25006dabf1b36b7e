//! Where the nodes of one job meet: a small key → bytes store. [`Store`] is the seam (the
//! health tests use a map); [`DirStore`] is a directory every node sees. Keys are relative
//! paths (`nodes/node-1.json`); no key carries a host name.

use crate::sys::fsx::{write_atomic, Durability, Replace};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

pub trait Store {
    /// Replace `key` with `bytes`: readers see the old value or the new, never a mix.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()>;
    /// `key`'s bytes, `None` when absent.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// Where the store is, for messages (`dir /shared/job`).
    fn describe(&self) -> String;
}

/// A directory on a filesystem every node mounts. `put` is a rename over the key (atomic on
/// POSIX filesystems and NFS).
pub struct DirStore {
    root: PathBuf,
}

impl DirStore {
    /// The store at `root`, created when missing (the first node to start makes it).
    pub fn open(root: &Path) -> Result<DirStore> {
        std::fs::create_dir_all(root)
            .with_context(|| format!("[cluster] store: creating {}", root.display()))?;
        Ok(DirStore {
            root: root.to_path_buf(),
        })
    }

    /// A store that vanished (an unmounted share) is an error, never silently made again:
    /// its directories below the root are made as needed.
    fn path(&self, key: &str) -> Result<PathBuf> {
        if !self.root.is_dir() {
            anyhow::bail!(
                "[cluster] store {} is not a directory (unmounted?)",
                self.root.display()
            );
        }
        let p = self.root.join(key);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)
                .with_context(|| format!("[cluster] store: creating {}", d.display()))?;
        }
        Ok(p)
    }
}

impl Store for DirStore {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let p = self.path(key)?;
        // Rewritten every sample: atomic, not fsynced (a lost heartbeat is the next one).
        write_atomic(&p, bytes, Replace::new(Durability::Atomic, 0o644))
            .with_context(|| format!("[cluster] store: writing {}", p.display()))?;
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let p = self.root.join(key);
        match std::fs::read(&p) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A store directory that is gone (unmounted) is an error, not an empty store.
                if self.root.is_dir() {
                    Ok(None)
                } else {
                    anyhow::bail!(
                        "[cluster] store {} is not a directory (unmounted?)",
                        self.root.display()
                    )
                }
            }
            Err(e) => Err(e).with_context(|| format!("[cluster] store: reading {}", p.display())),
        }
    }

    fn describe(&self) -> String {
        format!("dir {}", self.root.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_replaces_and_get_reads() {
        let d = tempfile::tempdir().unwrap();
        let s = DirStore::open(d.path()).unwrap();
        assert_eq!(s.get("nodes/node-0.json").unwrap(), None);
        s.put("nodes/node-0.json", b"a").unwrap();
        s.put("nodes/node-0.json", b"b").unwrap();
        assert_eq!(s.get("nodes/node-0.json").unwrap().unwrap(), b"b");
        let left: Vec<_> = std::fs::read_dir(d.path().join("nodes"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "no temporary left: {left:?}");
    }

    #[test]
    fn a_store_that_is_gone_is_an_error_not_silence() {
        let d = tempfile::tempdir().unwrap();
        let s = DirStore::open(&d.path().join("share")).unwrap();
        std::fs::rename(d.path().join("share"), d.path().join("away")).unwrap();
        let e = s.get("nodes/node-1.json").unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
        let e = s.put("nodes/node-0.json", b"x").unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
        assert!(!d.path().join("share").exists(), "not made again");
    }
}
