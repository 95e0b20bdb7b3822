//! The origin client against scripted origins on loopback: plain std-thread servers
//! that write exactly the bytes a case needs (including the broken ones), and a rustls
//! server with a throw-away CA for https.
#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use linerate_http::upstream::{ChunkError, Framing, ResponseError};
use linerate_http::StatusCode;

use super::*;
use crate::cacheopts::{OriginOptions, OriginServer};

/// A scripted origin: its address and how many connections it accepted.
struct TestOrigin {
    addr: SocketAddr,
    accepts: Arc<AtomicUsize>,
}

impl TestOrigin {
    fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }
}

/// Serve `listener` with `handler(connection, index)`, one thread per connection.
fn serve_on<F>(listener: TcpListener, handler: F) -> TestOrigin
where
    F: Fn(TcpStream, usize) + Send + Sync + 'static,
{
    let addr = listener.local_addr().unwrap();
    let accepts = Arc::new(AtomicUsize::new(0));
    let counter = accepts.clone();
    let handler = Arc::new(handler);
    thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let handler = handler.clone();
            thread::spawn(move || handler(stream, i));
        }
    });
    TestOrigin { addr, accepts }
}

fn serve<F>(handler: F) -> TestOrigin
where
    F: Fn(TcpStream, usize) + Send + Sync + 'static,
{
    serve_on(TcpListener::bind("127.0.0.1:0").unwrap(), handler)
}

/// One request (head and `Content-Length` body); `None` at end of file.
fn read_request(s: &mut impl Read) -> Option<Vec<u8>> {
    let mut req = Vec::new();
    let mut byte = [0u8; 1];
    while !req.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => req.push(byte[0]),
            _ => return None,
        }
    }
    let text = String::from_utf8_lossy(&req).to_ascii_lowercase();
    let len = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    s.read_exact(&mut body).ok()?;
    req.extend_from_slice(&body);
    Some(req)
}

/// An origin that answers every request, on persistent connections, with `response`.
fn answering(response: &'static [u8]) -> TestOrigin {
    serve(move |mut s, _| {
        while read_request(&mut s).is_some() {
            if s.write_all(response).is_err() {
                return;
            }
        }
    })
}

/// An origin that reads one request, writes `response`, then waits `hold` and closes.
fn once(response: Vec<u8>, hold: Duration) -> TestOrigin {
    serve(move |mut s, _| {
        if read_request(&mut s).is_some() {
            let _ = s.write_all(&response);
            thread::sleep(hold);
        }
    })
}

/// An address where nothing listens.
fn refused_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn server_for(addr: SocketAddr) -> OriginServer {
    OriginServer {
        tls: false,
        host: addr.ip().to_string(),
        port: addr.port(),
        base_path: String::new(),
    }
}

fn options(addrs: &[SocketAddr]) -> OriginOptions {
    let mut o = OriginOptions::new("test", addrs.iter().copied().map(server_for).collect());
    o.connect_timeout = Duration::from_secs(2);
    o.first_byte_timeout = Duration::from_secs(2);
    o.idle_timeout = Duration::from_secs(2);
    o
}

fn client(opts: OriginOptions) -> Origin {
    Origin::new(OriginShared::new(opts).unwrap())
}

fn get(target: &'static [u8]) -> OriginRequest<'static> {
    OriginRequest {
        method: "GET",
        target,
        headers: &[],
        body: b"",
        idempotent: true,
        interim: None,
    }
}

/// The whole body, read in small pieces to cross every buffer boundary.
async fn body_of(r: &mut OriginResponse) -> Result<Vec<u8>, OriginError> {
    let mut out = Vec::new();
    while r.read(&mut out, 7).await? > 0 {}
    Ok(out)
}

fn failures(shared: &OriginShared, server: usize, kind: &str) -> u64 {
    shared.snapshot().servers[server]
        .failures
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, n)| *n)
        .unwrap()
}

