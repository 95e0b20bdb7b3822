//! The object store: opening the disks, admitting writes, purging, statistics, taking
//! a failing disk out of service, and shutting down with a snapshot.
//!
//! `Store` is the facade on top: the state it shares with its writers and threads is
//! `state.rs` ([`Inner`], at the bottom of the files that work on it), lookups are in
//! `lookup.rs`, the per-disk background work (index load, eviction, compaction,
//! reconcile, probing) in `maintenance.rs`, the write path in `writer.rs`, lending the
//! store to the next process in `lend.rs`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;
use xxhash_rust::xxh3::Xxh3;

use crate::config::{ConfigError, StoreConfig};
use crate::format::{body_offset_for, ObjectHeader, BODY_LEN_UNKNOWN};
use crate::health::{DiskErrorKind, DiskState};
use crate::index::Inflight;
use crate::index::{lock, Index};
use crate::io::{IoOp, StoreIo};
use crate::journal::{list_journals, JournalWriter, Record};
use crate::key::{KeyHash, MAX_KEY_LEN};
use crate::lease::StoreLock;
use crate::meta::ObjectMeta;
use crate::open_files::OpenFiles;
use crate::policy::QueueId;
use crate::progress::Progress;
use crate::state::disk::{charge_for, now_ms, parse_disk_states, Disk, Reservation};
use crate::state::disk::{DISK_STATES_FILE, OUT_OF_SERVICE_MARKER};
use crate::state::writer::ObjectWriter;
use crate::state::Inner;
use crate::stats::DiskStats;

/// How long [`Store::purge`] and [`Store::purge_prefix`] wait for the index to finish
/// loading before purging what is loaded. Loading a million objects takes about a
/// second (docs/benchmarks.md); a minute covers slow disks with margin.
const PURGE_LOAD_WAIT: Duration = Duration::from_secs(60);

/// Why the store could not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The configuration is invalid.
    #[error("store configuration: {0}")]
    Config(#[from] ConfigError),
    /// A background thread could not be started.
    #[error("cannot start store thread: {0}")]
    Thread(std::io::Error),
    /// The writer lease could not be taken (another process holds the store).
    #[error("{0}")]
    Lock(#[from] crate::lease::LockError),
}

/// Why a write was not started. The caller serves the response without storing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WriteRefused {
    /// No disk is in service.
    #[error("no disk in service")]
    NoDisk,
    /// The chosen disk is at capacity; eviction is catching up.
    #[error("disk full")]
    NoSpace,
    /// Larger than `max_object_bytes`, or the key or metadata is too large.
    #[error("object too large")]
    TooLarge,
    /// Creating the temporary file failed (counted against the disk).
    #[error("disk error")]
    Disk,
    /// The store is lent to the next process of an upgrade ([`Store::lend`]): this
    /// one no longer writes.
    #[error("store lent to the next process")]
    Lent,
    /// The disk is behind: more complete objects are waiting to be flushed and
    /// published than it should hold (`publish.rs`). The object is relayed, not stored.
    #[error("disk behind the fills")]
    Behind,
}

impl WriteRefused {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteRefused::NoDisk => "no_disk",
            WriteRefused::NoSpace => "no_space",
            WriteRefused::TooLarge => "too_large",
            WriteRefused::Disk => "disk",
            WriteRefused::Lent => "lent",
            WriteRefused::Behind => "behind",
        }
    }
}

/// Why [`Store::begin`] did not start a write.
pub(crate) enum Begin {
    /// As for [`Store::begin_write`].
    Refused(WriteRefused),
    /// An update found a write of the key in flight.
    Busy,
}

/// Bodies longer than this are preallocated (`fallocate`) when their length is known:
/// 8 MiB, above the largest usual slice (4 MiB by default).
const PREALLOCATE_ABOVE: u64 = 8 << 20;

/// The persistent multi-disk object store. Cheap to share (`Arc<Store>`); every method
/// takes `&self`. Dropping it stops the background threads and writes snapshots.
pub struct Store {
    pub(crate) inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The writer lease (`None` for stores opened with a test I/O seam).
    pub(crate) lock: Option<StoreLock>,
}

