//! A publish queue entry (DEST/.roger-queue/<id>.json), then what publish --detach, status and the report do with the queue.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A fresh directory per input: the reader sees only this input's files.
    let dir = tempfile::tempdir().expect("temp dir");
    roger::untrusted::queue_entry(dir.path(), data);
});
