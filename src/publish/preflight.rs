//! What every publish (blocking or queued) checks before it touches the destination: the
//! source's name (not one of roger's own), layout, files (size, mtime) and formats, that a
//! queued source is still what was queued, and whether it already sits in the destination.

use super::{formats, names, source, Layout, Request};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// What publish checks before it touches the destination: the source's name, layout,
/// files (size, mtime) and formats, and whether it already sits in the destination.
pub struct Preflight {
    pub src: PathBuf,
    pub name: String,
    pub layout: Layout,
    pub before: Vec<source::SrcFile>,
    pub formats: Vec<formats::Format>,
    pub size: u64,
    pub dest_abs: PathBuf,
    pub in_place: bool,
}

pub fn preflight(req: &Request) -> Result<Preflight> {
    // A queued publish of the reflink snapshot its caller took (in the queue directory).
    let lost = || {
        let snapshot = req.queue.is_some()
            && req
                .src
                .components()
                .any(|c| c.as_os_str() == super::queue::DIR);
        if snapshot {
            " (the reflink snapshot taken when it was queued: lost or cut short by a crash before the publisher made it durable; publish the checkpoint again)"
        } else {
            ""
        }
    };
    let src = std::fs::canonicalize(&req.src)
        .with_context(|| format!("source checkpoint {}{}", req.src.display(), lost()))?;
    let name = names::file_name(&src)?;
    let own: Vec<&Path> = [Some(req.ledger.as_path()), req.config.as_deref()]
        .into_iter()
        .flatten()
        .chain([req.quarantine_dir.as_path()])
        .collect();
    if let Some(why) = names::owned(&name, &req.dest, &own) {
        bail!(
            "{}: cannot publish a checkpoint named {name:?} into {}: that name is roger's own there ({why}); nothing was touched (rename the checkpoint)",
            src.display(),
            req.dest.display()
        );
    }
    let layout = source::layout(&src)?;
    let before = source::snapshot(&src, layout)?;
    if let Some(t) = &req.queue {
        if let Some(what) = source::diff(&t.expected(&src), &before) {
            bail!(
                "{}: the source changed after it was queued ({what}) and before it was copied{}: the caller must leave it untouched until it is published (or use a filesystem with reflinks, where roger snapshots it)",
                src.display(),
                lost()
            );
        }
    }
    let formats = before
        .iter()
        .map(|f| formats::validate(&f.path))
        .collect::<Result<Vec<_>>>()?;
    // A torch DCP directory: every shard its .metadata names, whole, before a byte is copied.
    if src.is_dir() {
        super::dcp::check(&src, super::dcp::is_part(req.config.as_deref()))
            .context("nothing was published")?;
    }
    let size: u64 = before.iter().map(|f| f.size).sum();
    let dest_abs = std::path::absolute(&req.dest)
        .with_context(|| format!("destination {}", req.dest.display()))?;
    if dest_abs.exists() && !dest_abs.is_dir() {
        bail!(
            "destination {} is not a directory: expected the checkpoint directory (--to DIR or [run] checkpoint_dir)",
            dest_abs.display()
        );
    }
    // Before any byte is copied or queued: a publish must never land without its ledger record.
    crate::ledger::Ledger::new(&req.ledger)
        .check_writable()
        .context("nothing was published")?;
    let in_place =
        dest_abs.exists() && src.parent() == Some(std::fs::canonicalize(&dest_abs)?.as_path());
    Ok(Preflight {
        src,
        name,
        layout,
        before,
        formats,
        size,
        dest_abs,
        in_place,
    })
}
