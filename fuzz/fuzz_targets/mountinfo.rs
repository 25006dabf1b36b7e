//! /proc/self/mountinfo: the mount table, filesystem kinds, WSL host drives.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::mountinfo(data);
});
