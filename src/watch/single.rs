//! One run, one watch, one trainer. A lock per run — flock on `roger-watch.<run>.lock` beside
//! the ledger, held for the watch's life — refuses a second watch; and the ledger's last launch
//! of the run (pid, checked by start time and boot id), when still alive, is attached to instead
//! of starting a second trainer beside it (a watch killed with `kill -9` leaves its trainer
//! running). [`last_launch`] is pure; the lock and the /proc look are the edge.

use super::{Event, Watcher};
use crate::ledger::{Kind, Record};
use crate::sys::proc::ProcSource;
use anyhow::{anyhow, bail, Context, Result};
use nix::fcntl::{Flock, FlockArg};
use serde_json::Value;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Held for the watch's life; released by the kernel however roger ends (even `kill -9`).
pub struct RunLock {
    _lock: Flock<File>,
}

/// `roger-watch.<run>.lock` in the ledger's directory (odd characters in the run's name are
/// replaced, and then a hash of the name keeps two runs apart).
pub fn lock_path(ledger: &Path, run: &str) -> PathBuf {
    let safe: String = run
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let name = if safe == run {
        safe
    } else {
        use sha2::Digest;
        let h = crate::digest::hex(&sha2::Sha256::digest(run.as_bytes()));
        format!("{safe}-{}", &h[..12])
    };
    let dir = ledger
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    dir.join(format!("roger-watch.{name}.lock"))
}

/// Take the run's lock, or say who holds it.
pub fn lock(ledger: &Path, run: &str) -> Result<RunLock> {
    let path = lock_path(ledger, run);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let mut lock = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((mut f, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut holder = String::new();
            let _ = f.read_to_string(&mut holder);
            let holder = holder.trim();
            bail!(
                "another roger watch{} is already watching run '{run}' (it holds {}): one run has at most one watch. Stop that watch first, or give this run another [run] name",
                if holder.is_empty() {
                    String::new()
                } else {
                    format!(" (pid {holder})")
                },
                path.display()
            );
        }
        Err((_, e)) => return Err(anyhow!("locking {}: {e}", path.display())),
    };
    // Who holds it, for the message above; the lock itself is the flock, not this text.
    let _ = lock.set_len(0);
    let _ = writeln!(&mut *lock, "{}", std::process::id());
    Ok(RunLock { _lock: lock })
}

/// A launch of the run, as the ledger recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The record's seq.
    pub seq: u64,
    pub pid: u32,
    /// Start time in clock ticks since boot; absent in records of older rogers.
    pub start: Option<u64>,
    pub boot_id: Option<String>,
    /// The watch that launched (or attached to) it ended with a `done` record.
    pub watch_done: bool,
}

/// The run's newest launch: its newest `start`, `launched` or `adopted` watch record, and
/// whether a `done` record followed it.
pub fn last_launch(records: &[Record], run: &str) -> Option<Launch> {
    let mut last: Option<Launch> = None;
    for r in records
        .iter()
        .filter(|r| r.kind == Kind::Watch && r.run == run)
    {
        match r.str_field("event") {
            Some("start" | "launched" | "adopted") => {
                if let Some(pid) = r.u64_field("pid").and_then(|p| u32::try_from(p).ok()) {
                    last = Some(Launch {
                        seq: r.seq,
                        pid,
                        start: r.u64_field("start_ticks"),
                        boot_id: r.str_field("boot_id").map(str::to_string),
                        watch_done: false,
                    });
                }
            }
            Some("done") => {
                if let Some(l) = last.as_mut() {
                    l.watch_done = true;
                }
            }
            _ => {}
        }
    }
    last
}

/// Is that launch's process still running? Only when its start time (and boot, when
/// recorded) match: a recycled pid is someone else.
pub fn alive(fs: &dyn ProcSource, l: &Launch, boot_id: Option<&str>) -> bool {
    let Some(start) = l.start else {
        return false;
    };
    if let (Some(was), Some(now)) = (l.boot_id.as_deref(), boot_id) {
        if was != now {
            return false;
        }
    }
    matches!(fs.stat(l.pid), Ok(Some(st)) if st.id.start == start && st.state != 'Z' && st.state != 'X')
}

/// Is `pid` that launch's process or one of its descendants?
pub fn in_launch(fs: &dyn ProcSource, l: &Launch, pid: u32) -> bool {
    pid == l.pid
        || crate::sys::proc::tree(fs, &[l.pid])
            .map(|t| t.iter().any(|s| s.id.pid == pid))
            .unwrap_or(false)
}

