//! Human units in roger.toml: durations ("500ms", "30s", "10m", "2h", "1d") and byte sizes
//! ("512MiB", "20GiB", "1.5TB"). Bare numbers are seconds / bytes.

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::Duration;

/// A duration written the way people write them in config files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl Dur {
    pub fn secs(s: u64) -> Dur {
        Dur(Duration::from_secs(s))
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0.as_secs_f64()
    }
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("expected a duration like \"30s\", \"10m\", \"2h\", got {text:?}"))?;
    let scale = match unit.trim() {
        // "30" could be seconds or minutes: a silent guess would be a wrong limit.
        "" => {
            return Err(format!(
                "duration {text:?} has no unit: write \"{num}s\", \"{num}m\" or \"{num}h\""
            ))
        }
        "s" | "sec" | "secs" => 1.0,
        "ms" => 0.001,
        "m" | "min" | "mins" => 60.0,
        "h" | "hr" | "hrs" => 3600.0,
        "d" | "day" | "days" => 86400.0,
        other => {
            return Err(format!(
                "unknown duration unit {other:?} in {text:?}: expected ms, s, m, h or d"
            ))
        }
    };
    if !value.is_finite() || value < 0.0 {
        return Err(format!("expected a non-negative duration, got {text:?}"));
    }
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("duration {text:?} is too long: expected at most {MAX_DURATION_TEXT}"))
}

const MAX_DURATION_TEXT: &str = "about 584 billion years";

/// Seconds as a `Duration` for display and deadlines: negative and NaN are zero, anything
/// beyond what a `Duration` holds saturates (a log's timestamp can be any number).
pub fn duration_from_secs(s: f64) -> Duration {
    if s.is_nan() || s <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{}ms", (s * 1000.0).round())
    } else if s < 120.0 {
        format!("{}s", trim_float(s))
    } else if s < 7200.0 {
        format!("{}m", trim_float(s / 60.0))
    } else if s < 2.0 * 86400.0 {
        format!("{}h", trim_float(s / 3600.0))
    } else {
        // "15 days", not "360h": a stale run of weeks must read as weeks.
        format!("{} days", trim_float(s / 86400.0))
    }
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Float(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            // A bare number could be seconds or minutes: a silent guess would be a wrong limit.
            Raw::Int(n) => Err(de::Error::custom(format!(
                "duration {n} has no unit: write \"{n}s\", \"{n}m\" or \"{n}h\""
            ))),
            Raw::Float(f) => Err(de::Error::custom(format!(
                "duration {f} has no unit: write \"{f}s\", \"{f}m\" or \"{f}h\""
            ))),
            Raw::Text(s) => parse_duration(&s).map(Dur).map_err(de::Error::custom),
        }
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

/// A byte count written with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Bytes(pub u64);

pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("expected a size like \"512MiB\" or \"20GiB\", got {text:?}"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {text:?}: expected B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            ))
        }
    };
    if !value.is_finite() || value < 0.0 {
        return Err(format!("expected a non-negative size, got {text:?}"));
    }
    let bytes = (value * scale).round();
    // `as u64` would saturate silently: a typo'd size must not become "16 EiB".
    if bytes >= u64::MAX as f64 {
        return Err(format!(
            "size {text:?} is too large: expected at most 16 EiB"
        ));
    }
    Ok(bytes as u64)
}

pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_bytes(self.0))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Bytes(n)),
            Raw::Text(s) => parse_bytes(&s).map(Bytes).map_err(de::Error::custom),
        }
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

/// `[lo, hi]` with lo < hi, both finite; validated after parsing so the error has a line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Band {
    pub lo: f64,
    pub hi: f64,
}

impl Band {
    pub fn contains(&self, v: f64) -> bool {
        v >= self.lo && v <= self.hi
    }
}

impl<'de> Deserialize<'de> for Band {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pair = <Vec<f64>>::deserialize(d)?;
        match pair.as_slice() {
            [lo, hi] if lo.is_finite() && hi.is_finite() && lo < hi => {
                Ok(Band { lo: *lo, hi: *hi })
            }
            [lo, hi] => Err(de::Error::custom(format!(
                "expected a band [lo, hi] with finite lo < hi, got [{lo}, {hi}]"
            ))),
            other => Err(de::Error::custom(format!(
                "expected a band [lo, hi] (two numbers), got {} numbers",
                other.len()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        // Was silently 45 seconds; a bare number is an error naming the units to choose from.
        let e = parse_duration("45").unwrap_err();
        assert!(e.contains("no unit") && e.contains("\"45s\""), "{e}");
        for bare in ["x = 30", "x = 2.5", "x = \"30\""] {
            let e = toml::from_str::<std::collections::BTreeMap<String, Dur>>(bare)
                .unwrap_err()
                .to_string();
            assert!(e.contains("no unit"), "{bare}: {e}");
        }
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("m").is_err());
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::from_secs(5 * 3600)), "5h");
        assert_eq!(format_duration(Duration::from_secs(15 * 86400)), "15 days");
        assert_eq!(
            parse_duration("15 days").unwrap(),
            Duration::from_secs(15 * 86400)
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("20GB").unwrap(), 20_000_000_000);
        assert_eq!(parse_bytes("512").unwrap(), 512);
        assert!(parse_bytes("3 apples").is_err());
        assert_eq!(format_bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn absurd_values_are_errors_not_panics() {
        let e = parse_duration("99999999999999999999999d").unwrap_err();
        assert!(e.contains("too long"), "{e}");
        let e = toml::from_str::<std::collections::BTreeMap<String, Dur>>("x = \"1e300s\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("duration") && e.contains("1e300"), "{e}");
        let e = parse_bytes("99999999999999999999999TiB").unwrap_err();
        assert!(e.contains("too large"), "{e}");
        assert_eq!(duration_from_secs(1e300), Duration::MAX);
        assert_eq!(duration_from_secs(f64::INFINITY), Duration::MAX);
        assert_eq!(duration_from_secs(f64::NAN), Duration::ZERO);
        assert_eq!(duration_from_secs(-5.0), Duration::ZERO);
    }
}
