//! HTTP caching decisions for a shared cache (RFC 9111) and the `Cache-Status` response
//! field (RFC 9211), as pure functions: `Cache-Control` and `Vary` parsing, whether a
//! response may be stored, its freshness lifetime and current age, the secondary cache
//! key of a variant, hop-by-hop fields, `Content-Range` of a stored slice and validator
//! comparison between slices.
//!
//! Every parser here is total: any byte string gives a value, numbers saturate rather
//! than overflow, nothing panics. Times are integers the caller passes in (Unix seconds,
//! or milliseconds where the name says so); header values are the raw `&[u8]` of each
//! field line. Not here: the store, the clock, request collapsing, the forward request
//! and its revalidation, or freshening stored headers from a 304 (RFC 9111 §4.3.4); the
//! cache layer does those with the values computed here.

use std::borrow::Cow;

use crate::syntax::{is_token, parse_u64, trim_ows};

/// Largest delta-seconds value kept: 2^31. RFC 9111 §1.2.2: a cache receiving a larger
/// value, or overflowing in a later calculation, "MUST consider the value to be
/// 2147483648 (2^31) or the greatest positive integer it can conveniently represent".
pub const DELTA_SECONDS_MAX: u64 = 1 << 31;

/// Most distinct field names in one `Vary`; a response naming more is treated as
/// `Vary: *` (not stored). Real origins vary on one to three fields
/// (`Accept-Encoding`, `Origin`, occasionally `Accept`); the bound keeps the secondary
/// key of every variant short and its computation cheap whatever an origin sends.
pub const MAX_VARY_NAMES: usize = 32;

/// Largest magnitude an RFC 8941 sf-integer may have (§3.3.1: at most 15 digits);
/// [`CacheStatus::to_header`] clamps `ttl` to it.
const SF_INTEGER_MAX: i64 = 999_999_999_999_999;

/// Response `Cache-Control` directives (RFC 9111 §5.2.2), as a shared cache reads them.
///
/// Unknown directives are ignored (§5.2.3). When a directive appears more than once, the
/// first occurrence wins (§4.2.1 allows "the first occurrence"). A `max-age` or
/// `s-maxage` whose argument is missing or not delta-seconds makes the response stale
/// (`Some(0)`), which §4.2.1 allows and which is the safe reading. Not parsed:
/// `must-understand` (§5.2.2.3): without it `no-store` always wins, which is what a cache
/// that ignores it must do.
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
                }
            });
        }
        cc
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

/// Why a response cannot be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStorable {
    /// The request method is not cacheable (only GET and HEAD are cached here).
    Method,
    /// The status is not final, not understood, a 304, or not cacheable by default while
    /// the response carries no explicit freshness.
    Status,
    /// `no-store` in the request or the response.
    NoStore,
    /// `private` in the response (a shared cache must not store it).
    Private,
    /// The request carried `Authorization` and the response does not allow sharing it.
    Authorization,
    /// `Vary: *` (never matches a later request, RFC 9111 §4.1).
    VaryStar,
    /// A 206 that is otherwise storable: the caller stores the slice itself.
    PartialContent,
}

impl NotStorable {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStorable::Method => "method",
            NotStorable::Status => "status",
            NotStorable::NoStore => "no_store",
            NotStorable::Private => "private",
            NotStorable::Authorization => "authorization",
            NotStorable::VaryStar => "vary_star",
            NotStorable::PartialContent => "partial",
        }
    }
}

