//! The network and the server misbehaving, through the fault proxy (and moto itself for
//! wrong credentials and a missing bucket): each ends with a verified copy or a clear error
//! naming the bucket and key, and the local checkpoint is never lost.

use super::*;
use crate::util::faultproxy::{on, Fault};
use crate::util::Env;

fn verified_once(env: &Env) {
    let ev = events(env);
    assert_eq!(ev.iter().filter(|e| *e == "verified").count(), 1, "{ev:?}");
}

#[test]
fn a_connection_reset_mid_part_and_slowdowns_are_retried_to_a_verified_copy() {
    let Some(s) = server("a_connection_reset_mid_part") else {
        return;
    };
    let p = proxy(&s);
    let env = Env::new();
    config(&env, &p.endpoint(), "");
    p.reset_mid_body(1, on("PUT", "partNumber=2"));
    p.slow_down(3, on("PUT", "partNumber=1"));
    publish(&env, 10, 12 << 20).expect(0);
    wait(&env).expect(0);
    assert_eq!(p.fired(Fault::ResetMidBody), 1);
    assert_eq!(p.fired(Fault::SlowDown), 3);
    verified_once(&env);
    assert_eq!(
        s.get(BUCKET, &key("ckpt-10.dat")).unwrap(),
        bytes(12 << 20, 10)
    );
    assert!(
        s.list_multipart_uploads(BUCKET).is_empty(),
        "no orphaned upload"
    );
}

#[test]
fn a_proxy_that_stores_fewer_bytes_is_caught_and_the_checkpoint_sent_again() {
    let Some(s) = server("a_proxy_that_stores_fewer_bytes") else {
        return;
    };
    let p = proxy(&s);
    let env = Env::new();
    config(&env, &p.endpoint(), "");
    // Answers 200 but stores half: only roger's re-read can tell.
    p.truncate_stored(1, on("PUT", "ckpt-10.dat"));
    publish(&env, 10, 100_000).expect(0);
    wait(&env).expect(0);
    assert_eq!(p.fired(Fault::TruncateStored), 1);
    let ev = events(&env);
    let mm = ev
        .iter()
        .position(|e| e == "mismatch")
        .expect("a mismatch record");
    let ok = ev
        .iter()
        .position(|e| e == "verified")
        .expect("then verified");
    assert!(mm < ok, "{ev:?}");
    let recs = records(&env);
    let m = recs
        .iter()
        .find(|r| r.str_field("event") == Some("mismatch"))
        .unwrap();
    let err = m.str_field("error").unwrap();
    assert!(
        err.contains("50000 bytes") && err.contains(&key("ckpt-10.dat")),
        "{err}"
    );
    assert_eq!(
        s.get(BUCKET, &key("ckpt-10.dat")).unwrap(),
        bytes(100_000, 10)
    );
}

#[test]
fn a_get_body_corrupted_in_flight_fails_the_verify_and_is_sent_again() {
    let Some(s) = server("a_get_body_corrupted_in_flight") else {
        return;
    };
    let p = proxy(&s);
    let env = Env::new();
    config(&env, &p.endpoint(), "");
    p.flip_byte_in_response(1, on("GET", "ckpt-10.dat"));
    publish(&env, 10, 11 << 20).expect(0);
    wait(&env).expect(0);
    assert_eq!(p.fired(Fault::FlipByte), 1);
    let ev = events(&env);
    assert!(ev.contains(&"mismatch".to_string()), "{ev:?}");
    verified_once(&env);
    assert_eq!(remote_latest(&s).unwrap()["step"], 10);
}

