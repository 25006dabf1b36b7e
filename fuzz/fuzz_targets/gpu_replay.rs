//! A --gpu-replay recording, then what the watch and critic do with its snapshots.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::gpu_replay(data);
});
