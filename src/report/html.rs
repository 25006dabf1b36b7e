//! The page: one self-contained HTML file (inline CSS and SVG, no script, no font, no fetch),
//! light or dark by `prefers-color-scheme`. maud writes it, so everything from logs and the
//! ledger is escaped by the template, not by hand. Pure: the same night gives the same bytes.

use super::headline::human_duration;
use super::plot::{self, PLOTS};
use super::{Goodput, Night, State};
use crate::config::units::format_bytes;
use maud::{html, Markup, PreEscaped, DOCTYPE};
use std::path::Path;

const CSS: &str = include_str!("page.css");
/// Checkpoint rows shown (newest); the rest are counted.
const CKPT_ROWS: usize = 40;
/// Incident rows shown (first ones); the rest are counted.
const INCIDENT_ROWS: usize = 200;

/// The page. `dir`: where it will be written, so evidence files link by relative path.
pub fn page(n: &Night, dir: Option<&Path>) -> String {
    let h = &n.headline;
    let state_class = match h.state {
        State::Ok => "ok",
        State::Attention => "attention",
        State::Stopped => "stopped",
        State::Unknown => "unknown",
    };
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { "roger · " (n.run) " · " (h.state.as_str()) }
                style { (PreEscaped(CSS)) }
            }
            body {
                header.headline.(state_class) {
                    div.top {
                        span.badge { (h.state.as_str()) }
                        h1 { span.run { (n.run) } }
                    }
                    p.why id="why" { (h.why) }
                    @for a in &h.also { p.also { "Also: " (a) } }
                    (facts(n))
                }
                main {
                    section id="curves" {
                        h2 { "Curves against what was declared" }
                        p.note {
                            "x: step, 0 to " (plot::x_max(n)) ". Shaded: the declared band of each phase. "
                            "Each launch is its own line; vertical lines are roger's actions (hover for the ledger seq)."
                            @if n.segments.len() > 1 { " " (n.segments.len()) " timeline segments." }
                        }
                        // Only what the log has: a panel of nothing is noise to a reader at 7am.
                        @let (drawn, absent): (Vec<_>, Vec<_>) = PLOTS.iter().partition(|s| plot::present(n, s));
                        @if drawn.is_empty() { p.note { "The log has none of the plotted series yet." } }
                        @for spec in &drawn { (plot::plot(n, spec)) }
                        @if !drawn.is_empty() && !absent.is_empty() {
                            p.note.absent { "Not in the log, so not drawn: " (absent.iter().map(|s| s.title).collect::<Vec<_>>().join(", ")) "." }
                        }
                    }
                    section id="incidents" { (incidents(n, dir)) }
                    @if let Some(j) = &n.job { section id="nodes" { (nodes(j)) } }
                    section id="goodput" { (goodput(&n.goodput)) }
                    section id="checkpoints" { (checkpoints(n)) }
                    section id="critic" { (critic(n)) }
                    section id="disk" { (disk(n)) }
                }
                footer {
                    "Made by roger report at " (n.now.format("%Y-%m-%d %H:%M:%S UTC"))
                    " from the ledger (" (h.last_record_seq.map_or("no records".to_string(), |s| format!("to seq {s}"))) ")"
                    " and the log (" (n.samples) " samples"
                    @if h.log_garbage > 0 { ", " (h.log_garbage) " unreadable lines" }
                    ")."
                    @if let Some(s) = n.since { " Incidents and goodput since " (s.format("%Y-%m-%d %H:%M UTC")) "." }
                }
            }
        }
    };
    markup.into_string()
}

fn ago(n: &Night, t: chrono::DateTime<chrono::Utc>) -> String {
    human_duration((n.now - t).num_milliseconds() as f64 / 1000.0)
}