impl Store {
    /// Open (or create) the store on the configured disks with the real filesystem,
    /// taking the writer lease first ([`StoreLock::acquire`]): a store another process
    /// holds fails with [`OpenError::Lock`].
    pub fn open(cfg: StoreConfig) -> Result<Store, OpenError> {
        let lock = StoreLock::acquire(&cfg)?;
        Store::open_locked(cfg, lock)
    }

    /// Open with a lease already held (taken over from the previous process of an
    /// upgrade, [`StoreLock::adopt`]).
    pub fn open_locked(cfg: StoreConfig, lock: StoreLock) -> Result<Store, OpenError> {
        let mut store = Store::open_with_io(cfg, Arc::new(crate::io::RealIo))?;
        store.lock = Some(lock);
        Ok(store)
    }

    /// Tests only: what a crash (kill -9) leaves. The writer lease is released, as
    /// the kernel does when a process dies; nothing is closed, no snapshot is written,
    /// and the rest is leaked (`std::mem::forget`), as a dead process never finishes.
    #[doc(hidden)]
    pub fn crash_for_test(mut self) {
        drop(self.lock.take());
        std::mem::forget(self);
    }

    /// Open with an explicit I/O seam (tests inject faults). Returns at once: each
    /// disk's index loads in the background while lookups fall back to opening files
    /// by name. Cost: per disk, a few directory operations and the removal of leftover
    /// temporary files.
    pub fn open_with_io(cfg: StoreConfig, io: Arc<dyn StoreIo>) -> Result<Store, OpenError> {
        cfg.validate()?;
        // Out-of-service names recorded on any readable disk.
        let mut remembered = Vec::new();
        for d in &cfg.disks {
            if let Ok(buf) = io.read_file(&d.path.join(DISK_STATES_FILE)) {
                remembered.extend(parse_disk_states(&buf));
            }
        }
        let mut disks = Vec::with_capacity(cfg.disks.len());
        for (i, dcfg) in cfg.disks.iter().enumerate() {
            let marked = remembered.contains(&dcfg.name)
                || io.is_dir(&dcfg.path).unwrap_or(false)
                    && io.read_file(&dcfg.path.join(OUT_OF_SERVICE_MARKER)).is_ok();
            // The id fits: validate() bounds the disk count to u16.
            let disk = Disk::new(i as u16, dcfg.clone(), DiskState::InService);
            if marked {
                tracing::warn!(disk = %dcfg.name, "disk remembered as out of service; probing");
                disk.health.set_state(DiskState::OutOfService);
            } else if let Err((op, e)) = prepare_disk(&*io, &disk) {
                tracing::error!(disk = %dcfg.name, op = op.as_str(), error = %e, "cannot prepare disk; out of service");
                disk.health.set_state(DiskState::OutOfService);
            }
            disks.push(disk);
        }
        let inner = Arc::new(Inner {
            index: Index::new(cfg.index_shards),
            open_files: OpenFiles::new(cfg.open_files, cfg.open_file_recheck),
            cfg,
            io,
            disks,
            shutdown: AtomicBool::new(false),
            purged_prefixes: Mutex::new(Vec::new()),
            loaded_cv: (Mutex::new(()), Condvar::new()),
            lent: AtomicBool::new(false),
        });
        inner.persist_disk_states();
        let mut threads = Vec::new();
        for i in 0..inner.disks.len() {
            let inner2 = Arc::clone(&inner);
            let t = std::thread::Builder::new()
                .name(format!("store-{}", inner.disks[i].name()))
                .spawn(move || crate::maintenance::run(&inner2, i))
                .map_err(OpenError::Thread)?;
            threads.push(t);
            let inner2 = Arc::clone(&inner);
            let t = std::thread::Builder::new()
                .name(format!("publish-{}", inner.disks[i].name()))
                .spawn(move || crate::publish::run(&inner2, i))
                .map_err(OpenError::Thread)?;
            threads.push(t);
        }
        Ok(Store {
            inner,
            threads: Mutex::new(threads),
            lock: None,
        })
    }

