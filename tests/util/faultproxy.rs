//! A fault-injecting HTTP/1.1 proxy for the remote tests, between roger and the S3 server
//! (tests/util/s3.rs). The client talks plain HTTP to the proxy as if it were the endpoint;
//! each request is read whole (Content-Length or chunked body), forwarded to the upstream on a
//! connection of its own with the `Host` header unchanged (the client signed it; moto accepts
//! any host), and the upstream's answer is read whole and sent back on the client's
//! connection, which stays open (keep-alive: the AWS clients reuse connections, and moto
//! closes its own after every response).
//!
//! Faults are armed at runtime through the handle, each for the next `n` requests a
//! [`Matcher`] accepts (method + a substring of the path and query), counting down; the first
//! armed fault that matches a request fires. Every request is logged ([`FaultProxy::requests`])
//! before its answer goes out, so a test that has its answer sees it in the log.
//!
//! Requests and responses are held in memory whole: meant for test-sized objects (tens of
//! MiB), not the benchmark's GiBs. The proxy stops when dropped, and by itself after 15
//! minutes; each connection ends after 2 minutes idle.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which requests a fault applies to: `method` (empty: any) and a substring of the request
/// target, path and query as sent (`"partNumber=2"`, `"uploads"`, `"latest.json"`; empty: any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub method: String,
    pub needle: String,
}

/// `on("PUT", "partNumber=2")`; `on("", "latest.json")` for any method.
pub fn on(method: &str, needle: &str) -> Matcher {
    Matcher {
        method: method.to_ascii_uppercase(),
        needle: needle.to_string(),
    }
}

impl Matcher {
    pub fn matches(&self, method: &str, target: &str) -> bool {
        (self.method.is_empty() || self.method.eq_ignore_ascii_case(method))
            && target.contains(&self.needle)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Part of the request body read, then the connection reset (RST): nothing forwarded.
    ResetMidBody,
    /// Answered 503 with S3's `SlowDown` error body: nothing forwarded.
    SlowDown,
    /// A PUT forwarded with the first half of its body only (Content-Length adjusted), the
    /// upstream's answer (200) passed back: a server that stored fewer bytes.
    TruncateStored,
    /// One byte of a 2xx response body flipped (the middle one, XOR 0x01).
    FlipByte,
    /// The connection closed with a reset as soon as accepted (or at its next request).
    Refused,
}

/// One request as the proxy saw it.
#[derive(Debug, Clone)]
pub struct Logged {
    /// Which client connection (1, 2, ... in accept order).
    pub conn: u64,
    pub method: String,
    /// Path and query as sent.
    pub target: String,
    /// The status sent back; `None` when the connection was reset instead.
    pub status: Option<u16>,
    pub fault: Option<Fault>,
    /// Request body bytes received from the client (for a reset: those read before it).
    pub body_len: usize,
    /// Request body bytes forwarded upstream (`None`: not forwarded).
    pub forwarded_len: Option<usize>,
}

struct Armed {
    fault: Fault,
    left: usize,
    matcher: Matcher,
}

#[derive(Default)]
struct State {
    armed: Mutex<Vec<Armed>>,
    refuse: AtomicBool,
    stop: AtomicBool,
    conns: AtomicU64,
    log: Mutex<Vec<Logged>>,
}

impl State {
    /// The first armed fault matching the request, counted down; its index to give it back.
    fn take(&self, method: &str, target: &str) -> Option<(Fault, usize)> {
        let mut armed = self.armed.lock().unwrap();
        let (i, a) = armed
            .iter_mut()
            .enumerate()
            .find(|(_, a)| a.left > 0 && a.matcher.matches(method, target))?;
        a.left -= 1;
        Some((a.fault, i))
    }

    /// A fault taken for a request it turned out not to apply to (a flip on an empty or error
    /// body, a truncation of an empty body) is armed again.
    fn give_back(&self, i: usize) {
        self.armed.lock().unwrap()[i].left += 1;
    }

