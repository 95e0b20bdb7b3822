//! The store's writer lease: one `flock(2)` on a `lock` file in every disk directory, so
//! two processes can never write the same store (two writers would interleave journal
//! records and evict each other's files), and the hand-over of that lease to the next
//! process in a zero-downtime upgrade.
//!
//! The lock belongs to an open file description, so it survives being passed over a
//! unix socket (SCM_RIGHTS): the new process adopts the old one's descriptors and holds
//! the same locks without a moment where nobody does. Before passing them, the old
//! process *lends* its store ([`crate::Store::lend`]): it stops every write (new fills
//! are relayed without storing, purges and metadata updates are refused, eviction and
//! compaction pause), gives the writes in flight a short grace to finish (a longer one
//! goes on for its clients but is not stored), and syncs its journals.
//! If the new process fails before it is ready, the old one takes the store back
//! ([`crate::Store::resume`]) with a fresh journal and a snapshot of its own index, which
//! is then the truth again, whatever the failed process had begun.
//!
//! Not here: the upgrade protocol (the server's `upgrade` module) or the syscalls.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use linerate_sys::fs::{try_lock_exclusive, Locked};

use crate::config::StoreConfig;
use crate::index::lock;
use crate::store::Store;

/// Name of the lock file in each disk directory. Empty; only its lock matters.
pub const LOCK_FILE: &str = "lock";

/// Why the lease could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the store (a second `linerate serve` on the same cache).
    #[error(
        "{}: the cache directory is in use by another process (its lock is held)",
        path.display()
    )]
    Held {
        /// The disk directory.
        path: PathBuf,
    },
    /// The lock file could not be created, opened or locked.
    #[error("{}: lock file: {source}", path.display())]
    Io {
        /// The disk directory.
        path: PathBuf,
        /// What the filesystem said.
        source: std::io::Error,
    },
}

/// The held locks, one per configured disk, in configuration order.
#[derive(Debug)]
pub struct StoreLock {
    disks: Vec<(PathBuf, File)>,
}

impl StoreLock {
    /// Lock every disk of `cfg` (creating its directory and lock file when missing).
    /// Never waits: a lock held elsewhere is [`LockError::Held`] at once.
    pub fn acquire(cfg: &StoreConfig) -> Result<StoreLock, LockError> {
        // Adopting nothing locks every disk afresh.
        StoreLock::adopt(cfg, Vec::new())
    }

    /// Take over locks passed by the previous process. Each disk of `cfg` whose lock
    /// file (same device and inode) is among `files` keeps that lock, which this process
    /// now shares (the same open file description) with no moment unlocked; a disk that
    /// is new in this configuration is locked as [`StoreLock::acquire`] does. Passed
    /// locks of disks no longer configured are released.
    pub fn adopt(cfg: &StoreConfig, files: Vec<File>) -> Result<StoreLock, LockError> {
        let mut passed: Vec<Option<(u64, u64, File)>> = files
            .into_iter()
            .filter_map(|f| {
                let m = f.metadata().ok()?;
                Some(Some((m.dev(), m.ino(), f)))
            })
            .collect();
        let mut disks = Vec::with_capacity(cfg.disks.len());
        for d in &cfg.disks {
            let io = |source| LockError::Io {
                path: d.path.clone(),
                source,
            };
            let found = std::fs::metadata(d.path.join(LOCK_FILE))
                .ok()
                .and_then(|want| {
                    passed.iter_mut().find_map(|p| match p {
                        Some((dev, ino, _)) if (*dev, *ino) == (want.dev(), want.ino()) => p.take(),
                        _ => None,
                    })
                });
            let f = match found {
                Some((_, _, f)) => f,
                None => {
                    std::fs::create_dir_all(&d.path).map_err(io)?;
                    open_lock_file(&d.path).map_err(io)?
                }
            };
            // A passed lock is already held by this description, and taking it again is
            // a no-op that proves it; a new disk's lock is taken here.
            match try_lock_exclusive(f.as_fd()).map_err(io)? {
                Locked::Yes => {}
                Locked::HeldElsewhere => {
                    return Err(LockError::Held {
                        path: d.path.clone(),
                    })
                }
            }
            disks.push((d.path.clone(), f));
        }
        Ok(StoreLock { disks })
    }

