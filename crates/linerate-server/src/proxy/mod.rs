//! Cache mode: answer a request from the store, or fetch it from an origin once and
//! stream it to every client that asked meanwhile (see docs/request-flow.md).
//!
//! The pipeline, one stage per module, each importing only the ones listed after it:
//! - here: [`respond`], which normalises the target (`linerate_http::path`), then
//!   routes and keys it once ([`request::CacheRequest`]) and sends GET/HEAD to `flow`, everything else to the
//!   origin uncached (`relay`), invalidating after unsafe methods;
//! - `flow`: GET and HEAD: look up (through a `Vary` stub to the variant), decide with
//!   `linerate_http::cache::decide`, serve, revalidate or fill;
//! - `round`: one round of the hit/miss loop `flow` and `slices` share (judge a lookup,
//!   follow a fill);
//! - `fills`: one fill per key across all workers, and the [`fills::Phase`] every
//!   follower reads;
//! - `fill`: one fill's I/O: the origin request, the storing decision
//!   (`linerate_http::cache::admit`), the store write;
//! - `peer`: in a cluster, where a fill's request goes (the key's owner, or the
//!   origin) and how a peer body broken off is continued;
//! - `prefetch`: HLS segments fetched ahead of the clients, as fills (its memory:
//!   `ahead`);
//! - `slices`: large objects in fixed-size slices fetched with `Range`;
//! - `relay`: the client's own request to the origin, uncached;
//! - `head` and `body`: the response head and body a client gets;
//! - `request`: the request as cache mode reads it (what was done with it is one
//!   `linerate_http::cache::CacheStatus`: its phase and `Cache-Status` facts);
//! - `shared`: start-up state ([`ProxyShared`]: store, origins, routes and their
//!   caching settings, hit-for-pass memory, purges) and each worker's pools.
//!
//! Every caching rule lives in `linerate_http::cache` (pure, unit- and property-tested);
//! this module does I/O with its answers.

mod ahead;
pub(crate) mod body;
mod fill;
pub(crate) mod fills;
mod flow;
mod head;
mod peer;
mod prefetch;
mod relay;
mod request;
mod round;
mod shared;
pub(crate) mod slices;

use std::rc::Rc;
use std::sync::Arc;

use linerate_http::cache::key::{self, Scheme};
use linerate_http::cache::{CacheStatus, Fwd, RequestCacheControl};
use linerate_http::{path, Method, Persistence, StatusCode};

use crate::context::Worker;
use crate::response::Response;
pub(crate) use ahead::Counts as PrefetchCounts;
#[cfg(test)]
pub(crate) use ahead::RouteCounts as PrefetchRouteCounts;
use request::CacheRequest;
pub(crate) use shared::{ProxyShared, ProxyWorker, VARY_STUB};

