//! Kernel-log NVIDIA Xid lines.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::kernel_log_xids(data);
});
