//! `roger publish`: put a checkpoint (file or directory) into the destination directory so
//! that a crash or power cut at any moment leaves the old state or the new one, never a torn
//! file under a real name, and record it. Order: source checks → free space → lock → recover
//! what an interrupted publish left (`recover`) + clean leftovers → copy into a dot-staging
//! name while hashing → fsync → drop cache and re-read to verify (each file of a directory
//! as soon as its own fsync returned, while the next ones copy) → intent (durable) → rename
//! into place → directory fsync → ledger → latest.json → clear the intent → retention (prune
//! record, then removal). The ledger comes before latest.json so that whatever latest.json
//! names has its record; a crash between any two steps is finished or undone by `recover`.
//! The byte path is in `copy`, the swap/rejection side effects in `place`.

pub mod chain;
pub mod copy;
pub mod dcp;
pub mod direct;
pub mod enqueue;
pub mod failpoint;
pub mod formats;
pub mod intake;
pub mod io;
pub mod manifest;
pub mod names;
pub mod parallel;
pub mod place;
pub mod preflight;
pub mod progress;
pub mod publisher;
pub mod queue;
pub mod record;
pub mod recover;
pub mod reflink;
pub mod retention;
pub mod source;

use crate::config::units::format_bytes;
use crate::config::PublishConfig;
use crate::digest::{dir_digest, FileDigest};
use crate::ledger::{Entry, Kind, Ledger};
use crate::sys::disk::DiskProbe;
use crate::sys::fsx;
use crate::sys::Clock;
use anyhow::{bail, Context, Result};
use manifest::Latest;
pub use preflight::{preflight, Preflight};
pub use record::{measured, with_fields};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What to publish where, as plain values (the CLI builds it; a queue entry stores it).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Request {
    pub src: PathBuf,
    pub dest: PathBuf,
    /// Explicit step; else parsed from the name.
    pub step: Option<u64>,
    pub run: String,
    pub ledger: PathBuf,
    /// `None`: prune nothing.
    pub retention: Option<PublishConfig>,
    /// Free space required beyond the checkpoint's size.
    pub margin: u64,
    /// Where a copy that fails verification is quarantined (when on the same filesystem as
    /// the destination; otherwise it stays set aside in the destination directory).
    pub quarantine_dir: PathBuf,
    /// `[watch] rollback_margin_steps`: retention keeps the newest checkpoint before a
    /// standing fail's onset less this, where a rollback would resume.
    pub rollback_margin: u64,
    /// The config file, if any: a name roger owns when it lives in the destination.
    pub config: Option<PathBuf>,
    /// Set when this publish was queued by `--detach`: the source must still be what was
    /// queued, and the records carry the queue id.
    #[serde(default)]
    pub queue: Option<queue::Ticket>,
    /// The bucket the checkpoint also goes to (the caller queues it for the uploader once it
    /// is published here: `remote::queue::after_publish`); retention then never prunes a
    /// local copy whose bucket copy is not verified.
    #[serde(default)]
    pub remote: Option<crate::config::remote::Remote>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    File,
    Dir,
}

impl Layout {
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::File => "file",
            Layout::Dir => "dir",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Pruned {
    pub path: PathBuf,
    pub size: u64,
    pub step: Option<u64>,
    pub reason: String,
    /// Set when the file could not be removed after its prune record was written.
    pub error: Option<String>,
}

/// The result of a publish, for both printers.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
    pub layout: Layout,
    pub files: usize,
    pub dir: PathBuf,
    pub in_place: bool,
    pub step: Option<u64>,
    pub formats: Vec<formats::Format>,
    pub dir_fsync: String,
    /// Bytes re-read from disk to verify (equals `size` when verification ran).
    pub verify_bytes_read: u64,
    /// Pages of the checkpoint still cached right before the verify read (mincore).
    pub pages_resident_before_verify: Option<u64>,
    pub pages_total: Option<u64>,
    /// The verify read bypassed the page cache (O_DIRECT).
    pub verify_direct_io: bool,
    pub free_before: Option<u64>,
    /// Leftovers of earlier, killed publishes that were removed.
    pub cleaned: Vec<String>,
    /// What an interrupted earlier publish left half done and was finished or undone first.
    pub repaired: Vec<String>,
    pub pruned: Vec<Pruned>,
    /// Checkpoints retention's policy alone would have removed, kept by the rule (the last
    /// good one, the newest before a standing fail, ...), and why.
    pub kept: Vec<retention::Protected>,
    pub ledger: PathBuf,
    pub ledger_seq: u64,
    /// Where the time went (wall clock, milliseconds).
    pub timings_ms: Timings,
    /// The bucket object this checkpoint is queued to become (the uploader sends it).
    pub remote_queued: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    /// Copy while hashing, fsync and close, until the last file and directory was fsynced
    /// (in place: not used).
    pub copy: u64,
    /// Drop the cache, re-read and hash from disk: in place the whole verify; for a copy
    /// what it took after `copy` (each file is verified while the next ones copy).
    pub verify: u64,
    /// Rename, directory fsync, latest.json, ledger record.
    pub commit: u64,
    pub total: u64,
}

