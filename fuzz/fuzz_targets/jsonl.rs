//! A JSON-lines training log, then the critic on what it read.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::jsonl(data);
});
