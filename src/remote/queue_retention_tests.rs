//! The bucket's retention ([`super::prune_bucket`]) runs the shared table of retention cases
//! (`publish::retention::cases`), as publish and `hygiene disk --prune` do.

use super::*;
use crate::publish::retention::cases;
use crate::remote::store::{Cond, Memory};

/// Every row the bucket can hold: its copies are verified ones only, so a row about local
/// copies the bucket lacks, or bytes that changed on a local disk, is the local side's; and
/// `[remote] keep_last = 0` turns bucket retention off.
#[test]
fn bucket_retention_runs_the_shared_table() {
    let mut ran = 0;
    for i in 0..cases::rows() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let dir = root.join("ck");
        let case = cases::table(&dir).remove(i);
        let names = case.names();
        let all_in_bucket = case.bucket.is_none_or(|b| b.len() == names.len());
        if case.keep_last == 0 || !case.corrupt.is_empty() || !all_in_bucket {
            continue;
        }
        let ledger = case.lay_out(&dir, &root.join("roger-ledger.jsonl"));
        if case.bucket.is_none() {
            for n in &names {
                ledger
                    .append(cases::verified_in(&dir, n), chrono::Utc::now())
                    .unwrap();
            }
        }
        let target = Target::parse(cases::BUCKET).unwrap();
        let mem = Memory::default();
        for n in &names {
            mem.put(&target.checkpoint_key(n), cases::bytes(n), Cond::Overwrite)
                .unwrap();
        }
        let latest = RemoteLatest {
            path: case.latest.to_string(),
            sha256: cases::sha256(case.latest),
            size: cases::bytes(case.latest).len() as u64,
            step: None,
            published_at: "2023-11-14T22:13:20Z".into(),
            url: format!("{}checkpoints/{}", cases::BUCKET, case.latest),
            etags: Vec::new(),
            versions: Vec::new(),
            verified_at: "2023-11-14T22:13:21Z".into(),
        };
        mem.put(
            &target.latest_key(),
            serde_json::to_vec(&latest).unwrap(),
            Cond::Overwrite,
        )
        .unwrap();
        let remote = Remote {
            target,
            cfg: RemoteConfig {
                keep_last: case.keep_last,
                ..Default::default()
            },
        };
        let job = Job {
            id: "1".into(),
            run: "r".into(),
            ledger: ledger.path().to_path_buf(),
            remote: remote.target.clone(),
            cfg: remote.cfg.clone(),
            path: dir.join(case.latest),
            name: case.latest.into(),
            dir: false,
            sha256: cases::sha256(case.latest),
            size: cases::bytes(case.latest).len() as u64,
            step: None,
            published_at: latest.published_at.clone(),
            rollback_margin: case.margin,
            config: None,
            open: Vec::new(),
        };
        prune_bucket(&dir, &mem, &remote, &ledger, &job).unwrap();
        let removed: Vec<PathBuf> = ledger
            .records()
            .unwrap()
            .iter()
            .filter(|r| r.kind == Kind::Remote && r.str_field("event") == Some("pruned"))
            .map(|r| PathBuf::from(r.str_field("path").unwrap()))
            .collect();
        case.check_removed("bucket", &dir, &removed);
        for n in &names {
            let gone = removed.contains(&dir.join(n));
            let key = remote.target.checkpoint_key(n);
            assert_eq!(
                mem.head(&key).unwrap().is_none(),
                gone,
                "bucket: {}: {n}",
                case.name
            );
        }
        ran += 1;
    }
    assert!(ran >= 15, "only {ran} rows ran on the bucket");
}
