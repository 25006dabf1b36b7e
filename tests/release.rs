//! The way from a checkout to a published wheel: the README's install lines run as written
//! (`pip install ./python` in a fresh venv), `.github/workflows/release.yml` has the shape of a
//! trusted-publishing release (a version tag builds the manylinux2014 wheel and the sdist with
//! `.ci/run`'s pinned maturin and zig, and a job with `id-token: write` in an environment
//! publishes them), and the sdist the release builds is built here and holds what a build from
//! source needs.

use crate::install::as_from_a_shell;
use crate::util::{missing, repo_root, this_test, Env};
use serde_norway::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `maturin` arguments of the release's wheel (before `--out DIR`), run in `python/`: the
/// workflow's wheel step and `tests/install.rs`'s build use exactly these.
pub(crate) const WHEEL_ARGS: [&str; 5] = [
    "build",
    "--locked",
    "--zig",
    "--compatibility",
    "manylinux2014",
];
/// `maturin` arguments of the release's sdist (before `--out DIR`), run in `python/`.
const SDIST_ARGS: [&str; 1] = ["sdist"];
/// Where the workflow's steps put the artefacts, from `python/`.
const OUT: &str = "../dist";

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `name==VERSION` as `.ci/run` pins it (`"maturin==1.16.0"`).
fn ci_pin(name: &str) -> String {
    let ci = read(".ci/run");
    let needle = format!("\"{name}==");
    let at = ci
        .find(&needle)
        .unwrap_or_else(|| panic!(".ci/run pins no {name}"))
        + needle.len();
    ci[at..].split('"').next().unwrap().to_string()
}

fn get<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.get(key)
        .unwrap_or_else(|| panic!("release.yml: no `{key}` in {v:?}"))
}

fn text(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("release.yml: {v:?} is not a string"))
}

fn steps(job: &Value) -> &Vec<Value> {
    get(job, "steps").as_sequence().expect("steps: a list")
}

/// The step that `uses` an action (`actions/checkout`), by the part before `@`.
fn uses<'a>(job: &'a Value, action: &str) -> Option<&'a Value> {
    steps(job).iter().find(|s| {
        s.get("uses")
            .and_then(Value::as_str)
            .is_some_and(|u| u.split('@').next() == Some(action))
    })
}

/// The step whose `run` calls `maturin <first>`, with its words (variables assigned before
/// the command, like `ROGER_COMMIT=...`, left out).
fn maturin_step<'a>(job: &'a Value, first: &str) -> (&'a Value, Vec<&'a str>) {
    steps(job)
        .iter()
        .find_map(|s| {
            let run = s.get("run")?.as_str()?;
            let words: Vec<&str> = run.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "maturin")?;
            (words.get(at + 1) == Some(&first)).then(|| (s, words[at + 1..].to_vec()))
        })
        .unwrap_or_else(|| panic!("release.yml: no step runs `maturin {first}`"))
}

fn version_in_range(version: &str, spec: &str) -> bool {
    let num = |s: &str| -> Vec<u64> { s.split('.').map(|p| p.trim().parse().unwrap()).collect() };
    let v = num(version);
    spec.split(',').all(|c| {
        let c = c.trim();
        if let Some(b) = c.strip_prefix(">=") {
            v >= num(b)
        } else if let Some(b) = c.strip_prefix('<') {
            v < num(b)
        } else {
            panic!("an unexpected requirement {c:?}")
        }
    })
}

