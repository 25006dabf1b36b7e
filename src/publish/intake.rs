//! The request journal of a destination (`DEST/.roger-queue/requests.jsonl`): the one durable
//! act of `publish --detach`'s caller is to append its request there as one line and
//! fdatasync it (one fsync, no new name, nothing removed), under the queue lock. The
//! background publisher takes the lines in (`take_in`): each becomes a queue entry
//! `<id>.json` and its `publish_queued` ledger record, then the journal is emptied. Readers of
//! the queue (`queue::scan`) read the journal before the entries, so a request moving from
//! one to the other is never missed. A torn last line (a caller killed mid-append, which never
//! returned) is skipped by readers and dropped, with a line in the publisher's log, by
//! `take_in`; the next append starts on a fresh line.

use super::queue::{self, Queued};
use crate::ledger::{Kind, Ledger};
use crate::sys::Clock;
use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const JOURNAL: &str = "requests.jsonl";
/// Where lines that cannot be read are set aside (appended), so they stop being read again.
pub const UNREADABLE: &str = "requests.jsonl.unreadable";

/// Lines of the journal that cannot be read: (line number, why).
pub type BadLines = Vec<(usize, String)>;

pub fn path(dest: &Path) -> PathBuf {
    queue::dir(dest).join(JOURNAL)
}

/// The journal's lines: requests, and lines that cannot be read (line number, why). A last
/// line without its newline (torn) is in neither. Pure.
pub fn parse(text: &str) -> (Vec<Queued>, BadLines) {
    let (mut ok, mut bad) = (Vec::new(), Vec::new());
    let whole = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    for (i, line) in whole.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Queued>(line) {
            Ok(q) => ok.push(q),
            Err(e) => bad.push((i + 1, e.to_string())),
        }
    }
    (ok, bad)
}

/// The torn last line of `text`, if any.
fn torn_tail(text: &str) -> Option<&str> {
    let tail = match text.rfind('\n') {
        Some(end) => &text[end + 1..],
        None => text,
    };
    (!tail.is_empty()).then_some(tail)
}

