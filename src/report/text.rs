//! The night in at most [`MAX_LINES`] lines, for a terminal, an email or a chat message:
//! headline, progress and ETA, last good checkpoint, goodput, incidents, critic, disk. Pure;
//! what later notifications send. Control characters from logs and records are shown
//! escaped, never written raw (a run name must not be able to drive a terminal).

use super::headline::human_duration;
use super::Night;
use std::fmt::Write;

pub const MAX_LINES: usize = 20;
/// Incident rows shown before "and N more".
const INCIDENT_ROWS: usize = 8;

/// The digest. `colour`: ANSI colour for the state word (a terminal); never otherwise.
pub fn digest(n: &Night, colour: bool) -> String {
    let h = &n.headline;
    let mut lines: Vec<String> = Vec::new();
    let state = crate::colour::status(h.state.as_str(), colour);
    lines.push(format!(
        "roger · {} · {state}: {}",
        clean(&n.run),
        clean(&h.why)
    ));
    let mut progress = match (h.step, h.total_steps) {
        (Some(s), Some(t)) if t > 0 => format!(
            "step {s} of {t} ({:.1}%)",
            100.0 * s.min(t) as f64 / t as f64
        ),
        (Some(s), _) => format!("step {s} (no total_steps declared)"),
        _ => "no step logged".to_string(),
    };
    if let Some(p) = &h.phase {
        let _ = write!(progress, " · phase {}", clean(p));
    }
    match &h.eta {
        Some(e) => {
            let _ = write!(
                progress,
                " · finishes in {} (~{}) at {:.3} s/step",
                human_duration(e.seconds_left),
                e.finish_at.format("%a %H:%M UTC"),
                e.step_seconds
            );
        }
        None if h.finished => progress.push_str(" · finished"),
        None => {}
    }
    lines.push(progress);
    lines.push(match &h.last_good {
        Some(c) => format!(
            "last good checkpoint: step {}, {} ago, {} (#{}) {}",
            c.step.map_or("?".into(), |s| s.to_string()),
            human_duration(c.age_s),
            match c.verified {
                Some(true) => "verified now",
                _ => "not re-hashed",
            },
            c.seq,
            clean(&c.path)
        ),
        None => "last good checkpoint: none".to_string(),
    });
    if let Some(o) = &h.overfitting {
        lines.push(clean(&format!(
            "overfitting (verdict #{} {}): {}",
            o.seq,
            o.status.to_uppercase(),
            o.mark.describe()
        )));
    }
    if let Some(q) = &h.queued_publishes {
        lines.push(clean(&format!("publish: {}", q.words())));
    }
    if let Some(b) = &h.bucket {
        lines.push(clean(&format!("bucket: {}", b.words())));
    }
    let g = &n.goodput;
    lines.push(match g.ratio {
        Some(r) => format!(
            "goodput {:.1}% of {}: training {} · detect {} · restart {} · recomputed {} steps ({}) · grind {} · publish {}",
            100.0 * r,
            human_duration(g.wall_s),
            human_duration(g.training_s),
            human_duration(g.detect_s),
            human_duration(g.restart_s),
            g.recomputed_steps,
            human_duration(g.recomputed_s),
            human_duration(g.grind_s),
            human_duration(g.publish_s)
        ),
        None => "goodput: no wall time yet".to_string(),
    });
    if n.incidents.is_empty() {
        lines.push("incidents: none".into());
    } else {
        lines.push(format!(
            "incidents ({}), relaunches {}, breakers {}:",
            n.incidents.len(),
            h.relaunches,
            h.breakers
        ));
        for i in n.incidents.iter().take(INCIDENT_ROWS) {
            lines.push(format!(
                "  {} {}{}{} — {} ({})",
                i.detected.format("%H:%M:%S"),
                i.kind,
                match i.timeline() {
                    Some(t) => format!(": {t}"),
                    None => i.step.map_or(String::new(), |s| format!(" at step {s}")),
                },
                i.down_s
                    .map_or(String::new(), |d| format!(", down {}", human_duration(d))),
                clean(&i.actions.join("; ")),
                seqs(&i.seqs)
            ));
        }
        if n.incidents.len() > INCIDENT_ROWS {
            lines.push(format!(
                "  and {} more (roger report for all)",
                n.incidents.len() - INCIDENT_ROWS
            ));
        }
    }
    if let Some(j) = &n.job {
        job_lines(j, &mut lines);
    }
    if let Some(v) = &h.last_verdict {
        let worst = n
            .critic
            .iter()
            .filter(|c| c.worst == "fail" || c.worst == "warn")
            .max_by_key(|c| (c.worst == "fail", c.changes));
        let mut line = format!(
            "critic: newest verdict {} at step {} (#{})",
            v.status,
            v.step.map_or("?".into(), |s| s.to_string()),
            v.seq
        );
        if let Some(w) = worst {
            let _ = write!(
                line,
                "; worst of the night: {} {} (#{}): {}",
                clean(&w.check),
                w.worst,
                w.worst_seq,
                clean(&w.worst_reason)
            );
        }
        lines.push(line);
    }
    if !n.disk.is_empty() {
        let parts: Vec<String> = n
            .disk
            .iter()
            .map(|d| {
                format!(
                    "{} {} free{}",
                    clean(&d.path),
                    d.avail
                        .map_or("?".into(), crate::config::units::format_bytes),
                    d.hours_to_full.map_or(String::new(), |h| format!(
                        ", full in {}",
                        human_duration(h * 3600.0)
                    ))
                )
            })
            .collect();
        lines.push(format!("disk: {}", parts.join(" · ")));
    }
    if let Some(t) = h.last_record_at {
        lines.push(format!(
            "roger last wrote {} ago (#{}){}",
            human_duration((n.now - t).num_milliseconds() as f64 / 1000.0),
            h.last_record_seq.unwrap_or(0),
            h.last_step_at.map_or(String::new(), |s| format!(
                "; newest step logged {} ago",
                human_duration((n.now - s).num_milliseconds() as f64 / 1000.0)
            ))
        ));
    }
    for a in &h.also {
        if lines.len() >= MAX_LINES {
            break;
        }
        lines.push(format!("also: {}", clean(a)));
    }
    lines.truncate(MAX_LINES);
    lines.join("\n")
}

