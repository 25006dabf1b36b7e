//! The one table of retention cases that every caller of [`super::plan`] runs: the pure plan
//! (`super::tests`), publish's retention (`super::apply`), `hygiene disk --prune`
//! (`hygiene::prune`) and the bucket's retention (`remote::queue`). A row is a ledger, a
//! policy and what may go; a caller that builds its guard wrong, or prunes outside the plan,
//! fails the rows it gets wrong. Paths are under the directory each runner hands in.

use crate::ledger::{Entry, Kind, Record};
use std::path::{Path, PathBuf};

/// The bucket of every row that configures one.
pub const BUCKET: &str = "s3://ckpts/r/";

pub struct Case {
    pub name: &'static str,
    pub ledger: Vec<Entry>,
    pub keep_last: usize,
    pub latest: &'static str,
    pub margin: u64,
    /// A bucket is configured ([`BUCKET`]) and these names have a verified copy there.
    pub bucket: Option<&'static [&'static str]>,
    /// Names whose bytes no longer match their record.
    pub corrupt: &'static [&'static str],
    /// What may go, oldest first.
    pub prune: &'static [&'static str],
    /// (name, start of the why) that must be among the protections.
    pub kept: &'static [(&'static str, &'static str)],
}

/// The bytes of the checkpoint file `name` (its record's sha256 is theirs).
pub fn bytes(name: &str) -> Vec<u8> {
    format!("weights of {name}").into_bytes()
}

pub fn sha256(name: &str) -> String {
    crate::digest::hash_reader(&bytes(name)[..]).unwrap().0
}

fn publish_in(dir: &Path, name: &str, step: Option<u64>) -> Entry {
    Entry::new(Kind::Publish, "publish", "r")
        .step(step)
        .field("path", dir.join(name).display().to_string())
        .field("sha256", sha256(name))
        .field("size", bytes(name).len() as u64)
}

/// The bucket's record of a verified copy of `dir/name` (as the uploader writes it).
pub fn verified_in(dir: &Path, name: &str) -> Entry {
    Entry::new(Kind::Remote, crate::checkpoints::bucket::SOURCE, "r")
        .field("event", "verified")
        .field("path", dir.join(name).display().to_string())
        .field("url", format!("{BUCKET}checkpoints/{name}"))
        .field("name", name)
        .field("sha256", sha256(name))
        .field("size", bytes(name).len() as u64)
}

fn verdict(step: Option<u64>, status: &str, diverged_at: Option<u64>) -> Entry {
    let mut check = serde_json::json!({"check": "loss", "status": status});
    if let Some(d) = diverged_at {
        check["diverged_at"] = d.into();
    }
    Entry::new(Kind::Verdict, "critic", "r")
        .step(step)
        .field("status", status)
        .field("checks", vec![check])
}

/// A `pass` at `step` whose observation records an out-of-band stretch since `since` that
/// the median of the newest losses still hides (what the real critic files: see `vouched`).
fn pass_hiding(step: u64, since: u64) -> Entry {
    verdict(Some(step), "pass", None).field(
        "observation",
        serde_json::json!({"onsets": {"out_of_band": {"since": since, "samples": step - since + 1}}}),
    )
}

impl Case {
    /// The row's ledger (then its verified bucket copies) as records, paths under `dir`.
    pub fn records(&self, dir: &Path) -> Vec<Record> {
        let mut entries = self.ledger.clone();
        for name in self.bucket.unwrap_or_default() {
            entries.push(verified_in(dir, name));
        }
        crate::ledger::test_records(entries)
    }

