//! A real S3 server for the remote tests: moto's standalone server (`pip install
//! "moto[server]"`) on a free loopback port, started by the test and stopped by itself, and a
//! small signed S3 client the tests use to look into the bucket behind roger's back.
//!
//! What moto does here (moto 5.2, checked by tests/remote_harness.rs): it does not verify
//! signatures, but a request *without* an `Authorization` header is anonymous and a GET or
//! DELETE of a private object is then 403 — so the client signs every request (SigV4, checked
//! against the AWS documentation's example). It stores a body sent as
//! `application/x-www-form-urlencoded` as empty (werkzeug parses it as a form): PUTs here send
//! `application/octet-stream`. It closes the connection after every response. It accepts any
//! `Host` header, so a client may talk to it through the fault proxy (tests/util/faultproxy.rs)
//! with the proxy's address signed as the host.
//!
//! Stopping: the server runs under `timeout 900` in a process group of its own, with
//! PR_SET_PDEATHSIG on that `timeout`, so a crashed or killed test never leaves it running;
//! [`S3Server`]'s drop kills the group. The death signal follows the *thread* that started the
//! server: start it on the test's own thread, not in a helper thread that ends first.

use super::missing;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Test credentials handed to roger. The secret and the token are recognisable strings so a
/// test can grep every output of roger for them (they must never appear).
pub const ACCESS_KEY_ID: &str = "AKIAROGERTESTHARNESS";
pub const SECRET_ACCESS_KEY: &str = "rogerTestSecretKey/DoNotLeak+5f3c9e71a2";
pub const SESSION_TOKEN: &str = "rogerTestSessionToken/DoNotLeak+b84d0e6a17";
pub const REGION: &str = "us-east-1";

