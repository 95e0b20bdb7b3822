//! What segment prefetch remembers, shared by every worker and bounded: which segments
//! follow a segment (read from the media playlists served), which playlist copies were
//! read already, which prefetched objects no client has asked for yet, the prefetch
//! fills in flight per origin, and the counters `/metrics` shows.
//!
//! Every memory here is a shortcut, never a correctness matter: past its bound the
//! oldest half is forgotten (two generations: a lookup moves an entry to the current
//! one, so what is in use stays), and a forgotten entry only means a prefetch not made
//! or a use not counted.
//!
//! Not here: reading playlists and starting fills (`prefetch`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Segments remembered (each with the few that follow it), per generation.
const MAX_SEGMENTS: usize = 8192;
/// Playlist copies remembered as read, per generation.
const MAX_PLAYLISTS: usize = 4096;
/// Prefetched objects remembered until used, per generation.
const MAX_UNUSED: usize = 8192;

/// A map by key that forgets its older half past `cap` entries per generation.
struct TwoGen<V> {
    cap: usize,
    current: HashMap<Box<[u8]>, V>,
    old: HashMap<Box<[u8]>, V>,
}

impl<V: Clone> TwoGen<V> {
    fn new(cap: usize) -> Self {
        TwoGen {
            cap,
            current: HashMap::new(),
            old: HashMap::new(),
        }
    }

    fn insert(&mut self, k: &[u8], v: V) {
        if self.current.len() >= self.cap && !self.current.contains_key(k) {
            self.old = std::mem::take(&mut self.current);
        }
        self.current.insert(k.into(), v);
    }

    /// The value of `k`, moved to the current generation.
    fn get(&mut self, k: &[u8]) -> Option<V> {
        if let Some(v) = self.current.get(k) {
            return Some(v.clone());
        }
        let v = self.old.remove(k)?;
        self.insert(k, v.clone());
        Some(v)
    }

    fn remove(&mut self, k: &[u8]) -> Option<V> {
        self.current.remove(k).or_else(|| self.old.remove(k))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.current.len() + self.old.len()
    }
}

/// A segment to prefetch: its target as sent to the origin, its primary key, its route.
#[derive(Debug)]
pub(crate) struct Target {
    /// Path and query (origin-form).
    pub(crate) target: Box<[u8]>,
    /// Primary key.
    pub(crate) key: Box<[u8]>,
    /// Index of the route serving it.
    pub(crate) route: usize,
}

/// The segments after one segment, nearest first.
pub(crate) type Next = Arc<[Arc<Target>]>;

/// Prefetch counters, summed over all workers (one set, shared).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Prefetch fills started.
    pub(crate) issued: u64,
    /// Prefetched objects a client then asked for (served from the store, or joined
    /// while the prefetch was running).
    pub(crate) used: u64,
    /// Prefetches not started because the origin's prefetch budget was full.
    pub(crate) skipped: u64,
    /// Media playlists read.
    pub(crate) playlists: u64,
}

/// Prefetch's memory; see the module comment.
pub(crate) struct Memory {
    next: Mutex<TwoGen<Next>>,
    read: Mutex<TwoGen<u64>>,
    unused: Mutex<TwoGen<()>>,
    in_flight: Vec<AtomicU32>,
    issued: AtomicU64,
    used: AtomicU64,
    skipped: AtomicU64,
    playlists: AtomicU64,
}

impl Memory {
    /// For `origins` origins.
    pub(crate) fn new(origins: usize) -> Memory {
        Memory {
            next: Mutex::new(TwoGen::new(MAX_SEGMENTS)),
            read: Mutex::new(TwoGen::new(MAX_PLAYLISTS)),
            unused: Mutex::new(TwoGen::new(MAX_UNUSED)),
            in_flight: (0..origins).map(|_| AtomicU32::new(0)).collect(),
            issued: AtomicU64::new(0),
            used: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            playlists: AtomicU64::new(0),
        }
    }

    /// Remember the segments after the segment keyed `key`.
    pub(crate) fn set_next(&self, key: &[u8], next: Next) {
        lock(&self.next).insert(key, next);
    }

