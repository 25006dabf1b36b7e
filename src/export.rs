//! The Prometheus textfile (`[export] textfile`) for node_exporter's textfile collector: the
//! facts are folded from the ledger (the event stream: relaunches, breaker, verdicts, disk,
//! XIDs) plus what the daemon saw this tick (state, step, silence, stale limit); formatting is
//! pure, the file is replaced by a rename in its own directory. No sample timestamps (the
//! collector rejects them) and nothing about the host: run name, check names, paths, numbers.

use crate::ledger::{Kind, Record};
use anyhow::{Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Every state the watch's sentinel can be in (one series each, the one in force is 1).
pub const STATES: [&str; 6] = ["working", "grind", "wedge", "zombie", "exited", "unknown"];

/// What the ledger says about one run, folded record by record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub relaunches: u64,
    pub breaker_open: bool,
    pub xids: u64,
    /// Newest verdict: overall status and per check (`pass` .. `unknown`).
    pub verdict: Option<String>,
    pub checks: BTreeMap<String, String>,
    pub verdict_step: Option<u64>,
    /// From the newest verdict's observation (unix seconds; tokens/s of its newest sample).
    pub advanced_at: Option<f64>,
    pub tokens_per_s: Option<f64>,
    /// The newest stale limit the watch announced and uses.
    pub stale_limit_s: Option<f64>,
    /// (role, path) -> hours to full, from the newest disk check.
    pub disk_hours: BTreeMap<(String, String), f64>,
    /// The bucket: the newest verified step and when (unix seconds), uploads queued and not
    /// yet verified (id -> bytes), failed upload attempts and the newest one's time.
    pub remote_step: Option<u64>,
    pub remote_verified_at: Option<f64>,
    pub remote_open: BTreeMap<String, u64>,
    pub remote_errors: u64,
    pub remote_error_at: Option<f64>,
    pub remote_seen: bool,
}

impl Facts {
    pub fn fold(&mut self, records: &[Record], run: &str) {
        for r in records.iter().filter(|r| r.run == run) {
            self.add(r);
        }
    }

    fn add(&mut self, r: &Record) {
        match r.kind {
            Kind::Relaunch => self.relaunches += 1,
            Kind::Breaker => self.breaker_open = true,
            // A new watch is someone closing the breaker (it exits when one opens).
            Kind::Watch if r.str_field("event") == Some("start") => self.breaker_open = false,
            Kind::Watch if r.str_field("event") == Some("xid") => self.xids += 1,
            Kind::Watch
                if r.str_field("event") == Some(crate::sentinel::calibrate::EVENT)
                    && r.get("in_use").and_then(Value::as_bool) == Some(true) =>
            {
                self.stale_limit_s = r.get("limit_s").and_then(Value::as_f64);
            }
            Kind::Verdict => self.verdict(r),
            Kind::Remote => self.remote(r),
            Kind::Hygiene if r.str_field("check") == Some("disk") => {
                if let Some(t) = r.get("targets") {
                    self.disk(t);
                }
            }
            _ => {}
        }
    }

