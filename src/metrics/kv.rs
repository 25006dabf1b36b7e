//! Key/value text (`format = "key-value"`): training stdout written as `key: value`,
//! `key=value` or `key value` pairs next to a step counter, read without a hand-written
//! shape. [`pairs`] turns one line into its (name, value) pairs; [`KvParser`] feeds the pairs
//! whose names `[metrics]` maps (names compare case-blind) into a sample. Numbers go through
//! the shared parser ([`crate::metrics::parse_num`]), so `nan` / `inf` are samples; a mapped
//! value that looks like a number but does not parse makes the line a partial sample with
//! the reason, never a silent gap.
//!
//! Step counters besides `name value` pairs: `Epoch(train) [3][50/781]` and `Epoch: [0]
//! [5/6]` (MMEngine, torchvision) give `epoch` and `iter` = the iteration counted over the
//! whole run (epochs before × iterations per epoch + the one within; whether epochs count
//! from 0 or 1 is taken from the first such line); `Iter(train) [50/90000]` and a bare
//! `[12/100]` give `iter` (or `step`) and `max_iter` (`max_step`); `Epoch 3/100` gives
//! `epoch` and `max_epoch`. Lines of another mode (`Epoch(val)`, `Iter(test)`) are eval
//! progress, not training samples, and are skipped.

use super::{Fields, Keys, LineParser, Parsed, Target};
use crate::metrics::mapping::MetricsConfig;
use regex::Regex;
use std::sync::OnceLock;

/// One value beside a name: the number, or the token that looked like one and did not parse.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Num(f64),
    /// Looks numeric (starts with a digit or a sign and a digit) but does not parse.
    Bad(String),
}

/// What one line holds.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Line {
    /// (lowercased name, value), in the line's order.
    pub pairs: Vec<(String, Value)>,
    /// A counter of another mode than train (`Epoch(val) [1][5/5]`): not a training sample.
    pub other_mode: bool,
    /// `[E][I/N]`: the epoch E and iteration I of N, to be turned into a run-wide iteration.
    pub epoch_iter: Option<(u64, u64, u64)>,
}

fn counters() -> &'static (Regex, Regex) {
    static R: OnceLock<(Regex, Regex)> = OnceLock::new();
    R.get_or_init(|| {
        (
            // Epoch(train) [3][ 50/781] / Epoch: [0]  [5/6]
            Regex::new(
                r"(?i)\b(epoch)(?:\((\w+)\))?:?\s*\[\s*(\d+)\s*\]\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]",
            )
            .expect("built-in"),
            // Iter(train) [ 50/90000] / [12/100]
            Regex::new(r"(?i)(?:\b([a-z]\w*)(?:\((\w+)\))?:?\s*)?\[\s*(\d+)\s*/\s*(\d+)\s*\]")
                .expect("built-in"),
        )
    })
}

/// A value token: a number, a number with a unit (`29.1ms`, `2849M`, `5.3%`, `169.1GiB(94%)`),
/// or a token that looks numeric and does not parse. `None`: a word.
pub fn value_of(tok: &str) -> Option<Value> {
    let t = tok.trim_end_matches([',', ';', '|']);
    if t.is_empty() {
        return None;
    }
    if let Some(v) = super::parse_num(t.as_bytes()) {
        return Some(Value::Num(v));
    }
    let b = t.as_bytes();
    let digit_at = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let numeric_start = digit_at(0)
        || (matches!(b[0], b'-' | b'+' | b'.')
            && (digit_at(1) || (b[1..].starts_with(b".") && digit_at(2))));
    if !numeric_start {
        return None;
    }
    if let Some((v, n)) = super::num::decimal_prefix_general(b) {
        let rest = &t[n..];
        let unit_end = rest
            .find(|c: char| !(c.is_ascii_alphabetic() || c == '%' || c == '/'))
            .unwrap_or(rest.len());
        let (unit, after) = rest.split_at(unit_end);
        if !unit.is_empty() && (after.is_empty() || after.starts_with('(')) {
            return Some(Value::Num(v));
        }
    }
    Some(Value::Bad(t.to_string()))
}

