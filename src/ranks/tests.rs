use super::stacks::{self, group, odd, parse_dump, summary};
use super::straggler::{Detector, Rule};
use super::*;

/// Real `py-spy dump` output recorded from a 4-rank gloo torchrun job in which rank 2 hung
/// in `slow_loader` before its all_reduce (tests/ranks/train_ddp.py), and of its launcher.
const RANK0: &str = include_str!("../../tests/ranks/fixtures/hang-rank0.txt");
const RANK1: &str = include_str!("../../tests/ranks/fixtures/hang-rank1.txt");
const RANK2: &str = include_str!("../../tests/ranks/fixtures/hang-rank2.txt");
const RANK3: &str = include_str!("../../tests/ranks/fixtures/hang-rank3.txt");
const LAUNCHER: &str = include_str!("../../tests/ranks/fixtures/launcher.txt");

fn dumps() -> Vec<(u32, Result<String, String>)> {
    [RANK0, RANK1, RANK2, RANK3]
        .iter()
        .enumerate()
        .map(|(i, d)| (i as u32, Ok(d.to_string())))
        .collect()
}

#[test]
fn a_recorded_dump_parses_innermost_first() {
    let t = parse_dump(RANK2);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].name, "MainThread");
    let f = &t[0].frames[0];
    assert_eq!(
        (f.function.as_str(), f.file.as_str(), f.line),
        ("slow_loader", "train_ddp.py", Some(35))
    );
    assert_eq!(t[0].frames.last().unwrap().function, "<module>");
    let t = parse_dump(RANK0);
    assert_eq!(t[0].frames[0].function, "all_reduce");
    assert_eq!(t[0].frames[0].file, "torch/distributed/distributed_c10d.py");
}

#[test]
fn the_launchers_threads_and_odd_function_names_parse() {
    let t = parse_dump(LAUNCHER);
    assert!(t.len() >= 2, "{t:?}");
    assert_eq!(t[0].name, "MainThread");
    assert_eq!(t[0].frames[0].function, "SimpleElasticAgent._invoke_run");
    // Functions with parentheses-free dotted names and `<locals>` keep them whole.
    assert!(t[0]
        .frames
        .iter()
        .any(|f| f.function == "prof.<locals>.wrap.<locals>.wrapper"));
    assert!(t[1].name.starts_with("TailLog"));
    assert_eq!(
        stacks::innermost(&t).unwrap().function,
        "SimpleElasticAgent._invoke_run"
    );
}

#[test]
fn the_hung_rank_is_the_odd_group() {
    let g = group(&dumps());
    assert_eq!(g.len(), 2);
    assert_eq!(g[0].ranks, vec![0, 1, 3]);
    assert_eq!(g[0].frame.as_ref().unwrap().function, "all_reduce");
    let o = odd(&g).unwrap();
    assert_eq!(o.ranks, vec![2]);
    assert_eq!(
        summary(&g, 412.4),
        "rank 2 in `slow_loader` (train_ddp.py:35) for 412 s; ranks 0,1,3 in `all_reduce` (distributed_c10d.py:1541)"
    );
}

#[test]
fn no_odd_group_when_all_agree_or_split_evenly_and_failed_dumps_are_a_group() {
    let mut d = dumps();
    d[2].1 = Ok(RANK0.to_string());
    let g = group(&d);
    assert_eq!(g.len(), 1);
    assert!(odd(&g).is_none());
    assert_eq!(
        summary(&g, 5.0),
        "ranks 0,1,2,3 in `all_reduce` (distributed_c10d.py:1541)"
    );
    let mut d = dumps();
    d[3].1 = Ok(RANK2.to_string());
    assert!(odd(&group(&d)).is_none(), "2-2 split");
    let mut d = dumps();
    d[1].1 = Err("py-spy: permission denied".into());
    let g = group(&d);
    assert_eq!(g.len(), 3);
    assert!(odd(&g).is_none(), "two singletons: neither is the odd one");
    assert!(summary(&g, 1.0).contains("rank 1 with no stack read"));
}

