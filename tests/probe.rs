//! `roger probe` end to end: replay recordings, fake nvidia-smi / nvidia-smi.exe on PATH,
//! fixture mountinfo / meminfo / kernel log, real orphaned processes.

use crate::util::{repo_root, Env};
use std::process::Command;

pub fn fixture(rel: &str) -> String {
    repo_root()
        .join("tests/fixtures")
        .join(rel)
        .display()
        .to_string()
}

/// A probe command with the machine-dependent inputs pinned to fixtures.
pub fn probe(env: &Env, args: &[&str]) -> Command {
    let mut c = env.cmd(args);
    env.write("kmsg.txt", "");
    c.env("ROGER_KMSG", env.path("kmsg.txt"))
        .env("ROGER_MEMINFO", env.write("meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n"))
        .env("ROGER_MOUNTINFO", fixture("mountinfo/native_ext4.txt"))
        .env("ROGER_PROC_VERSION", env.write("version", "Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)\n"))
        .env_remove("WSL_DISTRO_NAME");
    c
}

fn config(env: &Env, extra: &str) {
    env.write("roger.toml", format!("[run]\nname = \"t\"\ncheckpoint_dir = \"ckpt\"\n[disk]\nwarn_free = \"1MiB\"\nfail_free = \"1KiB\"\n{extra}"));
}

#[test]
fn healthy_replay_is_ok_and_goes_to_the_ledger() {
    let env = Env::new();
    config(
        &env,
        &format!(
            "[gpu]\nsource = \"replay\"\nreplay = \"{}\"\n",
            fixture("gpu/h100_healthy.json")
        ),
    );
    let run = env.run_cmd(probe(&env, &["probe"]), &["probe"]).expect(0);
    let run = run
        .stdout_has("NVIDIA H100 80GB HBM3")
        .stdout_has("normal under full load")
        .stdout_has("probe: ok");
    drop(run);
    let ledger = env.read("roger-ledger.jsonl");
    assert!(
        ledger.contains("\"kind\":\"probe\"") && ledger.contains("\"status\":\"ok\""),
        "{ledger}"
    );
    env.run_cmd(
        probe(&env, &["probe", "--no-ledger"]),
        &["probe", "--no-ledger"],
    )
    .expect(0);
    assert_eq!(env.read("roger-ledger.jsonl").lines().count(), 1);
}

#[test]
fn bad_throttling_warns() {
    let env = Env::new();
    let args = [
        "probe",
        "--replay",
        &fixture("gpu/h100_throttling.json"),
        "--no-ledger",
    ];
    env.run_cmd(probe(&env, &args), &args)
        .expect(1)
        .stdout_has("throttled by hw_thermal_slowdown, sw_thermal_slowdown")
        .stdout_has("probe: warn");
}

#[test]
fn vram_of_pids_unknown_to_the_ledgers_runs_is_flagged() {
    use roger::ledger::{Entry, Kind, Ledger};
    let env = Env::new();
    config(&env, "");
    Ledger::new(env.path("roger-ledger.jsonl"))
        .append(
            Entry::new(Kind::Watch, "watch", "t")
                .field("event", "start")
                .field("pid", 4242),
            chrono::Utc::now(),
        )
        .unwrap();
    let args = [
        "probe",
        "--json",
        "--replay",
        &fixture("gpu/h100_orphaned.json"),
    ];
    let run = env.run_cmd(probe(&env, &args), &args).expect(1);
    let v: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
    let holders = v["holders"].as_array().unwrap();
    assert_eq!(holders[0]["pid"], 4242);
    assert_eq!(holders[0]["known_run"], true);
    assert_eq!(holders[1]["pid"], 5151);
    assert_eq!(
        holders[1]["orphaned"],
        "not part of any run the ledger knows"
    );
    assert_eq!(v["status"], "warn");
    let ledger = env.read("roger-ledger.jsonl");
    assert!(
        ledger
            .lines()
            .last()
            .unwrap()
            .contains("\"orphaned\":[5151]"),
        "{ledger}"
    );
}

#[test]
fn a_real_orphan_is_flagged_with_its_command_line() {
    let env = Env::new();
    // `sh` leads its own process group and exits at once: its background sleep is
    // reparented and its group leader is gone, as a crashed trainer's workers are.
    use std::os::unix::process::CommandExt;
    let out = Command::new("sh")
        .arg("-c")
        .arg("sleep 120 >/dev/null 2>&1 & echo $!")
        .process_group(0)
        .output()
        .unwrap();
    let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let rec = format!(
        r#"{{"snapshots":[{{"gpus":[{{"index":0,"name":"NVIDIA L4","uuid":"GPU-1"}}],"processes":[{{"pid":{pid},"gpu":0,"used_memory":1073741824}}],"source":"nvml"}}]}}"#
    );
    env.write("rec.json", rec);
    let args = ["probe", "--replay", "rec.json", "--no-ledger"];
    let run = env.run_cmd(probe(&env, &args), &args);
    let _ = Command::new("kill").arg(pid.to_string()).status();
    run.expect(1)
        .stdout_has("sleep 120")
        .stdout_has("ORPHANED? parent gone");
}

