//! Issue 38, first part: many nodes, one job, on one machine. Each "node" is its own working
//! directory with its own real `roger watch` and trainer: a shell loop logging a step every
//! 200 ms that, like a synchronous data-parallel rank, goes on to the next step only when every
//! node's trainer has finished this one (a barrier through files, as an all-reduce waits).
//! `[cluster] store` is one directory all of them see. Faults: a node's whole process
//! tree SIGKILLed (the machine is lost), a node's roger SIGKILLed while its trainer lives, the
//! store gone for longer than the limit. Assertions are on the ledgers' records.

use crate::util::Env;
use crate::watch::{records, roger, wait_child};
use roger::ledger::{Kind, Record};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// `[cluster] lost_after`; the watch's own stale limit is far longer, so no node's watch
/// kills its waiting trainer while the test looks.
const STALE_S: f64 = 3.0;

/// The trainer: its pid first (the test kills its group), then a step every 200 ms, each
/// ended at a barrier with the other nodes' trainers ($SYNC/rank-K holds K's last step).
const TRAIN: &str = r#"echo $$ > child.pid; i=0; while :; do i=$((i+1)); echo "{\"step\": $i, \"loss\": 1.0}" >> train.jsonl; echo $i > "$SYNC/rank-$K.tmp"; mv "$SYNC/rank-$K.tmp" "$SYNC/rank-$K"; while :; do ok=1; for k in $(seq 0 $((N - 1))); do [ "$(cat "$SYNC/rank-$k" 2>/dev/null || echo 0)" -ge $i ] || ok=0; done; [ $ok = 1 ] && break; sleep 0.05; done; sleep 0.2; done"#;

struct Node {
    env: Env,
    watch: Child,
    /// (the barrier's directory, this node's index, the node count) for the trainer.
    sync: (std::path::PathBuf, u32, u32),
    /// Its store is the test bucket.
    s3: bool,
}

/// Node `k` of `n`: its store is `root/job`, its trainers' barrier `root/barrier`.
fn node(root: &Path, k: u32, n: u32) -> Node {
    node_with(root, k, n, "", "")
}

/// [`node`] with more `[watch]` and `[cluster]` lines.
fn node_with(root: &Path, k: u32, n: u32, watch: &str, more: &str) -> Node {
    let store = format!("store = \"{}\"", root.join("job").display());
    node_at(root, &store, k, n, watch, more, false)
}

/// Node `k` of `n` with its store given as a `[cluster] store` line (`s3`: the test bucket's
/// credentials in the watch's environment).
fn node_at(root: &Path, store: &str, k: u32, n: u32, watch: &str, more: &str, s3: bool) -> Node {
    let env = Env::new();
    env.write(
        "roger.toml",
        format!(
            r#"[run]
name = "job"
log = "train.jsonl"

[gpu]
source = "none"

[watch]
interval = "100ms"
hysteresis = 2
grace = "5s"
stale = "120s"
{watch}
[cluster]
{store}
node = {k}
nodes = {n}
lost_after = "{STALE_S}s"
{more}
"#
        ),
    );
    let sync = (root.join("barrier"), k, n);
    std::fs::create_dir_all(&sync.0).unwrap();
    let watch = start_watch(&env, &sync, s3);
    Node {
        env,
        watch,
        sync,
        s3,
    }
}

fn start_watch(env: &Env, sync: &(std::path::PathBuf, u32, u32), s3: bool) -> Child {
    let args: Vec<String> = ["watch", "--", "sh", "-c", TRAIN]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut c = roger(env, &args);
    if s3 {
        crate::util::s3::apply_env(&mut c);
        c.env("ROGER_JOB_ID", "job-1");
    }
    c.env("SYNC", &sync.0)
        .env("K", sync.1.to_string())
        .env("N", sync.2.to_string());
    c.stdout(Stdio::null()).stderr(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(env.path("watch.err"))
            .unwrap(),
    );
    c.spawn().expect("spawn roger watch")
}

fn events<'a>(recs: &'a [Record], name: &str) -> Vec<&'a Record> {
    recs.iter()
        .filter(|r| r.kind == Kind::Watch && r.str_field("event") == Some(name))
        .collect()
}

