//! A loopback fake of the cloud metadata services roger polls: AWS IMDSv2 (a PUT for the
//! session token, then `spot/instance-action` with it), GCE `instance/preempted`, Azure
//! Scheduled Events. Quiet until `switch_after`, then "instance-action in `notice`": every
//! answer after that announces the end at switch time + notice. Keeps every request line and
//! stops when dropped (or after five minutes).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

pub struct Metadata {
    pub port: u16,
    got: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

const TOKEN: &str = "tok-roger-test";

impl Metadata {
    pub fn start(switch_after: Duration, notice: Duration) -> Metadata {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let switch_at = SystemTime::now() + switch_after;
        let (g, s) = (got.clone(), stop.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !s.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(300) {
                match l.accept() {
                    Ok((c, _)) => {
                        if let Some(line) = serve(c, switch_at, notice) {
                            g.lock().unwrap().push(line);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Metadata { port, got, stop }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// "METHOD path -> status" per request.
    pub fn requests(&self) -> Vec<String> {
        self.got.lock().unwrap().clone()
    }
}

impl Drop for Metadata {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(mut c: TcpStream, switch_at: SystemTime, notice: Duration) -> Option<String> {
    c.set_nonblocking(false).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = c.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let mut first = head.lines().next().unwrap_or("").split_whitespace();
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").to_string();
    let on = SystemTime::now() >= switch_at;
    let end: chrono::DateTime<chrono::Utc> = (switch_at + notice).into();
    let (status, body) = match (method.as_str(), path.split('?').next().unwrap_or("")) {
        ("PUT", "/latest/api/token")
            if header("X-aws-ec2-metadata-token-ttl-seconds").is_some() =>
        {
            (200, TOKEN.to_string())
        }
        ("GET", "/latest/meta-data/spot/instance-action") => {
            if header("X-aws-ec2-metadata-token").as_deref() != Some(TOKEN) {
                (401, String::new())
            } else if on {
                (
                    200,
                    format!(
                        "{{\"action\": \"terminate\", \"time\": \"{}\"}}",
                        end.format("%Y-%m-%dT%H:%M:%SZ")
                    ),
                )
            } else {
                (404, String::new())
            }
        }
        ("GET", "/computeMetadata/v1/instance/preempted")
            if header("Metadata-Flavor").as_deref() == Some("Google") =>
        {
            (200, if on { "TRUE" } else { "FALSE" }.to_string())
        }
        ("GET", "/metadata/scheduledevents") if header("Metadata").as_deref() == Some("true") => {
            let events = if on {
                format!(
                    "[{{\"EventId\":\"e1\",\"EventType\":\"Preempt\",\"ResourceType\":\"VirtualMachine\",\"EventStatus\":\"Scheduled\",\"NotBefore\":\"{}\"}}]",
                    end.format("%a, %d %b %Y %H:%M:%S GMT")
                )
            } else {
                "[]".to_string()
            };
            (
                200,
                format!("{{\"DocumentIncarnation\":1,\"Events\":{events}}}"),
            )
        }
        _ => (400, String::new()),
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        401 => "Unauthorized",
        _ => "Bad Request",
    };
    let _ = c.write_all(
        format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    Some(format!("{method} {path} -> {status}"))
}
