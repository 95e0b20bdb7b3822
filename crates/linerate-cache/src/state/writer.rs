//! Writing one object: temp file, body appends that readers can follow, and the atomic
//! publish (rewrite header with length and checksum → optional fdatasync → rename →
//! journal record → index).
//!
//! Crash consistency comes from the order: an object gets its final name only after
//! its whole body and final header are in the file, so a name under `objects/` never
//! points at a partial object; anything a kill -9 interrupts stays in `tmp/`, which is
//! emptied at start-up. This file does not choose the disk or admit the write (see
//! `store.rs`).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3;

use crate::format::{ObjectHeader, BODY_ALIGN};
use crate::index::Entry;
use crate::index::Inflight;
use crate::io::IoOp;
use crate::journal::Record;
use crate::key::KeyHash;
use crate::policy::PolicyState;
use crate::progress::{Progress, WriteFailure};
use crate::state::disk::{charge_for, Reservation};
use crate::state::Inner;

/// Reservation granted at a time for a body of unknown length: large enough that a
/// video segment needs one or two, small enough not to make a disk look full.
const RESERVE_STEP: u64 = 4 << 20;

/// What the index must hold for the key when a metadata update publishes: the object
/// whose body it copied. Anything else means the object changed meanwhile.
#[derive(Debug)]
pub(crate) enum Replaces {
    /// This indexed entry.
    Entry(Arc<Entry>),
    /// A file found by name while its disk's index was loading: nothing indexed yet, or
    /// the loader's entry for that same object.
    Unindexed {
        /// Disk holding it.
        disk: u16,
        /// Its header's `created_ms`.
        created_ms: u64,
    },
}

impl Replaces {
    fn matches(&self, current: Option<&Arc<Entry>>) -> bool {
        match (self, current) {
            (Replaces::Entry(e), Some(c)) => Arc::ptr_eq(e, c),
            (Replaces::Entry(_), None) => false,
            (Replaces::Unindexed { .. }, None) => true,
            (Replaces::Unindexed { disk, created_ms }, Some(c)) => {
                c.disk == *disk && c.created_ms == *created_ms
            }
        }
    }
}

/// Why a write failed; the object is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("object write failed: {}", failure.as_str())]
pub struct WriteError {
    /// Kind of failure (also sent to readers).
    pub failure: WriteFailure,
}

/// What a successful [`ObjectWriter::finish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The object is stored and indexed.
    Stored {
        /// Body length in bytes.
        len: u64,
    },
}

/// Writes one object. Appends are blocking `pwrite`s: call from a thread that may block
/// on the disk (the server's blocking pool), not from an event loop. Dropping a writer
/// without [`ObjectWriter::finish`] aborts it: readers get [`WriteFailure::Aborted`].
pub struct ObjectWriter {
    pub(crate) inner: Arc<Inner>,
    pub(crate) disk: u16,
    pub(crate) hash: KeyHash,
    pub(crate) header: ObjectHeader,
    pub(crate) tmp_path: PathBuf,
    pub(crate) inflight: Arc<Inflight>,
    pub(crate) written: u64,
    pub(crate) expected: Option<u64>,
    pub(crate) reserved: u64,
    pub(crate) hasher: Xxh3,
    pub(crate) done: bool,
    /// The final header is in the file already: the whole body came in one append
    /// and went with it ([`ObjectWriter::append`]).
    pub(crate) header_final: bool,
}

/// Zeros between a header and a body aligned after it (less than [`BODY_ALIGN`]).
static PADDING: [u8; BODY_ALIGN as usize] = [0; BODY_ALIGN as usize];

