//! XID errors: what each well-known code means and whether it is the GPU's fault, parsing
//! of `NVRM: Xid` kernel log lines, and reading past ones from dmesg, /dev/kmsg or the
//! journal where this user may read them. Live XIDs come from NVML events (`nvml::XidListener`).
//!
//! Test seam: `ROGER_KMSG=FILE` replaces the kernel log sources (test-only).

use super::checks::{Finding, Level};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum XidClass {
    /// Hardware / driver: drain the node, reset or replace the GPU.
    Critical,
    /// Usually the application (bad kernel, bad memory access): look at the code first.
    Application,
    Other,
}

/// Triage of an XID code, with what it usually means.
pub fn classify(code: u32) -> (XidClass, &'static str) {
    match code {
        48 => (XidClass::Critical, "double-bit ECC error"),
        63 => (
            XidClass::Critical,
            "ECC page retirement / row remap pending: reset the GPU",
        ),
        64 => (
            XidClass::Critical,
            "ECC page retirement / row remap failure",
        ),
        74 => (XidClass::Critical, "NVLink error"),
        79 => (XidClass::Critical, "GPU has fallen off the bus"),
        92 => (XidClass::Critical, "high single-bit ECC error rate"),
        94 => (
            XidClass::Critical,
            "contained ECC error: the affected process must restart",
        ),
        95 => (XidClass::Critical, "uncontained ECC error: reset the GPU"),
        13 => (
            XidClass::Application,
            "graphics engine exception (often an out-of-bounds access in a kernel)",
        ),
        31 => (
            XidClass::Application,
            "GPU memory page fault (often an illegal address in the application)",
        ),
        43 => (
            XidClass::Application,
            "GPU stopped processing (the application's context was torn down)",
        ),
        _ => (XidClass::Other, "see NVIDIA's XID catalogue"),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Xid {
    /// The device as the driver names it, e.g. "PCI:0000:3b:00" (or a GPU index from NVML).
    pub device: String,
    pub code: u32,
    pub class: XidClass,
    pub meaning: String,
    /// The rest of the kernel line (pid, process name, driver's text).
    pub detail: String,
}

impl Xid {
    pub fn new(device: &str, code: u32, detail: &str) -> Xid {
        let (class, meaning) = classify(code);
        Xid {
            device: device.to_string(),
            code,
            class,
            meaning: meaning.to_string(),
            detail: detail.trim().to_string(),
        }
    }
}

/// Every `NVRM: Xid (DEVICE): CODE, detail` line in kernel log text.
pub fn parse_kernel_log(text: &str) -> Vec<Xid> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(r"NVRM: Xid \(([^)]*)\): (\d+)(?:,\s*(.*))?").expect("valid regex")
    });
    text.lines()
        .filter_map(|l| {
            let c = re.captures(l)?;
            let code = c[2].parse().ok()?;
            Some(Xid::new(&c[1], code, c.get(3).map_or("", |m| m.as_str())))
        })
        .collect()
}

/// Findings for XIDs: critical ones warn (they are history; a live GPU read says more),
/// application ones are information pointing at the code.
pub fn findings(xids: &[Xid]) -> Vec<Finding> {
    let mut out = Vec::new();
    for class in [XidClass::Critical, XidClass::Application, XidClass::Other] {
        let of: Vec<&Xid> = xids.iter().filter(|x| x.class == class).collect();
        if of.is_empty() {
            continue;
        }
        let mut codes: Vec<String> = of
            .iter()
            .map(|x| format!("{} on {} ({})", x.code, x.device, x.meaning))
            .collect();
        codes.dedup();
        let (level, lead) = match class {
            XidClass::Critical => (Level::Warn, "critical XID in the kernel log: the GPU or its link is at fault; drain and reset/replace"),
            XidClass::Application => (Level::Info, "application XID in the kernel log: usually the program, not the GPU"),
            XidClass::Other => (Level::Info, "other XID in the kernel log"),
        };
        let shown: Vec<String> = codes.iter().rev().take(5).cloned().collect();
        out.push(Finding::new(
            level,
            "xid",
            format!(
                "{lead}: {}{}",
                shown.join("; "),
                if codes.len() > 5 {
                    format!(" (+{} more)", codes.len() - 5)
                } else {
                    String::new()
                }
            ),
        ));
    }
    out
}

/// Where the XIDs were read from, or why they could not be.
#[derive(Debug, Clone, Serialize)]
pub struct KernelXids {
    pub source: Option<String>,
    pub xids: Vec<Xid>,
    /// Why no source was readable (all of them tried).
    pub unreadable: Option<String>,
}

