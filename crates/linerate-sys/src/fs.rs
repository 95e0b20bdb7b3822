//! Filesystem syscalls the object store and appliance mode need and std does not offer:
//! free space of a filesystem (`statvfs(3)`), space preallocation (`fallocate(2)`),
//! the identity of a path relative to a directory descriptor (`fstatat(2)`), and
//! writes of parts apart in memory in one call (`pwritev(2)`).
//!
//! One thin wrapper per call, borrowed descriptors or paths in, `io::Result` out; no
//! retries (but [`write_all_vectored_at`], which finishes what it was given, as std's
//! `write_all_at` does) and no policy. Page-cache advice lives in [`crate::pagecache`]; directory
//! fsync needs no wrapper (`File::open(dir)?.sync_all()` is enough on Linux).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether [`try_lock_exclusive`] got the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locked {
    /// This open file description now holds the exclusive lock.
    Yes,
    /// Another open file description holds a lock on the file.
    HeldElsewhere,
}

/// `flock(fd, LOCK_EX | LOCK_NB)`: an exclusive advisory lock on the open file
/// description, released when its last descriptor closes (also on kill -9), kept across
/// `fork`, exec and SCM_RIGHTS passing. Never waits. (std's `File::try_lock` does the
/// same but needs Rust 1.89; the workspace's minimum is older.)
pub fn try_lock_exclusive(fd: BorrowedFd<'_>) -> io::Result<Locked> {
    // SAFETY: flock on a live, borrowed fd; no pointers.
    let ret = unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if ret == 0 {
        return Ok(Locked::Yes);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(Locked::HeldElsewhere)
    } else {
        Err(e)
    }
}

/// Size and free space of one mounted filesystem, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSpace {
    /// Total size of the filesystem (`f_blocks * f_frsize`).
    pub total_bytes: u64,
    /// Bytes an unprivileged writer may still allocate (`f_bavail * f_frsize`); root's
    /// reserved blocks are not counted, so a store running as root stays polite.
    pub available_bytes: u64,
    /// Whether the filesystem is mounted read-only (`ST_RDONLY`).
    pub read_only: bool,
}

/// `statvfs(3)` on `path`. Cost: one syscall; the kernel answers from the superblock.
pub fn fs_space(path: &Path) -> io::Result<FsSpace> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `statvfs` is plain old data; all-zero is a valid value for every field.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call and `st`
    // is a valid, writable `statvfs` the kernel fills in.
    let ret = unsafe { libc::statvfs(c_path.as_ptr(), &mut st) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok(FsSpace {
        total_bytes: (st.f_blocks as u64).saturating_mul(frsize),
        available_bytes: (st.f_bavail as u64).saturating_mul(frsize),
        read_only: st.f_flag & libc::ST_RDONLY != 0,
    })
}

