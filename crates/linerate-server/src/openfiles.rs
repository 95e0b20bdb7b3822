//! Appliance mode's per-worker open-file cache: normalized relative path → the open
//! file, its version (device, inode, size, mtime) and the header values derived from it
//! (`ETag`, `Last-Modified`, `Content-Type`). A hit saves the `openat2` path walk, the
//! `fstat` and the `close` of every request for a hot segment (nginx's
//! `open_file_cache`). One per worker, so no lock: `RefCell`, and `Rc` for the entries a
//! response is still sending from.
//!
//! Correctness comes first: an entry is trusted for `valid` (default 1 s) after it was
//! opened or last checked; the first use after that re-`stat`s the *path*
//! ([`linerate_sys::fs::version_at`], one syscall) and keeps the entry only if device,
//! inode, size, mtime and ctime are all unchanged (ctime: a `chmod` that should now
//! answer 403). Revalidating by path, not by the cached
//! descriptor, is what catches a rename-replace or a delete: the descriptor keeps the
//! old inode alive and would serve it forever. A file that a transfer finds shorter than
//! promised is dropped at once ([`OpenFileCache::forget_fd`]). What this leaves, within
//! `valid` of a change: a file written *in place* sends its new bytes (same inode) under
//! the old length and validators (a shrink ends the response early, never padded, and
//! drops the entry); a replaced or deleted file is still served as it was. Publishing by
//! rename, as packagers do, is never mixed: each response is one inode's bytes.
//!
//! The stat is not confined to the root like `openat2(RESOLVE_BENEATH)` is, which is
//! harmless: its answer is only compared with an inode already opened beneath the root,
//! and any difference reopens through `openat2`.
//!
//! Layered invalidation: with `open_file_cache_watch` on (the default), each worker
//! watches the directories leading to its cached files with inotify (`dirwatch`); an
//! event drops the entries at or below the path it names before the next request is
//! answered, so a watched entry is trusted without any `stat` for
//! [`WATCHED_VALID`] (a backstop for what inotify cannot see: mounts, hard links
//! written elsewhere, network filesystems). An entry whose directories could not be
//! watched (past the watch budget, or inotify unavailable) keeps the `valid` time
//! above. Lost events (queue overflow) drop everything.
//!
//! A short negative cache: a path that does not exist (`ENOENT`, `ENOTDIR`) answers
//! 404 from memory for `valid`, or until an event in its directory says otherwise, so
//! a player or a scanner asking for a missing segment over and over costs no path walk.
//! Bounded by `open_file_cache` names (forgotten all at once when full).
//!
//! Bounded by entry count (`open_file_cache`, default 16384, each one descriptor),
//! evicted by CLOCK (second chance): a hit sets a bit, the hand clears bits until it
//! finds an unreferenced entry. Not here: deciding the response (`appliance`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use linerate_http::{conditional, mime};
use linerate_sys::fs::FileVersion;

use crate::dirwatch::{is_under, Change, DirWatch};

/// How long an entry whose directories are all watched is trusted without a `stat`:
/// inotify reports the changes that matter sooner; this only bounds what it cannot see.
pub(crate) const WATCHED_VALID: Duration = Duration::from_secs(60);

/// Most directories one worker watches (each one inotify watch); lowered to a share of
/// `fs.inotify.max_user_watches` when that is smaller.
const WATCH_BUDGET: usize = 8192;

/// One open file and what the response head needs from it.
pub(crate) struct OpenFile {
    /// The open descriptor (shared with responses still sending from it).
    pub(crate) file: Rc<File>,
    /// Its version when opened.
    version: FileVersion,
    /// `ETag` value (size and mtime, see `conditional::file_etag`).
    pub(crate) etag: String,
    /// `Last-Modified` value (IMF-fixdate).
    pub(crate) last_modified: String,
    /// `Content-Type` by extension.
    pub(crate) content_type: &'static str,
    /// When its bytes were last found in the page cache.
    pub(crate) hot: Rc<Hot>,
}

/// How long bytes found in the page cache are assumed to still be there, so a
/// response for them skips the `cachestat` before its `sendfile`. Pages just read sit
/// at the young end of the kernel's LRU lists, and reclaim takes the old end first, so
/// within this the guess is wrong only under memory pressure severe enough to reclaim
/// what was read a moment ago; then one `sendfile` reads from disk on the event loop,
/// as nginx's every `sendfile` may. Each entry is checked again at least this often.
pub(crate) const HOT_RECHECK: Duration = Duration::from_millis(500);

