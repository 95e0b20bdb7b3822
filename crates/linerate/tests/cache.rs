//! Cache mode end to end: the real binary in front of an in-process origin that counts
//! its requests, with real clients on 127.0.0.1. Each test starts its own origin and
//! server and stops both.
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::kit::{Cache, CacheConfig};
use support::origin::{self, Origin, Reply};
use support::{content, read_response, Server};

/// A cache-mode server in front of `origin` (the kit's configuration with 1 s origin
/// timeouts); `route` sets route keys, `extra` appends sections.
fn start(origin: &Origin, route: &str, extra: &str) -> Cache {
    start_with(origin, "", route, extra)
}

/// [`start`] with `[[origin]]` keys too.
fn start_with(origin: &Origin, origin_keys: &str, route: &str, extra: &str) -> Cache {
    CacheConfig::new(origin)
        .origin("first_byte_timeout_ms = 1000\nidle_timeout_ms = 1000")
        .origin(origin_keys)
        .route(route)
        .extra(extra)
        .start()
}

fn get(server: &Server, path: &str, headers: &[&str]) -> support::Response {
    server.get(path, headers)
}

/// GET `path` with `Connection: close` and read until the server closes, however short
/// the body: the head as text (empty body if none arrived) and the body bytes received.
fn get_to_close(server: &Server, path: &str) -> (String, Vec<u8>) {
    let got = server
        .raw(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes());
    match got.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => (
            String::from_utf8_lossy(&got[..i + 4]).into_owned(),
            got[i + 4..].to_vec(),
        ),
        None => (String::from_utf8_lossy(&got).into_owned(), Vec::new()),
    }
}

fn cache_status(r: &support::Response) -> String {
    r.header("cache-status").unwrap_or("").to_owned()
}

// Staleness by the clock alone is flaky: the test origin sends no `Date`, the cache
// adds one rounded down to the whole second, so a `max-age=1` object is fresh only for
// what is left of the second it arrived in (sometimes a few ms). These tests say how
// old a response is with `Age` instead (RFC 9111 §4.2.3: `Age` counts in the corrected
// initial age, to the millisecond of its arrival, and outweighs the sub-second apparent
// age): stale the moment it is stored, or fresh for exactly `FRESH_FOR`.

/// With `max-age=60`: already 100 s old when stored, so stale at once.
const STALE_ON_ARRIVAL: (&str, &str) = ("Age", "100");

/// `Cache-Control: max-age=4` with [`AGED_1S`]: fresh for exactly 3 s after it arrives
/// (ample for the very next request to be a hit on a loaded machine), then stale.
const MAX_AGE_4: (&str, &str) = ("Cache-Control", "max-age=4");
/// See [`MAX_AGE_4`].
const AGED_1S: (&str, &str) = ("Age", "1");
/// How long a [`MAX_AGE_4`] + [`AGED_1S`] response stays fresh.
const FRESH_FOR: Duration = Duration::from_secs(3);

/// Sleep until a [`MAX_AGE_4`] + [`AGED_1S`] response received before this call is
/// stale (its resident time counts from when the cache got it, before the client did).
fn outlive_freshness() {
    std::thread::sleep(FRESH_FOR + Duration::from_millis(200));
}

#[test]
fn miss_then_hit_with_age_and_cache_status() {
    let body = content(100_000, 1);
    let b = body.clone();
    let origin = Origin::start(move |_| {
        origin::ok(
            &b,
            &[
                ("Cache-Control", "max-age=60"),
                ("Content-Type", "video/mp4"),
            ],
        )
    });
    let server = start(&origin, "slice_bytes = 0", "");
    let first = get(&server, "/seg1.m4s", &[]);
    assert_eq!(first.status, 200);
    assert_eq!(first.body, body);
    assert_eq!(origin.total(), 1);
    let cs = cache_status(&first);
    assert!(cs.contains("fwd=uri-miss"), "{cs}");
    assert!(cs.contains("stored"), "{cs}");
    assert!(first.header("via").unwrap().contains("linerate"));
    let second = get(&server, "/seg1.m4s", &[]);
    assert_eq!(second.status, 200);
    assert_eq!(second.body, body);
    let cs = cache_status(&second);
    assert!(cs.starts_with("linerate; hit"), "{cs}");
    assert!(second.header("age").is_some());
    assert_eq!(second.header("content-type"), Some("video/mp4"));
    assert_eq!(origin.count("/seg1.m4s"), 1);
    // A range of a hit is served from the store.
    let part = get(&server, "/seg1.m4s", &["Range: bytes=10-19"]);
    assert_eq!(part.status, 206);
    assert_eq!(part.body, &body[10..20]);
    assert_eq!(origin.count("/seg1.m4s"), 1);
    server.stop();
}

/// Route `key_host`: clients naming the cache by different hosts (its addresses, a
/// name, a port) share one object on such a route, so the second host costs no origin
/// request; a route without it keeps one object, and one origin request, per host.
/// Guards the key being built from the route's `key_host` wherever it is built.
#[test]
fn key_host_makes_every_host_of_a_route_one_object() {
    let origin = Origin::start(|_| origin::ok(b"one object", &[("Cache-Control", "max-age=60")]));
    let hosts = ["Host: 10.0.0.1", "Host: Other.Example:8080"];
    let server = start(
        &origin,
        "slice_bytes = 0\nkey_host = \"cdn.example.com\"",
        "",
    );
    let first = get(&server, "/k.ts", &[hosts[0]]);
    assert_eq!(
        (first.status, first.body.as_slice()),
        (200, &b"one object"[..])
    );
    let second = get(&server, "/k.ts", &[hosts[1]]);
    assert_eq!(
        (second.status, second.body.as_slice()),
        (200, &b"one object"[..])
    );
    let cs = cache_status(&second);
    assert!(cs.contains("; hit"), "{cs}");
    assert_eq!(origin.total(), 1, "{:?}", origin.requests());
    drop(server);
    // Without it, each host is its own object.
    let plain = start(&origin, "slice_bytes = 0", "");
    for h in hosts {
        assert_eq!(get(&plain, "/k.ts", &[h]).status, 200);
    }
    assert_eq!(origin.total(), 3, "{:?}", origin.requests());
}

