//! The model from hand-made ledgers and logs: the headline's state and sentence, ETA, last
//! good checkpoint, incidents and goodput against the timestamps they were built from.

use super::*;
use crate::ledger::{Entry, Ledger};
use serde_json::json;
use std::path::Path;

pub(crate) const T0: i64 = 1_800_000_000;

pub(crate) fn cfg(extra: &str) -> Config {
    let text = format!(
        "[run]\nname = \"r\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"/ck\"\n\n[schedule]\nkind = \"constant\"\npeak_lr = 0.001\ntotal_steps = 1000\n\n[[phase]]\nname = \"warm\"\nfrom = 0\nto = 100\nloss = [1.0, 12.0]\n\n[[phase]]\nname = \"main\"\nfrom = 100\nloss = [1.0, 6.0]\n{extra}"
    );
    Config::parse(&text, Path::new("/runs/roger.toml")).expect("test config parses")
}

pub(crate) fn at(s: f64) -> DateTime<Utc> {
    super::from_unix(T0 as f64 + s)
}

/// Records appended at the given offsets (seconds after T0).
pub(crate) fn ledger(entries: Vec<(f64, Entry)>) -> Vec<Record> {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::new(dir.path().join("l.jsonl"));
    for (t, e) in entries {
        l.append(e, at(t)).unwrap();
    }
    l.records().unwrap()
}

/// One sample per second of `steps`, starting at `t0`.
pub(crate) fn samples(steps: std::ops::Range<u64>, t0: f64, loss: f64) -> Vec<Sample> {
    steps
        .enumerate()
        .map(|(i, step)| {
            let mut values = [None; crate::metrics::N_SLOTS];
            values[0] = Some(loss);
            Sample {
                step,
                time: Some(T0 as f64 + t0 + i as f64),
                values,
            }
        })
        .collect()
}

fn watch(event: &str) -> Entry {
    Entry::new(Kind::Watch, "watch", "r").field("event", event)
}

fn publish(step: u64) -> Entry {
    Entry::new(Kind::Publish, "publish", "r")
        .step(Some(step))
        .field("path", format!("/ck/ckpt-{step}.pt"))
        .field("sha256", "ab".repeat(32))
        .field("size", 10)
}

fn inputs<'a>(c: &'a Config, recs: &'a [Record], now: f64) -> Inputs<'a> {
    Inputs {
        config: c,
        records: recs,
        ledger_problem: None,
        disk: None,
        verify: None,
        since: None,
        now: at(now),
    }
}

/// A wedge at step 40 (silent from t=40, killed at t=70), relaunched from the checkpoint of
/// step 30 at t=75, first new step at t=80; then steady to step 200 at t=249.
fn wedge_night() -> (Config, Vec<Record>, Vec<Sample>) {
    let c = cfg("");
    let recs = ledger(vec![
        (0.0, watch("start")),
        (31.0, publish(30)),
        (
            70.0,
            Entry::new(Kind::Kill, "watch", "r")
                .step(Some(40))
                .field("reason", "wedge")
                .field("targets", json!([{"pid": 1}]))
                .field("reasons", json!(["no new step for 30s (limit 20s)"])),
        ),
        (
            72.0,
            Entry::new(Kind::Relaunch, "watch", "r")
                .step(Some(30))
                .field("attempt", 1)
                .field("ckpt", "/ck/ckpt-30.pt")
                .field("ckpt_step", 30),
        ),
        (75.0, watch("launched").step(Some(30))),
    ]);
    let mut s = samples(0..41, 0.0, 5.0);
    s.extend(samples(31..201, 80.0, 5.0));
    (c, recs, s)
}

