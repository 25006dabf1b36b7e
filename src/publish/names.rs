//! Names in the destination directory: the step a checkpoint name carries, roger's own
//! staging / set-aside names, and which leftovers a later publish may clean.

use regex::Regex;
use std::path::Path;
use std::sync::OnceLock;

/// Every temporary roger creates in a destination directory starts with this (a dot: hidden,
/// and never matched by a training script's `ckpt-*` glob).
pub const STAGING_PREFIX: &str = ".roger-staging-";
/// A hard-linked copy of the checkpoint latest.json pointed to while its name is replaced.
pub const PREV_PREFIX: &str = ".roger-prev-";
pub const LOCK_FILE: &str = ".roger-publish.lock";
pub const REJECTED_DIR: &str = ".roger-rejected";

/// The step a checkpoint's name carries: `ckpt-12000.pt`, `checkpoint-12000/`, `step_12000`,
/// `model_step12000.safetensors`, `epoch=3-step=12000.ckpt`, `global_step12000`,
/// `iter_0012000`, `12000.pt`. An explicit `step` wins over a bare number.
pub fn step_from_name(name: &str) -> Option<u64> {
    static STEP: OnceLock<Regex> = OnceLock::new();
    static OTHER: OnceLock<Regex> = OnceLock::new();
    static BARE: OnceLock<Regex> = OnceLock::new();
    let step = STEP.get_or_init(|| Regex::new(r"(?i)step[_=\-]?(\d+)").expect("regex"));
    let other = OTHER
        .get_or_init(|| Regex::new(r"(?i)(?:ckpt|checkpoint|iter)[_=\-]?(\d+)").expect("regex"));
    let bare = BARE.get_or_init(|| Regex::new(r"^(\d+)(?:\.[A-Za-z]+)*$").expect("regex"));
    let base = name.trim_end_matches('/');
    let base = base.rsplit('/').next().unwrap_or(base);
    let last = |re: &Regex| {
        re.captures_iter(base)
            .last()
            .and_then(|c| c[1].parse::<u64>().ok())
    };
    last(step).or_else(|| last(other)).or_else(|| last(bare))
}

/// A unique staging name for `name` (pid + nanoseconds; creation is O_EXCL anyway).
pub fn staging_name(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{STAGING_PREFIX}{}-{nanos}-{name}", std::process::id())
}

pub fn prev_name(name: &str) -> String {
    format!("{PREV_PREFIX}{name}")
}

pub fn is_staging(name: &str) -> bool {
    name.starts_with(STAGING_PREFIX)
}

/// The file name of a path as text, or an error naming the path.
pub fn file_name(path: &Path) -> anyhow::Result<String> {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("{}: has no usable UTF-8 file name", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_from_common_names() {
        let cases = [
            ("ckpt-12000.pt", Some(12000)),
            ("checkpoint-12000/", Some(12000)),
            ("checkpoint-12000", Some(12000)),
            ("step_12000", Some(12000)),
            ("model_step12000.safetensors", Some(12000)),
            ("epoch=3-step=12000.ckpt", Some(12000)),
            ("global_step12000", Some(12000)),
            ("iter_0012000", Some(12000)),
            ("12000.pt", Some(12000)),
            ("run7/ckpt-500.pt", Some(500)),
            ("model-00001-of-00004.safetensors", None),
            ("last.ckpt", None),
            ("model.pt", None),
            ("llama3-8b.pt", None),
            ("v2_final.safetensors", None),
        ];
        for (name, want) in cases {
            assert_eq!(step_from_name(name), want, "{name}");
        }
    }

    #[test]
    fn staging_names_are_hidden_unique_and_recognised() {
        let a = staging_name("ckpt-1.pt");
        std::thread::sleep(std::time::Duration::from_millis(1));
        let b = staging_name("ckpt-1.pt");
        assert_ne!(a, b);
        assert!(a.starts_with('.') && is_staging(&a) && a.ends_with("ckpt-1.pt"));
        assert!(!is_staging("ckpt-1.pt"));
        assert!(!is_staging(".roger-prev-ckpt-1.pt"));
    }
}
