//! `roger watch`: supervise (or attach to) a training run, sample it every interval, let the
//! sentinel classify it, and act — always after a ledger record. This file owns setup and the
//! loop; `observe.rs` the sample each tick; `verdicts.rs` which critic verdicts the current
//! launch acts on; `actions.rs` what happens on wedge, zombie, exit and rollback; `ended.rs`
//! whether a run whose exit status was lost finished; `relaunch.rs` the way back; `policy.rs`
//! when to give up; `single.rs` one watch and one trainer per run; `child.rs` the processes;
//! `resume.rs` where a relaunch resumes; `event.rs` what is reported.

mod actions;
pub mod child;
mod cluster;
pub mod ended;
mod event;
pub mod logtail;
mod observe;
pub mod policy;
mod preempt;
pub mod ranklogs;
mod ranks;
mod relaunch;
mod remote;
pub mod resume;
pub mod signals;
pub mod single;
pub mod verdicts;
mod work;
mod xids;

pub use event::{Event, Report};

use crate::config::Config;
use crate::gpu::GpuReader;
use crate::ledger::{Entry, Kind, Ledger, Record};
use crate::sentinel::{self, calibrate, Sentinel, State};
use crate::sys::proc::ProcFs;
use anyhow::Result;
use nix::sys::signal::Signal;
use serde_json::Value;
use std::time::{Duration, Instant};

pub const SOURCE: &str = "watch";

#[derive(Debug, Clone)]
pub enum Mode {
    /// Start this command and own it.
    Supervise(Vec<String>),
    /// Watch a process started elsewhere.
    Attach(u32),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Mode,
    /// Classify and record, never signal or relaunch.
    pub dry_run: bool,
    /// `--node-local`: one watch per node of a multi-node job (SLURM_NODEID).
    pub node_local: bool,
}

/// Whether the loop goes on.
pub(crate) enum Flow {
    Continue,
    Exit(u8),
}

/// How long a first launch waits for the other nodes' parts (without `[cluster] lost_after`).
const MEET: Duration = Duration::from_secs(60);

pub(crate) struct Watcher<'a> {
    pub cfg: &'a Config,
    /// `[publish] remote`: where a relaunch finds a checkpoint when this disk has none.
    pub bucket: Option<remote::Bucket>,
    pub opts: &'a Options,
    pub ledger: Ledger,
    pub run_name: String,
    pub fs: ProcFs,
    pub gpu: Box<dyn GpuReader>,
    pub sig: signals::Signals,
    pub report: &'a mut dyn Report,
    pub t0: Instant,
    /// Relaunch command template (with placeholders).
    pub template: Vec<String>,
    pub sentinel: Sentinel,
    pub log: logtail::LogTail,
    pub run: child::Run,
    pub ends: Vec<policy::RunEnd>,
    pub resumed: Vec<Option<u64>>,
    pub relaunches: u32,
    pub slurm_restarts: u32,
    /// Ledger bytes already looked at for new verdicts.
    pub ledger_offset: u64,
    /// The current launch, for telling its verdicts from an earlier launch's.
    pub launch: verdicts::Scope,
    /// Verdicts about a step the launch has not been seen to log yet, with ticks left.
    pub pending: Vec<(resume::Rollback, u32)>,
    /// Leave to signal the run; None in a dry run, so nothing can.
    pub may_signal: Option<child::MaySignal>,
    /// One watch per run, held until the watch ends.
    pub _lock: single::RunLock,
    pub boot_id: Option<String>,
    /// The run's last launch, as the ledger had it when this watch started.
    pub prior: Option<single::Launch>,
    /// This watch attached to that launch's live trainer (instead of starting one).
    pub adopted: bool,
    /// Unix seconds when this watch started the first launch (None when attached).
    pub first_launched_at: Option<f64>,
    /// Dry run: the current episode was recorded already.
    pub recorded_episode: bool,
    pub run_gpus: Vec<u32>,
    /// The run's ranks (torchrun): map, liveness, logs, stragglers.
    pub ranks: ranks::RankWatch,
    /// `[watch] disk_check`: when it last ran and what it said.
    pub disk: crate::hygiene::disk_tick::DiskTicker,
    /// NVML critical-XID events, when the driver offers them.
    pub xids: xids::XidFeed,
    /// `[cluster]`: this node's record in the job's store, and the other nodes heard.
    pub cluster: Option<cluster::NodeWatch>,
    /// The first launch's resume choice, for the start record.
    start_extra: Vec<(&'static str, serde_json::Value)>,
    /// `[export] textfile`: rewritten after each tick.
    pub export: Option<crate::export::Exporter>,
    /// `[notify]`: pages, digest and dead-man ping after each tick.
    pub notify: Option<crate::notify::daemon::Notifier>,
    /// The ledger's new records after each tick, read once for export and notify.
    pub feed: Option<crate::ledger::follow::Follower>,
    /// `[preempt]`: the notice hand-off, when armed.
    pub preempt: Option<preempt::Armed>,
}