    fn log(&self, l: Logged) {
        self.log.lock().unwrap().push(l);
    }
}

pub struct FaultProxy {
    port: u16,
    upstream: SocketAddr,
    state: Arc<State>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1:0 and forwards to `upstream` (e.g. `S3Server::addr()`).
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind the fault proxy");
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let st = state.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !st.stop.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(900) {
                match l.accept() {
                    Ok((c, _)) => {
                        let id = st.conns.fetch_add(1, Ordering::SeqCst) + 1;
                        let st = st.clone();
                        std::thread::spawn(move || serve(c, id, upstream, &st));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        FaultProxy {
            port,
            upstream,
            state,
        }
    }

    /// `http://127.0.0.1:PORT`: give this to the client as its S3 endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    fn arm(&self, fault: Fault, n: usize, matcher: Matcher) {
        self.state.armed.lock().unwrap().push(Armed {
            fault,
            left: n,
            matcher,
        });
    }

    /// The next `n` matching requests: part of the body read, then the connection reset.
    pub fn reset_mid_body(&self, n: usize, m: Matcher) {
        self.arm(Fault::ResetMidBody, n, m);
    }

    /// The next `n` matching requests: 503 SlowDown, not forwarded.
    pub fn slow_down(&self, n: usize, m: Matcher) {
        self.arm(Fault::SlowDown, n, m);
    }

    /// The next `n` matching PUTs with a body: the upstream stores the first half, the client
    /// gets the upstream's 200. A body sent `aws-chunked` cannot be cut this way: it is
    /// answered 501 `FaultProxyCannotTruncate` instead, so the test fails visibly. Cutting a
    /// multipart part other than the last can take it under S3's 5 MiB part minimum, which a
    /// server enforcing it rejects at CompleteMultipartUpload: match the last part (or a
    /// single PUT) for an object that is silently short.
    pub fn truncate_stored(&self, n: usize, m: Matcher) {
        self.arm(Fault::TruncateStored, n, m);
    }

    /// The next `n` matching requests answered 2xx with a body: one byte of it flipped.
    pub fn flip_byte_in_response(&self, n: usize, m: Matcher) {
        self.arm(Fault::FlipByte, n, m);
    }

    /// From now on every connection is reset as soon as it is accepted, and open ones at
    /// their next request, until [`accept_again`](Self::accept_again).
    pub fn refuse(&self) {
        self.state.refuse.store(true, Ordering::SeqCst);
    }

    pub fn accept_again(&self) {
        self.state.refuse.store(false, Ordering::SeqCst);
    }

    /// Disarms every fault and stops refusing.
    pub fn clear(&self) {
        self.state.armed.lock().unwrap().clear();
        self.accept_again();
    }

    /// How many armed faults have not fired yet (all kinds together).
    pub fn pending(&self) -> usize {
        self.state
            .armed
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.left)
            .sum()
    }

    /// Every request so far, in the order their handling ended.
    pub fn requests(&self) -> Vec<Logged> {
        self.state.log.lock().unwrap().clone()
    }

    /// How many logged requests `m` matches.
    pub fn count(&self, m: &Matcher) -> usize {
        self.requests()
            .iter()
            .filter(|l| l.fault != Some(Fault::Refused) && m.matches(&l.method, &l.target))
            .count()
    }

    /// How many times `fault` fired.
    pub fn fired(&self, fault: Fault) -> usize {
        self.requests()
            .iter()
            .filter(|l| l.fault == Some(fault))
            .count()
    }

    /// Client connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state.conns.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
    }
}

/// Close with a reset (SO_LINGER 0), as a dying peer or middlebox does.
fn reset(c: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket this function owns, with a correctly sized linger.
    unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(c);
}

struct Head {
    /// Request: method, target, version. Response: version, status, reason.
    first: [String; 3],
    headers: Vec<(String, String)>,
}

impl Head {
    fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }
    fn has_token(&self, name: &str, token: &str) -> bool {
        self.get(name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    }
}

