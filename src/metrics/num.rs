//! Numbers and lines as trainers write them: plain, quoted (`"0.000e+00"`), Python's `NaN` /
//! `Infinity`, RFC 3339 times; ANSI colour codes and `\r` progress-bar fragments dropped.
//! The decimal fast path does most numbers without `str::parse` (see bench_critic).

/// The regex of a non-finite value as trainers print it, any case, with a sign: `nan`, `NaN`,
/// `-nan` (C's printf), `inf`, `-inf`, `Infinity`, `-Infinity` (Python's json), `+inf`.
/// Everything it matches, [`parse_num`] reads as a non-finite number (a unit test holds the
/// two together): text patterns take it beside their own number regex, so that a line
/// printing `loss nan` is a sample, not a line that no longer matches.
pub const NON_FINITE_RE: &str = r"(?i:[-+]?(?:nan|inf(?:inity)?))\b";

/// A number as trainers write it: plain, in a string (`"0.000e+00"`), or non-finite in any
/// spelling [`NON_FINITE_RE`] matches (Python's `NaN`, `Infinity`, `-Infinity`; C's `nan`,
/// `-nan`, `inf`). The one function that decides what a number is, for every reader.
pub fn parse_num(b: &[u8]) -> Option<f64> {
    let b = b.trim_ascii();
    let b = b
        .strip_prefix(b"\"")
        .and_then(|s| s.strip_suffix(b"\""))
        .unwrap_or(b)
        .trim_ascii();
    if let Some(v) = fast_decimal(b) {
        return Some(v);
    }
    if let Some(v) = non_finite(b) {
        return Some(v);
    }
    std::str::from_utf8(b).ok()?.parse::<f64>().ok()
}

/// `nan`, `inf`, `infinity` in any case, with an optional sign (what [`NON_FINITE_RE`]
/// matches); a sign on a NaN is dropped (a NaN is a NaN).
fn non_finite(b: &[u8]) -> Option<f64> {
    let (neg, word) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    if word.eq_ignore_ascii_case(b"nan") {
        Some(f64::NAN)
    } else if word.eq_ignore_ascii_case(b"inf") || word.eq_ignore_ascii_case(b"infinity") {
        Some(if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        })
    } else {
        None
    }
}

/// Exact powers of ten (all representable in an f64).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Clinger's fast path: a decimal whose digits fit in 2^53 and whose power of ten is at most
/// 22 is one correctly rounded multiplication or division, so this equals `str::parse`. It
/// covers what trainers print; anything else (more digits, big exponents) returns None and
/// takes the standard parser.
fn fast_decimal(b: &[u8]) -> Option<f64> {
    decimal_prefix(b).and_then(|(v, n)| (n == b.len()).then_some(v))
}

/// The fast path on the longest decimal at the start of `b`: its value and length. Lets the
/// JSONL scanner read a number in the same pass that finds its end.
///
/// Plain decimals of at most 19 digits without an exponent (what trainers print for steps,
/// losses, times) take a tight loop here: 19 digits cannot overflow a u64, so no checked
/// arithmetic per digit. Anything else takes [`decimal_prefix_general`], which gives the same
/// answer for these too (the unit tests compare the two).
#[inline(always)]
pub fn decimal_prefix(b: &[u8]) -> Option<(f64, usize)> {
    let (neg, mut i) = match b.first()? {
        b'-' => (true, 1),
        b'+' => (false, 1),
        _ => (false, 0),
    };
    let (mut mant, mut n) = digits8(b, i);
    i += n;
    let mut digits = n;
    while n == 8 && digits <= 19 {
        let (v, k) = digits8(b, i);
        mant = mant.wrapping_mul(POW10_INT[k]).wrapping_add(v);
        (i, n, digits) = (i + k, k, digits + k);
    }
    let mut frac = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        loop {
            let (v, k) = digits8(b, i);
            mant = mant.wrapping_mul(POW10_INT[k]).wrapping_add(v);
            (i, frac) = (i + k, frac + k);
            if k < 8 || digits + frac > 19 {
                break;
            }
        }
        digits += frac;
    }
    if digits == 0 {
        return None;
    }
    if digits > 19 || matches!(b.get(i), Some(b'e' | b'E')) {
        return decimal_prefix_general(b);
    }
    if mant > (1u64 << 53) {
        return None;
    }
    let m = exact_f64(mant);
    let v = if frac == 0 { m } else { m / *POW10.get(frac)? };
    Some((if neg { -v } else { v }, i))
}

