//! A scriptable HTTP/1.1 origin for cache-mode end-to-end tests: listens on an ephemeral
//! 127.0.0.1 port, records every request it receives, and answers each with whatever
//! the test's handler returns — a normal response, a ranged one, malformed bytes, a
//! close, a reset, a stall, a slow drip, a short body or a delayed answer.
//!
//! Standard library only (plus `httparse`, a dev-dependency): one thread accepts, one
//! thread serves each connection (keep-alive: many requests per connection unless the
//! reply closes it). Dropping the [`Origin`] stops it: the listener is closed, every
//! open connection is shut down, sleeping replies wake up, and every thread is joined.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failed step should fail the test loudly"
)]

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The largest request head the origin accepts (it answers 431 and closes beyond it).
const MAX_HEAD: usize = 64 * 1024;

/// A request as the origin received it.
#[derive(Clone, Debug)]
pub struct Request {
    /// Method, as sent (`GET`, `HEAD`...).
    pub method: String,
    /// Request target, as sent: normally the path with its query (`/a/b.ts?x=1`).
    pub target: String,
    /// Fields, names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body (Content-Length or chunked), empty when none.
    pub body: Vec<u8>,
}

impl Request {
    /// First value of a field (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The path with its query: the target, with scheme and authority removed when the
    /// request was sent in absolute form (`http://host/p?q` → `/p?q`).
    pub fn path(&self) -> &str {
        let t = self.target.as_str();
        for scheme in ["http://", "https://"] {
            if t.len() > scheme.len() && t[..scheme.len()].eq_ignore_ascii_case(scheme) {
                let rest = &t[scheme.len()..];
                return rest.find('/').map_or("/", |i| &rest[i..]);
            }
        }
        t
    }

    /// A single `Range: bytes=a-b` or `bytes=a-` (`None` for no Range, a suffix range,
    /// several ranges, another unit, or garbage).
    pub fn range(&self) -> Option<(u64, Option<u64>)> {
        match parse_range(self.header("range")?)? {
            RangeSpec::From(a, b) => Some((a, b)),
            RangeSpec::Suffix(_) => None,
        }
    }

    /// Whether the client asked to close after this request.
    fn wants_close(&self, http10: bool) -> bool {
        let conn = self.header("connection").unwrap_or("").to_ascii_lowercase();
        let has = |tok: &str| conn.split(',').any(|t| t.trim() == tok);
        has("close") || (http10 && !has("keep-alive"))
    }
}

/// How the origin answers one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A normal response; Content-Length added unless `chunked` (then the body is sent
    /// in chunked encoding, as one chunk) or `headers` already has one. No body for HEAD,
    /// 1xx, 204 and 304.
    Full {
        /// Status code.
        status: u16,
        /// Extra fields.
        headers: Vec<(String, String)>,
        /// Body.
        body: Vec<u8>,
        /// Send it with `Transfer-Encoding: chunked`.
        chunked: bool,
    },
    /// Serve `body` honouring a single Range (206 + Content-Range, 416 + `bytes */LEN`
    /// when unsatisfiable; several ranges or garbage are ignored: 200), with these extra
    /// fields (ETag etc.), 200 otherwise. Also: `Accept-Ranges: bytes`; HEAD gets the
    /// head only; `If-None-Match` matching the ETag in `headers` (or `*`) gets 304;
    /// `If-Range` not equal to that ETag (or to Last-Modified) gets the whole body.
    Ranged {
        /// Extra fields.
        headers: Vec<(String, String)>,
        /// The whole representation.
        body: Arc<Vec<u8>>,
    },
    /// Raw bytes written as the whole response, then close (for malformed heads/bodies).
    Raw(Vec<u8>),
    /// Close the connection without answering.
    Close,
    /// Reset it (SO_LINGER 0 then close).
    Reset,
    /// Say nothing for this long, then close.
    Stall(Duration),
    /// Send the head and body (Content-Length framed) in pieces of `chunk` bytes with
    /// `delay` between them (slow drip); the connection stays open afterwards.
    Drip {
        /// Status code.
        status: u16,
        /// Extra fields.
        headers: Vec<(String, String)>,
        /// Body.
        body: Vec<u8>,
        /// Bytes per write (at least 1).
        chunk: usize,
        /// Pause between writes.
        delay: Duration,
    },
    /// Send a 200 head with Content-Length = body.len() but only `send` body bytes,
    /// then close.
    Short {
        /// Extra fields.
        headers: Vec<(String, String)>,
        /// The body the head announces.
        body: Vec<u8>,
        /// How many of its bytes are sent.
        send: usize,
    },
    /// Interim (1xx) responses first, each `(status, fields)`, then `reply`.
    Interim {
        /// The interim heads, in order.
        heads: Vec<(u16, Vec<(String, String)>)>,
        /// The final answer.
        reply: Box<Reply>,
    },
    /// Wait `delay` before the head, then answer with `reply` (a slow origin, for herd
    /// tests).
    Delayed {
        /// How long to wait.
        delay: Duration,
        /// The answer after it.
        reply: Box<Reply>,
    },
}

