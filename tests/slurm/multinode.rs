//! Issue 38 on a real two-node SLURM (tests/slurm/setup2.sh: two slurmd on this one host, a
//! config of their own): examples/slurm/train-multinode.sbatch as written, submitted with
//! `--nodes=2 --gpus-per-node=0`, one `roger watch --node-local` per node through its `srun`,
//! `[cluster]` told nothing but the store (node index, node count and `{job}` from SLURM).
//! `torchrun` is a stand-in on PATH (one rank per node, stepping at a barrier with the other
//! node's, as a synchronous rank does); on the job's first run node 1's rank stops at step 15
//! and stays. Every node must record one job verdict and exit 76; the example's script must
//! requeue the job; the requeued run must finish (exit 0): one incident, one requeue.

use crate::util::{self, Env};
use roger::ledger::{Kind, Ledger, Record};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TORCHRUN: &str = r#"#!/bin/sh
# Stands in for torchrun: one rank per node, a step every 200 ms ended at a barrier with the
# other nodes' ranks. On the job's first run node 1's rank stops at step 15 (a hang: its
# process lives on). The job ends at step 40.
K=$SLURM_NODEID; N=$SLURM_NNODES; SYNC=$PWD/barrier; mkdir -p logs "$SYNC"
LOG=logs/rank$K.jsonl
i=$(cat "$LOG" 2>/dev/null | wc -l)
while [ "$i" -lt 40 ]; do
  i=$((i+1))
  if [ "${SLURM_RESTART_COUNT:-0}" = 0 ] && [ "$K" = 1 ] && [ "$i" = 15 ]; then
    echo "$i" > hang-started; while :; do sleep 1; done
  fi
  echo "{\"step\": $i, \"loss\": 1.0}" >> "$LOG"
  echo "$i" > "$SYNC/rank-$K.tmp"; mv "$SYNC/rank-$K.tmp" "$SYNC/rank-$K"
  while :; do
    ok=1
    for k in $(seq 0 $((N - 1))); do
      [ "$(cat "$SYNC/rank-$k" 2>/dev/null || echo 0)" -ge "$i" ] || ok=0
    done
    [ $ok = 1 ] && break
    sleep 0.05
  done
  sleep 0.2
done
"#;

fn scontrol_job(conf: &std::path::Path, id: &str) -> String {
    let out = Command::new("scontrol")
        .env("SLURM_CONF", conf)
        .args(["show", "job", id])
        .output()
        .expect("scontrol");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn field(text: &str, key: &str) -> Option<String> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_string))
}

