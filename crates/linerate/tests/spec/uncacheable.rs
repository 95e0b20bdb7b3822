//! Responses a shared cache must not store (RFC 9111 §3, §5.2.2.5, §5.2.2.7, §3.5;
//! RFC 9110 §15.1) are relayed: N client requests cost exactly N origin requests —
//! never a second origin fetch to relay the first — and every client gets the whole
//! body. With slicing on against an origin that honours `Range`, a `200` larger than
//! one slice costs one extra ranged request the first time (the cache asked for the
//! first slice before it knew the response was not storable); every later request
//! costs exactly one (hit-for-pass, or an error's whole answer handed over).

use crate::common::{assert_response, first_relay_cost, BIG};
use crate::matrix;
use crate::support::content;
use crate::support::kit::Variant;
use crate::support::origin::{self, Reply};

/// Three GETs of `path` on a cache in front of an origin that answers every request
/// with `status`, `headers` and a body of `len` bytes; asserts the relay counts above.
fn relays_every_time(
    v: Variant,
    status: u16,
    headers: &'static [(&'static str, &'static str)],
    len: usize,
) {
    let body = content(len, len as u64 + u64::from(status));
    let b = body.clone();
    let origin = v.origin(move |_| Reply::Full {
        status,
        headers: origin::owned(headers),
        body: b.clone(),
        chunked: false,
    });
    let cache = v.start(&origin);
    let first = cache.get("/u", &[]);
    assert_response(&first, status, &body);
    let after_first = origin.count("/u");
    assert_eq!(
        after_first,
        first_relay_cost(v, status, len),
        "origin requests for the first client request"
    );
    for i in 1..=2 {
        let r = cache.get("/u", &[]);
        assert_response(&r, status, &body);
        assert_eq!(
            origin.count("/u"),
            after_first + i,
            "each later client request costs exactly one origin request"
        );
    }
}

matrix! {
    /// RFC 9111 §5.2.2.5 `no-store`: never stored, so every request is relayed, a small body.
    fn no_store_small(v) {
        relays_every_time(v, 200, &[("Cache-Control", "no-store")], 1000);
    }

    /// RFC 9111 §5.2.2.5 `no-store`, a body of several slices.
    fn no_store_large(v) {
        relays_every_time(v, 200, &[("Cache-Control", "no-store")], BIG);
    }

    /// RFC 9111 §5.2.2.7 `private`: a shared cache MUST NOT store it, a small body.
    fn private_small(v) {
        relays_every_time(v, 200, &[("Cache-Control", "private, max-age=3600")], 1000);
    }

    /// RFC 9111 §5.2.2.7 `private`, a body of several slices.
    fn private_large(v) {
        relays_every_time(v, 200, &[("Cache-Control", "private, max-age=3600")], BIG);
    }

    /// RFC 9111 §3 / §4.2: no explicit freshness, no `Last-Modified`, no validator: stale
    /// at once and useless to store (linerate stores it only with a validator).
    fn no_freshness_no_validator_small(v) {
        relays_every_time(v, 200, &[], 1000);
    }

    /// The same, a body of several slices.
    fn no_freshness_no_validator_large(v) {
        relays_every_time(v, 200, &[], BIG);
    }

    /// RFC 9110 §15.1 / RFC 9111 §3: 201 is not heuristically cacheable; without
    /// explicit freshness it is not stored.
    fn status_201_without_freshness(v) {
        relays_every_time(v, 201, &[("Location", "/new")], 1000);
    }

    /// RFC 9110 §15.1: 403 is not heuristically cacheable, even with `Last-Modified`;
    /// small and several-slice bodies.
    fn status_403_without_freshness(v) {
        relays_every_time(v, 403, &[("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")], 1000);
    }

    /// RFC 9110 §15.1: 403, a body of several slices.
    fn status_403_without_freshness_large(v) {
        relays_every_time(v, 403, &[("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")], BIG);
    }

    /// RFC 9110 §15.1: 500 is not heuristically cacheable.
    fn status_500(v) {
        relays_every_time(v, 500, &[], 1000);
    }

    /// RFC 9110 §15.1: 503 is not heuristically cacheable (here with a `Retry-After`).
    fn status_503(v) {
        relays_every_time(v, 503, &[("Retry-After", "1")], 1000);
    }

    /// RFC 9110 §15.1: 502 with a body of several slices.
    fn status_502_large(v) {
        relays_every_time(v, 502, &[], BIG);
    }

    /// linerate's choice: `Set-Cookie` without `public`/`s-maxage` is not stored.
    fn set_cookie_large(v) {
        relays_every_time(v, 200, &[("Cache-Control", "max-age=3600"), ("Set-Cookie", "id=1")], BIG);
    }
}