fn facts(n: &Night) -> Markup {
    let h = &n.headline;
    let pct = match (h.step, h.total_steps) {
        (Some(s), Some(t)) if t > 0 => Some(100.0 * s.min(t) as f64 / t as f64),
        _ => None,
    };
    html! {
        dl.facts {
            div {
                dt { "Step" }
                dd {
                    (h.step.map_or("none logged".to_string(), |s| s.to_string()))
                    @if let Some(t) = h.total_steps { " of " (t) }
                    @if let Some(p) = pct {
                        " (" (format!("{p:.1}")) "%)"
                        div.progress { div style=(format!("width:{p:.1}%")) {} }
                    }
                }
            }
            div {
                dt { "Time to finish" }
                dd {
                    @if let Some(e) = &h.eta {
                        (human_duration(e.seconds_left)) " · ~" (e.finish_at.format("%a %H:%M UTC"))
                        small { " at " (format!("{:.3}", e.step_seconds)) " s/step (median of the newest steps)" }
                    } @else if h.finished { "finished" } @else { "unknown (no total_steps or no step times)" }
                }
            }
            div {
                dt { "Last good checkpoint" }
                dd {
                    @if let Some(c) = &h.last_good {
                        "step " (c.step.map_or("?".into(), |s| s.to_string())) ", " (human_duration(c.age_s)) " ago, "
                        @match c.verified { Some(true) => span.good { "verified now" }, _ => span.muted title="roger report --verify re-hashes it" { "not re-hashed" } }
                        small { " #" (c.seq) " " (c.path) }
                    } @else { span.bad { "none" } }
                }
            }
            @if let Some(o) = &h.overfitting {
                div { dt { "Overfitting" } dd { span.bad { "verdict #" (o.seq) " " (o.status.to_uppercase()) } " · " (o.mark.describe()) } }
            }
            @if let Some(q) = &h.queued_publishes {
                div { dt { "Queued publishes" } dd { (q.words()) } }
            }
            @if let Some(b) = &h.bucket {
                div { dt { "Bucket" } dd { (b.words()) } }
            }
            div { dt { "Phase" } dd { (h.phase.clone().unwrap_or_else(|| "—".into())) } }
            div {
                dt { "roger acted" }
                dd { (h.kills) " kills · " (h.relaunches) " relaunches · " (h.breakers) " breakers" }
            }
            div {
                dt { "Disk" }
                dd {
                    @match h.disk_hours_to_full {
                        Some(hrs) => { "full in " (human_duration(hrs * 3600.0)) }
                        None => { @if n.disk.is_empty() { "not measured" } @else { "not filling" } }
                    }
                }
            }
            div {
                dt { "Critic" }
                dd {
                    @if let Some(v) = &h.last_verdict {
                        span class=(format!("st {}", v.status)) { (v.status) } " at step " (v.step.map_or("?".into(), |s| s.to_string())) small { " #" (v.seq) ", " (ago(n, v.at)) " ago" }
                    } @else { "no verdict" }
                }
            }
            div {
                dt { "roger last looked" }
                dd {
                    @if let Some(t) = h.last_record_at { (ago(n, t)) " ago" small { " #" (h.last_record_seq.unwrap_or(0)) } } @else { "never" }
                    @if let Some(t) = h.last_step_at { small { "; newest step " (ago(n, t)) " ago" } }
                }
            }
        }
    }
}

fn incidents(n: &Night, dir: Option<&Path>) -> Markup {
    html! {
        h2 { "Incidents" small { " " (n.incidents.len()) } }
        @if n.incidents.is_empty() {
            p.note { "None: the run went as declared." }
        } @else {
            table.incidents {
                thead { tr { th { "detected" } th { "what" } th { "step" } th { "roger did" } th { "down" } th { "ledger" } th { "evidence" } } }
                tbody {
                    @for i in n.incidents.iter().take(INCIDENT_ROWS) {
                        tr class=(format!("incident k-{}", i.kind.replace(' ', "-"))) {
                            td.t { (i.detected.format("%m-%d %H:%M:%S")) }
                            td { b { (i.kind) } br; @if let Some(t) = i.timeline() { span.timeline { (t) } br; } span.what { (i.what) } }
                            td.n { (i.step.map_or("—".into(), |s| s.to_string())) }
                            td { @for a in &i.actions { div { (a) } } }
                            td.n { (i.down_s.map_or("—".into(), human_duration)) }
                            td.seq { @for s in &i.seqs { "#" (s) " " } }
                            td.t {
                                @for e in &i.evidence {
                                    @let name = e.rsplit('/').next().unwrap_or(e);
                                    @match link(e, dir) { Some(href) => { a href=(href) title=(e) { "evidence" } " " }, None => { span.muted title=(e) { (name) } " " } }
                                }
                            }
                        }
                    }
                }
            }
            @if n.incidents.len() > INCIDENT_ROWS { p.note { "and " (n.incidents.len() - INCIDENT_ROWS) " more (roger report --json)" } }
        }
    }
}

