//! The docs a newcomer reads: README.md, CHANGELOG.md, CONTRIBUTING.md, ARCHITECTURE.md and
//! docs/**.md. Every relative link and `#anchor` resolves; the README stays one screen, its
//! quick start is the build-and-run command plus the exact test command `.ci/run` runs, and its
//! quick start and first night run as written; docs/config.md lists exactly the keys the config
//! parser accepts, so neither can drift from the other.

use crate::util::{self, repo_root, Env};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The Markdown files the link check covers, relative to the repository root.
fn markdown_files() -> Vec<PathBuf> {
    let root = repo_root();
    let mut files: Vec<PathBuf> = [
        "README.md",
        "CHANGELOG.md",
        "CONTRIBUTING.md",
        "ARCHITECTURE.md",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let mut dirs = vec![root.join("docs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                files.push(p.strip_prefix(&root).unwrap().to_path_buf());
            }
        }
    }
    files.sort();
    files
}

fn read(rel: &Path) -> String {
    read_at(&repo_root(), rel)
}

fn read_at(root: &Path, rel: &Path) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
}

/// Lines outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| t.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// A line with its inline code spans removed (a link inside backticks is not a link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Targets of the inline links and images on one line: `[text](target)`, `![alt](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        // `(target "title")`: the target is the first word.
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        rest = &after[end..];
    }
    out
}

/// The anchor GitHub gives a heading: lower case, links reduced to their text, everything but
/// letters, digits, spaces, `-` and `_` dropped, spaces turned into `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // [text](url) -> text
    while let Some(open) = rest.find('[') {
        match (rest[open..].find("]("), rest[open..].find(')')) {
            (Some(mid), Some(close)) if mid < close => {
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..open + mid]);
                rest = &rest[open + close + 1..];
            }
            _ => {
                text.push_str(&rest[..=open]);
                rest = &rest[open + 1..];
            }
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown file's headings make (repeats get `-1`, `-2`, as GitHub does).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `dir/target` with `.` and `..` resolved, or None when it leaves the repository.
fn resolve(dir: &Path, target: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in dir.join(target).components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    Some(out)
}

