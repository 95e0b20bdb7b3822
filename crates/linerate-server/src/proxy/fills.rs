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

/// What a fill has reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FillState {
    /// The origin has not answered yet.
    Pending,
    /// The object is being written to the store: look it up and follow it.
    Writing,
    /// The fill is over.
    Done(Outcome),
}

/// How a fill ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Stored (or already being stored by another fill): look it up.
    Stored,
    /// The stored object was confirmed by a 304 and freshened: serve it.
    Revalidated,
    /// The response may not be stored: each client fetches for itself.
    Uncacheable,
    /// The origin failed; `stale_ok`: stale content may stand in (stale-if-error).
    Failed {
        /// The status a client gets (502/504).
        status: StatusCode,
        /// Why, for `Cache-Status: detail` and the logs.
        detail: &'static str,
        /// Whether the failure happened before any byte was stored.
        stale_ok: bool,
    },
}

/// The claims in progress.
#[derive(Default)]
pub(crate) struct Fills {
    map: Mutex<HashMap<Box<[u8]>, watch::Sender<FillState>>>,
}

/// What `claim` gave.
pub(crate) enum Claim {
    /// This request fetches; the guard publishes the outcome.
    Leader(FillGuard),
    /// Another request is fetching; follow its state.
    Follower(watch::Receiver<FillState>),
}

impl Fills {
    /// Claim `key`, or join the claim in progress.
    pub(crate) fn claim(self: &Arc<Self>, key: &[u8]) -> Claim {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = map.get(key) {
            return Claim::Follower(tx.subscribe());
        }
        let (tx, _) = watch::channel(FillState::Pending);
        let rx = tx.subscribe();
        map.insert(key.into(), tx);
        Claim::Leader(FillGuard {
            fills: Arc::clone(self),
            key: key.into(),
            rx,
            done: false,
        })
    }

    /// Keys being fetched now.
    #[cfg(test)]
    pub(crate) fn in_progress(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn publish(&self, key: &[u8], state: FillState, remove: bool) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = map.get(key) {
            tx.send_replace(state);
        }
        if remove {
            map.remove(key);
        }
    }
}

/// The leader's hold on a key. Dropping it without [`FillGuard::finish`] ends the fill
/// as failed, so followers never wait forever.
pub(crate) struct FillGuard {
    fills: Arc<Fills>,
    key: Box<[u8]>,
    /// The leader's own view of the state (what its client follows).
    rx: watch::Receiver<FillState>,
    done: bool,
}

impl FillGuard {
    /// The key being filled.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// A receiver of this fill's state, for the leader's own client.
    pub(crate) fn subscribe(&self) -> watch::Receiver<FillState> {
        self.rx.clone()
    }

    /// The store has the object in flight: followers may look it up now.
    pub(crate) fn writing(&self) {
        self.fills.publish(&self.key, FillState::Writing, false);
    }

    /// Publish the outcome and release the key.
    pub(crate) fn finish(mut self, outcome: Outcome) {
        self.done = true;
        self.fills
            .publish(&self.key, FillState::Done(outcome), true);
    }
}

impl Drop for FillGuard {
    fn drop(&mut self) {
        if !self.done {
            self.fills.publish(
                &self.key,
                FillState::Done(Outcome::Failed {
                    status: StatusCode::BadGateway,
                    detail: "fill_abandoned",
                    stale_ok: true,
                }),
                true,
            );
        }
    }
}

/// Wait until the fill followed by `rx` is over. For a request that already saw this key
/// being written and then found nothing to follow: the writer ended without publishing,
/// and its claim is released only once the fill task has finished; re-claiming before
/// that would join the dead fill again.
pub(crate) async fn finished(rx: &mut watch::Receiver<FillState>) {
    let _ = rx.wait_for(|s| matches!(s, FillState::Done(_))).await;
}

/// Wait until the fill followed by `rx` has news (anything but `Pending`).
pub(crate) async fn settled(rx: &mut watch::Receiver<FillState>) -> FillState {
    if let Ok(s) = rx.wait_for(|s| *s != FillState::Pending).await {
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
        guard.finish(Outcome::Stored);
        assert_eq!(
            waiter.await.expect("joined"),
            FillState::Done(Outcome::Stored)
        );
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
        assert!(matches!(
            settled(&mut rx).await,
            FillState::Done(Outcome::Failed { .. })
        ));
    }
}