/// The job (`[cluster]`): one row per node, its newest complete step, its incidents with the
/// node each names.
fn nodes(j: &crate::cluster::view::JobView) -> Markup {
    html! {
        h2 { "Nodes" small { " " (j.nodes.len()) } }
        p.note {
            @match &j.complete {
                Some(c) => { "Newest complete step: " b { (c.step) } " (every node's part verified; the job's latest.json, committed by node " (c.committed_by) ")." }
                None => { "No step is complete on every node yet." }
            }
        }
        table.nodes {
            thead { tr { th { "node" } th { "state" } th { "step" } th { "last heard" } th { "its part" } } }
            tbody {
                @for r in &j.nodes {
                    tr class=(if r.lost { "lost" } else { "" }) {
                        td.n { (r.node) }
                        td { (r.state.as_deref().unwrap_or("never reported")) @if r.lost { " " b { "LOST" } } }
                        td.n { (r.step.map_or("—".into(), |s| s.to_string())) }
                        td.n { (r.age_s.map_or("—".into(), |a| format!("{} ago", human_duration(a.max(0.0))))) }
                        td { (r.part.as_deref().unwrap_or("—")) }
                    }
                }
            }
        }
        @if !j.incidents.is_empty() {
            h2 { "Job incidents" small { " " (j.incidents.len()) } }
            table.incidents {
                thead { tr { th { "id" } th { "cause" } th { "node" } th { "step" } th { "every node" } th { "why" } } }
                tbody {
                    @for v in &j.incidents {
                        tr {
                            td { (v.id) }
                            td { (v.cause) }
                            td.n { (v.node.map_or("—".into(), |n| n.to_string())) @if !v.ranks.is_empty() { br; small { "rank " (v.ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(",")) } } }
                            td.n { (v.last_step.map_or("—".into(), |s| s.to_string())) }
                            td { (serde_json::to_value(v.action).ok().and_then(|a| a.as_str().map(String::from)).unwrap_or_default()) }
                            td { small { (v.reason) } }
                        }
                    }
                }
            }
        }
        @for p in &j.problems { p.note { "Unreadable: " (p) } }
    }
}

fn goodput(g: &Goodput) -> Markup {
    let parts: [(&str, &str, f64); 6] = [
        ("training", "training", g.training_s),
        ("detect", "time to detect", g.detect_s),
        ("restart", "restart", g.restart_s),
        ("recompute", "recomputed steps", g.recomputed_s),
        ("grind", "grind", g.grind_s),
        ("publish", "blocked in publish", g.publish_s),
    ];
    let total: f64 = parts.iter().map(|p| p.2).sum::<f64>().max(g.wall_s);
    let mut x = 0.0;
    let bars: Vec<(&str, &str, f64, f64, f64)> = parts
        .iter()
        .filter(|p| p.2 > 0.0 && total > 0.0)
        .map(|(c, l, s)| {
            let w = 940.0 * s / total;
            let at = x;
            x += w;
            (*c, *l, at, w, *s)
        })
        .collect();
    html! {
        h2 { "Goodput" }
        @match g.ratio {
            Some(r) => p.big { (format!("{:.1}", 100.0 * r)) "% " span.muted { "of " (human_duration(g.wall_s)) " of wall time went to new training steps" } },
            None => p.note { "No wall time yet." },
        }
        svg.goodput viewBox="0 0 940 28" preserveAspectRatio="none" role="img" aria-label="goodput stacked bar" {
            @for (c, l, at, w, s) in &bars {
                rect class=(format!("gp {c}")) x=(format!("{at:.1}")) y="0" width=(format!("{w:.1}")) height="28" { title { (l) ": " (human_duration(*s)) } }
            }
        }
        table.goodput {
            tbody {
                @for (c, l, s) in parts {
                    tr {
                        td { span class=(format!("sw gp {c}")) {} " " (l) }
                        td.n { (human_duration(s)) }
                        td.n { @if g.wall_s > 0.0 { (format!("{:.1}", 100.0 * s / g.wall_s)) "%" } }
                        td.muted { @if c == "recompute" { (g.recomputed_steps) " steps done again after relaunches and rollbacks" } }
                    }
                }
            }
        }
        p.note { "For scale: Llama 3 reports more than 90% effective training time over its 54-day run; ByteRobust reports 97%." }
    }
}