impl ObjectWriter {
    /// Body bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Append body bytes. Cost: one `pwrite` plus hashing at ~10 GB/s; wakes readers.
    /// When `buf` is the whole declared body (a small object's, read in one go), the
    /// final header goes in the same `pwritev` and the publisher has none to write.
    pub fn append(&mut self, buf: &[u8]) -> Result<(), WriteError> {
        if self.done {
            return Err(WriteError {
                failure: WriteFailure::Aborted,
            });
        }
        let end = self.written + buf.len() as u64;
        let limit = self.expected.unwrap_or(self.inner.cfg.max_object_bytes);
        if end > limit {
            return Err(self.fail(WriteFailure::LengthMismatch));
        }
        let needed = charge_for(self.header.body_offset + end);
        if needed > self.reserved {
            let more = (needed - self.reserved).max(RESERVE_STEP);
            if self.inner.disks[usize::from(self.disk)].reserve(more) == Reservation::Refused {
                return Err(self.fail(WriteFailure::NoSpace));
            }
            self.reserved += more;
        }
        self.hasher.update(buf);
        let whole = self.written == 0 && self.expected == Some(end) && end > 0;
        let header = if whole {
            self.header.body_len = end;
            self.header.body_checksum = self.hasher.digest();
            self.header.encode().ok().filter(|h| {
                let gap = self.header.body_offset.checked_sub(h.len() as u64);
                gap.is_some_and(|g| g < BODY_ALIGN)
            })
        } else {
            None
        };
        let inner = Arc::clone(&self.inner);
        let file = &self.inflight.file;
        let wrote = match &header {
            Some(h) => {
                let gap = (self.header.body_offset - h.len() as u64) as usize;
                let parts: [&[u8]; 3] = [h, &PADDING[..gap], buf];
                inner.io.write_vectored_at(file, &self.tmp_path, &parts, 0)
            }
            None => {
                let off = self.header.body_offset + self.written;
                inner.io.write_at(file, &self.tmp_path, buf, off)
            }
        };
        if let Err(e) = wrote {
            inner.disk_error(self.disk, IoOp::Write, &self.tmp_path, &e);
            return Err(self.fail(failure_of(&e)));
        }
        self.header_final = header.is_some();
        self.written = end;
        self.inflight
            .tx
            .send_replace(Progress::Writing { written: end });
        Ok(())
    }

    /// Abort the write on purpose (origin failed): readers get `reason`.
    pub fn abort(mut self, reason: WriteFailure) {
        self.fail(reason);
    }

    /// End the write without storing the object, telling readers that the body they
    /// followed is complete at the bytes written: for a body the source delivered whole
    /// but must not be stored (an origin that sent bytes past its `Content-Length`: the
    /// declared body is complete, but the response cannot be trusted enough to keep).
    /// Nothing is indexed; the temporary file is removed (readers keep their open
    /// descriptors, so they can still send the bytes).
    pub fn complete_unstored(mut self) {
        if self.expected.is_some_and(|e| e != self.written) {
            self.fail(WriteFailure::LengthMismatch);
            return;
        }
        self.done = true;
        self.remove_inflight();
        self.remove_tmp();
        self.inner.disks[usize::from(self.disk)].release(self.reserved);
        self.reserved = 0;
        self.inflight
            .tx
            .send_replace(Progress::Complete { len: self.written });
    }

    /// Complete and publish the object; returns once it is indexed and journaled (so it
    /// survives a kill -9 from then on, and power loss too with
    /// [`crate::Durability::SyncBeforePublish`]). Fails with [`WriteFailure::Aborted`]
    /// if the key was purged, or a newer write of it begun, since this one began.
    pub fn finish(self) -> Result<Published, WriteError> {
        self.publish(None)
    }

    /// Running xxh3-64 of the body appended so far.
    pub(crate) fn body_checksum(&self) -> u64 {
        self.hasher.digest()
    }

    /// Publish in the background, with group commit (`publish.rs`): the body is
    /// checked complete here and its readers told so at once, so a client following the
    /// write gets its last byte now, not after the flush; the disk's publisher then
    /// writes the header, flushes (with `sync_before_publish`), renames, indexes and
    /// journals, and calls `done` with the outcome (on its thread: keep `done` short).
    /// Until then lookups find the object in flight, complete. Cost here: no system
    /// call; a wake-up of the publisher when it sleeps.
    pub fn finish_later(mut self, done: crate::state::PublishDone) {
        if let Err(e) = self.check_complete() {
            done(Err(e));
            return;
        }
        self.inflight
            .tx
            .send_replace(Progress::Complete { len: self.written });
        let inner = Arc::clone(&self.inner);
        inner.disks[usize::from(self.disk)].publish.push(self, done);
    }

