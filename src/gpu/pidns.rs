//! Which PID namespace roger runs in. NVML and nvidia-smi report PIDs as the host sees them;
//! inside a container (a PID namespace of its own) those are not this machine's /proc PIDs,
//! so a VRAM holder cannot be matched to a process or to the run's PIDs: say so, never guess.

/// The kernel's fixed inode number of the initial PID namespace (PROC_PID_INIT_INO).
pub const INITIAL_PID_NS_INODE: u64 = 0xEFFF_FFFC;

/// The inode in a `/proc/self/ns/pid` link text ("pid:[4026531836]").
pub fn parse_link(link: &str) -> Option<u64> {
    link.trim()
        .strip_prefix("pid:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The namespace link, when it is not the initial one: roger is in a container's namespace.
pub fn foreign(link: &str) -> Option<String> {
    match parse_link(link) {
        Some(ino) if ino != INITIAL_PID_NS_INODE => Some(link.trim().to_string()),
        _ => None,
    }
}

/// This process's namespace link (`ROGER_PID_NS` stands in for it in tests).
pub fn current_link() -> Option<String> {
    if let Ok(v) = std::env::var("ROGER_PID_NS") {
        return Some(v);
    }
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The foreign namespace roger runs in, or None (initial namespace, or unreadable).
pub fn foreign_here() -> Option<String> {
    current_link().as_deref().and_then(foreign)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_and_container_namespaces() {
        assert_eq!(parse_link("pid:[4026531836]"), Some(INITIAL_PID_NS_INODE));
        assert_eq!(foreign("pid:[4026531836]"), None);
        assert_eq!(
            foreign("pid:[4026532201]\n").as_deref(),
            Some("pid:[4026532201]")
        );
        assert_eq!(foreign("garbage"), None);
        assert_eq!(parse_link("net:[4026531840]"), None);
    }
}
