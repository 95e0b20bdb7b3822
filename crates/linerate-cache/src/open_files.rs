//! Open object files kept between hits, so a warm hit makes no file syscall in the
//! store (one clock read, from the vDSO).
//!
//! Without them every hit opens the object file, reads and checks its header and
//! `fstat`s it (and the server closes it after sending): four syscalls and two
//! allocations per response, which on small objects (a low rendition's segment, a
//! CMAF chunk, a playlist) is a large share of the work. Object files are never
//! modified in place (an update writes a new file and indexes a new [`Entry`]), so the
//! index entry identifies the file's contents: the open file, checked once when it
//! was opened, can answer every later hit on that same entry.
//!
//! Where a handle lives: in its entry ([`Entry::open`]), so it goes when the object
//! goes. Every way an object leaves the index (eviction, purge, replacement, a failed
//! disk, a lookup that finds it gone) closes it at once, since a descriptor left open
//! would keep an evicted file's blocks allocated behind the store's accounting.
//! Responses still sending from it keep the file until they finish, as before.
//!
//! When: from an object's second hit (a lookup that finds it already hit once), so
//! objects asked for once (probes, one-off requests) never take a place.
//!
//! How many: at most `StoreConfig::open_files` entries hold one. A ring of weak
//! references in opening order closes the oldest when a new one would exceed the
//! bound (first in, first out: a hot object whose handle was closed is reopened on its
//! next hit and rejoins at the back). The ring's lock is taken only when a handle is
//! opened, never on a hit.
//!
//! Files changed behind the store's back (an operator deleting, moving or truncating
//! objects by hand, a disk remounted): a handle is trusted for
//! `StoreConfig::open_file_recheck`, then one `stat` of the object's path checks it
//! still names the same file (device and inode) at its full length before the next hit
//! uses it; one that fails is closed and the lookup opens the path again, finding what
//! a store without handles would. Times are monotonic (a clock step cannot stop the
//! checks).
//!
//! A lent store (an upgrade's hand-over, `Store::lend`) closes every handle and keeps
//! none: the next process may purge or replace objects, and this one must see that on
//! its next hit and must not hold evicted files' blocks while it drains.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::index::{lock, Entry};
pub(crate) use crate::index::{Live, OpenObject};

/// Default time a kept file answers hits before its path is checked again.
pub const DEFAULT_RECHECK: Duration = Duration::from_secs(1);

/// Default bound on entries holding an open file (see `StoreConfig::open_files`).
pub const DEFAULT_OPEN_FILES: usize = 4096;

/// The bound on open handles and the order they are closed in.
#[derive(Debug)]
pub(crate) struct OpenFiles {
    cap: usize,
    recheck_ms: u64,
    /// Origin of [`OpenFiles::now`].
    base: Instant,
    ring: Mutex<VecDeque<(Weak<Entry>, u64)>>,
    /// Numbers the handles made ([`OpenObject::seq`]).
    seq: AtomicU64,
    /// Open objects alive now ([`Live`]).
    live: Arc<AtomicUsize>,
}

