//! The channels at the edge: a webhook (an HTTP or HTTPS POST through `ureq`, rustls with the
//! webpki roots, so no system OpenSSL is needed; presets shape the body for Slack, Discord, ntfy
//! or generic JSON) and a command hook (argv, the event JSON on stdin). Secrets come from the
//! environment at send time, and no error repeats a URL (it may hold a token).

use crate::config::notify::{CommandConfig, NotifyConfig, Preset, WebhookConfig};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One configured channel.
#[derive(Debug, Clone)]
pub enum Channel {
    Webhook(String, WebhookConfig),
    Command(String, CommandConfig),
}

impl Channel {
    pub fn name(&self) -> &str {
        match self {
            Channel::Webhook(n, _) | Channel::Command(n, _) => n,
        }
    }

    /// Deliver one event payload (as queued in the outbox).
    pub fn send(&self, payload: &Value) -> Result<()> {
        match self {
            Channel::Webhook(_, w) => webhook(w, payload),
            Channel::Command(_, c) => command(c, payload),
        }
    }
}

pub fn channels(cfg: &NotifyConfig) -> Vec<Channel> {
    let mut v: Vec<Channel> = (0..cfg.webhook.len())
        .map(|i| Channel::Webhook(cfg.webhook_name(i), cfg.webhook[i].clone()))
        .collect();
    v.extend(
        (0..cfg.command.len())
            .map(|i| Channel::Command(cfg.command_name(i), cfg.command[i].clone())),
    );
    v
}

/// The human lines of a payload: a title and the sentence, and the key for de-duplication.
fn message(p: &Value) -> (String, String) {
    let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("");
    let title = match s("level") {
        "page" => format!(
            "roger: {} needs you ({} {})",
            s("run"),
            s("kind"),
            s("cause")
        ),
        "digest" => format!("roger digest: {}", s("run")),
        _ => format!("roger: {} {}", s("run"), s("kind")),
    };
    let mut body = s("text").to_string();
    if let Some(n) = p.get("repeats").and_then(Value::as_u64).filter(|n| *n > 0) {
        body.push_str(&format!(
            "\nit flaps: {n} more time(s) during the last cooldown"
        ));
    }
    body.push_str(&format!("\nid {}", s("idempotency_key")));
    (title, body)
}

/// Body, content type and extra headers a preset sends.
pub fn render(preset: Preset, p: &Value) -> (Vec<u8>, &'static str, Vec<(String, String)>) {
    let (title, body) = message(p);
    let key = p
        .get("idempotency_key")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut headers = vec![("Idempotency-Key".to_string(), key)];
    let j = |v: Value| v.to_string().into_bytes();
    match preset {
        Preset::Slack => (
            j(json!({ "text": format!("*{title}*\n{body}") })),
            "application/json",
            headers,
        ),
        Preset::Discord => (
            j(json!({ "content": format!("**{title}**\n{body}") })),
            "application/json",
            headers,
        ),
        Preset::Ntfy => {
            let page = p.get("level").and_then(Value::as_str) == Some("page");
            headers.push(("Title".into(), title));
            headers.push((
                "Priority".into(),
                if page { "high" } else { "default" }.into(),
            ));
            headers.push((
                "Tags".into(),
                if page { "rotating_light" } else { "memo" }.into(),
            ));
            (body.into_bytes(), "text/plain; charset=utf-8", headers)
        }
        Preset::Generic => (j(p.clone()), "application/json", headers),
    }
}

fn env(var: &str, what: &str) -> Result<String> {
    std::env::var(var).map_err(|_| anyhow!("{what}: environment variable {var} is not set"))
}

fn webhook(w: &WebhookConfig, payload: &Value) -> Result<()> {
    let url = match (&w.url, &w.url_env) {
        (Some(u), _) => u.clone(),
        (None, Some(v)) => env(v, "webhook url")?,
        (None, None) => bail!("webhook has no url"),
    };
    let (body, ctype, mut headers) = render(w.preset, payload);
    for (k, v) in &w.headers {
        headers.push((k.clone(), v.clone()));
    }
    for (k, var) in &w.headers_env {
        headers.push((k.clone(), env(var, &format!("header {k}"))?));
    }
    let status = post(&url, ctype, &headers, &body, w.timeout.0)?;
    if !(200..300).contains(&status) {
        bail!("HTTP {status}");
    }
    Ok(())
}