/// Guards `key_host` against a client storing another host's answer under the shared
/// object: the origin is asked for `key_host` (`X-Forwarded-Host`), never for the name
/// the client sent, so an origin that tells hosts apart answers for the route's site.
#[test]
fn key_host_is_the_host_the_origin_is_asked_for() {
    let origin = Origin::start(|r| {
        let host = r.header("x-forwarded-host").unwrap_or("-").to_owned();
        origin::ok(host.as_bytes(), &[("Cache-Control", "max-age=60")])
    });
    let server = start(
        &origin,
        "slice_bytes = 0\nkey_host = \"cdn.example.com\"",
        "",
    );
    let poisoned = get(&server, "/k.ts", &["Host: other-tenant.example"]);
    assert_eq!(
        poisoned.body, b"cdn.example.com",
        "fetched as the client's host"
    );
    let next = get(&server, "/k.ts", &["Host: 10.0.0.1"]);
    assert_eq!(next.body, b"cdn.example.com");
    assert_eq!(origin.total(), 1, "{:?}", origin.requests());
}

/// Guards the cache's own markers in stored fields (`x-linerate-*`): an origin that
/// sends `X-Linerate-Vary` cannot make its response a Vary stub (the object is stored
/// and hit like any other), and one that sends `X-Linerate-Peer-Status` cannot add a
/// member to `Cache-Status`, on the miss or on later answers.
#[test]
fn an_origin_cannot_send_the_caches_own_markers() {
    let origin = Origin::start(|_| {
        origin::ok(
            b"plain object",
            &[
                ("Cache-Control", "max-age=60"),
                ("X-Linerate-Vary", "accept-language"),
                ("X-Linerate-Peer-Status", "evil; hit"),
            ],
        )
    });
    let server = start(&origin, "slice_bytes = 0", "");
    for round in 0..3 {
        let r = get(&server, "/m.ts", &[]);
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"plain object"[..]),
            "round {round}"
        );
        let cs = cache_status(&r);
        assert!(!cs.contains("evil"), "round {round}: {cs}");
        assert!(
            r.header("x-linerate-vary").is_none() && r.header("x-linerate-peer-status").is_none()
        );
        if round > 0 {
            assert!(cs.contains("; hit"), "round {round}: {cs}");
        }
    }
    assert_eq!(origin.total(), 1, "{:?}", origin.requests());
}

#[test]
fn herd_of_100_makes_one_origin_request() {
    let body = Arc::new(content(2 * 1024 * 1024, 2));
    let b = body.clone();
    let origin = Origin::start(move |_| Reply::Drip {
        status: 200,
        headers: origin::owned(&[("Cache-Control", "max-age=600")]),
        body: b.to_vec(),
        chunk: 256 * 1024,
        delay: Duration::from_millis(20),
    });
    let server = start(&origin, "slice_bytes = 0", "");
    let addr = server.addr;
    let threads: Vec<_> = (0..100)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                s.write_all(b"GET /herd.ts HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
                    .unwrap();
                read_response(&mut s, false).unwrap()
            })
        })
        .collect();
    for t in threads {
        let r = t.join().unwrap();
        assert_eq!(r.status, 200);
        assert!(r.body == *body, "a client got different bytes");
    }
    assert_eq!(origin.count("/herd.ts"), 1, "exactly one origin request");
    assert_eq!(origin.total(), 1);
    server.stop();
}

#[test]
fn stale_objects_are_revalidated_304_and_200() {
    let body = content(5_000, 3);
    let version = Arc::new(AtomicUsize::new(1));
    let v = version.clone();
    let b = body.clone();
    let origin = Origin::start(move |req| {
        let n = v.load(Ordering::SeqCst);
        let tag = format!("\"v{n}\"");
        if req.header("if-none-match") == Some(tag.as_str()) {
            // Fresh for FRESH_FOR, then stale again.
            return origin::status(304, &[("ETag", &tag), MAX_AGE_4, AGED_1S]);
        }
        let mut body = b.clone();
        body[0] = n as u8;
        // Version 1 is stale as soon as it is stored; version 2 stays fresh.
        let age = if n == 1 {
            STALE_ON_ARRIVAL
        } else {
            ("Age", "0")
        };
        origin::ok(
            &body,
            &[("ETag", &tag), ("Cache-Control", "max-age=60"), age],
        )
    });
    let server = start(&origin, "slice_bytes = 0", "");
    let first = get(&server, "/live.m3u8", &[]);
    assert_eq!(first.body[0], 1);
    assert_eq!(origin.total(), 1);
    // Stale: a conditional request; the origin says 304.
    let second = get(&server, "/live.m3u8", &[]);
    assert_eq!(second.status, 200);
    assert_eq!(second.body[0], 1);
    let cs = cache_status(&second);
    assert!(
        cs.contains("fwd=stale") && cs.contains("fwd-status=304"),
        "{cs}"
    );
    let reqs = origin.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].header("if-none-match"), Some("\"v1\""));
    // Freshened: a hit now.
    let third = get(&server, "/live.m3u8", &[]);
    assert!(
        cache_status(&third).starts_with("linerate; hit"),
        "{}",
        cache_status(&third)
    );
    assert_eq!(origin.total(), 2);
    // Stale again, and the origin has a new version: 200 replaces it.
    outlive_freshness();
    version.store(2, Ordering::SeqCst);
    let fourth = get(&server, "/live.m3u8", &[]);
    assert_eq!(fourth.body[0], 2);
    let cs = cache_status(&fourth);
    assert!(
        cs.contains("fwd=stale") && cs.contains("fwd-status=200"),
        "{cs}"
    );
    assert_eq!(origin.total(), 3);
    assert_eq!(
        origin.requests()[2].header("if-none-match"),
        Some("\"v1\""),
        "the stale copy was revalidated, not refetched blind"
    );
    let fifth = get(&server, "/live.m3u8", &[]);
    assert_eq!(fifth.body[0], 2);
    assert!(
        cache_status(&fifth).starts_with("linerate; hit"),
        "{}",
        cache_status(&fifth)
    );
    assert_eq!(origin.total(), 3);
    server.stop();
}

