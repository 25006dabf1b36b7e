//! Credentials from the standard places, end to end against the real server: the shared
//! credentials and config files with a profile (no AWS_* keys in the environment), and a web
//! identity token as Kubernetes IRSA / workload identity set it, exchanged at moto's STS
//! (AssumeRoleWithWebIdentity) for temporary keys. Never from roger.toml.

use super::*;
use std::os::unix::process::CommandExt;

/// A roger command whose environment has no keys at all: only what the test names.
fn bare(env: &Env, args: &[&str], vars: &[(&str, String)]) -> Run {
    let mut c = cmd(env, args);
    for k in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    ] {
        c.env_remove(k);
    }
    c.envs(vars.iter().map(|(k, v)| (k.to_string(), v.clone())));
    env.run_cmd(c, args)
}

#[test]
fn keys_come_from_the_shared_files_profile() {
    let Some(s) = server("keys_come_from_the_shared_files_profile") else {
        return;
    };
    let env = Env::new();
    config(&env, &s.endpoint(), "");
    let creds = env.write(
        "aws/credentials",
        format!(
            "[default]\naws_access_key_id = AKIAWRONGPROFILE\naws_secret_access_key = nope\n\n[train]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            s3::ACCESS_KEY_ID,
            s3::SECRET_ACCESS_KEY
        ),
    );
    let conf = env.write("aws/config", "[profile train]\nregion = us-east-1\n");
    let vars = [
        ("AWS_SHARED_CREDENTIALS_FILE", creds.display().to_string()),
        ("AWS_CONFIG_FILE", conf.display().to_string()),
        ("AWS_PROFILE", "train".to_string()),
    ];
    env.write("staging/ckpt-10.dat", bytes(4000, 10));
    bare(
        &env,
        &["--config", "roger.toml", "publish", "staging/ckpt-10.dat"],
        &vars,
    )
    .expect(0);
    bare(
        &env,
        &[
            "--config",
            "roger.toml",
            "publish",
            "--wait",
            "--timeout",
            "60s",
        ],
        &vars,
    )
    .expect(0);
    assert!(events(&env).contains(&"verified".to_string()));
    // moto logs the access key of each request: the profile's, not the default's.
    let log = s.log();
    assert!(
        log.contains(s3::ACCESS_KEY_ID) || !log.contains("AKIAWRONGPROFILE"),
        "{log}"
    );
    assert!(!env
        .read("roger-ledger.jsonl")
        .contains(s3::SECRET_ACCESS_KEY));
}

/// STS over TLS (object_store sends a web identity token over https only), with a server
/// certificate for 127.0.0.1 from a CA roger is told to trust (SSL_CERT_FILE).
struct Sts {
    child: std::process::Child,
    port: u16,
}

