//! O_DIRECT for the source reads, the staging copy's writes and the verify re-read: the bytes
//! move between the device and roger's buffers without a page-cache copy (one memcpy less
//! each way, and a multi-GB checkpoint does not evict the training's cached data). Where a
//! filesystem refuses O_DIRECT (EINVAL: some 9p/drvfs/FUSE mounts), each falls back to
//! buffered I/O.

use super::copy::ALIGN;
use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

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

/// Writes the staging copy chunk by chunk. `pump` hands it block-aligned chunks of whole
/// blocks, except the last, which is padded to a block from a scratch buffer and cut back by
/// `finish`.
pub struct StagingWriter {
    f: File,
    pub direct: bool,
    written: u64,
    kicked: u64,
    padded: bool,
}

impl StagingWriter {
    pub fn new(f: File) -> StagingWriter {
        let direct = set_direct(&f, true).is_ok();
        StagingWriter {
            f,
            direct,
            written: 0,
            kicked: 0,
            padded: false,
        }
    }

    pub fn write_chunk(&mut self, chunk: &[u8]) -> io::Result<()> {
        if self.direct {
            match self.write_direct(chunk) {
                Err(e) if self.written == 0 && is_einval(&e) => {
                    // Accepted the flag, refuses the I/O: go buffered.
                    set_direct(&self.f, false)?;
                    self.direct = false;
                }
                other => {
                    other?;
                    self.written += chunk.len() as u64;
                    return Ok(());
                }
            }
        }
        self.f.write_all(chunk)?;
        self.written += chunk.len() as u64;
        if self.written - self.kicked >= KICK_WRITEBACK {
            // Asynchronous: start write-back of what is written so far (fsync still decides).
            // SAFETY: plain syscall on an fd we own.
            unsafe {
                libc::sync_file_range(
                    self.f.as_raw_fd(),
                    self.kicked as i64,
                    (self.written - self.kicked) as i64,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
            self.kicked = self.written;
        }
        Ok(())
    }

    fn write_direct(&mut self, chunk: &[u8]) -> io::Result<()> {
        let aligned = chunk.len().is_multiple_of(ALIGN) && chunk.as_ptr().align_offset(ALIGN) == 0;
        if aligned {
            return self.f.write_all_at(chunk, self.written);
        }
        // The tail: pad to whole blocks in an aligned scratch buffer.
        let padded_len = chunk.len().div_ceil(ALIGN) * ALIGN;
        let mut scratch = vec![0u8; padded_len + ALIGN];
        let at = scratch.as_ptr().align_offset(ALIGN);
        scratch[at..at + chunk.len()].copy_from_slice(chunk);
        self.f
            .write_all_at(&scratch[at..at + padded_len], self.written)?;
        self.padded = true;
        Ok(())
    }

    /// Cut off the tail padding; the file is then exactly the bytes written.
    pub fn finish(self) -> io::Result<File> {
        if self.padded {
            self.f.set_len(self.written)?;
        }
        Ok(self.f)
    }
}

/// Positional reads of the bytes `off..end`; O_DIRECT when the filesystem allows it. Callers
/// hand it aligned buffers of whole blocks and a block-aligned `off`, so every read starts
/// block-aligned.
pub struct DirectReader {
    f: File,
    off: u64,
    len: u64,
    first: bool,
    pub direct: bool,
}

impl DirectReader {
    pub fn open(path: &Path, len: u64) -> Result<DirectReader> {
        DirectReader::open_at(path, 0, len)
    }

    pub fn open_at(path: &Path, off: u64, end: u64) -> Result<DirectReader> {
        let f = OpenOptions::new()
            .read(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(DirectReader::new(f, off, end))
    }

    /// Read `f` (already open) from `off` to `end`.
    pub fn new(f: File, off: u64, end: u64) -> DirectReader {
        let direct = set_direct(&f, true).is_ok();
        DirectReader {
            f,
            off,
            len: end,
            first: true,
            direct,
        }
    }
}

impl Read for DirectReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.off >= self.len {
            // Never read at the unaligned end offset: O_DIRECT would refuse it.
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.len - self.off).unwrap_or(usize::MAX));
        // Whole blocks only under O_DIRECT (the last one may run past the end of the file).
        let want = if self.direct {
            want.div_ceil(ALIGN) * ALIGN
        } else {
            want
        }
        .min(buf.len());
        let buf = &mut buf[..want];
        let first = std::mem::replace(&mut self.first, false);
        let n = match self.f.read_at(buf, self.off) {
            Err(e) if self.direct && first && is_einval(&e) => {
                set_direct(&self.f, false)?;
                self.direct = false;
                self.f.read_at(buf, self.off)?
            }
            other => other?,
        };
        // Never past `end`, even if the file grew.
        let n = n.min(usize::try_from(self.len - self.off).unwrap_or(usize::MAX));
        self.off += n as u64;
        Ok(n)
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
