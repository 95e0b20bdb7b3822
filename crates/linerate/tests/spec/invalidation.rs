//! RFC 9111 §4.4: invalidation. A non-error response to an unsafe method invalidates
//! the target URI's stored responses (every variant and, when sliced, every slice), and
//! linerate also invalidates same-origin `Location` / `Content-Location` URIs (the §4.4
//! MAY); never a URI of another origin, and never on an error or a safe method.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::common::{assert_response, count_method, fill_requests, send_with_body, Phase, BIG};
use crate::matrix;
use crate::support::content;
use crate::support::origin::{self, Reply, Request};

/// An origin that numbers its GET answers per path and request `Foo` value (`get N of
/// PATH`, fresh for an hour, `Vary: Foo`), and answers any other method with
/// `unsafe_status` and the `Location` / `Content-Location` of `links` for that path.
fn origin_with(
    unsafe_status: u16,
    links: &'static [(&'static str, &'static str, &'static str)],
) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    let seen: Mutex<HashMap<String, usize>> = Mutex::new(HashMap::new());
    move |req: &Request| {
        if req.method == "GET" || req.method == "HEAD" {
            let key = format!("{} {:?}", req.path(), req.header("foo"));
            let n = {
                let mut seen = seen.lock().unwrap();
                let n = seen.entry(key).or_insert(0);
                *n += 1;
                *n
            };
            let selecting = req
                .header("foo")
                .map(|f| format!(" foo={f}"))
                .unwrap_or_default();
            origin::ok(
                format!("get {n} of {}{selecting}", req.path()).as_bytes(),
                &[("Cache-Control", "max-age=3600"), ("Vary", "Foo")],
            )
        } else {
            let mut headers = Vec::new();
            for (path, loc, cl) in links {
                if *path == req.path() {
                    if !loc.is_empty() {
                        headers.push(("Location", *loc));
                    }
                    if !cl.is_empty() {
                        headers.push(("Content-Location", *cl));
                    }
                }
            }
            Reply::Full {
                status: unsafe_status,
                headers: origin::owned(&headers),
                body: b"done".to_vec(),
                chunked: false,
            }
        }
    }
}

/// GET `path` and expect `get N of PATH`.
#[track_caller]
fn get_n(cache: &crate::support::Server, path: &str, n: usize) {
    assert_response(
        &cache.get(path, &[]),
        200,
        format!("get {n} of {path}").as_bytes(),
    );
}

