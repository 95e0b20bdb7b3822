//! Change notification for appliance mode's open-file cache: one inotify instance per
//! worker watching the directories that lead to cached files, so a replaced, modified,
//! renamed or deleted file is dropped from the cache when the kernel says so rather
//! than up to `open_file_cache_valid` later, and a hot file costs no `stat` at all.
//!
//! What is watched: every directory from the root down to a cached file's parent (the
//! root itself included), because renaming or deleting an *ancestor* changes what a
//! path names too and inotify reports it only to that ancestor's parent. Each event
//! names a path (the watched directory joined with the event's name); the cache drops
//! every entry at or below it ([`Change::Under`]). A queue overflow loses events, so
//! it drops everything ([`Change::All`], the "generation bump").
//!
//! Bounded: at most `budget` directories per worker (a share of
//! `fs.inotify.max_user_watches`); a file below a directory that could not be watched
//! is simply not "watched" and the cache falls back to revalidating it by `stat` after
//! its time-to-live. What inotify cannot see (a mount over a directory, a write through
//! a hard link in an unwatched directory, network filesystems) is covered by a long
//! backstop revalidation of watched entries (`openfiles`).
//!
//! Reading is cheap on the request path: [`DirWatch::pending`] asks tokio whether the
//! descriptor was seen readable (no syscall when not) and reads only then. Since the
//! kernel queues an event before the write, rename or unlink that caused it returns,
//! an event is known to the worker before any request that was sent after the change.
//!
//! fanotify (one mark for a whole filesystem) is not used: it needs `CAP_SYS_ADMIN`,
//! which the systemd unit does not grant.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::task::{Context, Poll, Waker};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};

/// What a batch of events invalidates.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Events were lost (queue overflow): nothing cached can be trusted.
    All,
    /// This path (relative to the root; empty for the root) and everything below it.
    Under(Box<[u8]>),
}

/// Directories watched, both ways.
#[derive(Default)]
struct Dirs {
    by_path: HashMap<Box<[u8]>, WatchDescriptor>,
    by_id: HashMap<i32, Box<[u8]>>,
}

/// One worker's inotify instance.
pub(crate) struct DirWatch {
    /// Readiness of the inotify instance in this worker's runtime, through a duplicate
    /// of its descriptor that this `AsyncFd` owns (so the registration can never
    /// outlive the descriptor it names).
    ready: AsyncFd<std::fs::File>,
    inotify: RefCell<Inotify>,
    dirs: RefCell<Dirs>,
    budget: usize,
    /// `/proc/self/fd/N` of the root: watches are added by path, and this one follows
    /// the root descriptor wherever the root directory is.
    root: String,
}

