//! Host memory pressure from /proc/meminfo (MemAvailable, swap). Low available memory is what
//! makes 9p/drvfs writes truncate and the OOM killer take the training.
//!
//! Test seam: `ROGER_MEMINFO=FILE` replaces /proc/meminfo (test-only).

use anyhow::{Context, Result};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Memory {
    pub total: u64,
    pub available: u64,
    pub swap_total: u64,
    pub swap_free: u64,
}

impl Memory {
    pub fn available_share(&self) -> f64 {
        if self.total == 0 {
            return 1.0;
        }
        self.available as f64 / self.total as f64
    }
    pub fn swap_used(&self) -> u64 {
        self.swap_total.saturating_sub(self.swap_free)
    }
}

/// Parse meminfo text (values in kB). MemAvailable is required: kernels older than 3.14
/// lack it and a guess from MemFree would understate what is free.
pub fn parse_meminfo(text: &str) -> Result<Memory, String> {
    let get = |key: &str| -> Option<u64> {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            let num = rest.split_whitespace().next()?;
            num.parse::<u64>().ok().map(|kb| kb.saturating_mul(1024))
        })
    };
    let total = get("MemTotal").ok_or("no MemTotal line")?;
    let available = get("MemAvailable").ok_or("no MemAvailable line (kernel older than 3.14?)")?;
    Ok(Memory {
        total,
        available,
        swap_total: get("SwapTotal").unwrap_or(0),
        swap_free: get("SwapFree").unwrap_or(0),
    })
}

/// Read this machine's memory (or the `ROGER_MEMINFO` fixture).
pub fn memory() -> Result<Memory> {
    let path = std::env::var_os("ROGER_MEMINFO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/proc/meminfo"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    parse_meminfo(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Pressure levels: warn below 10% available or with more than half the swap in use; fail
/// below 3% available (the OOM killer is close).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pressure {
    Ok,
    Warn,
    Fail,
}

pub fn pressure(m: &Memory) -> (Pressure, String) {
    let share = m.available_share();
    let swap_share = if m.swap_total > 0 {
        m.swap_used() as f64 / m.swap_total as f64
    } else {
        0.0
    };
    let what = format!(
        "{:.0}% of RAM available, swap {:.0}% used",
        share * 100.0,
        swap_share * 100.0
    );
    if share < 0.03 {
        (Pressure::Fail, format!("{what}: the OOM killer is close"))
    } else if share < 0.10 || swap_share > 0.5 {
        (Pressure::Warn, format!("{what}: memory pressure"))
    } else {
        (Pressure::Ok, what)
    }
}

/// This boot's id (/proc/sys/kernel/random/boot_id): with a start time, it tells a process
/// recorded before a reboot from a new one that got the same pid.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "MemTotal:       16000000 kB\nMemFree:          100000 kB\nMemAvailable:    8000000 kB\nSwapTotal:       2000000 kB\nSwapFree:        2000000 kB\n";

    #[test]
    fn parses_and_judges() {
        let m = parse_meminfo(TEXT).unwrap();
        assert_eq!(m.total, 16_000_000 * 1024);
        assert_eq!(m.available_share(), 0.5);
        assert_eq!(pressure(&m).0, Pressure::Ok);
        let low = Memory {
            available: m.total / 20,
            ..m
        };
        assert_eq!(pressure(&low).0, Pressure::Warn);
        let swapping = Memory { swap_free: 0, ..m };
        assert_eq!(pressure(&swapping).0, Pressure::Warn);
        let oom = Memory {
            available: m.total / 100,
            ..m
        };
        assert_eq!(pressure(&oom).0, Pressure::Fail);
    }

    #[test]
    fn missing_mem_available_is_explained() {
        let e = parse_meminfo("MemTotal: 1 kB\n").unwrap_err();
        assert!(e.contains("MemAvailable"), "{e}");
    }

    #[test]
    fn real_meminfo_reads() {
        assert!(memory().unwrap().total > 0);
    }

    /// Found by the fuzz harness (b76a294): a meminfo kB value past u64 once in bytes
    /// overflowed. Saturates.
    #[test]
    fn regress_meminfo_kb_past_u64_in_bytes() {
        let m = parse_meminfo("MemTotal:0\nMemAvailable:0\nSwapTotal:112952220998733294").unwrap();
        assert_eq!(m.swap_total, u64::MAX);
    }
}
