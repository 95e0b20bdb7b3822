//! The cache's two decisions, as pure functions of values: whether a response from the
//! origin may be stored ([`admit`], RFC 9111 §3), and what to do with a stored response
//! for a request ([`decide`], RFC 9111 §4 with RFC 5861's stale extensions); with the
//! header work that goes with them (what is stored, [`to_store`]; how a 304 freshens a
//! stored response, [`freshen`]).
//!
//! Everything the server needs to know about caching semantics is answered here, so
//! the server's fill and request flow only do I/O with the answers. Times are passed in
//! (Unix milliseconds); nothing here reads a clock, a socket or a file.

use super::control::{Control, RequestCacheControl};
use super::freshness::{age_field, current_age, freshness_lifetime, Heuristic};
use super::status::{default_cacheable_status, understood_status};
use super::vary::Vary;
use crate::request::Method;

/// Freshness an operator's default TTL gives an error status at most (404, 410...):
/// a live player asking for the next segment a moment early must not keep getting its
/// 404 for the route's default.
pub const NEGATIVE_TTL_SECS: u64 = 10;

/// A response as the policy reads it: status, fields and the times of its exchange
/// (RFC 9111 §4.2.3 `request_time` and `response_time`), borrowed from an origin
/// response or a stored one.
#[derive(Debug, Clone, Copy)]
pub struct Response<'a> {
    /// Status code.
    pub status: u16,
    /// Field lines in order (names compare case-insensitively).
    pub fields: &'a [(Vec<u8>, Vec<u8>)],
    /// When the request that got it was sent, Unix ms.
    pub request_time_ms: u64,
    /// When its head arrived, Unix ms.
    pub response_time_ms: u64,
}

impl<'a> Response<'a> {
    /// Every value of the fields named `name`.
    pub fn values<'n>(&self, name: &'n [u8]) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        self.fields
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The first value of the field named `name`.
    pub fn field(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.values(name).next()
    }

    /// Whether it carries a validator a revalidation can send (RFC 9110 §8.8: an ETag,
    /// or a Last-Modified that parses).
    pub fn has_validator(&self) -> bool {
        self.field(b"etag").is_some()
            || self
                .field(b"last-modified")
                .and_then(crate::date::parse)
                .is_some()
    }
}

/// What of a request matters for storing the response to it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method the response answers (the method sent to the origin).
    pub method: Method,
    /// The request's `Cache-Control` as honoured (empty when the operator turned
    /// request directives off).
    pub cc: RequestCacheControl,
    /// Whether it carried `Authorization`.
    pub authorization: bool,
}

/// What RFC 9111 leaves to the cache, for one route.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    /// Targeted fields this cache obeys, in order (RFC 9213 §2.2), lower-case names.
    pub targets: &'a [Vec<u8>],
    /// Heuristic freshness (§4.2.2).
    pub heuristic: Heuristic,
    /// The operator's freshness for responses without explicit freshness, for this URL
    /// (a profile's extension table); `None`: RFC 9111 only.
    pub default_ttl: Option<u64>,
    /// Stale-while-revalidate window when the response gives none, seconds.
    pub stale_while_revalidate: u64,
    /// Stale-if-error window when the response gives none, seconds.
    pub stale_if_error: u64,
}

/// Why a response is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStorable {
    /// The request method is not GET (the only one this cache stores; HEAD misses are
    /// filled with GET).
    Method,
    /// The status is not final, a 304 or 206 (which update or complete a stored
    /// response, §3.3, §4.3.4), not understood under `must-understand` (§5.2.2.3), or
    /// not cacheable by default while the response has no explicit freshness (§3).
    Status,
    /// `no-store` in the request or the response (§5.2.1.5, §5.2.2.5).
    NoStore,
    /// `private` (§5.2.2.7: a shared cache MUST NOT store it).
    Private,
    /// The request had `Authorization` and the response does not allow sharing it (§3.5).
    Authorization,
    /// `Set-Cookie` without `public` or `s-maxage`: meant for one client. A choice, as
    /// nginx and Varnish make it; RFC 9111 §7.3 leaves it to the cache.
    SetCookie,
    /// `Vary: *` (§4.1: never matches), or more names than this cache keys on.
    VaryStar,
    /// A transfer coding other than chunked (RFC 9112 §6.1): the body as received is
    /// not the representation, and this cache does not decode it.
    TransferCoding,
    /// Stale on arrival, with no validator to revalidate it with and no stale extension
    /// to serve it under: a stored copy could never be reused.
    NotReusable,
}

impl NotStorable {
    /// Short stable name for logs, `Cache-Status` details and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStorable::Method => "method",
            NotStorable::Status => "status",
            NotStorable::NoStore => "no_store",
            NotStorable::Private => "private",
            NotStorable::Authorization => "authorization",
            NotStorable::SetCookie => "set_cookie",
            NotStorable::VaryStar => "vary_star",
            NotStorable::TransferCoding => "transfer_coding",
            NotStorable::NotReusable => "not_reusable",
        }
    }

    /// Whether the verdict is about the resource rather than this one response: worth
    /// remembering, so the next requests for the URL go straight to the origin instead
    /// of queueing behind one fill (hit-for-pass). A status (a 503, a 201) says nothing
    /// about the next response, and a transient error must not turn off collapsing.
    pub fn sticks(self) -> bool {
        self != NotStorable::Status
    }
}

