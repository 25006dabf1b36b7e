//! Every writer of roger on a drvfs/9p-like filesystem (WSL2's `/mnt/c`): the power-cut FUSE
//! filesystem answering EINVAL to a directory fsync and EPERM to a hard link. Each command
//! must do its work, and say once (not once per directory) that directory fsync is missing
//! here; writers that never ask for a directory fsync say nothing.

use super::fs::Mounted;
use super::state::State;
use super::Rig;
use crate::publish::torch_zip;
use crate::util::{roger_bin, Run};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WARNING: &str = "is not supported here (EINVAL; drvfs/9p?)";

/// A rig with its disk mounted drvfs-like, or `None` (with a SKIPPED line) without FUSE.
fn drvfs(test: &str) -> Option<(Rig, Mounted)> {
    let rig = Rig::new(test)?;
    let m = rig.mount(State::drvfs());
    Some((rig, m))
}

fn warnings(run: &Run) -> usize {
    run.stderr().matches(WARNING).count()
}

/// `roger ARGS` succeeded (exit `code`) and warned about directory fsync `n` times.
fn check(run: Run, code: i32, n: usize) -> Run {
    let run = run.expect(code);
    assert_eq!(
        warnings(&run),
        n,
        "directory fsync warnings\n{}",
        run.report()
    );
    run
}

const CRITIC: &str = r#"
[run]
name = "fake"
log = "train.jsonl"
checkpoint_dir = "disk/ckpt"
ledger = "disk/run/roger-ledger.jsonl"
[gpu]
source = "none"
[export]
textfile = "disk/roger.prom"
[[phase]]
name = "all"
from = 0
loss = [1.0, 6.0]
"#;

fn training_log(rig: &Rig) {
    rig.write("train.jsonl", crate::util::steady_log());
    rig.write("roger.toml", CRITIC);
}

#[test]
fn drvfs_ledger_append_warns_once() {
    let Some((rig, _m)) = drvfs("drvfs_ledger_append_warns_once") else {
        return;
    };
    // A new ledger in two new directories: three directory fsyncs, one warning.
    check(
        rig.roger(&["ledger", "--ledger", "disk/a/b/l.jsonl", "note", "first"]),
        0,
        1,
    );
    // Appending to an existing ledger fsyncs no directory.
    check(
        rig.roger(&["ledger", "--ledger", "disk/a/b/l.jsonl", "note", "second"]),
        0,
        0,
    );
    check(
        rig.roger(&["ledger", "--ledger", "disk/a/b/l.jsonl", "verify"]),
        0,
        0,
    );
}

#[test]
fn drvfs_publish_and_retention_warn_once() {
    let Some((rig, _m)) = drvfs("drvfs_publish_and_retention_warn_once") else {
        return;
    };
    rig.write(
        "roger.toml",
        "[run]\nname = \"r\"\ncheckpoint_dir = \"disk/ck\"\nledger = \"disk/ck/roger-ledger.jsonl\"\n[publish]\nkeep_last = 1\n",
    );
    rig.write("v1/ckpt-1.pt", torch_zip(10_000, 1));
    rig.write("v2/ckpt-2.pt", torch_zip(10_000, 2));
    check(rig.roger(&["publish", "v1/ckpt-1.pt"]), 0, 1);
    // The second prunes the first (retention's directory fsync).
    check(rig.roger(&["publish", "v2/ckpt-2.pt"]), 0, 1);
    assert!(!rig.disk().join("ck/ckpt-1.pt").exists());
    let latest = std::fs::read_to_string(rig.disk().join("ck/latest.json")).unwrap();
    assert!(latest.contains("ckpt-2.pt"), "{latest}");
    check(rig.roger(&["publish", "--verify"]), 0, 0);
}

#[test]
fn drvfs_hygiene_disk_prune_warns_once() {
    let Some((rig, _m)) = drvfs("drvfs_hygiene_disk_prune_warns_once") else {
        return;
    };
    rig.write(
        "roger.toml",
        "[run]\nname = \"r\"\ncheckpoint_dir = \"disk/ck\"\nledger = \"disk/ck/roger-ledger.jsonl\"\n[publish]\nkeep_last = 1\n[gpu]\nsource = \"none\"\n[disk]\nwarn_free = \"1KB\"\nfail_free = \"0\"\nprune_goal_free = \"1000TB\"\n",
    );
    for name in ["ckpt-1.bin", "ckpt-2.bin"] {
        rig.write(&format!("out/{name}"), format!("weights of {name}"));
        check(
            rig.roger(&["publish", &format!("out/{name}"), "--no-prune"]),
            0,
            1,
        );
    }
    let r = rig.roger(&["hygiene", "disk", "--prune"]);
    assert_eq!(warnings(&r), 1, "{}", r.report());
    assert!(!r.stderr().contains("error"), "{}", r.report());
    assert!(!rig.disk().join("ck/ckpt-1.bin").exists(), "{}", r.report());
    assert!(
        rig.disk().join("ck/ckpt-2.bin").exists(),
        "latest.json points to it"
    );
}

