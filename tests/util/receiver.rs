//! A loopback HTTP receiver for the notify tests: listens on 127.0.0.1:0, answers each
//! request with the next status of a script (the last one repeats), keeps every request, and
//! stops by itself when dropped or after five minutes, whichever comes first.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header lines as sent ("Name: value").
    pub head: String,
    pub body: String,
    pub status: u16,
}

impl Request {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

pub struct Receiver {
    pub port: u16,
    got: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
}

impl Receiver {
    pub fn start(script: &[u16]) -> Receiver {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, s, script) = (got.clone(), stop.clone(), script.to_vec());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !s.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(300) {
                match l.accept() {
                    Ok((c, _)) => {
                        let n = g.lock().unwrap().len();
                        let status = *script.get(n).or(script.last()).unwrap_or(&200);
                        if let Some(r) = serve(c, status) {
                            g.lock().unwrap().push(r);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Receiver { port, got, stop }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.got.lock().unwrap().clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(mut c: TcpStream, status: u16) -> Option<Request> {
    c.set_nonblocking(false).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = c.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = c.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let mut first = head.lines().next().unwrap_or("").split_whitespace();
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").to_string();
    let reason = if status == 200 { "OK" } else { "Unavailable" };
    let _ = c.write_all(
        format!("HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    Some(Request {
        method,
        path,
        head,
        body: String::from_utf8_lossy(&buf[head_end..]).to_string(),
        status,
    })
}
