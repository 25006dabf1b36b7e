//! From the run's ledger records (and the log's probes around them): the incidents (one row
//! each: what was detected, what roger did, how long the run was down, the seqs), the plots'
//! vertical markers, and goodput (where the wall time went). Pure.

use super::series::Series;
use super::{unix, Inputs};
use crate::ledger::{Kind, Record};
use chrono::{DateTime, Utc};
use serde::Serialize;

pub use super::tables::{CheckStrip, CkptRow, Declared};

/// One incident of the night.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Incident {
    /// wedge, crash, zombie, divergence, rejected publish, disk, xid, breaker, critic fail.
    pub kind: String,
    pub detected: DateTime<Utc>,
    /// The step it was detected at (a divergence: the failing verdict's own step).
    pub step: Option<u64>,
    /// A divergence or critic fail: the step it began at, from the verdict (the earliest
    /// `diverged_at`/`began_at` of its failing checks, as checkpoint trust reads it).
    pub began_at: Option<u64>,
    /// A divergence: where the relaunch resumed; `Some(None)` (JSON `null`) when it started
    /// from scratch, left out of the JSON when there was no relaunch (or no divergence).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back_to: Option<Option<u64>>,
    /// What was seen, in one sentence with its numbers.
    pub what: String,
    /// What roger did about it, in order.
    pub actions: Vec<String>,
    /// From the last logged step before it to the first step after the relaunch.
    pub down_s: Option<f64>,
    pub seqs: Vec<u64>,
    /// Evidence files (py-spy dumps, rejected copies), as recorded.
    pub evidence: Vec<String>,
}

impl Incident {
    /// "began at step 150, detected at step 210, rolled back to step 140": the numbers a
    /// reader needs to know which data and which checkpoints to distrust. `None` for incidents
    /// that are not about a divergence.
    pub fn timeline(&self) -> Option<String> {
        if self.began_at.is_none() && self.rolled_back_to.is_none() {
            return None;
        }
        let mut parts = Vec::new();
        if let Some(b) = self.began_at {
            parts.push(format!("began at step {b}"));
        }
        if let Some(d) = self.step {
            parts.push(format!("detected at step {d}"));
        }
        match self.rolled_back_to {
            Some(Some(s)) => parts.push(format!("rolled back to step {s}")),
            Some(None) => parts.push("restarted from scratch".into()),
            None => {}
        }
        Some(parts.join(", "))
    }
}

/// A vertical line on every plot.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Marker {
    pub step: u64,
    /// kill, rollback, onset (where a divergence began), relaunch, breaker, rejected, xid.
    pub kind: String,
    pub label: String,
    pub seq: u64,
}

/// Where the wall time went, in seconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Goodput {
    pub wall_s: f64,
    pub training_s: f64,
    /// Last progress → the kill (or the exit roger saw).
    pub detect_s: f64,
    /// Kill → the first new step.
    pub restart_s: f64,
    /// Steps done again after a relaunch or rollback.
    pub recomputed_steps: u64,
    pub recomputed_s: f64,
    /// Silences inside a launch that ended in no kill (long evals, grinds).
    pub grind_s: f64,
    /// The trainer waiting on `roger publish`.
    pub publish_s: f64,
    /// training / wall; `None` without a wall.
    pub ratio: Option<f64>,
}

pub struct Events {
    pub incidents: Vec<Incident>,
    pub markers: Vec<Marker>,
    pub goodput: Goodput,
    pub checkpoints: Vec<CkptRow>,
    pub critic: Vec<CheckStrip>,
}

/// A `watch` record that starts a trainer: `start` or `launched`.
pub fn is_launch(r: &Record) -> bool {
    matches!(r.str_field("event"), Some("start") | Some("launched"))
}

/// Records whose instant the log is probed around: goodput's edges, and the markers that
/// may lack a step of their own.
pub fn needs_probe(r: &Record) -> bool {
    match r.kind {
        Kind::Kill | Kind::Relaunch | Kind::Publish | Kind::Breaker => true,
        Kind::Watch => is_launch(r) || matches!(r.str_field("event"), Some("exited") | Some("xid")),
        Kind::Note => r.str_field("event") == Some("publish-rejected"),
        _ => false,
    }
}

fn event(r: &Record) -> Option<&str> {
    r.str_field("event")
}

fn first_reason(r: &Record) -> String {
    r.get("reasons")
        .and_then(|v| v.as_array())
        .and_then(|a| a.first())
        .and_then(|v| v.as_str())
        .map(String::from)
        .or_else(|| r.str_field("evidence").map(String::from))
        .unwrap_or_default()
}

