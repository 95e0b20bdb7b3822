//! Cache keys (RFC 9111 §2: "the primary cache key consists of the request method and
//! target URI"; only GET is stored, so the key is the URI): the primary key of a
//! request, the key of one variant of it (§4.1) and of one slice of an object.
//!
//! The key is built only from what identifies the resource: the scheme of the listener
//! the request came in on, the authority the request names (lower-cased, without its
//! port), the path as normalised for forwarding ([`crate::path::normalize_proxy_target`]:
//! every spelling of a resource is one key, the one the origin is sent) and the query as
//! sent, less CMCD telemetry and with Low-Latency HLS directives in one order
//! ([`query`]). Everything else that reaches the origin must
//! either be in the key, in a `Vary`, or be something the origin cannot read (see
//! `forward`): that is what keeps one client's header from poisoning an object for
//! everyone.
//!
//! Layout (what the store indexes, unchanged across versions so a store survives an
//! upgrade): `scheme://host/path[?query]`, then `\0v\0` and the secondary key for a
//! variant, then `\0s\0` and a decimal slice number for a slice. NUL never occurs in a
//! request target or in a normalised field value, so one key is never the prefix of
//! another URL's key followed by these separators.

/// Separates a primary key from a variant's secondary key.
pub const VARIANT_SEP: &[u8] = b"\0v\0";

/// Separates an object's key from a slice number.
pub const SLICE_SEP: &[u8] = b"\0s\0";

/// The scheme of the connection a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTPS.
    Https,
}

impl Scheme {
    /// `http` or `https` (also the `X-Forwarded-Proto` value).
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The host of an authority (`host[:port]`, `[v6][:port]`), lower-cased, without the
/// port: `Host: CDN.example:8080` and `Host: cdn.example` are one resource to a cache
/// that listens on one port per scheme (RFC 9110 §4.2.3: the default port may be
/// omitted, and host names are case-insensitive).
pub fn host_of(authority: &[u8]) -> Vec<u8> {
    strip_port(authority).to_ascii_lowercase()
}

/// `authority` without a `:port` suffix (an IPv6 literal keeps its brackets).
pub fn strip_port(authority: &[u8]) -> &[u8] {
    if authority.first() == Some(&b'[') {
        return match authority.iter().position(|&b| b == b']') {
            Some(i) => &authority[..=i],
            None => authority,
        };
    }
    match authority.iter().rposition(|&b| b == b':') {
        Some(i) => &authority[..i],
        None => authority,
    }
}

/// The primary key of a request: `scheme://host` + `path` + `query` (`query` is the
/// query with its `?`, or empty; the caller leaves it out when its route ignores
/// queries). `host` is as [`host_of`] returns it.
pub fn primary(scheme: Scheme, host: &[u8], path: &[u8], query: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + host.len() + path.len() + query.len());
    key.extend_from_slice(scheme.as_str().as_bytes());
    key.extend_from_slice(b"://");
    key.extend_from_slice(host);
    key.extend_from_slice(path);
    key.extend_from_slice(query);
    key
}

/// The key of one variant of `primary`: its secondary key (`vary::vary_key`) appended.
pub fn variant(primary: &[u8], secondary: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(primary.len() + VARIANT_SEP.len() + secondary.len());
    key.extend_from_slice(primary);
    key.extend_from_slice(VARIANT_SEP);
    key.extend_from_slice(secondary);
    key
}

/// The key of slice `n` of the object stored under `base` (a primary or variant key).
pub fn slice(base: &[u8], n: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(base.len() + SLICE_SEP.len() + 20);
    key.extend_from_slice(base);
    key.extend_from_slice(SLICE_SEP);
    key.extend_from_slice(n.to_string().as_bytes());
    key
}

/// The prefix under which every variant and slice of `primary` is stored (for purges).
pub fn descendants(primary: &[u8]) -> Vec<u8> {
    let mut prefix = primary.to_vec();
    prefix.push(0);
    prefix
}

/// The parts of an absolute URL a key is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlParts<'a> {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// `host[:port]`.
    pub authority: &'a [u8],
    /// The path, `/` when empty (RFC 9112 §3.2.1).
    pub path: &'a [u8],
    /// The query with its `?`, or empty.
    pub query: &'a [u8],
}

