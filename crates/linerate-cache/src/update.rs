//! Replacing the stored metadata of a complete object while keeping its body
//! ([`Store::update_meta`]): cache mode freshens an object after the origin answers a
//! revalidation with 304 Not Modified (RFC 9111 §4.3.4).
//!
//! Object files are never modified in place: a lookup reading a half-rewritten header
//! would fail its checksum and delete the object as corrupt, and a crash would leave a
//! torn header. An update is therefore an ordinary write (`writer.rs`) of a new file,
//! new header plus the body copied from the old file, published by the same atomic
//! rename, index update and journal record. What differs: lookups do not follow it, it
//! gives way to a write of the key already in flight, it publishes only if the index
//! still holds the very object it copied (checked under the shard lock, so a purge,
//! eviction or new write meanwhile wins), and the object keeps its eviction state.
//! Deciding what the new metadata is (merging the 304's fields) is cache mode's job.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::format::{decode_complete, MAX_HEADER_LEN};
use crate::health::DiskErrorKind;
use crate::io::IoOp;
use crate::key::{KeyHash, MAX_KEY_LEN};
use crate::lookup::{Lookup, MissReason, ObjectHandle};
use crate::meta::ObjectMeta;
use crate::progress::WriteFailure;
use crate::state::disk::now_ms;
use crate::state::writer::{ObjectWriter, Replaces};
use crate::store::{Begin, Store, WriteRefused};

/// Body bytes copied per read/append: a manifest in one step, a segment in a few
/// dozen, without holding a whole object in memory.
const COPY_CHUNK: u64 = 256 * 1024;

/// Why [`Store::update_meta`] did not update. In every case the stored object is left
/// as it was (or, for [`UpdateError::Changed`], as whoever changed it left it), except
/// [`UpdateError::Corrupt`], which removes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// Reading the old object or writing the new one failed (counted against the
    /// disk), or no disk is in service.
    #[error("disk error")]
    Disk,
    /// The disk cannot hold a second copy of the object while it is rewritten.
    #[error("disk full")]
    NoSpace,
    /// The new metadata does not fit in a header (see [`crate::format::MAX_HEADER_LEN`]
    /// and [`crate::meta::MAX_STORED_FIELDS`]), or the body is now above
    /// `max_object_bytes`.
    #[error("metadata too large")]
    TooLarge,
    /// The object was purged, evicted or replaced while being updated, or a write of
    /// the key is in flight: the update was dropped.
    #[error("object changed during the update")]
    Changed,
    /// The stored body does not match its checksum: the object was removed (and counted
    /// as corrupt); do not serve a handle to it.
    #[error("stored body corrupt")]
    Corrupt,
}

impl UpdateError {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            UpdateError::Disk => "disk",
            UpdateError::NoSpace => "no_space",
            UpdateError::TooLarge => "too_large",
            UpdateError::Changed => "changed",
            UpdateError::Corrupt => "corrupt",
        }
    }

    fn of_write(f: WriteFailure) -> UpdateError {
        match f {
            WriteFailure::Disk => UpdateError::Disk,
            WriteFailure::NoSpace => UpdateError::NoSpace,
            // Cancelled by a purge or a newer write, or the object changed; a length
            // mismatch cannot happen (the copy appends exactly the stored length).
            WriteFailure::Aborted | WriteFailure::LengthMismatch => UpdateError::Changed,
        }
    }
}

