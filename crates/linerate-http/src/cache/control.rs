//! `Cache-Control` (RFC 9111 §5.2) as a shared cache reads it: the response directives
//! (and those of a targeted field such as `CDN-Cache-Control`, RFC 9213), the request
//! directives with `Pragma` (§5.4), and delta-seconds (§1.2.2).
//!
//! Every parser here is total: any byte string gives a value, numbers saturate rather
//! than overflow, nothing panics. Not here: what the directives mean for storing or
//! reusing a response (`policy`, `freshness`).

use std::borrow::Cow;

use crate::syntax::{for_each_member, is_token, split_once};

/// Largest delta-seconds value kept: 2^31. RFC 9111 §1.2.2: a cache receiving a larger
/// value, or overflowing in a later calculation, "MUST consider the value to be
/// 2147483648 (2^31) or the greatest positive integer it can conveniently represent".
pub const DELTA_SECONDS_MAX: u64 = 1 << 31;

/// Response `Cache-Control` directives (RFC 9111 §5.2.2), as a shared cache reads them.
///
/// Unknown directives are ignored (§5.2.3). When a directive appears more than once, the
/// first occurrence wins (§4.2.1 allows "the first occurrence"). A `max-age` or
/// `s-maxage` whose argument is missing or not delta-seconds makes the response stale
/// (`Some(0)`), which §4.2.1 allows and which is the safe reading.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseCacheControl {
    /// `max-age=N` in seconds (§5.2.2.1), saturating at [`DELTA_SECONDS_MAX`].
    pub max_age: Option<u64>,
    /// `s-maxage=N` in seconds (§5.2.2.10); overrides `max-age` and `Expires` for a
    /// shared cache and implies `proxy-revalidate`.
    pub s_maxage: Option<u64>,
    /// `no-store` (§5.2.2.5): must not be stored.
    pub no_store: bool,
    /// `no-cache` (§5.2.2.4), unqualified or qualified: must be validated before every
    /// reuse. The qualified form (`no-cache="set-cookie"`) is read as unqualified; §5.2.2.4
    /// allows a cache that does not strip the named fields to do so, and it is the safe
    /// choice.
    pub no_cache: bool,
    /// `private` (§5.2.2.7), unqualified or qualified (read as unqualified for the same
    /// reason): a shared cache must not store it.
    pub private: bool,
    /// `public` (§5.2.2.9): storable even when it otherwise would not be.
    pub public: bool,
    /// `must-revalidate` (§5.2.2.2): never served stale.
    pub must_revalidate: bool,
    /// `proxy-revalidate` (§5.2.2.8): as `must-revalidate`, for shared caches only.
    pub proxy_revalidate: bool,
    /// `stale-while-revalidate=N` in seconds (RFC 5861 §3). An invalid argument is
    /// ignored (the extension only ever widens reuse, so absent is the safe reading).
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error=N` in seconds (RFC 5861 §4); invalid is ignored, as above.
    pub stale_if_error: Option<u64>,
    /// `immutable` (RFC 8246): the representation will not change while fresh.
    pub immutable: bool,
    /// `no-transform` (§5.2.2.6): intermediaries must not transform the content.
    pub no_transform: bool,
    /// `must-understand` (§5.2.2.3): store only if the cache understands the status
    /// code; a cache that does may then ignore `no-store`.
    pub must_understand: bool,
}

impl ResponseCacheControl {
    /// Parse every `Cache-Control` field line of a response (`values`, one per line).
    ///
    /// Each value is a comma-separated list (RFC 9110 §5.6.1) of `token [ "=" ( token /
    /// quoted-string ) ]` (RFC 9111 §5.2); names are case-insensitive, OWS around members
    /// and around `=` is tolerated, and commas inside a quoted argument do not split.
    /// A quoted numeric argument (`max-age="60"`) is accepted, as §5.2.2.1 advises.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut cc = Self::default();
        let mut seen_swr = false;
        let mut seen_sie = false;
        for value in values {
            for_each_member(value, |member| {
                let (name, arg) = directive(member);
                let is = |d: &str| name.eq_ignore_ascii_case(d.as_bytes());
                if is("max-age") {
                    // §4.2.1: invalid → stale.
                    cc.max_age.get_or_insert_with(|| arg.delta().unwrap_or(0));
                } else if is("s-maxage") {
                    cc.s_maxage.get_or_insert_with(|| arg.delta().unwrap_or(0));
                } else if is("no-store") {
                    cc.no_store = true;
                } else if is("no-cache") {
                    cc.no_cache = true;
                } else if is("private") {
                    cc.private = true;
                } else if is("public") {
                    cc.public = true;
                } else if is("must-revalidate") {
                    cc.must_revalidate = true;
                } else if is("proxy-revalidate") {
                    cc.proxy_revalidate = true;
                } else if is("stale-while-revalidate") {
                    if !seen_swr {
                        seen_swr = true;
                        cc.stale_while_revalidate = arg.delta();
                    }
                } else if is("stale-if-error") {
                    if !seen_sie {
                        seen_sie = true;
                        cc.stale_if_error = arg.delta();
                    }
                } else if is("immutable") {
                    cc.immutable = true;
                } else if is("no-transform") {
                    cc.no_transform = true;
                } else if is("must-understand") {
                    cc.must_understand = true;
                }
            });
        }
        cc
    }
}

