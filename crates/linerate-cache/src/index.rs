//! The in-memory index: key hash → [`Entry`] (which disk, how many bytes, the full key
//! and the eviction state), split into mutex-protected shards chosen by the hash, so
//! lookups on different cores almost never meet on one lock and no lock is global.
//!
//! It also tracks objects being written ("in flight") so readers can follow a writer.
//! The index is a cache of what the disks hold, never the authority: a lookup still
//! opens the file and checks its header. Persistence (journal and snapshot) and
//! eviction order live elsewhere.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::key::KeyHash;
use crate::meta::ObjectMeta;
use crate::policy::{PolicyState, Tracked};
use crate::progress::{BodyProgress, Progress};

/// One stored object as the index knows it.
#[derive(Debug)]
pub struct Entry {
    /// Hash of the key.
    pub hash: KeyHash,
    /// The full key (kept for prefix purge and for snapshots).
    pub key: Box<[u8]>,
    /// Disk index in the configuration.
    pub disk: u16,
    /// Bytes charged against the disk's capacity (file length rounded up to 4 KiB).
    pub charge: u64,
    /// When the object's write began, Unix milliseconds; newer wins on conflicts.
    pub created_ms: u64,
    /// Eviction state.
    pub policy: PolicyState,
    /// The object's file, kept open between hits (`handles.rs`); `None` until a hit
    /// opens it, and again once it is closed.
    pub(crate) open: Mutex<Option<Arc<OpenObject>>>,
}

impl Tracked for Entry {
    fn key_hash(&self) -> u128 {
        self.hash.0
    }
    fn charge(&self) -> u64 {
        self.charge
    }
    fn policy(&self) -> &PolicyState {
        &self.policy
    }
}

/// Identity hasher: keys are already uniform 128-bit hashes.
#[derive(Default)]
pub(crate) struct HashHasher(u64);

impl Hasher for HashHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

pub(crate) type HashMapOf<V> = HashMap<u128, V, BuildHasherDefault<HashHasher>>;

/// Contents of one shard.
#[derive(Default)]
pub(crate) struct Shard {
    pub(crate) objects: HashMapOf<Arc<Entry>>,
    pub(crate) inflight: HashMapOf<Arc<Inflight>>,
    /// Keys to be written pinned (`Store::pin_on_write`), with how many ask. Read at
    /// the publish, under this shard's lock: a write is indexed pinned only while some
    /// request still asks, never for one that gave up (nothing would unpin it).
    pub(crate) pin_next: HashMapOf<u32>,
}

/// The sharded index.
pub(crate) struct Index {
    shards: Box<[Mutex<Shard>]>,
    shift: u32,
}

/// What an insert displaced.
pub(crate) enum Inserted {
    /// The key was new.
    New,
    /// An older entry was replaced; the caller releases it from its disk's policy.
    Replaced(Arc<Entry>),
    /// A newer entry was already there; the caller drops the one it offered.
    KeptNewer(Arc<Entry>),
}

impl Index {
    /// `shards` is rounded up to a power of two.
    pub(crate) fn new(shards: usize) -> Index {
        let n = shards.max(1).next_power_of_two();
        let shards = (0..n).map(|_| Mutex::new(Shard::default())).collect();
        Index {
            shards,
            shift: 128 - n.trailing_zeros(),
        }
    }

    /// Lock the shard of `hash`. Holding time is a hash-map operation; no I/O is ever
    /// done under a shard lock.
    pub(crate) fn shard(&self, hash: KeyHash) -> MutexGuard<'_, Shard> {
        // Top bits pick the shard; the map inside uses the low bits, so they are
        // independent. `shift` is 128 for a single shard, where checked_shr gives None.
        let i = hash.0.checked_shr(self.shift).unwrap_or(0) as usize;
        lock(&self.shards[i])
    }

    /// Entry for `hash`, if indexed.
    pub(crate) fn get(&self, hash: KeyHash) -> Option<Arc<Entry>> {
        self.shard(hash).objects.get(&hash.0).cloned()
    }

    /// Insert `entry`; on a conflict the one with the newer `created_ms` stays (ties go
    /// to the newcomer: a writer publishing now).
    pub(crate) fn insert(&self, entry: Arc<Entry>) -> Inserted {
        insert_locked(&mut self.shard(entry.hash), entry)
    }

    /// [`Index::insert`], but only if `allow` (called with the shard, under its lock)
    /// agrees; `None` if it refused. A writer publishes through this so a purge (which
    /// cancels it under the same lock) is never undone by the publish.
    pub(crate) fn insert_if(
        &self,
        entry: Arc<Entry>,
        allow: impl FnOnce(&Shard) -> bool,
    ) -> Option<Inserted> {
        let mut shard = self.shard(entry.hash);
        if !allow(&shard) {
            return None;
        }
        Some(insert_locked(&mut shard, entry))
    }

    /// Cancel and forget every in-flight write whose key matches `pred` (one shard lock
    /// at a time): none of them will publish. Used by prefix purge.
    pub(crate) fn cancel_inflight_matching(&self, mut pred: impl FnMut(&[u8]) -> bool) {
        for s in self.shards.iter() {
            lock(s).inflight.retain(|_, w| {
                if pred(&w.key) {
                    w.cancel();
                    false
                } else {
                    true
                }
            });
        }
    }

    /// Remove `hash` only if it still maps to `entry`.
    pub(crate) fn remove_if_same(&self, entry: &Arc<Entry>) -> bool {
        let mut shard = self.shard(entry.hash);
        match shard.objects.get(&entry.hash.0) {
            Some(cur) if Arc::ptr_eq(cur, entry) => {
                shard.objects.remove(&entry.hash.0);
                true
            }
            _ => false,
        }
    }

    /// Remove and return every entry matching `pred`, one shard at a time (each shard
    /// lock is held only for its own scan).
    pub(crate) fn drain_matching(&self, mut pred: impl FnMut(&Entry) -> bool) -> Vec<Arc<Entry>> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let mut shard = lock(s);
            shard.objects.retain(|_, e| {
                if pred(e) {
                    out.push(Arc::clone(e));
                    false
                } else {
                    true
                }
            });
        }
        out
    }

    /// A copy of every stored key, one shard at a time (for indexes kept outside the
    /// store, rebuilt at start).
    pub(crate) fn keys(&self) -> Vec<Box<[u8]>> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            out.extend(lock(s).objects.values().map(|e| e.key.clone()));
        }
        out
    }

    /// Mark every write whose body is still coming in to end unstored (`Store::lend`);
    /// how many were marked.
    pub(crate) fn leave_unstored(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                lock(s)
                    .inflight
                    .values()
                    .filter(|w| w.leave_unstored())
                    .count()
            })
            .sum()
    }

    /// Writes in flight that are to be published (not left unstored by a lend).
    pub(crate) fn to_publish_len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| lock(s).inflight.values().filter(|w| w.to_publish()).count())
            .sum()
    }

    /// Writes in flight (sums every shard, one lock at a time).
    pub(crate) fn inflight_len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).inflight.len()).sum()
    }

    /// Number of indexed objects (sums every shard; for tests and statistics).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).objects.len()).sum()
    }
}

