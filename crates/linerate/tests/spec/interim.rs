//! Interim (1xx) responses, RFC 9110 §15.2: "A proxy MUST forward 1xx responses unless
//! the proxy itself requested the generation of the 1xx response", and "A server MUST
//! NOT send a 1xx response to an HTTP/1.0 client." The final response is still cached
//! as usual.

use crate::common::{assert_response, parse_raw};
use crate::matrix;
use crate::support::kit::Variant;
use crate::support::origin::{self, Reply, Request};

/// A handler sending the interim `heads` before a 200 with `body` and `cc`, with this
/// cell's `Range` support applied to the final response.
fn with_interim(
    v: Variant,
    heads: Vec<(u16, Vec<(String, String)>)>,
    body: &'static [u8],
    cc: &'static str,
) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    move |req| Reply::Interim {
        heads: heads.clone(),
        reply: Box::new(
            v.ranges
                .apply(origin::ok(body, &[("Cache-Control", cc)]), req),
        ),
    }
}

fn hints() -> Vec<(u16, Vec<(String, String)>)> {
    vec![(
        103,
        origin::owned(&[
            ("Link", "</style.css>; rel=preload; as=style"),
            ("X-Hint", "h"),
        ]),
    )]
}

/// Assert `r` was preceded by exactly the 103 of [`hints`].
#[track_caller]
fn assert_hints(r: &crate::support::Response) {
    assert_eq!(r.interim.len(), 1, "interim responses: {:?}", r.interim);
    let (status, fields) = &r.interim[0];
    assert_eq!(*status, 103);
    let get = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    assert_eq!(get("link"), Some("</style.css>; rel=preload; as=style"));
    assert_eq!(get("x-hint"), Some("h"));
}

matrix! {
    /// RFC 9110 §15.2: the origin's `103 Early Hints` (RFC 8297) is forwarded to an
    /// HTTP/1.1 client before the final response on a miss; the final response is
    /// stored, and the hit needs no origin request.
    fn early_hints_are_forwarded_on_a_miss(v) {
        let origin = v.origin(with_interim(v, hints(), b"final body", "max-age=3600"));
        let cache = v.start(&origin);
        let first = cache.get("/eh", &[]);
        assert_response(&first, 200, b"final body");
        assert_hints(&first);
        let hit = cache.get("/eh", &[]);
        assert_response(&hit, 200, b"final body");
        assert_eq!(origin.count("/eh"), 1);
    }

    /// RFC 9110 §15.2: a `102 Processing` is forwarded too, and several interim
    /// responses arrive in the origin's order (102 then 103).
    fn processing_and_hints_are_forwarded_in_order(v) {
        let heads = vec![(102, Vec::new()), hints()[0].clone()];
        let origin = v.origin(with_interim(v, heads, b"final body", "max-age=3600"));
        let cache = v.start(&origin);
        let r = cache.get("/p", &[]);
        assert_response(&r, 200, b"final body");
        let statuses: Vec<u16> = r.interim.iter().map(|(s, _)| *s).collect();
        assert_eq!(statuses, vec![102, 103]);
        assert_eq!(origin.count("/p"), 1);
    }

    /// RFC 9110 §15.2 on the uncached relay path: every request for a `no-store`
    /// response reaches the origin and every client gets the 103.
    fn early_hints_are_forwarded_when_relaying(v) {
        let origin = v.origin(with_interim(v, hints(), b"uncached body", "no-store"));
        let cache = v.start(&origin);
        for i in 1..=2 {
            let r = cache.get("/u", &[]);
            assert_response(&r, 200, b"uncached body");
            assert_hints(&r);
            assert_eq!(origin.count("/u"), i);
        }
    }

    /// RFC 9110 §15.2: "A server MUST NOT send a 1xx response to an HTTP/1.0 client"
    /// (RFC 9112 §2.3 for the version): an HTTP/1.0 request gets only the final
    /// response, on a cacheable miss and on a relay.
    fn no_interim_responses_to_http10_clients(v) {
        let origin = v.origin(move |req: &Request| {
            let cc = if req.path() == "/relay" { "no-store" } else { "max-age=3600" };
            Reply::Interim {
                heads: vec![(102, Vec::new()), hints()[0].clone()],
                reply: Box::new(v.ranges.apply(origin::ok(b"for 1.0", &[("Cache-Control", cc)]), req)),
            }
        });
        let cache = v.start(&origin);
        for path in ["/cacheable", "/relay"] {
            let raw = cache.raw(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes());
            let text = String::from_utf8_lossy(&raw).into_owned();
            assert!(text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200"), "{text}");
            assert!(!text.contains(" 102 ") && !text.contains(" 103 "), "1xx sent to HTTP/1.0: {text}");
            let (status, _, body, _) = parse_raw(&raw).expect("a response");
            assert_eq!(status, 200);
            assert_eq!(body, b"for 1.0", "{text}");
            assert_eq!(origin.count(path), 1, "{path}: one origin request");
        }
    }
}
