//! `roger bench` and `roger probe` against fake NVIDIA libraries built here with `cc -shared`:
//! libcuda/libcublas exporting exactly the symbols of CUDA 12.0 or 12.3 (lists in
//! tests/fixtures/cuda, from cudarc's per-release bindings), each function returning 999
//! (CUDA_ERROR_UNKNOWN); and a small libnvidia-ml.so.1 that answers like a driver with a GPU
//! off the bus. Only the library-loading and reading paths run; no GPU is needed.

use crate::probe::{make_exec, probe};
use crate::util::{repo_root, Env};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Compile `src` into `dir/name` as a shared object; None (the test skips, or fails under CI)
/// without a C compiler.
fn cc_shared(dir: &Path, name: &str, src: &str) -> Option<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let out = dir.join(name);
    match Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&c)
        .arg(format!("-Wl,-soname,{name}"))
        .output()
    {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => panic!("cc failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            crate::util::missing(
                &crate::util::this_test(),
                "a C compiler (cc)",
                &format!("apt-get install gcc; .ci/run does; running cc: {e}"),
            );
            None
        }
    }
}

/// Symbols of a recorded list, less `without`.
fn symbols(list: &str, without: &[&str]) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures/cuda").join(list)).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|s| !s.is_empty() && !without.contains(s))
        .map(String::from)
        .collect()
}

/// A library of `int SYM(void) { return 999; }` for each symbol: 999 is CUDA_ERROR_UNKNOWN
/// and an unknown cuBLAS status, so any call fails cleanly instead of doing anything.
fn fake_lib(dir: &Path, name: &str, syms: &[String]) -> Option<PathBuf> {
    let src: String = syms
        .iter()
        .map(|s| format!("int {s}(void) {{ return 999; }}\n"))
        .collect();
    cc_shared(dir, name, &src)
}

fn bench(env: &Env, libdir: &Path, device: &str) -> crate::util::Run {
    let args = [
        "bench",
        "--device",
        device,
        "--json",
        "--no-ledger",
        "--sizes",
        "64",
        "--iters",
        "1",
        "--timeout",
        "60s",
    ];
    let mut c = env.cmd(&args);
    c.env("LD_LIBRARY_PATH", libdir)
        .env("RUST_BACKTRACE", "1")
        .env_remove("CUDA_VISIBLE_DEVICES");
    env.run_cmd(c, &args)
}

fn json(run: &crate::util::Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout())
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e})\n{}", run.report()))
}

#[test]
fn bench_on_cuda_12_0_and_12_3_libraries_answers_unknown_not_101() {
    // Before: cudarc bound CUDA 12.4 symbols with `expect` in the parent (cuCtxFromGreenCtx,
    // cublasSgemmGroupedBatched): exit 101 with a panic on every 12.0-12.3 install.
    for v in ["12.0", "12.3"] {
        let env = Env::new();
        let dir = env.path("lib");
        let Some(_) = fake_lib(
            &dir,
            "libcuda.so.1",
            &symbols(&format!("libcuda-{v}.txt"), &[]),
        ) else {
            return;
        };
        fake_lib(
            &dir,
            "libcublas.so.12",
            &symbols(&format!("libcublas-{v}.txt"), &[]),
        )
        .unwrap();
        for device in ["gpu", "auto"] {
            let run = bench(&env, &dir, device).expect(3);
            let v = json(&run);
            assert_eq!(v["status"], "unknown", "{}", run.report());
            assert_eq!(v["measured"]["device"], "gpu", "{}", run.report());
            let why = v["gpu_error"].as_str().unwrap_or_default().to_string();
            assert!(
                why.contains("CUDA_ERROR_UNKNOWN"),
                "{why}\n{}",
                run.report()
            );
            assert!(
                run.stderr().contains("roger: bench: unknown:"),
                "{}",
                run.report()
            );
            assert!(
                !run.stderr().contains("stack backtrace"),
                "{}",
                run.report()
            );
        }
    }
}

