//! Which node of the job this watch guards, and how many there are: `[cluster]` first, else
//! the environment the engine sets. Pure over an environment lookup, so every engine's
//! spelling is tested without touching the process's own environment.

use anyhow::{bail, Result};

/// This node's place in the job, and where it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub node: u32,
    pub nodes: u32,
    /// The words that say where both came from (`SLURM_NODEID=1, SLURM_NNODES=2`).
    pub source: String,
}

/// (index variable, count variables) per engine, in the order they are tried: SLURM, a
/// Kubernetes Indexed Job / JobSet (its count only from `[cluster] nodes`), torchrun's
/// launcher environment as users set it, and Kubeflow's PyTorchJob.
const ENGINES: [(&str, &[&str]); 4] = [
    ("SLURM_NODEID", &["SLURM_NNODES", "SLURM_JOB_NUM_NODES"]),
    ("JOB_COMPLETION_INDEX", &[]),
    ("NODE_RANK", &["NNODES"]),
    ("PET_NODE_RANK", &["PET_NNODES"]),
];

/// The variables that name the job, in the order tried, for `{job}` in `[cluster] store`:
/// SLURM's job id (kept across requeues), then `ROGER_JOB_ID` (a JobSet's name, set by the
/// pod spec).
const JOB_VARS: [&str; 2] = ["SLURM_JOB_ID", "ROGER_JOB_ID"];

/// `[cluster] store` with `{job}` filled: one directory per job, the same across its
/// requeues and restarts (so the job-wide budget counts them).
pub fn store_path(
    store: &std::path::Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<std::path::PathBuf> {
    let text = store.to_string_lossy();
    if !text.contains("{job}") {
        return Ok(store.to_path_buf());
    }
    let Some(job) = JOB_VARS
        .iter()
        .find_map(|k| env(k).filter(|v| !v.trim().is_empty()))
    else {
        bail!("[cluster] store {text:?} names {{job}}, but neither SLURM_JOB_ID nor ROGER_JOB_ID is set")
    };
    if job.contains('/') || job.contains("..") {
        bail!("[cluster] store: the job id {job:?} is not a directory name");
    }
    Ok(std::path::PathBuf::from(text.replace("{job}", job.trim())))
}

/// This node's identity from `[cluster] node`/`nodes` or the engine's variables (`env`
/// answers a variable's value). An error names what is missing and how to give it.
pub fn resolve(
    node: Option<u32>,
    nodes: Option<u32>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Identity> {
    let num = |k: &str| -> Result<Option<u32>> {
        match env(k) {
            None => Ok(None),
            Some(v) => match v.trim().parse::<u32>() {
                Ok(n) => Ok(Some(n)),
                Err(_) => bail!("[cluster]: {k}={v:?} is not a node number"),
            },
        }
    };
    let mut words = Vec::new();
    let mut found = node.inspect(|&n| words.push(format!("[cluster] node = {n}")));
    let mut count = nodes.inspect(|&n| words.push(format!("[cluster] nodes = {n}")));
    for (index_var, count_vars) in ENGINES {
        if found.is_some() && count.is_some() {
            break;
        }
        let Some(i) = num(index_var)? else { continue };
        if found.is_none() {
            found = Some(i);
            words.push(format!("{index_var}={i}"));
        }
        if count.is_none() {
            for c in count_vars {
                if let Some(n) = num(c)? {
                    count = Some(n);
                    words.push(format!("{c}={n}"));
                    break;
                }
            }
        }
    }
    let Some(node) = found else {
        bail!("[cluster] store is set but this node's index is unknown: set [cluster] node, or run under an engine that says it (SLURM_NODEID, JOB_COMPLETION_INDEX, NODE_RANK, PET_NODE_RANK)")
    };
    let Some(nodes) = count else {
        bail!("[cluster] store is set but the job's node count is unknown: set [cluster] nodes (a Kubernetes Indexed Job or JobSet does not say it), or run under an engine that does (SLURM_NNODES, NNODES, PET_NNODES)")
    };
    if nodes == 0 || node >= nodes {
        bail!(
            "[cluster]: node {node} is not one of {nodes} node(s) ({})",
            words.join(", ")
        );
    }
    Ok(Identity {
        node,
        nodes,
        source: words.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn every_engine_spelling_and_the_config_first() {
        let slurm = resolve(
            None,
            None,
            &env(&[("SLURM_NODEID", "1"), ("SLURM_NNODES", "3")]),
        );
        assert_eq!(
            slurm.unwrap(),
            Identity {
                node: 1,
                nodes: 3,
                source: "SLURM_NODEID=1, SLURM_NNODES=3".into()
            }
        );
        let old_slurm = resolve(
            None,
            None,
            &env(&[("SLURM_NODEID", "0"), ("SLURM_JOB_NUM_NODES", "2")]),
        )
        .unwrap();
        assert_eq!((old_slurm.node, old_slurm.nodes), (0, 2));
        let k8s = resolve(None, Some(4), &env(&[("JOB_COMPLETION_INDEX", "2")])).unwrap();
        assert_eq!((k8s.node, k8s.nodes), (2, 4));
        assert_eq!(k8s.source, "[cluster] nodes = 4, JOB_COMPLETION_INDEX=2");
        let pet = resolve(
            None,
            None,
            &env(&[("PET_NODE_RANK", "1"), ("PET_NNODES", "2")]),
        );
        assert_eq!(pet.unwrap().node, 1);
        let cfg = resolve(Some(0), Some(2), &env(&[("SLURM_NODEID", "1")])).unwrap();
        assert_eq!((cfg.node, cfg.nodes), (0, 2), "the config wins");
    }

    #[test]
    fn one_store_directory_per_job() {
        let p = std::path::Path::new("/shared/roger/{job}");
        let slurm = store_path(p, &env(&[("SLURM_JOB_ID", "4242"), ("ROGER_JOB_ID", "x")]));
        assert_eq!(slurm.unwrap(), std::path::Path::new("/shared/roger/4242"));
        let k8s = store_path(p, &env(&[("ROGER_JOB_ID", "llm-pretrain")])).unwrap();
        assert_eq!(k8s, std::path::Path::new("/shared/roger/llm-pretrain"));
        let none = store_path(p, &env(&[])).unwrap_err().to_string();
        assert!(
            none.contains("neither SLURM_JOB_ID nor ROGER_JOB_ID"),
            "{none}"
        );
        let bad = store_path(p, &env(&[("ROGER_JOB_ID", "../x")])).unwrap_err();
        assert!(bad.to_string().contains("not a directory name"), "{bad}");
        let plain = std::path::Path::new("/shared/job-7");
        assert_eq!(store_path(plain, &env(&[])).unwrap(), plain);
    }

    #[test]
    fn what_is_missing_or_wrong_is_named() {
        let none = resolve(None, None, &env(&[])).unwrap_err().to_string();
        assert!(none.contains("set [cluster] node"), "{none}");
        let k8s = resolve(None, None, &env(&[("JOB_COMPLETION_INDEX", "0")]))
            .unwrap_err()
            .to_string();
        assert!(k8s.contains("set [cluster] nodes"), "{k8s}");
        let bad = resolve(None, None, &env(&[("SLURM_NODEID", "x")]))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("SLURM_NODEID=\"x\""), "{bad}");
        let past = resolve(Some(2), Some(2), &env(&[]))
            .unwrap_err()
            .to_string();
        assert!(past.contains("node 2 is not one of 2"), "{past}");
    }
}
