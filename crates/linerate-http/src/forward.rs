//! What crosses a proxy (RFC 9110 §7.6): hop-by-hop fields, which never do; the fields a
//! cache sends to the origin in a client's name; the end-to-end fields of a response it
//! stores or relays; and interim (1xx) responses it passes on.
//!
//! Forwarding is where cache poisoning starts: a field that reaches the origin but is
//! not part of the cache key (and not named in `Vary`) lets one client change what
//! everyone is served. So a client's `Host` never reaches the origin (the origin gets its
//! own), and the fields origins read as facts about the request (`Forwarded`,
//! `X-Forwarded-Host` and the like, see [`NEVER_FORWARDED`]) are dropped and replaced by
//! values derived from what is in the key.

use std::borrow::Cow;
use std::net::IpAddr;

use crate::cache::key::Scheme;
use crate::request::RequestHead;
use crate::syntax::{for_each_member, is_token};

/// Fields that are hop-by-hop whether or not `Connection` lists them (RFC 9110 §7.6.1,
/// plus `proxy-connection`, a non-standard alias still sent by some clients, and
/// `proxy-authenticate`/`proxy-authorization`, which §11.7.1/§11.7.2 scope to one hop).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authenticate",
    "proxy-authorization",
];

/// Whether a field must not be forwarded by a proxy (RFC 9110 §7.6.1: "Intermediaries
/// MUST ... remove or replace any received connection options"): one of the fixed
/// hop-by-hop names, or a name listed in the message's `Connection` fields
/// (`connection_tokens`, from [`connection_tokens`]). Case-insensitive.
pub fn is_hop_by_hop(name: &[u8], connection_tokens: &[Vec<u8>]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
        || connection_tokens
            .iter()
            .any(|t| name.eq_ignore_ascii_case(t))
}

/// Request fields a client may send that origins commonly read as facts about the
/// request (its host, scheme, port, path or method) although they are not in the cache
/// key: the unkeyed inputs of web cache poisoning. Never forwarded from a client; the
/// cache sends its own `X-Forwarded-For`, `X-Forwarded-Proto` and `X-Forwarded-Host`.
/// (`Forwarded`, RFC 7239, carries `host=` and `proto=` parameters as well as `for=`;
/// `X-Forwarded-Ssl`, `Front-End-Https` and `X-Url-Scheme` are how Rack and IIS-era
/// stacks learn the scheme; `X-Real-IP`, `True-Client-IP` and `Client-IP` name a client
/// address an origin may trust.) A field name with `_` is never forwarded either:
/// CGI-style servers read `X_Forwarded_Host` as `X-Forwarded-Host` (both become
/// `HTTP_X_FORWARDED_HOST`); nginx drops such names by default too.
pub const NEVER_FORWARDED: [&str; 20] = [
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-port",
    "x-forwarded-scheme",
    "x-forwarded-server",
    "x-forwarded-prefix",
    "x-host",
    "x-original-url",
    "x-rewrite-url",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-forwarded-ssl",
    "front-end-https",
    "x-url-scheme",
    "x-real-ip",
    "true-client-ip",
    "client-ip",
];

/// Request fields a fill never forwards because the cache decides them itself: the
/// range it fetches (a slice, or the whole object), the validators it revalidates with,
/// and the cache directives (a fill serves every client, not the one that happened to
/// start it).
const DECIDED_BY_THE_CACHE: [&str; 8] = [
    "range",
    "if-range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "cache-control",
    "pragma",
];

/// Request fields that belong to the client's connection or message framing: the origin
/// gets its own `Host` (RFC 9110 §7.2: a proxy MUST send the target's authority or the
/// origin's) and its own framing of the body.
const FRAMING: [&str; 3] = ["host", "content-length", "expect"];

/// One forwarded field: name and value, borrowed from the request or made here.
pub type Field<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// Why a request goes to the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A fill: the response may be stored and shared, so the cache's own fields replace
    /// the client's ranges, preconditions and cache directives.
    Fill,
    /// An uncached relay of this client's own request: those go as sent.
    Relay,
}

/// The client side of a request, as forwarding needs it.
#[derive(Debug, Clone, Copy)]
pub struct Client<'a> {
    /// The client's address; `None` when the socket could not say.
    pub peer: Option<IpAddr>,
    /// The scheme of the listener the request came in on.
    pub scheme: Scheme,
    /// The request's host as keyed (`cache::key::host_of`).
    pub host: &'a [u8],
    /// This cache's `Via` entry (`1.1 name`).
    pub via: &'a [u8],
}