    /// Every checkpoint name the row publishes, once each, in publish order.
    pub fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in &self.ledger {
            let r = crate::ledger::test_records(vec![e.clone()]);
            if r[0].kind == Kind::Publish {
                let p = PathBuf::from(r[0].str_field("path").unwrap());
                let n = p.file_name().unwrap().to_string_lossy().to_string();
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        out
    }

    /// Lay the row out for a runner that touches disk: each checkpoint file under `dir` (a
    /// corrupt one with other bytes), the row's records appended to a ledger at `ledger`.
    pub fn lay_out(&self, dir: &Path, ledger: &Path) -> crate::ledger::Ledger {
        std::fs::create_dir_all(dir).unwrap();
        for n in self.names() {
            let b = if self.corrupt.contains(&n.as_str()) {
                b"changed bytes".to_vec()
            } else {
                bytes(&n)
            };
            std::fs::write(dir.join(&n), b).unwrap();
        }
        let l = crate::ledger::Ledger::new(ledger.to_path_buf());
        let verified = self
            .bucket
            .unwrap_or_default()
            .iter()
            .map(|n| verified_in(dir, n));
        for (i, e) in self.ledger.iter().cloned().chain(verified).enumerate() {
            use chrono::TimeZone;
            let ts = chrono::Utc
                .timestamp_opt(1_700_000_000 + i as i64, 0)
                .unwrap();
            l.append(e, ts).unwrap();
        }
        l
    }

    /// Panics unless exactly the row's `prune` went (`removed`: paths, in removal order).
    pub fn check_removed(&self, caller: &str, dir: &Path, removed: &[PathBuf]) {
        let want: Vec<PathBuf> = self.prune.iter().map(|n| dir.join(n)).collect();
        assert_eq!(removed, want, "{caller}: {}", self.name);
    }

    /// Panics unless every `kept` (name, why) is among `protected`, and no protected path
    /// went.
    pub fn check_kept(&self, caller: &str, dir: &Path, protected: &[super::Protected]) {
        for (name, why) in self.kept {
            assert!(
                protected
                    .iter()
                    .any(|k| k.path == dir.join(name) && k.why.starts_with(why)),
                "{caller}: {}: {name} not kept as {why:?}: {protected:#?}",
                self.name
            );
        }
        for k in protected {
            assert!(
                !self.prune.iter().any(|n| k.path == dir.join(n)),
                "{caller}: {}: {} is protected and pruned",
                self.name,
                k.path.display()
            );
        }
    }
}

/// How many rows the table has (a disk runner builds each row under its own directory).
pub fn rows() -> usize {
    table(Path::new("/ck")).len()
}

/// The table. `dir` is where the runner's checkpoints live (absolute).
pub fn table(dir: &Path) -> Vec<Case> {
    let publish = |name: &str, step: Option<u64>| publish_in(dir, name, step);
    let ckpt = |step: u64| publish_in(dir, &format!("ckpt-{step}"), Some(step));
    let fail = |s: u64| verdict(Some(s), "fail", None);
    let fail_since = |s: u64, d: u64| verdict(Some(s), "fail", Some(d));
    let pass = |s: u64| verdict(Some(s), "pass", None);
    let warn = |s: u64| verdict(Some(s), "warn", None);
    let quarantine = |n: &str| {
        Entry::new(Kind::Quarantine, "quarantine", "r")
            .field("original_path", dir.join(n).display().to_string())
    };
    vec![
        Case {
            name: "healthy: keep_last only",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300), ckpt(400)],
            keep_last: 2,
            latest: "ckpt-400",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-100", "ckpt-200"],
            kept: &[("ckpt-400", "latest.json"), ("ckpt-400", "the last good")],
        },
        Case {
            name: "item 5: the only checkpoint before a standing fail",
            ledger: vec![ckpt(100), fail(150), ckpt(200), ckpt(300), ckpt(400)],
            keep_last: 2,
            latest: "ckpt-400",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-200"],
            kept: &[
                ("ckpt-100", "the last good"),
                ("ckpt-100", "the newest checkpoint before step 150"),
            ],
        },
        Case {
            name: "item 7: the onset, not the verdict's step",
            ledger: vec![ckpt(70), ckpt(90), ckpt(110), fail_since(120, 80)],
            keep_last: 1,
            latest: "ckpt-110",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-90"],
            kept: &[
                ("ckpt-70", "the last good"),
                ("ckpt-70", "the newest checkpoint before step 80"),
            ],
        },
        Case {
            name: "item 7: and before onset - rollback margin",
            ledger: vec![ckpt(60), ckpt(70), ckpt(78), ckpt(90), fail_since(100, 80)],
            keep_last: 1,
            latest: "ckpt-90",
            margin: 5,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-60"],
            kept: &[
                ("ckpt-78", "the newest checkpoint before step 80"),
                ("ckpt-70", "the newest checkpoint before step 75"),
            ],
        },
        Case {
            name: "a cleared fail protects nothing more",
            ledger: vec![
                ckpt(100),
                fail(150),
                pass(160),
                ckpt(200),
                pass(250),
                ckpt(300),
            ],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-100"],
            kept: &[
                ("ckpt-300", "the last good"),
                ("ckpt-200", "the newest checkpoint at or before step 250"),
            ],
        },
        Case {
            name: "item 6: a stepless checkpoint after a fail is not the last good",
            ledger: vec![ckpt(100), fail(150), publish("last.ckpt", None)],
            keep_last: 1,
            latest: "last.ckpt",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &[],
            kept: &[("ckpt-100", "the last good"), ("last.ckpt", "latest.json")],
        },
        Case {
            name: "a fail without a step: the newest published before it",
            ledger: vec![ckpt(100), ckpt(200), verdict(None, "fail", None), ckpt(300)],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-100"],
            kept: &[
                ("ckpt-200", "the last good"),
                ("ckpt-200", "the newest checkpoint published before"),
            ],
        },
        Case {
            name: "corrupt bytes pass the last good on to an older one",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300)],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            bucket: None,
            corrupt: &["ckpt-300"],
            prune: &["ckpt-100"],
            kept: &[("ckpt-200", "the last good")],
        },
        Case {
            name: "quarantined and latest.json rolled back by hand",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300), quarantine("ckpt-200")],
            keep_last: 0,
            latest: "ckpt-100",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &[],
            kept: &[
                ("ckpt-100", "latest.json"),
                ("ckpt-300", "the last good"),
                ("ckpt-200", "quarantined"),
            ],
        },
        Case {
            name: "issue 28 item 7: the newest checkpoint at or before the last pass",
            ledger: vec![
                ckpt(130),
                ckpt(140),
                pass(145),
                ckpt(150),
                ckpt(160),
                ckpt(170),
            ],
            keep_last: 3,
            latest: "ckpt-170",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-130"],
            kept: &[(
                "ckpt-140",
                "the newest checkpoint at or before step 145, the last the critic vouched for (pass verdict #3)",
            )],
        },
        Case {
            name: "issue 28 item 7: a pass at a checkpoint's step vouches for that checkpoint",
            ledger: vec![ckpt(130), ckpt(140), pass(140), ckpt(150), ckpt(160)],
            keep_last: 1,
            latest: "ckpt-160",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-130", "ckpt-150"],
            kept: &[("ckpt-140", "the newest checkpoint at or before step 140")],
        },
        Case {
            name: "issue 28 item 7: a fail after the pass does not remove it",
            ledger: vec![
                ckpt(120),
                ckpt(130),
                pass(135),
                ckpt(140),
                ckpt(150),
                ckpt(160),
                fail_since(170, 150),
                ckpt(170),
            ],
            keep_last: 2,
            latest: "ckpt-170",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-120", "ckpt-150"],
            kept: &[
                ("ckpt-130", "the newest checkpoint at or before step 135"),
                ("ckpt-140", "the newest checkpoint before step 150"),
                ("ckpt-140", "the last good"),
            ],
        },
        Case {
            name: "issue 28 item 7: a newer pass moves the protection",
            ledger: vec![
                ckpt(100),
                pass(105),
                ckpt(110),
                ckpt(120),
                pass(125),
                ckpt(130),
                ckpt(140),
            ],
            keep_last: 1,
            latest: "ckpt-140",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-100", "ckpt-110", "ckpt-130"],
            kept: &[(
                "ckpt-120",
                "the newest checkpoint at or before step 125, the last the critic vouched for (pass verdict #5)",
            )],
        },
        Case {
            name: "issue 28 item 7: a warn neither vouches nor moves the protection",
            ledger: vec![ckpt(100), pass(105), ckpt(110), warn(115), ckpt(120)],
            keep_last: 1,
            latest: "ckpt-120",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-110"],
            kept: &[("ckpt-100", "the newest checkpoint at or before step 105")],
        },
        Case {
            name: "issue 28 item 7: a pass whose median hid the first bad losses vouches before them",
            ledger: vec![
                ckpt(140),
                ckpt(150),
                pass_hiding(151, 150),
                ckpt(160),
                ckpt(170),
            ],
            keep_last: 1,
            latest: "ckpt-170",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-150", "ckpt-160"],
            kept: &[(
                "ckpt-140",
                "the newest checkpoint before step 150: the critic's last pass (verdict #3, step 151) saw the loss turn bad from step 150 on",
            )],
        },
        Case {
            name: "issue 28 item 7: a stepless checkpoint is never the vouched one (a rollback passes it over)",
            ledger: vec![
                ckpt(100),
                publish("last.ckpt", None),
                pass(150),
                ckpt(200),
            ],
            keep_last: 1,
            latest: "ckpt-200",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["last.ckpt"],
            kept: &[("ckpt-100", "the newest checkpoint at or before step 150")],
        },
        Case {
            name: "issue 28 item 7: a pass without a step vouches by publish order",
            ledger: vec![ckpt(100), ckpt(200), verdict(None, "pass", None), ckpt(300)],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-100"],
            kept: &[(
                "ckpt-200",
                "the newest checkpoint published before the critic's last pass (verdict #3, no step)",
            )],
        },
        Case {
            name: "issue 28 item 7: the vouched one quarantined: the newest usable before it",
            ledger: vec![
                ckpt(100),
                ckpt(140),
                pass(145),
                ckpt(150),
                quarantine("ckpt-140"),
            ],
            keep_last: 1,
            latest: "ckpt-150",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &[],
            kept: &[
                ("ckpt-100", "the newest checkpoint at or before step 145"),
                ("ckpt-140", "quarantined"),
            ],
        },
        Case {
            name: "issue 28 item 7: a pass after a rollback vouches for no tainted checkpoint",
            ledger: vec![
                ckpt(130),
                ckpt(140),
                pass(145),
                ckpt(150),
                ckpt(160),
                fail_since(200, 150),
                pass(165),
            ],
            keep_last: 1,
            latest: "ckpt-160",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-130", "ckpt-150"],
            kept: &[(
                "ckpt-140",
                "the newest checkpoint at or before step 165, the last the critic vouched for (pass verdict #7)",
            )],
        },
        Case {
            name: "issue 28 item 7: after a rollback the new pass vouches for the new timeline",
            ledger: vec![
                ckpt(130),
                ckpt(140),
                pass(145),
                ckpt(150),
                ckpt(160),
                fail_since(200, 150),
                pass(165),
                publish("ckpt-150", Some(150)),
                publish("ckpt-160", Some(160)),
                ckpt(170),
            ],
            keep_last: 1,
            latest: "ckpt-170",
            margin: 0,
            bucket: None,
            corrupt: &[],
            prune: &["ckpt-130", "ckpt-140", "ckpt-150"],
            kept: &[("ckpt-160", "the newest checkpoint at or before step 165")],
        },
            Case {
            name: "issue 36 item 1: a bucket that never verified anything: nothing goes",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300)],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            bucket: Some(&[]),
            corrupt: &[],
            prune: &[],
            kept: &[
                ("ckpt-100", "its copy in s3://ckpts/r/ is not verified yet"),
                ("ckpt-200", "its copy in s3://ckpts/r/ is not verified yet"),
                ("ckpt-300", "latest.json"),
            ],
        },
        Case {
            name: "issue 36 item 1: only checkpoints with a verified bucket copy go",
            ledger: vec![ckpt(100), ckpt(200), ckpt(300), ckpt(400)],
            keep_last: 1,
            latest: "ckpt-400",
            margin: 0,
            bucket: Some(&["ckpt-100", "ckpt-300"]),
            corrupt: &[],
            prune: &["ckpt-100", "ckpt-300"],
            kept: &[("ckpt-200", "its copy in s3://ckpts/r/ is not verified yet")],
        },
        Case {
            name: "issue 36 item 1: a verified copy of other bytes is no copy of these",
            ledger: vec![
                ckpt(100),
                ckpt(200),
                // The bucket verified a copy of other bytes under the same path.
                verified_in(dir, "ckpt-200").field("sha256", "b".repeat(64)),
                ckpt(300),
            ],
            keep_last: 1,
            latest: "ckpt-300",
            margin: 0,
            bucket: Some(&["ckpt-100"]),
            corrupt: &[],
            prune: &["ckpt-100"],
            kept: &[("ckpt-200", "its copy in s3://ckpts/r/ is not verified yet")],
        },
        Case {
            name: "issue 36 item 1: the bucket rule adds to the others, it never replaces them",
            ledger: vec![ckpt(100), ckpt(200), fail(250), ckpt(300), quarantine("ckpt-300"), ckpt(400)],
            keep_last: 1,
            latest: "ckpt-400",
            margin: 0,
            bucket: Some(&["ckpt-100", "ckpt-200", "ckpt-300", "ckpt-400"]),
            corrupt: &[],
            prune: &["ckpt-100"],
            kept: &[
                ("ckpt-400", "latest.json"),
                ("ckpt-200", "the last good"),
                ("ckpt-200", "the newest checkpoint before step 250"),
                ("ckpt-300", "quarantined"),
            ],
        },
    ]
}