/// The insert rule of [`Index::insert`], on a locked shard.
fn insert_locked(shard: &mut Shard, entry: Arc<Entry>) -> Inserted {
    match shard.objects.get(&entry.hash.0) {
        Some(old) if old.created_ms > entry.created_ms => Inserted::KeptNewer(Arc::clone(old)),
        _ => match shard.objects.insert(entry.hash.0, entry) {
            Some(old) => Inserted::Replaced(old),
            None => Inserted::New,
        },
    }
}

/// Lock a mutex, recovering from poisoning: every critical section in this crate
/// leaves its data consistent before anything that could panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An object file opened and verified by a lookup, shared by every hit on its entry.
#[derive(Debug)]
pub(crate) struct OpenObject {
    pub(crate) file: Arc<File>,
    pub(crate) body_offset: u64,
    pub(crate) body_len: u64,
    /// Length the header says the file has (header plus body).
    pub(crate) file_len: u64,
    /// Device and inode of the file, to tell that its path still names it.
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) meta: Arc<ObjectMeta>,
    pub(crate) created_ms: u64,
    /// When the file was last found intact ([`crate::open_files::OpenFiles::now`]).
    pub(crate) checked: AtomicU64,
    /// Which keeping this is (the ring names handles by it).
    pub(crate) seq: u64,
    pub(crate) _live: Live,
}

/// Counts an [`OpenObject`] for as long as it lives (held by its entry, or for a
/// moment by a lookup that cloned it): the number of files kept open.
#[derive(Debug)]
pub(crate) struct Live(pub(crate) Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An object being written, as readers see it (kept in the index's in-flight map).
#[derive(Debug)]
pub struct Inflight {
    /// The temporary file, shared with readers following the write (no `dup` each).
    pub(crate) file: Arc<File>,
    pub(crate) body_offset: u64,
    pub(crate) meta: Arc<ObjectMeta>,
    pub(crate) key: Box<[u8]>,
    pub(crate) created_ms: u64,
    pub(crate) disk: u16,
    pub(crate) tx: watch::Sender<Progress>,
    /// Set (under the key's shard lock) by a purge, or by a newer write of the same key
    /// displacing this one: the write must not be published. Checked under that same
    /// lock when the writer indexes its object, so a purge is never undone.
    pub(crate) cancelled: AtomicBool,
    /// Whether lookups may follow this write (`Lookup::Filling`). False for a metadata
    /// update, which copies a body that is already stored.
    pub(crate) followable: bool,
    /// Set by [`crate::Store::lend`] (under the key's shard lock) for a write whose body
    /// was still coming in when the store was lent: it goes on to its end for its
    /// readers, who are told it is complete, but is never published (the store belongs
    /// to the next process, which fetches the object again when asked for it).
    pub(crate) unstored: AtomicBool,
}

impl Inflight {
    pub(crate) fn progress(&self) -> BodyProgress {
        BodyProgress::new(self.tx.subscribe())
    }

    /// Mark the write as not to be published (call with its shard locked).
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    pub(crate) fn is_unstored(&self) -> bool {
        self.unstored.load(Ordering::Acquire)
    }

    /// Whether `Store::lend` may leave this write unstored: its body is still coming
    /// in (call with its shard locked). A body already complete is being published and
    /// is waited for instead.
    pub(crate) fn leave_unstored(&self) -> bool {
        if matches!(*self.tx.borrow(), Progress::Writing { .. }) && !self.is_unstored() {
            self.unstored.store(true, Ordering::Release);
            true
        } else {
            false
        }
    }

    /// A write the lend still waits for: in flight and to be published.
    pub(crate) fn to_publish(&self) -> bool {
        !self.is_unstored()
    }
}
