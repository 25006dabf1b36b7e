//! What the machine and the user hand roger: the config file, /proc files (stat, io,
//! meminfo, cmdline, version, mountinfo), `nvidia-smi` CSV, kernel-log XID lines and GPU
//! replay recordings. Real /proc files of this machine are read at test time as seeds, next
//! to stored samples, so the seeds follow the kernel the tests run on.

use super::{iters, repo_file, run, Gen, NUMBERS, WEIRD};
use roger::untrusted as u;

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
fn config() {
    let seeds = vec![
        repo_file("roger.example.toml"),
        b"[run]\nname = \"t\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ck\"\n".to_vec(),
        b"[run]\nname = \"nano\"\nlog = \"train.log\"\nformat = \"text\"\n[metrics]\npatterns = [{ regex = 'iter (\\d+): loss ([^,]+),', fields = [\"step\", \"loss\"] }]\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [3.0, 11.0]\nloss_slope = [-50.0, 0.0]\nwindow = 50\n".to_vec(),
        b"[run]\nname = \"r\"\nlog = \"train.log\"\ncheckpoint_dir = \"ck\"\n\n[publish]\nkeep_last = 1\n\n[disk]\nwarn_free = \"10GiB\"\n[watch]\ngrace = \"30s\"\ninterval = \"2s\"\n".to_vec(),
        b"[run]\nname = \"s\"\n[schedule]\nkind = \"cosine\"\npeak_lr = 3e-4\nwarmup_steps = 100\ntotal_steps = 1000\n[[phase]]\nname = \"warmup\"\nfrom = 0\nto = 100\n[[phase]]\nname = \"main\"\nfrom = 100\nstale = \"10m\"\n[[quiet]]\nname = \"eval\"\nevery = 1000\nduration = \"30m\"\n".to_vec(),
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
    super::seeds_read("config", &seeds, u::config);
    run(
        "config",
        iters(500),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &u::config,
    );
}

#[test]
fn mountinfo() {
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
    run(
        "mountinfo",
        iters(3_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &u::mountinfo,
    );
}

/// /proc/PID/stat through both readers (the watch's tree sampler and `pidinfo`).
#[test]
fn proc_stat() {
    let seeds = seeds_with(
        &[
            "4242 (python3) S 1 4242 4242 0 -1 4194560 1 0 0 0 150 30 7 2 20 0 8 0 12345 1 1 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
            "77 (a) (b) c) Z 1 77 77 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 99 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 9\n",
        ],
        &["/proc/self/stat", "/proc/1/stat", "/proc/thread-self/stat"],
    );
    let d = dict(&["(", ")", ") ", " R ", " Z ", " "]);
    run(
        "proc_stat",
        iters(2_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &u::proc_stat,
    );
}

/// /proc/PID/io, /proc/meminfo, /proc/PID/cmdline and /proc/version.
#[test]
fn proc_io_meminfo_cmdline_version() {
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
    run(
        "proc_io_meminfo_cmdline_version",
        iters(2_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &u::proc_io_meminfo_cmdline_version,
    );
}

/// The run's cgroup files: /proc/PID/cgroup, cpu.stat, io.stat (one input is fed to all three).
#[test]
fn cgroup_files() {
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
    run(
        "cgroup_files",
        iters(2_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &u::cgroup_files,
    );
}

const H100: &str = "0, NVIDIA H100 80GB HBM3, GPU-aaaa, 61234, 81559, 98, 71, 74, 689.52, 700.00, 1980, 1980, 0x0000000000000004, 0, 0\n\
1, NVIDIA H100 80GB HBM3, GPU-bbbb, 5, 81559, 0, 0, 33, 70.10, 700.00, 345, 1980, 0x0000000000000001, [N/A], [Not Supported]\n";
const APPS: &str = "4242, GPU-bbbb, 1024\r\n77, GPU-aaaa, [N/A]\n4243, GPU-aaaa, 80000\n";

/// `nvidia-smi --query-gpu` and `--query-compute-apps` CSV (one input holds both, split at
/// the first blank line).
#[test]
fn nvidia_smi_csv() {
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
    run(
        "nvidia_smi_csv",
        iters(3_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &u::nvidia_smi,
    );
}

#[test]
fn kernel_log_xids() {
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
    run(
        "kernel_log_xids",
        iters(500),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &u::kernel_log_xids,
    );
}

/// `--gpu-replay` recordings (written by `probe --record`, or by hand).
#[test]
fn gpu_replay() {
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
    super::seeds_read("gpu_replay", &seeds, u::gpu_replay);
    run(
        "gpu_replay",
        iters(2_000),
        &mut |g: &mut Gen| g.mutated(&seeds, &d),
        &u::gpu_replay,
    );
}