#[test]
fn the_release_workflow_builds_the_wheel_and_sdist_and_publishes_with_trusted_publishing() {
    let raw = read(".github/workflows/release.yml");
    let wf: Value = serde_norway::from_str(&raw).expect("release.yml is YAML");

    // On a version tag, and only then.
    let on = wf
        .get("on")
        .or_else(|| wf.get(Value::Bool(true)))
        .expect("release.yml: no `on`");
    assert_eq!(
        on.as_mapping().map(|m| m.len()),
        Some(1),
        "only a push triggers a release: {on:?}"
    );
    let push = get(on, "push");
    let tags: Vec<&str> = get(push, "tags")
        .as_sequence()
        .expect("tags: a list")
        .iter()
        .map(text)
        .collect();
    assert_eq!(tags, ["v*"], "a version tag");
    assert!(push.get("branches").is_none(), "no branch push publishes");
    // Least privilege by default; no stored token anywhere.
    assert_eq!(text(get(get(&wf, "permissions"), "contents")), "read");
    assert!(get(&wf, "permissions").get("id-token").is_none());
    assert!(
        !raw.contains("secrets.") && !raw.contains("password"),
        "trusted publishing needs no token"
    );

    // The pins agree with .ci/run and python/pyproject.toml.
    let env = get(&wf, "env");
    let maturin = text(get(env, "MATURIN_VERSION"));
    assert_eq!(
        maturin,
        ci_pin("maturin"),
        "maturin: release.yml and .ci/run"
    );
    assert_eq!(
        text(get(env, "ZIGLANG_VERSION")),
        ci_pin("ziglang"),
        "ziglang: release.yml and .ci/run"
    );
    let pyproject = read("python/pyproject.toml");
    let spec = pyproject
        .lines()
        .find_map(|l| l.trim().strip_prefix("requires = [\"maturin"))
        .and_then(|r| r.split('"').next())
        .expect("python/pyproject.toml: requires = [\"maturin...\"]");
    assert!(
        version_in_range(maturin, spec),
        "maturin {maturin} is outside python/pyproject.toml's {spec}"
    );

    // The build job: the tag checked against Cargo.toml, the pinned tools, the wheel and the
    // sdist built as tests/install.rs and the test below build them, both uploaded.
    let jobs = get(&wf, "jobs");
    let build = get(jobs, "build");
    assert!(uses(build, "actions/checkout").is_some());
    let install = steps(build)
        .iter()
        .filter_map(|s| s.get("run").and_then(Value::as_str))
        .find(|r| r.contains("pip install"))
        .expect("a step installs maturin and zig");
    assert!(
        install.contains("\"maturin==$MATURIN_VERSION\"")
            && install.contains("\"ziglang==$ZIGLANG_VERSION\""),
        "{install}"
    );
    assert!(
        steps(build).iter().any(|s| s
            .get("run")
            .and_then(Value::as_str)
            .is_some_and(|r| r.contains("GITHUB_REF_NAME") && r.contains("cargo metadata"))),
        "a step refuses a tag that is not Cargo.toml's version"
    );
    let (wheel, words) = maturin_step(build, "build");
    let want: Vec<&str> = WHEEL_ARGS.iter().copied().chain(["--out", OUT]).collect();
    assert_eq!(words, want, "the wheel step");
    assert_eq!(text(get(wheel, "working-directory")), "python");
    assert!(text(get(wheel, "run")).starts_with("ROGER_COMMIT=$(git rev-parse --short=12 HEAD) "));
    let (sdist, words) = maturin_step(build, "sdist");
    let want: Vec<&str> = SDIST_ARGS.iter().copied().chain(["--out", OUT]).collect();
    assert_eq!(words, want, "the sdist step");
    assert_eq!(text(get(sdist, "working-directory")), "python");
    let upload = uses(build, "actions/upload-artifact").expect("the build uploads dist/");
    assert_eq!(text(get(get(upload, "with"), "path")), "dist/");

    // The publish job: after the build, in an environment, with the OIDC token only.
    let publish = get(jobs, "publish");
    assert_eq!(text(get(publish, "needs")), "build");
    let environment = get(publish, "environment");
    assert!(!text(get(environment, "name")).is_empty());
    assert!(text(get(environment, "url")).ends_with("/roger-guard"));
    let permissions = get(publish, "permissions").as_mapping().unwrap();
    assert_eq!(permissions.len(), 1, "{permissions:?}");
    assert_eq!(text(get(get(publish, "permissions"), "id-token")), "write");
    let download = uses(publish, "actions/download-artifact").expect("publish downloads dist/");
    assert_eq!(text(get(get(download, "with"), "path")), "dist/");
    let pypi = uses(publish, "pypa/gh-action-pypi-publish").expect("pypa's publish action");
    assert_eq!(text(get(get(pypi, "with"), "packages-dir")), "dist/");
    // The PyPI name in the workflow is the distribution's.
    assert!(pyproject.contains("name = \"roger-guard\""));
}