    /// Start writing `key` with response metadata `meta`. `expected_len` is the body
    /// length when known (Content-Length): it is reserved up front, preallocated, and
    /// enforced. Never waits for eviction: if the disk is at capacity the write is
    /// refused and counted. Cost: create + one `pwrite` of the header (blocking).
    ///
    /// One write per key at a time is the caller's job. If a write of `key` is already
    /// in flight, the new one takes its place: lookups follow the new one, and the old
    /// one is cancelled (its appends still succeed, its `finish` fails with
    /// [`crate::WriteFailure::Aborted`] and its readers get that failure), so the last
    /// write begun is the one stored.
    pub fn begin_write(
        &self,
        key: &[u8],
        meta: ObjectMeta,
        expected_len: Option<u64>,
    ) -> Result<ObjectWriter, WriteRefused> {
        match self.begin(key, meta, expected_len, now_ms(), false) {
            Ok(w) => Ok(w),
            Err(Begin::Refused(r)) => Err(r),
            // Never: only updates give way to a write in flight.
            Err(Begin::Busy) => Err(WriteRefused::Disk),
        }
    }

    /// [`Store::begin_write`] with the creation time given. `update`: a metadata update
    /// (see `update.rs`), which lookups do not follow and which gives way (→
    /// [`Begin::Busy`]) to a write of the key already in flight instead of displacing it.
    pub(crate) fn begin(
        &self,
        key: &[u8],
        meta: ObjectMeta,
        expected_len: Option<u64>,
        created_ms: u64,
        update: bool,
    ) -> Result<ObjectWriter, Begin> {
        let inner = &self.inner;
        if inner.lent.load(Ordering::Acquire) {
            return Err(Begin::Refused(WriteRefused::Lent));
        }
        if key.len() > MAX_KEY_LEN || expected_len.is_some_and(|n| n > inner.cfg.max_object_bytes) {
            return Err(Begin::Refused(WriteRefused::TooLarge));
        }
        let hash = KeyHash::of(key);
        let disk_id = inner
            .place(hash)
            .ok_or(Begin::Refused(WriteRefused::NoDisk))?;
        let disk = &inner.disks[disk_id];
        if !update
            && !disk
                .publish
                .admit(disk.name(), inner.cfg.max_publish_backlog)
        {
            return Err(Begin::Refused(WriteRefused::Behind));
        }
        let mut header = ObjectHeader {
            key: key.to_vec(),
            meta,
            body_offset: 0,
            body_len: BODY_LEN_UNKNOWN,
            body_checksum: 0,
            created_ms,
        };
        let too_large = |_| Begin::Refused(WriteRefused::TooLarge);
        // Encoded once to check it fits; its length does not depend on the offset.
        let header_len = header.encode().map_err(too_large)?.len();
        header.body_offset = body_offset_for(header_len, expected_len);
        let reserve = charge_for(header.body_offset + expected_len.unwrap_or(0));
        if disk.reserve(reserve) == Reservation::Refused {
            return Err(Begin::Refused(WriteRefused::NoSpace));
        }
        let tmp = disk.tmp_path(hash);
        let io = &*inner.io;
        let file = match io.create_new(&tmp) {
            Ok(f) => f,
            Err(e) => {
                disk.release(reserve);
                inner.disk_error(disk_id as u16, IoOp::Create, &tmp, &e);
                return Err(Begin::Refused(WriteRefused::Disk));
            }
        };
        // The header is written once, at publish (readers follow the body through
        // the in-flight entry, and a crash leaves only `tmp/`, emptied at start-up).
        // Bodies up to a slice are written in one go, which delayed allocation lays
        // out contiguously: only larger ones are preallocated.
        let prep = match expected_len {
            Some(n) if n > PREALLOCATE_ABOVE => io
                .preallocate(&file, &tmp, 0, header.body_offset + n)
                .map_err(|e| (IoOp::Preallocate, e)),
            _ => Ok(()),
        };
        if let Err((op, e)) = prep {
            disk.release(reserve);
            let _ = io.remove_file(&tmp);
            inner.disk_error(disk_id as u16, op, &tmp, &e);
            return Err(Begin::Refused(
                if DiskErrorKind::of(&e) == DiskErrorKind::NoSpace {
                    WriteRefused::NoSpace
                } else {
                    WriteRefused::Disk
                },
            ));
        }
        let (tx, _) = watch::channel(Progress::Writing { written: 0 });
        let inflight = Arc::new(Inflight {
            file: Arc::new(file),
            body_offset: header.body_offset,
            meta: Arc::new(header.meta.clone()),
            key: key.into(),
            created_ms,
            disk: disk_id as u16,
            tx,
            cancelled: AtomicBool::new(false),
            followable: !update,
            unstored: AtomicBool::new(false),
        });
        let writer = ObjectWriter {
            inner: Arc::clone(inner),
            disk: disk_id as u16,
            hash,
            header,
            tmp_path: tmp,
            inflight: Arc::clone(&inflight),
            written: 0,
            expected: expected_len,
            reserved: reserve,
            hasher: Xxh3::new(),
            header_final: false,
            done: false,
        };
        let busy = {
            let mut shard = inner.index.shard(hash);
            if inner.lent.load(Ordering::SeqCst) {
                // Lent since the check above: `lend` may already have counted this
                // shard's writes, so this one must not start.
                drop(shard);
                drop(writer);
                return Err(Begin::Refused(WriteRefused::Lent));
            }
            if update && shard.inflight.contains_key(&hash.0) {
                true
            } else {
                if let Some(old) = shard.inflight.insert(hash.0, inflight) {
                    old.cancel();
                }
                false
            }
        };
        if busy {
            drop(writer); // removes the temporary file and the reservation
            return Err(Begin::Busy);
        }
        Ok(writer)
    }

