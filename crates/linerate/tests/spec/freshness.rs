//! RFC 9111 §4.2: freshness — explicit (`max-age`, `s-maxage`, `Expires`), heuristic
//! (`Last-Modified`), and none; and the operator TTL table of `profile = "video"`,
//! which must stay off by default.

use crate::common::{
    assert_response, by_path, date, expect_not_reused, expect_reused, fields, nth, numbered,
};
use crate::matrix;
use crate::support::kit::CacheStatus;
use crate::support::origin;

matrix! {
    /// RFC 9111 §4.2: "a cache MUST NOT reuse a stored response unless ... the stored
    /// response is ... fresh"; a response with `max-age` is fresh until its age passes it.
    fn fresh_max_age_is_reused(v) {
        let origin = v.origin(|_| origin::ok(b"fresh body", &[("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        let first = cache.get("/a", &[]);
        assert_eq!(first.status, 200);
        assert_eq!(first.body, b"fresh body");
        assert!(!CacheStatus::of(&first).is_hit());
        let second = cache.get("/a", &[]);
        assert_eq!(second.body, b"fresh body");
        assert!(CacheStatus::of(&second).is_hit(), "{:?}", second.headers);
        assert_eq!(origin.count("/a"), 1);
    }

    /// RFC 9111 §5.2.2.1 and §4.2.1: `max-age=0` is a freshness lifetime of zero, so the
    /// response is stale when received, and §4.2: a stale response MUST NOT be reused
    /// without validation; with no validator the next request goes to the origin.
    fn max_age_zero_is_not_reused(v) {
        let origin = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=0")]))));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/z", 200);
    }

    /// RFC 9111 §5.2: directive names are "compared case-insensitively"; §1.2.2:
    /// delta-seconds is `1*DIGIT` (leading zeros allowed) and a value too large to
    /// represent MUST be taken as 2147483648 (still fresh); §5.2.3: unknown extension
    /// directives MUST be ignored. Every form below is a fresh response.
    fn valid_max_age_forms_are_reused(v) {
        let table = vec![
            ("/case", fields(&[("Cache-Control", "MaX-aGe=3600")])),
            ("/zeros", fields(&[("Cache-Control", "max-age=003600")])),
            ("/ext", fields(&[("Cache-Control", "foobar, max-age=3600")])),
            ("/ext-arg", fields(&[("Cache-Control", "foo=\"bar, baz\", max-age=3600")])),
            ("/two31", fields(&[("Cache-Control", "max-age=2147483648")])),
            ("/huge", fields(&[("Cache-Control", "max-age=99999999999")])),
        ];
        let paths: Vec<&str> = table.iter().map(|(p, _)| *p).collect();
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        for p in paths {
            expect_reused(&cache, &origin, p, 200);
        }
    }

    /// RFC 9111 §5.2 / §5.2.2.1: `max-age` takes delta-seconds in token form (`1*DIGIT`)
    /// with no whitespace around `=`; §4.2.1: "caches are encouraged to consider
    /// responses that have invalid freshness information ... to be stale". Ignored or
    /// stale, a response with only an invalid `max-age` (and no validator or
    /// `Last-Modified`) cannot be reused.
    fn invalid_max_age_is_not_reused(v) {
        let table = vec![
            ("/alpha-lead", fields(&[("Cache-Control", "max-age=a3600")])),
            ("/alpha-trail", fields(&[("Cache-Control", "max-age=3600a")])),
            ("/negative", fields(&[("Cache-Control", "max-age=-3600")])),
            ("/space-before", fields(&[("Cache-Control", "max-age =3600")])),
            ("/space-after", fields(&[("Cache-Control", "max-age= 3600")])),
            ("/single-quoted", fields(&[("Cache-Control", "max-age='3600'")])),
        ];
        let paths: Vec<&str> = table.iter().map(|(p, _)| *p).collect();
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        for p in paths {
            expect_not_reused(&cache, &origin, p, 200);
        }
    }

    /// RFC 9111 §5.2 (and RFC 9110 §5.6.4): a quoted-string is one value; the text
    /// `max-age=3600` inside an extension's quoted argument is not a `max-age`
    /// directive, so only the real `max-age=0` counts, before or after it.
    fn max_age_inside_quoted_string_is_ignored(v) {
        let table = vec![
            ("/before", fields(&[("Cache-Control", "extension=\"max-age=3600\", max-age=0")])),
            ("/after", fields(&[("Cache-Control", "max-age=0, extension=\"max-age=3600\"")])),
        ];
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/before", 200);
        expect_not_reused(&cache, &origin, "/after", 200);
    }

    /// RFC 9111 §4.2.1: with more than one value for a directive "either the first
    /// occurrence should be used or the response should be considered stale". When the
    /// first `max-age` is 0 both readings make the response stale: not reused, whether
    /// the two are on one line or two.
    fn duplicate_max_age_with_zero_first_is_stale(v) {
        let table = vec![
            ("/same-line", fields(&[("Cache-Control", "max-age=0, max-age=3600")])),
            (
                "/two-lines",
                fields(&[("Cache-Control", "max-age=0"), ("Cache-Control", "max-age=3600")]),
            ),
        ];
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/same-line", 200);
        expect_not_reused(&cache, &origin, "/two-lines", 200);
    }

    /// RFC 9111 §5.2.2.10: "for a shared cache, the maximum age specified by [s-maxage]
    /// overrides the maximum age specified by either the max-age directive or the
    /// Expires header field". A shared cache must honour a shorter `s-maxage`, in any
    /// order and across field lines.
    fn s_maxage_overrides_longer_max_age(v) {
        let table = vec![
            ("/ms", fields(&[("Cache-Control", "max-age=3600, s-maxage=0")])),
            ("/sm", fields(&[("Cache-Control", "s-maxage=0, max-age=3600")])),
            (
                "/lines",
                fields(&[("Cache-Control", "max-age=3600"), ("Cache-Control", "s-maxage=0")]),
            ),
            (
                "/expires",
                vec![
                    ("Cache-Control".into(), "s-maxage=0".into()),
                    ("Date".into(), date(0)),
                    ("Expires".into(), date(86_400)),
                ],
            ),
        ];
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        for p in ["/ms", "/sm", "/lines", "/expires"] {
            expect_not_reused(&cache, &origin, p, 200);
        }
    }

    /// RFC 9111 §5.2.2.10: `s-maxage` also overrides a *shorter* `max-age` for a shared
    /// cache (linerate is one, §1), and on its own it is explicit freshness (§4.2.1).
    fn s_maxage_overrides_shorter_max_age(v) {
        let table = vec![
            ("/longer", fields(&[("Cache-Control", "max-age=0, s-maxage=3600")])),
            ("/alone", fields(&[("Cache-Control", "s-maxage=3600")])),
        ];
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        expect_reused(&cache, &origin, "/longer", 200);
        expect_reused(&cache, &origin, "/alone", 200);
    }

    /// RFC 9111 §4.2.1: without `max-age`/`s-maxage`, the freshness lifetime is
    /// `Expires` minus `Date`; §5.3: a future `Expires` makes the response fresh.
    fn future_expires_is_reused(v) {
        let origin = v.origin(numbered(|_| {
            (200, vec![("Date".into(), date(0)), ("Expires".into(), date(30 * 86_400))])
        }));
        let cache = v.start(&origin);
        expect_reused(&cache, &origin, "/e", 200);
    }

    /// RFC 9111 §4.2.1 / §5.3: an `Expires` in the past, equal to `Date`, or earlier
    /// than `Date` gives a freshness lifetime ≤ 0: stale on arrival, not reused.
    fn expires_not_after_date_is_stale(v) {
        let origin = v.origin(numbered(|req| {
            let (d, e) = match req.path() {
                "/past" => (date(0), date(-30 * 86_400)),
                "/present" => {
                    let now = date(0);
                    (now.clone(), now)
                }
                // Both in the future (a fast origin clock): Expires − Date is −100 s.
                _ => (date(400), date(300)),
            };
            (200, vec![("Date".into(), d), ("Expires".into(), e)])
        }));
        let cache = v.start(&origin);
        for p in ["/past", "/present", "/before-date"] {
            expect_not_reused(&cache, &origin, p, 200);
        }
    }

    /// RFC 9111 §5.3: "A cache recipient MUST interpret invalid date formats,
    /// especially the value "0", as representing a time in the past (i.e., 'already
    /// expired')."
    fn invalid_expires_means_expired(v) {
        let origin = v.origin(numbered(|req| {
            let e = match req.path() {
                "/zero" => "0",
                "/minus-one" => "-1",
                _ => "never",
            };
            (200, vec![("Date".into(), date(0)), ("Expires".into(), e.into())])
        }));
        let cache = v.start(&origin);
        for p in ["/zero", "/minus-one", "/word"] {
            expect_not_reused(&cache, &origin, p, 200);
        }
    }

    /// RFC 9111 §5.3: "If a response includes a Cache-Control header field with the
    /// max-age directive, a recipient MUST ignore the Expires header field": a past or
    /// invalid `Expires` does not shorten `max-age=3600`...
    fn max_age_overrides_past_or_invalid_expires(v) {
        let origin = v.origin(numbered(|req| {
            let e = if req.path() == "/past" { date(-10_000) } else { "0".into() };
            (
                200,
                vec![
                    ("Cache-Control".into(), "max-age=3600".into()),
                    ("Date".into(), date(0)),
                    ("Expires".into(), e),
                ],
            )
        }));
        let cache = v.start(&origin);
        expect_reused(&cache, &origin, "/past", 200);
        expect_reused(&cache, &origin, "/invalid", 200);
    }

    /// ...and (RFC 9111 §5.3, §4.2.1) a future `Expires` does not lengthen `max-age=0`.
    fn max_age_zero_overrides_future_expires(v) {
        let origin = v.origin(numbered(|_| {
            (
                200,
                vec![
                    ("Cache-Control".into(), "max-age=0".into()),
                    ("Date".into(), date(0)),
                    ("Expires".into(), date(10_000)),
                ],
            )
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/m0", 200);
    }

    /// RFC 9111 §4.2.2: without explicit freshness, a cache MAY assign a heuristic
    /// freshness lifetime; with `Last-Modified`, "no more than some fraction of the
    /// interval since that time" (linerate: 10 % of Date − Last-Modified). Modified ten
    /// days ago → fresh for a day: reused.
    fn heuristic_freshness_from_last_modified(v) {
        let origin = v.origin(numbered(|_| {
            (200, vec![("Date".into(), date(0)), ("Last-Modified".into(), date(-10 * 86_400))])
        }));
        let cache = v.start(&origin);
        expect_reused(&cache, &origin, "/lm", 200);
    }

    /// RFC 9111 §4.2.2 with linerate's fraction of 10 %: Last-Modified 1000 s before
    /// Date gives 100 s of freshness. An upstream `Age` (§4.2.3) of 50 s leaves it fresh;
    /// 200 s makes it stale.
    fn heuristic_is_ten_percent_of_the_interval(v) {
        let origin = v.origin(numbered(|req| {
            let age = if req.path() == "/young" { "50" } else { "200" };
            (
                200,
                vec![
                    ("Date".into(), date(0)),
                    ("Last-Modified".into(), date(-1000)),
                    ("Age".into(), age.into()),
                ],
            )
        }));
        let cache = v.start(&origin);
        expect_reused(&cache, &origin, "/young", 200);
        expect_not_reused(&cache, &origin, "/old", 200);
    }

    /// RFC 9111 §4.2.2 with linerate's cap of one day (`heuristic_max_s`): modified 100
    /// days ago would be 10 days uncapped; with an upstream `Age` of 100000 s (> 1 day)
    /// the capped lifetime has passed.
    fn heuristic_is_capped_at_one_day(v) {
        let origin = v.origin(numbered(|_| {
            (
                200,
                vec![
                    ("Date".into(), date(0)),
                    ("Last-Modified".into(), date(-100 * 86_400)),
                    ("Age".into(), "100000".into()),
                ],
            )
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/capped", 200);
    }

    /// RFC 9110 §15.1: "Responses with status codes that are defined as heuristically
    /// cacheable (e.g., 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, and 501
    /// ...) can be reused by a cache with heuristic expiration"; RFC 9111 §4.2.2.
    fn heuristic_applies_to_heuristically_cacheable_statuses(v) {
        let origin = v.origin(numbered(|req| {
            let code: u16 = req.path()[1..].parse().unwrap();
            let mut f = vec![
                ("Date".into(), date(0)),
                ("Last-Modified".into(), date(-10 * 86_400)),
            ];
            if (300..400).contains(&code) {
                f.push(("Location".into(), "/elsewhere".into()));
            }
            (code, f)
        }));
        let cache = v.start(&origin);
        for code in [200u16, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501] {
            expect_reused(&cache, &origin, &format!("/{code}"), code);
        }
    }

    /// RFC 9110 §15.1: "all other status codes are not heuristically cacheable"; RFC
    /// 9111 §4.2.2. With `Last-Modified` but no explicit freshness, 201, 202, 302, 307,
    /// 403, 500, 502, 503, 504 and 599 are never reused.
    fn no_heuristic_for_other_statuses(v) {
        let origin = v.origin(numbered(|req| {
            let code: u16 = req.path()[1..].parse().unwrap();
            let mut f = vec![
                ("Date".into(), date(0)),
                ("Last-Modified".into(), date(-10 * 86_400)),
            ];
            if (300..400).contains(&code) {
                f.push(("Location".into(), "/elsewhere".into()));
            }
            (code, f)
        }));
        let cache = v.start(&origin);
        for code in [201u16, 202, 302, 307, 403, 500, 502, 503, 504, 599] {
            expect_not_reused(&cache, &origin, &format!("/{code}"), code);
        }
    }

    /// RFC 9111 §5.2.2.9: "If a response with the public directive has no explicit
    /// freshness information, it is heuristically cacheable" — even with a status that
    /// otherwise is not (599).
    fn public_makes_any_status_heuristically_cacheable(v) {
        let origin = v.origin(numbered(|_| {
            (
                599,
                vec![
                    ("Cache-Control".into(), "public".into()),
                    ("Date".into(), date(0)),
                    ("Last-Modified".into(), date(-10 * 86_400)),
                ],
            )
        }));
        let cache = v.start(&origin);
        expect_reused(&cache, &origin, "/599", 599);
    }

    /// RFC 9111 §4.2.2 allows a heuristic only where the cache has grounds for one;
    /// linerate's default (`profile = "standard"`) uses none without `Last-Modified`: a
    /// response with no explicit freshness, no `Last-Modified` and no validator is
    /// never reused — whatever its extension (the video TTL table is opt-in).
    fn no_freshness_without_last_modified_by_default(v) {
        let origin = v.origin(numbered(|_| (200, Vec::new())));
        let cache = v.start(&origin);
        for p in ["/plain", "/seg.ts", "/live.m3u8", "/video.mp4", "/chunk.m4s"] {
            expect_not_reused(&cache, &origin, p, 200);
        }
    }

    /// linerate's documented opt-in (`profile = "video"`), an operator heuristic in the
    /// sense of RFC 9111 §4.2.2: responses without explicit freshness get the TTL table
    /// (segments a day, manifests 2 s, others 60 s), so they are reused at once.
    fn video_profile_applies_operator_ttls(v) {
        let origin = v.origin(numbered(|_| (200, Vec::new())));
        let cache = v.config(&origin).route("profile = \"video\"").start();
        for p in ["/seg.ts", "/chunk.m4s", "/live.m3u8", "/other.bin"] {
            expect_reused(&cache, &origin, p, 200);
        }
        // Explicit freshness still wins over the table (RFC 9111 §4.2.1).
        let origin2 = v.origin(numbered(|_| (200, fields(&[("Cache-Control", "max-age=0")]))));
        let cache2 = v.config(&origin2).route("profile = \"video\"").start();
        expect_not_reused(&cache2, &origin2, "/seg.ts", 200);
        let again = cache2.get("/seg.ts", &[]);
        assert_response(&again, 200, &nth(3, "/seg.ts"));
    }
}
