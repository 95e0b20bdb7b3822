//! Partial content: RFC 9110 §14 (Range, Content-Range, If-Range, multipart/byteranges,
//! 416) served from the store, and RFC 9111 §3.3-3.4 (incomplete and partial responses
//! from the origin are never passed off as something else).

use crate::common::{assert_response, fill_requests, last_request, BIG};
use crate::matrix;
use crate::support::kit::Slicing;
use crate::support::kit::{Cache, Variant};
use crate::support::origin::RangeSupport;
use crate::support::origin::{self, Origin, Reply};
use crate::support::{content, Response};

/// A cache holding `/p` (stored by a full GET) of `len` bytes with `ETag: "p1"`.
fn stored(v: Variant, len: usize, etag: &'static str) -> (Origin, Cache, Vec<u8>) {
    let body = content(len, 42);
    let b = body.clone();
    let origin =
        v.origin(move |_| origin::ok(&b, &[("Cache-Control", "max-age=3600"), ("ETag", etag)]));
    let cache = v.start(&origin);
    assert_response(&cache.get("/p", &[]), 200, &body);
    assert_eq!(origin.count("/p"), fill_requests(v, len), "fill");
    (origin, cache, body)
}

/// Assert a single-part 206 for bytes `a..=b` of `body`.
#[track_caller]
fn assert_206(r: &Response, body: &[u8], a: usize, b: usize) {
    assert_eq!(r.status, 206, "{:?}", r.headers);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes {a}-{b}/{}", body.len()).as_str()),
        "{:?}",
        r.headers
    );
    assert_eq!(
        r.header("content-length"),
        Some((b - a + 1).to_string().as_str())
    );
    assert_response(r, 206, &body[a..=b]);
}

/// The parts of a multipart/byteranges body: (Content-Range, bytes).
fn multipart(r: &Response) -> Vec<(String, Vec<u8>)> {
    let ct = r
        .header("content-type")
        .unwrap_or_else(|| panic!("no Content-Type: {:?}", r.headers));
    assert!(
        ct.to_ascii_lowercase().starts_with("multipart/byteranges"),
        "{ct}"
    );
    let boundary = ct
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .unwrap_or_else(|| panic!("no boundary in {ct}"))
        .trim_matches('"')
        .to_owned();
    let delim = format!("--{boundary}");
    let body = &r.body;
    let find = |from: usize, pat: &[u8]| {
        body[from..]
            .windows(pat.len())
            .position(|w| w == pat)
            .map(|i| i + from)
    };
    let mut parts = Vec::new();
    let mut at = find(0, delim.as_bytes()).expect("first boundary");
    loop {
        at += delim.len();
        if body[at..].starts_with(b"--") {
            return parts;
        }
        let head_end = find(at, b"\r\n\r\n").expect("part head") + 4;
        let head = String::from_utf8_lossy(&body[at..head_end]).to_ascii_lowercase();
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("content-range:"))
            .unwrap_or_else(|| panic!("part without Content-Range: {head}"))
            .trim()
            .to_owned();
        let next = find(head_end, format!("\r\n{delim}").as_bytes()).expect("next boundary");
        parts.push((range, body[head_end..next].to_vec()));
        at = next + 2;
    }
}

