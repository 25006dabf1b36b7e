//! `[preempt]` end to end: the real `roger watch` supervising `examples/fake_train` under a
//! notice — a loopback fake cloud metadata service that switches to "instance-action in 20 s",
//! SIGTERM, and a real single-node SLURM (slurm-wlm + munge, started by `setup.sh`) that sends
//! `--signal=B:USR1@60` and requeues the job. Assertions are on ledger records, the checkpoint
//! manifest and the processes, never on timings; the times measured are printed.

mod metadata;
mod multinode;

use crate::util::{self, Env};
use crate::watch::{alive, event, fake_train, pids, poll_until, records, roger, wait_child};
use roger::ledger::Kind;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BASE: &str = r#"
[run]
name = "pre"
log = "train.jsonl"
checkpoint_dir = "ckpt"
[gpu]
source = "none"
[watch]
interval = "100ms"
hysteresis = 2
grace = "2s"
stale = "60s"
"#;

fn setup(env: &Env, preempt: &str) {
    env.write("roger.toml", format!("{BASE}[preempt]\n{preempt}\n"));
}

/// `roger watch -- fake_train ...` with `cues`.
fn watch_cmd(env: &Env, cues: &[&str]) -> (Command, Vec<String>) {
    watch_cmd_as(env, cues, &[], "watch")
}

/// The same with `flags` before `--`, its output in `<tag>.out` / `<tag>.err`.
fn watch_cmd_as(env: &Env, cues: &[&str], flags: &[&str], tag: &str) -> (Command, Vec<String>) {
    let mut args: Vec<String> = vec![
        "--config".into(),
        env.path("roger.toml").display().to_string(),
        "watch".into(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    args.extend([
        "--".into(),
        fake_train().display().to_string(),
        "--log".into(),
        env.path("train.jsonl").display().to_string(),
        "--ckpt-dir".into(),
        env.path("ckpt").display().to_string(),
        "--config".into(),
        env.path("roger.toml").display().to_string(),
        "--pid-file".into(),
        env.path("pids.txt").display().to_string(),
        "--steps".into(),
        "100000".into(),
        "--step-ms".into(),
        "30".into(),
    ]);
    args.extend(cues.iter().map(|s| s.to_string()));
    let mut c = roger(env, &args);
    c.env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_NODEID")
        .stdout(std::fs::File::create(env.path(&format!("{tag}.out"))).unwrap())
        .stderr(std::fs::File::create(env.path(&format!("{tag}.err"))).unwrap());
    (c, args)
}

fn latest_step(env: &Env) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(&env.read("ckpt/latest.json")).ok()?;
    v["step"].as_u64()
}

fn one<'a>(recs: &'a [roger::ledger::Record], name: &str) -> &'a roger::ledger::Record {
    let found = event(recs, name);
    assert_eq!(found.len(), 1, "expected one {name} record, got {found:?}");
    found[0]
}

fn assert_verified(env: &Env) {
    env.run(&["--config", "roger.toml", "ledger", "verify"])
        .expect(0);
}

fn assert_no_process_left(env: &Env) {
    let p = pids(env);
    assert!(!p.is_empty(), "fake_train never wrote its pid");
    for pid in p {
        assert!(!alive(pid), "pid {pid} of the run is still alive");
    }
}