/// Refuse when the checkpoint plus margin does not fit (leftover staging files count as free:
/// they are removed first). Pure.
pub fn check_space(
    size: u64,
    margin: u64,
    avail: u64,
    reclaimable: u64,
    dest: &Path,
) -> Result<()> {
    let need = size.saturating_add(margin);
    let have = avail.saturating_add(reclaimable);
    if have < need {
        bail!(
            "not enough free space in {}: the checkpoint needs {} + margin {} = {}, only {} available{}; nothing was touched (free some space, e.g. prune old checkpoints, or lower [publish] margin)",
            dest.display(),
            format_bytes(size),
            format_bytes(margin),
            format_bytes(need),
            format_bytes(have),
            if reclaimable > 0 {
                format!(" (counting {} of leftover staging files)", format_bytes(reclaimable))
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

pub fn publish(req: &Request, disk: &dyn DiskProbe, clock: &dyn Clock) -> Result<Outcome> {
    let started = std::time::Instant::now();
    let ms = |t: std::time::Instant| t.elapsed().as_millis() as u64;
    let mut timings = Timings::default();
    let Preflight {
        src,
        name,
        layout,
        before,
        formats,
        size,
        dest_abs,
        in_place,
    } = preflight(req)?;
    let mut free_before = None;
    if !in_place {
        let space = disk.space(&dest_abs)?;
        free_before = Some(space.avail);
        check_space(
            size,
            req.margin,
            space.avail,
            place::reclaimable(&dest_abs),
            &dest_abs,
        )?;
    }
    fsx::create_dirs_durably(&dest_abs)?;
    let dest = std::fs::canonicalize(&dest_abs)?;
    let _lock = place::lock(&dest)?;
    failpoint::hit("after_lock");
    let ledger = Ledger::new(&req.ledger);
    let repaired = recover::recover(&dest, &ledger, &req.run, "publish", clock.now())?;
    let latest_before = manifest::read(&dest)?;
    let cleaned = place::clean_leftovers(&dest, latest_before.as_ref())?;
    let step = req.step.or_else(|| names::step_from_name(&name));
    let target = dest.join(&name);
    let intent = |sha256: &str, digests: &[FileDigest]| recover::Intent {
        path: name.clone(),
        sha256: sha256.to_string(),
        size,
        step,
        layout,
        files: digests.len(),
        in_place,
        run: req.run.clone(),
        queue_id: req.queue.as_ref().map(|t| t.id.clone()),
        published_at: clock
            .now()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    };

    let t = std::time::Instant::now();
    let (digests, reread, dirsync, intent) = if in_place {
        progress::begin(progress::Phase::Verify, size);
        let (digests, reread) = place::sync_and_reread(&before, layout)?;
        timings.verify = ms(t);
        source::unchanged(&src, layout, &before)?;
        failpoint::hit("after_verify");
        let intent = intent(&combined(layout, &digests), &digests);
        let dirsync = recover::write_intent(&dest, &intent)?;
        failpoint::hit("after_intent");
        (digests, reread, dirsync, intent)
    } else {
        let mut staging = place::Staging::new(dest.join(names::staging_name(&name)));
        // Each file is verified from disk while the next ones copy: one phase of twice the
        // bytes (each byte written once and read back once).
        progress::begin(progress::Phase::CopyAndVerify, 2 * size);
        let place::Copied {
            written,
            checks,
            reread,
            copy,
            total,
        } = place::copy_and_verify(&before, layout, staging.path())?;
        timings.copy = copy.as_millis() as u64;
        // What the verify added after the last copy was durable.
        timings.verify = total.saturating_sub(copy).as_millis() as u64;
        source::unchanged(&src, layout, &before)?;
        if let Some(why) = place::mismatch(&written, &checks) {
            staging.disarm();
            let set_aside = place::set_aside_bad_copy(staging.path(), &dest, &name, clock.now())?;
            let evidence = quarantine_bad_copy(req, &set_aside, &why, &ledger, clock)?;
            ledger.append(
                with_fields(
                    Entry::new(Kind::Note, "publish", &req.run)
                        .step(step)
                        .field("event", "publish-rejected")
                        .field("path", target.display().to_string())
                        .field("evidence", evidence.display().to_string())
                        .field("reason", &why),
                    req.queue
                        .iter()
                        .map(|t| ("queue_id", serde_json::json!(t.id))),
                ),
                clock.now(),
            )?;
            bail!(
                "verification from disk failed for {}: {why}; nothing was published ({} and latest.json are unchanged); the bad copy is kept as evidence at {}",
                src.display(),
                target.display(),
                evidence.display()
            );
        }
        failpoint::hit("after_verify");
        let t = std::time::Instant::now();
        let intent = intent(&combined(layout, &written), &written);
        let mut dirsync = recover::write_intent(&dest, &intent)?;
        failpoint::hit("after_intent");
        if let Some(l) = latest_before
            .as_ref()
            .filter(|l| l.path == name && target.exists())
        {
            // latest.json points at the name being replaced: point it at a hard-linked
            // twin first, so it verifies at every instant of the swap.
            place::link_prev(&target, &dest, &name)?;
            dirsync = dirsync.and(manifest::write(
                &dest,
                &Latest {
                    path: names::prev_name(&name),
                    ..l.clone()
                },
            )?);
            failpoint::hit("after_prev_link");
        }
        place::rename_into_place(staging.path(), &target, layout)?;
        staging.disarm();
        failpoint::hit("after_rename");
        dirsync = dirsync.and(fsx::fsync_dir(&dest)?);
        timings.commit = ms(t);
        (written, reread, dirsync, intent)
    };
    let t = std::time::Instant::now();

    let sha256 = intent.sha256.clone();
    // An unsupported directory fsync was warned about by fsx::fsync_dir (once per run);
    // `dirsync` goes into the ledger record.
    failpoint::hit("before_ledger");
    let now = clock.now();
    let rec = ledger
        .append(
            with_fields(
                recover::publish_entry(
                &req.run,
                step,
                &target,
                &sha256,
                size,
                layout,
                digests.len(),
                &dest,
                in_place,
                dirsync.text(),
            ),
                measured(size, started.elapsed(), req.queue.as_ref(), now)
                    .into_iter()
                    .chain(record::trainer_save_time()),
            ),
            now,
        )
        .with_context(|| {
            format!(
                "{} is in place and verified, but its ledger record could not be written; latest.json still names the previous checkpoint (the next roger publish, publish --verify, hygiene disk or watch finishes this)",
                target.display()
            )
        })?;
    failpoint::hit("after_ledger");
    failpoint::hit("before_manifest");
    manifest::write(&dest, &intent.latest())?;
    failpoint::hit("after_manifest");
    place::remove_stale_prev(&dest, &name);
    recover::clear_intent(&dest);
    timings.commit += ms(t);
    // Still under the publish lock.
    let (pruned, kept) = match &req.retention {
        Some(policy) => {
            retention::apply::after_publish(&ledger, req, policy, &target, &sha256, clock)
                .with_context(|| {
                    format!(
                        "{} is published and recorded, but retention failed",
                        target.display()
                    )
                })?
        }
        None => Default::default(),
    };
    timings.total = ms(started);
    Ok(Outcome {
        path: target,
        sha256,
        size,
        layout,
        files: digests.len(),
        dir: dest,
        in_place,
        step,
        formats,
        dir_fsync: dirsync.text().to_string(),
        verify_bytes_read: reread.bytes_read,
        pages_resident_before_verify: reread.pages_resident,
        pages_total: reread.pages_total,
        verify_direct_io: reread.direct_io,
        free_before,
        cleaned,
        repaired,
        pruned,
        kept,
        ledger: req.ledger.clone(),
        ledger_seq: rec.seq,
        timings_ms: timings,
        // The caller queues it for the bucket (`remote::queue::after_publish`).
        remote_queued: None,
    })
}

/// A published checkpoint re-hashed from disk (cache dropped first), for `--verify`.
#[derive(Debug, Clone, Serialize)]
pub struct Rehash {
    pub path: PathBuf,
    pub layout: Layout,
    pub sha256: String,
    pub size: u64,
    pub files: usize,
    pub verify_bytes_read: u64,
    pub pages_resident_before_verify: Option<u64>,
}

pub fn rehash(path: &Path) -> Result<Rehash> {
    let layout = source::layout(path)?;
    let files = source::snapshot(path, layout)?;
    let mut digests = Vec::new();
    let (mut read, mut resident) = (0u64, Some(0u64));
    for f in &files {
        let r = copy::reread_from_disk(&f.path)?;
        read += r.bytes_read;
        resident = resident.zip(r.pages_resident).map(|(a, b)| a + b);
        digests.push(FileDigest {
            rel: f.rel.clone(),
            size: r.size,
            sha256: r.sha256,
        });
    }
    Ok(Rehash {
        path: path.to_path_buf(),
        layout,
        sha256: combined(layout, &digests),
        size: digests.iter().map(|d| d.size).sum(),
        files: digests.len(),
        verify_bytes_read: read,
        pages_resident_before_verify: resident,
    })
}

/// The sha256 a layout's digests combine to.
pub fn combined(layout: Layout, digests: &[FileDigest]) -> String {
    match layout {
        Layout::File => digests
            .first()
            .map(|d| d.sha256.clone())
            .unwrap_or_default(),
        Layout::Dir => dir_digest(digests),
    }
}

/// A copy that failed verification goes into `roger quarantine` (never under the real name,
/// never deleted) so it is kept as evidence and can only come back through a proof. Across
/// filesystems a move is impossible: it then stays where it was set aside.
fn quarantine_bad_copy(
    req: &Request,
    set_aside: &Path,
    why: &str,
    ledger: &Ledger,
    clock: &dyn crate::sys::Clock,
) -> Result<PathBuf> {
    match crate::quarantine::same_filesystem(set_aside, &req.quarantine_dir) {
        Ok(true) => {
            let item = crate::quarantine::quarantine_path(
                &req.quarantine_dir,
                set_aside,
                &format!("publish verification from disk failed: {why}"),
                "publish",
                &req.run,
                ledger,
                clock.now(),
            )?;
            Ok(item.quarantined_path)
        }
        Ok(false) => {
            tracing::warn!(
                "quarantine dir {} is on another filesystem: the bad copy stays at {}",
                req.quarantine_dir.display(),
                set_aside.display()
            );
            Ok(set_aside.to_path_buf())
        }
        Err(e) => {
            tracing::warn!("cannot quarantine the bad copy: {e:#}");
            Ok(set_aside.to_path_buf())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_check() {
        let d = Path::new("/ck");
        assert!(check_space(100, 10, 110, 0, d).is_ok());
        let e = check_space(100, 10, 100, 0, d).unwrap_err().to_string();
        assert!(e.contains("not enough free space in /ck"), "{e}");
        assert!(e.contains("nothing was touched"), "{e}");
        // Leftover staging files will be removed first, so they count.
        assert!(check_space(100, 10, 60, 50, d).is_ok());
        let e = check_space(100, 10, 50, 50, d).unwrap_err().to_string();
        assert!(e.contains("leftover staging"), "{e}");
        assert!(check_space(u64::MAX, u64::MAX, 0, 0, d).is_err());
    }
}
