//! The store's shared state ([`Inner`], behind an `Arc`: the `Store` facade, its
//! writers and its per-disk threads all hold it) and what every one of them does with
//! it: place a key, index a published object, count a disk error and take a failing
//! disk out of service. The files that work on the state (`lookup`, `publish`,
//! `maintenance`, `update`) use this module; `store.rs` (the facade) sits on top.
//!
//! The state is recursive by nature, and the recursion stays inside this module: its
//! disks ([`disk`]) each hold a queue of objects waiting to be published
//! ([`PublishQueue`], here), and each of those writers ([`writer`]) holds the state.

pub(crate) mod disk;
pub(crate) mod writer;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::config::StoreConfig;
use crate::health::{DiskErrorKind, Verdict};
use crate::index::{lock, Entry, Index, Inserted};
use crate::io::{IoOp, StoreIo};
use crate::journal::Record;
use crate::key::KeyHash;
use crate::open_files::OpenFiles;
use crate::placement;
use crate::policy::QueueId;
use disk::{format_disk_states, now_ms, Disk};
use disk::{DISK_STATES_FILE, OUT_OF_SERVICE_MARKER};
use writer::{ObjectWriter, Published, WriteError};

/// Shared state of the store (behind an `Arc`, shared with writers and threads).
pub(crate) struct Inner {
    pub(crate) cfg: StoreConfig,
    pub(crate) io: Arc<dyn StoreIo>,
    pub(crate) index: Index,
    pub(crate) disks: Vec<Disk>,
    pub(crate) shutdown: AtomicBool,
    /// Prefixes purged since start: the reconcile scan must not adopt them.
    pub(crate) purged_prefixes: Mutex<Vec<Vec<u8>>>,
    /// Notified whenever a disk finishes loading.
    pub(crate) loaded_cv: (Mutex<()>, Condvar),
    /// Lent to the next process ([`crate::Store::lend`]): nothing is written, maintenance
    /// pauses. Read without a lock on every write's start; set rarely.
    pub(crate) lent: AtomicBool,
    /// Object files kept open between hits, and their bound.
    pub(crate) open_files: OpenFiles,
}

impl Inner {
    /// The in-service disk that should hold `hash`.
    pub(crate) fn place(&self, hash: KeyHash) -> Option<usize> {
        placement::choose(
            hash,
            self.disks
                .iter()
                .enumerate()
                .filter(|(_, d)| d.health.in_service())
                .map(|(i, d)| (i, d.candidate)),
        )
    }

    pub(crate) fn all_loaded(&self) -> bool {
        self.disks
            .iter()
            .all(|d| !d.health.in_service() || d.loaded.load(Ordering::Acquire))
    }