#[test]
fn aws_instance_action_in_20s_hand_off_completes_inside_the_window() {
    let env = Env::new();
    let md = metadata::Metadata::start(Duration::from_secs(2), Duration::from_secs(20));
    setup(
        &env,
        &format!(
            "slurm_signal = \"\"\nsigterm = false\ncloud = [\"aws\"]\naws_url = \"{}\"\ncloud_poll = \"200ms\"\nmargin = \"5s\"\nrequeue = \"auto\"",
            md.url()
        ),
    );
    let (mut c, args) = watch_cmd(&env, &["--save-every", "10"]);
    let mut child = c.spawn().unwrap();
    let st = wait_child(&mut child, Duration::from_secs(60));
    let err = env.read("watch.err");
    assert_eq!(st.code(), Some(76), "{args:?}\n{err}");
    let recs = records(&env);
    let notice = one(&recs, "preempt_notice");
    assert_eq!(notice.str_field("notice_source"), Some("aws"));
    let window = notice.get("window_s").unwrap().as_f64().unwrap();
    assert!(window > 10.0 && window <= 20.0, "window {window}");
    let asked = one(&recs, "preempt_save_asked");
    assert!(asked
        .get("asked")
        .unwrap()
        .to_string()
        .contains("roger-save-now"));
    let saved = one(&recs, "preempt_saved");
    assert!(saved.seq > notice.seq);
    assert!(saved.get("before_deadline_s").unwrap().as_f64().unwrap() > 0.0);
    assert_eq!(
        saved.get("manifest_updated"),
        Some(&serde_json::json!(true))
    );
    // The save is this notice's: published after it, and it is what latest.json names.
    let ckpt_seq = saved.u64_field("ckpt_seq").unwrap();
    assert!(ckpt_seq > notice.seq);
    assert_eq!(latest_step(&env), saved.u64_field("ckpt_step"));
    let kill = recs
        .iter()
        .find(|r| r.kind == Kind::Kill && r.str_field("reason") == Some("preempt"))
        .expect("a kill record before the stop");
    assert!(kill.seq > saved.seq, "stopped only after the verified save");
    let rq = one(&recs, "preempt_requeue");
    // Not inside a SLURM job: the exit code asks the wrapper.
    assert_eq!(rq.str_field("how"), Some("exit"));
    assert!(rq.str_field("text").unwrap().contains("SLURM_JOB_ID"));
    assert!(err.contains("roger: preempt: notice from aws"), "{err}");
    let reqs = md.requests();
    assert!(reqs
        .iter()
        .any(|r| r.starts_with("PUT /latest/api/token -> 200")));
    assert!(
        reqs.iter()
            .any(|r| r == "GET /latest/meta-data/spot/instance-action -> 404"),
        "polled before the notice too: {reqs:?}"
    );
    assert!(!reqs.iter().any(|r| r.ends_with("-> 401")), "{reqs:?}");
    assert_no_process_left(&env);
    assert_verified(&env);
}

#[test]
fn a_save_slower_than_the_window_is_warned_at_launch_and_misses_the_deadline() {
    let env = Env::new();
    let md = metadata::Metadata::start(Duration::from_secs(2), Duration::from_secs(20));
    setup(
        &env,
        &format!(
            "slurm_signal = \"\"\nsigterm = false\ncloud = [\"aws\"]\naws_url = \"{}\"\ncloud_poll = \"200ms\"\nmargin = \"2s\"\nrequeue = \"exit\"",
            md.url()
        ),
    );
    // An earlier launch's checkpoint whose save took 150 s (as the training told publish).
    env.write("seed/ckpt-5.json", "{\"step\": 5}\n");
    let mut p = env.cmd(&[
        "--config",
        "roger.toml",
        "publish",
        "seed/ckpt-5.json",
        "--to",
        "ckpt",
        "--step",
        "5",
    ]);
    p.env("ROGER_SAVE_S", "150");
    env.run_cmd(p, &["publish"]).expect(0);
    // This launch saves only when asked, and its save takes 30 s: more than the window.
    let (mut c, args) = watch_cmd(&env, &["--save-every", "0", "--save-ms", "30000"]);
    let mut child = c.spawn().unwrap();
    let st = wait_child(&mut child, Duration::from_secs(60));
    let err = env.read("watch.err");
    assert_eq!(st.code(), Some(76), "{args:?}\n{err}");
    let recs = records(&env);
    let fit = one(&recs, "preempt_fit");
    assert_eq!(fit.str_field("at"), Some("launch"));
    assert_eq!(fit.get("fits"), Some(&serde_json::json!(false)));
    let text = fit.str_field("text").unwrap();
    // 150 s of save (as told) plus however long the publish itself took.
    let p95 = fit.get("p95_s").unwrap().as_f64().unwrap();
    assert!((150.0..160.0).contains(&p95), "{p95}");
    assert!(
        text.starts_with(&format!("checkpoint takes {p95:.1} s"))
            && text.contains("the notice is 120 s"),
        "{text}"
    );
    assert!(
        err.contains(&format!(
            "roger: warning: preempt: checkpoint takes {p95:.1} s"
        )),
        "{err}"
    );
    let notice = one(&recs, "preempt_notice");
    assert!(
        fit.seq < notice.seq,
        "the warning came at launch, before any notice"
    );
    let missed = one(&recs, "preempt_save_missed");
    assert!(missed.str_field("why").unwrap().contains("deadline"));
    assert_eq!(missed.u64_field("last_good_step"), Some(5));
    assert!(event(&recs, "preempt_saved").is_empty());
    // The last good checkpoint stays the one from before the notice.
    assert_eq!(latest_step(&env), Some(5));
    let done = one(&recs, "done");
    assert!(done
        .str_field("reason")
        .unwrap()
        .contains("missed the deadline"));
    assert_no_process_left(&env);
    assert_verified(&env);
}

