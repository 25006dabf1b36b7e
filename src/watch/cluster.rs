//! The watch's side of [`crate::cluster`]: each sample, this node's record goes to the
//! store and the others' are read; a node unheard for the stale limit is named (stderr and
//! the ledger: `node_lost`, then `node_back`). An unreachable store is said once, and no node
//! is named lost while it is (a store that does not answer cannot tell who is gone). With
//! `[cluster] on_lost` set, a node that waits on a lost one writes the job's verdict (the
//! first writer wins), and every node acts on every new verdict the same way: its ranks'
//! stacks and the kill record first, then its run stopped, then the job's exit code.

use super::actions::Evidence;
use super::Flow;
use super::{unix_now, Watcher};
use crate::cluster::{
    self, health::clock, verdict, Change, DirStore, Identity, JobVerdict, NodeRecord, Own, Peers,
    Store,
};
use crate::config::cluster::OnLost;
use crate::config::Config;
use crate::ledger::Kind;
use crate::sentinel::Assessment;
use anyhow::Result;
use serde_json::json;

pub struct NodeWatch {
    store: DirStore,
    pub id: Identity,
    peers: Peers,
    seq: u64,
    started_at: f64,
    lost_after: Option<f64>,
    /// The store's error while it does not answer (said once per outage).
    down: Option<String>,
    on_lost: OnLost,
    /// The verdict files seen (those there at the start are earlier incidents of the job:
    /// counted in its budget, not acted on again).
    seen: std::collections::BTreeSet<String>,
}

impl NodeWatch {
    /// `None` without `[cluster] store`; an error when the node's place is unknown.
    pub fn from_config(cfg: &Config) -> Result<Option<NodeWatch>> {
        let Some(root) = &cfg.cluster.store else {
            return Ok(None);
        };
        let id = cluster::identity::resolve(cfg.cluster.node, cfg.cluster.nodes, &|k| {
            std::env::var(k).ok()
        })?;
        let started_at = unix_now();
        let root = cluster::identity::store_path(root, &|k| std::env::var(k).ok())?;
        let store = DirStore::open(&root)?;
        let seen = store.list("verdicts")?.into_iter().collect();
        Ok(Some(NodeWatch {
            store,
            on_lost: cfg.cluster.on_lost,
            seen,
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

    /// One sample: write, read, judge. What changed comes back for the watch to record.
    fn tick(&mut self, run: &str, a: &Assessment, now: f64) -> Vec<Said> {
        self.seq += 1;
        let rec = NodeRecord {
            node: self.id.node,
            nodes: self.id.nodes,
            run: run.to_string(),
            seq: self.seq,
            at: now,
            started_at: self.started_at,
            state: a.state.name().to_string(),
            step: a.last_step,
            silent_s: super::ms(a.silent_s),
        };
        let bytes = serde_json::to_vec(&rec).expect("a node record serialises");
        let mut err = self
            .store
            .put(&cluster::node_key(self.id.node), &bytes)
            .err()
            .map(|e| format!("{e:#}"));
        match cluster::read_all(&self.store, self.id.nodes) {
            Ok(all) => all
                .into_iter()
                .filter_map(|(_, r)| r)
                .for_each(|r| self.peers.read(r, now)),
            Err(e) => {
                err.get_or_insert(format!("{e:#}"));
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
        if self.down.is_none() {
            let limit = self.lost_after.unwrap_or(a.limit.seconds);
            out.extend(self.peers.judge(now, limit).into_iter().map(Said::Node));
            if self.on_lost != OnLost::Name {
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

    /// Write the verdict on every lost node this node waits on (first writer wins), then
    /// read the verdicts this watch has not seen: each is said, and acted on. The store's
    /// error, if it failed, comes back beside what was read before it.
    fn verdicts(&mut self, a: &Assessment, now: f64, limit: f64) -> (Vec<Said>, Option<String>) {
        let own = Own {
            step: a.last_step,
            silent_s: a.silent_s,
        };
        let mut out = Vec::new();
        if a.silent_s >= limit / 2.0 {
            let lost: Vec<u32> = self.peers.lost().copied().collect();
            for node in lost {
                let last = self.peers.last(node);
                let v = JobVerdict {
                    id: verdict::id_for(node, last),
                    cause: "node_lost".into(),
                    node,
                    last_step: last.and_then(|r| r.step),
                    by_node: self.id.node,
                    at: now,
                    action: self.on_lost,
                    reason: Change::Lost {
                        node,
                        last: last.cloned(),
                        silent_s: self.peers.unheard(node, now),
                        limit_s: limit,
                    }
                    .words(now, own),
                };
                let bytes = serde_json::to_vec(&v).expect("a verdict serialises");
                if let Err(e) = self.store.create(&verdict::key(&v.id), &bytes) {
                    return (out, Some(format!("{e:#}")));
                }
            }
        }
        let keys = match self.store.list("verdicts") {
            Ok(k) => k,
            Err(e) => return (out, Some(format!("{e:#}"))),
        };
        let incidents = keys.len();
        for k in keys {
            if self.seen.contains(&k) {
                continue;
            }
            match self
                .store
                .get(&k)
                .map(|b| b.map(|b| serde_json::from_slice::<JobVerdict>(&b)))
            {
                Ok(Some(Ok(v))) => {
                    self.seen.insert(k);
                    out.push(Said::Verdict(v, incidents));
                }
                // Gone between the listing and the read: looked at again next sample.
                Ok(None) => {}
                // Not a verdict this roger can read: said once, counted in the budget.
                Ok(Some(Err(e))) => {
                    out.push(Said::Unreadable(format!("{k}: not a verdict: {e}")));
                    self.seen.insert(k);
                }
                Err(e) => return (out, Some(format!("{e:#}"))),
            }
        }
        (out, None)
    }
}

enum Said {
    Node(Change),
    /// A job verdict this node has not acted on, and the job's incidents so far.
    Verdict(JobVerdict, usize),
    StoreDown(String),
    /// A verdict file that does not parse.
    Unreadable(String),
    StoreBack(String),
}

impl Watcher<'_> {
    /// The job's nodes, once per sample (a run without `[cluster]`: nothing).
    pub(super) fn cluster_tick(&mut self, a: &Assessment) -> Result<Flow> {
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
                Said::Verdict(v, incidents) => {
                    let (code, then) = verdict::exit_for(v.action, *incidents, budget);
                    let reason = format!(
                        "job verdict {} (written by node {}{}): {}; every node stops its run, then {then}",
                        v.id,
                        v.by_node,
                        if v.by_node == me { ", this one" } else { "" },
                        v.reason
                    );
                    if act.is_none() {
                        act = Some((reason.clone(), code));
                    }
                    (
                        reason,
                        vec![
                            ("event", "cluster_verdict".into()),
                            ("id", v.id.clone().into()),
                            ("node", v.node.into()),
                            ("last_step", json!(v.last_step)),
                            ("written_by", v.by_node.into()),
                            ("won", (v.by_node == me).into()),
                            ("incidents", (*incidents).into()),
                            ("code", code.into()),
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
        let Some((reason, code)) = act else {
            return Ok(Flow::Continue);
        };
        // Stacks and the kill record first, then the run stopped, then the job's code.
        let targets = self.run.members(&self.fs);
        self.kill_record("cluster", Evidence::Note(reason.clone()), &targets, None)?;
        if self.opts.dry_run {
            return Ok(Flow::Continue);
        }
        self.terminate(&targets)?;
        self.done(code, &reason).map(Flow::Exit)
    }
}
