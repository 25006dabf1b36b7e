//! The JSONL reader's fast path: a flat object whose mapped values are numbers, read in one
//! pass with word-at-a-time scans (the text between values checked against the previous
//! line's, quotes found eight bytes at once, keys compared as two u64s, unmapped values
//! skipped without looking inside). It answers only when it reads the line exactly as the
//! general scanner would; anything else (an escape in a key, a nested object or array, a
//! mapped value that is not a readable number, malformed JSON) gives `None` and the general
//! scanner reads the line from its start, so verdicts and messages stay the general
//! scanner's. The differential tests hold the two together.

use crate::metrics::num;
use crate::metrics::{Fields, Keys};

/// Key lengths compared as two words.
const WORD_KEY: usize = 16;

/// The mapped keys of up to [`WORD_KEY`] bytes as (low word, high word, bit per `wanted`
/// entry), by length, for a lookup that is a few integer compares.
#[derive(Clone, Debug)]
pub(super) struct Words {
    by_len: [Vec<(u64, u64, u32)>; WORD_KEY + 1],
    /// Bit L: every mapped key of length L compares byte for byte (none has a `.` or `/`,
    /// which match each other), so [`Words::by_len`] is the whole answer for that length.
    exact: u32,
}

impl Words {
    pub(super) fn new(keys: &Keys) -> Words {
        let mut by_len: [Vec<(u64, u64, u32)>; WORD_KEY + 1] = Default::default();
        let mut exact = (1u32 << (WORD_KEY + 1)) - 1;
        for (i, (_, k)) in keys.wanted.iter().enumerate() {
            if k.len() > WORD_KEY {
                continue;
            }
            if k.iter().any(|&c| c == b'.' || c == b'/') {
                exact &= !(1 << k.len());
                continue;
            }
            let (lo, hi) = words(k);
            match by_len[k.len()].iter_mut().find(|e| e.0 == lo && e.1 == hi) {
                Some(e) => e.2 |= 1 << i,
                None => by_len[k.len()].push((lo, hi, 1 << i)),
            }
        }
        Words { by_len, exact }
    }

    /// [`Keys::lookup_mask`] of `key`, whose words are `lo`, `hi`.
    #[inline(always)]
    fn lookup(&self, keys: &Keys, key: &[u8], lo: u64, hi: u64) -> u32 {
        let len = key.len();
        if len > WORD_KEY || self.exact & (1 << len) == 0 {
            return keys.lookup_mask(key);
        }
        let mut mask = 0;
        for &(a, b, bits) in &self.by_len[len] {
            if a == lo && b == hi {
                mask |= bits;
            }
        }
        mask
    }
}

/// A key of up to 16 bytes as two little-endian words, zero-padded.
fn words(k: &[u8]) -> (u64, u64) {
    let mut buf = [0u8; WORD_KEY];
    let n = k.len().min(WORD_KEY);
    buf[..n].copy_from_slice(&k[..n]);
    (load8(&buf, 0), load8(&buf, 8))
}

#[inline(always)]
fn load8(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each zero byte of `v`. Exact for the lowest zero byte (a borrow can only
/// mark bytes above a true zero), which is the only one used.
#[inline(always)]
fn zero_bytes(v: u64) -> u64 {
    v.wrapping_sub(ONES) & !v & HIGHS
}

/// Marks the `"` and `\` bytes of a word (the lowest mark is exact).
#[inline(always)]
fn quote_or_backslash(w: u64) -> u64 {
    zero_bytes(w ^ (ONES * u64::from(b'"'))) | zero_bytes(w ^ (ONES * u64::from(b'\\')))
}

/// The low `n` bytes of a word (n < 8).
#[inline(always)]
fn low_bytes(w: u64, n: usize) -> u64 {
    w & ((1u64 << (8 * n)) - 1)
}

#[inline(always)]
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(&c) = b.get(i) {
        // All four JSON blanks sort below '!': one compare for the usual non-blank.
        if c > b' ' || !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
            break;
        }
        i += 1;
    }
    i
}