#[test]
fn a_hung_save_stops_at_the_deadline_and_keeps_the_previous_checkpoint() {
    let env = Env::new();
    setup(
        &env,
        "slurm_signal = \"\"\nsigterm = true\nsigterm_window = \"5s\"\nmargin = \"1s\"\nrequeue = \"exit\"\nrequeue_exit_code = 77",
    );
    // Saves every 5 steps fine; asked to save now, it hangs (and ignores SIGTERM).
    let (mut c, args) = watch_cmd(
        &env,
        &["--save-every", "5", "--hang-on-save-now", "--ignore-term"],
    );
    let mut child = c.spawn().unwrap();
    poll_until("a first publish", Duration::from_secs(30), || {
        latest_step(&env).is_some()
    });
    let t0 = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = wait_child(&mut child, Duration::from_secs(60));
    let took = t0.elapsed();
    let err = env.read("watch.err");
    assert_eq!(st.code(), Some(77), "{args:?}\n{err}");
    let recs = records(&env);
    let notice = one(&recs, "preempt_notice");
    assert_eq!(notice.str_field("notice_source"), Some("sigterm"));
    let missed = one(&recs, "preempt_save_missed");
    let waited = missed.get("waited_s").unwrap().as_f64().unwrap();
    assert!(
        waited >= 4.0,
        "stopped waiting at deadline minus margin, not before: {waited}"
    );
    let before = missed
        .u64_field("last_good_step")
        .expect("a previous checkpoint");
    assert_eq!(latest_step(&env), Some(before));
    let publishes_after: Vec<_> = recs
        .iter()
        .filter(|r| r.kind == Kind::Publish && r.seq > notice.seq)
        .collect();
    assert!(publishes_after.is_empty(), "{publishes_after:?}");
    let stopped = one(&recs, "stopped");
    assert!(
        !stopped
            .get("sigkill")
            .unwrap()
            .as_array()
            .unwrap()
            .is_empty(),
        "the hung trainer ignores SIGTERM: killed"
    );
    assert!(
        took < Duration::from_secs(30),
        "the watch ended at the deadline: {took:?}"
    );
    assert_no_process_left(&env);
    assert_verified(&env);
}

