//! HEAD (RFC 9110 §9.3.2; RFC 9111 §4.3.5): on a miss linerate fetches with GET and
//! stores the response (documented choice); on a hit it answers from the store with
//! the GET's header fields and no content. Framing is checked on a kept-alive
//! connection, where stray body bytes after a HEAD response would corrupt the next one.

use std::io::Write;

use crate::common::{assert_response, count_method, fill_requests, BIG};
use crate::matrix;
use crate::support::kit::Variant;
use crate::support::origin;
use crate::support::{content, read_response};

/// HEAD then GET of `/h` on one kept-alive connection (the GET closes it).
fn head_then_get(
    cache: &crate::support::Server,
) -> (crate::support::Response, crate::support::Response) {
    let mut s = cache.connect();
    s.write_all(b"HEAD /h HTTP/1.1\r\nHost: test\r\n\r\nGET /h HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let head = read_response(&mut s, true).expect("HEAD response");
    let get = read_response(&mut s, false).expect("GET response after the HEAD");
    (head, get)
}

/// The HEAD scenarios with a body of `len` bytes.
fn head_cases(v: Variant, len: usize) {
    let body = content(len, 5);
    let b = body.clone();
    let origin = v.origin(move |_| {
        origin::ok(
            &b,
            &[
                ("Cache-Control", "max-age=3600"),
                ("Content-Type", "video/mp4"),
                ("X-Meta", "m"),
            ],
        )
    });
    let cache = v.start(&origin);

    // Miss: HEAD fetched as GET, answered without content, stored.
    let (head, get) = head_then_get(&cache);
    assert_eq!(head.status, 200, "{:?}", head.headers);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header("content-length"),
        Some(len.to_string().as_str()),
        "{:?}",
        head.headers
    );
    assert_eq!(head.header("content-type"), Some("video/mp4"));
    assert_eq!(head.header("x-meta"), Some("m"));
    assert_response(&get, 200, &body);
    assert_eq!(
        count_method(&origin, "HEAD", "/h"),
        0,
        "the miss is fetched with GET"
    );
    let filled = count_method(&origin, "GET", "/h");
    assert_eq!(
        filled,
        fill_requests(v, len),
        "HEAD miss fills the object once; the GET after it hits"
    );

    // Hit: the same header fields, no content, no origin request.
    let (head, get) = head_then_get(&cache);
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(len.to_string().as_str())
    );
    assert_eq!(head.header("content-type"), Some("video/mp4"));
    assert_eq!(head.header("x-meta"), Some("m"));
    assert!(
        head.header("age").is_some(),
        "a stored response carries Age (RFC 9111 §4)"
    );
    assert_response(&get, 200, &body);
    assert_eq!(origin.total(), filled);
}

matrix! {
    /// RFC 9110 §9.3.2: "The HEAD method is identical to GET except that the server MUST
    /// NOT send content in the response"; the server SHOULD send the fields it would
    /// send for GET (Content-Length included, RFC 9110 §8.6). A small body.
    fn head_miss_and_hit_small(v) {
        head_cases(v, 1234);
    }

    /// The same for an object of several slices: the `Content-Length` is the whole
    /// object's, on the miss and from the store.
    fn head_miss_and_hit_large(v) {
        head_cases(v, BIG);
    }

    /// RFC 9110 §9.3.2 and RFC 9111 §4.3.5: a HEAD of an uncacheable response is still
    /// answered without content, and nothing is stored for the next GET.
    fn head_of_uncacheable_response(v) {
        let origin = v.origin(|_| origin::ok(b"secret", &[("Cache-Control", "no-store")]));
        let cache = v.start(&origin);
        let (head, get) = head_then_get(&cache);
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty());
        assert_response(&get, 200, b"secret");
        assert_eq!(origin.count("/h"), 2, "one origin request for the HEAD, one for the GET");
    }
}
