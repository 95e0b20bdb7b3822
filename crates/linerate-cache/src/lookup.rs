//! Lookups: key → an open file positioned for sendfile, with the decoded metadata, after
//! checking the header (magic, version, checksum, full key, length) on every hit.
//!
//! A lookup takes one shard lock for a hash-map probe and releases it before any I/O.
//! A hit then costs `open` + one `pread` of the first page + `fstat`; the header page of
//! a hot object is in the page cache, but a cold one is a disk read: an event loop
//! calls [`Store::lookup_nowait`], which answers `None` instead of reading a header
//! the page cache does not hold, and then [`Store::lookup`] on a blocking thread. While a disk's index is still
//! loading after a restart, a key missing from the index is looked for by file name on
//! the disk placement picks, so old objects are hits from the first request. Sending
//! the body is the caller's job.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::format::{decode_complete, peek_header_len, HeaderError, HEADER_READ_LEN};
use crate::health::DiskErrorKind;
use crate::index::{lock, Entry};
use crate::io::{FileState, IoOp};
use crate::key::KeyHash;
use crate::meta::ObjectMeta;
use crate::open_files::OpenObject;
use crate::progress::BodyProgress;
use crate::state::Inner;
use crate::store::Store;

/// Result of a lookup.
#[derive(Debug)]
pub enum Lookup {
    /// A complete, verified object.
    Hit(ObjectHandle),
    /// The object is being written right now; follow it with the handle's progress.
    Filling(ObjectHandle),
    /// Not available; the caller fetches from origin.
    Miss(MissReason),
}

impl Lookup {
    /// Short stable name for logs and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            Lookup::Hit(_) => "hit",
            Lookup::Filling(_) => "filling",
            Lookup::Miss(r) => r.as_str(),
        }
    }
}

/// Why a lookup missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissReason {
    /// Not stored.
    NotCached,
    /// Another key with the same hash is stored (a hash collision is a miss).
    KeyMismatch,
    /// The object's disk is out of service.
    DiskOutOfService,
    /// The file failed its header check (removed and counted as corrupt).
    Corrupt(HeaderError),
    /// Opening or reading the file failed (counted against the disk).
    DiskError,
}

impl MissReason {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            MissReason::NotCached => "miss",
            MissReason::KeyMismatch => "miss_key_mismatch",
            MissReason::DiskOutOfService => "miss_disk_out_of_service",
            MissReason::Corrupt(_) => "miss_corrupt",
            MissReason::DiskError => "miss_disk_error",
        }
    }
}

/// How much of the body there is.
#[derive(Debug)]
pub enum Body {
    /// Complete object of `len` bytes.
    Complete {
        /// Body length.
        len: u64,
    },
    /// Still being written: wait with [`BodyProgress::wait_for`] before sending bytes.
    Streaming(BodyProgress),
}

/// An open object: send `file` from `body_offset + start` for up to the body length.
#[derive(Debug)]
pub struct ObjectHandle {
    /// Open, read-only file holding header and body, shared with the store's kept
    /// handle and other responses (read it with positional calls only: `sendfile` with
    /// an offset, `pread`). Remains valid after eviction or purge (the inode lives
    /// until the last descriptor).
    pub file: Arc<File>,
    /// Offset of body byte 0 within `file`.
    pub body_offset: u64,
    /// Body state.
    pub body: Body,
    /// Stored response metadata.
    pub meta: Arc<ObjectMeta>,
    /// When the object's write began, Unix milliseconds.
    pub created_ms: u64,
    /// Index of the disk in the configuration.
    pub disk: u16,
}

impl ObjectHandle {
    /// Body length if complete.
    pub fn body_len(&self) -> Option<u64> {
        match &self.body {
            Body::Complete { len } => Some(*len),
            Body::Streaming(_) => None,
        }
    }
}

impl Store {
    /// Look `key` up. Never blocks on a global lock; may block on one small disk read
    /// (see the file comment). Records a hit for the eviction policy.
    pub fn lookup(&self, key: &[u8]) -> Lookup {
        self.lookup_in(key, Wait::Yes)
            .unwrap_or(Lookup::Miss(MissReason::DiskError))
    }

