//! The I/O primitives publish's byte path shares: the alignment O_DIRECT needs, the one
//! aligned buffer type, and mincore's count of cached pages. A leaf: it imports nothing from
//! its publish siblings (a test below holds it to that), so `copy`, `direct` and `chain` can
//! all build on it without importing each other for it.

use nix::libc::c_void;
use nix::sys::mman::{madvise, mmap_anonymous, munmap, MapFlags, MmapAdvise, ProtFlags};
use std::fs::File;
use std::num::NonZeroUsize;
use std::ops::{Deref, DerefMut};
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// Buffer, offset and length alignment O_DIRECT needs (the largest logical block size in use).
pub const ALIGN: usize = 4096;

/// Huge-page size (x86-64 and aarch64 with 4 KiB base pages): buffers of at least this size
/// start on such a boundary and ask for transparent huge pages.
const HUGE: usize = 2 << 20;

/// A zeroed byte buffer whose start is `ALIGN`-aligned, for O_DIRECT reads and writes: its own
/// anonymous mapping. Buffers of `HUGE` bytes or more start on a `HUGE` boundary and are
/// advised `MADV_HUGEPAGE`, so a 4 MiB O_DIRECT request is two physically contiguous pieces
/// instead of 1024 pages: the block layer sends it as a few large requests rather than many
/// small ones. Measured on the project's virtio VM (issue 27, `bench_publish ratios`): a
/// 4 MiB O_DIRECT read ran at 4.3–4.5 GB/s from such a buffer against 2.1–2.5 GB/s from 4 KiB
/// pages, and a write at 0.87–0.91 against 0.63–0.83 GB/s.
pub struct AlignedBuf {
    map: NonNull<c_void>,
    /// Bytes mapped (`len` rounded up, plus room to align the start).
    mapped: usize,
    /// Offset of the buffer inside the mapping.
    at: usize,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone (no aliases are handed out beyond the
// borrows of Deref/DerefMut), like a Vec's heap block.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; shared access is read-only through `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        let align = if len >= HUGE { HUGE } else { ALIGN };
        // mmap rounds to whole pages; at least one page (a zero-length mapping is EINVAL).
        let mapped = len.max(1).div_ceil(ALIGN) * ALIGN + (align - ALIGN);
        let length = NonZeroUsize::new(mapped).expect("at least one page");
        // SAFETY: a fresh private anonymous mapping (zero-filled), owned by the buffer and
        // unmapped in Drop; nothing else refers to it.
        let map = unsafe {
            mmap_anonymous(
                None,
                length,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }
        .unwrap_or_else(|_| {
            std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(mapped, align).expect("layout"),
            )
        });
        let at = map.as_ptr().cast::<u8>().align_offset(align);
        if len >= HUGE && thp_available() {
            // SAFETY: advice on whole huge pages inside our own mapping; it changes no content.
            // Refused (EINVAL), the buffer simply keeps small pages.
            let _ = unsafe {
                madvise(
                    map.byte_add(at),
                    len / HUGE * HUGE,
                    MmapAdvise::MADV_HUGEPAGE,
                )
            };
        }
        AlignedBuf {
            map,
            mapped,
            at,
            len,
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: our own mapping, whole, no borrows outlive self.
        let _ = unsafe { munmap(self.map, self.mapped) };
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `at + len <= mapped`, the mapping is readable, zero-filled or written, and
        // lives as long as self.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<u8>().add(self.at), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and `&mut self` makes this the only borrow.
        unsafe {
            std::slice::from_raw_parts_mut(self.map.as_ptr().cast::<u8>().add(self.at), self.len)
        }
    }
}

/// Transparent huge pages can back an `madvise`d mapping: the kernel has them and they are not
/// switched off (`/sys/kernel/mm/transparent_hugepage/enabled` is `[always]` or `[madvise]`).
/// Read once.
pub fn thp_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|s| thp_mode_allows_madvise(&s))
    })
}

/// The `enabled` file's selected mode (in brackets) lets `MADV_HUGEPAGE` regions have huge pages.
fn thp_mode_allows_madvise(enabled: &str) -> bool {
    enabled.contains("[always]") || enabled.contains("[madvise]")
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
        for len in [
            0,
            1,
            ALIGN - 1,
            ALIGN,
            3 * ALIGN + 5,
            HUGE - 1,
            HUGE,
            4 << 20,
            (4 << 20) + 5,
        ] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr().align_offset(ALIGN), 0, "len {len}");
            assert!(b.iter().all(|&x| x == 0), "zeroed: len {len}");
            if len >= HUGE {
                assert_eq!(b.as_ptr().align_offset(HUGE), 0, "len {len}");
                // The kernel's own view of the mapping: eligible for huge pages wherever the
                // kernel offers them (under `[madvise]`, only because the buffer asked).
                if let Some(eligible) = thp_eligible(b.as_ptr()) {
                    assert_eq!(eligible, thp_available(), "len {len}");
                }
            }
            b.iter_mut().for_each(|x| *x = 7);
            assert!(b.iter().all(|&x| x == 7));
        }
    }

    /// `THPeligible` of the mapping holding `p`, from /proc/self/smaps (None: not shown).
    fn thp_eligible(p: *const u8) -> Option<bool> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let addr = p as usize;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a <= addr && addr < b;
                    continue;
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("THPeligible:") {
                    return Some(v.trim() == "1");
                }
            }
        }
        None
    }

    #[test]
    fn thp_modes() {
        assert!(thp_mode_allows_madvise("always [madvise] never\n"));
        assert!(thp_mode_allows_madvise("[always] madvise never\n"));
        assert!(!thp_mode_allows_madvise("always madvise [never]\n"));
        assert!(!thp_mode_allows_madvise(""));
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
