//! Positioned I/O on a checkpoint file, O_DIRECT or buffered. The verify re-read is O_DIRECT,
//! so the bytes hashed are the device's, not the page cache's; where a filesystem refuses
//! O_DIRECT (EINVAL: some 9p/drvfs/FUSE mounts) it falls back to buffered reads of pages
//! dropped first. The copy reads its source buffered (readahead keeps the device busy, and a
//! fresh checkpoint is often still cached) and writes the staging copy with O_DIRECT from
//! huge-page buffers, or buffered where the kernel offers no huge pages (issue 27 measured
//! O_DIRECT from 4 KiB pages slower), starting write-back every 64 MiB so the fsync has little
//! left; the staging copy's pages are dropped before its re-read.

use super::io::{AlignedBuf, ALIGN};
use anyhow::{Context, Result};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Buffered writes queue write-back every this many bytes so the final fsync has little left.
const KICK_WRITEBACK: u64 = 64 << 20;

/// Switch O_DIRECT on or off for an open file.
fn set_direct(f: &File, on: bool) -> io::Result<()> {
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on an fd we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let want = if on {
        flags | libc::O_DIRECT
    } else {
        flags & !libc::O_DIRECT
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, want) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn is_einval(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// A file read or written at explicit offsets, with O_DIRECT where the filesystem allows it,
/// by several threads at once (`copy::pump_at` keeps several reads and writes in flight: an
/// O_DIRECT request gets no readahead and no write-back queue, so one at a time leaves the
/// device idle between requests). Callers hand it `ALIGN`-aligned buffers and offsets that
/// are multiples of `ALIGN`; the unaligned tail of a write is padded here and cut back by
/// `finish`.
pub struct DirectFile {
    f: File,
    direct: AtomicBool,
    /// An O_DIRECT transfer succeeded: EINVAL from now on is an error, not a refusal.
    proven: AtomicBool,
    padded: AtomicBool,
    /// Buffered bytes written since write-back was last started.
    unkicked: AtomicU64,
}

impl DirectFile {
    pub fn new(f: File) -> DirectFile {
        let direct = set_direct(&f, true).is_ok();
        DirectFile {
            f,
            direct: AtomicBool::new(direct),
            proven: AtomicBool::new(false),
            padded: AtomicBool::new(false),
            unkicked: AtomicU64::new(0),
        }
    }

    /// Through the page cache from the start (no O_DIRECT).
    pub fn buffered(f: File) -> DirectFile {
        DirectFile {
            f,
            direct: AtomicBool::new(false),
            proven: AtomicBool::new(false),
            padded: AtomicBool::new(false),
            unkicked: AtomicU64::new(0),
        }
    }

    pub fn open(path: &Path) -> Result<DirectFile> {
        let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        Ok(DirectFile::new(f))
    }

    /// Every transfer so far used O_DIRECT.
    pub fn direct(&self) -> bool {
        self.direct.load(Ordering::Relaxed)
    }

    /// An O_DIRECT transfer failed with EINVAL: before any succeeded, the filesystem refuses
    /// O_DIRECT (go buffered, `true`); after, it is the caller's error (`false`).
    fn fall_back(&self, e: &io::Error) -> io::Result<bool> {
        if !is_einval(e) || self.proven.load(Ordering::Relaxed) {
            return Ok(false);
        }
        set_direct(&self.f, false)?;
        self.direct.store(false, Ordering::Relaxed);
        Ok(true)
    }

    /// Read up to `want` bytes at `off` into `buf` (its length at least `want` rounded up to
    /// `ALIGN`), as many calls as that takes; fewer only at the end of the file.
    pub fn read_at(&self, buf: &mut [u8], off: u64, want: usize) -> io::Result<usize> {
        let mut n = 0;
        while n < want {
            let direct = self.direct();
            // Whole blocks only under O_DIRECT (the last one may run past the end of the file).
            let len = if direct {
                (want - n).div_ceil(ALIGN) * ALIGN
            } else {
                want - n
            }
            .min(buf.len() - n);
            match self.f.read_at(&mut buf[n..n + len], off + n as u64) {
                Ok(0) => break,
                Ok(k) => {
                    n += k;
                    if direct {
                        self.proven.store(true, Ordering::Relaxed);
                        if k % ALIGN != 0 {
                            // The end of the file: the next offset is unaligned.
                            break;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if direct && self.fall_back(&e)? => {}
                Err(e) => return Err(e),
            }
        }
        // Never past `want`, even if the file grew.
        Ok(n.min(want))
    }

    /// Write `chunk` at `off`. Only the last chunk of a file may be shorter than a whole
    /// number of blocks.
    pub fn write_at(&self, chunk: &[u8], off: u64) -> io::Result<()> {
        while self.direct() {
            let aligned =
                chunk.len().is_multiple_of(ALIGN) && chunk.as_ptr().align_offset(ALIGN) == 0;
            let r = if aligned {
                self.f.write_all_at(chunk, off)
            } else {
                // The tail: pad to whole blocks in an aligned scratch buffer.
                let mut scratch = AlignedBuf::new(chunk.len().div_ceil(ALIGN) * ALIGN);
                scratch[..chunk.len()].copy_from_slice(chunk);
                self.padded.store(true, Ordering::Relaxed);
                self.f.write_all_at(&scratch, off)
            };
            match r {
                Ok(()) => {
                    self.proven.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) if self.fall_back(&e)? => {}
                Err(e) => return Err(e),
            }
        }
        self.f.write_all_at(chunk, off)?;
        let len = chunk.len() as u64;
        if self.unkicked.fetch_add(len, Ordering::Relaxed) + len >= KICK_WRITEBACK {
            self.unkicked.store(0, Ordering::Relaxed);
            // Asynchronous: start write-back of what is written so far (fsync still decides).
            // SAFETY: plain syscall on an fd we own.
            unsafe {
                libc::sync_file_range(self.f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
            }
        }
        Ok(())
    }

    /// After the last write: cut off the tail padding (the file is then exactly `len`
    /// bytes) and hand the file back.
    pub fn finish(self, len: u64) -> io::Result<File> {
        if self.padded.load(Ordering::Relaxed) {
            self.f.set_len(len)?;
        }
        Ok(self.f)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn odd_sizes_round_trip_through_direct_io() {
        let dir = tempfile::tempdir().unwrap();
        for size in [0usize, 1, 4095, 4096, 4097, (1 << 20) + 3] {
            let data: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
            let src = dir.path().join(format!("s{size}"));
            std::fs::write(&src, &data).unwrap();
            // Source cached, then evicted (read back from the device).
            for cold in [false, true] {
                if cold {
                    let f = std::fs::File::open(&src).unwrap();
                    f.sync_all().unwrap();
                    let _ = nix::fcntl::posix_fadvise(
                        std::os::fd::AsRawFd::as_raw_fd(&f),
                        0,
                        0,
                        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
                    );
                }
                let dst = dir.path().join(format!("d{size}-{cold}"));
                let m = super::super::copy::copy_file(&src, &dst).unwrap();
                let (sha, n) = (m.sha256, m.size);
                assert_eq!(n as usize, size);
                assert_eq!(std::fs::read(&dst).unwrap(), data, "size {size}");
                let r = super::super::copy::reread_from_disk(&dst).unwrap();
                assert_eq!((r.sha256, r.bytes_read as usize), (sha, size));
            }
        }
    }
}