/// One request; returns the HTTP status (a non-2xx answer is a status, not an error). Errors
/// name what failed (resolving, connecting, TLS, a timeout) but never the URL.
pub fn request(
    method: &str,
    url: &str,
    ctype: &str,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Duration,
) -> Result<u16> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        bail!("the url must start with http:// or https://");
    }
    let agent = ureq::AgentBuilder::new()
        .timeout(timeout)
        .user_agent(&format!("roger/{}", env!("CARGO_PKG_VERSION")))
        .redirects(0)
        .build();
    let mut req = agent.request(method, url).set("Content-Type", ctype);
    for (k, v) in headers {
        // A value with a line break would smuggle headers; drop it.
        if !v.contains(['\r', '\n']) && !k.contains(['\r', '\n', ':']) {
            req = req.set(k, v);
        }
    }
    match req.send_bytes(body) {
        Ok(answer) => Ok(answer.status()),
        Err(ureq::Error::Status(code, _)) => Ok(code),
        Err(ureq::Error::Transport(t)) => {
            // The transport error's Display carries the URL; its kind and cause do not.
            let cause = std::error::Error::source(&t).map_or(String::new(), |c| format!(": {c}"));
            bail!("{}{cause}", t.kind())
        }
    }
}

pub fn post(
    url: &str,
    ctype: &str,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Duration,
) -> Result<u16> {
    request("POST", url, ctype, headers, body, timeout)
}

fn command(c: &CommandConfig, payload: &Value) -> Result<()> {
    let mut child = Command::new(&c.argv[0])
        .args(&c.argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", c.argv[0]))?;
    let mut text = payload.to_string();
    text.push('\n');
    // A hook that does not read stdin is fine: the broken pipe is not its failure.
    let _ = child.stdin.take().map(|mut i| i.write_all(text.as_bytes()));
    let deadline = Instant::now() + c.timeout.0;
    loop {
        if let Some(st) = child.try_wait()? {
            if st.success() {
                return Ok(());
            }
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let err: String = err.trim().chars().take(200).collect();
            bail!("{} exited with {st}: {err}", c.argv[0]);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} still running after {} s; killed",
                c.argv[0],
                c.timeout.0.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_shape_the_body_and_carry_the_key() {
        let p = json!({"level": "page", "run": "r", "kind": "breaker", "cause": "crash_loop",
            "text": "r breaker crash_loop", "repeats": 3, "idempotency_key": "roger-k-webhook"});
        let (b, _, h) = render(Preset::Slack, &p);
        let v: Value = serde_json::from_slice(&b).unwrap();
        let t = v["text"].as_str().unwrap();
        assert!(
            t.contains("needs you") && t.contains("it flaps: 3") && t.contains("roger-k-webhook"),
            "{t}"
        );
        assert_eq!(h[0], ("Idempotency-Key".into(), "roger-k-webhook".into()));
        let (b, ctype, h) = render(Preset::Ntfy, &p);
        assert!(
            ctype.starts_with("text/plain") && String::from_utf8(b).unwrap().contains("crash_loop")
        );
        assert!(h.contains(&("Priority".into(), "high".into())));
        let (b, _, _) = render(Preset::Generic, &p);
        assert_eq!(serde_json::from_slice::<Value>(&b).unwrap(), p);
        assert!(
            serde_json::from_slice::<Value>(&render(Preset::Discord, &p).0).unwrap()["content"]
                .is_string()
        );
    }

    #[test]
    fn errors_name_what_failed_never_the_url() {
        // A port nothing listens on: plain http, and https (TLS is attempted, never reached).
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        for scheme in ["http", "https"] {
            let url = format!("{scheme}://127.0.0.1:{port}/services/T/B/SECRET");
            let e = post(&url, "text/plain", &[], b"x", Duration::from_secs(5))
                .unwrap_err()
                .to_string();
            assert!(!e.contains("SECRET") && !e.contains("/services"), "{e}");
            assert!(e.to_lowercase().contains("connect"), "{e}");
        }
        let e = post(
            "ftp://x/SECRET",
            "text/plain",
            &[],
            b"",
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("http://") && !e.contains("SECRET"), "{e}");
    }

    /// https really speaks TLS: against a plain-HTTP server it fails in the handshake instead
    /// of sending the payload in clear text.
    #[test]
    fn https_speaks_tls() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        let got = std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            buf.truncate(n);
            buf
        });
        let url = format!("https://127.0.0.1:{port}/hook");
        let r = post(&url, "text/plain", &[], b"PAYLOAD", Duration::from_secs(5));
        let first = got.join().unwrap();
        assert!(r.is_err(), "{r:?}");
        assert_eq!(first.first(), Some(&0x16), "a TLS handshake record first");
        assert!(!String::from_utf8_lossy(&first).contains("PAYLOAD"));
    }

    #[test]
    fn a_failing_hook_says_why() {
        let c = CommandConfig {
            name: None,
            argv: vec![
                "sh".into(),
                "-c".into(),
                "cat >/dev/null; echo nope >&2; exit 3".into(),
            ],
            timeout: crate::config::units::Dur::secs(10),
        };
        let e = command(&c, &json!({})).unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
        let ok = CommandConfig {
            argv: vec!["true".into()],
            ..c
        };
        command(&ok, &json!({})).unwrap();
    }
}