    /// The lock descriptors, in configuration order, to pass to the next process.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        self.disks.iter().map(|(_, f)| f.as_fd()).collect()
    }
}

/// How long [`Store::lend`] waits, after its grace, for the writes whose body is
/// complete to be published (a flush and a rename each; seconds only on a disk that is
/// failing).
pub const PUBLISH_WAIT: Duration = Duration::from_secs(10);

/// Why [`Store::lend`] did not lend the store. The store keeps writing.
#[derive(Debug, thiserror::Error)]
pub enum LendError {
    /// Writes whose body was complete were not published in time.
    #[error("{0} writes still being published after the wait")]
    WritesInFlight(usize),
    /// Already lent.
    #[error("already lent")]
    AlreadyLent,
}

impl Store {
    /// The lease's descriptors, to pass to the next process after [`Store::lend`].
    pub fn lock_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        self.lock.as_ref().map(StoreLock::fds).unwrap_or_default()
    }

    /// Stop writing so that another process can take the store over: new writes are
    /// refused ([`WriteRefused::Lent`]; the caller relays without storing), purges
    /// and metadata updates do nothing, eviction and compaction pause; then give the
    /// writes in flight up to `grace` to finish and be published. A write whose body is
    /// still coming in after that is not waited for: it goes on for its readers to its
    /// last byte (they are told the body is complete) but is never published, so the
    /// next process, which does not know it, fetches the object again when it is asked
    /// for it; nothing partial is ever published. Writes whose body is complete are
    /// being published (a flush, a rename) and are waited for, up to [`PUBLISH_WAIT`]
    /// more. Then sync and close every journal. Reads go on. On error the store is
    /// writing again.
    ///
    /// [`WriteRefused::Lent`]: crate::WriteRefused::Lent
    pub fn lend(&self, grace: Duration) -> Result<(), LendError> {
        let inner = &self.inner;
        if inner.lent.swap(true, Ordering::SeqCst) {
            return Err(LendError::AlreadyLent);
        }
        // Kept files go: the next process may purge or replace objects (a hit here
        // must see that) and evict them (their blocks must be freed).
        inner.handles.close_all();
        // A step of maintenance in progress finishes before we go on (each takes its
        // disk's `step` lock and looks at `lent` under it).
        for d in &inner.disks {
            drop(lock(&d.step));
        }
        let in_flight = inner.index.inflight_len();
        if in_flight > 0 {
            tracing::info!(
                writes = in_flight,
                "store lend: waiting for the writes in flight"
            );
        }
        // A writer registers under its shard lock after checking `lent`, so no write
        // starts from here on.
        let deadline = std::time::Instant::now() + grace;
        while inner.index.to_publish_len() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let left = inner.index.leave_unstored();
        if left > 0 {
            tracing::info!(
                writes = left,
                grace_ms = grace.as_millis() as u64,
                "store lend: writes still coming in after the grace go on for their clients, not stored"
            );
        }
        let deadline = std::time::Instant::now() + PUBLISH_WAIT;
        loop {
            let n = inner.index.to_publish_len();
            if n == 0 {
                break;
            }
            if std::time::Instant::now() >= deadline {
                inner.lent.store(false, Ordering::SeqCst);
                return Err(LendError::WritesInFlight(n));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for d in &inner.disks {
            if let Some(j) = lock(&d.journal).take() {
                if let Err(e) = j.sync(&*inner.io) {
                    tracing::warn!(disk = %d.name(), error = %e, "journal sync before lending");
                }
            }
        }
        tracing::info!("store lent: no more writes from this process");
        Ok(())
    }

    /// Take the store back after [`Store::lend`] (the next process failed): start a new
    /// journal after any the other process wrote, and snapshot this process's index,
    /// which becomes the truth again (files the other process added are adopted by a
    /// later reconcile scan or stay unindexed; ones it removed are misses).
    pub fn resume(&self) {
        let inner = &self.inner;
        if !inner.lent.load(Ordering::SeqCst) {
            return;
        }
        for (i, d) in inner.disks.iter().enumerate() {
            if d.health.in_service() {
                crate::maintenance::rejournal(inner, i);
            }
        }
        inner.lent.store(false, Ordering::SeqCst);
        for d in &inner.disks {
            d.wake();
        }
        tracing::info!("store taken back: writing again");
    }

    /// Whether the store is lent ([`Store::lend`]).
    pub fn is_lent(&self) -> bool {
        self.inner.lent.load(Ordering::Acquire)
    }
}

fn open_lock_file(dir: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(LOCK_FILE))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test setup on temp directories")]
mod tests {
    use super::*;
    use crate::config::DiskConfig;

    fn cfg(dir: &Path) -> StoreConfig {
        StoreConfig::new(vec![DiskConfig {
            name: "d0".into(),
            path: dir.join("d0"),
            max_bytes: 1 << 30,
        }])
    }

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let t = tempfile::tempdir().unwrap();
        let first = StoreLock::acquire(&cfg(t.path())).unwrap();
        let second = StoreLock::acquire(&cfg(t.path())).unwrap_err();
        assert!(matches!(second, LockError::Held { .. }), "{second}");
        assert!(second.to_string().contains("in use by another process"));
        drop(first);
        StoreLock::acquire(&cfg(t.path())).unwrap();
    }

    #[test]
    fn adopting_passed_descriptors_keeps_the_lock_held() {
        let t = tempfile::tempdir().unwrap();
        let first = StoreLock::acquire(&cfg(t.path())).unwrap();
        let copies: Vec<File> = first
            .fds()
            .iter()
            .map(|f| File::from(f.try_clone_to_owned().unwrap()))
            .collect();
        let adopted = StoreLock::adopt(&cfg(t.path()), copies).unwrap();
        drop(first);
        // The old holder is gone, the lock is not.
        assert!(matches!(
            StoreLock::acquire(&cfg(t.path())),
            Err(LockError::Held { .. })
        ));
        drop(adopted);
        StoreLock::acquire(&cfg(t.path())).unwrap();
    }

    #[test]
    fn a_foreign_descriptor_does_not_stand_for_a_held_lock() {
        let t = tempfile::tempdir().unwrap();
        let _held = StoreLock::acquire(&cfg(t.path())).unwrap();
        let other = File::create(t.path().join("other")).unwrap();
        assert!(matches!(
            StoreLock::adopt(&cfg(t.path()), vec![other]),
            Err(LockError::Held { .. })
        ));
    }

    #[test]
    fn a_disk_new_in_the_configuration_is_locked_on_adoption() {
        let t = tempfile::tempdir().unwrap();
        let old = StoreLock::acquire(&cfg(t.path())).unwrap();
        let mut two = cfg(t.path());
        two.disks.push(DiskConfig {
            name: "d1".into(),
            path: t.path().join("d1"),
            max_bytes: 1 << 30,
        });
        let passed = old
            .fds()
            .iter()
            .map(|f| File::from(f.try_clone_to_owned().unwrap()))
            .collect();
        let new = StoreLock::adopt(&two, passed).unwrap();
        assert_eq!(new.fds().len(), 2);
        drop(old);
        let mut only_d1 = cfg(t.path());
        only_d1.disks[0].path = t.path().join("d1");
        assert!(matches!(
            StoreLock::acquire(&only_d1),
            Err(LockError::Held { .. })
        ));
    }
}
