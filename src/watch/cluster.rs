//! The watch's side of [`crate::cluster`]: each sample, this node's record goes to the
//! store and the others' are read; a node unheard for the stale limit is named (stderr and
//! the ledger: `node_lost`, then `node_back`). An unreachable store is said once, and no node
//! is named lost while it is (a store that does not answer cannot tell who is gone). A run
//! silent for half its stale limit takes its ranks' stacks once and puts their frames in its
//! record. With `[cluster] on_fault` set, a node that waits on a lost one, or whose run
//! stalled past the limit, writes the job's verdict (the first writer wins; a stall's names
//! the node whose ranks stand out in every node's stacks), and every node acts on every new
//! verdict the same way: its ranks' stacks and the kill record first, then its run stopped,
//! then the job's exit code. A stall is then the job's, not each node's own: only with the
//! store down does a node act on its own run alone, as without `[cluster]`.

use super::actions::Evidence;
use super::Flow;
use super::{unix_now, Watcher};
use crate::checkpoints::Checkpoint;
use crate::cluster::{
    self, hang, health::clock, verdict, Change, Identity, JobVerdict, NodeRecord, NodeStacks, Own,
    Peers, Store,
};
use crate::config::cluster::{OnFault, Parts};
use crate::config::Config;
use crate::ledger::Kind;
use crate::ledger::Record;
use crate::sentinel::Assessment;
use anyhow::Result;
use serde_json::json;

pub struct NodeWatch {
    store: Box<dyn Store>,
    pub id: Identity,
    peers: Peers,
    seq: u64,
    started_at: f64,
    lost_after: Option<f64>,
    /// The store's error while it does not answer (said once per outage).
    down: Option<String>,
    on_fault: OnFault,
    /// This stall's stacks of this node's ranks (None: the run advances).
    pub stacks: Option<NodeStacks>,
    /// Samples this node's run has been past its stale limit (a wedge) without a verdict.
    wedged: u32,
    /// This node's published checkpoints (its parts) by step, from its ledger.
    parts: std::collections::BTreeMap<u64, cluster::commit::PartRef>,
    every_node: bool,
    /// The newest step this watch knows committed to the job's latest.json.
    committed: Option<u64>,
    /// This node's part verified by [`NodeWatch::meet`] (path, sha256): not hashed again.
    verified: Option<(std::path::PathBuf, String)>,
    /// This node's ranks' newest straggler window, and the job-wide rule over every node's.
    speeds: Option<cluster::health::NodeSpeeds>,
    job_stragglers: crate::ranks::straggler::Detector,
    /// The verdict files seen (those there at the start are earlier incidents of the job:
    /// counted in its budget, not acted on again).
    seen: std::collections::BTreeSet<String>,
    /// Every incident read, oldest first (those of earlier launches by their time, then as
    /// read): what the job-wide breakers judge.
    past: Vec<(String, verdict::Past)>,
    breakers: crate::config::WatchConfig,
}

impl NodeWatch {
    /// `None` without `[cluster] store`; an error when the node's place is unknown.
    pub fn from_config(cfg: &Config, records: &[Record], run: &str) -> Result<Option<NodeWatch>> {
        if cfg.cluster.store.is_none() {
            return Ok(None);
        }
        let id = cluster::identity::resolve(cfg.cluster.node, cfg.cluster.nodes, &|k| {
            std::env::var(k).ok()
        })?;
        let started_at = unix_now();
        let store = cluster::open_store(cfg, false)?.expect("[cluster] store is set");
        let seen: std::collections::BTreeSet<String> =
            store.list("verdicts")?.into_iter().collect();
        // The job's earlier incidents, for its breakers (one unreadable is said when acted on
        // elsewhere; here it only does not count toward "no progress").
        let mut past: Vec<(String, verdict::Past)> = seen
            .iter()
            .filter_map(|k| {
                let v: JobVerdict = serde_json::from_slice(&store.get(k).ok()??).ok()?;
                Some((k.clone(), past_of(&v)))
            })
            .collect();
        past.sort_by(|a, b| a.1.at.total_cmp(&b.1.at));
        // Unreadable now: the first complete step seen commits (a commit is idempotent).
        let committed = (cfg.cluster.parts == Parts::EveryNode)
            .then(|| cluster::commit::read(store.as_ref()).ok().flatten())
            .flatten()
            .map(|l| l.step);
        Ok(Some(NodeWatch {
            store,
            on_fault: cfg.cluster.on_fault,
            stacks: None,
            wedged: 0,
            parts: {
                let mut p = Default::default();
                cluster::parts::note(&mut p, records, run);
                p
            },
            every_node: cfg.cluster.parts == Parts::EveryNode,
            committed,
            verified: None,
            speeds: None,
            job_stragglers: crate::ranks::straggler::Detector::new(cfg.ranks.rule()),
            seen,
            past,
            breakers: cfg.watch.clone(),
            peers: Peers::new(id.node, id.nodes, started_at),
            id,
            seq: 0,
            started_at,
            lost_after: cfg.cluster.lost_after.map(|d| d.0.as_secs_f64()),
            down: None,
        }))
    }