/// Whether a shared cache may store `resp`, the response to `req` (RFC 9111 §3),
/// checked in this order: method; a final status (any, §3: understanding the status is
/// required only for 206, 304 and under `must-understand`); `no-store` (which
/// `must-understand` with an understood status overrides, §5.2.2.3); `private`;
/// `Authorization`; `Set-Cookie`; `Vary: *`; transfer coding; explicit freshness or a
/// status cacheable by default; and finally whether a stored copy could ever be reused. `transfer_coded`:
/// the response carried a transfer coding other than chunked. A 206 that is exactly the
/// part the cache asked for is admitted as the 200 it is part of (the caller passes
/// status 200). Admitted: the response's freshness and `Vary` as computed here, so the
/// caller keys and stores it without reading them again.
pub fn admit(
    req: &Request,
    resp: &Response<'_>,
    transfer_coded: bool,
    settings: &Settings<'_>,
    now_ms: u64,
) -> Result<Admitted, NotStorable> {
    if req.method != Method::Get {
        return Err(NotStorable::Method);
    }
    let status = resp.status;
    if !(200..=599).contains(&status) || status == 304 || status == 206 {
        return Err(NotStorable::Status);
    }
    let control = Control::of(settings.targets, resp.fields);
    let cc = &control.directives;
    if cc.must_understand && !understood_status(status) {
        return Err(NotStorable::Status);
    }
    if req.cc.no_store || (cc.no_store && !cc.must_understand) {
        return Err(NotStorable::NoStore);
    }
    if cc.private {
        return Err(NotStorable::Private);
    }
    // §3.5: "a shared cache MUST NOT use a cached response to a request with an
    // Authorization header field ... unless ... must-revalidate, public or s-maxage".
    if req.authorization && !(cc.must_revalidate || cc.public || cc.s_maxage.is_some()) {
        return Err(NotStorable::Authorization);
    }
    if resp.field(b"set-cookie").is_some() && !cc.public && cc.s_maxage.is_none() {
        return Err(NotStorable::SetCookie);
    }
    let vary = Vary::parse(resp.values(b"vary"));
    if vary == Vary::Star {
        return Err(NotStorable::VaryStar);
    }
    if transfer_coded {
        return Err(NotStorable::TransferCoding);
    }
    let expires = control.uses_expires() && resp.field(b"expires").is_some();
    let explicit = cc.max_age.is_some() || cc.s_maxage.is_some() || expires || cc.public;
    if !explicit && !default_cacheable_status(status) {
        return Err(NotStorable::Status);
    }
    let f = Freshness::of(resp, settings, now_ms);
    let reusable = f.is_fresh() || resp.has_validator() || f.swr > 0 || f.sie > 0;
    if !reusable {
        return Err(NotStorable::NotReusable);
    }
    Ok(Admitted { fresh: f, vary })
}

/// What [`admit`] computed of a response it admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// Its freshness at admission.
    pub fresh: Freshness,
    /// Its `Vary` ([`Vary::None`] or the names it is keyed by; never `*`).
    pub vary: Vary,
}

/// What a response's fields say toward its freshness (RFC 9111 §4.2), parsed: the
/// governing directives under a target list, `Date`, `Last-Modified`, `Expires` and
/// `Age`. A function of the fields and the target list only, so a stored response's
/// terms can be parsed once and kept with it ([`Freshness::of_terms`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    control: Control,
    date: Option<u64>,
    last_modified: Option<u64>,
    /// `None`: no `Expires`; `Some(None)`: one that is not a date (already expired).
    expires: Option<Option<u64>>,
    /// RFC 9111 §5.1: an invalid `Age` (text, negative, decimal) is ignored, as if
    /// absent: the response is as old as `Date` and the exchange say.
    age: Option<u64>,
}

impl Terms {
    /// The terms of field lines `fields` under the target list `targets` (lower-case
    /// field names, in order; see [`Control::of`]).
    pub fn of(targets: &[Vec<u8>], fields: &[(Vec<u8>, Vec<u8>)]) -> Terms {
        let resp = Response {
            status: 0,
            fields,
            request_time_ms: 0,
            response_time_ms: 0,
        };
        Terms {
            control: Control::of(targets, fields),
            date: resp.field(b"date").and_then(crate::date::parse),
            last_modified: resp.field(b"last-modified").and_then(crate::date::parse),
            expires: resp.field(b"expires").map(crate::date::parse),
            age: age_field(resp.values(b"age")).seconds(),
        }
    }
}

/// The freshness of a response now (RFC 9111 §4.2), with the directives that govern it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freshness {
    /// Freshness lifetime, seconds (§4.2.1).
    pub lifetime: u64,
    /// Current age, seconds (§4.2.3).
    pub age: u64,
    /// The governing directives (`Cache-Control`, or a targeted field).
    pub control: Control,
    /// Stale-while-revalidate window, seconds (the response's, else the route's).
    pub swr: u64,
    /// Stale-if-error window, seconds (the response's, else the route's).
    pub sie: u64,
}

impl Freshness {
    /// The freshness of `resp` at `now_ms` under `settings`.
    pub fn of(resp: &Response<'_>, settings: &Settings<'_>, now_ms: u64) -> Freshness {
        Freshness::of_terms(
            resp,
            &Terms::of(settings.targets, resp.fields),
            settings,
            now_ms,
        )
    }