/// A token usable as (part of) a name: starts with a letter or `_`, no clock-like digits.
fn name_of(tok: &str) -> Option<String> {
    let t = tok
        .trim_matches(|c: char| matches!(c, '\'' | '"' | '{' | '}' | '(' | ')' | '[' | ']' | ','));
    let first = t.chars().next()?;
    if !(first.is_alphabetic() || first == '_') {
        return None;
    }
    if !t
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '/' | '.' | '@' | '#'))
    {
        return None;
    }
    Some(t.to_lowercase())
}

/// At most this many words make one name (`validation lm loss`).
const NAME_WORDS: usize = 3;

/// The pairs of one line (already cleaned of colour codes and `\r` fragments).
pub fn pairs(line: &str) -> Line {
    let mut out = Line::default();
    let mut text = line.to_string();
    let (epoch_rx, bracket_rx) = counters();
    // Counters first; their text is blanked so the words are not read again.
    let mut blank = Vec::new();
    if let Some(c) = epoch_rx.captures(line) {
        let mode = c.get(2).map(|m| m.as_str().to_ascii_lowercase());
        out.other_mode |= mode.as_deref().is_some_and(|m| m != "train");
        let n = |i: usize| c[i].parse::<u64>().ok();
        if let (Some(e), Some(i), Some(of)) = (n(3), n(4), n(5)) {
            out.epoch_iter = Some((e, i, of));
            out.pairs.push(("epoch".into(), Value::Num(e as f64)));
        }
        blank.push(c.get(0).expect("whole match").range());
    } else if let Some(c) = bracket_rx.captures(line) {
        let word = c.get(1).map(|m| m.as_str().to_ascii_lowercase());
        let mode = c.get(2).map(|m| m.as_str().to_ascii_lowercase());
        out.other_mode |= mode.as_deref().is_some_and(|m| m != "train");
        let name = match word.as_deref() {
            Some(w) if w.starts_with("iter") => "iter".to_string(),
            Some(w) if w.starts_with("epoch") => "epoch".to_string(),
            Some(w) if w.starts_with("step") => "step".to_string(),
            Some(w) => w.to_string(),
            None => "step".to_string(),
        };
        if let (Ok(i), Ok(of)) = (c[3].parse::<f64>(), c[4].parse::<f64>()) {
            out.pairs.push((name.clone(), Value::Num(i)));
            out.pairs.push((format!("max_{name}"), Value::Num(of)));
        }
        blank.push(c.get(0).expect("whole match").range());
    }
    for r in blank {
        text.replace_range(r.clone(), &" ".repeat(r.len()));
    }
    let mut words: Vec<String> = Vec::new();
    // A name that ended with `:` or `=` and waits for its value.
    let mut waiting: Option<String> = None;
    let mut after_value = false;
    let emit = |name: String, v: Value, out: &mut Line| out.pairs.push((name, v));
    for tok in text.split_whitespace() {
        // A running average in parentheses right after a value (`loss: 2.46 (2.51)`).
        if after_value && tok.starts_with('(') {
            continue;
        }
        after_value = false;
        if matches!(tok, "|" | "-" | "||" | "--" | "::" | "," | "/") {
            // `name: -`: the value a separator promised is missing; said, not dropped.
            if let Some(name) = waiting.take() {
                emit(name, Value::Bad(tok.to_string()), &mut out);
            }
            words.clear();
            continue;
        }
        if tok == ":" || tok == "=" {
            if !words.is_empty() {
                waiting = Some(words.join(" "));
                words.clear();
            }
            continue;
        }
        // key=value (one token) or key= (value next).
        if let Some((k, v)) = tok.split_once('=') {
            if let Some(k) = name_of(k) {
                words.clear();
                if v.is_empty() {
                    waiting = Some(k);
                } else if let Some(val) = ratio(&k, v, &mut out).or_else(|| value_of(v)) {
                    emit(k, val, &mut out);
                    after_value = true;
                    waiting = None;
                }
                continue;
            }
        }
        // `100:` after `iter`: a value that closes with a colon (nanoGPT).
        let (body, colon) = match tok.strip_suffix(':') {
            Some(b) => (b, true),
            None => (tok, false),
        };
        let explicit = waiting.take();
        let name = explicit
            .clone()
            .or_else(|| (!words.is_empty()).then(|| words.join(" ")));
        if let Some(name) = name.clone() {
            if let Some(val) = ratio(&name, body, &mut out).or_else(|| value_of(body)) {
                emit(name, val, &mut out);
                words.clear();
                after_value = true;
                continue;
            }
        }
        // `name: word` or `name=word`: the value a separator promised is no number. Said as
        // such (the parser reports it where `[metrics]` maps the name), then read on as words.
        // (A token that ends in its own colon is the next name, not a value.)
        if let Some(name) = explicit.filter(|_| !colon) {
            emit(name, Value::Bad(body.to_string()), &mut out);
        }
        // k:v in one token (`s:100`, `trl:2.31`).
        if !colon {
            if let Some((k, v)) = tok.split_once(':') {
                if let (Some(k), Some(val)) = (name_of(k), value_of(v)) {
                    emit(k, val, &mut out);
                    words.clear();
                    after_value = true;
                    continue;
                }
            }
        }
        match name_of(body) {
            Some(w) => {
                // A waiting name followed by a word (not a value) was no pair.
                words.push(w);
                if words.len() > NAME_WORDS {
                    words.remove(0);
                }
                if colon {
                    waiting = Some(words.join(" "));
                    words.clear();
                }
            }
            None => words.clear(),
        }
    }
    out
}