impl Events {
    pub fn build(mine: &[&Record], series: &Series, inputs: &Inputs) -> Events {
        let since = inputs.since;
        let in_window = |r: &Record| since.is_none_or(|s| r.ts >= s);
        let step_s = series.step_seconds();
        let probe = |r: &Record| series.probe_at(unix(r.ts)).copied();
        let step_at = |r: &Record| {
            r.step
                .or_else(|| probe(r).and_then(|p| p.before.map(|b| b.0)))
        };
        let mut incidents: Vec<Incident> = Vec::new();
        let mut markers = Vec::new();
        let mut g = Goodput::default();
        // The incident a relaunch belongs to, and the kill/exit instant it measures from.
        let mut open: Option<(usize, f64)> = None;
        let mut last_status: Option<&str> = None;
        let killed_verdicts: Vec<u64> = mine
            .iter()
            .filter(|r| r.kind == Kind::Kill)
            .filter_map(|r| r.u64_field("verdict_seq"))
            .collect();
        for r in mine.iter().copied() {
            let shown = in_window(r);
            match (r.kind, event(r)) {
                (Kind::Kill, _) => {
                    let reason = r.str_field("reason").unwrap_or("kill");
                    let pids = r
                        .get("targets")
                        .and_then(|t| t.as_array())
                        .map_or(0, |a| a.len());
                    let dry = r.get("dry_run").and_then(|d| d.as_bool()) == Some(true);
                    let did = if dry {
                        format!(
                            "dry run: would have stopped {pids} process(es) (#{})",
                            r.seq
                        )
                    } else {
                        format!("stopped {pids} process(es) (#{})", r.seq)
                    };
                    let cleanup = matches!(reason, "leftover" | "vram_leftover");
                    if cleanup {
                        if let Some((i, _)) = open {
                            incidents[i]
                                .actions
                                .push(format!("cleaned leftovers: {did}"));
                            incidents[i].seqs.push(r.seq);
                        }
                        continue;
                    }
                    if !shown {
                        open = None;
                        continue;
                    }
                    let kind = if reason == "divergence" {
                        "divergence"
                    } else {
                        reason
                    };
                    let mut seqs = vec![r.seq];
                    if let Some(v) = r.u64_field("verdict_seq") {
                        seqs.insert(0, v);
                    }
                    let mut evidence = Vec::new();
                    if let Some(e) = r.str_field("evidence") {
                        evidence.push(e.to_string());
                    }
                    let p = probe(r);
                    if let Some(before) = p.and_then(|p| p.before) {
                        g.detect_s += (unix(r.ts) - before.1).max(0.0);
                    }
                    // The verdict the kill acted on holds the onset; the kill's own copy
                    // (one check's) when that verdict is not in the ledger.
                    let began_at = (kind == "divergence")
                        .then(|| {
                            let v = r.u64_field("verdict_seq");
                            mine.iter()
                                .find(|v2| {
                                    v.is_some_and(|v| v2.kind == Kind::Verdict && v2.seq == v)
                                })
                                .and_then(|v| crate::checkpoints::onset(v))
                                .or(r.u64_field("diverged_at"))
                        })
                        .flatten();
                    incidents.push(Incident {
                        kind: kind.to_string(),
                        detected: r.ts,
                        step: r.u64_field("verdict_step").or_else(|| step_at(r)),
                        began_at,
                        rolled_back_to: None,
                        what: first_reason(r),
                        actions: vec![did],
                        down_s: None,
                        seqs,
                        evidence,
                    });
                    open = Some((
                        incidents.len() - 1,
                        p.and_then(|p| p.before).map_or(unix(r.ts), |b| b.1),
                    ));
                    // Where the bad stretch began, beside where it was caught.
                    if let Some(b) = began_at {
                        markers.push(Marker {
                            step: b,
                            kind: "onset".into(),
                            label: format!(
                                "diverged #{}",
                                r.u64_field("verdict_seq").unwrap_or(r.seq)
                            ),
                            seq: r.seq,
                        });
                    }
                    markers.push(Marker {
                        step: step_at(r).unwrap_or(0),
                        kind: if kind == "divergence" {
                            "rollback"
                        } else {
                            "kill"
                        }
                        .into(),
                        label: if kind == "divergence" {
                            format!("rollback #{}", r.seq)
                        } else {
                            format!("{kind} #{}", r.seq)
                        },
                        seq: r.seq,
                    });
                }
                (Kind::Watch, Some("exited")) => {
                    let code = r.get("code").and_then(|c| c.as_i64());
                    let signal = r.get("signal").and_then(|c| c.as_i64());
                    if code == Some(0) || !shown {
                        continue;
                    }
                    let how = r.str_field("how").unwrap_or("exited").to_string();
                    let p = probe(r);
                    if let Some(before) = p.and_then(|p| p.before) {
                        g.detect_s += (unix(r.ts) - before.1).max(0.0);
                    }
                    incidents.push(Incident {
                        kind: "crash".into(),
                        detected: r.ts,
                        step: step_at(r),
                        began_at: None,
                        rolled_back_to: None,
                        what: match signal {
                            Some(s) => format!("{how} (signal {s})"),
                            None => how,
                        },
                        actions: Vec::new(),
                        down_s: None,
                        seqs: vec![r.seq],
                        evidence: Vec::new(),
                    });
                    open = Some((
                        incidents.len() - 1,
                        p.and_then(|p| p.before).map_or(unix(r.ts), |b| b.1),
                    ));
                    markers.push(Marker {
                        step: step_at(r).unwrap_or(0),
                        kind: "kill".into(),
                        label: format!("crash #{}", r.seq),
                        seq: r.seq,
                    });
                }
                (Kind::Relaunch, _) => {
                    let ckpt_step = r.u64_field("ckpt_step");
                    let attempt = r.u64_field("attempt").unwrap_or(0);
                    let from = match (ckpt_step, r.str_field("ckpt")) {
                        (Some(s), _) => format!("the checkpoint of step {s}"),
                        (None, Some(p)) => p.to_string(),
                        (None, None) => "scratch".into(),
                    };
                    let reached = probe(r).and_then(|p| p.before).map(|b| b.0);
                    if let (Some(reached), true) = (reached, shown) {
                        let redo = reached.saturating_sub(ckpt_step.unwrap_or(0));
                        g.recomputed_steps += redo;
                        g.recomputed_s += redo as f64 * step_s.unwrap_or(0.0);
                    }
                    if let Some((i, _)) = open {
                        let inc = &mut incidents[i];
                        if inc.kind == "divergence" && inc.rolled_back_to.is_none() {
                            inc.rolled_back_to = Some(ckpt_step);
                        }
                        inc.actions.push(format!(
                            "relaunched from {from}, attempt {attempt} (#{})",
                            r.seq
                        ));
                        incidents[i].seqs.push(r.seq);
                    }
                    if shown {
                        markers.push(Marker {
                            step: ckpt_step.unwrap_or(0),
                            kind: "relaunch".into(),
                            label: format!("relaunch #{}", r.seq),
                            seq: r.seq,
                        });
                    }
                }
                (Kind::Watch, Some("launched")) => {
                    if let Some((i, down_from)) = open.take() {
                        let first = probe(r).and_then(|p| p.after);
                        if let Some((_, t)) = first {
                            incidents[i].down_s = Some((t - down_from).max(0.0));
                            let killed_at = unix(incidents[i].detected);
                            g.restart_s += (t - killed_at).max(0.0);
                        }
                        incidents[i].seqs.push(r.seq);
                    }
                }
                (Kind::Breaker, _) if shown => {
                    let name = r.str_field("breaker").unwrap_or("breaker");
                    incidents.push(Incident {
                        kind: "breaker".into(),
                        detected: r.ts,
                        step: step_at(r),
                        began_at: None,
                        rolled_back_to: None,
                        what: format!("breaker {name}: {}", r.str_field("evidence").unwrap_or("")),
                        actions: vec![format!("stopped relaunching (#{})", r.seq)],
                        down_s: None,
                        seqs: vec![r.seq],
                        evidence: Vec::new(),
                    });
                    markers.push(Marker {
                        step: step_at(r).unwrap_or(0),
                        kind: "breaker".into(),
                        label: format!("breaker {name} #{}", r.seq),
                        seq: r.seq,
                    });
                    open = None;
                }
                (Kind::Note, Some("publish-rejected")) if shown => {
                    incidents.push(Incident {
                        kind: "rejected publish".into(),
                        detected: r.ts,
                        step: step_at(r),
                        began_at: None,
                        rolled_back_to: None,
                        what: format!(
                            "{}: {}",
                            r.str_field("path").unwrap_or("a checkpoint"),
                            r.str_field("reason").unwrap_or("verification failed")
                        ),
                        actions: vec![format!(
                            "nothing published; the bad copy kept as evidence (#{})",
                            r.seq
                        )],
                        down_s: None,
                        seqs: vec![r.seq],
                        evidence: r
                            .str_field("evidence")
                            .map(String::from)
                            .into_iter()
                            .collect(),
                    });
                    markers.push(Marker {
                        step: step_at(r).unwrap_or(0),
                        kind: "rejected".into(),
                        label: format!("publish rejected #{}", r.seq),
                        seq: r.seq,
                    });
                }
                (Kind::Watch, Some("xid")) if shown => {
                    let code = r.u64_field("xid").unwrap_or(0);
                    incidents.push(Incident {
                        kind: "xid".into(),
                        detected: r.ts,
                        step: step_at(r),
                        began_at: None,
                        rolled_back_to: None,
                        what: format!(
                            "XID {code} on GPU {} ({}): {}",
                            r.str_field("device").unwrap_or("?"),
                            r.str_field("class").unwrap_or("other"),
                            r.str_field("meaning").unwrap_or("")
                        ),
                        actions: vec![format!("recorded (#{})", r.seq)],
                        down_s: None,
                        seqs: vec![r.seq],
                        evidence: Vec::new(),
                    });
                    markers.push(Marker {
                        step: step_at(r).unwrap_or(0),
                        kind: "xid".into(),
                        label: format!("XID {code} #{}", r.seq),
                        seq: r.seq,
                    });
                }
                (Kind::Hygiene, _) if shown && r.str_field("check") == Some("disk") => {
                    let status = r.str_field("status").unwrap_or("unknown");
                    if matches!(status, "warn" | "fail") {
                        incidents.push(Incident {
                            kind: "disk".into(),
                            detected: r.ts,
                            step: r.step,
                            began_at: None,
                            rolled_back_to: None,
                            what: format!("disk {status}: {}", r.str_field("reason").unwrap_or("")),
                            actions: vec![format!("warned (#{})", r.seq)],
                            down_s: None,
                            seqs: vec![r.seq],
                            evidence: Vec::new(),
                        });
                    }
                }
                (Kind::Verdict, _) => {
                    let status = r.str_field("status");
                    let newly = status == Some("fail") && last_status != Some("fail");
                    last_status = status;
                    if newly && shown && !killed_verdicts.contains(&r.seq) {
                        incidents.push(Incident {
                            kind: "critic fail".into(),
                            detected: r.ts,
                            step: r.step,
                            began_at: crate::checkpoints::onset(r),
                            rolled_back_to: None,
                            what: super::tables::failing_reasons(r),
                            actions: vec!["none: not a rollback_on check, or no watch".into()],
                            down_s: None,
                            seqs: vec![r.seq],
                            evidence: Vec::new(),
                        });
                    }
                }
                _ => {}
            }
        }
        g.publish_s = publish_blocked(mine, series, in_window, step_s);
        g.grind_s = series
            .gaps
            .iter()
            .filter(|gap| since.is_none_or(|s| gap.1 >= unix(s)))
            .filter(|gap| {
                !mine
                    .iter()
                    .any(|r| r.kind == Kind::Publish && (gap.0..=gap.1).contains(&unix(r.ts)))
            })
            .map(|gap| gap.1 - gap.0 - step_s.unwrap_or(0.0))
            .filter(|s| *s > 0.0)
            .fold(0.0, |a, b| a + b);
        g.wall_s = wall(mine, series, inputs);
        let lost = g.detect_s + g.restart_s + g.recomputed_s + g.grind_s + g.publish_s;
        g.training_s = (g.wall_s - lost).max(0.0);
        g.ratio = (g.wall_s > 0.0).then(|| g.training_s / g.wall_s);
        markers.sort_by_key(|m| (m.step, m.seq));
        Events {
            incidents,
            markers,
            goodput: g,
            checkpoints: super::tables::checkpoints(mine, inputs),
            critic: super::tables::critic_strips(mine, since),
        }
    }
}

