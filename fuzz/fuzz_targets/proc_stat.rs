//! /proc/PID/stat through both readers.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::proc_stat(data);
});
