//! The preemption hand-off inside the watch (`[preempt]`, decisions in `crate::preempt`):
//! notice → ask the run to save now → wait for a verified publish newer than the notice,
//! bounded by the deadline minus the margin → stop the whole run tree → requeue (scontrol or
//! the exit code). Each step a ledger record first, and the same words on stderr. Also the
//! "does a save fit the window" check at launch and whenever a publish record lands.

use super::actions::Evidence;
use super::{ms, Flow, Options, Watcher};
use crate::config::preempt::{signal_number, PreemptConfig, SaveNow};
use crate::config::Config;
use crate::ledger::Kind;
use crate::preempt::{feed::Feed, fit, handoff, rfc3339, slurm, unix_now, Notice, Source};
use anyhow::{bail, Result};
use nix::sys::signal::Signal;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The hand-off, armed: only when `[preempt]` is written, the watch starts the run itself,
/// and it may signal (not a dry run, not attached).
pub(crate) struct Armed {
    cfg: PreemptConfig,
    feed: Option<Feed>,
    /// The file named in ROGER_SAVE_NOW.
    pub save_now: PathBuf,
    /// `--node-local`: this node's SLURM_NODEID.
    node: Option<u32>,
    job: Option<String>,
    /// Follows the ledger for new publish records (the fit check).
    fit_feed: crate::ledger::follow::Follower,
    last_fit: Option<bool>,
}

/// `--node-local`: SLURM_NODEID, required.
pub fn node_id(node_local: bool) -> Result<Option<u32>> {
    if !node_local {
        return Ok(None);
    }
    match std::env::var("SLURM_NODEID").ok().map(|v| v.trim().parse::<u32>()) {
        Some(Ok(n)) => Ok(Some(n)),
        Some(Err(_)) => bail!("--node-local: SLURM_NODEID is not a number"),
        None => bail!(
            "--node-local needs SLURM_NODEID (start one `roger watch --node-local` per node with `srun --ntasks-per-node=1`)"
        ),
    }
}

/// Where the save-now file is: beside the ledger, one per node with `--node-local`.
pub fn save_now_path(cfg: &Config, node: Option<u32>) -> PathBuf {
    let dir = cfg
        .ledger_path()
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    // Absolute: the training may change directory before it looks.
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let name = super::single::lock_path(Path::new("x"), &cfg.run.name)
        .file_name()
        .map(|f| {
            f.to_string_lossy()
                .replace("roger-watch.", "")
                .replace(".lock", "")
        })
        .unwrap_or_default();
    dir.join(match node {
        Some(n) => format!("roger-save-now.{name}.node{n}"),
        None => format!("roger-save-now.{name}"),
    })
}

impl Armed {
    pub fn new(cfg: &Config, opts: &Options) -> Result<Option<Armed>> {
        let Some(p) = &cfg.preempt else {
            return Ok(None);
        };
        let why_not = match (&opts.mode, opts.dry_run) {
            (_, true) => Some("a dry run never signals"),
            (super::Mode::Attach(_), _) => Some("an attached run is not roger's to stop"),
            _ => None,
        };
        if let Some(why) = why_not {
            eprintln!("roger: preempt: [preempt] is not armed: {why}");
            return Ok(None);
        }
        let node = node_id(opts.node_local)?;
        let save_now = save_now_path(cfg, node);
        // A request left by the previous launch (the one that was preempted) is answered.
        let _ = std::fs::remove_file(&save_now);
        let job = std::env::var("SLURM_JOB_ID")
            .ok()
            .filter(|j| !j.trim().is_empty());
        Ok(Some(Armed {
            cfg: p.clone(),
            feed: Feed::start(p, job.clone()),
            save_now,
            node,
            job,
            fit_feed: crate::ledger::follow::Follower::new(cfg.ledger_path(), 0),
            last_fit: None,
        }))
    }

    /// The SLURM signal to listen for, if any.
    pub fn slurm_signal(&self) -> Option<Signal> {
        signal_number(&self.cfg.slurm_signal).and_then(|n| Signal::try_from(n).ok())
    }
}