/// Reserve disk blocks for `[off, off+len)` of `file` without changing its length
/// (`fallocate(2)` with `FALLOC_FL_KEEP_SIZE`), so a writer that knows its final size
/// meets ENOSPC before writing rather than half-way, and the file is laid out in few
/// extents. Filesystems without fallocate answer `EOPNOTSUPP`; callers treat that as
/// "no preallocation", not as a disk error. Cost: one syscall, no data written.
pub fn preallocate(file: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<()> {
    let off = libc::off_t::try_from(off)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length too large"))?;
    // SAFETY: `file` is a borrowed, open descriptor for the duration of the call;
    // fallocate takes only integers and touches no memory of ours.
    let ret = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, off, len) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Parts handed to one `pwritev` call (more go in later calls).
const IOV_BATCH: usize = 8;

/// Write all of `bufs`, one after another, at `off` (`pwritev(2)`, continued after a
/// short write or EINTR, as std's `write_all_at`): parts that are apart in memory and
/// together in the file go in one call. Cost: one syscall for up to eight parts (more
/// only after a short write); no allocation.
pub fn write_all_vectored_at(file: BorrowedFd<'_>, bufs: &[&[u8]], off: u64) -> io::Result<()> {
    let mut off = off;
    // (part, bytes of it already written)
    let mut at = (0usize, 0usize);
    while at.0 < bufs.len() {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut iov = [empty; IOV_BATCH];
        let mut n_iov = 0;
        for (i, b) in bufs[at.0..].iter().take(IOV_BATCH).enumerate() {
            let b = if i == 0 { &b[at.1..] } else { b };
            iov[i] = libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            };
            n_iov = i + 1;
        }
        let o = libc::off_t::try_from(off)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: the first `n_iov` iovecs point into slices borrowed for the call, with
        // their lengths; the kernel only reads them. `file` is open for the call.
        let n = unsafe { libc::pwritev(file.as_raw_fd(), iov.as_ptr(), n_iov as libc::c_int, o) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let mut n = n as usize;
        if n == 0 && iov[..n_iov].iter().any(|v| v.iov_len > 0) {
            return Err(io::ErrorKind::WriteZero.into());
        }
        off += n as u64;
        // Past what the call took, then past every part now complete (empty ones too).
        while n > 0 {
            let rest = bufs[at.0].len() - at.1;
            if n < rest {
                at.1 += n;
                n = 0;
            } else {
                n -= rest;
                at = (at.0 + 1, 0);
            }
        }
        while at.0 < bufs.len() && bufs[at.0].len() == at.1 {
            at = (at.0 + 1, 0);
        }
    }
    Ok(())
}

/// Write back every dirty page and inode of the filesystem holding `file`, and wait
/// (`syncfs(2)`): one journal commit and one device flush for every file written there
/// since the last one (a publish batch's group commit), where `fdatasync` of each would
/// flush the device once per file. On a filesystem shared with other writers it writes
/// their dirty data too. Reports a writeback error on that filesystem since the
/// descriptor was opened (Linux 5.8+). Cost: one syscall; the time of the filesystem's
/// dirty data.
pub fn syncfs(file: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `file` is a borrowed, open descriptor for the duration of the call;
    // syncfs takes only the descriptor.
    if unsafe { libc::syncfs(file.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Start writeback of every dirty page of `file` without waiting for it
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` over the whole file). Called on each file
/// of a batch before `fdatasync` of each: the disk gets all of them at once, and the
/// first `fdatasync`'s journal commit covers the others' allocations, so the later ones
/// find little left to do (group commit without `syncfs`, which would also flush
/// everything else on a shared filesystem). Cost: one syscall; no durability by itself.
pub fn start_writeback(file: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `file` is a borrowed, open descriptor for the duration of the call;
    // sync_file_range takes only integers.
    if unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What identifies one version of a file: which inode, how long, when last modified.
/// Two equal values mean "same file, presumably unchanged" (the test nginx's
/// `open_file_cache` and every HTTP validator built from size and mtime rely on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileVersion {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_size`, bytes.
    pub size: u64,
    /// `st_mtime`, seconds since the epoch (0 before it).
    pub mtime_sec: u64,
    /// `st_mtime_nsec`.
    pub mtime_nsec: u32,
    /// `st_ctime` and `st_ctime_nsec` as nanoseconds: the inode changed (mode, owner,
    /// links), which mtime does not show; a `chmod 000` must not keep being served.
    pub ctime_nanos: u128,
    /// Whether it is a regular file (`S_ISREG`).
    pub regular: bool,
}

/// `fstatat(2)` of `path` (relative, no NUL) under `dir`, following symlinks like the
/// open that `path` stands for would. No `RESOLVE_BENEATH` exists for stat: callers
/// must only compare the answer with a file they opened beneath `dir`, never trust the
/// path because of it. Cost: one syscall and a path walk (no open, no close).
pub fn version_at(dir: BorrowedFd<'_>, path: &[u8]) -> io::Result<FileVersion> {
    let c_path = CString::new(path)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `stat` is plain old data; all-zero is a valid value for every field.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is a borrowed, open descriptor, `c_path` a NUL-terminated string and
    // `st` a writable `stat`, all live for the duration of the call.
    let ret = unsafe { libc::fstatat(dir.as_raw_fd(), c_path.as_ptr(), &mut st, 0) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileVersion {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mtime_sec: u64::try_from(st.st_mtime).unwrap_or(0),
        mtime_nsec: u32::try_from(st.st_mtime_nsec).unwrap_or(0),
        ctime_nanos: nanos(st.st_ctime, st.st_ctime_nsec),
        regular: st.st_mode & libc::S_IFMT == libc::S_IFREG,
    })
}

/// Seconds and nanoseconds since the epoch as nanoseconds (0 before it).
pub fn nanos(sec: i64, nsec: i64) -> u128 {
    u128::try_from(sec).unwrap_or(0) * 1_000_000_000 + u128::try_from(nsec).unwrap_or(0)
}

/// Whether an error from [`preallocate`] only means "this filesystem cannot
/// preallocate" (tmpfs before 3.5, some FUSE filesystems), as opposed to a disk error.
pub fn is_unsupported(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    #[allow(clippy::unwrap_used, reason = "test on a temp dir we just created")]
    fn statvfs_of_tmp_reports_space() {
        let space = fs_space(&std::env::temp_dir()).unwrap();
        assert!(space.total_bytes > 0);
        assert!(space.available_bytes <= space.total_bytes);
    }

    #[test]
    fn statvfs_of_missing_path_is_enoent() {
        let err = fs_space(Path::new("/nonexistent/linerate-test")).err();
        assert_eq!(err.and_then(|e| e.raw_os_error()), Some(libc::ENOENT));
    }

    #[test]
    #[allow(clippy::unwrap_used, reason = "test on a temp dir we just created")]
    fn version_at_sees_replacement_and_size() {
        let dir = std::env::temp_dir().join(format!("linerate-ver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a"), b"12345").unwrap();
        let d = std::fs::File::open(&dir).unwrap();
        let v1 = version_at(d.as_fd(), b"a").unwrap();
        assert!(v1.regular);
        assert_eq!(v1.size, 5);
        std::fs::write(dir.join("b"), b"123").unwrap();
        std::fs::rename(dir.join("b"), dir.join("a")).unwrap();
        let v2 = version_at(d.as_fd(), b"a").unwrap();
        assert_ne!((v1.dev, v1.ino), (v2.dev, v2.ino));
        assert_eq!(v2.size, 3);
        assert!(!version_at(d.as_fd(), b".").unwrap().regular);
        let err = version_at(d.as_fd(), b"missing").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    #[allow(clippy::unwrap_used, reason = "test on a temp file we just created")]
    fn vectored_write_puts_the_parts_one_after_another() {
        use std::os::unix::fs::FileExt;
        let path = std::env::temp_dir().join(format!("linerate-vec-test-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let parts: [&[u8]; 5] = [b"head", b"", &[0u8; 3], &big, b"tail"];
        write_all_vectored_at(f.as_fd(), &parts, 10).unwrap();
        let mut got = vec![0u8; 4 + 3 + big.len() + 4];
        f.read_exact_at(&mut got, 10).unwrap();
        assert_eq!(got, parts.concat());
        assert_eq!(f.metadata().unwrap().len(), 10 + got.len() as u64);
        write_all_vectored_at(f.as_fd(), &[], 0).unwrap();
        // More parts than one call takes: the rest go in the next calls, in order.
        let many: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; usize::from(i % 3) * 5]).collect();
        let many: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        write_all_vectored_at(f.as_fd(), &many, 0).unwrap();
        let mut got = vec![0u8; many.concat().len()];
        f.read_exact_at(&mut got, 0).unwrap();
        assert_eq!(got, many.concat());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    #[allow(clippy::unwrap_used, reason = "test on a temp file we just created")]
    fn preallocate_keeps_length() {
        let path = std::env::temp_dir().join(format!("linerate-fs-test-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        match preallocate(f.as_fd(), 0, 1 << 20) {
            Ok(()) => assert_eq!(f.metadata().unwrap().len(), 0),
            Err(e) => assert!(is_unsupported(&e), "{e}"),
        }
        std::fs::remove_file(&path).unwrap();
    }
}
