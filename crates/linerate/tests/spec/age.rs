//! RFC 9111 §4.2.3 and §5.1: calculating and generating `Age`; RFC 9110 §6.6.1: `Date`.

use std::time::Duration;

use crate::common::{
    age_of, assert_response, date, expect_not_reused, expect_reused, fields, now, numbered,
    parse_http_date,
};
use crate::matrix;
use crate::support::kit::CacheStatus;
use crate::support::origin;

matrix! {
    /// RFC 9111 §4: "When a stored response is used to satisfy a request without
    /// validation, a cache MUST generate an Age header field (Section 5.1), replacing
    /// any present in the response with a value equal to the stored response's
    /// current_age". Just stored, its current_age is a few seconds at most.
    fn stored_response_carries_age(v) {
        let origin = v.origin(|_| origin::ok(b"aged", &[("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        let first = cache.get("/a", &[]);
        assert_response(&first, 200, b"aged");
        let hit = cache.get("/a", &[]);
        assert_response(&hit, 200, b"aged");
        assert_eq!(origin.count("/a"), 1);
        assert!(age_of(&hit) <= 5, "Age {}", age_of(&hit));
        assert_eq!(hit.values("age").len(), 1, "exactly one Age: {:?}", hit.headers);
    }

    /// RFC 9111 §4.2.3: corrected_age_value = age_value + response_delay, and
    /// current_age = corrected_initial_age + resident_time: an `Age: 100` from upstream
    /// is replaced by a value of at least 100.
    fn age_includes_upstream_age(v) {
        let origin = v.origin(|_| {
            origin::ok(b"aged", &[("Cache-Control", "max-age=3600"), ("Age", "100")])
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/a", &[]), 200, b"aged");
        let hit = cache.get("/a", &[]);
        assert_response(&hit, 200, b"aged");
        assert_eq!(origin.count("/a"), 1);
        let age = age_of(&hit);
        assert!((100..150).contains(&age), "Age {age}");
        assert_eq!(hit.values("age").len(), 1, "the upstream Age is replaced: {:?}", hit.headers);
    }

    /// RFC 9111 §4.2.3: resident_time = now − response_time; the `Age` of a stored
    /// response grows while it stays in the cache (one real wait of 1.2 s).
    fn age_grows_while_stored(v) {
        let origin = v.origin(|_| origin::ok(b"aged", &[("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        assert_response(&cache.get("/a", &[]), 200, b"aged");
        std::thread::sleep(Duration::from_millis(1200));
        let hit = cache.get("/a", &[]);
        assert_response(&hit, 200, b"aged");
        assert_eq!(origin.count("/a"), 1);
        let age = age_of(&hit);
        assert!((1..30).contains(&age), "Age {age} after 1.2 s in the store");
    }

    /// RFC 9111 §4.2: fresh means freshness_lifetime > current_age; §4.2.3:
    /// current_age includes the received `Age`. `max-age=3600` with `Age: 7200` is
    /// stale on arrival: not reused.
    fn age_beyond_max_age_is_stale(v) {
        let origin = v.origin(numbered(|_| {
            (200, fields(&[("Cache-Control", "max-age=3600"), ("Age", "7200")]))
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/old", 200);
    }

    /// RFC 9111 §4.2.3: apparent_age = max(0, response_time − date_value). A `Date` two
    /// hours old makes a `max-age=3600` response stale although it carries no `Age`.
    fn old_date_makes_response_stale(v) {
        let origin = v.origin(numbered(|_| {
            (
                200,
                vec![("Cache-Control".into(), "max-age=3600".into()), ("Date".into(), date(-7200))],
            )
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/dated", 200);
    }

    /// RFC 9111 §4.2.1 and §4.2.3, with a slow origin clock: `Date` 10 s ago and
    /// `Expires` 10 s ahead give a lifetime of 20 s; `Age: 25` makes it stale.
    fn expires_lifetime_with_age_slow_clock(v) {
        let origin = v.origin(numbered(|_| {
            (
                200,
                vec![
                    ("Date".into(), date(-10)),
                    ("Expires".into(), date(10)),
                    ("Age".into(), "25".into()),
                ],
            )
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/slow", 200);
    }

    /// RFC 9111 §4.2.1 and §4.2.3, with a fast origin clock: `Date` 10 s ahead and
    /// `Expires` 20 s ahead give a lifetime of 10 s (Expires − Date, not Expires − now);
    /// `Age: 15` makes it stale.
    fn expires_lifetime_with_age_fast_clock(v) {
        let origin = v.origin(numbered(|_| {
            (
                200,
                vec![
                    ("Date".into(), date(10)),
                    ("Expires".into(), date(20)),
                    ("Age".into(), "15".into()),
                ],
            )
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/fast", 200);
    }

    /// RFC 9111 §5.1: `Age = delta-seconds`, a singleton; linerate's documented parse of
    /// a list is its first member, so `Age: 7200, 0` and the two lines `Age: 7200` then
    /// `Age: 0` both mean 7200: with `max-age=3600`, stale.
    fn age_list_uses_first_member(v) {
        let origin = v.origin(numbered(|req| {
            let mut f = fields(&[("Cache-Control", "max-age=3600")]);
            if req.path() == "/one-line" {
                f.push(("Age".into(), "7200, 0".into()));
            } else {
                f.push(("Age".into(), "7200".into()));
                f.push(("Age".into(), "0".into()));
            }
            (200, f)
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/one-line", 200);
        expect_not_reused(&cache, &origin, "/two-lines", 200);
    }

    /// RFC 9111 §5.1: "If the field value (after discarding additional members ...) is
    /// invalid (e.g., it contains something other than a non-negative integer), a cache
    /// SHOULD ignore the field." A `max-age=3600` response with `Age: abc`, `-7200`,
    /// `7200.0` or `old, 0` is fresh and reused without asking the origin. Guards
    /// against reading it as "stale" (as linerate did: such a response was never
    /// reused, every request went to the origin).
    fn invalid_age_is_ignored(v) {
        let origin = v.origin(numbered(|req| {
            let age = match req.path() {
                "/alpha" => "abc",
                "/negative" => "-7200",
                "/list" => "old, 0",
                _ => "7200.0",
            };
            (200, fields(&[("Cache-Control", "max-age=3600"), ("Age", age)]))
        }));
        let cache = v.start(&origin);
        for p in ["/alpha", "/negative", "/list", "/float"] {
            expect_reused(&cache, &origin, p, 200);
        }
    }

    /// The same with a validator: the ignored `Age` does not send the stored response
    /// to revalidation; it is a hit, and the `Age` it is served with is the cache's own
    /// (delta-seconds, RFC 9111 §5.1), not the invalid value.
    fn invalid_age_is_not_revalidated(v) {
        let origin = v.origin(|req: &origin::Request| {
            let fields = [("Cache-Control", "max-age=3600"), ("Age", "old, 0"), ("ETag", "\"a\"")];
            if req.header("if-none-match") == Some("\"a\"") {
                origin::status(304, &fields)
            } else {
                origin::ok(b"aged", &fields)
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/v", &[]), 200, b"aged");
        assert_eq!(origin.count("/v"), 1);
        let r = cache.get("/v", &[]);
        assert_response(&r, 200, b"aged");
        assert_eq!(origin.count("/v"), 1, "reused as it was: {:?}", r.headers);
        assert!(CacheStatus::of(&r).is_hit(), "{:?}", r.headers);
        assert!(age_of(&r) < 60, "Age {}", age_of(&r));
    }

    /// RFC 9111 §4 (constructing responses from caches) and RFC 9110 §6.6.1: the stored
    /// response is sent with its own `Date`; the cache generates `Age`, it does not
    /// rewrite the origin's `Date`.
    fn date_is_kept_on_hit(v) {
        let sent = date(-30);
        let d = sent.clone();
        let origin = v.origin(move |_| {
            origin::ok(b"dated", &[("Cache-Control", "max-age=3600"), ("Date", &d)])
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/d", &[]), 200, b"dated");
        let hit = cache.get("/d", &[]);
        assert_response(&hit, 200, b"dated");
        assert_eq!(origin.count("/d"), 1);
        assert_eq!(hit.values("date"), vec![sent.as_str()]);
        assert!(age_of(&hit) >= 30, "Age {} for a Date 30 s old", age_of(&hit));
    }

    /// RFC 9110 §6.6.1: "A recipient with a clock that receives a response message
    /// without a Date header field MUST record the time it was received and append a
    /// corresponding Date header field to the message's header section if it is cached
    /// or forwarded downstream." Both the forwarded and the stored copy have one, the
    /// time of receipt.
    fn date_is_added_when_origin_sends_none(v) {
        let origin = v.origin(|_| origin::ok(b"undated", &[("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        let first = cache.get("/u", &[]);
        assert_response(&first, 200, b"undated");
        let hit = cache.get("/u", &[]);
        assert_response(&hit, 200, b"undated");
        assert_eq!(origin.count("/u"), 1);
        let t = now();
        for r in [&first, &hit] {
            let d = r.header("date").unwrap_or_else(|| panic!("no Date: {:?}", r.headers));
            let d = parse_http_date(d).unwrap_or_else(|| panic!("Date {d:?} is not an IMF-fixdate"));
            assert!((t - d).abs() <= 5, "Date {d} vs now {t}");
        }
        let (a, b) = (
            parse_http_date(first.header("date").unwrap()).unwrap(),
            parse_http_date(hit.header("date").unwrap()).unwrap(),
        );
        assert!((a - b).abs() <= 1, "the stored Date is the time of receipt: {a} vs {b}");
    }
}