#[test]
fn environ_gives_rank_world_and_flight_recorder() {
    let raw = b"PATH=/bin\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0TORCH_NCCL_TRACE_BUFFER_SIZE=2000\0";
    let e = parse_environ(raw).unwrap();
    assert_eq!((e.rank, e.local_rank, e.world_size), (3, Some(1), Some(8)));
    assert_eq!(e.flight_recorder.as_deref(), Some("/tmp/nccl_trace_rank_"));
    let e = parse_environ(b"RANK=0\0TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/scratch/fr_\0").unwrap();
    assert_eq!(e.flight_recorder.as_deref(), Some("/scratch/fr_"));
    assert_eq!(parse_environ(b"RANK=0\0").unwrap().flight_recorder, None);
    assert!(parse_environ(b"PATH=/bin\0LOCAL_RANK=0\0").is_none());
    assert!(parse_environ(b"RANK=x\0").is_none());
}

fn st(pid: u32, ppid: u32, state: char, cpu: f64) -> ProcStat {
    ProcStat {
        id: ProcId { pid, start: 7 },
        state,
        ppid,
        pgrp: 1,
        cpu_s: cpu,
        children_cpu_s: 0.0,
        io_bytes: Some(0),
        exit_status: None,
    }
}

fn env(rank: u32) -> RankEnv {
    RankEnv {
        rank,
        local_rank: Some(rank),
        world_size: Some(2),
        flight_recorder: None,
    }
}

#[test]
fn the_rank_map_skips_the_launcher_and_dataloader_workers() {
    // torchrun 10 → ranks 11, 12; rank 11's DataLoader worker 13 inherits RANK=0.
    let tree = vec![
        st(10, 1, 'S', 1.0),
        st(11, 10, 'S', 5.0),
        st(12, 10, 'D', 4.0),
        st(13, 11, 'R', 2.0),
    ];
    let envs: BTreeMap<ProcId, RankEnv> = [(11, env(0)), (12, env(1)), (13, env(0))]
        .into_iter()
        .map(|(p, e)| (ProcId { pid: p, start: 7 }, e))
        .collect();
    let m = rank_map(&tree, &envs);
    assert_eq!(
        m.iter().map(|r| (r.rank, r.pid)).collect::<Vec<_>>(),
        vec![(0, 11), (1, 12)]
    );
    assert_eq!(
        map_line(&m),
        "2 rank(s) of world size 2: 0 pid 11 (local 0, no GPU); 1 pid 12 (local 1, no GPU)"
    );
    let o = observe(&tree, &m);
    assert_eq!(o[0].cpu_s, 7.0, "the worker's CPU is rank 0's");
    assert_eq!(o[1].state, 'D');
    // A second reading: rank 0 and its worker busy, rank 1 stuck in D.
    let tree2 = vec![
        st(10, 1, 'S', 1.0),
        st(11, 10, 'S', 6.0),
        st(12, 10, 'D', 4.0),
        st(13, 11, 'R', 3.0),
    ];
    let live = rates(&o, &observe(&tree2, &m), 2.0, 0.1, 1e6, 90.0);
    assert_eq!(live[0].activity, "busy");
    assert_eq!(live[0].cpu, 1.0);
    assert_eq!(live[1].activity, "d_state");
}

