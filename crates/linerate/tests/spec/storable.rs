//! RFC 9111 §3: storing responses — `no-store` (request and response), `private`,
//! `no-cache`, `must-revalidate`, status codes, `Authorization` (§3.5), `Set-Cookie`
//! (linerate's choice), which header fields are stored (§3.1), and 304 answers to a
//! client's own conditional request.

use crate::common::{
    assert_response, date, expect_not_reused, expect_reused, fields, nth, numbered,
};
use crate::matrix;
use crate::support::kit::CacheStatus;
use crate::support::origin;

matrix! {
    /// RFC 9111 §5.2.2.5: `no-store` in a response: "a cache MUST NOT store any part of
    /// either the immediate request or the response"; directive names are
    /// case-insensitive (§5.2), and explicit freshness does not change it.
    fn response_no_store_is_not_stored(v) {
        let origin = v.origin(numbered(|req| {
            let f = match req.path() {
                "/plain" => fields(&[("Cache-Control", "no-store")]),
                "/case" => fields(&[("Cache-Control", "No-StOrE")]),
                _ => vec![
                    ("Cache-Control".into(), "max-age=10000, no-store".into()),
                    ("Date".into(), date(0)),
                    ("Expires".into(), date(10_000)),
                ],
            };
            (200, f)
        }));
        let cache = v.start(&origin);
        for p in ["/plain", "/case", "/fresh"] {
            expect_not_reused(&cache, &origin, p, 200);
        }
    }

    /// RFC 9111 §5.2.2.7: "a shared cache MUST NOT store the response" with unqualified
    /// `private`; for the qualified form a shared cache MUST NOT store the named fields
    /// and MAY store the rest — linerate (documented) stores neither.
    fn private_is_not_stored(v) {
        let origin = v.origin(numbered(|req| {
            let cc = if req.path() == "/private" {
                "private, max-age=3600"
            } else {
                "max-age=3600, private=\"X-User\""
            };
            (200, fields(&[("Cache-Control", cc), ("X-User", "alice")]))
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/private", 200);
        expect_not_reused(&cache, &origin, "/qualified", 200);
    }

    /// RFC 9111 §5.2.1.5: `no-store` in a request: "a cache MUST NOT store any part of
    /// either this request or any response to it". The next plain request finds
    /// nothing stored.
    fn request_no_store_prevents_storing(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600")]))));
        let cache = v.start(&origin);
        let first = cache.get("/r", &["Cache-Control: no-store"]);
        assert_response(&first, 200, &nth(1, "/r"));
        let second = cache.get("/r", &[]);
        assert_response(&second, 200, &nth(2, "/r"));
        assert_eq!(origin.count("/r"), 2);
        // The second (plain) response was stored as usual.
        assert_response(&cache.get("/r", &[]), 200, &nth(2, "/r"));
        assert_eq!(origin.count("/r"), 2);
    }

    /// RFC 9111 §5.2.2.4: `no-cache` in a response: the cache "MUST NOT use the response
    /// to satisfy a subsequent request without successful validation on the origin
    /// server", even when fresh by `max-age` and `Expires`; case-insensitive (§5.2).
    /// Without a validator that means a full request every time.
    fn response_no_cache_is_not_reused_unvalidated(v) {
        let origin = v.origin(numbered(|req| {
            let cc = if req.path() == "/case" { "max-age=10000, No-CaChE" } else { "max-age=10000, no-cache" };
            (
                200,
                vec![
                    ("Cache-Control".into(), cc.into()),
                    ("Date".into(), date(0)),
                    ("Expires".into(), date(10_000)),
                ],
            )
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/nc", 200);
        expect_not_reused(&cache, &origin, "/case", 200);
    }

    /// RFC 9111 §5.2.2.2: `must-revalidate` only constrains reuse once the response is
    /// stale; a fresh one is reused (§4.2).
    fn must_revalidate_fresh_is_reused(v) {
        let origin = v.origin(numbered(|_| {
            (200, fields(&[("Cache-Control", "max-age=3600, must-revalidate"), ("ETag", "\"mr\"")]))
        }));
        let cache = v.start(&origin);
        expect_reused(&cache, &origin, "/mr", 200);
    }

    /// RFC 9111 §3: a final response with explicit freshness (`max-age`) may be stored
    /// whatever its status ("the response status code is final"); linerate stores and
    /// reuses these while fresh, redirects and negative answers included.
    fn explicit_freshness_makes_statuses_reusable(v) {
        let origin = v.origin(numbered(|req| {
            let code: u16 = req.path()[1..].parse().unwrap();
            let mut f = fields(&[("Cache-Control", "max-age=3600")]);
            if (300..400).contains(&code) {
                f.push(("Location".into(), "/elsewhere".into()));
            }
            (code, f)
        }));
        let cache = v.start(&origin);
        for code in [200u16, 203, 204, 300, 301, 302, 307, 308, 404, 405, 410] {
            expect_reused(&cache, &origin, &format!("/{code}"), code);
        }
    }

    /// RFC 9111 §4.2: a stale response MUST NOT be reused without validation, whatever
    /// its status: an `Expires` in the past (§5.3) makes each of these stale. (5xx are
    /// left to `stale.rs`: §4.3.3 lets a cache treat a 5xx validation answer as a
    /// failure instead of relaying it.)
    fn stale_responses_are_not_reused_whatever_the_status(v) {
        let origin = v.origin(numbered(|req| {
            let code: u16 = req.path()[1..].parse().unwrap();
            let mut f = vec![("Date".into(), date(0)), ("Expires".into(), date(-5000))];
            if (300..400).contains(&code) {
                f.push(("Location".into(), "/elsewhere".into()));
            }
            (code, f)
        }));
        let cache = v.start(&origin);
        for code in [200u16, 203, 204, 301, 302, 307, 308, 404, 410] {
            expect_not_reused(&cache, &origin, &format!("/{code}"), code);
        }
    }

    /// RFC 9111 §3.5: "A shared cache MUST NOT use a cached response to a request with
    /// an Authorization header field ... unless" `must-revalidate`, `public` or
    /// `s-maxage` allows it. Explicit freshness by `Expires` is not enough. The
    /// credentials are forwarded.
    fn authorized_response_is_not_stored_by_default(v) {
        let origin = v.origin(numbered(|_| {
            (200, vec![("Date".into(), date(0)), ("Expires".into(), date(30 * 86_400))])
        }));
        let cache = v.start(&origin);
        let first = cache.get("/auth", &["Authorization: Basic Zm9vOmJhcg=="]);
        assert_response(&first, 200, &nth(1, "/auth"));
        assert_eq!(
            origin.requests()[0].header("authorization"),
            Some("Basic Zm9vOmJhcg==")
        );
        let second = cache.get("/auth", &["Authorization: Basic Zm9vOmJhcg=="]);
        assert_response(&second, 200, &nth(2, "/auth"));
        let third = cache.get("/auth", &[]);
        assert_response(&third, 200, &nth(3, "/auth"));
        assert_eq!(origin.count("/auth"), 3);
    }

    /// RFC 9111 §3.5 is about the request the origin answered. `Authorization` named in
    /// `Connection` is removed before forwarding (RFC 9110 §7.6.1), so the origin
    /// answered an anonymous request: that response is stored like any other and
    /// serves anonymous requests. linerate reads every storing decision and key part
    /// from the request as forwarded (the `Vary` tests in `vary.rs` guard the key);
    /// this pins the same reading for `Authorization` (it was read from the request as
    /// sent, and such a response was never stored).
    fn authorization_the_origin_never_saw_does_not_block_storing(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600")]))));
        let cache = v.start(&origin);
        let first = cache.get("/anon", &["Authorization: Bearer t", "Connection: Authorization"]);
        assert_response(&first, 200, &nth(1, "/anon"));
        assert_eq!(origin.requests()[0].header("authorization"), None);
        assert_response(&cache.get("/anon", &[]), 200, &nth(1, "/anon"));
        assert_eq!(origin.count("/anon"), 1);
    }

    /// RFC 9111 §3.5: `public` (§5.2.2.9), `s-maxage` (§5.2.2.10) and `must-revalidate`
    /// (§5.2.2.2) each allow a shared cache to store and reuse the response to a request
    /// with `Authorization`.
    fn authorized_response_is_stored_when_allowed(v) {
        let origin = v.origin(numbered(|req| {
            let cc = match req.path() {
                "/public" => "max-age=3600, public",
                "/s-maxage" => "s-maxage=3600",
                _ => "max-age=3600, must-revalidate",
            };
            (200, fields(&[("Cache-Control", cc)]))
        }));
        let cache = v.start(&origin);
        for p in ["/public", "/s-maxage", "/must-revalidate"] {
            let first = cache.get(p, &["Authorization: Bearer token-1"]);
            assert_response(&first, 200, &nth(1, p));
            let second = cache.get(p, &[]);
            assert_response(&second, 200, &nth(1, p));
            assert_eq!(origin.count(p), 1, "{p}");
        }
    }

    /// linerate's documented choice (RFC 9111 §3 lets a cache decline to store anything;
    /// §7.3 warns about "sensitive information"): a response with `Set-Cookie` is not
    /// stored unless `public` or `s-maxage` marks it shareable.
    fn set_cookie_is_stored_only_when_shareable(v) {
        let origin = v.origin(numbered(|req| {
            let cc = match req.path() {
                "/plain" => "max-age=3600",
                "/public" => "max-age=3600, public",
                _ => "s-maxage=3600",
            };
            (200, fields(&[("Cache-Control", cc), ("Set-Cookie", "session=abc")]))
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/plain", 200);
        expect_reused(&cache, &origin, "/public", 200);
        expect_reused(&cache, &origin, "/s-maxage", 200);
    }

    /// RFC 9110 §7.6.1: a proxy MUST remove the `Connection` field and the fields it
    /// lists before forwarding, and SHOULD remove `Keep-Alive`, `Proxy-Connection`,
    /// `Upgrade`...; RFC 9111 §3.1 lets a cache do so before storage. None of them
    /// reaches the client, on the miss or from the store; other fields do.
    fn hop_by_hop_response_fields_are_not_forwarded_or_replayed(v) {
        let origin = v.origin(|_| {
            origin::ok(
                b"hop",
                &[
                    ("Cache-Control", "max-age=3600"),
                    ("Connection", "X-Conn-A, X-Conn-B"),
                    ("X-Conn-A", "1"),
                    ("X-Conn-B", "2"),
                    ("X-End", "3"),
                    ("Keep-Alive", "timeout=77"),
                    ("Proxy-Connection", "keep-alive"),
                    ("Upgrade", "example/1"),
                ],
            )
        });
        let cache = v.start(&origin);
        let miss = cache.get("/hop", &[]);
        let hit = cache.get("/hop", &[]);
        assert_eq!(origin.count("/hop"), 1);
        for r in [&miss, &hit] {
            assert_response(r, 200, b"hop");
            assert_eq!(r.header("x-end"), Some("3"));
            for name in ["x-conn-a", "x-conn-b", "proxy-connection", "upgrade"] {
                assert!(r.header(name).is_none(), "{name} forwarded: {:?}", r.headers);
            }
            assert!(
                !r.values("keep-alive").iter().any(|v| v.contains("77")),
                "the origin's Keep-Alive forwarded: {:?}",
                r.headers
            );
            assert!(
                !r.values("connection").iter().any(|v| v.to_ascii_lowercase().contains("x-conn")),
                "the origin's Connection options forwarded: {:?}",
                r.headers
            );
        }
    }

    /// RFC 9111 §5.2.2.4: with the qualified form `no-cache="X-Secret"`, the named field
    /// MUST NOT be sent in a response to a later request without successful
    /// validation; the rest may be reused. A cache may instead treat it as plain
    /// `no-cache` and go to the origin. Either way `X-Secret` never comes from the
    /// store unvalidated.
    fn qualified_no_cache_field_is_not_reused(v) {
        let origin = v.origin(numbered(|_| {
            (
                200,
                fields(&[
                    ("Cache-Control", "max-age=3600, no-cache=\"X-Secret\""),
                    ("X-Secret", "s"),
                    ("X-Public", "p"),
                ]),
            )
        }));
        let cache = v.start(&origin);
        let first = cache.get("/q", &[]);
        assert_response(&first, 200, &nth(1, "/q"));
        let second = cache.get("/q", &[]);
        // linerate takes the second way (documented): plain `no-cache`, so the second
        // request is validated at the origin (which, having no validator to compare,
        // sends the whole response again).
        assert_eq!(origin.count("/q"), 2, "{:?}", second.headers);
        assert_response(&second, 200, &nth(2, "/q"));
        assert!(CacheStatus::of(&second).fwd.is_some(), "{:?}", second.headers);
    }

    /// RFC 9111 §4.3.2 / RFC 9110 §13.2: a client's conditional request on a miss may be
    /// forwarded; a 304 answers only that client. A 304 has no content, so it can never
    /// be stored as the response to a later unconditional request (RFC 9111 §3.3-3.4):
    /// the next plain GET receives the full 200.
    fn client_conditional_304_is_not_stored_as_the_response(v) {
        let origin = v.origin(|req: &origin::Request| {
            if req.header("if-none-match") == Some("\"x\"") {
                origin::status(304, &[("ETag", "\"x\""), ("Cache-Control", "max-age=3600")])
            } else {
                origin::ok(b"the full body", &[("ETag", "\"x\""), ("Cache-Control", "max-age=3600")])
            }
        });
        let cache = v.start(&origin);
        let cond = cache.get("/c", &["If-None-Match: \"x\""]);
        assert_eq!(cond.status, 304, "{:?}", cond.headers);
        assert!(cond.body.is_empty());
        let plain = cache.get("/c", &[]);
        assert_response(&plain, 200, b"the full body");
        // linerate fills with a plain GET (the conditional is the cache's to answer) and
        // answers the client's condition from what it stored: one origin request.
        assert_eq!(origin.count("/c"), 1, "{:?}", plain.headers);
        assert!(origin.requests().iter().all(|r| r.header("if-none-match").is_none()));
    }
}
