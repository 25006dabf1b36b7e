//! The shape of the sources, checked over the text (DESIGN.md's layout): no import circles
//! between top-level modules but cli <-> cmd, the log mapping owned by metrics (never
//! `crate::config` inside `src/metrics/`), the config never importing the ledger, publish's I/O
//! leaf and its recovery below the rest of publish, and Rust's own `main`.

use crate::util::repo_root;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/` with the text of its non-test code.
fn sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = repo_root().join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    // Files that are test modules as a whole (`#[cfg(test)] mod name;` in their parent).
    let mut test_files = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let dir = if f
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
        {
            f.parent().unwrap().to_path_buf()
        } else {
            f.with_extension("")
        };
        let mut lines = text.lines().map(str::trim);
        while let Some(l) = lines.next() {
            if l == "#[cfg(test)]" {
                if let Some(name) = lines.next().and_then(declared_mod) {
                    test_files.insert(dir.join(format!("{name}.rs")));
                    test_files.insert(dir.join(name).join("mod.rs"));
                }
            }
        }
    }
    files
        .into_iter()
        .filter(|f| !test_files.contains(f))
        .map(|f| {
            let text = without_tests(&std::fs::read_to_string(&f).unwrap());
            (f.strip_prefix(&src).unwrap().to_path_buf(), text)
        })
        .collect()
}

/// `mod name;` / `pub(crate) mod name;` -> `name`.
fn declared_mod(line: &str) -> Option<&str> {
    let rest = line.split("mod ").nth(1)?;
    rest.strip_suffix(';')
        .filter(|n| n.chars().all(|c| c.is_alphanumeric() || c == '_'))
}

