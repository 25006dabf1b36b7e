//! Leaving quarantine: `release` (back to where it came from, only after a passing proof or
//! when forced with a reason) and `purge` (delete old items whose fate a trial decided; an
//! unproven item may be the only good copy, so it stays unless forced). The rules are pure
//! functions; the moves write their ledger record so the ledger never claims less
//! quarantine than there is.

use super::Item;
use crate::ledger::{Entry, Kind, Ledger};
use crate::sys::fsx::{create_dirs_durably, fsync_dir};
use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// Why an item may not be released, or None when it may.
pub fn release_refusal(item: &Item, force_reason: Option<&str>) -> Option<String> {
    if force_reason.is_some() {
        return None;
    }
    match item.proofs.last() {
        None => Some(format!(
            "{} has no proof: run `roger quarantine prove {} -- CMD...` first, or pass --force --reason R",
            item.id, item.id
        )),
        Some(p) if !p.passed => Some(format!(
            "{}'s latest proof failed (exit {}{}): prove it again, or pass --force --reason R",
            item.id,
            p.exit_code.map_or("none".into(), |c| c.to_string()),
            if p.timed_out { ", timed out" } else { "" }
        )),
        Some(_) => None,
    }
}

/// Move the item back to its original path. Refuses if something is there now.
pub fn release(
    item: &Item,
    force_reason: Option<&str>,
    source: &str,
    ledger: &Ledger,
    now: DateTime<Utc>,
) -> Result<()> {
    if let Some(why) = release_refusal(item, force_reason) {
        bail!(why);
    }
    let dest = &item.original_path;
    if std::fs::symlink_metadata(dest).is_ok() {
        bail!(
            "{} exists now: refusing to overwrite it with {}; move it away first",
            dest.display(),
            item.id
        );
    }
    if !item.quarantined_path.exists() {
        bail!(
            "{}: the quarantined item {} is missing",
            item.id,
            item.quarantined_path.display()
        );
    }
    if force_reason.is_none() {
        let now_hash = crate::digest::hash_path(&item.quarantined_path)?.sha256;
        if now_hash != item.sha256 {
            bail!(
                "{}: its bytes changed since it was quarantined (sha256 {} now, {} then); pass --force --reason R to release it anyway",
                item.id,
                crate::digest::short(&now_hash),
                crate::digest::short(&item.sha256)
            );
        }
    }
    let parent = dest.parent().unwrap_or(Path::new("/"));
    create_dirs_durably(parent)?;
    std::fs::rename(&item.quarantined_path, dest).with_context(|| {
        format!(
            "moving {} back to {}",
            item.quarantined_path.display(),
            dest.display()
        )
    })?;
    let reason = force_reason
        .map(|r| format!("forced: {r}"))
        .unwrap_or_else(|| "proof passed".to_string());
    // Moved first, recorded second: until the record exists the ledger still says
    // quarantined, which is the safe side. If the record cannot be written, undo the move.
    let recorded = ledger.append(
        Entry::new(Kind::Release, source, &item.run)
            .field("id", &item.id)
            .field("restored_to", dest)
            .field("sha256", &item.sha256)
            .field("forced", force_reason.is_some())
            .field("reason", &reason),
        now,
    );
    if let Err(e) = recorded {
        std::fs::rename(dest, &item.quarantined_path).with_context(|| {
            format!(
                "the release could not be recorded ({e:#}) and moving it back into quarantine failed"
            )
        })?;
        return Err(e.context("recording the release (the item stays in quarantine)"));
    }
    fsync_dir(parent)?;
    std::fs::remove_dir_all(item.dir())
        .with_context(|| format!("removing {}", item.dir().display()))?;
    Ok(())
}

#[derive(Debug, Clone, Serialize)]
pub struct Kept {
    pub id: String,
    pub why: String,
}

/// Which items a purge removes: older than `older_than` and proven (good or bad), or any old
/// item when forced.
pub fn purge_plan(
    items: &[Item],
    older_than: Duration,
    force: bool,
    now: DateTime<Utc>,
) -> (Vec<&Item>, Vec<Kept>) {
    let mut go = Vec::new();
    let mut kept = Vec::new();
    let limit = chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::MAX);
    for item in items {
        let age = now - item.added_at;
        if age < limit {
            kept.push(Kept {
                id: item.id.clone(),
                why: format!(
                    "younger than {}",
                    crate::config::units::format_duration(older_than)
                ),
            });
        } else if item.proofs.is_empty() && !force {
            kept.push(Kept {
                id: item.id.clone(),
                why: "unproven: it may be the only good copy (prove it, or --force)".into(),
            });
        } else {
            go.push(item);
        }
    }
    (go, kept)
}

