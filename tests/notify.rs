//! `[notify]` end to end: the real `roger watch` supervising examples/fake_train, pages going
//! to a loopback HTTP receiver (tests/util/receiver.rs) and a command hook. Assertions count
//! deliveries and ledger records, never timings.

use crate::util::receiver::{Receiver, Request};
use crate::util::Env;
use crate::watch::{fake_train, poll_until, records, roger, wait_child};
use roger::ledger::{Kind, Record};
use std::process::Stdio;
use std::time::Duration;

const SECRET: &str = "s3cr3t-notify-token-77a1";

fn config(env: &Env, notify: &str, watch: &str) {
    env.write(
        "roger.toml",
        format!(
            "[run]\nname = \"fake\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ckpt\"\n[publish]\nkeep_last = 20\n[gpu]\nsource = \"none\"\n[watch]\ninterval = \"100ms\"\nhysteresis = 2\ngrace = \"2s\"\nstale = \"2s\"\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n{watch}\n[notify]\n{notify}\n"
        ),
    );
}

fn webhook(r: &Receiver) -> String {
    format!(
        "[[notify.webhook]]\npreset = \"generic\"\nurl = \"{}\"\n",
        r.url("/hook")
    )
}

fn watch_args(env: &Env, pre: &[&str], cues: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--config".into(),
        env.path("roger.toml").display().to_string(),
        "watch".into(),
    ];
    v.extend(pre.iter().map(|s| s.to_string()));
    v.push("--".into());
    v.push(fake_train().display().to_string());
    for (k, p) in [
        ("--log", "train.jsonl"),
        ("--ckpt-dir", "ckpt"),
        ("--config", "roger.toml"),
        ("--pid-file", "pids.txt"),
    ] {
        v.push(k.into());
        v.push(env.path(p).display().to_string());
    }
    v.extend(cues.iter().map(|s| s.to_string()));
    v
}

/// Run the watch to its end with the secret in its environment; (exit code, stderr).
fn watch_to_end(env: &Env, args: &[String]) -> (i32, String) {
    let mut c = roger(env, args);
    c.env("ROGER_TEST_API_TOKEN", SECRET)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let mut child = c.spawn().unwrap();
    let st = wait_child(&mut child, Duration::from_secs(120));
    (st.code().unwrap_or(-1), env.read("watch.err"))
}

fn pages(reqs: &[Request]) -> Vec<&Request> {
    reqs.iter()
        .filter(|r| r.json()["level"] == "page")
        .collect()
}

fn notes<'a>(recs: &'a [Record], event: &str) -> Vec<&'a Record> {
    recs.iter()
        .filter(|r| r.kind == Kind::Note && r.str_field("event") == Some(event))
        .collect()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A crash loop: exactly one page (the breaker), on the webhook and on the command hook, each