#[test]
fn wsl_drvfs_checkpoints_host_drive_and_windows_view() {
    let env = Env::new();
    let host = env.path("hostdrive");
    std::fs::create_dir_all(&host).unwrap();
    env.write("roger.toml", format!(
        "[run]\nname = \"t\"\ncheckpoint_dir = \"/mnt/c/runs/ckpt\"\n[disk]\nwarn_free = \"1MiB\"\nfail_free = \"1KiB\"\nhost = \"{}\"\n[gpu]\nsource = \"replay\"\nreplay = \"{}\"\n",
        host.display(), fixture("gpu/wsl_no_per_process_vram.json")));
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = env.write("bin/nvidia-smi.exe", "#!/bin/sh\ncase \"$1\" in\n  --query-gpu=*) printf '0, NVIDIA GeForce RTX 4090, GPU-4090, 15000, 24564, 40, 20, 50, 120.5, 450.00, 2520, 3120, 0x0000000000000000, [N/A], [N/A]\\r\\n' ;;\n  *) printf '' ;;\nesac\n");
    make_exec(&exe);
    let mut c = probe(&env, &["probe"]);
    c.env("ROGER_MOUNTINFO", fixture("mountinfo/wsl2.txt"))
        .env(
            "ROGER_PROC_VERSION",
            env.write(
                "v2",
                "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@1c602f52c2e4)\n",
            ),
        )
        .env("WSL_DISTRO_NAME", "Ubuntu")
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        );
    env.run_cmd(c, &["probe"])
        .expect(1)
        .stdout_has("WSL2 Ubuntu")
        .stdout_has("checkpoints  drvfs")
        .stdout_has("is on drvfs")
        .stdout_has("host drive")
        .stdout_has("Windows host view")
        .stdout_has("14.6 GiB / 24.0 GiB used")
        .stdout_has("does not report per-process VRAM under WDDM");
}

pub fn make_exec(p: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn fake_nvidia_smi_is_read_and_its_failure_is_unknown() {
    let env = Env::new();
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let smi = env.write("bin/nvidia-smi", "#!/bin/sh\ncase \"$1\" in\n  --query-gpu=*) echo '0, NVIDIA A100-SXM4-80GB, GPU-a, 70000, 81920, 100, 80, 65, 390.1, 400.00, 1410, 1410, 0x0000000000000004, 0, 0' ;;\n  --query-compute-apps=*) echo '999999, GPU-a, 69000' ;;\nesac\n");
    make_exec(&smi);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let args = ["probe", "--source", "smi", "--json"];
    let mut c = probe(&env, &args);
    c.env("PATH", &path);
    let run = env.run_cmd(c, &args).expect(0);
    let v: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
    assert_eq!(v["gpu_source"], "nvidia-smi");
    assert_eq!(v["gpus"][0]["name"], "NVIDIA A100-SXM4-80GB");
    assert_eq!(v["gpus"][0]["throttle"][0], "sw_power_cap");
    assert_eq!(v["holders"][0]["used_memory"], 69000u64 << 20);

    env.write(
        "bin/nvidia-smi",
        "#!/bin/sh\necho 'Failed to initialize NVML: Unknown Error'\nexit 255\n",
    );
    let mut c = probe(&env, &["probe", "--source", "smi"]);
    c.env("PATH", &path);
    env.run_cmd(c, &["probe"])
        .expect(3)
        .stdout_has("Failed to initialize NVML")
        .stdout_has("probe: unknown");
}

#[test]
fn disk_levels_and_memory_pressure() {
    let env = Env::new();
    env.write("roger.toml", "[run]\nname = \"t\"\n[disk]\nwarn_free = \"1000000TB\"\nfail_free = \"1KiB\"\n[gpu]\nsource = \"none\"\n");
    env.run_cmd(probe(&env, &["probe"]), &["probe"])
        .expect(1)
        .stdout_has("below the warn level");
    env.write("roger.toml", "[run]\nname = \"t\"\n[disk]\nwarn_free = \"1000000TB\"\nfail_free = \"999999TB\"\n[gpu]\nsource = \"none\"\n");
    env.run_cmd(probe(&env, &["probe"]), &["probe"])
        .expect(2)
        .stdout_has("below the fail level");
    env.write("roger.toml", "[run]\nname = \"t\"\n[disk]\nwarn_free = \"1KiB\"\nfail_free = \"1KiB\"\n[gpu]\nsource = \"none\"\n");
    let mut c = probe(&env, &["probe"]);
    c.env(
        "ROGER_MEMINFO",
        env.write(
            "low",
            "MemTotal: 16000000 kB\nMemAvailable: 1000000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
        ),
    );
    env.run_cmd(c, &["probe"])
        .expect(1)
        .stdout_has("memory pressure");
}

#[test]
fn kernel_log_xids_are_triaged() {
    let env = Env::new();
    let args = ["probe", "--source", "none"];
    let mut c = probe(&env, &args);
    c.env("ROGER_KMSG", env.write("k", "[  812.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n[ 9.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=python, Graphics Exception\n"));
    env.run_cmd(c, &args)
        .expect(1)
        .stdout_has("critical XID")
        .stdout_has("79 on PCI:0000:3b:00 (GPU has fallen off the bus)")
        .stdout_has("usually the program");
}

#[test]
fn record_then_replay() {
    let env = Env::new();
    let args = [
        "probe",
        "--replay",
        &fixture("gpu/h100_throttling.json"),
        "--record",
        "out.json",
        "--samples",
        "3",
        "--every",
        "10ms",
    ];
    env.run_cmd(probe(&env, &args), &args)
        .expect(0)
        .stdout_has("recorded 3 snapshot(s) of 2 GPU(s)");
    let v: serde_json::Value = serde_json::from_str(&env.read("out.json")).unwrap();
    assert_eq!(v["snapshots"].as_array().unwrap().len(), 3);
    let args = ["probe", "--replay", "out.json"];
    env.run_cmd(probe(&env, &args), &args)
        .expect(1)
        .stdout_has("hw_thermal_slowdown");
    // No GPU at all: recording is an error, not an empty file.
    let args = ["probe", "--source", "none", "--record", "none.json"];
    env.run_cmd(probe(&env, &args), &args)
        .expect(3)
        .stderr_has("no GPU");
    assert!(!env.path("none.json").exists());
}
