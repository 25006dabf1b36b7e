//! The torchrun job of the rank tests (tests/ranks/train_ddp.py under the real `roger watch`),
//! shared by the integration binary and `under_load` (tests/under_load.rs).

use crate::util::{roger_bin, Env};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const PY: &str = "/usr/bin/python3";

/// Debian's python3-torch and py-spy are here; when not, says so through `util::missing`.
pub(crate) fn torch_ready(test: &str) -> bool {
    let torch = Command::new(PY)
        .args(["-c", "import torch.distributed"])
        .stderr(Stdio::null())
        .status();
    if !torch.is_ok_and(|s| s.success()) {
        crate::util::missing(
            test,
            &format!("{PY} with torch.distributed"),
            "apt-get install python3-torch; .ci/run does",
        );
        return false;
    }
    let spy = Command::new("py-spy").arg("--version").output();
    if !spy.is_ok_and(|o| o.status.success()) {
        crate::util::missing(
            test,
            "py-spy on PATH",
            "python3 -m pip install py-spy; .ci/run does",
        );
        return false;
    }
    true
}

/// A run dir with the training script and a config for it.
pub(crate) fn setup(extra_watch: &str, extra: &str) -> Env {
    let env = Env::new();
    // Each job its own rendezvous port: `--standalone` means localhost:29400 for every job, and
    // jobs run at once (other tests, the healthy runs) then share one store and die with it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = std::fs::read(crate::util::repo_root().join("tests/ranks/train_ddp.py")).unwrap();
    env.write("train_ddp.py", script);
    env.write(
        "roger.toml",
        format!(
            r#"[run]
name = "ddp"
log = "logs/rank{{rank}}.jsonl"
checkpoint_dir = "published"

[watch]
command = ["{PY}", "-m", "torch.distributed.run", "--nproc_per_node=4", "--redirects", "2", "--tee", "2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=roger-test-{port}", "train_ddp.py"]
interval = "1s"
grace = "5s"
evidence_hook = ["py-spy", "dump", "--pid", "{{pid}}"]
evidence_timeout = "15s"
allow_from_scratch = true
backoff_initial = "1s"
{extra_watch}
{extra}
"#
        ),
    );
    env
}

/// `roger watch` over the job, with the job's knobs in its environment.
pub(crate) fn watch(env: &Env, knobs: &[(&str, &str)], limit: Duration) -> crate::util::Run {
    let mut c = env.cmd(&["watch"]);
    c.env("ROGER_BIN", roger_bin());
    for (k, v) in knobs {
        c.env(k, v);
    }
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // A watch that overran is told to stop (it stops the job it owns).
    let guard = std::thread::spawn(move || {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(200));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").arg(pid.to_string()).status();
    });
    let out = child.wait_with_output().unwrap();
    guard.join().unwrap();
    crate::util::Run {
        argv: vec!["roger".into(), "watch".into()],
        out,
        listing: crate::util::listing(env.dir.path()),
    }
}

pub(crate) fn ledger(env: &Env) -> Vec<Value> {
    env.read("roger-ledger.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Straggler verdicts in a ledger.
pub(crate) fn stragglers(recs: &[Value]) -> Vec<&Value> {
    recs.iter()
        .filter(|r| r["kind"] == "verdict" && r["check"] == "straggler")
        .collect()
}

pub(crate) const STRAGGLER_RULE: &str =
    "[ranks]\nstraggler_window = \"2s\"\nstraggler_windows = 3\n";
