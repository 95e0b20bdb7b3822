//! GET and HEAD in cache mode: look the request up, decide, and serve, revalidate or
//! fill.
//!
//! ```text
//! resolve: primary key ─ Vary stub? ─► variant key
//!   hit        ─► decide (RFC 9111 §4): fresh / stale accepted ─► serve
//!                                        stale-while-revalidate ─► serve + refresh
//!                                        revalidate ─► follow a fill (conditional)
//!                                        only-if-cached ─► 504
//!   in flight  ─► serve it as it is written (collapsed)
//!   miss       ─► only-if-cached ─► 504; request no-store ─► relay
//!                 remembered uncacheable ─► relay
//!                 sliced route ─► slices; else follow a fill
//! follow: claim the key (leader: spawn the fill) and wait for its phase:
//!   writing / stored / elsewhere ─► resolve again and serve what is there
//!   revalidated ─► serve the freshened copy
//!   uncacheable ─► the leader relays the fill's response; others relay their own
//!   failed ─► stale-if-error / 504 (must-revalidate) / the error
//! ```
//!
//! The judging of a lookup and the following of a fill are `round`'s, shared with
//! `slices`. Not here: the caching rules (`linerate_http::cache::policy`), the fill's
//! I/O (`fill`), response heads (`head`).

use std::rc::Rc;
use std::sync::Arc;

use std::ops::ControlFlow;

use linerate_cache::{Lookup, ObjectMeta};
use linerate_http::cache::{decide_miss, CachePhase, CacheStatus, Freshness, Fwd, Miss, OnError};
use linerate_http::StatusCode;

use super::fill::{self, Handoff, Job};
use super::fills::{FillGuard, Phase};
use super::relay::relay;
use super::request::CacheRequest;
use super::round::{self, Judged};
use super::shared::{ProxyShared, ProxyWorker, VARY_STUB};
use super::{head, slices};
use crate::context::Worker;
use crate::exchange::Interim;
use crate::response::Response;

/// Lookups per request before giving up (a fill that ended but left nothing to find,
/// several times over).
const MAX_ROUNDS: usize = 6;

/// What a request's key resolves to in the store.
pub(crate) struct Found {
    /// The key of the object the request selects: the primary key, or a variant's.
    pub(crate) base: Vec<u8>,
    /// Whether `base` is a variant (the URL has a `Vary` stub).
    pub(crate) variant: bool,
    /// What the store has under `base`.
    pub(crate) lookup: Lookup,
}

/// Look the request up: the primary key, then, for a `Vary` stub, the variant the
/// request's fields select (RFC 9111 §4.1). `latest`: an object being written wins over
/// a stored one (after this request's own fill, which may be replacing a stale copy).
pub(crate) async fn resolve(px: &Arc<ProxyShared>, req: &CacheRequest<'_>, latest: bool) -> Found {
    let found = super::shared::lookup(px, &req.key, latest).await;
    if let Lookup::Hit(h) | Lookup::Filling(h) = &found {
        if let Some(names) = h.meta.header(VARY_STUB) {
            let base = req.variant_key(names);
            let lookup = super::shared::lookup(px, &base, latest).await;
            return Found {
                base,
                variant: true,
                lookup,
            };
        }
    }
    Found {
        base: req.key.clone(),
        variant: false,
        lookup: found,
    }
}

/// The freshness of a stored response for `req`, now.
pub(crate) fn freshness(px: &ProxyShared, req: &CacheRequest<'_>, meta: &ObjectMeta) -> Freshness {
    px.freshness(req.route, &req.target, meta)
}