/// A key's contents from `ks` (after its opening quote): (end, low word, high word), the
/// words zero-padded past the end. None for an escape or no closing quote.
#[inline(always)]
fn key_at(b: &[u8], ks: usize) -> Option<(usize, u64, u64)> {
    if ks + WORD_KEY <= b.len() {
        let lo = load8(b, ks);
        let m = quote_or_backslash(lo);
        if m != 0 {
            let p = (m.trailing_zeros() / 8) as usize;
            return (b[ks + p] == b'"').then(|| (ks + p, low_bytes(lo, p), 0));
        }
        let hi = load8(b, ks + 8);
        let m = quote_or_backslash(hi);
        if m != 0 {
            let p = (m.trailing_zeros() / 8) as usize;
            return (b[ks + 8 + p] == b'"').then(|| (ks + 8 + p, lo, low_bytes(hi, p)));
        }
    }
    // A long key, or one near the end of the line.
    let mut j = ks;
    loop {
        match *b.get(j)? {
            b'"' => break,
            b'\\' => return None,
            _ => j += 1,
        }
    }
    let (lo, hi) = words(&b[ks..j]);
    Some((j, lo, hi))
}

/// Past the closing quote of a string whose contents start at `j` (escapes skipped as the
/// general scanner skips them: the backslash and the byte after it).
#[inline(always)]
fn string_end(b: &[u8], mut j: usize) -> Option<usize> {
    while j + 8 <= b.len() {
        let m = quote_or_backslash(load8(b, j));
        if m == 0 {
            j += 8;
            continue;
        }
        let k = j + (m.trailing_zeros() / 8) as usize;
        if b[k] == b'"' {
            return Some(k + 1);
        }
        j = k + 2;
    }
    while j < b.len() {
        match b[j] {
            b'"' => return Some(j + 1),
            b'\\' => j += 2,
            _ => j += 1,
        }
    }
    None
}

/// Bytes that end a bare value (the general scanner's set).
#[inline(always)]
fn ends_value(c: u8) -> bool {
    matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\r')
}

/// The longest stretch between two values (blanks, a comma, a quoted key, a colon) that
/// [`Shape`] remembers.
const GLUE: usize = 24;
/// Fields of a line that [`Shape`] remembers.
const SHAPE_FIELDS: usize = 24;

/// The text between the values of the last line read here: trainers write every line with
/// the same keys in the same order, so the next line's `, "loss": ` is checked with three
/// word compares where scanning and looking up the key costs ten times that. A line whose
/// text differs is read by the scan from where it differs; only text equal to what the
/// scan read before is taken as known, so the result is the scan's.
#[derive(Clone, Debug, Default)]
pub(super) struct Shape {
    glue: Vec<Glue>,
}

#[derive(Clone, Copy, Debug)]
struct Glue {
    /// The bytes, zero-padded, as three little-endian words, and a mask of the real ones.
    words: [u64; 3],
    masks: [u64; 3],
    bytes: [u8; GLUE],
    len: usize,
    /// The key's targets ([`Words::lookup`]).
    mask: u32,
}

impl Glue {
    fn new(text: &[u8], mask: u32) -> Glue {
        let mut bytes = [0u8; GLUE];
        bytes[..text.len()].copy_from_slice(text);
        let mut words = [0u64; 3];
        let mut masks = [0u64; 3];
        for k in 0..3 {
            words[k] = load8(&bytes, 8 * k);
            let n = text.len().saturating_sub(8 * k).min(8);
            masks[k] = if n == 8 {
                u64::MAX
            } else {
                (1u64 << (8 * n)) - 1
            };
        }
        Glue {
            words,
            masks,
            bytes,
            len: text.len(),
            mask,
        }
    }

    /// Whether `b[i..]` starts with this text.
    #[inline(always)]
    fn at(&self, b: &[u8], i: usize) -> bool {
        if i + GLUE <= b.len() {
            let d = |k: usize| (load8(b, i + 8 * k) ^ self.words[k]) & self.masks[k];
            d(0) | d(1) | d(2) == 0
        } else {
            b.get(i..i + self.len) == Some(&self.bytes[..self.len])
        }
    }
}

