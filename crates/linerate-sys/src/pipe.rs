//! A pipe of its own for moving file pages to a socket: `splice(2)` from a file into
//! the pipe, then from the pipe to a socket (or `/dev/null`).
//!
//! Why not `sendfile`: `sendfile` splices through the task's internal pipe of 16 pages,
//! so a cold file is read 64 KiB per call, and the kernel's readahead, sized from that
//! request, starts small and ramps up over several disk round trips. Asking it first
//! with `POSIX_FADV_WILLNEED` makes one large read, but `force_page_cache_ra` fills the
//! page cache with single pages, where the read path allocates large folios: every one
//! of those pages is then allocated, charged to the memory cgroup, put on the LRU and
//! reclaimed on its own (measured: 13 % of a cache server's CPU on a library larger
//! than its memory, docs/benchmarks.md "Large folios for cold reads"). A splice of up
//! to the pipe's size (1 MiB) from the file asks the read path for that much at once,
//! zero-copy: by the kernel's code (`page_cache_sync_ra`, `page_cache_ra_order`) that
//! is readahead sized from a 1 MiB request, read into large folios. The folio sizes
//! were not observed directly; what was measured is the effect (same document: the
//! `fadvise64` time gone, 0.47-0.57 disk requests per response against nginx-aio's
//! 0.72-2.08, and the throughput and CPU per GB of each way tried).
//!
//! The same holds for pages already in memory: `sendfile` moves them 16 pages per
//! trip through its internal pipe, a 1 MiB pipe 256 per trip, and the socket gets
//! larger segments (measured on loopback: 40 KB against 37 KB per segment, and 23 %
//! less CPU per GB on 2 MiB hits; "The kernel's limit, and inline sends through a
//! pipe" in the same document).
//! [`Pipe::send_file`] is that send with `sendfile`'s contract, for an event loop.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A pipe sized for whole-window splices.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
    /// Set when [`Pipe::send_file`] could not empty the pipe after a send: it must not
    /// be used again (the next send would put those bytes first).
    broken: Cell<bool>,
}

