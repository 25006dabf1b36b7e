//! The page's tables from the ledger: every checkpoint and what became of it, each critic
//! check's statuses over time, and the bands the config declared (for the plots). Pure.

use super::Inputs;
use crate::checkpoints;
use crate::config::Config;
use crate::ledger::{Kind, Record};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

/// One published checkpoint and its fate.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CkptRow {
    pub seq: u64,
    pub step: Option<u64>,
    pub path: String,
    pub size: Option<u64>,
    pub published: DateTime<Utc>,
    /// live, pruned, quarantined, tainted, replaced (published again at the same path).
    pub fate: String,
    /// Why, for pruned/quarantined/tainted.
    pub why: Option<String>,
}

/// One critic check's statuses over the night: (time, step, status), a point per verdict.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CheckStrip {
    pub check: String,
    pub points: Vec<(DateTime<Utc>, Option<u64>, String)>,
    /// Status changes (flapping shows as many).
    pub changes: usize,
    /// The worst status and its reason (the first verdict that had it).
    pub worst: String,
    pub worst_reason: String,
    pub worst_seq: u64,
}

/// The bands the config declared, per phase, for the plots.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Declared {
    pub phases: Vec<PhaseBand>,
    /// The expected lr per step and its absolute tolerance, when a schedule is declared:
    /// sampled at the plot's resolution by the printer through [`Declared::lr_at`].
    pub schedule: Option<crate::config::ScheduleConfig>,
    pub lr_tolerance: Option<f64>,
    pub total_steps: Option<u64>,
    /// The log key of each plotted metric (as in `series::PLOTTED`), from `[metrics]`.
    pub keys: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PhaseBand {
    pub name: String,
    pub from: u64,
    pub to: Option<u64>,
    pub loss: Option<(f64, f64)>,
    pub grad_norm_max: Option<f64>,
    pub tokens_per_s_min: Option<f64>,
    pub vram_max_gib: Option<f64>,
}

impl Declared {
    pub fn from_config(cfg: &Config) -> Declared {
        Declared {
            phases: cfg
                .phases
                .iter()
                .map(|p| PhaseBand {
                    name: p.name.clone(),
                    from: p.from,
                    to: p.to,
                    loss: p.loss.as_ref().map(|b| (b.lo, b.hi)),
                    grad_norm_max: p.grad_norm_max,
                    tokens_per_s_min: p.tokens_per_s_min,
                    vram_max_gib: p.vram_max_gib,
                })
                .collect(),
            schedule: cfg.schedule.clone(),
            lr_tolerance: cfg.schedule.as_ref().map(|s| s.tolerance * s.peak_lr),
            total_steps: cfg.planned_last(),
            keys: {
                let m = &cfg.metrics;
                vec![
                    m.loss.clone(),
                    m.eval_loss.clone(),
                    m.lr.first().to_string(),
                    m.grad_norm.clone(),
                    m.tokens_per_s.clone(),
                    m.vram.clone(),
                ]
            },
        }
    }

    /// The declared lr at `step` (None without a schedule or past an undeclared end).
    pub fn lr_at(&self, step: u64) -> Option<f64> {
        let s = self.schedule.as_ref()?;
        if s.kind == crate::config::ScheduleKind::Plateau {
            return None;
        }
        Some(crate::schedule::expected(s, step)).filter(|v| v.is_finite())
    }
}

/// The reasons of a verdict's failing checks, joined.
pub fn failing_reasons(r: &Record) -> String {
    let reasons: Vec<String> = r
        .get("checks")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .filter(|c| c.get("status").and_then(|s| s.as_str()) == Some("fail"))
        .map(|c| {
            format!(
                "{}: {}",
                c.get("check").and_then(|s| s.as_str()).unwrap_or("?"),
                c.get("reason").and_then(|s| s.as_str()).unwrap_or("")
            )
        })
        .collect();
    reasons.join("; ")
}