/// `3/100` after `name`: pushes `max_<name>` = 100 and returns 3.
fn ratio(name: &str, v: &str, out: &mut Line) -> Option<Value> {
    let (a, b) = v.trim_end_matches([',', ';']).split_once('/')?;
    let (a, b) = (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?);
    out.pairs
        .push((format!("max_{name}"), Value::Num(b as f64)));
    Some(Value::Num(a as f64))
}

/// Reads key/value lines with the names `[metrics]` gives.
#[derive(Clone)]
pub struct KvParser {
    keys: Keys,
    step_key: String,
    /// Whether epochs count from 0 or 1, once the first `[E][I/N]` line said.
    epoch_base: Option<u64>,
    /// A sample was read whose step is a named counter (`iter: 19`), no `[E][I/N]` before it:
    /// the log counts its steps by name, and a part read elsewhere needs no epoch base.
    named_steps: bool,
}

impl KvParser {
    pub fn new(m: &MetricsConfig) -> KvParser {
        let mut m = m.clone();
        for k in [
            &mut m.step,
            &mut m.loss,
            &mut m.grad_norm,
            &mut m.tokens_per_s,
            &mut m.vram,
            &mut m.eval_loss,
            &mut m.eval_score,
            &mut m.time,
            &mut m.total_steps,
            &mut m.step_time,
            &mut m.tokens,
        ] {
            *k = k.to_lowercase();
        }
        for k in &mut m.lr.0 {
            *k = k.to_lowercase();
        }
        KvParser {
            keys: Keys::new(&m),
            step_key: m.step.clone(),
            epoch_base: None,
            named_steps: false,
        }
    }

    /// The targets a name feeds: the whole name, else its last words (`validation loss at
    /// iteration` finds `iteration`).
    fn targets(&self, name: &str) -> Vec<Target> {
        let mut n = name;
        loop {
            let t: Vec<Target> = self.keys.lookup(n.as_bytes()).collect();
            if !t.is_empty() {
                return t;
            }
            match n.split_once(' ') {
                Some((_, rest)) => n = rest,
                None => return t,
            }
        }
    }
}

