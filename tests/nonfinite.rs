//! Issue 37 point 1: a non-finite value is a sample. A real nanoGPT run that went NaN (fp16 on
//! a V100, karpathy/nanoGPT issue #215) is read to its last line by `init`, and `critic --once`
//! fails it at the first NaN step, with the config `init` wrote.

use crate::util::{repo_root, Env};
use serde_json::Value;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(repo_root().join("tests/fixtures/real").join(name)).unwrap()
}

/// Before: `read 10 samples, steps 2920..3000` and `PASS step 3000` (every `loss nan` line
/// missed the nanoGPT shape's number regex).
#[test]
fn a_nanogpt_run_that_went_nan_is_read_to_its_end_and_fails_at_the_first_nan() {
    let env = Env::new();
    env.write("train.log", fixture("text-nanogpt-gpt2-fp16-nan.txt"));
    let init = env.run(&["init", "--log", "train.log"]).expect(0);
    for s in [
        "nanoGPT iter line",
        "read 16 samples, steps 2920..3060",
        "non-finite values (NaN/inf) read as samples: loss 6 time(s), first at step 3010",
    ] {
        assert!(init.stderr().contains(s), "{s:?}\n{}", init.report());
    }
    env.run(&["check"]).expect(0);
    let judged = env.run(&["critic", "--once", "--json"]);
    assert_eq!(judged.code(), 2, "{}", judged.report());
    let v: Value = serde_json::from_str(judged.stdout().trim()).unwrap();
    assert_eq!(v["status"], "fail", "{}", judged.report());
    assert_eq!(v["step"].as_u64(), Some(3060), "{}", judged.report());
    let loss = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "loss")
        .unwrap();
    assert_eq!(loss["status"], "fail", "{}", judged.report());
    let reason = loss["reason"].as_str().unwrap();
    assert!(reason.contains("since step 3010"), "{reason}");
}

/// Every spelling of a non-finite value is a sample in CSV and JSON lines (Python's bare `NaN`
/// / `-Infinity`, quoted `"nan"`); a mapped value that is no number is reported by `init`,
/// `check` and `critic` with its file, line, key and value, and the rest of its line is used.
#[test]
fn non_finite_cells_are_samples_and_a_bad_value_is_reported_everywhere() {
    for (file, text, not_read, first) in [
        (
            "train.csv",
            "step,loss,lr\n1,3.5,1e-4\n2,3.4,1e-4\n3,nan,1e-4\n4,oops,1e-4\n5,-inf,\"nan\"\n6,Infinity,1e-4\n",
            "train.csv:5: column `loss` is \"oops\", expected a number",
            "loss 3 time(s), first at step 3",
        ),
        (
            "train.jsonl",
            "{\"step\": 1, \"loss\": 3.5}\n{\"step\": 2, \"loss\": NaN}\n{\"step\": 3, \"loss\": \"oops\"}\n{\"step\": 4, \"loss\": -Infinity}\n{\"step\": 5, \"loss\": \"nan\"}\n",
            "train.jsonl:3: `loss` is \"oops\", expected a number",
            "loss 3 time(s), first at step 2",
        ),
    ] {
        let env = Env::new();
        env.write(file, text);
        let init = env.run(&["init", "--log", file]).expect(0);
        for s in [not_read, first] {
            assert!(init.stderr().contains(s), "{s:?}\n{}", init.report());
        }
        let check = env.run(&["check"]).expect(0);
        assert!(check.stdout().contains(not_read), "{}", check.report());
        assert!(
            check.stdout().contains("(3 with a non-finite value), 1 line(s) not read"),
            "{}",
            check.report()
        );
        let judged = env.run(&["critic", "--once"]);
        assert_eq!(judged.code(), 2, "{}", judged.report());
        assert!(judged.stderr().contains(not_read), "{}", judged.report());
        assert!(judged.stdout().contains("fail    loss"), "{}", judged.report());
    }
}

/// A log whose head is already non-finite (nanoGPT issue #210's `loss nan` from iter 1, a JSON
/// lines log whose every line carries Python's bare `NaN`) is still recognised, read and failed.
#[test]
fn a_log_that_is_nan_from_its_first_lines_is_recognised() {
    for (file, text, shape) in [
        (
            "train.log",
            "iter 1: loss nan, time 13.2ms, mfu 1.0%\niter 2: loss nan, time 13.1ms, mfu 1.0%\n",
            "nanoGPT iter line (2 lines)",
        ),
        (
            "train.jsonl",
            "{\"step\": 1, \"loss\": NaN, \"grad_norm\": Infinity}\n{\"step\": 2, \"loss\": NaN, \"grad_norm\": NaN}\n",
            "2 of its first 2 lines are JSON objects",
        ),
    ] {
        let env = Env::new();
        env.write(file, text);
        let init = env.run(&["init", "--log", file]).expect(0);
        assert!(init.stderr().contains(shape), "{}", init.report());
        assert!(init.stderr().contains("read 2 samples"), "{}", init.report());
        let judged = env.run(&["critic", "--once"]);
        assert_eq!(judged.code(), 2, "{}", judged.report());
        assert!(judged.stdout().contains("fail    loss"), "{}", judged.report());
    }
}
