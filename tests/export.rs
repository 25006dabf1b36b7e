//! `[export]` end to end: the real `roger watch` (supervising examples/fake_train) and
//! `roger critic --daemon` write the Prometheus textfile; Debian's `promtool` checks it and
//! the shipped rules, and `prometheus-node-exporter` scrapes it while roger rewrites it.
//! Each test that needs one of the Prometheus tools says so when it is missing and skips (fails
//! under CI, through `util::missing`).

use crate::util::{self, Env};
use crate::watch::{fake_train, poll_until, records, roger, wait_child};
use roger::ledger::Kind;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "s3cr3t-token-4b1d9e";

fn config(env: &Env, watch: &str) {
    std::fs::create_dir_all(env.path("textfiles")).unwrap();
    env.write(
        "roger.toml",
        format!(
            "[run]\nname = \"fake\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ckpt\"\n[gpu]\nsource = \"none\"\n[export]\ntextfile = \"textfiles/roger.prom\"\n[watch]\nhysteresis = 2\ngrace = \"2s\"\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n{watch}\n"
        ),
    );
}

fn watch_args(env: &Env, cues: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--config".into(),
        env.path("roger.toml").display().to_string(),
        "watch".into(),
        "--".into(),
        fake_train().display().to_string(),
        "--log".into(),
        env.path("train.jsonl").display().to_string(),
        "--ckpt-dir".into(),
        env.path("ckpt").display().to_string(),
        "--config".into(),
        env.path("roger.toml").display().to_string(),
        "--pid-file".into(),
        env.path("pids.txt").display().to_string(),
    ];
    v.extend(cues.iter().map(|s| s.to_string()));
    v
}

/// A tool from Debian's prometheus packages, or None (through `util::missing`).
pub(crate) fn tool(name: &str, package: &str, test: &str) -> Option<PathBuf> {
    for dir in ["/usr/bin", "/usr/local/bin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return Some(p);
        }
    }
    crate::util::missing(
        test,
        name,
        &format!("apt-get install --no-install-recommends {package}; .ci/run does"),
    );
    None
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// `name{labels} value` lines of one metric.
fn values(text: &str, name: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect()
}

