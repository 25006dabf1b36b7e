//! The watch's side of the bucket (`[publish] remote`): on a machine with no ledger, rebuild
//! it from the bucket before anything is chosen; when no checkpoint on this disk is good,
//! fetch the last good one that is verified in the bucket (the same rule, `remote::fetch`);
//! restart the uploader for checkpoints still queued; mirror the ledger after a relaunch and
//! at the end, bounded in time so a dead network never holds up the run.

use crate::checkpoints::{Checkpoint, Choice, Skipped};
use crate::config::Config;
use crate::ledger::Ledger;
use crate::remote::{fetch, store, Remote};
use std::time::Duration;

pub struct Bucket {
    pub remote: Remote,
    store: Box<dyn store::Store>,
}

impl Bucket {
    /// The run's bucket, if it has one; an unreachable one is a warning (the run goes on
    /// with what is on this disk).
    pub fn open(cfg: &Config) -> Option<Bucket> {
        let remote = Remote::of_config(cfg)?;
        match store::open(&remote) {
            Ok(store) => Some(Bucket { remote, store }),
            Err(e) => {
                eprintln!("roger: warning: bucket {}: {e:#}", remote.target.url());
                None
            }
        }
    }

    /// Rebuild the ledger from the bucket when this machine has none. Returns how many
    /// relaunches the rebuilt ledger holds (they count against the budget here too).
    pub fn rebuild(&self, ledger: &Ledger, run: &str) -> Option<usize> {
        match fetch::rebuild_ledger(self.store.as_ref(), &self.remote, ledger, run, "watch") {
            Ok(Some(n)) => {
                let relaunches = ledger
                    .records()
                    .ok()?
                    .iter()
                    .filter(|r| r.kind == crate::ledger::Kind::Relaunch && r.run == run)
                    .count();
                eprintln!(
                    "roger: no ledger on this machine: rebuilt {} from {} ({n} records, {relaunches} relaunch(es) before)",
                    ledger.path().display(),
                    self.remote.target.url()
                );
                Some(relaunches)
            }
            Ok(None) => None,
            Err(e) => {
                eprintln!(
                    "roger: warning: could not rebuild the ledger from {}: {e:#}",
                    self.remote.target.url()
                );
                None
            }
        }
    }

    /// When nothing on this disk is good: the last good checkpoint verified in the bucket
    /// that passes `gate` (`[cluster] parts`: its step complete on every node), downloaded
    /// into `dest` and verified. The passed-over reasons join the choice's.
    pub fn fill(
        &self,
        choice: &mut Choice,
        ledger: &Ledger,
        run: &str,
        dest: &std::path::Path,
        before_step: Option<u64>,
        gate: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
    ) {
        if choice.chosen.is_some() {
            return;
        }
        let want = fetch::Want {
            before_step,
            exactly: None,
        };
        match fetch::restore(
            self.store.as_ref(),
            &self.remote,
            ledger,
            run,
            dest,
            want,
            "watch",
            gate,
        ) {
            Ok(Ok(f)) => {
                eprintln!(
                    "roger: nothing good on this disk: fetched step {} from {} to {} (verified)",
                    f.step.map_or("?".into(), |s| s.to_string()),
                    f.url,
                    f.path.display()
                );
                let seq = ledger
                    .records()
                    .ok()
                    .and_then(|r| r.last().map(|r| r.seq))
                    .unwrap_or(0);
                choice.chosen = Some(Checkpoint {
                    path: f.path,
                    sha256: f.sha256,
                    size: f.size,
                    step: f.step,
                    seq,
                });
                choice.skipped.extend(f.skipped);
            }
            Ok(Err(skipped)) => choice.skipped.extend(skipped.into_iter().map(|s| Skipped {
                why: format!("bucket: {}", s.why),
                ..s
            })),
            Err(e) => {
                eprintln!(
                    "roger: warning: fetching from {} failed: {e:#}",
                    self.remote.target.url()
                );
                choice.skipped.push(Skipped {
                    path: dest.to_path_buf(),
                    why: format!("the bucket could not be read: {e:#}"),
                });
            }
        }
    }
}

/// Mirror the ledger to the bucket, waiting at most `limit` (a dead network must not hold
/// up a relaunch; the push goes on in the background and the next one catches up).
pub fn mirror(cfg: &Config, ledger: &Ledger, limit: Duration) {
    let Some(remote) = Remote::of_config(cfg) else {
        return;
    };
    let path = ledger.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = store::open(&remote)
            .and_then(|s| crate::remote::mirror::push(s.as_ref(), &remote.target, &path));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(crate::remote::mirror::Mirrored::Diverged { .. })) => eprintln!(
            "roger: warning: the bucket's ledger holds records this one does not (another machine wrote there): not mirrored"
        ),
        Ok(Ok(_)) => {}
        Ok(Err(e)) => eprintln!("roger: warning: ledger mirror: {e:#}"),
        Err(_) => eprintln!(
            "roger: warning: ledger mirror still running after {}s; going on",
            limit.as_secs()
        ),
    }
}
