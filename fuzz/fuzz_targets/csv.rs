//! A CSV training log (Lightning's CSVLogger and the default mapping), then the critic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::csv(data);
});
