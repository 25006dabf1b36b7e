//! The byte path. Copies with roger's own read→hash→write loop (`std::fs::copy` would use
//! copy_file_range/reflink: no pass to hash, shared blocks) into an O_EXCL staging file,
//! fsyncs it, closes it with the error checked, drops its pages from the cache and re-reads it
//! from disk to verify. Reading, hashing and writing run on their own threads so they
//! overlap, with several reads and writes in flight.
//! The hash pass notes SHA-256 chain marks (`chain`) so the staging copy's verify re-read can
//! run on every core.

use super::chain::{ChainHasher, Marks};
use super::io::{resident_pages, AlignedBuf};
use super::{direct, failpoint};
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// Chunk size of the pipeline: large sequential I/O (O_DIRECT gets no readahead), a few
/// chunks in flight.
pub const CHUNK: usize = 4 << 20;
const IN_FLIGHT: usize = 8;
/// Reads in flight at once through the page cache: one, whose readahead keeps the device busy
/// (measured on the 2-CPU virtio VM of issue 27: faster than O_DIRECT reads from small pages
/// one or three at a time, which have none).
const READERS_BUFFERED: usize = 1;
/// O_DIRECT reads in flight at once (no readahead: the next request must already be queued).
const READERS_DIRECT: usize = 2;
/// Writes in flight at once into the preallocated staging file: under O_DIRECT, with one the
/// device idles while each 4 MiB write waits for its completion.
const WRITERS: usize = 2;

/// Read `len` bytes with `read(buf, offset, want)` on `readers` threads at once, hash them
/// in order on one thread and hand each chunk to `sink(chunk, offset)` on `WRITERS` threads,
/// so reading, hashing and writing overlap and several requests are in flight. `IN_FLIGHT`
/// buffers of `CHUNK` bytes bound the memory. Returns the whole-file SHA-256, the byte count
/// and the chain marks. A source that ends before `len` is an error (it changed while being
/// copied); the first error stops the readers and is returned.
pub fn pump_at<R, S>(len: u64, readers: usize, read: R, sink: S) -> io::Result<Marks>
where
    R: Fn(&mut [u8], u64, usize) -> io::Result<usize> + Sync,
    S: Fn(&[u8], u64) -> io::Result<()> + Sync,
{
    // (chunk index, buffer, bytes in it)
    type Chunk = (u64, Arc<AlignedBuf>, usize);
    let chunks = len.div_ceil(CHUNK as u64);
    let lanes = |n: usize| n.min(chunks as usize).max(1);
    let (free_tx, free_rx) = mpsc::channel::<Arc<AlignedBuf>>();
    for _ in 0..lanes(IN_FLIGHT) {
        free_tx
            .send(Arc::new(AlignedBuf::new(CHUNK)))
            .expect("receiver alive");
    }
    let free_rx = Mutex::new(free_rx);
    let (hash_tx, hash_rx) = mpsc::sync_channel::<Chunk>(IN_FLIGHT);
    let (sink_tx, sink_rx) = mpsc::sync_channel::<Chunk>(IN_FLIGHT);
    let sink_rx = Mutex::new(sink_rx);
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let first_err: Mutex<Option<io::Error>> = Mutex::new(None);
    let fail = |e: io::Error| {
        first_err.lock().expect("error slot").get_or_insert(e);
        failed.store(true, Ordering::Relaxed);
    };
    let marks = std::thread::scope(|s| {
        let free = free_tx.clone();
        let hasher = s.spawn(move || {
            // Chunks arrive in any order; the hash takes them in file order.
            let mut h = ChainHasher::default();
            let mut waiting = BTreeMap::new();
            let mut due = 0u64;
            for (i, buf, k) in hash_rx {
                waiting.insert(i, (buf, k));
                while let Some((buf, k)) = waiting.remove(&due) {
                    h.update(&buf[..k]);
                    due += 1;
                    let _ = free.send(buf);
                }
            }
            h.finish()
        });
        let (sink_rx, failed, fail, sink) = (&sink_rx, &failed, &fail, &sink);
        for _ in 0..lanes(WRITERS) {
            let free = free_tx.clone();
            s.spawn(move || loop {
                let Ok((i, buf, k)) = sink_rx.lock().expect("sink queue").recv() else {
                    return;
                };
                // After an error, keep handing buffers back so no reader waits forever.
                if !failed.load(Ordering::Relaxed) {
                    if let Err(e) = sink(&buf[..k], i * CHUNK as u64) {
                        fail(e);
                    }
                }
                let _ = free.send(buf);
            });
        }
        let (free_rx, next, read) = (&free_rx, &next, &read);
        for _ in 0..lanes(readers) {
            let (free, hash_tx, sink_tx) = (free_tx.clone(), hash_tx.clone(), sink_tx.clone());
            s.spawn(move || loop {
                // A buffer is free again once both the hasher and a writer returned it.
                let mut buf = loop {
                    let shared = free_rx.lock().expect("free buffers").recv();
                    if let Ok(b) = Arc::try_unwrap(shared.expect("free_tx alive")) {
                        break b;
                    }
                };
                let i = next.fetch_add(1, Ordering::Relaxed);
                if failed.load(Ordering::Relaxed) || i >= chunks {
                    // Pass the buffer on: it wakes a reader still waiting for one.
                    let _ = free.send(Arc::new(buf));
                    return;
                }
                let off = i * CHUNK as u64;
                let want = (len - off).min(CHUNK as u64) as usize;
                let err = match read(&mut buf, off, want) {
                    Ok(k) if k == want => None,
                    Ok(k) => Some(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "the source ended at byte {} of {len} while being copied (it changed)",
                            off + k as u64
                        ),
                    )),
                    Err(e) => Some(e),
                };
                if let Some(e) = err {
                    fail(e);
                    let _ = free.send(Arc::new(buf));
                    return;
                }
                let shared = Arc::new(buf);
                hash_tx
                    .send((i, shared.clone(), want))
                    .expect("hasher alive");
                sink_tx.send((i, shared, want)).expect("writers alive");
            });
        }
        drop((hash_tx, sink_tx));
        hasher.join().expect("hasher thread")
    });
    match first_err.into_inner().expect("error slot") {
        Some(e) => Err(e),
        None => Ok(marks),
    }
}