#[test]
fn ctrl_c_during_the_wait_stops_everything_without_a_requeue() {
    let env = Env::new();
    setup(
        &env,
        "slurm_signal = \"\"\nsigterm_window = \"60s\"\nrequeue = \"exit\"",
    );
    let (mut c, args) = watch_cmd(
        &env,
        &["--save-every", "5", "--hang-on-save-now", "--ignore-term"],
    );
    let mut child = c.spawn().unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    poll_until("a first publish", Duration::from_secs(30), || {
        latest_step(&env).is_some()
    });
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    poll_until("the save request", Duration::from_secs(30), || {
        !event(&records(&env), "preempt_save_asked").is_empty()
    });
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let st = wait_child(&mut child, Duration::from_secs(30));
    assert_eq!(st.code(), Some(1), "{args:?}\n{}", env.read("watch.err"));
    let recs = records(&env);
    assert_eq!(one(&recs, "done").u64_field("code"), Some(1));
    assert!(event(&recs, "preempt_requeue").is_empty());
    assert_no_process_left(&env);
    assert_verified(&env);
}

#[test]
fn gce_and_azure_notices_start_the_same_hand_off() {
    let run = |cloud: &'static str| {
        std::thread::spawn(move || {
            let env = Env::new();
            let md = metadata::Metadata::start(Duration::from_secs(1), Duration::from_secs(20));
            setup(
                &env,
                &format!(
                    "slurm_signal = \"\"\nsigterm = false\ncloud = [\"{cloud}\"]\n{cloud}_url = \"{}\"\ncloud_poll = \"200ms\"\nmargin = \"3s\"\nsave_now = \"both\"",
                    md.url()
                ),
            );
            let (mut c, args) = watch_cmd(&env, &["--save-every", "10", "--save-on-usr1"]);
            let mut child = c.spawn().unwrap();
            let st = wait_child(&mut child, Duration::from_secs(60));
            assert_eq!(st.code(), Some(76), "{args:?}\n{}", env.read("watch.err"));
            let recs = records(&env);
            assert_eq!(
                one(&recs, "preempt_notice").str_field("notice_source"),
                Some(cloud)
            );
            let asked = one(&recs, "preempt_save_asked")
                .get("asked")
                .unwrap()
                .to_string();
            assert!(
                asked.contains("sent SIGUSR1") && asked.contains("touched"),
                "{asked}"
            );
            one(&recs, "preempt_saved");
            assert_no_process_left(&env);
        })
    };
    for t in [run("gce"), run("azure")] {
        t.join().unwrap();
    }
}

#[test]
fn preempt_config_errors_name_the_key_and_node_local_needs_slurm() {
    let env = Env::new();
    env.write(
        "a.toml",
        format!("{BASE}[preempt]\nsave_now = \"file\"\nmargn = \"5s\"\n"),
    );
    env.run(&["--config", "a.toml", "watch", "--", "true"])
        .expect(1)
        .stderr_has("a.toml:")
        .stderr_has("margn");
    env.write(
        "b.toml",
        format!("{BASE}[preempt]\nrequeue_exit_code = 75\n"),
    );
    env.run(&["--config", "b.toml", "watch", "--", "true"])
        .expect(1)
        .stderr_has("b.toml:")
        .stderr_has("requeue_exit_code must differ");
    env.write("c.toml", format!("{BASE}[preempt]\n"));
    let mut c = env.cmd(&["--config", "c.toml", "watch", "--node-local", "--", "true"]);
    c.env_remove("SLURM_NODEID");
    env.run_cmd(c, &["watch", "--node-local"])
        .expect(1)
        .stderr_has("--node-local needs SLURM_NODEID");
}

