//! RFC 9211: the `Cache-Status` response field. linerate adds one member, named
//! `linerate`, describing how it handled the request: `hit`, or `fwd=` with the reason
//! (§2.2) and `fwd-status` (§2.3), `stored` (§2.5), `ttl` (§2.4) on stored responses.

use crate::common::{assert_response, fields, nth, numbered};
use crate::matrix;
use crate::support::kit::CacheStatus;
use crate::support::origin::{self, Request};
use crate::support::Response;

/// Our member: the last one, and named `linerate` (RFC 9211 §2: the cache closest to
/// the user comes last).
#[track_caller]
fn ours(r: &Response) -> CacheStatus {
    let field = r.values("cache-status").join(", ");
    let last = field.rsplit(',').next().unwrap_or("").trim().to_owned();
    assert!(last.starts_with("linerate"), "Cache-Status: {field:?}");
    CacheStatus::of(r)
}

matrix! {
    /// RFC 9211 §2.1-2.5: a miss that is stored says `fwd=uri-miss`, `fwd-status=200`,
    /// `stored`; the hit after it says `hit` with a `ttl` (remaining freshness, here
    /// just under 3600 s) and no `fwd`.
    fn miss_then_hit(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600")]))));
        let cache = v.start(&origin);
        let miss = cache.get("/s", &[]);
        assert_response(&miss, 200, &nth(1, "/s"));
        let cs = ours(&miss);
        assert!(!cs.hit, "{cs:?}");
        assert_eq!(cs.fwd.as_deref(), Some("uri-miss"), "{cs:?}");
        assert_eq!(cs.fwd_status, Some(200), "{cs:?}");
        assert!(cs.stored, "{cs:?}");
        let hit = cache.get("/s", &[]);
        assert_response(&hit, 200, &nth(1, "/s"));
        let cs = ours(&hit);
        assert!(cs.is_hit(), "{cs:?}");
        let ttl = cs.ttl.unwrap_or_else(|| panic!("no ttl: {cs:?}"));
        assert!((3500..=3600).contains(&ttl), "ttl {ttl}");
        assert_eq!(origin.count("/s"), 1);
    }

    /// RFC 9211 §2: "caches SHOULD preserve the existing field value" and add their own
    /// member at the end: the origin's `Cache-Status` stays first, on the miss and the hit.
    fn upstream_members_are_kept(v) {
        let origin = v.origin(|_| {
            origin::ok(b"layered", &[("Cache-Control", "max-age=3600"), ("Cache-Status", "origin-shield; hit")])
        });
        let cache = v.start(&origin);
        for _ in 0..2 {
            let r = cache.get("/l", &[]);
            assert_response(&r, 200, b"layered");
            let field = r.values("cache-status").join(", ");
            assert!(field.starts_with("origin-shield; hit"), "Cache-Status: {field:?}");
            ours(&r);
        }
        assert_eq!(origin.count("/l"), 1);
    }

    /// RFC 9211 §2.2: `fwd=stale` — "The cache was able to select a response for the
    /// request, but it was stale"; `fwd-status=304` (§2.3) for the validation answer.
    fn stale_revalidation_says_fwd_stale(v) {
        let origin = v.origin(|req: &Request| {
            if req.header("if-none-match").is_some() {
                origin::status(304, &[("ETag", "\"s\""), ("Cache-Control", "max-age=0")])
            } else {
                origin::ok(b"stale", &[("ETag", "\"s\""), ("Cache-Control", "max-age=0")])
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/st", &[]), 200, b"stale");
        let r = cache.get("/st", &[]);
        assert_response(&r, 200, b"stale");
        let cs = ours(&r);
        assert_eq!(cs.fwd.as_deref(), Some("stale"), "{cs:?}");
        assert_eq!(cs.fwd_status, Some(304), "{cs:?}");
        assert_eq!(origin.count("/st"), 2);
    }

    /// RFC 9211 §2.2: `fwd=vary-miss` — "The cache did not contain any responses that
    /// matched the request's varying header fields"; `fwd=request` — a fresh response
    /// could be selected "but the request's semantics (e.g., Cache-Control request
    /// directives) did not allow its use".
    fn vary_miss_and_request_reasons(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600"), ("Vary", "Foo")]))));
        let cache = v.start(&origin);
        assert_response(&cache.get("/v", &["Foo: 1"]), 200, &nth(1, "/v"));
        let r = cache.get("/v", &["Foo: 2"]);
        assert_response(&r, 200, &nth(2, "/v"));
        assert_eq!(ours(&r).fwd.as_deref(), Some("vary-miss"), "{:?}", r.headers);
        let r = cache.get("/v", &["Foo: 1", "Cache-Control: no-cache"]);
        assert_response(&r, 200, &nth(3, "/v"));
        assert_eq!(ours(&r).fwd.as_deref(), Some("request"), "{:?}", r.headers);
        assert_eq!(origin.count("/v"), 3);
    }

    /// RFC 9211 §2.5: `stored` only when the response was stored: never for `no-store`,
    /// which is forwarded each time (§2.2 `fwd`). §2.3: `fwd-status` is "the status code
    /// the next hop server returned in response to the request": 200, or 206 when the
    /// cache's request was a slice's `Range` request that an origin honoured (the
    /// client still gets the whole object as a 200). After the first, the URL is known
    /// not to be storable and the client's own request is relayed: 200.
    fn uncacheable_is_forwarded_not_stored(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "no-store")]))));
        let cache = v.start(&origin);
        for i in 1..=2 {
            let r = cache.get("/n", &[]);
            assert_response(&r, 200, &nth(i, "/n"));
            let cs = ours(&r);
            assert!(!cs.hit && !cs.stored, "{cs:?}");
            // RFC 9211 §2.2: the first request found nothing stored (`uri-miss`); the
            // second, for a URL the cache knows not to store, was not handled by it
            // (`bypass`).
            let fwd = if i == 1 { "uri-miss" } else { "bypass" };
            assert_eq!(cs.fwd.as_deref(), Some(fwd), "{cs:?}");
            assert_eq!(cs.detail.as_deref(), Some("uncacheable"), "{cs:?}");
            let next_hop = match (v.slicing, v.ranges, i) {
                (Slicing::On, RangeSupport::Honoured, 1) => 206,
                _ => 200,
            };
            assert_eq!(cs.fwd_status, Some(next_hop), "{cs:?}");
        }
        assert_eq!(origin.count("/n"), 2);
    }
}
