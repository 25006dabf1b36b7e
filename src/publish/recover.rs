//! Finishing what an interrupted publish (a crash, `kill -9`, a power cut) left half done, so
//! that latest.json, the ledger and the files agree again. Before a checkpoint takes its real
//! name, publish writes an intent (`.roger-publish-intent.json`: name, sha256, size, step)
//! durably; it is removed once latest.json names the checkpoint. The next publish,
//! `publish --verify`, `hygiene disk` and `watch` run `recover` under the publish lock:
//! - intent, and the name holds the intended bytes: the checkpoint is complete and verified
//!   (it only takes its name after that), so the publish is rolled forward: its ledger record
//!   (marked `repaired`) if missing, then latest.json;
//! - intent, and the name does not hold them: the copy never got its name; nothing was
//!   published, latest.json is pointed back at the real name if it named the swap twin;
//! - no intent, but latest.json names bytes the ledger has no record of (what earlier
//!   versions left after a crash between the two): re-hashed, and recorded if they match;
//! - a prune recorded in the ledger whose file is still there with the pruned bytes (its
//!   removal did not survive): removed.
//!
//! Each repair is a ledger record and a line on stderr. Nothing here deletes anything but
//! the swap twin, the intent, and files whose prune was already recorded.

use super::manifest::{self, Latest};
use super::{names, place, Layout};
use crate::ledger::{Entry, Kind, Ledger, Record};
use crate::sys::fsx::{self, DirSync};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub const INTENT_FILE: &str = ".roger-publish-intent.json";

/// What a publish is about to put under its real name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// File or directory name in the destination directory.
    pub path: String,
    pub sha256: String,
    pub size: u64,
    pub step: Option<u64>,
    pub layout: Layout,
    pub files: usize,
    pub in_place: bool,
    pub run: String,
    /// Set for a queued (`--detach`) publish: a repaired record carries it, so the publisher
    /// knows the queued publish ended and does not do it twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_id: Option<String>,
    /// RFC 3339; becomes latest.json's `published_at`.
    pub published_at: String,
}

impl Intent {
    pub fn latest(&self) -> Latest {
        Latest {
            path: self.path.clone(),
            sha256: self.sha256.clone(),
            size: self.size,
            step: self.step,
            published_at: self.published_at.clone(),
        }
    }
}

/// Write the intent durably (it must survive whatever follows it).
pub fn write_intent(dest: &Path, intent: &Intent) -> Result<DirSync> {
    manifest::write_json(dest, INTENT_FILE, intent)
}

/// Remove the intent (not fsynced: an intent that comes back after a power cut describes a
/// publish that completed, and `recover` then only removes it).
pub fn clear_intent(dest: &Path) {
    let _ = std::fs::remove_file(dest.join(INTENT_FILE));
}

