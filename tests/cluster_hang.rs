//! Issue 38: a hung rank on one node of a real multi-node torchrun job. Each "node" is its own
//! working directory with its own real `roger watch` over its own `torchrun --nnodes=N
//! --node_rank=K` (gloo on CPU, Debian's python3-torch; tests/ranks/train_ddp.py), all of
//! them rendezvousing on loopback and sharing one `[cluster] store` directory. One rank on
//! node 1 sleeps forever in its data loader; every other rank then waits in all_reduce.
//! Every node must name node 1 and the rank with its stack, in one job verdict with one id,
//! then stop its ranks and exit 76 (`on_fault = "requeue"`). And with one rank per node, a
//! rank at half speed is a straggler only among every node's ranks: every node names it.

use crate::ranks::job::{torch_ready, PY};
use crate::util::s3::free_port;
use crate::util::Env;
use crate::watch::{records, roger, wait_child};
use roger::ledger::{Kind, Record};
use std::path::Path;

use std::process::{Child, Stdio};
use std::time::Duration;

/// The stale limit; the sampling interval is 1 s.
const STALE: f64 = 10.0;

/// Node `k` of `n`, with `p` ranks, its store `root/job`.
fn node(root: &Path, k: u32, n: u32, p: u32, port: u16, knobs: &[(&str, &str)]) -> (Env, Child) {
    node_with(root, k, n, p, port, knobs, "")
}

/// [`node`] with more config after `[cluster]` (a section of its own).
fn node_with(
    root: &Path,
    k: u32,
    n: u32,
    p: u32,
    port: u16,
    knobs: &[(&str, &str)],
    extra: &str,
) -> (Env, Child) {
    let env = Env::new();
    let script = std::fs::read(crate::util::repo_root().join("tests/ranks/train_ddp.py")).unwrap();
    env.write("train_ddp.py", script);
    env.write(
        "roger.toml",
        format!(
            r#"[run]
name = "ddp"
log = "logs/rank{{rank}}.jsonl"

[gpu]
source = "none"

[watch]
command = ["{PY}", "-m", "torch.distributed.run", "--nnodes={n}", "--node_rank={k}", "--nproc_per_node={p}", "--redirects", "2", "--tee", "2", "--master_addr=127.0.0.1", "--master_port={port}", "train_ddp.py"]
interval = "1s"
grace = "5s"
stale = "{STALE}s"
grind_limit = "120s"
hysteresis = 1
evidence_hook = ["py-spy", "dump", "--pid", "{{pid}}"]
evidence_timeout = "15s"

[cluster]
store = "{}"
node = {k}
nodes = {n}
on_fault = "requeue"
{extra}
"#,
            root.join("job").display()
        ),
    );
    let mut c = roger(&env, &["watch".to_string()]);
    for (k, v) in knobs {
        c.env(k, v);
    }
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let child = c.spawn().expect("spawn roger watch");
    (env, child)
}

fn events<'a>(recs: &'a [Record], name: &str) -> Vec<&'a Record> {
    recs.iter()
        .filter(|r| r.kind == Kind::Watch && r.str_field("event") == Some(name))
        .collect()
}

fn unix(r: &Record) -> f64 {
    r.ts.timestamp_millis() as f64 / 1000.0
}

/// Processes whose working directory is `dir` (a node's ranks and launcher).
fn left_in(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cwd) = std::fs::read_link(e.path().join("cwd")) else {
            continue;
        };
        if cwd == dir {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            out.push(String::from_utf8_lossy(&cmd).replace('\0', " "));
        }
    }
    out
}

