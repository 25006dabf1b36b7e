//! The endpoint given the standard way (issue 36): `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3`
//! with no `[remote] endpoint` in roger.toml reach moto over plain http, and a permanent error
//! (no such bucket, an endpoint that is not a URL) ends `publish --wait` at once, named.

use super::{bytes, events, records, sha256, BUCKET, PREFIX};
use crate::util::{Env, Run};
use roger::ledger::Kind;
use std::time::{Duration, Instant};

/// roger.toml with a bucket and no `[remote] endpoint`.
fn config_without_endpoint(env: &Env, bucket: &str) {
    env.write(
        "roger.toml",
        format!(
            "[run]\nname = \"r1\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ck\"\n\
             [publish]\nkeep_last = 2\nremote = \"s3://{bucket}/{PREFIX}/\"\n\
             [remote]\npart_size = \"5MiB\"\nconcurrency = 3\nmax_retries = 4\ntimeout = \"20s\"\n\
             [gpu]\nsource = \"none\"\n"
        ),
    );
}

/// `args` with the test credentials and these endpoint variables.
fn run_with(env: &Env, vars: &[(&str, &str)], args: &[&str]) -> Run {
    let mut c = super::cmd(env, args);
    c.envs(vars.iter().copied());
    env.run_cmd(c, args)
}

fn publish(env: &Env, vars: &[(&str, &str)], step: u64, size: usize) -> Vec<u8> {
    let rel = format!("staging/ckpt-{step}.dat");
    let b = bytes(size, step);
    env.write(&rel, &b);
    run_with(env, vars, &["--config", "roger.toml", "publish", &rel]).expect(0);
    b
}

fn wait(env: &Env, vars: &[(&str, &str)]) -> Run {
    run_with(
        env,
        vars,
        &[
            "--config",
            "roger.toml",
            "publish",
            "--wait",
            "--timeout",
            "120s",
        ],
    )
}

#[test]
fn aws_endpoint_url_over_http_uploads_and_verifies_with_no_endpoint_in_roger_toml() {
    let Some(s) = super::server("aws_endpoint_url_over_http") else {
        return;
    };
    let env = Env::new();
    config_without_endpoint(&env, BUCKET);
    let vars = [("AWS_ENDPOINT_URL", s.endpoint())];
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let sent = publish(&env, &vars, 10, 6 << 20);
    wait(&env, &vars).expect(0);
    let ev = events(&env);
    assert_eq!(ev.iter().filter(|e| *e == "verified").count(), 1, "{ev:?}");
    assert!(!ev.contains(&"failed".to_string()), "{ev:?}");
    let got = s
        .get(BUCKET, &super::key("ckpt-10.dat"))
        .expect("the bucket holds the checkpoint");
    assert_eq!(
        sha256(&got),
        sha256(&sent),
        "the bucket copy is the checkpoint"
    );

    // The service-specific variable wins over the general one (a closed port there).
    let env = Env::new();
    config_without_endpoint(&env, BUCKET);
    let closed = format!("http://127.0.0.1:{}", crate::util::s3::free_port());
    let vars = [
        ("AWS_ENDPOINT_URL_S3", s.endpoint()),
        ("AWS_ENDPOINT_URL", closed),
    ];
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let sent = publish(&env, &vars, 20, 1000);
    wait(&env, &vars).expect(0);
    let got = s.get(BUCKET, &super::key("ckpt-20.dat")).unwrap();
    assert_eq!(sha256(&got), sha256(&sent));
}

/// Until the uploader that the publish started has written its first `failed` record.
fn first_failure(env: &Env) {
    let t0 = Instant::now();
    while !events(env).contains(&"failed".to_string()) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no failed record: {:?}",
            events(env)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `failed` records of upload attempts: their `attempt` numbers.
fn attempts(env: &Env) -> Vec<u64> {
    records(env)
        .iter()
        .filter(|r| r.kind == Kind::Remote && r.str_field("event") == Some("failed"))
        .filter_map(|r| r.u64_field("attempt"))
        .collect()
}

#[test]
fn a_permanent_error_ends_publish_wait_at_once_and_names_its_cause() {
    let Some(s) = super::server("a_permanent_error_ends_publish_wait") else {
        return;
    };
    // No such bucket, reached through AWS_ENDPOINT_URL over http.
    let env = Env::new();
    config_without_endpoint(&env, "no-such-bucket");
    let vars = [("AWS_ENDPOINT_URL", s.endpoint())];
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    publish(&env, &vars, 10, 3000);
    first_failure(&env);
    let w = wait(&env, &vars).expect(1);
    let w = w
        .stderr_has("no such bucket \"no-such-bucket\"")
        .stderr_has("AWS_ENDPOINT_URL");
    // One attempt for the uploader the publish started, one for the start --wait gives it:
    // a permanent error is not retried within either.
    assert_eq!(attempts(&env), vec![1, 1], "{}", w.report());
    let f = records(&env)
        .into_iter()
        .rfind(|r| r.str_field("event") == Some("failed"))
        .unwrap();
    assert_eq!(f.get("permanent"), Some(&serde_json::json!(true)));
    assert!(env.path("ck/ckpt-10.dat").is_file());

    // An endpoint that is not a URL: a configuration error, said in words with the fix.
    let env = Env::new();
    config_without_endpoint(&env, BUCKET);
    let vars = [("AWS_ENDPOINT_URL", "127.0.0.1:9")];
    publish(&env, &vars, 10, 3000);
    first_failure(&env);
    let w = wait(&env, &vars).expect(1);
    let w = w
        .stderr_has("endpoint refused")
        .stderr_has("AWS_ENDPOINT_URL")
        .stderr_has("http://127.0.0.1:9")
        .stderr_has("s3://ckpts/");
    assert_eq!(attempts(&env), vec![1, 1], "{}", w.report());
    for secret in [
        crate::util::s3::SECRET_ACCESS_KEY,
        crate::util::s3::SESSION_TOKEN,
    ] {
        assert!(!w.stderr().contains(secret));
        assert!(!env.read("roger-ledger.jsonl").contains(secret));
    }
}