/// Run the watch until the run is done, a breaker opens, or roger is told to stop.
pub fn watch(cfg: &Config, opts: &Options, report: &mut dyn Report) -> Result<u8> {
    let ledger = Ledger::new(cfg.ledger_path());
    if let Some(dir) = cfg.checkpoint_dir().ok().filter(|_| !opts.dry_run) {
        // Resume points come from the ledger: an interrupted publish is finished first.
        crate::publish::recover::try_recover(
            &dir,
            &ledger,
            &cfg.run.name,
            "watch",
            chrono::Utc::now(),
        );
        crate::publish::publisher::resume(&dir);
    }
    // A fresh machine (new VM, pod, node) with a bucket: its ledger comes back first.
    let bucket = (!opts.dry_run).then(|| remote::Bucket::open(cfg)).flatten();
    let carried = bucket
        .as_ref()
        .and_then(|b| b.rebuild(&ledger, &cfg.run.name));
    if let (Some(b), Ok(dir)) = (&bucket, cfg.checkpoint_dir()) {
        // Published here but never queued (a crash in between): queued now.
        if dir.is_dir() {
            if let Err(e) = crate::remote::queue::catch_up(
                &dir,
                &b.remote,
                &ledger,
                &cfg.run.name,
                &crate::remote::queue::Keep {
                    rollback_margin: cfg.watch.rollback_margin_steps,
                    config: Some(cfg.path.clone()),
                },
            ) {
                eprintln!(
                    "roger: warning: queueing for {}: {e:#}",
                    b.remote.target.url()
                );
            }
        }
        crate::remote::queue::resume(&dir);
    }
    let records = ledger.records()?;
    let run_name = cfg.run.name.clone();
    let w = &cfg.watch;
    let floor = w.interval.as_secs_f64() * (w.hysteresis as f64 + 1.0);
    let calibration = calibrate::Calibrator::new(
        w.calibrate_factor,
        floor,
        calibrate::prior_gap(&records, &run_name),
    );
    // One watch per run: refused here, before anything is started or recorded.
    let node = preempt::node_id(opts.node_local)?;
    // [cluster]: this node's place in the job, refused here when it cannot be told.
    let mut node_watch = cluster::NodeWatch::from_config(cfg, &records, &run_name)?;
    let mut start_extra = Vec::new();
    let lock_name = node.map_or_else(|| run_name.clone(), |n| format!("{run_name}@node{n}"));
    let lock = single::lock(ledger.path(), &lock_name)?;
    let fs = ProcFs::default();
    let boot_id = crate::sys::host::boot_id();
    let prior = single::last_launch(&records, &run_name);
    let live = prior
        .clone()
        // --node-local: the other nodes' launches are theirs, never adopted.
        .filter(|p| node.is_none() && single::alive(&fs, p, boot_id.as_deref()));
    let mut sig = signals::Signals::install()?;
    let armed = preempt::Armed::new(cfg, opts)?;
    if let Some(s) = armed.as_ref().and_then(preempt::Armed::slurm_signal) {
        sig.also(s)?;
    }
    let save_now = armed.as_ref().map(|a| a.save_now.clone());
    child::become_subreaper();
    let slurm_restarts: u32 = std::env::var("SLURM_RESTART_COUNT")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    // The relaunches before the machine was lost count here too, and so does the loss itself
    // (a restart, as a SLURM requeue is).
    let slurm_restarts = match carried {
        Some(n) => slurm_restarts.max(n as u32 + 1),
        None => slurm_restarts,
    };
    let mut log = logtail::LogTail::new(cfg)?;
    let mut first_launched_at = None;
    let mut adopted = false;
    let (template, run) = match (&opts.mode, &live) {
        // The earlier watch's trainer still runs (that watch was killed): one trainer per run.
        (Mode::Supervise(argv), Some(l)) => {
            let run = child::attach(l.pid, &fs)?;
            if Some(run.main.start) != l.start {
                anyhow::bail!("pid {} changed while roger looked at it; try again", l.pid);
            }
            adopted = true;
            (argv.clone(), run)
        }
        (Mode::Attach(pid), Some(l)) if !single::in_launch(&fs, l, *pid) => anyhow::bail!(
            "run '{run_name}' already has a live trainer, pid {} (ledger #{}): attach to that one (roger watch --pid {}) or stop it first; one run has at most one trainer",
            l.pid,
            l.seq,
            l.pid
        ),
        (Mode::Supervise(argv), None) => {
            if let Some(c) = node_watch.as_mut() {
                let limit = cfg.cluster.lost_after.map_or(MEET, |d| d.0);
                for (step, why) in c.meet(&records, &run_name, limit, bucket.is_some()) {
                    eprintln!("roger: {why}");
                    ledger.append(
                        crate::ledger::Entry::new(crate::ledger::Kind::Watch, "watch", &run_name)
                            .step(Some(step))
                            .field("event", "part_corrupt")
                            .field("node", c.id.node)
                            .field("reason", why),
                        chrono::Utc::now(),
                    )?;
                }
            }
            let mut check = cluster::NodeWatch::resume_check(node_watch.as_ref());
            let mut first = resume::choose(&records, &run_name, None, &mut check);
            if let (Some(b), Ok(dir)) = (&bucket, cfg.checkpoint_dir()) {
                // A part fetched must be of a step every node has, as a local one.
                b.fill(
                    &mut first,
                    &ledger,
                    &run_name,
                    &std::path::absolute(&dir)?,
                    None,
                    &mut cluster::NodeWatch::part_gate(node_watch.as_ref()),
                );
            }
            // What the first launch resumes from, and what it passed over, go in the start record.
            for s in &first.skipped {
                tracing::warn!("not resumed from {}: {}", s.path.display(), s.why);
            }
            start_extra = vec![
                ("resume_step", serde_json::json!(first.chosen.as_ref().and_then(|c| c.step))),
                ("resume_skipped", serde_json::to_value(&first.skipped)?),
            ];
            let r = resume::Resume {
                ckpt: first.chosen,
                diverged_at: None,
                best_ckpt: resume::best_ckpt(&records, &run_name),
            };
            // What the log holds already is not this launch's.
            log.launched();
            first_launched_at = Some(unix_now());
            let run = child::spawn(
                &resume::fill(argv, &r.placeholders()),
                &child_env(cfg, &r, save_now.as_deref()),
                &fs,
            )?;
            (argv.clone(), run)
        }
        (Mode::Attach(pid), live) => {
            // Attaching to the run's last launch itself (or a process of it) is adopting it.
            adopted = live.is_some();
            (w.command.clone(), child::attach(*pid, &fs)?)
        }
    };
    let ledger_offset = std::fs::metadata(ledger.path()).map_or(0, |m| m.len());
    let export = crate::export::Exporter::from_config(cfg, SOURCE);
    let notify = crate::notify::daemon::Notifier::from_config(cfg, SOURCE, chrono::Utc::now());
    let mut me = Watcher {
        cfg,
        bucket,
        opts,
        run_name,
        fs,
        gpu: crate::gpu::open_reader(&cfg.gpu),
        sig,
        report,
        t0: Instant::now(),
        template,
        sentinel: Sentinel::new(rules(cfg), calibration, 0.0),
        log,
        run,
        ends: Vec::new(),
        resumed: Vec::new(),
        relaunches: 0,
        slurm_restarts,
        ledger_offset,
        launch: verdicts::Scope {
            floor_seq: records.last().map_or(0, |r| r.seq),
            launched_at: None,
        },
        pending: Vec::new(),
        may_signal: child::MaySignal::unless_dry_run(opts.dry_run),
        _lock: lock,
        boot_id,
        prior,
        adopted,
        first_launched_at,
        recorded_episode: false,
        run_gpus: Vec::new(),
        ranks: ranks::RankWatch::new(cfg),
        disk: Default::default(),
        xids: xids::XidFeed::start(&cfg.gpu.source),
        cluster: node_watch,
        start_extra,
        feed: crate::ledger::follow::for_readers(
            ledger.path().to_path_buf(),
            // [cluster]: this node's parts come from the ledger's publish records.
            export.is_some() || notify.is_some() || cfg.cluster.store.is_some(),
        ),
        export,
        notify,
        preempt: armed,
        ledger,
    };
    if me.first_launched_at.is_some() {
        // What the rank logs hold already is not this launch's.
        me.ranks.launched();
    }
    let code = me.start();
    // The records of this watch reach the bucket before it exits (bounded: the exit code
    // matters more than the mirror, which the next upload catches up).
    remote::mirror(
        cfg,
        &Ledger::new(cfg.ledger_path()),
        std::time::Duration::from_secs(15),
    );
    code
}

