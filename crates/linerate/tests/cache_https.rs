//! Cache mode with an https origin: certificate verification against the configured CA,
//! end to end. The origin is linerate itself in appliance mode with a TLS listener and a
//! throw-away certificate for `localhost`; the cache in front of it trusts that
//! certificate through `ca_file` (and, in the second case, a different one).
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]

mod support;
mod tlssupport;

use std::io::Write;
use std::time::{Duration, Instant};

use support::kit::{Cache, CacheConfig};
use support::{content, library, read_to_close, Server};
use tlssupport::{https_addr, tls_section, TestCert};

/// The sum of every sample of `family` (`name{labels} value` lines) in `srv`'s
/// `/metrics`, for samples whose labels contain none of `except`.
fn total(srv: &Server, family: &str, except: &[&str]) -> u64 {
    let mut s = std::net::TcpStream::connect(srv.admin_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let text = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text:.200}");
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| !except.iter().any(|e| l.contains(e)))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// Requests the appliance origin answered, once its counters settle on `want` (a
/// response is counted after its last byte is handed to the kernel, so the client may
/// see it a moment before); fails the test if it never gets there, or goes past it.
fn origin_requests_settle(origin: &Server, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = total(origin, "linerate_requests_total", &[]);
        assert!(
            n <= want,
            "the origin answered {n} requests, expected {want}"
        );
        if n == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the origin answered {n} requests, expected {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A cache-mode server whose only origin is `https://localhost:PORT`, trusting `ca`.
fn cache_in_front(port: u16, ca: &std::path::Path) -> Cache {
    CacheConfig::for_url(&format!("https://localhost:{port}"))
        .server("workers = 1")
        .origin(&format!("ca_file = {:?}", ca.to_str().unwrap()))
        .start()
}

#[test]
fn https_origin_is_verified_against_the_configured_ca() {
    let body = content(500_000, 21);
    let lib = library(&[("seg.m4s", &body)]);
    let cert = TestCert::new(&["localhost"]);
    let origin = Server::start(
        lib.path(),
        &tls_section("", &[cert.toml(&["localhost"], true)]),
    );
    let port = https_addr(&origin.log).port();

    // Handshakes that completed (either record path), and those that did not.
    const DONE: [&str; 2] = ["outcome=\"ktls\"", "outcome=\"userspace_tls\""];
    let handshakes = |srv: &Server| total(srv, "linerate_tls_handshakes_total", &[]);
    let completed =
        |srv: &Server| handshakes(srv) - total(srv, "linerate_tls_handshakes_total", &DONE);
    origin_requests_settle(&origin, 0);

    // Trusting the origin's certificate: a miss fetched over TLS (one origin request,
    // the 500 000 bytes fit the default slice), then a hit (none).
    let cache = cache_in_front(port, &cert.chain);
    let first = cache.get("/seg.m4s", &[]);
    assert_eq!(first.status, 200);
    assert!(first.body == body);
    let cs = first.header("cache-status").unwrap().to_owned();
    assert!(cs.contains("fwd=uri-miss") && cs.contains("stored"), "{cs}");
    origin_requests_settle(&origin, 1);
    let second = cache.get("/seg.m4s", &[]);
    assert!(second.body == body);
    let cs = second.header("cache-status").unwrap().to_owned();
    assert!(
        cs.starts_with("linerate; hit") && !cs.contains("fwd="),
        "{cs}"
    );
    origin_requests_settle(&origin, 1);
    cache.stop();
    let completed_before = completed(&origin);
    assert!(completed_before >= 1, "the miss went over TLS");
    let failed_before = handshakes(&origin) - completed_before;

    // Trusting another certificate: the handshake fails verification, 502 with a
    // detail, and nothing is fetched or stored: the origin saw a handshake that did not
    // complete and no request, and the next request fails the same way (no copy).
    let other = TestCert::new(&["localhost"]);
    let cache = cache_in_front(port, &other.chain);
    for _ in 0..2 {
        let r = cache.get("/seg.m4s", &[]);
        assert_eq!(r.status, 502);
        let cs = r.header("cache-status").unwrap().to_owned();
        assert!(cs.contains("detail=\"tls\"") && !cs.contains("hit"), "{cs}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while handshakes(&origin) - completed(&origin) < failed_before + 2 {
        assert!(
            Instant::now() < deadline,
            "the origin never saw the refused handshakes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        completed(&origin),
        completed_before,
        "no handshake completed"
    );
    origin_requests_settle(&origin, 1);
    cache.stop();
    origin.stop();
}