    /// [`Freshness::of`] from `terms`, the [`Terms`] of `resp`'s fields under
    /// `settings.targets` (parsed earlier, once per stored response: a hit then does
    /// arithmetic only).
    pub fn of_terms(
        resp: &Response<'_>,
        terms: &Terms,
        settings: &Settings<'_>,
        now_ms: u64,
    ) -> Freshness {
        let default_ttl = settings.default_ttl.map(|t| {
            if resp.status >= 400 {
                t.min(NEGATIVE_TTL_SECS)
            } else {
                t
            }
        });
        let control = terms.control.clone();
        let lifetime = freshness_lifetime(
            &control,
            terms.expires,
            terms.date,
            terms.last_modified,
            resp.response_time_ms / 1000,
            resp.status,
            settings.heuristic,
            default_ttl,
        );
        let age = current_age(
            terms.date,
            terms.age,
            resp.request_time_ms,
            resp.response_time_ms,
            now_ms,
        );
        let cc = &control.directives;
        Freshness {
            lifetime,
            age,
            swr: cc
                .stale_while_revalidate
                .unwrap_or(settings.stale_while_revalidate),
            sie: cc.stale_if_error.unwrap_or(settings.stale_if_error),
            control,
        }
    }

    /// Seconds of freshness left; negative: stale for that long. For `ttl=` in
    /// `Cache-Status` (RFC 9211 §2.4).
    pub fn ttl(&self) -> i64 {
        i64::try_from(self.lifetime).unwrap_or(i64::MAX)
            - i64::try_from(self.age).unwrap_or(i64::MAX)
    }

    /// Fresh (§4.2: "the age has not yet exceeded its freshness lifetime").
    pub fn is_fresh(&self) -> bool {
        self.lifetime > self.age
    }

    /// Seconds stale (0 while fresh).
    fn staleness(&self) -> u64 {
        self.age.saturating_sub(self.lifetime)
    }

    /// Whether a stale copy may ever be served without the client asking for it: not
    /// under `must-revalidate` (§5.2.2.2), `proxy-revalidate` (§5.2.2.8), `s-maxage`
    /// (§5.2.2.10: it "also implies the semantics of the proxy-revalidate response
    /// directive") or `no-cache` (§5.2.2.4).
    fn may_serve_stale(&self) -> bool {
        let cc = &self.control.directives;
        !(cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some() || cc.no_cache)
    }

    /// Whether a stale copy may stand in when the origin fails (RFC 5861 §4).
    pub fn within_stale_if_error(&self) -> bool {
        self.may_serve_stale() && self.sie > 0 && self.staleness() <= self.sie
    }

    /// Whether the stored response may answer when its validation fails: still fresh
    /// (and not `no-cache`, which needs a successful validation), or stale within
    /// stale-if-error.
    pub fn stands_in_on_error(&self) -> bool {
        (self.is_fresh() && !self.control.directives.no_cache) || self.within_stale_if_error()
    }
}

/// What to do with a stored response for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Fresh, and fresh enough for the request: serve it (a hit).
    Fresh,
    /// Stale, and the request accepts that much staleness (`max-stale`, §5.2.1.2):
    /// serve it (a hit).
    StaleAccepted,
    /// Stale within `stale-while-revalidate` (RFC 5861 §3): serve it and revalidate in
    /// the background.
    StaleWhileRevalidate,
    /// Validate it with the origin first (§4.3); `on_error` says what a failed
    /// validation gives.
    Revalidate(OnError),
    /// The request forbids going to the origin (`only-if-cached`, §5.2.1.7) and the
    /// stored response does not satisfy it: 504.
    GatewayTimeout,
}

impl Decision {
    /// Short stable name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Fresh => "fresh",
            Decision::StaleAccepted => "stale_accepted",
            Decision::StaleWhileRevalidate => "stale_while_revalidate",
            Decision::Revalidate(_) => "revalidate",
            Decision::GatewayTimeout => "gateway_timeout",
        }
    }

    /// Whether the stored response is served without contacting the origin first.
    pub fn is_hit(self) -> bool {
        matches!(
            self,
            Decision::Fresh | Decision::StaleAccepted | Decision::StaleWhileRevalidate
        )
    }
}

/// What a failed revalidation (the origin unreachable, or a 5xx) gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Serve the stored response (`stale-if-error`, RFC 5861 §4).
    ServeStored,
    /// 504: must-revalidate and friends (§5.2.2.2: "if a cache ... cannot reach the
    /// origin ... it MUST generate a 504 (Gateway Timeout)").
    GatewayTimeout,
    /// An error: 502 or 504 as the failure says; a 5xx answer to the revalidation is
    /// forwarded (RFC 9111 §4.3.3 allows either).
    Fail,
}

/// What to do with a request when nothing is stored for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// Fetch it (and store what may be stored).
    Fetch,
    /// `no-store` in the request (§5.2.1.5): forward it, store nothing.
    Uncached,
    /// `only-if-cached` (§5.2.1.7): 504.
    GatewayTimeout,
}

