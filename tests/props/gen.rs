// The input generator: tokens that break parsers, and structure-aware edits of valid
// seeds (byte flips, truncation, splices, limit numbers, non-ASCII and broken UTF-8, very
// long lines, deep nesting, duplicated lines and keys), all drawn from one seeded `fastrand`.
//
// Self-contained (std, `fastrand`, `memchr`): the property tests use it, and the JSONL fast
// path's differential unit test includes this same file (`src/metrics/jsonl/flat.rs`).

/// Inputs are capped so one slow input cannot dominate a bounded run.
pub const MAX_LEN: usize = 256 << 10;

/// Tokens that break parsers: numbers at and past every integer and float limit, non-finite
/// spellings, non-ASCII and UTF-8 boundary characters, structure characters.
pub const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "-1",
    "1",
    "255",
    "256",
    "65536",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999999",
    "1e308",
    "1e309",
    "-1e309",
    "1.7976931348623157e308",
    "4.9e-324",
    "1e-400",
    "NaN",
    "nan",
    "-nan",
    "inf",
    "-inf",
    "Infinity",
    "-Infinity",
    "1e",
    "1.",
    ".5",
    "+",
    "-",
    ".",
    "0x10",
    "1_000",
    "00000000000000000001",
    "1.8e19",
    "3.4e38",
];

pub const WEIRD: &[&str] = &[
    "é",
    "ééééééééééééééééééééé",
    "😀",
    "\u{FFFD}",
    "\u{FEFF}",
    "\u{200B}",
    "\u{2028}",
    "\u{0085}",
    "\u{00A0}",
    "\u{1F600}\u{1F600}",
    "ﬁ",
    "İ",
    "\0",
    "\r",
    "\r\n",
    "\t",
    "\\",
    "\"",
    "'",
    "\x1b[31m",
    "\x7f",
];

/// Raw bytes that are not UTF-8 (lone lead/continuation bytes, a surrogate, overlong forms).
const BAD_UTF8: &[&[u8]] = &[
    b"\xff",
    b"\xc3",
    b"\x80",
    b"\xed\xa0\x80",
    b"\xf0\x9f",
    b"\xc0\xaf",
    b"\xf4\x90\x80\x80",
];

pub struct Gen {
    pub rng: fastrand::Rng,
}

