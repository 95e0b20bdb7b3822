//! Status codes as a cache sees them (RFC 9110 §15: which are understood, which are
//! cacheable by default) and the `Cache-Status` response field (RFC 9211) that says
//! what the cache did with a request.

use crate::syntax::is_token;

/// Largest magnitude an RFC 8941 sf-integer may have (§3.3.1: at most 15 digits);
/// [`CacheStatus::to_header`] clamps `ttl` to it.
const SF_INTEGER_MAX: i64 = 999_999_999_999_999;

/// Whether a status code is heuristically cacheable ("cacheable by default", RFC 9110
/// §15.1): 200 203 204 206 300 301 308 404 405 410 414 501.
pub fn default_cacheable_status(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Whether this cache understands a final status code well enough to store a response
/// with it (RFC 9111 §3): the codes RFC 9110 §15 defines (except the unused 306 and
/// 418), plus 428, 429, 431 and 511 (RFC 6585) and 451 (RFC 7725). 1xx is not final and
/// is never understood here.
pub fn understood_status(status: u16) -> bool {
    matches!(
        status,
        200..=206
            | 300..=305
            | 307
            | 308
            | 400..=417
            | 421
            | 422
            | 426
            | 428
            | 429
            | 431
            | 451
            | 500..=505
            | 511
    )
}

/// Why a request went forward (RFC 9211 §2.2, the `fwd` parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// No stored response for the URI.
    UriMiss,
    /// Stored responses for the URI, none matching the request's `Vary` fields.
    VaryMiss,
    /// A miss without the detail above.
    Miss,
    /// The request's own directives (e.g. `no-cache`) required forwarding.
    Request,
    /// A stored response was stale and had to be validated.
    Stale,
    /// Only part of the response was stored (a slice miss).
    Partial,
    /// The cache was configured not to handle this request.
    Bypass,
}

impl Fwd {
    /// The RFC 9211 token, also used as the log and metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Fwd::UriMiss => "uri-miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Miss => "miss",
            Fwd::Request => "request",
            Fwd::Stale => "stale",
            Fwd::Partial => "partial",
            Fwd::Bypass => "bypass",
        }
    }
}

/// One `Cache-Status` list member (RFC 9211 §2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStatus<'a> {
    /// The cache's name: sent as an sf-token when it is one, else as an sf-string.
    pub name: &'a str,
    /// `hit` (§2.1): answered from the store without going forward. Takes precedence
    /// over `fwd`: the two describe exclusive outcomes.
    pub hit: bool,
    /// `fwd=` (§2.2): why the request went forward.
    pub fwd: Option<Fwd>,
    /// `fwd-status=` (§2.3): the status the next hop returned.
    pub fwd_status: Option<u16>,
    /// `ttl=` (§2.4): remaining freshness in seconds, negative when stale; clamped to the
    /// sf-integer range.
    pub ttl: Option<i64>,
    /// `stored` (§2.5): the response was stored.
    pub stored: bool,
    /// `collapsed` (§2.6): the request was collapsed with another forward request.
    pub collapsed: bool,
    /// `detail=` (§2.8), sent as an sf-string: `"` and `\` are escaped and bytes outside
    /// printable ASCII dropped.
    pub detail: Option<&'a str>,
}

impl CacheStatus<'_> {
    /// The member as it goes in the field: `name; hit` or `name; fwd=…`, then
    /// `; fwd-status=N`, `; ttl=N`, `; stored`, `; collapsed`, `; detail="…"`, each only
    /// when set, in that order. Several caches' members are joined with `, ` by the
    /// caller (§2: the field is a list, the closest cache's member last).
    pub fn to_header(&self) -> String {
        let mut out = String::with_capacity(64);
        if is_sf_token(self.name) {
            out.push_str(self.name);
        } else {
            push_sf_string(&mut out, self.name);
        }
        if self.hit {
            out.push_str("; hit");
        } else if let Some(fwd) = self.fwd {
            out.push_str("; fwd=");
            out.push_str(fwd.as_str());
        }
        if let Some(status) = self.fwd_status {
            out.push_str("; fwd-status=");
            out.push_str(&status.to_string());
        }
        if let Some(ttl) = self.ttl {
            out.push_str("; ttl=");
            out.push_str(&ttl.clamp(-SF_INTEGER_MAX, SF_INTEGER_MAX).to_string());
        }
        if self.stored {
            out.push_str("; stored");
        }
        if self.collapsed {
            out.push_str("; collapsed");
        }
        if let Some(detail) = self.detail {
            out.push_str("; detail=");
            push_sf_string(&mut out, detail);
        }
        out
    }
}

