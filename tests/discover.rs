//! Issue 37 point 4: `init --log DIR` finds the log as a person would, in real folder layouts
//! built in a temp dir from real logs: at any depth, ranked (readable, loss and lr, newest,
//! longest), every candidate said with why, and roger's own files never taken.

use crate::util::{repo_root, Env};
use std::time::{Duration, SystemTime};

fn real(name: &str) -> Vec<u8> {
    std::fs::read(repo_root().join("tests/fixtures/real").join(name)).unwrap()
}

fn age(env: &Env, rel: &str, hours: u64) {
    let t = SystemTime::now() - Duration::from_secs(hours * 3600);
    let f = std::fs::File::options()
        .write(true)
        .open(env.path(rel))
        .unwrap();
    f.set_modified(t).unwrap();
}

/// A Hydra-style `outputs/<date>/<time>/` run four levels down, an older Lightning
/// `version_N/metrics.csv`, a newer log without lr, roger's own files and a README: the
/// detectron2 log is chosen, and every other one is said with what it lacks.
#[test]
fn the_best_log_is_found_at_any_depth_and_the_others_are_said() {
    let env = Env::new();
    env.write(
        "proj/outputs/2024-05-01/12-00-00/log.txt",
        real("kv-detectron2-maskrcnn-balloon.txt"),
    );
    env.write(
        "proj/lightning_logs/version_0/metrics.csv",
        real("csv-lightning-byol3d-spikes.csv"),
    );
    age(&env, "proj/lightning_logs/version_0/metrics.csv", 30);
    // Newer, but no lr: a torchtitan log.
    env.write(
        "proj/other/stdout",
        real("text-torchtitan-qwen3-14b-ansi.txt"),
    );
    env.write("proj/README.txt", "how to run this project\n");
    env.write("proj/roger.prom", "# HELP roger_step x\n");
    env.write(
        "proj/roger-ledger.jsonl",
        "{\"seq\":1,\"kind\":\"note\",\"prev\":\"0\",\"hash\":\"1\"}\n",
    );
    std::fs::create_dir_all(env.path("proj/.roger-queue")).unwrap();
    env.write("proj/.git/logs/HEAD.log", "0000 1111 x\n");
    age(&env, "proj/outputs/2024-05-01/12-00-00/log.txt", 1);

    let init = env.run(&["init", "--log", "proj", "--out", "-"]).expect(0);
    let said = init.stderr();
    for s in [
        "4 log(s) found under proj (3 readable), best first:",
        "* outputs/2024-05-01/12-00-00/log.txt (key-value; loss and lr;",
        "lightning_logs/version_0/metrics.csv (csv; loss and lr;",
        "written 1.2 days before the chosen",
        "other/stdout (text; loss, no lr;",
        "has loss, no lr where the chosen has loss and lr",
        "README.txt (not read: no format roger knows)",
        "using proj/outputs/2024-05-01/12-00-00/log.txt (it has loss and lr, it is the newest of those)",
        "passed over proj/roger-ledger.jsonl (a roger ledger)",
        "passed over proj/.roger-queue (roger's publish queue)",
    ] {
        assert!(said.contains(s), "{s:?} not said\n{}", init.report());
    }
    assert!(!said.contains("HEAD.log"), "{}", init.report());
    assert!(!said.contains("roger.prom"), "{}", init.report());
    assert!(
        init.stdout()
            .contains("log = \"proj/outputs/2024-05-01/12-00-00/log.txt\""),
        "{}",
        init.report()
    );
}

/// TensorBoard written by a real HF Trainer under `out/runs/<run>/`: the event folder is found
/// three levels down and taken as the log; nothing readable at all is an error naming what
/// was looked for and what was not readable.
#[test]
fn an_event_folder_deep_down_is_found_and_nothing_readable_is_said() {
    let env = Env::new();
    let src = repo_root().join("tests/fixtures/hf_tensorboard");
    let run = env.path("exp/out/runs/May01_12-00-00_host");
    std::fs::create_dir_all(&run).unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("events.out") {
            std::fs::copy(e.path(), run.join(e.file_name())).unwrap();
        }
    }
    let init = env.run(&["init", "--log", "exp", "--out", "-"]).expect(0);
    assert!(
        init.stderr()
            .contains("using exp/out/runs/May01_12-00-00_host (the only log found)"),
        "{}",
        init.report()
    );

    let env = Env::new();
    env.write("empty/notes.txt", "nothing here\n");
    let init = env.run(&["init", "--log", "empty", "--out", "-"]).expect(1);
    for s in [
        "notes.txt (not read: no format roger knows)",
        "no log found (searched 6 levels down",
        "1 named like a log but not readable as one",
    ] {
        assert!(init.stderr().contains(s), "{s:?}\n{}", init.report());
    }
}