/// Whether a shared cache may store a response (RFC 9111 §3), checked in this order:
///
/// 1. the request method is cacheable (`request_method_cacheable`: GET or HEAD), else
///    [`NotStorable::Method`];
/// 2. the status is final and understood ([`understood_status`]) and not 304 (a 304
///    freshens a stored response, §4.3.4; it is never stored as one), else `Status`;
/// 3. no `no-store` in the request or response (§3, §5.2.1.5, §5.2.2.5), else `NoStore`;
/// 4. no `private` (§5.2.2.7: a shared cache MUST NOT store it), else `Private`;
/// 5. a request with `Authorization` only if the response has `must-revalidate`,
///    `public` or `s-maxage` (§3.5), else `Authorization`;
/// 6. not `Vary: *`, else `VaryStar`;
/// 7. explicit freshness (`max-age`, `s-maxage`, `Expires` present, or `public`) or a
///    status cacheable by default ([`default_cacheable_status`]), else `Status`. A
///    response with neither freshness information nor a validator but a default-cacheable
///    status is storable: the caller applies its default TTL.
/// 8. a 206 that passed everything above gives `PartialContent`: the caller stores the
///    slice itself (§3.3), so the rest of the policy has already been applied to it.
pub fn storable(
    request_method_cacheable: bool,
    status: u16,
    cc: &ResponseCacheControl,
    has_expires: bool,
    request_no_store: bool,
    request_authorization: bool,
    vary: &Vary,
) -> Result<(), NotStorable> {
    if !request_method_cacheable {
        return Err(NotStorable::Method);
    }
    if !understood_status(status) || status == 304 {
        return Err(NotStorable::Status);
    }
    if request_no_store || cc.no_store {
        return Err(NotStorable::NoStore);
    }
    if cc.private {
        return Err(NotStorable::Private);
    }
    if request_authorization && !(cc.must_revalidate || cc.public || cc.s_maxage.is_some()) {
        return Err(NotStorable::Authorization);
    }
    if *vary == Vary::Star {
        return Err(NotStorable::VaryStar);
    }
    let explicit = cc.max_age.is_some() || cc.s_maxage.is_some() || has_expires || cc.public;
    if !explicit && !default_cacheable_status(status) {
        return Err(NotStorable::Status);
    }
    if status == 206 {
        return Err(NotStorable::PartialContent);
    }
    Ok(())
}

/// Heuristic freshness parameters (RFC 9111 §4.2.2): a fraction of the time since
/// `Last-Modified`, capped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Heuristic {
    /// Fraction of (Date − Last-Modified) used as the lifetime. Default 0.1, the value
    /// §4.2.2 suggests. Negative or NaN acts as 0.
    pub fraction: f64,
    /// Cap on the heuristic lifetime, in seconds. Default 86 400 (one day, the point
    /// past which §4.2.2 says the heuristic is no longer a safe guess without a warning).
    pub max_secs: u64,
}

impl Default for Heuristic {
    fn default() -> Self {
        Heuristic {
            fraction: 0.1,
            max_secs: 86_400,
        }
    }
}

impl Heuristic {
    /// Heuristic lifetime for a response last modified `since_modified_secs` before its
    /// Date: `min(fraction × since_modified_secs, max_secs)`, saturating.
    pub fn lifetime(&self, since_modified_secs: u64) -> u64 {
        // f64 precision loss on huge inputs only shortens a guess that the cap bounds.
        let secs = since_modified_secs as f64 * self.fraction;
        if secs.is_nan() || secs <= 0.0 {
            return 0;
        }
        // `as` saturates float → integer (Rust 1.45+).
        (secs as u64).min(self.max_secs)
    }
}

/// Freshness lifetime in seconds (RFC 9111 §4.2.1) for a shared cache, first match wins:
///
/// 1. `s-maxage`; 2. `max-age` (§5.3: `Expires` is then ignored);
/// 3. `Expires` − `Date` (Date absent: `Expires` − `response_time`), saturating at 0; an
///    `Expires` that does not parse means already expired, 0 (§5.3: "a cache recipient
///    MUST interpret invalid date formats, especially the value "0", as representing a
///    time in the past");
/// 4. with `last_modified`, when the status is cacheable by default or the response is
///    `public` (§4.2.2), `heuristic` applied to (`date` or `response_time`) −
///    `last_modified`;
/// 5. `default_ttl_secs`.
///
/// `expires` is the raw header value; every time is Unix seconds.
#[allow(clippy::too_many_arguments)] // The signature other modules code against; each input is one RFC 9111 §4.2.1 term.
pub fn freshness_lifetime(
    cc: &ResponseCacheControl,
    expires: Option<&[u8]>,
    date: Option<u64>,
    last_modified: Option<u64>,
    response_time: u64,
    status: u16,
    heuristic: Heuristic,
    default_ttl_secs: u64,
) -> u64 {
    if let Some(s) = cc.s_maxage {
        return s;
    }
    if let Some(m) = cc.max_age {
        return m;
    }
    let base = date.unwrap_or(response_time);
    if let Some(raw) = expires {
        return crate::date::parse(raw).map_or(0, |exp| exp.saturating_sub(base));
    }
    if let Some(lm) = last_modified {
        if default_cacheable_status(status) || cc.public {
            return heuristic.lifetime(base.saturating_sub(lm));
        }
    }
    default_ttl_secs
}