#[test]
fn stale_while_revalidate_and_stale_if_error() {
    // The first answer and the background refresh are both stale on arrival (4 s past
    // max-age: inside both windows); every later request fails with 503.
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let origin = Origin::start(move |_| {
        let cc = (
            "Cache-Control",
            "max-age=1, stale-while-revalidate=30, stale-if-error=60",
        );
        match c.fetch_add(1, Ordering::SeqCst) + 1 {
            1 => origin::ok(b"manifest", &[cc, ("ETag", "\"m1\""), ("Age", "5")]),
            2 => origin::ok(b"manifest", &[cc, ("ETag", "\"m2\""), ("Age", "5")]),
            _ => origin::status(503, &[]),
        }
    });
    let server = start(&origin, "slice_bytes = 0", "");
    assert_eq!(get(&server, "/a.m3u8", &[]).body, b"manifest");
    assert_eq!(origin.total(), 1);
    let r = get(&server, "/a.m3u8", &[]);
    assert_eq!(r.body, b"manifest");
    assert_eq!(r.header("etag"), Some("\"m1\""));
    assert!(
        cache_status(&r).contains("stale-while-revalidate"),
        "{}",
        cache_status(&r)
    );
    assert!(
        origin.wait_count("/a.m3u8", 2, Duration::from_secs(5)),
        "background refresh"
    );
    assert_eq!(
        origin.requests()[1].header("if-none-match"),
        Some("\"m1\""),
        "the background refresh revalidates"
    );
    // Wait until the refresh is stored (`max-stale` reads the store without going
    // forward), so the next request cannot join it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = get(&server, "/a.m3u8", &["Cache-Control: max-stale"]);
        if r.header("etag") == Some("\"m2\"") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the refresh was never stored: {}",
            cache_status(&r)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(origin.total(), 2);
    // Now the origin fails: the revalidation gets a 503 and stale-if-error serves the
    // stored copy.
    let r = get(&server, "/a.m3u8", &["Cache-Control: no-cache"]);
    assert_eq!(r.status, 200, "{}", cache_status(&r));
    assert_eq!(r.body, b"manifest");
    assert_eq!(r.header("etag"), Some("\"m2\""));
    assert_eq!(
        origin.total(),
        3,
        "the failed revalidation reached the origin"
    );
    assert_eq!(origin.requests()[2].header("if-none-match"), Some("\"m2\""));
    let cs = cache_status(&r);
    assert!(
        cs.contains("fwd=stale")
            && cs.contains("fwd-status=503")
            && cs.contains("detail=\"origin_error\""),
        "{cs}"
    );
    server.stop();
}

#[test]
fn vary_variants_and_no_store() {
    let origin = Origin::start(|req| {
        if req.path() == "/private" {
            return origin::ok(b"secret", &[("Cache-Control", "no-store")]);
        }
        let enc = req.header("accept-encoding").unwrap_or("none").to_owned();
        origin::ok(
            enc.as_bytes(),
            &[("Vary", "Accept-Encoding"), ("Cache-Control", "max-age=60")],
        )
    });
    let server = start(&origin, "slice_bytes = 0", "");
    assert_eq!(get(&server, "/v", &["Accept-Encoding: gzip"]).body, b"gzip");
    assert_eq!(get(&server, "/v", &["Accept-Encoding: br"]).body, b"br");
    let again = get(&server, "/v", &["Accept-Encoding: gzip"]);
    assert_eq!(again.body, b"gzip");
    assert!(
        cache_status(&again).contains("hit"),
        "{}",
        cache_status(&again)
    );
    assert_eq!(get(&server, "/v", &["Accept-Encoding: br"]).body, b"br");
    assert_eq!(origin.count("/v"), 2, "one fetch per variant");
    for i in 0..3 {
        let r = get(&server, "/private", &[]);
        assert_eq!(r.body, b"secret");
        // A miss first; then a URL known not to be storable, not looked up: bypass.
        let fwd = if i == 0 { "fwd=uri-miss" } else { "fwd=bypass" };
        assert!(cache_status(&r).contains(fwd), "{}", cache_status(&r));
    }
    assert_eq!(
        origin.count("/private"),
        3,
        "no-store is never served from the cache"
    );
    server.stop();
}

#[test]
fn status_classes() {
    // Last-Modified ten days ago: RFC 9111 §4.2.2 heuristic freshness (10 %, capped at a
    // day) for the statuses cacheable by default, and nothing else says how long.
    const LM: (&str, &str) = ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT");
    let origin = Origin::start(|req| match req.path() {
        "/moved" => origin::status(301, &[("Location", "/elsewhere"), LM]),
        "/found" => origin::status(302, &[("Location", "/elsewhere"), LM]),
        "/missing" => Reply::Full {
            status: 404,
            headers: origin::owned(&[LM]),
            body: b"nope".to_vec(),
            chunked: false,
        },
        "/forbidden" => Reply::Full {
            status: 403,
            headers: origin::owned(&[LM]),
            body: b"no".to_vec(),
            chunked: false,
        },
        "/broken" => Reply::Full {
            status: 500,
            headers: origin::owned(&[LM]),
            body: b"err".to_vec(),
            chunked: false,
        },
        "/empty" => origin::status(204, &[LM]),
        _ => origin::ok(b"ok", &[LM]),
    });
    let server = start(&origin, "slice_bytes = 0", "");
    // Cacheable by default (RFC 9110 §15.1): 200, 204, 301, 404 — stored with their
    // heuristic freshness. Not by default: 302, 403, 500.
    for (path, code, cached) in [
        ("/ok", 200, true),
        ("/empty", 204, true),
        ("/moved", 301, true),
        ("/missing", 404, true),
        ("/found", 302, false),
        ("/forbidden", 403, false),
        ("/broken", 500, false),
    ] {
        let a = get(&server, path, &[]);
        let b = get(&server, path, &[]);
        assert_eq!((a.status, b.status), (code, code), "{path}");
        let want = if cached { 1 } else { 2 };
        assert_eq!(origin.count(path), want, "{path}: {}", cache_status(&b));
    }
    server.stop();
}

#[test]
fn request_cache_control_only_if_cached_and_no_cache() {
    let origin = Origin::start(|_| origin::ok(b"x", &[("Cache-Control", "max-age=60")]));
    let server = start(&origin, "slice_bytes = 0", "");
    let r = get(&server, "/o", &["Cache-Control: only-if-cached"]);
    assert_eq!(r.status, 504);
    assert_eq!(origin.total(), 0);
    get(&server, "/o", &[]);
    assert_eq!(origin.total(), 1);
    assert_eq!(
        get(&server, "/o", &["Cache-Control: only-if-cached"]).status,
        200
    );
    assert_eq!(origin.total(), 1, "only-if-cached answered from the store");
    get(&server, "/o", &["Cache-Control: no-cache"]);
    assert_eq!(origin.total(), 2, "no-cache goes to the origin");
    server.stop();
}