#[test]
fn node_local_watches_share_rank_0s_publish_and_only_node_0_requeues() {
    let env = Env::new();
    setup(
        &env,
        "slurm_signal = \"USR1\"\nslurm_window = \"20s\"\nslurm_end_time = false\nmargin = \"3s\"",
    );
    // Two nodes of one job on this machine: one watch per node, same config and ledger.
    let mut kids = StopOnDrop(Vec::new());
    for node in ["0", "1"] {
        let mut cues = vec!["--save-every", "10"];
        if node == "1" {
            cues.push("--no-publish");
        }
        let (mut c, _) = watch_cmd_as(&env, &cues, &["--node-local"], &format!("node{node}"));
        c.env("SLURM_NODEID", node).env("SLURM_JOB_ID", "999999");
        kids.0.push(c.spawn().unwrap());
    }
    // Generous: two watches and trainers start while the rest of the suite runs. A watch that
    // ended before its notice fails the test at once, with what it said.
    let t0 = Instant::now();
    while !(pids(&env).len() >= 2 && latest_step(&env).is_some()) {
        for (i, k) in kids.0.iter_mut().enumerate() {
            if let Ok(Some(st)) = k.try_wait() {
                panic!(
                    "node {i}'s watch ended early ({st}):\n{}",
                    env.read(&format!("node{i}.err"))
                );
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "no two trainers and a publish in 90 s: pids {:?}, latest {:?}\nnode0:\n{}\nnode1:\n{}",
            pids(&env),
            latest_step(&env),
            env.read("node0.err"),
            env.read("node1.err")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for k in &kids.0 {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(k.id() as i32),
            nix::sys::signal::Signal::SIGUSR1,
        )
        .unwrap();
    }
    for (i, k) in kids.0.iter_mut().enumerate() {
        let st = wait_child(k, Duration::from_secs(60));
        assert_eq!(st.code(), Some(76), "{}", env.read(&format!("node{i}.err")));
    }
    let recs = records(&env);
    let notices = event(&recs, "preempt_notice");
    assert_eq!(notices.len(), 2);
    let nodes: Vec<_> = notices.iter().map(|r| r.u64_field("node")).collect();
    assert!(
        nodes.contains(&Some(0)) && nodes.contains(&Some(1)),
        "{nodes:?}"
    );
    let asked = event(&recs, "preempt_save_asked");
    let files: Vec<String> = asked
        .iter()
        .map(|r| r.get("asked").unwrap().to_string())
        .collect();
    assert!(
        files.iter().any(|f| f.contains(".node0")) && files.iter().any(|f| f.contains(".node1")),
        "{files:?}"
    );
    // One publish (rank 0's) answers both nodes' notices.
    let saved = event(&recs, "preempt_saved");
    assert_eq!(saved.len(), 2, "{recs:?}");
    assert_eq!(
        saved[0].u64_field("ckpt_seq"),
        saved[1].u64_field("ckpt_seq")
    );
    let rq = event(&recs, "preempt_requeue");
    let texts: Vec<&str> = rq.iter().map(|r| r.str_field("text").unwrap()).collect();
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.contains("node 0 requeues"))
            .count(),
        1,
        "{texts:?}"
    );
    assert_no_process_left(&env);
    assert_verified(&env);
}

