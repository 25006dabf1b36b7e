//! Verify-from-disk on every core, with the recorded digest still the plain whole-file SHA-256
//! of the copy pass. SHA-256 is a chain: the state after byte N depends only on the state
//! after byte M < N and the bytes between. While the copy pass hashes the file in order it
//! notes, at every `SEGMENT` boundary, the hasher (its state) and the digest that state
//! finalizes to — a few hundred bytes per segment, no extra hashing. Verification re-reads
//! each segment from disk on its own thread, starting from the state noted at the segment's
//! start, and checks it reaches the digest noted at its end.
//!
//! Why that proves what the serial re-hash proved: let S₀ be the initial state and Sᵢ the
//! noted state after segment i of the bytes written. If, for every i, hashing the on-disk
//! segment i from Sᵢ₋₁ ends in Sᵢ (checked through its finalized digest; a different state
//! finalizing to the same digest would be a SHA-256 collision), then by induction hashing the
//! whole on-disk file from S₀ passes through every Sᵢ and ends in the final state of the copy
//! pass, so SHA-256(bytes on disk) = the recorded sha256 (the last segment is checked against
//! the recorded digest itself). Sizes are compared first, so the padding is the same. Any
//! segment that fails names the byte range whose on-disk bytes differ from those written.

use super::direct::DirectFile;
use super::io::{resident_pages, AlignedBuf};
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bytes per independently verified segment (a multiple of ALIGN, for O_DIRECT offsets).
pub const SEGMENT: u64 = 8 << 20;
/// Read size inside a segment.
const PIECE: usize = 2 << 20;

/// The whole-file digest and the chain states at segment boundaries.
#[derive(Clone)]
pub struct Marks {
    pub sha256: String,
    pub size: u64,
    /// Bytes per segment (the last may be shorter).
    pub segment: u64,
    /// Hasher at the start of segment i.
    starts: Vec<Sha256>,
    /// Digest the hasher finalizes to at the end of segment i (the last one is `sha256`).
    ends: Vec<[u8; 32]>,
}

impl std::fmt::Debug for Marks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Marks")
            .field("sha256", &self.sha256)
            .field("size", &self.size)
            .field("segments", &self.segments())
            .finish()
    }
}

impl Marks {
    pub fn segments(&self) -> usize {
        self.starts.len()
    }

    /// Segment `i`'s byte range, the hasher state at its start and the digest that state
    /// reaches at its end (the bucket's verify checks ranged GETs against these).
    pub fn segment_check(&self, i: usize) -> ((u64, u64), Sha256, [u8; 32]) {
        let start = i as u64 * self.segment;
        (
            (start, (start + self.segment).min(self.size)),
            self.starts[i].clone(),
            self.ends[i],
        )
    }
}

/// SHA-256 that notes its state at every segment boundary.
pub struct ChainHasher {
    h: Sha256,
    pos: u64,
    segment: u64,
    starts: Vec<Sha256>,
    ends: Vec<[u8; 32]>,
}

impl Default for ChainHasher {
    fn default() -> Self {
        ChainHasher::with_segment(SEGMENT)
    }
}

impl ChainHasher {
    /// Marks every `segment` bytes (> 0).
    pub fn with_segment(segment: u64) -> ChainHasher {
        ChainHasher {
            h: Sha256::new(),
            pos: 0,
            segment: segment.max(1),
            starts: vec![Sha256::new()],
            ends: Vec::new(),
        }
    }

    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = (self.segment - self.pos % self.segment) as usize;
            let k = room.min(data.len());
            self.h.update(&data[..k]);
            self.pos += k as u64;
            data = &data[k..];
            if self.pos.is_multiple_of(self.segment) {
                self.ends.push(self.h.clone().finalize().into());
                self.starts.push(self.h.clone());
            }
        }
    }

    pub fn finish(self) -> Marks {
        let ChainHasher {
            h,
            pos,
            segment,
            mut starts,
            mut ends,
        } = self;
        let digest: [u8; 32] = h.finalize().into();
        if pos.is_multiple_of(segment) {
            // Ended on a boundary (or empty): no segment starts here.
            starts.pop();
        } else {
            ends.push(digest);
        }
        Marks {
            sha256: crate::digest::hex(&digest),
            size: pos,
            segment,
            starts,
            ends,
        }
    }
}

/// What verifying one file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Size on disk.
    pub size: u64,
    /// The first byte range whose on-disk bytes differ from the bytes written.
    pub bad: Option<(u64, u64)>,
    pub bytes_read: u64,
    /// Pages still cached right before the re-read, and of how many (mincore).
    pub resident: Option<(u64, u64)>,
    /// Every read used O_DIRECT.
    pub direct: bool,
}

