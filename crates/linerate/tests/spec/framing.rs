//! Origins that lie about message framing (RFC 9112 §6.1, §6.3; RFC 9110 §8.6): the
//! client never gets a wrongly framed or silently truncated response, nothing badly
//! framed is stored, and (linerate's documented choice) a single origin server is
//! never marked down because it misbehaved.

use crate::common::{assert_response, parse_raw, slices, Phase, BIG};
use crate::matrix;
use crate::support::content;
use crate::support::kit::{Slicing, Variant, SLICE};
use crate::support::origin::{self, RangeSupport, Reply};

/// GET `path` with `Connection: close` and everything the cache sends until it closes.
fn get_raw(cache: &crate::support::Server, path: &str) -> Vec<u8> {
    cache.raw(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes())
}

matrix! {
    /// RFC 9112 §6.3: a valid `Content-Length` "defines the expected message body
    /// length in octets"; what follows is not part of the response. The client gets
    /// exactly those 5 octets as a complete response; linerate (documented) does not
    /// store a response from an origin that sent more than it announced, so the next
    /// request reaches the origin again.
    fn body_longer_than_content_length(v) {
        let origin = v.origin(|_| {
            Reply::Raw(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=3600\r\nContent-Length: 5\r\n\r\nhelloTRAILING GARBAGE".to_vec())
        });
        let cache = v.start(&origin);
        for i in 1..=2 {
            let raw = get_raw(&cache, "/long");
            let (status, headers, body, _) = parse_raw(&raw).expect("a response");
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&raw));
            let cl = headers.iter().find(|(n, _)| n == "content-length").map(|(_, v)| v.as_str());
            let te = headers.iter().any(|(n, _)| n == "transfer-encoding");
            if te {
                // Chunked: parse_raw decoded it; it must be complete and exactly "hello".
                assert!(parse_raw(&raw).unwrap().3, "chunked body cut short");
                assert_eq!(body, b"hello");
            } else {
                assert_eq!(cl, Some("5"), "{headers:?}");
                assert_eq!(body, b"hello", "exactly Content-Length bytes, nothing after them");
            }
            assert_eq!(origin.count("/long"), i, "one origin request each (never stored, relayed as fetched)");
        }
    }

    /// RFC 9112 §6.3: "If the sender closes the connection ... before the indicated
    /// number of octets are received, the recipient MUST consider the message to be
    /// incomplete and close the connection"; RFC 9111 §3.3: an incomplete response is
    /// not used as a complete one. The client's connection ends short (never a complete-
    /// looking response) and the next request gets the whole body from the origin.
    fn body_shorter_than_content_length_small(v) {
        short_body(v, 1000, 100);
    }

    /// The same for a body of several slices, cut in its second slice.
    fn body_shorter_than_content_length_large(v) {
        short_body(v, BIG, 100_000);
    }

    /// RFC 9112 §6.1: a transfer coding the cache does not decode (`gzip` before
    /// `chunked`) is relayed to an HTTP/1.1 client with its codings listed, the chunked
    /// framing intact; linerate (documented) does not store it.
    fn unknown_transfer_coding_is_relayed_not_stored(v) {
        let origin = v.origin(|_| {
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nCache-Control: max-age=3600\r\nTransfer-Encoding: gzip, chunked\r\n\r\n8\r\nGZIPDATA\r\n0\r\n\r\n"
                    .to_vec(),
            )
        });
        let cache = v.start(&origin);
        for i in 1..=2 {
            let raw = get_raw(&cache, "/te");
            let (status, headers, body, complete) = parse_raw(&raw).expect("a response");
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&raw));
            let te: String = headers
                .iter()
                .filter(|(n, _)| n == "transfer-encoding")
                .map(|(_, v)| v.to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join(", ");
            assert!(te.contains("gzip"), "the gzip coding was dropped: {headers:?}");
            assert!(!headers.iter().any(|(n, _)| n == "content-length"), "{headers:?}");
            assert!(complete, "{}", String::from_utf8_lossy(&raw));
            assert_eq!(body, b"GZIPDATA");
            assert_eq!(origin.count("/te"), i, "one origin request each (never stored, relayed as fetched)");
        }
    }

    /// RFC 9112 §6.3: "If a Transfer-Encoding header field is present in a response and
    /// the chunked transfer coding is not the final encoding, the message body length
    /// is determined by reading the connection until it is closed by the server." Such
    /// a `Transfer-Encoding: gzip` response is relayed whole with its coding, not stored.
    fn close_delimited_transfer_coding_is_relayed_not_stored(v) {
        let origin = v.origin(|_| {
            Reply::Raw(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=3600\r\nTransfer-Encoding: gzip\r\n\r\nGZIP-TO-CLOSE".to_vec())
        });
        let cache = v.start(&origin);
        for i in 1..=2 {
            let raw = get_raw(&cache, "/gz");
            let (status, headers, body, complete) = parse_raw(&raw).expect("a response");
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&raw));
            let te: String = headers
                .iter()
                .filter(|(n, _)| n == "transfer-encoding")
                .map(|(_, v)| v.to_ascii_lowercase())
                .collect();
            assert!(te.starts_with("gzip"), "{headers:?}");
            assert!(complete);
            assert_eq!(body, b"GZIP-TO-CLOSE");
            assert_eq!(origin.count("/gz"), i, "one origin request each (never stored, relayed as fetched)");
        }
    }

    /// RFC 9112 §6.3: "If a message is received without Transfer-Encoding and with an
    /// invalid Content-Length header field ... If it is a response message received by
    /// a proxy, the proxy MUST close the connection to the server, discard the received
    /// response, and send a 502 (Bad Gateway) response to the client." Differing values
    /// (RFC 9110 §8.6) and a non-number are invalid. Nothing is stored.
    fn invalid_content_length_is_502(v) {
        let origin = v.origin(|req| {
            let cl = if req.path() == "/differ" { "5, 6" } else { "five" };
            Reply::Raw(format!("HTTP/1.1 200 OK\r\nCache-Control: max-age=3600\r\nContent-Length: {cl}\r\n\r\nhello!").into_bytes())
        });
        let cache = v.start(&origin);
        for p in ["/differ", "/word"] {
            let raw = get_raw(&cache, p);
            let (status, _, body, _) = parse_raw(&raw).expect("a response");
            assert_eq!(status, 502, "{p}: {}", String::from_utf8_lossy(&raw));
            assert_ne!(body, b"hello!");
            assert_eq!(origin.count(p), 1, "{p}: one origin request (a new connection: no retry)");
            let raw = get_raw(&cache, p);
            assert_eq!(parse_raw(&raw).expect("a response").0, 502);
            assert_eq!(origin.count(p), 2, "{p}: nothing stored, asked again");
        }
    }

    /// RFC 9112 §6.1: a message with both `Transfer-Encoding` and `Content-Length`
    /// "might indicate an attempt to perform request smuggling (Section 11.2) or response
    /// splitting (Section 11.1) and ought to be handled as an error". linerate does: a
    /// 502, nothing stored or passed on, so the next request asks the origin again.
    fn transfer_encoding_with_content_length_is_an_error(v) {
        let origin = v.origin(|_| {
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nCache-Control: max-age=3600\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nb\r\nhello world\r\n0\r\n\r\n"
                    .to_vec(),
            )
        });
        let cache = v.start(&origin);
        for i in 1..=2 {
            let raw = get_raw(&cache, "/both");
            let (status, _, body, _) = parse_raw(&raw).expect("a response");
            assert_eq!(status, 502, "{}", String::from_utf8_lossy(&raw));
            assert!(!body.windows(5).any(|w| w == b"hello"), "none of the origin's body");
            assert_eq!(origin.count("/both"), i, "one origin request each, nothing stored");
        }
    }

    /// linerate's documented choice (its `down_after` applies only where another server
    /// could take over): with a single origin server, an origin that closes connections
    /// without answering several times in a row is not marked down — as soon as it
    /// answers again, so does the cache.
    fn single_origin_is_never_marked_down(v) {
        let phase = Phase::new();
        let p = phase.clone();
        let origin = v.origin(move |_| {
            if p.get() == 1 {
                Reply::Close
            } else {
                origin::ok(b"back", &[("Cache-Control", "no-store")])
            }
        });
        let cache = v.start(&origin);
        for _ in 0..5 {
            let raw = get_raw(&cache, "/flaky");
            let status = parse_raw(&raw).map(|r| r.0);
            assert!(status.is_none_or(|s| s >= 500), "{status:?}");
        }
        let failed = origin.count("/flaky");
        assert!(failed >= 5, "every failed request was tried: {failed}");
        phase.set(2);
        let r = cache.get("/flaky", &[]);
        assert_response(&r, 200, b"back");
        assert_eq!(origin.count("/flaky"), failed + 1);
    }
}