#[test]
fn unsafe_methods_pass_through_and_invalidate() {
    let origin = Origin::start(|req| {
        if req.method == "POST" {
            return origin::ok(&req.body, &[]);
        }
        origin::ok(b"cached", &[("Cache-Control", "max-age=60")])
    });
    let server = start(&origin, "slice_bytes = 0", "");
    get(&server, "/u", &[]);
    get(&server, "/u", &[]);
    assert_eq!(origin.count("/u"), 1);
    let mut s = server.connect();
    s.write_all(
        b"POST /u HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    )
    .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.body, b"hello");
    let posted = origin
        .requests()
        .into_iter()
        .find(|r| r.method == "POST")
        .unwrap();
    assert_eq!(posted.body, b"hello");
    get(&server, "/u", &[]);
    assert_eq!(
        origin
            .requests()
            .iter()
            .filter(|r| r.method == "GET")
            .count(),
        2,
        "POST invalidated the URL"
    );
    // A chunked body cannot be forwarded (it is buffered whole): 411.
    let mut s = server.connect();
    s.write_all(
        b"POST /u HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 411);
    assert_eq!(
        origin.total(),
        3,
        "two GETs and the first POST; the 411 was not sent"
    );
    server.stop();
}

/// Each misbehaving origin: the client gets 502/504 with a Cache-Status detail, and
/// nothing partial is cached (the next request goes to the origin again).
#[test]
fn bad_origins_get_defined_answers_and_nothing_is_cached() {
    let body = content(50_000, 4);
    let b = body.clone();
    let origin = Origin::start(move |req| {
        let hdr = |n: usize| {
            format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nCache-Control: max-age=60\r\n\r\n")
        };
        match req.path() {
            "/reset" => Reply::Reset,
            "/close" => Reply::Close,
            "/stall" => Reply::Stall(Duration::from_secs(3)),
            "/short" => Reply::Short { headers: origin::owned(&[("Cache-Control", "max-age=60")]), body: b.clone(), send: 1000 },
            "/long" => {
                let mut raw = hdr(100).into_bytes();
                raw.extend_from_slice(&[b'x'; 150]);
                Reply::Raw(raw)
            }
            "/badchunk" => Reply::Raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nCache-Control: max-age=60\r\n\r\n5\r\nhello\r\nZZ\r\n".to_vec()),
            "/badhead" => Reply::Raw(b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n".to_vec()),
            "/bighead" => {
                let mut raw = b"HTTP/1.1 200 OK\r\n".to_vec();
                for i in 0..2000 {
                    raw.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "a".repeat(60)).as_bytes());
                }
                raw.extend_from_slice(b"Content-Length: 0\r\n\r\n");
                Reply::Raw(raw)
            }
            "/drip" => Reply::Drip {
                status: 200,
                headers: origin::owned(&[("Cache-Control", "max-age=60")]),
                body: vec![b'd'; 10_000],
                chunk: 100,
                delay: Duration::from_millis(1500),
            },
            _ => origin::ok(b"fine", &[]),
        }
    });
    // Failures here are the origin's answers to single URLs, not a dead server: keep it
    // from being marked down (tested on its own below).
    let server = start_with(&origin, "down_after = 1000", "slice_bytes = 0", "");
    for (path, codes) in [
        ("/reset", &[502][..]),
        ("/close", &[502]),
        ("/stall", &[504]),
        ("/badhead", &[502]),
        ("/bighead", &[502]),
    ] {
        let r = get(&server, path, &[]);
        assert!(codes.contains(&r.status), "{path}: {}", r.status);
        assert!(
            cache_status(&r).contains("detail="),
            "{path}: {}",
            cache_status(&r)
        );
        assert_eq!(origin.count(path), 1, "{path}: one origin request");
    }
    // A body longer than its Content-Length: the declared bytes, complete (as nginx and
    // Varnish deliver), and the connection stays usable.
    let (head, body) = get_to_close(&server, "/long");
    assert!(head.starts_with("HTTP/1.1 200"), "{head:.40}");
    assert_eq!(body, vec![b'x'; 100]);
    assert_eq!(origin.count("/long"), 1);
    // Failures after the head was sent: the connection closes short of the length.
    for path in ["/short", "/badchunk", "/drip"] {
        let (head, body) = get_to_close(&server, path);
        if head.starts_with("HTTP/1.1 200") {
            let declared: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(usize::MAX);
            let chunked_done = head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked")
                && body.ends_with(b"0\r\n\r\n");
            assert!(
                body.len() < declared && !chunked_done,
                "{path}: looked complete"
            );
        } else {
            assert!(head.starts_with("HTTP/1.1 50"), "{path}: {head:.40}");
        }
        assert_eq!(origin.count(path), 1, "{path}: one origin request");
    }
    assert_eq!(origin.total(), 9);
    // Nothing was cached: each path goes to the origin again.
    for path in ["/short", "/long", "/badchunk"] {
        get_to_close(&server, path);
        assert_eq!(
            origin.count(path),
            2,
            "{path}: a failed fill left something cached; {:#?}",
            server.log.lock().unwrap()
        );
    }
    server.stop();
}

#[test]
fn refused_origin_is_502() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    let server = CacheConfig::for_url(&format!("http://{addr}"))
        .server("workers = 1")
        .start();
    let r = server.get("/x", &[]);
    assert_eq!(r.status, 502);
    assert!(r.header("cache-status").unwrap().contains("detail="));
    server.stop();
}

