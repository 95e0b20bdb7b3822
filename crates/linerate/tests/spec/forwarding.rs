//! What reaches the origin, and what the cache key is made of: forwarding fields (RFC
//! 9110 §7.6.3 `Via`; linerate's `X-Forwarded-*` as documented), hop-by-hop fields
//! (RFC 9110 §7.6.1), unkeyed client inputs that could poison the cache (RFC 9111
//! §7.1), the request-target (RFC 9112 §3.2, §3.2.2) and the query (RFC 9111 §2).

use crate::common::{assert_response, joined, last_request, parse_raw};
use crate::matrix;
use crate::support::kit::Variant;
use crate::support::origin::{self, Request};

/// A cacheable origin whose body reflects the `X-Forwarded-Host` it received — the
/// kind of application a poisoned forwarding header would exploit.
fn reflecting(req: &Request) -> origin::Reply {
    let xfh = req.header("x-forwarded-host").unwrap_or("none").to_owned();
    origin::ok(
        format!("host={xfh}").as_bytes(),
        &[("Cache-Control", "max-age=3600")],
    )
}

/// Client fields that override a request's host, scheme, path or method in some
/// servers and frameworks; none may reach the origin.
const SPOOFING: [(&str, &str); 20] = [
    ("Forwarded", "for=192.0.2.1;host=evil.example;proto=https"),
    ("X-Forwarded-Host", "evil.example"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Port", "8443"),
    ("X-Forwarded-Scheme", "https"),
    ("X-Forwarded-Server", "evil.example"),
    ("X-Forwarded-Prefix", "/evil"),
    ("X-Host", "evil.example"),
    ("X-Original-URL", "/admin"),
    ("X-Rewrite-URL", "/admin"),
    ("X-HTTP-Method-Override", "DELETE"),
    ("X-HTTP-Method", "DELETE"),
    ("X-Method-Override", "DELETE"),
    ("X-Forwarded-Ssl", "on"),
    ("Front-End-Https", "on"),
    ("X-Url-Scheme", "https"),
    ("X_Forwarded_Host", "evil.example"),
    ("X-Real-IP", "10.9.9.9"),
    ("True-Client-IP", "10.9.9.9"),
    ("Client-IP", "10.9.9.9"),
];

matrix! {
    /// RFC 9111 §7.1 (cache poisoning): inputs outside the cache key must not change
    /// what the origin produces for everybody. linerate (documented) drops every
    /// client-sent host/scheme/path/method override and sets `X-Forwarded-Host` and
    /// `X-Forwarded-Proto` itself, so a reflecting origin stores `host=test`, not the
    /// attacker's host, and the next client gets that.
    fn spoofing_fields_never_reach_the_origin(v) {
        let origin = v.origin(reflecting);
        let cache = v.start(&origin);
        let lines: Vec<String> = SPOOFING.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let attacker = cache.get("/page", &refs);
        assert_response(&attacker, 200, b"host=test");
        let victim = cache.get("/page", &[]);
        assert_response(&victim, 200, b"host=test");
        assert_eq!(origin.count("/page"), 1);
        let req = last_request(&origin, "/page");
        assert_eq!(req.method, "GET");
        assert_eq!(req.path(), "/page");
        for (name, _) in SPOOFING {
            match name {
                "X-Forwarded-Host" => assert_eq!(joined(&req, name), "test"),
                "X-Forwarded-Proto" => assert_eq!(joined(&req, name), "http"),
                _ => assert!(req.header(name).is_none(), "{name} reached the origin: {:?}", req.headers),
            }
        }
    }

    /// linerate's documented forwarding fields: `X-Forwarded-For` gets the peer address
    /// appended to the client's list (or alone), `X-Forwarded-Proto: http`, and
    /// `X-Forwarded-Host` is the request's host, lower-cased, without its port.
    fn forwarding_fields_are_set_by_the_cache(v) {
        let origin = v.origin(|_| origin::ok(b"ok", &[("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        assert_response(&cache.get("/a", &["X-Forwarded-For: 203.0.113.7"]), 200, b"ok");
        let req = last_request(&origin, "/a");
        assert_eq!(joined(&req, "x-forwarded-for"), "203.0.113.7, 127.0.0.1");
        // Named in Connection: for this hop only, so not extended but dropped (RFC 9110
        // §7.6.1).
        let hop = ["Connection: X-Forwarded-For, Via", "X-Forwarded-For: 1.1.1.1", "Via: 1.0 p"];
        assert_response(&cache.get("/hop", &hop), 200, b"ok");
        let req = last_request(&origin, "/hop");
        assert_eq!(joined(&req, "x-forwarded-for"), "127.0.0.1");
        assert!(!joined(&req, "via").contains("1.0 p"), "{:?}", req.headers);
        assert_response(&cache.get("/b", &["Host: Media.Example.COM:8080"]), 200, b"ok");
        let req = last_request(&origin, "/b");
        assert_eq!(joined(&req, "x-forwarded-for"), "127.0.0.1");
        assert_eq!(joined(&req, "x-forwarded-proto"), "http");
        assert_eq!(joined(&req, "x-forwarded-host"), "media.example.com");
        assert_eq!(origin.total(), 3);
    }

    /// RFC 9110 §7.6.3: "A proxy MUST send an appropriate Via header field ... in each
    /// message that it forwards" (a gateway in each inbound request), appending its own
    /// entry to any received: `1.1 linerate` last.
    fn via_is_appended(v) {
        let origin = v.origin(|_| origin::ok(b"ok", &[("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        assert_response(&cache.get("/v", &[]), 200, b"ok");
        let via = joined(&last_request(&origin, "/v"), "via");
        assert!(via.trim_end().ends_with("1.1 linerate"), "Via: {via}");
        assert_response(&cache.get("/w", &["Via: 1.0 fred"]), 200, b"ok");
        let via = joined(&last_request(&origin, "/w"), "via");
        assert!(via.starts_with("1.0 fred"), "Via: {via}");
        assert!(via.trim_end().ends_with("1.1 linerate"), "Via: {via}");
        assert_eq!(origin.total(), 2);
    }

    /// RFC 9110 §7.6.1: a proxy MUST remove `Connection` and every field it names, and
    /// SHOULD remove `Keep-Alive`, `TE`, `Transfer-Encoding`, `Upgrade`,
    /// `Proxy-Connection`...; `Proxy-Authorization` is for the proxy (RFC 9110 §11.7.2)
    /// and `Trailer` a hop-by-hop declaration. linerate (documented) forwards none of
    /// them; an ordinary field does reach the origin.
    fn hop_by_hop_request_fields_are_not_forwarded(v) {
        let origin = v.origin(|_| origin::ok(b"ok", &[("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        let r = cache.get(
            "/h",
            &[
                "Connection: X-Hop",
                "X-Hop: 1",
                "Keep-Alive: timeout=5",
                "TE: trailers",
                "Trailer: X-Trailing",
                "Upgrade: example/1",
                "Proxy-Authorization: Basic Zm9vOmJhcg==",
                "Proxy-Connection: keep-alive",
                "X-End: kept",
            ],
        );
        assert_response(&r, 200, b"ok");
        assert_eq!(origin.count("/h"), 1);
        let req = last_request(&origin, "/h");
        for name in ["x-hop", "keep-alive", "te", "trailer", "upgrade", "proxy-authorization", "proxy-connection"] {
            assert!(req.header(name).is_none(), "{name} forwarded: {:?}", req.headers);
        }
        let conn = joined(&req, "connection").to_ascii_lowercase();
        assert!(!conn.contains("x-hop"), "Connection options forwarded: {conn}");
        assert_eq!(req.header("x-end"), Some("kept"));
    }

    /// RFC 9112 §3.2.2: for the absolute form the target's authority, not `Host`,
    /// identifies the resource ("MUST ignore the received Host header field"), and a
    /// proxy sends a Host based on the target. So `GET http://other.example/p` with
    /// `Host: test` must not hit `http://test/p`'s stored response; it is the same
    /// resource as `/p` with `Host: other.example`.
    fn absolute_form_is_keyed_by_its_authority(v) {
        let origin = v.origin(reflecting);
        let cache = v.start(&origin);
        assert_response(&cache.get("/p", &[]), 200, b"host=test");
        let raw = cache.raw(b"GET http://other.example/p HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        let (status, _, body, _) = parse_raw(&raw).expect("a response");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&raw));
        assert_eq!(body, b"host=other.example");
        assert_eq!(origin.count("/p"), 2);
        assert_response(&cache.get("/p", &["Host: other.example"]), 200, b"host=other.example");
        assert_response(&cache.get("/p", &[]), 200, b"host=test");
        assert_eq!(origin.count("/p"), 2);
    }

    /// RFC 9111 §2: the cache key is (at least) the method and the target URI — query
    /// included (RFC 3986 §3.4): another query is another resource; the same query hits.
    fn query_is_part_of_the_key(v) {
        let origin = v.origin(|req: &Request| {
            origin::ok(format!("for {}", req.path()).as_bytes(), &[("Cache-Control", "max-age=3600")])
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/q?a=1", &[]), 200, b"for /q?a=1");
        assert_response(&cache.get("/q?a=2", &[]), 200, b"for /q?a=2");
        assert_response(&cache.get("/q?a=1", &[]), 200, b"for /q?a=1");
        assert_response(&cache.get("/q", &[]), 200, b"for /q");
        assert_eq!(origin.count("/q?a=1"), 1);
        assert_eq!(origin.count("/q?a=2"), 1);
        assert_eq!(origin.count("/q"), 1);
    }

    /// RFC 9110 §2.5: a request with a higher minor version of a major version the
    /// server implements is processed as the highest minor version it conforms to:
    /// `HTTP/1.2` is an HTTP/1.1 request, answered (from the store the second time) in
    /// HTTP/1.1. Guards against the 505 it got. A higher major version over HTTP/1
    /// framing (`HTTP/2.0`) is still 505, and reaches nothing.
    fn higher_http1_minor_is_processed_as_http11(v) {
        let origin = v.origin(|_| origin::ok(b"one-two", &[("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        for _ in 0..2 {
            let raw = cache.raw(b"GET /m HTTP/1.2\r\nHost: test\r\nConnection: close\r\n\r\n");
            let (status, _, body, _) = parse_raw(&raw).expect("a response");
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&raw));
            assert!(raw.starts_with(b"HTTP/1.1 200 "), "{}", String::from_utf8_lossy(&raw));
            assert_eq!(body, b"one-two");
        }
        assert_eq!(origin.count("/m"), 1, "the second is a hit");
        let raw = cache.raw(b"GET /m2 HTTP/2.0\r\nHost: test\r\nConnection: close\r\n\r\n");
        assert!(raw.starts_with(b"HTTP/1.1 505 "), "{}", String::from_utf8_lossy(&raw));
        assert_eq!(origin.count("/m2"), 0);
    }
}

/// RFC 9112 §3.2: the request-target has no fragment (`origin-form = absolute-path [ "?"
/// query ]`), so a target with `#` is invalid: 400, and nothing is fetched. Nothing
/// reaches the origin, so slicing and `Range` support cannot matter: one cell.
#[test]
fn fragment_in_request_target_is_rejected() {
    let v = Variant::ALL[0];
    let origin = v.origin(|_| origin::ok(b"ok", &[("Cache-Control", "max-age=3600")]));
    let cache = v.start(&origin);
    let raw = cache.raw(b"GET /p#frag HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    let (status, _, _, _) = parse_raw(&raw).expect("a response");
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&raw));
    assert_eq!(origin.total(), 0);
}
