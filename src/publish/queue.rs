//! The publish queue of one destination (`DEST/.roger-queue/`): `roger publish --detach`
//! checks the source, snapshots it with a reflink where the destination can (what it can is
//! learnt on the first try and remembered), appends its request durably to the journal
//! (`intake`: one fsync) and returns; the background publisher (`publisher`) takes requests in
//! (each an entry `<id>.json` and a `publish_queued` ledger record) and works the entries off
//! in id order (FIFO). An entry is removed only after its `publish` record or its
//! `publish-rejected` note exists, so a crash anywhere leaves work the next roger command
//! resumes, never a queued publish forgotten. `pending` lists the queue (journal and
//! entries) for `roger status` and the report.

use super::source::SrcFile;
use super::{manifest, place, Request};
use crate::ledger::{Entry, Kind};
use crate::sys::fsx;
use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};

pub const DIR: &str = ".roger-queue";
/// Held by the one background publisher of the destination for as long as it runs.
pub const PUBLISHER_LOCK: &str = "publisher.lock";
/// The running publisher's pid (informational: for `status`, and for tests that kill it).
pub const PUBLISHER_PID: &str = "publisher.pid";
/// The background publisher's stderr.
pub const LOG: &str = "publisher.log";
/// Held while an entry and its record are written, and while the publisher reads the queue.
const QUEUE_LOCK: &str = "queue.lock";
const ENTRY_EXT: &str = ".json";
/// How many publishers started on an entry (`<id>.tries`).
const TRIES_EXT: &str = ".tries";
/// A publisher that dies this often on the same entry (a crash it cannot get past) gives it
/// up with a record, so the queue moves on.
pub const MAX_TRIES: u32 = 5;

/// Size and mtime of one source file as it was queued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub rel: String,
    pub size: u64,
    pub mtime: (i64, i64),
}

/// What a queued publish carries into `publish`: its id, when it was queued, and what the
/// source (or its snapshot) must still be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    pub id: String,
    pub queued_at: String,
    pub files: Vec<Stamp>,
}

impl Ticket {
    /// The stamps as source files under `src`, to diff against a fresh snapshot.
    pub fn expected(&self, src: &Path) -> Vec<SrcFile> {
        self.files
            .iter()
            .map(|s| SrcFile {
                rel: s.rel.clone(),
                path: if s.rel.is_empty() {
                    src.to_path_buf()
                } else {
                    src.join(&s.rel)
                },
                size: s.size,
                mtime: s.mtime,
            })
            .collect()
    }
}

/// One queued publish (the entry file's content).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Queued {
    pub id: String,
    /// The source as the caller named it.
    pub source: PathBuf,
    /// Where it will be published.
    pub target: PathBuf,
    /// The reflink snapshot that is published instead of the source, if one was taken.
    pub snapshot: Option<PathBuf>,
    /// Why no snapshot was taken.
    pub no_snapshot: Option<String>,
    pub size: u64,
    pub files: usize,
    pub step: Option<u64>,
    pub in_place: bool,
    pub queued_at: String,
    pub request: Request,
}

pub fn dir(dest: &Path) -> PathBuf {
    dest.join(DIR)
}

fn entry_path(dest: &Path, id: &str) -> PathBuf {
    dir(dest).join(format!("{id}{ENTRY_EXT}"))
}

/// Whether the request `id` has its entry (it was taken in from the journal).
pub fn entry_exists(dest: &Path, id: &str) -> bool {
    entry_path(dest, id).exists()
}

/// Write `q`'s entry, atomically and durably (the publisher, taking a request in).
pub fn write_entry(dest: &Path, q: &Queued) -> Result<()> {
    manifest::write_json(&dir(dest), &format!("{}{ENTRY_EXT}", q.id), q)?;
    Ok(())
}

pub(super) fn snapshot_root(dest: &Path, id: &str) -> PathBuf {
    dir(dest).join(format!("{id}.snap"))
}

/// Queue entries that cannot be read: (path, why).
pub type Unreadable = Vec<(PathBuf, String)>;

/// The queue, oldest first (requests still in the journal and entries), and the entries that
/// cannot be read (the journal's own unreadable lines are the publisher's to set aside).
pub fn scan(dest: &Path) -> Result<(Vec<Queued>, Unreadable)> {
    // The journal before the entries: a request taken in between is then seen in one or both.
    let (journal, _) = super::intake::read(dest)?;
    let (mut ok, bad) = scan_entries(dest)?;
    for q in journal {
        if !ok.iter().any(|e| e.id == q.id) {
            ok.push(q);
        }
    }
    ok.sort_by(|a, b| a.id.cmp(&b.id));
    Ok((ok, bad))
}