/// The problems of every relative link in `files` (paths relative to `root`): a missing
/// file, a missing anchor, a link out of `root`.
fn broken_links(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files {
        let text = read_at(root, file);
        let dir = file.parent().unwrap_or(Path::new(""));
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                let at = format!("{}:{n}: ({target})", file.display());
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let linked = if path.is_empty() {
                    file.clone()
                } else {
                    match resolve(dir, path) {
                        Some(p) => p,
                        None => {
                            problems.push(format!("{at}: leaves the repository"));
                            continue;
                        }
                    }
                };
                if !root.join(&linked).exists() {
                    problems.push(format!("{at}: {} does not exist", linked.display()));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if linked.extension().is_none_or(|x| x != "md") {
                    problems.push(format!("{at}: an anchor into a file that is not Markdown"));
                    continue;
                }
                let have = anchors(&read_at(root, &linked));
                if !have.contains(anchor) {
                    problems.push(format!(
                        "{at}: {} has no heading with the anchor #{anchor} (it has: {})",
                        linked.display(),
                        have.into_iter().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let files = markdown_files();
    for must in [
        "docs/config.md",
        "docs/install.md",
        "docs/guarantees.md",
        "docs/benchmarks.md",
    ] {
        assert!(files.contains(&PathBuf::from(must)), "{must} is missing");
    }
    let problems = broken_links(&repo_root(), &files);
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

/// The link check itself: a missing file, a missing anchor and a link out of the repository
/// are caught; links in code are not links; GitHub's anchors are computed as GitHub does.
#[test]
fn the_link_check_catches_what_it_is_for() {
    assert_eq!(
        slug("Detached publish: `roger publish --detach`"),
        "detached-publish-roger-publish---detach"
    );
    assert_eq!(slug("[[notify.webhook]]"), "notifywebhook");
    assert_eq!(slug("See [the guide](x.md) now"), "see-the-guide-now");
    assert_eq!(
        anchors("# A\n## A\n```\n# not a heading\n```\n### B c\n"),
        ["a", "a-1", "b-c"].iter().map(|s| s.to_string()).collect()
    );
    assert_eq!(
        link_targets("[a](b.md) `[c](d.md)` ![e](f.png \"t\") [g](<h i.md>)"),
        vec!["b.md", "f.png", "h"]
    );
    // A small tree of its own, so the repository's docs are never written to.
    let env = Env::new();
    env.write("README.md", "# roger\n");
    env.write("docs/config.md", "# keys\n## [run]\n");
    let probe = |text: &str| -> Vec<String> {
        env.write("docs/probe.md", text);
        broken_links(env.dir.path(), &[PathBuf::from("docs/probe.md")])
    };
    let ok = probe("[ok](config.md#run) [ok](../README.md) [ok](#x) [ok](https://x.org/#y)\n# x\n");
    assert!(ok.is_empty(), "{ok:?}");
    let bad = probe("[a](nope.md)\n[b](config.md#no-such-key)\n[c](../../outside.md)\n");
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad[0].contains("does not exist"), "{bad:?}");
    assert!(bad[1].contains("#no-such-key"), "{bad:?}");
    assert!(bad[2].contains("leaves the repository"), "{bad:?}");
}

#[test]
fn the_readme_is_one_screen_of_under_200_lines() {
    let n = read(Path::new("README.md")).lines().count();
    assert!(
        n < 200,
        "README.md has {n} lines; the rest belongs in docs/"
    );
}

/// The commands of the first ```sh block under a README heading, comments dropped.
fn readme_block(heading: &str) -> Vec<String> {
    let text = read(Path::new("README.md"));
    let start = text
        .lines()
        .position(|l| l.trim() == heading)
        .unwrap_or_else(|| panic!("README.md has no `{heading}` section"));
    let mut lines = text.lines().skip(start + 1);
    lines
        .by_ref()
        .find(|l| l.trim() == "```sh")
        .unwrap_or_else(|| panic!("README.md `{heading}` has no ```sh block"));
    lines
        .take_while(|l| l.trim() != "```")
        .map(|l| l.split(" #").next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn words(cmd: &str) -> Vec<&str> {
    cmd.split_whitespace().collect()
}

/// The quick start is two commands on a fresh machine: build and run roger on the bundled
/// example, and the test command `.ci/run` runs, word for word.
#[test]
fn the_readme_quick_start_builds_runs_the_example_and_runs_the_ci_tests() {
    let cmds = readme_block("## Quick start");
    assert_eq!(cmds.len(), 2, "the quick start is two commands: {cmds:?}");

    let ci = read(Path::new(".ci/run"));
    let ci_tests: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("cargo test"))
        .collect();
    assert!(
        ci_tests.contains(&cmds[1].as_str()),
        "the README's test command {:?} is one .ci/run runs: {ci_tests:?}",
        cmds[1]
    );

    // `cargo run ... -- ARGS` builds roger and runs it with ARGS: run the built binary with
    // them, on a copy of the bundled example (its ledger and cache go beside it).
    let run = words(&cmds[0]);
    let sep = run
        .iter()
        .position(|w| *w == "--")
        .expect("cargo run ... -- ARGS");
    assert_eq!(&run[..2], ["cargo", "run"], "{}", cmds[0]);
    assert!(run[..sep].contains(&"--locked"), "{}", cmds[0]);
    let args = &run[sep + 1..];
    let env = Env::new();
    for rel in ["roger.example.toml", "examples/train_log.jsonl"] {
        env.write(rel, std::fs::read(repo_root().join(rel)).unwrap());
    }
    let r = env.run(args).expect(0);
    assert!(
        r.stdout().to_lowercase().contains("pass"),
        "the bundled example passes:\n{}",
        r.report()
    );
}

/// The five commands of a first night, run as written in a fresh directory: `init` on a log
/// where the command says it is (the bundled example's), `check`, `watch` of a training
/// script that stands in for the user's (it exits 0), `critic --daemon` until its first
/// verdict and a SIGTERM, `status`.
#[test]
fn the_readme_first_night_runs_as_written() {
    const TEST: &str = "docs::the_readme_first_night_runs_as_written";
    let cmds = readme_block("## A first night");
    let subcommands: Vec<&str> = cmds.iter().map(|c| words(c)[1]).collect();
    assert_eq!(
        subcommands,
        ["init", "check", "watch", "critic", "status"],
        "{cmds:?}"
    );
    let env = Env::new();
    for cmd in &cmds {
        let w = words(cmd);
        assert_eq!(w[0], "roger", "{cmd}");
        let args = &w[1..];
        match args[0] {
            "init" => {
                let log = args[args.iter().position(|a| *a == "--log").unwrap() + 1];
                env.write(
                    log,
                    std::fs::read(repo_root().join("examples/train_log.jsonl")).unwrap(),
                );
                env.run(args).expect(0);
            }
            "watch" => {
                let child = &args[args.iter().position(|a| *a == "--").unwrap() + 1..];
                if std::process::Command::new(child[0])
                    .arg("-c")
                    .arg("pass")
                    .status()
                    .is_err()
                {
                    util::missing(TEST, child[0], "apt-get install python3; .ci/run does");
                    return;
                }
                assert!(child[1].ends_with(".py"), "{cmd}");
                env.write(
                    child[1],
                    "import sys\nprint('training', sys.argv[1:])\nsys.exit(0)\n",
                );
                env.run(args).expect(0).stdout_has("the run exited 0");
            }
            "critic" => {
                assert!(args.contains(&"--daemon"), "{cmd}");
                let mut child = env
                    .cmd(args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                let start = Instant::now();
                while !env.read("roger-ledger.jsonl").contains("\"verdict\"") {
                    assert!(
                        start.elapsed() < Duration::from_secs(60),
                        "no verdict from `{cmd}`"
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGTERM,
                )
                .unwrap();
                let start = Instant::now();
                let status = loop {
                    if let Some(s) = child.try_wait().unwrap() {
                        break s;
                    }
                    assert!(
                        start.elapsed() < Duration::from_secs(30),
                        "`{cmd}` ignored SIGTERM"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                };
                let out = child.wait_with_output().unwrap();
                assert_eq!(
                    status.code(),
                    Some(0),
                    "{cmd}\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            _ => {
                env.run(args).expect(0);
            }
        }
    }
}

/// The README's exit-code table has the codes `roger --help` lists (printed from the code's
/// one exit-code table), no more and no fewer.
#[test]
fn the_readme_exit_codes_are_the_codes_roger_uses() {
    let readme = read(Path::new("README.md"));
    let rows: BTreeSet<u8> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(" |").next()?.trim().parse().ok())
        .collect();
    let help = Env::new().run(&["--help"]).expect(0).stdout();
    let codes: BTreeSet<u8> = help
        .lines()
        .filter_map(|l| {
            let (code, meaning) = l.trim_start().split_once("  ")?;
            (!meaning.trim().is_empty()).then_some(())?;
            code.parse().ok()
        })
        .collect();
    assert!(
        codes.contains(&75),
        "roger --help lists the exit codes:\n{help}"
    );
    assert_eq!(rows, codes, "README.md's exit-code table vs roger --help");
}

const PROBE_KEY: &str = "zz_not_a_roger_key";

/// The error `roger.toml` text gets from the real config parser.
fn parse_error(text: &str) -> Option<String> {
    roger::config::Config::parse(text, Path::new("roger.toml"))
        .err()
        .map(|e| format!("{e:#}"))
}

/// The keys a table accepts, from the parser's own answer to an unknown key in it (serde
/// lists every field it knows), or None when `text` does not make a table of known keys.
fn accepted_keys(text: &str) -> Option<Vec<String>> {
    let err = parse_error(text)?;
    let (_, expected) = err.split_once(&format!("unknown field `{PROBE_KEY}`, expected"))?;
    Some(
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// Every section of roger.toml (its dotted path), whether it is an array of tables
/// (`[[phase]]`), and the keys it accepts, found by asking the parser: each table is probed
/// with an unknown key, then each of its keys in turn as a table and as an array of tables.
/// A key that is a table of its own (`[metrics] patterns`) is both a key of its parent and a
/// section.
fn parser_keys() -> BTreeMap<String, (bool, BTreeSet<String>)> {
    let top = accepted_keys(&format!("{PROBE_KEY} = 1\n")).expect("top-level keys");
    // (path, the header lines that put a child table in the right place)
    let mut todo: Vec<(String, String)> = top.into_iter().map(|k| (k, String::new())).collect();
    let mut out = BTreeMap::new();
    while let Some((path, before)) = todo.pop() {
        let table = format!("{before}[{path}]\n");
        let array = format!("{before}[[{path}]]\n");
        let (is_array, own, keys) =
            if let Some(k) = accepted_keys(&format!("{table}{PROBE_KEY} = 1\n")) {
                (false, before.clone(), k)
            } else if let Some(k) = accepted_keys(&format!("{array}{PROBE_KEY} = 1\n")) {
                (true, array.clone(), k)
            } else {
                // A leaf: documented as a key of its parent.
                continue;
            };
        for k in &keys {
            todo.push((format!("{path}.{k}"), own.clone()));
        }
        out.insert(path, (is_array, keys.into_iter().collect()));
    }
    out
}

/// docs/config.md's sections (`## [run]`, `## [[phase]]`) and the keys in their tables'
/// first column.
fn documented_keys(text: &str) -> BTreeMap<String, (bool, BTreeSet<String>)> {
    let mut out: BTreeMap<String, (bool, BTreeSet<String>)> = BTreeMap::new();
    let mut current: Option<String> = None;
    for (_, line) in prose_lines(text) {
        if let Some(h) = line.strip_prefix("## ") {
            current = None;
            let h = h.trim();
            if let Some(name) = h.strip_prefix("[[").and_then(|s| s.strip_suffix("]]")) {
                out.insert(name.into(), (true, BTreeSet::new()));
                current = Some(name.into());
            } else if let Some(name) = h.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                out.insert(name.into(), (false, BTreeSet::new()));
                current = Some(name.into());
            }
        } else if let (Some(section), Some(row)) = (&current, line.strip_prefix("| `")) {
            if let Some((key, _)) = row.split_once("` |") {
                out.get_mut(section).unwrap().1.insert(key.to_string());
            }
        }
    }
    out
}

/// docs/config.md lists every key the parser accepts, each under its section, and nothing
/// else: a key added to a config struct without a row here (or a row for a key that is gone)
/// fails with its name.
#[test]
fn the_config_reference_lists_exactly_the_keys_the_parser_accepts() {
    let code = parser_keys();
    assert!(
        code.contains_key("run") && code.contains_key("notify.webhook"),
        "the probe found the sections: {:?}",
        code.keys().collect::<Vec<_>>()
    );
    assert!(
        code["watch"].1.contains("grind_limit") && code["phase"].0,
        "{code:?}"
    );
    let doc = documented_keys(&read(Path::new("docs/config.md")));
    let mut problems = Vec::new();
    for (section, (array, keys)) in &code {
        let shown = if *array {
            format!("[[{section}]]")
        } else {
            format!("[{section}]")
        };
        let Some((doc_array, doc_keys)) = doc.get(section) else {
            problems.push(format!("no `## {shown}` section"));
            continue;
        };
        if doc_array != array {
            problems.push(format!("the section is `{shown}` in roger.toml"));
        }
        for k in keys.difference(doc_keys) {
            problems.push(format!("{shown} `{k}` is accepted but not documented"));
        }
        for k in doc_keys.difference(keys) {
            problems.push(format!(
                "{shown} `{k}` is documented but the parser rejects it"
            ));
        }
    }
    for section in doc.keys().filter(|s| !code.contains_key(*s)) {
        problems.push(format!(
            "`{section}` is documented but is not a section roger reads"
        ));
    }
    assert!(
        problems.is_empty(),
        "docs/config.md vs the config parser:\n{}",
        problems.join("\n")
    );
}
