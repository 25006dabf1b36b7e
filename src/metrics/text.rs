//! Plain-text logs (nanoGPT's `iter 100: loss 2.31`, HF Trainer's printed dicts) read with
//! the user's `[metrics] patterns`. Capture groups are named after the canonical metric they
//! hold (`step`, `time`, `loss`, `lr`, `grad_norm`, `tokens_per_s`, `vram`, `eval_loss`), or
//! listed in `fields`. A line no pattern matches is ordinary log chatter, not garbage.
//!
//! One group name feeds no metric: `nan_iterations`, a count of steps in the line's interval
//! whose loss was not finite. Megatron leaves those steps out of the loss it prints (and says
//! `number of nan iterations: N`), so a count above 0 makes the sample's loss NaN: otherwise a
//! run producing NaNs would print a healthy average.
//!
//! Two kinds of pattern need no `step`: what the log declares about the whole run.
//! - `total_steps` alone (nanoGPT's `max_iters = 5000`, Megatron's `train_iters ... 500`,
//!   fairseq's `max_update=300000`): the run's planned last step, for the lines after it.
//! - `finished` (torchtitan's `Training completed`, Megatron's `[after training is done]`,
//!   fairseq's `done training in`): the trainer says the run ended, at its last step.
//!
//! Every group that feeds a metric also takes a non-finite value ([`NON_FINITE_RE`]): a
//! pattern written for numbers (`loss (?P<loss>[0-9.eE+-]+)`, as the built-in shapes and most
//! hand-written patterns are) would otherwise stop matching the first `loss nan` line, and a
//! diverged run would read as a quiet one. The number parser then decides the value.
//!
//! Both come out as marker records ([`crate::metrics::derive::MARK`]) that the in-order pass of
//! [`crate::metrics::derive::Derive`] turns into what follows from them: a line parser alone
//! cannot, as a big read parses its parts on several threads.

use super::num::NON_FINITE_RE;
use super::{Fields, Keys, LineParser, Parsed, Record, Target, SLOTS, TOTAL_SLOT};
use crate::metrics::mapping::MetricsConfig;
use anyhow::{bail, Context, Result};
use regex::bytes::Regex;

#[derive(Clone)]
pub struct TextParser {
    keys: Keys,
    /// Regex, what each group feeds (and its name, for a value that is not a number), and
    /// which group (if any) counts NaN steps.
    patterns: Vec<Pattern>,
    /// Patterns without a step: the run's declared total, or its end (see the module doc).
    declarations: Vec<(Regex, Declares)>,
}

/// A sample pattern: regex, what each group feeds, each group's name, the NaN-count group.
type Pattern = (Regex, Vec<Option<Target>>, Vec<String>, Option<usize>);

/// What a pattern without a `step` group declares.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Declares {
    /// The run's planned last step, from the group at this index.
    Total(usize),
    /// The run ended.
    Finished,
}

/// The group name that counts the interval's non-finite steps (see the module doc).
pub const NAN_ITERATIONS: &str = "nan_iterations";
/// The group name of a line that says the run ended (see the module doc).
pub const FINISHED: &str = "finished";

/// A group name → what it feeds (`vram` is accepted for `vram_gib`).
fn target_of(name: &str) -> Option<Target> {
    match name {
        "step" => Some(Target::Step),
        "time" => Some(Target::Time),
        "vram" => Some(Target::Metric(4)),
        "step_time" => Some(Target::StepTime),
        _ => SLOTS.iter().position(|m| *m == name).map(Target::Metric),
    }
}

/// `10,468` as torchtitan prints tokens/s: commas between groups of three digits dropped.
/// Anything else (`1,5`, `12,34,567`) is left for the number parser to refuse.
fn without_thousands(raw: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !raw.contains(&b',') {
        return std::borrow::Cow::Borrowed(raw);
    }
    let int_end = raw.iter().position(|b| *b == b'.').unwrap_or(raw.len());
    let groups: Vec<&[u8]> = raw[..int_end].split(|b| *b == b',').collect();
    let digits = |g: &[u8]| !g.is_empty() && g.iter().all(u8::is_ascii_digit);
    let grouped = groups[0].len() <= 3
        && groups.iter().all(|g| digits(g))
        && groups[1..].iter().all(|g| g.len() == 3);
    if !grouped {
        return std::borrow::Cow::Borrowed(raw);
    }
    std::borrow::Cow::Owned(raw.iter().copied().filter(|b| *b != b',').collect())
}