/// Decide for a request with directives `rc` and a stored response of freshness `f`
/// (RFC 9111 §4.2.4 with the request directives of §5.2.1):
///
/// 1. `no-cache` in the request or the response: validate first (`only-if-cached`:
///    504);
/// 2. fresh, no older than the request's `max-age` and with at least its `min-fresh`
///    left: [`Decision::Fresh`];
/// 3. stale but within the request's `max-stale` (and not under must-revalidate,
///    proxy-revalidate or s-maxage): [`Decision::StaleAccepted`];
/// 4. stale within stale-while-revalidate, for a request without `max-age` or
///    `min-fresh` (which ask for fresh): [`Decision::StaleWhileRevalidate`];
/// 5. `only-if-cached`: [`Decision::GatewayTimeout`];
/// 6. validate; a failure then serves the stored response within stale-if-error (or
///    while still fresh), gives 504 for a stale response under must-revalidate,
///    proxy-revalidate or s-maxage when the origin cannot be reached, and the origin's
///    answer (a 5xx) or a 502/504 of the cache's own otherwise.
pub fn decide(rc: &RequestCacheControl, f: &Freshness) -> Decision {
    let cc = &f.control.directives;
    let on_error = if f.stands_in_on_error() {
        OnError::ServeStored
    } else if !f.is_fresh() && (cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some())
    {
        OnError::GatewayTimeout
    } else {
        OnError::Fail
    };
    if rc.no_cache || cc.no_cache {
        return if rc.only_if_cached {
            Decision::GatewayTimeout
        } else {
            Decision::Revalidate(on_error)
        };
    }
    let too_old = rc.max_age.is_some_and(|m| f.age > m);
    let too_close = rc
        .min_fresh
        .is_some_and(|m| f.ttl() < i64::try_from(m).unwrap_or(i64::MAX));
    if f.is_fresh() && !too_old && !too_close {
        return Decision::Fresh;
    }
    if !f.is_fresh() && f.may_serve_stale() {
        if let Some(limit) = rc.max_stale {
            if limit.is_none_or(|l| f.staleness() <= l) && !too_old {
                return Decision::StaleAccepted;
            }
        }
        let asks_fresh = rc.max_age.is_some() || rc.min_fresh.is_some();
        if !asks_fresh && f.swr > 0 && f.staleness() <= f.swr {
            return Decision::StaleWhileRevalidate;
        }
    }
    if rc.only_if_cached {
        return Decision::GatewayTimeout;
    }
    Decision::Revalidate(on_error)
}

/// Decide for a request when nothing is stored (§5.2.1.7, §5.2.1.5).
pub fn decide_miss(rc: &RequestCacheControl) -> Miss {
    if rc.only_if_cached {
        Miss::GatewayTimeout
    } else if rc.no_store {
        Miss::Uncached
    } else {
        Miss::Fetch
    }
}

/// The fields to store with a response: its end-to-end fields (RFC 9111 §3.1: a cache
/// MUST NOT store hop-by-hop fields) and a `Date` when it had none (RFC 9110 §6.6.1: a
/// recipient with a clock that caches a response without `Date` MUST add one, the time
/// it was received).
pub fn to_store(fields: &[(Vec<u8>, Vec<u8>)], response_time_ms: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = crate::forward::end_to_end(fields).cloned().collect();
    if !out.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"date")) {
        out.push((
            b"Date".to_vec(),
            crate::date::format(response_time_ms / 1000).into_bytes(),
        ));
    }
    out
}

/// What a 304 that revalidated a stored response changes ([`freshen`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freshened {
    /// The stored response's fields, freshened: what is stored and every later client
    /// gets.
    pub stored: Vec<(Vec<u8>, Vec<u8>)>,
    /// The 304's `Set-Cookie` values that are not stored (the freshened response is not
    /// shareable with them, see [`freshen`]): for the client whose request the 304
    /// answered, and for no one else.
    pub personal: Vec<Vec<u8>>,
}