impl ResponseCacheControl {
    /// The directives of a targeted field (RFC 9213 §2.1), whose value is a Structured
    /// Field Dictionary (RFC 8941 §3.2): `lines` are its field lines, combined as one
    /// list (RFC 8941 §4.2). `None` when the field is not usable, and the cache then
    /// falls back to `Cache-Control` (§2.2): it does not parse as a Dictionary (`max-age
    /// =100`, `max-age=10, &&&`), it is empty, or a directive this cache acts on has a
    /// value of the wrong type (`max-age="10"`, a negative age, `no-store=1`): a cache
    /// that guessed at such a field could store what the origin meant to forbid.
    ///
    /// Types (§2.1: "delta-seconds are Integers ... field-names are Strings or Tokens"):
    /// `max-age`, `s-maxage`, `stale-while-revalidate`, `stale-if-error` take a
    /// non-negative Integer (saturating at [`DELTA_SECONDS_MAX`]); `no-cache` and
    /// `private` a Boolean, or a String / Inner List of field names (read as
    /// unqualified, as for `Cache-Control`); the others a Boolean (`?0` is the same as
    /// absent). Unknown keys and parameters are ignored (RFC 9111 §5.2.3).
    pub fn from_targeted<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Option<Self> {
        let joined = crate::syntax::combine_lines(lines);
        let dict: sfv::Dictionary = sfv::Parser::new(&joined).parse().ok()?;
        if dict.is_empty() {
            return None;
        }
        let mut cc = ResponseCacheControl::default();
        for (key, member) in &dict {
            let item = match member {
                sfv::ListEntry::Item(item) => Some(&item.bare_item),
                sfv::ListEntry::InnerList(_) => None,
            };
            let delta = || -> Option<u64> {
                let n = i64::from(item?.as_integer()?);
                u64::try_from(n).ok().map(|n| n.min(DELTA_SECONDS_MAX))
            };
            let flag = || -> Option<bool> { item?.as_boolean() };
            // A qualified no-cache/private: a String or a list of names means "true".
            let qualified = || -> Option<bool> {
                match item {
                    None => Some(true),
                    Some(b) => b
                        .as_boolean()
                        .or_else(|| b.as_string().map(|_| true))
                        .or_else(|| b.as_token().map(|_| true)),
                }
            };
            match key.as_str() {
                "max-age" => cc.max_age = Some(delta()?),
                "s-maxage" => cc.s_maxage = Some(delta()?),
                "stale-while-revalidate" => cc.stale_while_revalidate = Some(delta()?),
                "stale-if-error" => cc.stale_if_error = Some(delta()?),
                "no-cache" => cc.no_cache = qualified()?,
                "private" => cc.private = qualified()?,
                "no-store" => cc.no_store = flag()?,
                "public" => cc.public = flag()?,
                "must-revalidate" => cc.must_revalidate = flag()?,
                "proxy-revalidate" => cc.proxy_revalidate = flag()?,
                "immutable" => cc.immutable = flag()?,
                "no-transform" => cc.no_transform = flag()?,
                "must-understand" => cc.must_understand = flag()?,
                _ => {}
            }
        }
        Some(cc)
    }
}

