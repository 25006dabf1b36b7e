//! The byte path. Copies with roger's own read→hash→write loop (`std::fs::copy` would use
//! copy_file_range/reflink: no pass to hash, shared blocks) into an O_EXCL staging file,
//! fsyncs it, closes it with the error checked, drops its pages from the cache and re-reads it
//! from disk to verify. Reading, hashing and writing run on three threads so they overlap.
//! The hash pass notes SHA-256 chain marks (`chain`) so the staging copy's verify re-read can
//! run on every core.

use super::chain::{ChainHasher, Marks};
use super::{direct, failpoint};
use anyhow::{Context, Result};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// Chunk size of the pipeline: large sequential I/O (O_DIRECT gets no readahead), a few
/// chunks in flight.
pub const CHUNK: usize = 4 << 20;
const IN_FLIGHT: usize = 8;
/// Buffer and chunk alignment O_DIRECT needs (the largest logical block size in use).
pub const ALIGN: usize = 4096;

/// Read `r` to its end on this thread while one thread hashes each chunk and another hands it
/// to `sink` (the write), so reading, hashing and writing overlap. Returns the whole-file
/// SHA-256, the byte count and the chain marks.
pub fn pump<S>(mut r: impl Read, mut sink: S) -> io::Result<Marks>
where
    S: FnMut(&[u8]) -> io::Result<()> + Send,
{
    // (buffer, start of its ALIGN-aligned window, bytes in it)
    type Chunk = (Arc<Vec<u8>>, usize, usize);
    let (hash_tx, hash_rx) = mpsc::sync_channel::<Chunk>(IN_FLIGHT);
    let (sink_tx, sink_rx) = mpsc::sync_channel::<Chunk>(IN_FLIGHT);
    let (back_tx, back_rx) = mpsc::channel::<Arc<Vec<u8>>>();
    for _ in 0..IN_FLIGHT {
        back_tx
            .send(Arc::new(vec![0u8; CHUNK + ALIGN]))
            .expect("receiver alive");
    }
    let failed = AtomicBool::new(false);
    let sink_err: Mutex<Option<io::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        let back = back_tx.clone();
        let hasher = s.spawn(move || {
            let mut h = ChainHasher::default();
            for (buf, at, k) in hash_rx {
                h.update(&buf[at..at + k]);
                let _ = back.send(buf);
            }
            h.finish()
        });
        let back = back_tx;
        let (failed, sink_err) = (&failed, &sink_err);
        let writer = s.spawn(move || {
            for (buf, at, k) in sink_rx {
                // After an error, keep handing buffers back so the reader never waits forever.
                if !failed.load(Ordering::Relaxed) {
                    if let Err(e) = sink(&buf[at..at + k]) {
                        *sink_err.lock().expect("error slot") = Some(e);
                        failed.store(true, Ordering::Relaxed);
                    }
                }
                let _ = back.send(buf);
            }
        });
        let result: io::Result<()> = (|| loop {
            if failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            // A buffer is free again once both the hasher and the writer returned it.
            let mut buf = loop {
                let shared = back_rx.recv().expect("workers hand buffers back");
                if let Ok(b) = Arc::try_unwrap(shared) {
                    break b;
                }
            };
            // Aligned for O_DIRECT reads (the vector's heap block never moves).
            let at = buf.as_ptr().align_offset(ALIGN);
            let k = read_full(&mut r, &mut buf[at..at + CHUNK])?;
            if k == 0 {
                return Ok(());
            }
            let shared = Arc::new(buf);
            hash_tx.send((shared.clone(), at, k)).expect("hasher alive");
            sink_tx.send((shared, at, k)).expect("writer alive");
        })();
        drop(hash_tx);
        drop(sink_tx);
        let marks = hasher.join().expect("hasher thread");
        writer.join().expect("writer thread");
        result?;
        if let Some(e) = sink_err.lock().expect("error slot").take() {
            return Err(e);
        }
        Ok(marks)
    })
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Copy `src` into the new file `dst` (created O_EXCL), hashing in the same pass; fsync and
/// close with both errors checked. On error the caller discards `dst`: an fsync error is never
/// retried on the same file (the kernel reports write-back failure once; the pages may be gone).
/// The source is read with O_DIRECT too (buffered where the filesystem refuses it): a buffered
/// read copies every byte from the page cache into roger's buffer, which profiled at 40% of
/// a publish's CPU (`_copy_to_iter`; system time 1.8-2.6 s → 0.3 s per GiB), and a publish
/// is CPU-bound on a small machine, two SHA-256 passes being the rest. There is no readahead,
/// but `pump` keeps the next read going while earlier chunks hash and write (4 MiB reads: the
/// disk runs near its queue-depth-1 rate, above what one SHA-256 stream hashes), and a
/// directory copies several files at once. Dirty pages of a source just written are flushed
/// by the kernel before an O_DIRECT read, so the bytes are the file's.
pub fn copy_file(src: &Path, dst: &Path) -> Result<Marks> {
    let input = File::open(src).with_context(|| format!("opening {}", src.display()))?;
    let len = input
        .metadata()
        .with_context(|| format!("reading {}", src.display()))?
        .len();
    let input = direct::DirectReader::new(input, 0, len);
    let out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(dst)
        .with_context(|| format!("creating staging file {}", dst.display()))?;
    let mut writer = direct::StagingWriter::new(out);
    let marks = pump(input, |chunk| {
        writer.write_chunk(chunk)?;
        super::progress::add(chunk.len() as u64);
        Ok(())
    })
    .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    let out = writer
        .finish()
        .with_context(|| format!("writing {}", dst.display()))?;
    failpoint::hit("after_staging_write");
    fsync_once(&out, dst)?;
    if let Some(len) = failpoint::truncate_after_fsync(dst) {
        // Test-only: the WSL failure, bytes lost after fsync said they were safe.
        out.set_len(len)
            .with_context(|| format!("test fault: truncating {}", dst.display()))?;
    }
    close(out).with_context(|| format!("closing {}", dst.display()))?;
    Ok(marks)
}