#[test]
fn a_library_without_a_bound_symbol_is_named_not_a_panic() {
    let env = Env::new();
    let dir = env.path("lib");
    let drv = symbols("libcuda-12.0.txt", &["cuMemcpyDtoD_v2"]);
    let Some(_) = fake_lib(&dir, "libcuda.so.1", &drv) else {
        return;
    };
    fake_lib(&dir, "libcublas.so.12", &symbols("libcublas-12.0.txt", &[])).unwrap();
    let run = bench(&env, &dir, "gpu").expect(3);
    let why = json(&run)["gpu_error"].as_str().unwrap().to_string();
    assert!(
        why.contains("libcuda.so.1 lacks cuMemcpyDtoD_v2") && why.contains("CUDA 12.0 or newer"),
        "{why}"
    );
    // The worker's tail is the message, not backtrace frames (RUST_BACKTRACE=1 is set).
    assert!(
        !run.stderr().contains("stack backtrace"),
        "{}",
        run.report()
    );

    let env = Env::new();
    let dir = env.path("lib");
    fake_lib(&dir, "libcuda.so.1", &symbols("libcuda-12.0.txt", &[])).unwrap();
    let blas = symbols("libcublas-12.0.txt", &["cublasGemmEx"]);
    fake_lib(&dir, "libcublas.so.12", &blas).unwrap();
    let why = json(&bench(&env, &dir, "gpu").expect(3))["gpu_error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("libcublas.so.12 lacks cublasGemmEx"), "{why}");
}

/// A libnvidia-ml.so.1 with three GPUs: 0 healthy (v1 memory counts 2 GiB reserved as used,
/// v2 does not; an unknown clock-event bit 0x800), 1 off the bus, 2 healthy.
const FAKE_NVML: &str = r#"
#include <string.h>
typedef unsigned long long u64;
typedef struct { u64 total, free, used; } mem1;
typedef struct { unsigned version; u64 total, reserved, free, used; } mem2;
typedef struct { unsigned gpu, memory; } util_t;
typedef struct { unsigned pid; u64 used; unsigned gi, ci; } proc_t;
#define MIB (1024ULL * 1024ULL)
int nvmlInit_v2(void) { return 0; }
int nvmlInitWithFlags(unsigned f) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "fake"; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 3; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d) {
  if (i == 1) return 15; /* NVML_ERROR_GPU_IS_LOST */
  *d = (void *)(unsigned long)(i + 1); return 0;
}
static unsigned idx(void *d) { return (unsigned)(unsigned long)d - 1; }
int nvmlDeviceGetName(void *d, char *s, unsigned n) { strncpy(s, "NVIDIA H100 80GB HBM3", n); return 0; }
int nvmlDeviceGetUUID(void *d, char *s, unsigned n) {
  strncpy(s, idx(d) == 0 ? "GPU-00000000-0000-0000-0000-000000000000" : "GPU-22222222-0000-0000-0000-000000000000", n);
  return 0;
}
int nvmlDeviceGetMemoryInfo(void *d, mem1 *m) { m->total = 81559 * MIB; m->used = 2548 * MIB; m->free = m->total - m->used; return 0; }
int nvmlDeviceGetMemoryInfo_v2(void *d, mem2 *m) {
  if (m->version != (sizeof(mem2) | (2u << 24))) return 25; /* ARGUMENT_VERSION_MISMATCH */
  m->total = 81559 * MIB; m->reserved = 2048 * MIB; m->used = 500 * MIB;
  m->free = m->total - m->reserved - m->used; return 0;
}
int nvmlDeviceGetUtilizationRates(void *d, util_t *u) { u->gpu = 97; u->memory = 60; return 0; }
int nvmlDeviceGetCurrentClocksThrottleReasons(void *d, u64 *r) { *r = 0x4 | 0x800; return 0; }
int nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned *n, proc_t *p) {
  if (idx(d) != 0) { *n = 0; return 0; }
  if (*n < 1 || !p) { *n = 1; return 7; /* INSUFFICIENT_SIZE */ }
  *n = 1; p[0].pid = 4242; p[0].used = 1024 * MIB; p[0].gi = p[0].ci = 0xFFFFFFFF; return 0;
}
"#;

fn nvml_probe(env: &Env, dir: &Path, extra: &[(&str, &str)]) -> crate::util::Run {
    let args = ["probe", "--source", "nvml", "--json", "--no-ledger"];
    let mut c = probe(env, &args);
    c.env("LD_LIBRARY_PATH", dir)
        .env("ROGER_PID_NS", "pid:[4026531836]");
    for (k, v) in extra {
        c.env(k, v);
    }
    env.run_cmd(c, &args)
}

