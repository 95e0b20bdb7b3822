//! RFC 9111 §4.3: validation — conditional requests the cache sends to the origin
//! (§4.3.1), freshening stored responses with a 304 (§3.2, §4.3.4), replacing them with
//! a 200 (§4.3.3); and conditional requests from clients answered from the store (RFC
//! 9111 §4.3.2, RFC 9110 §13.1, §13.2).

use crate::common::{assert_response, date, fill_requests, last_request, Phase, BIG};
use crate::matrix;
use crate::support::content;
use crate::support::kit::Variant;
use crate::support::origin::{self, Request};

/// A 304 when the request's `If-None-Match` names `etag`, else `full`.
fn not_modified_or(
    req: &Request,
    etag: &str,
    not_modified: &[(&str, &str)],
    full: origin::Reply,
) -> origin::Reply {
    match req.header("if-none-match") {
        Some(inm) if inm.split(',').any(|t| t.trim() == etag) => origin::status(304, not_modified),
        _ => full,
    }
}

matrix! {
    /// RFC 9111 §4.3.1: to validate a stale stored response with an entity tag the cache
    /// sends `If-None-Match` with it; §4.3.3: on a 304 it uses the stored response
    /// (§4.3.4 freshened by the 304's fields: here `max-age=3600`, so the next request
    /// is a hit).
    fn stale_etag_is_revalidated_with_if_none_match(v) {
        let origin = v.origin(|req| {
            not_modified_or(
                req,
                "\"v1\"",
                &[("ETag", "\"v1\""), ("Cache-Control", "max-age=3600")],
                origin::ok(b"stored body", &[("ETag", "\"v1\""), ("Cache-Control", "max-age=0")]),
            )
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/e", &[]), 200, b"stored body");
        assert_eq!(origin.count("/e"), 1);
        assert_response(&cache.get("/e", &[]), 200, b"stored body");
        assert_eq!(origin.count("/e"), 2);
        assert_eq!(last_request(&origin, "/e").header("if-none-match"), Some("\"v1\""));
        assert_response(&cache.get("/e", &[]), 200, b"stored body");
        assert_eq!(origin.count("/e"), 2, "the 304 made the stored response fresh");
    }

    /// RFC 9111 §4.3.1: with only a `Last-Modified`, the cache validates with
    /// `If-Modified-Since` carrying that date; a 304 lets it use the stored response.
    fn stale_last_modified_is_revalidated_with_if_modified_since(v) {
        let lm = date(-86_400);
        let l = lm.clone();
        let origin = v.origin(move |req: &Request| {
            if req.header("if-modified-since") == Some(l.as_str()) {
                origin::status(304, &[("Cache-Control", "max-age=3600")])
            } else {
                origin::ok(b"dated body", &[("Last-Modified", &l), ("Cache-Control", "max-age=0")])
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/m", &[]), 200, b"dated body");
        assert_response(&cache.get("/m", &[]), 200, b"dated body");
        assert_eq!(origin.count("/m"), 2);
        assert_eq!(last_request(&origin, "/m").header("if-modified-since"), Some(lm.as_str()));
        assert_response(&cache.get("/m", &[]), 200, b"dated body");
        assert_eq!(origin.count("/m"), 2);
    }

    /// linerate's documented choice within RFC 9111 §3 and §4.3: a response with a
    /// validator but no explicit freshness (and no `Last-Modified`) is stored and stale
    /// at once, so every later request is a conditional one, answered from the store on
    /// a 304.
    fn etag_without_freshness_is_stored_and_revalidated(v) {
        let origin = v.origin(|req| {
            not_modified_or(req, "\"t\"", &[("ETag", "\"t\"")], origin::ok(b"tagged", &[("ETag", "\"t\"")]))
        });
        let cache = v.start(&origin);
        for i in 1..=3 {
            assert_response(&cache.get("/t", &[]), 200, b"tagged");
            assert_eq!(origin.count("/t"), i);
        }
        let reqs = origin.requests();
        assert!(reqs[0].header("if-none-match").is_none());
        assert_eq!(reqs[1].header("if-none-match"), Some("\"t\""));
        assert_eq!(reqs[2].header("if-none-match"), Some("\"t\""));
    }

    /// RFC 9111 §4.3.3: a full (200) response to the validation request replaces the
    /// stored one (§3.2) and is used: the new body is served, then reused while fresh.
    fn full_response_to_validation_replaces_stored(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |_req| {
            if p.get() == 1 {
                origin::ok(b"old body", &[("ETag", "\"old\""), ("Cache-Control", "max-age=0")])
            } else {
                origin::ok(b"new, longer body", &[("ETag", "\"new\""), ("Cache-Control", "max-age=3600")])
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/r", &[]), 200, b"old body");
        phase.set(2);
        let second = cache.get("/r", &[]);
        assert_response(&second, 200, b"new, longer body");
        assert_eq!(second.header("etag"), Some("\"new\""));
        assert_eq!(origin.count("/r"), 2);
        let third = cache.get("/r", &[]);
        assert_response(&third, 200, b"new, longer body");
        assert_eq!(origin.count("/r"), 2);
    }

    /// RFC 9111 §3.2 / §4.3.4: a 304 updates the stored header fields — "the cache MUST
    /// add each header field in the provided response to the stored response, replacing
    /// field values that are already present" — custom fields, `Content-Type` and
    /// `Cache-Control` included; fields the 304 omits are kept; the body is unchanged.
    /// Small body.
    fn not_modified_updates_stored_fields_small(v) {
        update_304(v, 2000);
    }

    /// The same with a body of several slices: every slice keeps its bytes and the
    /// updated fields apply to the whole object.
    fn not_modified_updates_stored_fields_large(v) {
        update_304(v, BIG);
    }

    /// RFC 9111 §3.2 / §4.3.4: a new `Expires` in the 304 replaces the stored one, so a
    /// response stored expired becomes fresh.
    fn not_modified_updates_expires(v) {
        let origin = v.origin(|req: &Request| {
            if req.header("if-none-match").is_some() {
                origin::Reply::Full {
                    status: 304,
                    headers: vec![
                        ("ETag".into(), "\"x\"".into()),
                        ("Date".into(), date(0)),
                        ("Expires".into(), date(3600)),
                    ],
                    body: Vec::new(),
                    chunked: false,
                }
            } else {
                origin::Reply::Full {
                    status: 200,
                    headers: vec![
                        ("ETag".into(), "\"x\"".into()),
                        ("Date".into(), date(0)),
                        ("Expires".into(), date(-60)),
                    ],
                    body: b"expiring".to_vec(),
                    chunked: false,
                }
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/x", &[]), 200, b"expiring");
        assert_response(&cache.get("/x", &[]), 200, b"expiring");
        assert_eq!(origin.count("/x"), 2);
        assert_response(&cache.get("/x", &[]), 200, b"expiring");
        assert_eq!(origin.count("/x"), 2, "the 304's Expires made it fresh");
    }

    /// RFC 9111 §3.2: when updating stored fields from a 304, `Content-Length` is an
    /// exception (and RFC 9112 §6.3: a 304 has no content whatever its fields): a wrong
    /// `Content-Length` in the 304 does not change the stored length or body.
    fn content_length_in_304_is_not_applied(v) {
        let body = content(5000, 7);
        let b = body.clone();
        let origin = v.origin(move |req| {
            not_modified_or(
                req,
                "\"cl\"",
                &[("ETag", "\"cl\""), ("Cache-Control", "max-age=3600"), ("Content-Length", "3")],
                origin::ok(&b, &[("ETag", "\"cl\""), ("Cache-Control", "max-age=0")]),
            )
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/cl", &[]), 200, &body);
        let second = cache.get("/cl", &[]);
        assert_response(&second, 200, &body);
        assert_eq!(second.header("content-length"), Some("5000"));
        let third = cache.get("/cl", &[]);
        assert_response(&third, 200, &body);
        assert_eq!(third.header("content-length"), Some("5000"));
        assert_eq!(origin.count("/cl"), 2);
    }

    /// RFC 9111 §5.2.2.4: a response with `no-cache` is stored but each reuse needs a
    /// successful validation — a conditional request per use even while `max-age` says
    /// fresh.
    fn response_no_cache_is_revalidated_on_every_use(v) {
        let origin = v.origin(|req| {
            not_modified_or(
                req,
                "\"nc\"",
                &[("ETag", "\"nc\""), ("Cache-Control", "max-age=3600, no-cache")],
                origin::ok(b"no-cache body", &[("ETag", "\"nc\""), ("Cache-Control", "max-age=3600, no-cache")]),
            )
        });
        let cache = v.start(&origin);
        for i in 1..=3 {
            assert_response(&cache.get("/nc", &[]), 200, b"no-cache body");
            assert_eq!(origin.count("/nc"), i);
        }
        assert_eq!(last_request(&origin, "/nc").header("if-none-match"), Some("\"nc\""));
    }

    /// RFC 9111 §5.2.2.2: once stale, a `must-revalidate` response is used only after a
    /// successful validation (here a 304).
    fn must_revalidate_stale_is_validated(v) {
        let origin = v.origin(|req| {
            not_modified_or(
                req,
                "\"mr\"",
                &[("ETag", "\"mr\""), ("Cache-Control", "max-age=3600, must-revalidate")],
                origin::ok(b"mr body", &[("ETag", "\"mr\""), ("Cache-Control", "max-age=3600, must-revalidate"), ("Age", "7200")]),
            )
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/mr", &[]), 200, b"mr body");
        assert_response(&cache.get("/mr", &[]), 200, b"mr body");
        assert_eq!(origin.count("/mr"), 2);
        assert_eq!(last_request(&origin, "/mr").header("if-none-match"), Some("\"mr\""));
    }

    /// RFC 9110 §13.1.2 / §13.2.2 and RFC 9111 §4.3.2: a cache answering from a fresh
    /// stored response evaluates `If-None-Match` itself — a match (weak comparison, any
    /// member of the list, or `*`) gives 304, which MUST carry the `ETag` (RFC 9110
    /// §15.4.5) and no body; no match gives the full 200. No origin request.
    fn client_if_none_match_on_hit(v) {
        let origin = v.origin(|_| origin::ok(b"entity", &[("ETag", "\"abc\""), ("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        assert_response(&cache.get("/i", &[]), 200, b"entity");
        for inm in ["\"abc\"", "\"x\", \"abc\", \"y\"", "W/\"abc\"", "*"] {
            let r = cache.get("/i", &[&format!("If-None-Match: {inm}")]);
            assert_eq!(r.status, 304, "If-None-Match: {inm}; {:?}", r.headers);
            assert!(r.body.is_empty());
            assert_eq!(r.header("etag"), Some("\"abc\""), "304 must carry the ETag");
        }
        let other = cache.get("/i", &["If-None-Match: \"other\""]);
        assert_response(&other, 200, b"entity");
        assert_eq!(origin.count("/i"), 1);
    }

    /// RFC 9110 §13.1.3: `If-Modified-Since` — 304 when the stored `Last-Modified` is not
    /// later than the given date, 200 otherwise; answered from the store.
    fn client_if_modified_since_on_hit(v) {
        let lm = date(-3000);
        let l = lm.clone();
        let origin = v.origin(move |_| {
            origin::ok(b"dated entity", &[("Last-Modified", &l), ("Date", &date(0)), ("Cache-Control", "max-age=3600")])
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/d", &[]), 200, b"dated entity");
        for ims in [lm.clone(), date(-2000)] {
            let r = cache.get("/d", &[&format!("If-Modified-Since: {ims}")]);
            assert_eq!(r.status, 304, "If-Modified-Since: {ims}; {:?}", r.headers);
            assert!(r.body.is_empty());
        }
        let earlier = cache.get("/d", &[&format!("If-Modified-Since: {}", date(-4000))]);
        assert_response(&earlier, 200, b"dated entity");
        assert_eq!(origin.count("/d"), 1);
    }

    /// RFC 9110 §13.1.3: "A recipient MUST ignore If-Modified-Since if the request
    /// contains an If-None-Match header field": a non-matching `If-None-Match` gives 200
    /// even though `If-Modified-Since` alone would give 304; a matching one gives 304.
    fn if_none_match_takes_precedence_over_if_modified_since(v) {
        let lm = date(-5000);
        let l = lm.clone();
        let origin = v.origin(move |_| {
            origin::ok(b"both validators", &[("ETag", "\"abc\""), ("Last-Modified", &l), ("Cache-Control", "max-age=3600")])
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/p", &[]), 200, b"both validators");
        let ims = format!("If-Modified-Since: {}", date(-1));
        let r = cache.get("/p", &["If-None-Match: \"other\"", &ims]);
        assert_response(&r, 200, b"both validators");
        let r = cache.get("/p", &["If-None-Match: \"abc\"", &format!("If-Modified-Since: {}", date(-10_000))]);
        assert_eq!(r.status, 304, "{:?}", r.headers);
        assert_eq!(origin.count("/p"), 1);
    }
}

matrix! {
    /// RFC 9111 §4.3.4 with a 304 that carries `Set-Cookie`: the revalidation succeeds
    /// (the stored body, freshened), and the client whose request the origin answered
    /// (with its `Cookie`) gets the cookie; the stored response does not keep it, as
    /// linerate never stores a `Set-Cookie` it may not share (`public` or `s-maxage`,
    /// the rule of docs/config.md "What is not stored"), so the next client, served from
    /// the store, gets none. Guards against the 304's cookie being stored and replayed
    /// to every later client (one viewer's session for all), and checks the answer to
    /// the revalidating client is a correct 200 (a 502 was reported for it).
    fn set_cookie_in_a_304_goes_to_its_client_only(v) {
        let origin = v.origin(|req| {
            let shared = req.path() == "/shared";
            let cc = if shared { "public, max-age=3600" } else { "max-age=3600" };
            not_modified_or(
                req,
                "\"v1\"",
                &[("ETag", "\"v1\""), ("Cache-Control", cc), ("Set-Cookie", "session=revalidator")],
                origin::ok(b"stored body", &[("ETag", "\"v1\""), ("Cache-Control", "max-age=0")]),
            )
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/c", &[]), 200, b"stored body");
        let r = cache.get("/c", &["Cookie: who=revalidator"]);
        assert_response(&r, 200, b"stored body");
        assert_eq!(origin.count("/c"), 2);
        let reval = last_request(&origin, "/c");
        assert_eq!(reval.header("if-none-match"), Some("\"v1\""));
        assert_eq!(reval.header("cookie"), Some("who=revalidator"));
        assert_eq!(r.values("set-cookie"), vec!["session=revalidator"], "{:?}", r.headers);
        assert_eq!(r.header("cache-control"), Some("max-age=3600"), "freshened");
        let next = cache.get("/c", &["Cookie: who=someone-else"]);
        assert_response(&next, 200, b"stored body");
        assert_eq!(origin.count("/c"), 2, "the 304 made the stored response fresh");
        assert!(next.header("set-cookie").is_none(), "another client's cookie: {:?}", next.headers);

        // The revalidating client's own conditional request: a 304, with its cookie.
        assert_response(&cache.get("/k", &[]), 200, b"stored body");
        let r = cache.get("/k", &["If-None-Match: \"v1\""]);
        assert_eq!(r.status, 304, "{:?}", r.headers);
        assert_eq!(r.values("set-cookie"), vec!["session=revalidator"], "{:?}", r.headers);
        assert!(cache.get("/k", &[]).header("set-cookie").is_none());
        assert_eq!(origin.count("/k"), 2);

        // Shared explicitly (`public`): stored with it, as a 200 with it would be.
        assert_response(&cache.get("/shared", &[]), 200, b"stored body");
        let r = cache.get("/shared", &[]);
        assert_eq!(r.values("set-cookie"), vec!["session=revalidator"], "{:?}", r.headers);
        let next = cache.get("/shared", &[]);
        assert_eq!(next.values("set-cookie"), vec!["session=revalidator"], "{:?}", next.headers);
        assert_eq!(origin.count("/shared"), 2);
    }
}

/// The 304-update scenario of RFC 9111 §3.2 / §4.3.4 with a body of `len` bytes.
fn update_304(v: Variant, len: usize) {
    let body = content(len, 304);
    let b = body.clone();
    let origin = v.origin(move |req| {
        not_modified_or(
            req,
            "\"u1\"",
            &[
                ("ETag", "\"u1\""),
                ("Cache-Control", "max-age=3600"),
                ("X-Test", "B"),
                ("Content-Type", "text/html"),
            ],
            origin::ok(
                &b,
                &[
                    ("ETag", "\"u1\""),
                    ("Cache-Control", "max-age=0"),
                    ("X-Test", "A"),
                    ("X-Keep", "kept"),
                    ("Content-Type", "text/plain"),
                ],
            ),
        )
    });
    let cache = v.start(&origin);
    let first = cache.get("/u", &[]);
    assert_response(&first, 200, &body);
    assert_eq!(first.header("x-test"), Some("A"));
    let filled = origin.count("/u");
    assert_eq!(filled, fill_requests(v, len), "fill");

    let second = cache.get("/u", &[]);
    assert_response(&second, 200, &body);
    let revalidations = origin.count("/u") - filled;
    assert_eq!(
        revalidations,
        fill_requests(v, len),
        "one conditional request per request the fill made"
    );
    assert!(
        origin.requests()[filled..]
            .iter()
            .all(|r| r.header("if-none-match") == Some("\"u1\"")),
        "revalidation is conditional"
    );
    assert_eq!(second.header("x-test"), Some("B"), "{:?}", second.headers);
    assert_eq!(second.header("x-keep"), Some("kept"));
    assert_eq!(second.header("content-type"), Some("text/html"));
    assert_eq!(
        second.header("content-length"),
        Some(len.to_string().as_str())
    );

    let third = cache.get("/u", &[]);
    assert_response(&third, 200, &body);
    assert_eq!(
        origin.count("/u"),
        filled + revalidations,
        "freshened by the 304: a hit"
    );
    assert_eq!(third.values("x-test"), vec!["B"]);
    assert_eq!(third.header("x-keep"), Some("kept"));
    assert_eq!(third.values("content-type"), vec!["text/html"]);
    assert_eq!(third.values("cache-control"), vec!["max-age=3600"]);
    assert_eq!(
        third.header("content-length"),
        Some(len.to_string().as_str())
    );
}