fn scan_entries(dest: &Path) -> Result<(Vec<Queued>, Unreadable)> {
    let d = dir(dest);
    let rd = match std::fs::read_dir(&d) {
        Ok(rd) => rd,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(Default::default())
        }
        Err(e) => return Err(e).with_context(|| format!("listing {}", d.display())),
    };
    let mut paths: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.starts_with('.') && n.ends_with(ENTRY_EXT))
        })
        .collect();
    paths.sort();
    let (mut ok, mut bad) = (Vec::new(), Vec::new());
    for p in paths {
        let parsed = std::fs::read_to_string(&p)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<Queued>(&t).map_err(|e| e.to_string()));
        match parsed {
            Ok(q) => ok.push(q),
            Err(why) => bad.push((p, why)),
        }
    }
    Ok((ok, bad))
}

/// The queued publishes of `dest`, oldest first (what `roger status` and the report show).
/// Entries that cannot be read are left out (the publisher sets them aside and says so).
pub fn pending(dest: &Path) -> Result<Vec<Queued>> {
    Ok(scan(dest)?.0)
}

/// Bytes the queued publishes will still need in the destination. Pure.
pub fn queued_bytes(queue: &[Queued]) -> u64 {
    // Saturating: an entry is a file anyone can edit.
    queue
        .iter()
        .filter(|q| !q.in_place)
        .fold(0, |n, q| n.saturating_add(q.size))
}

/// The next id: nanoseconds since the epoch, zero-padded so names sort in queue order, and
/// after every id still queued even if the clock went back. Pure.
pub fn next_id(queued: &[Queued], now_nanos: u128) -> String {
    // Ids roger writes fit a u64; one that does not (an edited entry) cannot overflow this.
    let last = queued
        .iter()
        .filter_map(|q| q.id.parse::<u64>().ok())
        .max()
        .map_or(0, |l| u128::from(l) + 1);
    format!("{:020}", now_nanos.max(last))
}

pub(crate) fn lock_file(path: &Path, nonblocking: bool) -> Result<Option<nix::fcntl::Flock<File>>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let how = if nonblocking {
        nix::fcntl::FlockArg::LockExclusiveNonblock
    } else {
        nix::fcntl::FlockArg::LockExclusive
    };
    match nix::fcntl::Flock::lock(f, how) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) if nonblocking => Ok(None),
        Err((_, e)) => Err(anyhow!("locking {}: {e}", path.display())),
    }
}

pub fn lock_queue(dest: &Path) -> Result<nix::fcntl::Flock<File>> {
    lock_file(&dir(dest).join(QUEUE_LOCK), false)?.ok_or_else(|| anyhow!("queue lock"))
}

/// The publisher lock, if no other publisher holds it.
pub fn try_lock_publisher(dest: &Path) -> Result<Option<nix::fcntl::Flock<File>>> {
    lock_file(&dir(dest).join(PUBLISHER_LOCK), true)
}

/// Count one more publisher starting on `id`; returns how many did, this one included.
pub fn count_try(dest: &Path, id: &str) -> u32 {
    let p = dir(dest).join(format!("{id}{TRIES_EXT}"));
    let n = std::fs::read_to_string(&p)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .unwrap_or(0)
        + 1;
    // Replaced by rename: a crash mid-write must not reset the count (and the give-up rule).
    let how = crate::sys::fsx::Replace::new(crate::sys::fsx::Durability::Atomic, 0o644);
    let _ = crate::sys::fsx::write_atomic(&p, n.to_string().as_bytes(), how);
    n
}

/// Remove a finished entry and its snapshot (the entry last: until it is gone, the publisher
/// looks at it again and finds its record), durably: a publish that `--wait` saw end stays
/// out of the queue after a power cut.
pub fn remove(dest: &Path, q: &Queued) -> Result<()> {
    place::remove_any(&snapshot_root(dest, &q.id))?;
    let _ = std::fs::remove_file(dir(dest).join(format!("{}{TRIES_EXT}", q.id)));
    let p = entry_path(dest, &q.id);
    std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
    fsx::fsync_dir(&dir(dest))?;
    Ok(())
}

/// Remove what a caller killed while queueing left in the queue dir: a snapshot without its
/// entry, a half-written entry. Only under the queue lock (no caller is queueing then).
pub fn clean_orphans(dest: &Path, entries: &[Queued]) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir(dest)) else {
        return Vec::new();
    };
    let mut cleaned = Vec::new();
    for e in rd.flatten() {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let orphan_snapshot = name
            .strip_suffix(".snap")
            .or_else(|| name.strip_suffix(TRIES_EXT))
            .is_some_and(|id| !entries.iter().any(|q| q.id == id));
        if (orphan_snapshot || super::names::is_staging(&name))
            && place::remove_any(&e.path()).is_ok()
        {
            cleaned.push(name);
        }
    }
    cleaned
}

/// Set an unreadable entry aside (`<id>.json.unreadable`) so it stops blocking the queue.
pub fn set_aside(path: &Path) -> Result<PathBuf> {
    let to = path.with_extension("json.unreadable");
    std::fs::rename(path, &to).with_context(|| format!("setting aside {}", path.display()))?;
    Ok(to)
}