#[tokio::test]
async fn simple_response_with_length() {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let origin = serve(move |mut s, _| {
        let req = read_request(&mut s).unwrap();
        tx.lock().unwrap().send(req).unwrap();
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nETag: \"v1\"\r\n\r\nhello world")
            .unwrap();
        thread::sleep(Duration::from_millis(500));
    });
    let mut opts = options(&[origin.addr]);
    opts.servers[0].base_path = "/base".to_owned();
    let c = client(opts);
    let before = unix_ms();
    let mut r = c
        .send(&OriginRequest {
            method: "GET",
            target: b"/seg.ts?x=1",
            headers: &[(b"Accept", b"*/*")],
            body: b"",
            idempotent: true,
            interim: None,
        })
        .await
        .unwrap();
    assert_eq!(r.head.status, 200);
    assert_eq!(r.head.header(b"etag"), Some(&b"\"v1\""[..]));
    assert_eq!(r.content_length(), Some(11));
    assert_eq!(r.server, 0);
    assert!(before <= r.request_time_ms && r.request_time_ms <= r.response_time_ms);
    assert_eq!(body_of(&mut r).await.unwrap(), b"hello world");
    assert!(r.is_released());
    assert_eq!(c.pool(0).idle(), 1);
    let sent = rx.recv().unwrap();
    let expected = format!(
        "GET /base/seg.ts?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: */*\r\n\r\n",
        origin.addr.port()
    );
    assert_eq!(String::from_utf8(sent).unwrap(), expected);
}

#[tokio::test]
async fn keep_alive_reuses_the_connection() {
    let origin = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let c = client(options(&[origin.addr]));
    for _ in 0..3 {
        let mut r = c.send(&get(b"/a")).await.unwrap();
        assert_eq!(body_of(&mut r).await.unwrap(), b"ok");
    }
    assert_eq!(origin.accepts(), 1);
    let snap = c.shared.snapshot();
    let s = &snap.servers[0];
    assert_eq!(
        (s.requests, s.connections_opened, s.connections_reused),
        (3, 1, 2)
    );
    assert_eq!(s.state, ServerState::Up);
    assert_eq!(c.pool(0).open(), 1);
}

#[tokio::test]
async fn chunked_body_then_reuse() {
    let origin = answering(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
    );
    let c = client(options(&[origin.addr]));
    for _ in 0..2 {
        let mut r = c.send(&get(b"/c")).await.unwrap();
        assert_eq!(r.head.framing, Framing::Chunked);
        assert_eq!(r.content_length(), None);
        assert_eq!(body_of(&mut r).await.unwrap(), b"hello world");
        // Finished: every later read says so again.
        assert_eq!(r.read(&mut Vec::new(), 10).await.unwrap(), 0);
    }
    assert_eq!(origin.accepts(), 1);
}

#[tokio::test]
async fn body_until_close() {
    let origin = once(
        b"HTTP/1.1 200 OK\r\n\r\neverything until the end".to_vec(),
        Duration::ZERO,
    );
    let c = client(options(&[origin.addr]));
    let mut r = c.send(&get(b"/u")).await.unwrap();
    assert_eq!(r.head.framing, Framing::UntilClose);
    assert!(!r.head.keep_alive);
    assert_eq!(body_of(&mut r).await.unwrap(), b"everything until the end");
    assert_eq!((c.pool(0).idle(), c.pool(0).open()), (0, 0));
}

#[tokio::test]
async fn head_and_bodiless_statuses() {
    let origin = serve(|mut s, _| {
        while let Some(req) = read_request(&mut s) {
            let resp: &[u8] = if req.starts_with(b"HEAD") {
                b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
            } else if req.starts_with(b"GET /204") {
                b"HTTP/1.1 204 No Content\r\n\r\n"
            } else {
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\nETag: \"x\"\r\n\r\n"
            };
            s.write_all(resp).unwrap();
        }
    });
    let c = client(options(&[origin.addr]));
    let head = OriginRequest {
        method: "HEAD",
        ..get(b"/h")
    };
    for (req, status) in [(head, 200), (get(b"/204"), 204), (get(b"/304"), 304)] {
        let mut r = c.send(&req).await.unwrap();
        assert_eq!(r.head.status, status);
        assert_eq!(r.head.framing, Framing::Empty);
        assert_eq!(r.content_length(), Some(0));
        // Back in the pool before anyone reads the (empty) body.
        assert!(r.is_released());
        assert_eq!(r.read(&mut Vec::new(), 10).await.unwrap(), 0);
    }
    assert_eq!(origin.accepts(), 1);
}

