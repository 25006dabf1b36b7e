//! `roger publish --detach` (queue, start the background publisher, return), `--wait` (until
//! what was queued since the last --wait has ended) and the hidden `--drain` (this process is
//! the destination's background publisher). Flags in, `publish::queue`/`publisher` do the work.

use super::publish::disk_probe;
use crate::ledger::{Kind, Ledger};
use crate::publish::{self, Request};
use crate::{exit, outln};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// `--detach`: queue (one durable append), start the publisher if none runs (never waited
/// on), return.
pub(super) fn queue_it(req: &Request, json: bool) -> Result<u8> {
    let start = |dest: &Path| match publish::publisher::roger_exe()
        .filter(|_| std::env::var_os("ROGER_DETACH_NO_PUBLISHER").is_none())
    {
        Some(exe) => publish::publisher::spawn_unwaited(dest, &exe).map(Some),
        None => Ok(None),
    };
    let done =
        publish::enqueue::enqueue(req, disk_probe()?.as_ref(), &crate::sys::SystemClock, start)?;
    let q = &done.q;
    let started = done.started.unwrap_or(Ok(None));
    if let Some(l) = &done.learned {
        eprintln!("roger: {l}");
    }
    let how = match (&q.snapshot, &q.no_snapshot) {
        (Some(_), _) => "reflink snapshot taken: the source may be reused now".to_string(),
        _ if q.in_place => "in place".to_string(),
        (None, why) => format!(
            "{}: leave the source untouched until it is published",
            why.as_deref().unwrap_or("no reflink snapshot")
        ),
    };
    eprintln!(
        "roger: queued {} for {} ({} bytes in {} file(s), queue id {}; {how})",
        q.source.display(),
        q.target.display(),
        q.size,
        q.files,
        q.id
    );
    if let Err(e) = &started {
        eprintln!(
            "roger: warning: could not start the background publisher ({e:#}); the next roger publish, publish --wait, hygiene disk or watch starts it"
        );
    }
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "queued": q.id,
                "source": q.source,
                "target": q.target,
                "size": q.size,
                "files": q.files,
                "step": q.step,
                "snapshot": q.snapshot.is_some(),
                "no_snapshot": q.no_snapshot,
                "publisher_pid": started.ok().flatten(),
            })
        );
    } else {
        outln!("queued {} -> {}", q.source.display(), q.target.display());
        outln!("  queue id {}; {how}", q.id);
    }
    publish::failpoint::write_counts();
    Ok(exit::DONE)
}

/// `--wait`: until what was queued in DEST since the last `--wait` has ended; exit 1 when
/// one was rejected or time ran out. Closed with a `publish-waited` note.
pub(super) fn wait(
    dest: &Path,
    ledger: &Path,
    run: &str,
    timeout: Option<std::time::Duration>,
    json: bool,
) -> Result<u8> {
    let Ok(dest) = std::fs::canonicalize(dest) else {
        if json {
            outln!("[]");
        } else {
            outln!("nothing queued in {}", dest.display());
        }
        return Ok(exit::DONE);
    };
    let t0 = std::time::Instant::now();
    let ledger = Ledger::new(ledger);
    let waited = publish::publisher::wait(
        &dest,
        &ledger,
        timeout,
        publish::publisher::roger_exe().as_deref(),
    )?;
    use publish::publisher::Ended;
    if json {
        outln!("{}", serde_json::to_string(&waited)?);
    } else if waited.is_empty() {
        outln!("nothing queued in {} since the last --wait", dest.display());
    }
    if !waited.is_empty() {
        let count = |f: fn(&Option<Ended>) -> bool| waited.iter().filter(|w| f(&w.ended)).count();
        ledger.append(
            crate::ledger::Entry::new(Kind::Note, "publish", run)
                .field("event", publish::publisher::WAITED)
                .field("dir", dest.display().to_string())
                .field(
                    "published",
                    count(|e| matches!(e, Some(Ended::Published { .. }))),
                )
                .field(
                    "rejected",
                    count(|e| matches!(e, Some(Ended::Rejected { .. }))),
                )
                .field("still_queued", count(|e| e.is_none())),
            chrono::Utc::now(),
        )?;
    }
    let mut failed = 0;
    for w in &waited {
        let line = match &w.ended {
            Some(Ended::Published { path, .. }) => format!("published {path}"),
            Some(Ended::Rejected { reason, .. }) => {
                failed += 1;
                format!("rejected {}: {reason}", w.source.display())
            }
            None => {
                failed += 1;
                format!("still queued: {} (queue id {})", w.source.display(), w.id)
            }
        };
        if !json {
            outln!("{line}");
        }
    }
    let uploads = wait_uploads(&dest, &ledger, timeout.map(|t| t0 + t))?;
    for u in &uploads {
        eprintln!("roger: {u}");
    }
    if failed == 0 && !uploads.is_empty() {
        bail!(
            "{} checkpoint(s) in {} are not verified in the bucket (see above and the ledger)",
            uploads.len(),
            dest.display()
        );
    }
    if failed > 0 {
        bail!(
            "{failed} of {} queued publish(es) in {} {}",
            waited.len(),
            dest.display(),
            if waited.iter().any(|w| w.ended.is_none()) {
                "did not finish in time or were rejected (see above and the ledger)"
            } else {
                "were rejected (see above and the ledger)"
            }
        );
    }
    Ok(exit::DONE)
}