/// fsync; an error is final for this file (never retried: the kernel reports a write-back
/// error once, and the pages may already be gone).
fn fsync_once(f: &File, path: &Path) -> Result<()> {
    f.sync_all().map_err(|e| {
        anyhow::anyhow!(
            "fsync of {} failed: {e}; that copy is discarded (fsync is never retried on the same file)",
            path.display()
        )
    })
}

/// fsync, then close with its error checked.
pub fn sync_and_close(f: File, path: &Path) -> Result<()> {
    fsync_once(&f, path)?;
    close(f).with_context(|| format!("closing {}", path.display()))
}

/// close(2) with its error reported (dropping a File ignores it).
pub fn close(f: File) -> io::Result<()> {
    nix::unistd::close(f.into_raw_fd()).map_err(io::Error::from)
}

/// What the verify pass saw, so a caller can show the bytes came from disk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Reread {
    pub sha256: String,
    pub size: u64,
    /// Bytes actually read back.
    pub bytes_read: u64,
    /// Pages of the file still in the page cache right before the re-read (mincore), and of how
    /// many; `None` where mincore is unavailable.
    pub pages_resident: Option<u64>,
    pub pages_total: Option<u64>,
    /// The re-read used O_DIRECT (bypassed the page cache altogether).
    pub direct_io: bool,
}

/// Drop the file's pages from the cache (it is fsynced, so they are clean), count what is still
/// resident, then re-read and hash it with O_DIRECT (straight from the device, no page cache;
/// buffered where the filesystem refuses O_DIRECT).
pub fn reread_from_disk(path: &Path) -> Result<Reread> {
    let f = File::open(path).with_context(|| format!("opening {} to verify", path.display()))?;
    let len = f.metadata()?.len();
    let _ = nix::fcntl::posix_fadvise(
        f.as_raw_fd(),
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    );
    let resident = resident_pages(&f, len);
    let mut reader = direct::DirectReader::open(path, len)?;
    let marks = pump(&mut reader, |chunk| {
        super::progress::add(chunk.len() as u64);
        Ok(())
    })
    .with_context(|| format!("re-reading {}", path.display()))?;
    Ok(Reread {
        sha256: marks.sha256,
        size: len,
        bytes_read: marks.size,
        pages_resident: resident.map(|r| r.0),
        pages_total: resident.map(|r| r.1),
        direct_io: reader.direct,
    })
}

