//! The command line as users meet it: help, completions, config errors.

use crate::util::{repo_root, Env};

#[test]
fn help_is_real() {
    let env = Env::new();
    env.run(&["--help"])
        .expect(0)
        .stdout_has("Exit codes")
        .stdout_has("ledger");
    env.run(&["ledger", "--help"])
        .expect(0)
        .stdout_has("verify");
    env.run(&["frobnicate"]).expect(2);
}

#[test]
fn completions_for_each_shell() {
    let env = Env::new();
    env.run(&["completions", "bash"])
        .expect(0)
        .stdout_has("_roger()");
    env.run(&["completions", "zsh"])
        .expect(0)
        .stdout_has("#compdef roger");
    env.run(&["completions", "fish"])
        .expect(0)
        .stdout_has("complete -c roger");
    // Subcommands are built lazily on a normal run; completions must still see the whole
    // tree, nested subcommands and their arguments included.
    env.run(&["completions", "bash"])
        .expect(0)
        .stdout_has("roger__subcmd__help__subcmd__hygiene,clean)")
        .stdout_has("roger__subcmd__quarantine__subcmd__add)")
        .stdout_has("--full-read");
}

/// roger runs under sudo and sends signals: it is a position-independent executable (ASLR for
/// its own code too, as Debian's and Fedora's hardening require), linked as rustc links it.
#[test]
fn the_binary_is_a_pie() {
    let elf = std::fs::read(crate::util::roger_bin()).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF");
    let e_type = u16::from_le_bytes([elf[16], elf[17]]);
    assert_eq!(
        e_type, 3,
        "ET_DYN (a PIE) expected, got {e_type} (2 = position-dependent)"
    );
    let interp = elf.windows(b"ld-linux".len()).any(|w| w == b"ld-linux");
    assert!(interp, "a PIE executable names its program interpreter");
}

/// A closed pipe on stdout is an error the command handles, not a SIGPIPE death.
#[test]
fn output_into_a_closed_pipe_ends_with_an_exit_code_not_a_signal() {
    use std::os::fd::FromRawFd;
    let env = Env::new();
    let cfg = repo_root().join("roger.example.toml");
    for args in [
        &["--version"][..],
        &["--config", cfg.to_str().unwrap(), "check"],
    ] {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills two descriptors we then own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fds[0] and fds[1] are open and owned by nobody else.
        let (read, write) = unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        };
        drop(read);
        let mut c = env.cmd(args);
        let out = c
            .stdout(std::process::Stdio::from(write))
            .output()
            .expect("spawn roger");
        assert!(
            out.status.code().is_some(),
            "{args:?}: {:?} (killed by SIGPIPE?) {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("panicked"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Started with stdout closed, roger opens /dev/null in its place: a file it opens and keeps
/// open (the daemon's training log) must not become its stdout and receive its lines.
#[test]
fn a_closed_stdout_does_not_make_the_training_log_stdout() {
    use std::os::unix::process::CommandExt;
    let env = Env::new();
    let text = std::fs::read_to_string(repo_root().join("roger.example.toml"))
        .unwrap()
        .replace("examples/train_log.jsonl", "train_log.jsonl")
        .replace("examples/roger-ledger.jsonl", "roger-ledger.jsonl");
    env.write("roger.toml", text);
    let log = std::fs::read_to_string(repo_root().join("examples/train_log.jsonl")).unwrap();
    env.write("train_log.jsonl", &log);
    let mut c = env.cmd(&["critic", "--daemon", "--interval", "100ms"]);
    // SAFETY: close(2) between fork and exec, nothing else runs in the child.
    unsafe {
        c.pre_exec(|| {
            libc::close(1);
            Ok(())
        });
    }
    let mut child = c.stderr(std::process::Stdio::null()).spawn().unwrap();
    // The daemon's first verdict is filed (and printed) on its first tick.
    let t0 = std::time::Instant::now();
    while !env.read("roger-ledger.jsonl").contains("\"verdict\"")
        && t0.elapsed() < std::time::Duration::from_secs(20)
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let stdout = std::fs::read_link(format!("/proc/{}/fd/1", child.id()));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert_eq!(
        stdout.ok(),
        Some(std::path::PathBuf::from("/dev/null")),
        "fd 1 of roger started with stdout closed"
    );
    assert_eq!(st.code(), Some(0));
    assert_eq!(
        env.read("train_log.jsonl"),
        log,
        "roger wrote into the training log"
    );
    env.run(&["ledger", "verify"]).expect(0);
}

#[test]
fn check_prints_resolved_phases_of_the_example() {
    let env = Env::new();
    let cfg = repo_root().join("roger.example.toml");
    env.run(&["--config", cfg.to_str().unwrap(), "check"])
        .expect(0)
        .stdout_has("phase    warmup")
        .stdout_has("steps [200, ∞)");
}

#[test]
fn check_names_file_line_and_expectation() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"x\"\n\n[[phase]]\nname = \"a\"\nfrom = 0\nloss = [2.0, 1.0]\n",
    );
    env.run(&["check"])
        .expect(3)
        .stderr_has("roger.toml:7:8:")
        .stderr_has("lo < hi");
    env.write(
        "roger.toml",
        "[run]\nname = \"x\"\n[watch]\ngarce = \"1s\"\n",
    );
    env.run(&["check"])
        .expect(3)
        .stderr_has("roger.toml:4:1: unknown field `garce`");
}

#[test]
fn missing_config_says_what_to_do() {
    let env = Env::new();
    env.run(&["check"]).expect(3).stderr_has("pass --config");
    env.run(&["--config", "nope.toml", "check"])
        .expect(3)
        .stderr_has("reading config nope.toml");
}
