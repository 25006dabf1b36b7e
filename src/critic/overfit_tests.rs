//! Unit tests of the overfitting rule with fake eval series.

use super::*;
use crate::critic::checks::tests::obs_with;
use crate::critic::{judge, EvalPoint, Num};
use crate::ledger::{Entry, Kind};

/// An observation whose evals are (step, eval loss, train loss before it).
fn obs(evals: &[(u64, f64, f64)]) -> Observation {
    let mut o = obs_with(vec![(
        evals.last().map_or(100, |e| e.0),
        vec![("loss", 3.0)],
    )]);
    o.evals = evals
        .iter()
        .map(|&(step, e, t)| EvalPoint {
            step,
            eval_loss: Num(e),
            train_loss: Some(Num(t)),
            score: None,
        })
        .collect();
    o
}

fn check(o: &Observation) -> CheckResult {
    eval(o).expect("evals are logged")
}

/// The issue's run: best 0.157 at 1626, then 0.215 (+37%) and 0.237 while train loss falls.
#[test]
fn the_first_eval_above_best_plus_margin_warns_and_eval_window_in_a_row_fail() {
    let mut o = obs(&[(542, 0.30, 0.40), (1084, 0.19, 0.12), (1626, 0.157, 0.05)]);
    let at_best = check(&o);
    assert_eq!(at_best.status, Status::Pass, "{}", at_best.reason);
    assert!(
        at_best.reason.contains("is its best so far"),
        "{}",
        at_best.reason
    );
    o.evals.push(EvalPoint {
        step: 2168,
        eval_loss: Num(0.215),
        train_loss: Some(Num(0.01)),
        score: None,
    });
    o.near_best = Some(NearBest {
        path: "/ck/checkpoint-1626".into(),
        step: 1626,
    });
    let first = check(&o);
    assert_eq!(first.status, Status::Warn, "{}", first.reason);
    assert!(
        first.reason.starts_with("overfitting: "),
        "{}",
        first.reason
    );
    assert!(
        first.reason.contains("its best 0.157 at step 1626"),
        "{}",
        first.reason
    );
    assert!(
        first
            .reason
            .contains("checkpoint /ck/checkpoint-1626 is at that step"),
        "{}",
        first.reason
    );
    assert_eq!(first.began_at, Some(2168));
    let m = mark_of(&first).unwrap();
    assert_eq!((m.step, m.evals_above), (1626, 1));
    assert_eq!(m.checkpoint.unwrap().relation, "at");
    o.evals.push(EvalPoint {
        step: 2710,
        eval_loss: Num(0.237),
        train_loss: Some(Num(0.002)),
        score: None,
    });
    assert_eq!(check(&o).status, Status::Warn, "2 < eval_window 3");
    o.evals.push(EvalPoint {
        step: 3252,
        eval_loss: Num(0.24),
        train_loss: Some(Num(0.0002)),
        score: None,
    });
    let fail = check(&o);
    assert_eq!(fail.status, Status::Fail, "{}", fail.reason);
    assert_eq!(fail.began_at, Some(2168), "from the first eval above");
    assert!(fail.reason.contains("3 ≥ eval_window 3"), "{}", fail.reason);
    // A checkpoint before the best says so.
    o.near_best = Some(NearBest {
        path: "/ck/checkpoint-1500".into(),
        step: 1500,
    });
    let before = mark_of(&check(&o)).unwrap().checkpoint.unwrap();
    assert_eq!((before.step, before.relation.as_str()), (1500, "before"));
    // One after the best is no checkpoint of the best (a stale lookup): none named.
    o.near_best = Some(NearBest {
        path: "/ck/checkpoint-2000".into(),
        step: 2000,
    });
    let none = check(&o);
    assert!(mark_of(&none).unwrap().checkpoint.is_none());
    assert!(
        none.reason
            .contains("no published checkpoint at or before step 1626"),
        "{}",
        none.reason
    );
}

