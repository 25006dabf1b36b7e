//! The remote tests' own harness, checked against the real server it wraps: moto starts on
//! loopback and stops with its guard, the signed client round-trips objects and lists
//! multipart uploads, SigV4 matches the AWS documentation's example, and roger's child gets
//! the test credentials and none of the developer's; the fault proxy forwards faithfully
//! (keep-alive, chunked bodies) and each of its faults reaches a client.

use crate::util::faultproxy::{on, Fault, FaultProxy};
use crate::util::s3::{self, S3Client, S3Server};

#[test]
fn hmac_and_sigv4_match_the_published_examples() {
    // RFC 4231, test case 2.
    assert_eq!(
        s3::hex(&s3::hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    // RFC 4231, test case 6: a key longer than the block is hashed first.
    assert_eq!(
        s3::hex(&s3::hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First"
        )),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
    // The AWS S3 documentation's "GET object" example (sigv4-header-based-auth).
    let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let added = s3::sign_v4(
        &s3::SignInput {
            method: "GET",
            host: "examplebucket.s3.amazonaws.com",
            uri: "/test.txt",
            query: "",
            headers: &[("Range".into(), "bytes=0-9".into())],
            payload_sha256: empty,
            amz_date: "20130524T000000Z",
            region: "us-east-1",
        },
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        None,
    );
    let auth = &added.iter().find(|(k, _)| k == "authorization").unwrap().1;
    assert_eq!(
        auth,
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
         SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
         Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    );
    // A part upload with an encoded key and query and a session token, as botocore 1.x
    // (S3SigV4Auth) signs it at the same instant.
    let added = s3::sign_v4(
        &s3::SignInput {
            method: "PUT",
            host: "127.0.0.1:9000",
            uri: &format!("/bkt/dir/{}", s3::uri_encode("a b.bin")),
            query: &s3::canonical_query(&[("uploadId", "abc+z"), ("partNumber", "2")]),
            headers: &[],
            payload_sha256: &s3::hex(&<sha2::Sha256 as sha2::Digest>::digest(b"hello")),
            amz_date: "20261205T120000Z",
            region: "us-east-1",
        },
        "AKIDTEST",
        "secret/key+x",
        Some("tok=="),
    );
    let auth = &added.iter().find(|(k, _)| k == "authorization").unwrap().1;
    assert_eq!(
        auth,
        "AWS4-HMAC-SHA256 Credential=AKIDTEST/20261205/us-east-1/s3/aws4_request, \
         SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token, \
         Signature=c58917be016b836722b0eb052f67869eeb8e4993b6c3ff1792532df86124bc02"
    );
}

#[test]
fn moto_round_trips_objects_and_stops_with_its_guard() {
    let Some(server) = S3Server::start("moto_round_trips_objects_and_stops_with_its_guard") else {
        return;
    };
    let pgid = server.pid() as libc::pid_t;
    server.create_bucket("ckpts");
    let big: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    server.put("ckpts", "run/step-10/model.pt", &big);
    server.put("ckpts", "run/latest.json", br#"{"step":10}"#);
    server.put("ckpts", "other/x", b"x");
    assert_eq!(
        server.get("ckpts", "run/step-10/model.pt").as_deref(),
        Some(&big[..])
    );
    assert_eq!(server.get("ckpts", "run/nope"), None);
    assert_eq!(
        server.list("ckpts", "run/"),
        vec!["run/latest.json", "run/step-10/model.pt"]
    );
    let etag = server.etag("ckpts", "run/latest.json").unwrap();
    assert!(etag.starts_with('"') && etag.len() > 2, "{etag}");
    server.delete("ckpts", "run/latest.json");
    assert_eq!(server.etag("ckpts", "run/latest.json"), None);
    assert_eq!(server.list("ckpts", "run/"), vec!["run/step-10/model.pt"]);

    // Why the client signs: moto serves an unsigned GET of a private object as anonymous, 403.
    let unsigned = ureq::get(&format!("{}/ckpts/other/x", server.endpoint())).call();
    assert!(
        matches!(unsigned, Err(ureq::Error::Status(403, _))),
        "moto served an unsigned GET: {unsigned:?}"
    );

    drop(server);
    // SAFETY: signal 0 only asks whether the group still exists.
    let alive = unsafe { libc::kill(-pgid, 0) } == 0;
    assert!(!alive, "moto's process group {pgid} outlived its guard");
}

#[test]
fn multipart_uploads_in_progress_are_listed_until_aborted() {
    let Some(server) = S3Server::start("multipart_uploads_in_progress_are_listed_until_aborted")
    else {
        return;
    };
    server.create_bucket("bkt");
    assert_eq!(server.list_multipart_uploads("bkt"), vec![]);
    let id = server.create_multipart_upload("bkt", "run/step-20/model.pt");
    let etag = server.upload_part("bkt", "run/step-20/model.pt", &id, 1, &[7u8; 5 << 20]);
    assert!(!etag.is_empty());
    assert_eq!(
        server.list_multipart_uploads("bkt"),
        vec![("run/step-20/model.pt".to_string(), id.clone())]
    );
    server.abort_multipart_upload("bkt", "run/step-20/model.pt", &id);
    assert_eq!(server.list_multipart_uploads("bkt"), vec![]);
    assert_eq!(server.list("bkt", ""), Vec::<String>::new());
}

#[test]
fn roger_gets_the_test_credentials_and_none_of_the_developers() {
    let mut cmd = std::process::Command::new("env");
    cmd.env("AWS_PROFILE", "production")
        .env("AWS_ACCESS_KEY_ID", "AKIAREALDEVELOPERKEY")
        .env("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/real")
        .env("AWS_SOMETHING_NEW", "x")
        .env("HOME", "/home/dev");
    s3::apply_env(&mut cmd);
    let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
    let aws: Vec<&str> = out.lines().filter(|l| l.starts_with("AWS_")).collect();
    for want in [
        format!("AWS_ACCESS_KEY_ID={}", s3::ACCESS_KEY_ID),
        format!("AWS_SECRET_ACCESS_KEY={}", s3::SECRET_ACCESS_KEY),
        format!("AWS_SESSION_TOKEN={}", s3::SESSION_TOKEN),
        "AWS_REGION=us-east-1".to_string(),
        "AWS_EC2_METADATA_DISABLED=true".to_string(),
    ] {
        assert!(aws.contains(&want.as_str()), "{want} missing from {aws:#?}");
    }
    for gone in [
        "AWS_PROFILE=",
        "AWS_WEB_IDENTITY_TOKEN_FILE=",
        "AKIAREALDEVELOPERKEY",
    ] {
        assert!(!out.contains(gone), "{gone} reached the child: {aws:#?}");
    }
    // Variables this process has are cleared whatever their name; the shared files point
    // nowhere, so ~/.aws is never read.
    assert!(aws
        .iter()
        .any(|l| l.starts_with("AWS_SHARED_CREDENTIALS_FILE=/nonexistent/")));
    assert!(aws
        .iter()
        .any(|l| l.starts_with("AWS_CONFIG_FILE=/nonexistent/")));
    // A secret and a token long and odd enough to grep for without false hits.
    assert!(s3::SECRET_ACCESS_KEY.len() >= 30 && s3::SESSION_TOKEN.len() >= 30);
}

#[test]
fn a_client_on_a_closed_port_gets_a_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = S3Client::new(&format!("http://127.0.0.1:{port}"));
    let e = c.request("GET", "/b/k", &[], &[], &[]).unwrap_err();
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
}

/// moto behind the fault proxy, a bucket, and clients on both.
fn proxied(test: &str) -> Option<(S3Server, FaultProxy, S3Client)> {
    let server = S3Server::start(test)?;
    server.create_bucket("bkt");
    let proxy = FaultProxy::start(server.addr());
    let client = S3Client::new(&proxy.endpoint());
    Some((server, proxy, client))
}

/// How many requests moto logged with this method whose target contains `needle`.
fn upstream_saw(server: &S3Server, method: &str, needle: &str) -> usize {
    server
        .log()
        .lines()
        .filter(|l| l.contains(&format!("\"{method} ")) && l.contains(needle))
        .count()
}

#[test]
fn the_proxy_forwards_and_keeps_client_connections_alive() {
    let Some((server, proxy, _)) = proxied("the_proxy_forwards_and_keeps_client_connections_alive")
    else {
        return;
    };
    let client = S3Client::keep_alive(&proxy.endpoint());
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    client.put("bkt", "k/a b.bin", &body);
    assert_eq!(server.get("bkt", "k/a b.bin").as_deref(), Some(&body[..]));
    assert_eq!(client.get("bkt", "k/a b.bin").as_deref(), Some(&body[..]));
    assert_eq!(
        client.etag("bkt", "k/a b.bin"),
        server.etag("bkt", "k/a b.bin")
    );
    assert_eq!(client.list("bkt", "k/"), vec!["k/a b.bin"]);
    assert_eq!(client.get("bkt", "k/missing"), None);
    // Five requests on one client connection (moto closes its own after each answer).
    assert_eq!(proxy.connections(), 1, "{:#?}", proxy.requests());
    assert_eq!(proxy.requests().len(), 5);
    assert_eq!(proxy.count(&on("PUT", "a%20b.bin")), 1);
    assert_eq!(proxy.count(&on("", "")), 5);

    // A chunked request body (no Content-Length) is de-chunked and stored whole.
    let signed = chunked_put(&proxy, "/bkt/k/chunked", b"hello, chunked world");
    assert!(signed.starts_with("HTTP/1.1 200"), "{signed}");
    assert_eq!(
        server.get("bkt", "k/chunked").as_deref(),
        Some(&b"hello, chunked world"[..])
    );
}

/// A signed PUT sent with `Transfer-Encoding: chunked` in two chunks on a raw connection;
/// returns the response head.
fn chunked_put(proxy: &FaultProxy, path: &str, body: &[u8]) -> String {
    use std::io::{Read, Write};
    let host = format!("127.0.0.1:{}", proxy.port());
    let amz_date = chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
    let added = s3::sign_v4(
        &s3::SignInput {
            method: "PUT",
            host: &host,
            uri: path,
            query: "",
            headers: &[],
            payload_sha256: &s3::hex(&<sha2::Sha256 as sha2::Digest>::digest(body)),
            amz_date: &amz_date,
            region: s3::REGION,
        },
        s3::ACCESS_KEY_ID,
        s3::SECRET_ACCESS_KEY,
        Some(s3::SESSION_TOKEN),
    );
    let mut req = format!(
        "PUT {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
    );
    for (k, v) in &added {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let (a, b) = body.split_at(body.len() / 2);
    for chunk in [a, b] {
        req.push_str(&format!("{:x}\r\n", chunk.len()));
        req.push_str(std::str::from_utf8(chunk).unwrap());
        req.push_str("\r\n");
    }
    req.push_str("0\r\n\r\n");
    let mut c = std::net::TcpStream::connect(&host).unwrap();
    c.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    c.read_to_string(&mut resp).unwrap();
    resp
}

#[test]
fn the_proxy_answers_slow_down_without_forwarding() {
    let Some((server, proxy, client)) = proxied("the_proxy_answers_slow_down_without_forwarding")
    else {
        return;
    };
    proxy.slow_down(2, on("PUT", "latest.json"));
    client.put("bkt", "run/other", b"unaffected");
    for _ in 0..2 {
        let r = client
            .request("PUT", "/bkt/run/latest.json", &[], &[], b"{}")
            .unwrap();
        assert_eq!(r.status, 503);
        assert_eq!(r.error_code().as_deref(), Some("SlowDown"), "{}", r.text());
    }
    client.put("bkt", "run/latest.json", b"{\"step\":1}");
    assert_eq!(proxy.pending(), 0);
    assert_eq!(proxy.fired(Fault::SlowDown), 2);
    assert_eq!(proxy.count(&on("PUT", "latest.json")), 3);
    assert_eq!(
        upstream_saw(&server, "PUT", "latest.json"),
        1,
        "{}",
        server.log()
    );
    assert_eq!(
        server.get("bkt", "run/latest.json").unwrap(),
        b"{\"step\":1}"
    );
}

#[test]
fn the_proxy_resets_a_connection_mid_part() {
    let Some((server, proxy, client)) = proxied("the_proxy_resets_a_connection_mid_part") else {
        return;
    };
    let key = "run/step-10/model.pt";
    let id = client.create_multipart_upload("bkt", key);
    proxy.reset_mid_body(1, on("PUT", "partNumber=2"));
    client.upload_part("bkt", key, &id, 1, &[1u8; 5 << 20]);
    let q = [("partNumber", "2"), ("uploadId", id.as_str())];
    let e = client
        .request("PUT", &format!("/bkt/{key}"), &q, &[], &[2u8; 1 << 20])
        .unwrap_err();
    assert!(
        e.to_ascii_lowercase().contains("reset")
            || e.contains("os error")
            || e.contains("broken pipe"),
        "not a connection reset: {e}"
    );
    let l = proxy
        .requests()
        .into_iter()
        .find(|l| l.fault.is_some())
        .unwrap();
    assert_eq!(l.fault, Some(Fault::ResetMidBody));
    assert_eq!((l.status, l.forwarded_len), (None, None));
    assert!(l.body_len > 0 && l.body_len < 1 << 20, "{l:?}");
    assert_eq!(
        upstream_saw(&server, "PUT", "partNumber=2"),
        0,
        "{}",
        server.log()
    );
    // The retry goes through.
    client.upload_part("bkt", key, &id, 2, &[2u8; 1 << 20]);
    assert_eq!(upstream_saw(&server, "PUT", "partNumber=2"), 1);
}

#[test]
fn the_proxy_makes_the_server_store_fewer_bytes_behind_a_200() {
    let Some((server, proxy, client)) =
        proxied("the_proxy_makes_the_server_store_fewer_bytes_behind_a_200")
    else {
        return;
    };
    proxy.truncate_stored(1, on("PUT", "model.pt"));
    let body = vec![9u8; 100_000];
    let r = client
        .request("PUT", "/bkt/run/model.pt", &[], &[], &body)
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.get("bkt", "run/model.pt").unwrap().len(), 50_000);
    let l = &proxy.requests()[0];
    assert_eq!(
        (l.fault, l.body_len, l.forwarded_len),
        (Some(Fault::TruncateStored), 100_000, Some(50_000))
    );
    // Once only: the next PUT is stored whole.
    client.put("bkt", "run/model.pt", &body);
    assert_eq!(server.get("bkt", "run/model.pt").unwrap(), body);
}

#[test]
fn the_proxy_flips_a_byte_of_a_get_body() {
    let Some((server, proxy, client)) = proxied("the_proxy_flips_a_byte_of_a_get_body") else {
        return;
    };
    let body: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
    server.put("bkt", "run/model.pt", &body);
    proxy.flip_byte_in_response(1, on("GET", "model.pt"));
    // A 404 has no body to flip: the fault waits for the next matching 2xx.
    assert_eq!(client.get("bkt", "run/model.pt.missing"), None);
    let got = client.get("bkt", "run/model.pt").unwrap();
    assert_eq!(got.len(), body.len());
    let diff: Vec<usize> = (0..body.len()).filter(|&i| got[i] != body[i]).collect();
    assert_eq!(diff, vec![body.len() / 2]);
    assert_eq!(client.get("bkt", "run/model.pt").unwrap(), body);
    assert_eq!(server.get("bkt", "run/model.pt").unwrap(), body);
    assert_eq!(proxy.fired(Fault::FlipByte), 1);
}

#[test]
fn the_proxy_refuses_connections_until_told_otherwise() {
    let Some((_server, proxy, client)) =
        proxied("the_proxy_refuses_connections_until_told_otherwise")
    else {
        return;
    };
    proxy.refuse();
    assert!(client.request("GET", "/bkt", &[], &[], &[]).is_err());
    assert!(client.request("PUT", "/bkt/k", &[], &[], b"x").is_err());
    assert_eq!(proxy.fired(Fault::Refused), 2);
    proxy.accept_again();
    assert_eq!(client.list("bkt", ""), Vec::<String>::new());
}
