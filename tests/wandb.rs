//! `format = "wandb"` end to end: the real binary on Weights & Biases runs written at test
//! time by the real `wandb` package in offline mode (tests/fixtures/wandb/write_run.py; no
//! network). Missing, the tests skip with a reason, or fail under CI (.ci/run installs it).

use crate::critic::{check, json_out};
use crate::tensorboard::python_has;
use crate::util::{repo_root, Env};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The config the resume and kill tests judge with: W&B's own `_step`, the nested loss.
fn config(step: &str) -> String {
    format!(
        "[run]\nname = \"w\"\nlog = \"wandb\"\nformat = \"wandb\"\n\
         [metrics]\nstep = \"{step}\"\nloss = \"train/loss\"\nlr = \"lr\"\n\
         grad_norm = \"train/grad_norm\"\ntime = \"_timestamp\"\n\
         [[phase]]\nname = \"main\"\nfrom = 0\nwindow = 10\nloss = [0.5, 6.0]\n\
         grad_norm_max = 5.0\nstale = \"1h\"\n"
    )
}

/// Write a run into `env`'s `wandb/` with write_run.py.
fn write_run(env: &Env, args: &[&str]) {
    let st = Command::new("python3")
        .arg(repo_root().join("tests/fixtures/wandb/write_run.py"))
        .arg(".")
        .args(args)
        .current_dir(env.dir.path())
        .status()
        .unwrap();
    assert!(st.success(), "write_run.py {args:?}");
}

/// Run directories start a second apart in their names: a later launch gets a later one.
fn next_second() {
    std::thread::sleep(Duration::from_millis(1100));
}

fn has_wandb(test: &str) -> bool {
    python_has("wandb", test)
}

/// The run's datastores under `root`, oldest first.
fn datastores(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.ends_with("latest-run"))
        .collect();
    dirs.sort_by_key(|d| {
        let n = d.file_name().unwrap().to_string_lossy().into_owned();
        n.trim_start_matches("offline-").to_string()
    });
    dirs.iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap().flatten().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wandb"))
        .collect()
}

/// The committed run (tests/fixtures/wandb/normal, no `latest-run` link: the run directory
/// started last is the newest) under `wandb/`.
fn committed_run(env: &Env) -> PathBuf {
    let src = repo_root().join("tests/fixtures/wandb/normal");
    let dir = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir() && !p.ends_with("latest-run"))
        .unwrap();
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    env.write(
        &format!("wandb/{name}/run-normal01.wandb"),
        std::fs::read(dir.join("run-normal01.wandb")).unwrap(),
    )
}

/// Without the wandb package: `init` on the committed run, and a flipped byte in its middle
/// named on stderr (file, byte offset) while the rest is judged.
#[test]
fn the_committed_run_inits_and_a_corrupt_chunk_is_named() {
    let env = Env::new();
    let file = committed_run(&env);
    env.run(&["init", "--log", "wandb", "--out", "-"])
        .expect(0)
        .stderr_has("format: wandb")
        .stderr_has("loss <- \"train/loss\"")
        .stderr_has("read 150 samples, steps 0..149")
        .stdout_has("name = \"normal01\"");
    env.write(
        "roger.toml",
        config("_step").replace("\"1h\"", "\"100000d\""),
    );
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[10_040] ^= 0x55;
    std::fs::write(&file, &bytes).unwrap();
    let run = env
        .run(&["critic", "--once", "--json"])
        .expect(0)
        .stderr_has("roger: warning: skipped ./wandb/")
        .stderr_has("run-normal01.wandb:")
        .stderr_has("fails its CRC-32")
        .stderr_has("read on at byte offset 32768");
    assert_eq!(json_out(&run)["step"], 149, "read on after the damage");
}