/// 200 with `body` and these extra fields (Content-Length added).
pub fn ok(body: &[u8], headers: &[(&str, &str)]) -> Reply {
    Reply::Full {
        status: 200,
        headers: owned(headers),
        body: body.to_vec(),
        chunked: false,
    }
}

/// Any status with these extra fields and an empty body.
pub fn status(code: u16, headers: &[(&str, &str)]) -> Reply {
    Reply::Full {
        status: code,
        headers: owned(headers),
        body: Vec::new(),
        chunked: false,
    }
}

/// [`Reply::Ranged`] for `body` with these extra fields.
pub fn ranged(body: Arc<Vec<u8>>, headers: &[(&str, &str)]) -> Reply {
    Reply::Ranged {
        headers: owned(headers),
        body,
    }
}

/// `&[("a", "b")]` as owned pairs.
pub fn owned(headers: &[(&str, &str)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

/// Whether the origin honours `Range` on its plain replies (the test matrix runs every
/// cache test against both kinds: most origins honour it, `python3 -m http.server` and
/// many application servers do not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeSupport {
    /// A single satisfiable `bytes` range on a `200` [`Reply::Full`] (not chunked, no
    /// `Content-Range` of its own) is answered `206` with `Content-Range`; an
    /// unsatisfiable one `416` (RFC 9110 §14.2, §15.3.7, §15.5.17). Other replies pass
    /// unchanged.
    Honoured,
    /// Every reply is sent as the handler made it (a `200` to a Range request).
    Ignored,
}

impl RangeSupport {
    /// Apply this support to `reply` for `req`.
    pub fn apply(self, reply: Reply, req: &Request) -> Reply {
        if self == RangeSupport::Ignored || req.method.eq_ignore_ascii_case("HEAD") {
            return reply;
        }
        let Reply::Full {
            status: 200,
            headers,
            body,
            chunked: false,
        } = reply
        else {
            return reply;
        };
        let spec = req.header("range").and_then(parse_range);
        let len = body.len() as u64;
        let (a, b) = match spec {
            None => {
                return Reply::Full {
                    status: 200,
                    headers,
                    body,
                    chunked: false,
                }
            }
            Some(RangeSpec::From(a, b)) => (a, b.map_or(len, |b| (b + 1).min(len))),
            Some(RangeSpec::Suffix(n)) => (len.saturating_sub(n), len),
        };
        if has_field(&headers, "content-range") || has_field(&headers, "content-length") {
            return Reply::Full {
                status: 200,
                headers,
                body,
                chunked: false,
            };
        }
        let mut headers = headers;
        if a >= len || a >= b {
            headers.push(("Content-Range".to_owned(), format!("bytes */{len}")));
            return Reply::Full {
                status: 416,
                headers,
                body: Vec::new(),
                chunked: false,
            };
        }
        headers.push((
            "Content-Range".to_owned(),
            format!("bytes {a}-{}/{len}", b - 1),
        ));
        Reply::Full {
            status: 206,
            headers,
            body: body[a as usize..b as usize].to_vec(),
            chunked: false,
        }
    }
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

/// State shared by the accept thread, the connection threads and the [`Origin`].
struct Shared {
    handler: Box<Handler>,
    requests: Mutex<Vec<Request>>,
    accepted: AtomicUsize,
    stopping: AtomicBool,
    /// Wakes sleeping replies (Stall, Drip, Delayed) when the origin stops.
    wake: (Mutex<()>, Condvar),
    /// A clone of every open connection, so stopping can shut them down.
    open: Mutex<Vec<(u64, TcpStream)>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The message of every panic in the handler (or in the origin's own connection
    /// code), with the request it was answering. A panicking handler looks like a
    /// closed connection to the cache (a 502), which a test accepting 5xx would take
    /// for a pass; [`Origin`]'s drop and [`Origin::assert_no_panics`] fail the test.
    panics: Mutex<Vec<String>>,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Sleep `d`, or less if the origin stops. Returns false when it is stopping.
    fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut guard = self.wake.0.lock().unwrap();
        loop {
            if self.stopping() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            guard = self.wake.1.wait_timeout(guard, deadline - now).unwrap().0;
        }
    }
}

/// A running origin; stops on drop.
pub struct Origin {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Origin {
    /// Listen on 127.0.0.1:0 and answer every request with `handler`'s reply.
    pub fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Origin {
        Origin::start_on("127.0.0.1:0", handler)
    }

    /// [`Origin::start`] on `addr` (`ip:port`; the cluster tests listen on the address
    /// of a veth the test created, so nodes in their namespaces reach it).
    pub fn start_on(
        addr: &str,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> Origin {
        let listener = TcpListener::bind(addr).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            handler: Box::new(handler),
            requests: Mutex::new(Vec::new()),
            accepted: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            wake: (Mutex::new(()), Condvar::new()),
            open: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            panics: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("origin-accept".into())
            .spawn(move || accept_loop(&listener, &s))
            .unwrap();
        Origin {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// [`Origin::start`] with `ranges` applied to every reply of `handler`.
    pub fn start_ranges(
        ranges: RangeSupport,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> Origin {
        Origin::start(move |req| ranges.apply(handler(req), req))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received (since the last [`Origin::reset_counts`]), in order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// How many requests had this path (with query; see [`Request::path`]).
    pub fn count(&self, path: &str) -> usize {
        let reqs = self.shared.requests.lock().unwrap();
        reqs.iter().filter(|r| r.path() == path).count()
    }

    /// How many requests, all paths.
    pub fn total(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    /// How many TCP connections were accepted.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Forget the requests and the accepted count.
    pub fn reset_counts(&self) {
        self.shared.requests.lock().unwrap().clear();
        self.shared.accepted.store(0, Ordering::SeqCst);
    }

    /// Fail the test now if the handler panicked on any request so far (the drop checks
    /// this too, but only when the test gets that far without failing otherwise).
    pub fn assert_no_panics(&self) {
        let panics = self.shared.panics.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            panics.is_empty(),
            "the scripted origin's handler panicked ({} time(s)); the cache saw a closed \
             connection instead of an answer:\n{}",
            panics.len(),
            panics.join("\n")
        );
    }

    /// Wait (at most `limit`) until `count(path) >= n`; returns whether it got there.
    pub fn wait_count(&self, path: &str, n: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.count(path) >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.wake.0.lock().unwrap();
            self.shared.wake.1.notify_all();
        }
        // Wake the blocking accept; it sees `stopping` and returns, closing the listener.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(a) = self.acceptor.take() {
            if let Err(p) = a.join() {
                self.shared
                    .panics
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("the accept thread panicked: {}", message(&*p)));
            }
        }
        for (_, s) in self.shared.open.lock().unwrap().iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        let threads = std::mem::take(&mut *self.shared.threads.lock().unwrap());
        for t in threads {
            if let Err(p) = t.join() {
                self.shared
                    .panics
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("a connection thread panicked: {}", message(&*p)));
            }
        }
        // Failing a test that already fails would abort the process (a panic while
        // panicking) and hide its own message.
        if !std::thread::panicking() {
            self.assert_no_panics();
        }
    }
}

/// The text of a panic payload (`panic!` with a literal or a format string).
fn message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_owned()
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next_id = 0u64;
    for conn in listener.incoming() {
        if shared.stopping() {
            return;
        }
        let Ok(stream) = conn else { continue };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        next_id += 1;
        let id = next_id;
        if let Ok(clone) = stream.try_clone() {
            shared.open.lock().unwrap().push((id, clone));
        }
        let s = shared.clone();
        let t = std::thread::Builder::new()
            .name(format!("origin-conn-{id}"))
            .spawn(move || {
                let _ = serve_connection(stream, &s);
                s.open.lock().unwrap().retain(|(i, _)| *i != id);
            })
            .unwrap();
        let mut threads = shared.threads.lock().unwrap();
        // Join the finished ones (dropping a handle would lose a panic it carries).
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut *threads)
            .into_iter()
            .partition(|t| t.is_finished());
        *threads = running;
        threads.push(t);
        drop(threads);
        for t in done {
            if let Err(p) = t.join() {
                shared
                    .panics
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("a connection thread panicked: {}", message(&*p)));
            }
        }
    }
}

/// What happens to the connection after a reply.
enum After {
    KeepAlive,
    /// Send a FIN (shutdown the write side), then close.
    Close,
    /// Close without a FIN: SO_LINGER 0 is set, so the close sends a RST.
    Reset,
}

fn serve_connection(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let Some((req, http10)) = read_request(&mut stream, &mut buf)? else {
            return Ok(());
        };
        if shared.stopping() {
            return Ok(());
        }
        shared.requests.lock().unwrap().push(req.clone());
        let reply =
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (shared.handler)(&req)))
            {
                Ok(reply) => reply,
                Err(p) => {
                    shared
                        .panics
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!(
                            "handler panicked on {} {}: {}",
                            req.method,
                            req.target,
                            message(&*p)
                        ));
                    // What a dead handler looks like from outside: the connection closes.
                    return Ok(());
                }
            };
        match answer(&mut stream, shared, &req, reply)? {
            After::Close => {
                let _ = stream.shutdown(Shutdown::Write);
                return Ok(());
            }
            // Dropping the stream (and, right after, the clone in `open`) closes the
            // socket, which sends the RST.
            After::Reset => return Ok(()),
            After::KeepAlive if req.wants_close(http10) => {
                let _ = stream.shutdown(Shutdown::Write);
                return Ok(());
            }
            After::KeepAlive => {}
        }
    }
}

