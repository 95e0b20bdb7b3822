//! Open object files kept between hits, so a warm hit costs no syscall in the store.
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
//! How many: at most `StoreConfig::open_handles` entries hold one. A ring of weak
//! references in opening order closes the oldest when a new one would exceed the
//! bound (first in, first out: a hot object whose handle was closed is reopened on its
//! next hit and rejoins at the back). The ring's lock is taken only when a handle is
//! opened, never on a hit.
//!
//! Files changed behind the store's back (an operator deleting objects by hand, a
//! disk remounted): a handle is trusted for [`RECHECK_MS`], then one `fstat` checks
//! the file still has a name and its full length before the next hit uses it; one that
//! fails is closed and the lookup opens the file again, finding what a store without
//! handles would.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::index::{lock, Entry};
use crate::meta::ObjectMeta;

/// How long an open handle answers hits before its file is checked again (`fstat`).
pub const RECHECK_MS: u64 = 1_000;

/// Default bound on entries holding an open file (see `StoreConfig::open_handles`).
pub const DEFAULT_OPEN_HANDLES: usize = 4096;

/// An object file opened and verified by a lookup, shared by every hit on its entry.
#[derive(Debug)]
pub(crate) struct OpenObject {
    pub(crate) file: Arc<File>,
    pub(crate) body_offset: u64,
    pub(crate) body_len: u64,
    /// Length the header says the file has (header plus body).
    pub(crate) file_len: u64,
    pub(crate) meta: Arc<ObjectMeta>,
    pub(crate) created_ms: u64,
    /// When the file was last found intact, Unix milliseconds.
    pub(crate) checked_ms: AtomicU64,
    pub(crate) _live: Live,
}

/// Counts an [`OpenObject`] for as long as it lives (held by its entry or by a
/// response still sending from it): the number of descriptors handles hold.
#[derive(Debug)]
pub(crate) struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl OpenObject {
    /// Whether the last check is recent enough to answer without another.
    pub(crate) fn fresh(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.checked_ms.load(Ordering::Relaxed)) < RECHECK_MS
    }
}

/// The bound on open handles and the order they are closed in.
#[derive(Debug)]
pub(crate) struct Handles {
    cap: usize,
    ring: Mutex<VecDeque<Weak<Entry>>>,
    /// Open objects alive now, kept or still sending ([`Live`]).
    live: Arc<AtomicUsize>,
}

impl Handles {
    pub(crate) fn new(cap: usize) -> Handles {
        Handles {
            cap,
            ring: Mutex::new(VecDeque::new()),
            live: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Whether handles are kept at all (`open_handles = 0` turns them off).
    pub(crate) fn enabled(&self) -> bool {
        self.cap > 0
    }

    /// Object files open through handles now: kept in entries or still being sent
    /// from after their entry let go.
    pub(crate) fn count(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Count a new open object for as long as it lives.
    pub(crate) fn live(&self) -> Live {
        self.live.fetch_add(1, Ordering::Relaxed);
        Live(Arc::clone(&self.live))
    }

    /// Keep `obj` open in `entry` for later hits, closing the oldest handle when the
    /// bound is reached. A handle the entry already holds (another thread opened it
    /// meanwhile) is kept instead.
    pub(crate) fn keep(&self, entry: &Arc<Entry>, obj: Arc<OpenObject>) {
        if !self.enabled() {
            return;
        }
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
            ring.push_back(Arc::downgrade(entry));
            while ring.len() > self.cap {
                if let Some(old) = ring.pop_front() {
                    victims.push(old);
                }
            }
        }
        // Closed outside the ring's lock: `close` of a file another thread is sending
        // from only drops a reference, but it is still a syscall.
        for v in victims {
            if let Some(e) = v.upgrade() {
                self.close(&e);
            }
        }
    }

    /// Close `entry`'s handle if it has one (responses using it keep it until done).
    pub(crate) fn close(&self, entry: &Entry) {
        let old = lock(&entry.open).take();
        drop(old); // after the entry's lock is released
    }
}
