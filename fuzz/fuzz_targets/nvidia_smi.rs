//! nvidia-smi --query-gpu and --query-compute-apps CSV (split at the first blank line), then what the watch and critic do with the snapshot.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::nvidia_smi(data);
});
