//! Serving stale responses: RFC 9111 §4.2.4 (a cache MUST NOT generate a stale response
//! unless disconnected or explicitly permitted), RFC 5861 (`stale-while-revalidate`,
//! `stale-if-error`) and RFC 9111 §5.2.2.2 / §5.2.2.8 / §5.2.2.10 (`must-revalidate`,
//! `proxy-revalidate`, `s-maxage` forbid it). Staleness comes from `Age`, not sleeping.

use std::time::{Duration, Instant};

use crate::common::{assert_response, last_request, Phase};
use crate::matrix;
use crate::support::kit::CacheStatus;
use crate::support::origin::{self, Reply};

/// A failing origin answer: `status` with a recognisable body.
fn error(status: u16) -> Reply {
    Reply::Full {
        status,
        headers: Vec::new(),
        body: b"origin error".to_vec(),
        chunked: false,
    }
}

matrix! {
    /// RFC 5861 §4: with `stale-if-error=N`, "when an error is encountered, a cached
    /// stale response MAY be used to satisfy the request" within N s of staleness; an
    /// error is "any situation that would result in a 500, 502, 503, or 504". linerate
    /// (documented) uses it: the stored 200 is served for each of the four.
    fn stale_if_error_serves_stale_on_5xx(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |req| {
            if p.get() == 1 {
                origin::ok(
                    b"stored original",
                    &[("Cache-Control", "max-age=60, stale-if-error=86400"), ("Age", "120"), ("ETag", "\"sie\"")],
                )
            } else {
                error(req.path()[1..].parse().unwrap())
            }
        });
        let cache = v.start(&origin);
        let paths = ["/500", "/502", "/503", "/504"];
        for p in paths {
            assert_response(&cache.get(p, &[]), 200, b"stored original");
        }
        phase.set(2);
        for p in paths {
            assert_response(&cache.get(p, &[]), 200, b"stored original");
            assert_eq!(origin.count(p), 2, "{p}: the origin was asked, and failed");
        }
    }

    /// RFC 5861 §4: the same when the origin cannot be reached at all (it closes the
    /// connection without answering). The stored response came on a connection the
    /// origin closed, so the revalidation opens a new one: nothing to retry (a cache may
    /// retry a request that failed on a reused connection, RFC 9110 §9.2.2), exactly two
    /// origin requests.
    fn stale_if_error_serves_stale_when_origin_fails(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |_| {
            if p.get() == 1 {
                origin::ok(
                    b"stored original",
                    &[
                        ("Cache-Control", "max-age=60, stale-if-error=86400"),
                        ("Age", "120"),
                        ("ETag", "\"sie\""),
                        ("Connection", "close"),
                    ],
                )
            } else {
                Reply::Close
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/c", &[]), 200, b"stored original");
        phase.set(2);
        assert_response(&cache.get("/c", &[]), 200, b"stored original");
        assert_eq!(origin.count("/c"), 2, "the fill, then the failed revalidation");
    }

    /// RFC 5861 §4: past the `stale-if-error` window (10 s, the response ~7140 s stale)
    /// the stale response is not used. RFC 9111 §4.3.3: on a 5xx validation answer the
    /// cache "can either forward this response to the requesting client or act as if
    /// the server failed to respond" — so the client gets the origin's 503 or an error
    /// of the cache's own, never the stale body.
    fn stale_if_error_window_is_bounded(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |_| {
            if p.get() == 1 {
                origin::ok(
                    b"stored original",
                    &[("Cache-Control", "max-age=60, stale-if-error=10"), ("Age", "7200"), ("ETag", "\"sie\"")],
                )
            } else {
                error(503)
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/w", &[]), 200, b"stored original");
        phase.set(2);
        let r = cache.get("/w", &[]);
        assert!((500..600).contains(&r.status), "status {}; {:?}", r.status, r.headers);
        assert_ne!(r.body, b"stored original", "served stale past the window");
        if r.status == 503 {
            assert_eq!(r.body, b"origin error");
        }
        assert_eq!(origin.count("/w"), 2);
    }

    /// RFC 9111 §4.2.4: "A cache MUST NOT generate a stale response unless it is
    /// disconnected or doing so is explicitly permitted by the client or origin server".
    /// An origin answering 500 is connected, and nothing permits staleness: the client
    /// gets the 500 (or, RFC 9111 §4.3.3, an error of the cache's own), never the stale
    /// 200.
    fn stale_is_not_served_on_5xx_without_permission(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |_| {
            if p.get() == 1 {
                origin::ok(b"stored original", &[("Cache-Control", "max-age=60"), ("Age", "120"), ("ETag", "\"s\"")])
            } else {
                error(500)
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/e", &[]), 200, b"stored original");
        phase.set(2);
        let r = cache.get("/e", &[]);
        assert!((500..600).contains(&r.status), "status {}; {:?}", r.status, r.headers);
        assert_ne!(r.body, b"stored original", "served stale without permission");
        if r.status == 500 {
            assert_eq!(r.body, b"origin error");
        }
        assert_eq!(origin.count("/e"), 2);
    }

    /// RFC 9111 §5.2.2.2: with `must-revalidate`, "if a cache is disconnected, the cache
    /// MUST generate an error response rather than reuse the stale response. The
    /// generated status code SHOULD be 504"; §5.2.2.8 `proxy-revalidate` is the same for
    /// shared caches, and §5.2.2.10 `s-maxage` "incorporates the semantics of the
    /// proxy-revalidate response directive". linerate answers 504. (Retries allowed:
    /// RFC 9110 §9.2.2.)
    fn revalidation_directives_forbid_stale_when_origin_fails(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |req| {
            if p.get() == 1 {
                let cc = match req.path() {
                    "/must" => "max-age=60, must-revalidate",
                    "/proxy" => "max-age=60, proxy-revalidate",
                    _ => "s-maxage=60",
                };
                origin::ok(
                    b"stored original",
                    &[("Cache-Control", cc), ("Age", "120"), ("ETag", "\"mr\""), ("Connection", "close")],
                )
            } else {
                Reply::Close
            }
        });
        let cache = v.start(&origin);
        let paths = ["/must", "/proxy", "/s-maxage"];
        for p in paths {
            assert_response(&cache.get(p, &[]), 200, b"stored original");
        }
        phase.set(2);
        for p in paths {
            let r = cache.get(p, &[]);
            assert_eq!(r.status, 504, "{p}: {:?}", r.headers);
            assert_ne!(r.body, b"stored original");
            assert_eq!(origin.count(p), 2, "{p}: the fill, then the failed revalidation (a new connection: no retry)");
        }
    }

    /// RFC 9111 §5.2.2.4: a `no-cache` response is never reused without successful
    /// validation, so when the origin cannot be reached the client gets an error (502,
    /// the origin did not answer), not the stored body.
    fn no_cache_is_not_served_when_origin_fails(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |_| {
            if p.get() == 1 {
                origin::ok(
                    b"stored original",
                    &[("Cache-Control", "max-age=3600, no-cache"), ("ETag", "\"nc\""), ("Connection", "close")],
                )
            } else {
                Reply::Close
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/nc", &[]), 200, b"stored original");
        phase.set(2);
        let r = cache.get("/nc", &[]);
        assert_eq!(r.status, 502, "the origin failed to answer: {:?}", r.headers);
        assert_ne!(r.body, b"stored original");
        assert_eq!(origin.count("/nc"), 2, "the fill, then the failed revalidation (a new connection: no retry)");
    }

    /// RFC 9111 §5.2.2.2: a stale `must-revalidate` response whose validation gets an
    /// error answer is not used. §4.3.3: the cache forwards the origin's 503, or acts as
    /// if the origin failed to respond; linerate (documented) forwards it when the
    /// stored copy may not stand in, as here, so the client sees the origin's own error.
    /// Nothing replaces the stored copy: the next request validates again.
    fn must_revalidate_relays_the_origin_error(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |_| {
            if p.get() == 1 {
                origin::ok(
                    b"stored original",
                    &[("Cache-Control", "max-age=60, must-revalidate"), ("Age", "120"), ("ETag", "\"m\"")],
                )
            } else {
                error(503)
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/m", &[]), 200, b"stored original");
        phase.set(2);
        for n in 2..=3 {
            let r = cache.get("/m", &[]);
            assert_response(&r, 503, b"origin error");
            let cs = CacheStatus::of(&r);
            assert_eq!((cs.fwd.as_deref(), cs.fwd_status), (Some("stale"), Some(503)), "{cs:?}");
            assert_eq!(origin.count("/m"), n);
            assert_eq!(last_request(&origin, "/m").header("if-none-match"), Some("\"m\""));
        }
    }

    /// RFC 5861 §3: with `stale-while-revalidate=N`, a cache MAY serve the stale response
    /// (up to N s stale) "while it revalidates it in the background"; linerate does
    /// (documented). The stale body comes back at once although the origin takes 1.5 s
    /// (the kit's first-byte timeout is 2 s),
    /// the origin is asked once, and once that answer is in the new response is served
    /// (requests meanwhile get the stale one without asking again).
    fn stale_while_revalidate_serves_stale_and_refreshes(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |req| {
            if p.get() == 1 {
                origin::ok(
                    b"old body",
                    &[("Cache-Control", "max-age=60, stale-while-revalidate=86400"), ("Age", "120"), ("ETag", "\"old\"")],
                )
            } else {
                Reply::Delayed {
                    delay: Duration::from_millis(1500),
                    reply: Box::new(v.ranges.apply(
                        origin::ok(b"new body", &[("Cache-Control", "max-age=3600"), ("ETag", "\"new\"")]),
                        req,
                    )),
                }
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/w", &[]), 200, b"old body");
        phase.set(2);
        let t = Instant::now();
        let stale = cache.get("/w", &[]);
        let took = t.elapsed();
        assert_response(&stale, 200, b"old body");
        assert!(took < Duration::from_millis(1200), "the stale response waited {took:?}");
        assert!(origin.wait_count("/w", 2, Duration::from_secs(5)), "no background revalidation");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let r = cache.get("/w", &[]);
            if r.body == b"new body" {
                assert!(CacheStatus::of(&r).is_hit(), "{:?}", r.headers);
                break;
            }
            assert_response(&r, 200, b"old body");
            assert!(Instant::now() < deadline, "the revalidation never stored its answer");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(origin.count("/w"), 2, "one revalidation, however many stale answers");
    }

    /// RFC 5861 §3: past the `stale-while-revalidate` window (10 s, the response ~7140 s
    /// stale) the cache must not serve stale (RFC 9111 §4.2.4): the client waits for the
    /// origin's new response.
    fn stale_while_revalidate_window_is_bounded(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |_| {
            if p.get() == 1 {
                origin::ok(
                    b"old body",
                    &[("Cache-Control", "max-age=60, stale-while-revalidate=10"), ("Age", "7200"), ("ETag", "\"old\"")],
                )
            } else {
                origin::ok(b"new body", &[("Cache-Control", "max-age=3600"), ("ETag", "\"new\"")])
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/w", &[]), 200, b"old body");
        phase.set(2);
        assert_response(&cache.get("/w", &[]), 200, b"new body");
        assert_eq!(origin.count("/w"), 2);
    }
}