/// A stored response's fields freshened by a 304 (RFC 9111 §3.2, §4.3.4): every
/// end-to-end field of the 304 replaces the stored fields of that name, except
/// `Content-Length` (§3.2: "Content-Length") and `Content-Range`, which describe the
/// stored body, not the 304. The stored `Age` and `Date` described the old exchange:
/// they are replaced by the 304's, or dropped (a `Date` of the 304's arrival is added).
///
/// `Set-Cookie` follows the rule [`admit`] applies to a response it stores
/// ([`NotStorable::SetCookie`]): kept only when the freshened response is meant to be
/// shared with it (`public` or `s-maxage` in the directives that govern it, `targets`
/// as for [`Control::of`]). Otherwise none is stored (a cookie the origin set for one
/// client would be replayed to every later one), and the 304's go to the client whose
/// request (with its `Cookie`) the origin answered, in [`Freshened::personal`].
pub fn freshen(
    stored: &[(Vec<u8>, Vec<u8>)],
    update: &[(Vec<u8>, Vec<u8>)],
    response_time_ms: u64,
    targets: &[Vec<u8>],
) -> Freshened {
    let fresh: Vec<&(Vec<u8>, Vec<u8>)> = crate::forward::end_to_end(update)
        .filter(|(n, _)| {
            !n.eq_ignore_ascii_case(b"content-length") && !n.eq_ignore_ascii_case(b"content-range")
        })
        .collect();
    let replaced = |n: &[u8]| {
        fresh.iter().any(|(f, _)| f.eq_ignore_ascii_case(n))
            || n.eq_ignore_ascii_case(b"age")
            || n.eq_ignore_ascii_case(b"date")
    };
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = stored
        .iter()
        .filter(|(n, _)| !replaced(n))
        .cloned()
        .collect();
    out.extend(fresh.iter().map(|&f| f.clone()));
    if !out.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"date")) {
        out.push((
            b"Date".to_vec(),
            crate::date::format(response_time_ms / 1000).into_bytes(),
        ));
    }
    let is_cookie = |n: &[u8]| n.eq_ignore_ascii_case(b"set-cookie");
    let cc = Control::of(targets, &out).directives;
    let mut personal = Vec::new();
    if !(cc.public || cc.s_maxage.is_some()) {
        out.retain(|(n, _)| !is_cookie(n));
        personal = fresh
            .iter()
            .filter(|(n, _)| is_cookie(n))
            .map(|(_, v)| v.clone())
            .collect();
    }
    Freshened {
        stored: out,
        personal,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Sun, 06 Nov 1994 08:49:37 GMT, in ms.
    const NOW: u64 = 784_111_777_000;

    fn fields(list: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        list.iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn settings() -> Settings<'static> {
        static TARGETS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
        Settings {
            targets: TARGETS.get_or_init(|| vec![b"cdn-cache-control".to_vec()]),
            heuristic: Heuristic::default(),
            default_ttl: None,
            stale_while_revalidate: 0,
            stale_if_error: 0,
        }
    }

    fn get() -> Request {
        Request {
            method: Method::Get,
            cc: RequestCacheControl::default(),
            authorization: false,
        }
    }

    fn resp(status: u16, f: &[(Vec<u8>, Vec<u8>)]) -> Response<'_> {
        Response {
            status,
            fields: f,
            request_time_ms: NOW,
            response_time_ms: NOW,
        }
    }

    fn admit_with(status: u16, list: &[(&str, &str)]) -> Result<(), NotStorable> {
        let f = fields(list);
        admit(&get(), &resp(status, &f), false, &settings(), NOW).map(drop)
    }

    // ---- admit (RFC 9111 §3) ----

    #[test]
    fn admits_by_method_and_status() {
        let f = fields(&[("Cache-Control", "max-age=60")]);
        let head = Request {
            method: Method::Head,
            ..get()
        };
        assert_eq!(
            admit(&head, &resp(200, &f), false, &settings(), NOW).map(drop),
            Err(NotStorable::Method)
        );
        assert_eq!(admit_with(200, &[("Cache-Control", "max-age=60")]), Ok(()));
        for s in [100, 199, 206, 304, 600] {
            assert_eq!(
                admit_with(s, &[("Cache-Control", "max-age=60")]),
                Err(NotStorable::Status),
                "{s}"
            );
        }
        // §3: any final status may be stored with explicit freshness, understood or not...
        assert_eq!(admit_with(299, &[("Cache-Control", "max-age=60")]), Ok(()));
        assert_eq!(
            admit_with(599, &[("Cache-Control", "public"), ("ETag", "\"a\"")]),
            Ok(())
        );
        // ...unless must-understand asks for a status this cache knows (§5.2.2.3), which
        // then overrides no-store.
        assert_eq!(
            admit_with(299, &[("Cache-Control", "max-age=60, must-understand")]),
            Err(NotStorable::Status)
        );
        assert_eq!(
            admit_with(
                200,
                &[("Cache-Control", "max-age=60, must-understand, no-store")]
            ),
            Ok(())
        );
        // §3: no explicit freshness needs a status cacheable by default.
        assert_eq!(
            admit_with(302, &[("ETag", "\"a\"")]),
            Err(NotStorable::Status)
        );
        assert_eq!(
            admit_with(500, &[("ETag", "\"a\"")]),
            Err(NotStorable::Status)
        );
        assert_eq!(
            admit_with(201, &[("ETag", "\"a\"")]),
            Err(NotStorable::Status)
        );
        assert_eq!(admit_with(302, &[("Cache-Control", "max-age=60")]), Ok(()));
        assert_eq!(admit_with(503, &[("Cache-Control", "s-maxage=5")]), Ok(()));
        assert_eq!(
            admit_with(307, &[("Cache-Control", "public"), ("ETag", "\"a\"")]),
            Ok(())
        );
        assert_eq!(
            admit_with(
                302,
                &[
                    ("Expires", "Sun, 06 Nov 1994 09:49:37 GMT"),
                    ("Date", "Sun, 06 Nov 1994 08:49:37 GMT")
                ]
            ),
            Ok(()),
            "Expires is explicit freshness"
        );
    }

    #[test]
    fn admits_by_directives() {
        assert_eq!(
            admit_with(200, &[("Cache-Control", "no-store, max-age=60")]),
            Err(NotStorable::NoStore)
        );
        assert_eq!(
            admit_with(200, &[("Cache-Control", "private, max-age=60")]),
            Err(NotStorable::Private)
        );
        assert_eq!(
            admit_with(
                200,
                &[("Cache-Control", "private=\"set-cookie\", max-age=9")]
            ),
            Err(NotStorable::Private)
        );
        assert_eq!(
            admit_with(200, &[("Cache-Control", "no-cache"), ("ETag", "\"v\"")]),
            Ok(()),
            "no-cache stores; every reuse validates"
        );
        let f = fields(&[("Cache-Control", "max-age=60")]);
        let mut req = get();
        req.cc.no_store = true;
        assert_eq!(
            admit(&req, &resp(200, &f), false, &settings(), NOW).map(drop),
            Err(NotStorable::NoStore)
        );
        assert_eq!(
            admit_with(200, &[("Cache-Control", "max-age=60"), ("Vary", "a, *")]),
            Err(NotStorable::VaryStar)
        );
        assert_eq!(
            admit_with(
                200,
                &[("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding")]
            ),
            Ok(())
        );
        let f = fields(&[("Cache-Control", "max-age=60")]);
        assert_eq!(
            admit(&get(), &resp(200, &f), true, &settings(), NOW).map(drop),
            Err(NotStorable::TransferCoding)
        );
    }

    #[test]
    fn admits_authorization_and_cookies_only_when_shared_on_purpose() {
        let auth = |cc: &str| {
            let f = fields(&[("Cache-Control", cc)]);
            let req = Request {
                authorization: true,
                ..get()
            };
            admit(&req, &resp(200, &f), false, &settings(), NOW).map(drop)
        };
        assert_eq!(auth("max-age=60"), Err(NotStorable::Authorization));
        assert_eq!(
            auth("proxy-revalidate, max-age=60"),
            Err(NotStorable::Authorization)
        );
        assert_eq!(auth("must-revalidate, max-age=60"), Ok(()));
        assert_eq!(auth("public, max-age=60"), Ok(()));
        assert_eq!(auth("s-maxage=10"), Ok(()));
        assert_eq!(
            admit_with(
                200,
                &[("Cache-Control", "max-age=60"), ("Set-Cookie", "a=b")]
            ),
            Err(NotStorable::SetCookie)
        );
        assert_eq!(
            admit_with(
                200,
                &[
                    ("Cache-Control", "public, max-age=60"),
                    ("Set-Cookie", "a=b")
                ]
            ),
            Ok(())
        );
    }

    #[test]
    fn a_response_nothing_could_reuse_is_not_stored() {
        assert_eq!(admit_with(200, &[]), Err(NotStorable::NotReusable));
        assert_eq!(
            admit_with(200, &[("Cache-Control", "max-age=0")]),
            Err(NotStorable::NotReusable)
        );
        assert_eq!(
            admit_with(200, &[("Cache-Control", "max-age=60"), ("Age", "120")]),
            Err(NotStorable::NotReusable)
        );
        // A validator, or a stale extension, makes a stale copy worth keeping.
        assert_eq!(admit_with(200, &[("ETag", "\"x\"")]), Ok(()));
        assert_eq!(
            admit_with(200, &[("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT")]),
            Ok(())
        );
        assert_eq!(
            admit_with(200, &[("Cache-Control", "max-age=0, stale-if-error=60")]),
            Ok(())
        );
        assert_eq!(
            admit_with(
                200,
                &[("Cache-Control", "max-age=0, stale-while-revalidate=5")]
            ),
            Ok(())
        );
    }

    #[test]
    fn targeted_fields_govern_admission() {
        assert_eq!(
            admit_with(
                200,
                &[
                    ("Cache-Control", "no-store"),
                    ("CDN-Cache-Control", "max-age=60")
                ]
            ),
            Ok(())
        );
        assert_eq!(
            admit_with(
                200,
                &[
                    ("Cache-Control", "max-age=60"),
                    ("CDN-Cache-Control", "no-store")
                ]
            ),
            Err(NotStorable::NoStore)
        );
        assert_eq!(
            admit_with(
                200,
                &[
                    ("Cache-Control", "no-store"),
                    ("CDN-Cache-Control", "max-age=\"60\"")
                ]
            ),
            Err(NotStorable::NoStore),
            "an invalid targeted field falls back to Cache-Control"
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
            (NotStorable::SetCookie, "set_cookie"),
            (NotStorable::VaryStar, "vary_star"),
            (NotStorable::TransferCoding, "transfer_coding"),
            (NotStorable::NotReusable, "not_reusable"),
        ];
        for (v, s) in all {
            assert_eq!(v.as_str(), s);
        }
        assert!(NotStorable::NoStore.sticks() && !NotStorable::Status.sticks());
    }

    // ---- decide (RFC 9111 §4) ----

    fn freshness(list: &[(&str, &str)], age_s: u64) -> Freshness {
        let f = fields(list);
        Freshness::of(&resp(200, &f), &settings(), NOW + age_s * 1000)
    }

    fn rc(v: &str) -> RequestCacheControl {
        RequestCacheControl::parse([v.as_bytes()], None)
    }

    #[test]
    fn fresh_responses_are_served() {
        let f = freshness(&[("Cache-Control", "max-age=100")], 10);
        assert_eq!((f.lifetime, f.age, f.ttl()), (100, 10, 90));
        assert_eq!(decide(&rc(""), &f), Decision::Fresh);
        assert!(Decision::Fresh.is_hit());
        assert_eq!(
            decide(&rc("max-age=5"), &f),
            Decision::Revalidate(OnError::ServeStored)
        );
        assert_eq!(
            decide(&rc("min-fresh=95"), &f),
            Decision::Revalidate(OnError::ServeStored)
        );
        assert_eq!(decide(&rc("min-fresh=90"), &f), Decision::Fresh);
        assert_eq!(
            decide(&rc("no-cache"), &f),
            Decision::Revalidate(OnError::ServeStored)
        );
        assert_eq!(
            decide(&rc("no-cache, only-if-cached"), &f),
            Decision::GatewayTimeout
        );
        let nc = freshness(&[("Cache-Control", "max-age=100, no-cache")], 10);
        assert_eq!(decide(&rc(""), &nc), Decision::Revalidate(OnError::Fail));
    }

    #[test]
    fn stale_responses_are_revalidated_or_served_as_allowed() {
        let f = freshness(&[("Cache-Control", "max-age=10")], 30);
        assert_eq!(decide(&rc(""), &f), Decision::Revalidate(OnError::Fail));
        assert_eq!(decide(&rc("max-stale"), &f), Decision::StaleAccepted);
        assert_eq!(decide(&rc("max-stale=20"), &f), Decision::StaleAccepted);
        assert_eq!(
            decide(&rc("max-stale=19"), &f),
            Decision::Revalidate(OnError::Fail)
        );
        assert_eq!(decide(&rc("only-if-cached"), &f), Decision::GatewayTimeout);
        for strict in [
            "max-age=10, must-revalidate",
            "max-age=10, proxy-revalidate",
            "s-maxage=10",
        ] {
            let f = freshness(&[("Cache-Control", strict)], 30);
            assert_eq!(
                decide(&rc("max-stale"), &f),
                Decision::Revalidate(OnError::GatewayTimeout),
                "{strict}"
            );
        }
        let swr = freshness(
            &[("Cache-Control", "max-age=10, stale-while-revalidate=30")],
            30,
        );
        assert_eq!(decide(&rc(""), &swr), Decision::StaleWhileRevalidate);
        assert_eq!(
            decide(&rc("max-age=60"), &swr),
            Decision::Revalidate(OnError::Fail)
        );
        let past_swr = freshness(
            &[("Cache-Control", "max-age=10, stale-while-revalidate=10")],
            30,
        );
        assert_eq!(
            decide(&rc(""), &past_swr),
            Decision::Revalidate(OnError::Fail)
        );
        let sie = freshness(&[("Cache-Control", "max-age=10, stale-if-error=60")], 30);
        assert_eq!(
            decide(&rc(""), &sie),
            Decision::Revalidate(OnError::ServeStored)
        );
        let sie_mr = freshness(
            &[(
                "Cache-Control",
                "max-age=10, stale-if-error=60, must-revalidate",
            )],
            30,
        );
        assert_eq!(
            decide(&rc(""), &sie_mr),
            Decision::Revalidate(OnError::GatewayTimeout)
        );
    }

    #[test]
    fn age_counts_from_the_first_member_of_age() {
        let f = freshness(&[("Cache-Control", "max-age=3600"), ("Age", "7200, 0")], 0);
        assert!(!f.is_fresh());
        let f = freshness(&[("Cache-Control", "max-age=3600"), ("Age", "30, 7200")], 0);
        assert!(f.is_fresh());
    }

    #[test]
    fn an_invalid_age_is_ignored() {
        // RFC 9111 §5.1: "a cache SHOULD ignore the field"; it must not make the
        // response stale (it did: such a response was never reused).
        for bad in ["abc", "old, 0", "-5", "7.0", "-7200", "7200.0"] {
            let f = freshness(&[("Cache-Control", "max-age=3600"), ("Age", bad)], 0);
            assert!(f.is_fresh(), "{bad}");
            assert_eq!(f.age, 0, "{bad}: no age of its own");
            assert_eq!(decide(&rc(""), &f), Decision::Fresh, "{bad}");
        }
        // The age from `Date` still counts.
        let f = freshness(&[("Cache-Control", "max-age=3600"), ("Age", "abc")], 7200);
        assert!(!f.is_fresh());
    }

    #[test]
    fn operator_defaults_cap_errors() {
        let f = fields(&[]);
        let s = Settings {
            default_ttl: Some(3600),
            ..settings()
        };
        assert_eq!(Freshness::of(&resp(200, &f), &s, NOW).lifetime, 3600);
        assert_eq!(
            Freshness::of(&resp(404, &f), &s, NOW).lifetime,
            NEGATIVE_TTL_SECS
        );
    }

    #[test]
    fn misses() {
        assert_eq!(decide_miss(&rc("")), Miss::Fetch);
        assert_eq!(decide_miss(&rc("no-store")), Miss::Uncached);
        assert_eq!(
            decide_miss(&rc("only-if-cached, no-store")),
            Miss::GatewayTimeout
        );
    }

    // ---- stored fields ----

    #[test]
    fn stored_fields_drop_hop_by_hop_and_gain_a_date() {
        let f = fields(&[
            ("Connection", "x-a"),
            ("X-A", "1"),
            ("ETag", "\"e\""),
            ("Keep-Alive", "5"),
        ]);
        let stored = to_store(&f, NOW);
        assert_eq!(
            stored,
            fields(&[("ETag", "\"e\""), ("Date", "Sun, 06 Nov 1994 08:49:37 GMT")])
        );
        let dated = fields(&[("Date", "Sun, 06 Nov 1994 08:00:00 GMT")]);
        assert_eq!(to_store(&dated, NOW), dated);
    }

    #[test]
    fn a_304_freshens_all_but_the_body_framing() {
        let stored = fields(&[
            ("Content-Type", "video/mp4"),
            ("Content-Length", "10"),
            ("Cache-Control", "max-age=1"),
            ("X-Old", "1"),
            ("Age", "50"),
            ("Date", "Sun, 06 Nov 1994 08:00:00 GMT"),
            ("ETag", "\"e\""),
        ]);
        let update = fields(&[
            ("Cache-Control", "max-age=60"),
            ("Content-Length", "0"),
            ("X-New", "2"),
            ("ETag", "\"e\""),
            ("Connection", "close"),
        ]);
        let got = freshen(&stored, &update, NOW, &[]);
        assert!(got.personal.is_empty());
        assert_eq!(
            got.stored,
            fields(&[
                ("Content-Type", "video/mp4"),
                ("Content-Length", "10"),
                ("X-Old", "1"),
                ("Cache-Control", "max-age=60"),
                ("X-New", "2"),
                ("ETag", "\"e\""),
                ("Date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ])
        );
    }

    #[test]
    fn a_304_never_stores_a_cookie_it_may_not_share() {
        // Guards against the 304's Set-Cookie being stored and replayed to every later
        // client (it was: one client's session to all).
        let stored = fields(&[("Cache-Control", "max-age=1"), ("ETag", "\"e\"")]);
        let update = fields(&[
            ("Cache-Control", "max-age=60"),
            ("Set-Cookie", "s=1; Path=/"),
            ("Set-Cookie", "t=2"),
        ]);
        let got = freshen(&stored, &update, NOW, &[]);
        assert!(!got.stored.iter().any(|(n, _)| n == b"Set-Cookie"));
        assert_eq!(got.personal, vec![b"s=1; Path=/".to_vec(), b"t=2".to_vec()]);
        // A stored shareable cookie loses its standing when the 304 takes `public` away.
        let stored = fields(&[
            ("Cache-Control", "public, max-age=1"),
            ("Set-Cookie", "old=1"),
        ]);
        let got = freshen(
            &stored,
            &fields(&[("Cache-Control", "max-age=60")]),
            NOW,
            &[],
        );
        assert!(!got.stored.iter().any(|(n, _)| n == b"Set-Cookie"));
        assert!(got.personal.is_empty());
        // Shared explicitly (as `admit` allows): stored, replacing the old one (§3.2).
        for cc in ["public, max-age=60", "s-maxage=60"] {
            let stored = fields(&[("Cache-Control", "max-age=1"), ("Set-Cookie", "old=1")]);
            let update = fields(&[("Cache-Control", cc), ("Set-Cookie", "new=2")]);
            let got = freshen(&stored, &update, NOW, &[]);
            let cookies: Vec<&[u8]> = got
                .stored
                .iter()
                .filter(|(n, _)| n == b"Set-Cookie")
                .map(|(_, v)| v.as_slice())
                .collect();
            assert_eq!(cookies, vec![&b"new=2"[..]], "{cc}");
            assert!(got.personal.is_empty(), "{cc}");
        }
        // A targeted field governs, as it does for `admit`.
        let targets = [b"cdn-cache-control".to_vec()];
        let update = fields(&[
            ("Cache-Control", "public, max-age=60"),
            ("CDN-Cache-Control", "max-age=60"),
            ("Set-Cookie", "s=1"),
        ]);
        let got = freshen(&stored_plain(), &update, NOW, &targets);
        assert_eq!(got.personal, vec![b"s=1".to_vec()]);
    }

    fn stored_plain() -> Vec<(Vec<u8>, Vec<u8>)> {
        fields(&[("Cache-Control", "max-age=1"), ("ETag", "\"e\"")])
    }

    // ---- the model is total ----

    fn header_strategy() -> impl Strategy<Value = Vec<(String, String)>> {
        let name = prop_oneof![
            Just("Cache-Control".to_owned()),
            Just("CDN-Cache-Control".to_owned()),
            Just("Expires".to_owned()),
            Just("Age".to_owned()),
            Just("Date".to_owned()),
            Just("Last-Modified".to_owned()),
            Just("ETag".to_owned()),
            Just("Vary".to_owned()),
            Just("Set-Cookie".to_owned()),
        ];
        let value = prop_oneof![
            Just("max-age=60".to_owned()),
            Just("no-store".to_owned()),
            Just("no-cache".to_owned()),
            Just("private".to_owned()),
            Just("public, s-maxage=5".to_owned()),
            Just("must-revalidate".to_owned()),
            Just("stale-while-revalidate=30".to_owned()),
            Just("7200, 0".to_owned()),
            Just("Sun, 06 Nov 1994 08:49:37 GMT".to_owned()),
            Just("*".to_owned()),
            "[ -~]{0,20}",
        ];
        proptest::collection::vec((name, value), 0..8)
    }

    proptest! {
        #[test]
        fn admit_and_decide_never_panic_and_agree(
            list in header_strategy(),
            status in prop_oneof![Just(200u16), Just(404), Just(206), Just(302), Just(500), 100u16..600],
            later_s in 0u64..100_000,
            request in "[ -~]{0,30}",
        ) {
            let f: Vec<(Vec<u8>, Vec<u8>)> = list.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
            let r = resp(status, &f);
            let admitted = admit(&get(), &r, false, &settings(), NOW);
            let fr = Freshness::of(&r, &settings(), NOW + later_s * 1000);
            let d = decide(&RequestCacheControl::parse([request.as_bytes()], None), &fr);
            // A response that is not fresh is never served as fresh.
            if d == Decision::Fresh {
                prop_assert!(fr.is_fresh());
            }
            // Nothing admitted ever carries no-store or private in its governing directives.
            if admitted.is_ok() {
                prop_assert!(!fr.control.directives.no_store && !fr.control.directives.private);
            }
        }
    }
}
