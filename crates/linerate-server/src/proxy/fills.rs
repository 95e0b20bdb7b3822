//! One fill per key, across all workers. The first request that misses claims the key
//! and becomes the leader; every later request for it (on any core) follows the claim's
//! state on a `watch` channel, so it wakes the moment the leader has news, never on a
//! timer (nginx's `proxy_cache_lock` polls every 500 ms).
//!
//! The table holds only keys being fetched right now; a claim leaves it when its fill
//! ends (the guard's drop makes sure it does, so a panicking or cancelled fill can never
//! strand its followers).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use linerate_http::StatusCode;
use tokio::sync::watch;

/// Where a fill is: the one state every request following it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The origin has not answered yet.
    Pending,
    /// The object is being written under the claimed key: look it up and follow it.
    Writing,
    /// The response is being (or was) stored under another key than the claimed one: a
    /// variant (the response has `Vary`), or the whole object on a sliced route (the
    /// origin ignored `Range`, or the object fits one slice). Resolve the URL again.
    Elsewhere,
    /// Stored under the claimed key: look it up.
    Stored,
    /// The stored copy was confirmed by a 304 and freshened: serve it.
    Revalidated,
    /// The response may not be stored: the leader's client got it (when it answers that
    /// client's request as it stands); every other client goes to the origin itself.
    Uncacheable,
    /// The origin failed.
    Failed(Failure),
}

impl Phase {
    /// Short stable name for logs.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Writing => "writing",
            Phase::Elsewhere => "elsewhere",
            Phase::Stored => "stored",
            Phase::Revalidated => "revalidated",
            Phase::Uncacheable => "uncacheable",
            Phase::Failed(_) => "failed",
        }
    }

    /// Whether the fill is over.
    fn is_final(&self) -> bool {
        !matches!(self, Phase::Pending | Phase::Writing | Phase::Elsewhere)
    }
}

/// How a fill failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The status a client gets (502/504).
    pub(crate) status: StatusCode,
    /// Why, for `Cache-Status: detail` and the logs.
    pub(crate) detail: &'static str,
    /// Whether nothing of a response was stored or served, so a stored copy may stand
    /// in (stale-if-error).
    pub(crate) stale_ok: bool,
    /// The origin's status when it answered (a 5xx to a revalidation), for
    /// `Cache-Status: fwd-status` (RFC 9211 §2.3).
    pub(crate) fwd_status: Option<u16>,
}

/// A fill failed with 502.
pub(crate) fn bad_gateway(detail: &'static str, stale_ok: bool) -> Failure {
    Failure {
        status: StatusCode::BadGateway,
        detail,
        stale_ok,
        fwd_status: None,
    }
}

/// The claims in progress.
#[derive(Default)]
pub(crate) struct Fills {
    map: Mutex<HashMap<Box<[u8]>, watch::Sender<Phase>>>,
}

/// What `claim` gave.
pub(crate) enum Claim {
    /// This request fetches; the guard publishes the outcome.
    Leader(FillGuard),
    /// Another request is fetching; follow its state.
    Follower(watch::Receiver<Phase>),
}

impl Fills {
    /// Claim `key`, or join the claim in progress.
    pub(crate) fn claim(self: &Arc<Self>, key: &[u8]) -> Claim {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = map.get(key) {
            return Claim::Follower(tx.subscribe());
        }
        let (tx, rx) = watch::channel(Phase::Pending);
        map.insert(key.into(), tx.clone());
        Claim::Leader(FillGuard {
            fills: Arc::clone(self),
            key: key.into(),
            tx,
            rx,
            done: false,
        })
    }

    /// Claim `key` for a fill that must start after now (a background revalidation):
    /// a fill whose response already arrived is waited out first, since its answer
    /// predates the need. `None` when a fill not yet answered is in flight: its answer
    /// will be as new as this one's.
    pub(crate) async fn claim_after_answered(self: &Arc<Self>, key: &[u8]) -> Option<FillGuard> {
        loop {
            match self.claim(key) {
                Claim::Leader(guard) => return Some(guard),
                Claim::Follower(rx) if *rx.borrow() == Phase::Pending => return None,
                Claim::Follower(mut rx) => finished(&mut rx).await,
            }
        }
    }