/// `m as f64` for m <= 2^53 (exact). Below 2^52 through the bits of 2^52 + m: a move and a
/// subtraction instead of the conversion instruction.
#[inline(always)]
fn exact_f64(m: u64) -> f64 {
    const TWO52: u64 = 1 << 52;
    if m < TWO52 {
        f64::from_bits(0x4330_0000_0000_0000 | m) - TWO52 as f64
    } else {
        m as f64
    }
}

#[inline(always)]
fn load8(s: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[..8]);
    u64::from_le_bytes(w)
}

/// 10^k for the up to 8 digits [`digits8`] reads at once.
const POW10_INT: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The run of ASCII digits at `b[i..]`, at most 8 of them, read as one word: (their value,
/// how many). Eight bytes are tested and combined at once (SWAR), which is what makes long
/// steps and unix times cheap.
#[inline(always)]
fn digits8(b: &[u8], i: usize) -> (u64, usize) {
    let w = if let Some(s) = b.get(i..i + 8) {
        load8(s)
    } else if i < b.len() && b.len() >= 8 {
        // Fewer than 8 bytes left: the slice's last word, shifted so that it starts at `i`
        // (zeros, which are not digits, come in at the top). A byte-wise copy into a buffer
        // would stall the load that follows it.
        load8(&b[b.len() - 8..]) >> (8 * (i + 8 - b.len()))
    } else {
        let mut w = [0u8; 8];
        let rest = b.get(i..).unwrap_or_default();
        w[..rest.len()].copy_from_slice(rest);
        u64::from_le_bytes(w)
    };
    // A byte is a digit when its high nibble is 3 both as is and plus 6 (0x30..=0x39). No
    // carry crosses a digit byte, so the bytes up to the first non-digit are judged exactly.
    let hi = 0xF0F0_F0F0_F0F0_F0F0u64;
    let threes = 0x3030_3030_3030_3030u64;
    let not_digit = ((w & hi) ^ threes) | ((w.wrapping_add(0x0606_0606_0606_0606) & hi) ^ threes);
    let n = (not_digit.trailing_zeros() / 8) as usize;
    if n == 0 {
        return (0, 0);
    }
    // The digits to the top of the word (the first in the lowest byte; zeros shifted in
    // below are leading zeros), then pairs, quads and octets combined by multiplication.
    let mut v = (w << (8 * (8 - n))) & 0x0F0F_0F0F_0F0F_0F0F;
    v = (v.wrapping_mul(2561)) >> 8;
    v = ((v & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601)) >> 16;
    v = ((v & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001)) >> 32;
    (v, n)
}

/// [`decimal_prefix`] for every spelling: exponents, and mantissas of any length (checked
/// arithmetic; a mantissa over 2^53 is left to the standard parser).
pub fn decimal_prefix_general(b: &[u8]) -> Option<(f64, usize)> {
    let (neg, mut i) = match b.first()? {
        b'-' => (true, 1),
        b'+' => (false, 1),
        _ => (false, 0),
    };
    let mut mant: u64 = 0;
    let mut exp: i32 = 0;
    let mut digits = 0;
    let start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        mant = mant.checked_mul(10)?.checked_add(u64::from(b[i] - b'0'))?;
        digits += 1;
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            mant = mant.checked_mul(10)?.checked_add(u64::from(b[i] - b'0'))?;
            exp -= 1;
            digits += 1;
            i += 1;
        }
    }
    if digits == 0 || (i == start + 1 && b[start] == b'.') {
        return None;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        let eneg = match b.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let es = i;
        let mut e: i32 = 0;
        while i < b.len() && b[i].is_ascii_digit() && e < 10_000 {
            e = e * 10 + i32::from(b[i] - b'0');
            i += 1;
        }
        if i == es {
            return None;
        }
        exp += if eneg { -e } else { e };
    }
    if mant > (1u64 << 53) {
        return None;
    }
    let m = mant as f64;
    let v = if exp >= 0 {
        m * *POW10.get(exp as usize)?
    } else {
        m / *POW10.get((-exp) as usize)?
    };
    Some((if neg { -v } else { v }, i))
}