#[test]
fn nvml_so_1_loads_a_lost_gpu_fails_and_the_others_are_kept() {
    let env = Env::new();
    let dir = env.path("lib");
    let Some(_) = cc_shared(&dir, "libnvidia-ml.so.1", FAKE_NVML) else {
        return;
    };
    // Before: only libnvidia-ml.so was tried ("no NVIDIA driver"), and one lost GPU made the
    // whole read fail with nothing about the other two.
    let run = nvml_probe(&env, &dir, &[]).expect(2);
    let v = json(&run);
    assert_eq!(v["gpu_source"], "nvml");
    let reader = v["gpu_reader"].as_str().unwrap();
    assert!(reader.contains("libnvidia-ml.so.1"), "{reader}");
    assert!(v["gpu_fallback"].is_null());
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 3, "{}", run.report());
    assert_eq!(gpus[1]["lost"], true);
    assert!(gpus[1]["error"]
        .as_str()
        .unwrap()
        .contains("fallen off the bus"));
    assert_eq!(gpus[2]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(gpus[2]["uuid"], "GPU-22222222-0000-0000-0000-000000000000");
    // memory_info v2: 500 MiB used, not v1's 2548 (which counts 2 GiB reserved).
    assert_eq!(gpus[0]["memory_used"], 500u64 << 20);
    // The raw clock-event mask keeps the bit nvml-wrapper's from_bits_truncate dropped.
    let throttle: Vec<&str> = gpus[0]["throttle"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(throttle, ["sw_power_cap", "bit_0x800"]);
    let findings = v["findings"].to_string();
    assert!(
        findings.contains("gpu_lost") && findings.contains("bit_0x800"),
        "{findings}"
    );
    assert_eq!(v["status"], "fail");
    assert_eq!(v["holders"][0]["pid"], 4242);
}

#[test]
fn an_nvml_stub_is_unknown_with_the_reason_not_a_panic() {
    let env = Env::new();
    let dir = env.path("lib");
    // Initialises fine but has no nvmlShutdown: nvml-wrapper's drop panicked on it (exit 101).
    let stub = "int nvmlInit_v2(void) { return 0; }\nint nvmlDeviceGetCount_v2(unsigned *n) { *n = 0; return 0; }\n";
    let Some(_) = cc_shared(&dir, "libnvidia-ml.so.1", stub) else {
        return;
    };
    let run = nvml_probe(&env, &dir, &[]).expect(3);
    let why = json(&run)["gpu_error"].as_str().unwrap().to_string();
    assert!(
        why.contains("libnvidia-ml.so.1 lacks nvmlShutdown"),
        "{why}"
    );
    // A library that loads but does not initialise is the answer too (999: Unknown Error).
    let failing = "int nvmlInit_v2(void) { return 999; }\nint nvmlShutdown(void) { return 0; }\n";
    cc_shared(&dir, "libnvidia-ml.so.1", failing).unwrap();
    let run = nvml_probe(&env, &dir, &[]).expect(3);
    let why = json(&run)["gpu_error"].as_str().unwrap().to_string();
    assert!(why.contains("libnvidia-ml.so.1: NVML init"), "{why}");
}

#[test]
fn in_a_container_pid_namespace_holders_are_listed_not_judged() {
    let env = Env::new();
    let dir = env.path("lib");
    let Some(_) = cc_shared(&dir, "libnvidia-ml.so.1", FAKE_NVML) else {
        return;
    };
    // A ledger run with PID 4242 in *this* namespace: the driver's 4242 is a host PID, so
    // before it was claimed as (or judged against) the run's own process.
    env.write("roger.toml", "[run]\nname = \"t\"\n");
    use roger::ledger::{Entry, Kind, Ledger};
    Ledger::new(env.path("roger-ledger.jsonl"))
        .append(
            Entry::new(Kind::Watch, "watch", "t")
                .field("event", "start")
                .field("pid", 4242),
            chrono::Utc::now(),
        )
        .unwrap();
    let run = nvml_probe(&env, &dir, &[("ROGER_PID_NS", "pid:[4026532201]")]);
    let v = json(&run);
    assert_eq!(v["pid_namespace"], "pid:[4026532201]", "{}", run.report());
    assert_eq!(v["holders"][0]["pid"], 4242);
    assert_eq!(v["holders"][0]["known_run"], false);
    assert!(v["holders"][0]["orphaned"].is_null());
    let findings = v["findings"].to_string();
    assert!(findings.contains("host PIDs"), "{findings}");
    assert!(!findings.contains("\"check\":\"orphan\""), "{findings}");
    // The same driver answer in the host's namespace is attributed to the ledger's run.
    let v = json(&nvml_probe(&env, &dir, &[]));
    assert!(v["pid_namespace"].is_null());
    assert_eq!(v["holders"][0]["known_run"], true);
}

#[test]
fn auto_falling_back_to_nvidia_smi_warns_and_says_why() {
    if roger::gpu::dl::Library::open_first(&roger::gpu::nvml::LIB_NAMES).is_ok() {
        // Not a missing component: this machine differs (CI machines have no GPU driver).
        println!("skipped: a real NVML is installed, so `auto` does not fall back");
        return;
    }
    let env = Env::new();
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let smi = env.write("bin/nvidia-smi", "#!/bin/sh\ncase \"$1\" in\n  --query-gpu=*) echo '0, NVIDIA L4, GPU-a, 100, 23034, 0, 0, 40, 20.0, 72.00, 210, 2040, 0x0000000000000001, 0, 0' ;;\n  *) ;;\nesac\n");
    make_exec(&smi);
    let args = ["probe", "--source", "auto", "--json", "--no-ledger"];
    let mut c = probe(&env, &args);
    c.env(
        "PATH",
        format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
    );
    let run = env.run_cmd(c, &args).expect(1);
    let v = json(&run);
    assert_eq!(v["gpu_source"], "nvidia-smi");
    let why = v["gpu_fallback"].as_str().unwrap();
    assert!(
        why.contains("NVML did not load") && why.contains("libnvidia-ml.so.1"),
        "{why}"
    );
    assert!(v["findings"].to_string().contains("\"reader\""));
}