/// `critic --once` goes on from its summary cache as the file grows (cut mid-record each
/// time) and judges as a read of the whole file does.
#[test]
fn critic_once_goes_on_from_its_cache_and_judges_as_a_full_read() {
    let env = Env::new();
    let file = committed_run(&env);
    let whole = std::fs::read(&file).unwrap();
    env.write(
        "roger.toml",
        config("_step").replace("\"1h\"", "\"100000d\""),
    );
    std::fs::write(&file, &whole[..20_000]).unwrap();
    env.run(&["critic", "--once"]);
    let checks = |v: &serde_json::Value| -> Vec<(String, String)> {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["status"].to_string(), c["reason"].to_string()))
            .collect()
    };
    for cut in [45_000, whole.len()] {
        let had = std::fs::metadata(&file).unwrap().len() as usize;
        env.append(&file.to_string_lossy(), &whole[had..cut]);
        let fast = env.run(&["critic", "--once", "--json"]);
        assert!(!fast.stderr().contains("not used"), "{}", fast.report());
        let full = env.run(&["critic", "--once", "--json", "--full-read"]);
        let (fast, full) = (json_out(&fast), json_out(&full));
        assert_eq!(fast["step"], full["step"], "cut {cut}");
        assert_eq!(checks(&fast), checks(&full), "cut {cut}");
    }
}

/// `init --log wandb/` picks the newest of two runs and maps its keys (the nested
/// `train/loss` too); the critic passes that run, and fails a newer run whose loss went NaN.
#[test]
fn init_detects_the_newest_run_and_the_critic_judges_it() {
    if !has_wandb("init_detects_the_newest_run_and_the_critic_judges_it") {
        return;
    }
    let env = Env::new();
    write_run(&env, &["--id", "older001", "--to", "100"]);
    next_second();
    write_run(&env, &["--id", "newest01", "--to", "150"]);
    env.run(&["init", "--log", "wandb/"])
        .expect(0)
        .stderr_has("W&B run newest01 (1 launch(es)); keys from wandb/offline-run-")
        .stderr_has("format: wandb (a W&B run datastore (150 history rows")
        .stderr_has("step <- \"_step\"")
        .stderr_has("loss <- \"train/loss\"")
        .stderr_has("grad_norm <- \"train/grad_norm\"")
        .stderr_has("lr <- \"lr\"")
        .stderr_has("time <- \"_timestamp\"")
        .stderr_has("read 150 samples, steps 0..149");
    let toml = env.read("roger.toml");
    for line in [
        "name = \"newest01\"",
        "log = \"wandb\"",
        "format = \"wandb\"",
        "loss = \"train/loss\"",
        "kind = \"cosine\"",
    ] {
        assert!(toml.contains(line), "{line}: {toml}");
    }
    let run = env.run(&["critic", "--once", "--json"]).expect(0);
    let v = json_out(&run);
    assert_eq!(v["step"], 149, "{v:#}");
    for c in ["loss", "lr", "grad_norm", "stale"] {
        assert_eq!(check(&v, c)["status"], "pass", "{c}: {v:#}");
    }
    next_second();
    write_run(
        &env,
        &["--id", "badloss1", "--to", "150", "--nan-from", "120"],
    );
    let run = env.run(&["critic", "--once", "--json"]).expect(2);
    let v = json_out(&run);
    let loss = check(&v, "loss");
    assert_eq!(loss["status"], "fail", "{v:#}");
    assert_eq!(loss["diverged_at"], 120, "{v:#}");
}

