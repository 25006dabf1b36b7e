//! A plain-text training log read by `[metrics] patterns`, then the critic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::text(data);
});