    /// The body is whole (its declared length), the write not purged or displaced, the
    /// disk in service: else the write fails with the reason.
    fn check_complete(&mut self) -> Result<(), WriteError> {
        if self.done {
            return Err(WriteError {
                failure: WriteFailure::Aborted,
            });
        }
        if self.expected.is_some_and(|e| e != self.written) {
            return Err(self.fail(WriteFailure::LengthMismatch));
        }
        if self.inflight.is_cancelled() {
            return Err(self.fail(WriteFailure::Aborted));
        }
        if self.inflight.is_unstored() {
            return Err(self.end_unstored());
        }
        if !self.inner.disks[usize::from(self.disk)].health.in_service() {
            return Err(self.fail(WriteFailure::Disk));
        }
        Ok(())
    }

    /// [`ObjectWriter::finish`]; with `replaces`, publish only if the index still holds
    /// that object for the key (a metadata update), and keep its eviction state.
    pub(crate) fn publish(mut self, replaces: Option<Replaces>) -> Result<Published, WriteError> {
        self.write_final_header()?;
        if self.inner.cfg.durability == crate::Durability::SyncBeforePublish {
            self.sync_own_data()?;
        }
        self.commit(replaces)
    }

    /// Check the body complete, tell its readers, and write the final header (length
    /// and checksum) over the first bytes of the file.
    pub(crate) fn write_final_header(&mut self) -> Result<(), WriteError> {
        self.check_complete()?;
        self.inflight
            .tx
            .send_replace(Progress::Complete { len: self.written });
        if self.header_final {
            return Ok(());
        }
        self.header.body_len = self.written;
        self.header.body_checksum = self.hasher.digest();
        let bytes = match self.header.encode() {
            Ok(b) => b,
            Err(_) => return Err(self.fail(WriteFailure::LengthMismatch)),
        };
        let inner = Arc::clone(&self.inner);
        if let Err(e) = inner
            .io
            .write_at(&self.inflight.file, &self.tmp_path, &bytes, 0)
        {
            inner.disk_error(self.disk, IoOp::Write, &self.tmp_path, &e);
            return Err(self.fail(failure_of(&e)));
        }
        Ok(())
    }

    /// `fdatasync` of this object's file.
    pub(crate) fn sync_own_data(&mut self) -> Result<(), WriteError> {
        let inner = Arc::clone(&self.inner);
        let r = inner.io.sync_data(&self.inflight.file, &self.tmp_path);
        self.synced(r)
    }

    /// `syncfs` of the filesystem holding this object: every object written there
    /// before the call is durable after it (one flush for a batch).
    pub(crate) fn sync_filesystem(&mut self) -> Result<(), WriteError> {
        let inner = Arc::clone(&self.inner);
        let r = inner.io.sync_fs(&self.inflight.file, &self.tmp_path);
        self.synced(r)
    }

    /// Fail the write (not published) with `failure`: the flush of its batch failed.
    pub(crate) fn fail_with(&mut self, failure: WriteFailure) -> WriteError {
        self.fail(failure)
    }

    fn synced(&mut self, r: std::io::Result<()>) -> Result<(), WriteError> {
        r.map_err(|e| {
            self.inner
                .disk_error(self.disk, IoOp::Sync, &self.tmp_path, &e);
            self.fail(failure_of(&e))
        })
    }

