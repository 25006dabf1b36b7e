//! The source checkpoint: file or directory, a snapshot of its files' sizes and mtimes, and
//! the check that none of them changed while roger read them (a save still in progress).

use super::Layout;
use anyhow::{bail, Context, Result};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrcFile {
    /// Relative to the checkpoint root, `/`-separated; empty for a single file.
    pub rel: String,
    pub path: PathBuf,
    pub size: u64,
    /// (seconds, nanoseconds).
    pub mtime: (i64, i64),
}

pub fn layout(src: &Path) -> Result<Layout> {
    let meta = std::fs::metadata(src).with_context(|| format!("reading {}", src.display()))?;
    if meta.is_dir() {
        Ok(Layout::Dir)
    } else if meta.is_file() {
        Ok(Layout::File)
    } else {
        bail!("{}: not a regular file or directory", src.display())
    }
}

pub fn snapshot(src: &Path, layout: Layout) -> Result<Vec<SrcFile>> {
    let entries = match layout {
        Layout::File => vec![(String::new(), src.to_path_buf())],
        Layout::Dir => crate::digest::list_files(src)?,
    };
    if entries.is_empty() {
        bail!(
            "{}: empty directory, nothing to publish (is the save still running?)",
            src.display()
        );
    }
    entries
        .into_iter()
        .map(|(rel, path)| {
            let m =
                std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
            Ok(SrcFile {
                rel,
                path,
                size: m.len(),
                mtime: (m.mtime(), m.mtime_nsec()),
            })
        })
        .collect()
}

/// The first difference between two snapshots, as a sentence. Pure.
pub fn diff(before: &[SrcFile], after: &[SrcFile]) -> Option<String> {
    let name = |f: &SrcFile| {
        if f.rel.is_empty() {
            f.path.display().to_string()
        } else {
            f.rel.clone()
        }
    };
    for b in before {
        match after.iter().find(|a| a.rel == b.rel) {
            None => return Some(format!("{} disappeared", name(b))),
            Some(a) if a.size != b.size => {
                return Some(format!("{} changed size {} -> {}", name(b), b.size, a.size))
            }
            Some(a) if a.mtime != b.mtime => {
                return Some(format!("{} was modified (mtime changed)", name(b)))
            }
            _ => {}
        }
    }
    after
        .iter()
        .find(|a| !before.iter().any(|b| b.rel == a.rel))
        .map(|a| format!("{} appeared", name(a)))
}

/// Refuse when the source changed while it was read.
pub fn unchanged(src: &Path, layout: Layout, before: &[SrcFile]) -> Result<()> {
    let after = snapshot(src, layout)?;
    if let Some(what) = diff(before, &after) {
        bail!(
            "{}: the source changed while it was being copied ({what}): it is still being written; publish it after the save has finished",
            src.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(rel: &str, size: u64, mtime: i64) -> SrcFile {
        SrcFile {
            rel: rel.into(),
            path: PathBuf::from(format!("/s/{rel}")),
            size,
            mtime: (mtime, 0),
        }
    }

    #[test]
    fn diffs() {
        let a = vec![f("a", 1, 5), f("b", 2, 5)];
        assert_eq!(diff(&a, &a), None);
        assert_eq!(
            diff(&a, &[f("a", 1, 5), f("b", 3, 5)]).unwrap(),
            "b changed size 2 -> 3"
        );
        assert!(diff(&a, &[f("a", 1, 6), f("b", 2, 5)])
            .unwrap()
            .contains("mtime"));
        assert_eq!(diff(&a, &[f("a", 1, 5)]).unwrap(), "b disappeared");
        assert_eq!(
            diff(&a, &[f("a", 1, 5), f("b", 2, 5), f("c", 0, 5)]).unwrap(),
            "c appeared"
        );
    }

    #[test]
    fn empty_dir_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let e = snapshot(d.path(), Layout::Dir).unwrap_err().to_string();
        assert!(e.contains("empty directory"), "{e}");
    }
}
