//! Issue 11: `roger report` end to end. A scripted night (wedge, crash, NaN rollback, a
//! rejected publish) under the real `roger watch` and `roger critic --daemon` with
//! examples/fake_train; the page rendered by a real headless Chromium; hostile input;
//! determinism; the ETA of a steady run; `ledger tail` as sentences.

mod browser;
mod hostile;
mod night;
mod poisoned;

use crate::util::{Env, Run};
use std::path::PathBuf;

/// The headless browser, if one is installed (`chromium-headless-shell`, else `chromium`).
pub(crate) fn browser() -> Option<PathBuf> {
    ["chromium-headless-shell", "chromium", "chromium-browser"]
        .iter()
        .flat_map(|name| {
            std::env::var_os("PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .map(|d| d.join(name))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .find(|p| p.is_file())
}

/// Chromium with no network, no first-run work and a fresh profile; `args` then the page.
pub(crate) fn chromium(
    env: &Env,
    bin: &std::path::Path,
    args: &[&str],
    page: &std::path::Path,
) -> std::process::Output {
    let profile = tempfile::tempdir_in(env.dir.path()).expect("profile dir");
    let mut c = std::process::Command::new(bin);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(args)
    .arg(format!("file://{}", page.display()))
    .stdin(std::process::Stdio::null());
    let child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn chromium");
    // Bounded: a browser that hangs fails the test instead of the suite.
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    let guard = std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            if t0.elapsed() > std::time::Duration::from_secs(120) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    let out = child.wait_with_output().expect("chromium output");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = guard.join();
    out
}

/// `roger report ARGS` in `env`, the clock pinned to `now` (RFC 3339) when given.
pub(crate) fn report(env: &Env, now: Option<&str>, args: &[&str]) -> Run {
    let mut all: Vec<String> = vec!["report".into()];
    if let Some(n) = now {
        all.push("--now".into());
        all.push(n.into());
    }
    all.extend(args.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    env.run(&refs)
}

/// The model as `roger report --json` prints it.
pub(crate) fn model(env: &Env, now: Option<&str>) -> serde_json::Value {
    let r = report(env, now, &["--json"]);
    serde_json::from_str(&r.stdout()).unwrap_or_else(|e| panic!("{e}\n{}", r.report()))
}
