//! How roger reaches a machine and introduces itself there: the wheel (python/pyproject.toml,
//! built by maturin for glibc 2.17, installed into a venv with no Rust on PATH), `--version`
//! with its commit, and the man pages.

use crate::util::{missing, repo_root, this_test, Env};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What `--version` must say for a binary built with `commit` as ROGER_COMMIT.
fn version_line(commit: Option<&str>) -> String {
    let v = env!("CARGO_PKG_VERSION");
    match commit.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) => format!("roger {v} (commit {c})"),
        None => format!("roger {v} (unknown commit: built without ROGER_COMMIT)"),
    }
}

/// The test binary and roger were compiled by the same cargo invocation, so they saw the same
/// ROGER_COMMIT (usually none: then roger says so rather than inventing one).
#[test]
fn version_names_the_version_and_the_commit_it_was_built_from() {
    let env = Env::new();
    let want = version_line(option_env!("ROGER_COMMIT"));
    let run = env.run(&["--version"]).expect(0);
    assert_eq!(run.stdout().trim_end(), want, "{}", run.report());
    // Every subcommand knows it too (`roger critic --version`).
    let run = env.run(&["critic", "--version"]).expect(0);
    assert!(
        run.stdout().contains(want.trim_start_matches("roger ")),
        "{}",
        run.report()
    );
}

/// `groff -man -Tutf8 -ww` over `page`: the rendered text, or `None` (through `missing`) where
/// groff is not installed. Any warning groff prints (bad requests, unknown macros) fails.
fn render(page: &Path, test: &str) -> Option<String> {
    let out = match Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-rLL=200n"])
        .arg(page)
        .env("LC_ALL", "C.UTF-8")
        .output()
    {
        Ok(o) => o,
        Err(_) => {
            missing(test, "groff", "apt-get install groff-base");
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "groff on {}: {:?}\n{stderr}",
        page.display(),
        out.status
    );
    // Drop overstrike bold/underline (`x\bx`) and SGR escapes so the text can be searched.
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut plain = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{8}' => {
                plain.pop();
            }
            '\u{1b}' => {
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            _ => plain.push(c),
        }
    }
    Some(plain)
}

/// The top-level subcommand names, from `roger --help`'s "Commands:" list.
fn top_level_subcommands(env: &Env) -> Vec<String> {
    let help = env.run(&["--help"]).expect(0).stdout();
    let list: Vec<String> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    assert!(
        list.len() >= 10 && list.iter().any(|n| n == "man"),
        "{help}"
    );
    list
}