    pub(crate) fn wait_loaded(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let (m, cv) = &self.loaded_cv;
        let mut g = lock(m);
        while !self.all_loaded() {
            let now = std::time::Instant::now();
            if now >= deadline || self.shutdown.load(Ordering::Acquire) {
                return false;
            }
            g = match cv.wait_timeout(g, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        true
    }

    pub(crate) fn notify_loaded(&self) {
        let (m, cv) = &self.loaded_cv;
        let _g = lock(m);
        cv.notify_all();
    }

    /// Put a freshly published (or adopted) entry in the index and its disk's policy,
    /// releasing whatever it replaced.
    pub(crate) fn index_published(&self, entry: Arc<Entry>) {
        let inserted = self.index.insert(Arc::clone(&entry));
        self.account_inserted(entry, inserted, false);
    }

    /// [`Inner::index_published`] if `allow` (called under the shard lock with the
    /// current entry) agrees; returns whether it did. `inherit`: the entry replaces the
    /// same object with new metadata, so it keeps the old entry's eviction state. A new
    /// object is indexed pinned when a request still asks for its key to be
    /// (`Store::pin_on_write`).
    pub(crate) fn index_published_if(
        &self,
        entry: Arc<Entry>,
        inherit: bool,
        allow: impl FnOnce(Option<&Arc<Entry>>) -> bool,
    ) -> bool {
        // The asks are read under the shard lock `insert_if` holds while it asks
        // `allow`, which `pin_on_write` and `pin_on_write_done` take too: a request that
        // gave up before this reads them pins nothing, one still asking gets its pin.
        let mut pinned = false;
        let hash = entry.hash;
        let inserted = self.index.insert_if(Arc::clone(&entry), |shard| {
            pinned = shard.pin_next.contains_key(&hash.0);
            allow(shard.objects.get(&hash.0))
        });
        match inserted {
            Some(Inserted::New) if pinned => {
                let disk = &self.disks[usize::from(entry.disk)];
                let hash = entry.hash;
                disk.track(entry, Some(QueueId::Pinned));
                if let Err(err) = disk.journal(&*self.io, &Record::Pin { hash, pinned: true }) {
                    self.disk_error(disk.id, IoOp::Append, disk.dir(), &err);
                }
                true
            }
            Some(inserted) => {
                self.account_inserted(entry, inserted, inherit);
                true
            }
            None => false,
        }
    }

    fn account_inserted(&self, entry: Arc<Entry>, inserted: Inserted, inherit: bool) {
        match inserted {
            Inserted::New => self.disks[usize::from(entry.disk)].track(entry, None),
            Inserted::Replaced(old) => {
                let queue = old.policy.queue();
                self.untrack(&old);
                if old.disk != entry.disk {
                    // A stale copy on another disk (written while this disk was out,
                    // or before a placement change): remove it there.
                    self.delete_object(&old);
                }
                if queue == QueueId::Pinned {
                    // A refreshed copy of a pinned object stays pinned.
                    let disk = &self.disks[usize::from(entry.disk)];
                    let hash = entry.hash;
                    disk.track(entry, Some(QueueId::Pinned));
                    let rec = Record::Pin { hash, pinned: true };
                    if let Err(err) = disk.journal(&*self.io, &rec) {
                        self.disk_error(disk.id, IoOp::Append, disk.dir(), &err);
                    }
                    return;
                }
                let keep = inherit && old.disk == entry.disk && queue != QueueId::Removed;
                if keep {
                    entry.policy.inherit(&old.policy);
                }
                self.disks[usize::from(entry.disk)].track(entry, keep.then_some(queue));
            }
            Inserted::KeptNewer(_) => {}
        }
    }

    /// Undo a rename whose object may not be indexed (its write was cancelled, or an
    /// update found the object changed): unlink the file and journal the removal. An
    /// entry still indexed for the key on this disk then names no file (or a file
    /// renamed there later): its next lookup finds it missing and forgets it, as after
    /// any file lost behind the index's back.
    pub(crate) fn unpublish(&self, disk: u16, hash: KeyHash, path: &Path) {
        let d = &self.disks[usize::from(disk)];
        if !d.health.in_service() {
            return; // wiped when it returns to service
        }
        match self.io.remove_file(path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => self.disk_error(disk, IoOp::Remove, path, &err),
        }
        if let Err(err) = d.journal(&*self.io, &Record::Remove { hash }) {
            self.disk_error(disk, IoOp::Append, d.dir(), &err);
        }
    }

    /// Stop tracking an object that left the index (purged, replaced, evicted, found
    /// missing) and close its kept file, so its blocks are freed when it is unlinked
    /// (responses still sending from it finish first).
    pub(crate) fn untrack(&self, e: &Entry) {
        self.open_files.close(e);
        self.disks[usize::from(e.disk)].untrack(e);
    }

    /// Unlink an object that is no longer indexed and journal its removal.
    pub(crate) fn delete_object(&self, e: &Entry) {
        let disk = &self.disks[usize::from(e.disk)];
        self.untrack(e);
        if !disk.health.in_service() {
            return; // wiped when it returns to service
        }
        let path = disk.object_path(e.hash);
        match self.io.remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => self.disk_error(e.disk, IoOp::Remove, &path, &err),
        }
        if let Err(err) = disk.journal(&*self.io, &Record::Remove { hash: e.hash }) {
            self.disk_error(e.disk, IoOp::Append, disk.dir(), &err);
        }
    }

    /// Count an I/O error against a disk; take it out of service past the threshold.
    pub(crate) fn disk_error(&self, disk: u16, op: IoOp, path: &Path, err: &std::io::Error) {
        let kind = DiskErrorKind::of(err);
        self.count_error(disk, kind, op, path, &err.to_string());
    }

    /// Count an error of a known kind (corrupt headers have no errno).
    pub(crate) fn count_error(
        &self,
        disk: u16,
        kind: DiskErrorKind,
        op: IoOp,
        path: &Path,
        detail: &str,
    ) {
        let d = &self.disks[usize::from(disk)];
        tracing::warn!(disk = %d.name(), op = op.as_str(), kind = kind.as_str(), path = %path.display(), error = detail, "disk error");
        if kind == DiskErrorKind::NoSpace {
            d.wake();
        }
        let verdict = d.health.record(
            kind,
            now_ms(),
            self.cfg.error_threshold,
            self.cfg.error_window,
        );
        if verdict == Verdict::Tripped {
            self.take_out_of_service(usize::from(disk), kind);
        }
    }

    /// The disk failed: its objects become misses, writes go elsewhere, the state is
    /// persisted, and the maintenance task starts probing it.
    fn take_out_of_service(&self, i: usize, kind: DiskErrorKind) {
        let d = &self.disks[i];
        tracing::error!(disk = %d.name(), cause = kind.as_str(), errors = d.health.total_errors(), "disk taken out of service");
        d.loaded.store(false, Ordering::Release);
        *lock(&d.journal) = None;
        let dropped = self.index.drain_matching(|e| usize::from(e.disk) == i);
        for e in &dropped {
            self.open_files.close(e);
        }
        lock(&d.policy).clear();
        d.used.store(0, Ordering::Release);
        d.objects.store(0, Ordering::Release);
        tracing::info!(disk = %d.name(), objects = dropped.len(), "index entries of failed disk dropped");
        // Best effort: the failed disk may not take the marker; the other disks do.
        // Not from a lent store: the disks are the next process's to judge and record.
        if !self.lent.load(Ordering::Acquire) {
            let _ = self.io.create_new(&d.dir().join(OUT_OF_SERVICE_MARKER));
            self.persist_disk_states();
        }
        self.notify_loaded();
        d.wake();
    }

    /// Write the list of out-of-service disks to every in-service disk.
    pub(crate) fn persist_disk_states(&self) {
        let out: Vec<&str> = self
            .disks
            .iter()
            .filter(|d| !d.health.in_service())
            .map(|d| d.name())
            .collect();
        let body = format_disk_states(&out);
        for d in self.disks.iter().filter(|d| d.health.in_service()) {
            let tmp = d.dir().join(format!("{DISK_STATES_FILE}.tmp"));
            let _ = self.io.remove_file(&tmp);
            let res = self
                .io
                .create_new(&tmp)
                .and_then(|f| {
                    self.io
                        .write_at(&f, &tmp, &body, 0)
                        .and_then(|()| self.io.sync_data(&f, &tmp))
                })
                .and_then(|()| self.io.rename(&tmp, &d.dir().join(DISK_STATES_FILE)));
            if let Err(e) = res {
                tracing::warn!(disk = %d.name(), error = %e, "cannot record disk states");
            }
        }
    }
}

/// Called with the outcome once an object is published or has failed.
pub type PublishDone = Box<dyn FnOnce(Result<Published, WriteError>) + Send>;

/// Objects waiting for their disk's publisher.
#[derive(Default)]
pub(crate) struct PublishQueue {
    pub(crate) queue: Mutex<Pending>,
    pub(crate) ready: Condvar,
    /// Flushes (batches) and objects published through them, since start.
    pub(crate) batches: AtomicU64,
    pub(crate) published: AtomicU64,
    /// Writes refused because the backlog was over `max_publish_backlog`.
    pub(crate) behind_refused: AtomicU64,
    /// Whether the last write begun found the disk behind (logs the change only).
    behind: AtomicBool,
}

#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) objects: VecDeque<(ObjectWriter, PublishDone)>,
    /// Body bytes queued: the backlog a disk that cannot keep up builds.
    pub(crate) bytes: u64,
}