fn checkpoints(n: &Night) -> Markup {
    let count = |f: &str| n.checkpoints.iter().filter(|c| c.fate == f).count();
    let good = n.headline.last_good.as_ref().map(|c| c.seq);
    let skip = n.checkpoints.len().saturating_sub(CKPT_ROWS);
    html! {
        h2 { "Checkpoints" }
        p.note {
            (n.checkpoints.len()) " published · " (count("live")) " on disk · " (count("pruned")) " pruned · "
            (count("tainted")) " tainted by a fail · " (count("quarantined")) " quarantined"
            @if let Some(c) = &n.headline.last_good { " · last good: step " (c.step.map_or("?".into(), |s| s.to_string())) }
        }
        @if skip > 0 { p.note { "The newest " (CKPT_ROWS) " shown." } }
        @if !n.checkpoints.is_empty() {
            table.ckpts {
                thead { tr { th { "published" } th { "step" } th { "path" } th { "size" } th { "fate" } th { "ledger" } } }
                tbody {
                    @for c in n.checkpoints.iter().skip(skip) {
                        tr class=(format!("fate-{}", c.fate)) {
                            td.t { (c.published.format("%m-%d %H:%M:%S")) }
                            td.n { (c.step.map_or("?".into(), |s| s.to_string())) }
                            td.path title=(c.path) { (c.path.rsplit('/').next().unwrap_or(&c.path)) }
                            td.n { (c.size.map_or("?".into(), format_bytes)) }
                            td title=(c.why.clone().unwrap_or_default()) {
                                @if Some(c.seq) == good { b.good { "last good" } } @else { (c.fate) }
                                // Why a checkpoint is not trusted is the news; retention is routine.
                                @if let (Some(w), true) = (&c.why, matches!(c.fate.as_str(), "tainted" | "quarantined")) { br; small.muted { (w) } }
                            }
                            td.seq { "#" (c.seq) }
                        }
                    }
                }
            }
        }
    }
}

