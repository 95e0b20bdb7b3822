//! The rules of the other modules on an object of several slices ([`BIG`]: four slices
//! in the slicing cells), where each slice is its own stored object with its own copy
//! of the response's fields: freshness, `Age`, request directives, targeted fields,
//! stale-if-error, forwarding and `Cache-Status` must hold for the whole response, not
//! only for the slice that carries its first byte. Every origin request is counted
//! exactly: one per slice from an origin that honours `Range`, one otherwise.

use crate::common::{assert_response, fill_requests, first_relay_cost, joined, Phase, BIG};
use crate::matrix;
use crate::support::content;
use crate::support::kit::{CacheStatus, Slicing, Variant};
use crate::support::origin::{self, Origin, RangeSupport, Reply, Request};

/// Version `n` of the large body (every version differs from every other in every
/// slice, so a response spliced from two versions cannot pass for either).
fn version(n: usize) -> Vec<u8> {
    content(BIG, 1000 + n as u64)
}

/// An origin serving version `phase.get()` of a [`BIG`] body with the fields `head`
/// returns (`If-None-Match` equal to the `ETag` among them gets a 304 with those
/// fields, when `conditional`).
fn large_origin(
    v: Variant,
    phase: &Phase,
    conditional: bool,
    head: impl Fn(&Request) -> Vec<(String, String)> + Send + Sync + 'static,
) -> Origin {
    let phase = phase.clone();
    v.origin(move |req| {
        let fields = head(req);
        let etag = fields.iter().find(|(n, _)| n.eq_ignore_ascii_case("etag"));
        if conditional && etag.is_some_and(|(_, e)| req.header("if-none-match") == Some(e.as_str()))
        {
            return Reply::Full {
                status: 304,
                headers: fields,
                body: Vec::new(),
                chunked: false,
            };
        }
        Reply::Full {
            status: 200,
            headers: fields,
            body: version(phase.get()),
            chunked: false,
        }
    })
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    origin::owned(pairs)
}

/// Whether the origin's requests in this cell are ranged (one per slice).
fn ranged(v: Variant) -> bool {
    v.slicing == Slicing::On
}

