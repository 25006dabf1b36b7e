//! `[run] log` as a pattern, for loggers that start a new directory per launch (Lightning's
//! `lightning_logs/version_N/metrics.csv`): `{version}` stands for a number and the highest
//! wins; `*` and `?` glob within one path component and the newest file (mtime) wins. And
//! [`search`]: every file or directory under a folder that could be a training log, at any
//! depth, for `init --log DIR` to rank.

use std::path::{Component, Path, PathBuf};

/// Whether the path is a pattern rather than one file.
pub fn is_pattern(path: &Path) -> bool {
    let s = path.to_string_lossy();
    s.contains("{version}") || s.contains('*') || s.contains('?')
}

/// What is wrong with a pattern, for `roger check`.
pub fn check_pattern(path: &Path) -> Result<(), String> {
    let s = path.to_string_lossy();
    if s.matches("{version}").count() > 1 {
        return Err(format!("log {s:?}: expected `{{version}}` at most once"));
    }
    let stray = s.replace("{version}", "");
    if stray.contains('{') || stray.contains('}') {
        return Err(format!("log {s:?}: the only placeholder is `{{version}}`"));
    }
    Ok(())
}

/// The file the pattern means now: the highest `{version}`, else the newest match; `None`
/// when nothing matches yet. A plain path is returned as it is.
pub fn resolve(pattern: &Path) -> Option<PathBuf> {
    if !is_pattern(pattern) {
        return Some(pattern.to_path_buf());
    }
    let mut found: Vec<(PathBuf, Option<u64>)> = vec![(PathBuf::new(), None)];
    for comp in pattern.components() {
        let part = match comp {
            Component::Normal(p) => p.to_string_lossy().into_owned(),
            other => {
                for (p, _) in &mut found {
                    p.push(other.as_os_str());
                }
                continue;
            }
        };
        if !is_pattern(Path::new(&part)) {
            for (p, _) in &mut found {
                p.push(&part);
            }
            continue;
        }
        let mut next = Vec::new();
        for (dir, version) in &found {
            let list = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir.as_path()
            };
            let Ok(entries) = std::fs::read_dir(list) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(v) = matches(&part, &name) {
                    next.push((dir.join(&name), v.or(*version)));
                }
            }
        }
        found = next;
    }
    found.retain(|(p, _)| p.exists());
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    found
        .into_iter()
        .max_by(|a, b| {
            a.1.cmp(&b.1)
                .then_with(|| mtime(&a.0).cmp(&mtime(&b.0)))
                .then_with(|| a.0.cmp(&b.0))
        })
        .map(|(p, _)| p)
}

/// Whether `name` matches the component pattern; the `{version}` number when it has one.
fn matches(pat: &str, name: &str) -> Option<Option<u64>> {
    let (p, n): (Vec<char>, Vec<char>) = (pat.chars().collect(), name.chars().collect());
    glob(&p, &n, None)
}

fn glob(p: &[char], n: &[char], version: Option<u64>) -> Option<Option<u64>> {
    const V: [char; 9] = ['{', 'v', 'e', 'r', 's', 'i', 'o', 'n', '}'];
    if p.is_empty() {
        return n.is_empty().then_some(version);
    }
    if p.starts_with(&V) {
        let digits = n.iter().take_while(|c| c.is_ascii_digit()).count();
        // Longest number first; a shorter one only if the rest needs its digits.
        for len in (1..=digits).rev() {
            let v: String = n[..len].iter().collect();
            if let Some(r) = glob(&p[V.len()..], &n[len..], v.parse().ok()) {
                return Some(r);
            }
        }
        return None;
    }
    match p[0] {
        '*' => (0..=n.len()).find_map(|k| glob(&p[1..], &n[k..], version)),
        '?' if !n.is_empty() => glob(&p[1..], &n[1..], version),
        c if n.first() == Some(&c) => glob(&p[1..], &n[1..], version),
        _ => None,
    }
}

/// How deep [`search`] goes below the folder it is given (`outputs/<date>/<time>/logs/x.log`).
pub const SEARCH_DEPTH: usize = 6;
/// Entries [`search`] looks at before it stops (a home directory passed by mistake).
pub const SEARCH_ENTRIES: usize = 50_000;

/// A file name that a training log goes by: `trainer_state.json`, `metrics.json`, `*.jsonl`,
/// `*.csv`, `*.log`, `*.txt`, `*.out`, `stdout`/`stderr` (SLURM's `slurm-N.out`,
/// detectron2's `log.txt`, a redirected `train.out`); event files are found with their folder.
pub fn log_like_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "trainer_state.json" | "metrics.json" | "stdout" | "stderr" | "output"
    ) || [".jsonl", ".csv", ".log", ".txt", ".out"]
        .iter()
        .any(|ext| n.ends_with(ext))
}

/// Folders never searched: version control, caches, Python environments and packages.
fn skipped_dir(dir: &Path, name: &str) -> bool {
    matches!(
        name,
        ".git"
            | ".hg"
            | ".svn"
            | "__pycache__"
            | "node_modules"
            | ".cache"
            | "site-packages"
            | ".ipynb_checkpoints"
            | ".mypy_cache"
            | ".pytest_cache"
            | ".tox"
    ) || dir.join("pyvenv.cfg").is_file()
}

