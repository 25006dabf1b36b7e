//! MLflow metric files in a run directory, read by the tail as they grow and shrink, then the critic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A fresh directory per input: the reader sees only this input's files.
    let dir = tempfile::tempdir().expect("temp dir");
    roger::untrusted::mlflow(dir.path(), data);
});
