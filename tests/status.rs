//! `roger status` (one screen from the report model, judging exit code, --json, a stale
//! roger), colour only where asked for (NO_COLOR, CLICOLOR_FORCE, --color) and no progress
//! bar when stderr is not a terminal.

use crate::util::{roger_bin, Env};

const CONFIG: &str = "[run]\nname = \"glance\"\nlog = \"train.jsonl\"\n[metrics]\ntime = \"time\"\n[schedule]\nkind = \"constant\"\npeak_lr = 1e-3\nwarmup_steps = 0\ntotal_steps = 1000\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [0.1, 20.0]\nstale = \"1h\"\n[disk]\nwarn_free = \"1KiB\"\nfail_free = \"1KiB\"\n";

/// A healthy log whose newest step was logged a few seconds before `now`.
fn run_dir(now: i64) -> Env {
    let env = Env::new();
    env.write("roger.toml", CONFIG);
    let mut log = String::new();
    for i in 0..100i64 {
        log.push_str(&format!(
            "{{\"step\": {}, \"loss\": {:.3}, \"lr\": 1e-3, \"time\": {}}}\n",
            i * 5,
            5.0 - i as f64 * 0.01,
            now - 500 + i * 5
        ));
    }
    env.write("train.jsonl", log);
    env
}

fn at(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[test]
fn status_is_one_screen_with_the_verdict_worst_check_first() {
    let now = chrono::Utc::now().timestamp();
    let env = run_dir(now);
    env.run(&["critic", "--once", "--now", &at(now)]).expect(0);
    let run = env.run(&["status", "--now", &at(now + 30)]).expect(0);
    let out = run.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() <= 23, "{out}");
    assert!(lines.iter().all(|l| l.chars().count() <= 80), "{out}");
    assert!(lines[0].starts_with("roger status · glance"), "{out}");
    assert!(lines[1].starts_with("OK: "), "{out}");
    assert!(
        out.contains("step 495 of 1000 (49.5%) · phase all"),
        "{out}"
    );
    assert!(out.contains("ETA  "), "{out}");
    assert!(out.contains("verdict #1 PASS at step 495"), "{out}");
    assert!(out.contains("checkpoint  none published"), "{out}");
    assert!(out.contains("roger       last looked"), "{out}");
    assert!(!out.contains('\u{1b}'), "no colour into a pipe: {out:?}");

    let json = env
        .run(&["status", "--json", "--now", &at(now + 30)])
        .expect(0);
    let v: serde_json::Value = serde_json::from_str(&json.stdout()).unwrap();
    assert_eq!(v["headline"]["state"], "OK");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["roger_stale"], false);
    assert!(v["checks"][0]["check"].as_str().is_some(), "{v}");

    // The run's newest step is old and roger has not looked for two hours: both are said.
    let late = env.run(&["status", "--now", &at(now + 7200)]);
    assert!(late.code() >= 1, "{}", late.report());
    assert!(
        late.stdout().contains("is `roger watch` or"),
        "{}",
        late.report()
    );

    // A failing check comes first in the check list; the model calls a run that still
    // trains with a failing verdict ATTENTION (1): STOPPED (2) is for a run that stopped.
    env.write(
        "roger.toml",
        CONFIG.replace("peak_lr = 1e-3", "peak_lr = 3e-3"),
    );
    env.run(&["critic", "--once", "--now", &at(now)]).expect(2);
    let bad = env.run(&["status", "--now", &at(now + 30)]);
    assert_eq!(bad.code(), 1, "{}", bad.report());
    assert!(
        bad.stdout()
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("ATTENTION: "),
        "{}",
        bad.report()
    );
    let out = bad.stdout();
    let verdict = out
        .lines()
        .position(|l| l.starts_with("verdict #2 FAIL"))
        .unwrap();
    assert!(
        out.lines()
            .nth(verdict + 1)
            .unwrap()
            .contains("fail     lr"),
        "{out}"
    );
}