#[test]
fn man_page_renders_and_lists_every_subcommand() {
    let test = this_test();
    let env = Env::new();
    let run = env.run(&["man"]).expect(0);
    assert!(run.stdout().contains(".TH roger 1"), "{}", run.report());
    let page = env.write("roger.1", run.stdout());
    let Some(text) = render(&page, &test) else {
        return;
    };
    assert!(text.contains("SYNOPSIS"), "{text}");
    assert!(
        text.contains("Exit codes:"),
        "the closing help text: {text}"
    );
    let subs = top_level_subcommands(&env);
    for sub in &subs {
        assert!(
            text.contains(&format!("roger-{sub}(1)")),
            "roger(1) does not list {sub}:\n{text}"
        );
    }

    // --dir: one page per subcommand at every depth, each valid roff with its own options.
    let dir = env.path("man1");
    let run = env.run(&["man", "--dir", dir.to_str().unwrap()]).expect(0);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let printed: Vec<String> = run
        .stdout()
        .lines()
        .map(|l| {
            Path::new(l)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let mut sorted = printed.clone();
    sorted.sort();
    assert_eq!(names, sorted, "what it says it wrote: {}", run.report());
    for want in subs
        .iter()
        .map(|s| format!("roger-{s}.1"))
        .chain(["roger.1", "roger-hygiene-disk.1", "roger-quarantine-add.1"].map(String::from))
    {
        assert!(names.contains(&want), "{want} missing: {names:?}");
    }
    assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
    for name in &names {
        let text = render(&dir.join(name), &test).unwrap();
        let title = name.trim_end_matches(".1");
        assert!(text.contains(title), "{name} does not name itself:\n{text}");
    }
    let disk = render(&dir.join("roger-hygiene-disk.1"), &test).unwrap();
    assert!(disk.contains("--json"), "{disk}");
    let critic = render(&dir.join("roger-critic.1"), &test).unwrap();
    assert!(
        critic.contains("--once") && critic.contains("--config"),
        "{critic}"
    );
}

/// The GLIBC symbol versions an ELF executable requires (its `.gnu.version_r` section: the
/// version needs `objdump -T` shows), as (major, minor) pairs, e.g. `GLIBC_2.17` -> (2, 17).
/// `GLIBC_PRIVATE` or any other GLIBC name that is no number fails: no manylinux policy
/// allows it.
fn glibc_needs(elf: &[u8]) -> Vec<(u32, u32)> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((elf[4], elf[5]), (2, 1), "not a little-endian ELF64 file");
    let (shoff, shentsize, shnum) = (u64_at(0x28), u16_at(0x3a) as usize, u16_at(0x3c));
    let section = |i: usize| shoff + i * shentsize;
    let cstr = |o: usize| {
        let end = elf[o..].iter().position(|&b| b == 0).unwrap();
        String::from_utf8_lossy(&elf[o..o + end]).into_owned()
    };
    const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;
    let mut out = Vec::new();
    let mut found = false;
    for i in 0..shnum as usize {
        let sh = section(i);
        if u32_at(sh + 4) != SHT_GNU_VERNEED {
            continue;
        }
        found = true;
        let strtab = u64_at(section(u32_at(sh + 40) as usize) + 24);
        let mut vn = u64_at(sh + 24);
        for _ in 0..u32_at(sh + 44) {
            let (cnt, aux, next) = (u16_at(vn + 2), u32_at(vn + 8), u32_at(vn + 12));
            let mut a = vn + aux as usize;
            for _ in 0..cnt {
                let name = cstr(strtab + u32_at(a + 8) as usize);
                if let Some(v) = name.strip_prefix("GLIBC_") {
                    let parsed = v.split_once('.').and_then(|(ma, mi)| {
                        Some((ma.parse().ok()?, mi.split('.').next()?.parse().ok()?))
                    });
                    out.push(
                        parsed.unwrap_or_else(|| panic!("requires {name}: no manylinux allows it")),
                    );
                }
                a += u32_at(a + 12) as usize;
            }
            vn += next as usize;
        }
    }
    assert!(
        found,
        "no .gnu.version_r section: not a dynamically linked glibc binary"
    );
    out
}

/// The names of the ELF's sections (to tell a stripped binary: no .symtab, no .debug_*).
fn section_names(elf: &[u8]) -> Vec<String> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(0x28),
        u16_at(0x3a) as usize,
        u16_at(0x3c) as usize,
        u16_at(0x3e) as usize,
    );
    let names = u64_at(shoff + shstrndx * shentsize + 24);
    (0..shnum)
        .map(|i| {
            let o = names + u32_at(shoff + i * shentsize) as usize;
            let end = elf[o..].iter().position(|&b| b == 0).unwrap();
            String::from_utf8_lossy(&elf[o..o + end]).into_owned()
        })
        .collect()
}

/// The reader itself, on the binary cargo built for these tests: it is linked against this
/// machine's glibc, finds its version needs, and sees the symbol table a stripped build lacks
/// (so the wheel test's checks can fail).
#[test]
fn the_elf_reader_finds_glibc_needs_and_symbols_of_a_host_build() {
    let elf = std::fs::read(crate::util::roger_bin()).unwrap();
    let needs = glibc_needs(&elf);
    let max = *needs
        .iter()
        .max()
        .expect("a host build needs some GLIBC version");
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    let host = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) }
        .to_string_lossy()
        .into_owned();
    eprintln!(
        "glibc {host} here; the host build of roger needs GLIBC_{}.{}",
        max.0, max.1
    );
    // Since glibc 2.34 every program links __libc_start_main@GLIBC_2.34: a binary built
    // here fails the wheel test's 2.17 check.
    let (ma, mi) = host.split_once('.').unwrap();
    if (ma.parse::<u32>().unwrap(), mi.parse::<u32>().unwrap()) >= (2, 34) {
        assert!(max >= (2, 34), "{needs:?}");
    }
    let sections = section_names(&elf);
    assert!(sections.iter().any(|s| s == ".symtab"), "{sections:?}");
    assert!(
        sections.iter().any(|s| s == ".gnu.version_r"),
        "{sections:?}"
    );
}

/// Take out of `cmd`'s environment what cargo set for this test process (CARGO_PKG_NAME=roger,
/// ...): build scripts that watch such variables (ring's) would see them change against a
/// build from a shell and rebuild, so a nested build gets the environment a person's shell has.
pub(crate) fn as_from_a_shell(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
            "CARGO_TARGET_TMPDIR",
        ]
        .iter()
        .any(|p| key.starts_with(p))
            || ["CARGO", "CARGO_PRIMARY_PACKAGE", "CARGO_RUSTC_CURRENT_DIR"].contains(&&*key)
        {
            cmd.env_remove(&*key);
        }
    }
}

