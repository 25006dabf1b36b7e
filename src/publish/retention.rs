//! Retention: which published checkpoints may go — THE rule, one function ([`plan`]) for every
//! caller (publish's retention and `hygiene disk --prune`), run under the destination's publish
//! lock. Pure apart from the injected hash check. Scoped to one directory: a run published to
//! two places (local + backup) keeps N in each, and pruning one never touches a checkpoint of
//! the other — which that directory's latest.json may point to.
//!
//! Never removed, whatever the policy: what latest.json points to; the last good checkpoint
//! of the directory (`checkpoints::last_good_in`); for every standing critic fail, the newest
//! checkpoint before its onset (and before onset − `rollback_margin_steps`, where a rollback
//! resumes), so a run that keeps publishing diverged weights cannot push the way back out;
//! anything quarantined.

use crate::checkpoints::{self, Checkpoint};
use crate::config::PublishConfig;
use crate::ledger::Record;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PruneCandidate {
    pub checkpoint: Checkpoint,
    /// A plain sentence for the prune record.
    pub reason: String,
}

/// A path retention must keep, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Protected {
    pub path: PathBuf,
    pub why: String,
}

/// What the caller knows beyond the ledger.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// What the directory's latest.json points to (absolute, like ledger paths).
    pub latest: Option<PathBuf>,
    /// `[watch] rollback_margin_steps`: a rollback resumes before onset − margin.
    pub rollback_margin: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Plan {
    /// May go, oldest first (a caller that only needs some space takes a prefix).
    pub candidates: Vec<PruneCandidate>,
    /// Never to be removed, and why (one line per reason; a path may have several).
    pub protected: Vec<Protected>,
    /// Checkpoints the policy alone would have removed that a protection keeps.
    pub spared: Vec<Protected>,
}

