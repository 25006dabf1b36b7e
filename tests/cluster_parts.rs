//! Issue 38, point 4: a checkpoint written by every node counts only when every node's part
//! is verified. Two "nodes" (their own directories, real `roger watch`, one `[cluster]
//! store`) each publish their part of steps 5, 10 and 15 with the real `roger publish`; node
//! 1's part of step 15 never lands. The job is then started again (as after a requeue): both
//! nodes must resume from step 10, the newest complete step, and node 0 must say why it
//! passed over its own step 15. Retention keeps one checkpoint (`keep_last = 1`): node 0's
//! part of step 10 must survive its publish of 15, being the job's resume point. The job's
//! latest.json in the store names step 10, then 20 once both nodes publish it, each commit
//! won by one node and recorded by both; step 15 is never committed.

use crate::util::Env;
use crate::watch::{records, roger, wait_child};
use roger::ledger::Kind;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

/// Steps 1..16; at every 5th, this node's part of a sharded checkpoint (its shard) written and
/// published; node 1 skips step 15.
const TRAIN: &str = r#"mkdir -p ckpt; i=0; while [ $i -lt 16 ]; do i=$((i+1)); echo "{\"step\": $i, \"loss\": 1.0}" >> train.jsonl; if [ $((i % 5)) = 0 ] && ! { [ "$K" = 1 ] && [ $i = 15 ]; }; then d=ckpt/node-$K-step-$i; mkdir -p $d; echo "shard of node $K at step $i" > $d/rank-$K.shard; "$ROGER_BIN" publish $d --step $i >> publish.log 2>&1 || exit 9; fi; sleep 0.3; done"#;

/// The relaunched job's command: what it was told to resume from; then both nodes' parts of
/// step 20, and time for the watches to see them complete.
const RESUME: &str = r#"echo "{step} {ckpt}" > resumed.txt; d=ckpt/node-$K-step-20; mkdir -p $d; echo "shard of node $K at step 20" > $d/rank-$K.shard; "$ROGER_BIN" publish $d --step 20 >> publish.log 2>&1 || exit 9; sleep 3"#;

fn env_for(root: &Path, k: u32) -> Env {
    env_keeping(root, k, 1)
}

fn env_keeping(root: &Path, k: u32, keep_last: u32) -> Env {
    env_with(root, k, keep_last, "")
}

/// `more` goes after `[publish] keep_last` (more `[publish]` keys, then other tables).
fn env_with(root: &Path, k: u32, keep_last: u32, more: &str) -> Env {
    let env = Env::new();
    env.write(
        "roger.toml",
        format!(
            r#"[run]
name = "job"
log = "train.jsonl"
checkpoint_dir = "published"

[gpu]
source = "none"

[publish]
keep_last = {keep_last}
{more}

[watch]
interval = "100ms"
grace = "5s"
stale = "120s"
allow_from_scratch = true

[cluster]
store = "{}"
node = {k}
nodes = 2
lost_after = "10s"
parts = "every-node"
"#,
            root.join("job").display()
        ),
    );
    env
}

fn start(env: &Env, k: u32, script: &str) -> Child {
    let args: Vec<String> = ["watch", "--", "sh", "-c", script]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut c = roger(env, &args);
    crate::util::s3::apply_env(&mut c);
    c.env("K", k.to_string())
        .env(
            "DCP_META",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dcp/protocol4.metadata"),
        )
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(env.path("watch.err"))
                .unwrap(),
        );
    c.spawn().expect("spawn roger watch")
}

