//! Filesystem syscalls the object store needs and std does not offer: free space of a
//! filesystem (`statvfs(3)`) and space preallocation (`fallocate(2)`).
//!
//! One thin wrapper per call, borrowed descriptors or paths in, `io::Result` out; no
//! retries and no policy. Page-cache advice lives in [`crate::pagecache`]; directory
//! fsync needs no wrapper (`File::open(dir)?.sync_all()` is enough on Linux).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

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