/// The `publish_queued` record of `q`.
pub fn queued_entry(q: &Queued) -> Entry {
    let newest = q
        .request
        .queue
        .as_ref()
        .and_then(|t| t.files.iter().map(|s| s.mtime).max());
    let mtime = newest.and_then(|(s, ns)| chrono::DateTime::from_timestamp(s, ns as u32));
    Entry::new(Kind::PublishQueued, "publish", &q.request.run)
        .step(q.step)
        .field("queue_id", &q.id)
        .field("path", q.source.display().to_string())
        .field("target", q.target.display().to_string())
        .field("size", q.size)
        .field("files", q.files)
        .field(
            "mtime",
            mtime.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)),
        )
        .field(
            "snapshot",
            match (&q.snapshot, &q.no_snapshot) {
                (Some(_), _) => "reflink".to_string(),
                (None, Some(why)) => why.clone(),
                (None, None) => "none".to_string(),
            },
        )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::publish::source;

    /// A queue entry of `size` bytes (also for the report's tests).
    pub(crate) fn q(id: &str, size: u64, in_place: bool) -> Queued {
        Queued {
            id: id.into(),
            source: "/s".into(),
            target: "/d/s".into(),
            snapshot: None,
            no_snapshot: None,
            size,
            files: 1,
            step: None,
            in_place,
            queued_at: String::new(),
            request: Request {
                src: "/s".into(),
                dest: "/d".into(),
                step: None,
                run: "r".into(),
                ledger: "/d/l".into(),
                retention: None,
                margin: 0,
                quarantine_dir: "/q".into(),
                rollback_margin: 0,
                config: None,
                queue: None,
                remote: None,
            },
        }
    }

    #[test]
    fn ids_sort_in_queue_order_even_when_the_clock_goes_back() {
        assert_eq!(next_id(&[], 5), "00000000000000000005");
        let queued = [q(&next_id(&[], 100), 1, false)];
        assert_eq!(next_id(&queued, 50), "00000000000000000101");
        assert_eq!(next_id(&queued, 200), "00000000000000000200");
        assert!(next_id(&queued, 50) > queued[0].id);
    }

    /// Found writing the queue entry fuzz target (issue 27): entries edited to sizes that sum
    /// past u64, or to an id past u128, panicked `publish --detach`, `status` and the report
    /// in debug builds (and wrapped in release). Sums saturate; an id that is not a u64 (ids
    /// are zero-padded nanoseconds) does not take part in choosing the next one.
    #[test]
    fn regress_queue_sizes_and_ids_past_the_integers() {
        let big = [q("1", u64::MAX, false), q("2", 1, false)];
        assert_eq!(queued_bytes(&big), u64::MAX);
        let ids = [q("340282366920938463463374607431768211455", 1, false)];
        assert_eq!(next_id(&ids, 7), "00000000000000000007");
        let ids = [q(&u64::MAX.to_string(), 1, false)];
        assert_eq!(next_id(&ids, 7), "18446744073709551616");
    }

    #[test]
    fn queued_bytes_skip_in_place_publishes() {
        assert_eq!(
            queued_bytes(&[q("1", 10, false), q("2", 5, true), q("3", 7, false)]),
            17
        );
    }

    #[test]
    fn scan_lists_entries_in_order_and_reports_unreadable_ones() {
        let d = tempfile::tempdir().unwrap();
        assert!(pending(d.path()).unwrap().is_empty(), "no queue dir: empty");
        std::fs::create_dir(dir(d.path())).unwrap();
        for id in ["00000000000000000002", "00000000000000000001"] {
            manifest::write_json(&dir(d.path()), &format!("{id}.json"), &q(id, 1, false)).unwrap();
        }
        std::fs::write(dir(d.path()).join("00000000000000000003.json"), b"{torn").unwrap();
        std::fs::write(dir(d.path()).join(PUBLISHER_LOCK), b"").unwrap();
        let (ok, bad) = scan(d.path()).unwrap();
        let ids: Vec<&str> = ok.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["00000000000000000001", "00000000000000000002"]);
        assert_eq!(bad.len(), 1);
        let aside = set_aside(&bad[0].0).unwrap();
        assert!(aside.ends_with("00000000000000000003.json.unreadable"));
        assert!(scan(d.path()).unwrap().1.is_empty());
    }

    #[test]
    fn ticket_diff_sees_a_changed_source() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("ckpt.pt");
        std::fs::write(&f, b"abc").unwrap();
        let now = source::snapshot(&f, super::super::Layout::File).unwrap();
        let t = Ticket {
            id: "1".into(),
            queued_at: String::new(),
            files: now
                .iter()
                .map(|s| Stamp {
                    rel: s.rel.clone(),
                    size: s.size,
                    mtime: s.mtime,
                })
                .collect(),
        };
        assert_eq!(source::diff(&t.expected(&f), &now), None);
        let longer = vec![SrcFile {
            size: 4,
            ..now[0].clone()
        }];
        assert!(source::diff(&t.expected(&f), &longer)
            .unwrap()
            .contains("changed size 3 -> 4"));
    }
}
