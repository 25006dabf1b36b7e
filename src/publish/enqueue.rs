//! `publish --detach`'s side of the queue: check the source, take a reflink snapshot where the
//! destination can (learnt on the first try, remembered), append the request to the journal
//! durably (the caller's one fsync), and start a publisher only when none runs. Nothing here
//! removes, records in the ledger or waits on a child: that is the publisher's.

use super::queue::lock_queue;
use super::queue::{dir, next_id, queued_bytes, scan, snapshot_root, Queued, Stamp, Ticket};
use super::{place, preflight, reflink, source, Request};
use crate::sys::disk::DiskProbe;
use crate::sys::fsx;
use crate::sys::Clock;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// What `enqueue` did.
pub struct Enqueued<R> {
    pub q: Queued,
    /// What `start` returned; `None` when it was not called (a publisher is running).
    pub started: Option<R>,
    /// Said once per destination (and source filesystem): what this first try learnt about
    /// reflink snapshots there.
    pub learned: Option<String>,
}

/// `publish --detach`: check the source, snapshot it where the destination can reflink (what
/// it can is learnt on the first try and remembered in the queue dir, so a destination that
/// cannot gets no snapshot directory made and removed again), and append the request to the
/// journal durably: the caller's one fsync. No ledger record here (the publisher records
/// `publish_queued` as it takes the request in), nothing removed, no child waited on: after
/// the request is durable and the queue lock released, `start` runs only when no publisher
/// holds the publisher lock (one that does takes the request in by itself).
pub fn enqueue<R>(
    req: &Request,
    disk: &dyn DiskProbe,
    clock: &dyn Clock,
    start: impl FnOnce(&Path) -> R,
) -> Result<Enqueued<R>> {
    let pre = preflight(req)?;
    fsx::create_dirs_durably(&pre.dest_abs)?;
    let dest = std::fs::canonicalize(&pre.dest_abs)?;
    fsx::create_dirs_durably(&dir(&dest))?;
    let lock = lock_queue(&dest)?;
    let (queued, _) = scan(&dest)?;
    if !pre.in_place {
        let ahead = queued_bytes(&queued);
        let space = disk.space(&dest)?;
        super::check_space(
            pre.size.saturating_add(ahead),
            req.margin,
            space.avail,
            place::reclaimable(&dest),
            &dest,
        )
        .map_err(|e| {
            if ahead > 0 {
                e.context(format!(
                    "{} queued publish(es) ahead of this one will take {} of it",
                    queued.len(),
                    crate::config::units::format_bytes(ahead)
                ))
            } else {
                e
            }
        })?;
    }
    let now = clock.now();
    let nanos = now.timestamp_nanos_opt().unwrap_or(0).max(0) as u128;
    let id = next_id(&queued, nanos);
    let mut learned = None;
    let (src, snapshot, no_snapshot, files) = if pre.in_place {
        (pre.src.clone(), None, None, pre.before.clone())
    } else {
        let dev = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(&pre.src)
                .with_context(|| format!("reading {}", pre.src.display()))?
                .dev()
        };
        let known = reflink::remembered(&dir(&dest), dev);
        match known.as_ref().filter(|k| !k.reflink) {
            Some(k) => (
                pre.src.clone(),
                None,
                Some(
                    k.why
                        .clone()
                        .unwrap_or_else(|| "no reflink snapshot".into()),
                ),
                pre.before.clone(),
            ),
            None => {
                let taken = snapshot_source(&dest, &id, &pre)?;
                let can = taken.1.is_some();
                if known.is_none() || !can {
                    let why = taken.2.clone();
                    reflink::remember(&dir(&dest), dev, can, why.as_deref(), now)?;
                    learned = Some(match &why {
                        Some(why) => format!(
                            "{} cannot hold reflink snapshots of this source's filesystem: {why}; remembered in {} (delete it to try again): every --detach there queues the source itself, which must stay untouched until it is published",
                            dest.display(),
                            dir(&dest).join(reflink::MEMORY).display()
                        ),
                        None => format!(
                            "{} takes reflink snapshots: every --detach there snapshots the source, which may be reused at once (remembered in {})",
                            dest.display(),
                            dir(&dest).join(reflink::MEMORY).display()
                        ),
                    });
                }
                taken
            }
        }
    };
    let ticket = Ticket {
        id: id.clone(),
        queued_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        files: files
            .iter()
            .map(|f| Stamp {
                rel: f.rel.clone(),
                size: f.size,
                mtime: f.mtime,
            })
            .collect(),
    };
    let q = Queued {
        id: id.clone(),
        source: pre.src.clone(),
        target: dest.join(&pre.name),
        snapshot,
        no_snapshot,
        size: pre.size,
        files: files.len(),
        step: req.step.or_else(|| super::names::step_from_name(&pre.name)),
        in_place: pre.in_place,
        queued_at: ticket.queued_at.clone(),
        // Absolute: the publisher runs elsewhere (its working directory is the destination).
        request: Request {
            src,
            dest: dest.clone(),
            step: req.step,
            ledger: std::path::absolute(&req.ledger)?,
            quarantine_dir: std::path::absolute(&req.quarantine_dir)?,
            config: req.config.as_deref().map(std::path::absolute).transpose()?,
            queue: Some(ticket),
            remote: None,
            ..req.clone()
        },
    };
    if let Err(e) = super::intake::append(&dest, &q) {
        if let Some(root) = q.snapshot.as_ref().and_then(|s| s.parent()) {
            let _ = place::remove_any(root);
        }
        return Err(e.context("nothing was queued"));
    }
    drop(lock);
    let started = (!super::publisher::running(&dest)).then(|| start(&dest));
    Ok(Enqueued {
        q,
        started,
        learned,
    })
}

/// Try a reflink snapshot of the source into the queue dir: (what to publish, the snapshot,
/// why none was taken, the files' stamps).
type Taken = (
    PathBuf,
    Option<PathBuf>,
    Option<String>,
    Vec<source::SrcFile>,
);

fn snapshot_source(dest: &Path, id: &str, pre: &super::preflight::Preflight) -> Result<Taken> {
    let root = snapshot_root(dest, id);
    super::failpoint::count(super::failpoint::Op::MakeDir);
    std::fs::create_dir(&root).with_context(|| format!("creating {}", root.display()))?;
    let snap = root.join(&pre.name);
    let list: Vec<(String, &Path)> = pre
        .before
        .iter()
        .map(|f| (f.rel.clone(), f.path.as_path()))
        .collect();
    match reflink::snapshot(&pre.src, &list, &snap) {
        Ok(Ok(())) => {
            // The clone must be of the bytes the stamps describe.
            if let Err(e) = source::unchanged(&pre.src, pre.layout, &pre.before) {
                let _ = place::remove_any(&root);
                return Err(e);
            }
            // Made durable by the publisher as it takes the request in (reflink::make_durable):
            // the caller's one fsync is its journal line.
            let files = source::snapshot(&snap, pre.layout)?;
            Ok((snap.clone(), Some(snap), None, files))
        }
        Ok(Err(why)) => {
            place::remove_any(&root)?;
            Ok((pre.src.clone(), None, Some(why), pre.before.clone()))
        }
        Err(e) => {
            let _ = place::remove_any(&root);
            Err(e)
        }
    }
}