/// A time field: unix seconds, or an RFC 3339 string.
pub fn parse_time(b: &[u8]) -> Option<f64> {
    if let Some(v) = parse_num(b) {
        // Only instants a calendar can name: a garbage 1e300 would make every age absurd.
        let representable =
            v.is_finite() && chrono::DateTime::from_timestamp(v as i64, 0).is_some();
        return representable.then_some(v);
    }
    let s = std::str::from_utf8(b.trim_ascii()).ok()?.trim_matches('"');
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    Some(t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9)
}

/// Time since the run started: seconds (`1767.5`), or a clock `H:MM:SS(.f)` / `M:SS`, with
/// Python's `N day(s), ` prefix for long runs (`"1 day, 0:29:27"`).
pub fn parse_elapsed(b: &[u8]) -> Option<f64> {
    if let Some(v) = parse_num(b) {
        return (v.is_finite() && v >= 0.0).then_some(v);
    }
    let s = std::str::from_utf8(b.trim_ascii())
        .ok()?
        .trim_matches('"')
        .trim();
    let (days, clock) = match s.split_once(',') {
        Some((d, rest)) => {
            let n = d
                .trim()
                .strip_suffix("days")
                .or_else(|| d.trim().strip_suffix("day"))?;
            (n.trim().parse::<u64>().ok()? as f64, rest.trim())
        }
        None => (0.0, s),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let mut secs = 0.0;
    for (i, p) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let ok = !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit() || (last && c == b'.'));
        if !ok {
            return None;
        }
        let v: f64 = p.parse().ok()?;
        if i > 0 && v >= 60.0 {
            return None;
        }
        secs = secs * 60.0 + v;
    }
    Some(days * 86400.0 + secs)
}