#[test]
fn a_handled_wedge_is_ok_with_one_incident_and_its_goodput() {
    let (c, recs, s) = wedge_night();
    let night = Night::gather(&inputs(&c, &recs, 250.0), &s);
    let h = &night.headline;
    assert_eq!(h.state, State::Ok, "{}", h.why);
    assert_eq!(
        h.why,
        "training at step 200 of 1000; roger handled 1 incident"
    );
    assert_eq!(
        (h.step, h.total_steps, h.relaunches),
        (Some(200), Some(1000), 1)
    );
    assert_eq!(h.phase.as_deref(), Some("main"));
    let lg = h.last_good.as_ref().unwrap();
    assert_eq!((lg.step, lg.verified), (Some(30), None));
    assert_eq!(lg.age_s, 219.0);
    assert_eq!(night.incidents.len(), 1);
    let i = &night.incidents[0];
    assert_eq!(i.kind, "wedge");
    assert_eq!(i.seqs, vec![3, 4, 5]);
    // Last progress t=40, first new step t=80.
    assert_eq!(i.down_s, Some(40.0));
    let g = &night.goodput;
    assert_eq!(g.detect_s, 30.0);
    assert_eq!(g.restart_s, 10.0);
    assert_eq!(g.recomputed_steps, 10);
    assert_eq!(g.recomputed_s, 10.0);
    assert_eq!(g.wall_s, 250.0);
    assert_eq!(g.training_s, 200.0);
    assert_eq!(night.segments.len(), 2);
    assert_eq!(night.segments[1].first_step, 31);
    let kinds: Vec<&str> = night.markers.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(kinds, vec!["relaunch", "kill"]);
}

#[test]
fn eta_is_the_remaining_steps_at_the_median_step_time() {
    let (c, recs, s) = wedge_night();
    let night = Night::gather(&inputs(&c, &recs, 250.0), &s);
    let eta = night.headline.eta.unwrap();
    assert_eq!(eta.step_seconds, 1.0);
    assert_eq!(eta.steps_left, 800);
    // Last step at t=249; 800 steps of 1 s from there.
    assert_eq!(eta.seconds_left, 799.0);
    assert_eq!(eta.finish_at, at(1049.0));
}

#[test]
fn an_open_breaker_is_stopped() {
    let c = cfg("");
    let recs = ledger(vec![
        (0.0, watch("start")),
        (
            5.0,
            Entry::new(Kind::Breaker, "watch", "r")
                .field("breaker", "crash_loop")
                .field("evidence", "3 launches died within 60s"),
        ),
        (
            5.1,
            watch("done")
                .field("code", 5)
                .field("reason", "breaker open: crash_loop"),
        ),
    ]);
    let night = Night::gather(&inputs(&c, &recs, 10.0), &samples(0..5, 0.0, 5.0));
    assert_eq!(night.headline.state, State::Stopped);
    assert!(
        night.headline.why.contains("breaker crash_loop"),
        "{}",
        night.headline.why
    );
    assert!(night.headline.why.contains("3 launches died"));
    assert_eq!(night.headline.state.exit_code(), 2);
}

#[test]
fn a_standing_fail_a_broken_chain_and_silence_need_attention() {
    let c = cfg("");
    let recs = ledger(vec![
        (0.0, watch("start")),
        (
            50.0,
            Entry::new(Kind::Verdict, "critic", "r")
                .step(Some(49))
                .field("status", "fail")
                .field(
                    "checks",
                    json!([{"check": "loss", "status": "fail", "reason": "loss is NaN"}]),
                ),
        ),
    ]);
    let mut i = inputs(&c, &recs, 5000.0);
    let night = Night::gather(&i, &samples(0..50, 0.0, f64::NAN));
    let h = &night.headline;
    assert_eq!(h.state, State::Attention);
    assert!(
        h.why
            .contains("verdict is fail at step 49 (#2): loss: loss is NaN"),
        "{}",
        h.why
    );
    assert!(
        h.also.iter().any(|a| a.contains("no new step for 1h 22m")),
        "{:?}",
        h.also
    );
    assert_eq!(night.incidents[0].kind, "critic fail");
    i.ledger_problem = Some("line 2, seq 2: chain broken".into());
    let night = Night::gather(&i, &samples(0..50, 0.0, f64::NAN));
    assert!(night
        .headline
        .why
        .starts_with("the ledger's hash chain is broken (line 2"));
}

#[test]
fn nothing_at_all_cannot_be_judged() {
    let c = cfg("");
    let night = Night::gather(&inputs(&c, &[], 0.0), &[]);
    assert_eq!(night.headline.state, State::Unknown);
    assert_eq!(night.headline.state.exit_code(), 3);
}

#[test]
fn a_verified_last_good_skips_what_does_not_hash() {
    let c = cfg("");
    let recs = ledger(vec![(0.0, publish(10)), (10.0, publish(20))]);
    let bad = |ck: &crate::checkpoints::Checkpoint| {
        if ck.step == Some(20) {
            Err("bytes changed".to_string())
        } else {
            Ok(())
        }
    };
    let mut i = inputs(&c, &recs, 20.0);
    i.verify = Some(&bad);
    let night = Night::gather(&i, &samples(0..20, 0.0, 5.0));
    let lg = night.headline.last_good.unwrap();
    assert_eq!(
        (lg.step, lg.verified, lg.passed_over),
        (Some(10), Some(true), 1)
    );
}