    fn verdict(&mut self, r: &Record) {
        self.verdict = r.str_field("status").map(str::to_string);
        self.verdict_step = r.step;
        self.checks = r
            .get("checks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some((
                    c.get("check")?.as_str()?.to_string(),
                    c.get("status")?.as_str()?.to_string(),
                ))
            })
            .collect();
        let obs = r.get("observation");
        self.advanced_at = obs
            .and_then(|o| o.get("advanced_at"))
            .and_then(Value::as_f64);
        self.tokens_per_s = obs
            .and_then(|o| o.get("window"))
            .and_then(Value::as_array)
            .and_then(|w| w.last())
            .and_then(|s| s.get("values")?.get("tokens_per_s")?.as_f64());
    }

    fn remote(&mut self, r: &Record) {
        self.remote_seen = true;
        let id = r.str_field("upload_id").unwrap_or_default().to_string();
        let at = r.ts.timestamp_millis() as f64 / 1000.0;
        match r.str_field("event") {
            Some("queued") => {
                self.remote_open
                    .insert(id, r.u64_field("size").unwrap_or(0));
            }
            Some("verified") => {
                self.remote_open.remove(&id);
                if r.step >= self.remote_step || r.step.is_none() {
                    self.remote_step = r.step.or(self.remote_step);
                    self.remote_verified_at = Some(at);
                }
            }
            Some("gave_up") => {
                self.remote_open.remove(&id);
            }
            Some("failed") | Some("mismatch") => {
                self.remote_errors += 1;
                self.remote_error_at = Some(at);
            }
            _ => {}
        }
    }

    /// `targets` as a disk check reports them (a `hygiene` record, or a live report).
    pub fn disk(&mut self, targets: &Value) {
        self.disk_hours = targets
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                Some((
                    (
                        t.get("role")?.as_str()?.to_string(),
                        t.get("path")?.as_str()?.to_string(),
                    ),
                    t.get("hours_to_full")?.as_f64()?,
                ))
            })
            .collect();
    }
}

/// What the daemon itself knows at this tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Live {
    /// Unix seconds of this tick.
    pub now: f64,
    /// The sentinel's state (watch only).
    pub state: Option<&'static str>,
    pub step: Option<u64>,
    pub since_progress_s: Option<f64>,
    pub stale_limit_s: Option<f64>,
    /// Seconds the run was seen working over seconds watched (watch only).
    pub goodput: Option<f64>,
    /// Ticks this daemon made (the exporter fills it in).
    pub ticks: u64,
    /// `[cluster]`: every node of the job as this watch sees it (this node included).
    pub nodes: Vec<NodeLive>,
}

/// One node of the job, as this watch last heard it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeLive {
    pub node: u32,
    pub step: Option<u64>,
    /// Seconds since its record last changed (this watch's clock; this node: 0).
    pub unheard_s: f64,
    pub lost: bool,
}

fn status_code(s: &str) -> Option<u8> {
    match s {
        "pass" => Some(0),
        "warn" => Some(1),
        "fail" => Some(2),
        "unknown" => Some(3),
        _ => None,
    }
}

/// A label value as the exposition format wants it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Out {
    text: String,
    base: String,
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, extra: &[(&str, &str)], v: f64) {
        if !v.is_finite() {
            return;
        }
        let mut labels = self.base.clone();
        for (k, val) in extra {
            let _ = write!(labels, ",{k}=\"{}\"", escape(val));
        }
        let _ = writeln!(self.text, "{name}{{{labels}}} {v}");
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            self.family(name, kind, help);
            self.sample(name, &[], v);
        }
    }
}

