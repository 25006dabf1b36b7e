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

/// `src/build.rs` links roger at a fixed address (no start-up relocations); a build that
/// lost that setting would quietly make every `critic --once` slower again.
#[test]
fn the_binary_is_linked_position_dependent() {
    let elf = std::fs::read(crate::util::roger_bin()).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF");
    let e_type = u16::from_le_bytes([elf[16], elf[17]]);
    assert_eq!(e_type, 2, "ET_EXEC expected, got {e_type} (3 = a PIE)");
}

/// `src/build.rs` links the unwinder from libgcc_eh.a: loading libgcc_s.so.1 ran its
/// constructor's ~20 CPUID instructions, each a trap to the hypervisor on a VM.
#[test]
fn the_binary_does_not_load_libgcc_s() {
    let eh = std::process::Command::new("cc")
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if !eh
        .as_deref()
        .is_ok_and(|p| std::path::Path::new(p).is_absolute())
    {
        eprintln!("skipped: this toolchain has no libgcc_eh.a, so roger links libgcc_s.so.1");
        return;
    }
    let elf = std::fs::read(crate::util::roger_bin()).unwrap();
    let needed = elf
        .windows(b"libgcc_s.so".len())
        .any(|w| w == b"libgcc_s.so");
    assert!(
        !needed,
        "the roger binary names libgcc_s.so (a NEEDED entry)"
    );
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