/// The text less `#[cfg(test)] mod name { ... }` blocks and `//` comments.
fn without_tests(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let open = after.find('{');
        let semi = after.find(';');
        match (open, semi) {
            (Some(o), s) if s.is_none_or(|s| o < s) => {
                let mut depth = 0;
                let mut end = after.len();
                for (i, c) in after[o..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = o + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            (_, Some(s)) => rest = &after[s + 1..],
            _ => rest = "",
        }
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Names `text` reaches as `crate::name` (also inside `use crate::{a, b::c}`).
fn crate_refs(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(name);
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

fn top_module(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every edge `from -> to` between top-level modules, with the files that make it.
fn module_graph() -> BTreeMap<(String, String), Vec<PathBuf>> {
    let src = repo_root().join("src");
    let mut edges: BTreeMap<(String, String), Vec<PathBuf>> = BTreeMap::new();
    for (rel, text) in sources() {
        let from = top_module(&rel);
        if from == "lib" || from == "main" {
            continue;
        }
        for to in crate_refs(&text) {
            let is_module = src.join(format!("{to}.rs")).exists() || src.join(&to).is_dir();
            if to != from && is_module {
                edges
                    .entry((from.clone(), to))
                    .or_default()
                    .push(rel.clone());
            }
        }
    }
    edges
}

#[test]
fn no_import_circles_between_top_level_modules_but_cli_and_cmd() {
    let edges = module_graph();
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
    }
    // Whether `to` reaches `from` again (a path back closes a circle).
    let reaches = |start: &str, goal: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start];
        while let Some(m) = todo.pop() {
            if m == goal {
                return true;
            }
            if seen.insert(m) {
                todo.extend(next.get(m).into_iter().flatten());
            }
        }
        false
    };
    let allowed = |a: &str, b: &str| matches!((a, b), ("cli", "cmd") | ("cmd", "cli"));
    let circles: Vec<String> = edges
        .iter()
        .filter(|((a, b), _)| !allowed(a, b) && reaches(b, a))
        .map(|((a, b), files)| format!("{a} -> {b} ({files:?}) and {b} reaches {a} again"))
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
    // Not vacuous: the graph was read, and the allowed circle is in it.
    assert!(
        edges.contains_key(&("cli".into(), "cmd".into())),
        "{edges:?}"
    );
    assert!(edges.len() > 50, "{} edges", edges.len());
}

/// `prefix` (a folder or file under src/) must not name `crate::<name>` outside its tests.
fn never_imports(prefix: &str, name: &str) -> Vec<PathBuf> {
    sources()
        .into_iter()
        .filter(|(rel, _)| rel.starts_with(prefix))
        .filter(|(_, text)| crate_refs(text).contains(name))
        .map(|(rel, _)| rel)
        .collect()
}

#[test]
fn metrics_owns_the_log_mapping_and_config_does_not_import_the_ledger() {
    let found = never_imports("metrics", "config");
    assert!(
        found.is_empty(),
        "crate::config inside src/metrics/: {found:?}"
    );
    let found = never_imports("config", "ledger");
    assert!(
        found.is_empty(),
        "crate::ledger inside src/config/: {found:?}"
    );
    // Not vacuous: the config's files are read, and they do name metrics (its types).
    assert!(
        !never_imports("config", "metrics").is_empty(),
        "config embeds metrics' types"
    );
}

/// The text of `src/<rel>` without its tests and comments.
fn source(rel: &str) -> String {
    sources()
        .into_iter()
        .find(|(r, _)| r == Path::new(rel))
        .unwrap_or_else(|| panic!("src/{rel}"))
        .1
}

/// publish's I/O leaf (`ALIGN`, the aligned buffer, `resident_pages`) names nothing of the
/// crate, so no circle inside publish can pass through it.
#[test]
fn the_publish_io_leaf_imports_none_of_its_siblings() {
    let io = source("publish/io.rs");
    for bad in ["super::", "crate::"] {
        assert!(!io.contains(bad), "src/publish/io.rs names {bad}");
    }
}

/// Recovery starts no publisher and reads no queue: its callers resume queued publishes, so
/// publisher -> recover is one way.
#[test]
fn publish_recovery_starts_no_publisher() {
    let recover = source("publish/recover.rs");
    for bad in ["publisher::", "queue::"] {
        assert!(!recover.contains(bad), "src/publish/recover.rs names {bad}");
    }
    assert!(recover.contains("fn try_recover"), "the file was read");
}

#[test]
fn the_binary_starts_through_rusts_own_main() {
    let main = std::fs::read_to_string(repo_root().join("src/main.rs")).unwrap();
    assert!(
        !main.contains("no_main"),
        "src/main.rs opts out of Rust's start-up"
    );
    assert!(main.contains("fn main()"), "{main}");
    let cargo = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    assert!(
        !cargo.contains("-no-pie") && !cargo.contains("build ="),
        "{cargo}"
    );
}

/// Issue 36 item 3: no file is rewritten in place outside `sys/fsx.rs` (a crash mid-write would
/// leave it torn or empty: `init --force` lost the user's roger.toml that way). A file that is
/// replaced goes through `fsx::write_atomic`; the few writes left are of new files, named here
/// with why.
#[test]
fn no_file_is_rewritten_in_place_outside_fsx() {
    let allowed: &[(&str, &str)] = &[
        // The evidence hook's output: a new file per kill, streamed from the hook.
        ("watch/child.rs", "File::create("),
        // The fuzz entry points write scratch files of their own.
        ("untrusted.rs", "fs::write("),
    ];
    let mut found = Vec::new();
    for (path, text) in sources() {
        let path = path.to_string_lossy().replace('\\', "/");
        if path == "sys/fsx.rs" {
            continue;
        }
        for needle in ["File::create(", "fs::write(", ".truncate(true)"] {
            // A call of that name, not of one ending in it (`AtomicFile::create(`).
            let called = text.match_indices(needle).any(|(at, _)| {
                !text[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            if called && !allowed.contains(&(path.as_str(), needle)) {
                found.push(format!("{path}: {needle}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "files written in place (use sys::fsx::write_atomic, or name a new file's write here): {found:#?}"
    );
}

#[test]
fn the_source_reader_drops_tests_and_comments() {
    let text = "use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests {\n    use crate::c;\n    fn f() { { } }\n}\nuse crate::{d, e::f};\n#[cfg(test)]\nmod more;\n";
    let refs = crate_refs(&without_tests(text));
    assert_eq!(refs.into_iter().collect::<Vec<_>>(), ["a", "d", "e"]);
    assert_eq!(declared_mod("pub(crate) mod fixture;"), Some("fixture"));
}
