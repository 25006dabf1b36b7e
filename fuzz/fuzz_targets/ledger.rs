//! A ledger file: the chain scan and every reader of its records (report, retention, rollback, replay...).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::ledger(data);
});
