//! Publishing in the background, with group commit: one thread per disk takes every
//! object whose body is complete ([`crate::ObjectWriter::finish_later`]), writes each
//! final header, makes them all durable with one flush, then renames and indexes each,
//! and journals them all with one write.
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

use std::sync::atomic::Ordering;

use crate::index::lock;
use crate::state::writer::ObjectWriter;
use crate::state::Inner;
use crate::state::PublishDone;

/// Most objects published by one flush: bounds how long the first of them waits for
/// the rest's headers and renames (about 13 µs a rename: some 27 ms for a full batch).
/// Large, because a `syncfs` writes back everything dirty on the disk: every object
/// complete when it starts is covered by it, and one left for the next flush waits a
/// whole flush more. At 256, 64 KiB misses (7,000+ a second on one core, a flush taking
/// tens of milliseconds on the benchmark's disk) left the publisher behind and up to
/// 7 % of objects unstored; at 2,048 every one was stored and req/s rose 4 % (median of
/// five alternating pairs; docs/benchmarks.md, "Large bodies written on the fill
/// threads").
const MAX_BATCH: usize = 2048;

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
    // The batch's journal records go out with one `write(2)` after its renames; each
    // object's caller hears of it after that.
    let Some(d) = ready.first().map(|(w, _)| w.disk) else {
        return;
    };
    let disk = &inner.disks[usize::from(d)];
    disk.journal_hold();
    let outcomes: Vec<_> = ready
        .into_iter()
        .map(|(w, done)| (w.commit(None), done))
        .collect();
    if let Err(e) = disk.journal_release(&*inner.io) {
        // The objects are on disk and indexed; only their journal records are missing,
        // which the reconcile scan repairs at the next start.
        inner.disk_error(d, crate::io::IoOp::Append, disk.dir(), &e);
    }
    for (outcome, done) in outcomes {
        done(outcome);
    }
}