/// Offline, a resumed run (`wandb.init(id=..., resume="allow")`) writes a new run directory
/// per launch and counts `_step` from 0 again: read as one run, the steps go on and each row
/// counts once (the NaN from training step 100 is 20 rows in a row, not 20 + 40).
#[test]
fn an_offline_resume_continues_the_run() {
    if !has_wandb("an_offline_resume_continues_the_run") {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", config("_step"));
    write_run(&env, &["--id", "resumed1", "--resume", "--to", "60"]);
    next_second();
    write_run(
        &env,
        &[
            "--id",
            "resumed1",
            "--resume",
            "--from",
            "60",
            "--to",
            "120",
            "--nan-from",
            "100",
        ],
    );
    assert_eq!(
        datastores(&env.path("wandb")).len(),
        2,
        "one directory per launch"
    );
    let v = json_out(&env.run(&["critic", "--once", "--json"]).expect(2));
    assert_eq!(v["step"], 119, "{v:#}");
    let loss = check(&v, "loss");
    assert_eq!(loss["diverged_at"], 100, "{v:#}");
    let reason = loss["reason"].as_str().unwrap();
    assert!(reason.contains("20 sample(s) in a row"), "{reason}");
    // `init` reads the two launches as one run too.
    env.run(&["init", "--log", "wandb", "--out", "-"])
        .expect(0)
        .stderr_has("W&B run resumed1 (2 launch(es))")
        .stderr_has("read 120 samples, steps 0..119");
}

/// A run that went NaN and was resumed from an earlier checkpoint with the trainer's own
/// step: the steps the resume abandoned (60..79, NaN from 70) are dropped, the new launch's
/// rows for them judged once.
#[test]
fn a_resume_from_an_earlier_checkpoint_drops_the_abandoned_steps() {
    if !has_wandb("a_resume_from_an_earlier_checkpoint_drops_the_abandoned_steps") {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", config("step"));
    let first = ["--id", "ckpt0001", "--resume", "--user-step"];
    write_run(
        &env,
        &[&first[..], &["--to", "80", "--nan-from", "70"]].concat(),
    );
    let v = json_out(&env.run(&["critic", "--once", "--json"]).expect(2));
    assert_eq!(check(&v, "loss")["diverged_at"], 70, "{v:#}");
    next_second();
    write_run(
        &env,
        &[&first[..], &["--from", "60", "--to", "120"]].concat(),
    );
    let v = json_out(&env.run(&["critic", "--once", "--json"]).expect(0));
    assert_eq!(v["step"], 119, "{v:#}");
    assert_eq!(check(&v, "loss")["status"], "pass", "{v:#}");
}

/// The processes a run's writing started from `parent`: `program` run with `flag parent`
/// (wandb-core is told the script's pid with `--pid`, its system monitor wandb-core's with
/// `--parent-pid`; each in a session of its own).
fn children_named(program: &[u8], flag: &[u8], parent: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        let named = args.first().is_some_and(|a| a.ends_with(program));
        let ours = args
            .windows(2)
            .any(|w| w[0] == flag && w[1] == parent.to_string().as_bytes());
        if named && ours {
            pids.push(pid);
        }
    }
    pids
}

/// SIGKILL while logging (the script and wandb-core at once, as an OOM kill or a lost node
/// does): the file ends where wandb-core last wrote its block, its last record cut off. The
/// critic judges the rows before it with nothing reported; cut again inside a block (a torn
/// write), the same.
#[test]
fn a_run_killed_mid_write_is_read_to_its_last_whole_row() {
    if !has_wandb("a_run_killed_mid_write_is_read_to_its_last_whole_row") {
        return;
    }
    let env = Env::new();
    env.write("roger.toml", config("_step"));
    let mut writer = Command::new("python3")
        .arg(repo_root().join("tests/fixtures/wandb/write_run.py"))
        .args([".", "--id", "killed01", "--forever"])
        .current_dir(env.dir.path())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let file = env.path("wandb/latest-run/run-killed01.wandb");
    crate::watch::poll_until("three blocks written", Duration::from_secs(120), || {
        std::fs::metadata(&file).is_ok_and(|m| m.len() >= 3 * 32768)
    });
    let script = writer.id() as i32;
    let core = children_named(b"wandb-core", b"--pid", script);
    assert_eq!(core.len(), 1, "the script's wandb-core: {core:?}");
    let monitor = children_named(b"wandb-symon", b"--parent-pid", core[0]);
    for pid in core.iter().chain([script].iter()).chain(&monitor) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = writer.wait();
    // wandb-core is not our child to wait for: gone (or a zombie) is enough.
    crate::watch::poll_until("wandb-core gone", Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{}/stat", core[0]))
            .map_or(true, |s| s.contains(") Z "))
    });
    // Usually whole blocks only, the last record cut off; a flush just before the kill can
    // leave a piece of a block instead (the cut below tears a record either way).
    let len = std::fs::metadata(&file).unwrap().len();
    let judge = |what: &str| {
        let run = env
            .run(&["critic", "--once", "--json", "--full-read"])
            .expect(0);
        assert!(
            !run.stderr().contains("skipped"),
            "{what}: {}",
            run.report()
        );
        let v = json_out(&run);
        assert_eq!(check(&v, "loss")["status"], "pass", "{what}: {v:#}");
        v["step"].as_u64().unwrap()
    };
    let last = judge("killed");
    assert!(last > 100, "{last}");
    // Cut inside the last block (a torn write): the rows before the cut.
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(len - 32768 + 5000).unwrap();
    let cut = judge("cut inside a block");
    assert!(cut < last && cut > 50, "{cut} vs {last}");
}