/// The relaunched (or first) command's environment: resume variables, and ROGER_CONFIG so
/// the training's `roger publish` writes to this run's ledger; with `[preempt]`, ROGER_SAVE_NOW.
pub(crate) fn child_env(
    cfg: &Config,
    r: &resume::Resume,
    save_now: Option<&std::path::Path>,
) -> Vec<(&'static str, Option<String>)> {
    let mut env = r.env();
    if let Some(p) = save_now {
        env.push(("ROGER_SAVE_NOW", Some(p.display().to_string())));
    }
    if std::env::var_os("ROGER_CONFIG").is_none() {
        let abs = std::fs::canonicalize(&cfg.path).unwrap_or_else(|_| cfg.path.clone());
        env.push(("ROGER_CONFIG", Some(abs.display().to_string())));
    }
    env
}

pub fn rules(cfg: &Config) -> sentinel::Rules {
    let w = &cfg.watch;
    sentinel::Rules {
        hysteresis: w.hysteresis,
        interval: w.interval.as_secs_f64(),
        grind_limit: w.grind_limit.as_secs_f64(),
        stale: w.stale.map(|d| d.as_secs_f64()),
        phases: cfg
            .phases
            .iter()
            .map(|p| {
                (
                    p.from,
                    p.to,
                    p.stale.map(|d| d.as_secs_f64()),
                    p.name.clone(),
                )
            })
            .collect(),
        quiet: cfg
            .quiet
            .iter()
            .map(|q| (q.name.clone(), q.every, q.duration.as_secs_f64()))
            .collect(),
        busy_cpu: w.busy_cpu,
        busy_io: w.busy_io.0 as f64,
        gpu_pinned_util: w.gpu_pinned_util,
        gpu_low_power: w.gpu_low_power,
    }
}

