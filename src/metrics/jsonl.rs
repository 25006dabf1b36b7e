//! JSON lines: a key extractor that walks each object once and parses only the mapped keys'
//! values — no DOM, no allocation on the common path (flat keys, plain numbers). Nested
//! objects are entered only when a mapped key lies under them. Accepts what Python's json
//! writes (`NaN`, `Infinity`) and numbers logged as strings. Flat lines are read by [`flat`]
//! first, which hands any line it cannot read exactly as this scanner does back to it.

mod flat;

use super::{Fields, Keys, LineParser, Parsed, Target};
use crate::metrics::mapping::MetricsConfig;

#[derive(Clone)]
pub struct JsonlParser {
    keys: Keys,
    words: flat::Words,
    shape: flat::Shape,
    step_key: String,
    path: Vec<u8>,
}

impl JsonlParser {
    pub fn new(m: &MetricsConfig) -> JsonlParser {
        let keys = Keys::new(m);
        JsonlParser {
            words: flat::Words::new(&keys),
            shape: flat::Shape::default(),
            keys,
            step_key: m.step.clone(),
            path: Vec::new(),
        }
    }

    /// A line, through the fast path first when `fast` (the tests compare both ways).
    fn parse_line(&mut self, line: &[u8], fast: bool) -> Parsed {
        let needs_cleaning = memchr::memchr2(b'\r', 0x1b, line).is_some();
        let cleaned;
        let line = if needs_cleaning {
            cleaned = super::clean_line(line);
            &*cleaned
        } else {
            line
        };
        let start = match line.iter().position(|b| !b.is_ascii_whitespace()) {
            None => return Parsed::Skip,
            Some(i) => i,
        };
        if line[start] != b'{' {
            return Parsed::Garbage(format!(
                "expected a JSON object, found {:?}",
                preview(&line[start..])
            ));
        }
        let mut fields = Fields::default();
        if fast {
            if let Some(end) = flat::object(
                line,
                start,
                &self.keys,
                &self.words,
                &mut self.shape,
                &mut fields,
            ) {
                if line[end..]
                    .iter()
                    .all(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
                {
                    return fields.finish(&self.keys, &self.step_key);
                }
            }
            fields = Fields::default();
        }
        self.path.clear();
        let mut sc = Scanner {
            b: line,
            i: start,
            keys: &self.keys,
            fields: &mut fields,
        };
        match sc.object(&mut self.path) {
            Ok(()) => {}
            Err(why) => return Parsed::Garbage(why),
        }
        if sc.skip_ws() < line.len() {
            return Parsed::Garbage(format!(
                "unexpected text after the JSON object at column {}",
                sc.i + 1
            ));
        }
        fields.finish(&self.keys, &self.step_key)
    }
}

impl LineParser for JsonlParser {
    fn parse(&mut self, line: &[u8]) -> Parsed {
        self.parse_line(line, true)
    }

    fn reset(&mut self) {}

    fn fork(&self) -> Option<Box<dyn LineParser>> {
        Some(Box::new(self.clone()))
    }
}

fn preview(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(40)]).into_owned()
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    keys: &'a Keys,
    fields: &'a mut Fields,
}

