//! The background publisher of one destination: a detached `roger publish --drain` process
//! (its own session, so it outlives the training script that queued the work) that holds the
//! destination's publisher lock, takes the callers' requests in from the journal (`intake`:
//! at once, from a thread, so each `publish_queued` record lands while an earlier publish is
//! still copying) and works the queue off oldest first, each entry through the
//! same `publish` as a blocking call (its publish lock, copy, verify from disk, intent,
//! rename, ledger, latest.json). Each entry ends with a `publish` record or a
//! `publish-rejected` note carrying its `queue_id`, and only then leaves the queue. Started on
//! demand by `--detach`, again by `--wait` and by any command that runs publish recovery
//! (`publish`, `publish --verify`, `hygiene disk`, `watch`) when work is queued and no
//! publisher holds the lock.

use super::queue::{self, Queued};
use crate::ledger::{Entry, Kind, Ledger, Record};
use crate::sys::disk::DiskProbe;
use crate::sys::Clock;
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

/// How a queued publish ended, from its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Ended {
    Published {
        path: String,
        sha256: String,
        seq: u64,
    },
    Rejected {
        reason: String,
        seq: u64,
    },
}

/// How the queued publish `id` ended, if a record says so. Pure.
pub fn ended(records: &[Record], id: &str) -> Option<Ended> {
    records
        .iter()
        .rev()
        .filter(|r| r.str_field("queue_id") == Some(id))
        .find_map(|r| match r.kind {
            Kind::Publish => Some(Ended::Published {
                path: r.str_field("path").unwrap_or_default().to_string(),
                sha256: r.str_field("sha256").unwrap_or_default().to_string(),
                seq: r.seq,
            }),
            Kind::Note if r.str_field("event") == Some("publish-rejected") => {
                Some(Ended::Rejected {
                    reason: r.str_field("reason").unwrap_or_default().to_string(),
                    seq: r.seq,
                })
            }
            _ => None,
        })
}

/// Whether a publisher holds the destination's publisher lock.
pub fn running(dest: &Path) -> bool {
    if !queue::dir(dest).is_dir() {
        return false;
    }
    matches!(queue::try_lock_publisher(dest), Ok(None))
}

/// The roger binary to start a publisher with: this process (never the library's own unit
/// test harness).
pub fn roger_exe() -> Option<PathBuf> {
    if cfg!(test) {
        return None;
    }
    std::env::current_exe().ok()
}

/// `spawn`, for a caller that exits at once (`publish --detach`): the child is forked and
/// left, never waited on (not even for its exec; a failed exec says so in the publisher's
/// log, and the next roger command that finds work queued starts another).
pub fn spawn_unwaited(dest: &Path, exe: &Path) -> Result<u32> {
    crate::sys::detach::spawn_unwaited(
        exe,
        &["publish", "--drain", "--to"],
        dest,
        &queue::dir(dest).join(queue::LOG),
    )
    .with_context(|| format!("starting the background publisher {}", exe.display()))
}

/// Start `roger publish --drain --to DEST` in its own session, stdout and stderr appended to
/// `DEST/.roger-queue/publisher.log`. It exits by itself when the queue is empty, or at once
/// when another publisher holds the lock. Returns its pid.
pub fn spawn(dest: &Path, exe: &Path) -> Result<u32> {
    crate::sys::detach::spawn(
        exe,
        &["publish", "--drain", "--to"],
        dest,
        &queue::dir(dest).join(queue::LOG),
    )
    .with_context(|| format!("starting the background publisher {}", exe.display()))
}

