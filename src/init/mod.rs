//! `roger init`'s core: from a detected log and its samples to a commented roger.toml. Pure:
//! the command reads the file and writes the result; this decides what it says. Every
//! inferred number carries a comment saying where it came from.

pub mod bands;
pub mod detect;
pub mod discover;
pub mod fit;
pub mod fit_steps;
pub mod meaning;
pub mod overfit;

use crate::config::{kind_name, LogFormat, ScheduleConfig};
use crate::metrics::{Sample, LR};
use detect::{Detected, Mapping};
use fit::FitOutcome;

/// Everything `infer` needs, read by the command.
pub struct Input<'a> {
    pub name: String,
    /// The log as the config will name it (relative to the config's directory if possible).
    pub log: String,
    pub detected: &'a Detected,
    pub mapping: &'a Mapping,
    pub samples: &'a [Sample],
    pub garbage_total: u64,
    /// The run's planned last step as the log declares it outside its samples (a text log's
    /// `max_iters` / `--train-iters` line); samples carrying `total_steps` (trainer_state's
    /// `max_steps`) are read here too.
    pub declared_total: Option<u64>,
    /// Files passed over while looking for the log (roger's own), with why: said in the
    /// config's header too.
    pub passed_over: Vec<String>,
    /// `--from-run`: words on the finished run this config takes as its baseline.
    pub baseline: Option<String>,
    /// RFC 3339 time of writing, for the header.
    pub written_at: String,
    /// What the run's trainer says about its schedule (YOLO's own curves).
    pub hints: fit::Hints,
}

/// The proposal: the file's text and the lines printed to the user.
pub struct Proposal {
    pub text: String,
    pub summary: Vec<String>,
}

/// The run's planned last step as its log declares it, for the schedule fit to take instead of
/// fitting one (issue 29: "total steps from what the log declares, else the fit"): the newest
/// sample's `total_steps`, which the readers fill from trainer_state.json's `max_steps`, a
/// line's `N/M` (Megatron, modded-nanogpt), a key the mapping names, or a text log's
/// declaration line (nanoGPT `max_iters`, Megatron `train_iters`, fairseq `max_update`,
/// torchtitan `total steps`). An end (a trainer's end line, a W&B run's clean exit) reads as a
/// sample carrying only the step it ended at as its total: that says where the run ended
/// ([`ended_at`]), not what it planned — it may have stopped short — so it is passed over and
/// the fit finds the total (never below the log's last step).
pub fn planned_total(samples: &[Sample]) -> Option<u64> {
    samples
        .iter()
        .rev()
        .filter(|s| s.values.len() > 1)
        .find_map(|s| s.get(crate::metrics::TOTAL_STEPS))
        .filter(|t| t.is_finite() && *t > 0.0)
        .map(|t| t as u64)
}

/// The step at which the log says the run ended: its last sample is a trainer's end line (a
/// sample carrying only its own step as the total, at the step of the sample before it).
pub fn ended_at(samples: &[Sample]) -> Option<u64> {
    let [.., before, last] = samples else {
        return None;
    };
    let end_line = last.step == before.step
        && last.values.len() == 1
        && last.get(crate::metrics::TOTAL_STEPS) == Some(last.step as f64);
    end_line.then_some(last.step)
}

/// A fitted total past the log's last step, where the log's newest lr already sits on the
/// fitted floor as printed: the run finished (the critic judges it so: `stale::ended_on_floor`).
fn ended_on_floor(
    f: &fit::Fit,
    lr: &[(u64, f64)],
    declared: Option<u64>,
    last: u64,
) -> Option<String> {
    let t = f
        .schedule
        .total_steps
        .filter(|&t| declared.is_none() && last < t)?;
    let &(at, v) = lr.last()?;
    let resolution = crate::critic::stale::printed_resolution(lr.iter().map(|p| p.1))?;
    crate::critic::stale::ended_on_floor(&f.schedule, t, at, v, resolution).then(|| {
        format!(
            "the log's lr reached the fitted schedule's floor at step {at}, {} step(s) before the fitted total {t}, closer than its printed lr (±{}) can tell: the run finished",
            t - at,
            crate::critic::fmt(resolution)
        )
    })
}