impl LineParser for KvParser {
    fn parse(&mut self, raw: &[u8]) -> Parsed {
        let line = super::clean_line(raw);
        let mut l = pairs(&String::from_utf8_lossy(&line));
        if l.other_mode {
            return Parsed::Skip;
        }
        if let Some((e, i, of)) = l.epoch_iter {
            let base = *self.epoch_base.get_or_insert(e.min(1));
            let global = e.saturating_sub(base) * of + i;
            l.pairs.push(("iter".into(), Value::Num(global as f64)));
        }
        let mut fields = Fields::default();
        let mut any = false;
        for (name, v) in &l.pairs {
            for t in self.targets(name) {
                any = true;
                match v {
                    Value::Num(x) => {
                        let x = match t {
                            // Times by the clock ([metrics] clock); the rest as read.
                            Target::Time => self.keys.value(t, x.to_string().as_bytes()),
                            _ => Some(*x),
                        };
                        if let Some(x) = x {
                            fields.set(t, x);
                        }
                    }
                    Value::Bad(tok) if fields.bad.is_none() => {
                        fields.bad = Some(format!("`{name}`: {tok:?} is not a number"));
                    }
                    Value::Bad(_) => {}
                }
            }
        }
        // Nothing mapped beside the step (an eval line of unmapped numbers): no sample.
        let only_step = fields.values.iter().all(Option::is_none)
            && fields.step_time.is_none()
            && fields.bad.is_none();
        if !any || only_step {
            return Parsed::Skip;
        }
        self.named_steps |= l.epoch_iter.is_none() && self.epoch_base.is_none();
        fields.finish(&self.keys, &self.step_key)
    }

    fn reset(&mut self) {
        self.epoch_base = None;
        self.named_steps = false;
    }