/// Answer one request in cache mode.
pub(crate) async fn respond(
    worker: &Rc<Worker>,
    pw: &Rc<ProxyWorker>,
    request: crate::exchange::Request<'_>,
) -> Response {
    let px = &pw.shared;
    let crate::exchange::Request {
        head,
        body,
        peer,
        secure,
        http2,
        mut interim,
    } = request;
    let persistence = if worker.stopping() {
        Persistence::Close
    } else {
        head.persistence
    };
    if head.method == Method::Connect {
        return crate::response::error(worker, StatusCode::MethodNotAllowed, persistence);
    }
    // One form of the target for routing, keying and forwarding: a route's prefix is
    // matched against the very path the origin receives, which has no dot segment left
    // to climb out of it with (`path::normalize_proxy_target`). `OPTIONS *` asks about
    // the server, which this cache does not relay: `bad_form`, as other refusals, 400.
    let target = match path::normalize_proxy_target(head.target) {
        Ok(t) => t,
        Err(e) => return crate::response::refused(worker, e.into(), persistence),
    };
    // RFC 9112 §3.2: an HTTP/1.0 request may lack Host; it is keyed under an empty host.
    let host = key::host_of(head.authority().unwrap_or(b""));
    let Some(route) = px.route_for(&host, target.path()) else {
        return crate::response::error(worker, StatusCode::NotFound, persistence);
    };
    // A route's `key_host` is the host its objects are keyed, fetched and forwarded
    // under (`X-Forwarded-Host`, peers), not only keyed: an object stored for every
    // name of the route is the one the origin answered for `key_host`, whatever name a
    // client sent (another tenant's, on an origin that tells hosts apart).
    let host = match &px.routes[route].opts.key_host {
        Some(h) => h.as_bytes().to_vec(),
        None => host,
    };
    // A peer's request carries a `Linerate-Peer` field with a valid MAC (or, in the
    // transition, unsigned from a listed peer address). Any other such field is
    // ignored (counted and logged by the cluster) and never forwarded (`forwarded`):
    // without `[cluster]` no request is a peer's.
    let from_peer = px.cluster.as_ref().is_some_and(|c| c.admit(head, peer));
    // A peer asks in absolute form with the scheme its own client used (peers talk
    // plain HTTP): an authenticated peer's `https://` is keyed and forwarded as https,
    // so the owner stores the object under the key the asking node looks it up by, and
    // the origin sees the client's `X-Forwarded-Proto`. A client's scheme is its
    // listener's, whatever its target says.
    let scheme = if secure
        || (from_peer
            && head
                .target
                .get(..8)
                .is_some_and(|s| s.eq_ignore_ascii_case(b"https://")))
    {
        Scheme::Https
    } else {
        Scheme::Http
    };
    // A peer's `only-if-cached` (the previous-owner ask) is obeyed even when clients'
    // directives are not: peers are configured, clients are not.
    let cc = if px.opts.honour_request_cache_control || from_peer {
        RequestCacheControl::parse(head.values(b"cache-control"), head.field(b"pragma"))
    } else {
        RequestCacheControl::default()
    };
    let req = CacheRequest {
        px,
        head,
        route,
        key: px.key_on(route, scheme, &host, &target),
        target: target.into_bytes(),
        host,
        scheme,
        peer,
        cc,
        persistence,
        head_only: head.method == Method::Head,
        from_peer,
        http2,
    };
    match head.method {
        Method::Get | Method::Head => {
            let response = flow::get(worker, pw, &req, &mut interim).await;
            prefetch::after_get(pw, &req, &response);
            response
        }
        _ => {
            let sent = relay::send(pw, &req, &body, &mut interim).await;
            let mut trace = CacheStatus::default();
            trace.forward(Fwd::Bypass);
            let response = match sent {
                Ok(r) => {
                    // RFC 9111 §4.4: a non-error response to an unsafe method (one not
                    // known to be safe) invalidates the target URI, and MAY invalidate
                    // the URIs in Location and Content-Location when they have the same
                    // host. Blocking journal writes: off the event loop.
                    if !head.method.is_safe() && r.head.status < 400 {
                        invalidate_after(px, &req, &r.head.headers).await;
                    }
                    head::relayed(worker, &req, r, trace, head::Shape::AsIs)
                }
                Err(e) => head::error(worker, &req, e.status(), trace, e.as_str()),
            };
            response
        }
    }
}

/// Invalidate the target of an unsafe request and its same-host `Location` and
/// `Content-Location` (RFC 9111 §4.4).
async fn invalidate_after(
    px: &Arc<ProxyShared>,
    req: &CacheRequest<'_>,
    response_fields: &[(Vec<u8>, Vec<u8>)],
) {
    let mut keys = vec![(req.key.clone(), req.route)];
    for (name, value) in response_fields {
        let named = name.eq_ignore_ascii_case(b"location")
            || name.eq_ignore_ascii_case(b"content-location");
        if let Some(k) = named
            .then(|| px.same_host_key(req.scheme, &req.host, value))
            .flatten()
        {
            keys.push(k);
        }
    }
    let shared = Arc::clone(px);
    let keys: Vec<(Vec<u8>, u64)> = keys
        .into_iter()
        .map(|(k, r)| (k, px.routes[r].opts.slice_bytes))
        .collect();
    let purge = tokio::task::spawn_blocking(move || {
        for (k, slice_bytes) in keys {
            shared.invalidate(&k, slice_bytes);
        }
    });
    let _ = purge.await;
}