pub(crate) fn promtool_check_metrics(promtool: &Path, text: &str) {
    let mut c = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- file\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A crash loop under the real watch: the file it leaves says the breaker is open, counts the
/// relaunches the ledger has, passes `promtool check metrics`, and holds neither an
/// environment secret nor the hostname.
#[test]
fn watch_exports_a_crash_loop_and_no_secret_or_hostname() {
    let env = Env::new();
    config(
        &env,
        "interval = \"100ms\"\nstale = \"2s\"\nbreaker_crashes = 2\nbreaker_within = \"20s\"\nallow_from_scratch = true\ndisk_check = true",
    );
    let args = watch_args(
        &env,
        &[
            "--steps",
            "40",
            "--save-every",
            "10",
            "--crash-at",
            "15",
            "--crash-on-resume",
        ],
    );
    let mut c = roger(&env, &args);
    c.env("ROGER_TEST_API_TOKEN", SECRET)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let mut child = c.spawn().unwrap();
    let st = wait_child(&mut child, Duration::from_secs(90));
    let err = env.read("watch.err");
    assert_eq!(st.code(), Some(75), "{err}");
    let prom = env.read("textfiles/roger.prom");
    let recs = records(&env);
    let relaunches = recs.iter().filter(|r| r.kind == Kind::Relaunch).count();
    assert!(relaunches >= 2, "{err}");
    assert_eq!(
        values(&prom, "roger_relaunches_total"),
        vec![relaunches as f64],
        "{prom}"
    );
    assert_eq!(values(&prom, "roger_breaker_open"), vec![1.0], "{prom}");
    assert!(
        prom.contains("roger_run_state{run=\"fake\",source=\"watch\",state=\"exited\"} 1"),
        "{prom}"
    );
    assert!(!values(&prom, "roger_step").is_empty(), "{prom}");
    let ledger = env.read("roger-ledger.jsonl");
    assert!(!prom.contains(SECRET) && !ledger.contains(SECRET));
    let host = hostname();
    if host.len() >= 4 {
        assert!(!prom.contains(&host), "hostname {host} in\n{prom}");
        assert!(!ledger.contains(&host), "hostname {host} in the ledger");
    }
    // Nothing else (no staging file) is left in the collector's directory.
    let names: Vec<String> = std::fs::read_dir(env.path("textfiles"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["roger.prom".to_string()]);
    if let Some(promtool) = tool(
        "promtool",
        "prometheus",
        "watch_exports_a_crash_loop_and_no_secret_or_hostname",
    ) {
        promtool_check_metrics(&promtool, &prom);
    }
}

/// `critic --daemon` writes its own file beside the watch's, with the checks of its verdict.
#[test]
fn critic_daemon_exports_its_verdict_per_check() {
    let env = Env::new();
    config(&env, "stale = \"2s\"");
    env.write("train.jsonl", crate::util::steady_log());
    let mut c = env.cmd(&["critic", "--daemon", "--interval", "200ms"]);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut daemon = c.spawn().unwrap();
    let path = env.path("textfiles/roger-critic.prom");
    poll_until("the critic's textfile", Duration::from_secs(60), || {
        std::fs::read_to_string(&path).is_ok_and(|t| t.contains("roger_check_status"))
    });
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    wait_child(&mut daemon, Duration::from_secs(30));
    let prom = std::fs::read_to_string(&path).unwrap();
    let verdict = records(&env)
        .into_iter()
        .rev()
        .find(|r| r.kind == Kind::Verdict)
        .expect("a verdict");
    for c in verdict.get("checks").unwrap().as_array().unwrap() {
        let line = format!(
            "roger_check_status{{run=\"fake\",source=\"critic\",check=\"{}\"}}",
            c["check"].as_str().unwrap()
        );
        assert!(prom.contains(&line), "{line} missing\n{prom}");
    }
    assert_eq!(values(&prom, "roger_step"), vec![30.0], "{prom}");
    assert_eq!(
        values(&prom, "roger_tokens_per_second"),
        vec![5000.0],
        "{prom}"
    );
    assert!(!env.path("textfiles/roger.prom").exists());
    if let Some(promtool) = tool(
        "promtool",
        "prometheus",
        "critic_daemon_exports_its_verdict_per_check",
    ) {
        promtool_check_metrics(&promtool, &prom);
    }
}

#[test]
fn shipped_alert_rules_pass_promtool_check_and_unit_tests() {
    let Some(promtool) = tool(
        "promtool",
        "prometheus",
        "shipped_alert_rules_pass_promtool_check_and_unit_tests",
    ) else {
        return;
    };
    let dir = util::repo_root().join("examples/prometheus");
    for args in [
        vec!["check", "rules", "roger.rules.yml"],
        vec!["test", "rules", "roger.rules.test.yml"],
    ] {
        let out = Command::new(&promtool)
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every alert in the rules file has a unit test that expects it to fire.
    let rules = std::fs::read_to_string(dir.join("roger.rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("roger.rules.test.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 6, "{alerts:?}");
    for a in alerts {
        assert!(
            tests.contains(&format!("alertname: {a}\n")),
            "no promtool test fires {a}"
        );
    }
}

#[test]
fn alertmanager_example_passes_amtool() {
    let Some(amtool) = tool(
        "amtool",
        "prometheus-alertmanager",
        "alertmanager_example_passes_amtool",
    ) else {
        return;
    };
    let file = util::repo_root().join("examples/prometheus/alertmanager.yml");
    let out = Command::new(amtool)
        .args(["check-config", &file.display().to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Kills the child when dropped, so a failing test leaves no server behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET /metrics over plain HTTP/1.0 (the connection closes after the body).
fn scrape(port: u16) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}

/// One scrape's roger series, checked line by line: `name{labels} value`, a HELP and TYPE for
/// each family, every value a number. Returns the tick count the file carried.
fn check_scrape(body: &str) -> Result<f64, String> {
    let (head, text) = body.split_once("\r\n\r\n").ok_or("no HTTP header end")?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(format!("status line {:?}", head.lines().next()));
    }
    let errors = values(text, "node_textfile_scrape_error");
    if errors != vec![0.0] {
        return Err(format!("node_textfile_scrape_error {errors:?}"));
    }
    let mut ticks = None;
    for l in text.lines().filter(|l| l.starts_with("roger_")) {
        let (series, v) = l.rsplit_once(' ').ok_or(format!("no value: {l}"))?;
        let v: f64 = v.parse().map_err(|_| format!("bad value: {l}"))?;
        let name = series.split('{').next().unwrap();
        if !series.ends_with('}') || !text.contains(&format!("# TYPE {name} ")) {
            return Err(format!("malformed or untyped: {l}"));
        }
        if name == "roger_ticks_total" {
            ticks = Some(v);
        }
    }
    ticks.ok_or_else(|| "no roger_ticks_total in the scrape".to_string())
}

/// node_exporter's textfile collector, scraped in a loop while the real watch rewrites the
/// file every 5 ms: every scrape parses, carries roger's series, and reports no textfile
/// error, over thousands of rewrites.
#[test]
fn node_exporter_scrapes_cleanly_while_roger_rewrites_the_file() {
    const TEST: &str = "node_exporter_scrapes_cleanly_while_roger_rewrites_the_file";
    let Some(exporter) = tool("prometheus-node-exporter", "prometheus-node-exporter", TEST) else {
        return;
    };
    let env = Env::new();
    config(&env, "interval = \"5ms\"\nstale = \"60s\"");
    let port = util::s3::free_port();
    let _ne = KillOnDrop(
        Command::new(exporter)
            .args([
                &format!("--web.listen-address=127.0.0.1:{port}"),
                "--collector.disable-defaults",
                "--collector.textfile",
                &format!(
                    "--collector.textfile.directory={}",
                    env.path("textfiles").display()
                ),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(env.path("node_exporter.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let args = watch_args(&env, &["--steps", "100000", "--step-ms", "50"]);
    let mut c = roger(&env, &args);
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let mut watch = KillOnDrop(c.spawn().unwrap());
    poll_until("the first textfile", Duration::from_secs(60), || {
        env.path("textfiles/roger.prom").exists()
    });
    poll_until("node_exporter to answer", Duration::from_secs(60), || {
        scrape(port).is_ok()
    });
    let target = 3000.0;
    let t0 = Instant::now();
    let (mut scrapes, mut first, mut last) = (0u64, None, 0.0);
    let outcome = loop {
        let body = match scrape(port) {
            Ok(b) => b,
            Err(e) => break Err(format!("scrape {}: {e}", scrapes + 1)),
        };
        match check_scrape(&body) {
            Ok(t) => {
                scrapes += 1;
                first.get_or_insert(t);
                last = t;
            }
            Err(e) => break Err(format!("scrape {}: {e}\n{body}", scrapes + 1)),
        }
        if last - first.unwrap_or(0.0) >= target {
            break Ok(());
        }
        if t0.elapsed() > Duration::from_secs(300) {
            break Err(format!("only {last} ticks in 300 s"));
        }
    };
    let _ = Command::new("kill")
        .args(["-TERM", &watch.0.id().to_string()])
        .status();
    wait_child(&mut watch.0, Duration::from_secs(30));
    let rewrites = last - first.unwrap_or(0.0);
    eprintln!("{TEST}: {scrapes} scrapes, all clean, across {rewrites} rewrites of roger.prom");
    if let Err(e) = outcome {
        panic!(
            "{e}\n--- watch stderr\n{}\n--- node_exporter stderr\n{}",
            env.read("watch.err"),
            env.read("node_exporter.err")
        );
    }
    assert!(scrapes >= 100, "{scrapes} scrapes");
}