/// The parts of an absolute `http[s]://authority[/path][?query]` URL that a key is made
/// of. `None` for anything else.
pub fn split_url(url: &[u8]) -> Option<UrlParts<'_>> {
    let (scheme, rest) = if let Some(r) = url.strip_prefix(b"http://") {
        (Scheme::Http, r)
    } else if let Some(r) = url.strip_prefix(b"https://") {
        (Scheme::Https, r)
    } else {
        return None;
    };
    let split = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(split);
    let (path, query) = match rest.iter().position(|&b| b == b'?') {
        Some(i) => rest.split_at(i),
        None => (rest, &b""[..]),
    };
    let path = if path.is_empty() { &b"/"[..] } else { path };
    Some(UrlParts {
        scheme,
        authority,
        path,
        query,
    })
}

/// The query part of a cache key for a request whose query is `query` (with its `?`,
/// or empty), keeping every other parameter (`keep_others`, a route's
/// `query = "include"`) or none of them (`"ignore"`).
///
/// CMCD sent as a query argument (`CMCD=...`, CTA-5004 §2: client telemetry, different
/// on every request) is never in the key: it names no other resource, and keeping it
/// would make every request a miss.
///
/// Low-Latency HLS delivery directives (`_HLS_msn`, `_HLS_part`, `_HLS_skip`: every
/// parameter whose name starts with `_HLS_`: HLS 2nd edition, "Delivery Directives")
/// stay in the key: a blocking playlist reload for media sequence 7 part 2 is another response than
/// one for sequence 8, even on a route that ignores tokens in the query. They are put in
/// one order (sorted, after the other parameters), since their order carries no
/// meaning: `?_HLS_part=2&_HLS_msn=7` and `?_HLS_msn=7&_HLS_part=2` are one object, so
/// every player blocking on the same part waits on one origin request. The query sent
/// to the origin is never changed.
pub fn query(query: &[u8], keep_others: bool) -> Vec<u8> {
    let body = query.strip_prefix(b"?").unwrap_or(query);
    let is_directive = |p: &&[u8]| p.starts_with(b"_HLS_");
    let is_cmcd = |p: &[u8]| p == b"CMCD" || p.starts_with(b"CMCD=");
    if !body
        .split(|&b| b == b'&')
        .any(|p| is_directive(&p) || is_cmcd(p))
    {
        return if keep_others {
            query.to_vec()
        } else {
            Vec::new()
        };
    }
    let mut directives: Vec<&[u8]> = body.split(|&b| b == b'&').filter(is_directive).collect();
    directives.sort();
    let others = body
        .split(|&b| b == b'&')
        .filter(|p| keep_others && !is_directive(p) && !is_cmcd(p));
    let mut out = Vec::with_capacity(query.len() + 1);
    for (i, p) in others.chain(directives).enumerate() {
        out.push(if i == 0 { b'?' } else { b'&' });
        out.extend_from_slice(p);
    }
    out
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn query_keeps_hls_directives_in_one_order() {
        let k = |q: &str, keep| String::from_utf8(query(q.as_bytes(), keep)).unwrap();
        assert_eq!(k("", true), "");
        assert_eq!(k("?v=2&t=x", true), "?v=2&t=x", "no directive: untouched");
        assert_eq!(k("?v=2&t=x", false), "");
        assert_eq!(
            k("?_HLS_part=2&_HLS_msn=7", true),
            "?_HLS_msn=7&_HLS_part=2"
        );
        assert_eq!(
            k("?_HLS_msn=7&_HLS_part=2", true),
            "?_HLS_msn=7&_HLS_part=2"
        );
        assert_eq!(
            k("?_HLS_part=2&token=abc&_HLS_msn=7", true),
            "?token=abc&_HLS_msn=7&_HLS_part=2"
        );
        assert_eq!(
            k("?token=abc&_HLS_msn=7&_HLS_skip=YES", false),
            "?_HLS_msn=7&_HLS_skip=YES"
        );
        assert_eq!(k("?token=xyz&_HLS_msn=8", false), "?_HLS_msn=8");
        // CMCD telemetry is never in the key; forwarded all the same (not here).
        assert_eq!(k("?CMCD=bl%3D100&v=2", true), "?v=2");
        assert_eq!(
            k("?v=2&CMCD=nor%3D%2522a.ts%2522&_HLS_msn=1", true),
            "?v=2&_HLS_msn=1"
        );
        assert_eq!(k("?CMCD=x", false), "");
        assert_eq!(k("?CMCDX=1", true), "?CMCDX=1");
        // Names are case-sensitive: `_hls_msn` is not a directive.
        assert_eq!(k("?_hls_msn=7", false), "");
    }

    proptest! {
        /// Reordering the parameters of a query changes its key only through the
        /// order of the parameters that are not directives.
        #[test]
        fn query_ignores_directive_order(
            others in proptest::collection::vec("[a-z]{1,3}=[a-z0-9]{0,3}", 0..3),
            msn in 0u32..1000,
            part in proptest::option::of(0u32..10),
            rot in 0usize..4,
        ) {
            let mut ds = vec![format!("_HLS_msn={msn}")];
            if let Some(p) = part { ds.push(format!("_HLS_part={p}")); }
            let mut a: Vec<String> = others.clone();
            a.extend(ds.iter().cloned());
            let mut b: Vec<String> = ds.iter().rev().cloned().collect();
            b.extend(others.iter().cloned());
            let n = b.len();
            b.rotate_left(rot % n);
            // Same non-directive order in both (rotation may move them: compare only
            // when it kept it).
            let others_b: Vec<&String> = b.iter().filter(|p| !p.starts_with("_HLS_")).collect();
            let qa = format!("?{}", a.join("&"));
            let qb = format!("?{}", b.join("&"));
            prop_assert_eq!(query(qa.as_bytes(), false), query(qb.as_bytes(), false));
            if others_b.iter().map(|s| s.as_str()).eq(others.iter().map(|s| s.as_str())) {
                prop_assert_eq!(query(qa.as_bytes(), true), query(qb.as_bytes(), true));
            }
            let kq = query(qa.as_bytes(), true);
            let kq = String::from_utf8(kq).unwrap();
            let want = format!("_HLS_msn={}", msn);
            prop_assert!(kq.contains(&want));
        }

    }

    #[test]
    fn hosts_lose_case_and_port() {
        assert_eq!(host_of(b"CDN.Example:8080"), b"cdn.example");
        assert_eq!(host_of(b"cdn.example"), b"cdn.example");
        assert_eq!(host_of(b"[::1]:80"), b"[::1]");
        assert_eq!(host_of(b"[::1]"), b"[::1]");
        assert_eq!(host_of(b"[::1"), b"[::1");
    }

    #[test]
    fn keys_compose() {
        let p = primary(Scheme::Https, b"h", b"/a/b.ts", b"?x=1");
        assert_eq!(p, b"https://h/a/b.ts?x=1");
        assert_eq!(
            variant(&p, b"accept-encoding:gzip\n"),
            b"https://h/a/b.ts?x=1\0v\0accept-encoding:gzip\n"
        );
        assert_eq!(slice(&p, 12), b"https://h/a/b.ts?x=1\x00s\x0012");
        assert!(variant(&p, b"").starts_with(&descendants(&p)));
        assert!(slice(&p, 0).starts_with(&descendants(&p)));
        // Another URL's key is never under this one's descendants.
        let q = primary(Scheme::Https, b"h", b"/a/b.ts", b"?x=10");
        assert!(!q.starts_with(&descendants(&p)));
    }

    #[test]
    fn urls_split_into_key_parts() {
        let parts =
            |scheme, authority: &'static [u8], path: &'static [u8], query: &'static [u8]| {
                Some(UrlParts {
                    scheme,
                    authority,
                    path,
                    query,
                })
            };
        assert_eq!(
            split_url(b"http://CDN.example:81/p?q"),
            parts(Scheme::Http, b"CDN.example:81", b"/p", b"?q")
        );
        assert_eq!(
            split_url(b"https://h"),
            parts(Scheme::Https, b"h", b"/", b"")
        );
        assert_eq!(
            split_url(b"https://h?q"),
            parts(Scheme::Https, b"h", b"/", b"?q")
        );
        assert_eq!(split_url(b"ftp://h/"), None);
        assert_eq!(split_url(b"/relative"), None);
    }
}
