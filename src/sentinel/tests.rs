//! Classification from sample sequences: each rule of the table in sentinel.rs.

use super::*;

fn rules() -> Rules {
    Rules {
        hysteresis: 3,
        interval: 10.0,
        grind_limit: 600.0,
        stale: Some(60.0),
        phases: vec![],
        quiet: vec![],
        busy_cpu: 0.1,
        busy_io: 1024.0 * 1024.0,
        gpu_pinned_util: 90.0,
        gpu_low_power: 0.4,
    }
}

fn sentinel(r: Rules) -> Sentinel {
    Sentinel::new(r, Calibrator::new(3.0, 1.0, None), 0.0)
}

/// A sample builder: time, step, cumulative CPU seconds, cumulative I/O bytes.
#[derive(Clone)]
struct S {
    at: f64,
    step: Option<u64>,
    bytes: u64,
    cpu: f64,
    io: u64,
    main: Main,
    others: u32,
    gpu: GpuObs,
    lost: u64,
    ranks: Vec<crate::ranks::RankObs>,
}

impl S {
    fn new(at: f64, step: u64) -> S {
        S {
            at,
            step: Some(step),
            bytes: step * 100,
            cpu: at,
            io: 0,
            main: Main::Alive { state: 'R' },
            others: 0,
            gpu: GpuObs::Absent { why: "test".into() },
            lost: 0,
            ranks: Vec::new(),
        }
    }
    fn cpu(mut self, c: f64) -> S {
        self.cpu = c;
        self
    }
    fn io(mut self, b: u64) -> S {
        self.io = b;
        self
    }
    fn gpu(mut self, util: f64, power: f64) -> S {
        self.gpu = GpuObs::Read {
            util: Some(util),
            power_frac: Some(power),
            run_vram: Some(1 << 30),
        };
        self
    }
    fn sample(&self) -> Sample {
        Sample {
            at: self.at,
            log: Ok(LogObs {
                bytes: self.bytes,
                last_step: self.step,
            }),
            proc: Ok(ProcObs {
                main: self.main,
                others: self.others,
                cpu_s: self.cpu,
                io_bytes: Some(self.io),
                lost: self.lost,
                d_state: false,
            }),
            gpu: self.gpu.clone(),
            ranks: self.ranks.clone(),
        }
    }
}

fn run(s: &mut Sentinel, samples: impl IntoIterator<Item = S>) -> Vec<Assessment> {
    samples.into_iter().map(|x| s.observe(x.sample())).collect()
}

/// Steps 1..=n every 10 s, then silence from t = 10n on, sampled every 10 s.
fn then_silent(n: u64, until: f64, mut f: impl FnMut(S) -> S) -> Vec<S> {
    let mut v: Vec<S> = (1..=n).map(|i| S::new(i as f64 * 10.0, i)).collect();
    let mut t = n as f64 * 10.0 + 10.0;
    while t <= until {
        v.push(f(S::new(t, n)));
        t += 10.0;
    }
    v
}

#[test]
fn steady_steps_are_working_after_hysteresis() {
    let mut s = sentinel(rules());
    let a = run(&mut s, (1..=5).map(|i| S::new(i as f64 * 10.0, i)));
    assert_eq!(a[0].state.name(), "unknown", "no verdict before N samples");
    assert_eq!(a[1].state.name(), "unknown");
    assert_eq!(a[2].state, State::Working);
    assert_eq!(a[4].state, State::Working);
}

#[test]
fn idle_silence_past_the_stale_limit_is_a_wedge_only_after_hysteresis() {
    let mut s = sentinel(rules());
    // The process sleeps: CPU time frozen at 50 s.
    let a = run(&mut s, then_silent(5, 150.0, |x| x.cpu(50.0)));
    let first_raw = a.iter().position(|x| x.raw == State::Wedge).unwrap();
    assert!(a[first_raw].silent_s > 60.0);
    assert_ne!(a[first_raw].state, State::Wedge, "one sample is not enough");
    let counted = a.iter().position(|x| x.state == State::Wedge).unwrap();
    assert_eq!(counted, first_raw + 2);
    assert!(a[counted].reasons.iter().any(|r| r.contains("idle")));
    assert_eq!(a[counted].limit.source, "[watch] stale");
}