/// Answer a GET or HEAD.
pub(crate) async fn get(
    worker: &Rc<Worker>,
    pw: &Rc<ProxyWorker>,
    req: &CacheRequest<'_>,
    interim: &mut Interim<'_>,
) -> Response {
    let px = &pw.shared;
    let mut st = CacheStatus::default();
    // Set once this request has been forward (its own fill, or one it followed): what
    // that stored is the answer, however short its freshness.
    let mut forwarded = false;
    for _ in 0..MAX_ROUNDS {
        let found = resolve(px, req, forwarded).await;
        let judged = round::judge(found.lookup, &req.cc, forwarded, |m| freshness(px, req, m));
        let (h, fresh, on_error) = match judged {
            // Stored, or being written by another request's fill (its head arrived
            // before this request, which the store answers as it is written: RFC 9211
            // §2.1).
            Judged::Use {
                h,
                fresh,
                swr,
                writing: _,
            } => {
                if swr {
                    // Refreshed in the background (once a write in progress is over).
                    fill::revalidate_in_background(pw, req, &found.base, &h.meta);
                    st.detail = Some("stale-while-revalidate");
                }
                round::served(&mut st, forwarded, h.meta.status, swr);
                return head::serve(worker, req, h, &fresh, st);
            }
            Judged::GatewayTimeout => {
                return head::error(
                    worker,
                    req,
                    StatusCode::GatewayTimeout,
                    st,
                    "only-if-cached",
                );
            }
            Judged::Writing => {
                if req.cc.only_if_cached {
                    return head::error(
                        worker,
                        req,
                        StatusCode::GatewayTimeout,
                        st,
                        "only-if-cached",
                    );
                }
                // Wait for that fill to end, then decide on what it stored.
                round::wait_for_writer(pw, &found.base).await;
                forwarded = false;
                continue;
            }
            Judged::Revalidate { h, fresh, on_error } => (h, fresh, on_error),
            Judged::Miss => {
                match miss(
                    worker,
                    pw,
                    req,
                    (&found.base, found.variant),
                    &mut st,
                    forwarded,
                    interim,
                )
                .await
                {
                    ControlFlow::Break(response) => return response,
                    ControlFlow::Continue(f) => {
                        forwarded = f;
                        continue;
                    }
                }
            }
        };
        // RFC 9211 §2.2: `request` when the request's directives forbade using a fresh
        // response, `stale` when it was stale.
        st.forward(if fresh.is_fresh() && !fresh.control.directives.no_cache {
            Fwd::Request
        } else {
            Fwd::Stale
        });
        let (phase, handoff) = round::follow(
            pw,
            &found.base,
            whole_job(px, req, &found.base, Some(&h.meta)),
            &mut st,
            forwarded,
            Some(&mut *interim),
        )
        .await;
        match phase {
            Phase::Revalidated => {
                st.fwd_status = Some(304);
                st.phase = CachePhase::Hit;
                // The freshened copy (or, if the update failed, this one).
                let h = match resolve(px, req, false).await.lookup {
                    Lookup::Hit(h2) => h2,
                    _ => h,
                };
                let fresh = freshness(px, req, &h.meta);
                // This request's own fill: the cookies the 304 set for it.
                let cookies = match handoff {
                    Some(Handoff::Cookies(c)) => c,
                    _ => Vec::new(),
                };
                return head::serve_with_cookies(worker, req, h, &fresh, st, &cookies);
            }
            Phase::Failed(f) => {
                st.fill_failed(f.fwd_status);
                return match on_error {
                    OnError::ServeStored if f.stale_ok => {
                        st.detail = Some(f.detail);
                        st.phase = CachePhase::Stale;
                        head::serve(worker, req, h, &fresh, st)
                    }
                    OnError::GatewayTimeout => head::error(
                        worker,
                        req,
                        StatusCode::GatewayTimeout,
                        st,
                        "must-revalidate",
                    ),
                    _ => head::error(worker, req, f.status, st, f.detail),
                };
            }
            other => match after_fill(worker, pw, req, other, handoff, &mut st, interim).await {
                ControlFlow::Break(response) => return response,
                ControlFlow::Continue(f) => forwarded = f,
            },
        }
    }
    head::error(worker, req, StatusCode::BadGateway, st, "fill_lost")
}