/// Every node's watch.err and publish.log, for a failure's message.
fn story(envs: &[Env]) -> String {
    envs.iter()
        .enumerate()
        .map(|(k, e)| {
            format!(
                "--- node {k}:\n{}\n{}",
                e.read("watch.err"),
                e.read("publish.log")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every node runs `script` under its watch at once; each must end with 0.
fn run_job(envs: &[Env], script: &str) {
    let mut watches: Vec<Child> = (0..envs.len())
        .map(|k| start(&envs[k], k as u32, script))
        .collect();
    for (k, c) in watches.iter_mut().enumerate() {
        let st = wait_child(c, Duration::from_secs(60));
        assert_eq!(st.code(), Some(0), "node {k}\n{}", story(envs));
    }
}

/// Every node's relaunched command was told to resume from its own part of `step`.
fn assert_resumed_from(envs: &[Env], step: u64) {
    for (k, e) in envs.iter().enumerate() {
        let told = e.read("resumed.txt");
        assert!(
            told.starts_with(&format!("{step} "))
                && told.trim_end().ends_with(&format!("node-{k}-step-{step}")),
            "node {k} resumed from: {told}\n{}",
            story(envs)
        );
    }
}

/// The reasons node `k`'s newest start passed checkpoints over for.
fn skipped(e: &Env) -> Vec<String> {
    records(e)
        .into_iter()
        .rfind(|r| r.kind == Kind::Watch && r.str_field("event") == Some("start"))
        .unwrap()
        .get("resume_skipped")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["why"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_node_resumes_from_the_newest_step_whose_every_part_is_verified() {
    let store = tempfile::tempdir().unwrap();
    let envs: Vec<Env> = (0..2).map(|k| env_for(store.path(), k)).collect();
    run_job(&envs, TRAIN);
    for (k, e) in envs.iter().enumerate() {
        let published: Vec<u64> = records(e)
            .iter()
            .filter(|r| r.kind == Kind::Publish)
            .filter_map(|r| r.step)
            .collect();
        let want: &[u64] = if k == 0 { &[5, 10, 15] } else { &[5, 10] };
        assert_eq!(published, want, "node {k}: {}", e.read("publish.log"));
        let pruned: Vec<u64> = records(e)
            .iter()
            .filter(|r| r.kind == Kind::Prune)
            .filter_map(|r| r.step)
            .collect();
        // Node 0's publish of 15 keeps 10 (its latest is 15, but 10 is the newest step both
        // nodes have) and prunes 5. Node 1's last publish (10) prunes 5 only if node 0's part
        // of 10 was listed by then (else 5 was still the newest complete step).
        if k == 0 {
            assert_eq!(pruned, vec![5], "node 0");
        } else {
            assert!(pruned.is_empty() || pruned == vec![5], "node 1: {pruned:?}");
        }
    }
    // The job starts again (a requeue): both nodes at once.
    run_job(&envs, RESUME);
    assert_resumed_from(&envs, 10);
    for (k, e) in envs.iter().enumerate() {
        let skipped = skipped(e);
        if k == 0 {
            // Its own step 15 passed over, naming the node whose part is missing. Node 1's 5
            // is pruned by its publish of 10 if node 0's 10 was listed by then.
            assert_eq!(skipped.len(), 1, "{skipped:?}");
            assert!(
                [", 5)", ")"].iter().any(|end| skipped[0]
                    == format!("step 15 is not complete: node 1's part is not verified (its newest parts: steps 10{end}")),
                "{skipped:?}"
            );
            assert!(
                e.read("watch.err").contains("not resumed from "),
                "said on stderr too"
            );
        } else {
            assert!(skipped.is_empty(), "{skipped:?}");
        }
    }
    // The job's latest.json: step 20, each node's part of it as its publish record says.
    let latest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(store.path().join("job/latest.json")).unwrap())
            .unwrap();
    assert_eq!(latest["step"], 20, "{latest}\n{}", story(&envs));
    for (k, e) in envs.iter().enumerate() {
        let publish = records(e)
            .into_iter()
            .rfind(|r| r.kind == Kind::Publish && r.step == Some(20))
            .unwrap();
        let part = &latest["parts"][k.to_string()];
        assert_eq!(part["name"], format!("node-{k}-step-20"), "{latest}");
        assert_eq!(
            part["sha256"].as_str(),
            publish.str_field("sha256"),
            "{latest}"
        );
    }
    let commits: Vec<String> = std::fs::read_dir(store.path().join("job/commits"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(
        !commits.iter().any(|c| c.contains("15")),
        "step 15 is never complete: {commits:?}"
    );
    // Each commit recorded by both nodes, won by exactly one.
    for step in [10u64, 20] {
        let seen: Vec<bool> = envs
            .iter()
            .map(|e| {
                let r: Vec<_> = records(e)
                    .into_iter()
                    .filter(|r| {
                        r.str_field("event") == Some("checkpoint_complete")
                            && r.u64_field("complete_step") == Some(step)
                    })
                    .collect();
                assert_eq!(r.len(), 1, "step {step}\n{}", story(&envs));
                r[0].get("won").and_then(|w| w.as_bool()).unwrap()
            })
            .collect();
        assert_eq!(
            seen.iter().filter(|w| **w).count(),
            1,
            "step {step}: {seen:?}"
        );
    }
    // `roger status`: each node's part of the complete step, and the step itself.
    let st = envs[0].run(&["status"]);
    let screen = String::from_utf8_lossy(&st.out.stdout).into_owned();
    for k in 0..2 {
        assert!(
            screen.lines().any(|l| l.starts_with(&format!("node {k} "))
                && l.contains(&format!("part step 20: node-{k}-step-20"))),
            "{screen}"
        );
    }
    assert!(
        screen.contains("complete    step 20: every node's part verified"),
        "{screen}"
    );
    assert!(
        envs[1]
            .read("watch.err")
            .contains("step 20 is complete: every node's part is verified (node 0: node-0-step-20"),
        "{}",
        story(&envs)
    );
}

/// Steps 1..11; at 5 and 10 this node's part of a torch DCP checkpoint (one rank per node:
/// node 0 writes `__0_0.distcp` and the coordinator's `.metadata`, node 1 `__1_0.distcp`),
/// published. At step 10 node 1's shard never lands (only its temporary is there): node 1's
/// part holds no shard, which node 1 alone cannot tell, having no `.metadata`.
const TRAIN_DCP: &str = r#"mkdir -p ckpt; i=0; while [ $i -lt 11 ]; do i=$((i+1)); echo "{\"step\": $i, \"loss\": 1.0}" >> train.jsonl; if [ $((i % 5)) = 0 ]; then d=ckpt/node-$K-step-$i; mkdir -p $d; f=__${K}_0.distcp; if [ "$K" = 1 ] && [ $i = 10 ]; then f=$f.tmp; fi; head -c 16384 /dev/zero > $d/$f; if [ "$K" = 0 ]; then cp "$DCP_META" $d/.metadata; fi; "$ROGER_BIN" publish $d --step $i >> publish.log 2>&1 || exit 9; fi; sleep 0.3; done"#;

/// Issue 38, point 4 with torch DCP: each node's part verifies on its own, but the step is
/// complete only when the coordinator's `.metadata` finds every file it names in some node's
/// part. Step 10's shard from node 1 never landed: no node commits it, and the requeued job
/// resumes from step 5 on both nodes, naming the file.
#[test]
fn a_dcp_step_whose_shard_on_one_node_never_landed_is_never_resumed_from() {
    let store = tempfile::tempdir().unwrap();
    // A prune goal no removal can reach: `hygiene disk --prune` takes all the policy allows.
    let envs: Vec<Env> = (0..2)
        .map(|k| env_with(store.path(), k, 1, "\n[disk]\nprune_goal_free = \"1000TB\""))
        .collect();
    run_job(&envs, TRAIN_DCP);
    for e in &envs {
        let published: Vec<u64> = records(e)
            .iter()
            .filter(|r| r.kind == Kind::Publish)
            .filter_map(|r| r.step)
            .collect();
        assert_eq!(published, vec![5, 10], "each part verifies on its own");
        let complete: Vec<u64> = records(e)
            .iter()
            .filter(|r| r.str_field("event") == Some("checkpoint_complete"))
            .filter_map(|r| r.u64_field("complete_step"))
            .collect();
        assert_eq!(complete, vec![5], "{}", story(&envs));
    }
    let latest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(store.path().join("job/latest.json")).unwrap())
            .unwrap();
    assert_eq!(latest["step"], 5, "{latest}");
    // `hygiene disk --prune` keeps node 0's part of step 5 as publish's retention did: with
    // keep_last = 1 it would go, but it is the job's newest complete step.
    let out = envs[0].run(&["hygiene", "disk", "--prune"]);
    assert!(
        envs[0].path("published/node-0-step-5").exists(),
        "{}",
        String::from_utf8_lossy(&out.out.stderr)
    );
    let kept: Vec<String> = records(&envs[0])
        .into_iter()
        .filter(|r| r.str_field("event") == Some("prune-kept"))
        .map(|r| serde_json::to_string(&r.fields).unwrap())
        .collect();
    assert!(
        kept.iter()
            .any(|k| k.contains("the newest step every node's part of is verified (step 5")),
        "{kept:?}"
    );
    run_job(&envs, RESUME_ONLY);
    assert_resumed_from(&envs, 5);
    for (k, e) in envs.iter().enumerate() {
        assert_eq!(
            skipped(e),
            vec!["step 10 is not complete: its .metadata (in node 0's part) names __1_0.distcp, which no node's part holds"],
            "node {k}"
        );
    }
}

const RESUME_ONLY: &str = r#"echo "{step} {ckpt}" > resumed.txt"#;

/// A part whose bytes changed on its node after it was published (a bad disk, a truncated
/// copy): at the requeue that node re-hashes its part of the newest complete step before it
/// writes its record, finds it changed, and no longer lists it, so every node passes the step
/// over (not only the node that holds the bad copy) and both resume from step 5.
#[test]
fn a_part_that_no_longer_verifies_on_its_node_is_passed_over_by_every_node() {
    let store = tempfile::tempdir().unwrap();
    let envs: Vec<Env> = (0..2).map(|k| env_keeping(store.path(), k, 5)).collect();
    run_job(&envs, TRAIN);
    // Node 1's part of step 10 changes on its disk.
    std::fs::write(
        envs[1].path("published/node-1-step-10/rank-1.shard"),
        "flipped bits",
    )
    .unwrap();
    run_job(&envs, RESUME_ONLY);
    assert_resumed_from(&envs, 5);
    let corrupt: Vec<_> = records(&envs[1])
        .into_iter()
        .filter(|r| r.str_field("event") == Some("part_corrupt"))
        .collect();
    assert_eq!(corrupt.len(), 1, "{}", story(&envs));
    let why = corrupt[0].str_field("reason").unwrap();
    assert!(
        why.starts_with("node 1's part of step 10 (")
            && why.contains("does not verify: bytes changed since publish")
            && why.ends_with("no longer listed, so no node resumes from step 10"),
        "{why}"
    );
    let skipped = skipped(&envs[0]);
    assert!(
        skipped.contains(
            &"step 10 is not complete: node 1's part is not verified (its newest parts: steps 5)"
                .to_string()
        ),
        "{skipped:?}\n{}",
        story(&envs)
    );
}

/// A node's machine is replaced (a spot VM reclaimed): its disk is gone, its parts are in the
/// bucket. Node 0 published steps 5, 10 and 15 (each uploaded and verified), node 1 only 5 and
/// 10. The new node 0 rebuilds its ledger from the bucket and, with nothing on its disk,
/// fetches a part from the bucket: the part of step 10, the newest step every node has, not
/// its own newest (15), so both nodes resume from the same step.
#[test]
fn a_replaced_machine_fetches_its_part_of_the_newest_complete_step_from_the_bucket() {
    let Some(s3) = crate::util::s3::S3Server::start(
        "a_replaced_machine_fetches_its_part_of_the_newest_complete_step_from_the_bucket",
    ) else {
        return;
    };
    s3.create_bucket("ckpts");
    let store = tempfile::tempdir().unwrap();
    let envs: Vec<Env> = (0..2)
        .map(|k| {
            env_with(
                store.path(),
                k,
                5,
                &format!(
                    "remote = \"s3://ckpts/job/node-{k}/\"\n\n[remote]\nendpoint = \"{}\"",
                    s3.endpoint()
                ),
            )
        })
        .collect();
    // Node 0 publishes 5, 10 and 15; node 1's 15 never lands.
    run_job(&envs, TRAIN);
    for e in &envs {
        let mut c = roger(
            e,
            &[
                "publish".into(),
                "--wait".into(),
                "--timeout".into(),
                "120s".into(),
            ],
        );
        crate::util::s3::apply_env(&mut c);
        let out = c.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Node 0's machine is lost: everything but its config goes.
    for entry in std::fs::read_dir(envs[0].path(".")).unwrap() {
        let p = entry.unwrap().path();
        if p.file_name().is_some_and(|n| n != "roger.toml") {
            let _ = std::fs::remove_dir_all(&p);
            let _ = std::fs::remove_file(&p);
        }
    }
    run_job(&envs, RESUME_ONLY);
    assert_resumed_from(&envs, 10);
    assert!(
        envs[0]
            .read("watch.err")
            .contains("fetched step 10 from s3://ckpts/job/node-0/"),
        "{}",
        story(&envs)
    );
}