    pub fn describe(&self) -> String {
        self.store.describe()
    }

    /// The ledger's new records: a checkpoint published (or pruned) changes this node's parts.
    pub fn note(&mut self, new: &[Record], run: &str) {
        cluster::parts::note(&mut self.parts, new, run);
    }

    /// What a resume or fetch candidate must pass besides its own bytes: with `parts =
    /// "every-node"`, every other node's record lists its step (read from the store now, so
    /// every node judges by the same records); without, or without `[cluster]`, nothing.
    pub fn part_gate(c: Option<&NodeWatch>) -> impl FnMut(&Checkpoint) -> Result<(), String> {
        let others = c.filter(|c| c.every_node).map(|c| {
            cluster::read_all(c.store.as_ref(), c.id.nodes)
                .map(|all| cluster::parts::known(&all, c.id.node, Some(&c.parts)))
                .map_err(|e| {
                    format!("the other nodes' parts cannot be read from the [cluster] store: {e:#}")
                })
        });
        cluster::parts::gate(others)
    }

    /// Before the first launch with `parts = "every-node"`: this node checks its own part of
    /// the newest step complete by the records (newest first, until one verifies), drops the
    /// parts whose bytes no longer verify, writes its record, then waits up to `limit` for
    /// every other node's record from its own new start (a requeued job's nodes start
    /// together), so every node's gate judges by what every node found at this start. Unheard
    /// nodes are said by the gate, never waited on past the limit. With a bucket
    /// (`fetchable`), a part missing or changed here stays listed: the bucket's copy is fetched
    /// at the resume. The parts dropped come back, each with why, for the caller to record.
    pub fn meet(
        &mut self,
        records: &[Record],
        run: &str,
        limit: std::time::Duration,
        fetchable: bool,
    ) -> Vec<(u64, String)> {
        if !self.every_node {
            return Vec::new();
        }
        // Unreadable now (a slow store): only a start-up record counts as this start's, and
        // this node's own parts are not checked against the others'.
        let now = cluster::read_all(self.store.as_ref(), self.id.nodes).ok();
        let before: Option<std::collections::BTreeMap<u32, f64>> = now.as_ref().map(|all| {
            all.iter()
                .filter_map(|(n, r)| Some((*n, r.as_ref()?.started_at)))
                .collect()
        });
        let dropped = match (&now, fetchable) {
            (Some(all), false) => self.check_own(all, records, run),
            _ => Vec::new(),
        };
        if let Err(e) = self.put_record(run, 0, super::unix_now(), "starting", None, 0.0) {
            tracing::warn!("[cluster] store {}: {e:#}", self.store.describe());
            return dropped;
        }
        let t0 = std::time::Instant::now();
        while t0.elapsed() < limit {
            let all_in = cluster::read_all(self.store.as_ref(), self.id.nodes).is_ok_and(|all| {
                all.iter().all(|(n, r)| {
                    *n == self.id.node
                        || r.as_ref().is_some_and(|r| {
                            // Written since this node looked, or its start-up record (it
                            // may have started first).
                            let fresh = before
                                .as_ref()
                                .is_some_and(|b| b.get(n) != Some(&r.started_at))
                                || (r.seq == 0 && r.state == "starting");
                            r.parts.is_some() && fresh
                        })
                })
            });
            if all_in {
                return dropped;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        dropped
    }

    /// This node's own parts of the steps complete by `all` (the records `meet` read), newest
    /// first: each is re-hashed until one verifies (that one is not hashed again at the
    /// resume); those that do not are no longer listed, so no node resumes from their step.
    fn check_own(
        &mut self,
        all: &[(u32, Option<NodeRecord>)],
        records: &[Record],
        run: &str,
    ) -> Vec<(u64, String)> {
        let known = cluster::parts::known(all, self.id.node, Some(&self.parts));
        let mine = crate::checkpoints::published(records, run);
        let steps: Vec<u64> = self.parts.keys().rev().copied().collect();
        let mut dropped = Vec::new();
        for step in steps {
            if cluster::parts::missing(Some(step), &known).is_some() {
                continue;
            }
            let Some(ck) = mine.iter().rev().find(|c| c.step == Some(step)) else {
                continue;
            };
            match crate::checkpoints::verify_on_disk(ck) {
                Ok(()) => {
                    self.verified = Some((ck.path.clone(), ck.sha256.clone()));
                    break;
                }
                Err(why) => {
                    self.parts.remove(&step);
                    dropped.push((
                        step,
                        format!(
                            "node {}'s part of step {step} ({}) does not verify: {why}; no longer listed, so no node resumes from step {step}",
                            self.id.node,
                            ck.path.display()
                        ),
                    ));
                }
            }
        }
        dropped
    }

    /// This node's ranks closed straggler window number `n` (`w`): it goes in this node's
    /// record, and with every other node's newest window of the same kind it is one window of
    /// the whole job, judged by the same rule as on one node. Each flag comes back with the
    /// node its rank is on and how many nodes the window spanned.
    pub fn local_window(
        &mut self,
        n: u64,
        w: Option<&crate::ranks::straggler::Window>,
        at: f64,
    ) -> Vec<(crate::ranks::straggler::Flag, u32, usize)> {
        let Some(w) = w else {
            return Vec::new();
        };
        if self
            .speeds
            .as_ref()
            .is_some_and(|s| s.window == n && s.end == w.end)
        {
            return Vec::new();
        }
        self.speeds = Some(cluster::health::NodeSpeeds {
            window: n,
            end: w.end,
            source: w.source.to_string(),
            measure: w.measure.clone(),
        });
        let mut merged = w.measure.clone();
        let mut node_of: std::collections::BTreeMap<u32, u32> =
            w.measure.keys().map(|r| (*r, self.id.node)).collect();
        let mut nodes = 1;
        for peer in (0..self.id.nodes).filter(|p| *p != self.id.node) {
            let Some(s) = self.peers.last(peer).and_then(|r| r.speeds.as_ref()) else {
                continue;
            };
            if s.source != w.source || self.peers.lost().any(|l| *l == peer) {
                continue;
            }
            nodes += 1;
            for (r, m) in &s.measure {
                merged.insert(*r, *m);
                node_of.insert(*r, peer);
            }
        }
        if nodes < 2 {
            return Vec::new();
        }
        self.job_stragglers
            .judge_measures(at, w.source, merged)
            .into_iter()
            .filter_map(|f| {
                let node = *node_of.get(&f.rank)?;
                Some((f, node, nodes))
            })
            .collect()
    }

    /// This node's run was relaunched on a job verdict: its stall is over.
    pub fn relaunched(&mut self) {
        self.stacks = None;
        self.wedged = 0;
    }

    /// Every node as this watch sees it, for the Prometheus textfile.
    pub fn live(&self, now: f64, own_step: Option<u64>) -> Vec<crate::export::NodeLive> {
        let lost: Vec<u32> = self.peers.lost().copied().collect();
        (0..self.id.nodes)
            .map(|n| {
                if n == self.id.node {
                    crate::export::NodeLive {
                        node: n,
                        step: own_step,
                        unheard_s: 0.0,
                        lost: false,
                    }
                } else {
                    crate::export::NodeLive {
                        node: n,
                        step: self.peers.last(n).and_then(|r| r.step),
                        unheard_s: super::ms(self.peers.unheard(n, now)),
                        lost: lost.contains(&n),
                    }
                }
            })
            .collect()
    }

    /// Whether this node's stalled run is the job's to judge (one verdict for every node),
    /// not this watch's alone: with `on_fault` set and the store answering.
    pub fn owns_stall(&self) -> bool {
        self.on_fault != OnFault::Name && self.down.is_none()
    }

    /// This node's record as it stands (its stacks, parts and speeds), written to the store.
    fn put_record(
        &self,
        run: &str,
        seq: u64,
        at: f64,
        state: &str,
        step: Option<u64>,
        silent_s: f64,
    ) -> Result<()> {
        let rec = NodeRecord {
            node: self.id.node,
            nodes: self.id.nodes,
            run: run.to_string(),
            seq,
            at,
            started_at: self.started_at,
            state: state.to_string(),
            step,
            silent_s,
            stacks: self.stacks.clone(),
            parts: Some(self.parts.keys().copied().collect()),
            part_files: Some(
                self.parts
                    .iter()
                    .rev()
                    .take(cluster::parts::NAMED)
                    .map(|(s, p)| (*s, p.clone()))
                    .collect(),
            ),
            speeds: self.speeds.clone(),
        };
        let bytes = serde_json::to_vec(&rec).expect("a node record serialises");
        self.store.put(&cluster::node_key(self.id.node), &bytes)
    }

    /// What a resume candidate must pass: its own bytes (`verify_on_disk`) and, with
    /// `parts = "every-node"` on this node's watch, every other node's part of its step.
    pub fn resume_check(c: Option<&NodeWatch>) -> impl FnMut(&Checkpoint) -> Result<(), String> {
        let mut gate = NodeWatch::part_gate(c);
        let verified = c.and_then(|c| c.verified.clone());
        move |ck: &Checkpoint| {
            gate(ck)?;
            if verified
                .as_ref()
                .is_some_and(|(p, sha)| *p == ck.path && *sha == ck.sha256)
            {
                return Ok(());
            }
            crate::checkpoints::verify_on_disk(ck)
        }
    }

    /// One sample: write, read, judge. What changed comes back for the watch to record.
    fn tick(&mut self, run: &str, a: &Assessment, now: f64) -> Vec<Said> {
        self.seq += 1;
        let mut err = self
            .put_record(
                run,
                self.seq,
                now,
                a.state.name(),
                a.last_step,
                super::ms(a.silent_s),
            )
            .err()
            .map(|e| format!("{e:#}"));
        let mut complete = None;
        // A store that failed the write is not asked again this sample (a bucket that does
        // not answer costs one request's limit, not one per key).
        if err.is_none() {
            match cluster::read_all(self.store.as_ref(), self.id.nodes) {
                Ok(all) => {
                    complete = self.newly_complete(&all, now);
                    all.into_iter()
                        .filter_map(|(_, r)| r)
                        .for_each(|r| self.peers.read(r, now))
                }
                Err(e) => {
                    err.get_or_insert(format!("{e:#}"));
                }
            }
        }
        let mut out = Vec::new();
        match (err, self.down.is_some()) {
            (Some(e), false) => {
                out.push(Said::StoreDown(e.clone()));
                self.down = Some(e);
            }
            (Some(_), true) => {}
            (None, true) => {
                let was = self.down.take().unwrap_or_default();
                out.push(Said::StoreBack(was));
                // The others could not write either: every node gets the limit again.
                self.peers.grace(now);
            }
            (None, false) => {}
        }
        if let (Some(c), None) = (complete, &self.down) {
            match self.commit(c.0, c.1) {
                Ok(said) => out.extend(said),
                Err(e) => {
                    out.push(Said::StoreDown(e.clone()));
                    self.down = Some(e);
                }
            }
        }
        if self.down.is_none() {
            let limit = self.lost_after.unwrap_or(a.limit.seconds);
            out.extend(self.peers.judge(now, limit).into_iter().map(Said::Node));
            if self.on_fault != OnFault::Name {
                let (said, err) = self.verdicts(a, now, limit);
                out.extend(said);
                // A store that fails here is down as if its heartbeat had: said once.
                if let Some(e) = err {
                    out.push(Said::StoreDown(e.clone()));
                    self.down = Some(e);
                }
            }
        }
        out
    }

    /// With `parts = "every-node"`: the job's newest complete step by every node's record as
    /// read now (this node's own parts from its ledger), when newer than the newest this
    /// watch knows committed, with each node's part of it.
    fn newly_complete(
        &self,
        all: &[(u32, Option<NodeRecord>)],
        now: f64,
    ) -> Option<(cluster::commit::JobLatest, cluster::parts::Known)> {
        if !self.every_node {
            return None;
        }
        let known = cluster::parts::known(all, self.id.node, Some(&self.parts));
        let mut lists = known.lists.clone();
        lists.insert(self.id.node, Some(self.parts.keys().copied().collect()));
        let step = cluster::commit::newest_complete(&lists, &known.broken)?;
        if self.committed.is_some_and(|c| c >= step) {
            return None;
        }
        let parts = all
            .iter()
            .map(|(n, r)| {
                let part = if *n == self.id.node {
                    self.parts.get(&step).cloned()
                } else {
                    r.as_ref()
                        .and_then(|r| r.part_files.as_ref()?.get(&step).cloned())
                };
                (*n, part)
            })
            .collect();
        let ours = cluster::commit::JobLatest {
            step,
            parts,
            committed_by: self.id.node,
            at: now,
        };
        Some((ours, known))
    }

    /// Commit a newly complete step to the job's latest.json; this node's parts of older
    /// steps since the last commit that never became complete (by `others`, what the step
    /// was judged complete by) are said, naming the nodes.
    fn commit(
        &mut self,
        ours: cluster::commit::JobLatest,
        others: cluster::parts::Known,
    ) -> Result<Vec<Said>, String> {
        let c =
            cluster::commit::commit(self.store.as_ref(), &ours).map_err(|e| format!("{e:#}"))?;
        let mut out: Vec<Said> = cluster::commit::passed_over(
            self.parts.keys().copied(),
            self.committed,
            ours.step,
            &others,
        )
        .into_iter()
        .map(|(s, why)| Said::PassedOver(s, why))
        .collect();
        self.committed = Some(c.latest.step.max(ours.step));
        out.push(Said::Complete(c));
        Ok(out)
    }

    /// Read the verdicts this watch has not seen: each is said, and acted on. With none new,
    /// write the job's next one when this node waits on a lost node, or its run stalled past
    /// the limit (a wedge) and every node's stacks are in (or two samples passed): the first
    /// writer wins the incident's id, and every writer reads back the winner's. The store's
    /// error, if it failed, comes back beside what was read before it.
    fn verdicts(&mut self, a: &Assessment, now: f64, limit: f64) -> (Vec<Said>, Option<String>) {
        let mut out = Vec::new();
        let keys = match self.store.list("verdicts") {
            Ok(k) => k,
            Err(e) => return (out, Some(format!("{e:#}"))),
        };
        if let Err(e) = self.read_new(&keys, &mut out) {
            return (out, Some(e));
        }
        if !out.is_empty() {
            self.wedged = 0;
            return (out, None);
        }
        self.wedged = if a.state == crate::sentinel::State::Wedge {
            self.wedged + 1
        } else {
            0
        };
        let Some(v) = self.verdict_to_write(a, now, limit, &keys) else {
            return (out, None);
        };
        let bytes = serde_json::to_vec(&v).expect("a verdict serialises");
        let key = verdict::key(&v.id);
        if let Err(e) = self.store.create(&key, &bytes) {
            return (out, Some(format!("{e:#}")));
        }
        // Won or not, the verdict under this id is the one every node acts on.
        if let Err(e) = self.read_new(&[key], &mut out) {
            return (out, Some(e));
        }
        let incidents = keys.len() + 1;
        for s in &mut out {
            if let Said::Verdict(_, n, _) = s {
                *n = (*n).max(incidents);
            }
        }
        (out, None)
    }

    /// The verdicts among `keys` not seen yet, each said once.
    fn read_new(&mut self, keys: &[String], out: &mut Vec<Said>) -> Result<(), String> {
        let incidents = keys.len();
        for k in keys {
            if self.seen.contains(k) {
                continue;
            }
            match self
                .store
                .get(k)
                .map(|b| b.map(|b| serde_json::from_slice::<JobVerdict>(&b)))
            {
                Ok(Some(Ok(v))) => {
                    self.seen.insert(k.clone());
                    self.past.push((k.clone(), past_of(&v)));
                    let upto: Vec<verdict::Past> = self.past.iter().map(|(_, p)| *p).collect();
                    let breaker = verdict::breaker(&upto, &self.breakers);
                    out.push(Said::Verdict(v, incidents, breaker));
                }
                // Gone between the listing and the read: looked at again next sample.
                Ok(None) => {}
                // Not a verdict this roger can read: said once, counted in the budget.
                Ok(Some(Err(e))) => {
                    out.push(Said::Unreadable(format!("{k}: not a verdict: {e}")));
                    self.seen.insert(k.clone());
                }
                Err(e) => return Err(format!("{e:#}")),
            }
        }
        Ok(())
    }

    /// The verdict this node would write now, if any.
    fn verdict_to_write(
        &self,
        a: &Assessment,
        now: f64,
        limit: f64,
        keys: &[String],
    ) -> Option<JobVerdict> {
        let own = Own {
            step: a.last_step,
            silent_s: a.silent_s,
        };
        let id = verdict::next_id(keys);
        let base = |cause: &str, node, reason| JobVerdict {
            id: id.clone(),
            cause: cause.into(),
            node,
            ranks: Vec::new(),
            stack: None,
            last_step: None,
            by_node: self.id.node,
            at: now,
            action: self.on_fault,
            reason,
        };
        // A lost node this node waits on is the cause, whatever the stacks say.
        if a.silent_s >= limit / 2.0 {
            if let Some(&node) = self.peers.lost().next() {
                let last = self.peers.last(node);
                let mut v = base(
                    "node_lost",
                    Some(node),
                    Change::Lost {
                        node,
                        last: last.cloned(),
                        silent_s: self.peers.unheard(node, now),
                        limit_s: limit,
                    }
                    .words(now, own),
                );
                v.last_step = last.and_then(|r| r.step);
                return Some(v);
            }
        }
        if self.wedged == 0 {
            return None;
        }
        // Every other node's stacks, as its newest record holds them.
        let peers: Vec<(u32, Option<&NodeStacks>)> = (0..self.id.nodes)
            .filter(|n| *n != self.id.node)
            .map(|n| (n, self.peers.last(n).and_then(|r| r.stacks.as_ref())))
            .collect();
        if peers.iter().any(|(_, s)| s.is_none()) && self.wedged < 3 {
            return None;
        }
        let mut all: Vec<(u32, &NodeStacks)> = peers
            .iter()
            .filter_map(|(n, s)| Some((*n, (*s)?)))
            .collect();
        if let Some(mine) = &self.stacks {
            all.push((self.id.node, mine));
        }
        all.sort_by_key(|(n, _)| *n);
        let c = hang::culprit(&all);
        let mut words = hang::words(&all, c.as_ref());
        let missing: Vec<String> = peers
            .iter()
            .filter(|(_, s)| s.is_none())
            .map(|(n, _)| n.to_string())
            .collect();
        if !missing.is_empty() {
            words.push_str(&format!(
                "; no stacks from node {} (none in its record)",
                missing.join(",")
            ));
        }
        let step = all.iter().filter_map(|(_, s)| s.step).min();
        let mut v = base(
            "hang",
            c.as_ref().map(|c| c.node),
            format!(
                "the job's run stalled (node {}'s silent {:.1}s, limit {:.1}s): {words}",
                self.id.node, a.silent_s, a.limit.seconds
            ),
        );
        v.last_step = step.or(a.last_step);
        if let Some(c) = &c {
            v.ranks = c.ranks.iter().filter_map(|r| r.rank).collect();
            v.stack = c.ranks[0].frame.as_ref().map(|f| f.short());
        }
        Some(v)
    }
}

fn past_of(v: &JobVerdict) -> verdict::Past {
    verdict::Past {
        step: v.last_step,
        at: v.at,
    }
}

enum Said {
    Node(Change),
    /// A job verdict this node has not acted on, the job's incidents so far, and why the
    /// job-wide breakers stop the job (if they do).
    Verdict(JobVerdict, usize, Option<String>),
    StoreDown(String),
    /// A verdict file that does not parse.
    Unreadable(String),
    StoreBack(String),
    /// A step complete on every node, committed to the job's latest.json.
    Complete(cluster::commit::Committed),
    /// This node's part of a step older than a newly complete one that never became
    /// complete, and why.
    PassedOver(u64, String),
}

impl Watcher<'_> {
    /// The job's nodes, once per sample (a run without `[cluster]`: nothing).
    pub(super) fn cluster_tick(&mut self, a: &Assessment) -> Result<Flow> {
        self.stall_stacks(a)?;
        let Some(c) = self.cluster.as_mut() else {
            return Ok(Flow::Continue);
        };
        let now = unix_now();
        let said = c.tick(&self.run_name, a, now);
        let me = c.id.node;
        let store = c.describe();
        let own = Own {
            step: a.last_step,
            silent_s: a.silent_s,
        };
        let budget = self.cfg.watch.max_relaunches;
        let mut act = None;
        for s in said {
            let (reason, fields) = match &s {
                Said::Verdict(v, incidents, breaker) => {
                    let then = verdict::then_for(
                        v.action,
                        &v.cause,
                        *incidents,
                        budget,
                        breaker.as_deref(),
                    );
                    let role = match v.node {
                        Some(n) if n == me && v.cause == "hang" => {
                            "; the cause is this node".to_string()
                        }
                        Some(n) if n != me => format!("; this node's run waits on node {n}"),
                        _ => String::new(),
                    };
                    let reason = format!(
                        "job verdict {} (written by node {}{}): {}{role}; every node stops its run, then {}",
                        v.id,
                        v.by_node,
                        if v.by_node == me { ", this one" } else { "" },
                        v.reason,
                        then.words()
                    );
                    let code = then.code();
                    if act.is_none() {
                        act = Some((reason.clone(), then));
                    }
                    (
                        reason,
                        vec![
                            ("event", "cluster_verdict".into()),
                            ("id", v.id.clone().into()),
                            ("cause", v.cause.clone().into()),
                            ("node", json!(v.node)),
                            ("ranks", json!(v.ranks)),
                            ("stack", json!(v.stack)),
                            ("last_step", json!(v.last_step)),
                            ("written_by", v.by_node.into()),
                            ("won", (v.by_node == me).into()),
                            ("incidents", (*incidents).into()),
                            ("breaker", json!(breaker)),
                            ("code", json!(code)),
                            ("then", (if code.is_some() { "exit" } else { "relaunch" }).into()),
                        ],
                    )
                }
                Said::Node(ch @ Change::Lost {
                    node,
                    last,
                    silent_s,
                    limit_s,
                }) => (
                    ch.words(now, own),
                    vec![
                        ("event", "node_lost".into()),
                        ("node", (*node).into()),
                        ("last_heard", json!(last.as_ref().map(|r| clock(r.at, now)))),
                        ("last_step", json!(last.as_ref().and_then(|r| r.step))),
                        ("last_state", json!(last.as_ref().map(|r| r.state.clone()))),
                        ("silent_s", super::ms(*silent_s).into()),
                        ("limit_s", super::ms(*limit_s).into()),
                    ],
                ),
                Said::Node(ch @ Change::Back { node, record }) => (
                    ch.words(now, own),
                    vec![
                        ("event", "node_back".into()),
                        ("node", (*node).into()),
                        ("node_step", json!(record.step)),
                        ("node_state", record.state.clone().into()),
                    ],
                ),
                Said::StoreDown(e) => (
                    format!("[cluster] store {store} does not answer: {e}; no node is named lost until it does"),
                    vec![("event", "cluster_store_down".into()), ("error", e.clone().into())],
                ),
                Said::Unreadable(e) => (
                    format!("[cluster] store {store}: {e}; not acted on"),
                    vec![("event", "cluster_verdict_unreadable".into()), ("error", e.clone().into())],
                ),
                Said::Complete(c) => {
                    let parts: Vec<String> = c
                        .ours
                        .parts
                        .iter()
                        .map(|(n, p)| match p {
                            Some(p) => format!(
                                "node {n}: {} (sha256 {}…)",
                                p.name,
                                &p.sha256[..p.sha256.len().min(12)]
                            ),
                            None => format!("node {n}: listed"),
                        })
                        .collect();
                    let by = if c.won {
                        "this node".to_string()
                    } else {
                        format!("node {}", c.ours.committed_by)
                    };
                    let newer = if c.latest.step != c.ours.step {
                        format!("; latest.json names the newer step {}", c.latest.step)
                    } else {
                        "; the job's latest.json in the store names it".to_string()
                    };
                    (
                        format!(
                            "step {} is complete: every node's part is verified ({}); committed by {by}{newer}",
                            c.ours.step,
                            parts.join(", ")
                        ),
                        vec![
                            ("event", "checkpoint_complete".into()),
                            ("complete_step", c.ours.step.into()),
                            ("parts", json!(c.ours.parts)),
                            ("committed_by", c.ours.committed_by.into()),
                            ("won", c.won.into()),
                            ("latest_step", c.latest.step.into()),
                        ],
                    )
                }
                Said::PassedOver(step, why) => (
                    format!("{why}; passed over: the job's latest.json moved past it"),
                    vec![
                        ("event", "part_missing".into()),
                        ("part_step", (*step).into()),
                    ],
                ),
                Said::StoreBack(e) => (
                    format!("[cluster] store {store} answers again (it had failed: {e})"),
                    vec![("event", "cluster_store_back".into())],
                ),
            };
            tracing::warn!("node {me}: {reason}");
            let mut fields = fields;
            fields.push(("reason", reason.into()));
            fields.push(("by_node", me.into()));
            self.record(Kind::Watch, a.last_step, fields)?;
        }
        let Some((reason, then)) = act else {
            return Ok(Flow::Continue);
        };
        // Stacks and the kill record first, then the run stopped, then the job's code (or
        // this node's relaunch, from the step every node chooses alike).
        let targets = self.run.members(&self.fs);
        self.kill_record("cluster", Evidence::Note(reason.clone()), &targets, None)?;
        if self.opts.dry_run {
            return Ok(Flow::Continue);
        }
        match then {
            verdict::Then::Exit(code, _) => {
                self.terminate(&targets)?;
                self.done(code, &reason).map(Flow::Exit)
            }
            verdict::Then::Relaunch(_) => {
                if let Some(c) = self.cluster.as_mut() {
                    c.relaunched();
                }
                self.stop_and_relaunch(&targets, "cluster", super::policy::Cause::Wedge, None)
            }
        }
    }
}

impl Watcher<'_> {
    /// A run silent for half its stale limit: its ranks' stacks, once per stall, for this
    /// node's record (what the others judge a job-wide stall by) and the ledger.
    fn stall_stacks(&mut self, a: &Assessment) -> Result<()> {
        let Some(c) = self.cluster.as_mut() else {
            return Ok(());
        };
        let stalled = a.silent_s >= a.limit.seconds / 2.0
            && !matches!(a.state, crate::sentinel::State::Exited { .. });
        if !stalled {
            c.stacks = None;
            return Ok(());
        }
        if c.stacks.as_ref().is_some_and(|s| s.step == a.last_step) {
            return Ok(());
        }
        let me = c.id.node;
        let ranks = self.rank_stacks();
        let stacks = NodeStacks {
            step: a.last_step,
            silent_s: super::ms(a.silent_s),
            ranks,
        };
        let said = hang::words(&[(me, &stacks)], None);
        let said = said.strip_prefix("no node stands out: ").unwrap_or(&said);
        let reason = format!(
            "node {me}: the run has been silent {:.1}s (half its {:.1}s limit): {said}",
            a.silent_s, a.limit.seconds
        );
        tracing::info!("{reason}");
        self.record(
            Kind::Watch,
            a.last_step,
            vec![
                ("event", "node_stacks".into()),
                ("node", me.into()),
                ("stacks", serde_json::to_value(&stacks.ranks)?),
                ("silent_s", super::ms(a.silent_s).into()),
                ("reason", reason.into()),
            ],
        )?;
        if let Some(c) = self.cluster.as_mut() {
            c.stacks = Some(stacks);
        }
        Ok(())
    }
}