/// When work is queued in `dest` and no publisher runs (one crashed, or was killed), start one
/// and say so. For the commands that run publish recovery (after `recover::try_recover`,
/// which starts none itself). Returns how many are queued; a directory that does not exist
/// has none.
pub fn resume(dest: &Path) -> usize {
    let Ok(dest) = std::fs::canonicalize(dest) else {
        return 0;
    };
    let dest = dest.as_path();
    let Ok(pending) = queue::pending(dest) else {
        return 0;
    };
    if pending.is_empty() || running(dest) {
        return pending.len();
    }
    match roger_exe().map(|exe| spawn(dest, &exe)) {
        Some(Ok(pid)) => eprintln!(
            "roger: {} queued publish(es) in {} had no running publisher: resumed (publisher pid {pid}; roger publish --wait waits for them)",
            pending.len(),
            dest.display()
        ),
        Some(Err(e)) => eprintln!(
            "roger: warning: {} queued publish(es) in {} and no publisher: {e:#} (run roger publish --wait --to {})",
            pending.len(),
            dest.display(),
            dest.display()
        ),
        None => {}
    }
    pending.len()
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct Drained {
    pub published: usize,
    pub rejected: usize,
}

/// The publisher: take the publisher lock (or leave it to the one holding it), work the queue
/// off, and before leaving look once more after releasing the lock, so an entry queued while
/// it was finishing is never stranded (its caller's publisher found the lock held).
/// `then` runs after each publish (the bucket's queue: `remote::queue::after_publish`).
pub fn drain(
    dest: &Path,
    disk: &dyn DiskProbe,
    clock: &dyn Clock,
    then: &dyn Fn(&super::Request, &mut super::Outcome) -> Result<()>,
) -> Result<Option<Drained>> {
    let mut total = Drained::default();
    let mut ran = false;
    loop {
        // A probe (`running`) holds the lock for an instant: try a few times.
        let mut lock = None;
        for _ in 0..20 {
            lock = queue::try_lock_publisher(dest)?;
            if lock.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let Some(_lock) = lock else {
            return Ok(ran.then_some(total));
        };
        ran = true;
        let _ = crate::sys::fsx::write_atomic(
            &queue::dir(dest).join(queue::PUBLISHER_PID),
            std::process::id().to_string().as_bytes(),
            crate::sys::fsx::Replace::new(crate::sys::fsx::Durability::Atomic, 0o644),
        );
        let intake = Intake::start(dest);
        loop {
            for line in super::intake::take_in(dest, clock)? {
                eprintln!("roger: {line}");
            }
            let (entries, bad) = {
                let _q = queue::lock_queue(dest)?;
                let (entries, bad) = queue::scan(dest)?;
                for name in queue::clean_orphans(dest, &entries) {
                    eprintln!("roger: removed {name} from the queue dir: left by a caller killed while queueing (it was never queued)");
                }
                (entries, bad)
            };
            for (path, why) in bad {
                let to = queue::set_aside(&path)?;
                eprintln!(
                    "roger: queue entry {} cannot be read ({why}): set aside as {}; it is not published",
                    path.display(),
                    to.display()
                );
            }
            let Some(q) = entries.into_iter().next() else {
                break;
            };
            match process(dest, &q, disk, clock, then)? {
                Ended::Published { .. } => total.published += 1,
                Ended::Rejected { .. } => total.rejected += 1,
            }
        }
        drop(intake);
        let _ = std::fs::remove_file(queue::dir(dest).join(queue::PUBLISHER_PID));
        drop(_lock);
        if queue::pending(dest)?.is_empty() {
            return Ok(Some(total));
        }
    }
}

/// The publisher's intake thread: while an entry is being published, requests the callers
/// append are taken in (recorded, made entries) within `INTAKE_EVERY`.
struct Intake {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const INTAKE_EVERY: Duration = Duration::from_millis(100);

impl Intake {
    fn start(dest: &Path) -> Intake {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, dest) = (stop.clone(), dest.to_path_buf());
        let journal = super::intake::path(&dest);
        let thread = std::thread::Builder::new()
            .name("intake".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(INTAKE_EVERY);
                    // A stat while nothing is queued; the queue lock only when something is.
                    if std::fs::metadata(&journal).is_ok_and(|m| m.len() > 0) {
                        match super::intake::take_in(&dest, &crate::sys::SystemClock) {
                            Ok(said) => said.iter().for_each(|l| eprintln!("roger: {l}")),
                            Err(e) => eprintln!("roger: warning: taking queued requests in: {e:#} (tried again after this publish)"),
                        }
                    }
                }
            })
            .ok();
        Intake { stop, thread }
    }
}

