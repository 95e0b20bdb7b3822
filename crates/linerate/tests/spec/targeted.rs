//! RFC 9213: targeted cache-control fields. `CDN-Cache-Control` is on linerate's
//! target list by default: "the cache MUST select the first (in target list order)
//! field with a valid, non-empty value and use its value to determine the caching
//! policy for the response, and it MUST ignore the Cache-Control and Expires header
//! fields in that response" (§2.1). A field that is empty or fails to parse as a
//! Structured Fields Dictionary (RFC 8941) "MUST be ignored" as a whole.

use crate::common::{
    assert_response, by_path, date, expect_not_reused, expect_reused, fields, nth, numbered,
};
use crate::matrix;

matrix! {
    /// RFC 9213 §2.1 / §2.2: a positive `CDN-Cache-Control: max-age` is freshness for
    /// the CDN — alone, after an unknown directive, with a huge value (RFC 8941 Integer,
    /// RFC 9111 §1.2.2), and with a past or invalid `Expires` (ignored, §2.1).
    fn cdn_max_age_is_used(v) {
        let table = vec![
            ("/alone", fields(&[("CDN-Cache-Control", "max-age=3600")])),
            ("/extension", fields(&[("CDN-Cache-Control", "foobar, max-age=3600")])),
            ("/two31", fields(&[("CDN-Cache-Control", "max-age=2147483648")])),
            ("/huge", fields(&[("CDN-Cache-Control", "max-age=99999999999")])),
            (
                "/past-expires",
                vec![
                    ("CDN-Cache-Control".into(), "max-age=3600".into()),
                    ("Date".into(), date(0)),
                    ("Expires".into(), date(-10_000)),
                ],
            ),
            (
                "/invalid-expires",
                vec![
                    ("CDN-Cache-Control".into(), "max-age=3600".into()),
                    ("Date".into(), date(0)),
                    ("Expires".into(), "0".into()),
                ],
            ),
        ];
        let paths: Vec<&str> = table.iter().map(|(p, _)| *p).collect();
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        for p in paths {
            expect_reused(&cache, &origin, p, 200);
        }
    }

    /// RFC 9213 §2.1: with a valid `CDN-Cache-Control`, `Cache-Control` is ignored for
    /// the cache's own decisions — `no-store` there does not stop storing — while both
    /// fields reach the client unchanged (the origin's `Cache-Control` is for the
    /// caches after the CDN; linerate forwards the targeted field as documented).
    fn cdn_field_overrides_cache_control_for_the_cdn_only(v) {
        let origin = v.origin(numbered(|_| {
            (200, fields(&[("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=10000")]))
        }));
        let cache = v.start(&origin);
        let first = cache.get("/o", &[]);
        let second = cache.get("/o", &[]);
        assert_eq!(origin.count("/o"), 1);
        for r in [&first, &second] {
            assert_response(r, 200, &nth(1, "/o"));
            assert_eq!(r.values("cache-control"), vec!["no-store"], "{:?}", r.headers);
            assert_eq!(r.values("cdn-cache-control"), vec!["max-age=10000"], "{:?}", r.headers);
        }
    }

    /// RFC 9213 §2.1: a short targeted `max-age` wins over a long `Cache-Control:
    /// max-age` and over a future `Expires`; `Age` counts against it as usual (RFC 9111
    /// §4.2.3).
    fn cdn_short_max_age_wins(v) {
        let table = vec![
            ("/short", fields(&[("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "max-age=0")])),
            (
                "/expires",
                vec![
                    ("CDN-Cache-Control".into(), "max-age=0".into()),
                    ("Date".into(), date(0)),
                    ("Expires".into(), date(10_000)),
                ],
            ),
            ("/aged", fields(&[("CDN-Cache-Control", "max-age=3600"), ("Age", "7200")])),
        ];
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        for p in ["/short", "/expires", "/aged"] {
            expect_not_reused(&cache, &origin, p, 200);
        }
    }

    /// RFC 9213 §2.1: "Caches that use a targeted field MUST implement the semantics of
    /// ... no-store, no-cache, private": each prevents reuse even when `Cache-Control`
    /// and `Expires` say fresh.
    fn cdn_restrictive_directives_are_honoured(v) {
        let fresh = |cdn: &str| {
            vec![
                ("CDN-Cache-Control".into(), cdn.into()),
                ("Cache-Control".into(), "max-age=10000".into()),
                ("Date".into(), date(0)),
                ("Expires".into(), date(10_000)),
            ]
        };
        let table = vec![
            ("/private", fresh("private")),
            ("/no-cache", fresh("no-cache")),
            ("/no-store", fresh("no-store")),
        ];
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        for p in ["/private", "/no-cache", "/no-store"] {
            expect_not_reused(&cache, &origin, p, 200);
        }
    }

    /// RFC 9213 §2.1: a targeted field that fails to parse as an RFC 8941 Dictionary
    /// is ignored as a whole, and `Cache-Control` applies: an unknown type (`&&&`), a
    /// space before or after `=`, an upper-case key (keys are `lcalpha` first, RFC 8941
    /// §3.1.2). Here `Cache-Control: max-age=0` then decides: not reused.
    fn invalid_cdn_field_falls_back_to_cache_control_stale(v) {
        let table = vec![
            ("/junk", fields(&[("Cache-Control", "max-age=0"), ("CDN-Cache-Control", "max-age=10000, &&&&&")])),
            ("/space-before", fields(&[("Cache-Control", "max-age=0"), ("CDN-Cache-Control", "max-age =100")])),
            ("/space-after", fields(&[("Cache-Control", "max-age=0"), ("CDN-Cache-Control", "max-age= 100")])),
            ("/upper", fields(&[("Cache-Control", "max-age=0"), ("CDN-Cache-Control", "MaX-aGe=3600")])),
        ];
        let paths: Vec<&str> = table.iter().map(|(p, _)| *p).collect();
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        for p in paths {
            expect_not_reused(&cache, &origin, p, 200);
        }
    }

    /// The same fallback seen from the other side: an invalid targeted field that says
    /// `max-age=0` is ignored, so `Cache-Control: max-age=3600` makes the response
    /// reusable; and an empty targeted field (§2.1: "If a targeted field in a given
    /// response is empty ... that field MUST be ignored") changes nothing.
    fn invalid_or_empty_cdn_field_falls_back_to_cache_control_fresh(v) {
        let table = vec![
            ("/junk", fields(&[("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "max-age=0, &&&")])),
            ("/dangling-equals", fields(&[("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "max-age=0, no-store=")])),
            ("/empty", fields(&[("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "")])),
        ];
        let paths: Vec<&str> = table.iter().map(|(p, _)| *p).collect();
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        for p in paths {
            expect_reused(&cache, &origin, p, 200);
        }
    }

    /// RFC 9213 §2.1 with an argument of the wrong type: `max-age="10000"` (a String,
    /// not an Integer) is not a usable `max-age`; whether the whole field or only the
    /// directive is dropped, the response (`Cache-Control: no-store`, no validator) is
    /// not reused.
    fn cdn_max_age_of_wrong_type_is_not_used(v) {
        let origin = v.origin(numbered(|_| {
            (200, fields(&[("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=\"10000\"")]))
        }));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/wrong-type", 200);
    }

    /// RFC 9213 §2.1: only fields on the cache's target list are used; a targeted field
    /// for someone else (`Other-CDN-Cache-Control`) changes nothing — `Cache-Control`
    /// decides, in both directions.
    fn fields_off_the_target_list_change_nothing(v) {
        let table = vec![
            ("/cc-no-store", fields(&[("Cache-Control", "no-store"), ("Other-CDN-Cache-Control", "max-age=3600")])),
            ("/cc-fresh", fields(&[("Cache-Control", "max-age=3600"), ("Other-CDN-Cache-Control", "no-store")])),
        ];
        let origin = v.origin(numbered(by_path(table)));
        let cache = v.start(&origin);
        expect_not_reused(&cache, &origin, "/cc-no-store", 200);
        expect_reused(&cache, &origin, "/cc-fresh", 200);
    }
}
