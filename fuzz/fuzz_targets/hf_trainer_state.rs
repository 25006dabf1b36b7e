//! A Hugging Face trainer_state.json, then the critic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::hf_trainer_state(data);
});
