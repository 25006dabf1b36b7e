//! The watch's side of [`crate::cluster`]: each sample, this node's record goes to the
//! store and the others' are read; a node unheard for the stale limit is named (stderr and
//! the ledger: `node_lost`, then `node_back`). An unreachable store is said once, and no node
//! is named lost while it is (a store that does not answer cannot tell who is gone).

use super::{unix_now, Watcher};
use crate::cluster::{
    self, health::clock, Change, DirStore, Identity, NodeRecord, Own, Peers, Store,
};
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
        Ok(Some(NodeWatch {
            store: DirStore::open(root)?,
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
        }
        out
    }
}

enum Said {
    Node(Change),
    StoreDown(String),
    StoreBack(String),
}

impl Watcher<'_> {
    /// The job's nodes, once per sample (a run without `[cluster]`: nothing).
    pub(super) fn cluster_tick(&mut self, a: &Assessment) -> Result<()> {
        let Some(c) = self.cluster.as_mut() else {
            return Ok(());
        };
        let now = unix_now();
        let said = c.tick(&self.run_name, a, now);
        let me = c.id.node;
        let store = c.describe();
        let own = Own {
            step: a.last_step,
            silent_s: a.silent_s,
        };
        for s in said {
            let (reason, fields) = match &s {
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
        Ok(())
    }
}
