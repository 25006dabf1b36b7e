//! The conventions monitors and shells rely on (issue 16 item 4): usage errors of judging
//! commands exit 3, `-q` everywhere, no GPU is never "ok", retention is opt-in, a second user
//! can publish after `sudo roger publish`, an unwritable ledger stops a publish before the
//! copy, format hints, too-little-data words, durations need a unit.

use crate::publish::torch_zip;
use crate::util::{repo_root, roger_bin, Env};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;

#[test]
fn usage_errors_of_judging_commands_are_unknown_not_critical() {
    let env = Env::new();
    for argv in [
        &["critic", "--bogus"][..],
        &["-q", "critic", "--once", "--daemon"],
        &["--config", "x.toml", "probe", "--samples", "2"],
        &["bench", "--device", "tpu"],
        &["check", "extra"],
        &["hygiene", "disk", "--dry-run"],
        &["hygiene", "regress"],
        &["quarantine", "prove", "id"],
        &["status", "--bogus"],
        // report judges (its 2 means "stopped"); a global option's value is no subcommand.
        &["report", "--bogus"],
        &["--color", "never", "critic", "--bogus"],
        &["quarantine", "scan", "--bogus"],
    ] {
        let run = env.run(argv);
        assert_eq!(run.code(), 3, "{argv:?}\n{}", run.report());
    }
    for argv in [
        &["publish"][..],
        &["hygiene", "clean", "--keep-original"],
        &["quarantine", "add", "ck.pt"],
        &["ledger", "tail", "-n", "x"],
        &["init", "--bogus"],
        &["frobnicate"],
    ] {
        let run = env.run(argv);
        assert_eq!(run.code(), 2, "{argv:?}\n{}", run.report());
    }
    env.run(&["--help"]).expect(0);
}

#[test]
fn quiet_silences_warnings_on_every_command() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"q\"\nlog = \"train.jsonl\"\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [0.1, 20.0]\nstale = \"1h\"\n",
    );
    env.write(
        "train.jsonl",
        "{\"step\": 1, \"loss\": 5.0}\nnot json\n{\"step\": 2, \"loss\": 4.9}\n",
    );
    env.run(&["critic", "--once"])
        .stderr_has("roger: warning: skipped");
    let quiet = env.run(&["-q", "critic", "--once"]);
    assert_eq!(quiet.stderr(), "", "{}", quiet.report());
    // init's notes too; errors stay.
    let log = repo_root().join("tests/fixtures/lightning_metrics.csv");
    let q = env.run(&[
        "init",
        "-q",
        "--log",
        log.to_str().unwrap(),
        "--out",
        "i.toml",
    ]);
    assert_eq!(q.code(), 0, "{}", q.report());
    assert_eq!(q.stderr(), "", "{}", q.report());
    env.run(&[
        "-q",
        "init",
        "--log",
        log.to_str().unwrap(),
        "--out",
        "i.toml",
    ])
    .expect(1)
    .stderr_has("roger: error:");
}

#[test]
fn no_gpu_is_never_ok_unless_the_config_says_there_is_none() {
    let env = Env::new();
    // Free space is not what this test is about: disk limits low enough never to warn.
    const DISK: &str = "[disk]\nwarn_free = \"1KiB\"\nfail_free = \"1KiB\"\n";
    env.write("roger.toml", format!("[run]\nname = \"g\"\n{DISK}"));
    let probe = env.run(&["probe", "--json", "--no-ledger"]);
    let v: serde_json::Value = serde_json::from_str(&probe.stdout()).unwrap();
    if !v["gpus"].as_array().unwrap().is_empty() {
        // Not a missing component: this machine differs (CI machines have no GPU).
        eprintln!("SKIPPED no_gpu_is_never_ok: this machine has a GPU");
        return;
    }
    assert_eq!(probe.code(), 3, "{}", probe.report());
    assert_eq!(v["status"], "unknown");
    assert!(
        probe.stdout().contains("no GPU visible"),
        "{}",
        probe.report()
    );
    env.write(
        "roger.toml",
        format!("[run]\nname = \"g\"\n{DISK}[gpu]\nsource = \"none\"\n"),
    );
    let probe = env.run(&["probe", "--json", "--no-ledger"]);
    assert_eq!(probe.code(), 0, "{}", probe.report());

    env.write("roger.toml", format!("[run]\nname = \"g\"\n{DISK}"));
    let bench = env.run(&["bench", "--sizes", "32", "--iters", "1", "--no-ledger"]);
    if bench.stdout().contains("cuBLAS") || bench.stdout().contains("GPU ") {
        eprintln!("SKIPPED bench part: a GPU driver is present");
        return;
    }
    bench
        .expect(3)
        .stderr_has("measured the CPU, not a GPU")
        .stdout_has("bench: unknown");
    env.run(&[
        "bench",
        "--device",
        "cpu",
        "--sizes",
        "32",
        "--iters",
        "1",
        "--no-ledger",
    ])
    .expect(0);
}