/// The daemon tails a run's datastore as it grows (pieces of blocks, a record cut off at
/// each end): each tick reads only the bytes new since the last one (and the record it had
/// left unfinished), and every row is read once.
#[test]
fn the_daemon_reads_only_new_bytes_of_a_growing_datastore() {
    if !has_wandb("the_daemon_reads_only_new_bytes_of_a_growing_datastore") {
        return;
    }
    let gen = Env::new();
    write_run(&gen, &["--id", "growing1", "--to", "600"]);
    let src = datastores(&gen.path("wandb")).remove(0);
    let whole = std::fs::read(&src).unwrap();
    let env = Env::new();
    env.write("roger.toml", config("_step"));
    let rel = format!(
        "wandb/{}/run-growing1.wandb",
        src.parent().unwrap().file_name().unwrap().to_string_lossy()
    );
    let cuts = [whole.len() * 2 / 5, whole.len() * 3 / 4, whole.len()];
    env.write(&rel, &whole[..cuts[0]]);
    let out = std::fs::File::create(env.path("daemon.out")).unwrap();
    let mut daemon = env
        .cmd(&["critic", "--daemon", "--interval", "200ms"])
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // "(+N samples, B B read)" of each summary line.
    let ticks = || -> Vec<(u64, u64)> {
        env.read("daemon.out")
            .lines()
            .filter_map(|l| {
                let (_, rest) = l.split_once("(+")?;
                let (n, rest) = rest.split_once(" samples, ")?;
                let (b, _) = rest.split_once(" B read")?;
                Some((n.parse().ok()?, b.parse().ok()?))
            })
            .collect()
    };
    crate::watch::poll_until("the first tick", Duration::from_secs(60), || {
        ticks().len() == 1
    });
    for w in cuts.windows(2) {
        let before = ticks().len();
        env.append(&rel, &whole[w[0]..w[1]]);
        crate::watch::poll_until("a tick on the new bytes", Duration::from_secs(60), || {
            ticks().len() > before
        });
        // A tick that caught the append half done is followed by one for the rest.
        std::thread::sleep(Duration::from_secs(1));
        let read: u64 = ticks()[before..].iter().map(|t| t.1).sum();
        let new = (w[1] - w[0]) as u64;
        // Only the record left unfinished at each cut (a history row, ~200 bytes, or a
        // system-metrics record) is read again.
        assert!(
            read >= new && read <= new + 8192,
            "{read} B read for {new} new bytes: {:?}",
            ticks()
        );
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(
        crate::watch::wait_child(&mut daemon, Duration::from_secs(30)).code(),
        Some(0)
    );
    let samples: u64 = ticks().iter().map(|t| t.0).sum();
    // Every row once, and the end the run's clean exit declares (a sample at its last step).
    assert_eq!(samples, 601, "every row once: {:?}", ticks());
}

/// Without the wandb package: the committed run called `finish()` (its datastore ends with
/// the exit record), so judged hours and weeks after its last row it is finished at its last
/// step, not stale, and `status` and `report` say the same.
#[test]
fn a_run_that_exited_cleanly_is_finished_not_stale() {
    let env = Env::new();
    committed_run(&env);
    env.write("roger.toml", config("_step"));
    // Written 2026-12-06 00:58 UTC (its directory's name): three hours and four weeks later.
    for now in ["2026-12-06T04:00:00Z", "2027-01-03T00:00:00Z"] {
        let run = env.run(&["critic", "--once", "--json", "--now", now]);
        let v = json_out(&run);
        let stale = check(&v, "stale");
        assert_eq!(stale["status"], "pass", "{now}: {}", run.report());
        let reason = stale["reason"].as_str().unwrap();
        assert!(reason.starts_with("finished at step 149"), "{reason}");
        for cmd in ["status", "report"] {
            let out = env.run(&[cmd, "--json", "--now", now]);
            let h: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
            assert_eq!(
                h["headline"]["finished"].as_bool(),
                Some(true),
                "{cmd}: {}",
                out.report()
            );
        }
    }
    // Cut before the exit record (a run killed mid-write): no end, so stale after an hour.
    let file = datastores(&env.dir.path().join("wandb"))[0].clone();
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..45_000]).unwrap();
    let run = env.run(&[
        "critic",
        "--once",
        "--json",
        "--now",
        "2026-12-06T04:00:00Z",
    ]);
    let stale = check(&json_out(&run), "stale").clone();
    assert_eq!(stale["status"], "fail", "{}", run.report());
}
