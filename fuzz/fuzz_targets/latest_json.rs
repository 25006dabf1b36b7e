//! A destination's latest.json (the publish manifest), then retention with it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A fresh directory per input: the reader sees only this input's files.
    let dir = tempfile::tempdir().expect("temp dir");
    roger::untrusted::latest_json(dir.path(), data);
});