/// The last byte range of one open file proven resident, and when.
#[derive(Default)]
pub(crate) struct Hot {
    proven: std::cell::Cell<Option<(Instant, u64, u64)>>,
}

impl Hot {
    /// Whether `[start, end)` lies within the range proven resident less than
    /// [`HOT_RECHECK`] before `now`.
    pub(crate) fn covers(&self, now: Instant, start: u64, end: u64) -> bool {
        self.proven.get().is_some_and(|(at, s, e)| {
            now.saturating_duration_since(at) < HOT_RECHECK && s <= start && end <= e
        })
    }

    /// `[start, end)` was just made or found resident (as of `at`).
    pub(crate) fn proved(&self, at: Instant, start: u64, end: u64) {
        self.proven.set(Some((at, start, end)));
    }
}

/// Residency proofs of the store's open files (cache mode), one per file, so a kept
/// object's body found resident a moment ago is sent without a `cachestat` and an
/// `RWF_NOWAIT` read (11 % of the core on 64 KiB cache hits: the proof appliance mode's
/// open files carry in [`OpenFile`]). Per worker. Keyed by the address of the file's
/// `Arc` (the store hands out the same `Arc` for every hit on a kept object), with a
/// `Weak` kept beside it: while the entry lives that allocation cannot be reused for
/// another file, and the `Weak` does not keep the descriptor open. A file opened for one
/// response only gets a proof that dies with it; full, the map drops its dead entries.
#[derive(Default)]
pub(crate) struct StoredHot {
    proofs: std::cell::RefCell<HashMap<usize, Proof>>,
}

/// One file's entry in [`StoredHot`]: the file (not kept open) and its proof.
type Proof = (std::sync::Weak<File>, Rc<Hot>);

/// Most entries in a worker's [`StoredHot`] before the dead ones are dropped.
const STORED_HOT_MAX: usize = 8192;

impl StoredHot {
    /// The proof for `file`.
    pub(crate) fn get(&self, file: &std::sync::Arc<File>) -> Rc<Hot> {
        let key = std::sync::Arc::as_ptr(file) as usize;
        let mut proofs = self.proofs.borrow_mut();
        if let Some((_, hot)) = proofs.get(&key) {
            return Rc::clone(hot);
        }
        if proofs.len() >= STORED_HOT_MAX {
            proofs.retain(|_, (file, _)| file.strong_count() > 0);
            if proofs.len() >= STORED_HOT_MAX / 2 {
                proofs.clear();
            }
        }
        let hot = Rc::new(Hot::default());
        proofs.insert(key, (std::sync::Arc::downgrade(file), Rc::clone(&hot)));
        hot
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.proofs.borrow().len()
    }
}

impl OpenFile {
    /// Length in bytes when opened.
    pub(crate) fn len(&self) -> u64 {
        self.version.size
    }

    /// Modification time, seconds since the epoch.
    pub(crate) fn mtime(&self) -> u64 {
        self.version.mtime_sec
    }

    fn new(file: File, rel: &[u8]) -> Result<OpenFile, OpenError> {
        let meta = file.metadata().map_err(OpenError::Stat)?;
        let version = FileVersion {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_sec: u64::try_from(meta.mtime()).unwrap_or(0),
            mtime_nsec: u32::try_from(meta.mtime_nsec()).unwrap_or(0),
            ctime_nanos: linerate_sys::fs::nanos(meta.ctime(), meta.ctime_nsec()),
            regular: meta.is_file(),
        };
        if !version.regular {
            return Err(OpenError::NotAFile);
        }
        let mtime_nanos =
            u128::from(version.mtime_sec) * 1_000_000_000 + u128::from(version.mtime_nsec);
        Ok(OpenFile {
            file: Rc::new(file),
            etag: conditional::file_etag(version.size, mtime_nanos),
            last_modified: linerate_http::date::format(version.mtime_sec),
            content_type: mime::content_type(rel),
            hot: Rc::new(Hot::default()),
            version,
        })
    }
}

/// Why a file could not be given.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// `openat2` failed (missing, outside the root, permission...).
    Open(io::Error),
    /// `fstat` of the opened file failed.
    Stat(io::Error),
    /// Not a regular file (a directory, a FIFO...).
    NotAFile,
}

/// One cache slot.
struct Slot {
    key: Box<[u8]>,
    entry: Rc<OpenFile>,
    /// When the entry was opened or last revalidated.
    checked: Instant,
    /// CLOCK's reference bit: used since the hand last passed.
    referenced: bool,
    /// Every directory on its path was watched when it was opened.
    watched: bool,
}

