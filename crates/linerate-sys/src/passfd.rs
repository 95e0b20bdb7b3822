//! Passing open file descriptors between processes over a unix socket: `sendmsg(2)` and
//! `recvmsg(2)` with one `SCM_RIGHTS` control message (unix(7)), and `socketpair(2)`.
//!
//! Used by the zero-downtime upgrade (the old process hands its listening sockets and
//! store locks to the new one) and by systemd's file-descriptor store (`FDSTORE=1`,
//! sd_notify(3)). The receiver gets new descriptors for the same open file
//! descriptions: a listening socket passed this way keeps its accept queue, and a
//! `flock(2)` lock stays held as long as either side keeps a copy.
//!
//! Not here: what the bytes say (the upgrade protocol and the notify messages live in
//! the server) or choosing which descriptors to pass.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Most descriptors one message carries. The kernel's limit is SCM_MAX_FD (253); the
/// upgrade sends workers × listeners + admin + one lock per disk, far below it.
pub const MAX_FDS: usize = 253;

/// `socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC)`: a connected pair that keeps
/// message boundaries (one `send` is one `recv`), so the protocol needs no framing.
/// Both ends are close-on-exec; the caller clears it on the end it hands to a child.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints the kernel fills on success.
    let ret = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    crate::cvt(ret as libc::c_long)?;
    // SAFETY: on success both fds are new, open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Clear `FD_CLOEXEC` on `fd`, so a child started with exec inherits it.
pub fn clear_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD on a live fd; no pointers.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
    crate::cvt(flags as libc::c_long)?;
    // SAFETY: as above.
    let ret = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, flags & !libc::FD_CLOEXEC) };
    crate::cvt(ret as libc::c_long).map(|_| ())
}

/// Take ownership of an inherited descriptor number (from an environment variable such
/// as `LISTEN_FDS` or the upgrade channel's). Fails with `EBADF` when `fd` is not open,
/// so a stale number is an error, not a use of someone else's descriptor later.
pub fn adopt(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD has no side effects; it only tells whether `fd` is open.
    let ret = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    crate::cvt(ret as libc::c_long)?;
    // SAFETY: `fd` is open and was handed to this process to own (caller's contract:
    // the number comes from the parent or from systemd, and nothing else uses it).
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: F_SETFD on the fd we now own; no pointers.
    let ret = unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    crate::cvt(ret as libc::c_long)?;
    Ok(owned)
}

/// `sendmsg(2)` of `data` with `fds` attached (none: a plain message). `dest` is the
/// peer's address for an unconnected datagram socket (systemd's `NOTIFY_SOCKET`), as a
/// `sockaddr_un` path, or `None` on a connected socket. `MSG_NOSIGNAL`: a gone peer
/// gives `EPIPE`, never `SIGPIPE`.
pub fn send_with_fds(
    sock: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
    dest: Option<&std::os::unix::net::SocketAddr>,
) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let fd_bytes = std::mem::size_of_val(raw.as_slice());
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    // u64 elements: cmsghdr needs alignment of size_t.
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let mut addr: libc::sockaddr_un;
    if let Some(dest) = dest {
        // SAFETY: an all-zero sockaddr_un is valid; we fill family and path below.
        addr = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let path_len = fill_sun_path(&mut addr, dest)?;
        msg.msg_name = (&mut addr as *mut libc::sockaddr_un).cast();
        msg.msg_namelen = (std::mem::size_of::<libc::sa_family_t>() + path_len) as libc::socklen_t;
    }
    if !raw.is_empty() {
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` zeroed, aligned bytes, enough for one
        // cmsghdr with `fd_bytes` of data (CMSG_SPACE), so CMSG_FIRSTHDR is non-null
        // and CMSG_DATA has room for every fd.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(raw.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fd_bytes);
        }
    }
    // SAFETY: every pointer in `msg` (iov, data, control, name) is valid for the call.
    let ret = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    crate::cvt(ret as libc::c_long).map(|n| n as usize)
}

/// Copy a unix socket address (path or abstract name) into `sun_path`; returns the
/// bytes used, as `msg_namelen` counts them.
fn fill_sun_path(
    addr: &mut libc::sockaddr_un,
    dest: &std::os::unix::net::SocketAddr,
) -> io::Result<usize> {
    use std::os::linux::net::SocketAddrExt;
    let (bytes, lead): (&[u8], usize) = if let Some(name) = dest.as_abstract_name() {
        (name, 1)
    } else if let Some(p) = dest.as_pathname() {
        (std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()), 0)
    } else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    // Leave room for the trailing NUL of a path name.
    if lead + bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    for (i, b) in bytes.iter().enumerate() {
        addr.sun_path[lead + i] = *b as libc::c_char;
    }
    Ok(lead + bytes.len() + usize::from(lead == 0))
}

/// `recvmsg(2)` into `buf`, taking up to [`MAX_FDS`] passed descriptors (received
/// close-on-exec, `MSG_CMSG_CLOEXEC`). Returns the bytes read (0: the peer closed) and
/// the descriptors. A message whose descriptors did not fit (`MSG_CTRUNC`) is an error:
/// the kernel closed the ones it dropped, so the set is incomplete.
pub fn recv_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space =
        unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: every pointer in `msg` is valid and writable for its stated length.
    let ret = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    let n = crate::cvt(ret as libc::c_long)? as usize;
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control/msg_controllen; CMSG_FIRSTHDR/NXTHDR walk
    // only within them, and each SCM_RIGHTS payload holds whole ints, which are new
    // descriptors this process now owns.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "passed descriptors were truncated (MSG_CTRUNC)",
        ));
    }
    Ok((n, fds))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test setup on socketpairs and loopback")]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_listener_passed_keeps_its_queue() {
        let (a, b) = seqpacket_pair().unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // A connection queued before the hand-over is accepted from the copy.
        let _c = std::net::TcpStream::connect(addr).unwrap();
        send_with_fds(a.as_fd(), b"L", &[l.as_fd()], None).unwrap();
        drop(l);
        let mut buf = [0u8; 8];
        let (n, mut fds) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"L"[..], 1));
        let copy = std::net::TcpListener::from(fds.pop().unwrap());
        assert_eq!(copy.local_addr().unwrap(), addr);
        copy.accept().unwrap();
    }

    #[test]
    fn plain_message_and_eof() {
        let (a, b) = seqpacket_pair().unwrap();
        send_with_fds(a.as_fd(), b"hello", &[], None).unwrap();
        drop(a);
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"hello"[..], 0));
        assert_eq!(recv_with_fds(b.as_fd(), &mut buf).unwrap().0, 0);
    }

    #[test]
    fn adopt_refuses_a_closed_number() {
        assert_eq!(
            adopt(987_654).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }
}
