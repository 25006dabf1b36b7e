//! SLURM at the edge: the job's end time (`squeue -h -j JOB -o %e`, else `scontrol show job`)
//! and `scontrol requeue`. Parsing their output is pure; running them is bounded by a timeout
//! so a hung slurmctld never stalls the watch.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one squeue/scontrol call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// squeue's `%e` ("2026-12-03T16:40:12", local time) -> the naive time; None for "N/A",
/// "Unknown", "NONE" (no end time: no limit).
pub fn parse_end(text: &str) -> Option<chrono::NaiveDateTime> {
    let t = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S").ok()
}

/// `EndTime=...` out of `scontrol show job` output.
pub fn scontrol_end(text: &str) -> Option<chrono::NaiveDateTime> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("EndTime="))
        .and_then(parse_end)
}

/// SLURM prints local time: to unix seconds.
fn local_to_unix(t: chrono::NaiveDateTime) -> Option<f64> {
    use chrono::TimeZone;
    chrono::Local
        .from_local_datetime(&t)
        .earliest()
        .map(|d| d.timestamp() as f64)
}

/// Run a command, return its stdout, within the timeout. `shielded`: the command ignores
/// SIGTERM — `scontrol requeue` run from inside the job makes SLURM signal every process of
/// the job, scontrol included, often before it has read slurmctld's answer.
fn call_with(argv: &[&str], shielded: bool) -> Result<String, String> {
    let mut cmd = Command::new(argv[0]);
    if shielded {
        use std::os::unix::process::CommandExt;
        // SAFETY: signal(2) is async-signal-safe; nothing else runs between fork and exec.
        // An ignored signal stays ignored across exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                Ok(())
            });
        }
    }
    let mut child = cmd
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", argv[0]))?;
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t0.elapsed() < CALL_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} took over {CALL_TIMEOUT:?}", argv.join(" ")));
            }
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{} failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn call(argv: &[&str]) -> Result<String, String> {
    call_with(argv, false)
}

/// The job's end time in unix seconds; Ok(None) when it has none.
pub fn end_time(job: &str) -> Result<Option<f64>, String> {
    let end = match call(&["squeue", "-h", "-j", job, "-o", "%e"]) {
        Ok(out) if !out.trim().is_empty() => parse_end(&out),
        squeue => {
            let out = call(&["scontrol", "show", "job", job]).map_err(|e| match squeue {
                Err(s) => format!("{s}; {e}"),
                Ok(_) => e,
            })?;
            scontrol_end(&out)
        }
    };
    Ok(end.and_then(local_to_unix))
}

/// `scontrol requeue JOB`.
pub fn requeue(job: &str) -> Result<(), String> {
    call_with(&["scontrol", "requeue", job], true).map(|_| ())
}

/// Whether `name` is an executable on PATH (inside a pyxis/enroot container scontrol is not).
pub fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| is_exec(&d.join(name))))
}

fn is_exec(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_times_from_squeue_and_scontrol() {
        let t = parse_end("2026-12-03T16:40:12\n").unwrap();
        assert_eq!(t.to_string(), "2026-12-03 16:40:12");
        for none in ["N/A\n", "Unknown", "", "NONE"] {
            assert!(parse_end(none).is_none(), "{none}");
        }
        let show = "JobId=7 JobName=t\n   RunTime=00:00:10 TimeLimit=00:02:00 TimeMin=N/A\n   SubmitTime=2026-12-03T16:38:00 EligibleTime=2026-12-03T16:38:00\n   StartTime=2026-12-03T16:38:12 EndTime=2026-12-03T16:40:12 Deadline=N/A\n";
        assert_eq!(
            scontrol_end(show).unwrap().to_string(),
            "2026-12-03 16:40:12"
        );
        assert!(scontrol_end("EndTime=Unknown").is_none());
    }

    #[test]
    fn path_lookup_finds_sh_and_not_nonsense() {
        assert!(on_path("sh"));
        assert!(!on_path("roger-no-such-binary-xyz"));
    }
}