pub fn checkpoints(mine: &[&Record], inputs: &Inputs) -> Vec<CkptRow> {
    let owned: Vec<Record> = mine.iter().map(|r| (*r).clone()).collect();
    let run = &inputs.config.run.name;
    let fails = checkpoints::fails(&owned, run);
    let quarantined = checkpoints::quarantined(inputs.records);
    let mut rows: Vec<CkptRow> = Vec::new();
    for r in mine {
        match r.kind {
            Kind::Publish => {
                let Some(path) = r.str_field("path") else {
                    continue;
                };
                let ck = checkpoints::Checkpoint {
                    path: path.into(),
                    sha256: r.str_field("sha256").unwrap_or_default().into(),
                    size: r.u64_field("size").unwrap_or(0),
                    step: r.step,
                    seq: r.seq,
                };
                let taint = fails.iter().find_map(|f| f.taints(&ck));
                let (fate, why) = if quarantined.contains(&ck.path) {
                    ("quarantined", None)
                } else if let Some(why) = taint {
                    ("tainted", Some(why))
                } else {
                    ("live", None)
                };
                // Published again at the same path (a relaunch redoing the step): the old
                // row stays, as what it was, with what replaced it.
                for old in rows
                    .iter_mut()
                    .filter(|c| c.path == path && matches!(c.fate.as_str(), "live" | "tainted"))
                {
                    if old.fate == "live" {
                        old.fate = "replaced".into();
                    }
                    let by = format!("replaced by the publish #{}", r.seq);
                    old.why = Some(match old.why.take() {
                        Some(w) => format!("{w}; {by}"),
                        None => by,
                    });
                }
                rows.push(CkptRow {
                    seq: r.seq,
                    step: r.step,
                    path: path.to_string(),
                    size: r.u64_field("size"),
                    published: r.ts,
                    fate: fate.into(),
                    why,
                });
            }
            Kind::Prune => {
                let Some(p) = r.str_field("path") else {
                    continue;
                };
                if let Some(c) = rows
                    .iter_mut()
                    .rev()
                    .find(|c| c.path == p && matches!(c.fate.as_str(), "live" | "tainted"))
                {
                    c.fate = "pruned".into();
                    c.why = r.str_field("reason").map(String::from);
                }
            }
            _ => {}
        }
    }
    rows
}

pub fn critic_strips(mine: &[&Record], since: Option<DateTime<Utc>>) -> Vec<CheckStrip> {
    let mut by: BTreeMap<String, CheckStrip> = BTreeMap::new();
    let rank = |s: &str| match s {
        "fail" => 3,
        "warn" => 2,
        "unknown" => 1,
        _ => 0,
    };
    for r in mine
        .iter()
        .filter(|r| r.kind == Kind::Verdict && since.is_none_or(|s| r.ts >= s))
    {
        for c in r
            .get("checks")
            .and_then(|c| c.as_array())
            .into_iter()
            .flatten()
        {
            let name = c.get("check").and_then(|s| s.as_str()).unwrap_or("?");
            let status = c
                .get("status")
                .and_then(|s| s.as_str())
                .unwrap_or("unknown");
            let reason = c.get("reason").and_then(|s| s.as_str()).unwrap_or("");
            let strip = by.entry(name.to_string()).or_insert_with(|| CheckStrip {
                check: name.to_string(),
                points: Vec::new(),
                changes: 0,
                worst: status.to_string(),
                worst_reason: reason.to_string(),
                worst_seq: r.seq,
            });
            if strip.points.last().is_some_and(|p| p.2 != status) {
                strip.changes += 1;
            }
            if rank(status) > rank(&strip.worst) {
                strip.worst = status.to_string();
                strip.worst_reason = reason.to_string();
                strip.worst_seq = r.seq;
            }
            strip.points.push((r.ts, r.step, status.to_string()));
        }
    }
    by.into_values().collect()
}