/// The short-body scenario with a body of `len` bytes of which the origin sends `sent`.
fn short_body(v: Variant, len: usize, sent: usize) {
    let body = content(len, 77);
    let phase = Phase::new();
    let (p, b) = (phase.clone(), body.clone());
    let origin = v.origin(move |req| {
        let honest = origin::ok(&b, &[("Cache-Control", "max-age=3600")]);
        if p.get() != 1 {
            return honest;
        }
        // An origin that honours Range cuts the one part (slice) that holds byte
        // `sent`; the parts before it arrive whole.
        match (v.ranges, req.range()) {
            (RangeSupport::Honoured, Some((first, last))) => {
                let first = first as usize;
                let last = last.map_or(len - 1, |l| (l as usize).min(len - 1));
                if !(first..=last).contains(&sent) {
                    return v.ranges.apply(honest, req);
                }
                let mut raw = format!(
                    "HTTP/1.1 206 Partial Content\r\nCache-Control: max-age=3600\r\nContent-Range: bytes {first}-{last}/{len}\r\nContent-Length: {}\r\n\r\n",
                    last - first + 1
                )
                .into_bytes();
                raw.extend_from_slice(&b[first..sent]);
                Reply::Raw(raw)
            }
            _ => Reply::Short {
                headers: origin::owned(&[("Cache-Control", "max-age=3600")]),
                body: b.clone(),
                send: sent,
            },
        }
    });
    let cache = v.start(&origin);
    let raw = get_raw(&cache, "/short");
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n");
    if let Some(end) = end {
        let (status, headers, got, complete) = parse_raw(&raw).unwrap();
        let cl = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok());
        let looks_complete = match cl {
            Some(cl) => raw.len() - (end + 4) >= cl,
            None => complete && headers.iter().any(|(n, _)| n == "transfer-encoding"),
        };
        assert!(
            status >= 500 || !looks_complete,
            "a truncated body was passed off as complete ({} of {len} bytes, status {status})",
            got.len()
        );
    }
    // The parts before the cut were fetched whole (and, slices, stored); the cut part
    // ended the response.
    let cut_part = (sent as u64 / SLICE) as usize;
    let (first, refetched) = match (v.slicing, v.ranges) {
        (Slicing::On, RangeSupport::Honoured) => (cut_part + 1, slices(len) - cut_part),
        _ => (1, 1),
    };
    assert_eq!(origin.count("/short"), first, "requests up to the cut");
    phase.set(2);
    let r = cache.get("/short", &[]);
    assert_response(&r, 200, &body);
    assert_eq!(
        origin.count("/short"),
        first + refetched,
        "the truncated part was not stored: fetched again, with every part after it"
    );
}