/// Variables of the developer's own environment that would hand roger real credentials or
/// point it at a real account; [`apply_env`] removes them (and every other `AWS_*`).
pub const CLEARED_VARS: &[&str] = &[
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_ENDPOINT",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_DEFAULT_REGION",
    "AWS_BUCKET",
    "AWS_BUCKET_NAME",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// The environment roger's child gets in a remote test: the test credentials, the region,
/// shared config/credentials files that do not exist (so `~/.aws` is never read) and no
/// instance-metadata probing. Use with [`apply_env`], which also removes [`CLEARED_VARS`].
pub fn env_for_roger() -> Vec<(String, String)> {
    let nowhere = "/nonexistent/roger-test-harness";
    [
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY),
        ("AWS_SESSION_TOKEN", SESSION_TOKEN),
        ("AWS_REGION", REGION),
        ("AWS_CONFIG_FILE", &format!("{nowhere}/config")),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            &format!("{nowhere}/credentials"),
        ),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Every variable [`apply_env`] removes from a child's environment: [`CLEARED_VARS`] and any
/// other `AWS_*` set in this process.
pub fn cleared_vars() -> Vec<String> {
    let mut v: Vec<String> = CLEARED_VARS.iter().map(|s| s.to_string()).collect();
    v.extend(
        std::env::vars()
            .map(|(k, _)| k)
            .filter(|k| k.starts_with("AWS_")),
    );
    v.sort();
    v.dedup();
    v
}

/// Removes [`cleared_vars`] from `cmd`'s environment and sets [`env_for_roger`].
pub fn apply_env(cmd: &mut Command) -> &mut Command {
    for k in cleared_vars() {
        cmd.env_remove(k);
    }
    cmd.envs(env_for_roger())
}

/// One answer from the server (any status).
#[derive(Debug, Clone)]
pub struct S3Response {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl S3Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The S3 error code of an error body (`<Code>NoSuchKey</Code>`), if any.
    pub fn error_code(&self) -> Option<String> {
        xml_tags(&self.text(), "Code").into_iter().next()
    }
}

/// A signed path-style S3 client for the tests, on any endpoint (the server, or the fault
/// proxy in front of it). No connection pooling: one request, one connection, so a fault the
/// proxy injects is never retried behind the test's back on a pooled connection.
pub struct S3Client {
    endpoint: String,
    host: String,
    agent: ureq::Agent,
}

impl S3Client {
    /// `endpoint`: `http://HOST:PORT`.
    pub fn new(endpoint: &str) -> S3Client {
        S3Client::build(endpoint, 0)
    }

    /// A client that keeps its connections open between requests (as the AWS clients do),
    /// for tests of connection reuse through the fault proxy.
    pub fn keep_alive(endpoint: &str) -> S3Client {
        S3Client::build(endpoint, 4)
    }

    fn build(endpoint: &str, idle: usize) -> S3Client {
        let endpoint = endpoint.trim_end_matches('/').to_string();
        let host = endpoint
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("test S3 endpoint must be http://HOST:PORT, got {endpoint}"))
            .to_string();
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(5))
            .timeout(Duration::from_secs(120))
            .max_idle_connections(idle)
            .max_idle_connections_per_host(idle)
            .build();
        S3Client {
            endpoint,
            host,
            agent,
        }
    }

    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// One signed request. `path`: `/bucket/key` unencoded (each segment is percent-encoded
    /// here); `query`: unencoded pairs (`("uploads", "")`). `Err` only for a transport error
    /// (refused, reset, timeout); every HTTP status is an `Ok`.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<S3Response, String> {
        let uri = path
            .split('/')
            .map(uri_encode)
            .collect::<Vec<_>>()
            .join("/");
        let uri = if uri.starts_with('/') {
            uri
        } else {
            format!("/{uri}")
        };
        let qs = canonical_query(query);
        let amz_date = chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
        let mut all: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if !body.is_empty()
            && !all
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        {
            all.push(("content-type".into(), "application/octet-stream".into()));
        }
        let signed = sign_v4(
            &SignInput {
                method,
                host: &self.host,
                uri: &uri,
                query: &qs,
                headers: &all,
                payload_sha256: &hex(&Sha256::digest(body)),
                amz_date: &amz_date,
                region: REGION,
            },
            ACCESS_KEY_ID,
            SECRET_ACCESS_KEY,
            Some(SESSION_TOKEN),
        );
        let url = if qs.is_empty() {
            format!("{}{uri}", self.endpoint)
        } else {
            format!("{}{uri}?{qs}", self.endpoint)
        };
        let mut req = self.agent.request(method, &url);
        for (k, v) in all.iter().chain(&signed) {
            req = req.set(k, v);
        }
        let res = if body.is_empty() && matches!(method, "GET" | "HEAD" | "DELETE") {
            req.call()
        } else {
            req.send_bytes(body)
        };
        let resp = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(ureq::Error::Transport(t)) => return Err(format!("{method} {url}: {t}")),
        };
        let status = resp.status();
        let headers = resp
            .headers_names()
            .into_iter()
            .map(|n| {
                let v = resp.header(&n).unwrap_or_default().to_string();
                (n.to_ascii_lowercase(), v)
            })
            .collect();
        let mut body = Vec::new();
        resp.into_reader()
            .read_to_end(&mut body)
            .map_err(|e| format!("{method} {url}: reading the body: {e}"))?;
        Ok(S3Response {
            status,
            headers,
            body,
        })
    }

    /// `request`, panicking on a transport error or a status outside `ok`.
    #[track_caller]
    fn expect(
        &self,
        ok: &[u16],
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        body: &[u8],
    ) -> S3Response {
        let r = self
            .request(method, path, query, &[], body)
            .unwrap_or_else(|e| panic!("{}: {e}", self.endpoint));
        assert!(
            ok.contains(&r.status),
            "{method} {path} {query:?} at {}: status {} (expected {ok:?})\n{}",
            self.endpoint,
            r.status,
            r.text()
        );
        r
    }

    #[track_caller]
    pub fn create_bucket(&self, bucket: &str) {
        self.expect(&[200], "PUT", &format!("/{bucket}"), &[], &[]);
    }

    #[track_caller]
    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8]) {
        self.expect(&[200], "PUT", &format!("/{bucket}/{key}"), &[], bytes);
    }

    /// The object, or `None` when there is no such key.
    #[track_caller]
    pub fn get(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let r = self.expect(&[200, 404], "GET", &format!("/{bucket}/{key}"), &[], &[]);
        (r.status == 200).then_some(r.body)
    }

    /// The object's ETag (quotes included, as S3 sends it), or `None` when there is no such key.
    #[track_caller]
    pub fn etag(&self, bucket: &str, key: &str) -> Option<String> {
        let r = self.expect(&[200, 404], "HEAD", &format!("/{bucket}/{key}"), &[], &[]);
        (r.status == 200).then(|| r.header("etag").unwrap_or_default().to_string())
    }

    /// Every key under `prefix` (all pages), in the server's (lexicographic) order.
    #[track_caller]
    pub fn list(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut q = vec![("list-type", "2"), ("prefix", prefix)];
            if let Some(t) = &token {
                q.push(("continuation-token", t));
            }
            let text = self
                .expect(&[200], "GET", &format!("/{bucket}"), &q, &[])
                .text();
            for block in xml_blocks(&text, "Contents") {
                keys.extend(xml_tags(block, "Key"));
            }
            token = xml_tags(&text, "NextContinuationToken").into_iter().next();
            if token.is_none()
                || xml_tags(&text, "IsTruncated").first().map(String::as_str) != Some("true")
            {
                return keys;
            }
        }
    }

    /// Deletes the key (S3 answers 204 whether it existed or not).
    #[track_caller]
    pub fn delete(&self, bucket: &str, key: &str) {
        self.expect(&[204, 200], "DELETE", &format!("/{bucket}/{key}"), &[], &[]);
    }

    /// Starts a multipart upload and returns its upload id (an "orphan" until completed or
    /// aborted: what a roger killed mid-upload leaves behind).
    #[track_caller]
    pub fn create_multipart_upload(&self, bucket: &str, key: &str) -> String {
        let text = self
            .expect(
                &[200],
                "POST",
                &format!("/{bucket}/{key}"),
                &[("uploads", "")],
                &[],
            )
            .text();
        xml_tags(&text, "UploadId")
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no UploadId in {text}"))
    }

    /// Uploads one part; returns its ETag.
    #[track_caller]
    pub fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: u32,
        bytes: &[u8],
    ) -> String {
        let n = part_number.to_string();
        let r = self.expect(
            &[200],
            "PUT",
            &format!("/{bucket}/{key}"),
            &[("partNumber", &n), ("uploadId", upload_id)],
            bytes,
        );
        r.header("etag").unwrap_or_default().to_string()
    }

    #[track_caller]
    pub fn abort_multipart_upload(&self, bucket: &str, key: &str, upload_id: &str) {
        self.expect(
            &[204, 200],
            "DELETE",
            &format!("/{bucket}/{key}"),
            &[("uploadId", upload_id)],
            &[],
        );
    }

    /// The bucket's multipart uploads in progress, as `(key, upload_id)`.
    #[track_caller]
    pub fn list_multipart_uploads(&self, bucket: &str) -> Vec<(String, String)> {
        let text = self
            .expect(
                &[200],
                "GET",
                &format!("/{bucket}"),
                &[("uploads", "")],
                &[],
            )
            .text();
        xml_blocks(&text, "Upload")
            .into_iter()
            .filter_map(|b| {
                let key = xml_tags(b, "Key").into_iter().next()?;
                let id = xml_tags(b, "UploadId").into_iter().next()?;
                Some((key, id))
            })
            .collect()
    }
}