#[test]
fn a_publish_that_does_not_fit_is_warned_as_it_lands_and_sigterm_in_a_slurm_job_is_a_stop() {
    let sig = |child: &std::process::Child, s| {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), s).unwrap()
    };
    let misfit = std::thread::spawn(move || {
        let env = Env::new();
        setup(
            &env,
            "slurm_signal = \"\"\nsigterm_window = \"2s\"\nmargin = \"1s\"",
        );
        // Each save takes 1.5 s (told to publish): more than the 2 s window minus 1 s margin.
        let (mut c, args) = watch_cmd(&env, &["--save-every", "5", "--save-ms", "1500"]);
        let mut child = c.spawn().unwrap();
        poll_until(
            "a fit record after a publish",
            Duration::from_secs(40),
            || !event(&records(&env), "preempt_fit").is_empty(),
        );
        sig(&child, nix::sys::signal::Signal::SIGINT);
        let st = wait_child(&mut child, Duration::from_secs(30));
        assert_eq!(st.code(), Some(1), "{args:?}");
        let recs = records(&env);
        let fit = event(&recs, "preempt_fit")[0];
        assert_eq!(
            fit.str_field("at"),
            Some("publish"),
            "no publish at launch: no launch record"
        );
        assert_eq!(fit.get("fits"), Some(&serde_json::json!(false)));
        assert_eq!(fit.u64_field("with_save_time"), Some(1));
        let err = env.read("watch.err");
        assert!(
            err.contains("roger: warning: preempt: checkpoint takes 1."),
            "{err}"
        );
        // SIGINT is a person: a stop, never a notice.
        assert!(event(&recs, "preempt_notice").is_empty());
    });
    let env = Env::new();
    setup(&env, "slurm_end_time = false");
    let (mut c, args) = watch_cmd(&env, &["--save-every", "5"]);
    c.env("SLURM_JOB_ID", "999999");
    let mut child = c.spawn().unwrap();
    poll_until("a first publish", Duration::from_secs(30), || {
        latest_step(&env).is_some()
    });
    sig(&child, nix::sys::signal::Signal::SIGTERM);
    let st = wait_child(&mut child, Duration::from_secs(30));
    assert_eq!(st.code(), Some(1), "{args:?}\n{}", env.read("watch.err"));
    let recs = records(&env);
    assert!(
        event(&recs, "preempt_notice").is_empty(),
        "scancel must not requeue"
    );
    assert_eq!(one(&recs, "signal").str_field("signal"), Some("SIGTERM"));
    assert_no_process_left(&env);
    misfit.join().unwrap();
}

/// A SLURM job submitted by the test; cancelled if the test ends early.
struct Job(String);

impl Drop for Job {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).status();
    }
}

fn scontrol_show(job: &str) -> String {
    Command::new("scontrol")
        .args(["show", "job", job])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn job_field(show: &str, key: &str) -> Option<String> {
    show.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_string))
}