/// Node rows shown in the digest before "and N more".
const NODE_ROWS: usize = 4;

/// The job (`[cluster]`): its nodes, newest complete step and newest incident.
fn job_lines(j: &crate::cluster::view::JobView, lines: &mut Vec<String>) {
    let lost = j.nodes.iter().filter(|n| n.lost).count();
    lines.push(format!(
        "job: {} nodes{}{} · incidents {}",
        j.nodes.len(),
        if lost > 0 {
            format!(", {lost} LOST")
        } else {
            String::new()
        },
        j.complete
            .as_ref()
            .map_or(" · no complete step committed".to_string(), |c| format!(
                " · complete step {} (every node's part verified)",
                c.step
            )),
        j.incidents.len()
    ));
    for r in j.nodes.iter().take(NODE_ROWS) {
        lines.push(clean(&format!("  {}", node_words(r))));
    }
    if j.nodes.len() > NODE_ROWS {
        lines.push(format!(
            "  and {} more nodes (roger status)",
            j.nodes.len() - NODE_ROWS
        ));
    }
    if let Some(v) = j.incidents.last() {
        lines.push(clean(&format!(
            "  newest incident: {}",
            crate::cluster::view::incident_words(v)
        )));
    }
}

/// One node's row in words: state, step, last heard, its part.
pub fn node_words(r: &crate::cluster::view::NodeRow) -> String {
    let mut s = format!("node {}: ", r.node);
    match (&r.state, r.age_s) {
        (Some(st), Some(age)) => {
            let _ = write!(
                s,
                "{st}, {}, heard {} ago",
                r.step.map_or("no step yet".into(), |x| format!("step {x}")),
                human_duration(age.max(0.0))
            );
        }
        _ => s.push_str("has not reported"),
    }
    if let Some(p) = &r.part {
        let _ = write!(s, ", part {p}");
    }
    if r.lost {
        s.push_str(", LOST");
    }
    s
}

fn seqs(s: &[u64]) -> String {
    let v: Vec<String> = s.iter().map(|q| format!("#{q}")).collect();
    v.join(" ")
}

/// Control characters (ESC, CR, BEL, ...) escaped as `\u{..}`; everything else as is.
pub fn clean(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at, cfg, ledger, samples};
    use super::*;
    use crate::ledger::{Entry, Kind};

    #[test]
    fn twenty_lines_at_most_and_no_raw_escapes() {
        let mut entries = vec![(
            0.0,
            Entry::new(Kind::Watch, "watch", "r").field("event", "start"),
        )];
        for i in 0..30 {
            entries.push((
                1.0 + i as f64,
                Entry::new(Kind::Watch, "watch", "r")
                    .field("event", "exited")
                    .field("code", 3)
                    .field("how", "exit 3 \x1b[2J\x07"),
            ));
        }
        let recs = ledger(entries);
        let c = cfg("");
        let i = super::super::Inputs {
            config: &c,
            records: &recs,
            ledger_problem: Some("line 4: chain broken".into()),
            disk: None,
            verify: None,
            since: None,
            now: at(100.0),
        };
        let night = super::super::Night::gather(&i, &samples(0..30, 0.0, 3.0));
        let text = digest(&night, false);
        assert!(text.lines().count() <= MAX_LINES, "{text}");
        assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text}");
        assert!(text.contains("and 22 more"), "{text}");
        assert!(text.starts_with("roger · r · ATTENTION: the ledger's hash chain is broken"));
        let coloured = digest(&night, true);
        assert!(coloured.contains(&crate::colour::status("ATTENTION", true)));
    }
}
