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
    /// The memory page: a pipe holds `capacity / page` buffers, each at most a page.
    page: usize,
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
        // SAFETY: sysconf takes no pointer.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|&p| p > 0)
            .unwrap_or(4096);
        Ok(Pipe {
            read,
            write,
            capacity,
            page,
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
        let sent = self.send_held(sock, null, n, 0)?;
        *offset += sent as u64;
        Ok(sent)
    }

    /// Send the `n` bytes the pipe holds to the non-blocking socket `sock` without
    /// waiting, with these splice flags, and discard into `null` what it does not take.
    /// The bytes it took; `WouldBlock` (or its error) when it took none; an error, and
    /// the pipe [`broken`](Pipe::broken), if the discard fails.
    fn send_held(
        &self,
        sock: BorrowedFd<'_>,
        null: BorrowedFd<'_>,
        n: usize,
        flags: libc::c_uint,
    ) -> io::Result<usize> {
        let mut sent = 0;
        let mut failed = None;
        while sent < n {
            match self.drain_flags(sock, n - sent, flags) {
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
        match failed {
            Some(e) if sent == 0 => Err(e),
            _ => Ok(sent),
        }
    }

    /// Start a [`Batch`]: bytes and file ranges put in order, then sent in one splice.
    /// The pipe must be empty (as every method here leaves it).
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            pipe: self,
            buffers: self.capacity / self.page,
            held: 0,
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
        self.drain_flags(out, len, 0)
    }

    /// [`Pipe::drain`] with more splice flags (`SPLICE_F_MORE`).
    fn drain_flags(
        &self,
        out: BorrowedFd<'_>,
        len: usize,
        flags: libc::c_uint,
    ) -> io::Result<usize> {
        // SAFETY: both fds are live for the call; neither end takes an offset.
        let ret = unsafe {
            libc::splice(
                self.read.as_raw_fd(),
                std::ptr::null_mut(),
                out.as_raw_fd(),
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK | flags,
            )
        };
        crate::cvt(ret as libc::c_long).map(|n| n as usize)
    }
}

/// A batch of bytes and file ranges gathered in a [`Pipe`] and sent to a socket in one
/// `splice`: many small writes become one, so the socket sees the whole batch at once
/// (`MSG_MORE` between its pieces, inside the kernel). On kernel TLS each `sendfile`
/// ends a record and, with `TCP_NODELAY`, sends it: HTTP/2 DATA frames sent one
/// `send` + `sendfile` each leave as a segment of 16 KiB apiece; batched, the socket
/// fills its records and segments as one `sendfile` of the whole would
/// (docs/benchmarks.md, "HTTP/2 frames through a pipe on kernel TLS").
///
/// Nothing waits: a batch stops taking pieces before the pipe could fill (a piece that
/// does not fit is refused whole, and the caller sends it another way), and
/// [`Batch::send`] moves what the socket takes and discards the rest, as
/// [`Pipe::send_file`] does. The caller must have made file pages resident (a splice
/// from the file waits for the disk as `sendfile` would).
#[derive(Debug)]
pub struct Batch<'p> {
    pipe: &'p Pipe,
    /// Pipe buffers not yet used (each piece is counted at its most).
    buffers: usize,
    /// Bytes in the pipe.
    held: usize,
}