/// The trainer's pause around each publish: the log's gap across it less one step's time.
fn publish_blocked(
    mine: &[&Record],
    series: &Series,
    in_window: impl Fn(&Record) -> bool,
    step_s: Option<f64>,
) -> f64 {
    let Some(step_s) = step_s else {
        return 0.0;
    };
    mine.iter()
        .filter(|r| r.kind == Kind::Publish && in_window(r))
        .filter_map(|r| series.probe_at(unix(r.ts)))
        .filter_map(|p| Some(p.after?.1 - p.before?.1 - step_s))
        .filter(|s| *s > 0.0 && *s < 3600.0)
        .fold(0.0, |a, b| a + b)
}

/// From the first thing seen (a launch or a sample) in the window to the end: the watch's
/// `done` when the run is over, else `now`.
fn wall(mine: &[&Record], series: &Series, inputs: &Inputs) -> f64 {
    let since = inputs.since.map(unix);
    let first_launch = mine
        .iter()
        .find(|r| r.kind == Kind::Watch && is_launch(r))
        .map(|r| unix(r.ts));
    let first_sample = series.segments.first().and_then(|s| s.first_time);
    let start = match (first_launch, first_sample) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => match a.or(b) {
            Some(t) => t,
            None => return 0.0,
        },
    };
    let start = since.map_or(start, |s| start.max(s));
    let done = mine
        .iter()
        .rev()
        .find(|r| r.kind == Kind::Watch)
        .filter(|r| event(r) == Some("done"))
        .map(|r| unix(r.ts));
    let end = done.unwrap_or_else(|| unix(inputs.now));
    (end - start).max(0.0)
}
