//! Sharded checkpoints at disk speed: the files of a checkpoint directory are copied (and
//! hashed) several at a time, bounded by the cores and a memory budget, each through the same
//! read→hash→write pipeline as a single file (`copy::copy_file`: O_EXCL, fsync, close checked),
//! and each file is verified from disk (`chain::verify`: cache dropped, O_DIRECT re-read) as
//! soon as its own fsync and close returned, while later files are still being copied — so the
//! verify read of shard k overlaps the copy of shards k+1.. instead of following all of them.
//! The guarantee per file is the one a separate verify pass gave: its bytes are re-read from
//! the device after its fsync, and nothing is swapped into place before every file passed.
//! Results come back in the order of the input, whatever order the copies finish in.

use super::chain::{self, Check, Marks};
use super::copy;
use anyhow::{anyhow, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// Buffers one file's copy holds (`copy::pump_at`: IN_FLIGHT chunks).
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

/// What copying and verifying every file found, in input order.
#[derive(Debug)]
pub struct Copied {
    pub marks: Vec<Marks>,
    pub checks: Vec<Check>,
    /// Wall time until the last copy was fsynced and closed and `after_copies` returned.
    pub copy: Duration,
    /// Wall time until the last verify finished (≥ `copy`).
    pub total: Duration,
}

/// Copy each `(src, dst)` pair with `copy::copy_file`, `workers` at a time, and verify each
/// copy from disk (`chain::verify`) on a verifier thread as soon as its copy returned. Once
/// every copy returned, `after_copies` runs (the directory fsyncs) while the last verifies
/// finish. The first error stops new copies and verifies from starting (those under way
/// finish) and is returned — copy errors before verify errors, each in input order; the
/// caller discards the staging tree. A file whose re-read differs is not an error here: its
/// `Check` says so.
pub fn copy_and_verify(
    jobs: &[(PathBuf, PathBuf)],
    workers: usize,
    after_copies: impl FnOnce() -> Result<()>,
) -> Result<Copied> {
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let copies: Mutex<Vec<Option<Result<Marks>>>> = Mutex::new(jobs.iter().map(|_| None).collect());
    let (tx, rx) = mpsc::channel::<(usize, Marks)>();
    let (checks, copy_time, after) = std::thread::scope(|s| {
        let (failed, copies, next) = (&failed, &copies, &next);
        let verifier = s.spawn(move || {
            let mut checks: Vec<Option<Result<Check>>> = jobs.iter().map(|_| None).collect();
            for (i, marks) in rx {
                if failed.load(Ordering::Relaxed) {
                    continue;
                }
                let r = chain::verify(&[(jobs[i].1.clone(), &marks)]).and_then(|mut c| {
                    c.pop().ok_or_else(|| {
                        anyhow!("verify of {} returned nothing", jobs[i].1.display())
                    })
                });
                if r.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                checks[i] = Some(r);
            }
            checks
        });
        let copiers: Vec<_> = (0..workers.clamp(1, jobs.len().max(1)))
            .map(|_| {
                let tx = tx.clone();
                s.spawn(move || loop {
                    if failed.load(Ordering::Relaxed) {
                        return;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((src, dst)) = jobs.get(i) else {
                        return;
                    };
                    let r = copy::copy_file(src, dst);
                    match &r {
                        Ok(m) => {
                            let _ = tx.send((i, m.clone()));
                        }
                        Err(_) => failed.store(true, Ordering::Relaxed),
                    }
                    copies.lock().expect("copies")[i] = Some(r);
                })
            })
            .collect();
        drop(tx);
        for c in copiers {
            c.join().expect("copy thread");
        }
        // The verifier goes on with the last files meanwhile.
        let after = if failed.load(Ordering::Relaxed) {
            Ok(())
        } else {
            after_copies()
        };
        if after.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        let copy_time = started.elapsed();
        (verifier.join().expect("verifier thread"), copy_time, after)
    });
    let marks = in_order(copies.into_inner().expect("copies"), |i| {
        anyhow!(
            "copy of {} did not run (an earlier copy failed)",
            jobs[i].0.display()
        )
    })?;
    after?;
    let checks = in_order(checks, |i| {
        anyhow!(
            "verify of {} did not run (an earlier verify failed)",
            jobs[i].1.display()
        )
    })?;
    Ok(Copied {
        marks,
        checks,
        copy: copy_time,
        total: started.elapsed(),
    })
}

/// The results in input order, or the first error in input order among those that ran, or
/// (when nothing failed but something did not run, which cannot happen) `missing(i)`.
fn in_order<T>(
    results: Vec<Option<Result<T>>>,
    missing: impl Fn(usize) -> anyhow::Error,
) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(results.len());
    let mut not_run = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Some(Ok(v)) => out.push(v),
            Some(Err(e)) => return Err(e),
            None => {
                not_run.get_or_insert(i);
            }
        }
    }
    match not_run {
        Some(i) => Err(missing(i)),
        None => Ok(out),
    }
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

    fn jobs(d: &std::path::Path) -> Vec<(PathBuf, PathBuf)> {
        let mut jobs = Vec::new();
        for i in 0..6u8 {
            let src = d.join(format!("s{i}"));
            // Different sizes so they finish out of order; one spans several chain segments.
            let n = if i == 1 {
                2 * chain::SEGMENT as usize + 4097
            } else {
                (6 - i as usize) * 300_000
            };
            std::fs::write(&src, vec![i; n]).unwrap();
            jobs.push((src, d.join(format!("d{i}"))));
        }
        jobs
    }

    #[test]
    fn every_copy_is_verified_from_disk_and_results_come_back_in_input_order() {
        let d = tempfile::tempdir().unwrap();
        let jobs = jobs(d.path());
        let after = std::cell::Cell::new(0);
        let c = copy_and_verify(&jobs, 3, || {
            // Runs once, when every copy is on disk.
            assert!(jobs.iter().all(|(_, dst)| dst.exists()));
            after.set(after.get() + 1);
            Ok(())
        })
        .unwrap();
        assert_eq!(after.get(), 1);
        assert!(c.total >= c.copy);
        for (i, (m, ch)) in c.marks.iter().zip(&c.checks).enumerate() {
            let len = std::fs::metadata(&jobs[i].0).unwrap().len();
            assert_eq!(m.size, len);
            assert_eq!(
                std::fs::read(&jobs[i].1).unwrap(),
                std::fs::read(&jobs[i].0).unwrap()
            );
            // Re-read in full, and it matched what the copy pass hashed.
            assert_eq!(
                (ch.size, ch.bytes_read, ch.bad),
                (len, len, None),
                "file {i}"
            );
            assert_eq!(ch.resident.map(|r| r.1), Some(len.div_ceil(4096)));
        }
    }

    #[test]
    fn errors_surface_in_input_order_and_stop_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let jobs = jobs(d.path());
        copy_and_verify(&jobs, 2, || Ok(())).unwrap();
        // Destinations exist now (O_EXCL): the copies fail, the error names a file, and
        // `after_copies` does not run.
        let e = copy_and_verify(&jobs, 3, || panic!("ran after a failed copy")).unwrap_err();
        assert!(format!("{e:#}").contains("staging file"), "{e:#}");
        let missing = vec![(d.path().join("nope"), d.path().join("x"))];
        assert!(copy_and_verify(&missing, 2, || Ok(())).is_err());
        // An error of the step after the copies is the publish's error.
        let fresh: Vec<_> = jobs
            .iter()
            .map(|(s, t)| (s.clone(), t.with_extension("2")))
            .collect();
        let e = copy_and_verify(&fresh, 2, || Err(anyhow!("dir fsync failed"))).unwrap_err();
        assert_eq!(e.to_string(), "dir fsync failed");
    }

    #[test]
    fn in_order_prefers_the_first_error_over_what_did_not_run() {
        let r: Vec<Option<Result<u8>>> = vec![Some(Ok(1)), None, Some(Err(anyhow!("boom")))];
        let e = in_order(r, |i| anyhow!("{i} did not run")).unwrap_err();
        assert_eq!(e.to_string(), "boom");
        let r: Vec<Option<Result<u8>>> = vec![Some(Ok(1)), None];
        let e = in_order(r, |i| anyhow!("{i} did not run")).unwrap_err();
        assert_eq!(e.to_string(), "1 did not run");
        let r: Vec<Option<Result<u8>>> = vec![Some(Ok(1)), Some(Ok(2))];
        assert_eq!(in_order(r, |_| anyhow!("x")).unwrap(), [1, 2]);
    }
}
