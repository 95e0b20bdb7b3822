//! Socket-side syscalls on the response path: `sendfile(2)` and `send(2)` with
//! `MSG_MORE`.
//!
//! Why `MSG_MORE` rather than `TCP_CORK`: the head of a response must leave in the same
//! segment as its first body bytes (DESIGN.md, "copies and syscalls per byte"). Corking
//! costs two extra `setsockopt` calls per response; `send(head, MSG_MORE)` followed by
//! `sendfile` gets the same coalescing for free, because the kernel holds a partial
//! segment flagged "more" until the next write, and sendfile's last chunk goes out
//! without the flag (tcp_sendmsg_locked → tcp_push). Does not set socket options or retry.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Whether more bytes of the same response follow this write immediately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// More follows: let the kernel hold a partial segment (`MSG_MORE`).
    More,
    /// This is the end of what we have now: push it.
    Now,
}

/// `send(2)` with `MSG_NOSIGNAL` (a vanished client gives `EPIPE`, never `SIGPIPE`) and
/// `MSG_MORE` when `flush` is [`Flush::More`]. Returns bytes accepted (may be short).
pub fn send(sock: BorrowedFd<'_>, buf: &[u8], flush: Flush) -> io::Result<usize> {
    let mut flags = libc::MSG_NOSIGNAL;
    if flush == Flush::More {
        flags |= libc::MSG_MORE;
    }
    // SAFETY: `sock` is a live fd for the duration of the borrow; `buf` is a valid
    // readable slice of `buf.len()` bytes.
    let ret = unsafe { libc::send(sock.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) };
    crate::cvt(ret as libc::c_long).map(|n| n as usize)
}

/// `sendfile(2)`: up to `count` bytes of `file` starting at `*offset` into `sock`,
/// advancing `*offset` by what was sent. Returns 0 when `*offset` is at or past the end
/// of the file (the caller decides whether that means truncation).
///
/// Linux caps one call at 0x7ffff000 bytes (MAX_RW_COUNT); callers use smaller chunks.
pub fn sendfile(
    sock: BorrowedFd<'_>,
    file: BorrowedFd<'_>,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    let mut off: libc::off_t =
        i64::try_from(*offset).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: both fds are live for the borrow; `off` is a valid, exclusively borrowed
    // off_t that the kernel updates.
    let ret = unsafe { libc::sendfile(sock.as_raw_fd(), file.as_raw_fd(), &mut off, count) };
    let n = crate::cvt(ret as libc::c_long)?;
    // The kernel advanced `off` by exactly `n`; keep ours in step.
    *offset = off as u64;
    Ok(n as usize)
}

/// Whether `sock` can take more bytes now (`poll(2)` for `POLLOUT`, not waiting). For
/// a caller whose last write happened outside its event loop's view (another thread's
/// `sendfile`), so it can tell the loop the truth before waiting on it.
pub fn writable_now(sock: BorrowedFd<'_>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid, exclusively borrowed pollfd for a live fd; timeout 0.
    let ret = unsafe { libc::poll(&mut pfd, 1, 0) };
    crate::cvt(ret as libc::c_long)?;
    Ok(pfd.revents & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test setup on temp files and loopback")]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn writable_now_tells_a_full_socket_from_one_with_room() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert!(
            writable_now(server.as_fd()).unwrap(),
            "a new socket has room"
        );
        // Fill it: the client never reads.
        server.set_nonblocking(true).unwrap();
        let chunk = [0u8; 65536];
        loop {
            match send(server.as_fd(), &chunk, Flush::Now) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            !writable_now(server.as_fd()).unwrap(),
            "a full socket has none"
        );
    }

    #[test]
    fn send_and_sendfile_move_exact_bytes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut file = tempfile_with(b"0123456789abcdef");
        file.flush().unwrap();

        assert_eq!(send(server.as_fd(), b"head:", Flush::More).unwrap(), 5);
        let mut off = 4;
        assert_eq!(
            sendfile(server.as_fd(), file.as_fd(), &mut off, 6).unwrap(),
            6
        );
        assert_eq!(off, 10);
        // At EOF sendfile reports 0: that is how truncation is detected.
        let mut end = 16;
        assert_eq!(
            sendfile(server.as_fd(), file.as_fd(), &mut end, 10).unwrap(),
            0
        );
        drop(server);
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"head:456789");
    }

    fn tempfile_with(bytes: &[u8]) -> std::fs::File {
        let path = std::env::temp_dir().join(format!("linerate-sys-{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f.write_all(bytes).unwrap();
        f
    }
}
