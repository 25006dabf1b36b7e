//! A fresh machine (new VM, new pod, another node): rebuild the ledger from the bucket, then
//! choose the checkpoint to resume from by the same rule as always
//! (`checkpoints::last_good`: verified, not quarantined, not at or after a standing fail's
//! onset) — where "verified" means: its copy in the bucket was verified when uploaded, and
//! the bytes downloaded now hash to its record. A missing or corrupt object passes over to the
//! previous good one, with a record. The downloaded copy gets a `publish` record (source
//! `fetch`) under its path on this machine, so everything after treats it as local.

use super::records;
use super::store::Store;
use super::upload;
use super::Remote;
use crate::checkpoints::{self, Checkpoint, Skipped};
use crate::ledger::{Entry, Kind, Ledger};
use anyhow::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize)]
pub struct Fetched {
    /// The file (or directory) on this machine, verified.
    pub path: PathBuf,
    pub step: Option<u64>,
    pub sha256: String,
    pub size: u64,
    pub url: String,
    pub skipped: Vec<Skipped>,
}

/// Which checkpoints `fetch` may consider: strictly before a step (a rollback) or exactly one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Want {
    pub before_step: Option<u64>,
    pub exactly: Option<u64>,
}

/// Download the last good checkpoint of `run` that has a verified copy in the bucket into
/// `dest` (the checkpoint directory on this machine). Ok(None): nothing in the bucket
/// qualifies (the `skipped` list of the error says why for each candidate). `gate`: what a
/// candidate must pass before it is downloaded (`[cluster] parts`: its step complete on every
/// node), Err saying why not.
#[allow(clippy::too_many_arguments)]
pub fn restore(
    store: &dyn Store,
    remote: &Remote,
    ledger: &Ledger,
    run: &str,
    dest: &Path,
    want: Want,
    source: &str,
    gate: &mut dyn FnMut(&Checkpoint) -> std::result::Result<(), String>,
) -> Result<std::result::Result<Fetched, Vec<Skipped>>> {
    let recs = ledger.records()?;
    let copies = records::verified(&recs, run);
    let before = match (want.exactly, want.before_step) {
        (Some(s), _) => Some(s + 1),
        (None, b) => b,
    };
    let mut got: Option<(PathBuf, records::Copy, u64, String)> = None;
    let mut notes: Vec<Entry> = Vec::new();
    let mut verifies = |c: &Checkpoint| -> std::result::Result<(), String> {
        if let Some(s) = want.exactly {
            if c.step != Some(s) {
                return Err(format!("not step {s}"));
            }
        }
        gate(c)?;
        let Some(copy) = records::copy_of(&copies, c) else {
            return Err("no verified copy in the bucket".into());
        };
        let key = copy
            .url
            .strip_prefix(&format!("s3://{}/", remote.target.bucket))
            .unwrap_or(&copy.url)
            .to_string();
        let local = dest.join(&copy.name);
        match upload::download(store, &key, copy.dir, &local, &remote.cfg) {
            Ok((sha, size)) if sha == c.sha256 && size == c.size => {
                got = Some((local, copy.clone(), size, sha));
                Ok(())
            }
            Ok((sha, size)) => {
                let why = format!(
                    "the bucket's {} holds {size} bytes hashing to {sha}, not the {} bytes hashing to {} recorded",
                    copy.url, c.size, c.sha256
                );
                // Never resume from it: the bad download goes away, the record stays.
                let _ = std::fs::remove_dir_all(&local);
                let _ = std::fs::remove_file(&local);
                notes.push(
                    Entry::new(Kind::Remote, source, run)
                        .step(c.step)
                        .field("event", "fetch_mismatch")
                        .field("url", &copy.url)
                        .field("expected", &c.sha256)
                        .field("got", &sha)
                        .field("reason", &why),
                );
                Err(why)
            }
            Err(e) => {
                let why = format!("downloading {} failed: {e:#}", copy.url);
                notes.push(
                    Entry::new(Kind::Remote, source, run)
                        .step(c.step)
                        .field("event", "fetch_failed")
                        .field("url", &copy.url)
                        .field("error", format!("{e:#}")),
                );
                Err(why)
            }
        }
    };
    let choice = checkpoints::last_good(&recs, run, before, &mut verifies);
    for n in notes {
        ledger.append(n, chrono::Utc::now())?;
    }
    let (Some(c), Some((path, copy, size, sha))) = (choice.chosen, got) else {
        return Ok(Err(choice.skipped));
    };
    let url = copy.url.clone();
    ledger.append(
        Entry::new(Kind::Remote, source, run)
            .step(c.step)
            .field("event", "fetched")
            .field("url", &url)
            .field("to", path.display().to_string())
            .field("sha256", &sha)
            .field("size", size)
            .field("passed_over", choice.skipped.len()),
        chrono::Utc::now(),
    )?;
    // The copy is now a checkpoint of this machine: the same record a publish writes.
    ledger.append(
        Entry::new(Kind::Publish, source, run)
            .step(c.step)
            .field("path", path.display().to_string())
            .field("sha256", &sha)
            .field("size", size)
            .field("fetched_from", &url),
        chrono::Utc::now(),
    )?;
    // Its bucket copy is the one just downloaded and hashed: the same object, now known
    // under this machine's path (so retention here knows it is safe in the bucket).
    ledger.append(
        Entry::new(Kind::Remote, source, run)
            .step(c.step)
            .field("event", "verified")
            .field("how", "fetched")
            .field("path", path.display().to_string())
            .field("url", &url)
            .field("name", &copy.name)
            .field("dir", copy.dir)
            .field("sha256", &sha)
            .field("size", size),
        chrono::Utc::now(),
    )?;
    Ok(Ok(Fetched {
        path,
        step: c.step,
        sha256: sha,
        size,
        url,
        skipped: choice.skipped,
    }))
}