#[test]
fn since_keeps_the_headline_but_drops_older_incidents() {
    let (c, recs, s) = wedge_night();
    let mut i = inputs(&c, &recs, 250.0);
    i.since = Some(at(100.0));
    let night = Night::gather(&i, &s);
    assert!(night.incidents.is_empty());
    assert_eq!(night.headline.relaunches, 1);
    assert_eq!(night.goodput.wall_s, 150.0);
}

#[test]
fn a_long_night_of_many_relaunches_stays_a_small_page() {
    // 100 launches, each rewinding 1000 steps, 600k samples with a NaN in every launch, a
    // kill + relaunch pair per launch and a verdict every 100 steps.
    let c = cfg("");
    let mut entries = vec![(0.0, watch("start"))];
    let mut s = Vec::new();
    let mut t = 0.0;
    let mut step = 0u64;
    for launch in 0..100u64 {
        for _ in 0..6000 {
            step += 1;
            t += 1.0;
            let mut one = samples(step..step + 1, t, 3.0 + (step % 7) as f64 * 0.01);
            if step % 6000 == 1234 {
                one[0].values[0] = Some(f64::NAN);
            }
            s.extend(one);
            if step.is_multiple_of(100) {
                entries.push((
                    t,
                    Entry::new(Kind::Verdict, "critic", "r")
                        .step(Some(step))
                        .field("status", if launch % 2 == 0 { "pass" } else { "warn" })
                        .field(
                            "checks",
                            json!([{"check": "loss", "status": "pass", "reason": "ok"}]),
                        ),
                ));
            }
        }
        entries.push((
            t + 0.5,
            Entry::new(Kind::Kill, "watch", "r")
                .step(Some(step))
                .field("reason", "wedge"),
        ));
        entries.push((
            t + 0.6,
            Entry::new(Kind::Relaunch, "watch", "r")
                .step(Some(step - 1000))
                .field("ckpt_step", step - 1000),
        ));
        entries.push((t + 0.7, watch("launched")));
        step -= 1000;
        t += 1.0;
    }
    // Built directly: the model never checks the chain, and 3,300 fsynced appends are slow.
    let recs: Vec<Record> = entries
        .into_iter()
        .enumerate()
        .map(|(i, (t, e))| Record {
            seq: i as u64 + 1,
            ts: at(t),
            kind: e.kind,
            source: e.source,
            run: e.run,
            step: e.step,
            fields: e.fields,
            prev: String::new(),
            hash: String::new(),
            offset: 0,
        })
        .collect();
    let night = Night::gather(&inputs(&c, &recs, t + 10.0), &s);
    assert_eq!(night.segments.len(), 100);
    assert_eq!(night.incidents.len(), 100);
    let page = html::page(&night, None);
    assert!(page.len() < 2 << 20, "page of {} bytes", page.len());
    // Every NaN is still marked.
    assert!(page.matches("class=\"nan\"").count() >= 50, "NaN markers");
    assert_eq!(
        page,
        html::page(&night, None),
        "the same night, the same bytes"
    );
    eprintln!("page: {} bytes", page.len());
}

/// Samples of one metric, `f(step)` per step, one a second from T0.
fn series_of(metric: &str, steps: std::ops::Range<u64>, f: impl Fn(u64) -> f64) -> Vec<Sample> {
    let slot = crate::metrics::slot(metric).unwrap();
    steps
        .map(|step| {
            let mut values = [None; crate::metrics::N_SLOTS];
            values[slot] = Some(f(step));
            Sample {
                step,
                time: Some(T0 as f64 + step as f64),
                values,
            }
        })
        .collect()
}