fn publish_config(env: &Env, extra: &str) {
    env.write(
        "roger.toml",
        format!("[run]\nname = \"p\"\ncheckpoint_dir = \"ck\"\n{extra}"),
    );
}

#[test]
fn retention_is_opt_in_and_says_what_it_pruned() {
    let env = Env::new();
    publish_config(&env, "");
    for step in 1..=5 {
        let name = format!("ckpt-{step}.pt");
        env.write(&name, torch_zip(1000, step as u8));
        let run = env.run(&["publish", &name]).expect(0);
        assert!(!run.stdout().contains("pruned"), "{}", run.report());
    }
    let kept = std::fs::read_dir(env.path("ck"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "pt")
        })
        .count();
    assert_eq!(kept, 5, "no [publish] section: nothing pruned");
    publish_config(&env, "[publish]\nkeep_last = 2\n");
    env.write("ckpt-6.pt", torch_zip(1000, 6));
    env.run(&["publish", "ckpt-6.pt"])
        .expect(0)
        .stdout_has("pruned")
        .stdout_has("ckpt-1.pt");
    assert!(!env.path("ck/ckpt-4.pt").exists());
    assert!(env.path("ck/ckpt-5.pt").exists());
}

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        == 0
}

fn chown_tree(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
    if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

/// The temp dir itself must be reachable by the second user: false (through `util::missing`)
/// when a directory above it is not.
fn open_up(env: &Env, test: &str) -> bool {
    let mut p = env.dir.path().to_path_buf();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    while let Some(parent) = p.parent() {
        if parent == Path::new("/") {
            break;
        }
        let mode = std::fs::metadata(parent).unwrap().permissions().mode();
        if mode & 0o001 == 0 {
            crate::util::missing(
                test,
                &format!(
                    "a temp dir other users can reach ({} is not)",
                    parent.display()
                ),
                "set TMPDIR to a directory whose parents are world-searchable",
            );
            return false;
        }
        p = parent.to_path_buf();
    }
    true
}

/// Root, to run commands as a second user; when not, says so through `util::missing`.
fn root_for(test: &str) -> bool {
    let root = is_root();
    if !root {
        crate::util::missing(test, "root (to switch users)", "run the tests as root");
    }
    root
}

fn as_nobody(env: &Env, args: &[&str]) -> crate::util::Run {
    let mut c = env.cmd(args);
    c.uid(NOBODY).gid(NOBODY).env("HOME", env.dir.path());
    env.run_cmd(c, args)
}

#[test]
fn a_second_user_can_publish_after_sudo_roger_publish() {
    const TEST: &str = "a_second_user_can_publish_after_sudo_roger_publish";
    if !root_for(TEST) {
        return;
    }
    if std::fs::metadata(roger_bin()).unwrap().permissions().mode() & 0o001 == 0 {
        crate::util::missing(
            TEST,
            "a roger binary other users can execute",
            "build where other users can run target/debug/roger (umask 022)",
        );
        return;
    }
    let env = Env::new();
    if !open_up(&env, TEST) {
        return;
    }
    publish_config(&env, "");
    env.write("ckpt-1.pt", torch_zip(1000, 1));
    env.write("ckpt-2.pt", torch_zip(1000, 2));
    std::fs::create_dir(env.path("ck")).unwrap();
    chown_tree(env.dir.path(), NOBODY);
    // "sudo roger publish": root publishes into the user's directory first.
    env.run(&["publish", "ckpt-1.pt"]).expect(0);
    let lock = env.path("ck/.roger-publish.lock");
    let lock = if lock.exists() {
        lock
    } else {
        std::fs::read_dir(env.path("ck"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains("lock"))
            .expect("a lock file")
    };
    assert_eq!(
        std::fs::metadata(&lock).unwrap().uid(),
        NOBODY,
        "lock given to the dir's owner"
    );
    // Was: "opening .../lock: Permission denied" for every later publish by the user.
    as_nobody(&env, &["publish", "ckpt-2.pt"]).expect(0);
    assert!(env.path("ck/ckpt-2.pt").exists());
}

#[test]
fn an_unwritable_ledger_stops_the_publish_before_the_copy() {
    const TEST: &str = "an_unwritable_ledger_stops_the_publish_before_the_copy";
    if !root_for(TEST) {
        return;
    }
    let env = Env::new();
    if !open_up(&env, TEST) {
        return;
    }
    publish_config(&env, "");
    env.write("ckpt-1.pt", torch_zip(1000, 1));
    std::fs::create_dir(env.path("ck")).unwrap();
    chown_tree(env.dir.path(), NOBODY);
    // The ledger belongs to root and is read-only for everyone else.
    env.write("roger-ledger.jsonl", "");
    std::fs::set_permissions(
        env.path("roger-ledger.jsonl"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::os::unix::fs::lchown(env.path("roger-ledger.jsonl"), Some(0), Some(0)).unwrap();
    as_nobody(&env, &["publish", "ckpt-1.pt"])
        .expect(1)
        .stderr_has("nothing was published")
        .stderr_has("roger-ledger.jsonl");
    let left: Vec<String> = std::fs::read_dir(env.path("ck"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.contains("lock"))
        .collect();
    assert!(left.is_empty(), "nothing copied: {left:?}");
}

#[test]
fn a_log_in_another_format_gets_a_hint_and_critic_format_overrides() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"h\"\nlog = \"metrics.csv\"\nformat = \"jsonl\"\n[metrics]\nloss = \"train_loss\"\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [0.1, 20.0]\nstale = \"1h\"\n",
    );
    env.write(
        "metrics.csv",
        "step,train_loss\n1,5.0\n2,4.9\n3,4.8\n4,4.7\n5,4.6\n6,4.5\n",
    );
    env.run(&["critic", "--once"])
        .expect(3)
        .stderr_has("this looks like csv")
        .stderr_has("set [run] format = \"csv\"");
    env.run(&["critic", "--once", "--format", "csv"])
        .expect(0)
        .stdout_has("PASS");
}

#[test]
fn a_declared_check_with_too_little_data_says_so() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"e\"\nlog = \"t.jsonl\"\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [0.1, 20.0]\nstale = \"1h\"\n[critic]\neval_window = 3\n",
    );
    env.write(
        "t.jsonl",
        "{\"step\": 1, \"loss\": 5.0, \"eval_loss\": 5.1}\n{\"step\": 2, \"loss\": 4.9}\n{\"step\": 3, \"loss\": 4.8}\n",
    );
    let run = env.run(&["critic", "--once", "--json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(run.stdout().trim()).unwrap();
    let eval = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "eval")
        .unwrap_or_else(|| panic!("eval listed as not declared\n{}", run.report()));
    assert!(
        eval["reason"]
            .as_str()
            .unwrap()
            .contains("1 eval (loss 5.1 at step 1): overfitting shows from the second"),
        "{eval}"
    );
    assert_eq!(eval["unjudged"], "waiting", "{eval}");
    assert!(!v["skipped"].as_array().unwrap().iter().any(|s| s == "eval"));
}

#[test]
fn a_duration_without_a_unit_is_an_error_naming_the_key() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"d\"\n[[phase]]\nname = \"all\"\nfrom = 0\nstale = \"30\"\n",
    );
    env.run(&["check"])
        .expect(3)
        .stderr_has("roger.toml:6:")
        .stderr_has("has no unit")
        .stderr_has("(key `stale`)");
    env.write("roger.toml", "[run]\nname = \"d\"\n[watch]\ngrace = 30\n");
    env.run(&["check"]).expect(3).stderr_has("(key `grace`)");
}