/// Publishing over the name latest.json points at keeps the old checkpoint under a second
/// name first (`place::link_prev`); drvfs refuses the hard link, so it is a verified copy (it
/// failed with "linking ...: Operation not permitted"). A file and an HF-style directory.
#[test]
fn drvfs_publish_over_the_current_name() {
    let Some((rig, _m)) = drvfs("drvfs_publish_over_the_current_name") else {
        return;
    };
    rig.write(
        "roger.toml",
        "[run]\nname = \"r\"\ncheckpoint_dir = \"disk/ck\"\nledger = \"disk/ck/roger-ledger.jsonl\"\n",
    );
    rig.write("v1/model.pt", torch_zip(10_000, 1));
    rig.write("v2/model.pt", torch_zip(10_000, 2));
    check(rig.roger(&["publish", "v1/model.pt"]), 0, 1);
    check(rig.roger(&["publish", "v2/model.pt"]), 0, 1);
    check(rig.roger(&["publish", "--verify"]), 0, 0);
    assert_eq!(
        std::fs::read(rig.disk().join("ck/model.pt")).unwrap(),
        torch_zip(10_000, 2)
    );
    rig.write("d1/checkpoint-5/model.pt", torch_zip(2_000, 3));
    rig.write("d1/checkpoint-5/sub/opt.bin", b"state one");
    rig.write("d2/checkpoint-5/model.pt", torch_zip(2_000, 4));
    rig.write("d2/checkpoint-5/sub/opt.bin", b"state two");
    check(rig.roger(&["publish", "d1/checkpoint-5"]), 0, 1);
    check(rig.roger(&["publish", "d2/checkpoint-5"]), 0, 1);
    check(rig.roger(&["publish", "--verify"]), 0, 0);
    assert_eq!(
        std::fs::read(rig.disk().join("ck/checkpoint-5/sub/opt.bin")).unwrap(),
        b"state two"
    );
    let left: Vec<String> = crate::publish::names_in(&rig.disk().join("ck"))
        .into_iter()
        .filter(|n| n.starts_with(".roger-prev-"))
        .collect();
    assert!(left.is_empty(), "twins left behind: {left:?}");
}

#[test]
fn drvfs_quarantine_add_and_release_work() {
    let Some((rig, _m)) = drvfs("drvfs_quarantine_add_and_release_work") else {
        return;
    };
    let ck = rig.disk().join("ck.pt");
    std::fs::write(&ck, b"suspect bytes").unwrap();
    let q = ["--dir", "disk/q", "--ledger", "disk/l.jsonl"];
    let add: Vec<&str> = ["quarantine", "add", "disk/ck.pt", "--reason", "nan at 500"]
        .into_iter()
        .chain(q)
        .collect();
    check(rig.roger(&add), 0, 1);
    assert!(!ck.exists());
    let ids: Vec<String> = std::fs::read_dir(rig.disk().join("q"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let item = rig.disk().join("q").join(&ids[0]);
    assert_eq!(std::fs::read(item.join("ck.pt")).unwrap(), b"suspect bytes");
    assert!(std::fs::read_to_string(item.join("meta.json"))
        .unwrap()
        .contains("nan at 500"));
    let release: Vec<&str> = [
        "quarantine",
        "release",
        &ids[0],
        "--force",
        "--reason",
        "ok",
    ]
    .into_iter()
    .chain(q)
    .collect();
    check(rig.roger(&release), 0, 1);
    assert_eq!(std::fs::read(&ck).unwrap(), b"suspect bytes");
}

#[test]
fn drvfs_hygiene_clean_in_place_keeps_a_copy_where_links_are_refused() {
    let Some((rig, _m)) =
        drvfs("drvfs_hygiene_clean_in_place_keeps_a_copy_where_links_are_refused")
    else {
        return;
    };
    let log = rig.disk().join("log.txt");
    let dirty = "\x1b[32mstep 1\x1b[0m\n 5%\r100%\n";
    std::fs::write(&log, dirty).unwrap();
    check(
        rig.roger(&["hygiene", "clean", "disk/log.txt", "--in-place"]),
        0,
        1,
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "step 1\n100%\n");
    assert_eq!(crate::publish::names_in(&rig.disk()), ["log.txt"]);
    // Kept: the copy standing in for the hard link holds the original bytes.
    std::fs::write(&log, dirty).unwrap();
    check(
        rig.roger(&[
            "hygiene",
            "clean",
            "disk/log.txt",
            "--in-place",
            "--keep-original",
        ]),
        0,
        1,
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "step 1\n100%\n");
    assert_eq!(
        std::fs::read_to_string(rig.disk().join("log.txt.orig")).unwrap(),
        dirty
    );
}

#[test]
fn drvfs_report_and_probe_record_write_their_files() {
    let Some((rig, _m)) = drvfs("drvfs_report_and_probe_record_write_their_files") else {
        return;
    };
    training_log(&rig);
    check(rig.roger(&["ledger", "note", "a note"]), 0, 1);
    // The page is atomic, not durable: no directory fsync asked for, nothing to say.
    let r = rig.roger(&["report", "--out", "disk/night.html"]);
    assert_eq!(warnings(&r), 0, "{}", r.report());
    assert!(r.code() != 3, "{}", r.report());
    let page = std::fs::read_to_string(rig.disk().join("night.html")).unwrap();
    assert!(page.contains("<html"), "{}", r.report());
    // A recording is durable: file and directory fsync.
    let fixture = crate::probe::fixture("gpu/h100_throttling.json");
    let args = [
        "probe",
        "--replay",
        &fixture,
        "--record",
        "disk/rec.json",
        "--samples",
        "2",
        "--every",
        "10ms",
    ];
    let run = crate::util::Run {
        argv: args.iter().map(|s| s.to_string()).collect(),
        out: {
            let mut c = probe_cmd(&rig, &args);
            c.output().unwrap()
        },
        listing: String::new(),
    };
    check(run, 0, 1);
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rig.disk().join("rec.json")).unwrap())
            .unwrap();
    assert_eq!(rec["snapshots"].as_array().unwrap().len(), 2);
    assert_eq!(
        crate::publish::names_in(&rig.disk()),
        ["night.html", "rec.json", "run"]
    );
}