matrix! {
    /// RFC 9110 §14.2 / §15.3.7: a satisfiable single range of a stored response is
    /// answered 206 with exactly those bytes and `Content-Range: bytes a-b/len` (§14.4),
    /// from the store (RFC 9111 §3.4 lets a cache serve ranges of a complete stored
    /// response), with the `Age` every response from the store carries (RFC 9111 §4).
    /// Small object: inner, open-ended, suffix and over-long ranges.
    fn ranges_of_a_stored_response_small(v) {
        let (origin, cache, body) = stored(v, 1000, "\"p1\"");
        let part = cache.get("/p", &["Range: bytes=10-19"]);
        assert_206(&part, &body, 10, 19);
        // RFC 9111 §4: a response built from a stored one carries the generated Age.
        assert!(part.header("age").is_some(), "{:?}", part.headers);
        assert_206(&cache.get("/p", &["Range: bytes=990-"]), &body, 990, 999);
        assert_206(&cache.get("/p", &["Range: bytes=-5"]), &body, 995, 999);
        // RFC 9110 §14.1.2: a last-pos past the end is clipped to the length.
        assert_206(&cache.get("/p", &["Range: bytes=995-5000"]), &body, 995, 999);
        assert_206(&cache.get("/p", &["Range: bytes=0-0"]), &body, 0, 0);
        assert_eq!(origin.count("/p"), 1);
    }

    /// The same on an object of several slices, with ranges that cross slice
    /// boundaries and reach the tail.
    fn ranges_of_a_stored_response_large(v) {
        let (origin, cache, body) = stored(v, BIG, "\"p1\"");
        let filled = origin.count("/p");
        let s = 64 * 1024;
        assert_206(&cache.get("/p", &[&format!("Range: bytes={}-{}", s - 5, s + 4)]), &body, s - 5, s + 4);
        assert_206(&cache.get("/p", &[&format!("Range: bytes={}-{}", 100, 3 * s + 50)]), &body, 100, 3 * s + 50);
        assert_206(&cache.get("/p", &["Range: bytes=-200"]), &body, BIG - 200, BIG - 1);
        assert_206(&cache.get("/p", &[&format!("Range: bytes={}-", 2 * s)]), &body, 2 * s, BIG - 1);
        assert_eq!(origin.count("/p"), filled);
    }

    /// RFC 9110 §14.2 / §15.5.17: a range starting past the end is unsatisfiable: 416,
    /// and "a server that generates a 416 ... SHOULD generate a Content-Range header
    /// field specifying the current length": `bytes */len`. From the store.
    fn unsatisfiable_range_is_416(v) {
        let (origin, cache, _body) = stored(v, 1000, "\"p1\"");
        for range in ["bytes=1000-", "bytes=5000-6000"] {
            let r = cache.get("/p", &[&format!("Range: {range}")]);
            assert_eq!(r.status, 416, "{range}: {:?}", r.headers);
            assert_eq!(r.header("content-range"), Some("bytes */1000"));
        }
        assert_eq!(origin.count("/p"), 1);
    }

    /// RFC 9110 §14.6 / §15.3.7.2: several ranges are answered as a 206
    /// `multipart/byteranges`, each part with its own `Content-Range` (linerate's
    /// documented choice of answer; the ranges are far apart so no coalescing applies).
    fn multiple_ranges_are_multipart(v) {
        let (origin, cache, body) = stored(v, 5000, "\"p1\"");
        let r = cache.get("/p", &["Range: bytes=0-9, 4000-4009"]);
        assert_eq!(r.status, 206, "{:?}", r.headers);
        let parts = multipart(&r);
        assert_eq!(parts.len(), 2, "{parts:?}");
        assert_eq!(parts[0].0, "bytes 0-9/5000");
        assert_eq!(parts[0].1, &body[0..10]);
        assert_eq!(parts[1].0, "bytes 4000-4009/5000");
        assert_eq!(parts[1].1, &body[4000..4010]);
        assert_eq!(origin.count("/p"), 1);
    }

    /// RFC 9110 §13.1.5: `If-Range` with the current strong entity tag → the range
    /// (206); with another tag → the whole representation (200). Evaluated against the
    /// stored response, no origin request.
    fn if_range_with_entity_tag(v) {
        let (origin, cache, body) = stored(v, BIG, "\"p1\"");
        assert_206(&cache.get("/p", &["Range: bytes=0-9", "If-Range: \"p1\""]), &body, 0, 9);
        assert_response(&cache.get("/p", &["Range: bytes=0-9", "If-Range: \"p0\""]), 200, &body);
        assert_eq!(origin.count("/p"), fill_requests(v, BIG));
    }

    /// RFC 9110 §13.1.5: If-Range uses the strong comparison, so a weak entity tag never
    /// matches: the whole representation is sent (from the store, documented).
    fn if_range_with_weak_tag_sends_everything(v) {
        let (origin, cache, body) = stored(v, BIG, "W/\"w1\"");
        let r = cache.get("/p", &["Range: bytes=0-9", "If-Range: W/\"w1\""]);
        assert_response(&r, 200, &body);
        assert_eq!(origin.count("/p"), fill_requests(v, BIG), "answered from the fresh stored response");
    }

    /// RFC 9110 §14.2: "A server MUST ignore a Range header field received with a
    /// request method that is unrecognized or for which range handling is not defined"
    /// and a proxy MAY discard a range unit it does not understand: `items=0-5` is
    /// answered with the whole 200.
    fn unknown_range_unit_gets_everything(v) {
        let (origin, cache, body) = stored(v, BIG, "\"p1\"");
        assert_response(&cache.get("/p", &["Range: items=0-5"]), 200, &body);
        assert_eq!(origin.count("/p"), fill_requests(v, BIG), "answered from the fresh stored response");
    }

    /// RFC 9110 §14.2: range requests apply to a 200; a stored 404 is answered whole
    /// (status 404) whatever the `Range`.
    fn range_of_a_stored_error_is_the_error(v) {
        let origin = v.origin(|_| Reply::Full {
            status: 404,
            headers: origin::owned(&[("Cache-Control", "max-age=3600")]),
            body: b"not here, and this is the whole body".to_vec(),
            chunked: false,
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/nf", &[]), 404, b"not here, and this is the whole body");
        let r = cache.get("/nf", &["Range: bytes=0-3"]);
        assert_response(&r, 404, b"not here, and this is the whole body");
        assert_eq!(origin.count("/nf"), 1);
    }

    /// RFC 9111 §3.3-3.4: a range requested on a miss gets the right bytes; whatever was
    /// stored from it is never used as the complete response — the following full GET
    /// is the whole body; after that, ranges are served from the store.
    fn range_on_a_miss_then_full(v) {
        let body = content(BIG, 9);
        let b = body.clone();
        let origin = v.origin(move |_| origin::ok(&b, &[("Cache-Control", "max-age=3600"), ("ETag", "\"m\"")]));
        let cache = v.start(&origin);
        let a = 70_000;
        assert_206(&cache.get("/m", &[&format!("Range: bytes={a}-{}", a + 999)]), &body, a, a + 999);
        assert_response(&cache.get("/m", &[]), 200, &body);
        let n = origin.count("/m");
        assert_eq!(n, fill_requests(v, BIG), "each slice (or the whole) fetched once");
        assert_206(&cache.get("/m", &["Range: bytes=5-14"]), &body, 5, 14);
        assert_eq!(origin.count("/m"), n);
    }

    /// linerate's documented rule within RFC 9111 §3.4 / RFC 9110 §15.3.7: a 206 from
    /// the origin whose `Content-Range` is not what linerate asked for is never stored
    /// and never relabelled — the client's plain GET is relayed and it gets the origin's
    /// 206 exactly (Content-Range and Content-Length), each time from the origin.
    fn wrong_206_for_a_full_request_is_relayed_unchanged(v) {
        let origin = v.origin(|_| Reply::Full {
            status: 206,
            headers: origin::owned(&[("Cache-Control", "max-age=3600"), ("Content-Range", "bytes 0-9/100")]),
            body: b"0123456789".to_vec(),
            chunked: false,
        });
        let cache = v.start(&origin);
        let first = cache.get("/w", &[]);
        assert_eq!(first.header("content-range"), Some("bytes 0-9/100"), "{:?}", first.headers);
        assert_eq!(first.header("content-length"), Some("10"));
        assert_response(&first, 206, b"0123456789");
        let n = origin.count("/w");
        assert_eq!(n, 2, "the fill's request, then the client's own, relayed");
        let second = cache.get("/w", &[]);
        assert_response(&second, 206, b"0123456789");
        assert_eq!(second.header("content-range"), Some("bytes 0-9/100"));
        assert_eq!(origin.count("/w"), 3, "nothing stored; marked uncacheable: one relay");
    }

    /// The same rule for a client's own range: the origin answers bytes 0-9 to a request
    /// for 20-29; the client receives exactly the origin's 206 (`bytes 0-9/100`), never
    /// those bytes labelled 20-29.
    fn wrong_206_for_a_range_request_is_relayed_unchanged(v) {
        let origin = v.origin(|_| Reply::Full {
            status: 206,
            headers: origin::owned(&[("Cache-Control", "max-age=3600"), ("Content-Range", "bytes 0-9/100")]),
            body: b"0123456789".to_vec(),
            chunked: false,
        });
        let cache = v.start(&origin);
        let r = cache.get("/w", &["Range: bytes=20-29"]);
        assert_response(&r, 206, b"0123456789");
        assert_eq!(r.header("content-range"), Some("bytes 0-9/100"), "{:?}", r.headers);
        assert_eq!(r.header("content-length"), Some("10"));
        let n = origin.count("/w");
        assert_eq!(n, 2, "the fill's request, then the client's own, relayed");
        let again = cache.get("/w", &["Range: bytes=20-29"]);
        assert_eq!(again.header("content-range"), Some("bytes 0-9/100"));
        assert_eq!(origin.count("/w"), 3, "nothing stored; marked uncacheable: one relay");
    }

    /// RFC 9111 §3.1 and §4: a cache stores a response's header fields and, reusing it,
    /// sends them. A 200 may carry `Content-Range` (RFC 9110 §14.4 gives it no meaning
    /// there, but it is the origin's field): the stored 200 is served with it, on the
    /// fill and on every hit. Guards against it being dropped on a hit, as it was. A
    /// range of that 200 is the cache's own 206, with its own `Content-Range` only.
    fn stored_200_keeps_its_content_range(v) {
        let origin = v.origin(|_| {
            origin::ok(
                b"0123456789",
                &[("Cache-Control", "max-age=3600"), ("Content-Range", "bytes 0-9/10")],
            )
        });
        let cache = v.start(&origin);
        for _ in 0..2 {
            let r = cache.get("/cr", &[]);
            assert_response(&r, 200, b"0123456789");
            assert_eq!(r.values("content-range"), vec!["bytes 0-9/10"], "{:?}", r.headers);
            assert_eq!(r.header("content-length"), Some("10"));
        }
        let head = cache.request("HEAD", "/cr", &[]);
        assert_eq!(head.values("content-range"), vec!["bytes 0-9/10"], "{:?}", head.headers);
        let part = cache.get("/cr", &["Range: bytes=2-4"]);
        assert_response(&part, 206, b"234");
        assert_eq!(part.values("content-range"), vec!["bytes 2-4/10"], "{:?}", part.headers);
        assert_eq!(origin.count("/cr"), 1, "stored once, every answer from the store");
    }
}

/// RFC 9110 §14.2: a server MAY ignore `Range`. A relayed request (here the URL is
/// known to be uncacheable, `no-store`) carries the client's `Range` to the origin as
/// the client sent it, and the client gets the origin's answer as it is: a 206 with
/// exactly the bytes asked from an origin that honours `Range`, the whole 200 from one
/// that ignores it. With slicing off, so the `Range` the origin sees is the client's
/// (the matrix's slicing-off cell runs only against an origin that honours it).
#[test]
fn relayed_range_requests_get_the_origins_answer_as_it_is() {
    for ranges in [RangeSupport::Honoured, RangeSupport::Ignored] {
        let v = Variant {
            slicing: Slicing::Off,
            ranges,
        };
        let body = content(BIG, 77);
        let b = body.clone();
        let origin =
            v.origin(move |_| origin::ok(&b, &[("Cache-Control", "no-store"), ("ETag", "\"r\"")]));
        let cache = v.start(&origin);
        // The first request learns that the URL is not storable.
        assert_response(&cache.get("/r", &[]), 200, &body);
        assert_eq!(origin.count("/r"), 1);
        for i in 1..=2 {
            let r = cache.get("/r", &["Range: bytes=100-199"]);
            let sent = last_request(&origin, "/r");
            assert_eq!(sent.header("range"), Some("bytes=100-199"), "{ranges:?}");
            match ranges {
                RangeSupport::Honoured => assert_206(&r, &body, 100, 199),
                RangeSupport::Ignored => {
                    assert_response(&r, 200, &body);
                    assert_eq!(r.header("content-range"), None);
                }
            }
            assert_eq!(
                origin.count("/r"),
                1 + i,
                "{ranges:?}: one origin request each"
            );
        }
    }
}