matrix! {
    /// RFC 9111 §4.4: "A cache MUST invalidate the target URI when it receives a
    /// non-error status code in response to an unsafe request method" — POST, PUT,
    /// DELETE and PATCH (RFC 9110 §9.2.1). The request and its body reach the origin;
    /// the next GET does too.
    fn unsafe_methods_invalidate_the_target(v) {
        for (method, status) in [("POST", 201u16), ("PUT", 200), ("DELETE", 204), ("PATCH", 200)] {
            let origin = v.origin(origin_with(status, &[]));
            let cache = v.start(&origin);
            get_n(&cache, "/r", 1);
            get_n(&cache, "/r", 1);
            let r = send_with_body(&cache, method, "/r", &["Content-Type: text/plain"], b"abc");
            assert_eq!(r.status, status, "{method}");
            assert_eq!(count_method(&origin, method, "/r"), 1, "{method} reaches the origin");
            let sent = origin.requests().into_iter().find(|q| q.method == method).unwrap();
            assert_eq!(sent.body, b"abc", "{method} body forwarded");
            get_n(&cache, "/r", 2);
            assert_eq!(count_method(&origin, "GET", "/r"), 2, "{method} invalidated /r");
        }
    }

    /// RFC 9111 §4.4 covers "methods whose safety is unknown" too: an unknown method
    /// forwarded and answered with a non-error status invalidates the target.
    fn unknown_method_success_invalidates(v) {
        let origin = v.origin(origin_with(200, &[]));
        let cache = v.start(&origin);
        get_n(&cache, "/u", 1);
        let r = send_with_body(&cache, "FROBNICATE", "/u", &[], b"abc");
        // linerate forwards a method it does not know (RFC 9110 §9.1: a proxy forwards
        // methods it does not recognise), and invalidates on its success.
        assert_eq!(count_method(&origin, "FROBNICATE", "/u"), 1);
        assert_eq!(r.status, 200);
        get_n(&cache, "/u", 2);
        assert_eq!(count_method(&origin, "GET", "/u"), 2);
    }

    /// RFC 9111 §4.4 requires invalidation only on a non-error status; linerate
    /// (documented) does not invalidate on an error, so the stored response stays.
    fn error_response_does_not_invalidate(v) {
        for (method, status) in [("POST", 500u16), ("DELETE", 404), ("PUT", 409)] {
            let origin = v.origin(origin_with(status, &[]));
            let cache = v.start(&origin);
            get_n(&cache, "/r", 1);
            let r = send_with_body(&cache, method, "/r", &[], b"abc");
            assert_eq!(r.status, status);
            assert_eq!(count_method(&origin, method, "/r"), 1);
            get_n(&cache, "/r", 1);
            assert_eq!(count_method(&origin, "GET", "/r"), 1, "{method} {status} must not invalidate");
        }
    }

    /// RFC 9111 §4.4: "A cache MAY invalidate other URIs when it receives a non-error
    /// status code in response to an unsafe request method ... In particular, the URI(s)
    /// in the Location and Content-Location response header fields" — linerate does, for
    /// relative and same-origin absolute references.
    fn location_and_content_location_are_invalidated(v) {
        let origin = v.origin(origin_with(
            201,
            &[("/p1", "/loc", "/cl"), ("/p2", "http://test/abs-loc", "http://TEST/abs-cl")],
        ));
        let cache = v.start(&origin);
        let targets = ["/loc", "/cl", "/abs-loc", "/abs-cl"];
        for t in targets {
            get_n(&cache, t, 1);
            get_n(&cache, t, 1);
        }
        assert_eq!(send_with_body(&cache, "POST", "/p1", &[], b"x").status, 201);
        assert_eq!(send_with_body(&cache, "POST", "/p2", &[], b"x").status, 201);
        for t in targets {
            get_n(&cache, t, 2);
            assert_eq!(count_method(&origin, "GET", t), 2, "{t} invalidated");
        }
    }

    /// RFC 9111 §4.4: "a cache MUST NOT trigger an invalidation under these conditions if
    /// the origin ... of the URI to be invalidated differs from that of the target URI" —
    /// a `Location` on another host leaves `/x` of this host stored.
    fn location_of_another_origin_is_not_invalidated(v) {
        let origin = v.origin(origin_with(
            201,
            &[("/p", "http://elsewhere.example/x", "http://elsewhere.example/y")],
        ));
        let cache = v.start(&origin);
        get_n(&cache, "/x", 1);
        get_n(&cache, "/y", 1);
        assert_eq!(send_with_body(&cache, "POST", "/p", &[], b"x").status, 201);
        get_n(&cache, "/x", 1);
        get_n(&cache, "/y", 1);
        assert_eq!(count_method(&origin, "GET", "/x"), 1);
        assert_eq!(count_method(&origin, "GET", "/y"), 1);
    }

    /// RFC 9111 §4.4: invalidation applies to "the stored responses" for the URI — all
    /// of them, i.e. every `Vary` variant.
    fn invalidation_covers_every_variant(v) {
        let origin = v.origin(origin_with(200, &[]));
        let cache = v.start(&origin);
        for value in ["1", "2"] {
            let h = format!("Foo: {value}");
            for _ in 0..2 {
                let r = cache.get("/v", &[&h]);
                assert_response(&r, 200, format!("get 1 of /v foo={value}").as_bytes());
            }
        }
        assert_eq!(count_method(&origin, "GET", "/v"), 2);
        assert_eq!(send_with_body(&cache, "PUT", "/v", &[], b"x").status, 200);
        for value in ["1", "2"] {
            let r = cache.get("/v", &[&format!("Foo: {value}")]);
            assert_response(&r, 200, format!("get 2 of /v foo={value}").as_bytes());
        }
        assert_eq!(count_method(&origin, "GET", "/v"), 4);
    }

    /// RFC 9111 §4.4 on a stored object of several slices: after a successful DELETE
    /// nothing of the old object is served — the next GET returns the new
    /// representation whole, and a range near its end is the new bytes too.
    fn invalidation_covers_every_slice(v) {
        let old = content(BIG, 1);
        let new = content(BIG, 2);
        let phase = Phase::new();
        let (o, n, p) = (old.clone(), new.clone(), phase.clone());
        let origin = v.origin(move |req| {
            if req.method == "DELETE" {
                return origin::status(204, &[]);
            }
            let body = if p.get() == 1 { &o } else { &n };
            origin::ok(body, &[("Cache-Control", "max-age=3600")])
        });
        let cache = v.start(&origin);
        assert_response(&cache.get("/big", &[]), 200, &old);
        assert_response(&cache.get("/big", &[]), 200, &old);
        let filled = count_method(&origin, "GET", "/big");
        assert_eq!(filled, fill_requests(v, BIG), "fill");
        phase.set(2);
        assert_eq!(send_with_body(&cache, "DELETE", "/big", &[], b"").status, 204);
        let r = cache.get("/big", &["Range: bytes=-100"]);
        assert_response(&r, 206, &new[BIG - 100..]);
        assert_response(&cache.get("/big", &[]), 200, &new);
        let after = count_method(&origin, "GET", "/big");
        assert_eq!(after, 2 * filled, "the DELETE invalidated /big (every slice): fetched again once");
        assert_response(&cache.get("/big", &[]), 200, &new);
        assert_eq!(count_method(&origin, "GET", "/big"), after, "the new object is stored");
    }

    /// RFC 9111 §4.4 applies to unsafe methods only: GET, HEAD and OPTIONS (safe, RFC
    /// 9110 §9.2.1) do not invalidate. A HEAD on a stored response is answered from the
    /// store (linerate's documented choice), an OPTIONS is forwarded.
    fn safe_methods_do_not_invalidate(v) {
        let origin = v.origin(origin_with(200, &[]));
        let cache = v.start(&origin);
        get_n(&cache, "/s", 1);
        let head = cache.request("HEAD", "/s", &[]);
        assert_eq!(head.status, 200);
        let options = cache.request("OPTIONS", "/s", &[]);
        assert!(options.status < 500, "OPTIONS: {}", options.status);
        get_n(&cache, "/s", 1);
        assert_eq!(count_method(&origin, "GET", "/s"), 1);
        assert_eq!(count_method(&origin, "HEAD", "/s"), 0);
        assert!(count_method(&origin, "OPTIONS", "/s") <= 1);
    }
}