matrix! {
    /// RFC 9111 §4.2: a fresh stored response is reused, here one of several slices:
    /// every slice comes from the store, the body is the version fetched, and a range
    /// across a slice boundary is served from the store too.
    fn fresh_large_response_is_reused(v) {
        let phase = Phase::new();
        let origin = large_origin(v, &phase, false, |_| owned(&[("Cache-Control", "max-age=3600"), ("ETag", "\"b1\"")]));
        let cache = v.start(&origin);
        let first = cache.get("/big", &[]);
        assert_response(&first, 200, &version(1));
        let filled = fill_requests(v, BIG);
        assert_eq!(origin.count("/big"), filled);
        let ranged_requests = origin.requests().iter().filter(|r| r.header("range").is_some()).count();
        assert_eq!(ranged_requests, if ranged(v) { filled } else { 0 }, "slices are fetched with Range");
        phase.set(2);
        let second = cache.get("/big", &[]);
        assert_response(&second, 200, &version(1));
        assert!(CacheStatus::of(&second).is_hit(), "{:?}", second.headers);
        let across = cache.get("/big", &["Range: bytes=65000-140000"]);
        assert_eq!(across.status, 206);
        assert_eq!(across.body, &version(1)[65_000..=140_000]);
        assert_eq!(origin.count("/big"), filled, "answered from the store");
    }

    /// RFC 9111 §5.2.1.7: `only-if-cached` gets the stored response, here one of several
    /// slices (each looked up: the URL's own key holds nothing on a sliced route), and
    /// a 504 for a range in a slice that was never fetched, without contacting the
    /// origin either way.
    fn only_if_cached_large_hit_is_served(v) {
        let phase = Phase::new();
        let origin = large_origin(v, &phase, false, |_| owned(&[("Cache-Control", "max-age=3600"), ("ETag", "\"b1\"")]));
        let cache = v.start(&origin);
        let r = cache.get("/big", &["Range: bytes=0-99"]);
        assert_eq!(r.status, 206);
        let filled = origin.count("/big");
        assert_eq!(filled, 1, "one slice, or the whole object");
        let hit = cache.get("/big", &["Cache-Control: only-if-cached", "Range: bytes=10-19"]);
        assert_eq!(hit.status, 206, "{:?}", hit.headers);
        assert_eq!(hit.body, &version(1)[10..20]);
        let tail = cache.get("/big", &["Cache-Control: only-if-cached", &format!("Range: bytes={}-", BIG - 10)]);
        if fill_requests(v, BIG) > 1 {
            // Stored in slices, and only the first one is.
            assert_eq!(tail.status, 504, "{:?}", tail.headers);
        } else {
            assert_eq!(tail.status, 206, "{:?}", tail.headers);
            assert_eq!(tail.body, &version(1)[BIG - 10..]);
        }
        assert_eq!(origin.count("/big"), filled);
    }

    /// RFC 9111 §4.2.3: the `Age` of a stored response counts the age it arrived with;
    /// RFC 9211 §2.1: `hit` with a `ttl` of the freshness left. Both for the whole
    /// response, whichever slice it starts in.
    fn age_and_ttl_of_a_large_hit(v) {
        let phase = Phase::new();
        let origin = large_origin(v, &phase, false, |_| owned(&[("Cache-Control", "max-age=3600"), ("Age", "100")]));
        let cache = v.start(&origin);
        let first = cache.get("/big", &[]);
        let cs = CacheStatus::of(&first);
        assert_eq!(cs.fwd.as_deref(), Some("uri-miss"), "{:?}", first.headers);
        assert!(cs.stored, "{:?}", first.headers);
        // RFC 9211 §2.3: what the origin answered the cache's request (a slice's 206
        // from an origin that honours Range; the client still gets the whole 200).
        let next_hop = if v.ranges == RangeSupport::Honoured && ranged(v) { 206 } else { 200 };
        assert_eq!(cs.fwd_status, Some(next_hop), "{:?}", first.headers);
        assert_eq!(first.status, 200);
        for range in [None, Some("Range: bytes=150000-150099")] {
            let r = cache.get("/big", range.as_slice());
            let age: u64 = r.header("age").unwrap().parse().unwrap();
            assert!((100..110).contains(&age), "Age {age}");
            let cs = CacheStatus::of(&r);
            assert!(cs.is_hit(), "{:?}", r.headers);
            let ttl = cs.ttl.unwrap();
            assert!((3490..=3500).contains(&ttl), "ttl {ttl}");
        }
        assert_eq!(origin.count("/big"), fill_requests(v, BIG));
    }

    /// RFC 9111 §5.2.1.4: a request's `no-cache` means the stored response is not used
    /// without validation: the cache revalidates (here every slice, with the stored
    /// `ETag`), the origin's 304s confirm it, and the client gets the stored body.
    fn request_no_cache_revalidates_every_slice(v) {
        let phase = Phase::new();
        let origin = large_origin(v, &phase, true, |_| owned(&[("Cache-Control", "max-age=3600"), ("ETag", "\"b1\"")]));
        let cache = v.start(&origin);
        assert_response(&cache.get("/big", &[]), 200, &version(1));
        let filled = fill_requests(v, BIG);
        assert_eq!(origin.count("/big"), filled);
        let r = cache.get("/big", &["Cache-Control: no-cache"]);
        assert_response(&r, 200, &version(1));
        assert_eq!(origin.count("/big"), 2 * filled, "one conditional request per request of the fill");
        let conditional = &origin.requests()[filled..];
        assert!(conditional.iter().all(|r| r.header("if-none-match") == Some("\"b1\"")), "{conditional:?}");
        assert_eq!(CacheStatus::of(&r).fwd_status, Some(304), "{:?}", r.headers);
        // Confirmed fresh again: a plain request is a hit.
        assert!(CacheStatus::of(&cache.get("/big", &[])).is_hit());
        assert_eq!(origin.count("/big"), 2 * filled);
    }

    /// RFC 9213 §2.2: a cache that obeys `CDN-Cache-Control` ignores `Cache-Control`
    /// for its own storing: `no-store` in `Cache-Control` and `max-age` in
    /// `CDN-Cache-Control` store the large response; the reverse relays it.
    fn cdn_cache_control_decides_for_a_large_response(v) {
        let phase = Phase::new();
        let origin = large_origin(v, &phase, false, |req| {
            if req.path() == "/kept" {
                owned(&[("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=600")])
            } else {
                owned(&[("Cache-Control", "max-age=600"), ("CDN-Cache-Control", "no-store")])
            }
        });
        let cache = v.start(&origin);
        for _ in 0..3 {
            let r = cache.get("/kept", &[]);
            assert_response(&r, 200, &version(1));
            assert_eq!(r.header("cache-control"), Some("no-store"), "passed on unchanged");
        }
        assert_eq!(origin.count("/kept"), fill_requests(v, BIG), "stored: one fill");
        assert_response(&cache.get("/relayed", &[]), 200, &version(1));
        let first = origin.count("/relayed");
        assert_eq!(first, first_relay_cost(v, 200, BIG));
        for i in 1..=2 {
            assert_response(&cache.get("/relayed", &[]), 200, &version(1));
            assert_eq!(origin.count("/relayed"), first + i, "relayed once per request");
        }
    }

    /// RFC 5861 §4 `stale-if-error`: a stale large response whose revalidation gets a
    /// 503 is served whole from the store. Each stored part (each slice) is revalidated
    /// and stands in for itself when that fails; the next request asks again: nothing
    /// was freshened.
    fn stale_if_error_serves_a_large_stale_response(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |req| {
            if p.get() == 1 {
                v.ranges.apply(
                    Reply::Full {
                        status: 200,
                        headers: owned(&[
                            ("Cache-Control", "max-age=60, stale-if-error=86400"),
                            ("Age", "120"),
                            ("ETag", "\"s1\""),
                        ]),
                        body: version(1),
                        chunked: false,
                    },
                    req,
                )
            } else {
                origin::status(503, &[])
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/big", &[]), 200, &version(1));
        let filled = fill_requests(v, BIG);
        assert_eq!(origin.count("/big"), filled);
        phase.set(2);
        for round in 1..=2 {
            let r = cache.get("/big", &[]);
            assert_response(&r, 200, &version(1));
            let cs = CacheStatus::of(&r);
            assert_eq!(cs.fwd_status, Some(503), "{:?}", r.headers);
            assert_eq!(
                origin.count("/big") - filled,
                round * filled,
                "round {round}: every stored part was revalidated once, and failed"
            );
        }
    }

    /// Cache poisoning (RFC 9110 §7.6.3, and the fields origins read as facts about the
    /// request): on every request of a sliced fill the origin sees our
    /// `X-Forwarded-Host` (the keyed host), `X-Forwarded-For` with the peer appended,
    /// `Via` with our entry, and none of the client's `Forwarded`.
    fn every_fill_request_carries_our_forwarding_fields(v) {
        let phase = Phase::new();
        let origin = large_origin(v, &phase, false, |_| owned(&[("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        let r = cache.get(
            "/big",
            &["X-Forwarded-Host: evil.example", "Forwarded: host=evil.example", "X-Forwarded-For: 192.0.2.7"],
        );
        assert_response(&r, 200, &version(1));
        let requests = origin.requests();
        assert_eq!(requests.len(), fill_requests(v, BIG));
        for req in &requests {
            assert_eq!(req.header("x-forwarded-host"), Some("test"), "{req:?}");
            assert_eq!(joined(req, "x-forwarded-for"), "192.0.2.7, 127.0.0.1", "{req:?}");
            assert!(req.header("forwarded").is_none(), "{req:?}");
            assert!(joined(req, "via").contains("linerate"), "{req:?}");
        }
    }
}

/// The cells themselves: a fill of a [`BIG`] body makes exactly the requests the cell
/// says (no Range with slicing off; one Range per slice from an origin that honours it;
/// one Range request answered whole from one that ignores it), so the other tests of
/// this module cannot pass by skipping slicing.
#[test]
fn each_cell_fills_the_way_it_says() {
    for v in Variant::ALL {
        let phase = Phase::new();
        let origin = large_origin(v, &phase, false, |_| {
            owned(&[("Cache-Control", "max-age=3600")])
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/big", &[]), 200, &version(1));
        let ranges: Vec<Option<String>> = origin
            .requests()
            .iter()
            .map(|r| r.header("range").map(str::to_owned))
            .collect();
        let want: Vec<Option<String>> = match (v.slicing, v.ranges) {
            (Slicing::Off, _) => vec![None],
            (Slicing::On, RangeSupport::Ignored) => vec![Some("bytes=0-65535".into())],
            (Slicing::On, RangeSupport::Honoured) => (0..4)
                .map(|k| Some(format!("bytes={}-{}", k * 65_536, k * 65_536 + 65_535)))
                .collect(),
        };
        let (mut got, mut want) = (ranges, want);
        got.sort();
        want.sort();
        assert_eq!(got, want, "{v:?}");
    }
}