#[tokio::test]
async fn short_body_is_an_error() {
    let origin = once(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello".to_vec(),
        Duration::ZERO,
    );
    let c = client(options(&[origin.addr]));
    let mut r = c.send(&get(b"/s")).await.unwrap();
    let e = body_of(&mut r).await.unwrap_err();
    assert!(
        matches!(
            e,
            OriginError::BodyShort {
                expected: 10,
                got: 5
            }
        ),
        "{e:?}"
    );
    assert!(!e.nothing_received());
    assert_eq!(e.status(), StatusCode::BadGateway);
    assert!(r.read(&mut Vec::new(), 10).await.is_err());
    assert_eq!(failures(&c.shared, 0, "body_short"), 1);
    // A body error does not count against the server's health.
    assert_eq!(c.shared.snapshot().servers[0].consecutive_failures, 0);
}

#[tokio::test]
async fn long_body_in_the_same_write_is_an_error() {
    let origin = once(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA".to_vec(),
        Duration::from_millis(500),
    );
    let c = client(options(&[origin.addr]));
    let mut r = c.send(&get(b"/l")).await.unwrap();
    let mut buf = Vec::new();
    assert_eq!(r.read(&mut buf, 1024).await.unwrap(), 5);
    assert_eq!(buf, b"hello");
    assert!(matches!(
        r.read(&mut buf, 1024).await,
        Err(OriginError::BodyLong)
    ));
    assert_eq!(c.pool(0).open(), 0);
}

/// The body bytes that came with the head are handed over where they lie: all of a
/// small body (the connection pooled at once), the first part of a longer one (the
/// rest from `read`), none when bytes past the end came with them (`read` reports
/// those) or for chunked framing.
#[tokio::test]
async fn body_read_with_the_head_is_handed_over_in_place() {
    let origin = serve(|mut s, _| {
        while let Some(req) = read_request(&mut s) {
            let reply: &[u8] = if req.starts_with(b"GET /whole") {
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
            } else if req.starts_with(b"GET /chunked") {
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
            } else if req.starts_with(b"GET /long") {
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA"
            } else {
                // The head and the first part together, the rest a moment later.
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello")
                    .unwrap();
                thread::sleep(Duration::from_millis(100));
                b" world"
            };
            if s.write_all(reply).is_err() {
                return;
            }
        }
    });
    let c = client(options(&[origin.addr]));
    let mut r = c.send(&get(b"/whole")).await.unwrap();
    let (bytes, range) = r
        .take_ahead(1024)
        .await
        .expect("the body came with the head");
    assert_eq!(&bytes[range], b"hello");
    assert!(r.is_released());
    assert_eq!(c.pool(0).idle(), 1);
    assert_eq!(r.read(&mut Vec::new(), 10).await.unwrap(), 0);

    let mut r = c.send(&get(b"/part")).await.unwrap();
    let (bytes, range) = r
        .take_ahead(1024)
        .await
        .expect("the first part came with the head");
    assert_eq!(&bytes[range], b"hello");
    assert!(!r.is_released());
    assert!(r.take_ahead(1024).await.is_none(), "handed over once");
    assert_eq!(body_of(&mut r).await.unwrap(), b" world");
    assert!(r.is_released());

    let mut r = c.send(&get(b"/chunked")).await.unwrap();
    assert!(r.take_ahead(1024).await.is_none());
    assert_eq!(body_of(&mut r).await.unwrap(), b"hi");

    let mut r = c.send(&get(b"/long")).await.unwrap();
    assert!(
        r.take_ahead(1024).await.is_none(),
        "bytes past the end came too"
    );
    let mut buf = Vec::new();
    assert_eq!(r.read(&mut buf, 1024).await.unwrap(), 5);
    assert!(matches!(
        r.read(&mut buf, 1024).await,
        Err(OriginError::BodyLong)
    ));
    assert_eq!(c.pool(0).open(), 0, "closed after the long body");
    assert_eq!(origin.accepts(), 1);
}

