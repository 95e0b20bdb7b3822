//! End to end: whole files, heads, media types, keep-alive, pipelining, HTTP/1.0, and
//! request bodies on GET — the real binary on 127.0.0.1 over real sockets.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::Write;
use support::{content, library, read_response, Server};

#[test]
fn whole_files_are_byte_exact_with_full_heads() {
    let big = content(5 * 1024 * 1024 + 17, 1);
    let seg = content(188 * 100, 2);
    let lib = library(&[
        ("v/big.mp4", &big),
        ("v/seg1.ts", &seg),
        ("v/index.m3u8", b"#EXTM3U\n"),
        ("empty.m4s", b""),
        ("odd.BIN", b"x"),
    ]);
    let srv = Server::start(lib.path(), "");
    let r = srv.get("/v/big.mp4", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == big, "5 MiB body differs");
    assert_eq!(r.header("content-type"), Some("video/mp4"));
    assert_eq!(r.header("content-length").unwrap(), big.len().to_string());
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert!(r.header("etag").unwrap().starts_with('"'));
    assert!(r.header("last-modified").unwrap().ends_with(" GMT"));
    assert!(r.header("date").unwrap().ends_with(" GMT"));
    assert_eq!(r.header("cache-control"), Some("public, max-age=86400"));

    let r = srv.get("/v/seg1.ts", &[]);
    assert_eq!((r.status, r.body == seg), (200, true));
    assert_eq!(r.header("content-type"), Some("video/mp2t"));

    let r = srv.get("/v/index.m3u8?token=abc&x=1", &[]);
    assert_eq!(r.status, 200, "query string is ignored for lookup");
    assert_eq!(r.body, b"#EXTM3U\n");
    assert_eq!(
        r.header("content-type"),
        Some("application/vnd.apple.mpegurl")
    );
    assert_eq!(r.header("cache-control"), Some("public, max-age=2"));

    let r = srv.get("/empty.m4s", &[]);
    assert_eq!((r.status, r.body.len()), (200, 0));
    assert_eq!(r.header("content-length"), Some("0"));

    let r = srv.get("/odd.BIN", &[]);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.header("cache-control"), None);
}

#[test]
fn head_has_the_get_fields_and_no_body() {
    let body = content(70_000, 3);
    let lib = library(&[("a.m4s", &body)]);
    let srv = Server::start(lib.path(), "");
    let get = srv.get("/a.m4s", &[]);
    let mut s = srv.connect();
    s.write_all(b"HEAD /a.m4s HTTP/1.1\r\nHost: t\r\n\r\nGET /a.m4s HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let head = read_response(&mut s, true).unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("70000"));
    assert_eq!(head.header("etag"), get.header("etag"));
    assert_eq!(head.header("content-type"), Some("video/iso.segment"));
    // The next response starts right after HEAD's head: no body bytes were sent.
    let next = read_response(&mut s, false).unwrap();
    assert_eq!((next.status, next.body == body), (200, true));
}

#[test]
fn missing_directories_and_other_methods() {
    let lib = library(&[("d/f.ts", b"x")]);
    let srv = Server::start(lib.path(), "");
    assert_eq!(srv.get("/nope.ts", &[]).status, 404);
    assert_eq!(
        srv.get("/d/", &[]).status,
        404,
        "directories are not listed"
    );
    assert_eq!(srv.get("/d", &[]).status, 404, "a directory is not a file");
    assert_eq!(srv.get("/", &[]).status, 404);
    assert_eq!(srv.get("/d/f.ts/x", &[]).status, 404);
    for m in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get"] {
        let r = srv.request(m, "/d/f.ts", &["Content-Length: 0"]);
        assert_eq!(r.status, 405, "{m}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"), "{m}");
    }
}

#[test]
fn keep_alive_pipelining_and_close() {
    let a = content(100_000, 4);
    let b = content(3, 5);
    let lib = library(&[("a.ts", &a), ("b.ts", &b)]);
    let srv = Server::start(lib.path(), "");
    let mut s = srv.connect();
    // Three pipelined requests in one write, answered in order.
    s.write_all(
        b"GET /b.ts HTTP/1.1\r\nHost: t\r\n\r\nGET /a.ts HTTP/1.1\r\nHost: t\r\n\r\nGET /missing HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    let r1 = read_response(&mut s, false).unwrap();
    let r2 = read_response(&mut s, false).unwrap();
    let r3 = read_response(&mut s, false).unwrap();
    assert_eq!((r1.status, r1.body == b), (200, true));
    assert_eq!((r2.status, r2.body == a), (200, true));
    assert_eq!(r3.status, 404);
    // The connection is still usable; then Connection: close ends it.
    s.write_all(b"GET /b.ts HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r4 = read_response(&mut s, false).unwrap();
    assert_eq!(r4.header("connection"), Some("close"));
    assert!(
        read_response(&mut s, false).is_none(),
        "server closed after Connection: close"
    );
}

#[test]
fn http10_closes_unless_keep_alive() {
    let lib = library(&[("a.ts", b"hello")]);
    let srv = Server::start(lib.path(), "");
    let out = srv.raw(b"GET /a.ts HTTP/1.0\r\n\r\n");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.ends_with("\r\n\r\nhello"),
        "closed right after the body: {text}"
    );

    let mut s = srv.connect();
    s.write_all(b"GET /a.ts HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.header("connection"), Some("keep-alive"));
    s.write_all(b"GET /a.ts HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, b"hello");
}

#[test]
fn bodies_on_get_are_discarded_or_refused_never_desync() {
    let lib = library(&[("a.ts", b"A"), ("b.ts", b"B")]);
    let srv = Server::start(lib.path(), "");
    // A small body is read and dropped: the pipelined request after it is served.
    let mut s = srv.connect();
    s.write_all(b"GET /a.ts HTTP/1.1\r\nHost: t\r\nContent-Length: 23\r\n\r\nGET /x HTTP/1.1\r\nH: y\r\nGET /b.ts HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, b"A");
    let second = read_response(&mut s, false).unwrap();
    assert_eq!(
        second.body, b"B",
        "the 23 body bytes must not be parsed as a request"
    );

    // A body larger than the limit is refused and the connection closed.
    let out = srv.raw(b"GET /a.ts HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n");
    assert!(
        out.starts_with(b"HTTP/1.1 413 "),
        "{}",
        String::from_utf8_lossy(&out)
    );
    // A chunked body cannot be bounded up front: refused.
    let out = srv.raw(b"GET /a.ts HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    assert!(
        out.starts_with(b"HTTP/1.1 413 "),
        "{}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(
        out.windows(6).filter(|w| w == b"HTTP/1").count(),
        1,
        "one response, then close"
    );
}
