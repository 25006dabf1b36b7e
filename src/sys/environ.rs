//! A process's environment (`/proc/PID/environ`), read once per process for the rank map.

/// The raw NUL-separated environment; None when it cannot be read (gone, not ours).
pub fn read(pid: u32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/environ")).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_child_environment_is_read() {
        let mut c = std::process::Command::new("sleep")
            .arg("5")
            .env("RANK", "3")
            .spawn()
            .unwrap();
        // Until the child has exec'd, /proc shows the environment it was forked with.
        let has = |raw: &[u8]| raw.split(|b| *b == 0).any(|kv| kv == b"RANK=3");
        let t0 = std::time::Instant::now();
        while !super::read(c.id()).is_some_and(|r| has(&r)) {
            assert!(t0.elapsed().as_secs() < 5, "RANK=3 never seen");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(super::read(c.id()).is_none());
    }
}