impl OpenFiles {
    pub(crate) fn new(cap: usize, recheck: Duration) -> OpenFiles {
        OpenFiles {
            cap,
            recheck_ms: u64::try_from(recheck.as_millis()).unwrap_or(u64::MAX),
            base: Instant::now(),
            ring: Mutex::new(VecDeque::new()),
            seq: AtomicU64::new(0),
            live: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Whether handles are kept at all (`open_files = 0` turns them off).
    pub(crate) fn enabled(&self) -> bool {
        self.cap > 0
    }

    /// Monotonic milliseconds since the store opened.
    pub(crate) fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether `o`'s last check is recent enough to answer at `now` without another.
    pub(crate) fn fresh(&self, o: &OpenObject, now: u64) -> bool {
        now.saturating_sub(o.checked.load(Ordering::Relaxed)) < self.recheck_ms
    }

    /// Object files kept open now.
    pub(crate) fn count(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Count a new open object for as long as it lives; and its number.
    pub(crate) fn live(&self) -> (Live, u64) {
        self.live.fetch_add(1, Ordering::Relaxed);
        (
            Live(Arc::clone(&self.live)),
            self.seq.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// Keep `obj` open in `entry` for later hits, closing the oldest handle when the
    /// bound is reached. A handle the entry already holds (another thread opened it
    /// meanwhile) is kept instead.
    pub(crate) fn keep(&self, entry: &Arc<Entry>, obj: Arc<OpenObject>) {
        if !self.enabled() {
            return;
        }
        let seq = obj.seq;
        {
            let mut slot = lock(&entry.open);
            if slot.is_some() {
                return;
            }
            *slot = Some(obj);
        }
        let mut victims = Vec::new();
        {
            let mut ring = lock(&self.ring);
            ring.push_back((Arc::downgrade(entry), seq));
            while ring.len() > self.cap {
                if let Some(old) = ring.pop_front() {
                    victims.push(old);
                }
            }
        }
        // Closed outside the ring's lock: `close` of a file another thread is sending
        // from only drops a reference, but it is still a syscall.
        // A position left by a handle closed and reopened since names an older number
        // and closes nothing.
        for (v, seq) in victims {
            if let Some(e) = v.upgrade() {
                self.close_seq(&e, seq);
            }
        }
    }

    /// Close `entry`'s handle if it has one (responses using it keep it until done).
    pub(crate) fn close(&self, entry: &Entry) {
        close_where(entry, |_| true);
    }

    /// Close `entry`'s handle only if it is still handle number `seq` (not one
    /// reopened meanwhile).
    pub(crate) fn close_seq(&self, entry: &Entry, seq: u64) {
        close_where(entry, |cur| cur.seq == seq);
    }

    /// Close every kept handle (the store is lent to another process).
    pub(crate) fn close_all(&self) {
        let all: Vec<(Weak<Entry>, u64)> = lock(&self.ring).drain(..).collect();
        for (w, _) in all {
            if let Some(e) = w.upgrade() {
                self.close(&e);
            }
        }
    }
}

/// Take `entry`'s handle if `which` says so, and close it after the entry's lock is
/// released (the last reference closes the file).
fn close_where(entry: &Entry, which: impl FnOnce(&OpenObject) -> bool) {
    let old = {
        let mut slot = lock(&entry.open);
        if slot.as_deref().is_some_and(which) {
            slot.take()
        } else {
            None
        }
    };
    drop(old);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests on temp dirs they created")]
mod tests {
    use super::*;
    use crate::fault::FaultyIo;
    use crate::io::FsSpace;
    use crate::key::KeyHash;
    use crate::{DiskConfig, Durability, Lookup, ObjectMeta, Store, StoreConfig};

    fn store(dir: &std::path::Path) -> Store {
        let mut cfg = StoreConfig::new(vec![DiskConfig {
            name: "d0".into(),
            path: dir.join("d0"),
            max_bytes: 64 << 20,
        }]);
        cfg.durability = Durability::NoSync;
        let io = Arc::new(FaultyIo::new());
        io.set_space(Some(FsSpace {
            total_bytes: 1 << 40,
            available_bytes: 1 << 39,
            read_only: false,
        }));
        Store::open_with_io(cfg, io).unwrap()
    }

    fn put(store: &Store, key: &[u8], body: &[u8]) {
        let mut w = store
            .begin_write(key, ObjectMeta::default(), Some(body.len() as u64))
            .unwrap();
        w.append(body).unwrap();
        w.finish().unwrap();
    }

    /// Held entry of `key` after a hit kept its file.
    fn kept_entry(store: &Store, key: &[u8]) -> Arc<Entry> {
        assert!(matches!(store.lookup(key), Lookup::Hit(_)));
        assert!(matches!(store.lookup(key), Lookup::Hit(_))); // kept from the second
        let e = store.inner.index.get(KeyHash::of(key)).unwrap();
        assert!(lock(&e.open).is_some(), "the hit kept its file");
        e
    }

    /// Purge and replacement close the handle themselves, not only by dropping the
    /// entry: a reference to the entry held elsewhere (a lookup in progress) must not
    /// keep an object file that left the store open.
    #[test]
    fn leaving_the_index_closes_the_handle_while_the_entry_is_still_held() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        put(&s, b"purged", b"body");
        let e = kept_entry(&s, b"purged");
        assert!(s.purge(b"purged"));
        assert!(lock(&e.open).is_none(), "purge closed it");

        put(&s, b"replaced", b"old");
        let e = kept_entry(&s, b"replaced");
        put(&s, b"replaced", b"new!");
        assert!(lock(&e.open).is_none(), "replacement closed it");
        assert_eq!(s.open_files(), 0);
    }

    fn object(h: &OpenFiles) -> Arc<OpenObject> {
        let (live, seq) = h.live();
        Arc::new(OpenObject {
            file: Arc::new(tempfile::tempfile().unwrap()),
            body_offset: 0,
            body_len: 0,
            file_len: 0,
            dev: 0,
            ino: 0,
            meta: Arc::new(ObjectMeta::default()),
            created_ms: 0,
            checked: AtomicU64::new(0),
            seq,
            _live: live,
        })
    }

    /// A ring position left by a handle that was closed and reopened names an older
    /// handle: popping it must not close the new one; the bound still holds.
    #[test]
    fn an_old_ring_position_does_not_close_a_newer_handle() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        put(&s, b"x", b"x");
        put(&s, b"y", b"y");
        let x = s.inner.index.get(KeyHash::of(b"x")).unwrap();
        let y = s.inner.index.get(KeyHash::of(b"y")).unwrap();
        let h = OpenFiles::new(1, DEFAULT_RECHECK);
        h.keep(&x, object(&h));
        h.close(&x); // as a failed recheck does
        let newer = object(&h);
        let newer_seq = newer.seq;
        h.keep(&x, newer); // two positions for x; the bound pops the older one
        assert_eq!(
            lock(&x.open).as_ref().map(|o| o.seq),
            Some(newer_seq),
            "the newer handle stayed"
        );
        assert_eq!(h.count(), 1);
        h.keep(&y, object(&h)); // pops x's current position: closes it
        assert!(lock(&x.open).is_none());
        assert!(lock(&y.open).is_some());
        assert_eq!(h.count(), 1);
    }
}
