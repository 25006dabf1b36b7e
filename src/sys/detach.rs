//! The one way roger starts a helper that must outlive its caller (the background publisher,
//! the uploader): its own session (setsid, so a training script's process group ending or a
//! closed terminal does not take it along), stdin from /dev/null, stdout and stderr appended to
//! a log, run in a given directory. `spawn`: the caller's process reaps it should it still be
//! alive when the helper ends. `spawn_unwaited`: for a caller that exits at once (`publish
//! --detach`, on a training loop's path): forked and left, not even its exec waited for.

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
    crate::sys::opcount::count(crate::sys::opcount::Op::Spawn);
    crate::sys::opcount::count(crate::sys::opcount::Op::WaitChild);
    let mut child = cmd.spawn()?;
    let pid = child.id();
    // Reap it when it ends, should this process (a watch) still be alive then.
    std::thread::spawn(move || child.wait());
    Ok(pid)
}

/// `spawn` without waiting on the child at all: std's spawn blocks until the child has
/// exec'd (a fork, then the exec of a large binary, which under a busy disk took 0.2 s);
/// this forks and returns. The child runs only async-signal-safe calls on memory prepared
/// before the fork (setsid, dup2, chdir, execv, write, _exit); a failed exec is said in
/// `log`. For a caller that exits soon: a child that ends first stays a zombie until then.
pub fn spawn_unwaited(exe: &Path, args: &[&str], dir: &Path, log: &Path) -> Result<u32> {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let null = std::fs::File::open("/dev/null").context("opening /dev/null")?;
    let c = |b: &[u8]| CString::new(b).context("a NUL byte in the publisher's command line");
    let prog = c(exe.as_os_str().as_bytes())?;
    let mut argv = vec![prog.clone()];
    for a in args {
        argv.push(c(a.as_bytes())?);
    }
    argv.push(c(dir.as_os_str().as_bytes())?);
    let mut argp: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argp.push(std::ptr::null());
    let cdir = c(dir.as_os_str().as_bytes())?;
    let (out_fd, null_fd) = (out.as_raw_fd(), null.as_raw_fd());
    const FAILED: &[u8] = b"roger: the background publisher could not be started (exec failed)\n";
    crate::sys::opcount::count(crate::sys::opcount::Op::Spawn);
    // SAFETY: between fork and exec the child touches only memory prepared above and calls
    // only async-signal-safe functions; the parent does not wait on it.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()).context("fork"),
        // SAFETY: the child: async-signal-safe calls only, on the memory prepared above.
        0 => unsafe {
            libc::setsid();
            if libc::dup2(null_fd, 0) < 0
                || libc::dup2(out_fd, 1) < 0
                || libc::dup2(out_fd, 2) < 0
                || libc::chdir(cdir.as_ptr()) != 0
            {
                libc::_exit(127);
            }
            libc::execv(prog.as_ptr(), argp.as_ptr());
            libc::write(2, FAILED.as_ptr().cast(), FAILED.len());
            libc::_exit(127)
        },
        pid => Ok(pid as u32),
    }
}
