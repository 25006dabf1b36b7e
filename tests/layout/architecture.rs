//! ARCHITECTURE.md against the tree: every path it names exists, every top-level module of
//! `src/` has a code-map entry (and every entry is a module), and the rules it states in
//! tables are read from those tables and checked over the sources as written there — the OS
//! boundary (who may name `libc`/`nix`), the renames, the dependency rules. A failure names
//! the file and line of the offending use.

use super::{crate_refs, sources, top_module};
use crate::util::repo_root;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn doc() -> String {
    std::fs::read_to_string(repo_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

/// The text of `doc` from the line that starts with `start` up to the next line that starts
/// with `end`.
fn section<'a>(doc: &'a str, start: &str, end: &str) -> &'a str {
    let from = doc
        .find(&format!("\n{start}"))
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no line starting {start:?}"))
        + 1;
    let rest = &doc[from + start.len()..];
    let to = rest.find(&format!("\n{end}")).unwrap_or(rest.len());
    &doc[from..from + start.len() + to]
}

/// Backticked spans of `text`.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// `src/publish/{io,copy}.rs` -> `src/publish/io.rs`, `src/publish/copy.rs` (one group).
fn expand(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(a), Some(b)) if a < b => path[a + 1..b]
            .split(',')
            .map(|alt| format!("{}{}{}", &path[..a], alt.trim(), &path[b + 1..]))
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// Spans that are paths of this repository (`src/...`, `tests/...`, `.ci/run`, ...).
fn repo_paths(text: &str) -> Vec<String> {
    const ROOTS: [&str; 8] = [
        "src/",
        "tests/",
        "fuzz/",
        "python/",
        "docs/",
        "examples/",
        ".ci/",
        ".github/",
    ];
    code_spans(text)
        .into_iter()
        .filter(|s| ROOTS.iter().any(|r| s.starts_with(r)))
        .filter(|s| {
            s.chars()
                .all(|c| c.is_alphanumeric() || "_-./{},".contains(c))
        })
        .flat_map(expand)
        .collect()
}

#[test]
fn every_path_architecture_md_names_exists() {
    let doc = doc();
    let paths = repo_paths(&doc);
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| !repo_root().join(p).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths the tree does not have: {missing:?}"
    );
    // Not vacuous: the document names many files, folders among them.
    assert!(paths.len() > 100, "{} paths", paths.len());
    assert!(paths.iter().any(|p| p == "src/sys/"), "{paths:?}");
}

/// The modules `src/lib.rs` declares (`mod name;`, any visibility), as the code map must name
/// them: `src/name/` for a folder module, `src/name.rs` for a file (with or without a folder
/// of submodules beside it).
fn top_level_modules() -> BTreeSet<String> {
    let lib = std::fs::read_to_string(repo_root().join("src/lib.rs")).unwrap();
    let src = repo_root().join("src");
    lib.lines()
        .filter_map(|l| super::declared_mod(l.trim()))
        .map(|name| {
            if src.join(format!("{name}.rs")).exists() {
                format!("src/{name}.rs")
            } else {
                format!("src/{name}/")
            }
        })
        .collect()
}

#[test]
fn the_code_map_has_one_entry_per_top_level_module() {
    let doc = doc();
    let map = section(&doc, "## Code map", "## ");
    let entries: BTreeSet<String> = map
        .lines()
        .filter_map(|l| l.strip_prefix("### `"))
        .map(|l| l.trim_end_matches('`').to_string())
        .collect();
    let modules = top_level_modules();
    let unnamed: Vec<&String> = modules.difference(&entries).collect();
    let stale: Vec<&String> = entries.difference(&modules).collect();
    assert!(
        unnamed.is_empty() && stale.is_empty(),
        "ARCHITECTURE.md's code map lacks an entry (### `path`) for {unnamed:?}; it has entries \
         for what src/lib.rs does not declare: {stale:?}"
    );
    assert!(modules.len() > 25, "{modules:?}");
    assert!(modules.contains("src/sys/") && modules.contains("src/cli.rs"));
}

/// Table rows of `text` (`| a | b | c |`) as their cells, header and rule left out.
fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|cells| !cells[0].starts_with("---") && cells[0] != "file" && cells[0] != "module")
        .collect()
}

/// The one backticked path of a table cell.
fn cell_path(cell: &str) -> String {
    let spans = code_spans(cell);
    assert_eq!(spans.len(), 1, "one `path` per cell: {cell:?}");
    spans[0].to_string()
}