/// Current age in whole seconds, rounded down (RFC 9111 §4.2.3):
///
/// ```text
/// apparent_age          = max(0, response_time - date_value)
/// response_delay        = response_time - request_time
/// corrected_age_value   = age_value + response_delay
/// corrected_initial_age = max(apparent_age, corrected_age_value)
/// current_age           = corrected_initial_age + (now - response_time)
/// ```
///
/// `date` and `age_value` are seconds (the `Date` and `Age` headers; absent counts as no
/// apparent age and 0); the three times are Unix milliseconds. Every step saturates and
/// a clock that went backwards counts as 0, so the result is never negative.
pub fn current_age(
    date: Option<u64>,
    age_value: Option<u64>,
    request_time_ms: u64,
    response_time_ms: u64,
    now_ms: u64,
) -> u64 {
    let apparent_ms = date.map_or(0, |d| {
        response_time_ms.saturating_sub(d.saturating_mul(1000))
    });
    let response_delay_ms = response_time_ms.saturating_sub(request_time_ms);
    let corrected_age_value_ms = age_value
        .unwrap_or(0)
        .saturating_mul(1000)
        .saturating_add(response_delay_ms);
    let corrected_initial_ms = apparent_ms.max(corrected_age_value_ms);
    let resident_ms = now_ms.saturating_sub(response_time_ms);
    corrected_initial_ms.saturating_add(resident_ms) / 1000
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

/// A response's `Vary` (RFC 9110 §12.5.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vary {
    /// No `Vary`, or only empty members: one variant per URI.
    None,
    /// `Vary: *` (or a value this cache will not key on): never matches (RFC 9111 §4.1).
    Star,
    /// Field names, lower-cased, sorted and deduplicated; never empty.
    Names(Vec<Vec<u8>>),
}

impl Vary {
    /// Parse every `Vary` field line of a response.
    ///
    /// Members are split on commas and OWS-trimmed; empty members are ignored (RFC 9110
    /// §5.6.1). A `*` member gives [`Vary::Star`], and so does a member that is not a
    /// field name (a token, §5.1) or more than [`MAX_VARY_NAMES`] distinct names: a
    /// response whose variants this cache cannot key reliably is not shared.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Vary {
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut star = false;
        for value in values {
            for_each_member(value, |member| {
                if member == b"*" || !is_token(member) {
                    star = true;
                } else if !star {
                    names.push(member.to_ascii_lowercase());
                }
            });
            if star {
                return Vary::Star;
            }
        }
        names.sort_unstable();
        names.dedup();
        if names.len() > MAX_VARY_NAMES {
            Vary::Star
        } else if names.is_empty() {
            Vary::None
        } else {
            Vary::Names(names)
        }
    }

    /// The value stored with a variant: names joined by `,`, `*` for [`Vary::Star`],
    /// empty for [`Vary::None`]. [`Vary::parse`] of it gives the same `Vary` back.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Vary::None => Vec::new(),
            Vary::Star => b"*".to_vec(),
            Vary::Names(names) => names.join(&b","[..]),
        }
    }
}

/// The secondary cache key of a variant (RFC 9111 §4.1): for each name of `names` (in
/// their sorted order), `name` `:` value `\n`, or `name` `\n` when the request lacks
/// that field.
///
/// The value is every field line `get(name)` returns, joined by `,`, split into list
/// members with OWS trimmed around each and empty members dropped (the normalisation
/// §4.1 permits, RFC 9110 §5.6.1), rejoined by `,`. CR, LF and NUL, which no valid field
/// value contains (RFC 9110 §5.5), are dropped so a value cannot forge another name's
/// line of the key.
pub fn vary_key<'a>(names: &[Vec<u8>], get: impl Fn(&[u8]) -> Vec<&'a [u8]>) -> Vec<u8> {
    let mut key = Vec::new();
    for name in names {
        key.extend_from_slice(name);
        let values = get(name);
        if !values.is_empty() {
            key.push(b':');
            let mut first = true;
            for member in values.iter().flat_map(|v| v.split(|&b| b == b',')) {
                let member = trim_ows(member);
                if member.is_empty() {
                    continue;
                }
                if !first {
                    key.push(b',');
                }
                first = false;
                key.extend(member.iter().filter(|&&b| !matches!(b, b'\r' | b'\n' | 0)));
            }
        }
        key.push(b'\n');
    }
    key
}

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

/// A satisfied response `Content-Range` (RFC 9110 §14.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentRange {
    /// First byte offset.
    pub first: u64,
    /// Last byte offset, inclusive; `first <= last`.
    pub last: u64,
    /// Complete length, if known (`/*` gives `None`); `last < complete`.
    pub complete: Option<u64>,
}