/// Where a response's caching directives come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlSource {
    /// `Cache-Control` (and `Expires`).
    CacheControl,
    /// A targeted field on this cache's target list (RFC 9213 §2.2); `Cache-Control`
    /// and `Expires` are ignored for this cache's own decisions.
    Targeted,
}

impl ControlSource {
    /// Short stable name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlSource::CacheControl => "cache-control",
            ControlSource::Targeted => "targeted",
        }
    }
}

/// The directives that govern a response in this cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Control {
    /// The directives.
    pub directives: ResponseCacheControl,
    /// Where they come from.
    pub source: Option<ControlSource>,
}

impl Control {
    /// RFC 9213 §2.2: "the cache MUST select the first (in target list order) field with
    /// a valid, non-empty value and use its value to determine the caching policy for
    /// the response, and it MUST ignore the Cache-Control and Expires header fields in
    /// that response, unless no valid, non-empty value is available from the listed
    /// header fields." `targets` are the field names of this cache's target list, in
    /// order; `fields` a response's field lines.
    pub fn of(targets: &[Vec<u8>], fields: &[(Vec<u8>, Vec<u8>)]) -> Control {
        let values = |name: &[u8]| {
            let name = name.to_vec();
            fields
                .iter()
                .filter(move |(n, _)| n.eq_ignore_ascii_case(&name))
                .map(|(_, v)| v.as_slice())
        };
        for name in targets {
            let mut lines = values(name).peekable();
            if lines.peek().is_none() {
                continue;
            }
            if let Some(directives) = ResponseCacheControl::from_targeted(lines) {
                return Control {
                    directives,
                    source: Some(ControlSource::Targeted),
                };
            }
        }
        Control {
            directives: ResponseCacheControl::parse(values(b"cache-control")),
            source: Some(ControlSource::CacheControl),
        }
    }

    /// Whether `Expires` counts (not when a targeted field governs, RFC 9213 §2.2).
    pub fn uses_expires(&self) -> bool {
        self.source != Some(ControlSource::Targeted)
    }
}

/// Request `Cache-Control` directives (RFC 9111 §5.2.1).
///
/// Unknown directives are ignored (§5.2.3); the first occurrence of a valued directive
/// decides, and one with a missing or invalid argument counts as absent (a client's
/// malformed request directive neither forces a refetch nor widens reuse).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCacheControl {
    /// `no-cache` (§5.2.1.4), or `Pragma: no-cache` without `Cache-Control` (§5.4): do
    /// not reuse a stored response without validating it.
    pub no_cache: bool,
    /// `no-store` (§5.2.1.5): store neither this request nor its response.
    pub no_store: bool,
    /// `max-age=N` seconds (§5.2.1.1): only a response no older than this.
    pub max_age: Option<u64>,
    /// `max-stale[=N]` (§5.2.1.2): `Some(None)` accepts any staleness, `Some(Some(n))`
    /// at most `n` seconds of it.
    pub max_stale: Option<Option<u64>>,
    /// `min-fresh=N` seconds (§5.2.1.3): only a response fresh for at least this long.
    pub min_fresh: Option<u64>,
    /// `only-if-cached` (§5.2.1.7): answer from the store or 504.
    pub only_if_cached: bool,
}

impl RequestCacheControl {
    /// Parse every `Cache-Control` field line of a request (`values`) and its `Pragma`
    /// field, if any. Syntax as in [`ResponseCacheControl::parse`].
    ///
    /// RFC 9111 §5.4: `Pragma: no-cache` is read as `Cache-Control: no-cache` only when the
    /// request has no `Cache-Control` field at all (an empty line still counts as one).
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>, pragma: Option<&[u8]>) -> Self {
        let mut cc = Self::default();
        let mut any_field = false;
        let (mut seen_max_age, mut seen_max_stale, mut seen_min_fresh) = (false, false, false);
        for value in values {
            any_field = true;
            for_each_member(value, |member| {
                let (name, arg) = directive(member);
                let is = |d: &str| name.eq_ignore_ascii_case(d.as_bytes());
                if is("no-cache") {
                    cc.no_cache = true;
                } else if is("no-store") {
                    cc.no_store = true;
                } else if is("only-if-cached") {
                    cc.only_if_cached = true;
                } else if is("max-age") {
                    if !seen_max_age {
                        seen_max_age = true;
                        cc.max_age = arg.delta();
                    }
                } else if is("min-fresh") {
                    if !seen_min_fresh {
                        seen_min_fresh = true;
                        cc.min_fresh = arg.delta();
                    }
                } else if is("max-stale") && !seen_max_stale {
                    seen_max_stale = true;
                    cc.max_stale = match arg {
                        Arg::Absent => Some(None),
                        _ => arg.delta().map(Some),
                    };
                }
            });
        }
        if !any_field {
            if let Some(pragma) = pragma {
                for_each_member(pragma, |member| {
                    if member.eq_ignore_ascii_case(b"no-cache") {
                        cc.no_cache = true;
                    }
                });
            }
        }
        cc
    }
}