#[test]
fn checkpoint_save_is_grind_not_wedge() {
    let mut s = sentinel(rules());
    // Silent, CPU idle, but writing 50 MiB/s.
    let a = run(
        &mut s,
        then_silent(5, 200.0, |x| {
            let t = x.at;
            x.cpu(50.0).io((t * 50.0 * 1048576.0) as u64)
        }),
    );
    assert!(a.iter().all(|x| x.state != State::Wedge));
    assert_eq!(a.last().unwrap().state, State::Grind);
    assert!(a.last().unwrap().reasons.iter().any(|r| r.contains("I/O")));
}

#[test]
fn long_eval_on_a_hot_gpu_is_grind_until_the_grind_limit() {
    let mut s = sentinel(rules());
    // Eval: no steps, GPU at 97% drawing 85% of its power limit.
    let a = run(
        &mut s,
        then_silent(5, 700.0, |x| x.cpu(50.0).gpu(97.0, 0.85)),
    );
    let at_300 = a.iter().find(|x| x.silent_s >= 300.0).unwrap();
    assert_eq!(at_300.state, State::Grind);
    let wedge = a.iter().find(|x| x.state == State::Wedge).unwrap();
    assert!(wedge.silent_s > 600.0, "only past the grind limit");
    assert!(wedge.reasons.iter().any(|r| r.contains("grind limit")));
}

#[test]
fn nccl_hang_pinned_gpu_at_low_power_is_a_wedge_even_with_cpu_spinning() {
    let mut s = sentinel(rules());
    // The host thread spins at 100% CPU waiting on the stuck collective; the GPU reports
    // 100% util but draws 20% of its limit.
    let a = run(&mut s, then_silent(5, 150.0, |x| x.gpu(100.0, 0.2)));
    let wedge = a.iter().find(|x| x.state == State::Wedge).unwrap();
    assert!(
        wedge.silent_s < 600.0,
        "no need to wait for the grind limit"
    );
    assert!(
        wedge.reasons.iter().any(|r| r.contains("NCCL")),
        "{:?}",
        wedge.reasons
    );
}

#[test]
fn declared_quiet_period_extends_the_limit() {
    let mut r = rules();
    r.quiet = vec![("eval".into(), 5, 300.0)];
    let mut s = sentinel(r);
    // Step 5 is an eval step: silent and idle for 200 s is allowed.
    let a = run(&mut s, then_silent(5, 250.0, |x| x.cpu(50.0)));
    assert!(a.iter().all(|x| x.state != State::Wedge));
    assert!(a.last().unwrap().limit.source.contains("quiet 'eval'"));
}

#[test]
fn phase_stale_overrides_watch_stale() {
    let mut r = rules();
    r.phases = vec![(0, None, Some(500.0), "main".into())];
    let mut s = sentinel(r);
    let a = run(&mut s, then_silent(5, 200.0, |x| x.cpu(50.0)));
    assert_eq!(a.last().unwrap().state, State::Working);
    assert_eq!(a.last().unwrap().limit.source, "phase 'main' stale");
}

#[test]
fn calibrated_limit_from_progress_gaps() {
    let mut r = rules();
    r.stale = None;
    let mut s = sentinel(r);
    // Gaps of 10 s → limit 30 s; a 60 s idle silence is then a wedge.
    let a = run(&mut s, then_silent(5, 120.0, |x| x.cpu(50.0)));
    assert_eq!(a[4].limit.seconds, 30.0);
    assert_eq!(a[4].limit.source, "calibrated");
    assert_eq!(a.last().unwrap().state, State::Wedge);
}

#[test]
fn before_the_first_step_the_grind_limit_applies() {
    let mut s = sentinel(rules());
    let a = run(
        &mut s,
        (0..20).map(|i| {
            let mut x = S::new(i as f64 * 10.0, 0).cpu(0.0);
            x.step = None;
            x.bytes = 0;
            x
        }),
    );
    assert!(a.iter().all(|x| x.state != State::Wedge));
    assert!(a
        .last()
        .unwrap()
        .limit
        .source
        .contains("until the first step"));
}

