//! `roger bench` end to end on a machine without a GPU: the CPU GEMM, JSON, the ledger,
//! and a clear answer when a GPU is asked for but absent.

use crate::util::Env;

#[test]
fn cpu_gemm_is_labelled_measured_and_recorded() {
    let env = Env::new();
    env.write(
        "roger.toml",
        "[run]\nname = \"t\"\n[bench]\nparams = 124e6\n",
    );
    let args = [
        "bench", "--device", "cpu", "--sizes", "32,64", "--iters", "2", "--json",
    ];
    let run = env.run(&args).expect(0);
    let v: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
    assert_eq!(v["measured"]["device"], "cpu");
    assert!(v["measured"]["name"].as_str().unwrap().starts_with("CPU"));
    let g = v["measured"]["gemm"].as_array().unwrap();
    assert_eq!(g.len(), 2);
    assert_eq!(g[1]["size"], 64);
    assert!(g[1]["best_tflops"].as_f64().unwrap() > 0.0);
    assert!(v["summaries"][0]["ratio"].is_null());
    assert!(v["arbitration"].is_null());
    assert!(run.stdout().contains("MFU arbitration needs a GPU bench"));
    let ledger = env.read("roger-ledger.jsonl");
    assert!(
        ledger.contains("\"kind\":\"bench\"") && ledger.contains("\"device\":\"cpu\""),
        "{ledger}"
    );

    let args = ["bench", "--device", "cpu", "--sizes", "32", "--iters", "1"];
    env.run(&args)
        .expect(0)
        .stdout_has("GFLOPS")
        .stdout_has("CPU fallback")
        .stdout_has("bench: ok");
    let args = [
        "bench",
        "--device",
        "cpu",
        "--sizes",
        "32",
        "--iters",
        "1",
        "--no-ledger",
    ];
    env.run(&args).expect(0);
    assert_eq!(env.read("roger-ledger.jsonl").lines().count(), 2);
}

#[test]
fn gpu_asked_without_a_driver_is_a_clear_unknown() {
    let env = Env::new();
    if roger::bench::libs::driver_present() {
        return; // a CUDA machine: tests/gpu/check.sh covers it
    }
    env.run(&["bench", "--device", "gpu", "--sizes", "64"])
        .expect(3)
        .stderr_has("no NVIDIA driver");
}

#[test]
/// bench judges: a usage error is UNKNOWN (3), never CRITICAL (2) in a monitoring check.
fn bad_arguments_are_usage_errors() {
    let env = Env::new();
    env.run(&["bench", "--dtypes", "fp8"])
        .expect(3)
        .stderr_has("expected fp32, tf32, fp16 or bf16");
    env.run(&["bench", "--sizes", "x"]).expect(3);
}