/// `git rev-parse --short=12 HEAD` of the checkout, with `-dirty` when it has uncommitted
/// changes; `None` outside a git checkout.
fn checkout_commit() -> Option<String> {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(repo_root())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short=12", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// PATH less every directory that holds cargo, rustc or rustup or is rustup's/cargo's own.
fn path_without_rust() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|d| {
            let s = d.to_string_lossy();
            !s.contains(".cargo")
                && !s.contains("rustup")
                && !["cargo", "rustc", "rustup"]
                    .iter()
                    .any(|t| d.join(t).exists())
        })
        .map(|d| d.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":")
}

/// One file out of a wheel (a zip), through python3's zipfile.
fn unzip(wheel: &Path, member_suffix: &str, to: &Path) -> PathBuf {
    let script = "import sys, zipfile\n\
        z = zipfile.ZipFile(sys.argv[1])\n\
        names = [n for n in z.namelist() if n.endswith(sys.argv[2])]\n\
        assert len(names) == 1, (sys.argv[2], z.namelist())\n\
        open(sys.argv[3], 'wb').write(z.read(names[0]))\n";
    let st = Command::new("python3")
        .args(["-c", script])
        .arg(wheel)
        .arg(member_suffix)
        .arg(to)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "{member_suffix} not found once in {}",
        wheel.display()
    );
    to.to_path_buf()
}