/// Nothing stored under `base` (`variant`: a variant's key) for the request: relay
/// it, serve it in slices, or follow a fill.
/// `Continue(forwarded)`: look the key up again (see [`after_fill`]).
async fn miss(
    worker: &Rc<Worker>,
    pw: &Rc<ProxyWorker>,
    req: &CacheRequest<'_>,
    (base, variant): (&[u8], bool),
    st: &mut CacheStatus,
    forwarded: bool,
    interim: &mut Interim<'_>,
) -> ControlFlow<Response, bool> {
    let px = &pw.shared;
    let sliced = px.routes[req.route].opts.slice_bytes > 0;
    match decide_miss(&req.cc) {
        Miss::Fetch => {}
        // RFC 9111 §5.2.1.7: only-if-cached wants a stored response, and on a sliced
        // route that is the slices asked for, each looked up (and answered 504 there
        // when missing): the base key is never stored.
        Miss::GatewayTimeout if sliced && !px.is_pass(&req.key) => {}
        Miss::GatewayTimeout => {
            return ControlFlow::Break(head::error(
                worker,
                req,
                StatusCode::GatewayTimeout,
                st.clone(),
                "only-if-cached",
            ));
        }
        // RFC 9111 §5.2.1.5: nothing of this exchange may be stored.
        Miss::Uncached => {
            st.forward(Fwd::Request);
            st.detail = Some("request no-store");
            return ControlFlow::Break(relay(worker, pw, req, interim, st.clone()).await);
        }
    }
    if px.is_pass(&req.key) {
        st.forward(Fwd::Bypass);
        st.detail = Some("uncacheable");
        return ControlFlow::Break(relay(worker, pw, req, interim, st.clone()).await);
    }
    let why = if variant { Fwd::VaryMiss } else { Fwd::UriMiss };
    if sliced {
        // Slices are looked up (and, where missing, fetched) one by one; a request
        // whose slices are all stored is a hit.
        let slices_base = slices::Base {
            key: base,
            miss: why,
        };
        return match slices::serve(worker, pw, req, slices_base, st.clone(), interim).await {
            Ok(response) => ControlFlow::Break(response),
            // Stored whole or as another variant: resolve again.
            Err(t) => {
                *st = t;
                ControlFlow::Continue(true)
            }
        };
    }
    st.forward(why);
    let (phase, handoff) = round::follow(
        pw,
        base,
        whole_job(px, req, base, None),
        st,
        forwarded,
        Some(&mut *interim),
    )
    .await;
    if let Phase::Failed(f) = phase {
        st.fill_failed(f.fwd_status);
        return ControlFlow::Break(head::error(worker, req, f.status, st.clone(), f.detail));
    }
    after_fill(worker, pw, req, phase, handoff, st, interim).await
}

/// The fill of the object under `key` for `req`; `stale`: the stored copy's metadata,
/// to revalidate it. Built only when this request leads the fill (a follower pays for
/// no copy of the request).
fn whole_job<'a>(
    px: &'a Arc<ProxyShared>,
    req: &'a CacheRequest<'_>,
    key: &'a [u8],
    stale: Option<&'a ObjectMeta>,
) -> impl FnOnce(FillGuard) -> Job + 'a {
    move |guard| Job {
        px: Arc::clone(px),
        guard,
        fetch: Rc::new(req.fetch()),
        base: key.to_vec(),
        stale: stale.cloned(),
        slice: None,
        handoff: None,
        interim: None,
    }
}

/// What a followed fill's `phase` means for this request, unless it failed or
/// revalidated (the callers handle those): `Break` answers; `Continue(forwarded)`
/// looks the key up again, `forwarded` when what is stored now is this request's
/// answer (the fill answered it), whatever its freshness.
async fn after_fill(
    worker: &Rc<Worker>,
    pw: &Rc<ProxyWorker>,
    req: &CacheRequest<'_>,
    phase: Phase,
    handoff: Option<Handoff>,
    st: &mut CacheStatus,
    interim: &mut Interim<'_>,
) -> ControlFlow<Response, bool> {
    match phase {
        Phase::Writing | Phase::Stored | Phase::Elsewhere => {
            st.stored = true;
            ControlFlow::Continue(true)
        }
        Phase::Revalidated => ControlFlow::Continue(true),
        // Not an answer to this request (see `round::follow`).
        Phase::Pending => ControlFlow::Continue(false),
        Phase::Uncacheable => {
            st.forward(Fwd::Bypass);
            st.detail = Some("uncacheable");
            ControlFlow::Break(match handoff {
                Some(Handoff::Relay { response, shape }) => {
                    head::relayed(worker, req, *response, st.clone(), shape)
                }
                // Delivered in full to its followers, then not kept.
                Some(Handoff::Writing(h)) => {
                    st.fwd_status = Some(h.meta.status);
                    st.phase = CachePhase::Pass;
                    let fresh = freshness(&pw.shared, req, &h.meta);
                    head::serve(worker, req, h, &fresh, st.clone())
                }
                // Cookies come with a 304 (a revalidation), never with this.
                Some(Handoff::Cookies(_) | Handoff::Part(_)) | None => {
                    relay(worker, pw, req, interim, st.clone()).await
                }
            })
        }
        Phase::Failed(f) => {
            st.fill_failed(f.fwd_status);
            ControlFlow::Break(head::error(worker, req, f.status, st.clone(), f.detail))
        }
    }
}
