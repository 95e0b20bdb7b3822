//! End to end: timeouts (slowloris, idle keep-alive, a client that stops reading), a
//! file truncated while it is being sent, graceful stop with a response in flight, the
//! per-worker connection limit, and cold reads going through the disk pool.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use support::{content, eventually, library, read_response, read_to_close, Server};

const SHORT_TIMEOUTS: &str = "[timeouts]\nrequest_head_ms = 600\nkeepalive_ms = 600\nsend_ms = 600\nshutdown_grace_ms = 10000\n";

#[test]
fn slowloris_gets_408_and_idle_connections_close() {
    let lib = library(&[("a.ts", b"A")]);
    let srv = Server::start(lib.path(), SHORT_TIMEOUTS);
    // A head trickled byte by byte never completes within the head timeout.
    let mut s = srv.connect();
    let t0 = Instant::now();
    for b in b"GET /a.ts HTTP/1.1\r\nHost: t\r\nX-Slow: ".iter() {
        if s.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = read_to_close(&mut s);
    assert!(
        out.starts_with(b"HTTP/1.1 408 "),
        "{}",
        String::from_utf8_lossy(&out)
    );
    assert!(t0.elapsed() < Duration::from_secs(5));

    // A connection that never sends anything is closed after the head timeout.
    let mut s = srv.connect();
    let t0 = Instant::now();
    assert!(read_to_close(&mut s).is_empty());
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(5),
        "{waited:?}"
    );

    // Idle keep-alive after a response: closed after the keep-alive timeout.
    let mut s = srv.connect();
    s.write_all(b"GET /a.ts HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, b"A");
    let t0 = Instant::now();
    assert!(read_to_close(&mut s).is_empty());
    assert!(
        t0.elapsed() >= Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn parked_idle_connections_resume_expire_and_close_on_stop() {
    let lib = library(&[("a.ts", b"A")]);
    let timeouts =
        "[timeouts]\npark_idle_after_ms = 100\nkeepalive_ms = 1500\nrequest_head_ms = 1500\n";
    let srv = Server::start_with(
        lib.path(),
        "workers = 1\n",
        timeouts,
        &[("RUST_LOG", "info,linerate_server=trace")],
    );
    // Idle well past the park delay, then ask again: the parked connection resumes.
    let mut s = srv.connect();
    for _ in 0..3 {
        s.write_all(b"GET /a.ts HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut s, false).unwrap().body, b"A");
        std::thread::sleep(Duration::from_millis(400));
    }
    assert!(
        srv.logged("connection parked") && srv.logged("connection resumed"),
        "it really parked"
    );
    // A request split across the park boundary (bytes arrive while parked) still works.
    s.write_all(b"GET /a.ts HTTP/1.1\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(b"Host: t\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, b"A");
    // Parked past the keep-alive timeout: closed by the sweep (within about a second).
    let t0 = Instant::now();
    assert!(read_to_close(&mut s).is_empty());
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(1400) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    // A client that hangs up while parked is cleaned up, and a fresh client is served.
    let mut gone = srv.connect();
    gone.write_all(b"GET /a.ts HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    read_response(&mut gone, false).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(gone);
    // Parked connections are closed at once by a graceful stop.
    let mut parked = srv.connect();
    parked
        .write_all(b"GET /a.ts HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    read_response(&mut parked, false).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    srv.signal("TERM");
    let t0 = Instant::now();
    assert!(read_to_close(&mut parked).is_empty());
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert!(srv.stop_waiting().success());
}

#[test]
fn a_client_that_stops_reading_is_closed() {
    let big = content(64 * 1024 * 1024, 11);
    let lib = library(&[("big.mp4", &big)]);
    let srv = Server::start(lib.path(), SHORT_TIMEOUTS);
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /big.mp4 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    // Stop reading well past the send timeout; the socket buffers fill, then the server
    // gives up and closes. Reading afterwards drains what was buffered, then EOF.
    std::thread::sleep(Duration::from_secs(3));
    let got = read_to_close(&mut s);
    assert!(
        got.len() < big.len(),
        "the server closed before sending everything ({} bytes)",
        got.len()
    );
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(
        got[head_end..] == big[..got.len() - head_end],
        "what did arrive is the file's prefix"
    );
    // Other clients are unaffected.
    assert_eq!(srv.get("/big.mp4", &["Range: bytes=0-9"]).body, &big[..10]);
}

#[test]
fn a_file_truncated_while_sending_closes_the_connection() {
    let big = content(48 * 1024 * 1024, 12);
    let lib = library(&[("t.mp4", &big)]);
    let path = lib.path().join("t.mp4");
    let srv = Server::start(lib.path(), "");
    let mut s = srv.connect();
    s.write_all(b"GET /t.mp4 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = vec![0u8; 1024 * 1024];
    s.read_exact(&mut first).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(4 * 1024 * 1024)
        .unwrap();
    let rest = read_to_close(&mut s);
    let total = first.len() + rest.len();
    assert!(
        total < big.len(),
        "the response was cut short, not padded ({total})"
    );
    // And the connection was closed (read_to_close fails the test on its read timeout,
    // so it returned on EOF or a reset; a further read sees the same).
    let mut probe = [0u8; 1];
    assert!(matches!(s.read(&mut probe), Ok(0) | Err(_)));
}

#[test]
fn graceful_stop_finishes_in_flight_responses_and_exits_zero() {
    let big = content(32 * 1024 * 1024, 13);
    let lib = library(&[("g.mp4", &big)]);
    let srv = Server::start(
        lib.path(),
        SHORT_TIMEOUTS
            .replace("send_ms = 600", "send_ms = 10000")
            .as_str(),
    );
    let addr = srv.addr;
    let mut s = srv.connect();
    s.write_all(b"GET /g.mp4 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = vec![0u8; 64 * 1024];
    s.read_exact(&mut first).unwrap();
    // An idle keep-alive connection is closed at once on stop.
    let mut idle = srv.connect();
    srv.signal("TERM");
    // Listeners close as soon as each worker sees the stop (bounded wait: CI is loaded).
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "still accepting 5 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(read_to_close(&mut idle).is_empty());
    let rest = read_to_close(&mut s);
    let mut all = first;
    all.extend_from_slice(&rest);
    let head_end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(
        all[head_end..] == big[..],
        "in-flight response completed byte-exact"
    );
    assert!(String::from_utf8_lossy(&all[..head_end]).contains("200 OK"));
    let status = srv.stop_waiting();
    assert!(status.success(), "{status:?}");
}

#[test]
fn connections_past_the_limit_are_refused_promptly() {
    let lib = library(&[("a.ts", b"A")]);
    let srv = Server::start_with(
        lib.path(),
        "workers = 1\nmax_connections_per_worker = 2\n",
        "",
        &[],
    );
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = srv.connect();
        s.write_all(b"GET /a.ts HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut s, false).unwrap().body, b"A");
        held.push(s);
    }
    let mut third = srv.connect();
    let t0 = Instant::now();
    let _ = third.write_all(b"GET /a.ts HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(
        read_to_close(&mut third).is_empty(),
        "refused without an answer"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "promptly: {:?}",
        t0.elapsed()
    );
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(srv.get("/a.ts", &[]).body, b"A", "a slot freed up");
}

#[test]
fn cold_ranges_are_read_on_the_disk_pool_and_served_exactly() {
    // On the target dir's filesystem (a real disk), where DONTNEED drops pages.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let body = content(6 * 1024 * 1024, 14);
    let path = dir.path().join("cold.mp4");
    std::fs::write(&path, &body).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    f.sync_all().unwrap();
    let srv = Server::start_with(
        dir.path(),
        "workers = 1\n",
        "",
        &[("RUST_LOG", "info,linerate_server=debug")],
    );
    use std::os::fd::AsFd;
    linerate_sys::pagecache::fadvise(f.as_fd(), 0, 0, linerate_sys::pagecache::Advice::DontNeed)
        .unwrap();
    let r = srv.get("/cold.mp4", &[]);
    assert!(r.body == body);
    // The pool read the cold windows (its log line is read by a thread).
    eventually("the pool read the cold windows", || {
        srv.logged("cold window")
    });
    // Now resident: a second request reads nothing on the pool.
    let before = srv
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("cold window"))
        .count();
    assert!(srv.get("/cold.mp4", &["Range: bytes=100-5000000"]).body == body[100..5_000_001]);
    std::thread::sleep(Duration::from_millis(200));
    let after = srv
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("cold window"))
        .count();
    assert_eq!(before, after);
}
