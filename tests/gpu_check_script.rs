//! tests/gpu/check.sh judges: run here against a stand-in `roger` that prints recorded-shape
//! reports (an H200's), with LD_LIBRARY_PATH unset (`set -u`). Good numbers pass; a slow
//! bf16 GEMM, a reader that fell back to nvidia-smi, or a missing binary fail with the reason.

use crate::util::{repo_root, Env};
use serde_json::{json, Value};
use std::process::Command;

fn available(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

struct Reports {
    auto: Value,
    nvml: Value,
    smi: Value,
    bench: Value,
}

fn h200_gpu(source_total_mib: u64) -> Value {
    json!({"index": 0, "name": "NVIDIA H200", "uuid": "GPU-1b2c3d4e-0000-1111-2222-333333333333",
           "memory_total": source_total_mib << 20, "throttle": []})
}

fn good() -> Reports {
    let worker = json!({"pid": 5151, "gpu": 0, "used_memory": 3u64 << 30,
                        "cmdline": "/opt/roger bench --worker --no-ledger --gpu 0 --sizes=8192"});
    Reports {
        auto: json!({"gpu_source": "nvml", "gpu_reader": "NVML (libnvidia-ml.so.1 at /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15)",
                     "gpu_fallback": null, "gpus": [h200_gpu(143771)], "holders": [worker], "status": "ok"}),
        nvml: json!({"gpu_source": "nvml", "gpu_reader": "NVML (libnvidia-ml.so.1)", "gpus": [h200_gpu(143771)], "holders": []}),
        smi: json!({"gpu_source": "nvidia-smi", "gpus": [h200_gpu(143771)], "holders": []}),
        bench: json!({
            "measured": {"device": "gpu", "name": "NVIDIA H200", "bandwidth_gbs": 3950.0},
            "gpu_error": null, "spec_model": "H200", "spec_note": null,
            "summaries": [{"dtype": "bf16", "best_tflops": 721.4, "median_tflops": 715.0, "at_size": 8192, "spec_tflops": 989.4, "ratio": 0.7291}],
            "bandwidth_spec_gbs": 4800.0, "bandwidth_ratio": 0.8229,
            "load": {"gpu": 0, "samples": 9, "loaded_samples": 6, "throttle": ["sw_power_cap"]},
            "status": "ok", "exit_code": 0}),
    }
}

/// Run check.sh with a stand-in roger printing `r`; returns (exit code, stderr, verdict).
fn check(env: &Env, r: &Reports, bin: Option<&str>) -> (i32, String, Option<Value>) {
    for (name, v) in [
        ("auto", &r.auto),
        ("nvml", &r.nvml),
        ("smi", &r.smi),
        ("bench", &r.bench),
    ] {
        env.write(&format!("fake/{name}.json"), v.to_string());
    }
    let fake = env.path("fake");
    let roger = env.write(
        "fake/roger",
        format!(
            "#!/bin/sh\nF={}\ncase \"$*\" in\n  --version) echo 'roger 0.1.0' ;;\n  *'--source auto'*) cat $F/auto.json ;;\n  *'--source nvml'*) cat $F/nvml.json ;;\n  *'--source smi'*) cat $F/smi.json ;;\n  *'--iters 300'*) sleep 1; cat $F/bench.json ;;\n  bench*) cat $F/bench.json ;;\n  *) echo \"unexpected: $*\" >&2; exit 9 ;;\nesac\n",
            fake.display()
        ),
    );
    crate::probe::make_exec(&roger);
    let out = env.path("out");
    let o = Command::new("bash")
        .arg(repo_root().join("tests/gpu/check.sh"))
        .env("ROGER_BIN", bin.map_or(roger.clone(), Into::into))
        .env("OUT", &out)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("MIN_RATIO")
        .env_remove("GPU")
        .output()
        .expect("bash");
    let verdict = std::fs::read_to_string(out.join("verdict.json"))
        .ok()
        .map(|t| serde_json::from_str(&t).expect("verdict.json is JSON"));
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        verdict,
    )
}

/// check.sh's interpreters; when one is missing, says so through `util::missing`.
fn have_bash_and_python() -> bool {
    let ok = available("bash") && available("python3");
    if !ok {
        crate::util::missing(
            &crate::util::this_test(),
            "bash and python3 (tests/gpu/check.sh runs in them)",
            "apt-get install bash python3; .ci/run does",
        );
    }
    ok
}

