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