/// The non-test source text of every file under `src/`, by its path relative to `src/`, with
/// the file's own line numbers.
fn source_lines() -> Vec<(PathBuf, Vec<(usize, String)>)> {
    sources()
        .into_iter()
        .map(|(rel, text)| {
            let lines = text
                .lines()
                .enumerate()
                .map(|(i, l)| (i + 1, l.to_string()))
                .collect();
            (rel, lines)
        })
        .collect()
}

/// The paths of `crate_name` (`libc`, `nix`) a line uses, from the crate name on
/// (`nix::sys::signal::{self, Signal}`), where the name is not part of a longer identifier.
fn crate_paths<'a>(line: &'a str, crate_name: &str) -> Vec<&'a str> {
    let needle = format!("{crate_name}::");
    line.match_indices(&needle)
        .filter(|(at, _)| {
            !line[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .map(|(at, _)| {
            let rest = &line[at..];
            let mut depth = 0;
            let end = rest
                .char_indices()
                .find(|&(_, c)| match c {
                    '{' => {
                        depth += 1;
                        false
                    }
                    '}' => {
                        depth -= 1;
                        depth < 0
                    }
                    _ => depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':'),
                })
                .map_or(rest.len(), |(i, _)| i);
            &rest[..end]
        })
        .collect()
}

/// Whether a path names only constants and types: every item it ends in (each of a
/// `{...}` group's) starts with an upper-case letter (`Signal`, `SIGUSR1`, `Errno::EPIPE`).
/// Functions (`kill`, `posix_fadvise`) and `self` (a module, to call into) do not.
fn names_only(path: &str) -> bool {
    let tail = match path.find('{') {
        Some(a) => path[a + 1..].trim_end_matches('}').to_string(),
        None => path.rsplit("::").next().unwrap_or("").to_string(),
    };
    tail.split(',')
        .map(|item| item.trim().rsplit("::").next().unwrap_or("").trim())
        .filter(|item| !item.is_empty())
        .all(|item| item.starts_with(|c: char| c.is_ascii_uppercase()))
}

#[test]
fn the_path_reader_tells_names_from_calls() {
    let line = "use nix::sys::signal::{self, Signal}; let x = libc::SIGUSR1; f(nix::unistd::close(fd)); mylibc::x();";
    let nix = crate_paths(line, "nix");
    assert_eq!(
        nix,
        ["nix::sys::signal::{self, Signal}", "nix::unistd::close"]
    );
    assert_eq!(crate_paths(line, "libc"), ["libc::SIGUSR1"]);
    assert!(!names_only(nix[0]) && !names_only(nix[1]));
    assert!(names_only("libc::SIGUSR1") && names_only("nix::errno::Errno::EWOULDBLOCK"));
    assert!(names_only("nix::sys::signal::{Signal, SigSet}"));
    assert_eq!(
        expand("src/publish/{io,copy}.rs"),
        ["src/publish/io.rs", "src/publish/copy.rs"]
    );
}

#[test]
fn the_os_is_named_only_where_architecture_md_says() {
    let doc = doc();
    let table = section(&doc, "## The OS boundary", "**Renames.**");
    let mut allowed: Vec<(String, String)> = Vec::new();
    for cells in rows(table) {
        assert_eq!(cells.len(), 3, "file | may | why: {cells:?}");
        assert!(
            cells[1] == "call" || cells[1] == "name",
            "`may` is call or name: {cells:?}"
        );
        for path in expand(&cell_path(&cells[0])) {
            allowed.push((path, cells[1].clone()));
        }
    }
    assert!(allowed.len() > 10, "{allowed:?}");
    let mut problems = Vec::new();
    let mut used: BTreeSet<String> = BTreeSet::new();
    for (rel, lines) in source_lines() {
        if rel.starts_with("sys") {
            continue;
        }
        let file = format!("src/{}", rel.display());
        let may = allowed
            .iter()
            .find(|(p, _)| *p == file)
            .map(|(_, m)| m.as_str());
        for (n, line) in &lines {
            for path in crate_paths(line, "libc")
                .into_iter()
                .chain(crate_paths(line, "nix"))
            {
                used.insert(file.clone());
                match may {
                    None => problems.push(format!(
                        "{file}:{n}: `{path}`: this file is not in ARCHITECTURE.md's OS table"
                    )),
                    Some("name") if !names_only(path) => problems.push(format!(
                        "{file}:{n}: `{path}`: ARCHITECTURE.md lets this file name constants \
                         and types only, not call"
                    )),
                    _ => {}
                }
            }
        }
    }
    // An entry for a file that names neither crate (any more) would let a new use in silently.
    for (path, _) in &allowed {
        if !used.contains(path) {
            problems.push(format!(
                "ARCHITECTURE.md's OS table lists {path}, which names neither libc nor nix: \
                 take the row out"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Whether a line calls a rename (`fs::rename(`, `renameat`, a temporary's `persist(`); a
/// function declared with such a name (`fn renameat2(`) is not a call.
fn renames(line: &str) -> bool {
    let l = line.replace("fn renameat", "fn _");
    l.contains("::rename(")
        || l.contains("renameat")
        || l.contains(".persist(")
        || l.contains(".persist_noclobber(")
}

#[test]
fn renames_happen_only_where_architecture_md_says() {
    let doc = doc();
    let table = section(&doc, "**Renames.**", "## ");
    let allowed: BTreeSet<String> = rows(table)
        .iter()
        .flat_map(|cells| expand(&cell_path(&cells[0])))
        .collect();
    assert!(allowed.len() >= 5, "{allowed:?}");
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (rel, lines) in source_lines() {
        if rel.starts_with("sys") {
            continue;
        }
        let file = format!("src/{}", rel.display());
        for (n, line) in lines.iter().filter(|(_, l)| renames(l)) {
            used.insert(file.clone());
            if !allowed.contains(&file) {
                problems.push(format!(
                    "{file}:{n}: `{}`: a rename outside src/sys/fsx.rs and ARCHITECTURE.md's \
                     list (replace a file with fsx::write_atomic, or add the file with why)",
                    line.trim()
                ));
            }
        }
    }
    for path in allowed.difference(&used) {
        problems.push(format!(
            "ARCHITECTURE.md lists {path} as renaming, and it does not: take the row out"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(renames("    std::fs::rename(&a, &b)?;") && !renames("fn rename(a: &Path) {"));
    assert!(renames("fn f(a: &Path) { let _ = std::fs::rename(a, a); }"));
    assert!(!renames("unsafe fn renameat2(a: i32) -> i32 {"));
}

/// The module a code-map path is: `src/sentinel.rs` and `src/sys/` -> `sentinel`, `sys`.
fn module_of(path: &str) -> String {
    top_module(Path::new(path.strip_prefix("src/").unwrap_or(path)))
        .trim_end_matches('/')
        .to_string()
}

#[test]
fn the_dependency_rules_of_architecture_md_hold() {
    let doc = doc();
    let table = section(&doc, "## Dependency rules", "## ");
    let rules: Vec<(String, Vec<String>)> = rows(table)
        .iter()
        .map(|cells| {
            let never = code_spans(&cells[1])
                .into_iter()
                .map(String::from)
                .collect();
            (module_of(&cell_path(&cells[0])), never)
        })
        .collect();
    assert!(rules.len() >= 10, "{rules:?}");
    let sources = sources();
    let mut problems = Vec::new();
    for (module, never) in &rules {
        let files: Vec<&(PathBuf, String)> = sources
            .iter()
            .filter(|(rel, _)| top_module(rel) == *module)
            .collect();
        assert!(!files.is_empty(), "no source files of `{module}`");
        for (rel, text) in files {
            let refs = crate_refs(text);
            for name in never.iter().filter(|n| refs.contains(*n)) {
                problems.push(format!(
                    "src/{}: names crate::{name}; ARCHITECTURE.md says {module} never does",
                    rel.display()
                ));
            }
        }
    }
    // The other way, as the sentence under the table says.
    let words: String = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("only `src/cli.rs` names `cmd`; no module names `cli` or `untrusted`"),
        "the sentence this test checks is no longer in ARCHITECTURE.md"
    );
    for (rel, text) in &sources {
        let module = top_module(rel);
        if module == "lib" || module == "main" {
            continue;
        }
        let refs = crate_refs(text);
        for (name, only) in [
            ("cmd", &["cmd", "cli"][..]),
            ("cli", &["cli"]),
            ("untrusted", &["untrusted"]),
        ] {
            if refs.contains(name) && !only.contains(&module.as_str()) {
                problems.push(format!(
                    "src/{}: names crate::{name}; ARCHITECTURE.md says only {only:?} may",
                    rel.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
