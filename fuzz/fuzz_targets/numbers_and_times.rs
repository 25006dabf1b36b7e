//! The number and time readers under every log format.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::numbers_and_times(data);
});
