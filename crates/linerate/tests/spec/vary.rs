//! RFC 9111 §4.1: calculating cache keys with `Vary`. A stored response is reused only
//! when every field it names matches in the new request; variants of one URL coexist.
//! Small bodies and bodies of several slices (so sliced variants are really exercised).

use crate::common::{assert_response, fill_requests, last_request, nth, numbered, BIG};
use crate::matrix;
use crate::support::content;
use crate::support::kit::{Cache, Variant};
use crate::support::origin::{self, Origin, Request};

/// The value the request carries for `name`, all lines joined (`-` when absent).
fn val(req: &Request, name: &str) -> String {
    let v = crate::common::joined(req, name);
    if req.header(name).is_none() {
        "-".into()
    } else {
        v
    }
}

/// An origin whose body names the request's values of `names` (so each variant is
/// distinguishable), with `Vary: vary` and `max-age=3600`.
fn echo_origin(v: Variant, vary: &'static str, names: &'static [&'static str]) -> Origin {
    v.origin(move |req| {
        let body: Vec<String> = names
            .iter()
            .map(|n| format!("{n}={}", val(req, n)))
            .collect();
        origin::ok(
            body.join(";").as_bytes(),
            &[("Cache-Control", "max-age=3600"), ("Vary", vary)],
        )
    })
}

/// GET `/v` with `headers`, assert the body, return it.
#[track_caller]
fn get_body(cache: &Cache, headers: &[&str], want: &str) {
    let r = cache.get("/v", headers);
    assert_response(&r, 200, want.as_bytes());
}

matrix! {
    /// RFC 9111 §4.1: the stored response is reused when the request's `Foo` matches
    /// the one that produced it; fields not named by `Vary` are not part of the key.
    fn vary_match_is_reused(v) {
        let origin = echo_origin(v, "Foo", &["foo"]);
        let cache = v.start(&origin);
        get_body(&cache, &["Foo: 1", "Other: 2"], "foo=1");
        get_body(&cache, &["Foo: 1", "Other: 3"], "foo=1");
        assert_eq!(origin.count("/v"), 1);
    }

    /// RFC 9111 §4.1: a request whose `Foo` differs does not match; the new response is
    /// another variant and does not evict the first (§4.1: "the cache ... MAY store
    /// multiple responses"; linerate keeps each).
    fn vary_mismatch_is_not_reused_and_variants_coexist(v) {
        let origin = echo_origin(v, "Foo", &["foo"]);
        let cache = v.start(&origin);
        get_body(&cache, &["Foo: 1"], "foo=1");
        get_body(&cache, &["Foo: 2"], "foo=2");
        assert_eq!(origin.count("/v"), 2);
        get_body(&cache, &["Foo: 1"], "foo=1");
        get_body(&cache, &["Foo: 2"], "foo=2");
        assert_eq!(origin.count("/v"), 2);
    }

    /// RFC 9111 §4.1: "If (after any normalization that might take place) a header field
    /// is absent from a request, it can only match another request if it is also
    /// absent there." Present then absent: no match; absent then absent: match.
    fn vary_absent_field_matches_only_absent(v) {
        let origin = echo_origin(v, "Foo", &["foo"]);
        let cache = v.start(&origin);
        get_body(&cache, &["Foo: 1"], "foo=1");
        get_body(&cache, &[], "foo=-");
        assert_eq!(origin.count("/v"), 2);
        get_body(&cache, &[], "foo=-");
        get_body(&cache, &["Foo: 1"], "foo=1");
        assert_eq!(origin.count("/v"), 2);
    }

    /// RFC 9111 §4.1 with two names: both must match. A mismatch in either, or one
    /// omitted, is a miss.
    fn vary_two_fields(v) {
        let origin = echo_origin(v, "Foo, Bar", &["foo", "bar"]);
        let cache = v.start(&origin);
        get_body(&cache, &["Foo: 1", "Bar: abc"], "foo=1;bar=abc");
        get_body(&cache, &["Foo: 1", "Bar: abc"], "foo=1;bar=abc");
        assert_eq!(origin.count("/v"), 1);
        get_body(&cache, &["Foo: 2", "Bar: abc"], "foo=2;bar=abc");
        assert_eq!(origin.count("/v"), 2);
        get_body(&cache, &["Foo: 1", "Bar: xyz"], "foo=1;bar=xyz");
        assert_eq!(origin.count("/v"), 3);
        get_body(&cache, &["Foo: 1"], "foo=1;bar=-");
        assert_eq!(origin.count("/v"), 4);
    }

    /// RFC 9111 §4.1 with three names: a difference in the middle one is a miss
    /// regardless of the order the request sends its fields in; the same values in
    /// another field order match; a name absent from both requests matches.
    fn vary_three_fields(v) {
        let origin = echo_origin(v, "Foo, Bar, Baz", &["foo", "bar", "baz"]);
        let cache = v.start(&origin);
        get_body(&cache, &["Foo: 1", "Bar: abc4", "Baz: 789"], "foo=1;bar=abc4;baz=789");
        get_body(&cache, &["Baz: 789", "Foo: 1", "Bar: abc4"], "foo=1;bar=abc4;baz=789");
        assert_eq!(origin.count("/v"), 1);
        get_body(&cache, &["Foo: 1", "Bar: abc", "Baz: 789"], "foo=1;bar=abc;baz=789");
        assert_eq!(origin.count("/v"), 2);
        get_body(&cache, &["Foo: 1", "Baz: 789"], "foo=1;bar=-;baz=789");
        get_body(&cache, &["Baz: 789", "Foo: 1"], "foo=1;bar=-;baz=789");
        assert_eq!(origin.count("/v"), 3);
    }

    /// RFC 9111 §4.1: Vary names fields, and field names are case-insensitive (RFC 9110
    /// §5.1), in `Vary` and in the request alike.
    fn vary_names_are_case_insensitive(v) {
        let origin = echo_origin(v, "FOO, bAr", &["foo", "bar"]);
        let cache = v.start(&origin);
        get_body(&cache, &["foo: 1", "BAR: 2"], "foo=1;bar=2");
        get_body(&cache, &["FOO: 1", "bar: 2"], "foo=1;bar=2");
        assert_eq!(origin.count("/v"), 1);
    }

    /// RFC 9111 §4.1: values are compared after normalisation such as "combining
    /// multiple header field lines with the same field name" and removing whitespace
    /// that is not significant (RFC 9110 §5.6.1: OWS around list commas): `1,2`,
    /// ` 1 , 2 ` and the two lines `1` and `2` are the same selecting value.
    fn vary_values_are_normalised(v) {
        let origin = v.origin(numbered(|_| {
            (200, crate::common::fields(&[("Cache-Control", "max-age=3600"), ("Vary", "Foo")]))
        }));
        let cache = v.start(&origin);
        let first = cache.get("/v", &["Foo: 1,2"]);
        assert_response(&first, 200, &nth(1, "/v"));
        let spaced = cache.get("/v", &["Foo:  1 ,  2 "]);
        assert_response(&spaced, 200, &nth(1, "/v"));
        let lines = cache.get("/v", &["Foo: 1", "Foo: 2"]);
        assert_response(&lines, 200, &nth(1, "/v"));
        assert_eq!(origin.count("/v"), 1);
        // A really different value still misses.
        let other = cache.get("/v", &["Foo: 2, 1"]);
        assert_response(&other, 200, &nth(2, "/v"));
        assert_eq!(origin.count("/v"), 2);
    }

    /// RFC 9111 §4.1: "A stored response with a Vary header field value containing a
    /// member "*" always fails to match" — alone, repeated, with other names, or on a
    /// second `Vary` line.
    fn vary_star_never_matches(v) {
        let origin = v.origin(numbered(|req| {
            let mut f = crate::common::fields(&[("Cache-Control", "max-age=3600")]);
            match req.path() {
                "/star" => f.push(("Vary".into(), "*".into())),
                "/star-star" => f.push(("Vary".into(), "*, *".into())),
                "/star-foo" => f.push(("Vary".into(), "*, Foo".into())),
                "/foo-star" => f.push(("Vary".into(), "Foo, *".into())),
                _ => {
                    f.push(("Vary".into(), "Foo".into()));
                    f.push(("Vary".into(), "*".into()));
                }
            }
            (200, f)
        }));
        let cache = v.start(&origin);
        for p in ["/star", "/star-star", "/star-foo", "/foo-star", "/two-lines"] {
            let a = cache.get(p, &["Foo: 1"]);
            assert_response(&a, 200, &nth(1, p));
            let b = cache.get(p, &["Foo: 1"]);
            assert_response(&b, 200, &nth(2, p));
            assert_eq!(origin.count(p), 2, "{p}");
        }
    }

    /// RFC 9111 §4.1 for the common case: `Vary: Accept-Encoding` with gzip, br,
    /// identity and no `Accept-Encoding` at all: four variants, each stored on its own
    /// and served back intact (small bodies).
    fn accept_encoding_variants_coexist_small(v) {
        encodings_coexist(v, 1500);
    }

    /// The same with bodies of several slices: the variants' slices must never mix.
    fn accept_encoding_variants_coexist_large(v) {
        encodings_coexist(v, BIG);
    }

    /// RFC 9111 §4.1 with sliced bodies: two variants of several slices each, then a
    /// range of the second variant: its bytes, never the first variant's.
    fn range_of_one_variant_is_never_served_from_another(v) {
        let a = content(BIG, 11);
        let b = content(BIG, 12);
        let (ca, cb) = (a.clone(), b.clone());
        let origin = v.origin(move |req| {
            let body = if req.header("foo") == Some("2") { &cb } else { &ca };
            origin::ok(body, &[("Cache-Control", "max-age=3600"), ("Vary", "Foo")])
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/v", &["Foo: 1"]), 200, &a);
        let after_a = origin.count("/v");
        assert_eq!(after_a, fill_requests(v, BIG), "filling variant 1");
        let start = 64 * 1024 - 10;
        let r = cache.get("/v", &["Foo: 2", &format!("Range: bytes={start}-{}", start + 99)]);
        assert_response(&r, 206, &b[start..start + 100]);
        assert!(origin.count("/v") > after_a, "variant 2 must come from the origin");
        assert_response(&cache.get("/v", &["Foo: 2"]), 200, &b);
        assert_response(&cache.get("/v", &["Foo: 1"]), 200, &a);
        let settled = origin.count("/v");
        assert_response(&cache.get("/v", &["Foo: 2"]), 200, &b);
        assert_response(&cache.get("/v", &["Foo: 1"]), 200, &a);
        assert_eq!(origin.count("/v"), settled, "both variants are stored");
    }

    /// RFC 9111 §4.1 with linerate's documented limit: a `Vary` of 32 field names is
    /// honoured — all 32 must match, and a change in the last one misses.
    fn vary_with_32_fields(v) {
        let names: Vec<String> = (1..=32).map(|i| format!("X-V{i}")).collect();
        let vary: &'static str = Box::leak(names.join(", ").into_boxed_str());
        let origin = v.origin(numbered(move |_| {
            (200, crate::common::fields(&[("Cache-Control", "max-age=3600"), ("Vary", vary)]))
        }));
        let cache = v.start(&origin);
        let lines: Vec<String> = names.iter().map(|n| format!("{n}: {n}-value")).collect();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert_response(&cache.get("/v", &refs), 200, &nth(1, "/v"));
        assert_response(&cache.get("/v", &refs), 200, &nth(1, "/v"));
        assert_eq!(origin.count("/v"), 1);
        let mut changed = lines.clone();
        changed[31] = "X-V32: other".into();
        let refs: Vec<&str> = changed.iter().map(String::as_str).collect();
        assert_response(&cache.get("/v", &refs), 200, &nth(2, "/v"));
        assert_eq!(origin.count("/v"), 2);
    }

    /// RFC 9111 §4.1 with RFC 9110 §7.6.1: the selecting fields are those of the request
    /// the origin answered. A client that names `Origin` in `Connection` has it removed
    /// before forwarding, so the origin answers "no Origin" (without
    /// `Access-Control-Allow-Origin`). Guards against cache poisoning: that answer was
    /// stored as the `Origin: https://player.example` variant, and every real player
    /// then got it from the store and had the video blocked by its browser. It must be
    /// stored as (and found by) the variant without `Origin`, and a real player's
    /// request must reach the origin and get its `Access-Control-Allow-Origin`.
    fn origin_named_in_connection_selects_the_variant_without_it(v) {
        let origin = v.origin(crate::common::numbered(|req| {
            let mut f = crate::common::fields(&[("Cache-Control", "max-age=3600"), ("Vary", "Origin")]);
            if let Some(o) = req.header("origin") {
                f.push(("Access-Control-Allow-Origin".into(), o.into()));
            }
            (200, f)
        }));
        let cache = v.start(&origin);
        let player = "Origin: https://player.example";
        let hostile = cache.get("/v", &[player, "Connection: Origin"]);
        assert_response(&hostile, 200, &nth(1, "/v"));
        assert!(hostile.header("access-control-allow-origin").is_none());
        assert_eq!(origin.requests()[0].header("origin"), None, "Origin is hop-by-hop here");
        let real = cache.get("/v", &[player]);
        assert_response(&real, 200, &nth(2, "/v"));
        assert_eq!(origin.count("/v"), 2, "the player's variant is not the one stored first");
        assert_eq!(real.header("access-control-allow-origin"), Some("https://player.example"));
        let again = cache.get("/v", &[player]);
        assert_response(&again, 200, &nth(2, "/v"));
        assert_eq!(again.header("access-control-allow-origin"), Some("https://player.example"));
        // What the first request stored is the answer to "no Origin": found by requests
        // without one, and by requests whose `Origin` is removed again.
        assert_response(&cache.get("/v", &[]), 200, &nth(1, "/v"));
        assert_response(&cache.get("/v", &[player, "Connection: origin"]), 200, &nth(1, "/v"));
        assert_eq!(origin.count("/v"), 2);
    }

    /// The same rule for every field the cache does not forward (RFC 9110 §7.6.1 and
    /// linerate's own removals): `Accept-Encoding` and a custom field named in
    /// `Connection`, a name with `_` (never forwarded: CGI reads it as the `-` name), and
    /// `X-Forwarded-Host` (replaced by the cache's own, from the key). Each path varies
    /// on one of them; the request carrying it is stored as the variant of what the
    /// origin saw, so it never selects (or poisons) the variant of the value it sent.
    /// Before the fix each first request was stored under the value the client sent.
    fn fields_the_origin_never_saw_select_no_variant(v) {
        let origin = v.origin(crate::common::numbered(|req| {
            let vary = match req.path() {
                "/ae" => "Accept-Encoding",
                "/custom" => "X-Custom",
                "/underscore" => "X_Variant",
                _ => "X-Forwarded-Host",
            };
            (200, crate::common::fields(&[("Cache-Control", "max-age=3600"), ("Vary", vary)]))
        }));
        let cache = v.start(&origin);
        // Named in `Connection`: the first request is the origin's answer to none; a
        // request that really sends the field is another variant (one more origin
        // request); one without it finds the first.
        for (path, field, name) in [
            ("/ae", "Accept-Encoding: gzip", "Accept-Encoding"),
            ("/custom", "X-Custom: a", "X-Custom"),
        ] {
            let hop = format!("Connection: {name}");
            assert_response(&cache.get(path, &[field, &hop]), 200, &nth(1, path));
            assert_eq!(last_request(&origin, path).header(name), None, "{path}");
            assert_response(&cache.get(path, &[field]), 200, &nth(2, path));
            assert_eq!(origin.count(path), 2, "{path}: the sent value's own variant");
            assert_response(&cache.get(path, &[]), 200, &nth(1, path));
            assert_response(&cache.get(path, &[field, &hop]), 200, &nth(1, path));
            assert_response(&cache.get(path, &[field]), 200, &nth(2, path));
            assert_eq!(origin.count(path), 2, "{path}: both variants are stored");
        }
        // Never forwarded at all: whatever the client sends, the origin saw the same
        // request, so there is one variant.
        for (path, sent) in [
            ("/underscore", ["X_Variant: a", "X_Variant: b"]),
            ("/xfh", ["X-Forwarded-Host: evil.example", "X-Forwarded-Host: other.example"]),
        ] {
            assert_response(&cache.get(path, &[sent[0]]), 200, &nth(1, path));
            assert_response(&cache.get(path, &[]), 200, &nth(1, path));
            assert_response(&cache.get(path, &[sent[1]]), 200, &nth(1, path));
            assert_eq!(origin.count(path), 1, "{path}: one variant");
        }
        assert_eq!(
            last_request(&origin, "/xfh").header("x-forwarded-host"),
            Some("test"),
            "the origin sees the cache's own X-Forwarded-Host"
        );
    }

    /// RFC 9111 §4.3.1: a cache validating a stored response sends the request's
    /// selecting header fields (those named by `Vary`) with the conditional request,
    /// so the origin selects the same variant; the matching variant's `ETag` is sent.
    fn revalidation_carries_the_selecting_fields(v) {
        let origin = v.origin(|req: &Request| {
            if req.header("if-none-match").is_some() {
                origin::status(304, &[("ETag", "\"v-abc\""), ("Cache-Control", "max-age=0"), ("Vary", "Abc")])
            } else {
                origin::ok(b"variant abc", &[("ETag", "\"v-abc\""), ("Cache-Control", "max-age=0"), ("Vary", "Abc")])
            }
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/v", &["Abc: 123"]), 200, b"variant abc");
        assert_response(&cache.get("/v", &["Abc: 123"]), 200, b"variant abc");
        assert_eq!(origin.count("/v"), 2);
        let reval = last_request(&origin, "/v");
        assert_eq!(reval.header("if-none-match"), Some("\"v-abc\""));
        assert_eq!(reval.header("abc"), Some("123"));
    }
}

/// Four `Accept-Encoding` variants with distinct bodies of `len` bytes, each requested
/// twice: filled once each, then all from the store.
fn encodings_coexist(v: Variant, len: usize) {
    let encodings = ["gzip", "br", "identity", ""];
    let bodies: Vec<Vec<u8>> = (0..4).map(|i| content(len, 100 + i)).collect();
    let b = bodies.clone();
    let origin = v.origin(move |req| {
        let i = match req.header("accept-encoding") {
            Some("gzip") => 0,
            Some("br") => 1,
            Some("identity") => 2,
            _ => 3,
        };
        let mut f = vec![
            ("Cache-Control", "max-age=3600"),
            ("Vary", "Accept-Encoding"),
        ];
        if i < 2 {
            f.push(("Content-Encoding", ["gzip", "br"][i]));
        }
        origin::ok(&b[i], &f)
    });
    let cache = v.start(&origin);
    let mut filled = 0;
    for (i, e) in encodings.iter().enumerate() {
        let h = format!("Accept-Encoding: {e}");
        let headers: Vec<&str> = if e.is_empty() {
            vec![]
        } else {
            vec![h.as_str()]
        };
        let r = cache.get("/v", &headers);
        assert_response(&r, 200, &bodies[i]);
        let n = origin.count("/v");
        assert_eq!(
            n - filled,
            fill_requests(v, len),
            "filling the {e:?} variant"
        );
        filled = n;
    }
    for (i, e) in encodings.iter().enumerate() {
        let h = format!("Accept-Encoding: {e}");
        let headers: Vec<&str> = if e.is_empty() {
            vec![]
        } else {
            vec![h.as_str()]
        };
        let r = cache.get("/v", &headers);
        assert_response(&r, 200, &bodies[i]);
        if i < 2 {
            assert_eq!(r.header("content-encoding"), Some(["gzip", "br"][i]));
        } else {
            assert!(r.header("content-encoding").is_none());
        }
    }
    assert_eq!(
        origin.count("/v"),
        filled,
        "every variant is served from the store"
    );
}