/// Copy `src` into the new file `dst` (created O_EXCL), hashing in the same pass; fsync and
/// close with both errors checked. On error the caller discards `dst`: an fsync error is never
/// retried on the same file (the kernel reports write-back failure once; the pages may be gone).
/// The source is read through the page cache with sequential readahead where half or more
/// of it is cached (a checkpoint just saved usually is), else with O_DIRECT, two reads in
/// flight, into the same huge-page buffers (`cold_source`; O_DIRECT reads from small pages,
/// f731360, left the device idle between requests). The staging copy goes into
/// space reserved up front where the filesystem can (`fallocate`), written with O_DIRECT from
/// the pipeline's huge-page buffers (`io::AlignedBuf`) where the kernel offers huge pages:
/// measured side by side on the 2-core virtio VM (issue 27, page cache dropped, medians of 3),
/// 1 GiB 2.49 s against 3.94 s for O_DIRECT from 4 KiB pages and 3.10 s buffered, with
/// `cp && sync` at 2.75 s and 2.04 s in those runs. Without huge pages it is written buffered,
/// its write-back started every 64 MiB (`DirectFile`'s buffered mode) so the fsync has little
/// left, which beat O_DIRECT from small pages there (2.32 s against 3.29 s). Either way the
/// verify re-read is O_DIRECT after the fsync: the bytes checked are the device's.
pub fn copy_file(src: &Path, dst: &Path) -> Result<Marks> {
    let input = File::open(src).with_context(|| format!("opening {}", src.display()))?;
    let len = input
        .metadata()
        .with_context(|| format!("reading {}", src.display()))?
        .len();
    let _ = nix::fcntl::posix_fadvise(
        input.as_raw_fd(),
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_SEQUENTIAL,
    );
    let input = if cold_source(&input, len) {
        direct::DirectFile::new(input)
    } else {
        direct::DirectFile::buffered(input)
    };
    let readers = if input.direct() {
        READERS_DIRECT
    } else {
        READERS_BUFFERED
    };
    let out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(dst)
        .with_context(|| format!("creating staging file {}", dst.display()))?;
    if len > 0 {
        // Best effort: where it is refused (EOPNOTSUPP), or runs out of space, the writes
        // themselves allocate, or fail the copy with their own error.
        let _ = nix::fcntl::fallocate(
            out.as_raw_fd(),
            nix::fcntl::FallocateFlags::empty(),
            0,
            len as i64,
        );
    }
    let writer = if super::io::thp_available() {
        direct::DirectFile::new(out)
    } else {
        direct::DirectFile::buffered(out)
    };
    let marks = pump_at(
        len,
        readers,
        |buf, off, want| input.read_at(buf, off, want),
        |chunk, off| {
            writer.write_at(chunk, off)?;
            super::progress::add(chunk.len() as u64);
            Ok(())
        },
    )
    .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    let out = writer
        .finish(marks.size)
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

/// Read the source with O_DIRECT: most of it is not in the page cache (mincore), so every
/// byte comes from the device either way, and O_DIRECT into the huge-page buffers skips the
/// page cache's copy (29% of a cold 8-shard publish's samples in `perf`) and fills no cache.
/// Same rotation (issue 27): 8 shards 9.62 s against 10.11 s, CPU 6.17 s against 7.81 s.
/// A checkpoint just saved is usually cached, often still dirty: read through the cache
/// (O_DIRECT would first force its write-back and then read it from the device).
fn cold_source(f: &File, len: u64) -> bool {
    len > 0
        && super::io::thp_available()
        && resident_pages(f, len).is_some_and(|(resident, total)| resident * 2 < total)
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
    let reader = direct::DirectFile::new(f);
    let marks = pump_at(
        len,
        READERS_BUFFERED,
        |buf, off, want| reader.read_at(buf, off, want),
        |chunk, _| {
            super::progress::add(chunk.len() as u64);
            Ok(())
        },
    )
    .with_context(|| format!("re-reading {}", path.display()))?;
    Ok(Reread {
        sha256: marks.sha256,
        size: len,
        bytes_read: marks.size,
        pages_resident: resident.map(|r| r.0),
        pages_total: resident.map(|r| r.1),
        direct_io: reader.direct(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// `pump_at` over bytes in memory: (marks, what the sink got, laid out by offset).
    fn pump_mem(data: &[u8], len: u64, readers: usize) -> io::Result<(Marks, Vec<u8>)> {
        let out = Mutex::new(vec![0u8; data.len()]);
        let m = pump_at(
            len,
            readers,
            |buf, off, want| {
                let o = (off as usize).min(data.len());
                let k = want.min(data.len() - o);
                buf[..k].copy_from_slice(&data[o..o + k]);
                Ok(k)
            },
            |c, off| {
                out.lock().unwrap()[off as usize..off as usize + c.len()].copy_from_slice(c);
                Ok(())
            },
        )?;
        Ok((m, out.into_inner().unwrap()))
    }

    #[test]
    fn pump_hashes_in_order_what_it_writes_out_of_order() {
        // More chunks than buffers, and not a multiple of a chunk: readers and writers run
        // on several threads, the hash still sees the bytes in file order.
        let data: Vec<u8> = (0..(CHUNK * (IN_FLIGHT + 3) + 12345))
            .map(|i| (i % 251) as u8 ^ (i / CHUNK) as u8)
            .collect();
        let (m, seen) = pump_mem(&data, data.len() as u64, 3).unwrap();
        assert_eq!(m.size, data.len() as u64);
        assert!(seen == data, "the sink got every chunk at its offset");
        assert_eq!(m.sha256, crate::digest::hex(&Sha256::digest(&data)));
        let (m, _) = pump_mem(b"", 0, 1).unwrap();
        assert_eq!(m.size, 0);
        assert_eq!(m.sha256, crate::digest::hex(&Sha256::digest(b"")));
    }

    #[test]
    fn errors_stop_the_pump_without_hanging() {
        let data = vec![1u8; CHUNK * (IN_FLIGHT + 4)];
        let len = data.len() as u64;
        let err = pump_at(
            len,
            2,
            |_, _, want| Ok(want),
            |_, _| Err(io::Error::other("disk full")),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        // A read error in the middle, while other readers hold buffers.
        let err = pump_at(
            len,
            2,
            |_, off, want| {
                if off == 5 * CHUNK as u64 {
                    Err(io::Error::other("EIO"))
                } else {
                    Ok(want)
                }
            },
            |_, _| Ok(()),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "EIO");
        // A source that shrank while being copied (one reader: the first short read is the
        // first error).
        let err = pump_mem(&data[..CHUNK + 10], len, 1).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("ended at byte {} of {len}", CHUNK + 10)),
            "{err}"
        );
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
    fn staging_writes_bypass_the_cache_where_huge_pages_back_the_buffers() {
        // The write path follows the buffers: O_DIRECT (nothing of the copy left in the page
        // cache) where huge pages back them, buffered (the copy cached until dropped) where not.
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.bin");
        let data: Vec<u8> = (0..(3 * CHUNK + 4097)).map(|i| (i % 241) as u8).collect();
        std::fs::write(&src, &data).unwrap();
        let dst = dir.path().join(".roger-staging-y");
        let m = copy_file(&src, &dst).unwrap();
        assert_eq!(m.size, data.len() as u64);
        let f = File::open(&dst).unwrap();
        let direct_refused = {
            // tmpfs before Linux 6.6 and some FUSE mounts refuse O_DIRECT: the copy falls back.
            let probe = direct::DirectFile::open(&dst).unwrap();
            let mut buf = AlignedBuf::new(4096);
            probe.read_at(&mut buf, 0, 4096).unwrap();
            !probe.direct()
        };
        // Where O_DIRECT is refused, only the bytes are checked.
        let cached_as_expected = |f: &File, what: &str| {
            let (resident, total) = resident_pages(f, data.len() as u64).unwrap();
            if super::super::io::thp_available() && !direct_refused {
                assert!(resident < 8, "O_DIRECT {what}: {resident}/{total} cached");
            } else if !direct_refused {
                assert!(
                    resident > total / 2,
                    "buffered {what}: {resident}/{total} cached"
                );
            }
        };
        // Counted before anything reads the copy through the cache (that would cache it).
        cached_as_expected(&f, "staging writes");
        assert_eq!(
            std::fs::read(&dst).unwrap(),
            data,
            "bytes and size, padded tail cut"
        );

        // A cold source (its pages dropped) is read with O_DIRECT where huge pages back the
        // buffers: it is still not cached afterwards, and the copy holds the same bytes.
        let f = File::open(&src).unwrap();
        f.sync_all().unwrap();
        let _ = nix::fcntl::posix_fadvise(
            f.as_raw_fd(),
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        );
        let dst2 = dir.path().join(".roger-staging-z");
        let m2 = copy_file(&src, &dst2).unwrap();
        assert_eq!((&m2.sha256, m2.size), (&m.sha256, m.size));
        cached_as_expected(&f, "source reads");
        assert_eq!(std::fs::read(&dst2).unwrap(), data);
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