#[tokio::test]
async fn long_body_arriving_later_is_an_error() {
    let origin = serve(|mut s, _| {
        read_request(&mut s).unwrap();
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
            .unwrap();
        thread::sleep(Duration::from_millis(100));
        s.write_all(b"helloEXTRA").unwrap();
        thread::sleep(Duration::from_millis(500));
    });
    let c = client(options(&[origin.addr]));
    let mut r = c.send(&get(b"/l")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The body comes straight from the socket (no more than declared), and the extra
    // bytes are found by the look after its end.
    assert!(matches!(body_of(&mut r).await, Err(OriginError::BodyLong)));
    assert_eq!(failures(&c.shared, 0, "body_long"), 1);
}

#[tokio::test]
async fn broken_chunked_body() {
    let origin = once(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n".to_vec(),
        Duration::from_millis(500),
    );
    let c = client(options(&[origin.addr]));
    let mut r = c.send(&get(b"/b")).await.unwrap();
    let e = body_of(&mut r).await.unwrap_err();
    assert!(
        matches!(e, OriginError::BadChunked(ChunkError::BadLine)),
        "{e:?}"
    );
    assert_eq!(e.as_str(), "bad_chunked");
}

#[tokio::test]
async fn chunked_body_cut_short() {
    let origin = once(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel".to_vec(),
        Duration::ZERO,
    );
    let c = client(options(&[origin.addr]));
    let mut r = c.send(&get(b"/b")).await.unwrap();
    let e = body_of(&mut r).await.unwrap_err();
    assert!(matches!(&e, OriginError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof));
}

#[tokio::test]
async fn oversized_head() {
    let mut resp = b"HTTP/1.1 200 OK\r\n".to_vec();
    while resp.len() < 80 * 1024 {
        resp.extend_from_slice(b"X-Filler: 0123456789012345678901234567890123456789\r\n");
    }
    let origin = once(resp, Duration::from_millis(500));
    let c = client(options(&[origin.addr]));
    let e = c.send(&get(b"/big")).await.unwrap_err();
    assert!(
        matches!(e, OriginError::BadHead(ResponseError::TooLarge)),
        "{e:?}"
    );
    assert_eq!(e.status(), StatusCode::BadGateway);
    // A server that answers, however badly, is up: only unreachability counts.
    assert_eq!(c.shared.snapshot().servers[0].consecutive_failures, 0);
    assert_eq!(failures(&c.shared, 0, "bad_head"), 1);
}

#[tokio::test]
async fn garbage_head() {
    let origin = once(
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n".to_vec(),
        Duration::from_millis(500),
    );
    let c = client(options(&[origin.addr]));
    let e = c.send(&get(b"/g")).await.unwrap_err();
    assert!(
        matches!(e, OriginError::BadHead(ResponseError::Malformed)),
        "{e:?}"
    );
    assert!(!e.nothing_received());
}

#[tokio::test]
async fn first_byte_timeout() {
    let origin = serve(|mut s, _| {
        read_request(&mut s);
        thread::sleep(Duration::from_secs(3));
    });
    let mut opts = options(&[origin.addr]);
    opts.first_byte_timeout = Duration::from_millis(200);
    let c = client(opts);
    let started = std::time::Instant::now();
    let e = c.send(&get(b"/slow")).await.unwrap_err();
    assert!(matches!(e, OriginError::FirstByteTimeout), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(e.status(), StatusCode::GatewayTimeout);
    assert!(e.nothing_received());
}

#[tokio::test]
async fn slow_drip_body_hits_the_idle_timeout() {
    let origin = serve(|mut s, _| {
        read_request(&mut s);
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
            .unwrap();
        thread::sleep(Duration::from_secs(3));
    });
    let mut opts = options(&[origin.addr]);
    opts.idle_timeout = Duration::from_millis(200);
    let c = client(opts);
    let mut r = c.send(&get(b"/drip")).await.unwrap();
    let e = body_of(&mut r).await.unwrap_err();
    assert!(matches!(e, OriginError::IdleTimeout), "{e:?}");
    assert_eq!(e.status(), StatusCode::GatewayTimeout);
}

#[tokio::test]
async fn slow_drip_head_hits_the_idle_timeout() {
    let origin = serve(|mut s, _| {
        read_request(&mut s);
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-").unwrap();
        thread::sleep(Duration::from_secs(3));
    });
    let mut opts = options(&[origin.addr]);
    opts.idle_timeout = Duration::from_millis(200);
    let c = client(opts);
    let e = c.send(&get(b"/drip")).await.unwrap_err();
    assert!(matches!(e, OriginError::IdleTimeout), "{e:?}");
    assert!(!e.nothing_received());
}

#[tokio::test]
async fn connection_refused() {
    let c = client(options(&[refused_addr()]));
    let e = c.send(&get(b"/")).await.unwrap_err();
    assert!(matches!(e, OriginError::Connect(_)), "{e:?}");
    assert_eq!(e.status(), StatusCode::BadGateway);
    assert!(e.nothing_received());
    assert_eq!(failures(&c.shared, 0, "connect"), 1);
}

#[tokio::test]
async fn reset_before_the_response() {
    let origin = serve(|mut s, _| {
        read_request(&mut s);
        // SO_LINGER 0: close sends RST instead of FIN.
        socket2::SockRef::from(&s)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    });
    let c = client(options(&[origin.addr]));
    let e = c.send(&get(b"/r")).await.unwrap_err();
    assert!(matches!(e, OriginError::Reset), "{e:?}");
}

#[tokio::test]
async fn idempotent_requests_move_to_the_next_server() {
    let good = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let opts = options(&[refused_addr(), good.addr]);
    let shared = OriginShared::new(opts).unwrap();
    let c = Origin::new(shared.clone());
    let mut r = c.send(&get(b"/")).await.unwrap();
    assert_eq!(r.server, 1);
    assert_eq!(body_of(&mut r).await.unwrap(), b"ok");

    // Not idempotent: no second server (a fresh client starts at server 0 again).
    let c = Origin::new(shared);
    let post = OriginRequest {
        method: "POST",
        body: b"data",
        idempotent: false,
        ..get(b"/p")
    };
    let e = c.send(&post).await.unwrap_err();
    assert!(matches!(e, OriginError::Connect(_)), "{e:?}");
}

#[tokio::test]
async fn servers_go_down_and_come_back() {
    // Two servers: one refuses connections, one answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = listener.local_addr().unwrap();
    drop(listener);
    let live = serve(|mut s, _| {
        while read_request(&mut s).is_some() {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let mut opts = options(&[dead, live.addr]);
    opts.down_after = 2;
    opts.down_for = Duration::from_millis(300);
    let c = client(opts);
    // Each request starts at the next server; one that fails before any byte moves on.
    for _ in 0..4 {
        assert_eq!(c.send(&get(b"/")).await.unwrap().head.status, 200);
    }
    let snap = c.shared.snapshot();
    assert_eq!(snap.servers[0].state, ServerState::Down);
    assert_eq!(snap.servers[0].consecutive_failures, 2);
    assert_eq!(snap.servers[1].state, ServerState::Up);
    // While down it is skipped: no more attempts on it.
    for _ in 0..3 {
        assert_eq!(c.send(&get(b"/")).await.unwrap().head.status, 200);
    }
    assert_eq!(c.shared.snapshot().servers[0].requests, 2);

    // Half-open after the period: tried again, and a success brings it back.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let back = serve_on(TcpListener::bind(dead).unwrap(), |mut s, _| {
        while read_request(&mut s).is_some() {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    for _ in 0..2 {
        assert_eq!(c.send(&get(b"/")).await.unwrap().head.status, 200);
    }
    let snap = c.shared.snapshot();
    assert_eq!(snap.servers[0].state, ServerState::Up);
    assert_eq!(snap.servers[0].consecutive_failures, 0);
    assert_eq!(back.accepts(), 1);
}

#[tokio::test]
async fn when_every_server_is_down_the_one_due_back_first_is_still_tried() {
    let a = refused_addr();
    let b = refused_addr();
    let mut opts = options(&[a, b]);
    opts.down_after = 1;
    opts.down_for = Duration::from_secs(60);
    let c = client(opts);
    assert!(matches!(
        c.send(&get(b"/")).await,
        Err(OriginError::Connect(_))
    ));
    let snap = c.shared.snapshot();
    assert!(snap.servers.iter().all(|s| s.state == ServerState::Down));
    let before: u64 = snap.servers.iter().map(|s| s.requests).sum();
    // Not an instant AllDown: a real attempt (a cache may still serve stale if it fails).
    let e = c.send(&get(b"/")).await.unwrap_err();
    assert!(matches!(e, OriginError::Connect(_)), "{e:?}");
    let after: u64 = c.shared.snapshot().servers.iter().map(|s| s.requests).sum();
    assert_eq!(after, before + 1);
}

#[tokio::test]
async fn a_single_server_is_never_marked_down() {
    let mut opts = options(&[refused_addr()]);
    opts.down_after = 1;
    let c = client(opts);
    for _ in 0..3 {
        assert!(matches!(
            c.send(&get(b"/")).await,
            Err(OriginError::Connect(_))
        ));
    }
    let snap = c.shared.snapshot();
    assert_eq!(snap.servers[0].state, ServerState::Up);
    assert_eq!(
        snap.servers[0].requests, 3,
        "every request tried the server"
    );
}

#[tokio::test]
async fn an_origin_that_closes_on_purpose_is_not_counted_as_down() {
    // Closes every connection without answering; a second server answers.
    let closer = serve(|mut s, _| {
        let _ = read_request(&mut s);
    });
    let live = serve(|mut s, _| {
        while read_request(&mut s).is_some() {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let mut opts = options(&[closer.addr, live.addr]);
    opts.down_after = 1;
    let c = client(opts);
    for _ in 0..4 {
        let _ = c.send(&get(b"/")).await;
    }
    let snap = c.shared.snapshot();
    assert_eq!(snap.servers[0].state, ServerState::Up);
    assert!(failures(&c.shared, 0, "closed") >= 1);
}

#[tokio::test]
async fn interim_responses_reach_the_sink_as_they_arrive() {
    let origin = serve(|mut s, _| {
        if read_request(&mut s).is_some() {
            let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nConnection: x\r\nX: 1\r\n\r\n");
            thread::sleep(Duration::from_millis(200));
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    let c = client(options(&[origin.addr]));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let req = OriginRequest {
        interim: Some(&tx),
        ..get(b"/")
    };
    let send = c.send(&req);
    tokio::pin!(send);
    // The 103 arrives while the final head is still 200 ms away; the 100 (which we never
    // asked for) and the Connection-listed field are not passed on.
    let early = tokio::select! {
        h = rx.recv() => h.unwrap(),
        _ = &mut send => panic!("the final response came first"),
    };
    assert_eq!(
        early,
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
    );
    let mut r = send.await.unwrap();
    assert_eq!(body_of(&mut r).await.unwrap(), b"ok");
    assert!(rx.try_recv().is_err());
}

#[tokio::test]
async fn pooled_connection_closed_by_the_origin_is_not_used() {
    // Each connection answers one request, then the origin closes it.
    let origin = serve(|mut s, _| {
        if read_request(&mut s).is_some() {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    let c = client(options(&[origin.addr]));
    for _ in 0..2 {
        let mut r = c.send(&get(b"/")).await.unwrap();
        assert_eq!(body_of(&mut r).await.unwrap(), b"ok");
        // Let the FIN arrive.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(origin.accepts(), 2);
    assert_eq!(c.shared.snapshot().servers[0].connections_reused, 0);
}

#[tokio::test]
async fn dead_pooled_connection_is_retried_on_a_fresh_one() {
    // The first connection answers once, then takes the next request and closes
    // without an answer (the keep-alive race); later connections answer everything.
    let origin = serve(|mut s, i| {
        let mut served = 0;
        while read_request(&mut s).is_some() {
            if i == 0 && served == 1 {
                return;
            }
            served += 1;
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    let c = client(options(&[origin.addr]));
    let mut r = c.send(&get(b"/")).await.unwrap();
    body_of(&mut r).await.unwrap();
    let mut r = c.send(&get(b"/")).await.unwrap();
    assert_eq!(body_of(&mut r).await.unwrap(), b"ok");
    assert_eq!(origin.accepts(), 2);
    let snap = c.shared.snapshot();
    // The dead connection is not the server's failure.
    assert_eq!(snap.servers[0].consecutive_failures, 0);
    assert_eq!(failures(&c.shared, 0, "closed"), 0);
}

#[tokio::test]
async fn non_idempotent_request_is_not_resent_after_it_was_written() {
    let origin = serve(|mut s, i| {
        let mut served = 0;
        while read_request(&mut s).is_some() {
            if i == 0 && served == 1 {
                return;
            }
            served += 1;
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    let c = client(options(&[origin.addr]));
    let mut r = c.send(&get(b"/")).await.unwrap();
    body_of(&mut r).await.unwrap();
    let post = OriginRequest {
        method: "POST",
        body: b"x",
        idempotent: false,
        ..get(b"/p")
    };
    let e = c.send(&post).await.unwrap_err();
    assert!(matches!(e, OriginError::Closed), "{e:?}");
    assert_eq!(origin.accepts(), 1);
}

#[tokio::test]
async fn connection_cap_waits_for_a_free_connection() {
    let origin = serve(|mut s, _| {
        while read_request(&mut s).is_some() {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe");
            thread::sleep(Duration::from_millis(200));
            let _ = s.write_all(b"llo");
        }
    });
    let mut opts = options(&[origin.addr]);
    opts.max_connections = 1;
    let c = Rc::new(client(opts));
    tokio::task::LocalSet::new()
        .run_until(async {
            let first = c.send(&get(b"/1")).await.unwrap();
            let c2 = c.clone();
            // The first body finishes in the background; the second request waits for
            // its connection instead of opening another.
            let reader = tokio::task::spawn_local(async move {
                let mut first = first;
                body_of(&mut first).await.unwrap()
            });
            let mut second = c2.send(&get(b"/2")).await.unwrap();
            assert_eq!(reader.await.unwrap(), b"hello");
            assert_eq!(body_of(&mut second).await.unwrap(), b"hello");
        })
        .await;
    assert_eq!(origin.accepts(), 1);
}

#[tokio::test]
async fn connection_cap_times_out() {
    let origin = serve(|mut s, _| {
        while read_request(&mut s).is_some() {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe");
        }
    });
    let mut opts = options(&[origin.addr]);
    opts.max_connections = 1;
    opts.connect_timeout = Duration::from_millis(200);
    let c = client(opts);
    let held = c.send(&get(b"/1")).await.unwrap();
    let e = c.send(&get(b"/2")).await.unwrap_err();
    assert!(matches!(e, OriginError::ConnectTimeout), "{e:?}");
    // Our own limit: not the server's failure.
    assert_eq!(c.shared.snapshot().servers[0].consecutive_failures, 0);
    // Dropping the unfinished response closes its connection and frees the slot.
    drop(held);
    assert_eq!(c.pool(0).open(), 0);
    let r = c.send(&get(b"/3")).await.unwrap();
    assert_eq!(r.head.status, 200);
    assert_eq!(origin.accepts(), 2);
}

/// A throw-away CA, and a server configuration whose certificate (for 127.0.0.1) it
/// signed.
fn test_pki() -> (String, Arc<rustls::ServerConfig>) {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "linerate test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(params, ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &*ca)
        .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(crate::tls::config::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap();
    (ca.pem(), Arc::new(config))
}

/// Write `pem` to a fresh file in the temporary directory.
fn temp_pem(pem: &str) -> std::path::PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "linerate-origin-test-{}-{}.pem",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::write(&path, pem).unwrap();
    path
}

fn tls_origin(config: Arc<rustls::ServerConfig>) -> TestOrigin {
    serve(move |tcp, _| {
        let conn = rustls::ServerConnection::new(config.clone()).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        while read_request(&mut tls).is_some() {
            if tls
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret")
                .is_err()
            {
                return;
            }
            let _ = tls.flush();
        }
    })
}

fn tls_options(addr: SocketAddr, ca_pem: &str) -> OriginOptions {
    let mut opts = options(&[addr]);
    opts.servers[0].tls = true;
    opts.ca_file = Some(temp_pem(ca_pem));
    opts
}

#[tokio::test]
async fn https_with_the_right_ca() {
    let (ca_pem, config) = test_pki();
    let origin = tls_origin(config);
    let opts = tls_options(origin.addr, &ca_pem);
    let ca_file = opts.ca_file.clone().unwrap();
    let c = client(opts);
    for _ in 0..2 {
        let mut r = c.send(&get(b"/s")).await.unwrap();
        assert_eq!(body_of(&mut r).await.unwrap(), b"secret");
    }
    // TLS connections are pooled too (the session ticket that arrives after the
    // handshake does not make the pooled connection look used).
    assert_eq!(origin.accepts(), 1);
    let _ = std::fs::remove_file(ca_file);
}

#[tokio::test]
async fn https_with_the_wrong_ca() {
    let (_, config) = test_pki();
    let (other_ca, _) = test_pki();
    let origin = tls_origin(config);
    let opts = tls_options(origin.addr, &other_ca);
    let ca_file = opts.ca_file.clone().unwrap();
    let c = client(opts);
    let e = c.send(&get(b"/s")).await.unwrap_err();
    assert!(
        matches!(&e, OriginError::Tls(m) if m.contains("invalid peer certificate")),
        "{e:?}"
    );
    assert!(e.nothing_received());
    assert_eq!(e.as_str(), "tls");
    let _ = std::fs::remove_file(ca_file);
}

#[test]
fn start_up_errors_name_the_problem() {
    let mut opts = tls_options(refused_addr(), "");
    let empty = opts.ca_file.clone().unwrap();
    let e = OriginShared::new(opts.clone()).err().unwrap();
    assert!(e.contains("no CA certificates"), "{e}");
    opts.ca_file = Some("/nonexistent/ca.pem".into());
    let e = OriginShared::new(opts.clone()).err().unwrap();
    assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    opts.servers.clear();
    assert!(OriginShared::new(opts).is_err());
    let _ = std::fs::remove_file(empty);
    // Plain http needs no roots at all.
    assert!(OriginShared::new(options(&[refused_addr()])).is_ok());
}

#[test]
fn error_labels_are_distinct_and_consistent() {
    let mut kinds = ERROR_KINDS.to_vec();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds.len(), ERROR_KINDS.len());
    let samples = [
        OriginError::Connect(std::io::Error::other("x")),
        OriginError::ConnectTimeout,
        OriginError::AllDown,
        OriginError::Tls(String::new()),
        OriginError::Reset,
        OriginError::Closed,
        OriginError::FirstByteTimeout,
        OriginError::IdleTimeout,
        OriginError::BadHead(ResponseError::Malformed),
        OriginError::BodyShort {
            expected: 1,
            got: 0,
        },
        OriginError::BodyLong,
        OriginError::BadChunked(ChunkError::BadSize),
        OriginError::Io(std::io::Error::other("x")),
    ];
    for (i, e) in samples.iter().enumerate() {
        assert_eq!(e.index(), i);
        assert_eq!(e.as_str(), ERROR_KINDS[i]);
    }
}
