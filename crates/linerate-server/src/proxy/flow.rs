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
//! Not here: the caching rules (`linerate_http::cache::policy`), the fill's I/O
//! (`fill`), response heads (`head`).

use std::rc::Rc;
use std::sync::Arc;

use linerate_cache::{Lookup, ObjectMeta};
use linerate_http::cache::{decide, decide_miss, Decision, Freshness, Fwd, Miss, OnError};
use linerate_http::StatusCode;

use super::fill::{self, Handoff, Job};
use super::fills::{self, Claim, Phase};
use super::relay::relay;
use super::request::{CacheRequest, Trace};
use super::shared::{ProxyShared, ProxyWorker, VARY_STUB};
use super::{head, slices};
use crate::context::Worker;
use crate::exchange::Interim;
use crate::response::Response;
use crate::stats::CacheStatus;

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
pub(crate) fn resolve(px: &ProxyShared, req: &CacheRequest<'_>, latest: bool) -> Found {
    let find = |k: &[u8]| {
        if latest {
            px.store.lookup_latest(k)
        } else {
            px.store.lookup(k)
        }
    };
    let found = find(&req.key);
    if let Lookup::Hit(h) | Lookup::Filling(h) = &found {
        if let Some(names) = h.meta.header(VARY_STUB) {
            let base = req.variant_key(names);
            let lookup = find(&base);
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
    let mut trace = Trace::default();
    // Set once this request has been forward (its own fill, or one it followed): what
    // that stored is the answer, however short its freshness.
    let mut forwarded = false;
    for _ in 0..MAX_ROUNDS {
        let found = resolve(px, req, forwarded);
        match found.lookup {
            Lookup::Hit(h) => {
                let fresh = freshness(px, req, &h.meta);
                let decision = if forwarded {
                    Decision::Fresh
                } else {
                    decide(&req.cc, &fresh)
                };
                let on_error = match decision {
                    Decision::Fresh | Decision::StaleAccepted => {
                        let metric = if trace.fwd.is_none() {
                            CacheStatus::Hit
                        } else {
                            CacheStatus::Miss
                        };
                        if forwarded {
                            // RFC 9211 §2.3: the status the next hop answered with.
                            trace.fwd_status.get_or_insert(h.meta.status);
                        }
                        return head::serve(worker, req, h, &fresh, trace, metric);
                    }
                    Decision::StaleWhileRevalidate => {
                        fill::revalidate_in_background(pw, req, &found.base, &h.meta);
                        trace.detail = Some("stale-while-revalidate");
                        return head::serve(worker, req, h, &fresh, trace, CacheStatus::Stale);
                    }
                    Decision::GatewayTimeout => {
                        return head::error(
                            worker,
                            req,
                            StatusCode::GatewayTimeout,
                            trace,
                            "only-if-cached",
                        );
                    }
                    Decision::Revalidate(on_error) => on_error,
                };
                // RFC 9211 §2.2: `request` when the request's directives forbade using
                // a fresh response, `stale` when it was stale.
                trace.forward(if fresh.is_fresh() && !fresh.control.directives.no_cache {
                    Fwd::Request
                } else {
                    Fwd::Stale
                });
                let (phase, handoff) = follow(
                    pw,
                    req,
                    &found.base,
                    Some(&h.meta),
                    &mut trace,
                    forwarded,
                    interim,
                )
                .await;
                match phase {
                    Phase::Revalidated => {
                        trace.fwd_status = Some(304);
                        // The freshened copy (or, if the update failed, this one).
                        let h = match resolve(px, req, false).lookup {
                            Lookup::Hit(h2) => h2,
                            _ => h,
                        };
                        let fresh = freshness(px, req, &h.meta);
                        // This request's own fill: the cookies the 304 set for it.
                        let cookies = match handoff {
                            Some(Handoff::Cookies(c)) => c,
                            _ => Vec::new(),
                        };
                        return head::serve_with_cookies(
                            worker,
                            req,
                            h,
                            &fresh,
                            trace,
                            CacheStatus::Hit,
                            &cookies,
                        );
                    }
                    Phase::Failed(f) => {
                        trace.fill_failed(&f);
                        return match on_error {
                            OnError::ServeStored if f.stale_ok => {
                                trace.detail = Some(f.detail);
                                head::serve(worker, req, h, &fresh, trace, CacheStatus::Stale)
                            }
                            OnError::GatewayTimeout => head::error(
                                worker,
                                req,
                                StatusCode::GatewayTimeout,
                                trace,
                                "must-revalidate",
                            ),
                            _ => head::error(worker, req, f.status, trace, f.detail),
                        };
                    }
                    other => match after_fill(worker, pw, req, other, handoff, &mut trace, interim)
                        .await
                    {
                        Next::Answer(response) => return response,
                        Next::Lookup { forwarded: f } => forwarded = f,
                    },
                }
            }
            Lookup::Filling(h) => {
                // Being written by another request's fill. Whether this request may use
                // it is decided as for a stored response (it may need validation, or
                // the response may have been stale on arrival).
                let fresh = freshness(px, req, &h.meta);
                let decision = if forwarded {
                    Decision::Fresh
                } else {
                    decide(&req.cc, &fresh)
                };
                if !decision.is_hit() {
                    if req.cc.only_if_cached {
                        return head::error(
                            worker,
                            req,
                            StatusCode::GatewayTimeout,
                            trace,
                            "only-if-cached",
                        );
                    }
                    // Wait for that fill to end, then decide on what it stored.
                    if let Some(mut rx) = px.fills.watch(&found.base) {
                        fills::finished(&mut rx).await;
                    }
                    forwarded = false;
                    continue;
                }
                if !forwarded {
                    // Its head arrived before this request: this request was not
                    // forwarded, the store answers it as it is written (RFC 9211 §2.1).
                    let mut metric = if trace.fwd.is_none() {
                        CacheStatus::Hit
                    } else {
                        CacheStatus::Miss
                    };
                    if decision == Decision::StaleWhileRevalidate {
                        // Refreshed once the write in progress is over.
                        fill::revalidate_in_background(pw, req, &found.base, &h.meta);
                        trace.detail = Some("stale-while-revalidate");
                        metric = CacheStatus::Stale;
                    }
                    return head::serve(worker, req, h, &fresh, trace, metric);
                }
                trace.fwd_status.get_or_insert(h.meta.status);
                return head::serve(worker, req, h, &fresh, trace, CacheStatus::Miss);
            }
            Lookup::Miss(_) => {
                let sliced = px.routes[req.route].opts.slice_bytes > 0;
                match decide_miss(&req.cc) {
                    Miss::Fetch => {}
                    // RFC 9111 §5.2.1.7: only-if-cached wants a stored response, and on a
                    // sliced route that is the slices asked for, each looked up (and
                    // answered 504 there when missing): the base key is never stored.
                    Miss::GatewayTimeout if sliced && !px.is_pass(&req.key) => {}
                    Miss::GatewayTimeout => {
                        return head::error(
                            worker,
                            req,
                            StatusCode::GatewayTimeout,
                            trace,
                            "only-if-cached",
                        );
                    }
                    // RFC 9111 §5.2.1.5: nothing of this exchange may be stored.
                    Miss::Uncached => {
                        trace.forward(Fwd::Request);
                        trace.detail = Some("request no-store");
                        return relay(worker, pw, req, interim, trace).await;
                    }
                }
                if px.is_pass(&req.key) {
                    trace.forward(Fwd::Bypass);
                    trace.detail = Some("uncacheable");
                    return relay(worker, pw, req, interim, trace).await;
                }
                let miss = if found.variant {
                    Fwd::VaryMiss
                } else {
                    Fwd::UriMiss
                };
                if sliced {
                    // Slices are looked up (and, where missing, fetched) one by one; a
                    // request whose slices are all stored is a hit.
                    let base = slices::Base {
                        key: &found.base,
                        miss,
                    };
                    match slices::serve(worker, pw, req, base, trace, interim).await {
                        Ok(response) => return response,
                        // Stored whole or as another variant: resolve again.
                        Err(t) => {
                            trace = t;
                            forwarded = true;
                            continue;
                        }
                    }
                }
                trace.forward(miss);
                let (phase, handoff) =
                    follow(pw, req, &found.base, None, &mut trace, forwarded, interim).await;
                if let Phase::Failed(f) = phase {
                    trace.fill_failed(&f);
                    return head::error(worker, req, f.status, trace, f.detail);
                }
                match after_fill(worker, pw, req, phase, handoff, &mut trace, interim).await {
                    Next::Answer(response) => return response,
                    Next::Lookup { forwarded: f } => forwarded = f,
                }
            }
        }
    }
    head::error(worker, req, StatusCode::BadGateway, trace, "fill_lost")
}

/// What to do after following a fill.
enum Next {
    /// Answer with this.
    Answer(Response),
    /// Look the key up again; `forwarded`: what is stored now is this request's answer
    /// (the fill answered it), whatever its freshness.
    Lookup {
        /// Whether the fill answered this request.
        forwarded: bool,
    },
}

/// What a followed fill's `phase` means for this request, unless it failed or
/// revalidated (the callers handle those).
async fn after_fill(
    worker: &Rc<Worker>,
    pw: &Rc<ProxyWorker>,
    req: &CacheRequest<'_>,
    phase: Phase,
    handoff: Option<Handoff>,
    trace: &mut Trace,
    interim: &mut Interim<'_>,
) -> Next {
    match phase {
        Phase::Writing | Phase::Stored => {
            trace.stored = true;
            Next::Lookup { forwarded: true }
        }
        Phase::Elsewhere => {
            trace.stored = true;
            Next::Lookup { forwarded: true }
        }
        Phase::Revalidated => Next::Lookup { forwarded: true },
        // Not an answer to this request (see `follow`).
        Phase::Pending => Next::Lookup { forwarded: false },
        Phase::Uncacheable => {
            trace.forward(Fwd::Bypass);
            trace.detail = Some("uncacheable");
            Next::Answer(match handoff {
                Some(Handoff::Relay { response, shape }) => {
                    head::relayed(worker, req, *response, trace.clone(), shape)
                }
                // Delivered in full to its followers, then not kept.
                Some(Handoff::Writing(h)) => {
                    trace.fwd_status = Some(h.meta.status);
                    let fresh = freshness(&pw.shared, req, &h.meta);
                    head::serve(worker, req, h, &fresh, trace.clone(), CacheStatus::Pass)
                }
                // Cookies come with a 304 (a revalidation), never with this.
                Some(Handoff::Cookies(_) | Handoff::Part(_)) | None => {
                    relay(worker, pw, req, interim, trace.clone()).await
                }
            })
        }
        Phase::Failed(f) => {
            trace.fill_failed(&f);
            Next::Answer(head::error(worker, req, f.status, trace.clone(), f.detail))
        }
    }
}

/// Claim `key` (or join its claim) and wait for the fill's news; `stale`: the stored
/// copy's metadata, to revalidate it. The leader passes the fill's interim responses to
/// its client while it waits, and gets the fill's response when it may not be stored
/// but answers this request as it stands (the [`Handoff`]): no second origin request.
pub(crate) async fn follow(
    pw: &Rc<ProxyWorker>,
    req: &CacheRequest<'_>,
    key: &[u8],
    stale: Option<&ObjectMeta>,
    trace: &mut Trace,
    after_writing: bool,
    interim: &mut Interim<'_>,
) -> (Phase, Option<Handoff>) {
    // A fill only answers requests that were waiting before its response arrived.
    let px = &pw.shared;
    match px.fills.claim(key) {
        Claim::Leader(guard) => {
            let mut rx = guard.subscribe();
            let (handoff_tx, mut handoff_rx) = tokio::sync::oneshot::channel();
            let (interim_tx, mut interim_rx) = tokio::sync::mpsc::unbounded_channel();
            let job = Job {
                px: Arc::clone(px),
                guard,
                fetch: Rc::new(req.fetch()),
                base: key.to_vec(),
                stale: stale.cloned(),
                slice: None,
                handoff: Some(handoff_tx),
                interim: interim.enabled().then_some(interim_tx),
            };
            tokio::task::spawn_local(fill::run(pw.clone(), job));
            let phase = interim
                .forward_while(fills::settled(&mut rx), &mut interim_rx)
                .await;
            (phase, handoff_rx.try_recv().ok())
        }
        Claim::Follower(mut rx) => {
            let joined_before_the_answer = *rx.borrow() == Phase::Pending;
            if after_writing || !joined_before_the_answer {
                // Either this request saw the key being written and then found nothing
                // (that fill failed), or the fill's response had arrived before this
                // request needed it: it is not an answer to this request (a `no-cache`
                // request, or one for a response that was stale on arrival, must reach
                // the origin itself). Wait for the claim to go, then look up afresh.
                fills::finished(&mut rx).await;
                return (Phase::Pending, None);
            }
            trace.collapsed = true;
            (fills::settled(&mut rx).await, None)
        }
    }
}