impl Batch<'_> {
    /// Bytes the batch holds.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Put `bytes` (copied) after what the batch holds. Returns how many went in: all,
    /// or 0 when the pipe has no room for them.
    pub fn bytes(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if bytes.is_empty() {
            return Ok(0);
        }
        // A write appends to the last buffer when it can; counted as if it never did.
        let need = bytes.len().div_ceil(self.pipe.page) + 1;
        if need > self.buffers {
            return Ok(0);
        }
        let mut put = 0;
        while put < bytes.len() {
            // SAFETY: the pipe's write end is live; the pointer and length describe the
            // unwritten rest of `bytes`. The pipe has room for all of it (counted
            // above), so the write does not block.
            let ret = unsafe {
                libc::write(
                    self.pipe.write.as_raw_fd(),
                    bytes[put..].as_ptr().cast(),
                    bytes.len() - put,
                )
            };
            match crate::cvt(ret as libc::c_long) {
                Ok(n) => put += n as usize,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if put == 0 => return Err(e),
                // Stop the batch here: what went in is sent, the rest another way.
                Err(_) => break,
            }
        }
        self.buffers -= need;
        self.held += put;
        Ok(put)
    }

    /// Splice `len` bytes of `file` from `offset` in after what the batch holds.
    /// Returns how many went in: `len`; 0 when the pipe has no room for them; fewer
    /// where the file ends early (the caller finds out how when it sends the rest).
    pub fn file(&mut self, file: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<usize> {
        if len == 0 {
            return Ok(0);
        }
        let page = self.pipe.page as u64;
        let last = offset + len as u64 - 1;
        let need = usize::try_from(last / page - offset / page + 1).unwrap_or(usize::MAX);
        if need > self.buffers {
            return Ok(0);
        }
        let mut at = offset;
        let end = offset + len as u64;
        while at < end {
            let mut off = libc::loff_t::try_from(at)
                .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
            // SAFETY: both fds are live for the call; `off` is a valid, exclusively
            // borrowed loff_t; the pipe end takes no offset. NONBLOCK only concerns the
            // pipe's room, which was counted above.
            let ret = unsafe {
                libc::splice(
                    file.as_raw_fd(),
                    &mut off,
                    self.pipe.write.as_raw_fd(),
                    std::ptr::null_mut(),
                    (end - at) as usize,
                    libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
                )
            };
            match crate::cvt(ret as libc::c_long) {
                Ok(0) => break,
                Ok(n) => at += n as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if at == offset => return Err(e),
                Err(_) => break,
            }
        }
        self.buffers -= need;
        let put = (at - offset) as usize;
        self.held += put;
        Ok(put)
    }

    /// Send what the batch holds to the non-blocking socket `sock` without waiting, and
    /// discard into `null` (`/dev/null`) what it does not take: the pipe is empty again.
    /// `more`: the caller sends more right after (`SPLICE_F_MORE`: on kernel TLS the
    /// last record stays open for it, as a `send` with `MSG_MORE` leaves it). Returns
    /// the bytes the socket took, a prefix of the batch; `WouldBlock` when it took
    /// none. Should the discard fail, the pipe is [`broken`](Pipe::broken) and this
    /// fails.
    pub fn send(self, sock: BorrowedFd<'_>, null: BorrowedFd<'_>, more: bool) -> io::Result<usize> {
        let flags = if more { libc::SPLICE_F_MORE } else { 0 };
        self.pipe.send_held(sock, null, self.held, flags)
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

    /// `/dev/null`, open for writing (where a send discards what the socket did not take).
    fn dev_null() -> std::fs::File {
        std::fs::File::options()
            .write(true)
            .open("/dev/null")
            .unwrap()
    }

    /// A non-blocking loopback socket whose reader starts reading only when told (so
    /// the sender can fill it first), the signal, and the reader: everything it read.
    fn held_back_reader() -> (
        std::net::TcpStream,
        std::sync::mpsc::Sender<()>,
        std::thread::JoinHandle<Vec<u8>>,
    ) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            wait.recv().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let sock = std::net::TcpStream::connect(addr).unwrap();
        sock.set_nonblocking(true).unwrap();
        (sock, go, reader)
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
        let null = dev_null();
        let (sock, go, reader) = held_back_reader();
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

    /// Guards [`Batch`]'s contract: bytes and file ranges interleaved (as DATA frame
    /// headers and payloads) reach a socket that fills as an exact prefix of the batch
    /// on each trip; what the socket did not take is discarded (the pipe is empty after
    /// every send), so re-sending from the first byte not taken makes the stream exact;
    /// a piece the pipe has no room for is refused whole.
    #[test]
    fn a_batch_sends_a_prefix_and_leaves_the_pipe_empty() {
        let pipe = Pipe::new(1 << 20).unwrap();
        let file_len = 4 << 20;
        let file_bytes: Vec<u8> = (0..file_len).map(|i| (i * 13 + i / 4093) as u8).collect();
        let f = unlinked_file("linerate-pipe-batch", &file_bytes);
        // The stream to send: frames of a 9-byte header and 16,375 file bytes.
        let frame = 16_375;
        let mut pieces: Vec<(Option<Vec<u8>>, u64, usize)> = Vec::new();
        let mut off = 0;
        let mut n = 0u8;
        while off < file_len {
            let len = frame.min(file_len - off);
            pieces.push((Some(vec![n; 9]), 0, 9));
            pieces.push((None, off as u64, len));
            off += len;
            n = n.wrapping_add(1);
        }
        let mut expect = Vec::new();
        for (b, off, len) in &pieces {
            match b {
                Some(b) => expect.extend_from_slice(b),
                None => expect.extend_from_slice(&file_bytes[*off as usize..*off as usize + len]),
            }
        }
        let null = dev_null();
        let (sock, go, reader) = held_back_reader();
        // The piece being sent and how many of its bytes went.
        let (mut at, mut done) = (0, 0);
        let (mut short, mut would_block, mut refused) = (0, 0, 0);
        let mut go = Some(go);
        while at < pieces.len() {
            let mut batch = pipe.batch();
            let (mut i, mut d) = (at, done);
            while i < pieces.len() {
                let (b, off, len) = &pieces[i];
                let want = len - d;
                let put = match b {
                    Some(b) => batch.bytes(&b[d..]).unwrap(),
                    None => batch.file(f.as_fd(), off + d as u64, want).unwrap(),
                };
                if put == 0 {
                    refused += 1;
                    break;
                }
                assert_eq!(put, want, "a piece goes in whole or not at all");
                (i, d) = (i + 1, 0);
            }
            let in_batch = batch.held();
            assert!(in_batch > 0);
            match batch.send(sock.as_fd(), null.as_fd(), i < pieces.len()) {
                Ok(took) => {
                    assert!(took <= in_batch);
                    if took < in_batch {
                        short += 1;
                    }
                    let mut left = took;
                    while left > 0 {
                        let rest = pieces[at].2 - done;
                        if left >= rest {
                            left -= rest;
                            (at, done) = (at + 1, 0);
                        } else {
                            done += left;
                            left = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    would_block += 1;
                    if let Some(go) = go.take() {
                        go.send(()).unwrap();
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
            assert!(!pipe.broken());
            assert_eq!(held(&pipe), 0, "a batch left bytes in the pipe");
        }
        if let Some(go) = go.take() {
            go.send(()).unwrap();
        }
        assert!(
            short > 0 && would_block > 0 && refused > 0,
            "not every case met: {short} short, {would_block} blocked, {refused} refused"
        );
        drop(sock);
        assert!(reader.join().unwrap() == expect, "bytes differ");
    }
}