/// The fields of a request as forwarded to the origin, in order: the client's end-to-end
/// fields minus [`NEVER_FORWARDED`], the framing fields and (for a fill) the fields the
/// cache decides itself; then `Via` (the client's entries with ours appended, RFC 9110
/// §7.6.3: a proxy MUST send one), `X-Forwarded-For` (the client's list with its address
/// appended, as nginx's `$proxy_add_x_forwarded_for`), `X-Forwarded-Proto` and
/// `X-Forwarded-Host` (from the key, so they can never disagree with it).
pub fn request_fields<'a>(
    head: &RequestHead<'a>,
    purpose: Purpose,
    client: &Client<'_>,
) -> Vec<Field<'a>> {
    let tokens = connection_tokens(head.values(b"connection"));
    let named =
        |list: &[&str], name: &[u8]| list.iter().any(|n| name.eq_ignore_ascii_case(n.as_bytes()));
    let mut out: Vec<Field<'a>> = Vec::with_capacity(head.fields().count() + 4);
    let mut via: Vec<u8> = Vec::new();
    let mut xff: Vec<u8> = Vec::new();
    for (name, value) in head.fields() {
        // Named in `Connection`: meant for us only, so not even the client's entries of
        // the lists we extend go on (RFC 9110 §7.6.1).
        let hop = is_hop_by_hop(name, &tokens);
        if name.eq_ignore_ascii_case(b"via") {
            if !hop {
                join(&mut via, value);
            }
            continue;
        }
        if name.eq_ignore_ascii_case(b"x-forwarded-for") {
            if !hop {
                join(&mut xff, value);
            }
            continue;
        }
        let dropped = hop
            || name.contains(&b'_')
            || named(&NEVER_FORWARDED, name)
            || named(&FRAMING, name)
            || (purpose == Purpose::Fill && named(&DECIDED_BY_THE_CACHE, name));
        if !dropped {
            out.push((Cow::Borrowed(name), Cow::Borrowed(value)));
        }
    }
    join(&mut via, client.via);
    out.push((Cow::Borrowed(b"Via"), Cow::Owned(via)));
    if let Some(peer) = client.peer {
        join(&mut xff, peer.to_string().as_bytes());
    }
    if !xff.is_empty() {
        out.push((Cow::Borrowed(b"X-Forwarded-For"), Cow::Owned(xff)));
    }
    out.push((
        Cow::Borrowed(b"X-Forwarded-Proto"),
        Cow::Borrowed(client.scheme.as_str().as_bytes()),
    ));
    out.push((
        Cow::Borrowed(b"X-Forwarded-Host"),
        Cow::Owned(client.host.to_vec()),
    ));
    out
}

/// Every value of field `name` in a list of fields as forwarded (from
/// [`request_fields`]), in order. Case-insensitive.
///
/// Whatever the cache keys on a request's fields (the `Vary` secondary key, RFC 9111
/// §4.1) or decides from them (whether the request carried `Authorization`, §3.5) reads
/// them here, from the request as the origin received it, never from the request as the
/// client sent it: a field the client named in `Connection`, a name with `_` or one of
/// [`NEVER_FORWARDED`] never reached the origin, so it cannot have selected the response,
/// and keying on it would store the origin's answer to "no such field" under the
/// variant of a value it never saw (cache poisoning: `Origin` named in `Connection`
/// stores a response without `Access-Control-Allow-Origin` as the variant every real
/// `Origin` then selects).
pub fn values_of<'f, N, V>(fields: &'f [(N, V)], name: &[u8]) -> Vec<&'f [u8]>
where
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    fields
        .iter()
        .filter(|(n, _)| n.as_ref().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_ref())
        .collect()
}

/// Append `value` to a comma-separated list.
fn join(list: &mut Vec<u8>, value: &[u8]) {
    if value.is_empty() {
        return;
    }
    if !list.is_empty() {
        list.extend_from_slice(b", ");
    }
    list.extend_from_slice(value);
}

/// The end-to-end fields of a response (RFC 9110 §7.6.1: hop-by-hop ones and those its
/// `Connection` lists removed), in order: what a cache may store and replay.
pub fn end_to_end(fields: &[(Vec<u8>, Vec<u8>)]) -> impl Iterator<Item = &(Vec<u8>, Vec<u8>)> {
    let tokens = connection_tokens(
        fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .map(|(_, v)| v.as_slice()),
    );
    fields
        .iter()
        .filter(move |(n, _)| !is_hop_by_hop(n, &tokens))
}