/// Retention for the checkpoints of `run` directly inside `dir` (absolute, as ledger paths
/// are). `verifies` re-hashes a checkpoint (for the last good one).
pub fn plan(
    records: &[Record],
    run: &str,
    dir: &Path,
    policy: &PublishConfig,
    guard: &Guard,
    verifies: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
) -> Plan {
    let published = checkpoints::published(records, run);
    let protected = protected(records, run, dir, &published, guard, verifies);
    let paths: Vec<PathBuf> = protected.iter().map(|p| p.path.clone()).collect();
    let candidates = select(&published, dir, policy, &paths);
    let spared = select(&published, dir, policy, &[])
        .into_iter()
        .filter(|c| {
            !candidates
                .iter()
                .any(|k| k.checkpoint.path == c.checkpoint.path)
        })
        .flat_map(|c| {
            protected
                .iter()
                .filter(|p| p.path == c.checkpoint.path)
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect();
    Plan {
        candidates,
        protected,
        spared,
    }
}

fn protected(
    records: &[Record],
    run: &str,
    dir: &Path,
    published: &[Checkpoint],
    guard: &Guard,
    verifies: &mut dyn FnMut(&Checkpoint) -> Result<(), String>,
) -> Vec<Protected> {
    let mut out: Vec<Protected> = Vec::new();
    let mut keep = |path: PathBuf, why: String| {
        if !out.iter().any(|p| p.path == path && p.why == why) {
            out.push(Protected { path, why });
        }
    };
    if let Some(p) = &guard.latest {
        keep(p.clone(), "latest.json points to it".into());
    }
    if let Some(c) = checkpoints::last_good_in(records, run, Some(dir), None, verifies).chosen {
        keep(c.path, "the last good checkpoint".into());
    }
    let here: Vec<&Checkpoint> = published
        .iter()
        .filter(|c| c.path.parent() == Some(dir))
        .collect();
    for f in checkpoints::fails(records, run)
        .into_iter()
        .filter(|f| f.standing())
    {
        let newest_before = |limit: u64| {
            here.iter()
                .filter(|c| c.step.is_some_and(|s| s < limit))
                .max_by_key(|c| (c.step, c.seq))
        };
        match f.onset {
            Some(onset) => {
                let mut limits = vec![onset];
                if guard.rollback_margin > 0 {
                    limits.push(onset.saturating_sub(guard.rollback_margin));
                }
                for limit in limits {
                    if let Some(c) = newest_before(limit) {
                        keep(
                            c.path.clone(),
                            format!(
                                "the newest checkpoint before step {limit}, where a standing critic fail (verdict #{}) says the run diverged{}",
                                f.seq,
                                if limit < onset { format!(" at {onset}, less the rollback margin") } else { String::new() }
                            ),
                        );
                    }
                }
            }
            // A fail with no step: the newest checkpoint published before it.
            None => {
                if let Some(c) = here.iter().filter(|c| c.seq < f.seq).max_by_key(|c| c.seq) {
                    keep(
                        c.path.clone(),
                        format!(
                            "the newest checkpoint published before a standing critic fail (verdict #{})",
                            f.seq
                        ),
                    );
                }
            }
        }
    }
    let mut q: Vec<PathBuf> = checkpoints::quarantined(records).into_iter().collect();
    q.sort();
    for p in q {
        keep(p, "quarantined".into());
    }
    out
}

/// The policy alone: only checkpoints directly inside `dir` are considered (the others are not
/// this prune's business, nor counted towards `keep_last`). Of those, keep the newest
/// `keep_last` (by publish order), every checkpoint whose step is a multiple of `keep_every`
/// (when > 0), and everything in `protected`. The rest are candidates, oldest first.
fn select(
    checkpoints: &[Checkpoint],
    dir: &Path,
    policy: &PublishConfig,
    protected: &[PathBuf],
) -> Vec<PruneCandidate> {
    let mut ordered: Vec<&Checkpoint> = checkpoints
        .iter()
        .filter(|c| c.path.parent() == Some(dir))
        .collect();
    ordered.sort_by_key(|c| c.seq);
    let newest_from = ordered.len().saturating_sub(policy.keep_last);
    let rule = if policy.keep_every > 0 {
        format!(
            "keep_last={}, keep_every={}",
            policy.keep_last, policy.keep_every
        )
    } else {
        format!("keep_last={}", policy.keep_last)
    };
    ordered
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i < newest_from)
        .filter(|(_, c)| {
            !(policy.keep_every > 0 && c.step.is_some_and(|s| s % policy.keep_every == 0))
        })
        .filter(|(_, c)| !protected.iter().any(|p| p == &c.path))
        .map(|(_, c)| PruneCandidate {
            checkpoint: c.clone(),
            reason: format!(
                "retention: {rule}; {} is older than the newest {} and its step {} is not kept",
                c.path.display(),
                policy.keep_last,
                c.step.map_or("(unknown)".to_string(), |s| s.to_string())
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Bytes;
    use crate::ledger::{Entry, Kind};

    fn publish(name: &str, step: Option<u64>) -> Entry {
        Entry::new(Kind::Publish, "publish", "r")
            .step(step)
            .field("path", format!("/ck/{name}"))
            .field("sha256", "a".repeat(64))
            .field("size", 10)
    }

    fn ckpt(step: u64) -> Entry {
        publish(&format!("ckpt-{step}"), Some(step))
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

    struct Case {
        name: &'static str,
        ledger: Vec<Entry>,
        keep_last: usize,
        latest: &'static str,
        margin: u64,
        /// Names whose bytes no longer match their record.
        corrupt: &'static [&'static str],
        prune: &'static [&'static str],
        /// (name, start of the why) that must be among the protections.
        kept: &'static [(&'static str, &'static str)],
    }

    /// The one rule, as a table: what publish and `hygiene disk --prune` may remove.
    #[test]
    fn the_shared_rule() {
        let fail = |s: u64| verdict(Some(s), "fail", None);
        let fail_since = |s: u64, d: u64| verdict(Some(s), "fail", Some(d));
        let pass = |s: u64| verdict(Some(s), "pass", None);
        let quarantine = |n: &str| {
            Entry::new(Kind::Quarantine, "quarantine", "r")
                .field("original_path", format!("/ck/{n}"))
        };
        let cases = vec![
            Case {
                name: "healthy: keep_last only",
                ledger: vec![ckpt(100), ckpt(200), ckpt(300), ckpt(400)],
                keep_last: 2,
                latest: "ckpt-400",
                margin: 0,
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
                corrupt: &[],
                prune: &["ckpt-60"],
                kept: &[
                    ("ckpt-78", "the newest checkpoint before step 80"),
                    ("ckpt-70", "the newest checkpoint before step 75"),
                ],
            },
            Case {
                name: "a cleared fail protects nothing more",
                ledger: vec![ckpt(100), fail(150), pass(160), ckpt(200), ckpt(300)],
                keep_last: 1,
                latest: "ckpt-300",
                margin: 0,
                corrupt: &[],
                prune: &["ckpt-100", "ckpt-200"],
                kept: &[("ckpt-300", "the last good")],
            },
            Case {
                name: "item 6: a stepless checkpoint after a fail is not the last good",
                ledger: vec![ckpt(100), fail(150), publish("last.ckpt", None)],
                keep_last: 1,
                latest: "last.ckpt",
                margin: 0,
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
                corrupt: &[],
                prune: &[],
                kept: &[
                    ("ckpt-100", "latest.json"),
                    ("ckpt-300", "the last good"),
                    ("ckpt-200", "quarantined"),
                ],
            },
        ];
        for case in cases {
            let records = crate::ledger::test_records(case.ledger);
            let guard = Guard {
                latest: Some(PathBuf::from(format!("/ck/{}", case.latest))),
                rollback_margin: case.margin,
            };
            let mut verifies = |c: &Checkpoint| {
                if case.corrupt.iter().any(|n| c.path.ends_with(n)) {
                    Err("bytes changed".to_string())
                } else {
                    Ok(())
                }
            };
            let p = plan(
                &records,
                "r",
                Path::new("/ck"),
                &policy(case.keep_last, 0),
                &guard,
                &mut verifies,
            );
            let pruned: Vec<String> = p
                .candidates
                .iter()
                .map(|c| c.checkpoint.path.display().to_string())
                .collect();
            let want: Vec<String> = case.prune.iter().map(|n| format!("/ck/{n}")).collect();
            assert_eq!(pruned, want, "{}: {:#?}", case.name, p.protected);
            for (name, why) in case.kept {
                assert!(
                    p.protected
                        .iter()
                        .any(|k| k.path.ends_with(name) && k.why.starts_with(why)),
                    "{}: {name} not kept as {why:?}: {:#?}",
                    case.name,
                    p.protected
                );
            }
            // Every protected path of this directory stays, whatever the policy says.
            for k in &p.protected {
                assert!(
                    !pruned.contains(&k.path.display().to_string()),
                    "{}",
                    case.name
                );
            }
        }
    }

    #[test]
    fn spared_names_what_the_policy_alone_would_have_removed() {
        let records = crate::ledger::test_records(vec![
            ckpt(100),
            verdict(Some(150), "fail", None),
            ckpt(200),
            ckpt(300),
        ]);
        let guard = Guard {
            latest: Some(PathBuf::from("/ck/ckpt-300")),
            rollback_margin: 0,
        };
        let p = plan(
            &records,
            "r",
            Path::new("/ck"),
            &policy(1, 0),
            &guard,
            &mut |_| Ok(()),
        );
        let spared: Vec<_> = p
            .spared
            .iter()
            .map(|s| (s.path.display().to_string(), s.why.clone()))
            .collect();
        assert_eq!(spared.len(), 2, "{spared:?}");
        assert!(spared.iter().all(|(p, _)| p == "/ck/ckpt-100"));
        assert_eq!(
            p.candidates
                .iter()
                .map(|c| c.checkpoint.step)
                .collect::<Vec<_>>(),
            vec![Some(200)]
        );
    }

    fn ck(seq: u64, step: Option<u64>) -> Checkpoint {
        Checkpoint {
            path: PathBuf::from(format!("/ck/c-{seq}")),
            sha256: "0".repeat(64),
            size: 10,
            step,
            seq,
        }
    }

    fn policy(keep_last: usize, keep_every: u64) -> PublishConfig {
        PublishConfig {
            keep_last,
            keep_every,
            margin: Bytes(0),
        }
    }

    fn seqs(c: &[PruneCandidate]) -> Vec<u64> {
        c.iter().map(|c| c.checkpoint.seq).collect()
    }

    #[test]
    fn keep_last_only() {
        let cks: Vec<_> = (1..=6).map(|i| ck(i, Some(i * 100))).collect();
        assert_eq!(
            seqs(&select(&cks, Path::new("/ck"), &policy(3, 0), &[])),
            vec![1, 2, 3]
        );
        assert_eq!(
            seqs(&select(&cks, Path::new("/ck"), &policy(6, 0), &[])),
            Vec::<u64>::new()
        );
        assert_eq!(
            seqs(&select(&cks, Path::new("/ck"), &policy(10, 0), &[])),
            Vec::<u64>::new()
        );
        assert_eq!(
            seqs(&select(&[], Path::new("/ck"), &policy(3, 0), &[])),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn keep_every_spares_milestones() {
        let cks: Vec<_> = (1..=8).map(|i| ck(i, Some(i * 500))).collect();
        // steps 500..4000; multiples of 1000 are kept: 1000, 2000, 3000 (4000 is newest anyway)
        let p = select(&cks, Path::new("/ck"), &policy(2, 1000), &[]);
        assert_eq!(seqs(&p), vec![1, 3, 5]);
        assert!(p[0].reason.contains("keep_last=2, keep_every=1000"));
        assert!(p[0].reason.contains("step 500"));
    }

    #[test]
    fn protected_paths_and_unknown_steps() {
        let cks = vec![ck(1, None), ck(2, Some(1000)), ck(3, None), ck(4, Some(7))];
        // keep_every never keeps an unknown step; protected wins over everything.
        let p = select(
            &cks,
            Path::new("/ck"),
            &policy(1, 1000),
            &[PathBuf::from("/ck/c-1")],
        );
        assert_eq!(seqs(&p), vec![3]);
        assert!(p[0].reason.contains("step (unknown)"));
        // keep_last = 0: everything but protected goes, oldest first.
        let p = select(
            &cks,
            Path::new("/ck"),
            &policy(0, 0),
            &[PathBuf::from("/ck/c-4")],
        );
        assert_eq!(seqs(&p), vec![1, 2, 3]);
    }

    #[test]
    fn order_is_by_publish_seq_not_input_order() {
        let cks = vec![
            ck(5, Some(5)),
            ck(2, Some(2)),
            ck(9, Some(9)),
            ck(1, Some(1)),
        ];
        assert_eq!(
            seqs(&select(&cks, Path::new("/ck"), &policy(1, 0), &[])),
            vec![1, 2, 5]
        );
    }

    #[test]
    fn only_the_given_directory_is_pruned_or_counted() {
        let mut cks: Vec<_> = (1..=4).map(|i| ck(i, Some(i))).collect();
        for i in 5..=8 {
            let mut c = ck(i, Some(i));
            c.path = PathBuf::from(format!("/backup/c-{i}"));
            cks.push(c);
        }
        // A nested directory is another directory too.
        let mut nested = ck(9, Some(9));
        nested.path = PathBuf::from("/ck/old/c-9");
        cks.push(nested);
        // keep_last counts within /ck: 4 is the newest there, although 5..9 are newer.
        assert_eq!(
            seqs(&select(&cks, Path::new("/ck"), &policy(1, 0), &[])),
            vec![1, 2, 3]
        );
        assert_eq!(
            seqs(&select(&cks, Path::new("/backup"), &policy(0, 0), &[])),
            vec![5, 6, 7, 8]
        );
        assert!(select(&cks, Path::new("/elsewhere"), &policy(0, 0), &[]).is_empty());
    }

    #[test]
    fn step_zero_is_a_multiple() {
        let cks = vec![ck(1, Some(0)), ck(2, Some(10)), ck(3, Some(20))];
        assert_eq!(
            seqs(&select(&cks, Path::new("/ck"), &policy(1, 1000), &[])),
            vec![2]
        );
    }
}