#[test]
fn exit_is_immediate_and_lingering_children_make_a_zombie() {
    let mut s = sentinel(rules());
    let mut v: Vec<S> = (1..=4).map(|i| S::new(i as f64 * 10.0, i)).collect();
    let mut done = S::new(50.0, 4);
    done.main = Main::Exited {
        code: Some(0),
        signal: None,
    };
    v.push(done.clone());
    let a = run(&mut s, v);
    assert_eq!(
        a[4].state,
        State::Exited {
            code: Some(0),
            signal: None
        }
    );

    let mut s = sentinel(rules());
    let mut v: Vec<S> = (1..=4).map(|i| S::new(i as f64 * 10.0, i)).collect();
    for t in 5..9 {
        let mut z = S::new(t as f64 * 10.0, 4);
        z.main = Main::Exited {
            code: Some(1),
            signal: None,
        };
        z.others = 2;
        v.push(z);
    }
    let a = run(&mut s, v);
    assert_eq!(a[4].raw, State::Zombie);
    assert_eq!(a[6].state, State::Zombie);
    assert!(a[6].reasons[0].contains("code 1"));
    assert!(a[6].reasons.iter().any(|r| r.contains("2 process(es)")));
}

#[test]
fn gpu_memory_held_after_exit_is_a_zombie() {
    let mut s = sentinel(rules());
    let z = |at: f64| S {
        main: Main::Gone,
        ..S::new(at, 1).gpu(0.0, 0.1)
    };
    let a = run(&mut s, vec![z(10.0), z(20.0), z(30.0)]);
    assert_eq!(a[2].state, State::Zombie);
    assert!(a[2].reasons.iter().any(|r| r.contains("VRAM")));
}