/// `src` with every capture group that `widen(g)` (1-based, in order of their opening
/// parenthesis) picks also taking a non-finite value: its inside `X` becomes
/// `(?:NON_FINITE\b|X)`. Groups, escapes and (nested) character classes are scanned as the
/// regex crate reads them; the group numbering does not change.
pub fn with_non_finite(src: &str, widen: impl Fn(usize) -> bool) -> String {
    let b = src.as_bytes();
    let (mut opens, mut spans) = (Vec::new(), Vec::new());
    let (mut g, mut class, mut i) = (0, 0usize, 0);
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' => {
                class += 1;
                // `[]...]`, `[^]...]`: a `]` right after the opening is a literal.
                if b.get(i + 1) == Some(&b'^') {
                    i += 1;
                }
                if b.get(i + 1) == Some(&b']') {
                    i += 1;
                }
            }
            b']' if class > 0 => class -= 1,
            _ if class > 0 => {}
            b'(' => {
                let rest = &src[i + 1..];
                let named = rest.starts_with("?P<")
                    || (rest.starts_with("?<")
                        && !rest.starts_with("?<=")
                        && !rest.starts_with("?<!"));
                let inner = if named {
                    rest.find('>').map(|k| i + 1 + k + 1)
                } else if rest.starts_with('?') {
                    None
                } else {
                    Some(i + 1)
                };
                opens.push(inner.map(|at| {
                    g += 1;
                    (g, at)
                }));
            }
            b')' => {
                if let Some(Some((g, at))) = opens.pop() {
                    if widen(g) {
                        spans.push((at, i));
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut inserts: Vec<(usize, String)> = Vec::new();
    for (at, end) in spans {
        inserts.push((at, format!("(?:{NON_FINITE_RE}|")));
        inserts.push((end, ")".to_string()));
    }
    inserts.sort_by_key(|(at, _)| *at);
    let mut out = String::with_capacity(src.len() + inserts.len() * 16);
    let mut from = 0;
    for (at, text) in inserts {
        out.push_str(&src[from..at]);
        out.push_str(&text);
        from = at;
    }
    out.push_str(&src[from..]);
    out
}

/// `regex` with its named metric groups taking a non-finite value as [`TextParser`] reads
/// them: for a detector that must recognise a log whose head is already NaN.
pub fn widened(regex: &str) -> String {
    let Ok(re) = Regex::new(regex) else {
        return regex.to_string();
    };
    let names: Vec<Option<&str>> = re.capture_names().skip(1).collect();
    with_non_finite(regex, |g| {
        names
            .get(g - 1)
            .copied()
            .flatten()
            .is_some_and(|n| matches!(target_of(n), Some(Target::Metric(i)) if i != TOTAL_SLOT))
    })
}

impl TextParser {
    pub fn new(m: &MetricsConfig) -> Result<TextParser> {
        if m.patterns.is_empty() {
            bail!("format = \"text\" needs [metrics] patterns, e.g. patterns = [{{ regex = 'step (?P<step>\\d+) .* loss (?P<loss>[\\d.eE+-]+)' }}]");
        }
        let mut patterns = Vec::new();
        let mut declarations = Vec::new();
        for (i, p) in m.patterns.iter().enumerate() {
            let re = Regex::new(&p.regex)
                .with_context(|| format!("[metrics] patterns #{}: bad regex", i + 1))?;
            let mut targets = Vec::new();
            let mut names = Vec::new();
            let mut nan_group = None;
            let mut unnamed = p.fields.iter();
            for (g, name) in re.capture_names().enumerate().skip(1) {
                let name = match name {
                    Some(n) => n,
                    None => match unnamed.next() {
                        Some(f) => f.as_str(),
                        None => bail!(
                            "[metrics] patterns #{}: group {g} has no name: name it (?P<loss>...) or list it in `fields`",
                            i + 1
                        ),
                    },
                };
                if name == NAN_ITERATIONS || name == FINISHED {
                    if name == NAN_ITERATIONS {
                        nan_group = Some(targets.len());
                    }
                    targets.push(None);
                    names.push(name.to_string());
                    continue;
                }
                let t = target_of(name);
                if t.is_none() {
                    bail!(
                        "[metrics] patterns #{}: group `{name}` is not a metric: expected one of step, time, step_time, {}, vram, {NAN_ITERATIONS}, {FINISHED}",
                        i + 1,
                        SLOTS.join(", ")
                    );
                }
                targets.push(t);
                names.push(name.to_string());
            }
            if unnamed.next().is_some() {
                bail!(
                    "[metrics] patterns #{}: `fields` lists {} names but the regex has fewer unnamed groups: expected one name per unnamed group",
                    i + 1,
                    p.fields.len()
                );
            }
            if !targets.contains(&Some(Target::Step)) {
                let total = targets
                    .iter()
                    .position(|t| *t == Some(Target::Metric(TOTAL_SLOT)));
                let finished = re.capture_names().any(|n| n == Some(FINISHED));
                let others = targets
                    .iter()
                    .filter(|t| t.is_some() && **t != Some(Target::Metric(TOTAL_SLOT)))
                    .count();
                match (total, finished, others) {
                    (Some(g), false, 0) => declarations.push((re, Declares::Total(g))),
                    (None, true, 0) => declarations.push((re, Declares::Finished)),
                    _ => bail!(
                        "[metrics] patterns #{}: needs a `step` group (or only a `total_steps` group: a line declaring the run's total; or a `{FINISHED}` group: a line saying the run ended)",
                        i + 1
                    ),
                }
                continue;
            }
            // Metric groups take a non-finite value too (module doc); the step, times and
            // counts do not. A pattern the widening cannot keep valid is used as written.
            let takes_values = |g: usize| matches!(targets.get(g - 1), Some(Some(Target::Metric(i))) if *i != TOTAL_SLOT);
            let re = Regex::new(&with_non_finite(&p.regex, takes_values)).unwrap_or(re);
            patterns.push((re, targets, names, nan_group));
        }
        if patterns.is_empty() {
            bail!("[metrics] patterns: none has a `step` group: expected at least one pattern for the lines that carry a step");
        }
        Ok(TextParser {
            keys: Keys::new(m),
            patterns,
            declarations,
        })
    }
}

impl LineParser for TextParser {
    fn parse(&mut self, line: &[u8]) -> Parsed {
        let line = super::clean_line(line);
        for (re, targets, names, nan_group) in &self.patterns {
            let Some(caps) = re.captures(&line) else {
                continue;
            };
            let mut fields = Fields::default();
            for (g, t) in targets.iter().enumerate() {
                let (Some(t), Some(m)) = (t, caps.get(g + 1)) else {
                    continue;
                };
                match self.keys.value(*t, &without_thousands(m.as_bytes())) {
                    Some(v) => fields.set(*t, v),
                    None if fields.bad.is_none() => {
                        fields.bad = Some(format!(
                            "matched a pattern but `{}` is {:?}, expected a number",
                            names[g],
                            String::from_utf8_lossy(m.as_bytes())
                        ))
                    }
                    None => {}
                }
            }
            let nan_steps = nan_group
                .and_then(|g| caps.get(g + 1))
                .and_then(|m| super::parse_num(m.as_bytes()));
            if nan_steps.is_some_and(|n| n > 0.0) {
                fields.set(Target::Metric(0), f64::NAN); // SLOTS[0] is LOSS
            }
            return fields.finish(&self.keys, "step");
        }
        for (re, declares) in &self.declarations {
            let Some(caps) = re.captures(&line) else {
                continue;
            };
            let mut values = [None; SLOTS.len()];
            if let Declares::Total(g) = declares {
                let raw = caps.get(g + 1).map_or(&b""[..], |m| m.as_bytes());
                match super::parse_num(raw) {
                    Some(t) => values[TOTAL_SLOT] = Some(t),
                    None => {
                        return Parsed::Garbage(format!(
                            "matched a total-steps pattern but {:?} is not a number",
                            String::from_utf8_lossy(raw)
                        ))
                    }
                }
            }
            return Parsed::Sample(Record {
                step: super::derive::MARK,
                time: None,
                values,
            });
        }
        Parsed::Skip
    }

    fn reset(&mut self) {}

    fn fork(&self) -> Option<Box<dyn LineParser>> {
        Some(Box::new(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::mapping::TextPattern;

    fn cfg(patterns: &[(&str, &[&str])]) -> MetricsConfig {
        MetricsConfig {
            patterns: patterns
                .iter()
                .map(|(r, f)| TextPattern {
                    regex: r.to_string(),
                    fields: f.iter().map(|s| s.to_string()).collect(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn named_and_unnamed_groups() {
        let m = cfg(&[
            (r"step (?P<step>\d+) .* loss (?P<loss>[\d.eE+-]+|nan)", &[]),
            (r"iter (\d+): loss ([\d.]+)", &["step", "loss"]),
        ]);
        let mut p = TextParser::new(&m).unwrap();
        let Parsed::Sample(s) = p.parse(b"\x1b[1mstep 12 | lr 1e-4 | loss 2.5\x1b[0m") else {
            panic!()
        };
        assert_eq!((s.step, s.get("loss")), (12, Some(2.5)));
        let Parsed::Sample(s) = p.parse(b" 50%|#####  |\riter 40: loss 3.25") else {
            panic!()
        };
        assert_eq!((s.step, s.get("loss")), (40, Some(3.25)));
        let Parsed::Sample(s) = p.parse(b"step 13 x loss nan") else {
            panic!()
        };
        assert!(s.get("loss").unwrap().is_nan());
        assert_eq!(p.parse(b"Saving checkpoint"), Parsed::Skip);
    }

    /// A pattern written for numbers reads a non-finite value in every metric group, in
    /// every spelling; the step does not take one, and the group numbering holds.
    #[test]
    fn number_patterns_take_non_finite_values() {
        let m = cfg(&[
            (
                r"iter (?P<step>\d+): loss (?P<loss>[0-9.eE+-]+), lr ([\d.e-]+)",
                &["lr"],
            ),
            (
                r"s:(\d+) trl:([0-9.]+) gn:(?<grad_norm>[[:digit:].]+)",
                &["step", "loss"],
            ),
        ]);
        let mut p = TextParser::new(&m).unwrap();
        for (line, loss, lr) in [
            (&b"iter 425: loss nan, lr 1e-4"[..], f64::NAN, Some(1e-4)),
            (b"iter 426: loss -inf, lr NaN", f64::NEG_INFINITY, None),
            (
                b"iter 427: loss Infinity, lr 2e-4",
                f64::INFINITY,
                Some(2e-4),
            ),
            (b"iter 428: loss 2.5, lr 2e-4", 2.5, Some(2e-4)),
        ] {
            let Parsed::Sample(s) = p.parse(line) else {
                panic!("{}", String::from_utf8_lossy(line))
            };
            let got = s.get("loss").unwrap();
            assert!(got.to_bits() == loss.to_bits() || (got.is_nan() && loss.is_nan()));
            match lr {
                Some(lr) => assert_eq!(s.get("lr"), Some(lr)),
                None => assert!(s.get("lr").unwrap().is_nan()),
            }
        }
        let Parsed::Sample(s) = p.parse(b"s:7 trl:-nan gn:inf") else {
            panic!()
        };
        assert_eq!(s.step, 7);
        assert!(s.get("loss").unwrap().is_nan());
        assert_eq!(s.get("grad_norm"), Some(f64::INFINITY));
        // A step is never non-finite; `nanx` is no value.
        assert_eq!(p.parse(b"iter nan: loss 2.5, lr 1e-4"), Parsed::Skip);
        assert_eq!(p.parse(b"iter 5: loss nanx, lr 1e-4"), Parsed::Skip);
    }

    #[test]
    fn widening_keeps_classes_escapes_and_group_numbers() {
        let w = |s: &str| with_non_finite(s, |g| g == 2);
        let nf = format!("(?:{NON_FINITE_RE}|");
        assert_eq!(w(r"(\d+) (x)"), format!(r"(\d+) ({nf}x))"));
        assert_eq!(
            w(r"(?:a)(\()[(]([]a)])"),
            format!(r"(?:a)(\()[(]({nf}[]a)]))")
        );
        assert_eq!(
            w(r"(?P<a>\d)(?<b>[^]()])"),
            format!(r"(?P<a>\d)(?<b>{nf}[^]()]))")
        );
        assert_eq!(w(r"(?i)(a)((b)c)"), format!(r"(?i)(a)({nf}(b)c))"));
    }

    #[test]
    fn a_nan_step_count_makes_the_loss_nan() {
        let m = cfg(&[(
            r"it (?P<step>\d+) loss (?P<loss>\S+) nan (?P<nan_iterations>\d+)",
            &[],
        )]);
        let mut p = TextParser::new(&m).unwrap();
        let Parsed::Sample(s) = p.parse(b"it 5 loss 2.5 nan 0") else {
            panic!()
        };
        assert_eq!(s.get("loss"), Some(2.5));
        let Parsed::Sample(s) = p.parse(b"it 6 loss 2.5 nan 3") else {
            panic!()
        };
        assert!(s.get("loss").unwrap().is_nan());
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(&*without_thousands(b"10,468"), b"10468");
        assert_eq!(&*without_thousands(b"1,234,567.5"), b"1234567.5");
        assert_eq!(&*without_thousands(b"881.99"), b"881.99");
        for bad in [&b"1,5"[..], b"12,34,567", b",123", b"1234,567", b"1,2a4"] {
            assert_eq!(
                &*without_thousands(bad),
                bad,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// Lines that declare the run's total or its end come out as markers (resolved in order
    /// by `Derive`); a sample line is read as before. The lines are Megatron-DeepSpeed's
    /// argument dump and end line, and torchtitan's, from the corpus fixtures.
    #[test]
    fn declarations_and_end_lines_are_markers() {
        let m = cfg(&[
            (r"iteration\s+(?P<step>\d+)/", &[]),
            (r"^\s*train_iters \.+ (?P<total_steps>\d+)\s*$", &[]),
            (r"(?P<finished>\[after training is done\])", &[]),
        ]);
        let mut p = TextParser::new(&m).unwrap();
        let Parsed::Sample(r) = p.parse(b"  train_iters ..................................... 500")
        else {
            panic!()
        };
        assert_eq!(
            (r.step, r.total_steps()),
            (crate::metrics::derive::MARK, Some(500))
        );
        let Parsed::Sample(r) = p.parse(b"[after training is done] datetime: 2025-12-22 22:04:38 ")
        else {
            panic!()
        };
        assert_eq!(r.step, crate::metrics::derive::MARK);
        assert!(r.is_empty(), "an end marker carries nothing: {r:?}");
        // `None` (a run counting samples) declares nothing; a sample line is a sample.
        assert_eq!(
            p.parse(b"  train_iters ..................................... None"),
            Parsed::Skip
        );
        let Parsed::Sample(r) = p.parse(b" iteration        1/     500 | consumed") else {
            panic!()
        };
        assert_eq!(r.step, 1);
    }

    #[test]
    fn config_mistakes_are_explained() {
        let e = |m| TextParser::new(&m).err().unwrap().to_string();
        assert!(e(cfg(&[])).contains("needs [metrics] patterns"));
        assert!(e(cfg(&[(r"(?P<foo>\d+)", &[])])).contains("`foo` is not a metric"));
        assert!(e(cfg(&[(r"(?P<foo>\d+)", &[])])).contains("nan_iterations"));
        assert!(e(cfg(&[(r"(\d+)", &[])])).contains("has no name"));
        assert!(e(cfg(&[(r"loss (?P<loss>\d+)", &[])])).contains("needs a `step`"));
        // A declaration alone reads no sample; one with a metric beside it is a mistake.
        assert!(e(cfg(&[(r"max_iters = (?P<total_steps>\d+)", &[])])).contains("none has a `step`"));
        assert!(e(cfg(&[
            (r"iter (?P<step>\d+)", &[]),
            (r"max (?P<total_steps>\d+) (?P<loss>\S+)", &[])
        ]))
        .contains("only a `total_steps` group"));
        assert!(e(cfg(&[(r"(?P<foo>\d+)", &[])])).contains("finished"));
    }
}