/// `--wait` for the bucket too: until every upload job in `dest` is verified. Returns a line
/// for each job left (the uploader stopped on a cause it cannot retry past, or time ran out).
fn wait_uploads(
    dest: &Path,
    ledger: &Ledger,
    deadline: Option<std::time::Instant>,
) -> Result<Vec<String>> {
    use crate::remote::queue;
    let mut restarted = false;
    // Records after this one were written while this --wait waited.
    let since = ledger.records()?.last().map_or(0, |r| r.seq);
    loop {
        let jobs = queue::pending(dest)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let timed_out = deadline.is_some_and(|d| std::time::Instant::now() >= d);
        if !queue::running(dest) {
            // Give a stopped uploader one more start (it may have stopped for a network
            // outage since mended, or its cause was fixed before this --wait); when it
            // stops again, or stopped on a permanent error during this wait, report why.
            let permanent = ledger.records().unwrap_or_default().iter().any(|r| {
                r.seq > since
                    && r.kind == Kind::Remote
                    && r.str_field("event") == Some("failed")
                    && r.get("permanent") == Some(&serde_json::Value::Bool(true))
            });
            if restarted || permanent || publish::publisher::roger_exe().is_none() || timed_out {
                let recs = ledger.records().unwrap_or_default();
                return Ok(jobs
                    .iter()
                    .map(|j| {
                        let why = recs
                            .iter()
                            .rev()
                            .find(|r| {
                                r.kind == Kind::Remote
                                    && r.str_field("upload_id") == Some(j.id.as_str())
                                    && r.str_field("event") == Some("failed")
                            })
                            .and_then(|r| r.str_field("error"))
                            .unwrap_or("queued behind the one above; the uploader stopped");
                        let url = j.remote.object_url(&j.remote.checkpoint_key(&j.name));
                        format!(
                            "not in the bucket yet: {} -> {url} ({why})",
                            j.path.display()
                        )
                    })
                    .collect());
            }
            let mark = ledger.records()?.last().map_or(0, |r| r.seq);
            queue::resume(dest);
            restarted = true;
            // Until the uploader has the lock or has written something (a fast failure
            // may come and go between two looks at the lock).
            let t0 = std::time::Instant::now();
            while t0.elapsed() < std::time::Duration::from_secs(10)
                && !queue::running(dest)
                && ledger.records()?.last().map_or(0, |r| r.seq) == mark
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            continue;
        }
        if timed_out {
            return Ok(jobs
                .iter()
                .map(|j| {
                    format!(
                        "still uploading when --timeout passed: {}",
                        j.path.display()
                    )
                })
                .collect());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The hidden `--drain`: this process is the destination's background publisher.
pub(super) fn drain(dest: &Path, json: bool) -> Result<u8> {
    let dest =
        std::fs::canonicalize(dest).with_context(|| format!("destination {}", dest.display()))?;
    let done = publish::publisher::drain(
        &dest,
        disk_probe()?.as_ref(),
        &crate::sys::SystemClock,
        &crate::remote::queue::after_publish,
    )?;
    if json {
        outln!("{}", serde_json::to_string(&done)?);
    }
    Ok(exit::DONE)
}
