//! `[run] log` as a pattern, for loggers that start a new directory per launch (Lightning's
//! `lightning_logs/version_N/metrics.csv`): `{version}` stands for a number and the highest
//! wins; `*` and `?` glob within one path component and the newest file (mtime) wins.

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
