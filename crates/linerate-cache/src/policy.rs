//! Eviction policy: S3-FIFO (Yang et al., "FIFO queues are all you need for cache
//! eviction", SOSP 2023), counted in bytes.
//!
//! New objects enter a small probationary FIFO (10 % of capacity). An object leaving it
//! moves to the main FIFO only if it was hit while there; otherwise it is evicted and its
//! hash remembered in a ghost FIFO, and an object re-inserted while in the ghost goes
//! straight to main. Main is a CLOCK-like FIFO: an object with hits is re-queued with
//! one hit less. A flood of one-hit objects therefore only ever churns the small queue
//! and cannot flush the popular set (the failure of nginx's LRU, nginx#868), and a hit
//! is one relaxed atomic store on the object, with no queue lock: the request path
//! never touches this structure. Lookups, files and disks are not this file's concern.
//!
//! Pinned objects (fill jobs with `"pinned": true`) are taken out of both queues: they
//! are never victims, whatever their hits, until unpinned (back into main) or removed.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Hit counter saturates here (two bits in the paper): enough to tell one-hit objects
/// from popular ones while letting a formerly popular object age out in three passes.
pub const MAX_FREQ: u8 = 3;

/// Share of capacity given to the small FIFO, percent (the paper's 10 %).
pub const SMALL_QUEUE_PERCENT: u64 = 10;

/// Fewest ghost entries kept, whatever the cache holds.
const MIN_GHOST_ENTRIES: usize = 1024;

/// Which queue an object is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueId {
    /// Probationary FIFO.
    Small,
    /// Main FIFO.
    Main,
    /// Not in the policy any more (evicted, purged or replaced).
    Removed,
    /// Pinned: in no queue, never evicted.
    Pinned,
    /// Not tracked yet: indexed, and its publisher has not handed it to the policy.
    /// It cannot be pinned in that moment (a pin would be lost when it is tracked),
    /// and one removed in it is never tracked.
    New,
}

impl QueueId {
    /// Short stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueId::Small => "small",
            QueueId::Main => "main",
            QueueId::Removed => "removed",
            QueueId::Pinned => "pinned",
            QueueId::New => "new",
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            QueueId::Small => 0,
            QueueId::Main => 1,
            QueueId::Removed => 2,
            QueueId::Pinned => 3,
            QueueId::New => 4,
        }
    }

    /// Inverse of the persisted byte; unknown values read as `Small`.
    pub fn from_u8(v: u8) -> QueueId {
        match v {
            1 => QueueId::Main,
            2 => QueueId::Removed,
            3 => QueueId::Pinned,
            4 => QueueId::New,
            _ => QueueId::Small,
        }
    }
}

/// Per-object policy state, embedded in the object's index entry.
#[derive(Debug)]
pub struct PolicyState {
    freq: AtomicU8,
    queue: AtomicU8,
}

impl Default for PolicyState {
    fn default() -> Self {
        PolicyState {
            freq: AtomicU8::new(0),
            queue: AtomicU8::new(QueueId::New.to_u8()),
        }
    }
}

impl PolicyState {
    /// Record a hit. Cost: one relaxed load and store; a lost increment under a race is
    /// harmless to the policy.
    pub fn touch(&self) {
        let f = self.freq.load(Ordering::Relaxed);
        if f < MAX_FREQ {
            self.freq.store(f + 1, Ordering::Relaxed);
        }
    }

    /// Current queue.
    pub fn queue(&self) -> QueueId {
        QueueId::from_u8(self.queue.load(Ordering::Relaxed))
    }

    fn set_queue(&self, q: QueueId) {
        self.queue.store(q.to_u8(), Ordering::Relaxed);
    }

    pub(crate) fn freq(&self) -> u8 {
        self.freq.load(Ordering::Relaxed)
    }

    /// Take over `other`'s hit count (an object replaced by itself with new metadata);
    /// the queue is chosen when it is inserted.
    pub(crate) fn inherit(&self, other: &PolicyState) {
        self.set_freq(other.freq());
    }

    fn set_freq(&self, f: u8) {
        self.freq.store(f, Ordering::Relaxed);
    }
}

