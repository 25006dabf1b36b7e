//! One watch and one trainer per run: a second watch, a watch after `kill -9` (item 10).

use super::*;

/// Item 10 and the class test: a second `roger watch` on a run that already has a live watch
/// is refused (the per-run lock) and never starts a second trainer.
#[test]
fn a_second_watch_on_a_live_watch_is_refused_and_starts_no_trainer() {
    let env = Env::new();
    setup(&env, "", "");
    let args = watch_args(&env, &[], train_argv(&env, 100_000, 50, &[]));
    let mut first = spawn(&env, roger(&env, &args), "first");
    poll_until("the run to log", Duration::from_secs(60), || {
        steps_logged(&env).len() > 3
    });
    let second = spawn(&env, roger(&env, &args), "second");
    // Old roger started a second trainer here; give it every chance to.
    let mut second = second;
    let t0 = Instant::now();
    while second.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(20) {
        if pids(&env).len() > 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let trainers = pids(&env);
    let run = collect(&env, second, "second", &args, Duration::from_secs(5));
    signal(first.id(), nix::sys::signal::Signal::SIGTERM);
    wait_child(&mut first, Duration::from_secs(30));
    for p in &trainers {
        signal(*p, nix::sys::signal::Signal::SIGKILL);
    }
    assert_eq!(trainers.len(), 1, "a second trainer\n{}", run.report());
    run.expect(1).stderr_has("another roger watch");
}

/// Item 10: `kill -9` of the watch leaves its trainer running; the next `roger watch` with the
/// same config and command attaches to that trainer (and says so) instead of starting another.
#[test]
fn a_watch_restarted_after_kill_9_attaches_to_the_live_trainer() {
    let env = Env::new();
    setup(&env, &schedule(60), "");
    let args = watch_args(&env, &[], train_argv(&env, 60, 100, &[]));
    let mut first = spawn(&env, roger(&env, &args), "first");
    poll_until("the run to log", Duration::from_secs(60), || {
        steps_logged(&env).len() > 5
    });
    signal(first.id(), nix::sys::signal::Signal::SIGKILL);
    wait_child(&mut first, Duration::from_secs(30));
    let trainer = pids(&env)[0];
    assert!(
        alive(trainer),
        "the trainer outlives a kill -9 of its watch"
    );
    let run = finish(&env, roger(&env, &args), &args);
    let trainers = pids(&env);
    for p in &trainers {
        signal(*p, nix::sys::signal::Signal::SIGKILL);
    }
    assert_eq!(trainers, vec![trainer], "one trainer\n{}", run.report());
    let run = run
        .expect(0)
        .stderr_has("attaching to it instead of starting another");
    let recs = records(&env);
    let adopted = event(&recs, "adopted");
    assert_eq!(adopted.len(), 1, "{}", run.report());
    assert_eq!(adopted[0].u64_field("pid"), Some(trainer as u64));
    let steps = steps_logged(&env);
    assert!(
        steps.windows(2).all(|w| w[1] == w[0] + 1),
        "no rewinds: one copy of the run"
    );
    assert_eq!(*steps.last().unwrap(), 60);
    assert!(of(&recs, Kind::Relaunch).is_empty());
}

/// Item 10, the other side: the earlier watch was killed and its trainer is gone too. The next
/// watch records that the earlier one died, then starts the run (from its last checkpoint).
#[test]
fn a_watch_after_a_dead_watch_and_a_dead_trainer_records_it_and_goes_on() {
    let env = Env::new();
    setup(&env, "", "");
    let args = watch_args(&env, &[], train_argv(&env, 40, 60, &[]));
    let mut first = spawn(&env, roger(&env, &args), "first");
    let l = ledger(&env);
    poll_until("a checkpoint", Duration::from_secs(60), || {
        !of(&l.records().unwrap(), Kind::Publish).is_empty()
    });
    signal(first.id(), nix::sys::signal::Signal::SIGKILL);
    wait_child(&mut first, Duration::from_secs(30));
    let trainer = pids(&env)[0];
    signal(trainer, nix::sys::signal::Signal::SIGKILL);
    poll_until("the trainer to die", Duration::from_secs(30), || {
        !alive(trainer)
    });
    let run = finish(&env, roger(&env, &args), &args).expect(0);
    let recs = records(&env);
    let died = event(&recs, "previous_watch_died");
    assert_eq!(died.len(), 1, "{}", run.report());
    assert_eq!(died[0].u64_field("pid"), Some(trainer as u64));
    assert!(event(&recs, "adopted").is_empty());
    assert_eq!(pids(&env).len(), 2, "a new trainer, as the old one is gone");
    let run = run.stderr_has("the earlier watch of this run died");
    assert_eq!(*steps_logged(&env).last().unwrap(), 40, "{}", run.report());
}