#[test]
fn status_without_a_config_or_with_a_bad_flag_cannot_judge() {
    let env = Env::new();
    env.run(&["status"]).expect(3).stderr_has("no config");
    env.run(&["status", "--interval", "1s"]).expect(3);
}

fn critic(env: &Env, extra: &[&str], vars: &[(&str, &str)]) -> String {
    let mut args = vec!["critic", "--once"];
    args.extend_from_slice(extra);
    let mut c = env.cmd(&args);
    c.env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("CLICOLOR");
    for (k, v) in vars {
        c.env(k, v);
    }
    env.run_cmd(c, &args).stdout()
}

#[test]
fn colour_only_on_request_honouring_no_color_and_clicolor_force() {
    let now = chrono::Utc::now().timestamp();
    let env = run_dir(now);
    let esc = |s: &str| s.contains("\u{1b}[");
    assert!(!esc(&critic(&env, &[], &[])), "not a terminal: no colour");
    assert!(esc(&critic(&env, &["--color", "always"], &[])));
    assert!(
        esc(&critic(&env, &["--color", "always"], &[("NO_COLOR", "1")])),
        "the flag wins, as in ripgrep"
    );
    assert!(!esc(&critic(
        &env,
        &["--color", "never"],
        &[("CLICOLOR_FORCE", "1")]
    )));
    assert!(esc(&critic(&env, &[], &[("CLICOLOR_FORCE", "1")])));
    assert!(!esc(&critic(
        &env,
        &[],
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]
    )));
    let painted = critic(&env, &["--color", "always"], &[]);
    assert!(painted.contains("PASS"), "{painted}");
}

#[test]
fn no_progress_bar_when_stderr_is_not_a_terminal() {
    let now = chrono::Utc::now().timestamp();
    let env = run_dir(now);
    let mut c = env.cmd(&["critic", "--once"]);
    // Every log counts as big: the bar would be up if stderr were a terminal.
    c.env("ROGER_PROGRESS_MIN_BYTES", "1");
    let run = env.run_cmd(c, &["critic", "--once"]).expect(0);
    assert_eq!(run.stderr(), "", "{}", run.report());
}