fn read_intent(dest: &Path) -> Result<Option<std::result::Result<Intent, String>>> {
    let p = dest.join(INTENT_FILE);
    match std::fs::read_to_string(&p) {
        Ok(t) => Ok(Some(serde_json::from_str(&t).map_err(|e| e.to_string()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// The ledger's current record for `path`: its newest publish, unless pruned since.
fn current<'a>(records: &'a [Record], path: &Path) -> Option<&'a Record> {
    let p = path.display().to_string();
    records
        .iter()
        .rev()
        .find(|r| matches!(r.kind, Kind::Publish | Kind::Prune) && r.str_field("path") == Some(&p))
        .filter(|r| r.kind == Kind::Publish)
}

fn recorded(records: &[Record], path: &Path, sha256: &str) -> bool {
    current(records, path).is_some_and(|r| r.str_field("sha256") == Some(sha256))
}

/// Whether latest.json's checkpoint has its publish record. A swap twin has the bytes (and
/// so the sha256) of a record under its real name.
pub fn latest_recorded(records: &[Record], dest: &Path, l: &Latest) -> bool {
    if l.path.starts_with(names::PREV_PREFIX) {
        let real = dest.join(&l.path[names::PREV_PREFIX.len()..]);
        return recorded(records, &real, &l.sha256)
            || records.iter().any(|r| {
                r.kind == Kind::Publish && r.str_field("sha256") == Some(l.sha256.as_str())
            });
    }
    recorded(records, &l.target(dest), &l.sha256)
}

fn matches(path: &Path, sha256: &str, size: u64) -> bool {
    super::rehash(path).is_ok_and(|h| h.sha256 == sha256 && h.size == size)
}

/// The ledger record of a publish (also what a repaired one carries, plus `repaired`).
#[allow(clippy::too_many_arguments)]
pub fn publish_entry(
    run: &str,
    step: Option<u64>,
    target: &Path,
    sha256: &str,
    size: u64,
    layout: Layout,
    files: usize,
    dest: &Path,
    in_place: bool,
    dir_fsync: &str,
) -> Entry {
    Entry::new(Kind::Publish, "publish", run)
        .step(step)
        .field("path", target.display().to_string())
        .field("sha256", sha256)
        .field("size", size)
        .field("layout", layout.as_str())
        .field("files", files)
        .field("dir", dest.display().to_string())
        .field("in_place", in_place)
        .field("dir_fsync", dir_fsync)
}

/// For the commands that only read checkpoints (`publish --verify`, `hygiene disk`,
/// `watch`): when a look without the lock finds something to repair, take the destination's
/// publish lock and recover. Nothing to repair touches nothing (no lock file in a read-only
/// directory, no wait behind a running publish). A directory that does not exist has
/// nothing to recover.
pub fn recover_if_needed(
    dest: &Path,
    ledger: &Ledger,
    run: &str,
    source: &str,
    now: DateTime<Utc>,
) -> Result<Vec<String>> {
    let Ok(dest) = std::fs::canonicalize(dest) else {
        return Ok(Vec::new());
    };
    if !dest.is_dir() || !needs_recovery(&dest, ledger)? {
        return Ok(Vec::new());
    }
    let _lock = place::lock(&dest)?;
    recover(&dest, ledger, run, source, now)
}

/// `recover_if_needed` for a command whose own job does not depend on it: a repair that
/// fails is a warning on stderr, not a refusal to run. It starts no publisher for queued
/// publishes (recovery stays a leaf below the queue); callers that should resume them call
/// `publisher::resume` themselves.
pub fn try_recover(dest: &Path, ledger: &Ledger, run: &str, source: &str, now: DateTime<Utc>) {
    if let Err(e) = recover_if_needed(dest, ledger, run, source, now) {
        crate::warnln!(
            "could not finish or undo an interrupted publish in {}: {e:#}",
            dest.display()
        );
    }
}

fn needs_recovery(dest: &Path, ledger: &Ledger) -> Result<bool> {
    if std::fs::symlink_metadata(dest.join(INTENT_FILE)).is_ok() {
        return Ok(true);
    }
    let records = ledger.records()?;
    let unrecorded = manifest::read(dest)?.is_some_and(|l| !latest_recorded(&records, dest, &l));
    Ok(unrecorded || !pruned_but_present(&records, dest).is_empty())
}

/// Repair what an interrupted publish left in `dest` (canonical; the caller holds the publish
/// lock). Returns what was repaired, in words (also on stderr and in the ledger).
pub fn recover(
    dest: &Path,
    ledger: &Ledger,
    run: &str,
    source: &str,
    now: DateTime<Utc>,
) -> Result<Vec<String>> {
    let mut log = Log {
        ledger,
        source,
        run,
        now,
        done: Vec::new(),
    };
    let latest = manifest::read(dest)?;
    let records = ledger.records()?;
    match read_intent(dest)? {
        Some(Ok(i)) => {
            let target = dest.join(&i.path);
            if matches(&target, &i.sha256, i.size) {
                // The checkpoint has its name: finish the publish.
                if !recorded(&records, &target, &i.sha256) {
                    let what = format!(
                        "repaired an interrupted publish: {} (sha256 {}) had its name but no ledger record; recorded now",
                        target.display(),
                        i.sha256
                    );
                    log.record(
                        super::record::with_fields(
                            publish_entry(
                                &i.run, i.step, &target, &i.sha256, i.size, i.layout, i.files,
                                dest, i.in_place, "ok",
                            ),
                            i.queue_id
                                .iter()
                                .map(|q| ("queue_id", serde_json::json!(q))),
                        ),
                        what,
                    )?;
                }
                if latest.as_ref() != Some(&i.latest()) {
                    // Record first, then act (a cut in between acts again next time).
                    log.note(
                        "publish-repaired",
                        &target,
                        format!(
                            "repaired an interrupted publish: latest.json now names {} (it named {})",
                            i.path,
                            latest.as_ref().map_or("nothing", |l| l.path.as_str())
                        ),
                    )?;
                    manifest::write(dest, &i.latest())?;
                }
            } else {
                // It never got its name: nothing was published.
                let mut what = format!(
                    "a publish of {} (sha256 {}) was interrupted before the checkpoint got its name: nothing was published",
                    target.display(),
                    i.sha256
                );
                let back = latest
                    .as_ref()
                    .filter(|l| l.path == names::prev_name(&i.path))
                    .filter(|l| matches(&target, &l.sha256, l.size))
                    .map(|l| Latest {
                        path: i.path.clone(),
                        ..l.clone()
                    });
                if back.is_some() {
                    what.push_str(&format!("; latest.json names {} again", i.path));
                }
                log.note("publish-interrupted", &target, what)?;
                if let Some(l) = back {
                    manifest::write(dest, &l)?;
                }
            }
            if manifest::read(dest)?.is_none_or(|l| l.path != names::prev_name(&i.path)) {
                place::remove_stale_prev(dest, &i.path);
            }
            std::fs::remove_file(dest.join(INTENT_FILE))
                .with_context(|| format!("removing {}", dest.join(INTENT_FILE).display()))?;
            fsx::fsync_dir(dest)?;
        }
        Some(Err(why)) => {
            log.note(
                "publish-intent-unreadable",
                &dest.join(INTENT_FILE),
                format!("removed an unreadable {INTENT_FILE} ({why}); nothing else was changed"),
            )?;
            std::fs::remove_file(dest.join(INTENT_FILE))?;
        }
        None => {
            if let Some(l) = latest
                .as_ref()
                // (A swap twin without an intent, older versions' mid-swap state, has the
                // bytes of a record under its real name, which `latest_recorded` finds.)
                .filter(|l| {
                    !latest_recorded(&records, dest, l) && !l.path.starts_with(names::PREV_PREFIX)
                })
            {
                let target = l.target(dest);
                match super::rehash(&target) {
                    Ok(h) if h.sha256 == l.sha256 && h.size == l.size => {
                        let what = format!(
                            "repaired the ledger: latest.json names {} (sha256 {}) and its bytes match, but the ledger had no publish record of it (a publish interrupted between the two); recorded now",
                            target.display(),
                            l.sha256
                        );
                        log.record(
                            publish_entry(
                                run, l.step, &target, &l.sha256, l.size, h.layout, h.files, dest,
                                false, "ok",
                            ),
                            what,
                        )?;
                    }
                    Ok(h) => crate::warnln!(
                        "latest.json names {} with sha256 {}, but it hashes to {} and the ledger has no record of it: not repaired (re-publish it)",
                        target.display(),
                        l.sha256,
                        h.sha256
                    ),
                    Err(e) => crate::warnln!(
                        "latest.json names {}, which cannot be read ({e:#}), and the ledger has no record of it",
                        target.display()
                    ),
                }
            }
        }
    }
    for (path, (sha, size, seq)) in pruned_but_present(&records, dest) {
        if matches(&path, &sha, size) {
            log.note(
                "prune-completed",
                &path,
                format!(
                    "completed the prune recorded in #{seq}: {} was still there with the pruned bytes; removed",
                    path.display()
                ),
            )?;
            place::remove_any(&path)?;
            fsx::fsync_dir(dest)?;
        }
    }
    Ok(log.done)
}

struct Log<'a> {
    ledger: &'a Ledger,
    source: &'a str,
    run: &'a str,
    now: DateTime<Utc>,
    done: Vec<String>,
}

impl Log<'_> {
    /// A repaired publish record.
    fn record(&mut self, entry: Entry, what: String) -> Result<()> {
        crate::noteln!("roger: {what}");
        self.ledger
            .append(entry.field("repaired", what.as_str()), self.now)?;
        self.done.push(what);
        Ok(())
    }

    fn note(&mut self, event: &str, path: &Path, what: String) -> Result<()> {
        crate::noteln!("roger: {what}");
        self.ledger.append(
            Entry::new(Kind::Note, self.source, self.run)
                .field("event", event)
                .field("path", path.display().to_string())
                .field("reason", &what),
            self.now,
        )?;
        self.done.push(what);
        Ok(())
    }
}

/// Checkpoints in `dest` whose last ledger event is a prune and that still exist: (path,
/// (sha256 and size they were published with, the prune's seq)).
fn pruned_but_present(records: &[Record], dest: &Path) -> Vec<(PathBuf, (String, u64, u64))> {
    let mut last: HashMap<&str, (&Record, Option<&Record>)> = HashMap::new();
    for r in records {
        let Some(p) = r.str_field("path") else {
            continue;
        };
        match r.kind {
            Kind::Publish => {
                last.insert(p, (r, None));
            }
            Kind::Prune => {
                if let Some(e) = last.get_mut(p) {
                    e.1 = Some(r);
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<_> = last
        .into_iter()
        .filter_map(|(p, (publish, prune))| {
            let prune = prune?;
            let path = PathBuf::from(p);
            (path.parent() == Some(dest) && std::fs::symlink_metadata(&path).is_ok()).then(|| {
                (
                    path,
                    (
                        publish.str_field("sha256").unwrap_or_default().to_string(),
                        publish.u64_field("size").unwrap_or(u64::MAX),
                        prune.seq,
                    ),
                )
            })
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(path: &str, sha: &str) -> Entry {
        Entry::new(Kind::Publish, "publish", "r")
            .field("path", path)
            .field("sha256", sha)
            .field("size", 4)
    }

    fn prune(path: &str) -> Entry {
        Entry::new(Kind::Prune, "publish", "r").field("path", path)
    }

    #[test]
    fn what_the_ledger_says_is_current() {
        let recs = crate::ledger::test_records(vec![
            publish("/ck/a.pt", "aa"),
            publish("/ck/b.pt", "bb"),
            prune("/ck/a.pt"),
            publish("/ck/b.pt", "b2"),
        ]);
        assert!(
            !recorded(&recs, Path::new("/ck/a.pt"), "aa"),
            "pruned since"
        );
        assert!(
            !recorded(&recs, Path::new("/ck/b.pt"), "bb"),
            "republished since"
        );
        assert!(recorded(&recs, Path::new("/ck/b.pt"), "b2"));
        let l = |path: &str, sha: &str| Latest {
            path: path.into(),
            sha256: sha.into(),
            size: 4,
            step: None,
            published_at: String::new(),
        };
        let dest = Path::new("/ck");
        assert!(latest_recorded(&recs, dest, &l("b.pt", "b2")));
        assert!(!latest_recorded(&recs, dest, &l("b.pt", "zz")));
        // A swap twin carries the bytes of a record under the real name.
        assert!(latest_recorded(&recs, dest, &l(".roger-prev-b.pt", "b2")));
        assert!(latest_recorded(&recs, dest, &l(".roger-prev-b.pt", "bb")));
        assert!(!latest_recorded(&recs, dest, &l(".roger-prev-b.pt", "zz")));
    }

    #[test]
    fn pruned_files_still_present_are_found_with_their_published_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let p = |n: &str| d.join(n).display().to_string();
        for n in ["a.pt", "b.pt", "c.pt"] {
            std::fs::write(d.join(n), b"data").unwrap();
        }
        let recs = crate::ledger::test_records(vec![
            publish(&p("a.pt"), "aa"),
            publish(&p("b.pt"), "bb"),
            publish(&p("c.pt"), "cc"),
            publish(&p("gone.pt"), "gg"),
            prune(&p("a.pt")),
            prune(&p("b.pt")),
            publish(&p("b.pt"), "b2"),
            prune(&p("gone.pt")),
        ]);
        let found = pruned_but_present(&recs, d);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, d.join("a.pt"));
        assert_eq!((found[0].1 .0.as_str(), found[0].1 .1), ("aa", 4));
        // Another directory's prunes are not this one's business.
        assert!(pruned_but_present(&recs, Path::new("/elsewhere")).is_empty());
    }
}
