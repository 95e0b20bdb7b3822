//! Parked idle connections. A keep-alive connection that has been idle for
//! `park_idle_after` leaves the async runtime: its task ends and its bare socket waits in
//! a per-worker epoll set, in a slot of a few bytes, until the client sends its next
//! request (the connection gets a fresh task) or hangs up, or its keep-alive deadline
//! passes (closed by a once-a-second sweep), or the server stops (closed).
//!
//! Why: players fetch a segment every 2-6 s and are idle in between, so at 10,000+
//! players most connections are idle at any moment. Left as tasks they cost ~1.3 KiB
//! each (the task, its future and its runtime registration), against nginx's ~0.5 KiB;
//! parked they cost a slot. A busy connection never parks, so the request path pays
//! nothing; parking and unparking cost two `epoll_ctl` calls each time.
//!
//! Not here: reading requests (the resumed connection does that).

use std::cell::RefCell;
use std::net::TcpStream as StdStream;
use std::os::fd::AsFd;
use std::time::Duration;

use linerate_sys::epoll::Epoll;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::stats::{CloseReason, ConnState, WorkerStats};

/// How often parked connections are checked against their keep-alive deadline. Idle
/// timeouts are tens of seconds, so closing up to a second late is harmless.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Most ready connections taken from the set per wake-up (fairness with other tasks).
const READY_BATCH: usize = 256;

struct Slot {
    stream: StdStream,
    deadline: Instant,
}

/// One worker's parked connections.
pub(crate) struct Parking {
    set: AsyncFd<Epoll>,
    slots: RefCell<Vec<Option<Slot>>>,
    free: RefCell<Vec<usize>>,
    /// The worker's statistics (the parked-connections gauge).
    stats: std::sync::Arc<WorkerStats>,
}

impl Parking {
    /// A new, empty set (inside the worker's runtime).
    pub(crate) fn new(stats: std::sync::Arc<WorkerStats>) -> std::io::Result<Parking> {
        // tokio deprecated the safe constructor (its replacement is `unsafe`) because a
        // `T` whose fd could be closed while registered breaks I/O safety. `Epoll` owns
        // its fd (`OwnedFd`) and only the `AsyncFd` owns the `Epoll`, so the fd outlives
        // the registration; this crate forbids `unsafe`, so we keep the safe call.
        #[allow(deprecated, reason = "sound for Epoll: it owns its fd; see above")]
        let set = AsyncFd::new(Epoll::new()?)?;
        Ok(Parking {
            set,
            slots: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            stats,
        })
    }

    /// Park `stream` until input, hang-up or `deadline`. On error the stream is dropped
    /// (closed) and the error returned; the caller then counts the connection closed.
    pub(crate) fn park(&self, stream: TcpStream, deadline: Instant) -> std::io::Result<()> {
        let stream = stream.into_std()?;
        let mut slots = self.slots.borrow_mut();
        let key = match self.free.borrow_mut().pop() {
            Some(k) => k,
            None => {
                slots.push(None);
                slots.len() - 1
            }
        };
        if let Err(e) = self.set.get_ref().add(stream.as_fd(), key as u64) {
            self.free.borrow_mut().push(key);
            return Err(e);
        }
        slots[key] = Some(Slot { stream, deadline });
        self.stats.enter(ConnState::Parked);
        tracing::trace!(key, "connection parked");
        Ok(())
    }

    fn take(&self, key: usize) -> Option<StdStream> {
        let slot = self.slots.borrow_mut().get_mut(key)?.take()?;
        self.free.borrow_mut().push(key);
        self.stats.leave(ConnState::Parked);
        Some(slot.stream)
    }
}

/// Run a worker's parked connections until `stop` resolves: a connection that becomes
/// readable (a request, or a hang-up the resumed task will see) goes to `resume` as a
/// socket of the runtime again; one whose keep-alive deadline passes is closed and
/// reported to `closed`; when `stop` resolves every one left is closed as `Stopping`.
pub(crate) async fn watch(
    parking: &Parking,
    stop: impl std::future::Future<Output = ()>,
    resume: impl Fn(TcpStream),
    closed: impl Fn(CloseReason),
) {
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut keys = Vec::with_capacity(READY_BATCH);
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            guard = parking.set.readable() => {
                let Ok(mut guard) = guard else { return };
                keys.clear();
                if let Err(e) = parking.set.get_ref().ready(&mut keys, READY_BATCH) {
                    tracing::warn!(error = %e, "epoll_wait on parked connections failed");
                }
                if keys.len() < READY_BATCH {
                    guard.clear_ready();
                }
                for &key in &keys {
                    let Some(stream) = parking.take(key as usize) else { continue };
                    let _ = parking.set.get_ref().delete(stream.as_fd());
                    tracing::trace!(key, "connection resumed");
                    match TcpStream::from_std(stream) {
                        Ok(stream) => resume(stream),
                        Err(e) => {
                            tracing::debug!(error = %e, "could not resume a parked connection");
                            closed(CloseReason::ClientClosed);
                        }
                    }
                }
            }
            _ = sweep.tick() => parking.close_expired(Instant::now(), CloseReason::Idle, &closed),
            _ = &mut stop => {
                let forever = Instant::now() + Duration::from_secs(365 * 24 * 3600);
                parking.close_expired(forever, CloseReason::Stopping, &closed);
                return;
            }
        }
    }
}

impl Parking {
    /// Close every parked connection whose deadline is at or before `now`.
    fn close_expired(&self, now: Instant, why: CloseReason, closed: &impl Fn(CloseReason)) {
        let expired: Vec<usize> = self
            .slots
            .borrow()
            .iter()
            .enumerate()
            .filter_map(|(k, s)| s.as_ref().filter(|s| s.deadline <= now).map(|_| k))
            .collect();
        for key in expired {
            // Closing the socket also removes it from the epoll set.
            if self.take(key).is_some() {
                closed(why);
            }
        }
    }
}