fn scale_of(samples: &[Sample], metric: &str) -> String {
    let c = cfg("");
    let recs = ledger(vec![]);
    let page = html::page(&Night::gather(&inputs(&c, &recs, 400.0), samples), None);
    let key = format!("data-metric=\"{metric}\" data-scale=\"");
    let at = page
        .find(&key)
        .unwrap_or_else(|| panic!("no {metric} plot"));
    page[at + key.len()..]
        .split('"')
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn a_loss_that_explodes_over_a_healthy_run_is_drawn_on_a_log_axis() {
    let exploding = series_of("loss", 0..300, |s| {
        if s < 150 {
            5.0
        } else {
            60.0 * (0.3 * (s - 150) as f64).exp()
        }
    });
    assert_eq!(scale_of(&exploding, "loss"), "log");
    // Spread over decades but evenly (an lr warmup from 1e-7): a linear axis shows it well.
    let warmup = series_of("lr", 0..300, |s| 1e-7 + 1e-3 * s as f64 / 300.0);
    assert_eq!(scale_of(&warmup, "lr"), "linear");
    // A healthy loss stays linear; one sample at 1e9 would flatten it as much as a long
    // explosion does, so it goes log too.
    assert_eq!(
        scale_of(
            &series_of("loss", 0..300, |s| 10.0 - s as f64 / 40.0),
            "loss"
        ),
        "linear"
    );
    let spike = series_of("loss", 0..300, |s| if s == 200 { 1e9 } else { 3.0 });
    assert_eq!(scale_of(&spike, "loss"), "log");
}

#[test]
fn a_log_axis_says_where_values_at_or_below_zero_went() {
    let s = series_of("loss", 0..300, |s| match s {
        0 => 0.0,
        s if s < 150 => 5.0,
        s => 60.0 * (0.3 * (s - 150) as f64).exp(),
    });
    let c = cfg("");
    let recs = ledger(vec![]);
    let page = html::page(&Night::gather(&inputs(&c, &recs, 400.0), &s), None);
    assert!(page.contains("log scale"), "the axis is labelled");
    assert!(page.contains("values ≤ 0 drawn at the bottom edge"));
    // The declared band [1, 12] of the first phase keeps a band's height, not a line.
    assert!(page.contains("class=\"band\""));
}

fn verdict_fail(step: u64, checks: serde_json::Value) -> Entry {
    Entry::new(Kind::Verdict, "critic", "r")
        .step(Some(step))
        .field("status", "fail")
        .field("checks", checks)
}

fn divergence_kill(step: u64, verdict_seq: u64, diverged_at: u64) -> Entry {
    Entry::new(Kind::Kill, "watch", "r")
        .step(Some(step))
        .field("reason", "divergence")
        .field("targets", json!([{"pid": 1}]))
        .field("verdict_seq", verdict_seq)
        .field("verdict_step", step)
        .field("diverged_at", diverged_at)
        .field("reasons", json!(["critic fail"]))
}

#[test]
fn a_divergence_begins_at_the_earliest_onset_of_its_verdicts_failing_checks() {
    let c = cfg("");
    // Two failing checks: the grad norm went first (140), the loss followed (150); a passing
    // check's onset does not count. The kill names one check's (150), as the watch does.
    let recs = ledger(vec![
        (0.0, watch("start")),
        (
            211.0,
            verdict_fail(
                210,
                json!([
                    {"check": "loss", "status": "fail", "diverged_at": 150},
                    {"check": "grad_norm", "status": "fail", "diverged_at": 140},
                    {"check": "lr", "status": "pass", "diverged_at": 10},
                ]),
            ),
        ),
        (212.0, divergence_kill(210, 2, 150)),
        (
            213.0,
            Entry::new(Kind::Relaunch, "watch", "r")
                .field("attempt", 1)
                .field("ckpt_step", serde_json::Value::Null),
        ),
        (214.0, watch("launched")),
    ]);
    let s = samples(0..211, 0.0, 5.0);
    let night = Night::gather(&inputs(&c, &recs, 300.0), &s);
    let div = &night.incidents[0];
    assert_eq!(div.kind, "divergence");
    assert_eq!(
        div.timeline().as_deref(),
        Some("began at step 140, detected at step 210, restarted from scratch")
    );
    // Without its verdict in the ledger (a copied ledger tail), the kill's own onset.
    let recs = ledger(vec![
        (0.0, watch("start")),
        (212.0, divergence_kill(210, 99, 150)),
    ]);
    let night = Night::gather(&inputs(&c, &recs, 300.0), &s);
    assert_eq!(
        night.incidents[0].timeline().as_deref(),
        Some("began at step 150, detected at step 210")
    );
    // A wedge has no such story: its row keeps the plain step.
    let (c, recs, s) = wedge_night();
    let night = Night::gather(&inputs(&c, &recs, 250.0), &s);
    assert_eq!(night.incidents[0].timeline(), None);
}