#[test]
fn the_multinode_sbatch_example_on_two_slurm_nodes_requeues_the_job_once_on_one_verdict() {
    let test =
        "the_multinode_sbatch_example_on_two_slurm_nodes_requeues_the_job_once_on_one_verdict";
    let base = tempfile::tempdir().unwrap();
    let setup = util::repo_root().join("tests/slurm/setup2.sh");
    let up = Command::new("bash")
        .arg(&setup)
        .args(["start", &base.path().display().to_string()])
        .stdin(Stdio::null())
        .output()
        .expect("running tests/slurm/setup2.sh");
    let said = String::from_utf8_lossy(&up.stdout).to_string();
    let stop = || {
        let _ = Command::new("bash")
            .arg(&setup)
            .args(["stop", &base.path().display().to_string()])
            .output();
    };
    if up.status.code() == Some(3) {
        stop();
        util::missing(
            test,
            "a two-node SLURM that tests/slurm/setup2.sh can start",
            &format!(
                "apt-get install slurm-wlm munge, as root; .ci/run does; setup2.sh said: {}",
                said.trim()
            ),
        );
        return;
    }
    assert!(
        up.status.success(),
        "setup2.sh: {said}{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let conf = base.path().join("slurm.conf");
    let env = Env::new();
    let d = env.dir.path().to_path_buf();
    env.write(
        "roger.toml",
        format!(
            "[run]\nname = \"llm\"\nlog = \"logs/rank{{rank}}.jsonl\"\n[gpu]\nsource = \"none\"\n\
             [watch]\ninterval = \"200ms\"\nhysteresis = 2\ngrace = \"3s\"\nstale = \"4s\"\nallow_from_scratch = true\n\
             [cluster]\nstore = \"{}/cluster/{{job}}\"\non_fault = \"requeue\"\n",
            d.display()
        ),
    );
    env.write("bin/torchrun", TORCHRUN);
    let roger = util::roger_bin();
    std::os::unix::fs::symlink(&roger, env.path("bin/roger")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            env.path("bin/torchrun"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    std::fs::copy(
        util::repo_root().join("examples/slurm/train-multinode.sbatch"),
        env.path("train-multinode.sbatch"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        env.path("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sbatch")
        .env("SLURM_CONF", &conf)
        .env("PATH", &path)
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_NODEID")
        .args(["--parsable", "--nodes=2", "--gpus-per-node=0"])
        .arg(format!("--chdir={}", d.display()))
        .arg("train-multinode.sbatch")
        .current_dir(&d)
        .output()
        .expect("sbatch");
    assert!(
        out.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let t0 = Instant::now();
    let story = |why: &str| {
        format!(
            "{why}\n--- job:\n{}\n--- slurm-{id}.out:\n{}",
            scontrol_job(&conf, &id),
            env.read(&format!("slurm-{id}.out"))
        )
    };
    let mut hurried = false;
    let state = loop {
        let job = scontrol_job(&conf, &id);
        let st = field(&job, "JobState").unwrap_or_default();
        // SLURM holds a requeued job back for its begin time (about two minutes): started
        // now instead, as an admin would, so the test does not wait it out.
        if !hurried && st == "PENDING" && field(&job, "Restarts").as_deref() == Some("1") {
            hurried = Command::new("scontrol")
                .env("SLURM_CONF", &conf)
                .args(["update", &format!("JobId={id}"), "StartTime=now"])
                .status()
                .is_ok_and(|s| s.success());
        }
        if matches!(
            st.as_str(),
            "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL"
        ) {
            break job;
        }
        if t0.elapsed() > Duration::from_secs(240) {
            let _ = Command::new("scancel")
                .env("SLURM_CONF", &conf)
                .arg(&id)
                .status();
            stop();
            panic!("{}", story("the job did not end within 240 s"));
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!(
        "two-node SLURM job {id} ended after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let recs: Vec<Record> = Ledger::new(d.join("roger-ledger.jsonl")).records().unwrap();
    stop();
    assert_eq!(
        field(&state, "JobState").as_deref(),
        Some("COMPLETED"),
        "{}",
        story("not completed")
    );
    assert_eq!(
        field(&state, "Restarts").as_deref(),
        Some("1"),
        "{}",
        story("one requeue")
    );
    let ev = |name: &str| -> Vec<&Record> {
        recs.iter()
            .filter(|r| r.kind == Kind::Watch && r.str_field("event") == Some(name))
            .collect()
    };
    // Each node's watch learnt its place from SLURM, in both runs.
    let starts = ev("cluster");
    assert_eq!(starts.len(), 4, "{starts:?}");
    for s in &starts {
        assert_eq!(s.u64_field("nodes"), Some(2), "{s:?}");
        assert!(
            s.str_field("from")
                .unwrap_or_default()
                .contains("SLURM_NODEID"),
            "{s:?}"
        );
    }
    // One verdict, recorded by both nodes, both leaving with 76.
    let verdicts = ev("cluster_verdict");
    assert_eq!(verdicts.len(), 2, "{}", story("one record per node"));
    let ids: Vec<&str> = verdicts.iter().filter_map(|v| v.str_field("id")).collect();
    assert_eq!(ids, vec!["incident-0001"; 2]);
    assert!(verdicts.iter().all(|v| v.u64_field("code") == Some(76)));
    let by: std::collections::BTreeSet<u64> = verdicts
        .iter()
        .filter_map(|v| v.u64_field("by_node"))
        .collect();
    assert_eq!(by.len(), 2, "said by both nodes");
    let store = d.join("cluster").join(&id).join("verdicts");
    assert_eq!(
        std::fs::read_dir(&store).unwrap().count(),
        1,
        "one verdict file"
    );
    // The requeued run went to the end on both nodes.
    for k in 0..2 {
        let log = env.read(&format!("logs/rank{k}.jsonl"));
        assert_eq!(log.lines().count(), 40, "node {k}'s rank ran to step 40");
    }
}