#[test]
fn client_leaving_mid_fill_does_not_cancel_it() {
    let body = content(1_000_000, 5);
    let b = body.clone();
    let origin = Origin::start(move |_| Reply::Drip {
        status: 200,
        headers: origin::owned(&[("Cache-Control", "max-age=60")]),
        body: b.clone(),
        chunk: 100_000,
        delay: Duration::from_millis(50),
    });
    let server = start(&origin, "slice_bytes = 0", "");
    {
        let mut s = server.connect();
        s.write_all(b"GET /leave HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let mut some = [0u8; 1000];
        let _ = s.read(&mut some).unwrap();
    } // dropped: the client is gone
    let r = get(&server, "/leave", &[]);
    assert_eq!(r.body, body);
    assert_eq!(origin.count("/leave"), 1);
    server.stop();
}

#[test]
fn purge_by_url_and_prefix() {
    let origin = Origin::start(|_| origin::ok(b"p", &[("Cache-Control", "max-age=600")]));
    let server = start(
        &origin,
        "slice_bytes = 0",
        "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"secret-token-0123456789\"\n",
    );
    for p in ["/a/1", "/a/2", "/b/1"] {
        get(&server, p, &[]);
    }
    assert_eq!(origin.total(), 3);
    let admin = server.admin_addr();
    let post = |path: &str, token: &str| {
        let mut s = TcpStream::connect(admin).unwrap();
        s.write_all(format!("POST {path} HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n").as_bytes())
            .unwrap();
        read_response(&mut s, false).unwrap()
    };
    assert_eq!(post("/purge?url=http://test/a/1", "wrong").status, 401);
    let r = post(
        "/purge?url=http%3A%2F%2Ftest%2Fa%2F1",
        "secret-token-0123456789",
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    get(&server, "/a/1", &[]);
    get(&server, "/a/2", &[]);
    assert_eq!(origin.total(), 4, "only /a/1 was refetched");
    assert_eq!(
        post("/purge?prefix=http://test/a/", "secret-token-0123456789").status,
        200
    );
    get(&server, "/a/1", &[]);
    get(&server, "/a/2", &[]);
    get(&server, "/b/1", &[]);
    assert_eq!(origin.total(), 6, "/a/ refetched, /b/1 still cached");
    server.stop();
}

#[test]
fn cached_objects_survive_a_restart() {
    let body = content(300_000, 6);
    let b = body.clone();
    let origin = Origin::start(move |_| origin::ok(&b, &[("Cache-Control", "max-age=600")]));
    let server = CacheConfig::new(&origin).server("workers = 1").start();
    assert_eq!(server.get("/keep.mp4", &[]).body, body);
    let server = server.restart();
    let r = server.get("/keep.mp4", &[]);
    assert_eq!(r.body, body);
    assert!(r.header("cache-status").unwrap().contains("hit"));
    assert_eq!(origin.total(), 1);
    server.stop();
}

/// Slices: 64 KiB slices of a 1 MB object with a strong ETag.
fn sliced_origin(body: Arc<Vec<u8>>, etag: Arc<Mutex<String>>) -> Origin {
    Origin::start(move |req| {
        let tag = etag.lock().unwrap().clone();
        if let Some(want) = req.header("if-match") {
            if want != tag {
                return origin::status(412, &[]);
            }
        }
        origin::ranged(
            body.clone(),
            &[("ETag", &tag), ("Cache-Control", "max-age=600")],
        )
    })
}

#[test]
fn a_later_slice_the_store_refuses_is_spliced_in_from_the_origin() {
    // Guards the hand-off of a slice that may not be stored: a 3 MiB object in 1 MiB
    // slices on a 1.5 MiB disk. Slice 0 is stored; slices 1 and 2 do not fit (the store
    // refuses them: no space; a disk behind its flushes refuses the same way). Before,
    // the response closed short after slice 0; now each refused slice is sent from its
    // origin response as it arrives, and each slice costs one origin request.
    let body = Arc::new(content(3 << 20, 11));
    let origin = sliced_origin(body.clone(), Arc::new(Mutex::new("\"v\"".into())));
    let server = CacheConfig::new(&origin)
        .origin("first_byte_timeout_ms = 1000\nidle_timeout_ms = 1000")
        .route("slice_bytes = 1048576")
        .disk_bytes(3 << 19)
        .start();
    let r = get(&server, "/big.mp4", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), body.len(), "whole, not cut after slice 0");
    assert!(r.body == *body);
    assert_eq!(origin.total(), 3, "one request per slice");
    // A range inside a refused slice: from the origin again (not stored), exact bytes.
    let r = get(&server, "/big.mp4", &["Range: bytes=1500000-2500000"]);
    assert_eq!(r.status, 206);
    assert!(r.body == body[1_500_000..=2_500_000]);
    assert_eq!(origin.total(), 5, "slices 1 and 2, neither stored");
}

#[test]
fn range_misses_fetch_only_covering_slices() {
    let body = Arc::new(content(1_000_000, 7));
    let origin = sliced_origin(body.clone(), Arc::new(Mutex::new("\"a\"".into())));
    let server = start(&origin, "slice_bytes = 65536", "");
    // Inside one slice (slice 3).
    let r = get(&server, "/big.mp4", &["Range: bytes=200000-200999"]);
    assert_eq!(r.status, 206);
    assert_eq!(
        r.header("content-range"),
        Some("bytes 200000-200999/1000000")
    );
    assert_eq!(r.body, &body[200_000..201_000]);
    let ranges: Vec<_> = origin.requests().iter().filter_map(|q| q.range()).collect();
    assert_eq!(ranges, vec![(196_608, Some(262_143))]);
    // Across a boundary (slices 4 and 5).
    let r = get(&server, "/big.mp4", &["Range: bytes=300000-340000"]);
    assert_eq!(r.body, &body[300_000..=340_000]);
    assert_eq!(origin.total(), 3);
    // Multipart across slices (3, 5 and 15 = the last, short one).
    let r = get(
        &server,
        "/big.mp4",
        &["Range: bytes=200000-200009,330000-330009,-10"],
    );
    assert_eq!(r.status, 206);
    let text = String::from_utf8_lossy(&r.body).to_string();
    assert!(
        text.contains("Content-Range: bytes 999990-999999/1000000"),
        "{text:.300}"
    );
    assert!(r.body.windows(10).any(|w| w == &body[999_990..]));
    assert!(r.body.windows(10).any(|w| w == &body[330_000..330_010]));
    assert_eq!(origin.total(), 4, "only the last slice was new");
    // The whole object: every slice, byte-exact.
    let r = get(&server, "/big.mp4", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == *body);
    assert_eq!(origin.total(), 16, "16 slices in all, each fetched once");
    let again = get(&server, "/big.mp4", &[]);
    assert!(again.body == *body);
    assert!(
        cache_status(&again).starts_with("linerate; hit"),
        "{}",
        cache_status(&again)
    );
    assert_eq!(origin.total(), 16);
    server.stop();
}

#[test]
fn an_origin_that_ignores_range_is_stored_whole() {
    let body = content(200_000, 8);
    let b = body.clone();
    let origin = Origin::start(move |_| origin::ok(&b, &[("Cache-Control", "max-age=600")]));
    let server = start(&origin, "slice_bytes = 65536", "");
    let r = get(&server, "/norange.mp4", &["Range: bytes=100000-100099"]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &body[100_000..100_100]);
    let r = get(&server, "/norange.mp4", &[]);
    assert_eq!(r.body, body);
    assert_eq!(origin.total(), 1);
    server.stop();
}

#[test]
fn a_version_change_never_mixes_slices() {
    let v1 = Arc::new(content(300_000, 9));
    let etag = Arc::new(Mutex::new("\"v1\"".to_owned()));
    let current = Arc::new(Mutex::new(v1.clone()));
    let (e, c) = (etag.clone(), current.clone());
    let origin = Origin::start(move |req| {
        let tag = e.lock().unwrap().clone();
        if let Some(want) = req.header("if-match") {
            if want != tag {
                return origin::status(412, &[]);
            }
        }
        origin::ranged(
            c.lock().unwrap().clone(),
            &[("ETag", &tag), ("Cache-Control", "max-age=600")],
        )
    });
    let server = start(&origin, "slice_bytes = 65536", "");
    // Slice 0 of version 1 is cached.
    let r = get(&server, "/changing.mp4", &["Range: bytes=0-99"]);
    assert_eq!(r.body, &v1[..100]);
    assert_eq!(origin.total(), 1);
    assert_eq!(origin.requests()[0].range(), Some((0, Some(65_535))));
    // The file changes at the origin.
    let v2 = Arc::new(content(300_000, 10));
    *etag.lock().unwrap() = "\"v2\"".into();
    *current.lock().unwrap() = v2.clone();
    // A whole-object request starts from cached slice 0 (v1); slice 1, asked for on
    // condition that it is still v1, comes back 412: the response is cut short, never
    // completed with v2 bytes.
    let (head, body) = get_to_close(&server, "/changing.mp4");
    assert!(head.starts_with("HTTP/1.1 200"), "{head:.60}");
    assert_eq!(
        origin.total(),
        2,
        "slice 0 from the store, then slice 1 only"
    );
    let slice1 = &origin.requests()[1];
    assert_eq!(slice1.range(), Some((65_536, Some(131_071))));
    assert_eq!(
        slice1.header("if-match"),
        Some("\"v1\""),
        "the next slice must be of the same version"
    );
    // Cut exactly at the end of slice 0: shorter would lose stored bytes, longer would
    // be bytes of another version (the origin has only v2 now).
    assert_eq!(
        body.len(),
        65_536,
        "a mixed body, or a cut in the wrong place"
    );
    assert!(body == v1[..65_536], "the cached slice 0 is version 1");
    // The next request gets version 2 whole.
    let r = get(&server, "/changing.mp4", &[]);
    assert_eq!(r.status, 200);
    assert!(
        r.body == *v2,
        "after a version change the object is v2 throughout"
    );
    assert_eq!(
        origin.total(),
        2 + 5,
        "version 2 fetched anew: its 5 slices (300 000 bytes in 64 KiB slices)"
    );
    assert!(
        origin.requests()[2..]
            .iter()
            .all(|q| q.header("if-match").is_none_or(|t| t == "\"v2\"")),
        "no request for version 2 is conditional on version 1"
    );
    server.stop();
}

#[test]
fn a_single_origin_server_is_never_marked_down_and_stale_if_error_serves() {
    let failing = Arc::new(AtomicUsize::new(0));
    let f = failing.clone();
    let origin = Origin::start(move |_| {
        if f.load(Ordering::SeqCst) == 1 {
            return Reply::Reset;
        }
        // Stale when stored (4 s past max-age), inside its stale-if-error window.
        origin::ok(
            b"kept",
            &[
                ("Cache-Control", "max-age=1, stale-if-error=600"),
                ("Age", "5"),
                ("ETag", "\"k\""),
            ],
        )
    });
    // One worker, so one pool of origin connections and exact counts: a request that
    // meets a reset on a pooled connection is retried once on a new one (the pooled
    // one may have been closed by the origin while idle); on a new one it is not.
    let server = CacheConfig::new(&origin)
        .server("workers = 1")
        .origin("first_byte_timeout_ms = 1000\nidle_timeout_ms = 1000")
        .origin("down_after = 3\ndown_for_ms = 60000")
        .route("slice_bytes = 0")
        .start();
    assert_eq!(get(&server, "/kept", &[]).body, b"kept");
    assert_eq!(origin.total(), 1);
    failing.store(1, Ordering::SeqCst);
    // Resets are answers from a live server; and an origin with one server is never
    // skipped: every request still reaches it.
    for i in 0..5 {
        let path = format!("/gone{i}");
        let r = get(&server, &path, &[]);
        assert_eq!(r.status, 502, "{}", cache_status(&r));
        assert!(cache_status(&r).contains("reset"), "{}", cache_status(&r));
        // The first on /kept's pooled connection, then a new one; the others new.
        let tries = if i == 0 { 2 } else { 1 };
        assert_eq!(origin.count(&path), tries, "{path} reached the origin");
    }
    assert_eq!(origin.total(), 1 + 2 + 4);
    // Answering again: served at once.
    failing.store(0, Ordering::SeqCst);
    assert_eq!(get(&server, "/back", &[]).status, 200);
    assert_eq!(origin.count("/back"), 1);
    // A stale object with stale-if-error is served while the origin fails, after the
    // revalidation failed.
    failing.store(1, Ordering::SeqCst);
    let r = get(&server, "/kept", &[]);
    assert_eq!(r.status, 200, "{}", cache_status(&r));
    assert_eq!(r.body, b"kept");
    let cs = cache_status(&r);
    assert!(cs.contains("fwd=stale") && cs.contains("reset"), "{cs}");
    assert_eq!(
        origin.count("/kept"),
        1 + 2,
        "the revalidation reached the origin (on /back's pooled connection, then a new one)"
    );
    assert!(origin.requests()[origin.total() - 1].header("if-none-match") == Some("\"k\""));
    server.stop();
}

#[test]
fn of_two_origin_servers_the_dead_one_is_marked_down_and_skipped() {
    let live = Origin::start(|_| origin::ok(b"up", &[("Cache-Control", "no-store")]));
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let server = CacheConfig::for_urls(&[&format!("http://{dead}"), &live.url()])
        .server("workers = 1")
        .origin("down_after = 2\ndown_for_ms = 60000")
        .route("slice_bytes = 0")
        .start();
    // Every request is answered (a refused connect moves on to the next server)...
    for i in 0..6 {
        assert_eq!(get(&server, &format!("/p{i}"), &[]).body, b"up");
    }
    assert_eq!(live.total(), 6);
    // ...and once the dead server is down, it is no longer tried first: the metrics
    // show two attempts on it in all.
    let metrics = support::read_to_close(&mut {
        let mut s = TcpStream::connect(server.admin_addr()).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        s
    });
    let text = String::from_utf8_lossy(&metrics);
    let dead_requests = text
        .lines()
        .find(|l| l.starts_with("linerate_origin_requests_total") && l.contains(&dead.to_string()))
        .unwrap_or("");
    assert!(dead_requests.ends_with(" 2"), "{dead_requests}");
    server.stop();
}

#[test]
fn a_206_with_the_wrong_content_range_is_relayed_and_not_cached() {
    let body = content(200_000, 11);
    let b = body.clone();
    let origin = Origin::start(move |req| {
        // Answers every range request with the first 1000 bytes, whatever was asked.
        let _ = req;
        Reply::Full {
            status: 206,
            headers: origin::owned(&[
                ("Content-Range", "bytes 0-999/200000"),
                ("ETag", "\"x\""),
                ("Cache-Control", "max-age=600"),
            ]),
            body: b[..1000].to_vec(),
            chunked: false,
        }
    });
    let server = start(&origin, "slice_bytes = 65536", "");
    // The slice request got another range: not stored, not passed off as the slice.
    // The client's own request goes to the origin, and the client gets exactly what
    // the origin says (RFC 9110 §15.3.7: the recipient goes by Content-Range).
    let r = get(&server, "/liar.mp4", &["Range: bytes=100000-100099"]);
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 0-999/200000"));
    assert_eq!(r.body, &body[..1000]);
    assert_eq!(
        origin.total(),
        2,
        "the slice request, then the client's own"
    );
    assert_eq!(
        origin.requests()[1].header("range"),
        Some("bytes=100000-100099")
    );
    // For a while the URL goes straight to the origin: one request each.
    let again = get(&server, "/liar.mp4", &["Range: bytes=100000-100099"]);
    assert_eq!(again.status, 206);
    assert_eq!(again.body, &body[..1000]);
    assert_eq!(origin.total(), 3, "nothing was cached");
    server.stop();
}

#[test]
fn small_objects_on_a_sliced_route_are_stored_whole_and_revalidated() {
    let body = Arc::new(content(10_000, 12));
    let b = body.clone();
    let origin = Origin::start(move |req| {
        if req.header("if-none-match") == Some("\"s\"") {
            return origin::status(304, &[("ETag", "\"s\""), MAX_AGE_4, AGED_1S]);
        }
        origin::ranged(b.clone(), &[("ETag", "\"s\""), MAX_AGE_4, AGED_1S])
    });
    let server = start(&origin, "slice_bytes = 65536", "");
    let r = get(&server, "/small.m3u8", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == *body);
    assert_eq!(origin.total(), 1);
    assert_eq!(origin.requests()[0].range(), Some((0, Some(65_535))));
    // A range of it is served from the whole object (still fresh).
    let part = get(&server, "/small.m3u8", &["Range: bytes=-100"]);
    assert_eq!(part.status, 206);
    assert_eq!(part.body, &body[9_900..]);
    assert!(
        cache_status(&part).starts_with("linerate; hit"),
        "{}",
        cache_status(&part)
    );
    assert_eq!(origin.total(), 1);
    outlive_freshness();
    let r = get(&server, "/small.m3u8", &[]);
    assert!(r.body == *body);
    let cs = cache_status(&r);
    assert!(
        cs.contains("fwd=stale") && cs.contains("fwd-status=304"),
        "{cs}"
    );
    assert_eq!(origin.total(), 2);
    assert_eq!(
        origin.requests()[1].range(),
        None,
        "revalidation asks for the whole object"
    );
    assert_eq!(origin.requests()[1].header("if-none-match"), Some("\"s\""));
    server.stop();
}

#[test]
fn a_206_body_longer_than_its_range_is_refused_and_the_server_stays_up() {
    let body = content(300_000, 13);
    let b = body.clone();
    let origin = Origin::start(move |req| {
        if req.path() == "/ok" {
            return origin::ok(b"still serving", &[]);
        }
        // Content-Range says one 64 KiB slice; the body is longer (chunked, so no
        // Content-Length to catch it up front).
        Reply::Full {
            status: 206,
            headers: origin::owned(&[
                ("Content-Range", "bytes 0-65535/300000"),
                ("ETag", "\"l\""),
                ("Cache-Control", "max-age=600"),
            ]),
            body: b[..100_000].to_vec(),
            chunked: true,
        }
    });
    let server = start(&origin, "slice_bytes = 65536", "");
    for _ in 0..2 {
        let (head, body) = get_to_close(&server, "/longslice.mp4");
        if head.starts_with("HTTP/1.1 200") {
            assert!(body.len() < 300_000, "a refused slice looked complete");
        } else {
            assert!(head.starts_with("HTTP/1.1 502"), "{head:.60}");
        }
    }
    assert_eq!(
        origin.count("/longslice.mp4"),
        2,
        "the lying slice was not cached"
    );
    assert_eq!(get(&server, "/ok", &[]).body, b"still serving");
    assert_eq!(origin.count("/ok"), 1);
    assert_eq!(origin.total(), 3);
    server.stop();
}

#[test]
fn expired_slices_are_fetched_again() {
    let body = Arc::new(content(200_000, 14));
    let b = body.clone();
    // Each slice is stale as soon as it is stored; revalidated, it is fresh.
    let origin = Origin::start(move |req| {
        let age = if req.header("if-none-match").is_some() {
            ("Age", "0")
        } else {
            STALE_ON_ARRIVAL
        };
        origin::ranged(
            b.clone(),
            &[("ETag", "\"e\""), ("Cache-Control", "max-age=60"), age],
        )
    });
    let server = start(&origin, "slice_bytes = 65536", "");
    assert!(get(&server, "/expiring.mp4", &[]).body == *body);
    assert_eq!(origin.total(), 4);
    for _ in 0..2 {
        let r = get(&server, "/expiring.mp4", &[]);
        assert_eq!(r.status, 200, "{}", cache_status(&r));
        assert!(r.body == *body, "an expired slice broke the response");
    }
    assert_eq!(origin.total(), 8, "each expired slice revalidated once");
    let later = &origin.requests()[4..];
    assert!(
        later
            .iter()
            .all(|r| r.header("if-none-match") == Some("\"e\"") && r.range().is_some()),
        "expired slices are revalidated with conditional range requests"
    );
    server.stop();
}

#[test]
fn stale_slices_stand_in_when_the_origin_fails() {
    let body = Arc::new(content(200_000, 16));
    let failing = Arc::new(AtomicUsize::new(0));
    let (b, f) = (body.clone(), failing.clone());
    let origin = Origin::start(move |_| {
        if f.load(Ordering::SeqCst) == 1 {
            return Reply::Reset;
        }
        // Stale as soon as stored; the route's stale_if_error_s covers it.
        origin::ranged(
            b.clone(),
            &[
                ("ETag", "\"f\""),
                ("Cache-Control", "max-age=60"),
                STALE_ON_ARRIVAL,
            ],
        )
    });
    // One worker: one pool of origin connections, so exact counts (see below).
    let server = CacheConfig::new(&origin)
        .server("workers = 1")
        .origin("first_byte_timeout_ms = 1000\nidle_timeout_ms = 1000\ndown_after = 1000")
        .route("slice_bytes = 65536\nstale_if_error_s = 600")
        .start();
    assert!(get(&server, "/sie.mp4", &[]).body == *body);
    assert_eq!(origin.total(), 4, "4 slices");
    failing.store(1, Ordering::SeqCst);
    let r = get(&server, "/sie.mp4", &[]);
    assert_eq!(r.status, 200, "{}", cache_status(&r));
    assert!(
        r.body == *body,
        "stale slices served whole while the origin fails"
    );
    let failed = &origin.requests()[4..];
    // Slice 0's on the pooled connection and again on a new one (a reset on a pooled
    // connection is retried once), each other slice's on a new one.
    assert_eq!(
        failed.len(),
        2 + 3,
        "each stale slice was revalidated (and failed) before standing in"
    );
    assert!(
        failed
            .iter()
            .all(|q| q.header("if-none-match") == Some("\"f\"") && q.range().is_some()),
        "conditional slice requests: {failed:#?}"
    );
    server.stop();
}

#[test]
fn a_range_beyond_the_end_is_416_and_keeps_the_cached_slices() {
    let body = Arc::new(content(200_000, 15));
    let b = body.clone();
    let origin = Origin::start(move |_| {
        origin::ranged(
            b.clone(),
            &[("ETag", "\"r\""), ("Cache-Control", "max-age=600")],
        )
    });
    let server = start(&origin, "slice_bytes = 65536", "");
    assert!(get(&server, "/r.mp4", &[]).body == *body);
    let before = origin.total();
    assert_eq!(before, 4, "4 slices");
    let r = get(&server, "/r.mp4", &["Range: bytes=99999999-"]);
    assert_eq!(r.status, 416);
    assert!(get(&server, "/r.mp4", &[]).body == *body);
    assert_eq!(
        origin.total(),
        before,
        "answered from the stored slices' length: no origin request"
    );
    server.stop();
}

#[test]
fn set_cookie_and_request_no_store_are_not_stored() {
    let origin = Origin::start(|req| {
        if req.path() == "/cookie" {
            return origin::ok(
                b"mine",
                &[("Set-Cookie", "session=1"), ("Cache-Control", "max-age=60")],
            );
        }
        origin::ok(b"shared", &[("Cache-Control", "max-age=60")])
    });
    let server = start(&origin, "slice_bytes = 0", "");
    get(&server, "/cookie", &[]);
    get(&server, "/cookie", &[]);
    assert_eq!(origin.count("/cookie"), 2);
    let r = get(&server, "/ns", &["Cache-Control: no-store"]);
    assert!(
        cache_status(&r).contains("fwd=request"),
        "{}",
        cache_status(&r)
    );
    get(&server, "/ns", &[]);
    assert_eq!(
        origin.count("/ns"),
        2,
        "the no-store request's response was not stored"
    );
    server.stop();
}

#[test]
fn a_drip_that_beats_the_idle_timeout_is_cut_by_the_fill_timeout() {
    let origin = Origin::start(|_| Reply::Drip {
        status: 200,
        headers: origin::owned(&[("Cache-Control", "max-age=60")]),
        body: vec![b'z'; 20_000],
        chunk: 1_000,
        delay: Duration::from_millis(300),
    });
    // Each pause (300 ms) is well inside the idle timeout (1 s); the whole response
    // would take 6 s, past the 1.5 s fill timeout.
    let server = start_with(&origin, "fill_timeout_ms = 1500", "slice_bytes = 0", "");
    let started = std::time::Instant::now();
    let (_, body) = get_to_close(&server, "/drip");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not cut by the fill timeout"
    );
    assert!(body.len() < 20_000, "a cut fill looked complete");
    assert_eq!(origin.total(), 1);
    get_to_close(&server, "/drip");
    assert_eq!(origin.total(), 2, "nothing was cached");
    server.stop();
}