/// Read past XIDs: `ROGER_KMSG` file (tests), else `dmesg`, `/dev/kmsg` (non-blocking),
/// `journalctl -k`. Each is bounded in time; a restricted kernel log is not an error.
pub fn read_kernel_xids() -> KernelXids {
    if let Some(p) = std::env::var_os("ROGER_KMSG") {
        let p = std::path::PathBuf::from(p);
        return match std::fs::read_to_string(&p) {
            Ok(t) => KernelXids {
                source: Some(p.display().to_string()),
                xids: parse_kernel_log(&t),
                unreadable: None,
            },
            Err(e) => KernelXids {
                source: None,
                xids: vec![],
                unreadable: Some(format!("{}: {e}", p.display())),
            },
        };
    }
    let mut why = Vec::new();
    let limit = Duration::from_secs(5);
    if let Some(dmesg) = super::super::sys::bounded::which("dmesg") {
        match crate::sys::bounded::run(&dmesg, &[], limit) {
            Ok(o) if o.success() => return found("dmesg", &o.stdout),
            Ok(o) => why.push(format!("dmesg: {}", o.stderr.trim())),
            Err(e) => why.push(format!("dmesg: {e:#}")),
        }
    }
    match read_kmsg(Path::new("/dev/kmsg")) {
        Ok(t) => return found("/dev/kmsg", &t),
        Err(e) => why.push(format!("/dev/kmsg: {e}")),
    }
    if let Some(j) = crate::sys::bounded::which("journalctl") {
        match crate::sys::bounded::run(&j, &["-k", "-b", "--no-pager", "-q", "-o", "short"], limit)
        {
            Ok(o) if o.success() => return found("journalctl -k", &o.stdout),
            Ok(o) => why.push(format!("journalctl: {}", o.stderr.trim())),
            Err(e) => why.push(format!("journalctl: {e:#}")),
        }
    }
    KernelXids {
        source: None,
        xids: vec![],
        unreadable: Some(why.join("; ")),
    }
}

fn found(source: &str, text: &str) -> KernelXids {
    KernelXids {
        source: Some(source.into()),
        xids: parse_kernel_log(text),
        unreadable: None,
    }
}

/// /dev/kmsg blocks at the end of the buffer: open it non-blocking and stop at EAGAIN.
fn read_kmsg(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mut text = String::new();
    let mut buf = vec![0u8; 8192];
    // Each read returns one record; cap the total so a huge buffer cannot stall us.
    for _ in 0..200_000 {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Record format: "prio,seq,usec,flags;message".
                let rec = String::from_utf8_lossy(&buf[..n]);
                let msg = rec.split_once(';').map_or(rec.as_ref(), |(_, m)| m);
                text.push_str(msg.lines().next().unwrap_or(""));
                text.push('\n');
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // EPIPE: a record was overwritten while reading; skip on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_driver_lines() {
        let log = "\
[  812.123456] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.
[  900.000001] NVRM: Xid (PCI:0000:af:00): 13, pid=4242, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1)
Mar 3 10:00:00 host kernel: NVRM: Xid (PCI:0000:3b:00): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1)
[  901.0] usb 1-1: new device
";
        let x = parse_kernel_log(log);
        assert_eq!(x.len(), 3);
        assert_eq!(x[0].code, 79);
        assert_eq!(x[0].device, "PCI:0000:3b:00");
        assert_eq!(x[0].class, XidClass::Critical);
        assert_eq!(x[1].class, XidClass::Application);
        assert!(x[1].detail.contains("name=python"));
        assert_eq!(x[2].code, 94);
    }

    #[test]
    fn triage_of_well_known_codes() {
        for c in [48, 63, 64, 74, 79, 92, 94, 95] {
            assert_eq!(classify(c).0, XidClass::Critical, "{c}");
        }
        for c in [13, 31, 43] {
            assert_eq!(classify(c).0, XidClass::Application, "{c}");
        }
        assert_eq!(classify(119).0, XidClass::Other);
    }

    #[test]
    fn findings_levels() {
        let f = findings(&[Xid::new("PCI:1", 31, ""), Xid::new("PCI:1", 48, "")]);
        assert_eq!(f[0].level, Level::Warn);
        assert!(f[0].message.contains("48"));
        assert_eq!(f[1].level, Level::Info);
        assert!(findings(&[]).is_empty());
    }
}