fn submit(env: &Env, signal: bool) -> Job {
    let roger = util::roger_bin();
    let fake = fake_train();
    let d = env.dir.path().display();
    // The batch shell gets USR1 (B:) and hands it to roger, as examples/slurm/train.sbatch.
    // The requeued run stops 20 steps after the saved one, so the job completes.
    let script = format!(
        r#"#!/bin/bash
cd {d}
echo "start restart=${{SLURM_RESTART_COUNT:-0}} at $(date +%s.%N)" >> runs.txt
STEPS=1000000
if [ "${{SLURM_RESTART_COUNT:-0}}" -ge 1 ]; then
  STEPS=$(( $(sed -n 's/.*"step": *\([0-9]*\).*/\1/p' ckpt/latest.json) + 20 ))
fi
export ROGER_BIN={roger}
{roger} --config roger.toml watch -- {fake} --log train.jsonl --ckpt-dir ckpt --config roger.toml --steps $STEPS --step-ms 50 --save-every 100 --pid-file pids.txt &
pid=$!
trap 'echo "USR1 at $(date +%s.%N)" >> runs.txt; kill -USR1 $pid' USR1
trap 'kill -TERM $pid' TERM
while :; do wait $pid; rc=$?; kill -0 $pid 2>/dev/null || break; done
echo "end restart=${{SLURM_RESTART_COUNT:-0}} rc=$rc" >> runs.txt
exit $rc
"#,
        roger = roger.display(),
        fake = fake.display()
    );
    env.write("job.sh", script);
    let mut sbatch = Command::new("sbatch");
    sbatch.args([
        "--parsable",
        "--time=2",
        "--requeue",
        "--open-mode=append",
        "--job-name=roger-test",
    ]);
    if signal {
        sbatch.arg("--signal=B:USR1@60");
    }
    let out = sbatch
        .arg(format!("--output={d}/slurm-%j.out"))
        .arg(env.path("job.sh"))
        .current_dir(env.dir.path())
        .output()
        .expect("running sbatch");
    assert!(
        out.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    Job(id)
}

/// One job's requeue cycle, the notice from `source`: returns (seconds from job start to the
/// notice, seconds from the notice record to the requeue record).
fn requeue_cycle(env: &Env, job: &Job, source: &str) -> (f64, f64) {
    poll_until("the hand-off's requeue", Duration::from_secs(150), || {
        !event(&records(env), "preempt_requeue").is_empty()
    });
    // A requeued job waits for a BeginTime (~2 min here); the test, as the cluster's admin,
    // lets it start sooner — but only once the old run has finished completing (squeue shows
    // PD, not CG, and its batch shell is gone): released earlier, slurmd refuses the new
    // start ("job credential revoked") and the job fails.
    let squeue_state = || {
        Command::new("squeue")
            .args(["-h", "-j", &job.0, "-o", "%t"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    poll_until(
        "the old run completed and the job pending",
        Duration::from_secs(90),
        || env.read("runs.txt").contains("end restart=0") && squeue_state() == "PD",
    );
    std::thread::sleep(Duration::from_secs(3));
    let mut last: Option<Instant> = None;
    poll_until(
        "the requeued run to finish",
        Duration::from_secs(120),
        || {
            if last.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) && squeue_state() == "PD" {
                last = Some(Instant::now());
                let _ = Command::new("scontrol")
                    .args(["update", &format!("JobId={}", job.0), "StartTime=now"])
                    .status();
            }
            env.read("runs.txt").contains("end restart=1")
        },
    );
    let runs = env.read("runs.txt");
    let recs = records(env);
    let notice = one(&recs, "preempt_notice");
    assert_eq!(notice.str_field("notice_source"), Some(source), "{runs}");
    let saved = one(&recs, "preempt_saved");
    let step = saved.u64_field("ckpt_step").unwrap();
    let kill = recs
        .iter()
        .find(|r| r.kind == Kind::Kill && r.str_field("reason") == Some("preempt"))
        .expect("kill record");
    assert!(
        notice.seq < saved.seq && saved.seq < kill.seq,
        "verified save after the notice, before the kill"
    );
    let rq = one(&recs, "preempt_requeue");
    assert_eq!(rq.str_field("how"), Some("scontrol"), "{rq:?}");
    assert_eq!(rq.get("ok"), Some(&serde_json::json!(true)));
    // The second start: SLURM_RESTART_COUNT=1, counted by the watch, resumed from the save.
    let starts = event(&recs, "start");
    assert_eq!(starts.len(), 2, "{runs}");
    assert_eq!(starts[1].u64_field("slurm_restart_count"), Some(1));
    // Resumed from the newest checkpoint published before the second start: the saved one, or
    // one the trainer's own schedule (a save every 100 steps) published between the save and
    // its death — CI once saw that, and the newer verified checkpoint is the right resume.
    let last_pub = recs
        .iter()
        .rfind(|r| r.kind == Kind::Publish && r.seq < starts[1].seq)
        .expect("a publish record before the second start");
    let resumed = last_pub.step.expect("publish step");
    assert!(resumed >= step, "resumed at {resumed}, saved at {step}");
    let out = std::fs::read_to_string(env.path(&format!("slurm-{}.out", job.0))).unwrap();
    let resumed_line = out
        .lines()
        .find(|l| l.starts_with("fake_train: resumed from "))
        .unwrap_or_else(|| panic!("no resume line in:\n{out}"));
    assert!(
        resumed_line.ends_with(&format!(" at step {resumed}")),
        "{resumed_line}\n{out}"
    );
    if resumed == step {
        assert!(
            resumed_line.contains(saved.str_field("ckpt").unwrap()),
            "{resumed_line}"
        );
    }
    assert!(
        runs.contains("end restart=0 rc=76") && runs.contains("end restart=1 rc=0"),
        "{runs}"
    );
    poll_until("the job completed", Duration::from_secs(30), || {
        job_field(&scontrol_show(&job.0), "JobState").as_deref() == Some("COMPLETED")
    });
    assert_no_process_left(env);
    assert_verified(env);
    let t = |l: &str, key: &str| -> Option<f64> {
        runs.lines()
            .find(|x| x.starts_with(l))?
            .rsplit(key)
            .next()?
            .trim()
            .parse()
            .ok()
    };
    let start = t("start restart=0", "at ").unwrap();
    let noticed = notice.ts.timestamp_millis() as f64 / 1000.0;
    let ms = (rq.ts - notice.ts).num_milliseconds() as f64 / 1000.0;
    (noticed - start, ms)
}

#[test]
fn slurm_signal_save_requeue_and_resume_on_a_real_scheduler() {
    let setup = util::repo_root().join("tests/slurm/setup.sh");
    let out = Command::new("bash")
        .arg(&setup)
        .arg("start")
        .stdin(Stdio::null())
        .output()
        .expect("running tests/slurm/setup.sh");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.code() == Some(3) {
        // setup.sh says why: not root, a slurm/munge binary missing, a real cluster's config.
        util::missing(
            "slurm_signal_save_requeue_and_resume_on_a_real_scheduler",
            "a single-node SLURM that tests/slurm/setup.sh can start",
            &format!(
                "apt-get install slurm-wlm munge, as root; .ci/run does; setup.sh said: {}",
                said.trim()
            ),
        );
        return;
    }
    assert!(
        out.status.success(),
        "setup.sh: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fake_train();
    // Three jobs at once, for the wall time of one: two with `--signal=B:USR1@60` (two draws of
    // when SLURM sends it: up to 60 s early), one without a signal, where roger acts on the
    // job's end time read from squeue.
    let envs = [Env::new(), Env::new(), Env::new()];
    let sources = ["slurm-signal", "slurm-signal", "slurm-end-time"];
    for (i, e) in envs.iter().enumerate() {
        let notice = if sources[i] == "slurm-signal" {
            "slurm_signal = \"USR1\"\nslurm_window = \"60s\"\nslurm_end_time = false"
        } else {
            "slurm_signal = \"\"\nslurm_window = \"100s\"\nslurm_end_time = true\nend_time_poll = \"5s\""
        };
        e.write(
            "roger.toml",
            format!(
                "[run]\nname = \"slurm{i}\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ckpt\"\n[gpu]\nsource = \"none\"\n[watch]\ninterval = \"200ms\"\nhysteresis = 2\ngrace = \"3s\"\nstale = \"30s\"\nmax_relaunches = 3\n[preempt]\n{notice}\nmargin = \"10s\"\nrequeue = \"scontrol\"\n"
            ),
        );
    }
    let jobs: Vec<Job> = envs
        .iter()
        .zip(sources)
        .map(|(e, s)| submit(e, s == "slurm-signal"))
        .collect();
    let measured: Vec<(f64, f64)> = std::thread::scope(|s| {
        let hs: Vec<_> = envs
            .iter()
            .zip(&jobs)
            .zip(sources)
            .map(|((e, j), src)| s.spawn(move || requeue_cycle(e, j, src)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((noticed, requeue), src) in measured.iter().zip(sources) {
        eprintln!(
            "slurm: {src} notice {noticed:.1} s after the job started (limit 120 s); notice to requeue {requeue:.3} s"
        );
    }
    drop(jobs);
    if said.starts_with("started:") {
        let _ = Command::new("bash").arg(&setup).arg("stop").status();
    }
}

/// Watches a test started: on a failed assertion they are told to stop (SIGTERM: each stops
/// its own run tree), then killed, so no run outlives the test.
struct StopOnDrop(Vec<std::process::Child>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        for k in &mut self.0 {
            if matches!(k.try_wait(), Ok(None)) {
                let pid = nix::unistd::Pid::from_raw(k.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            }
        }
        for k in &mut self.0 {
            let t0 = std::time::Instant::now();
            while matches!(k.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(15) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}
