//! RFC 9111 §5.2.1: request `Cache-Control` directives (honoured by default, as
//! linerate documents) and §5.4: `Pragma: no-cache`.

use crate::common::{assert_response, fields, nth, numbered};
use crate::matrix;

matrix! {
    /// RFC 9111 §5.2.1.4: request `no-cache` — "the client prefers a stored response not
    /// be used to satisfy the request without successful validation on the origin
    /// server"; directive names are case-insensitive (§5.2). The new response is stored
    /// (RFC 9111 §3) and, being the most recent (§4), used afterwards.
    fn request_no_cache_goes_to_origin(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600")]))));
        let cache = v.start(&origin);
        assert_response(&cache.get("/n", &[]), 200, &nth(1, "/n"));
        assert_response(&cache.get("/n", &["Cache-Control: no-cache"]), 200, &nth(2, "/n"));
        assert_eq!(origin.count("/n"), 2);
        assert_response(&cache.get("/n", &["Cache-Control: NO-CACHE"]), 200, &nth(3, "/n"));
        assert_eq!(origin.count("/n"), 3);
        assert_response(&cache.get("/n", &[]), 200, &nth(3, "/n"));
        assert_eq!(origin.count("/n"), 3);
    }

    /// RFC 9111 §5.2.1.1: request `max-age=0` — "the client prefers a response whose
    /// age is less than or equal to the specified number of seconds"; a stored response
    /// 10 s old (`Age: 10`) is therefore not used, the origin answers.
    fn request_max_age_zero_goes_to_origin(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600"), ("Age", "10")]))));
        let cache = v.start(&origin);
        assert_response(&cache.get("/z", &[]), 200, &nth(1, "/z"));
        assert_response(&cache.get("/z", &["Cache-Control: max-age=0"]), 200, &nth(2, "/z"));
        assert_eq!(origin.count("/z"), 2);
    }

    /// RFC 9111 §5.2.1.1: request `max-age=N` — a stored response older than N s is not
    /// used (here Age 1800 against 600); one within N s is (against 86400).
    fn request_max_age_bounds_the_age(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600"), ("Age", "1800")]))));
        let cache = v.start(&origin);
        assert_response(&cache.get("/a", &[]), 200, &nth(1, "/a"));
        assert_response(&cache.get("/a", &["Cache-Control: max-age=86400"]), 200, &nth(1, "/a"));
        assert_eq!(origin.count("/a"), 1);
        assert_response(&cache.get("/a", &["Cache-Control: max-age=600"]), 200, &nth(2, "/a"));
        assert_eq!(origin.count("/a"), 2);
    }

    /// RFC 9111 §5.2.1.2: request `max-stale[=N]` — "the client will accept a response
    /// that has exceeded its freshness lifetime by no more than the specified number of
    /// seconds" (any staleness without a value). Stored `max-age=1500` with `Age: 2000`
    /// is about 500 s stale: accepted with `max-stale=1000` and bare `max-stale`, not
    /// with `max-stale=100`.
    fn request_max_stale_accepts_bounded_staleness(v) {
        let origin = v.origin(numbered(|_| {
            (200, fields(&[("Cache-Control", "max-age=1500"), ("Age", "2000"), ("ETag", "\"ms\"")]))
        }));
        let cache = v.start(&origin);
        assert_response(&cache.get("/s", &[]), 200, &nth(1, "/s"));
        assert_response(&cache.get("/s", &["Cache-Control: max-stale=1000"]), 200, &nth(1, "/s"));
        assert_response(&cache.get("/s", &["Cache-Control: max-stale"]), 200, &nth(1, "/s"));
        assert_eq!(origin.count("/s"), 1);
        assert_response(&cache.get("/s", &["Cache-Control: max-stale=100"]), 200, &nth(2, "/s"));
        assert_eq!(origin.count("/s"), 2);
    }

    /// RFC 9111 §5.2.1.3: request `min-fresh=N` — the client wants a response that will
    /// still be fresh for at least N s. `max-age=1500` with `Age: 1000` has ~500 s left:
    /// enough for `min-fresh=100`, not for `min-fresh=1000`.
    fn request_min_fresh_needs_remaining_freshness(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=1500"), ("Age", "1000")]))));
        let cache = v.start(&origin);
        assert_response(&cache.get("/f", &[]), 200, &nth(1, "/f"));
        assert_response(&cache.get("/f", &["Cache-Control: min-fresh=100"]), 200, &nth(1, "/f"));
        assert_eq!(origin.count("/f"), 1);
        assert_response(&cache.get("/f", &["Cache-Control: min-fresh=1000"]), 200, &nth(2, "/f"));
        assert_eq!(origin.count("/f"), 2);
    }

    /// RFC 9111 §5.2.1.7: `only-if-cached` — the client "only wishes to obtain a stored
    /// response"; without a suitable one the cache SHOULD "respond with a 504 (Gateway
    /// Timeout)", and it does not contact the origin.
    fn only_if_cached_miss_is_504(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600")]))));
        let cache = v.start(&origin);
        let r = cache.get("/o", &["Cache-Control: only-if-cached"]);
        assert_eq!(r.status, 504, "{:?}", r.headers);
        assert_eq!(origin.total(), 0);
    }

    /// RFC 9111 §5.2.1.7: `only-if-cached` with a fresh stored response: answered from
    /// the store.
    fn only_if_cached_hit_is_served(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600")]))));
        let cache = v.start(&origin);
        assert_response(&cache.get("/o", &[]), 200, &nth(1, "/o"));
        assert_response(&cache.get("/o", &["Cache-Control: only-if-cached"]), 200, &nth(1, "/o"));
        assert_eq!(origin.count("/o"), 1);
    }

    /// RFC 9111 §5.2.1.7: a stale stored response is not "consistent with the other
    /// constraints of the request" (nothing allows staleness, §4.2.4), so
    /// `only-if-cached` gets 504, still without contacting the origin.
    fn only_if_cached_stale_is_504(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=0"), ("ETag", "\"s\"")]))));
        let cache = v.start(&origin);
        assert_response(&cache.get("/o", &[]), 200, &nth(1, "/o"));
        let r = cache.get("/o", &["Cache-Control: only-if-cached"]);
        assert_eq!(r.status, 504, "{:?}", r.headers);
        assert_eq!(origin.count("/o"), 1);
    }

    /// RFC 9111 §5.4: "When the Cache-Control header field is not present in a request,
    /// caches MUST consider the no-cache request pragma directive as having the same
    /// effect as if "Cache-Control: no-cache" were present."
    fn pragma_no_cache_without_cache_control(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600")]))));
        let cache = v.start(&origin);
        assert_response(&cache.get("/p", &[]), 200, &nth(1, "/p"));
        assert_response(&cache.get("/p", &["Pragma: no-cache"]), 200, &nth(2, "/p"));
        assert_eq!(origin.count("/p"), 2);
    }

    /// RFC 9111 §5.4: with a `Cache-Control` field in the request, `Pragma` is ignored
    /// (linerate's documented reading); an unknown pragma never has an effect.
    fn pragma_ignored_with_cache_control_or_unknown(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=3600")]))));
        let cache = v.start(&origin);
        assert_response(&cache.get("/p", &[]), 200, &nth(1, "/p"));
        assert_response(
            &cache.get("/p", &["Pragma: no-cache", "Cache-Control: max-age=86400"]),
            200,
            &nth(1, "/p"),
        );
        assert_response(&cache.get("/p", &["Pragma: unrecognised-extension"]), 200, &nth(1, "/p"));
        assert_eq!(origin.count("/p"), 1);
    }
}