/// What the policy needs from an object.
pub trait Tracked {
    /// The object's key hash (ghost entries remember only this).
    fn key_hash(&self) -> u128;
    /// Bytes the object costs.
    fn charge(&self) -> u64;
    /// Its policy state.
    fn policy(&self) -> &PolicyState;
}

/// S3-FIFO over objects of type `T`. Not thread-safe by itself: the store keeps one per
/// disk behind a mutex taken on insert, removal and eviction, never on a hit.
#[derive(Debug)]
pub struct S3Fifo<T> {
    small: VecDeque<Arc<T>>,
    main: VecDeque<Arc<T>>,
    small_bytes: u64,
    main_bytes: u64,
    small_target: u64,
    ghost: Ghost,
    /// Pinned objects, by key hash (in neither queue).
    pinned: HashMap<u128, Arc<T>>,
    pinned_bytes: u64,
}

impl<T: Tracked> S3Fifo<T> {
    /// An empty policy for a cache of `capacity` bytes.
    pub fn new(capacity: u64) -> S3Fifo<T> {
        S3Fifo {
            small: VecDeque::new(),
            main: VecDeque::new(),
            small_bytes: 0,
            main_bytes: 0,
            small_target: capacity / 100 * SMALL_QUEUE_PERCENT,
            ghost: Ghost::default(),
            pinned: HashMap::new(),
            pinned_bytes: 0,
        }
    }

    /// Bytes of all objects tracked.
    pub fn bytes(&self) -> u64 {
        self.small_bytes + self.main_bytes + self.pinned_bytes
    }