/// The margin is the run's own noise: a run whose eval loss already rose 5% and recovered
/// before its best is not overfitting on a 4% rise; one that never rose is (floor 2%).
#[test]
fn the_margin_comes_from_the_runs_own_eval_noise() {
    let smooth = obs(&[
        (100, 1.0, 2.0),
        (200, 0.9, 1.8),
        (300, 0.85, 1.7),
        (400, 0.80, 1.6),
        (500, 0.832, 1.5),
    ]);
    let r = check(&smooth);
    assert_eq!(r.status, Status::Warn, "{}", r.reason);
    assert!(r.reason.contains("no rise before it"), "{}", r.reason);
    let noisy = obs(&[
        (100, 1.0, 2.0),
        (200, 0.9, 1.8),
        (300, 0.945, 1.7), // +5%: noise
        (400, 0.80, 1.6),
        (500, 0.832, 1.5), // +4%
    ]);
    let r = check(&noisy);
    assert_eq!(r.status, Status::Pass, "{}", r.reason);
    assert!(r.reason.contains("its own noise, 5.0%"), "{}", r.reason);
    // Twice the noise is overfitting again.
    let mut big = noisy.clone();
    big.evals[4].eval_loss = Num(0.90);
    assert_eq!(check(&big).status, Status::Warn);
    // eval_noise scales it: at 3× the 5% noise, a 12.5% rise is inside.
    big.settings.eval_noise = Some(3.0);
    assert_eq!(check(&big).status, Status::Pass);
    // The noise is read only up to the best (the rise after it is the signal).
    assert_eq!(noise(&big.evals, 3), Some((0.945 - 0.9) / 0.9));
    assert_eq!(
        margin(0.8, Some(0.05), 0.02, 1.0),
        0.8 * 0.05,
        "noise above the floor"
    );
    assert_eq!(margin(0.8, Some(0.001), 0.02, 1.0), 0.8 * 0.02, "the floor");
}

/// "N evals": the count is of evals in a row, newest last; one back within the margin
/// starts it over, and a new best moves the line.
#[test]
fn evals_above_must_be_in_a_row() {
    let mut o = obs(&[
        (100, 0.50, 1.0),
        (200, 0.40, 0.8),
        (300, 0.45, 0.7),
        (400, 0.46, 0.6),
        (500, 0.405, 0.5), // back within 2% of 0.40
    ]);
    assert_eq!(check(&o).status, Status::Pass, "{}", check(&o).reason);
    o.evals.push(EvalPoint {
        step: 600,
        eval_loss: Num(0.47),
        train_loss: Some(Num(0.4)),
        score: None,
    });
    let r = check(&o);
    assert_eq!(
        (r.status, mark_of(&r).unwrap().evals_above),
        (Status::Warn, 1)
    );
    o.evals.push(EvalPoint {
        step: 700,
        eval_loss: Num(0.30),
        train_loss: Some(Num(0.3)),
        score: None,
    });
    let r = check(&o);
    assert_eq!(r.status, Status::Pass, "a new best: {}", r.reason);
}

/// Eval and train loss rising together is a divergence, not overfitting: a warn that names
/// no best checkpoint and never fails here (the loss checks own it).
#[test]
fn train_loss_rising_too_is_divergence_not_overfitting() {
    let o = obs(&[
        (100, 0.50, 1.0),
        (200, 0.40, 0.8),
        (300, 0.60, 0.9),
        (400, 0.70, 1.2),
        (500, 0.80, 1.5),
        (600, 0.90, 2.0),
    ]);
    let r = check(&o);
    assert_eq!(r.status, Status::Warn, "{}", r.reason);
    assert!(
        r.reason.contains("divergence, not overfitting"),
        "{}",
        r.reason
    );
    assert!(mark_of(&r).is_none());
    assert_eq!(r.began_at, None);
    // No train loss at all: rising, but not called overfitting.
    let mut blind = o.clone();
    for e in &mut blind.evals {
        e.train_loss = None;
    }
    let r = check(&blind);
    assert_eq!(r.status, Status::Warn);
    assert!(r.reason.contains("no train loss"), "{}", r.reason);
    assert!(mark_of(&r).is_none());
}

#[test]
fn one_eval_waits_and_a_nan_eval_fails() {
    let mut o = obs(&[(100, 0.5, 1.0)]);
    let r = check(&o);
    assert_eq!(
        (r.status, r.unjudged),
        (Status::Unknown, Some(Unjudged::Waiting))
    );
    o.evals.push(EvalPoint {
        step: 200,
        eval_loss: Num(f64::NAN),
        train_loss: Some(Num(0.9)),
        score: None,
    });
    assert_eq!(check(&o).status, Status::Fail);
    assert!(eval(&obs(&[])).is_none(), "no evals: not declared");
}