fn critic(n: &Night) -> Markup {
    let span = n
        .critic
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .fold(
            None,
            |acc: Option<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)>, t| {
                Some(acc.map_or((t, t), |(a, b)| (a.min(t), b.max(t))))
            },
        );
    let worst = n.critic.iter().max_by_key(|c| (rank(&c.worst), c.changes));
    // A status holds until the next verdict: a check a later verdict leaves out shows a gap.
    let mut times: Vec<chrono::DateTime<chrono::Utc>> = n
        .critic
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .collect();
    times.sort();
    times.dedup();
    let next = |t: chrono::DateTime<chrono::Utc>| times.iter().find(|u| **u > t).copied();
    html! {
        h2 { "Critic" }
        @if n.critic.is_empty() { p.note { "No verdicts." } }
        @if let Some(w) = worst.filter(|w| rank(&w.worst) >= 2) {
            p { "Worst of the night: " b { (w.check) } " " span class=(format!("st {}", w.worst)) { (w.worst) } " (#" (w.worst_seq) "): " (w.worst_reason) }
        }
        @if let Some((a, b)) = span {
            @let secs = ((b - a).num_milliseconds() as f64 / 1000.0).max(1.0);
            table.strips {
                @for c in &n.critic {
                    tr {
                        td.check { (c.check) " " small.muted { (c.changes) " changes" } }
                        td {
                            svg.strip viewBox="0 0 800 16" preserveAspectRatio="none" role="img" aria-label=(format!("{} statuses over time", c.check)) {
                                @for r in strip_runs(&c.points, &next, a, secs) {
                                    rect class=(format!("st {}", r.status)) x=(format!("{:.1}", r.x0)) y="0" width=(format!("{:.1}", (r.x1 - r.x0).max(1.0))) height="16" {
                                        title { (r.status) " from step " (r.step.map_or("?".into(), |s| s.to_string())) ", " (r.at.format("%H:%M:%S")) @if r.verdicts > 1 { " (" (r.verdicts) " verdicts)" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            p.note { (a.format("%m-%d %H:%M")) " → " (b.format("%m-%d %H:%M UTC")) }
        }
    }
}

fn rank(s: &str) -> u8 {
    match s {
        "fail" => 3,
        "warn" => 2,
        "unknown" => 1,
        _ => 0,
    }
}

fn disk(n: &Night) -> Markup {
    html! {
        h2 { "Disk" }
        @if n.disk.is_empty() {
            p.note { "Not measured (the paths are not on this machine, and the ledger has no disk record)." }
        } @else {
            table.disk {
                thead { tr { th { "role" } th { "path" } th { "free" } th { "of" } th { "full in" } th { "status" } } }
                tbody {
                    @for d in &n.disk {
                        tr {
                            td { (d.role) }
                            td.path { (d.path) }
                            td.n { (d.avail.map_or("?".into(), format_bytes)) }
                            td.n { (d.total.map_or("?".into(), format_bytes)) }
                            td.n { (d.hours_to_full.map_or("—".into(), |h| human_duration(h * 3600.0))) }
                            td { span class=(format!("st {}", d.status)) { (d.status) } br; small.muted { (d.reason) } }
                        }
                    }
                }
            }
            p.note { "Measured " (d_when(n)) "." }
        }
    }
}

fn d_when(n: &Night) -> String {
    match n.disk.first() {
        Some(d) if d.measured_at == n.now => "now".into(),
        Some(d) => format!(
            "{} ago (the ledger's newest disk record)",
            ago(n, d.measured_at)
        ),
        None => String::new(),
    }
}

/// A relative link to an evidence file: under the page's directory, or already relative.
/// Anything else (another tree, a `scheme:` string from a hostile record) is not linked.
fn link(evidence: &str, dir: Option<&Path>) -> Option<String> {
    let p = Path::new(evidence);
    let rel = if p.is_absolute() {
        p.strip_prefix(dir?).ok()?.to_path_buf()
    } else {
        p.to_path_buf()
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in rel.components() {
        match c {
            std::path::Component::Normal(p) => parts.push(p.to_str()?),
            std::path::Component::CurDir => {}
            _ => return None,
        }
    }
    let text = parts.join("/");
    (!text.is_empty() && !text.contains(':')).then_some(text)
}

/// One stretch of a strip: a status held over consecutive verdicts.
struct Run<'a> {
    x0: f64,
    x1: f64,
    status: &'a str,
    step: Option<u64>,
    at: chrono::DateTime<chrono::Utc>,
    verdicts: usize,
}

/// Strip width in SVG units; more runs than this are merged per unit, the worst status shown.
const STRIP: f64 = 800.0;

type Instant = chrono::DateTime<chrono::Utc>;

/// A check's points as runs of one status (a status holds until the next verdict of any
/// check), at most one per strip unit so a month of verdicts stays a small page.
fn strip_runs<'a>(
    points: &'a [(Instant, Option<u64>, String)],
    next: &dyn Fn(Instant) -> Option<Instant>,
    start: Instant,
    secs: f64,
) -> Vec<Run<'a>> {
    let x = |t: Instant| STRIP * ((t - start).num_milliseconds() as f64 / 1000.0) / secs;
    let mut runs: Vec<Run> = Vec::new();
    for (t, step, status) in points {
        let x0 = x(*t);
        let x1 = next(*t).map_or(STRIP, x);
        match runs.last_mut() {
            Some(r) if r.status == status && (r.x1 - x0).abs() < 1e-9 => {
                r.x1 = x1;
                r.verdicts += 1;
            }
            Some(r) if x0.floor() == r.x0.floor() && x0.floor() == r.x1.floor() => {
                // Inside one unit: keep the worse status.
                if rank(status) > rank(r.status) {
                    r.status = status;
                    r.step = *step;
                }
                r.x1 = x1;
                r.verdicts += 1;
            }
            _ => runs.push(Run {
                x0,
                x1,
                status,
                step: *step,
                at: *t,
                verdicts: 1,
            }),
        }
    }
    runs
}