#[test]
fn a_range_past_the_end_of_an_unstored_object_costs_one_origin_request() {
    let body = Arc::new(content(100_000, 21));
    let b = body.clone();
    let origin = Origin::start(move |req| match req.path() {
        "/empty.bin" => origin::ranged(Arc::new(Vec::new()), &[("ETag", "\"e\"")]),
        _ => origin::ranged(b.clone(), &[("ETag", "\"r\"")]),
    });
    let server = start(&origin, "slice_bytes = 65536", "");
    // The first slice it needs (slice 7) starts past the end: the origin's 416 for
    // that slice answers the client, whose range starts past the end too.
    for n in 1..=2 {
        let r = get(&server, "/short.bin", &["Range: bytes=500000-"]);
        assert_eq!(r.status, 416, "{}", cache_status(&r));
        assert_eq!(r.header("content-range"), Some("bytes */100000"));
        assert_eq!(origin.count("/short.bin"), n);
    }
    // An empty object asked for whole: the slice request gets 416, the client a 200.
    let r = get(&server, "/empty.bin", &[]);
    assert_eq!(r.status, 200, "{}", cache_status(&r));
    assert!(r.body.is_empty());
    assert_eq!(
        origin.count("/empty.bin"),
        2,
        "the slice, then the client's own"
    );
    server.stop();
}

