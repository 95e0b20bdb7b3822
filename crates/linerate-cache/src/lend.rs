//! Lending the store to the next process and taking it back ([`Store::lend`],
//! [`Store::resume`]): see `lease.rs` for the lease itself and why.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::index::lock;
use crate::lease::StoreLock;
use crate::store::Store;

/// How long [`Store::lend`] waits, after its grace, for the writes whose body is
/// complete to be published (a flush and a rename each; seconds only on a disk that is
/// failing).
pub const PUBLISH_WAIT: Duration = Duration::from_secs(10);

/// Why [`Store::lend`] did not lend the store. The store keeps writing.
#[derive(Debug, thiserror::Error)]
pub enum LendError {
    /// Writes whose body was complete were not published in time.
    #[error("{0} writes still being published after the wait")]
    WritesInFlight(usize),
    /// Already lent.
    #[error("already lent")]
    AlreadyLent,
}

impl Store {
    /// The lease's descriptors, to pass to the next process after [`Store::lend`].
    pub fn lock_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        self.lock.as_ref().map(StoreLock::fds).unwrap_or_default()
    }

    /// Stop writing so that another process can take the store over: new writes are
    /// refused ([`WriteRefused::Lent`]; the caller relays without storing), purges
    /// and metadata updates do nothing, eviction and compaction pause; then give the
    /// writes in flight up to `grace` to finish and be published. A write whose body is
    /// still coming in after that is not waited for: it goes on for its readers to its
    /// last byte (they are told the body is complete) but is never published, so the
    /// next process, which does not know it, fetches the object again when it is asked
    /// for it; nothing partial is ever published. Writes whose body is complete are
    /// being published (a flush, a rename) and are waited for, up to [`PUBLISH_WAIT`]
    /// more. Then sync and close every journal. Reads go on. On error the store is
    /// writing again.
    ///
    /// [`WriteRefused::Lent`]: crate::WriteRefused::Lent
    pub fn lend(&self, grace: Duration) -> Result<(), LendError> {
        let inner = &self.inner;
        if inner.lent.swap(true, Ordering::SeqCst) {
            return Err(LendError::AlreadyLent);
        }
        // Kept files go: the next process may purge or replace objects (a hit here
        // must see that) and evict them (their blocks must be freed).
        inner.open_files.close_all();
        // A step of maintenance in progress finishes before we go on (each takes its
        // disk's `step` lock and looks at `lent` under it).
        for d in &inner.disks {
            drop(lock(&d.step));
        }
        let in_flight = inner.index.inflight_len();
        if in_flight > 0 {
            tracing::info!(
                writes = in_flight,
                "store lend: waiting for the writes in flight"
            );
        }
        // A writer registers under its shard lock after checking `lent`, so no write
        // starts from here on.
        let deadline = std::time::Instant::now() + grace;
        while inner.index.to_publish_len() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let left = inner.index.leave_unstored();
        if left > 0 {
            tracing::info!(
                writes = left,
                grace_ms = grace.as_millis() as u64,
                "store lend: writes still coming in after the grace go on for their clients, not stored"
            );
        }
        let deadline = std::time::Instant::now() + PUBLISH_WAIT;
        loop {
            let n = inner.index.to_publish_len();
            if n == 0 {
                break;
            }
            if std::time::Instant::now() >= deadline {
                inner.lent.store(false, Ordering::SeqCst);
                return Err(LendError::WritesInFlight(n));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for d in &inner.disks {
            if let Some(mut j) = lock(&d.journal).take() {
                if let Err(e) = j.sync(&*inner.io) {
                    tracing::warn!(disk = %d.name(), error = %e, "journal sync before lending");
                }
            }
        }
        tracing::info!("store lent: no more writes from this process");
        Ok(())
    }

    /// Take the store back after [`Store::lend`] (the next process failed): start a new
    /// journal after any the other process wrote, and snapshot this process's index,
    /// which becomes the truth again (files the other process added are adopted by a
    /// later reconcile scan or stay unindexed; ones it removed are misses).
    pub fn resume(&self) {
        let inner = &self.inner;
        if !inner.lent.load(Ordering::SeqCst) {
            return;
        }
        for (i, d) in inner.disks.iter().enumerate() {
            if d.health.in_service() {
                crate::maintenance::rejournal(inner, i);
            }
        }
        inner.lent.store(false, Ordering::SeqCst);
        for d in &inner.disks {
            d.wake();
        }
        tracing::info!("store taken back: writing again");
    }

    /// Whether the store is lent ([`Store::lend`]).
    pub fn is_lent(&self) -> bool {
        self.inner.lent.load(Ordering::Acquire)
    }
}