/// The textfile for one run, written by `source` ("watch" or "critic").
pub fn format(run: &str, source: &str, facts: &Facts, live: &Live) -> String {
    let mut o = Out {
        text: String::new(),
        base: format!("run=\"{}\",source=\"{}\"", escape(run), escape(source)),
    };
    o.one(
        "roger_last_tick_timestamp_seconds",
        "gauge",
        "Unix time of the daemon's last tick.",
        Some(live.now),
    );
    o.one(
        "roger_ticks_total",
        "counter",
        "Ticks this daemon made since it started (each rewrote this file).",
        Some(live.ticks as f64),
    );
    if let Some(state) = live.state {
        o.family(
            "roger_run_state",
            "gauge",
            "The watch's classification of the run: 1 for the state in force.",
        );
        for s in STATES {
            o.sample(
                "roger_run_state",
                &[("state", s)],
                f64::from(u8::from(s == state)),
            );
        }
    }
    o.one(
        "roger_step",
        "gauge",
        "Newest training step seen.",
        live.step.or(facts.verdict_step).map(|s| s as f64),
    );
    let since = live.since_progress_s.or_else(|| {
        facts
            .advanced_at
            .map(|at| (live.now - at).max(0.0))
            .filter(|_| live.state.is_none())
    });
    o.one(
        "roger_since_progress_seconds",
        "gauge",
        "Seconds since the step last advanced.",
        since,
    );
    o.one(
        "roger_stale_limit_seconds",
        "gauge",
        "Silence the watch tolerates before calling the run wedged (the limit in force).",
        live.stale_limit_s.or(facts.stale_limit_s),
    );
    o.one(
        "roger_tokens_per_second",
        "gauge",
        "Tokens per second of the newest judged sample.",
        facts.tokens_per_s,
    );
    o.one(
        "roger_relaunches_total",
        "counter",
        "Relaunches recorded in the ledger for this run.",
        Some(facts.relaunches as f64),
    );
    o.one(
        "roger_breaker_open",
        "gauge",
        "1 when a loop breaker stopped the run (exit 75) and no watch has started since.",
        Some(f64::from(u8::from(facts.breaker_open))),
    );
    o.one(
        "roger_gpu_xid_events_total",
        "counter",
        "NVIDIA XID events recorded in the ledger for this run.",
        Some(facts.xids as f64),
    );
    if facts.remote_seen {
        o.one(
            "roger_remote_verified_step",
            "gauge",
            "Newest step whose checkpoint is verified in the bucket.",
            facts.remote_step.map(|s| s as f64),
        );
        o.one(
            "roger_remote_verified_age_seconds",
            "gauge",
            "Seconds since the newest checkpoint was verified in the bucket.",
            facts.remote_verified_at.map(|t| (live.now - t).max(0.0)),
        );
        o.one(
            "roger_remote_queued",
            "gauge",
            "Checkpoints queued for the bucket and not verified there yet.",
            Some(facts.remote_open.len() as f64),
        );
        o.one(
            "roger_remote_queued_bytes",
            "gauge",
            "Bytes of the checkpoints queued for the bucket.",
            Some(facts.remote_open.values().sum::<u64>() as f64),
        );
        o.one(
            "roger_remote_upload_errors_total",
            "counter",
            "Failed upload or verify attempts recorded for the bucket.",
            Some(facts.remote_errors as f64),
        );
        o.one(
            "roger_remote_last_error_timestamp_seconds",
            "gauge",
            "Unix time of the newest failed upload or verify attempt.",
            facts.remote_error_at,
        );
    }
    if let Some(code) = facts.verdict.as_deref().and_then(status_code) {
        o.one(
            "roger_verdict_status",
            "gauge",
            "Newest critic verdict: 0 pass, 1 warn, 2 fail, 3 unknown.",
            Some(f64::from(code)),
        );
    }
    let checks: Vec<(&String, u8)> = facts
        .checks
        .iter()
        .filter_map(|(c, s)| Some((c, status_code(s)?)))
        .collect();
    if !checks.is_empty() {
        o.family(
            "roger_check_status",
            "gauge",
            "Newest status per critic check: 0 pass, 1 warn, 2 fail, 3 unknown.",
        );
        for (c, code) in checks {
            o.sample("roger_check_status", &[("check", c)], f64::from(code));
        }
    }
    if !facts.disk_hours.is_empty() {
        o.family(
            "roger_disk_full_in_seconds",
            "gauge",
            "Forecast seconds until the filesystem holding the path is full at the current rate.",
        );
        for ((role, path), h) in &facts.disk_hours {
            o.sample(
                "roger_disk_full_in_seconds",
                &[("role", role), ("path", path)],
                h * 3600.0,
            );
        }
    }
    if !live.nodes.is_empty() {
        let label = |n: &NodeLive| n.node.to_string();
        o.family(
            "roger_cluster_node_step",
            "gauge",
            "Newest step of each node of the job, from its record.",
        );
        for n in &live.nodes {
            if let Some(s) = n.step {
                o.sample("roger_cluster_node_step", &[("node", &label(n))], s as f64);
            }
        }
        o.family(
            "roger_cluster_node_unheard_seconds",
            "gauge",
            "Seconds since each node's record last changed, on this node's clock.",
        );
        for n in &live.nodes {
            o.sample(
                "roger_cluster_node_unheard_seconds",
                &[("node", &label(n))],
                n.unheard_s,
            );
        }
        o.family(
            "roger_cluster_node_lost",
            "gauge",
            "1 for a node named lost (unheard for [cluster] lost_after), else 0.",
        );
        for n in &live.nodes {
            o.sample(
                "roger_cluster_node_lost",
                &[("node", &label(n))],
                f64::from(u8::from(n.lost)),
            );
        }
    }
    o.one(
        "roger_goodput_ratio",
        "gauge",
        "Fraction of the watched time the run was making progress.",
        live.goodput,
    );
    o.text
}