/// Parse a response `Content-Range`: `bytes first-last/complete` or `bytes first-last/*`
/// (RFC 9110 §14.4; the unit is case-insensitive, §14.1; OWS around the whole value is
/// tolerated). `None` for anything else: another unit, `bytes */N` (unsatisfied), last
/// before first, last at or past the complete length (§14.4: such a value is invalid),
/// or a number too large for a u64.
pub fn parse_content_range(v: &[u8]) -> Option<ContentRange> {
    let (unit, rest) = split_once(trim_ows(v), b' ')?;
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    let (range, complete) = split_once(rest, b'/')?;
    let (first, last) = split_once(range, b'-')?;
    let first = parse_u64(first)?;
    let last = parse_u64(last)?;
    let complete = if complete == b"*" {
        None
    } else {
        Some(parse_u64(complete)?)
    };
    if last < first || complete.is_some_and(|c| last >= c) {
        return None;
    }
    Some(ContentRange {
        first,
        last,
        complete,
    })
}

/// Whether two responses (e.g. two stored slices) are the same version of an object,
/// so their bytes may be combined (RFC 9111 §3.4 requires validators equal under the
/// strong comparison, RFC 9110 §8.8.3.2).
///
/// If either side has an entity tag, both must have the same strong one, byte for byte
/// (a weak `W/` tag or a malformed one never matches, and Last-Modified is not consulted:
/// the origin says the tag is what identifies the version). With no entity tag on either
/// side, both Last-Modified must be present and equal. `false` when neither side has a
/// usable validator.
pub fn same_version(
    etag_a: Option<&[u8]>,
    lm_a: Option<u64>,
    etag_b: Option<&[u8]>,
    lm_b: Option<u64>,
) -> bool {
    match (etag_a, etag_b) {
        (None, None) => matches!((lm_a, lm_b), (Some(a), Some(b)) if a == b),
        (Some(a), Some(b)) => is_strong_etag(a) && a == b,
        _ => false,
    }
}