/// Drop every file's pages from the cache (they are fsynced, so clean) and count what stays,
/// then re-read all segments of all files from disk (O_DIRECT where the filesystem allows)
/// on twice `available_parallelism` threads (so several reads are in flight while others
/// hash; O_DIRECT gets no readahead).
pub fn verify(files: &[(PathBuf, &Marks)]) -> Result<Vec<Check>> {
    let mut checks = Vec::new();
    let mut tasks = Vec::new();
    for (i, (path, marks)) in files.iter().enumerate() {
        let f =
            File::open(path).with_context(|| format!("opening {} to verify", path.display()))?;
        let len = f.metadata()?.len();
        let _ = nix::fcntl::posix_fadvise(
            f.as_raw_fd(),
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        );
        checks.push(Check {
            size: len,
            bad: None,
            bytes_read: 0,
            resident: resident_pages(&f, len),
            direct: true,
        });
        if len == marks.size {
            tasks.extend((0..marks.segments()).map(|s| (i, s)));
        }
    }
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .saturating_mul(2)
        .clamp(2, 32)
        .min(tasks.len());
    let next = AtomicUsize::new(0);
    let checks = Mutex::new(checks);
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    let mut buf = AlignedBuf::new(PIECE);
                    loop {
                        let Some(&(i, seg)) = tasks.get(next.fetch_add(1, Ordering::Relaxed))
                        else {
                            return Ok(());
                        };
                        let (path, marks) = &files[i];
                        let (read, ok, direct) = segment(path, marks, seg, &mut buf)?;
                        super::progress::add(read);
                        let mut c = checks.lock().expect("checks");
                        let c = &mut c[i];
                        c.bytes_read += read;
                        c.direct &= direct;
                        let start = seg as u64 * marks.segment;
                        if !ok && c.bad.is_none_or(|(a, _)| start < a) {
                            c.bad = Some((start, (start + marks.segment).min(marks.size)));
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("verify thread")?;
        }
        Ok(())
    })?;
    Ok(checks.into_inner().expect("checks"))
}

/// Re-read segment `seg` and hash it from the state noted at its start: (bytes read, reached
/// the noted end state, read with O_DIRECT).
fn segment(
    path: &std::path::Path,
    marks: &Marks,
    seg: usize,
    buf: &mut [u8],
) -> Result<(u64, bool, bool)> {
    let start = seg as u64 * marks.segment;
    let end = (start + marks.segment).min(marks.size);
    let f = DirectFile::open(path)?;
    let mut h = marks.starts[seg].clone();
    let mut read = 0u64;
    while start + read < end {
        let want = ((end - start - read) as usize).min(buf.len());
        let k = f
            .read_at(buf, start + read, want)
            .with_context(|| format!("re-reading {}", path.display()))?;
        h.update(&buf[..k]);
        read += k as u64;
        if k < want {
            break;
        }
    }
    let reached: [u8; 32] = h.finalize().into();
    Ok((
        read,
        read == end - start && reached == marks.ends[seg],
        f.direct(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks_of(data: &[u8], pieces: usize) -> Marks {
        let mut h = ChainHasher::default();
        for c in data.chunks(pieces.max(1)) {
            h.update(c);
        }
        h.finish()
    }

    #[test]
    fn whole_digest_and_segments_for_any_size_and_split() {
        let s = SEGMENT as usize;
        for (size, pieces) in [(0, 1), (1, 1), (s - 1, 4096), (s, s), (s + 1, 1 << 20)] {
            let data: Vec<u8> = (0..size).map(|i| (i % 249) as u8).collect();
            let m = marks_of(&data, pieces);
            assert_eq!(m.sha256, crate::digest::hex(&Sha256::digest(&data)));
            assert_eq!(m.size, size as u64);
            assert_eq!(m.segments(), size.div_ceil(s), "size {size}");
            assert_eq!(m.ends.len(), m.segments());
            if let Some(last) = m.ends.last() {
                assert_eq!(crate::digest::hex(last), m.sha256);
            }
        }
    }

    #[test]
    fn verify_passes_intact_files_and_names_the_changed_range() {
        let dir = tempfile::tempdir().unwrap();
        let s = SEGMENT as usize;
        let data: Vec<u8> = (0..(2 * s + 12345)).map(|i| (i % 251) as u8).collect();
        let p = dir.path().join("f");
        let small = dir.path().join("small");
        std::fs::write(&p, &data).unwrap();
        std::fs::write(&small, b"abc").unwrap();
        let m = marks_of(&data, 1 << 20);
        let ms = marks_of(b"abc", 1);
        let c = verify(&[(p.clone(), &m), (small.clone(), &ms)]).unwrap();
        assert_eq!(c[0].bad, None);
        assert_eq!(
            (c[0].size, c[0].bytes_read),
            (data.len() as u64, data.len() as u64)
        );
        assert_eq!((c[1].bad, c[1].bytes_read), (None, 3));
        assert_eq!(
            c[0].resident.map(|r| r.1),
            Some((data.len() as u64).div_ceil(4096))
        );

        // One byte flipped in the middle segment, same size: only that segment fails.
        let mut bad = data.clone();
        bad[s + 77] ^= 1;
        std::fs::write(&p, &bad).unwrap();
        let c = verify(&[(p.clone(), &m)]).unwrap();
        assert_eq!(c[0].bad, Some((SEGMENT, 2 * SEGMENT)));
        // ... and in the short last segment.
        let mut bad = data.clone();
        *bad.last_mut().unwrap() ^= 0x80;
        std::fs::write(&p, &bad).unwrap();
        let c = verify(&[(p.clone(), &m)]).unwrap();
        assert_eq!(c[0].bad, Some((2 * SEGMENT, data.len() as u64)));
        // A different size is reported as such, nothing hashed.
        std::fs::write(&p, &data[..4096]).unwrap();
        let c = verify(&[(p, &m)]).unwrap();
        assert_eq!((c[0].size, c[0].bytes_read, c[0].bad), (4096, 0, None));
    }
}
