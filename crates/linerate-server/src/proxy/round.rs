//! One round of the hit/miss loop that `flow` (a URL) and `slices` (one slice of it)
//! both run: judge what the store has under a key for a request ([`judge`]), and when
//! that is not usable, claim the key or join its claim and wait for the fill's news
//! ([`follow`]). Each caller decides what a judged object or a fill's phase means for
//! its response, and sets the request's [`CacheStatus`] as it answers ([`served`]).
//!
//! Not here: the caching rules (`linerate_http::cache::decide`), the fill's I/O
//! (`fill`).

use std::rc::Rc;

use linerate_cache::{Lookup, ObjectHandle, ObjectMeta};
use linerate_http::cache::RequestCacheControl;
use linerate_http::cache::{decide, CachePhase, CacheStatus, Decision, Freshness, OnError};

use super::fill::{self, Handoff, Job};
use super::fills::{self, Claim, FillGuard, Phase};
use super::shared::ProxyWorker;
use crate::exchange::Interim;

/// What the store has under a key, judged for one request (RFC 9111 §4).
pub(crate) enum Judged {
    /// Served as it is. `swr`: stale-while-revalidate (served while a refresh runs);
    /// `writing`: still being written by a fill.
    Use {
        /// The object.
        h: ObjectHandle,
        /// Its freshness now.
        fresh: Freshness,
        /// Served stale while it is refreshed.
        swr: bool,
        /// Still being written.
        writing: bool,
    },
    /// Stored, but it must be validated with the origin first; `on_error`: whether it
    /// stands in when that fails.
    Revalidate {
        /// The stored object.
        h: ObjectHandle,
        /// Its freshness now.
        fresh: Freshness,
        /// What a failed validation gives.
        on_error: OnError,
    },
    /// Being written by another fill and not usable by this request (it needs
    /// validation, or was stale on arrival): wait for that fill, then look again.
    Writing,
    /// Stored, not usable, and the request wants no forward (`only-if-cached`).
    GatewayTimeout,
    /// Nothing stored.
    Miss,
}

/// Judge `lookup` for a request with directives `cc`. `forwarded`: this request has
/// been forward already (its own fill, or one it followed), so what that left in the
/// store is its answer, however short its freshness. `freshness`: a stored response's
/// freshness for the request, now.
pub(crate) fn judge(
    lookup: Lookup,
    cc: &RequestCacheControl,
    forwarded: bool,
    freshness: impl Fn(&ObjectMeta) -> Freshness,
) -> Judged {
    let (h, writing) = match lookup {
        Lookup::Hit(h) => (h, false),
        Lookup::Filling(h) => (h, true),
        Lookup::Miss(_) => return Judged::Miss,
    };
    let fresh = freshness(&h.meta);
    let decision = if forwarded {
        Decision::Fresh
    } else {
        decide(cc, &fresh)
    };
    match decision {
        Decision::Fresh | Decision::StaleAccepted | Decision::StaleWhileRevalidate => Judged::Use {
            h,
            fresh,
            swr: decision == Decision::StaleWhileRevalidate,
            writing,
        },
        // Whether a response being written may be used is decided as for a stored one;
        // when it may not, the fill writing it is waited for.
        _ if writing => Judged::Writing,
        Decision::GatewayTimeout => Judged::GatewayTimeout,
        Decision::Revalidate(on_error) => Judged::Revalidate { h, fresh, on_error },
    }
}

/// Set `st` for a response served from the store: after going forward (`forwarded`)
/// with the status the next hop answered (RFC 9211 §2.3, `status` unless one is
/// known); `Hit` unless the request went forward (`Miss`), `Stale` for
/// stale-while-revalidate.
pub(crate) fn served(st: &mut CacheStatus, forwarded: bool, status: u16, swr: bool) {
    if forwarded {
        st.fwd_status.get_or_insert(status);
    }
    st.phase = if swr {
        CachePhase::Stale
    } else if st.fwd.is_none() {
        CachePhase::Hit
    } else {
        CachePhase::Miss
    };
}

/// Claim `key` (or join its claim) and wait for the fill's news. The leader spawns
/// `job(guard)` (its `handoff` and `interim` set here), passes the fill's interim
/// responses to its client while it waits (`interim`, when there is one), and gets the
/// fill's response when it may not be stored but answers this request as it stands
/// (the [`Handoff`]): no second origin request. `after_writing`: this request saw
/// the key being written and found nothing since.
///
/// A fill only answers requests that were waiting before its response arrived: a
/// follower that joins later (or after `after_writing`) waits for the claim to go and
/// gets [`Phase::Pending`]: look up afresh, not forwarded.
pub(crate) async fn follow(
    pw: &Rc<ProxyWorker>,
    key: &[u8],
    job: impl FnOnce(FillGuard) -> Job,
    st: &mut CacheStatus,
    after_writing: bool,
    interim: Option<&mut Interim<'_>>,
) -> (Phase, Option<Handoff>) {
    match pw.shared.fills.claim(key) {
        Claim::Leader(guard) => {
            let mut rx = guard.subscribe();
            let (handoff_tx, mut handoff_rx) = tokio::sync::oneshot::channel();
            let (interim_tx, mut interim_rx) = tokio::sync::mpsc::unbounded_channel();
            let leader = interim.as_deref().is_some_and(Interim::enabled);
            let mut job = job(guard);
            job.handoff = Some(handoff_tx);
            job.interim = leader.then_some(interim_tx);
            tokio::task::spawn_local(fill::run(pw.clone(), job));
            let phase = match interim {
                Some(i) => {
                    i.forward_while(fills::settled(&mut rx), &mut interim_rx)
                        .await
                }
                None => fills::settled(&mut rx).await,
            };
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
            st.collapsed = true;
            (fills::settled(&mut rx).await, None)
        }
    }
}

/// Wait for the fill writing `key` (if one still is) to end.
pub(crate) async fn wait_for_writer(pw: &ProxyWorker, key: &[u8]) {
    if let Some(mut rx) = pw.shared.fills.watch(key) {
        fills::finished(&mut rx).await;
    }
}
