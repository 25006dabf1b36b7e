//! The channels at the edge: a webhook (HTTP/1.1 POST over a plain `TcpStream`; presets shape
//! the body for Slack, Discord, ntfy or generic JSON) and a command hook (argv, the event JSON
//! on stdin). https is not linked in (no TLS crate builds offline here): point an https
//! service at a command hook running curl. Secrets come from the environment at send time.

use crate::config::notify::{CommandConfig, NotifyConfig, Preset, WebhookConfig};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
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

/// Split `http://host[:port]/path`; errors never repeat the URL (it may hold a token).
fn split_url(url: &str) -> Result<(String, u16, String)> {
    if url.starts_with("https://") {
        bail!("https is not supported by roger's built-in client; use a [[notify.command]] hook with curl");
    }
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("the url must start with http://"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => (
            h.to_string(),
            p.parse()
                .map_err(|_| anyhow!("the url's port is not a number"))?,
        ),
        _ => (hostport.to_string(), 80),
    };
    Ok((host, port, path.to_string()))
}

/// One HTTP/1.1 request with `Connection: close`; returns the status code.
pub fn request(
    method: &str,
    url: &str,
    ctype: &str,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Duration,
) -> Result<u16> {
    let (host, port, path) = split_url(url)?;
    let deadline = Instant::now() + timeout;
    let addr = (host.trim_matches(['[', ']']), port)
        .to_socket_addrs()
        .map_err(|e| anyhow!("resolving the webhook host: {e}"))?
        .next()
        .ok_or_else(|| anyhow!("the webhook host has no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout).context("connecting")?;
    s.set_write_timeout(Some(timeout))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: roger/{}\r\nConnection: close\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n",
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    for (k, v) in headers {
        // A value with a line break would smuggle headers; drop it.
        if !v.contains(['\r', '\n']) && !k.contains(['\r', '\n', ':']) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body))
        .context("sending")?;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(2).any(|w| w == b"\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("no answer within {} s", timeout.as_secs());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf).context("reading the answer")? {
            0 => break,
            n => got.extend_from_slice(&buf[..n]),
        }
        if got.len() > 64 * 1024 {
            break;
        }
    }
    let line = String::from_utf8_lossy(&got);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .filter(|_| line.starts_with("HTTP/"))
        .ok_or_else(|| anyhow!("the answer is not HTTP"))
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
    fn urls_split_and_https_is_refused_in_words() {
        assert_eq!(
            split_url("http://127.0.0.1:8080/a/b").unwrap(),
            ("127.0.0.1".into(), 8080, "/a/b".into())
        );
        assert_eq!(
            split_url("http://ntfy.local").unwrap(),
            ("ntfy.local".into(), 80, "/".into())
        );
        let e = split_url("https://hooks.slack.com/services/T/B/SECRET")
            .unwrap_err()
            .to_string();
        assert!(e.contains("curl") && !e.contains("SECRET"), "{e}");
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
