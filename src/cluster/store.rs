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
    /// Write `key` only if it does not exist: true when this call wrote it (the first writer
    /// wins; the others read the winner's bytes).
    fn create(&self, key: &str, bytes: &[u8]) -> Result<bool>;
    /// The keys under `prefix` (a directory: `verdicts/`), sorted.
    fn list(&self, prefix: &str) -> Result<Vec<String>>;
    /// Where the store is, for messages (`dir /shared/job`).
    fn describe(&self) -> String;
}

/// A directory on a filesystem every node mounts. `put` is a rename over the key (atomic on
/// POSIX filesystems and NFS); `create` links a complete temporary to the key, which fails
/// with EEXIST for every writer but the first (link(2) is atomic on NFS, where O_EXCL is not
/// on old clients).
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

    /// The store at `root` for reading only (`roger status`): nothing is created, and a
    /// store that is not there reads as an error.
    pub fn existing(root: &Path) -> DirStore {
        DirStore {
            root: root.to_path_buf(),
        }
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

    fn create(&self, key: &str, bytes: &[u8]) -> Result<bool> {
        use std::io::Write;
        let p = self.path(key)?;
        let dir = p.parent().expect("a key has a parent");
        let mut tmp = tempfile::Builder::new()
            .prefix(".roger-tmp-")
            .tempfile_in(dir)
            .with_context(|| format!("[cluster] store: a temporary in {}", dir.display()))?;
        tmp.write_all(bytes)?;
        tmp.as_file().sync_all()?;
        match std::fs::hard_link(tmp.path(), &p) {
            Ok(()) => {
                crate::sys::fsx::fsync_dir(dir)?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e).with_context(|| format!("[cluster] store: creating {}", p.display())),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let dir = self.path(&format!("{prefix}/x"))?;
        let dir = dir.parent().expect("a key has a parent");
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .with_context(|| format!("[cluster] store: listing {}", dir.display()))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .map(|n| format!("{prefix}/{n}"))
            .collect();
        out.sort();
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("dir {}", self.root.display())
    }
}

/// Any store with a time limit on each call: a store that hangs (a bucket whose network is
/// gone, a hard-mounted NFS share whose server is) costs the watch at most `limit` per call,
/// never its own sampling. The call runs on its own thread; past the limit it is an error,
/// and while it still hangs every later call fails at once (one stuck request at a time, no
/// pile of threads). What it did after its answer was given up on is seen in the store by
/// the next calls (a verdict written late is listed then).
pub struct Bounded {
    inner: std::sync::Arc<dyn Store + Send + Sync>,
    limit: std::time::Duration,
    busy: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Bounded {
    pub fn new(inner: Box<dyn Store + Send + Sync>, limit: std::time::Duration) -> Bounded {
        Bounded {
            inner: inner.into(),
            limit,
            busy: Default::default(),
        }
    }

    fn call<T: Send + 'static>(
        &self,
        what: String,
        f: impl FnOnce(&dyn Store) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        use std::sync::atomic::Ordering;
        let limit = self.limit.as_secs_f64();
        if self.busy.swap(true, Ordering::AcqRel) {
            anyhow::bail!(
                "{}: an earlier request has had no answer for over {limit:.1}s",
                self.inner.describe()
            );
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (inner, busy) = (self.inner.clone(), self.busy.clone());
        let spawned = std::thread::Builder::new()
            .name("roger-cluster-io".into())
            .spawn(move || {
                let r = f(inner.as_ref());
                busy.store(false, Ordering::Release);
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            self.busy.store(false, Ordering::Release);
            return Err(e).context("[cluster] store: starting its I/O thread");
        }
        match rx.recv_timeout(self.limit) {
            Ok(r) => r,
            Err(_) => anyhow::bail!(
                "{}: no answer {what} within {limit:.1}s",
                self.inner.describe()
            ),
        }
    }
}

impl Store for Bounded {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let (k, b) = (key.to_string(), bytes.to_vec());
        self.call(format!("writing {key}"), move |s| s.put(&k, &b))
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let k = key.to_string();
        self.call(format!("reading {key}"), move |s| s.get(&k))
    }

    fn create(&self, key: &str, bytes: &[u8]) -> Result<bool> {
        let (k, b) = (key.to_string(), bytes.to_vec());
        self.call(format!("creating {key}"), move |s| s.create(&k, &b))
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let p = prefix.to_string();
        self.call(format!("listing {prefix}"), move |s| s.list(&p))
    }

    fn describe(&self) -> String {
        self.inner.describe()
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
        assert!(s.create("verdicts/a.json", b"first").unwrap());
        assert!(!s.create("verdicts/a.json", b"second").unwrap());
        assert_eq!(s.get("verdicts/a.json").unwrap().unwrap(), b"first");
        assert_eq!(s.list("verdicts").unwrap(), vec!["verdicts/a.json"]);
        assert!(s.list("none").unwrap().is_empty());
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
        let never = DirStore::existing(&d.path().join("never"));
        assert!(never.get("nodes/node-0.json").is_err());
        assert!(!d.path().join("never").exists(), "a reader makes nothing");
    }

    /// A store whose calls hang until told to go on.
    struct Stuck(std::sync::Arc<std::sync::Mutex<()>>);

    impl Store for Stuck {
        fn put(&self, _: &str, _: &[u8]) -> Result<()> {
            let _held = self.0.lock().unwrap();
            Ok(())
        }
        fn get(&self, _: &str) -> Result<Option<Vec<u8>>> {
            let _held = self.0.lock().unwrap();
            Ok(Some(b"x".to_vec()))
        }
        fn create(&self, _: &str, _: &[u8]) -> Result<bool> {
            Ok(true)
        }
        fn list(&self, _: &str) -> Result<Vec<String>> {
            Ok(Vec::new())
        }
        fn describe(&self) -> String {
            "stuck".into()
        }
    }

    #[test]
    fn a_store_that_hangs_costs_its_limit_once_and_then_fails_at_once() {
        let gate = std::sync::Arc::new(std::sync::Mutex::new(()));
        let held = gate.lock().unwrap();
        let b = Bounded::new(
            Box::new(Stuck(gate.clone())),
            std::time::Duration::from_millis(200),
        );
        let t0 = std::time::Instant::now();
        let e = b.put("nodes/node-0.json", b"r").unwrap_err().to_string();
        assert!(t0.elapsed() >= std::time::Duration::from_millis(200));
        assert_eq!(e, "stuck: no answer writing nodes/node-0.json within 0.2s");
        let t1 = std::time::Instant::now();
        let e = b.get("nodes/node-1.json").unwrap_err().to_string();
        assert!(
            t1.elapsed() < std::time::Duration::from_millis(100),
            "no second wait"
        );
        assert!(e.contains("an earlier request has had no answer"), "{e}");
        // The store answers again: the stuck call finishes, and calls go through.
        drop(held);
        let t2 = std::time::Instant::now();
        while b.get("k").is_err() {
            assert!(t2.elapsed() < std::time::Duration::from_secs(5));
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(b.get("k").unwrap(), Some(b"x".to_vec()));
    }
}