#[test]
fn blind_watcher_is_unknown_and_names_the_signal() {
    let mut s = sentinel(rules());
    let mut samples = Vec::new();
    for i in 1..=4 {
        let mut x = S::new(i as f64 * 10.0, i).sample();
        x.log = Err("/runs/x/log.jsonl: permission denied".into());
        samples.push(x);
    }
    let a: Vec<Assessment> = samples.into_iter().map(|x| s.observe(x)).collect();
    match &a[3].state {
        State::Unknown { missing } => assert!(missing[0].starts_with("log:")),
        other => panic!("{other:?}"),
    }

    // A failing GPU read blinds a silent run, but not one that is visibly stepping.
    let mut s = sentinel(rules());
    let failed = GpuObs::Failed {
        why: "NVML: GPU is lost".into(),
    };
    let mut a = Vec::new();
    for i in 1..=4 {
        let mut x = S::new(i as f64 * 10.0, i);
        x.gpu = failed.clone();
        a.push(s.observe(x.sample()));
    }
    assert_eq!(a[3].state, State::Working);
    for t in 5..=20 {
        let mut x = S::new(t as f64 * 10.0, 4).cpu(40.0);
        x.gpu = failed.clone();
        a.push(s.observe(x.sample()));
    }
    match &a.last().unwrap().state {
        State::Unknown { missing } => assert!(missing[0].contains("GPU is lost")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn absent_gpu_is_noted_but_not_blinding() {
    let mut s = sentinel(rules());
    let a = run(&mut s, (1..=4).map(|i| S::new(i as f64 * 10.0, i)));
    assert_eq!(a[3].state, State::Working);
    assert!(a[3].reasons.iter().any(|r| r.contains("no GPU signal")));
}

#[test]
fn relaunch_keeps_calibration_but_resets_the_baseline() {
    let mut r = rules();
    r.stale = None;
    let mut s = sentinel(r);
    run(&mut s, (1..=5).map(|i| S::new(i as f64 * 10.0, i)));
    s.relaunched(100.0);
    // The relaunched run logs from step 3 again: that is progress, not a stall.
    let a = run(
        &mut s,
        (0..5).map(|i| S::new(110.0 + i as f64 * 10.0, 3 + i)),
    );
    assert_eq!(a[4].state, State::Working);
    assert_eq!(s.calibration.limit(), Some(30.0));
}

#[test]
fn a_vanished_process_with_unknown_usage_makes_the_window_unknown_not_idle() {
    let mut s = sentinel(rules());
    // Silent from t = 50 and CPU frozen, but each window a worker left unreaped by the run.
    let mut lost = 0;
    let a = run(
        &mut s,
        then_silent(5, 200.0, |x| {
            lost += 1;
            S {
                lost,
                ..x.cpu(50.0)
            }
        }),
    );
    assert!(a
        .iter()
        .all(|x| x.state != State::Wedge && x.raw != State::Wedge));
    let last = a.last().unwrap();
    assert_eq!(last.state.name(), "unknown");
    assert!(
        format!("{:?}", last.state).contains("reaped outside it"),
        "{:?}",
        last.state
    );
    // Once nothing vanishes, idleness counts again.
    let more = run(
        &mut s,
        (21..=25).map(|i| S {
            lost,
            ..S::new(i as f64 * 10.0, 5).cpu(50.0)
        }),
    );
    assert_eq!(more.last().unwrap().state, State::Wedge);
}

#[test]
fn hysteresis_is_time_as_well_as_samples_and_rates_span_half_an_interval() {
    // interval 2 s, samples every 20 ms (as a SIGCHLD storm would take them): a run busy
    // 300 ms, asleep 300 ms, silent past its stale limit.
    let r = Rules {
        interval: 2.0,
        stale: Some(1.0),
        grind_limit: 600.0,
        ..rules()
    };
    let mut s = sentinel(r.clone());
    let mut v = vec![S::new(0.0, 1), S::new(0.02, 2)];
    let mut cpu = 0.0;
    let mut t: f64 = 0.04;
    while t < 10.0 {
        if ((t / 0.3) as u64).is_multiple_of(2) {
            cpu += 0.02;
        }
        v.push(S::new(t, 2).cpu(cpu));
        t += 0.02;
    }
    let a = run(&mut s, v);
    assert!(
        a.iter().all(|x| x.state != State::Wedge),
        "half a core of work is not idleness"
    );
    assert!(a.iter().any(|x| x.state == State::Grind));
    // A true wedge sampled that fast still needs (hysteresis - 1) x interval of wall time.
    let mut s = sentinel(r);
    let mut v = vec![S::new(0.0, 1), S::new(0.02, 2)];
    let mut t: f64 = 0.04;
    while t < 10.0 {
        v.push(S::new(t, 2).cpu(0.0));
        t += 0.02;
    }
    let a = run(&mut s, v);
    let first_raw = a.iter().position(|x| x.raw == State::Wedge).unwrap();
    let counted = a.iter().position(|x| x.state == State::Wedge).unwrap();
    let span = (counted - first_raw) as f64 * 0.02;
    assert!(
        span >= 4.0 - 1e-6,
        "wedge counted after {span}s of idle samples"
    );
}

/// Four ranks at time `at`: rank 2 spins a core (CPU = `at`), the others sleep.
fn four_ranks(at: f64) -> Vec<crate::ranks::RankObs> {
    (0..4u32)
        .map(|r| crate::ranks::RankObs {
            rank: r,
            pid: 100 + r,
            state: if r == 2 { 'R' } else { 'S' },
            cpu_s: if r == 2 { at } else { 1.0 },
            io_bytes: Some(0),
            gpu_util: None,
        })
        .collect()
}

#[test]
fn a_silent_run_names_its_ranks_and_the_one_that_differs() {
    let mut s = sentinel(rules());
    let a = run(
        &mut s,
        then_silent(5, 150.0, |mut x| {
            x.ranks = four_ranks(x.at);
            x
        }),
    );
    let last = a.last().unwrap();
    // The tree is busy (rank 2's core): a grind, with the odd rank named in its reasons.
    assert_eq!(last.state, State::Grind);
    assert!(
        last.reasons.iter().any(|r| r
            == "one rank differs from the rest: rank 2 busy (CPU 100%) while ranks 0,1,3 idle"),
        "{:?}",
        last.reasons
    );
    let t = last.samples.last().unwrap();
    assert_eq!(t.ranks.len(), 4, "each rank's liveness is in the sample");
    assert_eq!(t.ranks[2].activity, "busy");
    // Working samples carry the ranks too, but no rank words in the reasons.
    let working = &a[4];
    assert!(!working.reasons.iter().any(|r| r.starts_with("ranks:")));
}
