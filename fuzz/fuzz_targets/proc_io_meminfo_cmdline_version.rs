//! /proc/PID/io, /proc/meminfo, /proc/PID/cmdline, /proc/version.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::proc_io_meminfo_cmdline_version(data);
});