/// Polls `node`'s ledger until `pred` holds (60 s at most: a hang fails, it does not block).
fn wait_for(n: &Node, what: &str, pred: impl Fn(&[Record]) -> bool) -> Vec<Record> {
    let t0 = Instant::now();
    loop {
        let recs = records(&n.env);
        if pred(&recs) {
            return recs;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            panic!(
                "{what}: not seen in 60 s\nwatch stderr:\n{}",
                n.env.read("watch.err")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lost_of(recs: &[Record], node: u64) -> Vec<&Record> {
    events(recs, "node_lost")
        .into_iter()
        .filter(|r| r.u64_field("node") == Some(node))
        .collect()
}

fn kill(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

/// SIGKILL a node's trainer (its process group) as a lost machine would.
fn kill_trainer(n: &Node) {
    let pid: i32 = n.env.read("child.pid").trim().parse().expect("child.pid");
    kill(-pid, nix::sys::signal::Signal::SIGKILL);
}

/// Node `dead`'s roger is SIGKILLed (its trainer lives on); node 0's ledger once it named it.
fn kill_roger_until_named(nodes: &mut [Node], dead: usize) -> Vec<Record> {
    kill(
        nodes[dead].watch.id() as i32,
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = nodes[dead].watch.wait();
    wait_for(&nodes[0], &format!("node 0 naming node {dead}"), |r| {
        !lost_of(r, dead as u64).is_empty()
    })
}

/// A node's machine is lost: its roger and its trainer die at once.
fn lose_machine(n: &mut Node) {
    kill(n.watch.id() as i32, nix::sys::signal::Signal::SIGKILL);
    kill_trainer(n);
    let _ = n.watch.wait();
}

fn stop(mut n: Node) {
    kill(n.watch.id() as i32, nix::sys::signal::Signal::SIGTERM);
    wait_child(&mut n.watch, Duration::from_secs(20));
    if let Ok(p) = n.env.read("child.pid").trim().parse::<i32>() {
        kill(-p, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Every node has written records and heard the others (a few samples in).
fn all_up(nodes: &[Node], root: &Path) {
    let store = root.join("job");
    for n in nodes {
        wait_for(n, "the cluster start record", |r| {
            !events(r, "cluster").is_empty()
        });
    }
    let t0 = Instant::now();
    while (0..nodes.len()).any(|k| {
        std::fs::read_to_string(store.join(format!("nodes/node-{k}.json")))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["step"].as_u64())
            .is_none_or(|s| s < 3)
    }) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "nodes never reported steps"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_lost_machine_is_named_by_every_other_node_within_the_stale_limit() {
    let store = tempfile::tempdir().unwrap();
    let export = "[export]\ntextfile = \"roger.prom\"";
    let nodes: Vec<Node> = (0..3)
        .map(|k| node_with(store.path(), k, 3, "", export))
        .collect();
    all_up(&nodes, store.path());
    let mut nodes = nodes.into_iter();
    let (n0, mut n1, n2) = (
        nodes.next().unwrap(),
        nodes.next().unwrap(),
        nodes.next().unwrap(),
    );
    // Node 1's machine is lost: its roger and its trainer die at once.
    lose_machine(&mut n1);
    for (n, name) in [(&n0, "node 0"), (&n2, "node 2")] {
        let recs = wait_for(n, &format!("{name} naming node 1"), |r| {
            !lost_of(r, 1).is_empty()
        });
        let lost = lost_of(&recs, 1);
        assert_eq!(lost.len(), 1, "{name} names node 1 once: {lost:?}");
        let r = lost[0];
        let reason = r.str_field("reason").unwrap();
        // Its own trainer waits at the barrier for node 1's: the job waits on node 1.
        assert!(
            reason.starts_with("node 1 has not reported since ")
                && reason.contains("(last step ")
                && reason.contains("machine lost or roger stopped")
                && reason.ends_with("it waits on node 1"),
            "{reason}"
        );
        let silent = r
            .get("silent_s")
            .and_then(serde_json::Value::as_f64)
            .unwrap();
        assert_eq!(
            r.get("limit_s").and_then(serde_json::Value::as_f64),
            Some(STALE_S)
        );
        // Named at the first sample past the limit (4 s of slack for a loaded CI machine).
        assert!(
            (STALE_S..STALE_S + 4.0).contains(&silent),
            "{name} named node 1 after {silent}s unheard (limit {STALE_S}s)"
        );
        eprintln!("{name}: node 1 named lost after {silent}s unheard (limit {STALE_S}s)");
        // Nobody else is named: the live nodes keep hearing each other.
        assert_eq!(events(&recs, "node_lost").len(), 1, "{recs:?}");
        let stderr = n.env.read("watch.err");
        assert!(stderr.contains("node 1 has not reported since"), "{stderr}");
    }
    // `roger status` on node 0 shows the job, one row per node, and warns.
    let st = n0.env.run(&["status"]);
    let screen = String::from_utf8_lossy(&st.out.stdout).into_owned();
    assert_eq!(st.out.status.code(), Some(1), "{screen}");
    for k in [0, 2] {
        let row = screen
            .lines()
            .find(|l| l.starts_with(&format!("node {k} ")))
            .unwrap_or_else(|| panic!("no row for node {k}:\n{screen}"));
        assert!(row.contains(", step ") && !row.contains("LOST"), "{screen}");
    }
    let row1 = screen
        .lines()
        .find(|l| l.starts_with("node 1 "))
        .unwrap_or_else(|| panic!("no row for node 1:\n{screen}"));
    assert!(
        row1.contains("LOST: not heard within the limit"),
        "{screen}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&n0.env.run(&["status", "--json"]).out.stdout).unwrap();
    assert_eq!(json["nodes"][1]["lost"], true, "{json}");
    assert_eq!(json["nodes"][0]["lost"], false, "{json}");
    // The Prometheus textfile has a series per node: node 1 lost, unheard past the limit.
    let prom = n0.env.read("roger.prom");
    let value = |name: &str, node: u32| -> f64 {
        let head = format!("{name}{{run=\"job\",source=\"watch\",node=\"{node}\"}} ");
        prom.lines()
            .find_map(|l| l.strip_prefix(&head)?.parse().ok())
            .unwrap_or_else(|| panic!("no {head} in\n{prom}"))
    };
    assert_eq!(value("roger_cluster_node_lost", 1), 1.0, "{prom}");
    assert_eq!(value("roger_cluster_node_lost", 2), 0.0, "{prom}");
    assert!(
        value("roger_cluster_node_unheard_seconds", 1) >= STALE_S,
        "{prom}"
    );
    assert!(value("roger_cluster_node_step", 0) >= 3.0, "{prom}");
    if let Some(promtool) = crate::export::tool(
        "promtool",
        "prometheus",
        "a_lost_machine_is_named_by_every_other_node_within_the_stale_limit",
    ) {
        crate::export::promtool_check_metrics(&promtool, &prom);
    }
    stop(n0);
    stop(n2);
}

#[test]
fn a_killed_roger_is_named_and_its_restart_is_heard_again() {
    let store = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (0..2).map(|k| node(store.path(), k, 2)).collect();
    all_up(&nodes, store.path());
    // Node 1's roger dies; its trainer lives on.
    let recs = kill_roger_until_named(&mut nodes, 1);
    assert_eq!(lost_of(&recs, 1).len(), 1);
    // The trainers still pass the barrier together: node 1's trainer lives, its roger stopped.
    let reason = lost_of(&recs, 1)[0]
        .str_field("reason")
        .unwrap()
        .to_string();
    assert!(
        reason.ends_with("node 1's trainer still takes part: its roger stopped"),
        "{reason}"
    );
    // A new watch on node 1 attaches to the live trainer and reports again.
    nodes[1].watch = start_watch(&nodes[1].env, &nodes[1].sync, nodes[1].s3);
    let recs = wait_for(&nodes[0], "node 0 hearing node 1 again", |r| {
        events(r, "node_back")
            .iter()
            .any(|b| b.u64_field("node") == Some(1))
    });
    let back = events(&recs, "node_back");
    assert!(
        back[0]
            .str_field("reason")
            .unwrap()
            .starts_with("node 1 reports again (step "),
        "{back:?}"
    );
    let adopted = records(&nodes[1].env)
        .iter()
        .filter(|r| r.kind == Kind::Watch && r.str_field("event") == Some("start"))
        .filter_map(|r| r.str_field("mode").map(String::from))
        .collect::<Vec<_>>();
    assert_eq!(
        adopted.last().map(String::as_str),
        Some("adopt"),
        "one trainer: the new watch adopts the live one ({adopted:?})"
    );
    for n in nodes {
        stop(n);
    }
}

#[test]
fn a_store_gone_longer_than_the_limit_names_no_node() {
    let store = tempfile::tempdir().unwrap();
    let shared = store.path().join("job");
    let nodes: Vec<Node> = (0..2).map(|k| node(store.path(), k, 2)).collect();
    all_up(&nodes, store.path());
    // The shared filesystem goes away for twice the limit, then comes back.
    let away = store.path().join("away");
    std::fs::rename(&shared, &away).unwrap();
    for n in &nodes {
        wait_for(n, "the store said down", |r| {
            !events(r, "cluster_store_down").is_empty()
        });
    }
    std::thread::sleep(Duration::from_secs_f64(STALE_S * 2.0));
    std::fs::rename(&away, &shared).unwrap();
    for n in &nodes {
        let recs = wait_for(n, "the store said back", |r| {
            !events(r, "cluster_store_back").is_empty()
        });
        let down = events(&recs, "cluster_store_down");
        assert_eq!(down.len(), 1, "said once per outage: {down:?}");
        assert!(
            down[0]
                .str_field("reason")
                .unwrap()
                .contains("does not answer"),
            "{down:?}"
        );
    }
    // Both nodes keep writing after the outage: neither is named lost, now or a limit later.
    std::thread::sleep(Duration::from_secs_f64(STALE_S + 1.0));
    for n in &nodes {
        let recs = records(&n.env);
        assert!(
            events(&recs, "node_lost").is_empty(),
            "a node named lost across a store outage: {:?}",
            events(&recs, "node_lost")
        );
    }
    for n in nodes {
        stop(n);
    }
}

#[test]
fn a_node_that_cannot_tell_its_place_is_refused_before_its_trainer_starts() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"job\"\nlog = \"train.jsonl\"\n[gpu]\nsource = \"none\"\n[cluster]\nstore = \"shared\"\n",
    );
    let mut c = env.cmd(&["watch", "--", "sh", "-c", "touch started"]);
    for k in [
        "SLURM_NODEID",
        "JOB_COMPLETION_INDEX",
        "NODE_RANK",
        "PET_NODE_RANK",
    ] {
        c.env_remove(k);
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("set [cluster] node"), "{err}");
    assert!(!env.path("started").exists(), "the trainer was started");
}

/// The pids of a node's trainer group are gone (within 5 s: a shell ends on SIGTERM only
/// once its foreground `sleep` returns).
fn trainer_gone(n: &Node) -> bool {
    let pid: i32 = n.env.read("child.pid").trim().parse().unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if nix::sys::signal::kill(nix::unistd::Pid::from_raw(-pid), None).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn a_lost_node_is_one_job_verdict_and_every_waiting_node_stops_for_a_requeue() {
    let store = tempfile::tempdir().unwrap();
    let nodes: Vec<Node> = (0..3)
        .map(|k| node_with(store.path(), k, 3, "", "on_fault = \"requeue\""))
        .collect();
    all_up(&nodes, store.path());
    let mut nodes = nodes.into_iter();
    let (mut n0, mut n1, mut n2) = (
        nodes.next().unwrap(),
        nodes.next().unwrap(),
        nodes.next().unwrap(),
    );
    lose_machine(&mut n1);
    let mut ids = Vec::new();
    let mut won = 0;
    for (n, name) in [(&mut n0, "node 0"), (&mut n2, "node 2")] {
        let st = wait_child(&mut n.watch, Duration::from_secs(60));
        let recs = records(&n.env);
        let story = format!("{name}:\n{}", n.env.read("watch.err"));
        assert_eq!(st.code(), Some(76), "{story}");
        let v = events(&recs, "cluster_verdict");
        assert_eq!(v.len(), 1, "{story}");
        ids.push(v[0].str_field("id").unwrap().to_string());
        won += usize::from(v[0].get("won") == Some(&serde_json::json!(true)));
        assert_eq!(v[0].u64_field("node"), Some(1), "{story}");
        // The kill record (stacks, evidence) before the stop, the reason written, then 76.
        let kill = recs
            .iter()
            .find(|r| r.kind == Kind::Kill)
            .unwrap_or_else(|| panic!("no kill record\n{story}"));
        assert_eq!(kill.str_field("reason"), Some("cluster"), "{story}");
        assert!(kill.seq > v[0].seq, "{story}");
        let done = events(&recs, "done");
        let reason = done[0].str_field("reason").unwrap();
        assert!(
            reason.starts_with(&format!("job verdict {} ", ids.last().unwrap()))
                && reason.contains("it waits on node 1")
                && reason.ends_with(
                    "requeue the job: incident 1 of at most 20 ([watch] max_relaunches, job-wide)"
                ),
            "{reason}"
        );
        assert!(trainer_gone(n), "{name}'s trainer still runs\n{story}");
    }
    assert_eq!(ids[0], ids[1], "one verdict, one id on every node");
    assert_eq!(won, 1, "exactly one node wrote it");
    // In the morning: status and report show the job, one row per node, and the incident
    // with the node that caused it.
    let st = n0.env.run(&["status"]);
    let screen = String::from_utf8_lossy(&st.out.stdout).into_owned();
    let incident = screen
        .lines()
        .find(|l| l.starts_with("incident "))
        .unwrap_or_else(|| panic!("no incident line:\n{screen}"));
    assert!(
        incident.contains(&format!("{} node 1 lost", ids[0]))
            && incident.contains("every node: requeue"),
        "{screen}"
    );
    let text = n0.env.run(&["report", "--text"]);
    let digest = String::from_utf8_lossy(&text.out.stdout).into_owned();
    assert!(
        digest.contains("job: 3 nodes, 1 LOST") && digest.contains("incidents 1"),
        "{digest}"
    );
    for k in [0, 2] {
        assert!(
            digest
                .lines()
                .any(|l| l.starts_with(&format!("  node {k}: ")) && !l.ends_with("LOST")),
            "node {k}: {digest}"
        );
    }
    assert!(
        digest
            .lines()
            .any(|l| l.starts_with("  node 1: ") && l.ends_with(", LOST")),
        "{digest}"
    );
    assert!(
        digest.contains(&format!("newest incident: {} node 1 lost", ids[0])),
        "{digest}"
    );
    n0.env.run(&["report", "--out", "page.html"]);
    let page = n0.env.read("page.html");
    assert!(
        page.contains("<section id=\"nodes\">") && page.contains(&ids[0]),
        "no nodes section or incident in the page"
    );
}

/// Two nodes with `on_fault = "requeue"` and `knob` in `[watch]`; an earlier incident of the
/// job (`verdict`, its file name `id`) is in the store already; node 1's machine is lost.
/// Node 0's exit code, its records and its stderr.
fn lost_after_an_earlier_incident(
    id: &str,
    verdict: &str,
    knob: &str,
) -> (Option<i32>, Vec<Record>, String) {
    let store = tempfile::tempdir().unwrap();
    let earlier = store.path().join(format!("job/verdicts/{id}.json"));
    std::fs::create_dir_all(earlier.parent().unwrap()).unwrap();
    std::fs::write(&earlier, verdict).unwrap();
    let nodes: Vec<Node> = (0..2)
        .map(|k| node_with(store.path(), k, 2, knob, "on_fault = \"requeue\""))
        .collect();
    all_up(&nodes, store.path());
    let mut nodes = nodes.into_iter();
    let (mut n0, mut n1) = (nodes.next().unwrap(), nodes.next().unwrap());
    lose_machine(&mut n1);
    let st = wait_child(&mut n0.watch, Duration::from_secs(60));
    assert!(trainer_gone(&n0));
    (st.code(), records(&n0.env), n0.env.read("watch.err"))
}

#[test]
fn the_relaunch_budget_is_the_jobs_not_each_nodes() {
    // An earlier incident of this job (before its last requeue), under an old-style id.
    let (code, recs, story) = lost_after_an_earlier_incident(
        "node0-lost-1000",
        r#"{"id":"node0-lost-1000","cause":"node_lost","node":0,"last_step":7,"by_node":1,"at":1.0,"action":"requeue","reason":"node 0 has not reported"}"#,
        "max_relaunches = 1",
    );
    assert_eq!(code, Some(75), "{story}");
    // The earlier incident is counted, not acted on again.
    let v = events(&recs, "cluster_verdict");
    assert_eq!(v.len(), 1, "{story}");
    assert_eq!(v[0].u64_field("incidents"), Some(2));
    let done = events(&recs, "done");
    assert!(
        done[0]
            .str_field("reason")
            .unwrap()
            .ends_with("do not requeue: the job-wide budget is spent (2 incidents, [watch] max_relaunches = 1)"),
        "{story}"
    );
}

/// The job-wide breakers, as one node's: a second incident within the window of one
/// (`max_relaunches_per_window = 1`) stops the job with 75, though the budget is not spent.
#[test]
fn a_second_incident_within_the_window_opens_the_job_wide_breaker() {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 60.0;
    let (code, recs, story) = lost_after_an_earlier_incident(
        "incident-0001",
        &format!(
            r#"{{"id":"incident-0001","cause":"hang","node":1,"last_step":2,"by_node":1,"at":{at},"action":"requeue","reason":"an earlier stall"}}"#
        ),
        "max_relaunches_per_window = 1",
    );
    assert_eq!(code, Some(75), "{story}");
    let v = events(&recs, "cluster_verdict");
    assert_eq!(v.len(), 1, "{story}");
    assert_eq!(
        v[0].str_field("breaker"),
        Some("2 incidents within 6h (max_relaunches_per_window = 1, job-wide)"),
        "{story}"
    );
    let done = events(&recs, "done");
    assert!(
        done[0].str_field("reason").unwrap().ends_with(
            "do not requeue: a breaker opened: 2 incidents within 6h (max_relaunches_per_window = 1, job-wide)"
        ),
        "{story}"
    );
}

/// A node whose roger died while its trainer lives is named, and nothing is stopped: the
/// other nodes' runs still advance, so no node waits on it and no verdict is written.
#[test]
fn a_dead_roger_with_a_live_trainer_stops_nothing_even_with_on_lost_requeue() {
    let store = tempfile::tempdir().unwrap();
    // `on_lost`: the first name of `on_fault`, still read.
    let mut nodes: Vec<Node> = (0..2)
        .map(|k| node_with(store.path(), k, 2, "", "on_lost = \"requeue\""))
        .collect();
    all_up(&nodes, store.path());
    let recs = kill_roger_until_named(&mut nodes, 1);
    let reason = lost_of(&recs, 1)[0]
        .str_field("reason")
        .unwrap()
        .to_string();
    assert!(reason.ends_with("its roger stopped"), "{reason}");
    std::thread::sleep(Duration::from_secs_f64(STALE_S + 1.0));
    let recs = records(&nodes[0].env);
    assert!(events(&recs, "cluster_verdict").is_empty(), "{recs:?}");
    assert!(
        nodes[0].watch.try_wait().unwrap().is_none(),
        "node 0's watch ended"
    );
    for n in &nodes {
        let pid: i32 = n.env.read("child.pid").trim().parse().unwrap();
        assert!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(-pid), None).is_ok(),
            "a trainer was stopped"
        );
    }
    assert!(
        !store.path().join("job/verdicts").exists()
            || std::fs::read_dir(store.path().join("job/verdicts"))
                .unwrap()
                .next()
                .is_none()
    );
    for n in nodes {
        stop(n);
    }
}

/// Every node has written a record with a few steps to the bucket.
fn bucket_up(s3: &crate::util::s3::S3Server, n: u32) {
    let t0 = Instant::now();
    while (0..n).any(|k| {
        s3.get("ckpts", &format!("cluster/job-1/nodes/node-{k}.json"))
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["step"].as_u64())
            .is_none_or(|s| s < 3)
    }) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "nodes never reported steps to the bucket"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The test bucket as the store: `[cluster] store` under it, `[remote]` its endpoint.
fn bucket_node(s3: &crate::util::s3::S3Server, root: &Path, k: u32, n: u32, more: &str) -> Node {
    let more = format!("{more}\n[remote]\nendpoint = \"{}\"", s3.endpoint());
    node_at(
        root,
        "store = \"s3://ckpts/cluster/{job}\"",
        k,
        n,
        "",
        &more,
        true,
    )
}

#[test]
fn through_the_bucket_a_lost_machine_is_one_verdict_written_there() {
    let Some(s3) = crate::util::s3::S3Server::start(
        "through_the_bucket_a_lost_machine_is_one_verdict_written_there",
    ) else {
        return;
    };
    s3.create_bucket("ckpts");
    let root = tempfile::tempdir().unwrap();
    let nodes: Vec<Node> = (0..3)
        .map(|k| bucket_node(&s3, root.path(), k, 3, "on_fault = \"requeue\""))
        .collect();
    bucket_up(&s3, nodes.len() as u32);
    let keys = s3.list("ckpts", "cluster/job-1/nodes/");
    assert_eq!(keys.len(), 3, "{keys:?}");
    let mut nodes = nodes.into_iter();
    let (mut n0, mut n1, mut n2) = (
        nodes.next().unwrap(),
        nodes.next().unwrap(),
        nodes.next().unwrap(),
    );
    lose_machine(&mut n1);
    let mut ids = Vec::new();
    let mut won = 0;
    for (n, name) in [(&mut n0, "node 0"), (&mut n2, "node 2")] {
        let st = wait_child(&mut n.watch, Duration::from_secs(60));
        let recs = records(&n.env);
        let story = format!("{name}:\n{}", n.env.read("watch.err"));
        assert_eq!(st.code(), Some(76), "{story}");
        assert_eq!(lost_of(&recs, 1).len(), 1, "{story}");
        let v = events(&recs, "cluster_verdict");
        assert_eq!(v.len(), 1, "{story}");
        assert_eq!(v[0].u64_field("node"), Some(1), "{story}");
        ids.push(v[0].str_field("id").unwrap().to_string());
        won += usize::from(v[0].get("won") == Some(&serde_json::json!(true)));
        assert!(trainer_gone(n), "{name}'s trainer still runs\n{story}");
    }
    assert_eq!(ids[0], ids[1], "one verdict, one id on every node");
    assert_eq!(won, 1, "exactly one node wrote it");
    assert_eq!(
        s3.list("ckpts", "cluster/job-1/verdicts/"),
        vec![format!("cluster/job-1/verdicts/{}.json", ids[0])]
    );
    // `roger status` reads the job's nodes from the bucket too (the run stopped: exit 2).
    let mut c = n0.env.cmd(&["status", "--json"]);
    crate::util::s3::apply_env(&mut c);
    c.env("ROGER_JOB_ID", "job-1");
    let out = c.output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(json["nodes"][1]["lost"], true, "{json}");
    assert_eq!(json["nodes"][0]["lost"], false, "{json}");
    assert_eq!(out.status.code(), Some(2), "{json}");
}

#[test]
fn a_bucket_that_stops_answering_names_no_node_and_the_watch_keeps_sampling() {
    let Some(mut s3) = crate::util::s3::S3Server::start(
        "a_bucket_that_stops_answering_names_no_node_and_the_watch_keeps_sampling",
    ) else {
        return;
    };
    s3.create_bucket("ckpts");
    let root = tempfile::tempdir().unwrap();
    let nodes: Vec<Node> = (0..2)
        .map(|k| bucket_node(&s3, root.path(), k, 2, ""))
        .collect();
    bucket_up(&s3, nodes.len() as u32);
    // The bucket stops answering (its server frozen: requests hang, as on a dead network)
    // for twice the limit, then answers again.
    // s3.pid() is moto's `timeout` wrapper: moto itself is its child.
    let wrapper = s3.pid();
    let children = std::fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children"))
        .unwrap_or_default();
    let moto: i32 = children
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("moto's pid under its wrapper {wrapper}"))
        .parse()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(moto);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    for n in &nodes {
        wait_for(n, "the store said down", |r| {
            !events(r, "cluster_store_down").is_empty()
        });
    }
    std::thread::sleep(Duration::from_secs_f64(STALE_S * 2.0));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert!(s3.running());
    for n in &nodes {
        let recs = wait_for(n, "the store said back", |r| {
            !events(r, "cluster_store_back").is_empty()
        });
        let down = events(&recs, "cluster_store_down");
        assert_eq!(down.len(), 1, "said once per outage: {down:?}");
        assert!(
            down[0]
                .str_field("reason")
                .unwrap()
                .contains("s3://ckpts/cluster/job-1/"),
            "{down:?}"
        );
    }
    std::thread::sleep(Duration::from_secs_f64(STALE_S + 1.0));
    for n in &nodes {
        // The watch sampled on through the outage: a request that hangs costs its time
        // limit (2 s: roger::cluster::CALL_LIMIT), once per sample at most, not the outage.
        let stamps: Vec<f64> = n
            .env
            .read("watch.err")
            .lines()
            .filter_map(|l| chrono::DateTime::parse_from_rfc3339(l.split(' ').next()?).ok())
            .map(|t| t.timestamp_millis() as f64 / 1000.0)
            .collect();
        let gap = stamps.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
        eprintln!("longest pause in the watch's samples across the outage: {gap:.1}s");
        assert!(gap <= 3.0, "the watch stalled {gap:.1}s");
        let recs = records(&n.env);
        assert!(
            events(&recs, "node_lost").is_empty(),
            "a node named lost across a bucket outage: {:?}",
            events(&recs, "node_lost")
        );
    }
    for n in nodes {
        stop(n);
    }
}