/// Rebuild the ledger from the bucket when this machine has none, with a record saying so.
/// Returns how many records came back.
pub fn rebuild_ledger(
    store: &dyn Store,
    remote: &Remote,
    ledger: &Ledger,
    run: &str,
    source: &str,
) -> Result<Option<usize>> {
    let Some(n) = super::mirror::rebuild(store, &remote.target, ledger.path())? else {
        return Ok(None);
    };
    let recs = ledger.records()?;
    let relaunches = recs
        .iter()
        .filter(|r| r.kind == Kind::Relaunch && r.run == run)
        .count();
    ledger.append(
        Entry::new(Kind::Remote, source, run)
            .field("event", "ledger_rebuilt")
            .field("url", remote.target.object_url(&remote.target.ledger_key()))
            .field("records", n)
            .field("relaunches_before", relaunches),
        chrono::Utc::now(),
    )?;
    Ok(Some(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::store::Memory;
    use crate::remote::{RemoteConfig, Target};

    fn remote() -> Remote {
        Remote {
            target: Target::parse("s3://bkt/run").unwrap(),
            cfg: RemoteConfig::default(),
        }
    }

    fn publish(
        l: &Ledger,
        m: &Memory,
        r: &Remote,
        dir: &Path,
        name: &str,
        step: u64,
        bytes: &[u8],
    ) {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let sha = crate::digest::hash_file(&path).unwrap().0;
        l.append(
            Entry::new(Kind::Publish, "publish", "r")
                .step(Some(step))
                .field("path", path.display().to_string())
                .field("sha256", &sha)
                .field("size", bytes.len()),
            chrono::Utc::now(),
        )
        .unwrap();
        let key = r.target.checkpoint_key(name);
        upload::send(m, &path, &key, &sha, &r.cfg, &mut |_, _| Ok(()))
            .unwrap()
            .unwrap();
        l.append(
            Entry::new(Kind::Remote, super::super::records::SOURCE, "r")
                .step(Some(step))
                .field("event", "verified")
                .field("path", path.display().to_string())
                .field("url", r.target.object_url(&key))
                .field("name", name)
                .field("sha256", &sha)
                .field("size", bytes.len()),
            chrono::Utc::now(),
        )
        .unwrap();
    }

    #[test]
    fn a_fresh_machine_resumes_from_the_newest_good_copy_and_passes_over_a_corrupt_one() {
        let old = tempfile::tempdir().unwrap();
        let new = tempfile::tempdir().unwrap();
        let m = Memory::default();
        let r = remote();
        let l = Ledger::new(old.path().join("roger-ledger.jsonl"));
        publish(&l, &m, &r, old.path(), "ckpt-10.pt", 10, b"ten");
        publish(&l, &m, &r, old.path(), "ckpt-20.pt", 20, b"twenty");
        // The newest object rots in the bucket.
        m.objects
            .lock()
            .unwrap()
            .get_mut("run/checkpoints/ckpt-20.pt")
            .unwrap()
            .0[0] ^= 1;
        super::super::mirror::push(&m, &r.target, l.path()).unwrap();
        // Machine lost: a new one with an empty directory.
        let nl = Ledger::new(new.path().join("roger-ledger.jsonl"));
        assert_eq!(rebuild_ledger(&m, &r, &nl, "r", "watch").unwrap(), Some(4));
        let ck = new.path().join("ckpt");
        // [cluster] parts: a step not complete on every node is never fetched.
        let gated = restore(
            &m,
            &r,
            &nl,
            "r",
            &ck,
            Want::default(),
            "watch",
            &mut |c| match c.step {
                Some(10) => Err("step 10 is not complete: node 1's part is not verified".into()),
                _ => Ok(()),
            },
        )
        .unwrap()
        .unwrap_err();
        assert!(
            gated
                .iter()
                .any(|s| s.why == "step 10 is not complete: node 1's part is not verified"),
            "{gated:?}"
        );
        assert!(!ck.join("ckpt-10.pt").exists(), "not downloaded");
        let f = restore(&m, &r, &nl, "r", &ck, Want::default(), "watch", &mut |_| {
            Ok(())
        })
        .unwrap()
        .unwrap();
        assert_eq!(f.step, Some(10));
        assert_eq!(f.path, ck.join("ckpt-10.pt"));
        assert_eq!(std::fs::read(&f.path).unwrap(), b"ten");
        assert!(f.skipped[0].why.contains("hashing to"), "{:?}", f.skipped);
        assert!(
            !ck.join("ckpt-20.pt").exists(),
            "the corrupt download is not left"
        );
        let recs = nl.records().unwrap();
        let events: Vec<&str> = recs.iter().filter_map(|r| r.str_field("event")).collect();
        assert!(
            events.contains(&"fetch_mismatch") && events.contains(&"fetched"),
            "{events:?}"
        );
        // Now local: the ordinary rule finds it on disk.
        let c = checkpoints::last_good(&recs, "r", None, &mut checkpoints::verify_on_disk);
        assert_eq!(c.chosen.unwrap().path, ck.join("ckpt-10.pt"));
        assert!(nl.scan().unwrap().first_break().is_none());
        // Asking for a step the bucket has no good copy of.
        let none = restore(
            &m,
            &r,
            &nl,
            "r",
            &ck,
            Want {
                exactly: Some(20),
                before_step: None,
            },
            "fetch",
            &mut |_| Ok(()),
        )
        .unwrap();
        assert!(none.is_err());
    }
}
