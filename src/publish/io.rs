//! The I/O primitives publish's byte path shares: the alignment O_DIRECT needs, the one
//! aligned buffer type, and mincore's count of cached pages. A leaf: it imports nothing from
//! its publish siblings (a test below holds it to that), so `copy`, `direct` and `chain` can
//! all build on it without importing each other for it.

use std::fs::File;
use std::ops::{Deref, DerefMut};
use std::os::fd::AsRawFd;

/// Buffer, offset and length alignment O_DIRECT needs (the largest logical block size in use).
pub const ALIGN: usize = 4096;

/// A zeroed byte buffer whose start is `ALIGN`-aligned, for O_DIRECT reads and writes. Safe
/// code: the vector is over-allocated by `ALIGN` and the aligned window inside it is used
/// (a vector's heap block never moves while it is not resized).
pub struct AlignedBuf {
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        let buf = vec![0u8; len + ALIGN];
        let at = buf.as_ptr().align_offset(ALIGN);
        AlignedBuf { buf, at, len }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.at..self.at + self.len]
    }
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

    #[test]
    fn aligned_buffers_are_aligned_and_sized() {
        for len in [0, 1, ALIGN - 1, ALIGN, 3 * ALIGN + 5, 4 << 20] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr().align_offset(ALIGN), 0, "len {len}");
            b.iter_mut().for_each(|x| *x = 7);
            assert!(b.iter().all(|&x| x == 7));
        }
    }

    #[test]
    fn resident_pages_counts_a_files_pages() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![1u8; 3 * 4096 + 1]).unwrap();
        let f = File::open(&p).unwrap();
        let (resident, total) = resident_pages(&f, 3 * 4096 + 1).unwrap();
        assert_eq!(total, 4);
        assert!(resident <= total);
        assert_eq!(resident_pages(&f, 0), Some((0, 0)));
    }
}