/// send a ledger note; no environment secret and no hostname in any payload, the outbox or the
/// ledger.
#[test]
fn a_crash_loop_pages_once_at_the_breaker_without_secrets_or_hostname() {
    let env = Env::new();
    let r = Receiver::start(&[200]);
    let hook = format!(
        "{}[[notify.command]]\nargv = [\"sh\", \"-c\", \"cat >> {}\"]\n",
        webhook(&r),
        env.path("hook.jsonl").display()
    );
    config(
        &env,
        &hook,
        "breaker_crashes = 2\nbreaker_within = \"20s\"\nallow_from_scratch = true",
    );
    let args = watch_args(
        &env,
        &[],
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
    let (code, err) = watch_to_end(&env, &args);
    assert_eq!(code, 75, "{err}");
    let reqs = r.requests();
    let p = pages(&reqs);
    assert_eq!(p.len(), 1, "one page, got {reqs:#?}\n{err}");
    let page = p[0].json();
    assert_eq!(page["kind"], "breaker", "{page}");
    assert_eq!(page["run"], "fake");
    let key = page["idempotency_key"].as_str().unwrap();
    assert!(
        p[0].head.contains(&format!("Idempotency-Key: {key}")),
        "{}",
        p[0].head
    );
    let hook_lines: Vec<serde_json::Value> = env
        .read("hook.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(hook_lines.len(), 1, "{hook_lines:?}");
    assert_eq!(hook_lines[0]["kind"], "breaker");
    let recs = records(&env);
    assert_eq!(notes(&recs, "notify_sent").len(), 2, "{err}");
    assert!(notes(&recs, "notify_failed").is_empty());
    assert!(err.contains("paging on webhook"), "{err}");
    let host = hostname();
    let ledger = env.read("roger-ledger.jsonl");
    let outbox = env.read("roger-outbox.jsonl");
    let everything = reqs
        .iter()
        .map(|q| format!("{}{}", q.head, q.body))
        .collect::<String>()
        + &env.read("hook.jsonl")
        + &outbox
        + &ledger;
    assert!(!everything.contains(SECRET), "the secret leaked");
    if host.len() >= 4 {
        assert!(!everything.contains(&host), "the hostname {host} leaked");
    }
}

/// A receiver that answers 503 then 200 gets the page exactly once delivered: the failure is a
/// ledger note, the retry waits its backoff and carries the same idempotency key.
#[test]
fn a_503_then_200_gives_exactly_one_delivery() {
    let env = Env::new();
    let r = Receiver::start(&[503, 200]);
    // One crash and a long resumed run: the relaunch is made a page so the retry has time.
    config(
        &env,
        &format!("[notify.route]\nrelaunch = \"page\"\n{}", webhook(&r)),
        "allow_from_scratch = true",
    );
    let args = watch_args(
        &env,
        &[],
        &[
            "--steps",
            "600",
            "--step-ms",
            "50",
            "--save-every",
            "10",
            "--crash-at",
            "15",
        ],
    );
    let (code, err) = watch_to_end(&env, &args);
    assert_eq!(code, 0, "{err}");
    let reqs = r.requests();
    let p = pages(&reqs);
    assert_eq!(p.len(), 2, "{reqs:#?}\n{err}");
    assert_eq!((p[0].status, p[1].status), (503, 200));
    assert_eq!(
        p[0].json()["idempotency_key"],
        p[1].json()["idempotency_key"]
    );
    assert_eq!(p.iter().filter(|q| q.status == 200).count(), 1);
    let recs = records(&env);
    let failed = notes(&recs, "notify_failed");
    let sent = notes(&recs, "notify_sent");
    assert_eq!((failed.len(), sent.len()), (1, 1), "{err}");
    assert_eq!(failed[0].str_field("error"), Some("HTTP 503"));
    assert_eq!(sent[0].get("attempt").and_then(|v| v.as_u64()), Some(2));
}

/// A wedge that roger kills and relaunches, after which the run finishes: nothing pages, the
/// kill and the relaunch wait for the digest.
#[test]
fn a_recovered_wedge_pages_nobody() {
    let env = Env::new();
    let r = Receiver::start(&[200]);
    config(&env, &webhook(&r), "allow_from_scratch = true");
    let args = watch_args(
        &env,
        &[],
        &["--steps", "40", "--save-every", "10", "--wedge-at", "12"],
    );
    let (code, err) = watch_to_end(&env, &args);
    assert_eq!(code, 0, "{err}");
    let recs = records(&env);
    assert!(
        recs.iter().any(|r| r.kind == Kind::Relaunch),
        "the wedge was relaunched\n{err}"
    );
    assert!(r.requests().is_empty(), "{:#?}", r.requests());
    assert!(err.contains("waits for the digest"), "{err}");
}

/// The dead-man ping: none while roger is blind (the log cannot be read), several while it sees
/// the run, and none after `kill -9` of roger (at most one already in flight).
#[test]
fn the_dead_man_ping_needs_sight_and_stops_when_roger_dies() {
    let env = Env::new();
    let r = Receiver::start(&[200]);
    // Blind: attached to a live process whose log never appears.
    let mut sleeper = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    config(&env, &format!("deadman_url = \"{}\"", r.url("/ping")), "");
    let args: Vec<String> = [
        "--config",
        &env.path("roger.toml").display().to_string(),
        "watch",
        "--json",
        "--pid",
        &sleeper.id().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut c = roger(&env, &args);
    c.stdout(std::fs::File::create(env.path("blind.out")).unwrap())
        .stderr(Stdio::null());
    let mut blind = c.spawn().unwrap();
    poll_until(
        "the blind watch to say unknown",
        Duration::from_secs(60),
        || env.read("blind.out").contains("unknown"),
    );
    // Ten more intervals of blindness.
    std::thread::sleep(Duration::from_secs(1));
    blind.kill().unwrap();
    blind.wait().unwrap();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let pings = |r: &Receiver| {
        r.requests()
            .iter()
            .filter(|q| q.path == "/ping" && q.method == "GET")
            .count()
    };
    assert_eq!(
        pings(&r),
        0,
        "pinged while blind: {}",
        env.read("blind.out")
    );

    // Sighted: a normal run pings; kill -9 stops the pings.
    let env = Env::new();
    config(&env, &format!("deadman_url = \"{}\"", r.url("/ping")), "");
    let args = watch_args(&env, &[], &["--steps", "2000", "--step-ms", "50"]);
    let mut c = roger(&env, &args);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut w = c.spawn().unwrap();
    poll_until("three pings", Duration::from_secs(60), || pings(&r) >= 3);
    w.kill().unwrap(); // SIGKILL
    w.wait().unwrap();
    let at_death = pings(&r);
    std::thread::sleep(Duration::from_secs(2));
    let after = pings(&r);
    for pid in env
        .read("pids.txt")
        .lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
    {
        // SAFETY: kill(2) with a pid this test's own children wrote.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        after <= at_death + 1,
        "pings went on after roger died: {at_death} -> {after}"
    );
}

fn old_log(env: &Env) {
    env.write("train.jsonl", crate::util::steady_log());
}

/// `roger notify test` tries every channel and says how each went (exit 1: one failed); each
/// result is a ledger note. `roger notify digest` sends `report --text` now.
#[test]
fn notify_test_and_digest_report_each_channel() {
    let env = Env::new();
    let r = Receiver::start(&[200]);
    config(
        &env,
        &format!(
            "deadman_url = \"{}\"\n{}[[notify.command]]\nname = \"mail\"\nargv = [\"sh\", \"-c\", \"cat >/dev/null; echo mailer down >&2; exit 4\"]\n",
            r.url("/ping"),
            webhook(&r)
        ),
        "",
    );
    old_log(&env);
    let run = env.run(&["notify", "test"]).expect(1);
    let out = run.stdout();
    assert!(out.contains("webhook: sent (test)"), "{}", run.report());
    assert!(
        out.contains("mail: failed") && out.contains("mailer down"),
        "{}",
        run.report()
    );
    assert!(
        out.contains("dead-man ping: answered 200"),
        "{}",
        run.report()
    );
    let reqs = r.requests();
    let tests: Vec<_> = reqs
        .iter()
        .filter(|q| q.json()["level"] == "test")
        .collect();
    assert_eq!(tests.len(), 1, "{reqs:#?}");
    let recs = records(&env);
    assert_eq!(notes(&recs, "notify_sent").len(), 1);
    assert_eq!(notes(&recs, "notify_failed").len(), 1);

    let run = env.run(&["notify", "digest"]).expect(1);
    let digests: Vec<_> = r
        .requests()
        .into_iter()
        .filter(|q| q.json()["level"] == "digest")
        .collect();
    assert_eq!(digests.len(), 1, "{}", run.report());
    let text = digests[0].json()["text"].as_str().unwrap().to_string();
    assert!(text.starts_with("roger · fake"), "{text}");

    let bare = Env::new();
    bare.write("roger.toml", "[run]\nname = \"x\"\nlog = \"l.jsonl\"\n");
    bare.run(&["notify", "test"])
        .stderr_has("no [notify] channel");
}

/// `critic --daemon` routes its own verdicts (here made pages) through the same notifier: one
/// page per status however many ticks repeat it, and the dead-man ping while it reads the log.
#[test]
fn critic_daemon_pages_its_verdicts_once_and_pings() {
    let env = Env::new();
    let r = Receiver::start(&[200]);
    config(
        &env,
        &format!(
            "deadman_url = \"{}\"\n[notify.route]\nverdict = \"page\"\n{}",
            r.url("/ping"),
            webhook(&r)
        ),
        "",
    );
    old_log(&env);
    let mut c = env.cmd(&["critic", "--daemon", "--interval", "200ms", "--heartbeat"]);
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("critic.err")).unwrap());
    let mut daemon = c.spawn().unwrap();
    poll_until("five verdicts and a ping", Duration::from_secs(60), || {
        records(&env)
            .iter()
            .filter(|r| r.kind == Kind::Verdict)
            .count()
            >= 5
            && r.requests().iter().any(|q| q.path == "/ping")
    });
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    wait_child(&mut daemon, Duration::from_secs(30));
    let recs = records(&env);
    let statuses: std::collections::BTreeSet<_> = recs
        .iter()
        .filter(|r| r.kind == Kind::Verdict)
        .filter_map(|r| r.str_field("status"))
        .filter(|s| *s != "pass")
        .collect();
    assert!(!statuses.is_empty(), "an old log is not a passing run");
    let reqs = r.requests();
    let p = pages(&reqs);
    assert_eq!(
        p.len(),
        statuses.len(),
        "{statuses:?} {reqs:#?}\n{}",
        env.read("critic.err")
    );
    assert!(p.iter().all(|q| q.json()["kind"] == "verdict"));
}

/// `kill -9` of roger after a failed send, then a new `roger watch` (which adopts the trainer
/// still running): the page is neither lost nor queued again; it is delivered exactly once,
/// with the key the first attempt carried.
#[test]
fn a_restart_after_kill_9_neither_loses_nor_duplicates_a_page() {
    let env = Env::new();
    let r = Receiver::start(&[503, 200]);
    config(
        &env,
        &format!("[notify.route]\nrelaunch = \"page\"\n{}", webhook(&r)),
        "allow_from_scratch = true",
    );
    let args = watch_args(
        &env,
        &[],
        &[
            "--steps",
            "700",
            "--step-ms",
            "50",
            "--save-every",
            "10",
            "--crash-at",
            "15",
        ],
    );
    let mut c = roger(&env, &args);
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("first.err")).unwrap());
    let mut first = c.spawn().unwrap();
    poll_until("the first send to fail", Duration::from_secs(60), || {
        !notes(&records(&env), "notify_failed").is_empty()
    });
    first.kill().unwrap(); // SIGKILL: no goodbye, the outbox is all that is left
    first.wait().unwrap();
    let mut c = roger(&env, &args);
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("second.err")).unwrap());
    let mut second = c.spawn().unwrap();
    wait_child(&mut second, Duration::from_secs(120));
    let reqs = r.requests();
    let p = pages(&reqs);
    let err = env.read("second.err");
    assert_eq!(p.len(), 2, "{reqs:#?}\n{err}");
    assert_eq!((p[0].status, p[1].status), (503, 200));
    assert_eq!(
        p[0].json()["idempotency_key"],
        p[1].json()["idempotency_key"]
    );
    let recs = records(&env);
    assert_eq!(notes(&recs, "notify_sent").len(), 1, "{err}");
    let queued = env
        .read("roger-outbox.jsonl")
        .lines()
        .filter(|l| l.contains("\"op\":\"queued\""))
        .count();
    assert_eq!(queued, 1, "queued once across the restart");
}