/// moto's standalone server on a loopback port, with a client for it (`Deref`). Dropping it
/// stops the server.
pub struct S3Server {
    client: S3Client,
    port: u16,
    group: Group,
    dir: tempfile::TempDir,
}

/// The `timeout` process, which made itself the leader of a process group holding moto: the
/// whole group is stopped on drop.
struct Group(Child);

impl std::ops::Deref for S3Server {
    type Target = S3Client;
    fn deref(&self) -> &S3Client {
        &self.client
    }
}

/// `name` on PATH as an executable file.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A loopback port free at the moment of asking (for a server a test starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

impl S3Server {
    /// Starts moto's server and waits until it answers a signed ListBuckets. `None` (through
    /// [`missing`]: SKIPPED here, a failure under CI) when `moto_server` is not on PATH.
    /// Panics, with moto's output, when it is there but does not come up.
    pub fn start(test: &str) -> Option<S3Server> {
        S3Server::start_with(test, &[])
    }

    /// [`S3Server::start`] with variables for moto (e.g. `INITIAL_NO_AUTH_ACTION_COUNT`, after
    /// which moto checks the access key: a real 403 for credentials it does not know).
    pub fn start_with(test: &str, vars: &[(&str, &str)]) -> Option<S3Server> {
        let Some(moto) = on_path("moto_server") else {
            missing(test, "moto_server", "pip install 'moto[server]'");
            return None;
        };
        let dir = tempfile::tempdir().expect("temp dir for moto's log");
        let log_path = dir.path().join("moto.log");
        // The port is free when chosen; another process may take it before moto binds it,
        // so a bind failure is retried on a new port.
        for _ in 0..3 {
            let port = free_port();
            let log = std::fs::File::create(&log_path).expect("moto log");
            let mut cmd = Command::new("timeout");
            cmd.args(["-s", "TERM", "-k", "5", "900"])
                .arg(&moto)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("moto log"))
                .stderr(log)
                .env("PYTHONUNBUFFERED", "1");
            for k in cleared_vars() {
                cmd.env_remove(k);
            }
            cmd.envs(vars.iter().copied());
            {
                use std::os::unix::process::CommandExt;
                // SAFETY: prctl(2) between fork and exec only sets a flag on the child; it
                // allocates nothing and takes no lock.
                unsafe {
                    cmd.pre_exec(|| {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                        Ok(())
                    });
                }
            }
            let mut group = Group(cmd.spawn().expect("spawn timeout moto_server"));
            let client = S3Client::new(&format!("http://127.0.0.1:{port}"));
            let t0 = Instant::now();
            loop {
                if let Ok(Some(status)) = group.0.try_wait() {
                    let out = std::fs::read_to_string(&log_path).unwrap_or_default();
                    if out.contains("Address already in use") {
                        break;
                    }
                    panic!("{test}: moto_server exited ({status}) before answering:\n{out}");
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    if let Ok(r) = client.request("GET", "/", &[], &[], &[]) {
                        assert_eq!(r.status, 200, "moto's ListBuckets: {}", r.text());
                        return Some(S3Server {
                            client,
                            port,
                            group,
                            dir,
                        });
                    }
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(90),
                    "{test}: moto_server did not answer on port {port} within 90 s:\n{}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        panic!("{test}: moto_server found no free port in 3 tries")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, for the fault proxy's upstream.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn client(&self) -> &S3Client {
        &self.client
    }

    /// moto's own output so far (its request log), for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("moto.log")
    }

    /// Whether the server process is still running (tests of the harness itself).
    pub fn running(&mut self) -> bool {
        matches!(self.group.0.try_wait(), Ok(None))
    }

    /// The pid of the `timeout` process, which leads the server's process group.
    pub fn pid(&self) -> u32 {
        self.group.0.id()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let pgid = self.0.id() as libc::pid_t;
        // SAFETY: signalling the process group of a child this struct started.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let t0 = Instant::now();
        while matches!(self.0.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above; the group is gone or refused SIGTERM.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

/// Percent-encoding as SigV4 wants it: everything but A-Z a-z 0-9 `-._~` (paths are encoded
/// segment by segment, keeping their `/`).
pub fn uri_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `k=v&...` with keys and values encoded, sorted (SigV4's canonical query string; also what
/// is sent).
pub fn canonical_query(query: &[(&str, &str)]) -> String {
    let mut q: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (uri_encode(k), uri_encode(v)))
        .collect();
    q.sort();
    q.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// HMAC-SHA256 (RFC 2104), on the crate's sha2.
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |x: u8| k.iter().map(|b| b ^ x).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// What a SigV4 signature covers. `uri` and `query` already encoded (see [`uri_encode`],
/// [`canonical_query`]); `headers` are the request's own headers, all signed.
pub struct SignInput<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub uri: &'a str,
    pub query: &'a str,
    pub headers: &'a [(String, String)],
    pub payload_sha256: &'a str,
    /// `YYYYMMDDTHHMMSSZ`.
    pub amz_date: &'a str,
    pub region: &'a str,
}

/// AWS Signature Version 4 for S3: the headers to add (`x-amz-date`, `x-amz-content-sha256`,
/// `x-amz-security-token` with a token, `authorization`).
pub fn sign_v4(
    r: &SignInput,
    key_id: &str,
    secret: &str,
    token: Option<&str>,
) -> Vec<(String, String)> {
    let mut added = vec![
        ("x-amz-date".to_string(), r.amz_date.to_string()),
        (
            "x-amz-content-sha256".to_string(),
            r.payload_sha256.to_string(),
        ),
    ];
    if let Some(t) = token {
        added.push(("x-amz-security-token".into(), t.into()));
    }
    let mut canon: Vec<(String, String)> = r
        .headers
        .iter()
        .chain(&added)
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .chain(std::iter::once(("host".to_string(), r.host.to_string())))
        .collect();
    canon.sort();
    let signed_headers = canon
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical_request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        r.method,
        r.uri,
        r.query,
        canon
            .iter()
            .map(|(k, v)| format!("{k}:{v}\n"))
            .collect::<String>(),
        signed_headers,
        r.payload_sha256
    );
    let date = &r.amz_date[..8];
    let scope = format!("{date}/{}/s3/aws4_request", r.region);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        r.amz_date,
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let k_date = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac_sha256(&k_date, r.region.as_bytes());
    let k_service = hmac_sha256(&k_region, b"s3");
    let k_signing = hmac_sha256(&k_service, b"aws4_request");
    let signature = hex(&hmac_sha256(&k_signing, to_sign.as_bytes()));
    added.push((
        "authorization".into(),
        format!(
            "AWS4-HMAC-SHA256 Credential={key_id}/{scope}, SignedHeaders={signed_headers}, Signature={signature}"
        ),
    ));
    added
}

/// The inner texts of every `<tag>…</tag>` in `xml`, entities decoded.
pub fn xml_tags(xml: &str, tag: &str) -> Vec<String> {
    xml_blocks(xml, tag).into_iter().map(xml_unescape).collect()
}

/// The raw inner texts of every `<tag>…</tag>` in `xml`.
pub fn xml_blocks<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(&after[..j]);
        rest = &after[j + close.len()..];
    }
    out
}

fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// A file's SHA-256, hex, for comparing a local checkpoint with what the bucket holds.
pub fn sha256_file(path: &Path) -> String {
    let mut f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).unwrap();
    hex(&h.finalize())
}
