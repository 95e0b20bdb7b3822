//! The only crate in linerate with `unsafe`: one thin, documented wrapper per Linux
//! syscall the server needs and std does not offer (sendfile, send with `MSG_MORE`,
//! cachestat, openat2, CPU affinity, fadvise, kernel TLS, descriptor passing, pipes for
//! splice).
//!
//! Each wrapper takes borrowed file descriptors, returns `io::Result`, and does nothing
//! else: no retries, no policy. Errnos that mean "this kernel lacks the feature" are
//! turned into a feature-absent answer by the `detect` functions, which the server calls
//! once at start-up (STYLE.md #8), never per request.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod cpu;
pub mod epoll;
pub mod fs;
pub mod ktls;
pub mod limits;
pub mod localtime;
pub mod net;
pub mod open;
pub mod pagecache;
pub mod passfd;
pub mod pipe;
pub mod tcp;

/// Convert a `-1`-on-error libc return into `io::Result`.
fn cvt(ret: libc::c_long) -> std::io::Result<libc::c_long> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