/// sf-token (RFC 8941 §3.3.4): `( ALPHA / "*" ) *( tchar / ":" / "/" )`.
fn is_sf_token(s: &str) -> bool {
    let b = s.as_bytes();
    match b.first() {
        Some(c) if c.is_ascii_alphabetic() || *c == b'*' => b[1..]
            .iter()
            .all(|&c| c == b':' || c == b'/' || is_token(&[c])),
        _ => false,
    }
}

/// Append `s` as an sf-string (RFC 8941 §4.1.6): quoted, `"` and `\` escaped, bytes
/// outside printable ASCII (0x20-0x7E) dropped, since the format cannot carry them.
fn push_sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {}
        }
    }
    out.push('"');
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use proptest::prelude::*;

    // ---- Status and storability ----

    #[test]
    fn default_cacheable_statuses() {
        let yes = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];
        for s in 0..=1000u16 {
            assert_eq!(default_cacheable_status(s), yes.contains(&s), "{s}");
        }
    }

    #[test]
    fn understood_statuses() {
        for s in [
            200, 204, 206, 302, 304, 307, 308, 404, 421, 429, 451, 500, 503, 511,
        ] {
            assert!(understood_status(s), "{s}");
        }
        for s in [
            0, 100, 101, 103, 199, 207, 299, 306, 418, 430, 506, 599, 600, 999,
        ] {
            assert!(!understood_status(s), "{s}");
        }
    }

    // ---- Cache-Status ----

    #[test]
    fn cache_status_hit() {
        let cs = CacheStatus {
            name: "linerate",
            hit: true,
            ttl: Some(30),
            ..Default::default()
        };
        assert_eq!(cs.to_header(), "linerate; hit; ttl=30");
    }

    #[test]
    fn cache_status_full_forward() {
        let cs = CacheStatus {
            name: "linerate",
            hit: false,
            fwd: Some(Fwd::UriMiss),
            fwd_status: Some(200),
            ttl: Some(-5),
            stored: true,
            collapsed: true,
            detail: Some("slice 3/\"7\" \\ é\n"),
        };
        assert_eq!(
            cs.to_header(),
            r#"linerate; fwd=uri-miss; fwd-status=200; ttl=-5; stored; collapsed; detail="slice 3/\"7\" \\ ""#
        );
    }

    #[test]
    fn cache_status_edge_cases() {
        let hit_and_fwd = CacheStatus {
            name: "c",
            hit: true,
            fwd: Some(Fwd::Stale),
            ..Default::default()
        };
        assert_eq!(hit_and_fwd.to_header(), "c; hit");
        let bare = CacheStatus {
            name: "edge-1:a/b",
            ..Default::default()
        };
        assert_eq!(bare.to_header(), "edge-1:a/b");
        let quoted = CacheStatus {
            name: "1 bad\"name",
            ..Default::default()
        };
        assert_eq!(quoted.to_header(), r#""1 bad\"name""#);
        assert_eq!(CacheStatus::default().to_header(), "\"\"");
        let huge = CacheStatus {
            name: "c",
            ttl: Some(i64::MIN),
            ..Default::default()
        };
        assert_eq!(huge.to_header(), "c; ttl=-999999999999999");
    }

    #[test]
    fn fwd_labels() {
        let all = [
            (Fwd::UriMiss, "uri-miss"),
            (Fwd::VaryMiss, "vary-miss"),
            (Fwd::Miss, "miss"),
            (Fwd::Request, "request"),
            (Fwd::Stale, "stale"),
            (Fwd::Partial, "partial"),
            (Fwd::Bypass, "bypass"),
        ];
        for (f, s) in all {
            assert_eq!(f.as_str(), s);
        }
    }

    proptest! {
        #[test]
        fn cache_status_detail_is_printable(detail in any::<String>(), ttl in any::<i64>()) {
            let h = CacheStatus { name: "linerate", fwd: Some(Fwd::Miss), ttl: Some(ttl), detail: Some(&detail), ..Default::default() };
            let s = h.to_header();
            prop_assert!(s.bytes().all(|b| (0x20..=0x7e).contains(&b)));
            prop_assert!(s.starts_with("linerate; fwd=miss; ttl="));
        }
    }
}
