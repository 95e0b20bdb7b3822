//! Publishing in the background, with group commit: one thread per disk takes every
//! object whose body is complete ([`crate::ObjectWriter::finish_later`]), writes each
//! final header, makes them all durable with one flush, then renames, indexes and
//! journals each.
//!
//! Why: with `sync_before_publish` (the default) an object becomes a hit only after its
//! data is on disk. Done object by object that is an `fdatasync`, and so a journal
//! commit, per object, on a thread hand-off per object. Under load the objects that
//! finished while one flush ran are flushed together: a batch of one takes
//! `fdatasync`, a larger batch one `syncfs` of the disk's filesystem: one journal
//! commit and one device flush for all of them, where an `fdatasync` of each flushes
//! the device once per object (measured: that way 64 KiB misses at 230 MB/s left the
//! disk 256 MiB behind within seconds). `syncfs` also writes whatever else is dirty on
//! that filesystem: a cache disk is best a filesystem of its own.
//!
//! The client is never waiting for any of it: its readers were told the body is
//! complete when the last byte was written ([`crate::Progress::Complete`]); what waits
//! is the index entry (until then lookups find the object in flight and serve it from
//! the same file).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::index::lock;
use crate::store::Inner;
use crate::writer::{ObjectWriter, Published, WriteError};

/// Called with the outcome once an object is published or has failed.
pub type PublishDone = Box<dyn FnOnce(Result<Published, WriteError>) + Send>;

/// Objects waiting for their disk's publisher.
#[derive(Default)]
pub(crate) struct PublishQueue {
    queue: Mutex<Pending>,
    ready: Condvar,
    /// Flushes (batches) and objects published through them, since start.
    pub(crate) batches: AtomicU64,
    pub(crate) published: AtomicU64,
    /// Writes refused because the backlog was over `max_publish_backlog`.
    pub(crate) behind_refused: AtomicU64,
    /// Whether the last write begun found the disk behind (logs the change only).
    behind: AtomicBool,
}

#[derive(Default)]
struct Pending {
    objects: VecDeque<(ObjectWriter, PublishDone)>,
    /// Body bytes queued: the backlog a disk that cannot keep up builds.
    bytes: u64,
}

impl PublishQueue {
    pub(crate) fn push(&self, w: ObjectWriter, done: PublishDone) {
        let mut q = lock(&self.queue);
        q.bytes += w.written();
        q.objects.push_back((w, done));
        drop(q);
        self.ready.notify_one();
    }

    /// Body bytes waiting to be published.
    pub(crate) fn backlog_bytes(&self) -> u64 {
        lock(&self.queue).bytes
    }

    /// Whether a new write may start: false while more than `max` body bytes wait to
    /// be published (`StoreConfig::max_publish_backlog`): the disk is behind the
    /// origin, so the fill relays and stores nothing until it catches up; a slow disk
    /// never slows a client and the page cache does not fill with data waiting for a
    /// flush. Counted; the change is logged once each way.
    pub(crate) fn admit(&self, disk: &str, max: u64) -> bool {
        let backlog = self.backlog_bytes();
        let behind = backlog > max;
        if behind != self.behind.swap(behind, Ordering::Relaxed) {
            if behind {
                tracing::warn!(disk, backlog_bytes = backlog, max_publish_backlog = max, "disk behind the fills: new objects are relayed, not stored, until it catches up");
            } else {
                tracing::info!(disk, "disk caught up: storing again");
            }
        }
        if behind {
            self.behind_refused.fetch_add(1, Ordering::Relaxed);
        }
        !behind
    }

    pub(crate) fn wake(&self) {
        self.ready.notify_all();
    }
}

/// Most objects published by one flush: bounds how long the first of them waits for
/// the rest's headers and renames.
const MAX_BATCH: usize = 256;

/// The publisher of disk `i`: runs until shutdown, then publishes what is queued.
pub(crate) fn run(inner: &Inner, i: usize) {
    let q = &inner.disks[i].publish;
    loop {
        let batch: Vec<(ObjectWriter, PublishDone)> = {
            let mut p = lock(&q.queue);
            while p.objects.is_empty() {
                if inner.shutdown.load(Ordering::Acquire) {
                    return;
                }
                p = q.ready.wait(p).unwrap_or_else(|e| e.into_inner());
            }
            let n = p.objects.len().min(MAX_BATCH);
            let batch: Vec<_> = p.objects.drain(..n).collect();
            p.bytes -= batch.iter().map(|(w, _)| w.written()).sum::<u64>();
            batch
        };
        q.batches.fetch_add(1, Ordering::Relaxed);
        q.published.fetch_add(batch.len() as u64, Ordering::Relaxed);
        publish_batch(inner, batch);
    }
}

/// Headers, one flush, then rename + index + journal of each.
fn publish_batch(inner: &Inner, batch: Vec<(ObjectWriter, PublishDone)>) {
    let mut ready = Vec::with_capacity(batch.len());
    for (mut w, done) in batch {
        match w.write_final_header() {
            Ok(()) => ready.push((w, done)),
            Err(e) => done(Err(e)),
        }
    }
    if inner.cfg.durability == crate::Durability::SyncBeforePublish {
        // One flush for the batch: `fdatasync` of a lone object, else `syncfs` of the
        // disk's filesystem (every object of the batch was written before it). A
        // failed flush fails the whole batch: none of it is known durable.
        let synced = match ready.as_mut_slice() {
            [] => Ok(()),
            [(w, _)] => w.sync_own_data(),
            [(w, _), ..] => w.sync_filesystem(),
        };
        if let Err(e) = synced {
            for (mut w, done) in ready {
                done(Err(w.fail_with(e.failure)));
            }
            return;
        }
    }
    for (w, done) in ready {
        done(w.commit(None));
    }
}