impl Watcher<'_> {
    /// Is this signal a notice? SIGINT never is (a person at the terminal).
    pub(super) fn notice_from(&self, s: Signal) -> Option<Notice> {
        let a = self.preempt.as_ref()?;
        let now = unix_now();
        let (source, window) = if Some(s) == a.slurm_signal() {
            (Source::SlurmSignal, a.cfg.slurm_window)
        } else if s == Signal::SIGTERM && a.cfg.sigterm_is_notice(a.job.is_some()) {
            (Source::Sigterm, a.cfg.sigterm_window)
        } else {
            return None;
        };
        Some(Notice {
            source,
            detail: format!("{} received", s.as_str()),
            received_at: now,
            deadline: now + window.as_secs_f64(),
        })
    }

    /// A notice from a polled source (cloud metadata, the job's end time), if one came.
    pub(super) fn polled_notice(&self) -> Option<Notice> {
        self.preempt.as_ref()?.feed.as_ref()?.try_recv()
    }

    /// At launch and whenever a publish record of this run lands: does a save plus its publish
    /// fit the notice window? Recorded at launch, and after a publish when it does not fit
    /// (or fits again); a misfit is also a warning on stderr.
    pub(super) fn preempt_fit(&mut self, at_launch: bool) -> Result<()> {
        let Some(a) = self.preempt.as_mut() else {
            return Ok(());
        };
        if !at_launch {
            let new = a.fit_feed.new_records()?;
            if !new
                .iter()
                .any(|r| matches!(r.kind, Kind::Publish | Kind::Remote) && r.run == self.run_name)
            {
                return Ok(());
            }
        } else {
            let len = std::fs::metadata(self.ledger.path()).map_or(0, |m| m.len());
            a.fit_feed =
                crate::ledger::follow::Follower::new(self.ledger.path().to_path_buf(), len);
        }
        let Some(window) = handoff::expected_window(&a.cfg, a.job.is_some()) else {
            return Ok(());
        };
        let margin = a.cfg.margin.as_secs_f64();
        let records = self.ledger.records()?;
        let remote = self.bucket.is_some();
        let Some(f) = fit::check(&records, &self.run_name, window, margin, remote) else {
            return Ok(());
        };
        let changed = a.last_fit != Some(f.fits);
        a.last_fit = Some(f.fits);
        if at_launch || !f.fits || changed {
            if !f.fits {
                eprintln!("roger: warning: preempt: {}", f.text);
            }
            let mut fields = vec![
                ("event", "preempt_fit".into()),
                ("at", if at_launch { "launch" } else { "publish" }.into()),
            ];
            let m = match serde_json::to_value(&f)? {
                serde_json::Value::Object(m) => m,
                _ => Default::default(),
            };
            fields.extend(m.iter().map(|(k, v)| (k.as_str(), v.clone())));
            self.record(Kind::Watch, None, fields)?;
        }
        Ok(())
    }

    /// The hand-off; ends the watch with `requeue_exit_code`.
    pub(super) fn hand_off(&mut self, n: Notice) -> Result<u8> {
        let Some(a) = self.preempt.take() else {
            bail!("no [preempt] hand-off armed");
        };
        let margin = a.cfg.margin.as_secs_f64();
        let step = self.sentinel.last_step();
        let notice = self.record(
            Kind::Watch,
            step,
            vec![
                ("event", "preempt_notice".into()),
                ("notice_source", n.source.as_str().into()),
                ("detail", n.detail.clone().into()),
                ("received_at", rfc3339(n.received_at).into()),
                ("deadline", rfc3339(n.deadline).into()),
                ("window_s", ms(n.window_s()).into()),
                ("margin_s", ms(margin).into()),
                ("node", json!(a.node)),
            ],
        )?;
        eprintln!(
            "roger: preempt: notice from {} ({}): {:.0} s to the deadline; asking the run to save now (ledger #{})",
            n.source.as_str(),
            n.detail,
            n.window_s(),
            notice.seq
        );
        self.ask_save(&a, &n, notice.seq)?;
        let need_remote = self.bucket.is_some() && a.cfg.require_remote;
        let saved = match self.await_save(&n, notice.seq, margin, need_remote)? {
            Ok(saved) => saved,
            // Stopped by a person (SIGINT) while waiting: already recorded and done.
            Err(code) => return Ok(code),
        };
        self.stop_tree(&n, saved.is_some())?;
        let (code, how) = self.requeue(&a)?;
        let what = match &saved {
            Some(p) => format!(
                "saved step {} ({})",
                p.step.map_or("?".into(), |s| s.to_string()),
                p.path
            ),
            None => "the save missed the deadline; the last good checkpoint stays the previous one"
                .into(),
        };
        self.done(
            code,
            &format!("preempted ({}): {what}; {how}", n.source.as_str()),
        )
    }

    fn ask_save(&mut self, a: &Armed, n: &Notice, notice_seq: u64) -> Result<()> {
        let mut asked: Vec<String> = Vec::new();
        let mut errors: Vec<String> = Vec::new();
        if matches!(a.cfg.save_now, SaveNow::File | SaveNow::Both) {
            let body = json!({
                "source": n.source.as_str(),
                "deadline": rfc3339(n.deadline),
                "notice_seq": notice_seq,
            });
            // Replaced by rename: the trainer polling the file never reads half of it.
            let how = crate::sys::fsx::Replace::new(crate::sys::fsx::Durability::Atomic, 0o644);
            match crate::sys::fsx::write_atomic(&a.save_now, format!("{body}\n").as_bytes(), how)
                .map(|_| ())
            {
                Ok(()) => asked.push(format!("touched {}", a.save_now.display())),
                Err(e) => errors.push(format!("writing {}: {e:#}", a.save_now.display())),
            }
        }
        if matches!(a.cfg.save_now, SaveNow::Signal | SaveNow::Both) {
            let sig = signal_number(&a.cfg.save_signal)
                .and_then(|s| Signal::try_from(s).ok())
                .unwrap_or(Signal::SIGUSR1);
            match crate::sys::proc::signal_checked_via(&self.fs, self.run.main, sig) {
                Ok(Some(_)) => asked.push(format!(
                    "sent {} to pid {}",
                    sig.as_str(),
                    self.run.main.pid
                )),
                Ok(None) => errors.push(format!(
                    "pid {} is gone: no {} sent",
                    self.run.main.pid,
                    sig.as_str()
                )),
                Err(e) => errors.push(format!(
                    "{} to pid {}: {e:#}",
                    sig.as_str(),
                    self.run.main.pid
                )),
            }
        }
        for e in &errors {
            eprintln!("roger: preempt: could not ask for a save: {e}");
        }
        self.record(
            Kind::Watch,
            self.sentinel.last_step(),
            vec![
                ("event", "preempt_save_asked".into()),
                ("asked", json!(asked)),
                ("errors", json!(errors)),
            ],
        )?;
        Ok(())
    }

    /// Wait for a verified publish filed after the notice, up to the deadline minus the margin.
    /// Err(code): a person's SIGINT stopped everything meanwhile (recorded by `forward`).
    fn await_save(
        &mut self,
        n: &Notice,
        notice_seq: u64,
        margin: f64,
        need_remote: bool,
    ) -> Result<Result<Option<handoff::Published>, u8>> {
        let mut seen_len = 0u64;
        let mut newest: Option<handoff::Published> = None;
        let mut previous: Option<handoff::Published> = None;
        loop {
            let len = std::fs::metadata(self.ledger.path()).map_or(0, |m| m.len());
            if len != seen_len {
                seen_len = len;
                let records = self.ledger.records()?;
                let fresh = records.iter().any(|r| {
                    matches!(r.kind, Kind::Publish | Kind::Remote)
                        && r.run == self.run_name
                        && r.seq > notice_seq
                });
                // With a bucket (and require_remote), a save counts once its copy there is
                // verified: the local disk may go with the machine.
                let copies = need_remote
                    .then(|| crate::checkpoints::bucket::verified(&records, &self.run_name));
                // Re-hash only when a candidate landed (or once, for the previous one).
                if fresh || previous.is_none() {
                    let c = crate::checkpoints::last_good(
                        &records,
                        &self.run_name,
                        None,
                        &mut |c: &crate::checkpoints::Checkpoint| {
                            if let Some(copies) = &copies {
                                if crate::checkpoints::bucket::copy_of(copies, c).is_none() {
                                    return Err("its bucket copy is not verified (yet)".into());
                                }
                            }
                            crate::checkpoints::verify_on_disk(c)
                        },
                    );
                    newest = c.chosen.map(|c| handoff::Published {
                        seq: c.seq,
                        step: c.step,
                        path: c.path.display().to_string(),
                        sha256: c.sha256.clone(),
                    });
                    if previous.is_none() {
                        previous = newest.clone().filter(|p| p.seq < notice_seq);
                    }
                }
            }
            let alive = !self.run.members(&self.fs).is_empty();
            let now = unix_now();
            match handoff::wait(n, notice_seq, margin, now, newest.as_ref(), alive) {
                handoff::Wait::Saved(p) => {
                    // The publish files its ledger record before it replaces latest.json:
                    // let it finish (a stop now would leave the manifest one behind until the
                    // next start's recovery), within the wait's bound and at most 10 s more.
                    let until = (n.deadline - margin).min(now + 10.0);
                    let mut manifest = manifest_names(&p);
                    while !manifest && unix_now() < until {
                        self.sig.wait(Duration::from_millis(50));
                        manifest = manifest_names(&p);
                    }
                    let now = unix_now();
                    let took = now - n.received_at;
                    eprintln!(
                        "roger: preempt: verified publish of step {} {took:.1} s after the notice ({:.1} s before the deadline)",
                        p.step.map_or("?".into(), |s| s.to_string()),
                        n.deadline - now
                    );
                    self.record(
                        Kind::Watch,
                        p.step,
                        vec![
                            ("event", "preempt_saved".into()),
                            ("ckpt", p.path.clone().into()),
                            ("ckpt_seq", p.seq.into()),
                            ("ckpt_step", json!(p.step)),
                            ("after_notice_s", ms(took).into()),
                            ("manifest_updated", manifest.into()),
                            ("bucket_verified", need_remote.into()),
                            ("before_deadline_s", ms(n.deadline - now).into()),
                        ],
                    )?;
                    return Ok(Ok(Some(p)));
                }
                handoff::Wait::Missed { why } => {
                    eprintln!("roger: warning: preempt: save missed the deadline: {why}");
                    self.record(
                        Kind::Watch,
                        previous.as_ref().and_then(|p| p.step),
                        vec![
                            ("event", "preempt_save_missed".into()),
                            ("why", why.into()),
                            ("waited_s", ms(now - n.received_at).into()),
                            ("last_good", json!(previous.as_ref().map(|p| &p.path))),
                            (
                                "last_good_step",
                                json!(previous.as_ref().and_then(|p| p.step)),
                            ),
                        ],
                    )?;
                    return Ok(Ok(None));
                }
                handoff::Wait::Waiting { left_s } => {
                    let nap = Duration::from_secs_f64(left_s.clamp(0.01, 0.25));
                    for s in self.sig.wait(nap) {
                        match s {
                            // A person's Ctrl-C still stops everything, as without [preempt].
                            Signal::SIGINT => {
                                return self.forward(s).map(Err);
                            }
                            Signal::SIGCHLD => {}
                            other => eprintln!(
                                "roger: preempt: {} during the hand-off: already handing off",
                                other.as_str()
                            ),
                        }
                    }
                }
            }
        }
    }

    /// Stop every process of the run (no orphan ranks left to drain the node), the kill
    /// record first; the grace is cut to what is left before the deadline.
    fn stop_tree(&mut self, n: &Notice, saved: bool) -> Result<()> {
        let targets = self.run.members(&self.fs);
        if targets.is_empty() {
            return Ok(());
        }
        let why = format!(
            "preemption notice from {}: {} the run's {} process(es) before the deadline {}",
            n.source.as_str(),
            if saved {
                "save verified; stopping"
            } else {
                "no save in time; stopping"
            },
            targets.len(),
            rfc3339(n.deadline)
        );
        self.kill_record("preempt", Evidence::Note(why), &targets, None)?;
        let left = (n.deadline - unix_now()).max(1.0);
        let grace = self.cfg.watch.grace.0.min(super::dur(left));
        self.terminate_within(&targets, grace)
    }

    /// Requeue the job (scontrol) or say which exit code asks the wrapper to.
    fn requeue(&mut self, a: &Armed) -> Result<(u8, String)> {
        let requeuer = a.node.is_none_or(|n| n == 0);
        let choice = handoff::requeue(
            &a.cfg,
            a.job.as_deref(),
            slurm::on_path("scontrol"),
            requeuer,
        );
        let code = a.cfg.requeue_exit_code;
        let (how, ok, text) = match choice {
            handoff::Requeue::Scontrol { job } => match slurm::requeue(&job) {
                Ok(()) => (
                    "scontrol",
                    true,
                    format!("job {job} requeued with `scontrol requeue {job}`; exit {code}"),
                ),
                Err(e) => (
                    "exit",
                    false,
                    format!("`scontrol requeue {job}` failed ({e}): exit {code} for the wrapper to requeue"),
                ),
            },
            handoff::Requeue::Exit { code, why } => (
                "exit",
                true,
                format!("exit {code} for the wrapper to requeue ({why})"),
            ),
        };
        eprintln!("roger: preempt: {text}");
        self.record(
            Kind::Watch,
            None,
            vec![
                ("event", "preempt_requeue".into()),
                ("how", how.into()),
                ("ok", ok.into()),
                ("job", json!(a.job)),
                ("exit_code", code.into()),
                ("text", text.clone().into()),
            ],
        )?;
        Ok((code, text))
    }

    /// `pause` and the main loop: a notice among these signals starts the hand-off.
    pub(super) fn notice_in(&self, sigs: &[Signal]) -> Option<Notice> {
        sigs.iter().find_map(|s| self.notice_from(*s))
    }

    /// For `pause`: a hand-off started while waiting ends the watch.
    pub(super) fn hand_off_flow(&mut self, n: Notice) -> Result<Flow> {
        self.hand_off(n).map(Flow::Exit)
    }
}

/// Does the `latest.json` beside the checkpoint name it (by sha256)?
fn manifest_names(p: &handoff::Published) -> bool {
    let Some(dir) = Path::new(&p.path).parent() else {
        return false;
    };
    crate::publish::manifest::read(dir)
        .ok()
        .flatten()
        .is_some_and(|m| m.sha256 == p.sha256)
}