impl Gen {
    pub fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.rng.usize(..from.len())]
    }

    pub fn chance(&mut self, one_in: u32) -> bool {
        self.rng.u32(..one_in) == 0
    }

    /// A number: usually ordinary, often at a limit.
    pub fn number(&mut self) -> String {
        match self.rng.u8(..4) {
            0 => self.pick(NUMBERS).to_string(),
            1 => self.rng.u64(..).to_string(),
            2 => format!("{}", self.rng.f64() * 10f64.powi(self.rng.i32(-12..20))),
            _ => self.rng.u32(..100_000).to_string(),
        }
    }

    /// One structure-aware edit of `x`; `dict` holds the format's own tokens (keys, field
    /// names, separators), `others` the seeds to splice from.
    pub fn mutate_once(&mut self, x: &mut Vec<u8>, dict: &[&str], others: &[Vec<u8>]) {
        let pos = |g: &mut Gen, x: &Vec<u8>| g.rng.usize(..=x.len());
        match self.rng.u8(..14) {
            0 if !x.is_empty() => {
                let i = self.rng.usize(..x.len());
                x[i] ^= 1 << self.rng.u8(..8);
            }
            1 if !x.is_empty() => {
                let i = self.rng.usize(..x.len());
                x[i] = *self.pick(b"\0\xff\n\r,\"{}[]: \\\x80\xc3\xe9=-.#'");
            }
            2 if !x.is_empty() => {
                let a = self.rng.usize(..x.len());
                let b = (a + self.rng.usize(..=64.min(x.len() - a))).min(x.len());
                x.drain(a..b);
            }
            3 if !x.is_empty() => {
                let a = self.rng.usize(..x.len());
                let b = (a + 1 + self.rng.usize(..256)).min(x.len());
                let piece = x[a..b].to_vec();
                let at = pos(self, x);
                x.splice(at..at, piece);
            }
            4 if !others.is_empty() => {
                let o = self.pick(others);
                if !o.is_empty() {
                    let a = self.rng.usize(..o.len());
                    let b = (a + 1 + self.rng.usize(..512)).min(o.len());
                    let at = pos(self, x);
                    x.splice(at..at, o[a..b].iter().copied());
                }
            }
            5 => x.truncate(pos(self, x)),
            6 if !dict.is_empty() => {
                let t = self.pick(dict).as_bytes().to_vec();
                let at = self.boundary(x);
                x.splice(at..at, t);
            }
            7 => self.replace_token(x, dict),
            8 => {
                let t = if self.chance(3) {
                    self.pick(BAD_UTF8).to_vec()
                } else {
                    self.pick(WEIRD).as_bytes().to_vec()
                };
                let at = if self.chance(2) {
                    self.boundary(x)
                } else {
                    pos(self, x)
                };
                x.splice(at..at, t);
            }
            9 => {
                // A very long line or field.
                let unit: Vec<u8> = match self.rng.u8(..3) {
                    0 => vec![*self.pick(b"a9 ,\"{[\\")],
                    1 => self.pick(WEIRD).as_bytes().to_vec(),
                    _ => self.number().into_bytes(),
                };
                // Mostly a few KiB; now and then past the readers' buffers.
                let len = if self.chance(8) { 96 << 10 } else { 4 << 10 };
                let n = self.rng.usize(1..len / unit.len().max(1) + 2);
                let at = pos(self, x);
                x.splice(at..at, unit.repeat(n));
            }
            10 => {
                // Deep nesting.
                let (open, close): (&[u8], &[u8]) = *self.pick(&[
                    (&b"["[..], &b"]"[..]),
                    (b"{\"a\":", b"}"),
                    (b"[[", b"]]"),
                    (b"a = [", b"]"),
                    (b"{a={", b"}}"),
                    (b"(", b")"),
                ]);
                let n = if self.chance(4) {
                    self.rng.usize(1..3000)
                } else {
                    self.rng.usize(1..200)
                };
                let at = pos(self, x);
                let mut ins = open.repeat(n);
                if self.chance(2) {
                    ins.extend(close.repeat(n));
                }
                x.splice(at..at, ins);
            }
            11 => {
                // Duplicate or drop a whole line (duplicated keys, repeated headers).
                let lines: Vec<(usize, usize)> = line_spans(x);
                if !lines.is_empty() {
                    let (a, b) = *self.pick(&lines);
                    if self.chance(3) {
                        x.drain(a..b);
                    } else {
                        let l = x[a..b].to_vec();
                        let (c, _) = *self.pick(&lines);
                        x.splice(c..c, l);
                    }
                }
            }
            12 => {
                // A quoted string's content replaced by something non-ASCII.
                if let Some(q) = self.nth_quote(x) {
                    let end = x[q + 1..]
                        .iter()
                        .position(|&b| b == b'"')
                        .map_or(x.len(), |e| q + 1 + e);
                    let t = self.pick(WEIRD).as_bytes().to_vec();
                    if self.chance(2) {
                        // Inside the value, at any byte: where a cut at a fixed byte
                        // offset (a hash shortened for a message) lands mid-character.
                        let at = self.rng.usize(q + 1..=end);
                        x.splice(at..at, t);
                    } else {
                        x.splice(q + 1..end, t);
                    }
                }
            }
            _ => {
                let n = self.number().into_bytes();
                let at = self.boundary(x);
                x.splice(at..at, n);
            }
        }
    }

    /// 1 to 8 edits, fewer more often.
    pub fn mutate(&mut self, x: &mut Vec<u8>, dict: &[&str], others: &[Vec<u8>]) {
        let most = 1 + self.rng.usize(..8);
        let n = 1 + self.rng.usize(..most);
        for _ in 0..n {
            self.mutate_once(x, dict, others);
            if x.len() > MAX_LEN {
                x.truncate(MAX_LEN);
            }
        }
    }

    /// A seed mutated: the usual way a target makes an input.
    pub fn mutated(&mut self, seeds: &[Vec<u8>], dict: &[&str]) -> Vec<u8> {
        let mut x = self.pick(seeds).clone();
        self.mutate(&mut x, dict, seeds);
        x
    }

    /// A position just after a separator (where a token is most likely to be read).
    fn boundary(&mut self, x: &[u8]) -> usize {
        if x.is_empty() {
            return 0;
        }
        let start = self.rng.usize(..x.len());
        x[start..]
            .iter()
            .position(|b| b" ,:=\t\n{[(\"".contains(b))
            .map_or(x.len(), |i| start + i + 1)
    }

    /// Replace a run of number-ish bytes with a limit number or a dict token.
    fn replace_token(&mut self, x: &mut Vec<u8>, dict: &[&str]) {
        if x.is_empty() {
            return;
        }
        let tok = |b: &u8| b.is_ascii_alphanumeric() || b"._+-".contains(b);
        let start = self.rng.usize(..x.len());
        let Some(a) = x[start..].iter().position(tok).map(|i| start + i) else {
            return;
        };
        let b = x[a..]
            .iter()
            .position(|b| !tok(b))
            .map_or(x.len(), |i| a + i);
        let with = if dict.is_empty() || self.chance(2) {
            self.number()
        } else {
            self.pick(dict).to_string()
        };
        x.splice(a..b, with.into_bytes());
    }

    fn nth_quote(&mut self, x: &[u8]) -> Option<usize> {
        let quotes: Vec<usize> = memchr::memchr_iter(b'"', x).collect();
        (!quotes.is_empty()).then(|| *self.pick(&quotes))
    }
}

/// (start, end including the newline) of each line.
fn line_spans(x: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', x) {
        out.push((start, nl + 1));
        start = nl + 1;
    }
    if start < x.len() {
        out.push((start, x.len()));
    }
    out
}