    /// Bytes of pinned objects (never evicted).
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned_bytes
    }

    /// Take a tracked object out of eviction. Returns whether it is pinned now (false:
    /// it is not tracked, yet or any more).
    pub fn pin(&mut self, item: &Arc<T>) -> bool {
        let p = item.policy();
        match p.queue() {
            QueueId::Pinned => return true,
            QueueId::Removed | QueueId::New => return false,
            QueueId::Small => self.small_bytes -= item.charge(),
            QueueId::Main => self.main_bytes -= item.charge(),
        }
        // Its slot in the queue is dropped lazily when it reaches the head.
        p.set_queue(QueueId::Pinned);
        self.pinned_bytes += item.charge();
        self.pinned.insert(item.key_hash(), Arc::clone(item));
        true
    }

    /// Make a pinned object evictable again, at the tail of main (it was wanted).
    /// Returns whether it was pinned.
    pub fn unpin(&mut self, item: &Arc<T>) -> bool {
        if item.policy().queue() != QueueId::Pinned {
            return false;
        }
        self.pinned.remove(&item.key_hash());
        self.pinned_bytes -= item.charge();
        self.insert_into(Arc::clone(item), QueueId::Main);
        true
    }

    /// Add a new object: to main if its hash is in the ghost (it was evicted from small
    /// recently and came back), else to small. Returns whether it was added (false:
    /// it was removed before it was tracked).
    pub fn insert(&mut self, item: Arc<T>) -> bool {
        let q = if self.ghost.take(item.key_hash()) {
            QueueId::Main
        } else {
            QueueId::Small
        };
        self.insert_into(item, q)
    }

    /// Add an object into `queue` (a snapshot's, or a pinned one's). Returns whether it
    /// was added: one removed (purged, replaced) between its indexing and this call is
    /// not, so the policy never holds an object the index has dropped.
    pub fn insert_into(&mut self, item: Arc<T>, queue: QueueId) -> bool {
        let p = item.policy();
        if p.queue() == QueueId::Removed {
            return false;
        }
        match queue {
            QueueId::Main => {
                p.set_queue(QueueId::Main);
                self.main_bytes += item.charge();
                self.main.push_back(item);
            }
            QueueId::Pinned => {
                p.set_queue(QueueId::Pinned);
                self.pinned_bytes += item.charge();
                self.pinned.insert(item.key_hash(), item);
            }
            QueueId::Small | QueueId::Removed | QueueId::New => {
                p.set_queue(QueueId::Small);
                self.small_bytes += item.charge();
                self.small.push_back(item);
            }
        }
        true
    }

    /// Forget an object (purged or replaced). Its queue slot is dropped lazily when it
    /// reaches the head; its bytes are released now. Returns whether it was tracked.
    pub fn remove(&mut self, item: &T) -> bool {
        match item.policy().queue() {
            QueueId::Small => self.small_bytes -= item.charge(),
            QueueId::Main => self.main_bytes -= item.charge(),
            QueueId::Pinned => {
                self.pinned_bytes -= item.charge();
                self.pinned.remove(&item.key_hash());
            }
            QueueId::Removed => return false,
            QueueId::New => {
                item.policy().set_queue(QueueId::Removed);
                return false;
            }
        }
        item.policy().set_queue(QueueId::Removed);
        true
    }

    /// Choose victims until at least `bytes` are freed or nothing is left, appending
    /// them to `out`. Victims are marked removed.
    pub fn evict(&mut self, bytes: u64, out: &mut Vec<Arc<T>>) {
        let mut freed = 0u64;
        while freed < bytes {
            let from_small = (self.small_bytes >= self.small_target && !self.small.is_empty())
                || self.main.is_empty();
            let victim = if from_small {
                self.evict_small()
            } else {
                self.evict_main()
            };
            match victim {
                Some(v) => {
                    freed += v.charge();
                    out.push(v);
                }
                None if self.small.is_empty() && self.main.is_empty() => break,
                None => {}
            }
        }
    }

    /// One step on the small queue: promote (returns None) or evict.
    fn evict_small(&mut self) -> Option<Arc<T>> {
        let item = self.small.pop_front()?;
        let p = item.policy();
        if p.queue() != QueueId::Small {
            return None; // removed while queued
        }
        self.small_bytes -= item.charge();
        if p.freq() >= 1 {
            p.set_freq(0);
            p.set_queue(QueueId::Main);
            self.main_bytes += item.charge();
            self.main.push_back(item);
            return None;
        }
        p.set_queue(QueueId::Removed);
        let cap = MIN_GHOST_ENTRIES.max(self.small.len() + self.main.len());
        self.ghost.add(item.key_hash(), cap);
        Some(item)
    }

    /// One step on the main queue: re-queue with one hit less (returns None) or evict.
    fn evict_main(&mut self) -> Option<Arc<T>> {
        let item = self.main.pop_front()?;
        let p = item.policy();
        if p.queue() != QueueId::Main {
            return None;
        }
        let f = p.freq();
        if f > 0 {
            p.set_freq(f - 1);
            self.main.push_back(item);
            return None;
        }
        self.main_bytes -= item.charge();
        p.set_queue(QueueId::Removed);
        Some(item)
    }

    /// Live objects in eviction order (small queue first), for snapshots.
    pub fn live(&self) -> Vec<(Arc<T>, QueueId)> {
        let mut out = Vec::with_capacity(self.small.len() + self.main.len());
        for (q, id) in [(&self.small, QueueId::Small), (&self.main, QueueId::Main)] {
            for item in q.iter() {
                if item.policy().queue() == id {
                    out.push((Arc::clone(item), id));
                }
            }
        }
        out.extend(
            self.pinned
                .values()
                .map(|i| (Arc::clone(i), QueueId::Pinned)),
        );
        out
    }

    /// Drop everything (the disk left service).
    pub fn clear(&mut self) {
        for q in [&mut self.small, &mut self.main] {
            for item in q.drain(..) {
                item.policy().set_queue(QueueId::Removed);
            }
        }
        for (_, item) in self.pinned.drain() {
            item.policy().set_queue(QueueId::Removed);
        }
        self.small_bytes = 0;
        self.main_bytes = 0;
        self.pinned_bytes = 0;
    }
}

/// Hashes of objects recently evicted from the small queue.
#[derive(Debug, Default)]
struct Ghost {
    order: VecDeque<(u128, u64)>,
    members: HashMap<u128, u64>,
    seq: u64,
}

impl Ghost {
    fn add(&mut self, hash: u128, cap: usize) {
        self.seq += 1;
        self.members.insert(hash, self.seq);
        self.order.push_back((hash, self.seq));
        while self.order.len() > cap {
            if let Some((h, s)) = self.order.pop_front() {
                if self.members.get(&h) == Some(&s) {
                    self.members.remove(&h);
                }
            }
        }
    }

