//! The watch's edge for a distributed run: reads each new process's environment once for
//! the rank map (recorded when it first appears or changes), each rank's counters and GPU
//! every tick, every rank's log for stragglers (a `straggler` verdict, never a kill), and —
//! before a kill — the evidence hook on every rank at once, the stacks grouped, Flight
//! Recorder dumps collected. The decisions are in `crate::ranks`.

use super::ranklogs::RankLogs;
use super::{ms, Watcher};
use crate::gpu::GpuSnapshot;
use crate::ledger::Kind;
use crate::ranks::straggler::{Detector, Flag};
use crate::ranks::{self, stacks, Rank, RankEnv, RankObs};
use crate::sys::proc::{ProcId, ProcStat};
use anyhow::Result;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Reads of a process's environment before it counts as no rank.
const ENV_READS: u32 = 5;

pub(crate) struct RankWatch {
    /// Each process's rank environment (None: not a rank, so far) and how often it was read.
    envs: BTreeMap<ProcId, (Option<RankEnv>, u32)>,
    pub map: Vec<Rank>,
    /// (rank, pid) of the map last recorded, and of the last read.
    recorded: Vec<(u32, u32)>,
    pending: Vec<(u32, u32)>,
    logs: Option<RankLogs>,
    detector: Detector,
    /// Which GPU each pid is on, and each GPU's utilisation, from the tick's GPU read.
    gpu_of: BTreeMap<u32, u32>,
    gpu_util: BTreeMap<u32, f64>,
    /// Each rank's newest logged step (from its own log).
    pub steps: BTreeMap<u32, u64>,
}

impl RankWatch {
    pub fn new(cfg: &crate::config::Config) -> RankWatch {
        RankWatch {
            envs: BTreeMap::new(),
            map: Vec::new(),
            recorded: Vec::new(),
            pending: Vec::new(),
            logs: cfg
                .run
                .rank_log
                .as_ref()
                .map(|p| RankLogs::new(p, &cfg.metrics.step, &cfg.ranks.step_time)),
            detector: Detector::new(cfg.ranks.rule()),
            gpu_of: BTreeMap::new(),
            gpu_util: BTreeMap::new(),
            steps: BTreeMap::new(),
        }
    }

    /// A launch starts: its ranks, logs and speeds are new.
    pub fn launched(&mut self) {
        if let Some(l) = self.logs.as_mut() {
            l.launched();
        }
        self.detector.reset();
        self.map.clear();
        self.recorded.clear();
        self.pending.clear();
        self.steps.clear();
    }

    pub fn note_gpu(&mut self, snap: &GpuSnapshot) {
        self.gpu_of = snap.processes.iter().map(|p| (p.pid, p.gpu)).collect();
        self.gpu_util = snap
            .gpus
            .iter()
            .filter_map(|g| Some((g.index, f64::from(g.util?))))
            .collect();
    }

    /// The rank map and each rank's counters from this tick's tree.
    pub fn read(&mut self, tree: &[ProcStat]) -> Vec<RankObs> {
        for st in tree.iter().filter(|s| s.state != 'Z') {
            let e = self.envs.entry(st.id).or_insert((None, 0));
            // A process read between fork and exec still shows its parent's environment:
            // one without a RANK is read again for its first few ticks.
            if e.0.is_none() && e.1 < ENV_READS {
                e.1 += 1;
                e.0 = crate::sys::environ::read(st.id.pid).and_then(|r| ranks::parse_environ(&r));
            }
        }
        let live: Vec<ProcId> = tree.iter().map(|s| s.id).collect();
        self.envs.retain(|id, _| live.contains(id));
        let envs: BTreeMap<ProcId, RankEnv> = self
            .envs
            .iter()
            .filter_map(|(id, e)| Some((*id, e.0.clone()?)))
            .collect();
        let mut map = ranks::rank_map(tree, &envs);
        let members = ranks::members(tree, &map);
        for r in &mut map {
            r.gpu = members
                .get(&r.rank)
                .into_iter()
                .flatten()
                .find_map(|id| self.gpu_of.get(&id.pid).copied());
        }
        let mut obs = ranks::observe(tree, &map);
        for o in &mut obs {
            let gpu = map.iter().find(|r| r.rank == o.rank).and_then(|r| r.gpu);
            o.gpu_util = gpu.and_then(|g| self.gpu_util.get(&g).copied());
        }
        self.map = map;
        obs
    }