/// What [`search`] found under a folder.
#[derive(Debug, Default)]
pub struct Found {
    /// Files named like logs, and directories that are logs themselves (event-file folders,
    /// MLflow runs, W&B folders: not searched further).
    pub logs: Vec<PathBuf>,
    /// roger's own files and folders, with why (never a training log).
    pub passed_over: Vec<(PathBuf, &'static str)>,
    /// [`SEARCH_ENTRIES`] was reached: what is deeper was not looked at.
    pub truncated: bool,
}

/// Every log-like file under `root` (to [`SEARCH_DEPTH`]), and every directory that
/// `dir_log` says is a log. `own` names roger's own files and folders: they are passed over
/// and said, never searched.
pub fn search(
    root: &Path,
    dir_log: &dyn Fn(&Path) -> bool,
    own: &dyn Fn(&Path) -> Option<&'static str>,
) -> std::io::Result<Found> {
    let mut found = Found::default();
    let mut seen = 0usize;
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            // The folder given must be readable; one below it may not be (said by the caller
            // through what it did not find).
            Err(e) if depth == 0 => return Err(e),
            Err(_) => continue,
        };
        let mut names: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        names.sort();
        for p in names {
            seen += 1;
            if seen > SEARCH_ENTRIES {
                found.truncated = true;
                return Ok(found);
            }
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if let Some(why) = own(&p) {
                if p.is_dir() || log_like_name(&name) {
                    found.passed_over.push((p, why));
                }
                continue;
            }
            if p.is_dir() {
                if dir_log(&p) {
                    found.logs.push(p);
                } else if depth < SEARCH_DEPTH && !skipped_dir(&p, &name) {
                    stack.push((p, depth + 1));
                }
            } else if p.is_file() && log_like_name(&name) {
                found.logs.push(p);
            }
        }
    }
    found.logs.sort();
    found.passed_over.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_version_wins_not_the_longest_name() {
        let d = tempfile::tempdir().unwrap();
        for v in [0, 2, 10, 9] {
            let dir = d.path().join(format!("lightning_logs/version_{v}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("metrics.csv"), "step\n").unwrap();
        }
        std::fs::create_dir_all(d.path().join("lightning_logs/version_11")).unwrap(); // no file yet
        let pat = d
            .path()
            .join("lightning_logs/version_{version}/metrics.csv");
        assert_eq!(
            resolve(&pat).unwrap(),
            d.path().join("lightning_logs/version_10/metrics.csv")
        );
        let glob = d.path().join("lightning_logs/version_*/metrics.csv");
        assert!(resolve(&glob).is_some());
        assert_eq!(resolve(&d.path().join("nothing_*/m.csv")), None);
        let plain = d.path().join("a.jsonl");
        assert_eq!(resolve(&plain), Some(plain));
    }

    #[test]
    fn search_finds_logs_at_any_depth_and_passes_over_what_is_said() {
        let d = tempfile::tempdir().unwrap();
        let w = |rel: &str| {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "x").unwrap();
        };
        w("outputs/2024-01-01/12-00-00/train.log");
        w("lightning_logs/version_3/metrics.csv");
        w("runs/exp/events.out.tfevents.1.host");
        w("runs/exp/deeper/ignored.log");
        w("slurm-42.out");
        w("a/b/c/d/e/f/g/too_deep.log");
        w(".git/logs/HEAD.log");
        w("venv/pyvenv.cfg");
        w("venv/lib/x.log");
        w("roger.prom");
        w("roger-ledger.jsonl");
        w("model.safetensors");
        let found = search(
            d.path(),
            &|p| p.join("events.out.tfevents.1.host").is_file(),
            &|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("roger")
                    .then_some("roger's")
            },
        )
        .unwrap();
        let rel: Vec<String> = found
            .logs
            .iter()
            .map(|p| p.strip_prefix(d.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "lightning_logs/version_3/metrics.csv",
                "outputs/2024-01-01/12-00-00/train.log",
                "runs/exp",
                "slurm-42.out"
            ]
        );
        // roger's own files: said when they could have been taken for a log (the ledger), never
        // searched or ranked.
        assert_eq!(
            found.passed_over,
            vec![(d.path().join("roger-ledger.jsonl"), "roger's")]
        );
        assert!(!found.truncated);
    }

    #[test]
    fn component_matching() {
        assert_eq!(matches("version_{version}", "version_12"), Some(Some(12)));
        assert_eq!(matches("version_{version}", "version_x"), None);
        assert_eq!(matches("run-*.log", "run-3.log"), Some(None));
        assert_eq!(matches("run-?.log", "run-33.log"), None);
        assert!(check_pattern(Path::new("a/{version}/{version}")).is_err());
        assert!(check_pattern(Path::new("a/{run}/m.csv")).is_err());
        assert!(check_pattern(Path::new("a/version_{version}/m.csv")).is_ok());
    }
}
