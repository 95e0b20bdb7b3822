//! Disk health: which errors count against a disk, the sliding error count that takes
//! it out of service, and the disk's service state.
//!
//! This file decides nothing about what happens to a failed disk's objects or how it is
//! probed (the store and the maintenance task do that); it classifies and counts.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

/// Service state of a disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskState {
    /// Serving hits and taking writes.
    InService,
    /// Failed: its objects are misses, writes go elsewhere; probed periodically.
    OutOfService,
}

impl DiskState {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskState::InService => "in_service",
            DiskState::OutOfService => "out_of_service",
        }
    }
}

/// What kind of failure a disk error was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskErrorKind {
    /// `EIO`: the device failed a read or write.
    Io,
    /// `ENOSPC` / `EDQUOT`: the filesystem is full beyond what eviction accounted for.
    NoSpace,
    /// `EROFS`: the filesystem went read-only (ext4 `errors=remount-ro`).
    ReadOnly,
    /// A store directory (`objects/`, `tmp/`, the disk directory) is gone.
    Vanished,
    /// An object or index file failed its header or checksum check.
    Corrupt,
    /// Any other errno.
    Other,
}

impl DiskErrorKind {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskErrorKind::Io => "eio",
            DiskErrorKind::NoSpace => "enospc",
            DiskErrorKind::ReadOnly => "erofs",
            DiskErrorKind::Vanished => "vanished",
            DiskErrorKind::Corrupt => "corrupt",
            DiskErrorKind::Other => "other",
        }
    }

    /// Classify an errno. `ENOENT` is only ever passed here for paths that must exist
    /// (directories), so it means "vanished".
    pub fn of(err: &io::Error) -> DiskErrorKind {
        match err.raw_os_error() {
            Some(libc_errno::EIO) => DiskErrorKind::Io,
            Some(libc_errno::ENOSPC) | Some(libc_errno::EDQUOT) => DiskErrorKind::NoSpace,
            Some(libc_errno::EROFS) => DiskErrorKind::ReadOnly,
            Some(libc_errno::ENOENT) | Some(libc_errno::ENOTDIR) => DiskErrorKind::Vanished,
            _ => DiskErrorKind::Other,
        }
    }
}

/// Linux errno values (asm-generic/errno-base.h, errno.h); this crate does not link
/// libc directly.
mod libc_errno {
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const ENOTDIR: i32 = 20;
    pub const ENOSPC: i32 = 28;
    pub const EROFS: i32 = 30;
    pub const EDQUOT: i32 = 122;
}

/// Whether recording an error took the disk out of service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Counted; the disk stays in service (or was already out).
    Counted,
    /// This error crossed the threshold: the caller must take the disk out of service.
    Tripped,
}

/// Error counters and state of one disk. All atomics: recorded from any thread.
#[derive(Debug)]
pub struct Health {
    state: AtomicU8,
    window_start_ms: AtomicU64,
    window_errors: AtomicU32,
    total: AtomicU64,
    corrupt: AtomicU64,
}

impl Health {
    /// A disk in `state` with no errors.
    pub fn new(state: DiskState) -> Health {
        Health {
            state: AtomicU8::new(state as u8),
            window_start_ms: AtomicU64::new(0),
            window_errors: AtomicU32::new(0),
            total: AtomicU64::new(0),
            corrupt: AtomicU64::new(0),
        }
    }

    /// Current state.
    pub fn state(&self) -> DiskState {
        if self.state.load(Ordering::Acquire) == DiskState::OutOfService as u8 {
            DiskState::OutOfService
        } else {
            DiskState::InService
        }
    }

    /// Whether the disk serves hits and takes writes.
    pub fn in_service(&self) -> bool {
        self.state() == DiskState::InService
    }

    /// Set the state; returns the previous one.
    pub fn set_state(&self, s: DiskState) -> DiskState {
        if self.state.swap(s as u8, Ordering::AcqRel) == DiskState::OutOfService as u8 {
            DiskState::OutOfService
        } else {
            DiskState::InService
        }
    }

    /// Count one error at `now_ms`. Returns [`Verdict::Tripped`] exactly once per trip:
    /// to the caller whose error reached `threshold` within `window` while in service.
    pub fn record(
        &self,
        kind: DiskErrorKind,
        now_ms: u64,
        threshold: u32,
        window: Duration,
    ) -> Verdict {
        self.total.fetch_add(1, Ordering::Relaxed);
        if kind == DiskErrorKind::Corrupt {
            self.corrupt.fetch_add(1, Ordering::Relaxed);
        }
        let start = self.window_start_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(start) > window.as_millis() as u64 {
            // New window. Two threads may both reset; losing one count is harmless.
            self.window_start_ms.store(now_ms, Ordering::Relaxed);
            self.window_errors.store(0, Ordering::Relaxed);
        }
        let n = self.window_errors.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= threshold
            && self
                .state
                .compare_exchange(
                    DiskState::InService as u8,
                    DiskState::OutOfService as u8,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            return Verdict::Tripped;
        }
        Verdict::Counted
    }

    /// Forget the window (the disk came back).
    pub fn reset_window(&self) {
        self.window_errors.store(0, Ordering::Relaxed);
    }

    /// Errors counted since start.
    pub fn total_errors(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Corrupt-object errors since start.
    pub fn corrupt(&self) -> u64 {
        self.corrupt.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trips_once_at_threshold_within_window() {
        let h = Health::new(DiskState::InService);
        let w = Duration::from_secs(60);
        assert_eq!(h.record(DiskErrorKind::Io, 1000, 3, w), Verdict::Counted);
        assert_eq!(h.record(DiskErrorKind::Io, 1001, 3, w), Verdict::Counted);
        assert_eq!(h.record(DiskErrorKind::Io, 1002, 3, w), Verdict::Tripped);
        assert_eq!(h.record(DiskErrorKind::Io, 1003, 3, w), Verdict::Counted);
        assert_eq!(h.state(), DiskState::OutOfService);
    }

    #[test]
    fn errors_spread_over_windows_do_not_trip() {
        let h = Health::new(DiskState::InService);
        let w = Duration::from_secs(1);
        for i in 0..10u64 {
            assert_eq!(
                h.record(DiskErrorKind::Io, i * 5000, 3, w),
                Verdict::Counted
            );
        }
        assert!(h.in_service());
    }

    #[test]
    fn classify_errnos() {
        assert_eq!(
            DiskErrorKind::of(&io::Error::from_raw_os_error(5)),
            DiskErrorKind::Io
        );
        assert_eq!(
            DiskErrorKind::of(&io::Error::from_raw_os_error(28)),
            DiskErrorKind::NoSpace
        );
        assert_eq!(
            DiskErrorKind::of(&io::Error::from_raw_os_error(30)),
            DiskErrorKind::ReadOnly
        );
        assert_eq!(
            DiskErrorKind::of(&io::Error::from_raw_os_error(2)),
            DiskErrorKind::Vanished
        );
    }
}
