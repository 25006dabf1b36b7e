//! What the machine and the user hand roger: the config file, /proc files (stat, io,
//! meminfo, cmdline, version, mountinfo), `nvidia-smi` CSV, kernel-log XID lines and GPU
//! replay recordings. Real /proc files of this machine are read at test time as seeds, next
//! to stored samples, so the seeds follow the kernel the tests run on.

use super::{iters, repo_file, run, Gen, NUMBERS, WEIRD};
use crate::gpu::{smi, xid, GpuSnapshot};
use crate::sys::{cgroup, fskind, host, pidinfo, proc, wsl};
use std::path::Path;

/// This machine's copy of a /proc file, when readable.
fn proc_file(p: &str) -> Option<Vec<u8>> {
    std::fs::read(p).ok().filter(|b| !b.is_empty())
}

fn seeds_with(stored: &[&str], real: &[&str]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = stored.iter().map(|s| s.as_bytes().to_vec()).collect();
    v.extend(real.iter().filter_map(|p| proc_file(p)));
    v
}

fn dict(own: &[&'static str]) -> Vec<&'static str> {
    let mut d = own.to_vec();
    d.extend(NUMBERS);
    d.extend(WEIRD);
    d
}

/// The config file: TOML, then validation. Seeds are the shipped example and the smaller
/// configs the tests use.
#[test]
fn fuzz_config() {
    let seeds = vec![
        repo_file("roger.example.toml"),
        b"[run]\nname = \"t\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ck\"\n".to_vec(),
        b"[run]\nname = \"nano\"\nlog = \"train.log\"\nformat = \"text\"\n[metrics]\npatterns = [{ regex = 'iter (\\d+): loss ([^,]+),', fields = [\"step\", \"loss\"] }]\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [3.0, 11.0]\nloss_slope = [-50.0, 0.0]\nwindow = 50\n".to_vec(),
        b"[run]\nname = \"r\"\nlog = \"train.log\"\ncheckpoint_dir = \"ck\"\n\n[publish]\nkeep_last = 1\n\n[disk]\nwarn_free = \"10GiB\"\n[watch]\ngrace = \"30s\"\ninterval = \"2s\"\n".to_vec(),
        b"[run]\nname = \"s\"\n[schedule]\nkind = \"cosine\"\npeak_lr = 3e-4\nwarmup_steps = 100\ntotal_steps = 1000\n[[phase]]\nname = \"warmup\"\nfrom = 0\nto = 100\n[[phase]]\nname = \"main\"\nfrom = 100\nstale = \"10m\"\n[[quiet]]\nevery = 1000\nlast = \"30m\"\n".to_vec(),
    ];
    let d = dict(&[
        "[run]\n",
        "[[phase]]\n",
        "[[quiet]]\n",
        "[watch]\n",
        "[metrics]\n",
        "[schedule]\n",
        "[publish]\n",
        "[disk]\n",
        "[gpu]\n",
        "\"1s\"",
        "\"0s\"",
        "\"99999999999999999999d\"",
        "\"1e300s\"",
        "\"-5m\"",
        "\"10GiB\"",
        "\"99999999999999999999TiB\"",
        "\"1.5e19B\"",
        "= nan",
        "= inf",
        "= -inf",
        "= 1e308",
        "= []",
        "= [1, 2]",
        "= [nan, inf]",
        "= [3.0, 1.0]",
        "= {}",
        "= true",
        "= \"\"",
        "'(?P<step>\\d+)'",
        "'('",
        "'(?P<x>a)'",
        "from = ",
        "to = ",
        "window = ",
        "keep_last = ",
        "interval = ",
        "hysteresis = ",
        "\"\"\"\n",
        "'''",
        "#",
    ]);
    let path = Path::new("/fuzz/roger.toml");
    let n = run(
        "config",
        iters(5_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &|b: &[u8]| {
            let text = String::from_utf8_lossy(b);
            if let Ok(cfg) = crate::config::Config::parse(&text, path) {
                // What the commands do first with a loaded config.
                cfg.ledger_path();
                let _ = cfg.checkpoint_dir();
                cfg.quarantine_dir();
                for s in [0, 99, 100, u64::MAX] {
                    cfg.phase_for(s);
                }
                let _ = crate::metrics::line_parser(cfg.run.format, &cfg.metrics);
            }
        },
    );
    assert!(n > 0);
}

#[test]
fn fuzz_mountinfo() {
    let mut seeds: Vec<Vec<u8>> = ["native_ext4", "nfs", "overlay", "wsl2"]
        .iter()
        .map(|f| repo_file(&format!("tests/fixtures/mountinfo/{f}.txt")))
        .collect();
    seeds.extend(proc_file("/proc/self/mountinfo"));
    seeds.push(b"36 35 98:0 /mnt1 /mnt\\040with\\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n".to_vec());
    let d = dict(&[
        " - ",
        " ",
        "\\040",
        "\\134",
        "\\777",
        "\\",
        "/",
        "/mnt/c",
        "drvfs",
        "9p",
        "fuse.sshfs",
        "nfs4",
        "overlay",
        "tmpfs",
    ]);
    let n = run(
        "mountinfo",
        iters(30_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &|b: &[u8]| {
            let mounts = fskind::parse_mountinfo(&String::from_utf8_lossy(b));
            for m in &mounts {
                fskind::classify(m).caution();
            }
            for p in ["/", "/mnt/c/ck", "/home/u/run", "relative", ""] {
                fskind::kind_in(&mounts, Path::new(p));
            }
            wsl::host_drive(None, &mounts);
            wsl::host_drive(Some(Path::new("/mnt/c")), &mounts);
        },
    );
    assert!(n > 0);
}

/// /proc/PID/stat through both readers (the watch's tree sampler and `pidinfo`).
#[test]
fn fuzz_proc_stat() {
    let seeds = seeds_with(
        &[
            "4242 (python3) S 1 4242 4242 0 -1 4194560 1 0 0 0 150 30 7 2 20 0 8 0 12345 1 1 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
            "77 (a) (b) c) Z 1 77 77 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 99 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 9\n",
        ],
        &["/proc/self/stat", "/proc/1/stat", "/proc/thread-self/stat"],
    );
    let d = dict(&["(", ")", ") ", " R ", " Z ", " "]);
    let n = run(
        "proc_stat",
        iters(20_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &|b: &[u8]| {
            let text = String::from_utf8_lossy(b);
            for ticks in [100.0, 0.0, 1e-300] {
                proc::parse_stat(&text, ticks);
            }
            pidinfo::parse_stat(&text);
        },
    );
    assert!(n > 0);
}

/// /proc/PID/io, /proc/meminfo, /proc/PID/cmdline and /proc/version.
#[test]
fn fuzz_proc_io_meminfo_cmdline_version() {
    let seeds = seeds_with(
        &[
            "rchar: 2012\nwchar: 0\nsyscr: 7\nsyscw: 0\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n",
            "MemTotal:       263842236 kB\nMemFree:         9034120 kB\nMemAvailable:   230000000 kB\nSwapTotal:       8388604 kB\nSwapFree:        8388604 kB\n",
            "python\0train.py\0--lr\x003e-4\0",
            "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@1c602f52c2e4) (gcc (GCC) 11.2.0) #1 SMP\n",
        ],
        &["/proc/self/io", "/proc/meminfo", "/proc/self/cmdline", "/proc/version"],
    );
    let d = dict(&[
        "rchar: ",
        "wchar: ",
        "MemTotal:",
        "MemAvailable:",
        "SwapTotal:",
        "SwapFree:",
        " kB",
        "\0",
        "microsoft",
        "WSL2",
    ]);
    let n = run(
        "proc_io_meminfo_cmdline_version",
        iters(20_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &|b: &[u8]| {
            let text = String::from_utf8_lossy(b);
            proc::parse_io(&text);
            if let Ok(m) = host::parse_meminfo(&text) {
                m.available_share();
                m.swap_used();
                host::pressure(&m);
            }
            pidinfo::parse_cmdline(b);
            wsl::detect_from(&text, None, false);
            wsl::detect_from(&text, Some(&text), true);
        },
    );
    assert!(n > 0);
}

/// The run's cgroup files: /proc/PID/cgroup, cpu.stat, io.stat (one input is fed to all three).
#[test]
fn fuzz_cgroup_files() {
    let seeds = seeds_with(
        &[
            "12:pids:/user.slice\n0::/user.slice/user-1000.slice/session-3.scope\n",
            "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\nnr_periods 0\n",
            "8:0 rbytes=1048576 wbytes=4096 rios=12 wios=1 dbytes=0 dios=0\n259:0 rbytes=7 wbytes=18446744073709551615\n",
        ],
        &["/proc/self/cgroup", "/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/io.stat"],
    );
    let d = dict(&[
        "0::",
        "/",
        "usage_usec ",
        "rbytes=",
        "wbytes=",
        "=",
        " ",
        "\n",
    ]);
    let n = run(
        "cgroup_files",
        iters(20_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &|b: &[u8]| {
            let text = String::from_utf8_lossy(b);
            cgroup::parse_proc_cgroup(&text);
            cgroup::parse_cpu_stat(&text);
            cgroup::parse_io_stat(&text);
        },
    );
    assert!(n > 0);
}

/// What the watch and the critic do with a GPU snapshot, whatever its numbers.
fn use_snapshot(snap: &GpuSnapshot) {
    for g in &snap.gpus {
        crate::gpu::checks::judge_gpu(g);
    }
    let pids: Vec<u32> = snap.processes.iter().map(|p| p.pid).collect();
    let gpus: Vec<u32> = snap.gpus.iter().map(|g| g.index).collect();
    snap.memory_of(&pids);
    crate::watch::policy::vram_gate(snap, &pids[..pids.len() / 2], &gpus);
    for p in [&pids[..], &[]] {
        let mut reader = crate::gpu::FakeGpu::new(vec![Ok(snap.clone())]);
        crate::critic::observe::read_vram(&mut reader, p);
    }
}

const H100: &str = "0, NVIDIA H100 80GB HBM3, GPU-aaaa, 61234, 81559, 98, 71, 74, 689.52, 700.00, 1980, 1980, 0x0000000000000004, 0, 0\n\
1, NVIDIA H100 80GB HBM3, GPU-bbbb, 5, 81559, 0, 0, 33, 70.10, 700.00, 345, 1980, 0x0000000000000001, [N/A], [Not Supported]\n";
const APPS: &str = "4242, GPU-bbbb, 1024\r\n77, GPU-aaaa, [N/A]\n4243, GPU-aaaa, 80000\n";

/// `nvidia-smi --query-gpu` and `--query-compute-apps` CSV (one input holds both, split at
/// the first blank line).
#[test]
fn fuzz_nvidia_smi_csv() {
    let seeds = vec![
        format!("{H100}\n{APPS}").into_bytes(),
        format!("{H100}\nNo running processes found\n").into_bytes(),
        "0, NVIDIA GeForce RTX 4090, GPU-cccc, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]\r\n\r\n4242, GPU-cccc, [N/A]\r\n".as_bytes().to_vec(),
    ];
    let d = dict(&[
        ", ",
        ",",
        "[N/A]",
        "[Not Supported]",
        "0x",
        "0xffffffffffffffff",
        "GPU-aaaa",
        "\n\n",
    ]);
    let n = run(
        "nvidia_smi_csv",
        iters(30_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &|b: &[u8]| {
            let text = String::from_utf8_lossy(b);
            let (gpus_text, apps_text) = text.split_once("\n\n").unwrap_or((&text, ""));
            let gpus = smi::parse_gpus(gpus_text).unwrap_or_default();
            let processes = smi::parse_apps(apps_text, &gpus).unwrap_or_default();
            use_snapshot(&GpuSnapshot {
                gpus,
                processes,
                source: "smi".into(),
                ..Default::default()
            });
        },
    );
    assert!(n > 0);
}

#[test]
fn fuzz_kernel_log_xids() {
    let seeds = vec![
        b"[  812.123456] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n[  900.000001] NVRM: Xid (PCI:0000:af:00): 13, pid=4242, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1)\n".to_vec(),
        b"<3>NVRM: Xid (0000:01:00): 31, Ch 00000010, intr 10000000. MMU Fault\nkernel: usb 1-1: new device\n".to_vec(),
    ];
    let d = dict(&[
        "NVRM: Xid (",
        "): ",
        ", ",
        "PCI:0000:3b:00",
        "79",
        "13",
        "48",
    ]);
    let n = run(
        "kernel_log_xids",
        iters(5_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &|b: &[u8]| {
            let xids = xid::parse_kernel_log(&String::from_utf8_lossy(b));
            xid::findings(&xids);
        },
    );
    assert!(n > 0);
}

/// `--gpu-replay` recordings (written by `probe --record`, or by hand).
#[test]
fn fuzz_gpu_replay() {
    let seeds: Vec<Vec<u8>> = [
        "h100_healthy",
        "h100_orphaned",
        "h100_throttling",
        "wsl_no_per_process_vram",
    ]
    .iter()
    .map(|f| repo_file(&format!("tests/fixtures/gpu/{f}.json")))
    .collect();
    let d = dict(&[
        "\"memory_used\": ",
        "\"used_memory\": ",
        "\"pid\": ",
        "\"gpu\": ",
        "\"index\": ",
        "\"throttle\": [\"hw_slowdown\", \"é\"]",
        "\"ecc_uncorrected\": ",
        "null",
    ]);
    let n = run(
        "gpu_replay",
        iters(20_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &|b: &[u8]| {
            let text = String::from_utf8_lossy(b);
            if let Ok(r) = serde_json::from_str::<crate::gpu::replay::Recording>(&text) {
                for s in &r.snapshots {
                    use_snapshot(s);
                }
            }
        },
    );
    assert!(n > 0);
}

// Regressions: each input is the fuzzer's minimised find (debug builds panic on integer
// overflow; release builds wrapped to nonsense).

#[test]
fn regress_smi_memory_past_u64_in_bytes() {
    let g = smi::parse_gpus("0,,,,,,,,,,,,,,\n1,,,,24897202737452,,,,,,,,,,").unwrap();
    assert_eq!(g[1].memory_total, Some(u64::MAX));
    let a = smi::parse_apps("1, GPU-x, 24897202737452\n", &g).unwrap();
    assert_eq!(a[0].used_memory, Some(u64::MAX));
}

#[test]
fn regress_meminfo_kb_past_u64_in_bytes() {
    let m =
        host::parse_meminfo("MemTotal:0\nMemAvailable:0\nSwapTotal:112952220998733294").unwrap();
    assert_eq!(m.swap_total, u64::MAX);
}

#[test]
fn regress_proc_stat_utime_plus_stime_overflows() {
    let s = proc::parse_stat(
        "7()S 0 6 4 0 1 4 6 0 5 5 18446744073709551615 4 0 0 8 0 0 0 0",
        100.0,
    )
    .unwrap();
    assert_eq!(s.cpu_s, u64::MAX as f64 / 100.0);
}

#[test]
fn regress_proc_io_rchar_plus_wchar_overflows() {
    assert_eq!(
        proc::parse_io("rchar: 18446744073709551615\nwchar: 1\n"),
        Some(u64::MAX)
    );
}

/// The fuzzer's find in a replay recording (the same numbers come from NVML or nvidia-smi):
/// per-process VRAM summed past u64.
#[test]
fn regress_process_vram_sum_past_u64() {
    let r: crate::gpu::replay::Recording = serde_json::from_str(
        r#"{"snapshots":[{"gpus":[{"index":0,"name":"","uuid":"","":0,"":0}],"processes":[{"pid":2,"gpu":0,"used_memory":3},{"pid":1,"gpu":0,"used_memory":18446744073709551615}],"source":""}]}"#,
    )
    .unwrap();
    let snap = &r.snapshots[0];
    assert_eq!(snap.memory_of(&[1, 2]), Some(u64::MAX));
    match crate::watch::policy::vram_gate(snap, &[], &[0]) {
        crate::watch::policy::VramGate::Foreign { bytes, .. } => assert_eq!(bytes, u64::MAX),
        other => panic!("{other:?}"),
    }
}

/// The fuzzer's find in nvidia-smi output: one PID's VRAM on one GPU summed past u64 by the
/// critic's VRAM read.
#[test]
fn regress_critic_vram_per_gpu_sum_past_u64() {
    let processes = smi::parse_apps("2,,4\n2,,79703710938795", &[]).unwrap();
    let snap = GpuSnapshot {
        gpus: Vec::new(),
        processes,
        source: "smi".into(),
        ..Default::default()
    };
    let mut reader = crate::gpu::FakeGpu::new(vec![Ok(snap)]);
    let v = crate::critic::observe::read_vram(&mut reader, &[2]);
    assert_eq!(
        v.used_gib.map(|n| n.0),
        Some(u64::MAX as f64 / f64::from(1u32 << 30))
    );
}