    /// Remove `key` from the index and its disk (file unlinked, removal journaled).
    /// Cancels an in-progress write of it: lookups stop finding it at once, its appends
    /// still succeed, its `finish` fails with [`crate::WriteFailure::Aborted`] (so it is
    /// never published, even if it was finishing right now) and readers following it get
    /// that failure. Returns whether an object was removed: a stored one, or a write
    /// whose body was complete (it answers lookups as the object while it waits for
    /// its publish, so cancelling it is what takes the object down).
    /// Blocks until the index is loaded (at most [`PURGE_LOAD_WAIT`]) so a purge is
    /// never undone by the loader.
    pub fn purge(&self, key: &[u8]) -> bool {
        let inner = &self.inner;
        if inner.lent.load(Ordering::Acquire) {
            return false;
        }
        inner.wait_loaded(PURGE_LOAD_WAIT);
        let hash = KeyHash::of(key);
        let (entry, cancelled_whole) = {
            // Cancel under the shard lock: a writer indexes under it after checking
            // the flag, so either it sees the cancel or this purge sees its entry.
            let mut shard = inner.index.shard(hash);
            let mut cancelled_whole = false;
            if shard.inflight.get(&hash.0).is_some_and(|w| *w.key == *key) {
                if let Some(w) = shard.inflight.remove(&hash.0) {
                    w.cancel();
                    // A body already complete (waiting for its publish) has been
                    // answering lookups as the object: removing it is a purge.
                    cancelled_whole = matches!(*w.tx.borrow(), Progress::Complete { .. });
                }
            }
            (shard.objects.get(&hash.0).cloned(), cancelled_whole)
        };
        let removed = match entry.filter(|e| *e.key == *key) {
            Some(e) if inner.index.remove_if_same(&e) => {
                inner.delete_object(&e);
                true
            }
            _ => false,
        };
        removed || cancelled_whole
    }

    /// Remove every object whose key starts with `prefix` (index, files, journals), and
    /// cancel writes of such keys in flight (as [`Store::purge`] does). Returns how many
    /// stored objects were removed. Cost: walks every index shard twice (one lock at a
    /// time) and unlinks each match; blocks like [`Store::purge`].
    pub fn purge_prefix(&self, prefix: &[u8]) -> u64 {
        let inner = &self.inner;
        if inner.lent.load(Ordering::Acquire) {
            return 0;
        }
        inner.wait_loaded(PURGE_LOAD_WAIT);
        lock(&inner.purged_prefixes).push(prefix.to_vec());
        // Writes first: one that indexes after its shard was walked sees the cancel;
        // one that indexed before is removed by the drain below.
        inner
            .index
            .cancel_inflight_matching(|k| k.starts_with(prefix));
        let removed = inner.index.drain_matching(|e| e.key.starts_with(prefix));
        for e in &removed {
            inner.delete_object(e);
        }
        removed.len() as u64
    }