    /// Like [`Store::lookup`], but never waits for the disk: `None` when the object's
    /// file would have to be opened and its header is not in the page cache (the
    /// caller then runs [`Store::lookup`] where waiting is harmless: a blocking thread,
    /// not an event loop). A kept file, an object being written and a miss answer
    /// as `lookup` does.
    pub fn lookup_nowait(&self, key: &[u8]) -> Option<Lookup> {
        self.lookup_in(key, Wait::No)
    }

    /// [`Store::lookup_latest`] that never waits for the disk (see
    /// [`Store::lookup_nowait`]).
    pub fn lookup_latest_nowait(&self, key: &[u8]) -> Option<Lookup> {
        self.lookup_latest_in(key, Wait::No)
    }

    fn lookup_in(&self, key: &[u8], wait: Wait) -> Option<Lookup> {
        let inner = &*self.inner;
        let hash = KeyHash::of(key);
        let (entry, inflight) = {
            let shard = inner.index.shard(hash);
            (
                shard.objects.get(&hash.0).cloned(),
                shard.inflight.get(&hash.0).cloned(),
            )
        };
        // A write whose body is complete and only waits for its disk's publisher is the
        // newest response for the key: it wins over the copy it is about to replace (the
        // client that fetched it may ask again before the publish, and must not get the
        // older copy back).
        let published_soon = inflight.as_ref().is_some_and(|w| {
            w.followable
                && *w.key == *key
                && matches!(*w.tx.borrow(), crate::progress::Progress::Complete { .. })
        });
        if let Some(e) = entry.filter(|_| !published_soon) {
            return inner.lookup_entry_in(key, &e, true, wait);
        }
        Self::follow_inflight(inner, key, hash, inflight, wait)
    }

    /// Whether the index holds `key`, stored or being written, without opening its file
    /// or counting a use for the eviction policy (a lookup does both). For callers that
    /// only need to know whether fetching `key` would be redundant, such as prefetch; an
    /// object the index still names on a disk out of service counts as held.
    pub fn contains(&self, key: &[u8]) -> bool {
        let hash = KeyHash::of(key);
        let shard = self.inner.index.shard(hash);
        shard.objects.get(&hash.0).is_some_and(|e| *e.key == *key)
            || shard.inflight.get(&hash.0).is_some_and(|w| *w.key == *key)
    }

    /// Like [`Store::lookup`], but an object being written wins over a stored one of the
    /// same key: for a client whose own fill is replacing a stale copy.
    pub fn lookup_latest(&self, key: &[u8]) -> Lookup {
        self.lookup_latest_in(key, Wait::Yes)
            .unwrap_or(Lookup::Miss(MissReason::DiskError))
    }

    fn lookup_latest_in(&self, key: &[u8], wait: Wait) -> Option<Lookup> {
        let inner = &*self.inner;
        let hash = KeyHash::of(key);
        let inflight = inner.index.shard(hash).inflight.get(&hash.0).cloned();
        if inflight
            .as_ref()
            .is_some_and(|w| w.followable && *w.key == *key)
        {
            return Self::follow_inflight(inner, key, hash, inflight, wait);
        }
        self.lookup_in(key, wait)
    }

    fn follow_inflight(
        inner: &Inner,
        key: &[u8],
        hash: KeyHash,
        inflight: Option<Arc<crate::index::Inflight>>,
        wait: Wait,
    ) -> Option<Lookup> {
        if let Some(w) = inflight.filter(|w| w.followable && *w.key == *key) {
            return Some(Lookup::Filling(ObjectHandle {
                file: Arc::clone(&w.file),
                body_offset: w.body_offset,
                body: Body::Streaming(w.progress()),
                meta: Arc::clone(&w.meta),
                created_ms: w.created_ms,
                disk: w.disk,
            }));
        }
        inner.lookup_unindexed_in(key, hash, wait)
    }
}

/// Whether a lookup may wait for the disk (a header read that is not in the page
/// cache): `No` answers `None` instead.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    Yes,
    No,
}

/// Why opening a file for a hit failed.
enum Failure {
    Missing,
    KeyMismatch,
    Corrupt(HeaderError),
    Disk,
    /// The header is not in the page cache and the lookup may not wait (`Wait::No`).
    WouldBlock,
}

impl Failure {
    fn reason(&self) -> MissReason {
        match self {
            Failure::Missing => MissReason::NotCached,
            Failure::KeyMismatch => MissReason::KeyMismatch,
            Failure::Corrupt(h) => MissReason::Corrupt(*h),
            Failure::Disk | Failure::WouldBlock => MissReason::DiskError,
        }
    }
}