/// The requests in the journal of `dest` (none when there is no journal).
pub fn read(dest: &Path) -> Result<(Vec<Queued>, BadLines)> {
    let p = path(dest);
    match std::fs::read(&p) {
        Ok(b) => Ok(parse(&String::from_utf8_lossy(&b))),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(Default::default())
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// The caller's durable act: append `q` as one line and fdatasync it. Only under the queue
/// lock. The journal's first append in a destination also fsyncs the queue directory (a new
/// name); every later one is the one fsync of the line.
pub fn append(dest: &Path, q: &Queued) -> Result<()> {
    let p = path(dest);
    let (mut f, created) = match OpenOptions::new().read(true).append(true).open(&p) {
        Ok(f) => (f, false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
            OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(&p)
                .with_context(|| format!("creating {}", p.display()))?,
            true,
        ),
        Err(e) => return Err(e).with_context(|| format!("opening {}", p.display())),
    };
    let mut line = serde_json::to_string(q).context("serialising the queue entry")?;
    line.push('\n');
    if !ends_clean(&mut f).with_context(|| format!("reading {}", p.display()))? {
        // A torn tail (a caller killed mid-append): never extend it, start on a fresh line.
        line.insert(0, '\n');
    }
    f.write_all(line.as_bytes())
        .with_context(|| format!("appending to {}", p.display()))?;
    super::failpoint::count(super::failpoint::Op::Fsync);
    f.sync_data()
        .with_context(|| format!("fsync of {}", p.display()))?;
    if created {
        crate::sys::fsx::fsync_dir(&queue::dir(dest))?;
    }
    Ok(())
}

fn ends_clean(f: &mut File) -> std::io::Result<bool> {
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(true);
    }
    f.seek(SeekFrom::Start(len - 1))?;
    let mut last = [0u8; 1];
    f.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// One `take_in` at a time in this process (the publisher's loop and its intake thread).
static TAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn read_text(p: &Path) -> Result<String> {
    match std::fs::read(p) {
        Ok(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// The publisher's side: every request in the journal becomes a `publish_queued` record and
/// a queue entry (the record first, then the entry, each durable), unreadable lines are set
/// aside, then the journal is emptied. The queue lock is held only to read the journal and to
/// empty it (once nothing was appended since the last read), never across an fsync, so a
/// caller queueing meanwhile does not wait on the disk. A request whose entry exists, or
/// whose record says it ended, is not taken in again; one already recorded is not recorded
/// twice (a crash anywhere in here repeats only what is missing). Returns what to say in the
/// publisher's log.
pub fn take_in(dest: &Path, clock: &dyn Clock) -> Result<Vec<String>> {
    let _one = TAKING.lock().unwrap_or_else(|e| e.into_inner());
    let p = path(dest);
    let mut records: std::collections::HashMap<PathBuf, Vec<crate::ledger::Record>> =
        Default::default();
    let mut taken = 0;
    let mut lost = Vec::new();
    let text = loop {
        let text = {
            let _q = queue::lock_queue(dest)?;
            let text = read_text(&p)?;
            if text.len() == taken {
                if taken > 0 {
                    OpenOptions::new()
                        .write(true)
                        .open(&p)
                        .and_then(|f| f.set_len(0))
                        .with_context(|| format!("emptying {}", p.display()))?;
                }
                break text;
            }
            text
        };
        for q in parse(&text).0 {
            if queue::entry_exists(dest, &q.id) {
                continue;
            }
            let ledger = Ledger::new(&q.request.ledger);
            let recs = match records.entry(q.request.ledger.clone()) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => v.insert(ledger.records()?),
            };
            if super::publisher::ended(recs, &q.id).is_some() {
                continue;
            }
            // The caller left its reflink snapshot unsynced (its one fsync is the journal line).
            // One lost to a crash is said here and fails the publish's stamp check, recorded.
            if let Some(snap) = &q.snapshot {
                if let Err(e) = super::reflink::make_durable(snap) {
                    lost.push(format!(
                        "queued publish {}: its reflink snapshot could not be made durable: {e:#}",
                        q.id
                    ));
                }
            }
            let recorded = recs.iter().any(|r| {
                r.kind == Kind::PublishQueued && r.str_field("queue_id") == Some(q.id.as_str())
            });
            if !recorded {
                let rec = ledger
                    .append(
                        queue::queued_entry(&q).field("queued_at", &q.queued_at),
                        clock.now(),
                    )
                    .with_context(|| format!("recording queued publish {}", q.id))?;
                recs.push(rec);
            }
            queue::write_entry(dest, &q)?;
        }
        taken = text.len();
    };
    let mut said = lost;
    if taken == 0 {
        return Ok(said);
    }
    if let Ok(f) = File::open(&p) {
        // Emptied under the lock; made durable outside it (a crash before this brings back
        // lines that are then found taken in or ended).
        let _ = f.sync_all();
    }
    let bad = parse(&text).1;
    if !bad.is_empty() {
        let aside = queue::dir(dest).join(UNREADABLE);
        let mut out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&aside)
            .with_context(|| format!("opening {}", aside.display()))?;
        let lines: Vec<&str> = text.lines().collect();
        for (n, why) in &bad {
            writeln!(out, "{}", lines.get(n - 1).copied().unwrap_or_default())
                .with_context(|| format!("writing {}", aside.display()))?;
            said.push(format!(
                "line {n} of {} cannot be read ({why}): set aside in {}; it is not published",
                p.display(),
                aside.display()
            ));
        }
        out.sync_data()
            .with_context(|| format!("fsync of {}", aside.display()))?;
    }
    if let Some(tail) = torn_tail(&text) {
        said.push(format!(
            "dropped a torn last line of {} ({} bytes): left by a caller killed while queueing (it was never queued)",
            p.display(),
            tail.len()
        ));
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::queue::tests::q;

    fn line(q: &Queued) -> String {
        serde_json::to_string(q).unwrap() + "\n"
    }

    #[test]
    fn parse_keeps_whole_lines_reports_bad_ones_and_skips_a_torn_tail() {
        let text = format!(
            "{}{{broken\n\n{}{{\"id\":\"torn",
            line(&q("1", 5, false)),
            line(&q("2", 7, false))
        );
        let (ok, bad) = parse(&text);
        let ids: Vec<&str> = ok.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["1", "2"]);
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].0, 2);
        assert_eq!(torn_tail(&text), Some("{\"id\":\"torn"));
        assert_eq!(torn_tail(&line(&q("1", 1, false))), None);
        assert!(parse("{\"id\":").0.is_empty() && parse("{\"id\":").1.is_empty());
    }

    #[test]
    fn append_after_a_torn_tail_starts_a_fresh_line_and_take_in_empties_the_journal() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path();
        std::fs::create_dir(queue::dir(dest)).unwrap();
        let mut a = q("00000000000000000001", 3, false);
        a.request.ledger = dest.join("l.jsonl");
        append(dest, &a).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(path(dest))
            .unwrap()
            .write_all(b"{\"id\":\"tor")
            .unwrap();
        let mut b = a.clone();
        b.id = "00000000000000000002".into();
        append(dest, &b).unwrap();
        let (ok, bad) = read(dest).unwrap();
        assert_eq!(ok.len(), 2, "both whole lines read");
        assert_eq!(bad.len(), 1, "the torn line, now ended, is unreadable");
        let clock = crate::sys::FakeClock::new(chrono::Utc::now());
        let said = take_in(dest, &clock).unwrap();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(read(dest).unwrap().0.is_empty(), "journal emptied");
        let ids: Vec<String> = queue::scan(dest)
            .unwrap()
            .0
            .into_iter()
            .map(|q| q.id)
            .collect();
        assert_eq!(ids, [a.id.clone(), b.id.clone()]);
        let recs = Ledger::new(dest.join("l.jsonl")).records().unwrap();
        assert_eq!(recs.len(), 2);
        assert!(recs.iter().all(|r| r.kind == Kind::PublishQueued));
        // Taken in again after a crash before the journal was emptied: nothing twice.
        append(dest, &a).unwrap();
        take_in(dest, &clock).unwrap();
        assert_eq!(
            Ledger::new(dest.join("l.jsonl")).records().unwrap().len(),
            2
        );
        assert_eq!(queue::scan(dest).unwrap().0.len(), 2);
    }
}