    /// A copy of every stored key (for an index kept outside the store, such as the
    /// cache's tag index, rebuilt at start). Walks every index shard once, one lock at
    /// a time; costs the keys' bytes in memory while the caller holds them.
    pub fn keys(&self) -> Vec<Box<[u8]>> {
        self.inner.index.keys()
    }

    /// Look the stored object `key` up like [`Store::lookup`] without counting a use
    /// for the eviction policy, and without following a write in flight (a rebuild of
    /// an index kept outside the store reads each object's metadata once).
    pub fn peek(&self, key: &[u8]) -> crate::Lookup {
        let hash = KeyHash::of(key);
        let entry = self.inner.index.shard(hash).objects.get(&hash.0).cloned();
        match entry {
            Some(e) => self.inner.lookup_entry(key, &e, false),
            None => crate::Lookup::Miss(crate::MissReason::NotCached),
        }
    }

    /// Pin (`pinned`) or unpin the stored object `key`: a pinned object is never
    /// evicted (purges still remove it); the change is journaled, so it survives a
    /// restart. Returns whether the object is stored (and so was changed). An object
    /// still being written is not stored yet: `false`, and its write is left as it is
    /// (a mark on it would pin it at its publish for a caller that may have gone by
    /// then, with nobody left to unpin it); to have a write indexed pinned, ask
    /// [`Store::pin_on_write`] before it.
    pub fn pin(&self, key: &[u8], pinned: bool) -> bool {
        let inner = &self.inner;
        let hash = KeyHash::of(key);
        let indexed = inner
            .index
            .shard(hash)
            .objects
            .get(&hash.0)
            .filter(|e| *e.key == *key)
            .cloned();
        let Some(entry) = indexed else {
            return false;
        };
        let disk = &inner.disks[usize::from(entry.disk)];
        // An entry indexed but not tracked yet (its publisher is between the two) is
        // not stored yet either: a pin now would be lost when it is tracked.
        let (changed, stored) = {
            let mut policy = lock(&disk.policy);
            let changed = if pinned {
                entry.policy.queue() != QueueId::Pinned && policy.pin(&entry)
            } else {
                policy.unpin(&entry)
            };
            let queue = entry.policy.queue();
            (changed, queue != QueueId::Removed && queue != QueueId::New)
        };
        if changed {
            if let Err(err) = disk.journal(&*inner.io, &Record::Pin { hash, pinned }) {
                inner.disk_error(disk.id, IoOp::Append, disk.dir(), &err);
            }
        }
        stored
    }

    /// Pin `key` as it is written, from now until [`Store::pin_on_write_done`]: a write
    /// of it (in flight now, or begun meanwhile) published in between is indexed
    /// pinned, so eviction never sees it unpinned (a fill job that pins asks for this
    /// before it requests the object; pinning after the answer left a moment in which
    /// the object could be evicted). A write published after the last
    /// `pin_on_write_done` is not pinned: the request that asked gave up on it (a fill
    /// job's request that failed while another client's write of the key went on), and
    /// a pin nobody holds would never be undone. Calls nest (counted per key). An
    /// object already stored is not changed: [`Store::pin`] it.
    pub fn pin_on_write(&self, key: &[u8]) {
        let hash = KeyHash::of(key);
        let mut shard = self.inner.index.shard(hash);
        *shard.pin_next.entry(hash.0).or_default() += 1;
    }

    /// End one [`Store::pin_on_write`] of `key`.
    pub fn pin_on_write_done(&self, key: &[u8]) {
        let hash = KeyHash::of(key);
        let mut shard = self.inner.index.shard(hash);
        if let Some(n) = shard.pin_next.get_mut(&hash.0) {
            *n -= 1;
            if *n == 0 {
                shard.pin_next.remove(&hash.0);
            }
        }
    }

    /// Bytes of pinned objects, all disks.
    pub fn pinned_bytes(&self) -> u64 {
        self.inner
            .disks
            .iter()
            .map(|d| lock(&d.policy).pinned_bytes())
            .sum()
    }