impl Store {
    /// Replace the stored response metadata of the complete object `key` with `meta`,
    /// keeping its body. `Ok(true)`: updated; lookups from now on see `meta` (and a
    /// `created_ms` of now). `Ok(false)`: `key` is not stored (or only being written).
    ///
    /// Crash-safe and invisible to readers until done: a new file is written to the
    /// disk's `tmp/` (new header, body copied from the old file), synced as the
    /// durability setting says, renamed over the old one and journaled, exactly like a
    /// new object. Handles opened before keep reading the old file to its end. The
    /// object keeps its place in the eviction queues.
    ///
    /// Cost: that of storing the object again: the lookup's `open` + header `pread`,
    /// create + header write, a read, xxh3 hash and write of the whole body in 256 KiB
    /// steps (the hash is checked against the stored one, so a corrupt body is never
    /// re-stamped as valid), `fdatasync` (with `sync_before_publish`), rename, journal
    /// append. About ten syscalls for a small manifest, a full body copy for a segment;
    /// blocking, so call it from the blocking pool. Needs room on the disk for a second
    /// copy while it runs ([`UpdateError::NoSpace`] otherwise; never waits for eviction).
    pub fn update_meta(&self, key: &[u8], meta: ObjectMeta) -> Result<bool, UpdateError> {
        let inner = &*self.inner;
        if key.len() > MAX_KEY_LEN || inner.lent.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(false);
        }
        let hash = KeyHash::of(key);
        let before = inner.index.get(hash);
        let found = match &before {
            Some(e) => inner.lookup_entry(key, e, false),
            None => inner.lookup_unindexed(key, hash),
        };
        let old = match found {
            Lookup::Hit(h) => h,
            Lookup::Miss(MissReason::DiskError) => return Err(UpdateError::Disk),
            Lookup::Miss(_) | Lookup::Filling(_) => return Ok(false),
        };
        let Some(len) = old.body_len() else {
            return Ok(false);
        };
        // Strictly newer than the object it replaces, even if the clock stepped back.
        let created_ms = now_ms().max(old.created_ms.saturating_add(1));
        let mut w = match self.begin(key, meta, Some(len), created_ms, true) {
            Ok(w) => w,
            Err(Begin::Busy) => return Err(UpdateError::Changed),
            Err(Begin::Refused(r)) => {
                return Err(match r {
                    WriteRefused::NoSpace => UpdateError::NoSpace,
                    WriteRefused::TooLarge => UpdateError::TooLarge,
                    // Updates are never refused for a backlog (`Behind`): listed here
                    // only so the match is exhaustive.
                    WriteRefused::NoDisk | WriteRefused::Disk | WriteRefused::Behind => {
                        UpdateError::Disk
                    }
                    // Lent since the check above: the update is dropped, as when the
                    // object changes under it.
                    WriteRefused::Lent => UpdateError::Changed,
                });
            }
        };
        // From here a purge cancels `w`. Whatever happened before must show now: the
        // index must still hold the object that was opened.
        let replaces = match (before, inner.index.get(hash)) {
            (Some(b), Some(now)) if Arc::ptr_eq(&b, &now) => Replaces::Entry(now),
            // Found by name while loading; the loader has indexed it since.
            (None, Some(now))
                if now.disk == old.disk && now.created_ms == old.created_ms && *now.key == *key =>
            {
                Replaces::Entry(now)
            }
            (None, None)
                if !inner.disks[usize::from(old.disk)]
                    .loaded
                    .load(Ordering::Acquire) =>
            {
                Replaces::Unindexed {
                    disk: old.disk,
                    created_ms: old.created_ms,
                }
            }
            _ => return Err(UpdateError::Changed), // dropping `w` aborts it
        };
        let path = inner.disks[usize::from(old.disk)].object_path(hash);
        let intact = match self.copy_body(&old, len, &path, &mut w) {
            Ok(stored) => stored == w.body_checksum(),
            Err(UpdateError::Corrupt) => false,
            Err(e) => return Err(e),
        };
        if !intact {
            drop(w);
            inner.count_error(
                old.disk,
                DiskErrorKind::Corrupt,
                IoOp::Read,
                &path,
                "body checksum mismatch",
            );
            match replaces {
                Replaces::Entry(e) => {
                    if inner.index.remove_if_same(&e) {
                        inner.delete_object(&e);
                    }
                }
                Replaces::Unindexed { .. } => {
                    let _ = inner.io.remove_file(&path);
                }
            }
            return Err(UpdateError::Corrupt);
        }
        match w.publish(Some(replaces)) {
            Ok(_) => Ok(true),
            Err(e) => Err(UpdateError::of_write(e.failure)),
        }
    }

    /// Append the body of `old` (`len` bytes, file at `path`) to `w`; returns the body
    /// checksum stored in `old`'s header.
    fn copy_body(
        &self,
        old: &ObjectHandle,
        len: u64,
        path: &Path,
        w: &mut ObjectWriter,
    ) -> Result<u64, UpdateError> {
        let inner = &*self.inner;
        let read = |buf: &mut [u8], off: u64| -> Result<(), UpdateError> {
            let mut done = 0;
            while done < buf.len() {
                match inner
                    .io
                    .read_at(&old.file, path, &mut buf[done..], off + done as u64)
                {
                    // The lookup checked the file length: a short file was cut behind
                    // the store's back.
                    Ok(0) => return Err(UpdateError::Corrupt),
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        inner.disk_error(old.disk, IoOp::Read, path, &e);
                        return Err(UpdateError::Disk);
                    }
                }
            }
            Ok(())
        };
        // The header again, for the body checksum (the lookup kept only the metadata);
        // it lies before `body_offset` and is in the page cache.
        let mut head = vec![0u8; old.body_offset.min(MAX_HEADER_LEN as u64) as usize];
        read(&mut head, 0)?;
        let stored = decode_complete(&head).map_err(|_| UpdateError::Corrupt)?;
        if stored.body_len != len {
            return Err(UpdateError::Corrupt);
        }
        let mut buf = vec![0u8; len.min(COPY_CHUNK) as usize];
        let mut pos = 0u64;
        while pos < len {
            let n = (len - pos).min(COPY_CHUNK) as usize;
            read(&mut buf[..n], old.body_offset + pos)?;
            w.append(&buf[..n])
                .map_err(|e| UpdateError::of_write(e.failure))?;
            pos += n as u64;
        }
        Ok(stored.body_checksum)
    }
}