/// A request or status line and its headers; `None` at a clean end of stream before it.
fn read_head(r: &mut impl BufRead) -> std::io::Result<Option<Head>> {
    let mut lines = Vec::new();
    let mut total = 0;
    loop {
        let mut line = Vec::new();
        let n = r.read_until(b'\n', &mut line)?;
        if n == 0 {
            if lines.is_empty() {
                return Ok(None);
            }
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        total += n;
        if total > 64 << 10 {
            return Err(std::io::Error::other("head over 64 KiB"));
        }
        let line = String::from_utf8_lossy(&line)
            .trim_end_matches(['\r', '\n'])
            .to_string();
        if line.is_empty() {
            if lines.is_empty() {
                continue; // stray CRLF between messages
            }
            break;
        }
        lines.push(line);
    }
    let mut first = lines[0].splitn(3, ' ').map(str::to_string);
    let first = [
        first.next().unwrap_or_default(),
        first.next().unwrap_or_default(),
        first.next().unwrap_or_default(),
    ];
    let headers = lines[1..]
        .iter()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    Ok(Some(Head { first, headers }))
}

/// The message body the headers announce: chunked (de-chunked; trailers dropped), a
/// Content-Length, or — `to_eof`, responses only — everything until the peer closes.
fn read_body(r: &mut impl BufRead, h: &Head, to_eof: bool) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    if h.has_token("transfer-encoding", "chunked") {
        loop {
            let mut line = String::new();
            r.read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16)
                .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let mut t = String::new();
                    if r.read_line(&mut t)? == 0 || t.trim().is_empty() {
                        return Ok(body);
                    }
                }
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            let mut crlf = String::new();
            r.read_line(&mut crlf)?;
        }
    }
    if let Some(n) = h.get("content-length") {
        let n: usize = n
            .parse()
            .map_err(|_| std::io::Error::other(format!("bad content-length {n:?}")))?;
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else if to_eof {
        r.read_to_end(&mut body)?;
    }
    Ok(body)
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "expect",
];

struct Upstream {
    head: Head,
    body: Vec<u8>,
}

