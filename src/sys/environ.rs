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
        let raw = super::read(c.id()).unwrap();
        assert!(raw.split(|b| *b == 0).any(|kv| kv == b"RANK=3"));
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(super::read(c.id()).is_none());
    }
}