#[derive(Default)]
struct Table {
    /// Path → index in `slots`.
    index: HashMap<Box<[u8]>, usize>,
    slots: Vec<Slot>,
    /// CLOCK hand: the next slot considered for eviction.
    hand: usize,
    /// Paths known missing → when that was seen.
    missing: HashMap<Box<[u8]>, Instant>,
}

impl Table {
    /// Forget what a change invalidates.
    fn apply(&mut self, change: &Change) {
        match change {
            Change::All => {
                self.index.clear();
                self.slots.clear();
                self.hand = 0;
                self.missing.clear();
            }
            Change::Under(prefix) => {
                let mut at = 0;
                while at < self.slots.len() {
                    if is_under(&self.slots[at].key, prefix) {
                        self.remove(at);
                    } else {
                        at += 1;
                    }
                }
                self.missing.retain(|k, _| !is_under(k, prefix));
            }
        }
    }

    fn remove(&mut self, at: usize) {
        let slot = self.slots.swap_remove(at);
        self.index.remove(&slot.key);
        if let Some(moved) = self.slots.get(at) {
            self.index.insert(moved.key.clone(), at);
        }
        if self.hand >= self.slots.len() {
            self.hand = 0;
        }
    }

    /// The slot CLOCK gives up: the first unreferenced one from the hand, clearing
    /// reference bits on the way (at most one full turn plus one).
    fn victim(&mut self) -> usize {
        loop {
            let at = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            let slot = &mut self.slots[at];
            if !slot.referenced {
                return at;
            }
            slot.referenced = false;
        }
    }
}

/// The cache. Capacity 0 disables it: every request opens and closes its file.
pub(crate) struct OpenFileCache {
    capacity: usize,
    valid: Duration,
    table: RefCell<Table>,
    /// Set by [`OpenFileCache::watch`] once its inotify instance is up.
    watch: RefCell<Option<std::rc::Rc<DirWatch>>>,
}

impl OpenFileCache {
    /// A cache of at most `capacity` open files, each trusted for `valid` between
    /// checks of its path.
    pub(crate) fn new(capacity: usize, valid: Duration) -> OpenFileCache {
        OpenFileCache {
            capacity,
            valid,
            table: RefCell::new(Table::default()),
            watch: RefCell::new(None),
        }
    }

    /// Watch the directories of cached files for changes (inotify) until the worker
    /// stops; returns at once when the cache is off, and early (leaving time-based
    /// revalidation alone in charge) when inotify cannot be used.
    pub(crate) async fn watch(&self, root: BorrowedFd<'_>, workers: usize) {
        if self.capacity == 0 {
            return;
        }
        let budget = watch_budget(workers);
        let watch = match DirWatch::new(root, budget) {
            Ok(w) => std::rc::Rc::new(w),
            Err(e) => {
                tracing::warn!(error = %e, "inotify unavailable: open files are revalidated by stat only");
                return;
            }
        };
        self.watch.replace(Some(watch.clone()));
        loop {
            match watch.next().await {
                Ok(changes) => {
                    let mut table = self.table.borrow_mut();
                    for c in &changes {
                        table.apply(c);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "inotify failed: open files are revalidated by stat only");
                    self.watch.replace(None);
                    self.table.borrow_mut().apply(&Change::All);
                    return;
                }
            }
        }
    }