    /// Follow the claim on `key` if there is one (without claiming it).
    pub(crate) fn watch(&self, key: &[u8]) -> Option<watch::Receiver<Phase>> {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(key).map(watch::Sender::subscribe)
    }

    /// Keys being fetched now (fill jobs yield to client fills by this count).
    pub(crate) fn in_progress(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Send a fill's last state on `tx` and release `key`, at once for every claim: a
    /// claim after this leads a new fill, never follows the one that ended.
    fn end(&self, key: &[u8], tx: &watch::Sender<Phase>, state: Phase) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        tx.send_replace(state);
        map.remove(key);
    }
}

/// The leader's hold on a key. Dropping it without [`FillGuard::finish`] ends the fill
/// as failed, so followers never wait forever.
pub(crate) struct FillGuard {
    fills: Arc<Fills>,
    key: Box<[u8]>,
    /// The state, as the table's entry sends it (news needs no lookup).
    tx: watch::Sender<Phase>,
    /// The leader's own view of the state (what its client follows).
    rx: watch::Receiver<Phase>,
    done: bool,
}

impl FillGuard {
    /// The key being filled.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// A receiver of this fill's state, for the leader's own client.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Phase> {
        self.rx.clone()
    }

    /// The store has the object in flight (`Writing`, or `Elsewhere`): followers may
    /// look it up now.
    pub(crate) fn progress(&self, phase: Phase) {
        self.tx.send_replace(phase);
    }

    /// Publish how the fill ended and release the key.
    pub(crate) fn finish(mut self, end: Phase) {
        self.done = true;
        self.fills.end(&self.key, &self.tx, end);
    }
}

impl Drop for FillGuard {
    fn drop(&mut self) {
        if !self.done {
            let failed = Phase::Failed(Failure {
                status: StatusCode::BadGateway,
                detail: "fill_abandoned",
                stale_ok: true,
                fwd_status: None,
            });
            self.fills.end(&self.key, &self.tx, failed);
        }
    }
}

/// Wait until the fill followed by `rx` is over. For a request that already saw this key
/// being written and then found nothing to follow: the writer ended without publishing,
/// and its claim is released only once the fill task has finished; re-claiming before
/// that would join the dead fill again.
pub(crate) async fn finished(rx: &mut watch::Receiver<Phase>) {
    let _ = rx.wait_for(Phase::is_final).await;
}

/// Wait until the fill followed by `rx` has news (anything but `Pending`).
pub(crate) async fn settled(rx: &mut watch::Receiver<Phase>) -> Phase {
    if let Ok(s) = rx.wait_for(|s| *s != Phase::Pending).await {
        return s.clone();
    }
    // The sender is dropped only after a terminal state was sent.
    let last = rx.borrow().clone();
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_leader_and_followers_see_the_outcome() {
        let fills = Arc::new(Fills::default());
        let Claim::Leader(guard) = fills.claim(b"k") else {
            panic!("first claim leads");
        };
        let Claim::Follower(mut rx) = fills.claim(b"k") else {
            panic!("second claim follows");
        };
        assert_eq!(fills.in_progress(), 1);
        let waiter = tokio::spawn(async move { settled(&mut rx).await });
        guard.finish(Phase::Stored);
        assert_eq!(waiter.await.expect("joined"), Phase::Stored);
        assert_eq!(fills.in_progress(), 0);
        assert!(matches!(fills.claim(b"k"), Claim::Leader(_)));
    }

    #[tokio::test]
    async fn a_dropped_leader_fails_its_followers() {
        let fills = Arc::new(Fills::default());
        let Claim::Leader(guard) = fills.claim(b"k") else {
            panic!("first claim leads");
        };
        let Claim::Follower(mut rx) = fills.claim(b"k") else {
            panic!("second claim follows");
        };
        drop(guard);
        assert!(matches!(settled(&mut rx).await, Phase::Failed(_)));
    }
}
