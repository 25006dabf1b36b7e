//! Which step is complete when every node of a job publishes its own part of a checkpoint
//! (`[cluster] parts = "every-node"`): pure over each other node's listed parts. Here, below
//! both, so that resume (`cluster`) and retention (`publish`) judge by the one rule.

use std::collections::BTreeMap;

/// Each other node's listed steps (None: no record), or why they cannot be read.
pub type Others = Result<BTreeMap<u32, Option<Vec<u64>>>, String>;

/// Why `step` is not complete (None: every other node's part of it is verified). `others`:
/// each other node's listed steps as its newest record holds them (None: no record, or one
/// that lists no parts).
pub fn missing(step: Option<u64>, others: &BTreeMap<u32, Option<Vec<u64>>>) -> Option<String> {
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