/// The whole install story from a checkout: maturin builds the manylinux2014 wheel with zig,
/// the binary in it needs no glibc newer than 2.17 and is stripped, and a fresh venv with no
/// Rust on PATH gets `roger` from `pip install --no-index` and runs the quick start.
#[test]
fn wheel_builds_for_glibc_2_17_and_runs_the_quick_start_from_a_venv_without_rust() {
    let test = this_test();
    let have = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !have("maturin", &["--version"]) {
        return missing(&test, "maturin", "pip install maturin (.ci/run pins it)");
    }
    if !have("python3", &["-m", "ziglang", "version"]) {
        return missing(&test, "zig", "pip install ziglang (.ci/run pins it)");
    }
    if !have("python3", &["-m", "venv", "--help"]) || !have("python3", &["-c", "import ensurepip"])
    {
        return missing(&test, "python3 venv", "apt-get install python3-venv");
    }
    let env = Env::new();
    let dist = env.path("dist");
    let commit = checkout_commit();

    // The build: what a release does (python/pyproject.toml), into the repo's own target dir.
    let started = std::time::Instant::now();
    let mut build = Command::new("maturin");
    build
        .args(crate::release::WHEEL_ARGS)
        .arg("--out")
        .arg(&dist)
        .current_dir(repo_root().join("python"))
        .env_remove("ROGER_COMMIT")
        .stdin(Stdio::null());
    as_from_a_shell(&mut build);
    if let Some(c) = &commit {
        build.env("ROGER_COMMIT", c);
    }
    let out = build.output().expect("running maturin");
    assert!(
        out.status.success(),
        "maturin build failed: {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "{test}: maturin build took {:.0} s",
        started.elapsed().as_secs_f64()
    );

    // The tag: manylinux2014 alias and its PEP 600 name, no Python ABI (a binary).
    let wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    let wheel = &wheels[0];
    let file = wheel.file_name().unwrap().to_string_lossy().into_owned();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        file.starts_with(&format!("roger_guard-{version}-py3-none-"))
            && file.contains("manylinux_2_17_x86_64")
            && file.contains("manylinux2014_x86_64"),
        "wheel name {file}"
    );
    let meta =
        std::fs::read_to_string(unzip(wheel, ".dist-info/WHEEL", &env.path("WHEEL"))).unwrap();
    assert!(
        meta.lines()
            .any(|l| l == "Tag: py3-none-manylinux_2_17_x86_64")
            && meta
                .lines()
                .any(|l| l == "Tag: py3-none-manylinux2014_x86_64"),
        "WHEEL: {meta}"
    );

    // The binary: glibc 2.17 by its symbols, stripped, small.
    let bin = unzip(wheel, ".data/scripts/roger", &env.path("roger-from-wheel"));
    let elf = std::fs::read(&bin).unwrap();
    let needs = glibc_needs(&elf);
    let max = *needs
        .iter()
        .max()
        .expect("the binary needs some GLIBC version");
    assert!(
        max <= (2, 17),
        "the wheel's roger needs GLIBC_{}.{} (> 2.17)",
        max.0,
        max.1
    );
    let sections = section_names(&elf);
    assert!(
        !sections
            .iter()
            .any(|s| s == ".symtab" || s.starts_with(".debug")),
        "the wheel's roger is not stripped: {sections:?}"
    );
    eprintln!(
        "{test}: {file}: roger is {} bytes, needs GLIBC_{}.{}",
        elf.len(),
        max.0,
        max.1
    );

    // A fresh venv; the wheel from the directory alone (nothing from an index).
    let venv = env.path("venv");
    let st = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(st.success(), "python3 -m venv failed");
    let pip = Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
        ])
        .arg(wheel)
        .output()
        .unwrap();
    assert!(
        pip.status.success(),
        "pip install: {}",
        String::from_utf8_lossy(&pip.stderr)
    );

    // The quick start, from a directory with the bundled example, roger found on a PATH that
    // has the venv and no Rust toolchain, in an environment with nothing of cargo's.
    let work = Env::new();
    work.write(
        "examples/train_log.jsonl",
        std::fs::read(repo_root().join("examples/train_log.jsonl")).unwrap(),
    );
    work.write(
        "roger.example.toml",
        std::fs::read(repo_root().join("roger.example.toml")).unwrap(),
    );
    let path = format!("{}:{}", venv.join("bin").display(), path_without_rust());
    let sh = |script: &str| {
        let out = Command::new("/bin/sh")
            .args(["-c", script])
            .current_dir(work.dir.path())
            .env_clear()
            .env("PATH", &path)
            .env("HOME", work.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let report = format!(
            "$ {script}\nexit: {:?}\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            report,
        )
    };
    let (code, found, report) = sh("command -v roger; command -v cargo rustc rustup; true");
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(
        found.trim(),
        venv.join("bin/roger").display().to_string(),
        "roger must come from the venv and cargo/rustc must not be on PATH: {report}"
    );
    let (code, out, report) = sh("roger --version");
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(out.trim_end(), version_line(commit.as_deref()), "{report}");
    for (script, want, has) in [
        ("roger init --log examples/train_log.jsonl", 0, "roger.toml"),
        ("roger check", 0, "phase"),
        ("roger critic --once", 0, "PASS"),
        (
            "roger --config roger.example.toml critic --once",
            0,
            "PASS  step 1200  phase main",
        ),
        ("roger completions bash", 0, "_roger()"),
        ("roger man", 0, ".TH roger 1"),
    ] {
        let (code, out, report) = sh(script);
        assert_eq!(code, Some(want), "{report}");
        assert!(
            out.contains(has) || report.contains(has),
            "{has:?} missing: {report}"
        );
    }
    // The Python package ships in the same wheel and imports from the venv, stdlib only.
    let (code, out, report) = sh("python -c 'import roger_guard; print(roger_guard.__file__)'");
    assert_eq!(code, Some(0), "{report}");
    assert!(
        out.trim().starts_with(&venv.display().to_string()),
        "{report}"
    );
    // `uv tool install` and `pipx install`, as the README says, from the wheel file alone:
    // each puts `roger` in its own bin directory, which then runs as the venv's did.
    let tools = env.path("tools");
    let home = env.path("home");
    std::fs::create_dir_all(&home).unwrap();
    // (tool, its install arguments, its directories by variable: its own, the bin, one more)
    type Installer<'a> = (&'a str, Vec<String>, Vec<(&'a str, PathBuf)>);
    let installers: [Installer; 2] = [
        (
            "uv",
            vec!["tool".into(), "install".into(), "--offline".into()],
            vec![
                ("UV_TOOL_DIR", tools.join("uv")),
                ("UV_TOOL_BIN_DIR", tools.join("uv-bin")),
                ("UV_CACHE_DIR", tools.join("uv-cache")),
            ],
        ),
        (
            "pipx",
            vec!["install".into(), "--pip-args=--no-index".into()],
            vec![
                ("PIPX_HOME", tools.join("pipx")),
                ("PIPX_BIN_DIR", tools.join("pipx-bin")),
                ("PIPX_MAN_DIR", tools.join("pipx-man")),
            ],
        ),
    ];
    for (tool, args, dirs) in installers {
        if !have(tool, &["--version"]) {
            missing(
                &test,
                tool,
                &format!("pip install {tool} (.ci/run pins it)"),
            );
            continue;
        }
        let mut install = Command::new(tool);
        install
            .args(&args)
            .arg(wheel)
            .env("HOME", &home)
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .stdin(Stdio::null());
        for (k, v) in &dirs {
            install.env(k, v);
        }
        let out = install.output().unwrap();
        assert!(
            out.status.success(),
            "{tool} install: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let bin_dir = &dirs[1].1;
        let (code, out, report) = sh(&format!(
            "{}/roger --version && {0}/roger --config roger.example.toml critic --once",
            bin_dir.display()
        ));
        assert_eq!(code, Some(0), "{tool}: {report}");
        assert!(
            out.starts_with(&version_line(commit.as_deref())),
            "{tool}: {report}"
        );
    }
    // Last, so that a binary that grew still shows whether everything else works.
    assert!(
        elf.len() <= 15 << 20,
        "roger in the wheel is {} bytes (goal: 15 MiB)",
        elf.len()
    );
}
