//! `openat2(2)` with `RESOLVE_BENEATH`: open a path below a directory such that no
//! component — `..`, an absolute symlink, a symlink pointing outside — can resolve
//! outside it. The kernel enforces containment atomically, which a user-space
//! `realpath` check cannot (a symlink can be swapped between check and open).
//!
//! Linux ≥ 5.6. Does not decide what to do with the file (type checks are the caller's).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};

/// `__NR_openat2` (x86_64, aarch64 and the generic table agree since 5.6).
const SYS_OPENAT2: libc::c_long = 437;
/// `RESOLVE_NO_MAGICLINKS` (include/uapi/linux/openat2.h): no /proc/self/fd-style links.
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
/// `RESOLVE_BENEATH`: every component must stay beneath the dirfd.
const RESOLVE_BENEATH: u64 = 0x08;

/// `struct open_how`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Open `path` (relative, no NUL) read-only beneath `dir`. Errors: `EXDEV` when the path
/// would leave `dir`, `ELOOP` for magic links, `ENOENT`, `EACCES`... as from open(2).
/// `ENOSYS` means the kernel predates openat2.
pub fn open_beneath(dir: BorrowedFd<'_>, path: &[u8]) -> io::Result<File> {
    let c_path = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow {
        // O_NONBLOCK: opening a FIFO someone placed under the root must not block the
        // worker waiting for a writer; on regular files it changes nothing for reads or
        // sendfile (the caller refuses non-regular files after fstat).
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) as u64,
        mode: 0,
        resolve: RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2(dirfd, const char *path, struct open_how *how, size_t size): the
    // path is a live NUL-terminated string and `how` a live #[repr(C)] open_how.
    let ret = unsafe {
        libc::syscall(
            SYS_OPENAT2,
            dir.as_raw_fd(),
            c_path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let fd = crate::cvt(ret)?;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test setup")]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn symlinks_and_dotdot_cannot_leave_the_root() {
        let base = std::env::temp_dir().join(format!("linerate-open-{}", std::process::id()));
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(base.join("secret"), b"s").unwrap();
        std::fs::write(root.join("sub/ok"), b"ok").unwrap();
        std::os::unix::fs::symlink("../secret", root.join("out")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("abs")).unwrap();
        std::os::unix::fs::symlink("sub/ok", root.join("inside")).unwrap();
        let dir = File::open(&root).unwrap();

        assert!(open_beneath(dir.as_fd(), b"sub/ok").is_ok());
        assert!(
            open_beneath(dir.as_fd(), b"inside").is_ok(),
            "symlink within root is fine"
        );
        for bad in [
            &b"out"[..],
            b"abs",
            b"../secret",
            b"sub/../../secret",
            b"/etc/passwd",
        ] {
            let err = open_beneath(dir.as_fd(), bad).unwrap_err();
            assert_eq!(
                err.raw_os_error(),
                Some(libc::EXDEV),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            open_beneath(dir.as_fd(), b"a\0b")
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EINVAL)
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