    /// After the header (and the flush): rename into place, index, journal.
    pub(crate) fn commit(mut self, replaces: Option<Replaces>) -> Result<Published, WriteError> {
        let inner = Arc::clone(&self.inner);
        let disk = &inner.disks[usize::from(self.disk)];
        let io = &*inner.io;
        let final_path = disk.object_path(self.hash);
        let step = (|| {
            // Fan-out directories are made when the disk is prepared, and again on
            // first use after `objects/` was replaced. `objects/` itself is never
            // re-created here: if it vanished, the disk is failing, and mkdir of the
            // fan-out (or the rename) fails with ENOENT, which counts as such.
            if !disk.fanout_known(self.hash) {
                let parent = final_path.parent().unwrap_or(&disk.objects_dir);
                io.create_dir(parent).map_err(|e| (IoOp::CreateDir, e))?;
                disk.fanout_created(self.hash);
            }
            io.rename(&self.tmp_path, &final_path)
                .map_err(|e| (IoOp::Rename, e))
        })();
        if let Err((op, e)) = step {
            inner.disk_error(self.disk, op, &self.tmp_path, &e);
            return Err(self.fail(failure_of(&e)));
        }
        // Published: from here on the temp path is gone and the object is valid.
        let charge = charge_for(self.header.file_len());
        let entry = Arc::new(Entry {
            hash: self.hash,
            key: self.inflight.key.clone(),
            disk: self.disk,
            charge,
            created_ms: self.header.created_ms,
            policy: PolicyState::default(),
            open: Default::default(),
        });
        let inflight = &self.inflight;
        let published = inner.index_published_if(Arc::clone(&entry), replaces.is_some(), |cur| {
            !inflight.is_cancelled()
                && !inflight.is_unstored()
                && replaces.as_ref().is_none_or(|r| r.matches(cur))
        });
        if !published {
            // Purged, superseded or (an update) changed after the rename: take the file
            // back out so nothing unindexed is left under the object's name.
            inner.unpublish(self.disk, self.hash, &final_path);
            if self.inflight.is_unstored() {
                return Err(self.end_unstored());
            }
            return Err(self.fail(WriteFailure::Aborted));
        }
        // Indexed pinned (`Store::pin_on_write`): the insert says so itself. Its `Pin`
        // record went to the journal first, and a replay ignores a pin of an object
        // it has not seen inserted yet, so a restart would lose the pin.
        let queue = match entry.policy.queue() {
            crate::policy::QueueId::Pinned => crate::policy::QueueId::Pinned,
            _ => crate::policy::QueueId::Small,
        };
        let rec = Record::Insert {
            hash: self.hash,
            charge,
            created_ms: entry.created_ms,
            queue,
            key: entry.key.to_vec(),
        };
        if let Err(e) = disk.journal(io, &rec) {
            // The object is on disk and indexed; only its journal record is missing,
            // which the reconcile scan repairs at the next start.
            inner.disk_error(self.disk, IoOp::Append, disk.dir(), &e);
        }
        disk.release(self.reserved);
        self.reserved = 0;
        self.done = true;
        self.remove_inflight();
        self.inflight
            .tx
            .send_replace(Progress::Complete { len: self.written });
        if disk.used.load(Ordering::Relaxed) > disk.high_mark(inner.cfg.high_watermark_percent) {
            disk.wake();
        }
        Ok(Published::Stored { len: self.written })
    }

    fn remove_inflight(&self) {
        let mut shard = self.inner.index.shard(self.hash);
        if shard
            .inflight
            .get(&self.hash.0)
            .is_some_and(|i| Arc::ptr_eq(i, &self.inflight))
        {
            shard.inflight.remove(&self.hash.0);
        }
    }

    fn remove_tmp(&self) {
        match self.inner.io.remove_file(&self.tmp_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => self
                .inner
                .disk_error(self.disk, IoOp::Remove, &self.tmp_path, &e),
        }
    }

    /// The store was lent while this body came in (`Store::lend`): its readers get the
    /// body as complete, nothing is stored, and the write reports `Aborted`.
    fn end_unstored(&mut self) -> WriteError {
        if !self.done {
            self.done = true;
            self.remove_inflight();
            self.remove_tmp();
            self.inner.disks[usize::from(self.disk)].release(self.reserved);
            self.reserved = 0;
            self.inflight
                .tx
                .send_replace(Progress::Complete { len: self.written });
        }
        WriteError {
            failure: WriteFailure::Aborted,
        }
    }

    fn fail(&mut self, failure: WriteFailure) -> WriteError {
        if !self.done {
            self.done = true;
            self.remove_inflight();
            self.remove_tmp();
            self.inner.disks[usize::from(self.disk)].release(self.reserved);
            self.reserved = 0;
            self.inflight.tx.send_replace(Progress::Failed {
                written: self.written,
                reason: failure,
            });
        }
        WriteError { failure }
    }
}

impl Drop for ObjectWriter {
    fn drop(&mut self) {
        self.fail(WriteFailure::Aborted);
    }
}

fn failure_of(e: &std::io::Error) -> WriteFailure {
    match crate::health::DiskErrorKind::of(e) {
        crate::health::DiskErrorKind::NoSpace => WriteFailure::NoSpace,
        _ => WriteFailure::Disk,
    }
}