    /// The file at `rel` beneath `root`: cached if its entry is fresh or still matches
    /// the path, else opened (and cached).
    pub(crate) fn open(&self, root: BorrowedFd<'_>, rel: &[u8]) -> Result<Rc<OpenFile>, OpenError> {
        if self.capacity == 0 {
            return open_new(root, rel).map(Rc::new);
        }
        let now = Instant::now();
        let watch = self.watch.borrow().clone();
        let mut table = self.table.borrow_mut();
        if let Some(w) = &watch {
            for c in w.pending() {
                table.apply(&c);
            }
        }
        if let Some(&at) = table.index.get(rel) {
            let slot = &mut table.slots[at];
            let valid = if slot.watched {
                WATCHED_VALID
            } else {
                self.valid
            };
            if now.saturating_duration_since(slot.checked) < valid {
                slot.referenced = true;
                return Ok(slot.entry.clone());
            }
            match linerate_sys::fs::version_at(root, rel) {
                Ok(v) if v == slot.entry.version => {
                    slot.checked = now;
                    slot.referenced = true;
                    return Ok(slot.entry.clone());
                }
                // Replaced, modified, deleted or unreadable: open afresh (which
                // answers the 404 or 403 too).
                _ => table.remove(at),
            }
        }
        if let Some(&seen) = table.missing.get(rel) {
            if now.saturating_duration_since(seen) < self.valid {
                return Err(OpenError::Open(io::Error::from_raw_os_error(libc::ENOENT)));
            }
            table.missing.remove(rel);
        }
        // Watch before opening: a change between the two is then reported, never missed.
        let watched = watch.as_ref().is_some_and(|w| w.watch_parents(rel));
        let entry = match open_new(root, rel) {
            Ok(e) => Rc::new(e),
            Err(OpenError::Open(e)) if is_missing(&e) => {
                if table.missing.len() >= self.capacity {
                    table.missing.clear();
                }
                table.missing.insert(rel.into(), now);
                return Err(OpenError::Open(e));
            }
            Err(e) => return Err(e),
        };
        let slot = Slot {
            key: rel.into(),
            entry: entry.clone(),
            checked: now,
            referenced: false,
            watched,
        };
        if table.slots.len() < self.capacity {
            let at = table.slots.len();
            table.index.insert(slot.key.clone(), at);
            table.slots.push(slot);
        } else {
            let at = table.victim();
            let old = std::mem::replace(&mut table.slots[at], slot);
            table.index.remove(&old.key);
            let key = table.slots[at].key.clone();
            table.index.insert(key, at);
        }
        Ok(entry)
    }

    /// Drop the entry whose descriptor is `fd`, if any: a transfer found the file
    /// shorter than its entry says (truncated in place). Rare, so a linear scan; the
    /// descriptor number is unique while the caller holds the file open.
    pub(crate) fn forget_fd(&self, fd: RawFd) {
        let mut table = self.table.borrow_mut();
        if let Some(at) = table
            .slots
            .iter()
            .position(|s| s.entry.file.as_fd().as_raw_fd() == fd)
        {
            table.remove(at);
        }
    }

    /// Entries held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.borrow().slots.len()
    }
}

/// Whether an open failed because the path names nothing (cached as missing).
fn is_missing(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR))
}

/// Directories one worker may watch: [`WATCH_BUDGET`], or less when the user's inotify
/// watch limit shared by `workers` (and by other programs: half of it is left) is lower.
fn watch_budget(workers: usize) -> usize {
    let limit = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(8192);
    WATCH_BUDGET.min(limit / 2 / workers.max(1))
}

/// Whether opens still ask for `O_NOATIME` (no access-time check per read): until the
/// kernel first refuses it, on a file this process's user does not own (content placed
/// by another account), then never again, so such a library pays one refused open.
static NOATIME: AtomicBool = AtomicBool::new(true);