/// What the log holds that is not finite (NaN, ±inf), per metric with its first step: a run
/// that diverged, said before any band is proposed from it (bands take finite values only).
fn non_finite_words(samples: &[Sample]) -> Option<String> {
    let mut seen: std::collections::BTreeMap<&str, (usize, u64)> = Default::default();
    for s in samples {
        for (k, v) in &s.values {
            if !v.is_finite() {
                seen.entry(k.as_str()).or_insert((0, s.step)).0 += 1;
            }
        }
    }
    if seen.is_empty() {
        return None;
    }
    let each: Vec<String> = seen
        .iter()
        .map(|(k, (n, first))| format!("{k} {n} time(s), first at step {first}"))
        .collect();
    Some(format!(
        "non-finite values (NaN/inf) read as samples: {}; bands are proposed from the finite ones",
        each.join("; ")
    ))
}

pub fn infer(input: &Input) -> Proposal {
    let lr: Vec<(u64, f64)> = input
        .samples
        .iter()
        .filter_map(|s| Some((s.step, s.get(LR)?)))
        .collect();
    let total = input
        .declared_total
        .or_else(|| planned_total(input.samples));
    let fit = if lr.is_empty() {
        FitOutcome::Refused("the log has no lr: no schedule to fit".into())
    } else {
        fit::fit_with(&lr, total, &input.hints)
    };
    let warmup = match &fit {
        FitOutcome::Fitted(f) => f.schedule.warmup_steps,
        FitOutcome::Refused(_) => 0,
    };
    let phases = bands::propose(input.samples, warmup);

    let mut summary = vec![format!(
        "format: {} ({})",
        format_name(input.detected.format),
        input.detected.why
    )];
    summary.extend(input.mapping.notes.iter().map(|n| format!("  {n}")));
    summary.push(format!(
        "read {} samples, steps {}..{}{}",
        counted(input.samples),
        input.samples.first().map_or(0, |s| s.step),
        input.samples.last().map_or(0, |s| s.step),
        if input.garbage_total > 0 {
            format!(", {} unreadable lines skipped", input.garbage_total)
        } else {
            String::new()
        }
    ));
    if let Some(nf) = non_finite_words(input.samples) {
        summary.push(nf);
    }
    let last = input.samples.last().map_or(0, |s| s.step);
    let unit = input.mapping.metrics.unit.word();
    let source = if input.mapping.metrics.planned_total.is_some() {
        "as the run's arguments declare it"
    } else {
        "as the log declares it"
    };
    match (total, ended_at(input.samples)) {
        (Some(t), _) if last >= t => summary.push(format!(
            "total {unit}s: {t}, {source}; the log reached it: finished at {unit} {last}"
        )),
        (Some(t), Some(end)) if end < t => summary.push(format!(
            "total {unit}s: {t}, {source}; the log says the run ended at {unit} {end}: finished short of it"
        )),
        (Some(t), _) => summary.push(format!("total {unit}s: {t}, {source}")),
        (None, Some(end)) => summary.push(format!(
            "the log says the run ended at step {end} and declares no planned total: the fit's"
        )),
        (None, None) => {}
    }
    match &fit {
        FitOutcome::Fitted(f) => {
            summary.push(format!("schedule: {}", fit_words(f)));
            summary.extend(ended_on_floor(f, &lr, total, last));
        }
        FitOutcome::Refused(why) => summary.push(format!("schedule: not proposed: {why}")),
    }
    for p in &phases {
        summary.push(format!(
            "phase {:?} (steps {}..{}): {}",
            p.name,
            p.from,
            p.to.map_or("end".into(), |t| t.to_string()),
            p.keys
                .iter()
                .map(|(k, v, _)| format!("{k} = {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    if let FitOutcome::Fitted(f) = &fit {
        if f.still_rising {
            summary.push("note: the lr still rises at the log's end: peak and warmup are what the log shows so far; check them against the trainer's config".into());
        }
        if let Some(n) = unseen_warmup_note(f, input.samples) {
            summary.push(format!("note: {n}"));
        }
    }
    let eval = overfit::propose(input.samples);
    summary.extend(eval.iter().flat_map(|e| e.summary.iter().cloned()));
    let mut text = render(input, &fit, &phases);
    if let Some(e) = eval {
        text.push_str(&e.text);
    }
    Proposal { text, summary }
}

/// Why `[metrics] key` was chosen, from its note (`lr <- "x" (by meaning: ...)`): the words
/// in parentheses, for the config's comment; empty for a key taken by its usual spelling.
fn mapping_why(notes: &[String], key: &str) -> String {
    let head = format!("{key} <- ");
    notes
        .iter()
        .filter_map(|n| n.strip_prefix(&head))
        .find_map(|rest| {
            let open = rest.find(" (")?;
            rest[open + 2..].strip_suffix(')').map(str::to_string)
        })
        .unwrap_or_default()
}

pub fn format_name(f: LogFormat) -> &'static str {
    match f {
        LogFormat::Jsonl => "jsonl",
        LogFormat::Csv => "csv",
        LogFormat::Text => "text",
        LogFormat::KeyValue => "key-value",
        LogFormat::HfTrainerState => "hf-trainer-state",
        LogFormat::Tensorboard => "tensorboard",
        LogFormat::Mlflow => "mlflow",
        LogFormat::Wandb => "wandb",
    }
}

/// The log starts after the fitted warmup: say that warmup and peak come from the decay.
fn unseen_warmup_note(f: &fit::Fit, samples: &[Sample]) -> Option<String> {
    let first = samples.iter().find(|s| s.get(LR).is_some())?.step;
    (f.warmup_unseen && first > 0).then(|| {
        format!(
            "the log's first lr is at step {first}, past the warmup: warmup_steps = {} and peak_lr are what the decay's shape implies (a linear decay fixes only its slope: check them against the trainer's config for the next run)",
            f.schedule.warmup_steps
        )
    })
}

fn fit_words(f: &fit::Fit) -> String {
    let s = &f.schedule;
    let runner = f.runner_up.map_or(String::new(), |(k, share)| {
        format!("; next best {} {:.0}%", kind_name(k), 100.0 * share)
    });
    format!(
        "{} fits {:.1}% of {} lr samples within 2% of peak (rms {:.2}%, worst {:.2e} of peak){runner}; peak {:e}, warmup {}, min {}, total {}{}",
        kind_name(s.kind),
        100.0 * f.share,
        f.samples,
        100.0 * f.rms,
        f.max_dev,
        s.peak_lr,
        s.warmup_steps,
        lr_value(s.min_lr),
        s.total_steps.map_or("-".into(), |t| t.to_string()),
        s.decay_steps
            .map_or(String::new(), |d| format!(", decay {d}")),
    ) + &shape_words(s)
}

/// The fitted shape's own numbers (a polynomial's power, a staircase's drops), for the
/// summary line.
fn shape_words(s: &ScheduleConfig) -> String {
    let gamma = s.gamma.map_or(String::new(), |g| format!(" by x{g}"));
    if let Some(p) = s.power {
        return format!(", power {p}");
    }
    if let Some(p) = s.pct_start {
        return format!(", pct_start {p} (the rise: one-cycle has no warmup of its own)");
    }
    match (s.step_size, &s.milestones) {
        (Some(k), _) => format!(", drops every {k} steps{gamma}"),
        (_, Some(m)) => format!(", drops at {m:?} steps after warmup{gamma}"),
        _ => String::new(),
    }
}

/// A regex as a TOML string: a literal string (no escapes to read) unless it holds a quote.
fn toml_literal(s: &str) -> String {
    if s.contains('\'') || s.contains('\n') {
        toml::Value::String(s.to_string()).to_string()
    } else {
        format!("'{s}'")
    }
}

/// Samples as the user counts them: a trainer's end line reads as a sample at the step
/// before it (carrying only the total, so the run is seen to have finished there); it is
/// no sample of its own.
fn counted(samples: &[Sample]) -> usize {
    let end_line = |w: &[Sample]| {
        w[1].step == w[0].step
            && w[1].values.len() == 1
            && w[1].get(crate::metrics::TOTAL_STEPS).is_some()
    };
    samples.len() - samples.windows(2).filter(|w| end_line(w)).count()
}

/// An lr for the file: `0.0` rather than `0e0`.
fn lr_value(x: f64) -> String {
    if x == 0.0 {
        "0.0".into()
    } else {
        format!("{x:e}")
    }
}

/// A TOML line `key = value` with its comment aligned after it.
fn line(out: &mut String, key: &str, value: &str, comment: &str) {
    let kv = format!("{key} = {value}");
    if comment.is_empty() {
        out.push_str(&kv);
    } else {
        out.push_str(&format!("{kv:<28} # {comment}"));
    }
    out.push('\n');
}

fn render(input: &Input, fit: &FitOutcome, phases: &[bands::Phase]) -> String {
    let mut o = String::new();
    o.push_str(&format!(
        "# roger.toml written by `roger init` from {} at {}.\n",
        input.log, input.written_at
    ));
    o.push_str(
        "# Every inferred number says where it came from. Edit freely; check with `roger check`.\n",
    );
    if let Some(b) = &input.baseline {
        o.push_str(&format!("# Baseline: {b}\n"));
    }
    for p in &input.passed_over {
        o.push_str(&format!(
            "# Passed over (roger's own, never a training log): {p}\n"
        ));
    }
    o.push_str("# No [publish] section: `roger publish` keeps every checkpoint until you set keep_last.\n\n");

    o.push_str("[run]\n");
    line(&mut o, "name", &format!("{:?}", input.name), "");
    line(&mut o, "log", &format!("{:?}", input.log), "");
    line(
        &mut o,
        "format",
        &format!("{:?}", format_name(input.detected.format)),
        &format!("detected: {}", input.detected.why),
    );
    o.push_str("# checkpoint_dir = \"checkpoints\"   # where `roger publish` puts checkpoints\n\n");

    o.push_str("[metrics]\n# Which log key holds what (chosen from the keys the log has).\n");
    for (k, v) in &input.mapping.chosen {
        line(&mut o, k, v, &mapping_why(&input.mapping.notes, k));
    }
    if !input.mapping.metrics.patterns.is_empty() {
        o.push_str("patterns = [\n");
        for p in &input.mapping.metrics.patterns {
            let regex = toml_literal(&p.regex);
            if p.fields.is_empty() {
                o.push_str(&format!("  {{ regex = {regex} }},\n"));
            } else {
                let fields =
                    toml::Value::Array(p.fields.iter().cloned().map(toml::Value::String).collect());
                o.push_str(&format!("  {{ regex = {regex}, fields = {fields} }},\n"));
            }
        }
        o.push_str("]\n");
    }
    for n in input.mapping.notes.iter().filter(|n| {
        n.ends_with("not in the log")
            || n.starts_with("other numbers")
            || n.starts_with("key/value text")
    }) {
        o.push_str(&format!("# {n}\n"));
    }
    o.push('\n');

    match fit {
        FitOutcome::Fitted(f) => render_schedule(&mut o, f, input),
        FitOutcome::Refused(why) => {
            o.push_str(&format!(
                "# [schedule] not proposed: {why}.\n# Without one the lr check is off.\n\n"
            ));
        }
    }

    o.push_str("# Thresholds per phase, from this run's own samples.\n");
    o.push_str(&format!("# The {}.\n", bands::LOSS_RULE));
    o.push_str("# Not proposed: loss_slope, loss_spike, grad_norm_spike (set them once you know the run's noise).\n");
    for p in phases {
        o.push_str("[[phase]]\n");
        line(&mut o, "name", &format!("{:?}", p.name), "");
        line(&mut o, "from", &p.from.to_string(), "");
        if let Some(to) = p.to {
            line(&mut o, "to", &to.to_string(), "the fitted warmup's end");
        }
        for (k, v, why) in &p.keys {
            line(&mut o, k, v, why);
        }
        o.push('\n');
    }
    o
}

fn render_schedule(o: &mut String, f: &fit::Fit, input: &Input) {
    let s: &ScheduleConfig = &f.schedule;
    o.push_str(&format!(
        "# Fitted to {} logged lr samples (peak, warmup, min and total are parameters of the fit): {:.1}% within 2% of peak, rms {:.2}%, worst {:.1e} of peak.\n",
        f.samples,
        100.0 * f.share,
        100.0 * f.rms,
        f.max_dev
    ));
    o.push_str("[schedule]\n");
    let runner = f.runner_up.map_or(String::new(), |(k, share)| {
        format!(" (next best: {} at {:.0}%)", kind_name(k), 100.0 * share)
    });
    line(
        o,
        "kind",
        &format!("{:?}", kind_name(s.kind)),
        &format!(
            "best of {}constant, linear, cosine, inverse-sqrt, wsd, polynomial (power 0.9, 2, 0.5), step, multistep, one-cycle{runner}",
            if input.hints.yolo {
                "yolo-linear, yolo-cos (YOLO's own), "
            } else {
                ""
            }
        ),
    );
    line(
        o,
        "peak_lr",
        &format!("{:e}", s.peak_lr),
        "fitted with warmup, min and total (not the highest logged lr)",
    );
    let one_cycle = s.kind == crate::config::ScheduleKind::OneCycle;
    if let Some(p) = s.pct_start {
        line(
            o,
            "pct_start",
            &format!("{p}"),
            "fitted: the share of the steps spent rising (OneCycleLR's own warmup)",
        );
    }
    if crate::config::needs_total(s.kind) && !one_cycle {
        line(
            o,
            "min_lr",
            &lr_value(s.min_lr),
            "fitted: the floor the decay ends at",
        );
    }
    if let Some(d) = s.decay_steps {
        line(
            o,
            "decay_steps",
            &d.to_string(),
            "fitted: the final decay's length",
        );
    }
    if let Some(p) = s.power {
        line(
            o,
            "power",
            &format!("{p}"),
            "the polynomial's exponent that fits best",
        );
    }
    if let Some(k) = s.step_size {
        line(
            o,
            "step_size",
            &k.to_string(),
            "read off the log: steps between drops, counted from the warmup's end",
        );
    }
    if let Some(m) = &s.milestones {
        line(
            o,
            "milestones",
            &format!("{m:?}"),
            "read off the log: where the lr drops, in steps after the warmup's end",
        );
    }
    if let Some(g) = s.gamma {
        line(
            o,
            "gamma",
            &format!("{g}"),
            "read off the log: each drop's factor",
        );
    }
    if !one_cycle {
        warmup_line(o, f);
    }
    // A text line's total (`iteration N/ M`) is a pattern group, not a key the config can
    // name, and the config check wants one or the other: write the number the log declared.
    let log_key_for_total = input.detected.format == LogFormat::HfTrainerState
        || !input.mapping.metrics.total_steps.is_empty();
    if let Some(t) = s.total_steps {
        if f.total_from_log && !log_key_for_total {
            line(o, "total_steps", &t.to_string(), "the log declares it");
        } else if f.total_from_log {
            o.push_str(&format!(
                "# total_steps = {t}   # the log says it: read from there\n"
            ));
        } else {
            line(
                o,
                "total_steps",
                &t.to_string(),
                "fitted: where the decay ends",
            );
        }
    }
    line(
        o,
        "tolerance",
        &format!("{}", s.tolerance),
        "fraction of peak: 2x the worst sample, at least 0.002",
    );
    line(
        o,
        "step_slack",
        &s.step_slack.to_string(),
        "trainers log a neighbouring step's lr",
    );
    o.push('\n');
}

/// The `warmup_steps` line, with where the number came from.
fn warmup_line(o: &mut String, f: &fit::Fit) {
    let s = &f.schedule;
    line(
        o,
        "warmup_steps",
        &s.warmup_steps.to_string(),
        if f.warmup_unseen {
            "fitted: the log starts after it, the decay's shape implies it"
        } else {
            "fitted: where the rising lr meets the peak"
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(step: u64, values: &[(&str, f64)]) -> Sample {
        Sample {
            step,
            time: None,
            values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    /// Issue 36 defect 6: llm.c's cosine printed to 6 decimals, logged up to step 19552: the
    /// fitted total lies past the last step, the lr is on the floor: init says the run finished.
    #[test]
    fn a_fit_whose_floor_the_log_already_reached_says_finished() {
        use crate::config::{ScheduleConfig, ScheduleKind};
        let t = ScheduleConfig {
            kind: ScheduleKind::Cosine,
            peak_lr: 6e-4,
            warmup_steps: 700,
            total_steps: Some(19560),
            ..Default::default()
        };
        let printed = |x: f64| (x * 1e6).round() / 1e6;
        let lr: Vec<(u64, f64)> = (0..=19552u64)
            .step_by(8)
            .map(|s| (s, printed(crate::schedule::expected(&t, s))))
            .collect();
        let fit::FitOutcome::Fitted(f) = fit::fit(&lr, None) else {
            panic!()
        };
        let said = ended_on_floor(&f, &lr, None, 19552).expect("finished");
        assert!(
            said.contains("reached the fitted schedule's floor at step 19552"),
            "{said}"
        );
        assert!(
            ended_on_floor(&f, &lr, Some(19560), 19552).is_none(),
            "declared: said apart"
        );
        let mid: Vec<(u64, f64)> = lr.iter().copied().filter(|p| p.0 <= 15000).collect();
        assert!(ended_on_floor(&f, &mid, None, 15000).is_none(), "mid-run");
    }

    /// A run that ended early (fairseq stopped by patience, Megatron by --exit-interval): its
    /// end line says where it ended, the samples before it what it planned.
    #[test]
    fn the_declared_total_is_the_plan_and_an_end_line_where_it_ended() {
        let planned = [("loss", 3.1), ("total_steps", 300_000.0)];
        let run = vec![
            sample(57_400, &planned),
            sample(57_486, &planned),
            sample(57_486, &[("total_steps", 57_486.0)]),
        ];
        assert_eq!(planned_total(&run), Some(300_000));
        assert_eq!(ended_at(&run), Some(57_486));
        assert_eq!(ended_at(&run[..2]), None);
        // Only an end (no sample said a plan): no planned total; the fit finds one.
        assert_eq!(planned_total(&run[2..]), None);
        // A trainer_state.json's closing entry past its last loss entry is no end line.
        let hf = vec![
            sample(2175, &[("loss", 1.0), ("total_steps", 2178.0)]),
            sample(2178, &[("total_steps", 2178.0)]),
        ];
        assert_eq!((planned_total(&hf), ended_at(&hf)), (Some(2178), None));
    }

    use std::collections::BTreeMap;

    /// A total the log declares outside its samples (a text log's `max_iters` line) is used
    /// as is, not fitted: the fit takes it as a fixed parameter and the file says where it
    /// came from.
    #[test]
    fn a_declared_total_is_used_not_fitted() {
        let truth = ScheduleConfig {
            kind: crate::config::ScheduleKind::Cosine,
            peak_lr: 6e-4,
            warmup_steps: 100,
            total_steps: Some(5000),
            ..Default::default()
        };
        // Logged to step 2000 only: the total is far from what 2000 steps alone would say.
        let samples: Vec<Sample> = (1..=200u64)
            .map(|i| Sample {
                step: i * 10,
                time: None,
                values: BTreeMap::from([
                    (LR.to_string(), crate::schedule::expected(&truth, i * 10)),
                    ("loss".to_string(), 3.0),
                ]),
            })
            .collect();
        let detected = Detected {
            format: LogFormat::Text,
            why: "test".into(),
            keys: Vec::new(),
            patterns: Vec::new(),
        };
        let mapping = Mapping {
            metrics: Default::default(),
            chosen: Vec::new(),
            notes: Vec::new(),
        };
        let input = |declared: Option<u64>| Input {
            name: "t".into(),
            log: "train.log".into(),
            detected: &detected,
            mapping: &mapping,
            samples: &samples,
            garbage_total: 0,
            declared_total: declared,
            passed_over: vec!["./roger-ledger.jsonl (a roger ledger)".into()],
            baseline: None,
            written_at: "now".into(),
            hints: fit::Hints::default(),
        };
        let p = infer(&input(Some(5000)));
        assert!(
            p.text.contains("total_steps = 5000") && p.text.contains("# the log declares it"),
            "{}",
            p.text
        );
        assert!(p.text.contains("warmup_steps = 100"), "{}", p.text);
        assert!(
            p.text.contains(
                "# Passed over (roger's own, never a training log): ./roger-ledger.jsonl"
            ),
            "{}",
            p.text
        );
        let fitted = infer(&input(None));
        assert!(
            fitted.text.contains("# fitted: where the decay ends"),
            "{}",
            fitted.text
        );
    }
}