impl Inner {
    /// A key the index does not hold: while its disk's index is still loading, the file
    /// name is the key hash, so try the disk it belongs on; otherwise a miss.
    pub(crate) fn lookup_unindexed(&self, key: &[u8], hash: KeyHash) -> Lookup {
        self.lookup_unindexed_in(key, hash, Wait::Yes)
            .unwrap_or(Lookup::Miss(MissReason::DiskError))
    }

    fn lookup_unindexed_in(&self, key: &[u8], hash: KeyHash, wait: Wait) -> Option<Lookup> {
        if let Some(i) = self.place(hash) {
            if !self.disks[i].loaded.load(Ordering::Acquire) {
                return match self.open_verified(i, hash, key, wait) {
                    Ok((h, _)) => Some(Lookup::Hit(h)),
                    Err(Failure::WouldBlock) => None,
                    Err(Failure::Missing) => Some(Lookup::Miss(MissReason::NotCached)),
                    Err(f) => Some(Lookup::Miss(f.reason())),
                };
            }
        }
        Some(Lookup::Miss(MissReason::NotCached))
    }

    /// Open the indexed object `e` for `key`; a failure forgets the entry (and deletes
    /// a corrupt file). `touch`: count a hit for eviction. A file kept open from an
    /// earlier hit answers without a syscall (`handles.rs`).
    pub(crate) fn lookup_entry(&self, key: &[u8], e: &Arc<Entry>, touch: bool) -> Lookup {
        self.lookup_entry_in(key, e, touch, Wait::Yes)
            .unwrap_or(Lookup::Miss(MissReason::DiskError))
    }

    /// [`Inner::lookup_entry`]; `None` only for `Wait::No` when the header is not in
    /// the page cache (nothing is changed then: the entry stays, no use is counted).
    pub(crate) fn lookup_entry_in(
        &self,
        key: &[u8],
        e: &Arc<Entry>,
        touch: bool,
        wait: Wait,
    ) -> Option<Lookup> {
        if *e.key != *key {
            return Some(Lookup::Miss(MissReason::KeyMismatch));
        }
        let disk = usize::from(e.disk);
        if !self.disks[disk].health.in_service() {
            return Some(Lookup::Miss(MissReason::DiskOutOfService));
        }
        if let Some(h) = self.kept(e) {
            if touch {
                e.policy.touch();
            }
            return Some(Lookup::Hit(h));
        }
        Some(match self.open_verified(disk, e.hash, key, wait) {
            Ok((h, st)) => {
                // Kept from the second hit on: an object asked for once (a probe, a
                // one-off request) never takes a place from a hot one.
                let again = e.policy.freq() > 0;
                if touch {
                    e.policy.touch();
                }
                if touch && again && self.open_files.enabled() && !self.lent.load(Ordering::Acquire)
                {
                    self.open_files.keep(e, Arc::new(self.to_kept(&h, st)));
                }
                Lookup::Hit(h)
            }
            Err(Failure::WouldBlock) => return None,
            Err(f) => {
                // The index was wrong about this object: forget it.
                if self.index.remove_if_same(e) {
                    match f {
                        Failure::Corrupt(_) | Failure::KeyMismatch => self.delete_object(e),
                        Failure::Missing | Failure::Disk | Failure::WouldBlock => self.untrack(e),
                    }
                }
                Lookup::Miss(f.reason())
            }
        })
    }

    /// A hit from the file `e` keeps open, its path checked again (`stat`: the same
    /// device and inode, the full length) when its last check is older than
    /// `StoreConfig::open_file_recheck`. A file that fails the check is closed; the
    /// caller opens the path again and finds what is there. None on a lent store.
    fn kept(&self, e: &Entry) -> Option<ObjectHandle> {
        if self.lent.load(Ordering::Acquire) {
            return None;
        }
        let o = lock(&e.open).clone()?;
        let now = self.open_files.now();
        if !self.open_files.fresh(&o, now) {
            let d = &self.disks[usize::from(e.disk)];
            match self.io.path_state(&d.object_path(e.hash)) {
                Ok(st) if st.dev == o.dev && st.ino == o.ino && st.len >= o.file_len => {
                    o.checked.store(now, Ordering::Relaxed);
                }
                _ => {
                    self.open_files.close_seq(e, o.seq);
                    return None;
                }
            }
        }
        Some(ObjectHandle {
            file: Arc::clone(&o.file),
            body_offset: o.body_offset,
            body: Body::Complete { len: o.body_len },
            meta: Arc::clone(&o.meta),
            created_ms: o.created_ms,
            disk: self.disks[usize::from(e.disk)].id,
        })
    }