fn open_new(root: BorrowedFd<'_>, rel: &[u8]) -> Result<OpenFile, OpenError> {
    use linerate_sys::open::{open_beneath, refused_noatime};
    let noatime = NOATIME.load(Ordering::Relaxed);
    let file = match open_beneath(root, rel, noatime) {
        Err(e) if noatime && refused_noatime(&e) => {
            NOATIME.store(false, Ordering::Relaxed);
            open_beneath(root, rel, false)
        }
        r => r,
    }
    .map_err(OpenError::Open)?;
    OpenFile::new(file, rel)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests on a temp dir they create")]
mod tests {
    use super::*;
    use std::io::Read;

    /// A fresh directory (removed when the guard drops, also when a test fails) and
    /// its descriptor.
    fn setup() -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().unwrap();
        let root = File::open(dir.path()).unwrap();
        (dir, root)
    }

    fn body(e: &OpenFile) -> Vec<u8> {
        let mut s = Vec::new();
        (&*e.file).read_to_end(&mut s).unwrap();
        s
    }

    #[test]
    fn hit_within_valid_and_revalidated_after() {
        let (tmp, root) = setup();
        let dir = tmp.path();
        std::fs::write(dir.join("a.ts"), b"one").unwrap();
        let cache = OpenFileCache::new(4, Duration::from_millis(50));
        let first = cache.open(root.as_fd(), b"a.ts").unwrap();
        assert_eq!(first.content_type, "video/mp2t");
        let again = cache.open(root.as_fd(), b"a.ts").unwrap();
        assert!(Rc::ptr_eq(&first, &again), "a hit within `valid`");
        // Replaced by rename: trusted until `valid` passes, then reopened.
        std::fs::write(dir.join("tmp"), b"second").unwrap();
        std::fs::rename(dir.join("tmp"), dir.join("a.ts")).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        let new = cache.open(root.as_fd(), b"a.ts").unwrap();
        assert!(!Rc::ptr_eq(&first, &new));
        assert_eq!(new.len(), 6);
        assert_eq!(body(&new), b"second");
        // Unchanged after `valid`: the same entry, checked again.
        std::thread::sleep(Duration::from_millis(60));
        assert!(Rc::ptr_eq(
            &new,
            &cache.open(root.as_fd(), b"a.ts").unwrap()
        ));
        // Deleted: gone after `valid`.
        std::fs::remove_file(dir.join("a.ts")).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert!(matches!(
            cache.open(root.as_fd(), b"a.ts"),
            Err(OpenError::Open(_))
        ));
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn bounded_by_count_and_clock_keeps_the_hot_entry() {
        let (tmp, root) = setup();
        let dir = tmp.path();
        for i in 0..10 {
            std::fs::write(dir.join(format!("{i}")), format!("{i}")).unwrap();
        }
        let cache = OpenFileCache::new(3, Duration::from_secs(60));
        let hot = cache.open(root.as_fd(), b"0").unwrap();
        for i in 1..10 {
            let _ = cache.open(root.as_fd(), b"0").unwrap();
            let name = format!("{i}");
            let e = cache.open(root.as_fd(), name.as_bytes()).unwrap();
            assert_eq!(body(&e), name.as_bytes());
            assert!(cache.len() <= 3);
        }
        assert!(Rc::ptr_eq(&hot, &cache.open(root.as_fd(), b"0").unwrap()));
        cache.forget_fd(hot.file.as_raw_fd());
        assert!(!Rc::ptr_eq(&hot, &cache.open(root.as_fd(), b"0").unwrap()));
    }

    #[test]
    fn hot_covers_only_the_proven_range_within_the_recheck_time() {
        let hot = Hot::default();
        let t = Instant::now();
        assert!(!hot.covers(t, 0, 1), "nothing proven yet");
        hot.proved(t, 100, 1000);
        assert!(hot.covers(t, 100, 1000));
        assert!(hot.covers(t + HOT_RECHECK / 2, 200, 300));
        assert!(!hot.covers(t, 0, 1000), "starts before the proven range");
        assert!(!hot.covers(t, 100, 1001), "ends after it");
        assert!(!hot.covers(t + HOT_RECHECK, 100, 1000), "too long ago");
    }

    /// Guards the cache-mode proofs: every hit on the same open file shares one proof,
    /// another file (or the same path opened again) never finds it, a dropped file's
    /// address is not taken by a new file while its entry lives, and the map stays
    /// bounded with files opened for one response each.
    #[test]
    fn stored_proofs_follow_the_open_file_and_stay_bounded() {
        let (dir, _) = setup();
        std::fs::write(dir.path().join("a.bin"), b"0123456789").unwrap();
        let open = || std::sync::Arc::new(File::open(dir.path().join("a.bin")).unwrap());
        let proofs = StoredHot::default();
        let kept = open();
        let first = proofs.get(&kept);
        first.proved(Instant::now(), 0, 10);
        assert!(Rc::ptr_eq(
            &first,
            &proofs.get(&std::sync::Arc::clone(&kept))
        ));
        let other = open();
        assert!(!proofs.get(&other).covers(Instant::now(), 0, 10));
        // Files opened for one response each, dropped after it: a new file never gets
        // an earlier one's proof, and the map does not grow without bound.
        for _ in 0..3 * STORED_HOT_MAX {
            let once = open();
            let hot = proofs.get(&once);
            assert!(
                !hot.covers(Instant::now(), 0, 10),
                "a new file found a proof"
            );
            hot.proved(Instant::now(), 0, 10);
        }
        assert!(proofs.len() <= STORED_HOT_MAX, "{}", proofs.len());
        // The purges dropped only the dead entries: the kept file keeps its proof.
        assert!(Rc::ptr_eq(&proofs.get(&kept), &first));
    }

    #[test]
    fn disabled_and_not_a_file() {
        let (tmp, root) = setup();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::write(dir.join("f"), b"x").unwrap();
        let cache = OpenFileCache::new(0, Duration::from_secs(60));
        let a = cache.open(root.as_fd(), b"f").unwrap();
        let b = cache.open(root.as_fd(), b"f").unwrap();
        assert!(!Rc::ptr_eq(&a, &b));
        assert_eq!(cache.len(), 0);
        let on = OpenFileCache::new(2, Duration::from_secs(60));
        assert!(matches!(
            on.open(root.as_fd(), b"d"),
            Err(OpenError::NotAFile)
        ));
    }
}