/// The first ```sh block under `## Install` in the README, as whole lines, comments dropped.
fn readme_install_lines() -> Vec<String> {
    let readme = read("README.md");
    let at = readme.find("\n## Install\n").expect("README: ## Install");
    let block = readme[at..]
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("README: ## Install has a ```sh block");
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The README's install lines are what works from a checkout today (nothing is on PyPI), and
/// they run as written: a venv in a fresh HOME, `pip install ./python` (pip fetches maturin,
/// the build backend, from PyPI, and builds the wheel for this machine), then `roger
/// --version` from the venv. On the README before this test, the first line was `pip install
/// roger-guard`: "No matching distribution found".
#[test]
fn the_readme_install_lines_run_as_written_from_a_checkout() {
    let test = this_test();
    let lines = readme_install_lines();
    assert!(
        !lines.iter().any(|l| l.contains("roger-guard")),
        "the README's install block names a distribution nothing has published: {lines:?}"
    );
    assert_eq!(
        lines,
        [
            "python3 -m venv ~/.venvs/roger && . ~/.venvs/roger/bin/activate",
            "pip install ./python",
            "roger --version",
        ],
        "the lines this test runs"
    );
    assert!(repo_root().join("python/pyproject.toml").is_file());

    let have = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !have("python3", &["-c", "import ensurepip, venv"]) {
        return missing(&test, "python3 venv", "apt-get install python3-venv");
    }
    if !have("cargo", &["--version"]) {
        return missing(&test, "cargo", "a Rust toolchain (rustup)");
    }
    // pip fetches the build backend (maturin) from the index, as it does for a person.
    let index =
        std::env::var("PIP_INDEX_URL").unwrap_or_else(|_| "https://pypi.org/simple/".into());
    let probe = format!(
        "import urllib.request; urllib.request.urlopen({:?}, timeout=15)",
        format!("{}/maturin/", index.trim_end_matches('/'))
    );
    if !have("python3", &["-c", &probe]) {
        return missing(
            &test,
            "PyPI",
            "network access to the package index pip uses",
        );
    }
    let home = Env::new();
    let script = format!("set -e\n{}\n", lines.join("\n"));
    let mut sh = Command::new("/bin/sh");
    sh.args(["-c", &script])
        .current_dir(repo_root())
        .env("HOME", home.dir.path())
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .stdin(Stdio::null());
    as_from_a_shell(&mut sh);
    let started = std::time::Instant::now();
    let out = sh.output().unwrap();
    let report = format!(
        "$ {script}exit: {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "{test}: the install took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    assert!(out.status.success(), "{report}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let version = format!("roger {} (", env!("CARGO_PKG_VERSION"));
    assert!(stdout.lines().any(|l| l.starts_with(&version)), "{report}");
    let venv_roger = home.dir.path().join(".venvs/roger/bin/roger");
    assert!(venv_roger.is_file(), "{report}");
}

/// The names in a .tar.gz, through python3's tarfile.
fn tar_names(archive: &Path) -> Vec<String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, tarfile\nfor n in tarfile.open(sys.argv[1]).getnames(): print(n)",
        ])
        .arg(archive)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// One member of a .tar.gz as text.
fn tar_member(archive: &Path, name: &str) -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, tarfile\nsys.stdout.write(tarfile.open(sys.argv[1]).extractfile(sys.argv[2]).read().decode())",
        ])
        .arg(archive)
        .arg(name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every `.rs` file under `dir`, relative to `root`.
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.strip_prefix(root).unwrap().to_path_buf());
        }
    }
}