/// Read one request (head and body). `Ok(None)` on a clean EOF between requests or a
/// head the origin cannot parse (it answers 400/431 first).
fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<(Request, bool)>> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 128];
        let mut parsed = httparse::Request::new(&mut fields);
        match parsed.parse(buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let req = Request {
                    method: parsed.method.unwrap_or("").to_owned(),
                    target: parsed.path.unwrap_or("").to_owned(),
                    headers: parsed
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_ascii_lowercase(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect(),
                    body: Vec::new(),
                };
                let http10 = parsed.version == Some(0);
                buf.drain(..head_len);
                let mut req = req;
                let chunked = req
                    .header("transfer-encoding")
                    .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
                if chunked {
                    match read_chunked(stream, buf)? {
                        Some(body) => req.body = body,
                        None => return Ok(None),
                    }
                } else if let Some(len) = req.header("content-length") {
                    let Ok(len) = len.trim().parse::<usize>() else {
                        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                        return Ok(None);
                    };
                    while buf.len() < len {
                        let n = stream.read(&mut chunk)?;
                        if n == 0 {
                            return Ok(None);
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    req.body = buf.drain(..len).collect();
                }
                return Ok(Some((req, http10)));
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => {
                let _ = stream.write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                return Ok(None);
            }
            Err(_) => {
                let _ = stream.write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                return Ok(None);
            }
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Decode a chunked body from `buf` (refilled from `stream`); trailers are discarded.
fn read_chunked(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<Vec<u8>>> {
    let mut body = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let mut fill = |buf: &mut Vec<u8>| -> io::Result<bool> {
        let n = stream.read(&mut chunk)?;
        buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    };
    loop {
        // Size line.
        let line_end = loop {
            if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            if !fill(buf)? {
                return Ok(None);
            }
        };
        let line = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let hex = line.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(hex, 16) else {
            return Ok(None);
        };
        buf.drain(..line_end + 2);
        if size == 0 {
            // Trailer fields, then the empty line.
            loop {
                if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                    let empty = i == 0;
                    buf.drain(..i + 2);
                    if empty {
                        return Ok(Some(body));
                    }
                } else if !fill(buf)? {
                    return Ok(None);
                }
            }
        }
        while buf.len() < size + 2 {
            if !fill(buf)? {
                return Ok(None);
            }
        }
        body.extend_from_slice(&buf[..size]);
        buf.drain(..size + 2);
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        410 => "Gone",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

fn has_field(headers: &[(String, String)], name: &str) -> bool {
    headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
}

fn field<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A response head: status line, `headers`, then `extra`, then the blank line.
fn head(status: u16, headers: &[(String, String)], extra: &[(&str, String)]) -> Vec<u8> {
    let mut h = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (n, v) in headers {
        h.push_str(&format!("{n}: {v}\r\n"));
    }
    for (n, v) in extra {
        h.push_str(&format!("{n}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

fn bodyless(status: u16) -> bool {
    (100..200).contains(&status) || status == 204 || status == 304
}

/// Whether the reply's own fields ask to close.
fn closes(headers: &[(String, String)]) -> bool {
    field(headers, "connection").is_some_and(|v| v.to_ascii_lowercase().contains("close"))
}

fn answer(
    stream: &mut TcpStream,
    shared: &Shared,
    req: &Request,
    reply: Reply,
) -> io::Result<After> {
    let is_head = req.method.eq_ignore_ascii_case("HEAD");
    match reply {
        Reply::Full {
            status,
            headers,
            body,
            chunked,
        } => {
            let mut extra = Vec::new();
            let no_body = bodyless(status);
            if chunked && !no_body {
                if !has_field(&headers, "transfer-encoding") {
                    extra.push(("Transfer-Encoding", "chunked".to_owned()));
                }
            } else if !no_body && !has_field(&headers, "content-length") {
                extra.push(("Content-Length", body.len().to_string()));
            }
            let mut out = head(status, &headers, &extra);
            if !is_head && !no_body {
                if chunked {
                    if !body.is_empty() {
                        out.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                        out.extend_from_slice(&body);
                        out.extend_from_slice(b"\r\n");
                    }
                    out.extend_from_slice(b"0\r\n\r\n");
                } else {
                    out.extend_from_slice(&body);
                }
            }
            stream.write_all(&out)?;
            Ok(if closes(&headers) {
                After::Close
            } else {
                After::KeepAlive
            })
        }
        Reply::Ranged { headers, body } => {
            ranged_answer(stream, req, is_head, &headers, &body)?;
            Ok(if closes(&headers) {
                After::Close
            } else {
                After::KeepAlive
            })
        }
        Reply::Raw(bytes) => {
            stream.write_all(&bytes)?;
            Ok(After::Close)
        }
        Reply::Close => Ok(After::Close),
        Reply::Reset => {
            reset(stream);
            Ok(After::Reset)
        }
        Reply::Stall(d) => {
            shared.sleep(d);
            Ok(After::Close)
        }
        Reply::Drip {
            status,
            headers,
            body,
            chunk,
            delay,
        } => {
            let mut out = head(
                status,
                &headers,
                &[("Content-Length", body.len().to_string())],
            );
            if !is_head {
                out.extend_from_slice(&body);
            }
            for (i, piece) in out.chunks(chunk.max(1)).enumerate() {
                if i > 0 && !shared.sleep(delay) {
                    return Ok(After::Close);
                }
                stream.write_all(piece)?;
            }
            Ok(if closes(&headers) {
                After::Close
            } else {
                After::KeepAlive
            })
        }
        Reply::Short {
            headers,
            body,
            send,
        } => {
            let mut out = head(200, &headers, &[("Content-Length", body.len().to_string())]);
            if !is_head {
                out.extend_from_slice(&body[..send.min(body.len())]);
            }
            stream.write_all(&out)?;
            Ok(After::Close)
        }
        Reply::Interim { heads, reply } => {
            for (status, fields) in heads {
                stream.write_all(&head(status, &fields, &[]))?;
            }
            answer(stream, shared, req, *reply)
        }
        Reply::Delayed { delay, reply } => {
            if !shared.sleep(delay) {
                return Ok(After::Close);
            }
            answer(stream, shared, req, *reply)
        }
    }
}

/// A parsed single byte range.
enum RangeSpec {
    /// `a-` or `a-b`.
    From(u64, Option<u64>),
    /// `-n`: the last n bytes.
    Suffix(u64),
}

fn parse_range(v: &str) -> Option<RangeSpec> {
    let v = v.trim();
    let (unit, spec) = v.split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") || spec.contains(',') {
        return None;
    }
    let (a, b) = spec.trim().split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let num = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    if a.is_empty() {
        return Some(RangeSpec::Suffix(num(b)?));
    }
    let a = num(a)?;
    if b.is_empty() {
        return Some(RangeSpec::From(a, None));
    }
    let b = num(b)?;
    (b >= a).then_some(RangeSpec::From(a, Some(b)))
}

fn ranged_answer(
    stream: &mut TcpStream,
    req: &Request,
    is_head: bool,
    headers: &[(String, String)],
    body: &[u8],
) -> io::Result<()> {
    let len = body.len() as u64;
    let etag = field(headers, "etag");
    let accept = [("Accept-Ranges", "bytes".to_owned())];
    if let Some(inm) = req.header("if-none-match") {
        let hit = inm.trim() == "*"
            || etag.is_some_and(|e| {
                inm.split(',')
                    .any(|t| t.trim().trim_start_matches("W/") == e.trim_start_matches("W/"))
            });
        if hit {
            return stream.write_all(&head(304, headers, &[]));
        }
    }
    let if_range_ok = match req.header("if-range") {
        None => true,
        Some(v) => {
            let v = v.trim();
            Some(v) == etag.filter(|e| !e.starts_with("W/"))
                || Some(v) == field(headers, "last-modified")
        }
    };
    let spec = req
        .header("range")
        .filter(|_| if_range_ok)
        .and_then(parse_range);
    let (status, start, end, extra) = match spec {
        None => (200, 0, len, vec![accept[0].clone()]),
        Some(spec) => {
            let (a, b) = match spec {
                RangeSpec::From(a, b) => (a, b.map_or(len, |b| (b + 1).min(len))),
                RangeSpec::Suffix(n) => (len.saturating_sub(n), len),
            };
            if a >= len || (matches!(spec, RangeSpec::Suffix(0))) {
                let out = head(
                    416,
                    headers,
                    &[
                        ("Content-Range", format!("bytes */{len}")),
                        ("Content-Length", "0".to_owned()),
                    ],
                );
                return stream.write_all(&out);
            }
            (
                206,
                a,
                b,
                vec![
                    accept[0].clone(),
                    ("Content-Range", format!("bytes {a}-{}/{len}", b - 1)),
                ],
            )
        }
    };
    let mut extra = extra;
    extra.push(("Content-Length", (end - start).to_string()));
    let mut out = head(status, headers, &extra);
    if !is_head {
        out.extend_from_slice(&body[start as usize..end as usize]);
    }
    stream.write_all(&out)
}

/// Abortive close: SO_LINGER {on, 0} makes the close below send a RST.
fn reset(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Linger {
        l_onoff: i32,
        l_linger: i32,
    }
    extern "C" {
        fn setsockopt(fd: i32, level: i32, name: i32, value: *const Linger, len: u32) -> i32;
    }
    const SOL_SOCKET: i32 = 1;
    const SO_LINGER: i32 = 13;
    let linger = Linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the fd is the stream's open socket; `linger` is a valid `struct linger`
    // (two C ints) that outlives the call, and its size is passed as the length.
    let _ = unsafe {
        setsockopt(
            stream.as_raw_fd(),
            SOL_SOCKET,
            SO_LINGER,
            &linger,
            std::mem::size_of::<Linger>() as u32,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    fn get(o: &Origin, raw: &str) -> Vec<u8> {
        let mut s = TcpStream::connect(o.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(raw.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    }

    #[test]
    fn origin_ranges_keepalive_and_counts() {
        let body = Arc::new((0..=255u8).cycle().take(1000).collect::<Vec<u8>>());
        let b = body.clone();
        let o = Origin::start(move |r| match r.path() {
            "/r" => ranged(b.clone(), &[("ETag", "\"e1\"")]),
            "/close" => Reply::Close,
            _ => ok(b"hi", &[]),
        });
        let out = get(
            &o,
            "GET /x HTTP/1.1\r\nHost: a\r\n\r\nGET /r HTTP/1.1\r\nRange: bytes=10-19\r\nConnection: close\r\n\r\n",
        );
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"),
            "{text}"
        );
        assert!(text.contains("206 Partial Content"), "{text}");
        assert!(text.contains("Content-Range: bytes 10-19/1000"), "{text}");
        assert!(out.ends_with(&body[10..20]));
        let out = get(
            &o,
            "GET /r HTTP/1.1\r\nRange: bytes=1000-\r\nConnection: close\r\n\r\n",
        );
        assert!(out.lines().next().unwrap().unwrap().contains("416"));
        assert!(get(&o, "GET /close HTTP/1.1\r\n\r\n").is_empty());
        assert_eq!(o.count("/r"), 2);
        assert_eq!(o.total(), 4);
        assert_eq!(o.accepted(), 3);
        assert_eq!(o.requests()[1].range(), Some((10, Some(19))));
        o.reset_counts();
        assert_eq!(o.total(), 0);
    }

    #[test]
    fn origin_misbehaves_on_request() {
        let o = Origin::start(|r| match r.path() {
            "/reset" => Reply::Reset,
            "/short" => Reply::Short {
                headers: vec![],
                body: vec![b'x'; 100],
                send: 10,
            },
            "/drip" => Reply::Drip {
                status: 200,
                headers: vec![],
                body: b"abcdef".to_vec(),
                chunk: 7,
                delay: Duration::from_millis(5),
            },
            "/chunked" => Reply::Full {
                status: 200,
                headers: vec![],
                body: b"hello".to_vec(),
                chunked: true,
            },
            "/slow" => Reply::Delayed {
                delay: Duration::from_millis(50),
                reply: Box::new(ok(b"late", &[])),
            },
            _ => Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n".to_vec()),
        });
        let mut s = TcpStream::connect(o.addr()).unwrap();
        s.write_all(b"GET /reset HTTP/1.1\r\n\r\n").unwrap();
        let mut b = [0u8; 16];
        let err = s.read(&mut b).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        let out = get(&o, "GET /short HTTP/1.1\r\n\r\n");
        assert!(out.ends_with(b"Content-Length: 100\r\n\r\nxxxxxxxxxx"));
        let out = get(&o, "GET /drip HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert_eq!(out, b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabcdef");
        let out = get(&o, "GET /chunked HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(out.ends_with(b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"));
        let t = Instant::now();
        let out = get(
            &o,
            "POST /slow HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        );
        assert!(t.elapsed() >= Duration::from_millis(50) && out.ends_with(b"late"));
        assert_eq!(o.requests().last().unwrap().body, b"abc");
        assert!(get(&o, "GET /raw HTTP/1.1\r\n\r\n").ends_with(b"Length: x\r\n\r\n"));
    }

    #[test]
    fn a_panicking_handler_fails_the_test_on_drop() {
        let o = Origin::start(|r| {
            assert_eq!(r.path(), "/fine", "unexpected request");
            ok(b"fine", &[])
        });
        assert!(get(&o, "GET /fine HTTP/1.1\r\nConnection: close\r\n\r\n").ends_with(b"fine"));
        o.assert_no_panics();
        // The panicking handler's connection just closes, as the cache would see it.
        assert!(get(&o, "GET /other HTTP/1.1\r\n\r\n").is_empty());
        let text = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(o)))
            .map_err(|p| message(&*p))
            .expect_err("the drop did not fail");
        assert!(
            text.contains("handler panicked on GET /other") && text.contains("unexpected request"),
            "{text}"
        );
    }

    #[test]
    fn origin_stops_promptly_while_stalling() {
        let o = Origin::start(|_| Reply::Stall(Duration::from_secs(60)));
        let mut s = TcpStream::connect(o.addr()).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert!(o.wait_count("/", 1, Duration::from_secs(5)));
        let t = Instant::now();
        drop(o);
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