/// An interim (1xx) response as a proxy passes it on (RFC 9110 §15.2: "A proxy MUST
/// forward 1xx responses unless the proxy itself requested the generation of the 1xx
/// response"): the status line and its end-to-end fields, ending with the blank line.
/// The caller sends it only to HTTP/1.1 clients (§15.2: a server MUST NOT send a 1xx
/// response to an HTTP/1.0 client).
pub fn interim_head(status: u16, fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let reason = match status {
        100 => "Continue",
        102 => "Processing",
        103 => "Early Hints",
        _ => "Informational",
    };
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n").into_bytes();
    for (name, value) in end_to_end(fields) {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend(value.iter().map(|&b| {
            if matches!(b, b'\r' | b'\n' | 0) {
                b' '
            } else {
                b
            }
        }));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The connection options of every `Connection` field line (RFC 9110 §7.6.1), lower-cased
/// and deduplicated, in first-seen order. Members that are not tokens are skipped.
pub fn connection_tokens<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Vec<Vec<u8>> {
    let mut tokens: Vec<Vec<u8>> = Vec::new();
    for value in values {
        for_each_member(value, |member| {
            if is_token(member) && !tokens.iter().any(|t| member.eq_ignore_ascii_case(t)) {
                tokens.push(member.to_ascii_lowercase());
            }
        });
    }
    tokens
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use crate::request::{parse_request, FieldBuf};
    use crate::ParseOutcome;

    fn forwarded(
        raw: &'static [u8],
        purpose: Purpose,
        peer: Option<IpAddr>,
    ) -> Vec<(String, String)> {
        let fields = Box::leak(Box::new(FieldBuf::new()));
        let Ok(ParseOutcome::Complete { head, .. }) = parse_request(raw, fields) else {
            panic!("test request must parse");
        };
        let client = Client {
            peer,
            scheme: Scheme::Https,
            host: b"cdn.example",
            via: b"1.1 edge",
        };
        request_fields(&head, purpose, &client)
            .into_iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(&n).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn poisoning_fields_never_reach_the_origin() {
        let got = forwarded(
            b"GET /a HTTP/1.1\r\nHost: CDN.example:8443\r\nX-Forwarded-Host: evil.example\r\n\
              Forwarded: host=evil;proto=http\r\nX-Forwarded-Proto: http\r\nX-Original-URL: /admin\r\n\
              X-HTTP-Method-Override: DELETE\r\nX-Forwarded-For: 10.0.0.1\r\nx-forwarded-for: 10.0.0.2\r\n\
              Accept: */*\r\nVia: 1.0 browser-proxy\r\nX-Forwarded-Ssl: on\r\nFront-End-Https: on\r\n\
              X-Url-Scheme: https\r\nX_Forwarded_Host: evil.example\r\nX-Real-IP: 10.9.9.9\r\n\
              True-Client-IP: 10.9.9.9\r\nClient-IP: 10.9.9.9\r\n\r\n",
            Purpose::Fill,
            Some("192.0.2.7".parse().unwrap()),
        );
        let own = |(n, v): (&str, &str)| (n.to_owned(), v.to_owned());
        assert_eq!(
            got,
            vec![
                own(("Accept", "*/*")),
                own(("Via", "1.0 browser-proxy, 1.1 edge")),
                own(("X-Forwarded-For", "10.0.0.1, 10.0.0.2, 192.0.2.7")),
                own(("X-Forwarded-Proto", "https")),
                own(("X-Forwarded-Host", "cdn.example")),
            ]
        );
    }

    #[test]
    fn fills_decide_ranges_and_validators_relays_pass_them() {
        let raw = b"GET /a HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\nIf-None-Match: \"x\"\r\n\
                    Cache-Control: no-cache\r\nConnection: close, x-secret\r\nX-Secret: 1\r\nTE: trailers\r\n\
                    Authorization: Bearer t\r\n\r\n";
        let names = |v: Vec<(String, String)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(
            names(forwarded(raw, Purpose::Fill, None)),
            vec![
                "Authorization",
                "Via",
                "X-Forwarded-Proto",
                "X-Forwarded-Host"
            ]
        );
        assert_eq!(
            names(forwarded(raw, Purpose::Relay, None)),
            vec![
                "Range",
                "If-None-Match",
                "Cache-Control",
                "Authorization",
                "Via",
                "X-Forwarded-Proto",
                "X-Forwarded-Host"
            ]
        );
    }

    #[test]
    fn values_of_reads_the_request_as_forwarded() {
        let raw: &'static [u8] = b"GET /a HTTP/1.1\r\nHost: h\r\nConnection: Origin, X-Custom\r\n\
              Origin: https://player.example\r\nX-Custom: 1\r\nAccept-Encoding: gzip\r\n\
              X_Variant: b\r\nX-Forwarded-Host: evil.example\r\nKeep-Alive: 5\r\n\
              accept-encoding: br\r\nAuthorization: Bearer t\r\n\r\n";
        let fields = Box::leak(Box::new(FieldBuf::new()));
        let Ok(ParseOutcome::Complete { head, .. }) = parse_request(raw, fields) else {
            panic!("test request must parse");
        };
        let client = Client {
            peer: None,
            scheme: Scheme::Https,
            host: b"cdn.example",
            via: b"1.1 edge",
        };
        let sent = request_fields(&head, Purpose::Fill, &client);
        // What the client sent but the origin never saw selects nothing.
        for gone in [
            &b"origin"[..],
            b"x-custom",
            b"x_variant",
            b"keep-alive",
            b"connection",
        ] {
            assert!(values_of(&sent, gone).is_empty(), "{gone:?}");
            assert!(
                head.values(gone).next().is_some(),
                "the client sent {gone:?}"
            );
        }
        // Ours replaces the client's.
        assert_eq!(
            values_of(&sent, b"X-FORWARDED-HOST"),
            vec![&b"cdn.example"[..]]
        );
        // Forwarded fields, every line, in order.
        assert_eq!(
            values_of(&sent, b"Accept-Encoding"),
            vec![&b"gzip"[..], &b"br"[..]]
        );
        assert_eq!(values_of(&sent, b"authorization"), vec![&b"Bearer t"[..]]);
    }

    #[test]
    fn lists_named_in_connection_are_not_extended() {
        let got = forwarded(
            b"GET /a HTTP/1.1\r\nHost: h\r\nConnection: X-Forwarded-For, Via\r\n\
              X-Forwarded-For: 1.1.1.1\r\nVia: 1.0 p\r\n\r\n",
            Purpose::Fill,
            Some("192.0.2.7".parse().unwrap()),
        );
        let value = |n: &str| got.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(value("X-Forwarded-For"), Some("192.0.2.7"));
        assert_eq!(value("Via"), Some("1.1 edge"));
    }

    #[test]
    fn end_to_end_and_interim_heads() {
        let fields: Vec<(Vec<u8>, Vec<u8>)> = [
            ("Link", "</s.css>; rel=preload"),
            ("Connection", "x-hop"),
            ("X-Hop", "1"),
            ("Keep-Alive", "timeout=5"),
        ]
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
        let kept: Vec<_> = end_to_end(&fields).map(|(n, _)| n.clone()).collect();
        assert_eq!(kept, vec![b"Link".to_vec()]);
        assert_eq!(
            interim_head(103, &fields),
            b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
        );
        assert_eq!(
            interim_head(199, &[]),
            b"HTTP/1.1 199 Informational\r\n\r\n"
        );
    }

    // ---- Hop-by-hop ----

    #[test]
    fn hop_by_hop_fields() {
        for h in HOP_BY_HOP {
            assert!(is_hop_by_hop(h.as_bytes(), &[]), "{h}");
            assert!(is_hop_by_hop(h.to_ascii_uppercase().as_bytes(), &[]), "{h}");
        }
        for h in [
            "content-length",
            "cache-control",
            "authorization",
            "x-connection",
            "tes",
        ] {
            assert!(!is_hop_by_hop(h.as_bytes(), &[]), "{h}");
        }
        let tokens = connection_tokens([&b"Keep-Alive, X-Trace"[..], b"close", b"x-trace , ,"]);
        assert_eq!(
            tokens,
            vec![
                b"keep-alive".to_vec(),
                b"x-trace".to_vec(),
                b"close".to_vec()
            ]
        );
        assert!(is_hop_by_hop(b"X-TRACE", &tokens));
        assert!(!is_hop_by_hop(b"x-other", &tokens));
    }

    #[test]
    fn connection_tokens_skip_junk() {
        assert!(connection_tokens([&b""[..]]).is_empty());
        assert_eq!(
            connection_tokens([&b"a b, \"q\", c"[..]]),
            vec![b"c".to_vec()]
        );
    }
}
