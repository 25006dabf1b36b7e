//! Which step is complete when every node of a job publishes its own part of a checkpoint
//! (`[cluster] parts = "every-node"`): pure over each other node's listed parts. Here, below
//! both, so that resume (`cluster`) and retention (`publish`) judge by the one rule.

use std::collections::BTreeMap;

/// What the job's store says of the other nodes' parts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Known {
    /// Each other node's listed steps as its newest record holds them (None: no record, or
    /// one that lists no parts).
    pub lists: BTreeMap<u32, Option<Vec<u64>>>,
    /// Steps whose parts, each verified, still do not make the whole checkpoint (a torch DCP
    /// whose `.metadata` names files no node's part holds), with why.
    pub broken: BTreeMap<u64, String>,
}

impl Known {
    pub fn lists(lists: BTreeMap<u32, Option<Vec<u64>>>) -> Known {
        Known {
            lists,
            broken: BTreeMap::new(),
        }
    }
}

/// What is known of the other nodes' parts, or why they cannot be read.
pub type Others = Result<Known, String>;

/// Why `step` is not complete (None: every other node's part of it is verified, and together
/// the parts make the whole checkpoint).
pub fn missing(step: Option<u64>, known: &Known) -> Option<String> {
    let why = listed(step, &known.lists);
    match (why, step.and_then(|s| known.broken.get(&s))) {
        (Some(w), _) => Some(w),
        (None, Some(b)) => Some(b.clone()),
        (None, None) => None,
    }
}

/// Why `step` is not complete by the lists alone.
fn listed(step: Option<u64>, others: &BTreeMap<u32, Option<Vec<u64>>>) -> Option<String> {
    let Some(step) = step else {
        return Some(
            "its step is unknown, so it cannot be matched with the other nodes' parts".into(),
        );
    };
    let mut why = Vec::new();
    for (node, parts) in others {
        match parts {
            None => why.push(format!(
                "node {node} lists no parts in the [cluster] store (no record yet)"
            )),
            Some(p) if !p.contains(&step) => {
                let newest: Vec<String> = p.iter().rev().take(4).map(u64::to_string).collect();
                why.push(format!(
                    "node {node}'s part is not verified (its newest parts: {})",
                    if newest.is_empty() {
                        "none".to_string()
                    } else {
                        format!("steps {}", newest.join(", "))
                    }
                ));
            }
            Some(_) => {}
        }
    }
    (!why.is_empty()).then(|| format!("step {step} is not complete: {}", why.join("; ")))
}
