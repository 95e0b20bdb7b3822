//! End to end, raw bytes: every malformed or smuggling-shaped request gets its defined
//! status and the connection is closed (framing can no longer be trusted), and the
//! server keeps serving others.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use support::{library, Server};

/// Send `req` followed by a valid pipelined request; expect `status`, then close — the
/// pipelined request must never be answered.
fn expect_rejected(srv: &Server, req: &[u8], status: u16) {
    let mut bytes = req.to_vec();
    bytes.extend_from_slice(b"GET /ok.ts HTTP/1.1\r\nHost: t\r\n\r\n");
    let out = srv.raw(&bytes);
    let text = String::from_utf8_lossy(&out);
    let want = format!("HTTP/1.1 {status} ");
    assert!(
        text.starts_with(&want),
        "{:?}: wanted {status}, got {text:?}",
        String::from_utf8_lossy(req)
    );
    assert!(
        text.contains("Connection: close"),
        "{:?}: {text}",
        String::from_utf8_lossy(req)
    );
    assert_eq!(
        text.matches("HTTP/1.1 ").count(),
        1,
        "{:?}: closed after the error: {text}",
        String::from_utf8_lossy(req)
    );
}

#[test]
fn smuggling_shapes_are_rejected_with_400() {
    let lib = library(&[("ok.ts", b"ok")]);
    let srv = Server::start(lib.path(), "");
    let cases: &[&[u8]] = &[
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nContent-Length: 3, 4\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nContent-Length: +3\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nContent-Length: 0x3\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n",
        // obs-fold
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n",
        // bare CR in a field value and in the request line
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\rHost: t\r\n\r\n",
        // whitespace between field name and colon
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nContent-Length : 3\r\n\r\n",
        // invalid bytes in tokens
        b"G(T /ok.ts HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nX@A: b\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n",
        // request-line shape
        b"GET  /ok.ts HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET /ok.ts\r\nHost: t\r\n\r\n",
        b"GET /o k.ts HTTP/1.1\r\nHost: t\r\n\r\n",
        // Host: HTTP/1.1 needs exactly one
        b"GET /ok.ts HTTP/1.1\r\n\r\n",
        b"GET /ok.ts HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        // two Range fields
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nRange: bytes=0-0\r\nRange: bytes=1-1\r\n\r\n",
        // targets that cannot map to a path
        b"GET * HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET ok.ts HTTP/1.1\r\nHost: t\r\n\r\n",
    ];
    for req in cases {
        expect_rejected(&srv, req, 400);
    }
    // The server is unharmed.
    assert_eq!(srv.get("/ok.ts", &[]).body, b"ok");
}

#[test]
fn oversized_heads_get_414_and_431() {
    let lib = library(&[("ok.ts", b"ok")]);
    let srv = Server::start(lib.path(), "");
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(9000));
    expect_rejected(&srv, long_target.as_bytes(), 414);
    // A request line that never ends.
    let out = srv.raw(format!("GET /{}", "a".repeat(20_000)).as_bytes());
    assert!(
        out.starts_with(b"HTTP/1.1 414 "),
        "{}",
        String::from_utf8_lossy(&out[..out.len().min(200)])
    );

    let mut many = String::from("GET /ok.ts HTTP/1.1\r\nHost: t\r\n");
    for i in 0..150 {
        many.push_str(&format!("X-{i}: v\r\n"));
    }
    many.push_str("\r\n");
    expect_rejected(&srv, many.as_bytes(), 431);

    let big = format!(
        "GET /ok.ts HTTP/1.1\r\nHost: t\r\nCookie: {}\r\n\r\n",
        "c".repeat(40_000)
    );
    expect_rejected(&srv, big.as_bytes(), 431);
    // A head that never ends also gets 431, not an unbounded buffer.
    let mut endless = String::from("GET /ok.ts HTTP/1.1\r\nHost: t\r\n");
    while endless.len() < 40_000 {
        endless.push_str("X-Pad: 0123456789012345678901234567890123456789\r\n");
    }
    let out = srv.raw(endless.as_bytes());
    assert!(
        out.starts_with(b"HTTP/1.1 431 "),
        "{}",
        String::from_utf8_lossy(&out[..out.len().min(200)])
    );
}

/// RFC 9110 §2.5: `HTTP/1.2` is processed as HTTP/1.1 in appliance mode too (it got a
/// 505): served, kept alive, and a request pipelined after it is answered.
#[test]
fn a_higher_http1_minor_is_served_as_http11() {
    let lib = library(&[("ok.ts", b"ok")]);
    let srv = Server::start(lib.path(), "");
    let out = srv.raw(
        b"GET /ok.ts HTTP/1.2\r\nHost: t\r\n\r\nGET /ok.ts HTTP/1.9\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert_eq!(text.matches("HTTP/1.1 200 ").count(), 2, "{text}");
    assert!(text.ends_with("\r\n\r\nok"), "{text}");
    // Still HTTP/1.1's rules: Host is required.
    expect_rejected(&srv, b"GET /ok.ts HTTP/1.2\r\n\r\n", 400);
}

#[test]
fn unsupported_versions_get_505_or_400() {
    let lib = library(&[("ok.ts", b"ok")]);
    let srv = Server::start(lib.path(), "");
    let out = srv.raw(b"GET /ok.ts HTTP/2.0\r\nHost: t\r\n\r\n");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 505 "), "{text}");
    let out = srv.raw(b"GET /ok.ts FOO/1.1\r\nHost: t\r\n\r\n");
    assert!(
        out.starts_with(b"HTTP/1.1 400 "),
        "{}",
        String::from_utf8_lossy(&out)
    );
    // Binary garbage (e.g. a TLS ClientHello on the plain port).
    let out = srv.raw(&[
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, b'\r', b'\n', b'\r',
        b'\n',
    ]);
    assert!(
        out.starts_with(b"HTTP/1.1 400 "),
        "{}",
        String::from_utf8_lossy(&out)
    );
}