    /// The map, when it differs from the one last recorded and looks complete (every rank
    /// of the world size is there, or the world size is unknown).
    fn map_to_record(&mut self) -> Option<Vec<Rank>> {
        let now: Vec<(u32, u32)> = self.map.iter().map(|r| (r.rank, r.pid)).collect();
        let world = self.map.iter().find_map(|r| r.world_size);
        let complete = world.is_none_or(|w| self.map.len() as u32 >= w);
        // Recorded once it held for two reads: a process caught mid-start is not a rank change.
        let held = std::mem::replace(&mut self.pending, now.clone()) == now;
        if now.is_empty() || now == self.recorded || !complete || !held {
            return None;
        }
        self.recorded = now;
        Some(self.map.clone())
    }

    /// Read every rank's log: their newest steps (the slowest one is the run's progress),
    /// and their step times for the straggler rule.
    pub fn poll_logs(&mut self) -> Option<u64> {
        let logs = self.logs.as_mut()?;
        for (rank, read) in logs.poll() {
            self.detector.step_times(rank, &read.step_times);
            if let Some(s) = read.last_step {
                self.steps.insert(rank, s);
            }
        }
        self.steps.values().min().copied()
    }
}

impl Watcher<'_> {
    /// After each sample: record the rank map when it appears or changes; file a straggler
    /// verdict when the rule finds one.
    pub(super) fn rank_tick(&mut self, obs: &[RankObs]) -> Result<()> {
        if let Some(map) = self.ranks.map_to_record() {
            let line = ranks::map_line(&map);
            tracing::info!("ranks: {line}");
            self.record(
                Kind::Watch,
                self.sentinel.last_step(),
                vec![
                    ("event", "ranks".into()),
                    ("launched_seq", self.launch.floor_seq.into()),
                    ("ranks", serde_json::to_value(&map)?),
                    ("summary", line.into()),
                ],
            )?;
        }
        let now = self.now();
        let flags = self.ranks.detector.sample(now, obs);
        for f in flags {
            self.straggler(&f)?;
        }
        // [cluster]: this node's window, with every other node's, is one window of the job.
        if let Some(c) = self.cluster.as_mut() {
            let (n, w) = self.ranks.detector.newest();
            let job = c.local_window(n, w, super::unix_now());
            for (f, node, nodes) in job {
                self.job_straggler(&f, node, nodes)?;
            }
        }
        Ok(())
    }

    /// A straggler among every node's ranks: the same rule and record as on one node, with
    /// the node named (every node that sees it says it).
    fn job_straggler(&mut self, f: &Flag, node: u32, nodes: usize) -> Result<()> {
        let me = self.cluster.as_ref().map_or(0, |c| c.id.node);
        let reason = format!(
            "node {node}'s {} (ranks of {nodes} nodes judged together; said by node {me})",
            f.reason(self.cfg.ranks.straggler_share)
        );
        self.straggler_record(
            f,
            reason,
            json!({"node": node}),
            vec![("scope", "job".into()), ("node", node.into())],
        )
    }

    /// A `straggler` verdict: a warning with its evidence, never an action.
    fn straggler(&mut self, f: &Flag) -> Result<()> {
        let pid = self
            .ranks
            .map
            .iter()
            .find(|r| r.rank == f.rank)
            .map(|r| r.pid);
        let reason = f.reason(self.cfg.ranks.straggler_share);
        self.straggler_record(f, reason, json!({"pid": pid}), Vec::new())
    }

    /// The straggler verdict record, one node's or the job's: `observed` gains `where_`
    /// (the rank's pid, or its node), the record `more` fields.
    fn straggler_record(
        &mut self,
        f: &Flag,
        reason: String,
        where_: Value,
        more: Vec<(&'static str, Value)>,
    ) -> Result<()> {
        let share = self.cfg.ranks.straggler_share;
        tracing::warn!("{reason}");
        let mut observed = json!({"rank": f.rank, "relative": f.relative, "source": f.source});
        if let (Some(o), Some(w)) = (observed.as_object_mut(), where_.as_object()) {
            o.extend(w.clone());
        }
        let check = json!({
            "check": "straggler",
            "status": "warn",
            "observed": observed,
            "expected": {"share": share, "windows": self.cfg.ranks.straggler_windows},
            "reason": reason,
        });
        let mut fields: Vec<(&'static str, Value)> =
            vec![("status", "warn".into()), ("check", "straggler".into())];
        fields.extend(more);
        fields.extend([
            ("rank", f.rank.into()),
            ("checks", json!([check])),
            ("observation", json!({"windows": f.windows})),
        ]);
        self.record(Kind::Verdict, self.sentinel.last_step(), fields)?;
        Ok(())
    }

    /// The rank map as a record field, when known.
    pub(super) fn rank_fields(&self) -> Vec<(&'static str, Value)> {
        if self.ranks.map.is_empty() {
            return Vec::new();
        }
        vec![(
            "ranks",
            serde_json::to_value(&self.ranks.map).unwrap_or(Value::Null),
        )]
    }

    /// The evidence hook on each (pid, output file) at once, each within `evidence_timeout`
    /// (no hook: nothing run, no result).
    fn run_hooks(&self, jobs: &[(Option<u32>, u32, PathBuf)]) -> Vec<Result<(), String>> {
        let hook = &self.cfg.watch.evidence_hook;
        if hook.is_empty() {
            return Vec::new();
        }
        let timeout = self.cfg.watch.evidence_timeout.0;
        std::thread::scope(|s| {
            let handles: Vec<_> = jobs
                .iter()
                .map(|(_, pid, file)| {
                    let argv = super::resume::fill(hook, &[("pid", pid.to_string())]);
                    s.spawn(move || {
                        super::child::evidence(&argv, timeout, file).map_err(|e| format!("{e:#}"))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("hook thread panicked".into()))
                })
                .collect()
        })
    }

    /// Each rank's innermost frame (a run without ranks: its main process's), from the
    /// evidence hook's dumps, kept as evidence (`…-stall-rank<r>.txt`): what a node says of
    /// its ranks while its run stalls, before anything is killed.
    pub(super) fn rank_stacks(&self) -> Vec<crate::cluster::RankStack> {
        use crate::cluster::RankStack;
        if self.cfg.watch.evidence_hook.is_empty() {
            return vec![RankStack {
                rank: None,
                frame: None,
                error: Some("no [watch] evidence_hook to read stacks with".into()),
            }];
        }
        let main = self.run.main.pid;
        let dir = self.evidence_dir();
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string();
        let jobs: Vec<(Option<u32>, u32, PathBuf)> = if self.ranks.map.is_empty() {
            vec![(None, main, dir.join(format!("{stamp}-{main}-stall.txt")))]
        } else {
            self.ranks
                .map
                .iter()
                .map(|r| {
                    let f = dir.join(format!("{stamp}-{main}-stall-rank{}.txt", r.rank));
                    (Some(r.rank), r.pid, f)
                })
                .collect()
        };
        let results = self.run_hooks(&jobs);
        jobs.iter()
            .zip(results)
            .map(|((rank, _, file), res)| {
                let dump =
                    res.and_then(|()| std::fs::read_to_string(file).map_err(|e| e.to_string()));
                let frame = dump
                    .as_ref()
                    .ok()
                    .and_then(|d| stacks::innermost(&stacks::parse_dump(d)).cloned());
                let error = match (&frame, dump) {
                    (Some(_), _) => None,
                    (None, Err(e)) => Some(e),
                    (None, Ok(_)) => Some(format!("no Python stack in {}", file.display())),
                };
                RankStack {
                    rank: *rank,
                    frame,
                    error,
                }
            })
            .collect()
    }

    fn evidence_dir(&self) -> PathBuf {
        self.ledger
            .path()
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
            .join("roger-evidence")
    }

    /// The evidence hook on the main process and every rank at once, each within
    /// `evidence_timeout`; the ranks' stacks grouped and the odd group named; Flight
    /// Recorder dumps copied beside them. Fields for the kill record.
    pub(super) fn all_evidence(&mut self, silent_s: f64) -> Vec<(&'static str, Value)> {
        let main = self.run.main.pid;
        let dir = self.evidence_dir();
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string();
        let mut fields = Vec::new();
        let ranks: Vec<Rank> = self.ranks.map.clone();
        let mut jobs: Vec<(Option<u32>, u32, PathBuf)> =
            vec![(None, main, dir.join(format!("{stamp}-{main}.txt")))];
        for r in &ranks {
            jobs.push((
                Some(r.rank),
                r.pid,
                dir.join(format!("{stamp}-{main}-rank{}.txt", r.rank)),
            ));
        }
        let results = self.run_hooks(&jobs);
        if let Some(r) = results.first() {
            match r {
                Ok(()) => fields.push(("evidence", jobs[0].2.display().to_string().into())),
                Err(e) => fields.push(("evidence_error", e.clone().into())),
            }
        }
        if !ranks.is_empty() {
            let mut files = serde_json::Map::new();
            let mut dumps = Vec::new();
            for ((rank, _, file), res) in jobs.iter().zip(&results).skip(1) {
                let rank = rank.unwrap_or(0);
                let dump = match res {
                    Ok(()) => {
                        files.insert(rank.to_string(), file.display().to_string().into());
                        std::fs::read_to_string(file).map_err(|e| e.to_string())
                    }
                    Err(e) => Err(e.clone()),
                };
                dumps.push((rank, dump));
            }
            if !dumps.is_empty() {
                let groups = stacks::group(&dumps);
                let summary = stacks::summary(&groups, silent_s);
                let odd = stacks::odd(&groups).map(|g| g.ranks.clone());
                tracing::warn!("stacks of the ranks: {summary}");
                fields.push(("stacks", summary.into()));
                fields.push(("stack_groups", json!(groups)));
                fields.push(("odd_ranks", json!(odd)));
                fields.push(("rank_evidence", Value::Object(files)));
            }
            let fr = flight_recorder(&ranks, &dir, &stamp, main);
            if !fr.is_empty() {
                fields.push(("flight_recorder", json!(fr)));
            }
            fields.push(("ranks", serde_json::to_value(&ranks).unwrap_or(Value::Null)));
            fields.push(("silent_for_s", ms(silent_s).into()));
        }
        fields
    }
}

/// Copy each rank's Flight Recorder dump (`{TORCH_NCCL_DEBUG_INFO_TEMP_FILE}{rank}`), where
/// one exists, into the evidence directory: rank → copied path.
fn flight_recorder(ranks: &[Rank], dir: &Path, stamp: &str, main: u32) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for r in ranks {
        let Some(prefix) = &r.flight_recorder else {
            continue;
        };
        let src = PathBuf::from(format!("{prefix}{}", r.rank));
        if !src.is_file() {
            continue;
        }
        let dst = dir.join(format!("{stamp}-{main}-rank{}-flight-recorder", r.rank));
        let _ = std::fs::create_dir_all(dir);
        match std::fs::copy(&src, &dst) {
            Ok(_) => {
                out.insert(r.rank, dst.display().to_string());
            }
            Err(e) => tracing::warn!(
                "Flight Recorder dump {} of rank {} not copied: {e}",
                src.display(),
                r.rank
            ),
        }
    }
    out
}
