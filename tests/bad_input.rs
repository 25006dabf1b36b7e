//! Hostile-but-realistic input to every subcommand: absurd numbers, garbage files, paths of the
//! wrong kind. Each must end in the exit code its role promises, one `roger: error:` line naming
//! the file and what was expected, no panic, and nothing written before lost.

use crate::util::{Env, Run};

const CONFIG: &str = "[run]\nname = \"t\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ck\"\n";

/// No panic, and a `roger: error:` line that says each of `needles`.
#[track_caller]
fn clear_error(run: Run, code: i32, needles: &[&str]) -> Run {
    let run = run.expect(code);
    let err = run.stderr();
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "panic\n{}",
        run.report()
    );
    let line = err
        .lines()
        .find(|l| l.starts_with("roger: error: "))
        .unwrap_or_else(|| panic!("no `roger: error:` line\n{}", run.report()));
    for n in needles {
        assert!(line.contains(n), "error lacks {n:?}\n{}", run.report());
    }
    run
}

#[test]
fn absurd_durations_and_sizes_in_config_are_errors_not_panics() {
    let env = Env::new();
    for (section, line, col) in [
        (
            "[watch]\ngrace = \"99999999999999999999999d\"",
            "6:9",
            "too long",
        ),
        ("[watch]\ngrace = 1e300", "6:9", "too long"),
        (
            "[disk]\nwarn_free = \"99999999999999999999999TiB\"",
            "6:13",
            "too large",
        ),
    ] {
        env.write("roger.toml", format!("{CONFIG}{section}\n"));
        clear_error(env.run(&["check"]), 3, &["roger.toml:", line, col]);
    }
}

#[test]
fn a_log_timestamp_no_calendar_holds_is_skipped_not_a_panic() {
    let env = Env::new();
    env.write(
        "roger.toml",
        format!("{CONFIG}[[phase]]\nname = \"main\"\nfrom = 0\nloss = [0.1, 10]\nstale = \"1m\"\n"),
    );
    env.write(
        "train.jsonl",
        "{\"step\":1,\"loss\":1,\"time\":-1e300}\n{\"step\":2,\"loss\":1,\"time\":1e300}\n",
    );
    let run = env.run(&["critic", "--once"]).expect(3);
    assert!(!run.stderr().contains("panicked"), "{}", run.report());
    let run = run.stderr_has("train.jsonl:1: `time` is -1e300, expected a number");
    run.stderr_has("train.jsonl:2:");
}
