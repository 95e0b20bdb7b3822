//! Per-disk statistics: a plain snapshot of counters for the observability layer to
//! export. Reading them costs a few relaxed atomic loads per disk; nothing here is on
//! the request path.

use std::sync::atomic::Ordering;

use crate::health::DiskState;
use crate::state::disk::Disk;

/// Counters of one disk at the moment [`crate::Store::stats`] was called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskStats {
    /// Configured name.
    pub name: String,
    /// Service state.
    pub state: DiskState,
    /// Whether its index has finished loading.
    pub index_loaded: bool,
    /// Effective capacity, bytes.
    pub capacity_bytes: u64,
    /// Bytes of stored objects (4 KiB-rounded file sizes).
    pub used_bytes: u64,
    /// Bytes reserved by writes in progress.
    pub reserved_bytes: u64,
    /// Stored objects.
    pub objects: u64,
    /// Objects evicted since start.
    pub evictions: u64,
    /// Writes refused because the disk was at capacity.
    pub admissions_refused: u64,
    /// Writes refused because the disk was behind: more than 256 MiB of complete
    /// bodies waiting to be published (flushed and renamed).
    pub behind_refused: u64,
    /// Group commits since start: each one flush for the objects it published.
    pub publish_batches: u64,
    /// Objects published through those group commits.
    pub published: u64,
    /// I/O and integrity errors counted since start.
    pub io_errors: u64,
    /// Of which: files that failed their header check.
    pub corrupt_objects: u64,
}

impl DiskStats {
    pub(crate) fn of(d: &Disk) -> DiskStats {
        DiskStats {
            name: d.name().to_owned(),
            state: d.health.state(),
            index_loaded: d.loaded.load(Ordering::Acquire),
            capacity_bytes: d.capacity.load(Ordering::Relaxed),
            used_bytes: d.used.load(Ordering::Relaxed),
            reserved_bytes: d.reserved.load(Ordering::Relaxed),
            objects: d.objects.load(Ordering::Relaxed),
            evictions: d.evictions.load(Ordering::Relaxed),
            admissions_refused: d.admissions_refused.load(Ordering::Relaxed),
            behind_refused: d.publish.behind_refused.load(Ordering::Relaxed),
            publish_batches: d.publish.batches.load(Ordering::Relaxed),
            published: d.publish.published.load(Ordering::Relaxed),
            io_errors: d.health.total_errors(),
            corrupt_objects: d.health.corrupt(),
        }
    }
}