/// Issue 22 part 4: `linerate stats` on an idle cache-mode server does not call it an
/// appliance (its hit ratio is null until the first lookup, which the view read as
/// appliance mode); it says no lookups happened yet and lists the cache's disk.
#[test]
fn stats_of_an_idle_cache_says_cache_mode_not_appliance() {
    let origin = Origin::start(|_| origin::ok(b"x", &[]));
    let cache = CacheConfig::new(&origin).start();
    let out = std::process::Command::new(support::binary())
        .args([
            "stats",
            "--once",
            "--admin",
            &cache.server.admin_addr().to_string(),
        ])
        .output()
        .unwrap();
    let view = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!view.contains("appliance"), "{view}");
    assert!(view.contains("no lookups yet"), "{view}");
    assert_eq!(origin.total(), 0);
    assert!(cache.stop().success());
}

/// Issue 22 part 4: cache mode's start-up line names what it fronts (its origins with
/// their servers, its routes in order, its disks), not an appliance `root=` it never
/// serves, and no warning about the appliance-only `open_file_cache` appears.
#[test]
fn cache_mode_start_up_log_names_origins_and_routes() {
    let origin = Origin::start(|_| origin::ok(b"x", &[]));
    let cache = CacheConfig::new(&origin)
        .route("host = \"cdn.example\"\npath_prefix = \"/vod/\"\norigin = \"o\"")
        .start();
    let server = &cache.server;
    support::eventually("the start-up line", || server.logged("starting"));
    let log = server.log.lock().unwrap().clone();
    let line = log.iter().find(|l| l.contains("starting")).unwrap();
    assert!(line.contains("mode=\"cache\""), "{line}");
    assert!(
        line.contains(&format!("origins=o={}", origin.url())),
        "{line}"
    );
    assert!(line.contains("routes=cdn.example/vod/->o"), "{line}");
    assert!(line.contains("disks=d0="), "{line}");
    assert!(!line.contains("root="), "{line}");
    assert!(
        !log.iter().any(|l| l.contains("open_file_cache")),
        "{log:?}"
    );
    assert!(cache.stop().success());
}
