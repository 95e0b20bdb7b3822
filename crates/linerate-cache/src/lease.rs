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
//! Lending and taking back are `Store` methods, in `lend.rs` (above `store.rs`); here
//! is the lock the facade holds. Not here: the upgrade protocol (the server's `upgrade`
//! module) or the syscalls.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use linerate_sys::fs::{try_lock_exclusive, Locked};

use crate::config::StoreConfig;

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
