//! The incremental log reader over a file appended, rewritten, rotated and torn between polls (steps separated by byte 1).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A fresh directory per input: the reader sees only this input's files.
    let dir = tempfile::tempdir().expect("temp dir");
    roger::untrusted::log_tail(dir.path(), data);
});
