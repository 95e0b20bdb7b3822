//! A minimal `epoll(7)` set for parking idle connections: a worker moves a keep-alive
//! connection that has been idle for a while out of its async runtime into one of these,
//! so the connection costs a few bytes instead of a task and a runtime registration
//! (measured: ~1.3 KiB per idle connection without parking; see docs/benchmarks.md).
//! The set's own fd is level-triggered-readable when any member is, so the runtime
//! watches the set as one source.
//!
//! Level-triggered, `EPOLLIN | EPOLLRDHUP`: a member becomes ready when its client sends
//! the next request or hangs up. Does not read from members or decide anything.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// An epoll instance.
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    /// `epoll_create1(EPOLL_CLOEXEC)`.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; returns a new fd or -1.
        let fd = crate::cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) } as libc::c_long)?;
        // SAFETY: the kernel just returned this fd; we are its only owner.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        Ok(Epoll { fd })
    }

    /// Watch `member` for input or hang-up, reporting `key`.
    pub fn add(&self, member: BorrowedFd<'_>, key: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: key,
        };
        // SAFETY: both fds are live; `ev` is a valid epoll_event for the call.
        let ret = unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                member.as_raw_fd(),
                &mut ev,
            )
        };
        crate::cvt(ret as libc::c_long).map(|_| ())
    }

    /// Stop watching `member` (before handing it elsewhere; closing it also removes it).
    pub fn delete(&self, member: BorrowedFd<'_>) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `add`; the event argument is ignored for DEL since 2.6.9.
        let ret = unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                member.as_raw_fd(),
                &mut ev,
            )
        };
        crate::cvt(ret as libc::c_long).map(|_| ())
    }

    /// Collect the keys of ready members without waiting, at most `max`.
    pub fn ready(&self, keys: &mut Vec<u64>, max: usize) -> io::Result<()> {
        let max = max.clamp(1, 1024);
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 1024];
        // SAFETY: `events` has room for `max` ≤ 1024 entries; timeout 0 never blocks.
        let n =
            unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events.as_mut_ptr(), max as i32, 0) };
        let n = crate::cvt(n as libc::c_long)? as usize;
        keys.extend(events[..n].iter().map(|e| e.u64));
        Ok(())
    }
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn members_report_input_and_hangup_until_deleted() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a_srv, _) = l.accept().unwrap();
        let b = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b_srv, _) = l.accept().unwrap();
        let ep = Epoll::new().unwrap();
        ep.add(a_srv.as_fd(), 7).unwrap();
        ep.add(b_srv.as_fd(), 9).unwrap();
        let mut keys = Vec::new();
        ep.ready(&mut keys, 16).unwrap();
        assert!(keys.is_empty());
        a.write_all(b"x").unwrap();
        drop(b);
        std::thread::sleep(std::time::Duration::from_millis(50));
        ep.ready(&mut keys, 16).unwrap();
        keys.sort();
        assert_eq!(keys, vec![7, 9]);
        ep.delete(a_srv.as_fd()).unwrap();
        keys.clear();
        ep.ready(&mut keys, 16).unwrap();
        assert_eq!(
            keys,
            vec![9],
            "level-triggered: b stays ready; a was removed"
        );
    }
}