impl Scanner<'_> {
    fn skip_ws(&mut self) -> usize {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
        self.i
    }

    fn err(&self, what: &str) -> String {
        if self.i >= self.b.len() {
            format!("truncated JSON: expected {what} at end of line")
        } else {
            format!("bad JSON: expected {what} at column {}", self.i + 1)
        }
    }

    /// At `{`; consumes through the matching `}`. `path` holds the enclosing keys + `/`.
    fn object(&mut self, path: &mut Vec<u8>) -> Result<(), String> {
        self.i += 1;
        self.skip_ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            if self.b.get(self.i) != Some(&b'"') {
                return Err(self.err("a key in quotes"));
            }
            let (ks, ke) = self.string()?;
            self.skip_ws();
            if self.b.get(self.i) != Some(&b':') {
                return Err(self.err("':'"));
            }
            self.i += 1;
            self.skip_ws();
            let b = self.b;
            let keys = self.keys;
            let key = &b[ks..ke];
            let depth = path.len();
            let full: &[u8] = if depth == 0 {
                key
            } else {
                path.extend_from_slice(key);
                path
            };
            match self.b.get(self.i) {
                Some(b'{') if keys.under(full) => {
                    if depth == 0 {
                        path.extend_from_slice(key);
                    }
                    path.push(b'/');
                    self.object(path)?;
                }
                Some(_) => {
                    let mask = keys.lookup_mask(full);
                    if mask == 0 {
                        self.skip_value()?;
                    } else if let Some(v) = self.plain_number() {
                        // The common case: a bare number, read in the pass that finds its end.
                        let mut bits = mask;
                        while bits != 0 {
                            self.fields
                                .set(keys.wanted[bits.trailing_zeros() as usize].0, v);
                            bits &= bits - 1;
                        }
                    } else {
                        let (vs, ve) = self.scalar()?;
                        let raw = &b[vs..ve];
                        for (i, (t, _)) in keys.wanted.iter().enumerate() {
                            if mask & (1 << i) != 0
                                && !self.record(*t, raw)
                                && self.fields.bad.is_none()
                            {
                                self.fields.bad = Some(format!(
                                    "`{}` is {}, expected a number",
                                    full_name(path, depth, key),
                                    preview(raw)
                                ));
                            }
                        }
                    }
                }
                None => return Err(self.err("a value")),
            }
            path.truncate(depth);
            self.skip_ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.err("',' or '}'")),
            }
        }
    }

    /// A bare decimal number at the cursor, followed by a delimiter; moves past it.
    #[inline]
    fn plain_number(&mut self) -> Option<f64> {
        let rest = &self.b[self.i..];
        if !matches!(rest.first(), Some(b'0'..=b'9' | b'-')) {
            return None;
        }
        let (v, n) = super::num::decimal_prefix(rest)?;
        match rest.get(n) {
            None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\r') => {
                self.i += n;
                Some(v)
            }
            _ => None,
        }
    }

    /// False when the value is not a number (null counts as absent, not bad).
    fn record(&mut self, t: Target, raw: &[u8]) -> bool {
        if raw == b"null" {
            return true;
        }
        match self.keys.value(t, raw) {
            Some(v) => {
                self.fields.set(t, v);
                true
            }
            None => false,
        }
    }

    /// At `"`; returns the contents' span and moves past the closing quote.
    fn string(&mut self) -> Result<(usize, usize), String> {
        let start = self.i + 1;
        let b = self.b;
        let mut j = start;
        // Keys and most values are short: a plain loop beats a SIMD search's setup there.
        let short_end = b.len().min(start + 32);
        while j < short_end {
            match b[j] {
                b'"' => {
                    self.i = j + 1;
                    return Ok((start, j));
                }
                b'\\' => j += 2,
                _ => j += 1,
            }
        }
        loop {
            if j >= b.len() {
                self.i = b.len();
                return Err(self.err("a closing '\"'"));
            }
            match memchr::memchr2(b'"', b'\\', &b[j..]) {
                None => j = b.len(),
                Some(k) if b[j + k] == b'\\' => j += k + 2,
                Some(k) => {
                    self.i = j + k + 1;
                    return Ok((start, j + k));
                }
            }
        }
    }

    /// A string, number or literal; returns its raw span (strings with their quotes).
    fn scalar(&mut self) -> Result<(usize, usize), String> {
        let start = self.i;
        match self.b.get(self.i) {
            Some(b'"') => {
                self.string()?;
                Ok((start, self.i))
            }
            Some(b'{') | Some(b'[') => {
                self.skip_value()?;
                Ok((start, self.i))
            }
            _ => {
                while self.i < self.b.len()
                    && !matches!(self.b[self.i], b',' | b'}' | b']' | b' ' | b'\t' | b'\r')
                {
                    self.i += 1;
                }
                if self.i == start {
                    return Err(self.err("a value"));
                }
                Ok((start, self.i))
            }
        }
    }

    fn skip_value(&mut self) -> Result<(), String> {
        match self.b.get(self.i) {
            Some(b'{') | Some(b'[') => {
                let mut depth = 0usize;
                while self.i < self.b.len() {
                    match self.b[self.i] {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Ok(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
                Err(self.err("the end of a nested value"))
            }
            _ => self.scalar().map(|_| ()),
        }
    }
}

fn full_name(path: &[u8], depth: usize, key: &[u8]) -> String {
    if depth == 0 {
        String::from_utf8_lossy(key).into_owned()
    } else {
        String::from_utf8_lossy(path).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Record as Sample;

    fn parse(m: &MetricsConfig, line: &str) -> Parsed {
        JsonlParser::new(m).parse(line.as_bytes())
    }

    fn sample(m: &MetricsConfig, line: &str) -> Sample {
        match parse(m, line) {
            Parsed::Sample(s) => s,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn flat_keys_and_python_tokens() {
        let m = MetricsConfig::default();
        let s = sample(
            &m,
            r#"{"step": 10, "loss": NaN, "lr": "6.0e-04", "grad_norm": Infinity, "note": "a,b}", "x": [1, {"y": 2}], "time": 1700000000}"#,
        );
        assert_eq!(s.step, 10);
        assert!(s.get("loss").unwrap().is_nan());
        assert_eq!(s.get("lr"), Some(6e-4));
        assert_eq!(s.get("grad_norm"), Some(f64::INFINITY));
        assert_eq!(s.time, Some(1.7e9));
    }

    #[test]
    fn nested_and_slashed_keys() {
        let m = MetricsConfig {
            loss: "train/loss".into(),
            lr: "train.lr".into(),
            step: "trainer/global_step".into(),
            ..Default::default()
        };
        let s = sample(
            &m,
            r#"{"trainer/global_step": 7, "train": {"loss": 2.5, "other": {"lr": 1}, "lr": 0.1}}"#,
        );
        assert_eq!(
            (s.step, s.get("loss"), s.get("lr")),
            (7, Some(2.5), Some(0.1))
        );
    }

    #[test]
    fn garbage_is_explained() {
        let m = MetricsConfig::default();
        for (line, want) in [
            ("not json", "expected a JSON object"),
            (r#"{"step": 1, "loss": 2"#, "truncated JSON"),
            (r#"{"loss": 2}"#, "no step"),
            (r#"{"step": -3}"#, "not a non-negative integer"),
            (r#"{"step": 1} trailing"#, "unexpected text"),
        ] {
            match parse(&m, line) {
                Parsed::Garbage(why) => assert!(why.contains(want), "{line}: {why}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        assert_eq!(parse(&m, "   "), Parsed::Skip);
    }

    /// Issue 18 item 6: one bad field no longer costs the line its other fields.
    #[test]
    fn one_unreadable_field_keeps_the_rest_of_the_line() {
        let m = MetricsConfig::default();
        match parse(
            &m,
            r#"{"step": 7, "loss": "high", "lr": 3e-4, "grad_norm": 0.5}"#,
        ) {
            Parsed::Partial(s, why) => {
                assert_eq!(
                    (s.step, s.get("lr"), s.get("grad_norm"), s.get("loss")),
                    (7, Some(3e-4), Some(0.5), None)
                );
                assert!(
                    why.contains("`loss` is") && why.contains("other fields are used"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Without a readable step there is no sample to keep.
        assert!(matches!(
            parse(&m, r#"{"step": "x", "loss": 2}"#),
            Parsed::Garbage(_)
        ));
        // A summary line with no step and no mapped metric is skipped quietly.
        assert_eq!(
            parse(&m, r#"{"predict_loss": 0.3, "predict_runtime": 5.1}"#),
            Parsed::Skip
        );
    }

    #[test]
    fn escaped_quotes_and_null() {
        let m = MetricsConfig::default();
        let s = sample(&m, r#"{"msg": "say \"hi\" \\", "step": 3.0, "loss": null}"#);
        assert_eq!(s.step, 3);
        assert_eq!(s.get("loss"), None);
    }

    #[test]
    fn vram_unit_is_converted() {
        let m = MetricsConfig {
            vram: "mem".into(),
            vram_unit: crate::metrics::mapping::VramUnit::MiB,
            ..Default::default()
        };
        let s = sample(&m, r#"{"step": 1, "mem": 2048}"#);
        assert_eq!(s.get("vram_gib"), Some(2.0));
    }
}