/// (resident, total) pages of the file per mincore(2).
pub fn resident_pages(f: &File, len: u64) -> Option<(u64, u64)> {
    if len == 0 {
        return Some((0, 0));
    }
    let len = usize::try_from(len).ok()?;
    // SAFETY: a read-only shared mapping of a file we hold open, unmapped before return; the
    // vector has one byte per page as mincore requires.
    unsafe {
        let page = libc::sysconf(libc::_SC_PAGESIZE);
        if page <= 0 {
            return None;
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        let pages = len.div_ceil(page as usize);
        let mut vec = vec![0u8; pages];
        let r = libc::mincore(p, len, vec.as_mut_ptr());
        libc::munmap(p, len);
        if r != 0 {
            return None;
        }
        Some((
            vec.iter().filter(|b| **b & 1 == 1).count() as u64,
            pages as u64,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn pump_hashes_what_it_passes_on() {
        // More than one chunk and not a multiple of it.
        let data: Vec<u8> = (0..(CHUNK * 2 + 12345)).map(|i| (i % 251) as u8).collect();
        let mut seen = Vec::new();
        let m = pump(&data[..], |c| {
            seen.extend_from_slice(c);
            Ok(())
        })
        .unwrap();
        assert_eq!(m.size, data.len() as u64);
        assert_eq!(seen, data);
        assert_eq!(m.sha256, crate::digest::hex(&Sha256::digest(&data)));
        let m = pump(&b""[..], |_| Ok(())).unwrap();
        assert_eq!(m.size, 0);
        assert_eq!(m.sha256, crate::digest::hex(&Sha256::digest(b"")));
    }

    #[test]
    fn sink_error_stops_the_pump() {
        let data = vec![1u8; CHUNK * 3];
        let err = pump(&data[..], |_| Err(io::Error::other("disk full"))).unwrap_err();
        assert_eq!(err.to_string(), "disk full");
    }

    #[test]
    fn copy_refuses_an_existing_staging_name_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.bin");
        std::fs::write(&src, vec![9u8; 100_000]).unwrap();
        let dst = dir.path().join(".roger-staging-x");
        let m = copy_file(&src, &dst).unwrap();
        let n = m.size;
        assert_eq!(n, 100_000);
        assert!(copy_file(&src, &dst).is_err(), "O_EXCL");
        let r = reread_from_disk(&dst).unwrap();
        assert_eq!((r.sha256, r.size, r.bytes_read), (m.sha256, n, n));
        assert_eq!(r.pages_total, Some(100_000u64.div_ceil(4096)));
    }

    #[test]
    fn dropped_pages_are_really_gone_before_the_reread() {
        // Contrast for the verify proof: a freshly written file is cached; after fsync and
        // DONTNEED, mincore sees (almost) none of it, and the re-read still gets every byte.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![3u8; 4 << 20]).unwrap();
        let f = File::open(&p).unwrap();
        let (resident, total) = resident_pages(&f, 4 << 20).unwrap();
        assert_eq!(total, 1024);
        f.sync_all().unwrap();
        let r = reread_from_disk(&p).unwrap();
        assert_eq!(r.bytes_read, 4 << 20);
        let tmpfs = nix::sys::statfs::statfs(dir.path())
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
        if tmpfs {
            return; // tmpfs pages are the storage itself: nothing to drop
        }
        assert!(
            resident > 512,
            "written pages should be cached: {resident}/{total}"
        );
        assert!(
            r.pages_resident.unwrap() < 64,
            "after DONTNEED: {:?}/{total}",
            r.pages_resident
        );
    }
}
