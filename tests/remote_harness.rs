//! The remote tests' own harness, checked against the real server it wraps: moto starts on
//! loopback and stops with its guard, the signed client round-trips objects and lists
//! multipart uploads, SigV4 matches the AWS documentation's example, and roger's child gets
//! the test credentials and none of the developer's.

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