/// The release's sdist, built here with the workflow's command: named for the distribution
/// and version, its metadata right, and with everything a build from source needs (the whole
/// crate: Cargo.toml, Cargo.lock, every source file; the Python package; a pyproject whose
/// manifest path is inside it), and nothing of a build (no target/, no .git/).
#[test]
fn the_sdist_builds_and_holds_what_a_build_from_source_needs() {
    let test = this_test();
    if !Command::new("maturin")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        return missing(&test, "maturin", "pip install maturin (.ci/run pins it)");
    }
    let env = Env::new();
    let dist = env.path("dist");
    let mut cmd = Command::new("maturin");
    cmd.args(SDIST_ARGS)
        .arg("--out")
        .arg(&dist)
        .current_dir(repo_root().join("python"))
        .stdin(Stdio::null());
    as_from_a_shell(&mut cmd);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "maturin sdist: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let version = env!("CARGO_PKG_VERSION");
    let files: Vec<PathBuf> = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let want = format!("roger_guard-{version}.tar.gz");
    assert_eq!(
        files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect::<Vec<_>>(),
        std::slice::from_ref(&want),
        "one sdist, named for the distribution (PEP 625)"
    );
    let sdist = &files[0];
    let top = format!("roger_guard-{version}/");
    let names = tar_names(sdist);
    assert!(names
        .iter()
        .all(|n| n.starts_with(&top) || n.as_str() == top.trim_end_matches('/')));
    let has = |rel: &str| names.iter().any(|n| *n == format!("{top}{rel}"));

    let pkg_info = tar_member(sdist, &format!("{top}PKG-INFO"));
    assert!(
        pkg_info.lines().any(|l| l == "Name: roger-guard")
            && pkg_info.lines().any(|l| l == format!("Version: {version}"))
            && pkg_info.lines().any(|l| l == "Requires-Python: >=3.8"),
        "PKG-INFO:\n{pkg_info}"
    );
    for rel in [
        "pyproject.toml",
        "Cargo.toml",
        "Cargo.lock",
        "LICENSE",
        "README.md",
    ] {
        assert!(has(rel), "{rel} is not in {want}");
    }
    // The whole crate: every source file of src/ (a build from the sdist compiles it).
    let mut sources = Vec::new();
    rust_files(&repo_root(), &repo_root().join("src"), &mut sources);
    assert!(sources.len() > 100);
    let absent: Vec<&PathBuf> = sources
        .iter()
        .filter(|s| !has(&s.to_string_lossy()))
        .collect();
    assert!(absent.is_empty(), "not in the sdist: {absent:?}");
    // The Python package, where the sdist's own pyproject says it is.
    let pyproject = tar_member(sdist, &format!("{top}pyproject.toml"));
    let setting = |key: &str| {
        pyproject
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{key} = \"")))
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("the sdist's pyproject.toml has no {key}:\n{pyproject}"))
            .to_string()
    };
    let manifest = setting("manifest-path");
    assert!(
        has(&manifest),
        "manifest-path {manifest} is not in the sdist"
    );
    let python_source = setting("python-source");
    let init = Path::new(&python_source).join("roger_guard/__init__.py");
    assert!(
        has(init.to_str().unwrap().trim_start_matches("./")),
        "{} is not in the sdist",
        init.display()
    );
    assert_eq!(setting("profile"), "dist");
    // Nothing of a build or of git.
    let junk: Vec<&String> = names
        .iter()
        .filter(|n| {
            let rel = &n[top.len().min(n.len())..];
            rel.starts_with("target/")
                || rel.starts_with(".git/")
                || rel.contains("/dist/")
                || rel.starts_with("fuzz/target")
                || rel.contains("__pycache__")
        })
        .collect();
    assert!(junk.is_empty(), "{junk:?}");
}