/// Events that change what a path names or what its file holds.
fn mask() -> WatchMask {
    WatchMask::MODIFY
        | WatchMask::ATTRIB
        | WatchMask::CLOSE_WRITE
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

impl DirWatch {
    /// A watcher for files beneath `root`, watching at most `budget` directories.
    /// Inside the worker's runtime (it registers with it).
    pub(crate) fn new(root: BorrowedFd<'_>, budget: usize) -> io::Result<DirWatch> {
        let inotify = Inotify::init()?;
        let dup = std::fs::File::from(inotify.as_fd().try_clone_to_owned()?);
        // tokio deprecated the safe constructor (its replacement is `unsafe`) because a
        // `T` whose fd could be closed while registered breaks I/O safety. A `File`
        // owns its fd and only the `AsyncFd` owns this one; this crate forbids
        // `unsafe`, so we keep the safe call (as `park` does).
        #[allow(deprecated, reason = "sound for File: it owns its fd; see above")]
        let ready = AsyncFd::new(dup)?;
        Ok(DirWatch {
            ready,
            inotify: RefCell::new(inotify),
            dirs: RefCell::new(Dirs::default()),
            budget,
            root: format!("/proc/self/fd/{}", root.as_raw_fd()),
        })
    }

    /// Watch every directory from the root to the parent of `rel`. True when all of
    /// them are watched (then a change to `rel` or to any directory on its way is
    /// reported); false past the budget or when a watch cannot be added.
    pub(crate) fn watch_parents(&self, rel: &[u8]) -> bool {
        let mut dirs = self.dirs.borrow_mut();
        let ends = std::iter::once(0).chain(
            rel.iter()
                .enumerate()
                .filter(|&(_, &b)| b == b'/')
                .map(|(i, _)| i),
        );
        for end in ends {
            let dir = &rel[..end];
            if dirs.by_path.contains_key(dir) {
                continue;
            }
            if dirs.by_path.len() >= self.budget {
                return false;
            }
            let mut path = self.root.clone().into_bytes();
            if !dir.is_empty() {
                path.push(b'/');
                path.extend_from_slice(dir);
            }
            let path = std::ffi::OsStr::from_bytes(&path);
            let wd = match self.inotify.borrow().watches().add(path, mask()) {
                Ok(wd) => wd,
                Err(e) => {
                    tracing::debug!(error = %e, "inotify watch not added");
                    return false;
                }
            };
            dirs.by_id.insert(wd.get_watch_descriptor_id(), dir.into());
            dirs.by_path.insert(dir.into(), wd);
        }
        true
    }

    /// The changes queued now, without waiting: no syscall unless the runtime has seen
    /// the descriptor readable.
    pub(crate) fn pending(&self) -> Vec<Change> {
        // Unconstrained: a task out of its cooperative budget must still see events.
        let readable = tokio::task::unconstrained(self.ready.readable());
        let mut readable = std::pin::pin!(readable);
        let mut cx = Context::from_waker(Waker::noop());
        match readable.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(mut guard)) => self.read_all(&mut guard),
            Poll::Ready(Err(_)) | Poll::Pending => Vec::new(),
        }
    }

    /// The next changes, waiting for them.
    pub(crate) async fn next(&self) -> io::Result<Vec<Change>> {
        loop {
            let mut guard = self.ready.readable().await?;
            let changes = self.read_all(&mut guard);
            if !changes.is_empty() {
                return Ok(changes);
            }
        }
    }

    fn read_all(&self, guard: &mut AsyncFdReadyGuard<'_, std::fs::File>) -> Vec<Change> {
        let mut out = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let read = guard.try_io(|_| {
                let mut inotify = self.inotify.borrow_mut();
                let events = inotify.read_events(&mut buffer)?;
                Ok(events
                    .map(|e| {
                        (
                            e.wd.get_watch_descriptor_id(),
                            e.mask,
                            e.name.map(|n| n.as_bytes().to_vec()),
                        )
                    })
                    .collect::<Vec<_>>())
            });
            match read {
                Ok(Ok(events)) => {
                    for (id, mask, name) in events {
                        self.apply(id, mask, name.as_deref(), &mut out);
                    }
                }
                Ok(Err(e)) => {
                    // Unexpected: events may be lost, so trust nothing cached.
                    tracing::warn!(error = %e, "reading inotify events failed");
                    out.push(Change::All);
                    break;
                }
                // Would block: all read, readiness cleared.
                Err(_) => break,
            }
        }
        out
    }

    fn apply(&self, id: i32, mask: EventMask, name: Option<&[u8]>, out: &mut Vec<Change>) {
        if mask.contains(EventMask::Q_OVERFLOW) {
            out.push(Change::All);
            return;
        }
        let Some(dir) = self.dirs.borrow().by_id.get(&id).cloned() else {
            // A watch already forgotten (its IN_IGNORED after removal, say).
            return;
        };
        let path: Box<[u8]> = match name {
            Some(n) if dir.is_empty() => n.into(),
            Some(n) => [&dir[..], b"/", n].concat().into(),
            None => dir,
        };
        let gone = mask.intersects(
            EventMask::DELETE
                | EventMask::MOVED_FROM
                | EventMask::MOVED_TO
                | EventMask::DELETE_SELF
                | EventMask::MOVE_SELF
                | EventMask::IGNORED
                | EventMask::UNMOUNT,
        );
        if gone {
            // What is below `path` is elsewhere now (or nowhere): its watches name
            // the wrong paths, so they go; they are added again on the next miss.
            self.forget_under(&path);
        }
        out.push(Change::Under(path));
    }

    fn forget_under(&self, path: &[u8]) {
        let mut dirs = self.dirs.borrow_mut();
        let under: Vec<Box<[u8]>> = dirs
            .by_path
            .keys()
            .filter(|d| is_under(d, path))
            .cloned()
            .collect();
        for d in under {
            if let Some(wd) = dirs.by_path.remove(&d) {
                dirs.by_id.remove(&wd.get_watch_descriptor_id());
                // Fails when the kernel removed it already (deleted directory).
                let _ = self.inotify.borrow().watches().remove(wd);
            }
        }
    }
}

/// Whether `path` is `prefix` or below it (relative paths; the empty prefix is the
/// root, above everything).
pub(crate) fn is_under(path: &[u8], prefix: &[u8]) -> bool {
    prefix.is_empty()
        || path == prefix
        || (path.len() > prefix.len() && path.starts_with(prefix) && path[prefix.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use super::is_under;

    #[test]
    fn under_is_by_whole_components() {
        assert!(is_under(b"a/b.ts", b""));
        assert!(is_under(b"a/b.ts", b"a"));
        assert!(is_under(b"a/b.ts", b"a/b.ts"));
        assert!(!is_under(b"ab/c.ts", b"a"));
        assert!(!is_under(b"a", b"a/b"));
    }
}