fn forward(
    upstream: SocketAddr,
    req: &Head,
    body: &[u8],
    truncated: bool,
) -> std::io::Result<Upstream> {
    let mut u = TcpStream::connect_timeout(&upstream, Duration::from_secs(5))?;
    u.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut out = format!("{} {} HTTP/1.1\r\n", req.first[0], req.first[1]);
    for (k, v) in &req.headers {
        if !HOP_BY_HOP.contains(&k.to_ascii_lowercase().as_str()) {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    let had_length = req.get("content-length").is_some() || req.get("transfer-encoding").is_some();
    if had_length || !body.is_empty() || truncated {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("Connection: close\r\n\r\n");
    u.write_all(out.as_bytes())?;
    u.write_all(body)?;
    u.flush()?;
    let mut r = BufReader::new(u);
    loop {
        let head = read_head(&mut r)?.ok_or(std::io::ErrorKind::UnexpectedEof)?;
        let status: u16 = head.first[1].parse().unwrap_or(0);
        if status == 100 {
            continue;
        }
        let bodiless = req.first[0].eq_ignore_ascii_case("HEAD")
            || (100..200).contains(&status)
            || status == 204
            || status == 304;
        let body = if bodiless {
            Vec::new()
        } else {
            read_body(&mut r, &head, true)?
        };
        return Ok(Upstream { head, body });
    }
}

fn serve(c: TcpStream, conn: u64, upstream: SocketAddr, st: &State) {
    if st.refuse.load(Ordering::SeqCst) {
        st.log(Logged {
            conn,
            method: String::new(),
            target: String::new(),
            status: None,
            fault: Some(Fault::Refused),
            body_len: 0,
            forwarded_len: None,
        });
        return reset(c);
    }
    let _ = c.set_nonblocking(false);
    let _ = c.set_read_timeout(Some(Duration::from_secs(120)));
    let Ok(read_half) = c.try_clone() else { return };
    let mut r = BufReader::new(read_half);
    let mut w = c;
    loop {
        let Ok(Some(req)) = read_head(&mut r) else {
            return;
        };
        let (method, target) = (req.first[0].clone(), req.first[1].clone());
        let mut entry = Logged {
            conn,
            method: method.clone(),
            target: target.clone(),
            status: None,
            fault: None,
            body_len: 0,
            forwarded_len: None,
        };
        if st.refuse.load(Ordering::SeqCst) {
            entry.fault = Some(Fault::Refused);
            st.log(entry);
            return reset(w);
        }
        let keep_alive = if req.first[2].eq_ignore_ascii_case("HTTP/1.0") {
            req.has_token("connection", "keep-alive")
        } else {
            !req.has_token("connection", "close")
        };
        if req.has_token("expect", "100-continue")
            && w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").is_err()
        {
            return;
        }
        let taken = st.take(&method, &target);
        if let Some((Fault::ResetMidBody, _)) = taken {
            // Half of a Content-Length body (a byte of a chunked one), then the reset.
            let want = req
                .get("content-length")
                .and_then(|n| n.parse::<usize>().ok())
                .map_or(1, |n| n / 2);
            let mut part = vec![0u8; want];
            let got = r.read_exact(&mut part).map_or(0, |_| want);
            entry.fault = Some(Fault::ResetMidBody);
            entry.body_len = got;
            st.log(entry);
            return reset(w);
        }
        let Ok(body) = read_body(&mut r, &req, false) else {
            return;
        };
        entry.body_len = body.len();
        let mut fault = taken.map(|(f, _)| f);
        let aws_chunked = req
            .get("content-encoding")
            .is_some_and(|v| v.contains("aws-chunked"));
        let answer: (String, Vec<(String, String)>, Vec<u8>, bool) = match taken {
            Some((Fault::SlowDown, _)) => {
                let xml = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><Resource>{}</Resource><RequestId>faultproxy-{conn}</RequestId></Error>",
                    target.split('?').next().unwrap_or("")
                );
                (
                    "503 Slow Down".into(),
                    vec![("Content-Type".into(), "application/xml".into())],
                    xml.into_bytes(),
                    false,
                )
            }
            Some((Fault::TruncateStored, _)) if aws_chunked => (
                "501 Not Implemented".into(),
                vec![("Content-Type".into(), "application/xml".into())],
                b"<Error><Code>FaultProxyCannotTruncate</Code><Message>the body is aws-chunked; truncate_stored needs a plain body</Message></Error>".to_vec(),
                false,
            ),
            _ => {
                let mut fwd = &body[..];
                match taken {
                    Some((Fault::TruncateStored, i)) => {
                        if method.eq_ignore_ascii_case("PUT") && !body.is_empty() {
                            fwd = &body[..body.len() / 2];
                        } else {
                            st.give_back(i);
                            fault = None;
                        }
                    }
                    Some((Fault::FlipByte, _)) | None => {}
                    Some(_) => unreachable!("handled above"),
                }
                entry.forwarded_len = Some(fwd.len());
                match forward(upstream, &req, fwd, fault == Some(Fault::TruncateStored)) {
                    Ok(mut up) => {
                        let status: u16 = up.head.first[1].parse().unwrap_or(0);
                        if let Some((Fault::FlipByte, i)) = taken {
                            if (200..300).contains(&status) && !up.body.is_empty() {
                                let mid = up.body.len() / 2;
                                up.body[mid] ^= 0x01;
                            } else {
                                st.give_back(i);
                                fault = None;
                            }
                        }
                        let bodiless = method.eq_ignore_ascii_case("HEAD")
                            || status == 204
                            || status == 304;
                        let headers = up
                            .head
                            .headers
                            .into_iter()
                            .filter(|(k, _)| {
                                let k = k.to_ascii_lowercase();
                                (bodiless && k == "content-length")
                                    || !HOP_BY_HOP.contains(&k.as_str())
                            })
                            .collect();
                        (
                            format!("{} {}", up.head.first[1], up.head.first[2]),
                            headers,
                            up.body,
                            bodiless,
                        )
                    }
                    Err(e) => (
                        "502 Bad Gateway".into(),
                        vec![("Content-Type".into(), "text/plain".into())],
                        format!("fault proxy: upstream {upstream}: {e}").into_bytes(),
                        false,
                    ),
                }
            }
        };
        let (status_line, headers, resp_body, bodiless) = answer;
        entry.status = status_line.split(' ').next().and_then(|s| s.parse().ok());
        entry.fault = fault;
        let mut out = format!("HTTP/1.1 {status_line}\r\n");
        for (k, v) in &headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        if !bodiless {
            out.push_str(&format!("Content-Length: {}\r\n", resp_body.len()));
        }
        out.push_str(if keep_alive {
            "Connection: keep-alive\r\n\r\n"
        } else {
            "Connection: close\r\n\r\n"
        });
        st.log(entry);
        let sent = w
            .write_all(out.as_bytes())
            .and_then(|_| {
                if bodiless || method.eq_ignore_ascii_case("HEAD") {
                    Ok(())
                } else {
                    w.write_all(&resp_body)
                }
            })
            .and_then(|_| w.flush());
        if sent.is_err() || !keep_alive {
            return;
        }
    }
}
