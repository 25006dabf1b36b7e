//! `hygiene disk`: free space of every filesystem the run writes to (checkpoints, log,
//! ledger, quarantine, and the Windows host drive under WSL), the growth rate from the
//! ledger's publish records (bytes per checkpoint × cadence, less what pruning removed), and
//! the forecast hours to full, judged against `[disk]`. [`disk_verdict`] is pure; [`measure`]
//! is the edge that asks the filesystem (through [`FsProbe`]).

use super::Status;
use crate::config::units::format_bytes;
use crate::config::{Config, DiskConfig};
use crate::ledger::{Kind, Record};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Publishes looked at for the growth rate.
pub const GROWTH_WINDOW: usize = 10;
/// No publish for this many cadences: the run is not writing checkpoints now.
pub const IDLE_CADENCES: f64 = 3.0;

/// One filesystem as seen from a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FsStat {
    /// Device id: paths with the same id share free space.
    pub dev: u64,
    pub total: u64,
    pub avail: u64,
}

pub trait FsProbe {
    fn stat(&self, path: &Path) -> Result<FsStat>;
}

/// statvfs (via `sys::disk`) and the device id of the nearest existing ancestor.
pub struct RealFs;

impl FsProbe for RealFs {
    fn stat(&self, path: &Path) -> Result<FsStat> {
        use std::os::unix::fs::MetadataExt;
        let space = crate::sys::disk::space_of(path)?;
        let existing = path
            .ancestors()
            .find(|p| !p.as_os_str().is_empty() && p.exists())
            .unwrap_or(Path::new("."));
        let dev = std::fs::metadata(existing)
            .with_context(|| format!("stat {}", existing.display()))?
            .dev();
        Ok(FsStat {
            dev,
            total: space.total,
            avail: space.avail,
        })
    }
}

/// A path the run writes to. `grows` marks the ones checkpoints fill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    pub role: String,
    pub path: PathBuf,
    pub grows: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Growth {
    pub checkpoints: usize,
    pub bytes_per_checkpoint: f64,
    /// Seconds between publishes.
    pub cadence_s: f64,
    pub gross_bytes_per_hour: f64,
    /// Removed by prune records in the same span.
    pub pruned_bytes_per_hour: f64,
    pub net_bytes_per_hour: f64,
}

