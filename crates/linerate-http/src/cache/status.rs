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

/// What a cache did with one request, as its metrics and logs label it (Pingora's
/// `CachePhase` is the model): one value per request, set where the request is
/// answered, that [`CacheStatus`] carries into the `Cache-Status` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachePhase {
    /// No cache involved (appliance mode serves its own library), or an error the
    /// server answered without going forward.
    #[default]
    Local,
    /// Fresh object from the cache.
    Hit,
    /// Fetched from the origin.
    Miss,
    /// Stale object served (while revalidating or because the origin failed).
    Stale,
    /// Not cacheable; passed through from the origin.
    Pass,
}

impl CachePhase {
    /// All phases, in label order.
    pub const ALL: [CachePhase; 5] = [
        CachePhase::Local,
        CachePhase::Hit,
        CachePhase::Miss,
        CachePhase::Stale,
        CachePhase::Pass,
    ];

    /// Metric and log label.
    pub fn as_str(self) -> &'static str {
        match self {
            CachePhase::Local => "local",
            CachePhase::Hit => "hit",
            CachePhase::Miss => "miss",
            CachePhase::Stale => "stale",
            CachePhase::Pass => "pass",
        }
    }
}

/// One cache request's status: its [`CachePhase`] and the facts gathered while it was
/// answered, which make its `Cache-Status` list member (RFC 9211 §2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStatus {
    /// What the cache did: the metric and log label; with no `fwd`, `Hit` and `Stale`
    /// are `hit` (§2.1) in the field.
    pub phase: CachePhase,
    /// `fwd=` (§2.2): why the request went forward.
    pub fwd: Option<Fwd>,
    /// `fwd-status=` (§2.3): the status the next hop returned.
    pub fwd_status: Option<u16>,
    /// `stored` (§2.5): the response was stored.
    pub stored: bool,
    /// `collapsed` (§2.6): the request was collapsed with another forward request.
    pub collapsed: bool,
    /// `detail=` (§2.8), sent as an sf-string: `"` and `\` are escaped and bytes outside
    /// printable ASCII dropped.
    pub detail: Option<&'static str>,
}

impl CacheStatus {
    /// Record why the request goes forward, unless it already went for another reason.
    pub fn forward(&mut self, why: Fwd) {
        self.fwd.get_or_insert(why);
    }

    /// Record what the next hop answered a failed fill, when it did answer (a 5xx to a
    /// revalidation, §2.3).
    pub fn fill_failed(&mut self, fwd_status: Option<u16>) {
        if let Some(status) = fwd_status {
            self.fwd_status = Some(status);
        }
    }

    /// `hit` (§2.1): answered from the store without going forward. It excludes `fwd`:
    /// the two describe exclusive outcomes.
    pub fn is_hit(&self) -> bool {
        matches!(self.phase, CachePhase::Hit | CachePhase::Stale) && self.fwd.is_none()
    }

    /// The member as it goes in the field for cache `name`: `name; hit` or
    /// `name; fwd=…`, then `; fwd-status=N`, `; ttl=N` (remaining freshness in seconds,
    /// negative when stale, clamped to the sf-integer range), `; stored`,
    /// `; collapsed`, `; detail="…"`, each only when set, in that order. `name` is
    /// sent as an sf-token when it is one, else as an sf-string. Several caches'
    /// members are joined with `, ` by the caller (§2: the field is a list, the
    /// closest cache's member last).
    pub fn to_header(&self, name: &str, ttl: Option<i64>) -> String {
        let mut out = String::with_capacity(64);
        if is_sf_token(name) {
            out.push_str(name);
        } else {
            push_sf_string(&mut out, name);
        }
        if self.is_hit() {
            out.push_str("; hit");
        } else if let Some(fwd) = self.fwd {
            out.push_str("; fwd=");
            out.push_str(fwd.as_str());
        }
        if let Some(status) = self.fwd_status {
            out.push_str("; fwd-status=");
            out.push_str(&status.to_string());
        }
        if let Some(ttl) = ttl {
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
            phase: CachePhase::Hit,
            ..Default::default()
        };
        assert_eq!(cs.to_header("linerate", Some(30)), "linerate; hit; ttl=30");
    }

    #[test]
    fn cache_status_full_forward() {
        let cs = CacheStatus {
            phase: CachePhase::Miss,
            fwd: Some(Fwd::UriMiss),
            fwd_status: Some(200),
            stored: true,
            collapsed: true,
            detail: Some("slice 3/\"7\" \\ é\n"),
        };
        assert_eq!(
            cs.to_header("linerate", Some(-5)),
            r#"linerate; fwd=uri-miss; fwd-status=200; ttl=-5; stored; collapsed; detail="slice 3/\"7\" \\ ""#
        );
    }

    #[test]
    fn cache_status_edge_cases() {
        // A stale copy served without going forward is a hit; one served after going
        // forward (stale-if-error) names why it went.
        let stale = CacheStatus {
            phase: CachePhase::Stale,
            ..Default::default()
        };
        assert_eq!(stale.to_header("c", None), "c; hit");
        let hit_and_fwd = CacheStatus {
            phase: CachePhase::Stale,
            fwd: Some(Fwd::Stale),
            ..Default::default()
        };
        assert_eq!(hit_and_fwd.to_header("c", None), "c; fwd=stale");
        let local = CacheStatus::default();
        assert_eq!(local.to_header("edge-1:a/b", None), "edge-1:a/b");
        assert_eq!(local.to_header("1 bad\"name", None), r#""1 bad\"name""#);
        assert_eq!(local.to_header("", None), "\"\"");
        assert_eq!(
            local.to_header("c", Some(i64::MIN)),
            "c; ttl=-999999999999999"
        );
    }

    #[test]
    fn phase_labels() {
        let labels: Vec<&str> = CachePhase::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(labels, ["local", "hit", "miss", "stale", "pass"]);
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
            // `detail` is static where the server sets it (a reason's name): leaked here,
            // a few hundred short strings per run.
            let detail: &'static str = Box::leak(detail.into_boxed_str());
            let h = CacheStatus { phase: CachePhase::Miss, fwd: Some(Fwd::Miss), detail: Some(detail), ..Default::default() };
            let s = h.to_header("linerate", Some(ttl));
            prop_assert!(s.bytes().all(|b| (0x20..=0x7e).contains(&b)));
            prop_assert!(s.starts_with("linerate; fwd=miss; ttl="));
        }
    }
}
