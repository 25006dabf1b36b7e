//! Pure judgement of GPU readings: which throttle reasons matter, ECC, and the findings a
//! probe or bench reports. No I/O.
//!
//! Throttle triage (NVIDIA's clock-event reasons): HW slowdown, HW thermal, HW power brake
//! and SW thermal mean the GPU runs slower than it should — bad. SW power cap is the normal
//! state of a GPU under full load (reported, not judged). GPU idle and the application /
//! display clock settings are noise.

use super::GpuInfo;
use serde::Serialize;

/// Bits of `nvmlClocksEventReasons` / `clocks_throttle_reasons.active`, with roger's names.
pub const THROTTLE_BITS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// Names of the bits set in a throttle mask (unknown bits as `bit_0x...`).
pub fn decode_throttle(mask: u64) -> Vec<String> {
    let mut names: Vec<String> = THROTTLE_BITS
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, n)| n.to_string())
        .collect();
    let known: u64 = THROTTLE_BITS.iter().map(|(b, _)| b).sum();
    let rest = mask & !known;
    for i in 0..64 {
        if rest & (1 << i) != 0 {
            names.push(format!("bit_{:#x}", 1u64 << i));
        }
    }
    names
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThrottleClass {
    /// The GPU is being held back by heat or power delivery.
    Bad,
    /// Expected under full load (SW power cap).
    Normal,
    /// Idle / clock settings: says nothing about health.
    Noise,
    Unknown,
}

pub fn throttle_class(name: &str) -> ThrottleClass {
    match name {
        "hw_slowdown"
        | "hw_thermal_slowdown"
        | "hw_power_brake_slowdown"
        | "sw_thermal_slowdown" => ThrottleClass::Bad,
        "sw_power_cap" => ThrottleClass::Normal,
        "gpu_idle" | "applications_clocks_setting" | "display_clock_setting" | "sync_boost" => {
            ThrottleClass::Noise
        }
        _ => ThrottleClass::Unknown,
    }
}

/// The bad throttle reasons of a GPU.
pub fn bad_throttle(g: &GpuInfo) -> Vec<&str> {
    g.throttle
        .iter()
        .map(String::as_str)
        .filter(|n| throttle_class(n) == ThrottleClass::Bad)
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Info,
    Warn,
    Fail,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }
    /// The judging exit code of the worst level.
    pub fn exit_code(self) -> u8 {
        match self {
            Level::Ok | Level::Info => crate::exit::OK,
            Level::Warn => crate::exit::WARN,
            Level::Fail => crate::exit::FAIL,
        }
    }
}

/// One thing a probe or bench says, with how much it matters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub level: Level,
    /// Short key: "throttle", "ecc", "orphan", "fs", "disk", "memory", "xid", ...
    pub check: String,
    pub message: String,
}

impl Finding {
    pub fn new(level: Level, check: &str, message: impl Into<String>) -> Finding {
        Finding {
            level,
            check: check.to_string(),
            message: message.into(),
        }
    }
}

/// Findings about one GPU's own health: throttling and ECC.
pub fn judge_gpu(g: &GpuInfo) -> Vec<Finding> {
    let mut out = Vec::new();
    if g.lost {
        out.push(Finding::new(
            Level::Fail,
            "gpu_lost",
            format!(
                "{}: drain the node; the GPU needs a reset or a reboot (XID 79)",
                g.error.as_deref().unwrap_or("a GPU has fallen off the bus")
            ),
        ));
        return out;
    }
    if let Some(e) = &g.error {
        out.push(Finding::new(
            Level::Warn,
            "gpu",
            format!("{e}: its health is unknown (the other GPUs are still judged)"),
        ));
        return out;
    }
    let who = format!("GPU {} ({})", g.index, g.name);
    let bad = bad_throttle(g);
    if !bad.is_empty() {
        out.push(Finding::new(
            Level::Warn,
            "throttle",
            format!(
                "{who} is throttled by {}: check cooling, airflow and power delivery",
                bad.join(", ")
            ),
        ));
    }
    if g.throttle.iter().any(|n| n == "sw_power_cap") {
        out.push(Finding::new(
            Level::Info,
            "throttle",
            format!("{who} is at its power cap (sw_power_cap): normal under full load"),
        ));
    }
    let unknown: Vec<&str> = g
        .throttle
        .iter()
        .map(String::as_str)
        .filter(|n| throttle_class(n) == ThrottleClass::Unknown)
        .collect();
    if !unknown.is_empty() {
        out.push(Finding::new(
            Level::Info,
            "throttle",
            format!(
                "{who} reports clock-event reasons roger does not know: {}",
                unknown.join(", ")
            ),
        ));
    }
    if let Some(n) = g.ecc_uncorrected.filter(|&n| n > 0) {
        out.push(Finding::new(
            Level::Fail,
            "ecc",
            format!("{who} has {n} uncorrected ECC error(s) since the driver loaded: results on it are suspect; drain it and reset the GPU (row remapping needs a reset)"),
        ));
    }
    out
}