fn live(acts: &[&'static str]) -> Vec<RankLive> {
    acts.iter()
        .enumerate()
        .map(|(i, a)| RankLive {
            rank: i as u32,
            pid: 100 + i as u32,
            state: 'S',
            cpu: if *a == "busy" { 0.99 } else { 0.0 },
            io_per_s: Some(0.0),
            gpu_util: None,
            activity: a,
        })
        .collect()
}

#[test]
fn one_rank_differing_from_the_rest_is_named() {
    let d = describe(&live(&["idle", "idle", "busy", "idle"]));
    assert_eq!(
        d[0],
        "ranks: rank 2 busy (CPU 99%); ranks 0,1,3 idle (CPU 0%, 0%, 0%)"
    );
    assert_eq!(
        d[1],
        "one rank differs from the rest: rank 2 busy (CPU 99%) while ranks 0,1,3 idle"
    );
    // All quiet: the plain wedge, no odd one.
    assert_eq!(describe(&live(&["idle"; 4])).len(), 1);
    assert!(odd_one(&live(&["idle", "busy", "busy", "idle"])).is_none());
    assert!(
        odd_one(&live(&["idle", "busy"])).is_none(),
        "two ranks have no 'rest'"
    );
}

#[test]
fn rank_patterns_fill_and_match() {
    let p = std::path::Path::new("logs/rank{rank}.jsonl");
    assert_eq!(fill(p, 3), std::path::PathBuf::from("logs/rank3.jsonl"));
    assert_eq!(rank_of_name("rank{rank}.jsonl", "rank12.jsonl"), Some(12));
    assert_eq!(rank_of_name("rank{rank}.jsonl", "rank.jsonl"), None);
    assert_eq!(rank_of_name("rank{rank}.jsonl", "rank1.jsonl.bak"), None);
    assert_eq!(rank_of_name("rank{rank}.jsonl", "rankx.jsonl"), None);
}

fn rule() -> Rule {
    Rule {
        share: 0.75,
        windows: 3,
        window_s: 10.0,
        min_steps: 3,
    }
}

fn obs(cpu: &[f64]) -> Vec<RankObs> {
    cpu.iter()
        .enumerate()
        .map(|(i, c)| RankObs {
            rank: i as u32,
            pid: 100 + i as u32,
            state: 'S',
            cpu_s: *c,
            io_bytes: None,
            gpu_util: None,
        })
        .collect()
}

#[test]
fn a_rank_30_percent_slower_is_a_straggler_after_k_windows_once() {
    let mut d = Detector::new(rule());
    let mut flags = Vec::new();
    for w in 0..6 {
        for r in 0..4u32 {
            let t = if r == 1 { 0.1 / 0.7 } else { 0.1 };
            d.step_times(r, &[t, t * 1.02, t * 0.98]);
        }
        d.sample(w as f64 * 10.0, &obs(&[0.0; 4]));
        flags.extend(d.sample(w as f64 * 10.0 + 10.0, &obs(&[0.0; 4])));
    }
    assert_eq!(flags.len(), 1, "reported once: {flags:?}");
    let f = &flags[0];
    assert_eq!((f.rank, f.source, f.relative.len()), (1, "step_time", 3));
    assert!(f.relative.iter().all(|r| (*r - 0.7).abs() < 0.01), "{f:?}");
    assert!(f
        .reason(0.75)
        .starts_with("rank 1 is a straggler: its speed was 0.700, 0.700, 0.700"));
}

#[test]
fn noise_and_short_dips_are_not_stragglers() {
    let mut d = Detector::new(rule());
    let mut flags = Vec::new();
    let mut at = 0.0;
    for w in 0..12 {
        for r in 0..4u32 {
            // ±20% jitter, and rank 3 slow in every other window only.
            let jitter = 1.0 + 0.2 * (((w * 7 + r * 3) % 5) as f64 - 2.0) / 2.0;
            let slow = if r == 3 && w % 2 == 0 { 1.0 / 0.6 } else { 1.0 };
            d.step_times(r, &[0.1 * jitter * slow; 4]);
        }
        at += 10.0;
        flags.extend(d.sample(at, &obs(&[0.0; 4])));
    }
    assert!(flags.is_empty(), "{flags:?}");
}

#[test]
fn without_step_times_cpu_activity_is_the_speed_and_an_idle_job_flags_nobody() {
    let mut d = Detector::new(rule());
    let mut flags = Vec::new();
    let mut cpu = [0.0f64; 3];
    for w in 0..4 {
        d.sample(w as f64 * 10.0, &obs(&cpu));
        for (i, c) in cpu.iter_mut().enumerate() {
            *c += if i == 2 { 5.0 } else { 9.0 };
        }
        flags.extend(d.sample(w as f64 * 10.0 + 10.0, &obs(&cpu)));
    }
    assert_eq!(flags.len(), 1);
    assert_eq!((flags[0].rank, flags[0].source), (2, "cpu"));
    let mut d = Detector::new(rule());
    for w in 0..5 {
        assert!(d.sample(w as f64 * 10.0, &obs(&[1.0, 1.0, 1.0])).is_empty());
    }
    // A rank waiting (no CPU) while the others work is not judged by CPU.
    let mut d = Detector::new(rule());
    let mut cpu = [0.0f64; 3];
    for w in 0..5 {
        d.sample(w as f64 * 10.0, &obs(&cpu));
        cpu[0] += 9.0;
        cpu[1] += 9.0;
        assert!(d.sample(w as f64 * 10.0 + 10.0, &obs(&cpu)).is_empty());
    }
    // Once the job has logged step times, windows short of them are not judged by CPU.
    let mut d = Detector::new(rule());
    d.step_times(0, &[0.1]);
    let mut cpu = [0.0f64; 3];
    for w in 0..5 {
        d.sample(w as f64 * 10.0, &obs(&cpu));
        cpu[0] += 9.0;
        cpu[1] += 9.0;
        cpu[2] += 2.0;
        assert!(d.sample(w as f64 * 10.0 + 10.0, &obs(&cpu)).is_empty());
    }
}

#[test]
fn rank_log_lines_give_step_and_step_time() {
    let l = br#"{"step": 12, "loss": 0.5, "step_time": 0.071}"#;
    assert_eq!(parse_line(l, "step", "step_time"), Some((12, Some(0.071))));
    assert_eq!(
        parse_line(br#"{"train": {"it": 3}, "t": 1}"#, "train/it", "t"),
        Some((3, Some(1.0)))
    );
    assert_eq!(parse_line(br#"{"loss": 1}"#, "step", "step_time"), None);
    assert_eq!(parse_line(b"not json", "step", "step_time"), None);
    assert_eq!(parse_line(br#"{"step": 4}"#, "step", ""), Some((4, None)));
}

#[test]
fn one_ranks_window_is_kept_for_its_node_and_many_nodes_windows_are_judged_together() {
    // One rank on this node: its window closes (for the job), and names nobody alone.
    let mut d = Detector::new(rule());
    for i in 0..=10 {
        d.step_times(0, &[0.1; 2]);
        assert!(d.sample(f64::from(i), &obs(&[f64::from(i)])).is_empty());
    }
    let (n, w) = d.newest();
    assert_eq!(n, 1);
    assert_eq!(w.unwrap().measure, [(0, 0.1)].into_iter().collect());
    // Two nodes' ranks: rank 1 (the other node) takes twice as long, three windows running.
    let mut job = Detector::new(rule());
    let m = |slow: f64| -> std::collections::BTreeMap<u32, f64> {
        [(0, 0.1), (1, slow)].into_iter().collect()
    };
    assert!(job.judge_measures(10.0, "step_time", m(0.2)).is_empty());
    assert!(job.judge_measures(20.0, "step_time", m(0.2)).is_empty());
    let f = job.judge_measures(30.0, "step_time", m(0.2));
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].rank, f[0].relative.clone()), (1, vec![0.667; 3]));
    assert!(
        job.judge_measures(40.0, "step_time", m(0.2)).is_empty(),
        "once"
    );
    // Fewer than two ranks: nothing to judge.
    assert!(job
        .judge_measures(50.0, "step_time", [(0, 0.1)].into_iter().collect())
        .is_empty());
}