impl PublishQueue {
    pub(crate) fn push(&self, w: ObjectWriter, done: PublishDone) {
        let mut q = lock(&self.queue);
        q.bytes += w.written();
        q.objects.push_back((w, done));
        drop(q);
        self.ready.notify_one();
    }

    /// Body bytes waiting to be published.
    pub(crate) fn backlog_bytes(&self) -> u64 {
        lock(&self.queue).bytes
    }

    /// Whether a new write may start: false while more than `max` body bytes wait to
    /// be published (`StoreConfig::max_publish_backlog`): the disk is behind the
    /// origin, so the fill relays and stores nothing until it catches up; a slow disk
    /// never slows a client and the page cache does not fill with data waiting for a
    /// flush. Counted; the change is logged once each way.
    pub(crate) fn admit(&self, disk: &str, max: u64) -> bool {
        let backlog = self.backlog_bytes();
        let behind = backlog > max;
        if behind != self.behind.swap(behind, Ordering::Relaxed) {
            if behind {
                tracing::warn!(disk, backlog_bytes = backlog, max_publish_backlog = max, "disk behind the fills: new objects are relayed, not stored, until it catches up");
            } else {
                tracing::info!(disk, "disk caught up: storing again");
            }
        }
        if behind {
            self.behind_refused.fetch_add(1, Ordering::Relaxed);
        }
        !behind
    }

    pub(crate) fn wake(&self) {
        self.ready.notify_all();
    }
}
