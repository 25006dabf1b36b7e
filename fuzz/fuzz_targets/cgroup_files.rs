//! The run's cgroup files: /proc/PID/cgroup, cpu.stat, io.stat.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    roger::untrusted::cgroup_files(data);
});