/// Delete one item for good; the purge record is written first.
pub fn purge(
    item: &Item,
    forced: bool,
    source: &str,
    ledger: &Ledger,
    now: DateTime<Utc>,
) -> Result<()> {
    ledger.append(
        Entry::new(Kind::Purge, source, &item.run)
            .field("id", &item.id)
            .field("original_path", &item.original_path)
            .field("quarantined_path", &item.quarantined_path)
            .field("sha256", &item.sha256)
            .field("size", item.size)
            .field("reason", &item.reason)
            .field("proof", item.proof_state())
            .field("forced", forced),
        now,
    )?;
    std::fs::remove_dir_all(item.dir())
        .with_context(|| format!("removing {}", item.dir().display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quarantine::Proof;
    use chrono::TimeZone;
    use std::path::PathBuf;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn item(id: &str, added: i64, proofs: &[bool]) -> Item {
        Item {
            id: id.into(),
            original_path: PathBuf::from("/x"),
            quarantined_path: PathBuf::from("/q/x"),
            reason: "r".into(),
            sha256: "0".repeat(64),
            size: 1,
            added_at: t(added),
            source: "t".into(),
            run: "r".into(),
            proofs: proofs
                .iter()
                .map(|&passed| Proof {
                    at: t(added + 1),
                    command: vec!["true".into()],
                    exit_code: Some(if passed { 0 } else { 1 }),
                    passed,
                    timed_out: false,
                    unchanged: true,
                    duration_s: 0.1,
                    output_tail: String::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn release_needs_the_latest_proof_to_pass_or_force() {
        assert!(release_refusal(&item("a", 0, &[]), None)
            .unwrap()
            .contains("no proof"));
        assert!(release_refusal(&item("a", 0, &[true, false]), None)
            .unwrap()
            .contains("latest proof failed (exit 1)"));
        assert!(release_refusal(&item("a", 0, &[false, true]), None).is_none());
        assert!(release_refusal(&item("a", 0, &[]), Some("checked by hand")).is_none());
    }

    #[test]
    fn purge_keeps_young_and_unproven() {
        let day = 86_400;
        let items = vec![
            item("old-unproven", 0, &[]),
            item("old-bad", 0, &[false]),
            item("old-good", 0, &[true]),
            item("young-bad", 7 * day, &[false]),
        ];
        let week = Duration::from_secs(7 * day as u64);
        let (go, kept) = purge_plan(&items, week, false, t(8 * day));
        let ids: Vec<&str> = go.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["old-bad", "old-good"]);
        assert!(kept[0].why.starts_with("unproven"));
        assert!(kept[1].why.starts_with("younger than"));
        let (go, _) = purge_plan(&items, week, true, t(8 * day));
        assert_eq!(go.len(), 3);
    }

    /// Same class as issue 10 item 11 (840986a): an item.json edited to a short or non-ASCII
    /// sha256 made `quarantine release` panic cutting it for the "bytes changed" message.
    #[test]
    fn regress_short_or_non_ascii_sha256_in_quarantine_item() {
        let dir = tempfile::tempdir().unwrap();
        let held = dir.path().join("q/item/ckpt-1.pt");
        std::fs::create_dir_all(held.parent().unwrap()).unwrap();
        std::fs::write(&held, b"weights").unwrap();
        let ledger = Ledger::new(dir.path().join("l.jsonl"));
        for sha in ["abc", "abcdefghijkééé"] {
            let item: Item = serde_json::from_value(serde_json::json!({
                "id": "item",
                "original_path": dir.path().join("ckpt-1.pt"),
                "quarantined_path": held,
                "reason": "r",
                "sha256": sha,
                "size": 7,
                "added_at": "2026-01-01T00:00:00Z",
                "proofs": [{"at": "2026-01-01T00:00:00Z", "command": ["true"], "exit_code": 0,
                            "passed": true, "duration_s": 0.1, "output_tail": ""}],
            }))
            .unwrap();
            let e = release(&item, None, "t", &ledger, Utc::now())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("its bytes changed since it was quarantined"),
                "{e}"
            );
        }
    }
}