/// The object at `b[i] == '{'`, top level. `Some(end)` (just past its `}`) with `fields` set
/// exactly as the general scanner sets them, or `None`: read the line with the general
/// scanner (and fresh fields).
pub(super) fn object(
    b: &[u8],
    start: usize,
    keys: &Keys,
    words: &Words,
    shape: &mut Shape,
    fields: &mut Fields,
) -> Option<usize> {
    // Fields as the last line had them: the text up to each value is known, so its key is.
    let mut i = start;
    let mut known = 0;
    while let Some(g) = shape.glue.get(known) {
        if !g.at(b, i) {
            break;
        }
        let at = i + g.len;
        i = field_value(b, at, g.mask, keys, fields)?;
        known += 1;
    }
    // The rest by scanning, noting where each value starts for the next line.
    let mut seen = [(0usize, 0usize, 0u32); SHAPE_FIELDS];
    let mut n = 0;
    let (mut from, mut i) = if known == 0 {
        let i = skip_ws(b, start + 1);
        if b.get(i) == Some(&b'}') {
            return Some(i + 1);
        }
        (start, i)
    } else {
        match b.get(skip_ws(b, i)) {
            Some(b',') => (i, skip_ws(b, i) + 1),
            Some(b'}') => return Some(skip_ws(b, i) + 1),
            _ => return None,
        }
    };
    loop {
        i = skip_ws(b, i);
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let ks = i + 1;
        let (ke, lo, hi) = key_at(b, ks)?;
        i = skip_ws(b, ke + 1);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        let mask = words.lookup(keys, &b[ks..ke], lo, hi);
        if n < SHAPE_FIELDS {
            seen[n] = (from, i, mask);
            n += 1;
        }
        i = field_value(b, i, mask, keys, fields)?;
        from = i;
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => {
                shape.learn(b, known, &seen[..n]);
                return Some(i + 1);
            }
            _ => return None,
        }
    }
}

impl Shape {
    /// After a line read whole: its first `known` fields were as remembered, `seen` are the
    /// scanned ones (text from, value at, key's targets).
    fn learn(&mut self, b: &[u8], known: usize, seen: &[(usize, usize, u32)]) {
        self.glue.truncate(known);
        for &(from, at, mask) in seen {
            if at - from > GLUE || self.glue.len() == SHAPE_FIELDS {
                break;
            }
            self.glue.push(Glue::new(&b[from..at], mask));
        }
    }
}

/// The value of a field whose key has the targets `mask`, at `i`: read (mapped) or skipped;
/// the index past it. None where the general scanner must decide.
#[inline(always)]
fn field_value(b: &[u8], i: usize, mask: u32, keys: &Keys, fields: &mut Fields) -> Option<usize> {
    let c = *b.get(i)?;
    if c == b'{' || c == b'[' {
        // Nested: the general scanner decides whether to enter it.
        return None;
    }
    if mask != 0 {
        return value(b, i, c, mask, keys, fields);
    }
    if c == b'"' {
        return string_end(b, i + 1);
    }
    let mut j = i;
    while j < b.len() && !ends_value(b[j]) {
        j += 1;
    }
    (j > i).then_some(j)
}

/// A mapped, non-nested value at `i` (first byte `c`): set each target in `mask`; the index
/// past it. None when the general scanner would report it (not a number).
#[inline(always)]
fn value(b: &[u8], i: usize, c: u8, mask: u32, keys: &Keys, fields: &mut Fields) -> Option<usize> {
    if c.is_ascii_digit() || c == b'-' {
        // A bare decimal followed by a delimiter: the general scanner's plain number.
        if let Some((v, n)) = num::decimal_prefix(&b[i..]) {
            if b.get(i + n).is_none_or(|&d| ends_value(d)) {
                let mut bits = mask;
                while bits != 0 {
                    fields.set(keys.wanted[bits.trailing_zeros() as usize].0, v);
                    bits &= bits - 1;
                }
                return Some(i + n);
            }
        }
    }
    // A quoted number, `NaN`, `null`, a time string: the raw text, read by its target.
    let end = if c == b'"' {
        string_end(b, i + 1)?
    } else {
        let mut j = i;
        while j < b.len() && !ends_value(b[j]) {
            j += 1;
        }
        if j == i {
            return None;
        }
        j
    };
    let raw = &b[i..end];
    if raw != b"null" {
        let mut bits = mask;
        while bits != 0 {
            let t = keys.wanted[bits.trailing_zeros() as usize].0;
            fields.set(t, keys.value(t, raw)?);
            bits &= bits - 1;
        }
    }
    Some(end)
}