    fn take(&mut self, hash: u128) -> bool {
        self.members.remove(&hash).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Obj(u128, u64, PolicyState);

    impl Tracked for Obj {
        fn key_hash(&self) -> u128 {
            self.0
        }
        fn charge(&self) -> u64 {
            self.1
        }
        fn policy(&self) -> &PolicyState {
            &self.2
        }
    }

    fn obj(h: u128) -> Arc<Obj> {
        Arc::new(Obj(h, 10, PolicyState::default()))
    }

    #[test]
    fn one_hit_flood_does_not_flush_popular_objects() {
        let mut p = S3Fifo::new(1000);
        let popular: Vec<_> = (0..50).map(obj).collect();
        for o in &popular {
            p.insert(Arc::clone(o));
            o.policy().touch();
        }
        let mut victims = Vec::new();
        for h in 1000..3000u128 {
            p.insert(obj(h));
            if p.bytes() > 1000 {
                p.evict(p.bytes() - 1000, &mut victims);
            }
            for o in &popular {
                if h % 20 == 0 {
                    o.policy().touch();
                }
            }
        }
        assert!(
            victims.iter().all(|v| v.0 >= 1000),
            "a popular object was evicted"
        );
        assert!(popular.iter().all(|o| o.policy().queue() == QueueId::Main));
    }

    #[test]
    fn pinned_objects_are_never_victims() {
        let mut p = S3Fifo::new(100);
        let pinned: Vec<_> = (0..5).map(obj).collect();
        for o in &pinned {
            p.insert(Arc::clone(o));
            assert!(p.pin(o));
        }
        assert_eq!(p.pinned_bytes(), 50);
        let mut victims = Vec::new();
        for h in 100..200u128 {
            p.insert(obj(h));
            p.evict(p.bytes().saturating_sub(100), &mut victims);
        }
        assert!(
            victims.iter().all(|v| v.0 >= 100),
            "a pinned object was evicted"
        );
        // Everything evictable gone and still asked for more: evict stops, pins stay.
        p.evict(1000, &mut victims);
        assert_eq!(p.bytes(), 50);
        assert_eq!(p.live().len(), 5);
        assert!(p.live().iter().all(|(_, q)| *q == QueueId::Pinned));
        assert!(p.unpin(&pinned[0]));
        assert!(!p.unpin(&pinned[0]));
        assert_eq!(pinned[0].policy().queue(), QueueId::Main);
        p.evict(10, &mut victims);
        assert_eq!(
            victims.last().map(|v| v.0),
            Some(0),
            "unpinned: evictable again"
        );
        assert!(p.remove(&pinned[1]));
        assert_eq!(p.pinned_bytes(), 30);
    }

    /// An object indexed but not yet handed to the policy (its publisher between the
    /// two) cannot be pinned: the pin was counted and then lost when it was tracked, so
    /// unpinning it later left its bytes counted pinned forever. One removed in that
    /// moment (purged, replaced) is never tracked.
    #[test]
    fn objects_not_tracked_yet_are_neither_pinned_nor_tracked_after_removal() {
        let mut p = S3Fifo::new(100);
        let a = obj(1);
        assert_eq!(a.policy().queue(), QueueId::New);
        assert!(!p.pin(&a), "not tracked yet");
        assert_eq!(p.pinned_bytes(), 0);
        assert!(p.insert(Arc::clone(&a)));
        assert!(p.pin(&a));
        assert!(p.unpin(&a));
        assert_eq!(p.pinned_bytes(), 0);
        assert_eq!(p.bytes(), 10);

        let b = obj(2);
        assert!(!p.remove(&b), "it was never tracked");
        assert!(!p.insert(Arc::clone(&b)), "removed before it was tracked");
        assert!(!p.insert_into(Arc::clone(&b), QueueId::Pinned));
        assert_eq!(b.policy().queue(), QueueId::Removed);
        assert_eq!(p.bytes(), 10);
        assert_eq!(p.live().len(), 1);
    }

    #[test]
    fn ghost_hit_goes_to_main_and_remove_releases_bytes() {
        let mut p = S3Fifo::new(100);
        let a = obj(1);
        p.insert(Arc::clone(&a));
        let mut v = Vec::new();
        p.evict(10, &mut v);
        assert_eq!(v.len(), 1);
        let a2 = obj(1);
        p.insert(Arc::clone(&a2));
        assert_eq!(a2.policy().queue(), QueueId::Main);
        p.remove(&a2);
        assert_eq!(p.bytes(), 0);
        assert!(p.live().is_empty());
    }
}