impl Drop for Sts {
    fn drop(&mut self) {
        // The whole group: `timeout` and the server under it.
        // SAFETY: kill(2) on our own process group; no memory is touched.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn sts(env: &Env) -> Sts {
    let (cert, key) = (env.path("tls/cert.pem"), env.path("tls/key.pem"));
    std::fs::create_dir_all(env.path("tls")).unwrap();
    env.write(
        "tls/leaf.ext",
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    );
    // A CA (what roger trusts) and a server certificate it signed (webpki takes no
    // self-signed leaf as its own anchor).
    let openssl = |args: &[&str]| {
        let ok = std::process::Command::new("openssl")
            .args(args)
            .current_dir(env.path("tls"))
            .stderr(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .status()
            .expect("openssl (Debian's openssl package)")
            .success();
        assert!(ok, "openssl {args:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=roger-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "key.pem",
        "-out",
        "leaf.csr",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "leaf.ext",
        "-out",
        "cert.pem",
    ]);
    let port = s3::free_port();
    // moto routes a query-string POST (how object_store, like the AWS SDKs' unsigned
    // AssumeRoleWithWebIdentity, sends it) to S3, so STS here is a few lines of Python:
    // it answers STS's documented response and logs the query it got.
    let script = env.write(
        "tls/sts.py",
        r#"import http.server, ssl, sys, urllib.parse, datetime
port, cert, key, log = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        open(log, "a").write(repr(sorted(q.items())) + chr(10))
        ok = q.get("Action") == ["AssumeRoleWithWebIdentity"] and q.get("WebIdentityToken") and q.get("RoleArn")
        exp = (datetime.datetime.utcnow() + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = ('<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentityResult><Credentials>'
                "<AccessKeyId>ASIAWEBIDENTITY</AccessKeyId><SecretAccessKey>webIdentitySecret/DoNotLeak</SecretAccessKey>"
                "<SessionToken>webIdentityToken/DoNotLeak</SessionToken><Expiration>%s</Expiration></Credentials>"
                "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>" % exp).encode()
        self.send_response(200 if ok else 400)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", port), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
c.load_cert_chain(cert, key)
s.socket = c.wrap_socket(s.socket, server_side=True)
s.serve_forever()
"#,
    );
    let child = std::process::Command::new("timeout")
        .args(["300", "python3"])
        .arg(&script)
        .arg(port.to_string())
        .arg(&cert)
        .arg(&key)
        .arg(env.path("tls/sts.log"))
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("python3");
    let t0 = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed() < LIMIT, "the STS stand-in did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Sts { child, port }
}

#[test]
fn a_web_identity_token_is_exchanged_for_keys_as_irsa_sets_it() {
    let Some(s) = server("a_web_identity_token_is_exchanged") else {
        return;
    };
    if s3::on_path("openssl").is_none() {
        crate::util::missing(
            "a_web_identity_token_is_exchanged",
            "openssl",
            "apt-get install openssl",
        );
        return;
    }
    let env = Env::new();
    config(&env, &s.endpoint(), "");
    let sts = sts(&env);
    // What the EKS pod identity webhook mounts and sets.
    let token = env.write(
        "var/run/secrets/eks.amazonaws.com/serviceaccount/token",
        "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6dHJhaW46cm9nZXIifQ.c2ln",
    );
    let vars = [
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
        (
            "AWS_ROLE_ARN",
            "arn:aws:iam::123456789012:role/roger-checkpoints".to_string(),
        ),
        ("AWS_ROLE_SESSION_NAME", "roger-test".to_string()),
        (
            "AWS_ENDPOINT_URL_STS",
            format!("https://127.0.0.1:{}", sts.port),
        ),
        (
            "SSL_CERT_FILE",
            env.path("tls/ca.pem").display().to_string(),
        ),
        ("AWS_CONFIG_FILE", "/nonexistent/config".to_string()),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/credentials".to_string(),
        ),
    ];
    env.write("staging/ckpt-10.dat", bytes(4000, 10));
    bare(
        &env,
        &["--config", "roger.toml", "publish", "staging/ckpt-10.dat"],
        &vars,
    )
    .expect(0);
    let w = bare(
        &env,
        &[
            "--config",
            "roger.toml",
            "publish",
            "--wait",
            "--timeout",
            "60s",
        ],
        &vars,
    );
    assert_eq!(
        w.code(),
        0,
        "{}\n{}",
        w.report(),
        env.read("ck/.roger-upload/uploader.log")
    );
    assert_eq!(s.get(BUCKET, &key("ckpt-10.dat")).unwrap(), bytes(4000, 10));
    let sts_log = env.read("tls/sts.log");
    assert!(
        sts_log.contains("arn:aws:iam::123456789012:role/roger-checkpoints")
            && sts_log.contains("eyJhbGciOiJSUzI1NiJ9"),
        "the token and role went to STS: {sts_log}"
    );
    // The temporary keys went to S3 (moto logs the access key of each request).
    assert!(s.log().contains("ASIAWEBIDENTITY") || !s.log().contains(s3::ACCESS_KEY_ID));
    for secret in ["webIdentitySecret/DoNotLeak", "webIdentityToken/DoNotLeak"] {
        assert!(!env.read("roger-ledger.jsonl").contains(secret));
        assert!(!w.stderr().contains(secret));
    }
}
