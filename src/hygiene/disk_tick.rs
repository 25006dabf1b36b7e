//! The disk check run from inside the daemons (`[critic] disk_check`, `[watch] disk_check`):
//! at most once per [`DISK_TICK_EVERY`], and a `hygiene` ledger record only when the status
//! changes, so a warning arrives hours early without a record every tick.

use super::disk::{self, DiskReport};
use super::Status;
use crate::config::Config;
use crate::ledger::{Entry, Kind, Ledger};
use anyhow::Result;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Disk space changes slowly; the check reads the ledger, so it is not run every tick.
pub const DISK_TICK_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub struct DiskTicker {
    last_status: Option<Status>,
    last_run: Option<DateTime<Utc>>,
}

/// Record when the status is new or changed (the first check is always recorded).
pub fn status_changed(prev: Option<Status>, now: Status) -> bool {
    prev != Some(now)
}

impl DiskTicker {
    pub fn due(&self, now: DateTime<Utc>) -> bool {
        self.last_run
            .is_none_or(|at| (now - at).to_std().unwrap_or_default() >= DISK_TICK_EVERY)
    }

    /// Run the check when due; append a `hygiene` record (check = "disk") when the status
    /// changed. Returns the report when a check ran.
    pub fn tick(
        &mut self,
        cfg: &Config,
        ledger: &Ledger,
        source: &str,
        step: Option<u64>,
        now: DateTime<Utc>,
    ) -> Result<Option<DiskReport>> {
        if !self.due(now) {
            return Ok(None);
        }
        self.last_run = Some(now);
        let report = disk::check(cfg, now)?;
        if status_changed(self.last_status, report.status) {
            let worst = report
                .targets
                .iter()
                .max_by_key(|t| t.status)
                .map(|t| t.reason.clone())
                .unwrap_or_default();
            ledger.append(
                Entry::new(Kind::Hygiene, source, &cfg.run.name)
                    .step(step)
                    .field("check", "disk")
                    .field("status", report.status.as_str())
                    .field("previous", self.last_status.map(Status::as_str))
                    .field("reason", worst)
                    .field("growth", &report.growth)
                    .field("targets", &report.targets),
                now,
            )?;
            match report.status {
                Status::Fail | Status::Warn => tracing::warn!(
                    "disk: {} ({})",
                    report.status.as_str(),
                    report
                        .targets
                        .iter()
                        .max_by_key(|t| t.status)
                        .map_or("", |t| t.reason.as_str())
                ),
                _ => tracing::info!("disk: {}", report.status.as_str()),
            }
        }
        self.last_status = Some(report.status);
        Ok(Some(report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn records_only_changes() {
        assert!(status_changed(None, Status::Pass));
        assert!(!status_changed(Some(Status::Warn), Status::Warn));
        assert!(status_changed(Some(Status::Warn), Status::Fail));
    }

    #[test]
    fn rate_limited() {
        let t0 = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let mut t = DiskTicker::default();
        assert!(t.due(t0));
        t.last_run = Some(t0);
        assert!(!t.due(t0 + chrono::Duration::seconds(59)));
        assert!(t.due(t0 + chrono::Duration::seconds(60)));
    }

    #[test]
    fn tick_records_first_status_then_only_changes() {
        let dir = tempfile::tempdir().unwrap();
        let cfg_path = dir.path().join("roger.toml");
        std::fs::write(
            &cfg_path,
            "[run]\nname = \"r\"\ncheckpoint_dir = \"ck\"\n[disk]\nwarn_free = \"1B\"\nfail_free = \"1B\"\n",
        )
        .unwrap();
        let cfg = Config::load(&cfg_path).unwrap();
        let ledger = Ledger::new(cfg.ledger_path());
        let t0 = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let mut ticker = DiskTicker::default();
        let r = ticker
            .tick(&cfg, &ledger, "watch", None, t0)
            .unwrap()
            .unwrap();
        assert_eq!(r.status, Status::Pass);
        assert!(ticker
            .tick(
                &cfg,
                &ledger,
                "watch",
                None,
                t0 + chrono::Duration::seconds(5)
            )
            .unwrap()
            .is_none());
        ticker
            .tick(
                &cfg,
                &ledger,
                "watch",
                None,
                t0 + chrono::Duration::seconds(61),
            )
            .unwrap()
            .unwrap();
        let recs = ledger.records().unwrap();
        assert_eq!(recs.len(), 1, "same status twice is recorded once");
        assert_eq!(recs[0].str_field("check"), Some("disk"));
        assert_eq!(recs[0].str_field("status"), Some("pass"));
    }
}