    /// Per-disk statistics (plain counters, summed on read).
    pub fn stats(&self) -> Vec<DiskStats> {
        self.inner.disks.iter().map(DiskStats::of).collect()
    }

    /// Object files kept open for later hits now: descriptors the store holds beyond
    /// those of writes in flight (responses still sending from a file that was closed
    /// here hold their own reference and are not counted). At most
    /// [`StoreConfig::open_files`].
    pub fn open_files(&self) -> usize {
        self.inner.open_files.count()
    }

    /// Objects in the in-memory index (all disks). Cost: locks every shard in turn.
    pub fn indexed_objects(&self) -> usize {
        self.inner.index.len()
    }

    /// Whether every in-service disk has finished loading its index.
    pub fn is_loaded(&self) -> bool {
        self.inner.all_loaded()
    }

    /// Wait up to `timeout` for [`Store::is_loaded`]; returns the final answer.
    pub fn wait_loaded(&self, timeout: Duration) -> bool {
        self.inner.wait_loaded(timeout)
    }

    /// Stop the background threads and write a snapshot of every loaded, in-service
    /// disk, so the next start replays no journal. Also done on drop.
    pub fn close(&self) {
        let inner = &self.inner;
        if inner.shutdown.swap(true, Ordering::AcqRel) {
            return;
        }
        for d in &inner.disks {
            d.wake();
            d.publish.wake();
        }
        for t in lock(&self.threads).drain(..) {
            if t.join().is_err() {
                tracing::error!("store maintenance thread panicked");
            }
        }
        // A lent store belongs to the next process now: writing a snapshot here would
        // overwrite the index it is building.
        if inner.lent.load(Ordering::Acquire) {
            return;
        }
        for (i, d) in inner.disks.iter().enumerate() {
            if d.health.in_service() && d.loaded.load(Ordering::Acquire) {
                crate::maintenance::compact(inner, i);
            }
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.close();
    }
}

/// Create the store's directories on a disk and empty its `tmp/` (what a crash left).
fn prepare_disk(io: &dyn StoreIo, disk: &Disk) -> Result<(), (IoOp, std::io::Error)> {
    let mk = |p: &Path| io.create_dir(p).map_err(|e| (IoOp::CreateDir, e));
    // The disk directory and any missing parents (a fresh install); below it only
    // the store's own directories.
    let missing: Vec<&Path> = disk
        .dir()
        .ancestors()
        .take_while(|a| !io.is_dir(a).unwrap_or(false))
        .collect();
    for a in missing.iter().rev() {
        mk(a)?;
    }
    mk(&disk.objects_dir)?;
    // The fan-out directories already there (one listing of `objects/`): a publish
    // into one of them skips the `mkdir` of its first use in this process. A fresh
    // disk makes each on first use, once (4,096 in all).
    let listed = io
        .read_dir(&disk.objects_dir)
        .map_err(|e| (IoOp::ReadDir, e))?;
    for p in listed {
        if let Some(name) = p.file_name().and_then(|n| n.to_str()) {
            disk.fanout_found(name);
        }
    }
    mk(&disk.tmp_dir)?;
    let leftovers = io.read_dir(&disk.tmp_dir).map_err(|e| (IoOp::ReadDir, e))?;
    if !leftovers.is_empty() {
        tracing::info!(disk = %disk.name(), files = leftovers.len(), "removing temporary files left by a crash");
    }
    for p in leftovers {
        io.remove_file(&p).map_err(|e| (IoOp::Remove, e))?;
    }
    let space = io.space(disk.dir()).map_err(|e| (IoOp::Space, e))?;
    if space.read_only {
        return Err((IoOp::Space, std::io::Error::from_raw_os_error(30)));
    }
    let cap = disk.cfg.max_bytes.min(space.total_bytes);
    disk.capacity.store(cap, Ordering::Relaxed);
    *lock(&disk.policy) = crate::policy::S3Fifo::new(cap);
    let gen = list_journals(io, disk.dir())
        .map_err(|e| (IoOp::ReadDir, e))?
        .last()
        .map_or(1, |g| g + 1);
    let j = JournalWriter::create(io, disk.dir(), gen).map_err(|e| (IoOp::Create, e))?;
    *lock(&disk.journal) = Some(j);
    Ok(())
}