/// A strong entity-tag: `DQUOTE *etagc DQUOTE` (RFC 9110 §8.8.3), no `W/` prefix.
fn is_strong_etag(e: &[u8]) -> bool {
    e.len() >= 2
        && e.first() == Some(&b'"')
        && e.last() == Some(&b'"')
        && !e[1..e.len() - 1].contains(&b'"')
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

/// Call `f` with each non-empty member of a comma-separated list (RFC 9110 §5.6.1), OWS
/// trimmed. A comma inside a quoted-string (§5.6.4) does not split; a backslash inside
/// one escapes the next byte; an unterminated quote runs to the end of the value.
fn for_each_member<'a>(value: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    let mut emit = |member: &'a [u8]| {
        let member = trim_ows(member);
        if !member.is_empty() {
            f(member);
        }
    };
    let mut start = 0;
    let mut in_quote = false;
    let mut escaped = false;
    for (i, &b) in value.iter().enumerate() {
        if in_quote {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_quote = false;
            }
        } else if b == b'"' {
            in_quote = true;
        } else if b == b',' {
            emit(&value[start..i]);
            start = i + 1;
        }
    }
    emit(&value[start..]);
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
/// `token [ "=" ( token / quoted-string ) ]`), tolerating OWS around `=`.
fn directive(member: &[u8]) -> (&[u8], Arg<'_>) {
    let Some((name, raw)) = split_once(member, b'=') else {
        return (member, Arg::Absent);
    };
    let raw = trim_ows(raw);
    let arg = if raw.first() == Some(&b'"') {
        unquote(raw).map_or(Arg::Invalid, Arg::Value)
    } else if is_token(raw) {
        Arg::Value(Cow::Borrowed(raw))
    } else {
        Arg::Invalid
    };
    (trim_ows(name), arg)
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

/// `s` split at the first `sep`, which belongs to neither side.
fn split_once(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|&b| b == sep)?;
    Some((&s[..i], &s[i + 1..]))
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

    fn vary(values: &[&str]) -> Vary {
        Vary::parse(values.iter().map(|v| v.as_bytes()))
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
        let cc = rcc(&["  MAX-AGE=10 ,\tNo-Cache ,, PUBLIC  ", "S-MaxAge = 5"]);
        assert_eq!(cc.max_age, Some(10));
        assert_eq!(cc.s_maxage, Some(5));
        assert!(cc.no_cache && cc.public);
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
        let cc = rcc(&["max-ages=5, no-stores, x-public, must-understand, community=\"x\""]);
        assert_eq!(cc, ResponseCacheControl::default());
        assert_eq!(rcc(&["\u{0}max-age=5"]).max_age, None);
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

    fn st(status: u16, cc: &str) -> Result<(), NotStorable> {
        storable(true, status, &rcc(&[cc]), false, false, false, &Vary::None)
    }

    #[test]
    fn storable_method_and_status() {
        let cc = rcc(&["max-age=60"]);
        assert_eq!(
            storable(false, 200, &cc, false, false, false, &Vary::None),
            Err(NotStorable::Method)
        );
        assert_eq!(
            st(200, ""),
            Ok(()),
            "default-cacheable, no freshness: caller's TTL"
        );
        assert_eq!(st(404, ""), Ok(()));
        assert_eq!(st(100, "max-age=60"), Err(NotStorable::Status));
        assert_eq!(st(304, "max-age=60"), Err(NotStorable::Status));
        assert_eq!(st(299, "max-age=60"), Err(NotStorable::Status));
        assert_eq!(st(302, ""), Err(NotStorable::Status));
        assert_eq!(st(500, ""), Err(NotStorable::Status));
        assert_eq!(st(302, "max-age=60"), Ok(()));
        assert_eq!(st(503, "s-maxage=5"), Ok(()));
        assert_eq!(st(307, "public"), Ok(()));
        assert_eq!(
            storable(true, 302, &rcc(&[]), true, false, false, &Vary::None),
            Ok(()),
            "Expires is explicit freshness"
        );
        assert_eq!(st(206, ""), Err(NotStorable::PartialContent));
        assert_eq!(st(206, "max-age=60"), Err(NotStorable::PartialContent));
    }

    #[test]
    fn storable_directives() {
        assert_eq!(st(200, "no-store"), Err(NotStorable::NoStore));
        assert_eq!(st(200, "private, max-age=60"), Err(NotStorable::Private));
        assert_eq!(st(200, "private=\"set-cookie\""), Err(NotStorable::Private));
        assert_eq!(
            st(206, "no-store"),
            Err(NotStorable::NoStore),
            "206 only once storable"
        );
        assert_eq!(
            st(200, "no-cache"),
            Ok(()),
            "no-cache stores; reuse validates"
        );
        assert_eq!(
            storable(
                true,
                200,
                &rcc(&["max-age=60"]),
                false,
                true,
                false,
                &Vary::None
            ),
            Err(NotStorable::NoStore)
        );
    }

    #[test]
    fn storable_authorization() {
        let auth = |cc: &str| storable(true, 200, &rcc(&[cc]), false, false, true, &Vary::None);
        assert_eq!(auth("max-age=60"), Err(NotStorable::Authorization));
        assert_eq!(
            auth("proxy-revalidate, max-age=60"),
            Err(NotStorable::Authorization)
        );
        assert_eq!(auth("must-revalidate, max-age=60"), Ok(()));
        assert_eq!(auth("public"), Ok(()));
        assert_eq!(auth("s-maxage=10"), Ok(()));
    }

    #[test]
    fn storable_vary_star() {
        let v = vary(&["Accept-Encoding, *"]);
        assert_eq!(
            storable(true, 200, &rcc(&["max-age=5"]), false, false, false, &v),
            Err(NotStorable::VaryStar)
        );
        let v = vary(&["accept-encoding"]);
        assert_eq!(
            storable(true, 200, &rcc(&["max-age=5"]), false, false, false, &v),
            Ok(())
        );
    }

    #[test]
    fn not_storable_labels() {
        let all = [
            (NotStorable::Method, "method"),
            (NotStorable::Status, "status"),
            (NotStorable::NoStore, "no_store"),
            (NotStorable::Private, "private"),
            (NotStorable::Authorization, "authorization"),
            (NotStorable::VaryStar, "vary_star"),
            (NotStorable::PartialContent, "partial"),
        ];
        for (v, s) in all {
            assert_eq!(v.as_str(), s);
        }
    }

    // ---- Freshness ----

    const H: Heuristic = Heuristic {
        fraction: 0.1,
        max_secs: 86_400,
    };

    const T: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

    fn life(
        cc: &str,
        expires: Option<&str>,
        date: Option<u64>,
        lm: Option<u64>,
        status: u16,
    ) -> u64 {
        freshness_lifetime(
            &rcc(&[cc]),
            expires.map(str::as_bytes),
            date,
            lm,
            T + 5,
            status,
            H,
            77,
        )
    }

    #[test]
    fn freshness_precedence() {
        let exp = Some("Sun, 06 Nov 1994 09:49:37 GMT");
        assert_eq!(
            life("s-maxage=5, max-age=10", exp, Some(T), Some(0), 200),
            5
        );
        assert_eq!(life("max-age=10", exp, Some(T), Some(0), 200), 10);
        assert_eq!(life("max-age=0", exp, Some(T), None, 200), 0);
        assert_eq!(life("", exp, Some(T), Some(0), 200), 3600);
        assert_eq!(
            life("", exp, None, None, 200),
            3595,
            "Date absent: response_time"
        );
        assert_eq!(
            life("", exp, Some(T + 7200), None, 200),
            0,
            "Expires before Date"
        );
    }

    #[test]
    fn invalid_expires_is_expired() {
        for e in ["0", "-1", "", "tomorrow", "Sun, 06 Nov 1994 09:49:37 UTC"] {
            assert_eq!(life("", Some(e), Some(T), Some(T - 1000), 200), 0, "{e}");
        }
    }

    #[test]
    fn heuristic_freshness() {
        assert_eq!(life("", None, Some(T), Some(T - 1000), 200), 100);
        assert_eq!(
            life("", None, None, Some(T - 1000), 200),
            100,
            "base is response_time"
        );
        assert_eq!(life("", None, Some(T), Some(0), 200), 86_400, "capped");
        assert_eq!(
            life("", None, Some(T), Some(T + 50), 200),
            0,
            "LM after Date"
        );
        assert_eq!(
            life("", None, Some(T), Some(T - 1000), 302),
            77,
            "not default-cacheable"
        );
        assert_eq!(life("public", None, Some(T), Some(T - 1000), 302), 100);
        assert_eq!(life("", None, Some(T), None, 200), 77, "no LM: default TTL");
        assert_eq!(life("no-cache", None, Some(T), None, 200), 77);
    }

    #[test]
    fn heuristic_degenerate_parameters() {
        let h = |fraction, max_secs| Heuristic { fraction, max_secs };
        assert_eq!(h(f64::NAN, 100).lifetime(1000), 0);
        assert_eq!(h(-1.0, 100).lifetime(1000), 0);
        assert_eq!(h(f64::INFINITY, 100).lifetime(1000), 100);
        assert_eq!(h(f64::INFINITY, u64::MAX).lifetime(1), u64::MAX);
        assert_eq!(h(0.5, u64::MAX).lifetime(u64::MAX), u64::MAX / 2 + 1);
        assert_eq!(h(0.1, 100).lifetime(0), 0);
        assert_eq!(Heuristic::default(), H);
    }

    #[test]
    fn current_age_rfc_formula() {
        // Date 10 s before the response arrived, 2 s round trip, Age 3, 5 s resident.
        let resp = (T + 10) * 1000;
        assert_eq!(
            current_age(Some(T), Some(3), resp - 2000, resp, resp + 5000),
            15
        );
        // Age + delay dominates the apparent age.
        assert_eq!(
            current_age(Some(T + 10), Some(30), resp - 2000, resp, resp + 5000),
            37
        );
        // No Date, no Age: only the delay and residency.
        assert_eq!(current_age(None, None, resp - 1500, resp, resp + 1000), 2);
        // Rounds down.
        assert_eq!(current_age(None, None, resp, resp, resp + 999), 0);
    }

    #[test]
    fn current_age_never_negative_or_overflowing() {
        let resp = T * 1000;
        // Date in the future (origin clock ahead): apparent age 0.
        assert_eq!(current_age(Some(T + 3600), None, resp, resp, resp), 0);
        // Clocks going backwards.
        assert_eq!(current_age(None, None, resp + 5000, resp, resp - 5000), 0);
        assert_eq!(
            current_age(Some(u64::MAX), Some(u64::MAX), 0, u64::MAX, u64::MAX),
            u64::MAX / 1000
        );
        assert_eq!(
            current_age(Some(0), Some(u64::MAX), 0, u64::MAX, 0),
            u64::MAX / 1000
        );
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

    // ---- Vary ----

    #[test]
    fn vary_normalises_names() {
        assert_eq!(
            vary(&["Accept-Encoding, USER-AGENT", " accept-encoding ,Origin,,"]),
            Vary::Names(vec![
                b"accept-encoding".to_vec(),
                b"origin".to_vec(),
                b"user-agent".to_vec()
            ])
        );
        assert_eq!(vary(&[]), Vary::None);
        assert_eq!(vary(&["", " , ,"]), Vary::None);
        assert_eq!(vary(&["*"]), Vary::Star);
        assert_eq!(vary(&["accept", " * "]), Vary::Star);
        assert_eq!(vary(&["accept encoding"]), Vary::Star, "not a field name");
        assert_eq!(vary(&["\"accept\""]), Vary::Star);
        assert_eq!(vary(&["accept:x"]), Vary::Star);
    }

    #[test]
    fn vary_name_limit() {
        let names: Vec<String> = (0..MAX_VARY_NAMES).map(|i| format!("x-h{i}")).collect();
        let joined = names.join(",");
        assert!(matches!(vary(&[&joined]), Vary::Names(n) if n.len() == MAX_VARY_NAMES));
        let more = format!("{joined},x-one-more");
        assert_eq!(vary(&[&more]), Vary::Star);
        // Duplicates do not count towards the limit.
        let dup = format!("{joined},{joined}");
        assert!(matches!(vary(&[&dup]), Vary::Names(_)));
    }

    #[test]
    fn vary_encode() {
        assert_eq!(Vary::None.encode(), b"");
        assert_eq!(Vary::Star.encode(), b"*");
        let v = vary(&["Origin, Accept-Encoding"]);
        assert_eq!(v.encode(), b"accept-encoding,origin");
        assert_eq!(Vary::parse([&v.encode()[..]]), v);
    }

    #[test]
    fn vary_key_format() {
        let names = vec![
            b"accept-encoding".to_vec(),
            b"origin".to_vec(),
            b"x-absent".to_vec(),
        ];
        let key = vary_key(&names, |name| match name {
            b"accept-encoding" => vec![&b" gzip ,\tbr "[..], b"zstd"],
            b"origin" => vec![&b"https://a.example"[..]],
            _ => vec![],
        });
        assert_eq!(
            key,
            b"accept-encoding:gzip,br,zstd\norigin:https://a.example\nx-absent\n"
        );
        // Present but empty differs from absent.
        let names = vec![b"accept-encoding".to_vec()];
        assert_eq!(vary_key(&names, |_| vec![&b""[..]]), b"accept-encoding:\n");
        assert_eq!(vary_key(&names, |_| vec![]), b"accept-encoding\n");
        assert_eq!(vary_key(&[], |_| vec![&b"x"[..]]), b"");
    }

    #[test]
    fn vary_key_whitespace_and_line_equivalence() {
        let names = vec![b"accept-encoding".to_vec()];
        let a = vary_key(&names, |_| vec![&b"gzip, br"[..]]);
        let b = vary_key(&names, |_| vec![&b"gzip"[..], b" br"]);
        let c = vary_key(&names, |_| vec![&b"gzip,,br,"[..]]);
        assert_eq!(a, b);
        assert_eq!(a, c);
        // Inner content is kept as is.
        let d = vary_key(&names, |_| vec![&b"gzip;q=1.0 , br"[..]]);
        assert_eq!(d, b"accept-encoding:gzip;q=1.0,br\n");
        let e = vary_key(&names, |_| vec![&b"a  b"[..]]);
        assert_eq!(e, b"accept-encoding:a  b\n");
    }

    #[test]
    fn vary_key_cannot_forge_lines() {
        let names = vec![b"a".to_vec(), b"b".to_vec()];
        let forged = vary_key(&names, |n| {
            if n == b"a" {
                vec![&b"x\nb:y"[..]]
            } else {
                vec![]
            }
        });
        let honest = vary_key(&names, |n| {
            if n == b"a" {
                vec![&b"x"[..]]
            } else {
                vec![&b"y\nb"[..]]
            }
        });
        assert_ne!(forged, honest);
        assert_eq!(forged, b"a:xb:y\nb\n");
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

    // ---- Content-Range ----

    #[test]
    fn content_range_accepts() {
        let cr = |first, last, complete| {
            Some(ContentRange {
                first,
                last,
                complete,
            })
        };
        assert_eq!(
            parse_content_range(b"bytes 0-499/1234"),
            cr(0, 499, Some(1234))
        );
        assert_eq!(parse_content_range(b"bytes 500-999/*"), cr(500, 999, None));
        assert_eq!(parse_content_range(b"BYTES 0-0/1"), cr(0, 0, Some(1)));
        assert_eq!(parse_content_range(b" bytes 1-1/2 "), cr(1, 1, Some(2)));
        assert_eq!(
            parse_content_range(b"bytes 0-18446744073709551614/18446744073709551615"),
            cr(0, u64::MAX - 1, Some(u64::MAX))
        );
    }

    #[test]
    fn content_range_rejects() {
        for bad in [
            &b""[..],
            b"bytes",
            b"bytes */1234",
            b"bytes 5-4/10",
            b"bytes 0-10/10",
            b"bytes 0-0/0",
            b"bytes 0-9",
            b"bytes=0-9/10",
            b"bytes  0-9/10",
            b"bytes 0 -9/10",
            b"bytes -9/10",
            b"bytes 0-/10",
            b"bytes 0-9/",
            b"bytes 0-9/10/",
            b"bytes 0-9/1x",
            b"items 0-9/10",
            b"bytes 0-9/18446744073709551616",
            b"bytes 0-18446744073709551616/*",
            b"bytes +0-9/10",
        ] {
            assert_eq!(
                parse_content_range(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    // ---- Validators ----

    #[test]
    fn same_version_etags() {
        let e = |s: &'static str| Some(s.as_bytes());
        assert!(same_version(e("\"abc\""), None, e("\"abc\""), None));
        assert!(!same_version(e("\"abc\""), None, e("\"abd\""), None));
        assert!(
            !same_version(e("W/\"abc\""), None, e("W/\"abc\""), None),
            "weak never matches"
        );
        assert!(!same_version(
            e("W/\"abc\""),
            Some(5),
            e("W/\"abc\""),
            Some(5)
        ));
        assert!(
            !same_version(e("\"abc\""), Some(5), e("\"abd\""), Some(5)),
            "ETag decides over LM"
        );
        assert!(
            !same_version(e("\"abc\""), Some(5), None, Some(5)),
            "one side lost its ETag"
        );
        assert!(!same_version(e("abc"), None, e("abc"), None), "malformed");
        assert!(!same_version(e("\""), None, e("\""), None));
        assert!(!same_version(e("\"a\"b\""), None, e("\"a\"b\""), None));
        assert!(same_version(e("\"\""), None, e("\"\""), None));
    }

    #[test]
    fn same_version_last_modified() {
        assert!(same_version(None, Some(T), None, Some(T)));
        assert!(!same_version(None, Some(T), None, Some(T + 1)));
        assert!(!same_version(None, Some(T), None, None));
        assert!(!same_version(None, None, None, None));
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

    // ---- Internals ----

    #[test]
    fn list_splitting_respects_quotes() {
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
            let _ = Vary::parse([&v[..]]);
            let _ = connection_tokens([&v[..]]);
            let _ = parse_content_range(&v);
            let _ = parse_delta_seconds(&v);
            let _ = freshness_lifetime(&ResponseCacheControl::default(), Some(&v), None, Some(1), 0, 200, H, 0);
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
            let v = if quoted { format!("max-age=\"{n}\"") } else { format!("MAX-AGE = {n}") };
            prop_assert_eq!(ResponseCacheControl::parse([v.as_bytes()]).max_age, Some(n));
        }

        #[test]
        fn content_range_round_trips(first in any::<u64>(), len in 1..u64::MAX, extra in 0..1000u64, star in any::<bool>()) {
            let last = first.saturating_add(len - 1);
            let complete = if star { None } else { last.checked_add(1).and_then(|c| c.checked_add(extra)) };
            let text = match complete {
                Some(c) => format!("bytes {first}-{last}/{c}"),
                None => format!("bytes {first}-{last}/*"),
            };
            prop_assert_eq!(parse_content_range(text.as_bytes()), Some(ContentRange { first, last, complete }));
        }

        #[test]
        fn current_age_is_monotonic_in_now(
            date in proptest::option::of(any::<u64>()),
            age in proptest::option::of(any::<u64>()),
            req in any::<u64>(), resp in any::<u64>(), now in any::<u64>(), later in any::<u64>(),
        ) {
            let a = current_age(date, age, req, resp, now);
            let b = current_age(date, age, req, resp, now.saturating_add(later));
            prop_assert!(a <= b);
        }

        #[test]
        fn vary_encode_round_trips(names in proptest::collection::vec("[A-Za-z0-9-]{1,12}", 0..40)) {
            let v = Vary::parse(names.iter().map(|n| n.as_bytes()));
            prop_assert_eq!(Vary::parse([&v.encode()[..]]), v.clone());
            if let Vary::Names(ns) = &v {
                prop_assert!(ns.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(ns.iter().all(|n| !n.iter().any(u8::is_ascii_uppercase)));
            }
        }

        #[test]
        fn cache_status_detail_is_printable(detail in any::<String>(), ttl in any::<i64>()) {
            let h = CacheStatus { name: "linerate", fwd: Some(Fwd::Miss), ttl: Some(ttl), detail: Some(&detail), ..Default::default() };
            let s = h.to_header();
            prop_assert!(s.bytes().all(|b| (0x20..=0x7e).contains(&b)));
            prop_assert!(s.starts_with("linerate; fwd=miss; ttl="));
        }
    }
}
