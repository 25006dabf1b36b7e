//! Run an external program with a time limit (nvidia-smi, nvidia-smi.exe through WSL
//! interop, dmesg, journalctl): a wedged driver must not wedge roger. Output is captured by
//! reader threads so a chatty child cannot block on a full pipe.

use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Run `program args...`, killing it after `limit`. Spawn failure and timeout are errors.
pub fn run(program: &Path, args: &[&str], limit: Duration) -> Result<Output> {
    let mut c = Command::new(program);
    c.args(args);
    run_command(c, limit)
}

/// Run a prepared command (its env and args set by the caller), killing it after `limit`.
pub fn run_command(cmd: Command, limit: Duration) -> Result<Output> {
    run_command_observed(cmd, limit, |_| {})
}

/// `run_command`, telling `on_spawn` the child's PID once it runs (to tell it apart from
/// other processes while it works).
pub fn run_command_observed(
    mut cmd: Command,
    limit: Duration,
    on_spawn: impl FnOnce(u32),
) -> Result<Output> {
    let program = std::path::PathBuf::from(cmd.get_program());
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    on_spawn(child.id());
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} did not finish within {:?}; killed it",
                program.display(),
                limit
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&t_err.join().unwrap_or_default()).into_owned();
    Ok(Output {
        code: status.code(),
        stdout,
        stderr,
    })
}

/// The first executable called `name` on PATH.
pub fn which(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_code() {
        let o = run(
            Path::new("sh"),
            &["-c", "echo hi; echo err >&2; exit 3"],
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(o.code, Some(3));
        assert_eq!(o.stdout, "hi\n");
        assert_eq!(o.stderr, "err\n");
    }

    #[test]
    fn kills_on_timeout() {
        let e = run(Path::new("sleep"), &["30"], Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().contains("did not finish"), "{e}");
    }

    #[test]
    fn missing_program_is_an_error() {
        assert!(run(Path::new("/nonexistent/x"), &[], Duration::from_secs(1)).is_err());
        assert!(which("sh").is_some());
        assert!(which("no-such-program-roger").is_none());
    }
}