impl Pipe {
    /// A pipe of about `want` bytes (`F_SETPIPE_SZ`; the kernel rounds up to a power of
    /// two of pages, and an unprivileged process gets at most `fs.pipe-max-size`, 1 MiB
    /// by default). Its real capacity is read back; it is at least the default 64 KiB.
    pub fn new(want: usize) -> io::Result<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid, exclusively borrowed array of two ints.
        crate::cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } as libc::c_long)?;
        // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let want = libc::c_int::try_from(want).unwrap_or(libc::c_int::MAX);
        // A larger pipe is an optimisation: refused (pipe-max-size, the user's pipe
        // quota), the default one works the same in smaller steps.
        // SAFETY: fcntl on a live descriptor with an int argument.
        let _ = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, want) };
        // SAFETY: fcntl on a live descriptor, no argument.
        let capacity = crate::cvt(
            unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) } as libc::c_long,
        )? as usize;
        Ok(Pipe {
            read,
            write,
            capacity,
            broken: Cell::new(false),
        })
    }

    /// Whether a [`Pipe::send_file`] left bytes in the pipe it could not discard; such a
    /// pipe is dropped by its owner.
    pub fn broken(&self) -> bool {
        self.broken.get()
    }

    /// Empty `len` bytes the pipe holds into `null` (`/dev/null`: the pages are
    /// dropped, never copied); false if it could not.
    pub fn discard(&self, null: BorrowedFd<'_>, mut len: usize) -> bool {
        while len > 0 {
            match self.drain(null, len) {
                Ok(0) => return false,
                Ok(n) => len -= n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// `sendfile(2)` through this pipe: up to `count` bytes (at most the capacity) of
    /// `file` from `*offset` to the non-blocking socket `sock`. The file's pages are
    /// spliced into the pipe (the caller has made sure they are in memory: this waits
    /// for the disk as `sendfile` would), then into the socket without waiting for it;
    /// what the socket does not take is discarded into `null` (`/dev/null`), so the pipe
    /// is empty again on return. Returns the bytes the socket took and advances `*offset`
    /// by as many; `WouldBlock` when it took none, 0 at the end of the file, the
    /// socket's or the file's error otherwise. Should the discard itself fail, the pipe
    /// is [`broken`](Pipe::broken) and the call fails.
    pub fn send_file(
        &self,
        sock: BorrowedFd<'_>,
        file: BorrowedFd<'_>,
        offset: &mut u64,
        count: usize,
        null: BorrowedFd<'_>,
    ) -> io::Result<usize> {
        if self.broken.get() {
            return Err(io::Error::other("pipe left holding bytes"));
        }
        let mut read_to = *offset;
        let n = self.fill(file, &mut read_to, count)?;
        let mut sent = 0;
        let mut failed = None;
        while sent < n {
            match self.drain(sock, n - sent) {
                Ok(0) => {
                    failed = Some(io::Error::other("splice to the socket moved nothing"));
                    break;
                }
                Ok(m) => sent += m,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if !self.discard(null, n - sent) {
            self.broken.set(true);
            return Err(io::Error::other("could not empty the pipe"));
        }
        *offset += sent as u64;
        match failed {
            Some(e) if sent == 0 => Err(e),
            _ => Ok(sent),
        }
    }

    /// Bytes the pipe holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Splice up to `len` bytes (at most the capacity; call on an empty pipe) of `file`
    /// from `*offset` into the pipe, waiting for the disk; advances `*offset`. 0 at end
    /// of file.
    pub fn fill(&self, file: BorrowedFd<'_>, offset: &mut u64, len: usize) -> io::Result<usize> {
        let mut off: libc::loff_t =
            i64::try_from(*offset).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        let len = len.min(self.capacity);
        // SAFETY: both fds are live for the call; `off` is a valid, exclusively borrowed
        // loff_t the kernel updates; the pipe end takes no offset.
        let ret = unsafe {
            libc::splice(
                file.as_raw_fd(),
                &mut off,
                self.write.as_raw_fd(),
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE,
            )
        };
        let n = crate::cvt(ret as libc::c_long)? as usize;
        *offset = off as u64;
        Ok(n)
    }

    /// Splice up to `len` bytes the pipe holds into `out` without waiting for it
    /// (`SPLICE_F_NONBLOCK`: a full socket gives `WouldBlock`). Returns bytes moved.
    pub fn drain(&self, out: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
        // SAFETY: both fds are live for the call; neither end takes an offset.
        let ret = unsafe {
            libc::splice(
                self.read.as_raw_fd(),
                std::ptr::null_mut(),
                out.as_raw_fd(),
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        crate::cvt(ret as libc::c_long).map(|n| n as usize)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test setup on temp files and loopback")]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    /// A temporary file holding `bytes`, already unlinked (it lives as long as the handle).
    fn unlinked_file(name: &str, bytes: &[u8]) -> std::fs::File {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    /// Guards the pipe path end to end: a file spliced into the pipe in steps of its
    /// capacity and drained to a socket arrives byte-exact, with end of file as 0.
    #[test]
    fn a_file_goes_through_the_pipe_byte_exact() {
        let pipe = Pipe::new(1 << 20).unwrap();
        assert!(pipe.capacity() >= 64 * 1024, "capacity {}", pipe.capacity());
        let len = 3 * pipe.capacity() + 12_345;
        let bytes: Vec<u8> = (0..len).map(|i| (i * 31 + i / 4096) as u8).collect();
        let f = unlinked_file("linerate-pipe", &bytes);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let sock = std::net::TcpStream::connect(addr).unwrap();
        let mut offset = 0u64;
        loop {
            let n = pipe.fill(f.as_fd(), &mut offset, pipe.capacity()).unwrap();
            if n == 0 {
                break;
            }
            let mut left = n;
            while left > 0 {
                match pipe.drain(sock.as_fd(), left) {
                    Ok(m) => left -= m,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(std::time::Duration::from_millis(1))
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        assert_eq!(offset, len as u64);
        drop(sock);
        assert!(reader.join().unwrap() == bytes);
    }

    /// Bytes the pipe holds now (`FIONREAD` on its read end).
    fn held(pipe: &Pipe) -> usize {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD on a live pipe descriptor writes one int to `n`.
        let rc = unsafe { libc::ioctl(pipe.read.as_raw_fd(), libc::FIONREAD, &mut n) };
        assert_eq!(rc, 0, "FIONREAD: {}", io::Error::last_os_error());
        n as usize
    }

    /// Guards `send_file`'s contract on a socket that fills: each call moves only what
    /// the socket takes, advances the offset by exactly that, leaves the pipe empty (the
    /// rest discarded, never sent later out of order), and says `WouldBlock` when the
    /// socket takes nothing; the reader gets the file byte-exact.
    #[test]
    fn send_file_moves_what_the_socket_takes_and_leaves_the_pipe_empty() {
        let pipe = Pipe::new(1 << 20).unwrap();
        let len = 8 * pipe.capacity() + 777;
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
        let f = unlinked_file("linerate-pipe-send", &bytes);
        let null = std::fs::File::options()
            .write(true)
            .open("/dev/null")
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // Read only once the sender has filled the socket.
            wait.recv().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let sock = std::net::TcpStream::connect(addr).unwrap();
        sock.set_nonblocking(true).unwrap();
        let mut offset = 0u64;
        let mut would_block = 0;
        let mut partial = 0;
        let mut go = Some(go);
        while offset < len as u64 {
            let before = offset;
            let want = pipe.capacity().min(len - offset as usize);
            match pipe.send_file(sock.as_fd(), f.as_fd(), &mut offset, want, null.as_fd()) {
                Ok(n) => {
                    assert!(n > 0 && n <= want, "{n} of {want}");
                    assert_eq!(offset, before + n as u64);
                    if n < want {
                        partial += 1;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert_eq!(offset, before);
                    would_block += 1;
                    if let Some(go) = go.take() {
                        go.send(()).unwrap();
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
            assert!(!pipe.broken());
            assert_eq!(held(&pipe), 0, "send_file left bytes in the pipe");
        }
        if let Some(go) = go.take() {
            go.send(()).unwrap();
        }
        assert!(
            would_block > 0 && partial > 0,
            "the socket never filled: {would_block} {partial}"
        );
        drop(sock);
        assert!(reader.join().unwrap() == bytes, "bytes differ");
    }
}
