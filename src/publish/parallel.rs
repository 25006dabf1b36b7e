//! Sharded checkpoints at disk speed: the files of a checkpoint directory are copied (and
//! hashed) several at a time, bounded by the cores and a memory budget, each through the same
//! read→hash→write pipeline as a single file (`copy::copy_file`: O_EXCL, fsync, close checked).
//! Results come back in the order of the input, whatever order the copies finish in.

use super::chain::Marks;
use super::copy;
use anyhow::{anyhow, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Buffers one file's copy holds (`copy::pump`: IN_FLIGHT chunks).
pub const PER_FILE_BYTES: u64 = 32 << 20;
/// Default memory budget for the copy buffers of one publish.
pub const MEMORY_BUDGET: u64 = 256 << 20;

/// How many files to copy at once: at least 2 where there are 2 files (one file's
/// read/hash/write threads leave the disk idle between requests), at most one per core (each
/// file hashes on its own thread), never more than the memory budget allows. Pure.
pub fn workers(files: usize, cores: usize, budget: u64) -> usize {
    let by_memory = (budget / PER_FILE_BYTES).max(1) as usize;
    cores.max(2).min(by_memory).min(files).max(1)
}

/// Copy each `(src, dst)` pair with `copy::copy_file`, `workers` at a time. The first error
/// stops new copies from starting (copies under way finish) and is returned; the caller
/// discards the staging tree.
pub fn copy_all(jobs: &[(PathBuf, PathBuf)], workers: usize) -> Result<Vec<Marks>> {
    if workers <= 1 || jobs.len() <= 1 {
        return jobs.iter().map(|(s, d)| copy::copy_file(s, d)).collect();
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<Option<Result<Marks>>>> =
        Mutex::new(jobs.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers.min(jobs.len()) {
            s.spawn(|| loop {
                if failed.load(Ordering::Relaxed) {
                    return;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((src, dst)) = jobs.get(i) else {
                    return;
                };
                let r = copy::copy_file(src, dst);
                if r.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                results.lock().expect("results")[i] = Some(r);
            });
        }
    });
    let results = results.into_inner().expect("results");
    let mut out = Vec::with_capacity(jobs.len());
    // The first error in input order among those that ran; a copy that never started only
    // matters when nothing failed (it cannot happen then).
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Some(r) => out.push(r?),
            None => {
                return Err(anyhow!(
                    "copy of {} did not run (an earlier copy failed)",
                    jobs[i].0.display()
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_count_follows_cores_memory_and_files() {
        assert_eq!(workers(1, 16, MEMORY_BUDGET), 1);
        assert_eq!(workers(8, 1, MEMORY_BUDGET), 2, "two even on one core");
        assert_eq!(workers(8, 4, MEMORY_BUDGET), 4);
        assert_eq!(workers(64, 64, MEMORY_BUDGET), 8, "256 MiB / 32 MiB");
        assert_eq!(workers(64, 64, 64 << 20), 2);
        assert_eq!(workers(64, 64, 0), 1, "a tiny budget still copies");
        assert_eq!(workers(0, 4, MEMORY_BUDGET), 1);
    }

    #[test]
    fn parallel_copies_come_back_in_input_order_and_errors_surface() {
        let d = tempfile::tempdir().unwrap();
        let mut jobs = Vec::new();
        for i in 0..6u8 {
            let src = d.path().join(format!("s{i}"));
            // Different sizes so they finish out of order.
            std::fs::write(&src, vec![i; (6 - i as usize) * 300_000]).unwrap();
            jobs.push((src, d.path().join(format!("d{i}"))));
        }
        let marks = copy_all(&jobs, 3).unwrap();
        for (i, m) in marks.iter().enumerate() {
            assert_eq!(m.size, (6 - i as u64) * 300_000);
            assert_eq!(
                std::fs::read(&jobs[i].1).unwrap(),
                std::fs::read(&jobs[i].0).unwrap()
            );
        }
        // Destinations exist now (O_EXCL): every copy fails, the error names a file.
        let e = copy_all(&jobs, 3).unwrap_err();
        assert!(format!("{e:#}").contains("staging file"), "{e:#}");
        let missing = vec![(d.path().join("nope"), d.path().join("x"))];
        assert!(copy_all(&missing, 2).is_err());
    }
}
