//! Lending the store to the next process and taking it back ([`Store::lend`],
//! [`Store::resume`]): see `lease.rs` for the lease itself and why.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::index::lock;
use crate::lease::StoreLock;
use crate::store::Store;

/// Why [`Store::lend`] did not lend the store. The store keeps writing.
#[derive(Debug, thiserror::Error)]
pub enum LendError {
    /// Writes in flight did not finish in time.
    #[error("{0} writes still in flight after the wait")]
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
    /// and metadata updates do nothing, eviction and compaction pause; then wait up to
    /// `wait` for the writes in flight to finish (so no half-written object is left
    /// and no follower of one is cut short), and sync and close every journal. Reads
    /// go on. On error the store is writing again.
    pub fn lend(&self, wait: Duration) -> Result<(), LendError> {
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
        let deadline = std::time::Instant::now() + wait;
        let in_flight = inner.index.inflight_len();
        if in_flight > 0 {
            tracing::info!(
                writes = in_flight,
                "store lend: waiting for the writes in flight"
            );
        }
        loop {
            // A writer registers under its shard lock after checking `lent`, so once
            // this count is 0 no write can start.
            let n = inner.index.inflight_len();
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
            if let Some(j) = lock(&d.journal).take() {
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