impl Watcher<'_> {
    pub fn record(
        &self,
        kind: Kind,
        step: Option<u64>,
        fields: Vec<(&str, Value)>,
    ) -> Result<Record> {
        let mut e = Entry::new(kind, SOURCE, &self.run_name).step(step);
        for (k, v) in fields {
            e = e.field(k, v);
        }
        self.ledger.append(e, chrono::Utc::now())
    }

    pub fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn start(&mut self) -> Result<u8> {
        let w = &self.cfg.watch;
        // "adopt": told to start the run, but its last launch still runs, so watched instead.
        let mode = match (&self.opts.mode, self.adopted) {
            (Mode::Attach(_), _) => "attach",
            (Mode::Supervise(_), true) => "adopt",
            (Mode::Supervise(_), false) => "supervise",
        };
        let mut fields = vec![("event", "start".into()), ("mode", mode.into())];
        fields.extend(self.launch_fields());
        fields.extend(std::mem::take(&mut self.start_extra));
        if self.run.attached() {
            self.sample_ranks();
            fields.extend(self.rank_fields());
        }
        let start = self.record(
            Kind::Watch,
            None,
            [
                fields,
                vec![
                    ("command", serde_json::to_value(&self.template)?),
                    ("interval_s", w.interval.as_secs_f64().into()),
                    ("hysteresis", w.hysteresis.into()),
                    (
                        "stale",
                        w.stale
                            .map_or("calibrated".to_string(), |d| d.to_string())
                            .into(),
                    ),
                    ("grind_limit_s", w.grind_limit.as_secs_f64().into()),
                    ("slurm_restart_count", self.slurm_restarts.into()),
                    ("dry_run", self.opts.dry_run.into()),
                ],
            ]
            .concat(),
        )?;
        self.scope_launch(start.seq, self.first_launched_at);
        let ev = Event::Start {
            run: self.run_name.clone(),
            pid: self.run.main.pid,
            attached: self.run.attached(),
            ledger: self.ledger.path().display().to_string(),
            dry_run: self.opts.dry_run,
        };
        self.report.event(&ev);
        self.note_prior()?;
        if let Some(c) = &self.cluster {
            let line = format!(
                "node {} of {} ({}), sharing its state through {}",
                c.id.node,
                c.id.nodes,
                c.id.source,
                c.describe()
            );
            tracing::info!("cluster: {line}");
            self.record(
                Kind::Watch,
                None,
                vec![
                    ("event", "cluster".into()),
                    ("node", c.id.node.into()),
                    ("nodes", c.id.nodes.into()),
                    ("from", c.id.source.clone().into()),
                    ("summary", line.into()),
                ],
            )?;
        }
        self.preempt_fit(true)?;
        let interval = self.cfg.watch.interval.0;
        let mut next = Instant::now();
        loop {
            let sigs = self
                .sig
                .wait(next.saturating_duration_since(Instant::now()));
            let mut chld = false;
            // [preempt]: a notice (SLURM signal, SIGTERM, polled metadata) starts the hand-off.
            if let Some(n) = self.notice_in(&sigs).or_else(|| self.polled_notice()) {
                return self.hand_off(n);
            }
            for s in sigs {
                match s {
                    Signal::SIGINT | Signal::SIGTERM => return self.forward(s),
                    Signal::SIGHUP => tracing::warn!("SIGHUP received: roger keeps watching"),
                    Signal::SIGCHLD => chld = true,
                    _ => {}
                }
            }
            // Sampling follows `interval` whatever the GPU reader or the run's workers spawn:
            // only the exit of the run's main process wakes it early.
            if Instant::now() < next && !(chld && self.run.exit_unsampled(&self.fs)) {
                continue;
            }
            next = Instant::now() + interval;
            let sample = self.sample();
            let rank_obs = sample.ranks.clone();
            let a = self.sentinel.observe(sample);
            self.rank_tick(&rank_obs)?;
            let cluster_flow = self.cluster_tick(&a)?;
            self.report.tick(&a);
            if a.state == State::Working {
                // A dry run records each episode once; progress ends the episode.
                self.recorded_episode = false;
            }
            if a.changed {
                self.report.event(&Event::State {
                    state: a.state.clone(),
                    step: a.last_step,
                    silent_s: ms(a.silent_s),
                    limit_s: ms(a.limit.seconds),
                    limit_source: a.limit.source.clone(),
                    reasons: a.reasons.clone(),
                });
            }
            self.announce_limit()?;
            self.preempt_fit(false)?;
            if self.cfg.watch.disk_check {
                self.check_disk()?;
            }
            for x in self.xids.drain() {
                tracing::warn!("XID {} on GPU {}: {}", x.code, x.device, x.meaning);
                self.record(Kind::Watch, a.last_step, xids::record_fields(&x))?;
            }
            let flow = match self.new_rollback()? {
                // A job verdict acted on: this node's run is stopped, the job's code given.
                _ if matches!(cluster_flow, Flow::Exit(_)) => cluster_flow,
                Some(rb) => self.on_rollback(rb, &a)?,
                None => match &a.state {
                    State::Exited { code, signal } => self.on_exit(*code, *signal)?,
                    State::Zombie => self.on_zombie(&a)?,
                    // The job's verdict, written and read through the store, acts on it.
                    State::Wedge if self.cluster.as_ref().is_some_and(|c| c.owns_stall()) => {
                        Flow::Continue
                    }
                    State::Wedge => self.on_wedge(&a)?,
                    _ => Flow::Continue,
                },
            };
            // After the tick's records, so the file shows what it decided (a breaker, too).
            let new = crate::ledger::follow::this_tick(&mut self.feed);
            if let Some(c) = self.cluster.as_mut() {
                c.note(&new, &self.run_name);
            }
            self.export(&a, &new);
            if let Some(n) = self.notify.as_mut() {
                // Blind (unknown) is exactly when the dead-man ping must stop.
                let observed = !matches!(a.state, State::Unknown { .. });
                n.tick(chrono::Utc::now(), observed, &new);
            }
            if let Flow::Exit(code) = flow {
                return Ok(code);
            }
        }
    }

    fn announce_limit(&mut self) -> Result<()> {
        let calibrated = self.cfg.watch.stale.is_none();
        if let Some(limit) = self.sentinel.calibration.announce() {
            let gap = self.sentinel.calibration.longest_gap().unwrap_or(0.0);
            if calibrated {
                tracing::info!(
                    "stale limit calibrated: {limit:.1}s (longest progress gap {gap:.1}s)"
                );
            }
            self.record(
                Kind::Watch,
                None,
                vec![
                    ("event", calibrate::EVENT.into()),
                    ("limit_s", ms(limit).into()),
                    ("longest_gap_s", ms(gap).into()),
                    ("in_use", calibrated.into()),
                ],
            )?;
            self.report.event(&Event::StaleLimit {
                seconds: ms(limit),
                longest_gap_s: ms(gap),
                in_use: calibrated,
            });
        }
        Ok(())
    }

    /// Wait up to `d`, returning early with Exit when roger is told to stop.
    pub fn pause(&mut self, d: Duration) -> Result<Flow> {
        let until = Instant::now() + d;
        while Instant::now() < until {
            let sigs = self
                .sig
                .wait(until.saturating_duration_since(Instant::now()));
            if let Some(n) = self.notice_in(&sigs).or_else(|| self.polled_notice()) {
                return self.hand_off_flow(n);
            }
            for s in sigs {
                if matches!(s, Signal::SIGINT | Signal::SIGTERM) {
                    return self.forward(s).map(Flow::Exit);
                }
            }
        }
        Ok(Flow::Continue)
    }
}

/// Wall-clock unix seconds (what a log's sample times are compared with).
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Seconds rounded to milliseconds, for records and events people read.
pub(crate) fn ms(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}

pub(crate) fn dur(s: f64) -> Duration {
    crate::config::units::duration_from_secs(s)
}
