//! `init` proposes the eval check (overfitting, `critic/overfit.rs`) for a log with an eval
//! loss: a `[critic]` block with its knobs, said where they come from, and what the check
//! says of the run as logged (a run that already overfits hears it now, not at its first
//! verdict).

use crate::critic::overfit::{self, Rule, DEFAULT_MARGIN, DEFAULT_NOISE};
use crate::critic::{fmt, EvalPoint, Num, Status};
use crate::metrics::{Sample, EVAL_LOSS, EVAL_SCORE, LOSS};

/// `[critic] eval_window` proposed: the first eval above best + margin warns, the third fails.
pub const EVAL_WINDOW: usize = 3;

/// The proposal: the TOML block and the lines for the user.
pub struct Proposal {
    pub text: String,
    pub summary: Vec<String>,
}

/// The log's evals, each with the median train loss logged since the eval before it (as the
/// critic's history builds them).
pub fn evals(samples: &[Sample]) -> Vec<EvalPoint> {
    let mut out = Vec::new();
    let mut pending: Vec<f64> = Vec::new();
    for s in samples {
        if let Some(l) = s.get(LOSS) {
            pending.push(l);
        }
        if let Some(e) = s.get(EVAL_LOSS) {
            let start = pending.len().saturating_sub(64);
            out.push(EvalPoint {
                step: s.step,
                eval_loss: Num(e),
                train_loss: crate::critic::stats::median(pending[start..].iter().copied()).map(Num),
                score: s.get(EVAL_SCORE).map(Num),
            });
            pending.clear();
        }
    }
    out
}

/// `None` when the log has no eval loss (the check has nothing to judge).
pub fn propose(samples: &[Sample]) -> Option<Proposal> {
    let evals = evals(samples);
    let (first, last) = (evals.first()?, evals.last()?);
    let rule = Rule {
        patience: EVAL_WINDOW,
        floor: DEFAULT_MARGIN,
        k: DEFAULT_NOISE,
        rules: crate::critic::RULES,
    };
    let noise = overfit::best_index(&evals).and_then(|b| overfit::noise(&evals, b));
    let noise_words = noise.map_or("no rise before its best in this log".into(), |n| {
        format!("{:.1}% in this log", 100.0 * n)
    });
    let mut summary = vec![format!(
        "eval check (overfitting): {} evals of {} in steps {}..{}",
        evals.len(),
        EVAL_LOSS,
        first.step,
        last.step
    )];
    if let Some(r) = overfit::judge_evals(&evals, None, &rule) {
        if matches!(r.status, Status::Warn | Status::Fail) {
            summary.push(format!(
                "note: the eval check will {} on this run as logged: {}",
                r.status.as_str(),
                r.reason
            ));
        }
    }
    let mut text = String::new();
    text.push_str("# The eval check: overfitting is the eval loss above its best by a margin, eval after eval,\n");
    text.push_str(&format!(
        "# while the train loss falls. This log has {} evals (steps {}..{}, best {}).\n",
        evals.len(),
        first.step,
        last.step,
        overfit::best_index(&evals).map_or("-".into(), |b| format!(
            "{} at step {}",
            fmt(evals[b].eval_loss.0),
            evals[b].step
        ))
    ));
    text.push_str("[critic]\n");
    let line = |o: &mut String, k: &str, v: String, why: &str| {
        o.push_str(&format!("{:<28} # {why}\n", format!("{k} = {v}")));
    };
    line(
        &mut text,
        "eval_window",
        EVAL_WINDOW.to_string(),
        "evals in a row above best + margin that fail (the first warns)",
    );
    line(
        &mut text,
        "eval_margin",
        format!("{DEFAULT_MARGIN}"),
        "the margin is at least this fraction of the best eval loss",
    );
    line(
        &mut text,
        "eval_noise",
        format!("{DEFAULT_NOISE:.1}"),
        &format!(
            "and at least this x the run's own eval noise (largest recovered rise before the best: {noise_words})"
        ),
    );
    text.push('\n');
    Some(Proposal { text, summary })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(step: u64, k: &str, v: f64) -> Sample {
        Sample {
            step,
            time: None,
            values: [(k.to_string(), v)].into_iter().collect(),
        }
    }

    #[test]
    fn proposed_for_a_log_with_evals_and_says_what_it_would_judge() {
        assert!(propose(&[s(10, "loss", 1.0)]).is_none(), "no evals");
        let mut log = Vec::new();
        for (i, e) in [0.5, 0.4, 0.45, 0.5].iter().enumerate() {
            let step = 100 * (i as u64 + 1);
            log.push(s(step - 50, "loss", 1.0 / (i + 1) as f64));
            log.push(s(step, "eval_loss", *e));
        }
        let p = propose(&log).unwrap();
        assert!(p.text.contains("[critic]\neval_window = 3"), "{}", p.text);
        assert!(p.text.contains("best 0.4 at step 200"), "{}", p.text);
        let evals = evals(&log);
        assert_eq!(evals[3].train_loss, Some(Num(0.25)));
        assert!(
            p.summary[1]
                .starts_with("note: the eval check will warn on this run as logged: overfitting"),
            "{:?}",
            p.summary
        );
        // A run whose eval keeps falling: no note.
        let healthy: Vec<Sample> = (1..5)
            .map(|i| s(i * 100, "eval_loss", 1.0 / i as f64))
            .collect();
        assert_eq!(propose(&healthy).unwrap().summary.len(), 1);
    }
}
