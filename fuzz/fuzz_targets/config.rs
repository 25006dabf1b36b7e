//! roger.toml: TOML, validation, and what the commands do first with a loaded config.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::config(data);
});