/// The growth rate from the run's last publishes, or None when there is no steady publishing
/// (fewer than two, all at one instant, or idle for more than [`IDLE_CADENCES`] cadences).
pub fn growth(records: &[Record], run: &str, now: DateTime<Utc>) -> Option<Growth> {
    let pubs: Vec<&Record> = records
        .iter()
        .filter(|r| r.kind == Kind::Publish && r.run == run && r.u64_field("size").is_some())
        .collect();
    let last = &pubs[pubs.len().saturating_sub(GROWTH_WINDOW)..];
    if last.len() < 2 {
        return None;
    }
    let (first_ts, last_ts) = (last[0].ts, last[last.len() - 1].ts);
    let span = (last_ts - first_ts).num_milliseconds() as f64 / 1000.0;
    if span <= 0.0 {
        return None;
    }
    let cadence_s = span / (last.len() - 1) as f64;
    let idle = (now - last_ts).num_milliseconds() as f64 / 1000.0;
    if idle > IDLE_CADENCES * cadence_s {
        return None;
    }
    let sizes: f64 = last.iter().filter_map(|r| r.u64_field("size")).sum::<u64>() as f64;
    let bytes_per_checkpoint = sizes / last.len() as f64;
    let gross = bytes_per_checkpoint / cadence_s * 3600.0;
    let pruned: u64 = records
        .iter()
        .filter(|r| r.kind == Kind::Prune && r.run == run && r.ts > first_ts && r.ts <= last_ts)
        .filter_map(|r| r.u64_field("size"))
        .sum();
    let pruned_per_hour = pruned as f64 / span * 3600.0;
    Some(Growth {
        checkpoints: last.len(),
        bytes_per_checkpoint,
        cadence_s,
        gross_bytes_per_hour: gross,
        pruned_bytes_per_hour: pruned_per_hour,
        net_bytes_per_hour: gross - pruned_per_hour,
    })
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetReport {
    pub role: String,
    pub path: PathBuf,
    pub status: Status,
    pub total: Option<u64>,
    pub avail: Option<u64>,
    pub bytes_per_hour: Option<f64>,
    pub hours_to_full: Option<f64>,
    pub reason: String,
    /// Roles of earlier targets on the same filesystem (reported once, judged once).
    pub same_fs_as: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiskReport {
    pub status: Status,
    pub growth: Option<Growth>,
    pub targets: Vec<TargetReport>,
}

/// Judge measured targets against `[disk]`: fail below `fail_free` or under `fail_hours` to
/// full, warn below `warn_free` or under `warn_hours`; a path that cannot be measured is
/// unknown. Growth applies to every target on a filesystem checkpoints are written to.
pub fn disk_verdict(
    measured: &[(Target, Result<FsStat, String>)],
    growth: Option<&Growth>,
    cfg: &DiskConfig,
) -> DiskReport {
    let growing: Vec<u64> = measured
        .iter()
        .filter(|(t, _)| t.grows)
        .filter_map(|(_, s)| s.as_ref().ok().map(|s| s.dev))
        .collect();
    let mut seen: Vec<(u64, String)> = Vec::new();
    let mut targets = Vec::new();
    for (t, stat) in measured {
        let stat = match stat {
            Ok(s) => s,
            Err(e) => {
                targets.push(TargetReport {
                    role: t.role.clone(),
                    path: t.path.clone(),
                    status: Status::Unknown,
                    total: None,
                    avail: None,
                    bytes_per_hour: None,
                    hours_to_full: None,
                    reason: format!("cannot measure: {e}"),
                    same_fs_as: None,
                });
                continue;
            }
        };
        let same_fs_as = seen
            .iter()
            .find(|(d, _)| *d == stat.dev)
            .map(|(_, r)| r.clone());
        if same_fs_as.is_none() {
            seen.push((stat.dev, t.role.clone()));
        }
        let rate = growth
            .filter(|_| t.grows || growing.contains(&stat.dev))
            .map(|g| g.net_bytes_per_hour);
        let hours = rate.filter(|r| *r > 0.0).map(|r| stat.avail as f64 / r);
        let (status, reason) = judge(stat.avail, hours, cfg);
        targets.push(TargetReport {
            role: t.role.clone(),
            path: t.path.clone(),
            status,
            total: Some(stat.total),
            avail: Some(stat.avail),
            bytes_per_hour: rate,
            hours_to_full: hours,
            reason,
            same_fs_as,
        });
    }
    DiskReport {
        status: Status::worst(targets.iter().map(|t| t.status)),
        growth: growth.cloned(),
        targets,
    }
}

fn judge(avail: u64, hours: Option<f64>, cfg: &DiskConfig) -> (Status, String) {
    let free = format_bytes(avail);
    if avail < cfg.fail_free.0 {
        return (
            Status::Fail,
            format!("{free} free, below fail_free {}", cfg.fail_free),
        );
    }
    if let Some(h) = hours.filter(|h| *h < cfg.fail_hours) {
        return (
            Status::Fail,
            format!(
                "full in {h:.1} h at the current rate, under fail_hours {}",
                cfg.fail_hours
            ),
        );
    }
    if avail < cfg.warn_free.0 {
        return (
            Status::Warn,
            format!("{free} free, below warn_free {}", cfg.warn_free),
        );
    }
    if let Some(h) = hours.filter(|h| *h < cfg.warn_hours) {
        return (
            Status::Warn,
            format!(
                "full in {h:.1} h at the current rate, under warn_hours {}",
                cfg.warn_hours
            ),
        );
    }
    let forecast = match hours {
        Some(h) => format!(", full in {h:.1} h"),
        None => String::new(),
    };
    (Status::Pass, format!("{free} free{forecast}"))
}

/// The paths the run writes to, from the config (plus the WSL host drive when known).
pub fn targets(cfg: &Config, host: Option<PathBuf>) -> Vec<Target> {
    let mut out = Vec::new();
    let mut push = |role: &str, path: Option<PathBuf>, grows: bool| {
        if let Some(path) = path {
            out.push(Target {
                role: role.to_string(),
                path,
                grows,
            });
        }
    };
    push("checkpoints", cfg.run.checkpoint_dir.clone(), true);
    // A `{version}` / glob log: the file it means now.
    let log = cfg
        .run
        .log
        .clone()
        .map(|l| crate::metrics::locate::resolve(&l).unwrap_or(l));
    push("log", log, false);
    push("ledger", Some(cfg.ledger_path()), false);
    push("quarantine", Some(cfg.quarantine_dir()), false);
    // A WSL2 VHDX grows on the host drive as the VM writes: checkpoints fill it too.
    push("host", cfg.disk.host.clone().or(host), true);
    out
}

/// Measure every target and judge (the wrapper the critic/watch tick calls).
pub fn measure(
    cfg: &Config,
    records: &[Record],
    probe: &dyn FsProbe,
    host: Option<PathBuf>,
    now: DateTime<Utc>,
) -> DiskReport {
    let measured: Vec<(Target, Result<FsStat, String>)> = targets(cfg, host)
        .into_iter()
        .map(|t| {
            // A checkpoint dir that is a file is a broken config, not free space to report.
            let s = if t.grows && t.path.exists() && !t.path.is_dir() {
                Err(format!(
                    "{} is not a directory: expected the checkpoint directory ([run] checkpoint_dir)",
                    t.path.display()
                ))
            } else {
                probe.stat(&t.path).map_err(|e| format!("{e:#}"))
            };
            (t, s)
        })
        .collect();
    let g = growth(records, &cfg.run.name, now);
    disk_verdict(&measured, g.as_ref(), &cfg.disk)
}

/// On WSL, the Windows drive behind the VHDX (`[disk] host`, else detected from the mounts).
pub fn wsl_host(cfg: &Config) -> Option<PathBuf> {
    crate::sys::wsl::detect()?;
    let mounts = crate::sys::fskind::read_mounts().unwrap_or_default();
    crate::sys::wsl::host_drive(cfg.disk.host.as_deref(), &mounts)
}

/// The real disk check (what `hygiene disk` and the critic/watch tick run): reads the
/// config's ledger, asks the filesystem.
pub fn check(cfg: &Config, now: DateTime<Utc>) -> Result<DiskReport> {
    let records = crate::ledger::Ledger::new(cfg.ledger_path()).records()?;
    Ok(measure(cfg, &records, &RealFs, wsl_host(cfg), now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Bytes;
    use crate::ledger::{Entry, Ledger};
    use chrono::TimeZone;
    use std::collections::HashMap;

    const GIB: u64 = 1 << 30;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn records(entries: Vec<(Entry, i64)>) -> Vec<Record> {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::new(dir.path().join("l.jsonl"));
        for (e, at) in entries {
            l.append(e, t(at)).unwrap();
        }
        l.records().unwrap()
    }

    fn publish(step: u64, size: u64) -> Entry {
        Entry::new(Kind::Publish, "publish", "r")
            .step(Some(step))
            .field("path", format!("/ck/{step}"))
            .field("sha256", "0".repeat(64))
            .field("size", size)
    }

    struct Fake(HashMap<PathBuf, FsStat>);
    impl FsProbe for Fake {
        fn stat(&self, path: &Path) -> Result<FsStat> {
            self.0
                .get(path)
                .copied()
                .ok_or_else(|| anyhow::anyhow!("no such filesystem"))
        }
    }

    fn cfg() -> DiskConfig {
        DiskConfig {
            warn_free: Bytes(20 * GIB),
            fail_free: Bytes(5 * GIB),
            warn_hours: 12.0,
            fail_hours: 2.0,
            host: None,
            prune_goal_free: None,
        }
    }

    #[test]
    fn growth_is_size_times_cadence_less_pruning() {
        // 4 GiB every 30 minutes = 8 GiB/h.
        let recs = records(vec![
            (publish(100, 4 * GIB), 0),
            (publish(200, 4 * GIB), 1800),
            (publish(300, 4 * GIB), 3600),
        ]);
        let g = growth(&recs, "r", t(3700)).unwrap();
        assert_eq!(g.cadence_s, 1800.0);
        assert!((g.gross_bytes_per_hour - 8.0 * GIB as f64).abs() < 1.0);
        assert_eq!(g.net_bytes_per_hour, g.gross_bytes_per_hour);
        let recs = records(vec![
            (publish(100, 4 * GIB), 0),
            (publish(200, 4 * GIB), 1800),
            (
                Entry::new(Kind::Prune, "publish", "r")
                    .field("path", "/ck/100")
                    .field("size", 4 * GIB),
                1801,
            ),
            (publish(300, 4 * GIB), 3600),
        ]);
        let g = growth(&recs, "r", t(3700)).unwrap();
        assert!((g.net_bytes_per_hour - 4.0 * GIB as f64).abs() < 1.0);
    }

    #[test]
    fn no_growth_without_steady_publishing() {
        let one = records(vec![(publish(100, GIB), 0)]);
        assert!(growth(&one, "r", t(10)).is_none());
        let two = records(vec![(publish(100, GIB), 0), (publish(200, GIB), 600)]);
        assert!(growth(&two, "r", t(700)).is_some());
        assert!(
            growth(&two, "r", t(600 + 1801)).is_none(),
            "idle > 3 cadences"
        );
        assert!(growth(&two, "other", t(700)).is_none());
    }

    #[test]
    fn verdict_levels_absolute_and_forecast() {
        let g = Growth {
            checkpoints: 3,
            bytes_per_checkpoint: 4.0 * GIB as f64,
            cadence_s: 1800.0,
            gross_bytes_per_hour: 8.0 * GIB as f64,
            pruned_bytes_per_hour: 0.0,
            net_bytes_per_hour: 8.0 * GIB as f64,
        };
        let fs = |dev, avail| FsStat {
            dev,
            total: 1000 * GIB,
            avail,
        };
        let target = |role: &str, grows| Target {
            role: role.into(),
            path: PathBuf::from(format!("/{role}")),
            grows,
        };
        let probe = Fake(HashMap::from([
            (PathBuf::from("/checkpoints"), fs(1, 80 * GIB)), // 10 h left: warn
            (PathBuf::from("/log"), fs(1, 80 * GIB)),
            (PathBuf::from("/ledger"), fs(2, 100 * GIB)), // other fs, no growth: pass
        ]));
        let measured: Vec<_> = [
            target("checkpoints", true),
            target("log", false),
            target("ledger", false),
            target("host", true),
        ]
        .into_iter()
        .map(|t| {
            let s = probe.stat(&t.path).map_err(|e| e.to_string());
            (t, s)
        })
        .collect();
        let r = disk_verdict(&measured, Some(&g), &cfg());
        assert_eq!(r.targets[0].status, Status::Warn, "{:?}", r.targets[0]);
        assert!((r.targets[0].hours_to_full.unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(r.targets[1].status, Status::Warn, "same fs grows too");
        assert_eq!(r.targets[1].same_fs_as.as_deref(), Some("checkpoints"));
        assert_eq!(r.targets[2].status, Status::Pass);
        assert_eq!(r.targets[2].hours_to_full, None);
        assert_eq!(r.targets[3].status, Status::Unknown);
        assert_eq!(r.status, Status::Warn);

        let low = vec![(target("checkpoints", true), Ok(fs(1, GIB)))];
        let r = disk_verdict(&low, None, &cfg());
        assert_eq!(r.status, Status::Fail);
        assert!(r.targets[0].reason.contains("below fail_free"));
        let soon = vec![(target("checkpoints", true), Ok(fs(1, 12 * GIB)))];
        let r = disk_verdict(&soon, Some(&g), &cfg());
        assert_eq!(r.status, Status::Fail, "1.5 h to full");
        assert!(r.targets[0].reason.contains("under fail_hours"));
        assert_eq!(disk_verdict(&[], None, &cfg()).status, Status::Unknown);
    }
}