/// `roger probe ARGS` with the machine-dependent inputs pinned, as tests/probe.rs does.
fn probe_cmd(rig: &Rig, args: &[&str]) -> Command {
    rig.write("kmsg.txt", "");
    rig.write(
        "meminfo",
        "MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
    );
    rig.write(
        "version",
        "Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)\n",
    );
    let mut c = Command::new(roger_bin());
    c.args(args)
        .current_dir(rig.dir.path())
        .env_remove("ROGER_CONFIG")
        .env_remove("RUST_LOG")
        .env_remove("WSL_DISTRO_NAME")
        .env("ROGER_KMSG", rig.path("kmsg.txt"))
        .env("ROGER_MEMINFO", rig.path("meminfo"))
        .env(
            "ROGER_MOUNTINFO",
            crate::probe::fixture("mountinfo/native_ext4.txt"),
        )
        .env("ROGER_PROC_VERSION", rig.path("version"))
        .stdin(Stdio::null());
    c
}

#[test]
fn drvfs_critic_keeps_its_summary_cache() {
    let Some((rig, _m)) = drvfs("drvfs_critic_keeps_its_summary_cache") else {
        return;
    };
    training_log(&rig);
    let cache = rig.path("xdg-cache");
    let env = [("XDG_CACHE_HOME", cache.to_str().unwrap())];
    // The first check files into a new ledger (directory fsyncs: one warning) and keeps its
    // summary cache beside it (atomic only).
    let first = rig.roger_with(&["critic", "--once"], &env);
    assert_eq!(first.code(), 0, "{}", first.report());
    assert_eq!(warnings(&first), 1, "{}", first.report());
    let cache_file = rig.disk().join("run/roger-ledger.jsonl.critic-cache");
    assert!(cache_file.is_file(), "{}", first.report());
    assert!(
        !first.stderr().contains("summary cache not kept"),
        "{}",
        first.report()
    );
    // The log grows: the next check goes on from the cache.
    rig.write(
        "train.jsonl",
        std::fs::read_to_string(rig.path("train.jsonl")).unwrap()
            + "{\"step\": 31, \"time\": 1700000031, \"loss\": 4.69, \"tokens_per_s\": 5000}\n",
    );
    let second = rig.roger_with(&["critic", "--once"], &env);
    assert_eq!(second.code(), first.code(), "{}", second.report());
    assert_eq!(warnings(&second), 0, "{}", second.report());
    assert!(!second.stderr().contains("not used"), "{}", second.report());
}

#[test]
fn drvfs_critic_daemon_exports_its_textfile_and_warns_once() {
    let Some((rig, _m)) = drvfs("drvfs_critic_daemon_exports_its_textfile_and_warns_once") else {
        return;
    };
    training_log(&rig);
    let err = std::fs::File::create(rig.path("daemon.err")).unwrap();
    let mut daemon = Command::new(roger_bin())
        .args(["critic", "--daemon", "--interval", "100ms"])
        .current_dir(rig.dir.path())
        .env_remove("ROGER_CONFIG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    let prom = rig.disk().join("roger-critic.prom");
    let until = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&prom).is_ok_and(|t| t.contains("roger_check_status")) {
        assert!(Instant::now() < until, "no textfile after 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A few more ticks (each rewrites the textfile), then stop it.
    std::thread::sleep(Duration::from_millis(600));
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    let status = daemon.wait().unwrap();
    let stderr = std::fs::read_to_string(rig.path("daemon.err")).unwrap();
    assert!(status.success(), "{status}\n{stderr}");
    assert_eq!(stderr.matches(WARNING).count(), 1, "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
    // No temporary left beside the textfile.
    let left: Vec<String> = crate::publish::names_in(&rig.disk())
        .into_iter()
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