impl Drop for Intake {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Publish one queued entry (or find that a record already ended it), then remove it.
fn process(
    dest: &Path,
    q: &Queued,
    disk: &dyn DiskProbe,
    clock: &dyn Clock,
    then: &dyn Fn(&super::Request, &mut super::Outcome) -> Result<()>,
) -> Result<Ended> {
    let ledger = Ledger::new(&q.request.ledger);
    // A publish of this entry interrupted after its rename is finished here (its intent
    // carries the queue id), so it is not done twice.
    super::recover::recover_if_needed(dest, &ledger, &q.request.run, "publish", clock.now())?;
    let records = ledger.records()?;
    let end = match ended(&records, &q.id) {
        Some(e) => e,
        None => {
            let queued = records.iter().any(|r| {
                r.kind == Kind::PublishQueued && r.str_field("queue_id") == Some(q.id.as_str())
            });
            if !queued {
                // The caller died between the entry and its record.
                ledger.append(queue::queued_entry(q).field("repaired", true), clock.now())?;
                eprintln!(
                    "roger: queued publish {} of {} had no publish_queued record (its caller died while queueing): recorded now",
                    q.id,
                    q.source.display()
                );
            }
            let tries = queue::count_try(dest, &q.id);
            let result = if tries > queue::MAX_TRIES {
                Err(anyhow::anyhow!(
                    "the publisher died {} times while publishing it (see {}); given up so the queue moves on",
                    tries - 1,
                    queue::dir(dest).join(queue::LOG).display()
                ))
            } else {
                super::publish(&q.request, disk, clock)
            };
            let result = result.and_then(|mut o| then(&q.request, &mut o).map(|()| o));
            match result {
                Ok(o) => {
                    eprintln!(
                        "roger: published {} (queued {} as {}): {} bytes, sha256 {}, {} ms, ledger record #{}",
                        o.path.display(),
                        q.queued_at,
                        q.id,
                        o.size,
                        o.sha256,
                        o.timings_ms.total,
                        o.ledger_seq
                    );
                    // The record `publish` just wrote says this; no need to read the
                    // ledger again.
                    Ended::Published {
                        path: o.path.display().to_string(),
                        sha256: o.sha256,
                        seq: o.ledger_seq,
                    }
                }
                Err(e) => {
                    let records = ledger.records()?;
                    if ended(&records, &q.id).is_none() {
                        let reason = format!("{e:#}");
                        ledger
                            .append(
                                Entry::new(Kind::Note, "publish", &q.request.run)
                                    .step(q.step)
                                    .field("event", "publish-rejected")
                                    .field("queue_id", &q.id)
                                    .field("path", q.target.display().to_string())
                                    .field("source_path", q.source.display().to_string())
                                    .field("reason", &reason),
                                clock.now(),
                            )
                            .context("recording a rejected queued publish")?;
                    }
                    eprintln!(
                        "roger: queued publish {} of {} rejected: {e:#}; nothing was published under {} (latest.json unchanged)",
                        q.id,
                        q.source.display(),
                        q.target.display()
                    );
                    ended(&ledger.records()?, &q.id).with_context(|| {
                        format!("queued publish {}: no record of how it ended", q.id)
                    })?
                }
            }
        }
    };
    queue::remove(dest, q)?;
    Ok(end)
}

/// What `--wait` answers for, and how each ended (None: still queued at the timeout).
#[derive(Debug, Clone, Serialize)]
pub struct Waited {
    pub id: String,
    pub source: PathBuf,
    pub target: PathBuf,
    pub ended: Option<Ended>,
    #[serde(skip)]
    pub ledger: PathBuf,
}

/// The `publish-waited` note that closes a `--wait`: the next one answers for what was
/// queued after it.
pub const WAITED: &str = "publish-waited";

/// The queued publishes `--wait` answers for: every one queued into `dest` (per `records`
/// of `ledger`) since the last `publish-waited` note for `dest`, and everything still queued
/// there, so a job script's `--wait` fails for a publish rejected before it even started
/// waiting. Pure.
pub fn to_report(
    records: &[Record],
    ledger: &Path,
    dest: &Path,
    pending: &[Queued],
) -> Vec<Waited> {
    let dir = dest.display().to_string();
    let since = records
        .iter()
        .rev()
        .find(|r| {
            r.kind == Kind::Note
                && r.str_field("event") == Some(WAITED)
                && r.str_field("dir") == Some(dir.as_str())
        })
        .map_or(0, |r| r.seq);
    let mut out: Vec<Waited> = records
        .iter()
        .filter(|r| r.kind == Kind::PublishQueued && r.seq > since)
        .filter(|r| {
            r.str_field("target")
                .is_some_and(|t| Path::new(t).parent() == Some(dest))
        })
        .filter_map(|r| {
            Some(Waited {
                id: r.str_field("queue_id")?.to_string(),
                source: PathBuf::from(r.str_field("path").unwrap_or_default()),
                target: PathBuf::from(r.str_field("target").unwrap_or_default()),
                ended: None,
                ledger: ledger.to_path_buf(),
            })
        })
        .collect();
    for q in pending {
        if !out.iter().any(|w| w.id == q.id) {
            out.push(Waited {
                id: q.id.clone(),
                source: q.source.clone(),
                target: q.target.clone(),
                ended: None,
                ledger: q.request.ledger.clone(),
            });
        }
    }
    out
}

/// Wait until none of `ids` is queued in `dest` any more (or `timeout` passes), starting a
/// publisher whenever none runs (one that crashed is replaced, at most once a second).
pub fn wait_for(
    dest: &Path,
    ids: &[String],
    timeout: Option<Duration>,
    exe: Option<&Path>,
) -> Result<()> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut last_start: Option<Instant> = None;
    // Publishers started in a row while nothing left the queue: one that fails at once
    // every time (an unwritable ledger) must not keep the caller waiting forever.
    let (mut stalled, mut left_at_start) = (0, usize::MAX);
    loop {
        let now_pending = queue::pending(dest)?;
        let left = ids
            .iter()
            .filter(|id| now_pending.iter().any(|p| &p.id == *id))
            .count();
        if left == 0 || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(());
        }
        if !running(dest) && last_start.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            stalled = if left < left_at_start { 0 } else { stalled + 1 };
            if stalled > 5 {
                anyhow::bail!(
                    "{left} queued publish(es) in {} are not progressing: {stalled} publishers in a row stopped without finishing one (see {})",
                    dest.display(),
                    queue::dir(dest).join(queue::LOG).display()
                );
            }
            left_at_start = left;
            if let Some(exe) = exe {
                spawn(dest, exe)?;
            }
            last_start = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `--wait`: what `to_report` lists, once none of it is queued any more (or at the timeout),
/// with how each ended.
pub fn wait(
    dest: &Path,
    ledger: &Ledger,
    timeout: Option<Duration>,
    exe: Option<&Path>,
) -> Result<Vec<Waited>> {
    let mut list = to_report(
        &ledger.records()?,
        ledger.path(),
        dest,
        &queue::pending(dest)?,
    );
    let ids: Vec<String> = list.iter().map(|w| w.id.clone()).collect();
    wait_for(dest, &ids, timeout, exe)?;
    for w in &mut list {
        w.ended = ended(&Ledger::new(&w.ledger).records()?, &w.id);
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Ledger;
    use chrono::TimeZone;

    #[test]
    fn ended_reads_the_newest_terminal_record_of_the_id() {
        let d = tempfile::tempdir().unwrap();
        let l = Ledger::new(d.path().join("l.jsonl"));
        let t = chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let e = |k| Entry::new(k, "publish", "r");
        l.append(e(Kind::PublishQueued).field("queue_id", "1"), t)
            .unwrap();
        l.append(e(Kind::PublishQueued).field("queue_id", "2"), t)
            .unwrap();
        l.append(
            e(Kind::Publish)
                .field("queue_id", "1")
                .field("path", "/d/a")
                .field("sha256", "ab"),
            t,
        )
        .unwrap();
        l.append(
            e(Kind::Note)
                .field("event", "publish-rejected")
                .field("queue_id", "2")
                .field("reason", "source changed"),
            t,
        )
        .unwrap();
        l.append(
            e(Kind::Note).field("event", "other").field("queue_id", "3"),
            t,
        )
        .unwrap();
        let r = l.records().unwrap();
        assert_eq!(
            ended(&r, "1"),
            Some(Ended::Published {
                path: "/d/a".into(),
                sha256: "ab".into(),
                seq: 3
            })
        );
        assert_eq!(
            ended(&r, "2"),
            Some(Ended::Rejected {
                reason: "source changed".into(),
                seq: 4
            })
        );
        assert_eq!(ended(&r, "3"), None);
        assert_eq!(ended(&r, "4"), None);
    }

    #[test]
    fn wait_answers_for_what_was_queued_since_the_last_wait_and_what_is_still_queued() {
        let d = tempfile::tempdir().unwrap();
        let l = Ledger::new(d.path().join("l.jsonl"));
        let t = chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let q = |id: &str, target: &str| {
            Entry::new(Kind::PublishQueued, "publish", "r")
                .field("queue_id", id)
                .field("path", format!("/src/{id}"))
                .field("target", target)
        };
        l.append(q("1", "/ck/a"), t).unwrap();
        l.append(
            Entry::new(Kind::Note, "publish", "r")
                .field("event", WAITED)
                .field("dir", "/ck"),
            t,
        )
        .unwrap();
        l.append(q("2", "/ck/b"), t).unwrap();
        l.append(q("3", "/other/c"), t).unwrap();
        let r = l.records().unwrap();
        let ids = |w: Vec<Waited>| w.into_iter().map(|w| w.id).collect::<Vec<_>>();
        assert_eq!(ids(to_report(&r, l.path(), Path::new("/ck"), &[])), ["2"]);
        assert_eq!(
            ids(to_report(&r, l.path(), Path::new("/other"), &[])),
            ["3"]
        );
        // Before that wait, 1 was still to answer for.
        assert_eq!(
            ids(to_report(&r[..1], l.path(), Path::new("/ck"), &[])),
            ["1"]
        );
    }
}
