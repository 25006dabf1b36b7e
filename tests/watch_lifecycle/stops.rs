//! How a watch stops and says so: stderr (item 14), a dry run's SIGINT (item 16), loop
//! breakers (item 17).

use super::*;

/// Item 14: with stdout discarded (`nohup roger watch ... >/dev/null`), the breaker's reason
/// and the final `done (75)` still reach stderr.
#[test]
fn a_breaker_and_its_done_line_reach_stderr() {
    let env = Env::new();
    setup(&env, "", "breaker_crashes = 2\nbreaker_within = \"20s\"");
    let args = watch_args(
        &env,
        &[],
        train_argv(&env, 40, 30, &["--crash-at", "15", "--crash-on-resume"]),
    );
    let mut c = roger(&env, &args);
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let mut child = c.spawn().unwrap();
    let status = wait_child(&mut child, Duration::from_secs(90));
    let err = env.read("watch.err");
    assert_eq!(status.code(), Some(75), "{err}");
    assert!(err.contains("breaker crash_loop open"), "{err}");
    assert!(err.contains("done (75): breaker open: crash_loop"), "{err}");
}

/// Item 16: a dry run told to stop (SIGINT) signals nothing; the run keeps going.
#[test]
fn a_dry_run_stopped_by_sigint_never_signals_the_run() {
    let env = Env::new();
    setup(&env, "", "");
    let args = watch_args(&env, &["--dry-run"], train_argv(&env, 100_000, 50, &[]));
    let mut child = spawn(&env, roger(&env, &args), "watch");
    poll_until("the run to log", Duration::from_secs(60), || {
        steps_logged(&env).len() > 3
    });
    signal(child.id(), nix::sys::signal::Signal::SIGINT);
    let status = wait_child(&mut child, Duration::from_secs(60));
    let trainer = pids(&env)[0];
    let n = steps_logged(&env).len();
    let still = alive(trainer);
    let more = {
        let t0 = Instant::now();
        while steps_logged(&env).len() <= n + 3 && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
        steps_logged(&env).len() > n + 3
    };
    signal(trainer, nix::sys::signal::Signal::SIGKILL);
    assert_eq!(status.code(), Some(1));
    assert!(
        env.read("term.txt").is_empty(),
        "the dry run sent SIGTERM to the run"
    );
    assert!(still && more, "the run kept going after the dry run ended");
    let recs = records(&env);
    let sig = event(&recs, "signal");
    assert_eq!(sig[0].get("forwarded_to"), Some(&serde_json::json!([])));
    assert!(event(&recs, "stopped").is_empty());
}

/// Item 17: a crash loop is counted over relaunches (the first launch started the relaunching,
/// it is not part of the loop) and named for what happened.
#[test]
fn a_crash_loop_counts_relaunches_and_says_so() {
    let env = Env::new();
    setup(&env, "", "breaker_crashes = 2\nbreaker_within = \"20s\"");
    let args = watch_args(
        &env,
        &[],
        train_argv(&env, 40, 30, &["--crash-at", "15", "--crash-on-resume"]),
    );
    let run = finish(&env, roger(&env, &args), &args).expect(75);
    let recs = records(&env);
    let b = of(&recs, Kind::Breaker);
    assert_eq!(b.len(), 1, "{}", run.report());
    assert_eq!(b[0].str_field("breaker"), Some("crash_loop"));
    let evidence = b[0].str_field("evidence").unwrap();
    assert!(
        evidence.contains("2 consecutive relaunches crashed"),
        "{evidence}"
    );
    assert_eq!(of(&recs, Kind::Relaunch).len(), 2, "{}", run.report());
    assert_eq!(pids(&env).len(), 3, "the first launch and two relaunches");
}