#[test]
fn wrong_credentials_and_a_missing_bucket_say_so_and_lose_nothing() {
    // moto checks access keys after this many unauthenticated actions (the readiness probe
    // and the bucket's creation): roger's keys are not ones it knows, a real 403.
    let Some(s) = S3Server::start_with(
        "wrong_credentials_and_a_missing_bucket",
        &[("INITIAL_NO_AUTH_ACTION_COUNT", "2")],
    ) else {
        return;
    };
    s.create_bucket(BUCKET);
    let env = Env::new();
    config(&env, &s.endpoint(), "");
    publish(&env, 10, 3000).expect(0);
    let w = wait(&env).expect(1);
    let recs = records(&env);
    let f = recs
        .iter()
        .find(|r| r.str_field("event") == Some("failed"))
        .unwrap_or_else(|| panic!("no failed record: {}", w.report()));
    let err = f.str_field("error").unwrap();
    assert!(err.contains("access denied"), "{err}");
    assert!(
        err.contains("s3://ckpts/runs/r1/checkpoints/ckpt-10.dat"),
        "{err}"
    );
    assert!(
        err.contains("AWS_ACCESS_KEY_ID"),
        "says where credentials come from: {err}"
    );
    assert!(w.stderr().contains("access denied"), "{}", w.report());
    assert!(
        env.path("ck/ckpt-10.dat").is_file(),
        "the local checkpoint stays"
    );
    // No such bucket (a real NoSuchBucket from a server that lets us in).
    let Some(open) = server("wrong_credentials_and_a_missing_bucket/2") else {
        return;
    };
    let env = Env::new();
    config(&env, &open.endpoint(), "");
    let t = env
        .read("roger.toml")
        .replace("s3://ckpts/", "s3://no-such-bucket/");
    env.write("roger.toml", t);
    publish(&env, 10, 3000).expect(0);
    let w = wait(&env).expect(1);
    w.stderr_has("no such bucket \"no-such-bucket\"");
    assert!(env.path("ck/ckpt-10.dat").is_file());
}

/// The uploader's pid for a destination (its cwd), when one runs.
fn uploader_of(dest: &std::path::Path) -> Option<u32> {
    let dest = std::fs::canonicalize(dest).ok()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        (String::from_utf8_lossy(&cmd).contains("--upload-drain") && cwd == dest).then_some(pid)
    })
}

#[test]
fn an_uploader_killed_mid_upload_is_aborted_on_record_and_the_upload_restarts() {
    let Some(s) = server("an_uploader_killed_mid_upload") else {
        return;
    };
    let p = proxy(&s);
    let env = Env::new();
    config(&env, &p.endpoint(), "");
    // Every part answered SlowDown: the uploader sits in its backoff with the upload open.
    p.slow_down(10_000, on("PUT", "partNumber"));
    publish(&env, 10, 12 << 20).expect(0);
    let job = || {
        std::fs::read_dir(env.path("ck/.roger-upload"))
            .unwrap()
            .flatten()
            .find(|e| e.path().extension().is_some_and(|x| x == "json"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .unwrap_or_default()
    };
    crate::watch::poll_until("the upload id recorded in the job", LIMIT, || {
        job().contains("\"open\": [\n    [")
    });
    let pid = uploader_of(&env.path("ck")).expect("the uploader runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    crate::watch::poll_until("the uploader gone", LIMIT, || {
        uploader_of(&env.path("ck")).is_none()
    });
    assert_eq!(
        s.list_multipart_uploads(BUCKET).len(),
        1,
        "the killed upload is open"
    );
    p.clear();
    wait(&env).expect(0);
    let ev = events(&env);
    let ab = ev
        .iter()
        .position(|e| e == "aborted")
        .expect("an aborted record");
    assert!(
        ab < ev.iter().position(|e| e == "verified").unwrap(),
        "{ev:?}"
    );
    assert!(
        s.list_multipart_uploads(BUCKET).is_empty(),
        "no orphaned upload left"
    );
    assert_eq!(
        s.get(BUCKET, &key("ckpt-10.dat")).unwrap(),
        bytes(12 << 20, 10)
    );
}

#[test]
fn a_disk_that_fills_while_a_download_stages_leaves_nothing_and_says_so() {
    let Some(s) = server("a_disk_that_fills_while_a_download_stages") else {
        return;
    };
    let env = Env::new();
    config(&env, &s.endpoint(), "");
    publish(&env, 10, 3 << 20).expect(0);
    wait(&env).expect(0);
    let other = Env::new();
    other.write("roger.toml", env.read("roger.toml"));
    let Some(_tmp) = crate::util::mount_tmpfs(
        &other.path("small"),
        "1m",
        "a_disk_that_fills_while_a_download_stages",
    ) else {
        return;
    };
    let r = run(
        &other,
        &["--config", "roger.toml", "fetch", "--to", "small"],
    )
    .expect(1);
    let err = r.stderr();
    assert!(err.contains("No space left on device"), "{}", r.report());
    assert!(
        err.contains("small/.roger-fetch.ckpt-10.dat"),
        "names the file: {err}"
    );
    let left: Vec<_> = std::fs::read_dir(other.path("small"))
        .unwrap()
        .flatten()
        .collect();
    assert!(left.is_empty(), "a partial download was left: {left:?}");
    let recs = records(&other);
    assert!(recs
        .iter()
        .any(|r| r.str_field("event") == Some("fetch_failed")));
}