#[test]
fn good_numbers_pass_and_every_step_leaves_valid_json() {
    if !have_bash_and_python() {
        return;
    }
    let env = Env::new();
    let (code, err, verdict) = check(&env, &good(), None);
    assert_eq!(code, 0, "{err}");
    let v = verdict.unwrap();
    assert_eq!(v["ok"], true);
    let names: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["reader", "nvml_vs_smi", "bench", "vram"]);
    assert!(err.contains("bf16 721.4 TFLOPS (73%)"), "{err}");
    assert!(
        err.contains("bench worker PID 5151 holds 3072 MiB"),
        "{err}"
    );
    for f in [
        "probe_auto",
        "probe_nvml",
        "probe_smi",
        "bench",
        "probe_during",
    ] {
        let text = env.read(&format!("out/{f}.json"));
        serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{f}.json: {e}: {text}"));
    }
}

#[test]
fn a_slow_gemm_a_fallback_reader_or_no_binary_fail_with_the_reason() {
    if !have_bash_and_python() {
        return;
    }
    // Before: check.sh printed everything and exited 0 whatever it saw.
    let env = Env::new();
    let mut r = good();
    r.bench["summaries"][0]["best_tflops"] = json!(395.8);
    r.bench["summaries"][0]["ratio"] = json!(0.4);
    r.bench["bandwidth_ratio"] = json!(0.5);
    let (code, err, verdict) = check(&env, &r, None);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("bf16 GEMM reached 395.8 TFLOPS = 40% of the 989.4 spec (below 60%)"),
        "{err}"
    );
    assert!(err.contains("bandwidth 3950 GB/s = 50%"), "{err}");
    assert_eq!(verdict.unwrap()["ok"], false);

    let env = Env::new();
    let mut r = good();
    r.auto["gpu_source"] = json!("nvidia-smi");
    r.auto["gpu_reader"] = json!("nvidia-smi (/usr/bin/nvidia-smi)");
    r.auto["gpu_fallback"] = json!("NVML did not load (no NVIDIA driver: libnvidia-ml.so.1 nor libnvidia-ml.so could not be loaded)");
    r.smi["gpus"][0]["uuid"] = json!("GPU-other");
    let (code, err, _) = check(&env, &r, None);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("FAIL reader: source nvidia-smi"), "{err}");
    assert!(err.contains("fell back: NVML did not load"), "{err}");
    assert!(err.contains("uuid: NVML"), "{err}");

    let env = Env::new();
    let mut r = good();
    r.auto["holders"] = json!([]);
    r.bench = json!({"measured": {"device": "gpu", "name": "unknown GPU"}, "gpu_error": "libcuda.so.1 lacks cuMemcpyDtoD_v2", "status": "unknown"});
    let (code, err, _) = check(&env, &r, None);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the GPU bench could not run: libcuda.so.1 lacks"),
        "{err}"
    );
    assert!(err.contains("FAIL vram: no probe saw"), "{err}");

    let env = Env::new();
    let (code, err, _) = check(&env, &good(), Some("/nonexistent/roger"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no roger binary at /nonexistent/roger"),
        "{err}"
    );
}

#[test]
fn the_real_roger_without_a_gpu_fails_every_check_with_valid_json() {
    // The field names check.sh reads are the ones roger writes: run it on the real binary.
    if !have_bash_and_python() {
        return;
    }
    if roger::bench::libs::driver_present() {
        // Not a missing component: this machine differs (CI machines have no GPU).
        println!("skipped: a CUDA driver is installed here");
        return;
    }
    let env = Env::new();
    let out = env.path("out");
    let o = Command::new("bash")
        .arg(repo_root().join("tests/gpu/check.sh"))
        .env("ROGER_BIN", crate::util::roger_bin())
        .env("OUT", &out)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("bash");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("FAIL reader: source none"), "{err}");
    assert!(
        err.contains("FAIL bench: the GPU bench could not run: no NVIDIA driver"),
        "{err}"
    );
    for f in [
        "probe_auto",
        "probe_nvml",
        "probe_smi",
        "bench",
        "probe_during",
        "verdict",
    ] {
        let text = env.read(&format!("out/{f}.json"));
        serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{f}.json: {e}: {text}"));
    }
}