/// The worst level among findings (Ok when there are none).
pub fn worst(findings: &[Finding]) -> Level {
    findings.iter().map(|f| f.level).max().unwrap_or(Level::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(throttle: &[&str], ecc: Option<u64>) -> GpuInfo {
        GpuInfo {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            throttle: throttle.iter().map(|s| s.to_string()).collect(),
            ecc_uncorrected: ecc,
            ..Default::default()
        }
    }

    #[test]
    fn decodes_masks() {
        assert_eq!(decode_throttle(0x4), vec!["sw_power_cap"]);
        assert_eq!(
            decode_throttle(0x1 | 0x40),
            vec!["gpu_idle", "hw_thermal_slowdown"]
        );
        assert_eq!(decode_throttle(0x400), vec!["bit_0x400"]);
        assert!(decode_throttle(0).is_empty());
    }

    #[test]
    fn triage() {
        for bad in [
            "hw_slowdown",
            "hw_thermal_slowdown",
            "hw_power_brake_slowdown",
            "sw_thermal_slowdown",
        ] {
            assert_eq!(throttle_class(bad), ThrottleClass::Bad, "{bad}");
        }
        assert_eq!(throttle_class("sw_power_cap"), ThrottleClass::Normal);
        assert_eq!(throttle_class("gpu_idle"), ThrottleClass::Noise);
        assert_eq!(
            throttle_class("applications_clocks_setting"),
            ThrottleClass::Noise
        );
        assert_eq!(
            throttle_class("display_clock_setting"),
            ThrottleClass::Noise
        );
    }

    #[test]
    fn a_lost_gpu_fails_and_an_unreadable_one_warns() {
        let lost = GpuInfo {
            index: 3,
            lost: true,
            error: Some("GPU 3 has fallen off the bus".into()),
            ..Default::default()
        };
        let f = judge_gpu(&lost);
        assert_eq!(worst(&f), Level::Fail);
        assert!(
            f[0].message.contains("GPU 3 has fallen off the bus"),
            "{f:?}"
        );
        let odd = GpuInfo {
            index: 1,
            error: Some("GPU 1: NVML could not read its name: Unknown Error".into()),
            ..Default::default()
        };
        assert_eq!(worst(&judge_gpu(&odd)), Level::Warn);
    }

    #[test]
    fn judged_levels() {
        assert_eq!(worst(&judge_gpu(&gpu(&["gpu_idle"], Some(0)))), Level::Ok);
        assert_eq!(
            worst(&judge_gpu(&gpu(&["sw_power_cap"], None))),
            Level::Info
        );
        let f = judge_gpu(&gpu(&["sw_power_cap", "hw_thermal_slowdown"], Some(0)));
        assert_eq!(worst(&f), Level::Warn);
        assert!(f[0].message.contains("hw_thermal_slowdown"));
        assert_eq!(worst(&judge_gpu(&gpu(&[], Some(2)))), Level::Fail);
        assert_eq!(Level::Warn.exit_code(), crate::exit::WARN);
    }
}
