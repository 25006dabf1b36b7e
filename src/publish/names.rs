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
/// The manifest naming the current checkpoint (`manifest` reads and writes it).
pub const MANIFEST_FILE: &str = "latest.json";

/// Why `name` may not be published into `dest`: it is one of the names roger owns there
/// (its ledger, the ledger's lock or temp names, latest.json, staging / set-aside / lock /
/// quarantine names, the config, the evidence dir), compared without case (a case-insensitive
/// filesystem would replace them too). `own` are this publish's ledger, config and
/// quarantine dir: their first component inside `dest`, when they live there, is owned too.
pub fn owned(name: &str, dest: &Path, own: &[&Path]) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    let fixed: [(bool, &str); 6] = [
        (
            lower.starts_with(".roger"),
            "roger's staging, set-aside, lock and quarantine names start with .roger",
        ),
        (lower == MANIFEST_FILE, "the checkpoint manifest"),
        (
            lower.starts_with(crate::ledger::DEFAULT_FILE),
            "the default ledger's name (and its lock and temporary names)",
        ),
        (
            lower == crate::config::DEFAULT_FILE,
            "the default config file's name",
        ),
        (
            lower.starts_with("roger-watch."),
            "the lock that keeps one watch per run (roger-watch.<run>.lock)",
        ),
        (
            lower == "roger-evidence",
            "where kill evidence is kept beside a ledger",
        ),
    ];
    if let Some((_, why)) = fixed.iter().find(|(hit, _)| *hit) {
        return Some(why.to_string());
    }
    let dest = resolved(dest);
    own.iter().find_map(|p| {
        let rel = resolved(p);
        let first = rel.strip_prefix(&dest).ok()?.components().next()?;
        let first = first.as_os_str().to_str()?.to_ascii_lowercase();
        (lower == first
            || (lower.starts_with(&first) && p.parent().map(resolved) == Some(dest.clone())))
        .then(|| format!("{} lives there", p.display()))
    })
}

/// Absolute, with symlinks in the longest existing prefix resolved (the file itself may not
/// exist yet).
fn resolved(p: &Path) -> std::path::PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if let Ok(c) = std::fs::canonicalize(&abs) {
        return c;
    }
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => resolved(parent).join(name),
        _ => abs,
    }
}

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

    /// Issue 10 item 9: every name roger owns in a destination is refused.
    #[test]
    fn names_roger_owns_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("ck");
        std::fs::create_dir(&dest).unwrap();
        let ledger = dest.join("my-ledger.jsonl");
        let config = dir.path().join("roger.toml");
        let quarantine = dest.join("q").join("items");
        let own: [&Path; 3] = [&ledger, &config, &quarantine];
        for name in [
            "roger-ledger.jsonl",
            "Roger-Ledger.jsonl",
            "roger-ledger.jsonl.lock",
            "latest.json",
            "LATEST.json",
            ".roger-publish.lock",
            ".roger-staging-1-2-ckpt.pt",
            ".roger-prev-ckpt.pt",
            ".roger-rejected",
            ".roger",
            ".roger-quarantine",
            "roger.toml",
            "roger-evidence",
            "roger-watch.my_run.lock",
            "my-ledger.jsonl",
            "my-ledger.jsonl.lock",
            "q",
        ] {
            assert!(owned(name, &dest, &own).is_some(), "{name}");
        }
        for name in [
            "ckpt-100.pt",
            "last.ckpt",
            "latest.pt",
            "ledger.jsonl",
            "roger.pt",
            "items",
            "q2",
            "checkpoint-5",
        ] {
            assert_eq!(owned(name, &dest, &own), None, "{name}");
        }
        // The config is not in the destination: its own name is free there.
        let elsewhere = dir.path().join("other.toml");
        assert_eq!(owned("other.toml", &dest, &[&elsewhere]), None);
        let inside = dest.join("other.toml");
        assert!(owned("other.toml", &dest, &[&inside]).is_some());
        // Through a relative or symlinked destination too.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&dest, &link).unwrap();
        assert!(owned("my-ledger.jsonl", &link, &own).is_some());
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