#[test]
fn status_watch_redraws_until_stopped() {
    use std::io::{BufRead, BufReader};
    let now = chrono::Utc::now().timestamp();
    let env = run_dir(now);
    env.run(&["critic", "--once", "--now", &at(now)]).expect(0);
    let args = [
        "status",
        "--watch",
        "--interval",
        "100ms",
        "--now",
        &at(now + 30),
    ];
    let mut child = env
        .cmd(&args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut screens = 0;
    let mut saw_clear = false;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while screens < 3 && std::time::Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(1)) {
            saw_clear |= line.contains('\u{1b}');
            if line.starts_with("roger status · glance") {
                screens += 1;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(screens >= 3, "only {screens} screens");
    assert!(!saw_clear, "no clear-screen codes into a pipe");
}

/// On a terminal (a pty from util-linux's `script`), the one progress bar is drawn for a
/// publish (copy, then verify from disk) and for a big log's first read.
#[test]
fn progress_bar_is_drawn_on_a_terminal_for_a_publish_and_a_log_read() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        crate::util::missing(
            "progress_bar_is_drawn_on_a_terminal_for_a_publish_and_a_log_read",
            "`script` (to make a pty)",
            "apt-get install bsdutils (util-linux)",
        );
        return;
    }
    let now = chrono::Utc::now().timestamp();
    let env = run_dir(now);
    // 96 MiB: a publish long enough for the bar's first draws, even on a fast disk.
    let big: Vec<u8> = (0..96u32 << 20).map(|i| (i % 251) as u8).collect();
    env.write("ckpt-500.dat", &big);
    let bin = roger_bin();
    let in_pty = |cmdline: String| {
        let out = std::process::Command::new("script")
            .args(["-qefc", &cmdline, "/dev/null"])
            .current_dir(env.path(""))
            .env_remove("ROGER_CONFIG")
            .env_remove("NO_COLOR")
            .env("ROGER_PROGRESS_MIN_BYTES", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("script");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let published = in_pty(format!(
        "{} publish ckpt-500.dat --to ck --step 500",
        bin.display()
    ));
    assert!(
        published.contains("publish: copy") || published.contains("publish: verify"),
        "no publish bar on a terminal: {published}"
    );
    assert!(env.path("ck/ckpt-500.dat").exists(), "{published}");
    let judged = in_pty(format!("{} critic --once", bin.display()));
    assert!(
        judged.contains("reading"),
        "no log bar on a terminal: {judged}"
    );
    // Under -q nothing but errors: no bar either.
    let quiet = in_pty(format!("{} -q critic --once", bin.display()));
    assert!(!quiet.contains("reading"), "{quiet}");
}

/// A publish queued with `--detach` (its background publisher held off by
/// ROGER_DETACH_NO_PUBLISHER) shows in `roger status` and in the report's --text and --json:
/// how many, how many bytes, how old the oldest is. Nothing queued: nothing said.
#[test]
fn status_and_report_show_queued_publishes() {
    let now = chrono::Utc::now().timestamp();
    let env = run_dir(now);
    env.write(
        "roger.toml",
        format!("{CONFIG}[publish]\nkeep_last = 2\n").replace(
            "log = \"train.jsonl\"\n",
            "log = \"train.jsonl\"\ncheckpoint_dir = \"ck\"\n",
        ),
    );
    env.run(&["critic", "--once", "--now", &at(now)]).expect(0);
    let quiet = env.run(&["status", "--now", &at(now + 30)]).expect(0);
    assert!(!quiet.stdout().contains("publish "), "{}", quiet.report());

    let ckpt = crate::publish::torch_zip(3 * 1024 * 1024, 7);
    let size = ckpt.len();
    env.write("ckpt-1.pt", ckpt);
    let mut c = env.cmd(&["publish", "--detach", "ckpt-1.pt"]);
    c.env("ROGER_DETACH_NO_PUBLISHER", "1");
    env.run_cmd(c, &["publish", "--detach", "ckpt-1.pt"])
        .expect(0);
    assert!(!env.path("ck/ckpt-1.pt").exists(), "still queued");

    // The queue's time is the real clock: judge an hour later.
    let later = at(chrono::Utc::now().timestamp() + 3600);
    let run = env.run(&["status", "--now", &later]);
    let out = run.stdout();
    let line = out
        .lines()
        .find(|l| l.starts_with("publish     "))
        .unwrap_or_else(|| panic!("no publish line\n{}", run.report()));
    assert!(line.contains("1 queued publish (3.0 MiB)"), "{line}");
    assert!(
        line.contains("oldest queued 1h 00m ago") || line.contains("oldest queued 59m"),
        "{line}"
    );
    assert!(
        out.lines().count() <= 23 && line.chars().count() <= 80,
        "{out}"
    );

    let json = env.run(&["status", "--json", "--now", &later]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout()).unwrap();
    let q = &v["headline"]["queued_publishes"];
    assert_eq!(q["count"], 1, "{v:#}");
    assert_eq!(q["bytes"], size, "{v:#}");
    let age = q["oldest_age_s"].as_f64().unwrap();
    assert!((3500.0..3700.0).contains(&age), "{age}");

    let text = env.run(&["report", "--text", "--now", &later]);
    assert!(
        text.stdout()
            .lines()
            .any(|l| l.starts_with("publish: 1 queued publish (3.0 MiB), oldest queued")),
        "{}",
        text.report()
    );
    let rj = env.run(&["report", "--json", "--now", &later]);
    let v: serde_json::Value = serde_json::from_str(&rj.stdout()).unwrap();
    assert_eq!(v["headline"]["queued_publishes"]["count"], 1, "{v:#}");
    let page = env.run(&["report", "--out", "night.html", "--now", &later]);
    assert!(page.code() <= 2, "{}", page.report());
    assert!(env.read("night.html").contains("Queued publishes"));
}