impl Watcher<'_> {
    /// Who the current launch is, for a later watch to find it: pid, start time, boot.
    pub(crate) fn launch_fields(&self) -> Vec<(&'static str, Value)> {
        vec![
            ("pid", self.run.main.pid.into()),
            ("start_ticks", self.run.main.start.into()),
            ("boot_id", self.boot_id.clone().into()),
        ]
    }

    /// Say what this watch found of the run's last launch: adopted its live trainer, or its
    /// watch died (no `done` record) and the trainer is gone.
    pub(super) fn note_prior(&mut self) -> Result<()> {
        let Some(p) = self.prior.clone() else {
            return Ok(());
        };
        if self.adopted {
            let rec = self.record(
                Kind::Watch,
                None,
                vec![
                    ("event", "adopted".into()),
                    ("pid", p.pid.into()),
                    ("start_ticks", p.start.into()),
                    ("boot_id", self.boot_id.clone().into()),
                    ("launched_seq", p.seq.into()),
                    ("earlier_watch_done", p.watch_done.into()),
                ],
            )?;
            self.report.event(&Event::Adopted {
                seq: rec.seq,
                pid: p.pid,
                launched_seq: p.seq,
                earlier_watch_done: p.watch_done,
            });
        } else if !p.watch_done && p.pid != self.run.main.pid {
            let rec = self.record(
                Kind::Watch,
                None,
                vec![
                    ("event", "previous_watch_died".into()),
                    ("pid", p.pid.into()),
                    ("launched_seq", p.seq.into()),
                    ("trainer", "gone".into()),
                ],
            )?;
            self.report.event(&Event::PreviousWatchDied {
                seq: rec.seq,
                pid: p.pid,
                launched_seq: p.seq,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Entry;
    use crate::sys::proc::FakeProc;

    fn watch(event: &str, pid: Option<u64>, start: Option<u64>) -> Entry {
        let mut e = Entry::new(Kind::Watch, "watch", "r").field("event", event);
        if let Some(p) = pid {
            e = e.field("pid", p);
        }
        if let Some(s) = start {
            e = e.field("start_ticks", s).field("boot_id", "b1");
        }
        e
    }

    #[test]
    fn the_last_launch_and_whether_its_watch_ended() {
        let recs = crate::ledger::test_records(vec![
            watch("start", Some(10), Some(100)),
            watch("exited", Some(10), None),
            watch("launched", Some(20), Some(200)),
            watch("done", None, None),
            Entry::new(Kind::Watch, "watch", "other")
                .field("event", "launched")
                .field("pid", 99),
        ]);
        let l = last_launch(&recs, "r").unwrap();
        assert_eq!(
            (l.seq, l.pid, l.start, l.watch_done),
            (3, 20, Some(200), true)
        );
        let recs = crate::ledger::test_records(vec![
            watch("start", Some(10), Some(100)),
            watch("launched", Some(20), Some(200)),
        ]);
        assert!(!last_launch(&recs, "r").unwrap().watch_done, "killed -9");
        assert_eq!(last_launch(&recs, "nobody"), None);
    }

    #[test]
    fn alive_only_as_the_same_process_on_the_same_boot() {
        let mut f = FakeProc::default();
        f.add(20, 1, 'S', 1.0, 0);
        let start = f.procs[&20].0.id.start;
        let l = Launch {
            seq: 3,
            pid: 20,
            start: Some(start),
            boot_id: Some("b1".into()),
            watch_done: false,
        };
        assert!(alive(&f, &l, Some("b1")));
        assert!(!alive(&f, &l, Some("b2")), "another boot");
        let recycled = Launch {
            start: Some(start + 1),
            ..l.clone()
        };
        assert!(!alive(&f, &recycled, Some("b1")));
        let unrecorded = Launch {
            start: None,
            ..l.clone()
        };
        assert!(!alive(&f, &unrecorded, Some("b1")), "cannot be checked");
        f.procs.get_mut(&20).unwrap().0.state = 'Z';
        assert!(!alive(&f, &l, Some("b1")));
    }

    #[test]
    fn the_lock_refuses_a_second_holder_until_the_first_is_gone() {
        let d = tempfile::tempdir().unwrap();
        let ledger = d.path().join("roger-ledger.jsonl");
        let first = lock(&ledger, "my run/1").unwrap();
        let name = lock_path(&ledger, "my run/1");
        assert!(name.exists());
        let name = name.file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with("roger-watch.my_run_1-"), "{name}");
        let e = lock(&ledger, "my run/1").err().unwrap().to_string();
        assert!(e.contains("another roger watch"), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert!(
            lock(&ledger, "my run_1").is_ok(),
            "another run, another lock"
        );
        drop(first);
        assert!(lock(&ledger, "my run/1").is_ok());
    }
}
