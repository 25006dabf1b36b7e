//! The proof trial: run the user's command on the quarantined item (`{path}` substituted in
//! every argument, and `ROGER_QUARANTINE_PATH` in the environment), in its own process
//! group, with stdout and stderr merged into one pipe of which only the tail is kept
//! (constant memory, whatever the trial prints). A timeout kills the group, after the
//! caller's hook has written why.

use anyhow::{bail, Context, Result};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bytes of output kept for the record.
pub const TAIL_BYTES: usize = 4096;

#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_s: f64,
    pub output_tail: String,
}

/// `{path}` replaced in each argument.
pub fn substitute(argv: &[String], path: &Path) -> Vec<String> {
    let p = path.to_string_lossy();
    argv.iter().map(|a| a.replace("{path}", &p)).collect()
}

/// Keep the last `cap` bytes of everything pushed.
struct Tail {
    buf: Vec<u8>,
    cap: usize,
}

impl Tail {
    fn push(&mut self, data: &[u8]) {
        if data.len() >= self.cap {
            self.buf.clear();
            self.buf.extend_from_slice(&data[data.len() - self.cap..]);
            return;
        }
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend_from_slice(data);
    }

    fn text(&self) -> String {
        let s = String::from_utf8_lossy(&self.buf);
        // Drop a partial first character left by the cut.
        s.trim_start_matches('\u{fffd}').to_string()
    }
}

/// Run the trial. `on_timeout(pgid)` runs before the group is killed (ledger record first).
pub fn run(
    argv: &[String],
    item_path: &Path,
    timeout: Option<Duration>,
    on_timeout: &mut dyn FnMut(u32) -> Result<()>,
) -> Result<Outcome> {
    let argv = substitute(argv, item_path);
    let Some((prog, args)) = argv.split_first() else {
        bail!("no trial command: give it after `--`, e.g. -- python -c 'import torch; torch.load(\"{{path}}\")'");
    };
    let (reader, writer) = std::io::pipe().context("creating the trial's output pipe")?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env("ROGER_QUARANTINE_PATH", item_path)
        .stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting the trial `{prog}`"))?;
    // Our copies of the write end must go, or the reader never sees EOF.
    drop(cmd);
    let pid = child.id();
    let reader_thread = std::thread::spawn(move || {
        let mut reader = reader;
        let mut tail = Tail {
            buf: Vec::with_capacity(TAIL_BYTES),
            cap: TAIL_BYTES,
        };
        let mut buf = [0u8; 8192];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => tail.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        tail.text()
    });
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().context("waiting for the trial")? {
            break st;
        }
        if let Some(limit) = timeout {
            if !timed_out && start.elapsed() >= limit {
                timed_out = true;
                on_timeout(pid)?;
                let pg = nix::unistd::Pid::from_raw(pid as i32);
                let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // A grandchild that outlives the trial keeps the pipe open: do not wait on it forever.
    if !timed_out {
        let pg = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGKILL);
    }
    let output_tail = reader_thread.join().unwrap_or_default();
    Ok(Outcome {
        exit_code: status.code(),
        signal: status.signal(),
        timed_out,
        duration_s: start.elapsed().as_secs_f64(),
        output_tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    fn never(_: u32) -> Result<()> {
        panic!("no timeout expected")
    }

    #[test]
    fn substitutes_path_and_env_and_keeps_the_tail() {
        let out = run(
            &sh("echo arg={path}; echo env=$ROGER_QUARANTINE_PATH >&2; exit 3"),
            Path::new("/q/item.pt"),
            None,
            &mut never,
        )
        .unwrap();
        assert_eq!(out.exit_code, Some(3));
        assert!(out.output_tail.contains("arg=/q/item.pt"), "{out:?}");
        assert!(out.output_tail.contains("env=/q/item.pt"), "{out:?}");
    }

    #[test]
    fn big_output_is_cut_to_the_tail() {
        let out = run(
            &sh("i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i+1)); done"),
            Path::new("/x"),
            None,
            &mut never,
        )
        .unwrap();
        assert_eq!(out.exit_code, Some(0));
        assert!(out.output_tail.len() <= TAIL_BYTES);
        assert!(out.output_tail.ends_with("line-2999\n"));
        assert!(!out.output_tail.contains("line-1\n"));
    }

    #[test]
    fn timeout_calls_the_hook_then_kills() {
        let mut hooked = None;
        let out = run(
            &sh("echo started; sleep 30"),
            Path::new("/x"),
            Some(Duration::from_millis(300)),
            &mut |pid| {
                hooked = Some(pid);
                Ok(())
            },
        )
        .unwrap();
        assert!(out.timed_out && hooked.is_some());
        assert_eq!(out.signal, Some(9));
        assert!(out.duration_s < 20.0);
    }

    #[test]
    fn empty_and_missing_commands_are_errors() {
        assert!(run(&[], Path::new("/x"), None, &mut never).is_err());
        let e = run(
            &["/no/such/trial".into()],
            Path::new("/x"),
            None,
            &mut never,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("starting the trial"));
    }
}