    /// What a hit's handle keeps open for later hits (sharing its file and metadata);
    /// `st`: the file's `fstat` from the open.
    fn to_kept(&self, h: &ObjectHandle, st: FileState) -> OpenObject {
        let body_len = h.body_len().unwrap_or(0);
        let (live, seq) = self.open_files.live();
        OpenObject {
            file: Arc::clone(&h.file),
            body_offset: h.body_offset,
            body_len,
            file_len: h.body_offset + body_len,
            dev: st.dev,
            ino: st.ino,
            meta: Arc::clone(&h.meta),
            created_ms: h.created_ms,
            checked: AtomicU64::new(self.open_files.now()),
            seq,
            _live: live,
        }
    }

    /// Open the object file for `hash` on disk `i` and verify it belongs to `key`.
    fn open_verified(
        &self,
        i: usize,
        hash: KeyHash,
        key: &[u8],
        wait: Wait,
    ) -> Result<(ObjectHandle, FileState), Failure> {
        let disk = &self.disks[i];
        let path = disk.object_path(hash);
        let id = disk.id;
        let file = match self.io.open_read(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A missing file is normal (evicted concurrently, lost journal record);
                // a missing `objects/` directory is a failing disk.
                if !self.io.is_dir(&disk.objects_dir).unwrap_or(false) {
                    self.disk_error(id, IoOp::Open, &disk.objects_dir, &e);
                    return Err(Failure::Disk);
                }
                return Err(Failure::Missing);
            }
            Err(e) => {
                self.disk_error(id, IoOp::Open, &path, &e);
                return Err(Failure::Disk);
            }
        };
        let read = |buf: &mut [u8], off: u64| match wait {
            Wait::Yes => self.io.read_at(&file, &path, buf, off),
            Wait::No => self.io.read_at_nowait(&file, &path, buf, off),
        };
        let would_block = |e: &std::io::Error| e.kind() == std::io::ErrorKind::WouldBlock;
        let mut buf = vec![0u8; HEADER_READ_LEN];
        let n = match read(&mut buf, 0) {
            Ok(n) => n,
            Err(e) if wait == Wait::No && would_block(&e) => return Err(Failure::WouldBlock),
            Err(e) => {
                self.disk_error(id, IoOp::Read, &path, &e);
                return Err(Failure::Disk);
            }
        };
        buf.truncate(n);
        let corrupt = |h: HeaderError| {
            self.count_error(id, DiskErrorKind::Corrupt, IoOp::Read, &path, h.as_str());
            Failure::Corrupt(h)
        };
        let need = peek_header_len(&buf).map_err(corrupt)?;
        if need > buf.len() {
            buf.resize(need, 0);
            match read(&mut buf[n..], n as u64) {
                Ok(m) if n + m == need => {}
                // Only part of it in the page cache: the rest would wait.
                Ok(_) if wait == Wait::No => return Err(Failure::WouldBlock),
                Err(e) if wait == Wait::No && would_block(&e) => return Err(Failure::WouldBlock),
                Ok(_) => return Err(corrupt(HeaderError::Truncated)),
                Err(e) => {
                    self.disk_error(id, IoOp::Read, &path, &e);
                    return Err(Failure::Disk);
                }
            }
        }
        let header = decode_complete(&buf).map_err(corrupt)?;
        if header.key != key {
            return Err(Failure::KeyMismatch);
        }
        let st = match self.io.file_state(&file, &path) {
            Ok(st) if st.len >= header.file_len() => st,
            Ok(_) => return Err(corrupt(HeaderError::Truncated)),
            Err(e) => {
                self.disk_error(id, IoOp::Read, &path, &e);
                return Err(Failure::Disk);
            }
        };
        let handle = ObjectHandle {
            file: Arc::new(file),
            body_offset: header.body_offset,
            body: Body::Complete {
                len: header.body_len,
            },
            meta: Arc::new(header.meta),
            created_ms: header.created_ms,
            disk: id,
        };
        Ok((handle, st))
    }
}