    /// The segments after the segment keyed `key`, if a playlist said.
    pub(crate) fn next(&self, key: &[u8]) -> Option<Next> {
        lock(&self.next).get(key)
    }

    /// Whether the playlist copy keyed `key` and created at `created_ms` is new to
    /// this memory (and remember it as read).
    pub(crate) fn first_read(&self, key: &[u8], created_ms: u64) -> bool {
        let mut read = lock(&self.read);
        if read.get(key) == Some(created_ms) {
            return false;
        }
        read.insert(key, created_ms);
        self.playlists.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Take a prefetch slot of `origin` if fewer than `max` are in flight.
    pub(crate) fn try_acquire(&self, origin: usize, max: u32) -> bool {
        let Some(n) = self.in_flight.get(origin) else {
            return false;
        };
        let taken = n
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v < max).then_some(v + 1)
            })
            .is_ok();
        if !taken {
            self.skipped.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Give back a slot [`Memory::try_acquire`] took.
    pub(crate) fn release(&self, origin: usize) {
        if let Some(n) = self.in_flight.get(origin) {
            n.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// A prefetch of `key` started.
    pub(crate) fn issued(&self, key: &[u8]) {
        self.issued.fetch_add(1, Ordering::Relaxed);
        lock(&self.unused).insert(key, ());
    }

    /// The prefetch of `key` stored nothing: a later client fill is not its use.
    pub(crate) fn failed(&self, key: &[u8]) {
        lock(&self.unused).remove(key);
    }

    /// A client was served `key`: count a use if it was prefetched and not used yet.
    pub(crate) fn served(&self, key: &[u8]) {
        if self.issued.load(Ordering::Relaxed) == 0 {
            return;
        }
        if lock(&self.unused).remove(key).is_some() {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters now.
    pub(crate) fn counts(&self) -> Counts {
        Counts {
            issued: self.issued.load(Ordering::Relaxed),
            used: self.used.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            playlists: self.playlists.load(Ordering::Relaxed),
        }
    }

    /// Segments remembered now (tests).
    #[cfg(test)]
    fn segments(&self) -> usize {
        lock(&self.next).len()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(n: u8) -> Arc<Target> {
        Arc::new(Target {
            target: vec![b'/', n].into(),
            key: vec![n].into(),
            route: 0,
        })
    }

    #[test]
    fn memory_is_bounded_and_keeps_what_is_used() {
        let m = Memory::new(1);
        let next: Next = vec![target(1)].into();
        m.set_next(b"hot", Arc::clone(&next));
        for i in 0..(MAX_SEGMENTS * 3) {
            m.set_next(format!("k{i}").as_bytes(), Arc::clone(&next));
            if i % 1000 == 0 {
                assert!(m.next(b"hot").is_some(), "an entry in use stays");
            }
        }
        assert!(m.segments() <= 2 * MAX_SEGMENTS);
        assert!(m.next(b"k0").is_none(), "the oldest are forgotten");
        assert!(m.next(b"hot").is_some());
    }

    #[test]
    fn budget_is_a_cap_never_a_queue() {
        let m = Memory::new(2);
        assert!(m.try_acquire(0, 2));
        assert!(m.try_acquire(0, 2));
        assert!(!m.try_acquire(0, 2));
        assert!(m.try_acquire(1, 2), "per origin");
        m.release(0);
        assert!(m.try_acquire(0, 2));
        assert!(!m.try_acquire(5, 2), "no such origin");
        assert_eq!(m.counts().skipped, 1, "only a full budget counts");
    }

    #[test]
    fn a_use_is_counted_once_and_never_for_a_failed_prefetch() {
        let m = Memory::new(1);
        m.served(b"a");
        m.issued(b"a");
        m.issued(b"b");
        m.failed(b"b");
        m.served(b"a");
        m.served(b"a");
        m.served(b"b");
        let c = m.counts();
        assert_eq!((c.issued, c.used), (2, 1));
    }

    #[test]
    fn a_playlist_copy_is_read_once() {
        let m = Memory::new(1);
        assert!(m.first_read(b"p", 1));
        assert!(!m.first_read(b"p", 1));
        assert!(m.first_read(b"p", 2), "a new copy is read again");
        assert_eq!(m.counts().playlists, 2);
    }
}