/// Parse delta-seconds (RFC 9111 §1.2.2: `1*DIGIT`): digits only, no sign or whitespace;
/// values above [`DELTA_SECONDS_MAX`] become it (§1.2.2). `None` if empty or not all
/// digits.
pub fn parse_delta_seconds(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |acc, &b| {
        acc.saturating_mul(10)
            .saturating_add(u64::from(b - b'0'))
            .min(DELTA_SECONDS_MAX)
    }))
}

/// A directive's argument.
enum Arg<'a> {
    /// No `=`.
    Absent,
    /// A token, or a quoted-string's unescaped content.
    Value(Cow<'a, [u8]>),
    /// `=` followed by something that is neither.
    Invalid,
}

impl Arg<'_> {
    /// The argument as delta-seconds, if it is one.
    fn delta(&self) -> Option<u64> {
        match self {
            Arg::Value(v) => parse_delta_seconds(v),
            Arg::Absent | Arg::Invalid => None,
        }
    }
}

/// Split a (trimmed) list member into directive name and argument (RFC 9111 §5.2:
/// `token [ "=" ( token / quoted-string ) ]`). The grammar has no whitespace around
/// `=`: in `max-age =60` the name is not the token `max-age` (the member is ignored,
/// §5.2.3), and in `max-age= 60` the argument is invalid.
fn directive(member: &[u8]) -> (&[u8], Arg<'_>) {
    let Some((name, raw)) = split_once(member, b'=') else {
        return (member, Arg::Absent);
    };
    let arg = if raw.first() == Some(&b'"') {
        unquote(raw).map_or(Arg::Invalid, Arg::Value)
    } else if is_token(raw) {
        Arg::Value(Cow::Borrowed(raw))
    } else {
        Arg::Invalid
    };
    (name, arg)
}

