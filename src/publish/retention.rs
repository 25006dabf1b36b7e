//! Retention: which published checkpoints may go. PURE: fed the ledger's list of published
//! checkpoints, the destination directory being pruned, the policy and the paths that must
//! stay; returns prune candidates oldest first, so a caller that only needs some space takes
//! a prefix. Scoped to one directory here, for every caller (publish and `hygiene disk
//! --prune`): a run published to two places (local + backup) keeps N in each, and pruning
//! one never touches a checkpoint of the other — which that directory's latest.json may point
//! to.

use crate::checkpoints::Checkpoint;
use crate::config::PublishConfig;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PruneCandidate {
    pub checkpoint: Checkpoint,
    /// A plain sentence for the prune record.
    pub reason: String,
}

/// Only checkpoints directly inside `dir` are considered (the others are not this prune's
/// business, nor counted towards `keep_last`). Of those, keep the newest `keep_last` (by
/// publish order), every checkpoint whose step is a multiple of `keep_every` (when > 0), and
/// everything in `protected` (latest.json's target, the last good checkpoint, quarantined
/// items...). The rest are candidates, oldest first.
pub fn plan(
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
            seqs(&plan(&cks, Path::new("/ck"), &policy(3, 0), &[])),
            vec![1, 2, 3]
        );
        assert_eq!(
            seqs(&plan(&cks, Path::new("/ck"), &policy(6, 0), &[])),
            Vec::<u64>::new()
        );
        assert_eq!(
            seqs(&plan(&cks, Path::new("/ck"), &policy(10, 0), &[])),
            Vec::<u64>::new()
        );
        assert_eq!(
            seqs(&plan(&[], Path::new("/ck"), &policy(3, 0), &[])),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn keep_every_spares_milestones() {
        let cks: Vec<_> = (1..=8).map(|i| ck(i, Some(i * 500))).collect();
        // steps 500..4000; multiples of 1000 are kept: 1000, 2000, 3000 (4000 is newest anyway)
        let p = plan(&cks, Path::new("/ck"), &policy(2, 1000), &[]);
        assert_eq!(seqs(&p), vec![1, 3, 5]);
        assert!(p[0].reason.contains("keep_last=2, keep_every=1000"));
        assert!(p[0].reason.contains("step 500"));
    }

    #[test]
    fn protected_paths_and_unknown_steps() {
        let cks = vec![ck(1, None), ck(2, Some(1000)), ck(3, None), ck(4, Some(7))];
        // keep_every never keeps an unknown step; protected wins over everything.
        let p = plan(
            &cks,
            Path::new("/ck"),
            &policy(1, 1000),
            &[PathBuf::from("/ck/c-1")],
        );
        assert_eq!(seqs(&p), vec![3]);
        assert!(p[0].reason.contains("step (unknown)"));
        // keep_last = 0: everything but protected goes, oldest first.
        let p = plan(
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
            seqs(&plan(&cks, Path::new("/ck"), &policy(1, 0), &[])),
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
            seqs(&plan(&cks, Path::new("/ck"), &policy(1, 0), &[])),
            vec![1, 2, 3]
        );
        assert_eq!(
            seqs(&plan(&cks, Path::new("/backup"), &policy(0, 0), &[])),
            vec![5, 6, 7, 8]
        );
        assert!(plan(&cks, Path::new("/elsewhere"), &policy(0, 0), &[]).is_empty());
    }

    #[test]
    fn step_zero_is_a_multiple() {
        let cks = vec![ck(1, Some(0)), ck(2, Some(10)), ck(3, Some(20))];
        assert_eq!(
            seqs(&plan(&cks, Path::new("/ck"), &policy(1, 1000), &[])),
            vec![2]
        );
    }
}