/// Replace `path` with `text`: a temporary in the same directory (ending in `.tmp`, not
/// `.prom`, so the collector never reads it half-written), then a rename. Atomic, not durable:
/// the file is rewritten every tick and only has to be whole. Mode as `File::create` gave it
/// (the collector often runs as another user).
pub fn write_textfile(path: &Path, text: &str) -> Result<()> {
    use crate::sys::fsx::{write_atomic, Durability, Replace};
    write_atomic(
        path,
        text.as_bytes(),
        Replace::new(Durability::Atomic, 0o666),
    )
    .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The daemon's side: follows the ledger and rewrites the file after each tick.
#[derive(Debug)]
pub struct Exporter {
    path: PathBuf,
    run: String,
    source: &'static str,
    facts: Facts,
    /// Working seconds and watched seconds, and the previous tick's (time, working).
    worked: f64,
    watched: f64,
    last: Option<(f64, bool)>,
    ticks: u64,
    /// The newest step seen, kept across a relaunch that has not logged one yet.
    step: Option<u64>,
    /// The last write failed (reported once, not every tick).
    failing: bool,
}

impl Exporter {
    /// Export is on when `[export] textfile` is set.
    pub fn from_config(cfg: &crate::config::Config, source: &'static str) -> Option<Exporter> {
        let path = cfg.export.textfile_for(source)?;
        Some(Exporter {
            path,
            run: cfg.run.name.clone(),
            source,
            facts: Facts::default(),
            worked: 0.0,
            watched: 0.0,
            last: None,
            ticks: 0,
            step: None,
            failing: false,
        })
    }

    /// A disk check the daemon just ran (fresher than the ledger, which records changes only).
    pub fn disk(&mut self, targets: &impl serde::Serialize) {
        if let Ok(v) = serde_json::to_value(targets) {
            self.facts.disk(&v);
        }
    }

    /// Account the time since the previous tick to goodput by the state then in force.
    pub fn observe_state(&mut self, now: f64, working: bool) -> f64 {
        if let Some((at, was_working)) = self.last {
            let dt = (now - at).max(0.0);
            self.watched += dt;
            if was_working {
                self.worked += dt;
            }
        }
        self.last = Some((now, working));
        if self.watched > 0.0 {
            self.worked / self.watched
        } else {
            f64::from(u8::from(working))
        }
    }

    /// Fold in what the ledger gained (`new`, from the daemon's follower), then rewrite the
    /// file. A failure is logged (once until it works again), never fatal: the export must
    /// not stop the watch.
    pub fn tick(&mut self, live: &Live, new: &[Record]) {
        self.ticks += 1;
        self.step = live.step.or(self.step);
        let live = Live {
            ticks: self.ticks,
            step: self.step,
            ..live.clone()
        };
        self.facts.fold(new, &self.run);
        let text = format(&self.run, self.source, &self.facts, &live);
        let result = write_textfile(&self.path, &text);
        match result {
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!("export: {e:#} (will retry every tick)");
            }
            Err(_) => {}
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::info!("export: {} written again", self.path.display());
            }
            Ok(()) => {}
        }
    }
}

#[cfg(test)]
#[path = "export_tests.rs"]
mod tests;
