//! The one way roger starts a helper that must outlive its caller (the background publisher,
//! the uploader): its own session (setsid, so a training script's process group ending or a
//! closed terminal does not take it along), stdin from /dev/null, stdout and stderr appended to
//! a log, run in a given directory. The caller's process reaps it should it still be alive
//! when the helper ends.

use anyhow::{Context, Result};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Start `exe ARGS DIR` in `dir` (the directory is also its last argument), in its own
/// session, output appended to `log`. Returns its pid.
pub fn spawn(exe: &Path, args: &[&str], dir: &Path, log: &Path) -> Result<u32> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .arg(dir)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    // std's spawn blocks until the child has exec'd (or failed to): a wait on the child.
    crate::publish::failpoint::count(crate::publish::failpoint::Op::Spawn);
    crate::publish::failpoint::count(crate::publish::failpoint::Op::WaitChild);
    let mut child = cmd.spawn()?;
    let pid = child.id();
    // Reap it when it ends, should this process (a watch) still be alive then.
    std::thread::spawn(move || child.wait());
    Ok(pid)
}