/// `n` nodes of `p` ranks; global rank `hang` (on node `culprit`) hangs at step 12.
fn hung_rank_is_one_verdict(n: u32, p: u32, hang: u32, culprit: u64) {
    let store = tempfile::tempdir().unwrap();
    let port = free_port();
    let hang_s = hang.to_string();
    let knobs = [
        ("HANG_RANK", hang_s.as_str()),
        ("HANG_AT", "12"),
        ("WORK_ITERS", "30"),
    ];
    let mut nodes: Vec<(Env, Child)> = (0..n)
        .map(|k| node(store.path(), k, n, p, port, &knobs))
        .collect();
    let mut ids = Vec::new();
    let mut won = 0;
    let mut stories = Vec::new();
    for (k, (env, child)) in nodes.iter_mut().enumerate() {
        let st = wait_child(child, Duration::from_secs(180));
        stories.push((k, st, env.read("watch.err")));
    }
    let story = stories
        .iter()
        .map(|(k, st, err)| format!("--- node {k} ({st}):\n{err}"))
        .collect::<Vec<_>>()
        .join("\n");
    let hung_dir = nodes[culprit as usize].0.dir.path().to_path_buf();
    let hang_at: f64 = std::fs::read_to_string(hung_dir.join("hang-started"))
        .unwrap_or_else(|e| panic!("no hang-started on node {culprit}: {e}\n{story}"))
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for (k, (env, _)) in nodes.iter().enumerate() {
        let recs = records(env);
        assert_eq!(stories[k].1.code(), Some(76), "node {k}\n{story}");
        // Its ranks' stacks, taken while the run stalled, before any verdict.
        let stacks = events(&recs, "node_stacks");
        assert!(!stacks.is_empty(), "node {k}: no node_stacks\n{story}");
        let v = events(&recs, "cluster_verdict");
        assert_eq!(v.len(), 1, "node {k}: one verdict\n{story}");
        let v = v[0];
        assert!(stacks[0].seq < v.seq, "node {k}\n{story}");
        assert_eq!(v.str_field("cause"), Some("hang"), "node {k}\n{story}");
        assert_eq!(v.u64_field("node"), Some(culprit), "node {k}\n{story}");
        assert_eq!(
            v.get("ranks"),
            Some(&serde_json::json!([hang])),
            "node {k}\n{story}"
        );
        let stack = v.str_field("stack").unwrap_or_default();
        assert!(
            stack.starts_with("`slow_loader` (train_ddp.py:"),
            "node {k}: {stack}\n{story}"
        );
        let reason = v.str_field("reason").unwrap();
        eprintln!("node {k}: {reason}");
        assert!(
            reason.contains(&format!(
                "node {culprit}'s rank {hang} in `slow_loader` (train_ddp.py:"
            )) && reason.contains("wait in `all_reduce`")
                && reason.contains(&format!("node {culprit} hangs, the others wait on it")),
            "node {k}: {reason}"
        );
        if k as u64 == culprit {
            assert!(reason.contains("; the cause is this node;"), "{reason}");
        } else {
            assert!(
                reason.contains(&format!("; this node's run waits on node {culprit};")),
                "{reason}"
            );
        }
        assert!(
            reason.ends_with(
                "requeue the job: incident 1 of at most 20 ([watch] max_relaunches, job-wide)"
            ),
            "{reason}"
        );
        ids.push(v.str_field("id").unwrap().to_string());
        won += usize::from(v.get("won") == Some(&serde_json::json!(true)));
        // Named with its stack within the stale limit and two samples of the hang (and the
        // hook's time on this node's ranks at half the limit).
        let named = unix(v) - hang_at;
        eprintln!("node {k}: hang → verdict recorded {named:.1}s (stale {STALE}s, interval 1s)");
        assert!(named <= STALE + 2.0 + 1.5, "node {k}: {named:.1}s\n{story}");
        // The kill record (its own ranks' stacks) before the stop, after the verdict.
        let kill = recs
            .iter()
            .find(|r| r.kind == Kind::Kill)
            .unwrap_or_else(|| panic!("node {k}: no kill record\n{story}"));
        assert_eq!(kill.str_field("reason"), Some("cluster"), "{story}");
        assert!(kill.seq > v.seq);
        assert!(kill.get("stacks").is_some(), "node {k}: {kill:?}");
        // No wedge of its own: the stall was the job's.
        assert!(
            !recs
                .iter()
                .any(|r| r.kind == Kind::Kill && r.str_field("reason") == Some("wedge")),
            "node {k}\n{story}"
        );
        let left = left_in(env.dir.path());
        assert!(left.is_empty(), "node {k}: left running {left:?}");
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one id: {ids:?}");
    assert_eq!(ids[0], "incident-0001");
    assert_eq!(won, 1, "exactly one node wrote it\n{story}");
}

#[test]
fn a_hung_rank_on_one_of_two_nodes_is_named_with_its_stack_by_both() {
    if !torch_ready("a_hung_rank_on_one_of_two_nodes_is_named_with_its_stack_by_both") {
        return;
    }
    // Two nodes of two ranks: rank 2 is node 1's first.
    hung_rank_is_one_verdict(2, 2, 2, 1);
}

#[test]
fn a_hung_rank_on_one_of_three_nodes_is_named_with_its_stack_by_all() {
    if !torch_ready("a_hung_rank_on_one_of_three_nodes_is_named_with_its_stack_by_all") {
        return;
    }
    // Three nodes of one rank: rank 1 is node 1.
    hung_rank_is_one_verdict(3, 1, 1, 1);
}

#[test]
fn a_slow_rank_among_one_rank_nodes_is_a_straggler_named_by_every_node() {
    if !torch_ready("a_slow_rank_among_one_rank_nodes_is_a_straggler_named_by_every_node") {
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let port = free_port();
    let knobs = [
        ("SLOW_RANK", "1"),
        ("SLOW_SHARE", "0.5"),
        ("RUN_S", "25"),
        ("WORK_ITERS", "30"),
    ];
    let rule = crate::ranks::job::STRAGGLER_RULE;
    let mut nodes: Vec<(Env, Child)> = (0..2)
        .map(|k| node_with(store.path(), k, 2, 1, port, &knobs, rule))
        .collect();
    for (k, (env, child)) in nodes.iter_mut().enumerate() {
        let st = wait_child(child, Duration::from_secs(120));
        let err = env.read("watch.err");
        assert_eq!(st.code(), Some(0), "node {k}:\n{err}");
        let recs = records(env);
        let verdicts: Vec<&Record> = recs
            .iter()
            .filter(|r| r.kind == Kind::Verdict && r.str_field("check") == Some("straggler"))
            .collect();
        // One rank per node: no node alone has a straggler; the job's ranks together do.
        assert!(
            verdicts.iter().all(|r| r.str_field("scope") == Some("job")),
            "node {k}: {verdicts:?}"
        );
        assert_eq!(verdicts.len(), 1, "node {k}, once:\n{err}");
        let v = verdicts[0];
        assert_eq!(
            (v.u64_field("node"), v.u64_field("rank")),
            (Some(1), Some(1))
        );
        let reason = v.get("checks").unwrap()[0]["reason"]
            .as_str()
            .unwrap()
            .to_string();
        eprintln!("node {k}: {reason}");
        assert!(
            reason.starts_with("node 1's rank 1 is a straggler: its speed was 0.")
                && reason.contains("(ranks of 2 nodes judged together; said by node"),
            "{reason}"
        );
    }
}

/// The coordinated relaunch (`on_fault = "relaunch"`): two nodes of two ranks sharing one
/// ledger and checkpoint directory (as an sbatch job's nodes do on a shared filesystem, one
/// `roger watch --node-local` each); rank 0 publishes every 5 steps; rank 2 (node 1) hangs at
/// step 13. One verdict, then every node relaunches its ranks from step 10, and the job runs
/// to its end.
#[test]
fn on_a_hang_every_node_relaunches_from_the_same_step() {
    if !torch_ready("on_a_hang_every_node_relaunches_from_the_same_step") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let port = free_port();
    let script = std::fs::read(crate::util::repo_root().join("tests/ranks/train_ddp.py")).unwrap();
    let mut nodes: Vec<(Env, Child)> = (0..2u32)
        .map(|k| {
            let env = Env::new();
            env.write("train_ddp.py", &script);
            env.write(
                "roger.toml",
                format!(
                    r#"[run]
name = "ddp"
log = "logs/rank{{rank}}.jsonl"
checkpoint_dir = "{shared}/published"
ledger = "{shared}/roger-ledger.jsonl"

[gpu]
source = "none"

[watch]
command = ["{PY}", "-m", "torch.distributed.run", "--nnodes=2", "--node_rank={k}", "--nproc_per_node=2", "--redirects", "2", "--tee", "2", "--master_addr=127.0.0.1", "--master_port={port}", "train_ddp.py"]
interval = "1s"
grace = "5s"
stale = "{STALE}s"
grind_limit = "120s"
hysteresis = 1
backoff_initial = "1s"
evidence_hook = ["py-spy", "dump", "--pid", "{{pid}}"]
evidence_timeout = "15s"

[cluster]
store = "{shared}/job"
node = {k}
nodes = 2
on_fault = "relaunch"
"#,
                    shared = shared.display()
                ),
            );
            let mut c = roger(&env, &["watch".to_string(), "--node-local".to_string()]);
            c.env("SLURM_NODEID", k.to_string())
                .env("STEPS", "24")
                .env("CKPT_EVERY", "5")
                .env("HANG_RANK", "2")
                .env("HANG_AT", "13")
                .env("WORK_ITERS", "30")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
            (env, c.spawn().expect("spawn roger watch"))
        })
        .collect();
    let mut story = String::new();
    let mut codes = Vec::new();
    for (k, (env, child)) in nodes.iter_mut().enumerate() {
        codes.push(wait_child(child, Duration::from_secs(240)).code());
        story.push_str(&format!("--- node {k}:\n{}\n", env.read("watch.err")));
    }
    assert_eq!(
        codes,
        vec![Some(0), Some(0)],
        "the job ran to its end\n{story}"
    );
    let recs = roger::ledger::Ledger::new(shared.join("roger-ledger.jsonl"))
        .records()
        .unwrap();
    let verdicts = events(&recs, "cluster_verdict");
    assert_eq!(verdicts.len(), 2, "one record per node\n{story}");
    let ids: Vec<&str> = verdicts
        .iter()
        .map(|v| v.str_field("id").unwrap())
        .collect();
    assert_eq!(ids, vec!["incident-0001"; 2], "one verdict");
    let by: Vec<u64> = verdicts
        .iter()
        .filter_map(|v| v.u64_field("by_node"))
        .collect();
    assert_eq!(
        by.iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        2
    );
    for v in &verdicts {
        assert_eq!(v.str_field("then"), Some("relaunch"), "{v:?}");
        assert_eq!(v.u64_field("node"), Some(1), "{v:?}");
    }
    // Every node relaunched from the same step: the newest checkpoint both can see.
    let relaunches: Vec<&Record> = recs.iter().filter(|r| r.kind == Kind::Relaunch).collect();
    assert_eq!(relaunches.len(), 2, "{relaunches:?}\n{story}");
    let steps: Vec<Option<u64>> = relaunches.iter().map(|r| r.step).collect();
    assert_eq!(steps, vec![Some(10), Some(10)], "{relaunches:?}");
    let kills = recs
        .iter()
        .filter(|r| r.kind == Kind::Kill && r.str_field("reason") == Some("cluster"))
        .count();
    assert_eq!(kills, 2, "{story}");
}