/// The content of a value that is exactly one quoted-string (RFC 9110 §5.6.4), with
/// quoted-pairs unescaped; `None` if it is unterminated or has bytes after the close.
fn unquote(raw: &[u8]) -> Option<Cow<'_, [u8]>> {
    let inner = raw.strip_prefix(b"\"")?;
    // Allocated only when a quoted-pair needs unescaping.
    let mut owned: Option<Vec<u8>> = None;
    let mut i = 0;
    while let Some(&b) = inner.get(i) {
        match b {
            b'"' => {
                if i + 1 != inner.len() {
                    return None;
                }
                return Some(match owned {
                    Some(v) => Cow::Owned(v),
                    None => Cow::Borrowed(&inner[..i]),
                });
            }
            b'\\' => {
                let next = *inner.get(i + 1)?;
                owned.get_or_insert_with(|| inner[..i].to_vec()).push(next);
                i += 2;
                continue;
            }
            _ => {
                if let Some(v) = owned.as_mut() {
                    v.push(b);
                }
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rcc(values: &[&str]) -> ResponseCacheControl {
        ResponseCacheControl::parse(values.iter().map(|v| v.as_bytes()))
    }

    fn qcc(values: &[&str], pragma: Option<&str>) -> RequestCacheControl {
        RequestCacheControl::parse(
            values.iter().map(|v| v.as_bytes()),
            pragma.map(str::as_bytes),
        )
    }

    // ---- Response Cache-Control ----

    #[test]
    fn response_cc_basic_directives() {
        let cc = rcc(&["public, max-age=60, s-maxage=120, must-revalidate, proxy-revalidate, immutable, no-transform"]);
        assert_eq!(
            cc,
            ResponseCacheControl {
                max_age: Some(60),
                s_maxage: Some(120),
                public: true,
                must_revalidate: true,
                proxy_revalidate: true,
                immutable: true,
                no_transform: true,
                ..Default::default()
            }
        );
        let cc =
            rcc(&["no-store, no-cache, private, stale-while-revalidate=30, stale-if-error=600"]);
        assert!(cc.no_store && cc.no_cache && cc.private);
        assert_eq!(cc.stale_while_revalidate, Some(30));
        assert_eq!(cc.stale_if_error, Some(600));
        assert_eq!(rcc(&[]), ResponseCacheControl::default());
        assert_eq!(rcc(&[""]), ResponseCacheControl::default());
    }

    #[test]
    fn response_cc_case_insensitive_and_whitespace() {
        let cc = rcc(&["  MAX-AGE=10 ,\tNo-Cache ,, PUBLIC  ", "S-MaxAge=5"]);
        assert_eq!(cc.max_age, Some(10));
        assert_eq!(cc.s_maxage, Some(5));
        assert!(cc.no_cache && cc.public);
        // RFC 9111 §5.2: no whitespace around `=`.
        assert_eq!(
            rcc(&["max-age =60"]).max_age,
            None,
            "not the max-age directive"
        );
        assert_eq!(
            rcc(&["max-age= 60"]).max_age,
            Some(0),
            "an invalid argument: stale"
        );
    }

    #[test]
    fn response_cc_quoted_arguments() {
        let cc = rcc(&[r#"max-age="60", no-cache="set-cookie, x-foo", private="a""#]);
        assert_eq!(cc.max_age, Some(60));
        assert!(cc.no_cache, "qualified no-cache counts as no-cache");
        assert!(cc.private, "qualified private counts as private");
        // The comma inside the quotes did not create an `x-foo"` member that hides later
        // directives.
        let cc = rcc(&[r#"no-cache="a,b", max-age=7"#]);
        assert_eq!(cc.max_age, Some(7));
        // Escapes inside the quoted string.
        assert_eq!(rcc(&[r#"max-age="6\0""#]).max_age, Some(60));
        let cc = rcc(&[r#"no-cache="a\",max-age=1", s-maxage=9"#]);
        assert_eq!(cc.max_age, None);
        assert_eq!(cc.s_maxage, Some(9));
    }

    #[test]
    fn response_cc_multiple_lines_and_first_wins() {
        let cc = rcc(&["max-age=10", "max-age=20, s-maxage=1", "s-maxage=2"]);
        assert_eq!(cc.max_age, Some(10));
        assert_eq!(cc.s_maxage, Some(1));
        let cc = rcc(&["stale-if-error=5, stale-if-error=50, stale-while-revalidate=x, stale-while-revalidate=9"]);
        assert_eq!(cc.stale_if_error, Some(5));
        assert_eq!(
            cc.stale_while_revalidate, None,
            "first (invalid) occurrence decides"
        );
    }

    #[test]
    fn response_cc_invalid_max_age_is_stale() {
        for v in [
            "max-age",
            "max-age=",
            "max-age=-1",
            "max-age=1.5",
            "max-age=abc",
            "max-age=\"60",
            "max-age=\"6\"0",
            "max-age=6 0",
        ] {
            assert_eq!(rcc(&[v]).max_age, Some(0), "{v}");
        }
        assert_eq!(rcc(&["s-maxage=x"]).s_maxage, Some(0));
        // The invalid first occurrence wins over a later valid one.
        assert_eq!(rcc(&["max-age=x, max-age=60"]).max_age, Some(0));
        assert_eq!(rcc(&["stale-if-error"]).stale_if_error, None);
    }

    #[test]
    fn response_cc_saturates() {
        assert_eq!(
            rcc(&["max-age=99999999999999999999999999"]).max_age,
            Some(DELTA_SECONDS_MAX)
        );
        assert_eq!(
            rcc(&["s-maxage=2147483648"]).s_maxage,
            Some(DELTA_SECONDS_MAX)
        );
        assert_eq!(rcc(&["max-age=2147483647"]).max_age, Some(2_147_483_647));
    }

    #[test]
    fn response_cc_unknown_and_lookalikes_ignored() {
        let cc = rcc(&["max-ages=5, no-stores, x-public, community=\"x\""]);
        assert_eq!(cc, ResponseCacheControl::default());
        assert!(rcc(&["must-understand"]).must_understand);
        assert_eq!(rcc(&["\u{0}max-age=5"]).max_age, None);
    }

    // ---- Targeted fields (RFC 9213) ----

    fn targeted(v: &str) -> Option<ResponseCacheControl> {
        ResponseCacheControl::from_targeted([v.as_bytes()])
    }

    #[test]
    fn targeted_directives_and_types() {
        let cc = targeted("max-age=60, s-maxage=30, stale-while-revalidate=5, stale-if-error=9, must-revalidate, public, no-store=?0, foo=\"bar\", immutable;x=1").unwrap();
        assert_eq!(cc.max_age, Some(60));
        assert_eq!(cc.s_maxage, Some(30));
        assert_eq!(cc.stale_while_revalidate, Some(5));
        assert_eq!(cc.stale_if_error, Some(9));
        assert!(cc.must_revalidate && cc.public && cc.immutable && !cc.no_store);
        let cc = targeted("private, no-cache=\"set-cookie\"").unwrap();
        assert!(cc.private && cc.no_cache);
        assert!(targeted("no-cache=(\"a\" \"b\")").unwrap().no_cache);
        assert_eq!(
            targeted("max-age=99999999999").unwrap().max_age,
            Some(DELTA_SECONDS_MAX)
        );
        // Later duplicates win in a Dictionary (RFC 8941 §4.2.2).
        assert_eq!(targeted("max-age=1, max-age=2").unwrap().max_age, Some(2));
        // Several lines are one Dictionary.
        let cc = ResponseCacheControl::from_targeted([&b"max-age=5"[..], b"no-store"]).unwrap();
        assert!(cc.no_store && cc.max_age == Some(5));
    }

    #[test]
    fn invalid_targeted_fields_are_ignored_whole() {
        for bad in [
            "max-age =100",
            "max-age= 100",
            "max-age=10, &&&&&",
            "max-age=\"10000\"",
            "max-age=-1",
            "max-age=1.5",
            "no-store=1",
            "MaX-aGe=3600",
            "",
            "   ",
        ] {
            assert_eq!(targeted(bad), None, "{bad:?}");
        }
        assert_eq!(
            targeted("foobar, max-age=3600").unwrap().max_age,
            Some(3600)
        );
    }

    #[test]
    fn control_picks_the_first_usable_target() {
        let fields: Vec<(Vec<u8>, Vec<u8>)> = [
            ("Cache-Control", "no-store"),
            ("CDN-Cache-Control", "max-age=bad"),
            ("Edge-Cache-Control", "max-age=60"),
        ]
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
        let values = &fields;
        let targets = vec![
            b"cdn-cache-control".to_vec(),
            b"edge-cache-control".to_vec(),
        ];
        let c = Control::of(&targets, values);
        assert_eq!(c.source, Some(ControlSource::Targeted));
        assert_eq!(c.directives.max_age, Some(60));
        assert!(!c.directives.no_store && !c.uses_expires());
        // Nothing usable on the list: Cache-Control governs.
        let c = Control::of(&targets[..1], values);
        assert_eq!(c.source, Some(ControlSource::CacheControl));
        assert!(c.directives.no_store && c.uses_expires());
        // An empty target list: Cache-Control.
        assert!(Control::of(&[], values).directives.no_store);
    }

    // ---- Request Cache-Control ----

    #[test]
    fn request_cc_directives() {
        let cc = qcc(
            &["no-cache, no-store, max-age=5, min-fresh=7, only-if-cached, max-stale=9"],
            None,
        );
        assert_eq!(
            cc,
            RequestCacheControl {
                no_cache: true,
                no_store: true,
                max_age: Some(5),
                max_stale: Some(Some(9)),
                min_fresh: Some(7),
                only_if_cached: true,
            }
        );
        assert_eq!(qcc(&["MAX-STALE"], None).max_stale, Some(None));
        assert_eq!(qcc(&["max-stale=\"30\""], None).max_stale, Some(Some(30)));
        assert_eq!(qcc(&["max-stale=bad"], None).max_stale, None);
        assert_eq!(qcc(&["max-age=bad, max-age=3"], None).max_age, None);
        assert_eq!(
            qcc(&["min-fresh=1", "min-fresh=2"], None).min_fresh,
            Some(1)
        );
        assert_eq!(qcc(&["max-age=1e9"], None).max_age, None);
        assert_eq!(
            qcc(&["max-age=4294967296"], None).max_age,
            Some(DELTA_SECONDS_MAX)
        );
    }

    #[test]
    fn pragma_only_without_cache_control() {
        assert!(qcc(&[], Some("no-cache")).no_cache);
        assert!(qcc(&[], Some(" x-foo, NO-CACHE ")).no_cache);
        assert!(!qcc(&[], Some("no-cache=1")).no_cache);
        assert!(!qcc(&[], Some("x-no-cache")).no_cache);
        assert!(!qcc(&["max-age=5"], Some("no-cache")).no_cache);
        assert!(
            !qcc(&[""], Some("no-cache")).no_cache,
            "an empty Cache-Control is present"
        );
        assert_eq!(qcc(&[], None), RequestCacheControl::default());
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(parse_delta_seconds(b"0"), Some(0));
        assert_eq!(parse_delta_seconds(b"0042"), Some(42));
        assert_eq!(parse_delta_seconds(b"2147483647"), Some(2_147_483_647));
        assert_eq!(parse_delta_seconds(b"2147483648"), Some(DELTA_SECONDS_MAX));
        assert_eq!(parse_delta_seconds(b"2147483649"), Some(DELTA_SECONDS_MAX));
        assert_eq!(parse_delta_seconds(&[b'9'; 1000]), Some(DELTA_SECONDS_MAX));
        for bad in [
            &b""[..],
            b" 1",
            b"1 ",
            b"+1",
            b"-1",
            b"1.0",
            b"0x10",
            b"\xd9\xa1",
        ] {
            assert_eq!(parse_delta_seconds(bad), None, "{bad:?}");
        }
    }

    // ---- Internals ----

    #[test]
    fn list_splitting_respects_quotes() {
        use crate::syntax::for_each_member;
        let mut got = Vec::new();
        for_each_member(br#" a , b="x,y" ,"unterminated, c"#, |m| {
            got.push(m.to_vec())
        });
        assert_eq!(
            got,
            vec![
                b"a".to_vec(),
                br#"b="x,y""#.to_vec(),
                br#""unterminated, c"#.to_vec()
            ]
        );
    }

    #[test]
    fn unquote_forms() {
        assert_eq!(unquote(b"\"\"").as_deref(), Some(&b""[..]));
        assert_eq!(unquote(br#""a\"b""#).as_deref(), Some(&b"a\"b"[..]));
        assert_eq!(unquote(br#""a\\""#).as_deref(), Some(&b"a\\"[..]));
        for bad in [&b"\""[..], b"\"a", b"\"a\"b", br#""a\""#, b"a\""] {
            assert_eq!(unquote(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn parsers_never_panic(v in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = ResponseCacheControl::parse([&v[..], &v[..]]);
            let _ = RequestCacheControl::parse([&v[..]], Some(&v[..]));
            let _ = parse_delta_seconds(&v);
        }

        #[test]
        fn directive_shaped_input_never_panics(v in r#"[a-zA-Z\-=", \\0-9\t]{0,60}"#) {
            let cc = ResponseCacheControl::parse([v.as_bytes()]);
            prop_assert!(cc.max_age.is_none_or(|n| n <= DELTA_SECONDS_MAX));
            prop_assert!(cc.s_maxage.is_none_or(|n| n <= DELTA_SECONDS_MAX));
            let _ = RequestCacheControl::parse([v.as_bytes()], None);
        }

        #[test]
        fn delta_seconds_saturates(n in any::<u128>()) {
            let got = parse_delta_seconds(n.to_string().as_bytes());
            prop_assert_eq!(got, Some(u64::try_from(n.min(u128::from(DELTA_SECONDS_MAX))).unwrap()));
        }

        #[test]
        fn max_age_round_trips(n in 0..=DELTA_SECONDS_MAX, quoted in any::<bool>()) {
            let v = if quoted { format!("max-age=\"{n}\"") } else { format!("MAX-AGE={n}") };
            prop_assert_eq!(ResponseCacheControl::parse([v.as_bytes()]).max_age, Some(n));
        }
    }
}