    fn fork(&self) -> Option<Box<dyn LineParser>> {
        // Until the first `[E][I/N]` line, a part read elsewhere could not know the base;
        // a log whose first sample counts its steps by name (detectron2's `iter: 19`) has none.
        (self.epoch_base.is_some() || self.named_steps)
            .then(|| Box::new(self.clone()) as Box<dyn LineParser>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nums(l: &Line) -> Vec<(&str, f64)> {
        l.pairs
            .iter()
            .filter_map(|(k, v)| match v {
                Value::Num(x) => Some((k.as_str(), *x)),
                Value::Bad(_) => None,
            })
            .collect()
    }

    #[test]
    fn shapes_of_pairs() {
        let l = pairs("iter 425: loss nan, time 29.1ms, mfu 5.3%");
        let n = nums(&l);
        assert_eq!(n[0], ("iter", 425.0));
        assert_eq!(n[1].0, "loss");
        assert!(n[1].1.is_nan());
        assert_eq!(n[2], ("time", 29.1));
        assert_eq!(n[3], ("mfu", 5.3));
        let l = pairs("[09/02 02:37:24 d2.utils.events]:  eta: 0:05:22  iter: 19  total_loss: 1.986  lr: 1.6068e-05  max_mem: 2725M");
        let n = nums(&l);
        assert!(n.contains(&("iter", 19.0)), "{n:?}");
        assert!(n.contains(&("total_loss", 1.986)), "{n:?}");
        assert!(n.contains(&("lr", 1.6068e-05)), "{n:?}");
        assert!(n.contains(&("max_mem", 2725.0)), "{n:?}");
        let l = pairs("step=10, loss=2.5, lr=3e-4, grad-norm=inf");
        let n = nums(&l);
        assert_eq!(&n[..3], &[("step", 10.0), ("loss", 2.5), ("lr", 3e-4)]);
        assert_eq!(n[3], ("grad-norm", f64::INFINITY));
        let l =
            pairs(" iteration 12 | lm loss: 5.1 | learning rate: 1.0E-04 | validation loss 3.2");
        let n = nums(&l);
        assert_eq!(
            n,
            vec![
                ("iteration", 12.0),
                ("lm loss", 5.1),
                ("learning rate", 1e-4),
                ("validation loss", 3.2)
            ]
        );
        let l = pairs(
            "Epoch: [0]  [5/6]  eta: 0:00:00  lr: 0.005000  loss: 2.4622 (4.1605)  max mem: 2670",
        );
        assert_eq!(l.epoch_iter, Some((0, 5, 6)));
        assert!(nums(&l).contains(&("loss", 2.4622)));
        assert!(nums(&l).contains(&("max mem", 2670.0)));
        assert!(!nums(&l).iter().any(|(_, v)| *v == 4.1605));
        let l = pairs("Iter(train) [  50/90000]  lr: 1e-3  loss: 1.0");
        assert_eq!(&nums(&l)[..2], &[("iter", 50.0), ("max_iter", 90000.0)]);
        let l = pairs("Epoch(val) [1][5/5]    accuracy: 7.5000");
        assert!(l.other_mode);
        let l = pairs("Epoch 3/100 loss: 0.5");
        assert_eq!(&nums(&l)[..2], &[("max_epoch", 100.0), ("epoch", 3.0)]);
        // Looks numeric, does not parse: kept as such, not dropped.
        let l = pairs("step 3 loss 1.2.3");
        assert_eq!(l.pairs[1], ("loss".into(), Value::Bad("1.2.3".into())));
    }

    fn cfg(step: &str, loss: &str, lr: &str) -> MetricsConfig {
        MetricsConfig {
            step: step.into(),
            loss: loss.into(),
            lr: lr.into(),
            ..Default::default()
        }
    }

    #[test]
    fn epochs_and_iterations_become_one_step() {
        let mut p = KvParser::new(&cfg("iter", "loss", "lr"));
        let r = |p: &mut KvParser, l: &str| match p.parse(l.as_bytes()) {
            Parsed::Sample(r) => r,
            other => panic!("{l}: {other:?}"),
        };
        let a = r(&mut p, "08/18 20:27:22 - mmengine - INFO - Epoch(train) [1][5/5]  lr: 1.0000e-03  eta: 0:00:02  time: 0.4566  data_time: 0.0074  memory: 477  loss: 6.7576");
        assert_eq!(
            (a.step, a.get("loss"), a.get("lr")),
            (5, Some(6.7576), Some(1e-3))
        );
        assert_eq!(
            p.parse(b"08/18 20:27:23 - mmengine - INFO - Epoch(val) [1][5/5]    accuracy: 7.5000  data_time: 0.0044  time: 0.0146"),
            Parsed::Skip
        );
        let b = r(&mut p, "08/18 20:27:23 - mmengine - INFO - Epoch(train) [2][5/5]  lr: 1.0000e-03  loss: 5.3044");
        assert_eq!(b.step, 10);
        // torchvision counts epochs and batches from 0.
        let mut p = KvParser::new(&cfg("iter", "loss", "lr"));
        assert_eq!(r(&mut p, "Epoch: [0]  [0/6]  lr: 0.001  loss: 8.2").step, 0);
        assert_eq!(r(&mut p, "Epoch: [1]  [2/6]  lr: 0.005  loss: 1.7").step, 8);
    }

    #[test]
    fn mapped_names_case_blind_and_bad_values_reported() {
        let mut p = KvParser::new(&cfg("step", "Loss", "LR"));
        let Parsed::Sample(s) = p.parse(b"Step 7 LOSS 2.0 lr nan") else {
            panic!()
        };
        assert_eq!((s.step, s.get("loss")), (7, Some(2.0)));
        assert!(s.get("lr").unwrap().is_nan());
        let Parsed::Partial(s, why) = p.parse(b"step 8 loss 1.2.3 lr 1e-4") else {
            panic!()
        };
        assert_eq!((s.step, s.get("lr")), (8, Some(1e-4)));
        assert!(why.contains("\"1.2.3\" is not a number"), "{why}");
        assert_eq!(p.parse(b"Saving checkpoint to out/"), Parsed::Skip);
        // A mapped value without a step is reported, not dropped.
        assert!(matches!(p.parse(b"loss 2.0"), Parsed::Garbage(_)));
    }
}