/// Drop ANSI escape sequences (colour codes) and keep only what follows the last `\r` (a
/// progress bar redrawn in place leaves its fragments before it).
pub fn clean_line(line: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = match memchr::memrchr(b'\r', line) {
        Some(i) => &line[i + 1..],
        None => line,
    };
    if memchr::memchr(0x1b, line).is_none() {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i] == 0x1b {
            i += 1;
            if line.get(i) == Some(&b'[') {
                i += 1;
                while i < line.len() && !(0x40..=0x7e).contains(&line[i]) {
                    i += 1;
                }
            }
            i += 1;
        } else {
            out.push(line[i]);
            i += 1;
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_trainers_write_them() {
        assert_eq!(parse_num(b"0.5"), Some(0.5));
        assert_eq!(parse_num(b"\"0.000e+00\""), Some(0.0));
        assert!(parse_num(b"NaN").unwrap().is_nan());
        assert_eq!(parse_num(b"-Infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_num(b"\"inf\""), Some(f64::INFINITY));
        assert_eq!(parse_num(b"abc"), None);
        assert_eq!(parse_num(b""), None);
        assert_eq!(parse_num(b"."), None);
        assert_eq!(parse_num(b"1e"), None);
        assert_eq!(parse_num(b"-"), None);
    }

    /// Every spelling of a non-finite value is one, and the regex that text patterns take
    /// for it matches exactly the spellings the parser reads.
    #[test]
    fn non_finite_in_every_spelling() {
        let re = regex::Regex::new(&format!("^(?:{NON_FINITE_RE})$")).unwrap();
        for t in [
            "nan",
            "NaN",
            "NAN",
            "-nan",
            "+nan",
            "-NaN",
            "\"nan\"",
            "inf",
            "-inf",
            "+inf",
            "Inf",
            "-Inf",
            "INF",
            "Infinity",
            "-Infinity",
            "+Infinity",
            "infinity",
            "\"-Infinity\"",
        ] {
            let v = parse_num(t.as_bytes()).unwrap_or_else(|| panic!("{t} is not read"));
            assert!(!v.is_finite(), "{t} -> {v}");
            assert!(v.is_nan() || (v < 0.0) == t.contains('-'), "{t} -> {v}");
            assert_eq!(
                v.is_nan(),
                t.to_ascii_lowercase().contains("nan"),
                "{t} -> {v}"
            );
            let bare = t.trim_matches('"');
            assert!(re.is_match(bare), "the regex misses {bare}");
        }
        for t in [
            "nanx", "infinite", "in", "na", "-", "--nan", "nan nan", "1nan",
        ] {
            assert_eq!(parse_num(t.as_bytes()).map(f64::to_bits), None, "{t}");
            assert!(!re.is_match(t), "the regex takes {t}");
        }
    }

    #[test]
    fn fast_path_equals_the_standard_parser() {
        for t in [
            "0",
            "-0.5",
            "6.000000e-04",
            "1714521600.123",
            "3.14159",
            "2.5E+3",
            "1e22",
            "1e-22",
            "123456789012345678",
            "0.1",
            "0.30000000000000004",
            "9007199254740993",
            "1e23",
            "4.6000000000000004e-07",
            "8.88888888888889e-09",
            "52000.0",
            "+7",
            "007.50",
        ] {
            let want: f64 = t.parse().unwrap();
            assert_eq!(parse_num(t.as_bytes()), Some(want), "{t}");
        }
    }

    /// The word-at-a-time decimal reader agrees with the general one (same value to the bit,
    /// same length) on every spelling, including where it hands over: exponents, mantissas
    /// of 20+ digits, leading zeros, signs, a lone dot, text after the number, and ends of
    /// the slice inside a group of eight.
    #[test]
    fn fast_decimal_prefix_equals_the_general_one() {
        let same = |t: &[u8]| {
            let bits = |r: Option<(f64, usize)>| r.map(|(v, n)| (v.to_bits(), n));
            assert_eq!(
                bits(decimal_prefix(t)),
                bits(decimal_prefix_general(t)),
                "{}",
                String::from_utf8_lossy(t)
            );
        };
        for t in [
            "0",
            "-0",
            "+0",
            "7",
            "12345678",
            "123456789",
            "1234567890123456",
            "12345678901234567",
            "1234567890123456789",
            "12345678901234567890",
            "9007199254740992",
            "9007199254740993",
            "18446744073709551615",
            "18446744073709551616",
            "0.0003",
            "6.000000e-04",
            "1e22",
            "1e23",
            "2.5E+3",
            "1800000000.250",
            "1800000000.25000000",
            "0.1234567890123456789",
            "0.00000000000000000001",
            "000000000000000000000000001",
            "1.",
            ".5",
            "-.5",
            ".",
            "-",
            "+",
            "",
            "e5",
            "1e",
            "1e+",
            "5.e3",
            "3.14159,",
            "52000}",
            "8.4567 ",
            "1x",
            "12345678x",
            "1234567.8",
            "12345678.12345678",
            "0.00000000000000000000001",
            "-9.87654321",
            "99.",
            "1:2",
            "１２",
            "\\u0031",
        ] {
            same(t.as_bytes());
            same(format!("{t}, \"lr\": 0.0003}}").as_bytes());
        }
        // Every prefix of a long line: the slice ends at every position of a group.
        let line = b"1800000000.250} 123456789012345678.5 -0.000000001234";
        for a in 0..line.len() {
            for b in a..=line.len() {
                same(&line[a..b]);
            }
        }
        let mut rng = fastrand::Rng::with_seed(11);
        let alphabet = b"0123456789012345678901234567890123456789.-+eE /:x";
        for _ in 0..200_000 {
            let len = rng.usize(..28);
            let t: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            same(&t);
        }
    }

    #[test]
    fn times_as_unix_or_rfc3339() {
        assert_eq!(parse_time(b"1700000000.5"), Some(1_700_000_000.5));
        assert_eq!(
            parse_time(b"\"2023-11-14T22:13:20Z\""),
            Some(1_700_000_000.0)
        );
        assert_eq!(parse_time(b"yesterday"), None);
        assert_eq!(parse_time(b"-1e300"), None);
        assert_eq!(parse_time(b"1e18"), None);
        assert_eq!(parse_time(b"NaN"), None);
    }

    #[test]
    fn elapsed_clocks() {
        assert_eq!(parse_elapsed(b"\"0:29:27\""), Some(1767.0));
        assert_eq!(parse_elapsed(b"29:27.5"), Some(1767.5));
        assert_eq!(parse_elapsed(b"1 day, 0:00:10"), Some(86410.0));
        assert_eq!(
            parse_elapsed(b"2 days, 1:00:00"),
            Some(2.0 * 86400.0 + 3600.0)
        );
        assert_eq!(parse_elapsed(b"12.5"), Some(12.5));
        for bad in [
            &b"0:61:00"[..],
            b"1:2:3:4",
            b"abc",
            b"-5",
            b"1::2",
            b"x day, 0:00:01",
        ] {
            assert_eq!(parse_elapsed(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn ansi_and_carriage_returns_are_dropped() {
        assert_eq!(
            &*clean_line(b"10%|#  |\r\x1b[32mstep 5\x1b[0m\r"),
            b"step 5"
        );
        assert_eq!(&*clean_line(b"plain"), b"plain");
    }
}