#[cfg(test)]
mod tests {
    use super::super::JsonlParser;
    use crate::metrics::mapping::{Clock, KeyList, MetricsConfig, TimeUnit, VramUnit};
    use gen::{Gen, NUMBERS};

    /// The property tests' input generator, the same file (one generator, not two).
    #[allow(dead_code)]
    mod gen {
        include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/props/gen.rs"));
    }

    /// Configs whose keys stress the word lookup: separators, one key for two targets, keys
    /// that are prefixes of others, keys at and past 8 and 16 bytes, other clocks.
    /// The fast path's answer for `line` equals the general scanner's (config `c`).
    fn assert_fast_is_general(p: &mut JsonlParser, line: &[u8], c: usize) {
        let want = format!("{:?}", p.parse_line(line, false));
        let got = format!("{:?}", p.parse_line(line, true));
        assert_eq!(
            got,
            want,
            "config {c}, line {:?}",
            String::from_utf8_lossy(line)
        );
    }

    fn configs() -> Vec<MetricsConfig> {
        vec![
            MetricsConfig::default(),
            MetricsConfig {
                loss: "train/loss".into(),
                lr: "train.lr".into(),
                step: "trainer/global_step".into(),
                ..Default::default()
            },
            MetricsConfig {
                vram: "lr".into(),
                grad_norm: "loss_scale".into(),
                eval_loss: "validation_loss_ema".into(),
                tokens_per_s: "tokens_per_s_16b".into(),
                total_steps: "max_steps".into(),
                tokens: "tokens".into(),
                clock: Clock::Elapsed,
                ..Default::default()
            },
            MetricsConfig {
                lr: KeyList(vec!["lr".into(), "lr_head".into(), "lr/2".into()]),
                step_time: "dt".into(),
                step_time_unit: TimeUnit::Ms,
                tokens_per_step: Some(4096.0),
                clock: Clock::ElapsedMs,
                vram_unit: VramUnit::MiB,
                ..Default::default()
            },
        ]
    }

    const KEYS: &[&str] = &[
        "step",
        "loss",
        "lr",
        "grad_norm",
        "tokens_per_s",
        "tokens_per_s_16b",
        "time",
        "eval_loss",
        "vram_gib",
        "lr_head",
        "lr/2",
        "lr.2",
        "train/loss",
        "train.loss",
        "train",
        "trainer/global_step",
        "trainer.global_step",
        "lo",
        "los",
        "losss",
        "loss_scale",
        "validation_loss_ema",
        "validation_loss_em",
        "max_steps",
        "tokens",
        "dt",
        "epoch",
        "xxxxxxxx",
        "xxxxxxxxxxxxxxxx",
        "xxxxxxxxxxxxxxxxx",
        "",
        "st\\\"ep",
        "st\\u0065p",
        "é",
        "ste\u{0}",
    ];

    const VALUES: &[&str] = &[
        "\"6.0e-04\"",
        "\"NaN\"",
        "\"a,b}\"",
        "\"say \\\"hi\\\" \\\\\"",
        "\"\\\\\"",
        "\"\"",
        "\"a long string value, longer than a word or two: {\\\"not\\\": [json]}\"",
        "NaN",
        "Infinity",
        "-Infinity",
        "nan",
        "null",
        "true",
        "false",
        "{\"loss\": 1.5, \"lr\": 2}",
        "{\"global_step\": 9}",
        "{}",
        "[1, {\"y\": 2}, \"]\"]",
        "[]",
        "\"2024-05-01T00:00:00Z\"",
        "\"2024-05-01T00:00:00.5+02:00\"",
        "\"0:29:27\"",
        "\"1 day, 0:00:10\"",
        "\"123ms\"",
        "1700000000.125",
        "1800000000.250",
        "0.0003",
        "6e-05",
        "1.5E+3",
        "-7",
        "00012",
        "12345678901234567890123",
        "0.1234567890123456789012",
        "1.",
        ".5",
        "-",
        "1e",
        "0x10",
    ];