/// The verdict record carries the mark; replay through JSON gives it back; the newest
/// verdict whose eval check judged decides whether it stands.
#[test]
fn the_mark_is_in_the_record_and_stands_until_a_judged_eval_clears_it() {
    let mut o = obs(&[(1000, 0.32, 0.2), (2000, 0.36, 0.05)]);
    o.near_best = Some(NearBest {
        path: "/ck/c-1000".into(),
        step: 1000,
    });
    let v = judge(&o);
    let back: Observation = serde_json::from_value(serde_json::to_value(&o).unwrap()).unwrap();
    assert_eq!(judge(&back), v, "replay recomputes it");
    let healthy = obs(&[(1000, 0.32, 0.2), (2000, 0.30, 0.05)]);
    let mut blind = obs(&[(1000, 0.32, 0.2)]);
    blind.evals.clear();
    let recs = crate::ledger::test_records(vec![
        v.entry("r", &o),
        judge(&blind).entry("r", &blind),
        judge(&healthy).entry("other", &healthy),
    ]);
    assert_eq!(recs[0].get("best").unwrap()["step"], 1000);
    let s = standing(&recs, "r").expect("stands: the later verdict judged no eval");
    assert_eq!((s.seq, s.mark.step), (1, 1000));
    assert_eq!(s.mark.checkpoint.unwrap().path, "/ck/c-1000");
    assert!(standing(&recs, "other").is_none());
    let cleared =
        crate::ledger::test_records(vec![v.entry("r", &o), judge(&healthy).entry("r", &healthy)]);
    assert!(standing(&cleared, "r").is_none(), "a judged eval clears it");
}

#[test]
fn nearest_is_at_or_before_and_never_quarantined() {
    let publish = |step: u64, path: &str| {
        Entry::new(Kind::Publish, "publish", "r")
            .step(Some(step))
            .field("path", path)
            .field("sha256", "x")
            .field("size", 1)
    };
    let mut entries = vec![
        publish(500, "/ck/c-500"),
        publish(1000, "/ck/c-1000"),
        publish(1500, "/ck/c-1500"),
    ];
    let recs = crate::ledger::test_records(entries.clone());
    assert_eq!(nearest(&recs, "r", 1000).unwrap().path, "/ck/c-1000");
    assert_eq!(nearest(&recs, "r", 1400).unwrap().step, 1000);
    assert!(nearest(&recs, "r", 400).is_none());
    entries
        .push(Entry::new(Kind::Quarantine, "quarantine", "r").field("original_path", "/ck/c-1000"));
    let recs = crate::ledger::test_records(entries);
    assert_eq!(nearest(&recs, "r", 1000).unwrap().step, 500);
}

/// Records judged by rules 2 replay by the old trend rule.
#[test]
fn older_rules_keep_the_old_eval_trend() {
    let mut o = obs(&[(1000, 0.32, 0.2), (2000, 0.36, 0.05)]);
    o.rules = 2;
    let r = crate::critic::checks::eval(&o).unwrap();
    assert_eq!(r.unjudged, Some(Unjudged::Waiting), "{}", r.reason);
}

/// A loss rising while the eval score (top-1) still improves is the model growing
/// confident, not overfitting: pass, said; the same rise with the score falling fails as
/// before. (timm's ConvNeXt under Adan: eval loss +2.8% over its best in the cooldown while
/// top-1 still rose.)
#[test]
fn a_rising_eval_loss_with_a_rising_eval_score_is_not_overfitting() {
    let with = |scores: [f64; 6]| {
        let mut o = obs(&[
            (100, 0.90, 2.0),
            (200, 0.85, 1.9),
            (300, 0.84, 1.8),
            (301, 0.87, 1.7),
            (302, 0.88, 1.6),
            (303, 0.89, 1.5),
        ]);
        for (e, s) in o.evals.iter_mut().zip(scores) {
            e.score = Some(Num(s));
        }
        o
    };
    let rising = check(&with([80.0, 81.0, 81.5, 81.6, 81.8, 82.0]));
    assert_eq!(rising.status, Status::Pass, "{}", rising.reason);
    assert!(
        rising
            .reason
            .contains("but the eval score rose 81.5 → 82 since then"),
        "{}",
        rising.reason
    );
    assert_eq!(rising.observed["eval_score_newest"], json!(82.0));
    let falling = check(&with([80.0, 81.0, 81.5, 81.2, 81.0, 80.9]));
    assert_eq!(falling.status, Status::Fail, "{}", falling.reason);
    assert!(
        falling.reason.starts_with("overfitting: "),
        "{}",
        falling.reason
    );
    // Without a score the rule is unchanged.
    let mut none = with([0.0; 6]);
    for e in &mut none.evals {
        e.score = None;
    }
    assert_eq!(check(&none).status, Status::Fail);
}
