//! Which critic verdicts a launch acts on (item 3), and what a divergence kill names (item 15).

use super::*;

/// Item 3: after a rollback, a critic still reading the dead run's data files another fail
/// about a step the new launch has not produced — once while roger backs off (the new launch's
/// first tick then sees the dead run's last step in the log), and twice after the launch (with
/// the dead run's sample time, and with no time at all). The new launch, loading for 1.5 s
/// before its first step, must not be killed for any of them.
#[test]
fn a_stale_verdict_after_a_rollback_does_not_kill_the_relaunched_run() {
    let env = Env::new();
    setup(
        &env,
        "",
        "rollback_on = [\"loss\"]\nrollback_margin_steps = 5",
    );
    let toml = env
        .read("roger.toml")
        .replace("backoff_initial = \"100ms\"", "backoff_initial = \"1s\"")
        .replace("backoff_max = \"200ms\"", "backoff_max = \"1s\"");
    env.write("roger.toml", toml);
    let args = watch_args(
        &env,
        &[],
        train_argv(&env, 70, 100, &["--start-ms", "1500"]),
    );
    let child = spawn(&env, roger(&env, &args), "watch");
    let l = ledger(&env);
    poll_until("a checkpoint at step 30", Duration::from_secs(60), || {
        l.records()
            .unwrap()
            .iter()
            .any(|r| r.kind == Kind::Publish && r.step == Some(30))
    });
    let at30 = log_lines(&env)
        .into_iter()
        .find(|(s, _)| *s == 30)
        .unwrap()
        .1;
    let first = file_loss_fail(&env, 30, 25, Some(at30));
    poll_until("the relaunch record", Duration::from_secs(60), || {
        !of(&l.records().unwrap(), Kind::Relaunch).is_empty()
    });
    // The critic, still behind, files the same failure again: about the dead run's step 30.
    let stale = file_loss_fail(&env, 30, 25, Some(at30));
    poll_until("the relaunched run", Duration::from_secs(60), || {
        !event(&l.records().unwrap(), "launched").is_empty()
    });
    let staler = file_loss_fail(&env, 30, 25, Some(at30));
    let timeless = file_loss_fail(&env, 30, 25, None);
    let run = collect(&env, child, "watch", &args, Duration::from_secs(90)).expect(0);
    let recs = records(&env);
    let kills: Vec<&Record> = of(&recs, Kind::Kill)
        .into_iter()
        .filter(|k| k.str_field("reason") == Some("divergence"))
        .collect();
    assert_eq!(kills.len(), 1, "only the real divergence\n{}", run.report());
    assert!(kills[0].seq > first.seq && kills[0].seq < stale.seq);
    assert_eq!(of(&recs, Kind::Relaunch).len(), 1, "{}", run.report());
    assert_eq!(pids(&env).len(), 2);
    assert_eq!(*steps_logged(&env).last().unwrap(), 70);
    // The ignored verdicts are accounted for, with why.
    let ignored = event(&recs, "verdict_ignored");
    for v in [&stale, &staler, &timeless] {
        assert!(
            ignored
                .iter()
                .any(|r| r.u64_field("verdict_seq") == Some(v.seq)),
            "verdict #{} not accounted for\n{}",
            v.seq,
            run.report()
        );
    }
}

/// Item 15: a divergence kill names the check, the step and the verdict's seq — in the record's
/// `reasons` and on stderr — instead of the sentinel's working-state words.
#[test]
fn a_divergence_kill_names_the_check_step_and_verdict() {
    let env = Env::new();
    setup(
        &env,
        "",
        "rollback_on = [\"loss\"]\nrollback_margin_steps = 5",
    );
    let args = watch_args(&env, &[], train_argv(&env, 60, 60, &[]));
    let child = spawn(&env, roger(&env, &args), "watch");
    let l = ledger(&env);
    poll_until("a checkpoint at step 30", Duration::from_secs(60), || {
        l.records()
            .unwrap()
            .iter()
            .any(|r| r.kind == Kind::Publish && r.step == Some(30))
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let v = file_loss_fail(&env, 30, 25, Some(now));
    let run = collect(&env, child, "watch", &args, Duration::from_secs(90)).expect(0);
    let recs = records(&env);
    let kill = of(&recs, Kind::Kill)[0];
    let reasons = kill.get("reasons").unwrap().to_string();
    let want = format!("critic verdict #{} failed check 'loss' at step 30", v.seq);
    assert!(reasons.contains(&want), "{reasons}\n{}", run.report());
    assert!(reasons.contains("diverged at step 25"), "{reasons}");
    assert!(!reasons.contains("new step"), "{reasons}");
    assert_eq!(kill.u64_field("verdict_seq"), Some(v.seq));
    assert_eq!(kill.str_field("check"), Some("loss"));
    run.stderr_has(&format!("kill (divergence: {want}"));
}
