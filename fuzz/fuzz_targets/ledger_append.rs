//! An append onto whatever the ledger file holds, then every reader of the result.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A fresh directory per input: the reader sees only this input's files.
    let dir = tempfile::tempdir().expect("temp dir");
    roger::untrusted::ledger_append(dir.path(), data);
});