    const BLANKS: &[&str] = &["", " ", " ", " ", "  ", "\t", "\r"];

    fn one(g: &mut Gen, from: &[&'static str]) -> &'static str {
        from[g.rng.usize(..from.len())]
    }

    /// A line built from keys, values and blanks, sometimes broken by the fuzzer's edits.
    fn line(g: &mut Gen) -> Vec<u8> {
        let mut s = String::from(*g.pick::<&str>(&["", "", " "]));
        s.push('{');
        let fields = g.rng.usize(..9);
        for f in 0..fields {
            if f > 0 {
                s.push_str(one(g, BLANKS));
                s.push(',');
            }
            s.push_str(one(g, BLANKS));
            s.push('"');
            s.push_str(one(g, KEYS));
            s.push('"');
            s.push_str(one(g, BLANKS));
            s.push(':');
            s.push_str(one(g, BLANKS));
            let v = match g.rng.u8(..6) {
                0 | 1 => g.number(),
                2 => g.pick(NUMBERS).to_string(),
                3 => format!("{:.4}", g.rng.f64() * 10.0),
                _ => one(g, VALUES).to_string(),
            };
            s.push_str(&v);
        }
        s.push_str(one(g, BLANKS));
        s.push('}');
        s.push_str(g.pick::<&str>(&["", "", " ", "x", "\t"]));
        let mut b = s.into_bytes();
        if g.chance(4) {
            let copy = b.clone();
            g.mutate(
                &mut b,
                &["\"", "{", "}", ",", ":", "\\", "\x1b[1m", "\r"],
                &[copy],
            );
        }
        b
    }

    /// The fast path reads every line as the general scanner does: the same sample, partial
    /// sample, skip or garbage (with the same words), on generated lines for every config.
    /// And it does take most well-formed lines.
    #[test]
    fn fast_path_reads_every_line_as_the_general_scanner() {
        let iters: usize = std::env::var("ROGER_FUZZ_ITERS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(40_000);
        for (c, m) in configs().iter().enumerate() {
            let mut p = JsonlParser::new(m);
            let mut g = Gen {
                rng: fastrand::Rng::with_seed(0xF1A7 + c as u64),
            };
            let mut fast = 0;
            for _ in 0..iters {
                let l = line(&mut g);
                assert_fast_is_general(&mut p, &l, c);
                let mut fields = crate::metrics::Fields::default();
                let start = l.iter().position(|&b| b == b'{').unwrap_or(0);
                if l.get(start) == Some(&b'{')
                    && super::object(
                        &l,
                        start,
                        &p.keys,
                        &p.words,
                        &mut p.shape.clone(),
                        &mut fields,
                    )
                    .is_some()
                {
                    fast += 1;
                }
            }
            assert!(
                fast * 10 > iters,
                "config {c}: only {fast} of {iters} lines fast"
            );
        }
    }

    /// Runs of lines with one shape (same keys, order and blanks; new values), as trainers
    /// write them, with edits that break the remembered shape at one field (another key,
    /// blank, value kind, a field less or more) and fuzzed lines between: every line reads
    /// as the general scanner reads it, with the shape carried from line to line.
    #[test]
    fn remembered_shapes_read_as_the_general_scanner() {
        for (c, m) in configs().iter().enumerate() {
            let mut p = JsonlParser::new(m);
            let mut g = Gen {
                rng: fastrand::Rng::with_seed(0x5A9E + c as u64),
            };
            let mut remembered = 0;
            for _ in 0..300 {
                let n = 1 + g.rng.usize(..8);
                let template: Vec<(&str, &str, &str, u8)> = (0..n)
                    .map(|_| {
                        (
                            one(&mut g, KEYS),
                            one(&mut g, BLANKS),
                            one(&mut g, BLANKS),
                            g.rng.u8(..4),
                        )
                    })
                    .collect();
                for _ in 0..40 {
                    let mut fields = template.clone();
                    match g.rng.u8(..12) {
                        0 => fields.truncate(fields.len() - 1),
                        1 => fields.push(("loss", " ", " ", 0)),
                        2 => {
                            let k = g.rng.usize(..fields.len());
                            fields[k].0 = one(&mut g, KEYS);
                        }
                        3 => {
                            let k = g.rng.usize(..fields.len());
                            fields[k].2 = one(&mut g, BLANKS);
                        }
                        4 => {
                            let k = g.rng.usize(..fields.len());
                            fields[k].3 = 3;
                        }
                        _ => {}
                    }
                    let mut s = String::from("{");
                    for (f, (key, before, after, kind)) in fields.iter().enumerate() {
                        if f > 0 {
                            s.push(',');
                        }
                        s.push_str(before);
                        s.push_str(&format!("\"{key}\":"));
                        s.push_str(after);
                        s.push_str(&match kind {
                            0 => g.rng.u64(..10_000_000).to_string(),
                            1 => format!("{:.4}", g.rng.f64() * 10.0),
                            2 => g.number(),
                            _ => one(&mut g, VALUES).to_string(),
                        });
                    }
                    s.push('}');
                    let mut l = s.into_bytes();
                    if g.chance(15) {
                        let copy = l.clone();
                        g.mutate(&mut l, &["\"", "{", "}", ",", ":", " "], &[copy]);
                    }
                    assert_fast_is_general(&mut p, &l, c);
                    remembered += p.shape.glue.len();
                }
            }
            assert!(
                remembered > 20_000,
                "config {c}: shapes were remembered {remembered} times"
            );
        }
    }

    /// The cases the fast path must hand over or get exactly right, one by one.
    #[test]
    fn fast_path_edge_cases() {
        let m = MetricsConfig {
            vram: "lr".into(),
            ..Default::default()
        };
        let mut p = JsonlParser::new(&m);
        for l in [
            r#"{"step": 1, "loss": 2.5}"#,
            r#"{"step":1,"loss":2.5}"#,
            r#"{ "step" : 1 , "loss" : 2.5 }  "#,
            r#"{"step": 1, "loss": 2.5, "loss": 3.5}"#,
            r#"{"step": 1, "loss": 2.5, "loss": null}"#,
            r#"{"step": 1, "loss": 2.5, "loss": "x"}"#,
            r#"{"step": 1, "lr": 0.5}"#,
            r#"{"step": 1, "lr": "0.5"}"#,
            r#"{"step": 1, "los": 2, "losss": 3, "lo": 4}"#,
            r#"{"step": 1, "loss": NaN, "grad_norm": -Infinity}"#,
            r#"{"step": 1, "loss": 1e400}"#,
            r#"{"step": 1, "loss": 12345678901234567890}"#,
            r#"{"step": 1, "loss": 0.30000000000000004}"#,
            r#"{"step": 1, "loss": 2.5x}"#,
            r#"{"step": 1, "loss": 2.5"#,
            r#"{"step": 1, "loss": }"#,
            r#"{"step": 1, "msg": "a \"quoted\" }, \\", "loss": 2}"#,
            r#"{"step": 1, "msg": "unterminated \"}"#,
            r#"{"st\"ep": 1, "step": 2}"#,
            r#"{"step": 1, "x": {"loss": 9}, "loss": 2}"#,
            r#"{"step": 1, "x": [1, "]", {"a": "}"}], "loss": 2}"#,
            r#"{"step": 1, "time": "2024-05-01T00:00:00Z"}"#,
            r#"{"step": 1, "time": 1e300}"#,
            r#"{"step": 1, "time": "yesterday"}"#,
            r#"{"step": -1}"#,
            r#"{"step": 1.5}"#,
            r#"{"step": 1} {"step": 2}"#,
            r#"{"step": 1,}"#,
            r#"{}"#,
            r#"{"eval_loss": 2}"#,
            "{\"step\": 1, \"loss\": 2.5}\r",
            "{\"step\": 1, \x1b[31m\"loss\": 2.5}",
            "{\"step\": 1, \"loss\": 2.5\x1b[0m}",
        ] {
            let want = format!("{:?}", p.parse_line(l.as_bytes(), false));
            let got = format!("{:?}", p.parse_line(l.as_bytes(), true));
            assert_eq!(got, want, "{l}");
        }
    }
}
