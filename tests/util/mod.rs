//! Test harness: a temp dir per test, runs the real binary, and on failure prints the command,
//! exit code, stdout, stderr and a listing of the dir.

#![allow(dead_code)]

pub mod faultproxy;
pub mod kubelet;
pub mod receiver;
pub mod s3;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn roger_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_roger"))
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether this is CI (`CI` set to anything but empty, `0` or `false`; CI services set
/// `CI=true`), where every component a test needs is installed by `.ci/run`.
pub fn on_ci() -> bool {
    std::env::var("CI")
        .is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"))
}

/// The running test's name, for helpers that do not know it (libtest names each test's
/// thread after it).
pub fn this_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string()
}

/// `test` cannot run here because `component` is missing (`how` says how to get it). The one
/// place a test gives up for a missing component: under CI this panics naming the component,
/// so a CI run cannot go green by skipping; on a developer machine it prints a SKIPPED line
/// and the caller returns. Not for conditions where the machine legitimately differs (a real
/// GPU present): those stay plain conditions at their test.
pub fn missing(test: &str, component: &str, how: &str) {
    if on_ci() {
        panic!("{test}: {component} is missing ({how}); CI must run every test, so this fails instead of skipping");
    }
    eprintln!("SKIPPED {test}: {component} is missing ({how})");
}

/// Whether /usr/bin/python3 imports torch (Debian's python3-torch); when not, says so through
/// [`missing`].
pub fn torch_ready(test: &str) -> bool {
    let ok = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import torch"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        missing(
            test,
            "/usr/bin/python3 with torch",
            "apt-get install python3-torch; .ci/run does",
        );
    }
    ok
}

pub struct Env {
    pub dir: tempfile::TempDir,
}

pub struct Run {
    pub argv: Vec<String>,
    pub out: Output,
    pub listing: String,
}

impl Run {
    pub fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    pub fn report(&self) -> String {
        format!(
            "command: {}\nexit: {:?}\n--- stdout\n{}\n--- stderr\n{}\n--- dir\n{}",
            self.argv.join(" "),
            self.out.status,
            self.stdout(),
            self.stderr(),
            self.listing
        )
    }
    /// Assert the exit code, printing everything on mismatch.
    #[track_caller]
    pub fn expect(self, code: i32) -> Run {
        assert_eq!(self.code(), code, "\n{}", self.report());
        self
    }
    #[track_caller]
    pub fn stdout_has(self, needle: &str) -> Run {
        assert!(
            self.stdout().contains(needle),
            "stdout lacks {needle:?}\n{}",
            self.report()
        );
        self
    }
    #[track_caller]
    pub fn stderr_has(self, needle: &str) -> Run {
        assert!(
            self.stderr().contains(needle),
            "stderr lacks {needle:?}\n{}",
            self.report()
        );
        self
    }
}

impl Env {
    pub fn new() -> Env {
        Env {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, content).unwrap();
        p
    }

    /// Append to a file (same inode, as a training appends to its log).
    pub fn append(&self, rel: &str, content: impl AsRef<[u8]>) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.path(rel))
            .unwrap();
        std::io::Write::write_all(&mut f, content.as_ref()).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_default()
    }

    /// A `roger` command running in the temp dir, with a clean config environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(roger_bin());
        c.args(args)
            .current_dir(self.dir.path())
            .env_remove("ROGER_CONFIG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_cmd(self.cmd(args), args)
    }

    pub fn run_cmd(&self, mut c: Command, args: &[&str]) -> Run {
        let out = c.output().expect("spawn roger");
        Run {
            argv: std::iter::once("roger".to_string())
                .chain(args.iter().map(|s| s.to_string()))
                .collect(),
            out,
            listing: listing(self.dir.path()),
        }
    }
}

pub fn listing(root: &Path) -> String {
    let mut lines = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let meta = e.metadata().ok();
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            if meta.as_ref().is_some_and(|m| m.is_dir()) {
                lines.push(format!("{rel}/"));
                stack.push(p);
            } else {
                lines.push(format!("{rel} ({} B)", meta.map_or(0, |m| m.len())));
            }
        }
    }
    lines.sort();
    lines.join("\n")
}

/// A small tmpfs mounted at `dir` for the life of the guard (lazily unmounted on drop,
/// whatever the test's outcome). `None` — through [`missing`]: a SKIPPED line naming `test`,
/// a failure under CI — when mounting is not permitted (not root, or in a container without
/// CAP_SYS_ADMIN).
pub fn mount_tmpfs(dir: &Path, size: &str, test: &str) -> Option<Tmpfs> {
    std::fs::create_dir_all(dir).expect("mount point");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .stderr(Stdio::piped())
        .output();
    match mounted {
        Ok(o) if o.status.success() => Some(Tmpfs(dir.to_path_buf())),
        other => {
            missing(
                test,
                &format!("permission to mount a {size} tmpfs"),
                &format!("run as root, or with CAP_SYS_ADMIN in a container; mount said {other:?}"),
            );
            None
        }
    }
}

pub struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// 30 steps of a healthy JSON-lines log, one a second from 2023-11-14, loss falling from 5.
pub fn steady_log() -> String {
    (1..=30)
        .map(|s| {
            format!(
                "{{\"step\": {s}, \"time\": {}, \"loss\": {}, \"tokens_per_s\": 5000}}\n",
                1_700_000_000 + s,
                5.0 - 0.01 * s as f64
            )
        })
        .collect()
}
