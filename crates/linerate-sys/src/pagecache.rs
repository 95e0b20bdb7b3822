//! Is a file range in the page cache? Asked before every inline `sendfile`, because a
//! disk read inside the event loop stalls every connection on that core (DESIGN.md; the
//! reason nginx has `aio threads` and Netflix made sendfile asynchronous).
//!
//! Two ways, chosen once at start-up by [`PageCacheProbe::detect`]:
//! - `cachestat(2)` (Linux ≥ 6.5, syscall 451, not yet in the libc crate): exact count of
//!   resident pages in the range, one syscall, no data touched.
//! - fallback: a 1-byte `preadv2(RWF_NOWAIT)` at the first and last page of the range
//!   (Linux ≥ 4.14). Cheaper to have than nothing, but only samples two pages.
//!
//! Does not read data, evict, or decide where a cold read runs: that is the server's job.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `__NR_cachestat` on x86_64 and aarch64 (include/uapi/asm-generic/unistd.h, 6.5).
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range` (include/uapi/linux/mman.h).
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` (include/uapi/linux/mman.h).
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Page size assumed for counting pages in a range. 4 KiB on x86_64; on a larger-page
/// kernel the count is conservative (we ask for more pages than exist → "cold").
const PAGE: u64 = 4096;

/// Whether a range can be sent without waiting for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residency {
    /// Every page of the range is in the page cache: send inline.
    Resident,
    /// At least one page must come from disk: send from the blocking pool.
    Cold,
}

impl Residency {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Residency::Resident => "resident",
            Residency::Cold => "cold",
        }
    }
}

/// Which residency check this kernel supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageCacheProbe {
    /// `cachestat(2)`.
    Cachestat,
    /// `preadv2(RWF_NOWAIT)` of one byte at each end of the range.
    PreadNowait,
}

impl PageCacheProbe {
    /// Decide once, at start-up, by calling cachestat on a file we know exists.
    pub fn detect(any_file: BorrowedFd<'_>) -> PageCacheProbe {
        match cachestat_pages(any_file, 0, PAGE) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => PageCacheProbe::PreadNowait,
            _ => PageCacheProbe::Cachestat,
        }
    }

    /// Short stable name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            PageCacheProbe::Cachestat => "cachestat",
            PageCacheProbe::PreadNowait => "preadv2-nowait",
        }
    }

    /// Residency of `file[off .. off+len)`. An error from the probe itself is reported
    /// as [`Residency::Cold`], the safe answer (the pool thread then finds the real error).
    pub fn residency(self, file: BorrowedFd<'_>, off: u64, len: u64) -> Residency {
        if len == 0 {
            return Residency::Resident;
        }
        match self {
            PageCacheProbe::Cachestat => {
                let first = off / PAGE;
                let last = (off + len - 1) / PAGE;
                match cachestat_pages(file, first * PAGE, (last - first + 1) * PAGE) {
                    Ok(cached) if cached > last - first => Residency::Resident,
                    _ => Residency::Cold,
                }
            }
            PageCacheProbe::PreadNowait => {
                if byte_is_resident(file, off) && byte_is_resident(file, off + len - 1) {
                    Residency::Resident
                } else {
                    Residency::Cold
                }
            }
        }
    }
}

/// Number of resident pages in `[off, off+len)` (page-aligned by the kernel).
fn cachestat_pages(file: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<u64> {
    let range = CachestatRange { off, len };
    let mut out = Cachestat::default();
    // SAFETY: cachestat(fd, const struct cachestat_range *, struct cachestat *, flags=0);
    // both pointers refer to live, correctly laid-out #[repr(C)] values on our stack.
    let ret = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut out as *mut Cachestat,
            0u32,
        )
    };
    crate::cvt(ret)?;
    Ok(out.nr_cache)
}

/// `preadv2(..., RWF_NOWAIT)` into `buf` at `off`: reads only what the page cache holds,
/// never waiting for the disk (`WouldBlock` when the first page is not there).
pub fn pread_nowait(file: BorrowedFd<'_>, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let off = i64::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: one iovec pointing at the live, exclusively borrowed `buf`; fd borrowed live.
    let ret = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
    crate::cvt(ret as libc::c_long).map(|n| n as usize)
}

/// One-byte `preadv2(..., RWF_NOWAIT)`: succeeds only if that page is cached.
fn byte_is_resident(file: BorrowedFd<'_>, off: u64) -> bool {
    let mut byte = [0u8; 1];
    let iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let Ok(off) = i64::try_from(off) else {
        return false;
    };
    // SAFETY: one iovec pointing at a live 1-byte stack buffer; fd borrowed live.
    let ret = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
    ret == 1
}

/// Page-cache advice (`posix_fadvise(2)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `POSIX_FADV_DONTNEED`: drop clean cached pages of the range.
    DontNeed,
    /// `POSIX_FADV_WILLNEED`: start asynchronous readahead of the range.
    WillNeed,
    /// `POSIX_FADV_SEQUENTIAL`: double the readahead window.
    Sequential,
}

/// `posix_fadvise(2)` on `[off, off+len)`; `len == 0` means "to the end of the file".
pub fn fadvise(file: BorrowedFd<'_>, off: u64, len: u64, advice: Advice) -> io::Result<()> {
    let advice = match advice {
        Advice::DontNeed => libc::POSIX_FADV_DONTNEED,
        Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
        Advice::Sequential => libc::POSIX_FADV_SEQUENTIAL,
    };
    let off = i64::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: plain integer arguments and a live borrowed fd.
    let ret = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, len, advice) };
    if ret == 0 {
        Ok(())
    } else {
        // posix_fadvise returns the error number instead of setting errno.
        Err(io::Error::from_raw_os_error(ret))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test setup on temp files")]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn written_pages_are_resident_and_dropped_pages_are_cold() {
        // Under target/ (a real disk filesystem), not /tmp, which may be tmpfs where
        // DONTNEED cannot drop pages.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("linerate-pc-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&vec![7u8; 64 * 1024]).unwrap();
        f.sync_all().unwrap();
        let f = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        // This kernel (6.18) has cachestat; the fallback is exercised as well.
        let probe = PageCacheProbe::detect(f.as_fd());
        assert_eq!(probe, PageCacheProbe::Cachestat);
        for p in [probe, PageCacheProbe::PreadNowait] {
            assert_eq!(
                p.residency(f.as_fd(), 0, 64 * 1024),
                Residency::Resident,
                "{p:?}"
            );
        }
        // Synced clean pages are dropped by DONTNEED.
        fadvise(f.as_fd(), 0, 0, Advice::DontNeed).unwrap();
        for p in [probe, PageCacheProbe::PreadNowait] {
            assert_eq!(
                p.residency(f.as_fd(), 0, 64 * 1024),
                Residency::Cold,
                "{p:?}"
            );
        }
    }
}
