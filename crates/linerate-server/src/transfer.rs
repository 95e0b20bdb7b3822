//! Moving a response onto the socket: the head with `MSG_MORE`, then file bytes straight
//! from the page cache (never through a user-space buffer), multipart part heads between
//! them. On plain TCP a send of more than 64 KiB splices the bytes through the worker's
//! pipe of 1 MiB ([`PIPED_ABOVE`]); a smaller one, and kernel TLS, use `sendfile(2)`,
//! except HTTP/2 turns on kernel TLS, which go through the pipe ([`send_parts`]).
//!
//! `sendfile` has no "don't wait" flag, so the event loop only sends windows the page
//! cache holds (`cachestat` says so, or the same file was found resident a moment ago);
//! a window it does not hold is sent by the disk's blocking pool, which may wait for
//! the disk while this core's other connections keep being served (nginx's
//! `aio threads`). Every inline send is timed: one over 1 ms (plus 1 ns per byte it
//! moved) counts as a stall in `linerate_worker_stall_seconds_total`. Short writes, `EAGAIN` and
//! `EINTR` are resumed; a send that makes no progress for the send timeout ends the
//! connection; a file that shrinks under us ends it too (the client sees fewer bytes than
//! `Content-Length`, never padding).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Instant;

use linerate_http::range::ByteRange;
use linerate_sys::net::{self, Flush};
use linerate_sys::pagecache::{PageCacheProbe, Residency};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::coldpool::{SendEnd, SendJob};
use crate::context::Worker;
use crate::openfiles::Hot;
use crate::response::{Body, Piece, Response, TransferError};
use crate::stats::DeliveryPath;

/// Most bytes asked of one `sendfile` call. Loopback and fast NICs take several MiB per
/// call once the socket buffer has grown; nginx's `sendfile_max_chunk` default is 2 MiB.
pub(crate) const SENDFILE_CHUNK: usize = 2 * 1024 * 1024;

/// Bytes whose page-cache residency is checked at once (one `cachestat` call). A cold
/// window is read by the pool in one job, so this is also the cold-read size.
const RESIDENCY_WINDOW: u64 = 2 * 1024 * 1024;

/// Inline sends of more bytes than this go through the worker's pipe
/// ([`Pipe::send_file`](linerate_sys::pipe::Pipe::send_file)): `sendfile` moves 16
/// pages per trip through its internal pipe, the worker's pipe 256, and the socket gets
/// larger segments (2 MiB hits: 23 % less CPU per GB, docs/benchmarks.md "The kernel's
/// limit, and inline sends through a pipe"). Up to this, one `sendfile` (one system call, one trip) is cheaper
/// than the pipe's two.
const PIPED_ABOVE: usize = 64 * 1024;

/// The longest body sent without a residency check when its file was found resident a
/// moment ago (`openfiles::HOT_RECHECK`).
const HOT_MAX_BYTES: u64 = 1024 * 1024;

/// Send one response completely. `sent` is set to the bytes handed to the kernel (head
/// included), also when the transfer fails part-way; they are counted in the worker's
/// statistics once, at the end.
pub(crate) async fn send(
    worker: &Worker,
    stream: &TcpStream,
    response: Response,
    sent: &mut u64,
    path: DeliveryPath,
) -> Result<(), TransferError> {
    let mut out = Sender {
        worker,
        stream,
        sent: 0,
        batch: None,
        clock: None,
        piped: path == DeliveryPath::Sendfile,
    };
    let result = out.response(response).await;
    *sent = out.sent;
    if let Some(stats) = worker.request_stats() {
        stats.sent(path, out.sent);
    }
    result
}

/// One piece of a batch of HTTP/2 frames (`send_parts`): bytes (control frames, frame
/// headers, small payloads) or a file range sent with `sendfile` (a DATA frame's payload).
pub(crate) enum Part<'a> {
    /// These bytes.
    Bytes(&'a [u8]),
    /// This range of this file; `hot` as for [`Body::File`].
    File(&'a File, ByteRange, Option<&'a Hot>),
}

impl Part<'_> {
    fn len(&self) -> u64 {
        match self {
            Part::Bytes(b) => b.len() as u64,
            Part::File(_, range, _) => range.len,
        }
    }
}

/// Send a batch of parts in order, each bytes part with `MSG_MORE` when more follows, so
/// a 9-byte DATA frame header and its `sendfile` payload leave in one segment. File
/// ranges take the same residency rules as a response's (a cold window goes to the
/// pool). `sent` as for [`send`].
///
/// On kernel TLS a batch of [`PIPED_PARTS`] or more goes through the worker's pipe
/// first ([`Batch`](linerate_sys::pipe::Batch)): its bytes written and its file ranges
/// spliced into the pipe, then one splice to the socket, which sees the batch as one
/// send: full records and segments, where a `sendfile` per frame ends a record and,
/// with `TCP_NODELAY`, sends it as a segment of its own (2 MiB over h2 in the kTLS VM:
/// 0.81x -> 0.92x of HTTP/1.1's throughput, CPU per GB 1.28x -> 1.09-1.13x of its;
/// docs/benchmarks.md "HTTP/2 frames through a pipe on kernel TLS"). Only file ranges
/// known resident go in (as for `sendfile`: `hot`, else a check), and only while the
/// pipe has room; what a full socket does not take goes through the pipe again once it
/// is writable, and a part that cannot go through it is sent the ordinary way. Plain
/// TCP keeps a `send` + `sendfile` per frame: there a first version of the pipe
/// measured slower (h2c 64 KiB: CPU per GB 0.36 -> 0.82 s).
pub(crate) async fn send_parts(
    worker: &Worker,
    stream: &TcpStream,
    parts: &[Part<'_>],
    sent: &mut u64,
    path: DeliveryPath,
) -> Result<(), TransferError> {
    let mut out = Sender {
        worker,
        stream,
        sent: 0,
        batch: Some(std::time::Duration::ZERO),
        clock: None,
        piped: false,
    };
    let started = Instant::now();
    out.clock = Some(started);
    let mut result = Ok(());
    // The part being sent, and how many of its bytes went out already.
    let mut at = (0, 0u64);
    let mut piping = path == DeliveryPath::KernelTls && parts.len() >= PIPED_PARTS;
    while at.0 < parts.len() {
        if piping {
            match out.through_pipe(parts, &mut at) {
                Ok(Piped::All) => continue,
                Ok(Piped::Stopped) => {}
                Ok(Piped::Full) => {
                    // Wait until the socket takes more, then go on through the pipe.
                    if let Err(e) = out.on_error(io::ErrorKind::WouldBlock.into()).await {
                        result = Err(e);
                        break;
                    }
                    continue;
                }
                Ok(Piped::Unavailable) => piping = false,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            if at.0 == parts.len() {
                break;
            }
        }
        let (i, done) = at;
        let flush = if i + 1 == parts.len() {
            Flush::Now
        } else {
            Flush::More
        };
        result = match &parts[i] {
            Part::Bytes(b) => out.bytes(&b[done as usize..], flush).await,
            Part::File(file, range, hot) => {
                let rest = ByteRange {
                    start: range.start + done,
                    len: range.len - done,
                };
                out.file(file, rest, *hot).await
            }
        };
        at = (i + 1, 0);
        if result.is_err() {
            break;
        }
    }
    *sent = out.sent;
    if let Some(stats) = worker.request_stats() {
        stats.sent(path, out.sent);
        // The batch's time in the loop: all of it but the waits (one stall check for
        // the batch, as for one sendfile of the same bytes).
        let waited = out.batch.unwrap_or_default();
        let ns =
            u64::try_from(started.elapsed().saturating_sub(waited).as_nanos()).unwrap_or(u64::MAX);
        stats.loop_io(ns, out.sent);
    }
    result
}

/// Batches of fewer parts (8 DATA frames, 128 KiB) are sent part by part: a response
/// that small is sent faster one record at a time, the client decrypting the first
/// while the rest go out (64 KiB over h2 on kernel TLS, one request at a time: 1.18x
/// HTTP/1.1's throughput part by part, 0.94x through the pipe).
const PIPED_PARTS: usize = 16;

/// How far one trip through the pipe got (`Sender::through_pipe`).
enum Piped {
    /// The socket took everything put in the pipe: go on with the next parts.
    All,
    /// The next part cannot go through the pipe (its window is not in the page cache,
    /// its file ends early, or it is larger than the pipe): send it the ordinary way,
    /// then try the pipe again.
    Stopped,
    /// The socket took less than the pipe held: it is full. The rest goes through the
    /// pipe again once it takes more.
    Full,
    /// The worker has no pipe.
    Unavailable,
}

/// [`Sender::resident`]'s check, with the worker's probe.
fn resident_now(probe: PageCacheProbe, file: &File, offset: u64, len: u64, strict: bool) -> bool {
    if probe.residency(file.as_fd(), offset, len) == Residency::Cold {
        return false;
    }
    if probe == PageCacheProbe::PreadNowait {
        return true;
    }
    let (from, n) = if strict {
        (offset, len)
    } else {
        (offset + len - 1, 1)
    };
    PageCacheProbe::PreadNowait.residency(file.as_fd(), from, n) == Residency::Resident
}

/// Make the next residency window of `file` from `offset` (at most up to `end`) resident
/// in the page cache, reading it on the disk's blocking pool if `cachestat` says it is
/// not, so the caller can then read it without blocking the event loop. Returns the end
/// of the window. For the user-space TLS path, which reads into its own buffer (the
/// sendfile paths send cold windows from the pool instead).
pub(crate) async fn ensure_resident(
    worker: &Worker,
    file: &File,
    offset: u64,
    end: u64,
) -> Result<u64, TransferError> {
    let window = (end - offset).min(RESIDENCY_WINDOW);
    let shared = &worker.shared;
    if shared.probe.residency(file.as_fd(), offset, window) == Residency::Cold {
        // The pool gets its own descriptor: this connection may die meanwhile.
        let dup = file.try_clone().map_err(TransferError::Disk)?;
        tracing::debug!(
            offset,
            len = window,
            "cold window: reading on the disk pool"
        );
        shared
            .cold
            .warm(dup, offset, window)
            .await
            .map_err(TransferError::Disk)?;
    }
    Ok(offset + window)
}

struct Sender<'a> {
    worker: &'a Worker,
    stream: &'a TcpStream,
    /// Bytes accepted by the kernel so far.
    sent: u64,
    /// A batch of HTTP/2 frames: its sends are timed together (`send_parts`) rather
    /// than each `sendfile` (two clock reads per 16 KiB frame otherwise); time spent
    /// waiting for the socket or the pool is added up here and left out.
    batch: Option<std::time::Duration>,
    /// A batch's start: its frames' residency proofs are judged as of then (one clock
    /// read per batch, not per frame).
    clock: Option<Instant>,
    /// Large inline sends go through the worker's pipe ([`PIPED_ABOVE`]): plain TCP
    /// responses. Kernel TLS keeps `sendfile` (each call's end closes a record there,
    /// and its framing is measured that way), and HTTP/2 frames are at most 16 KiB.
    piped: bool,
}

impl Sender<'_> {
    async fn response(&mut self, response: Response) -> Result<(), TransferError> {
        let out = self;
        match response.body {
            Body::Empty => out.bytes(&response.head, Flush::Now).await,
            Body::File { file, range, hot } => {
                out.bytes(&response.head, Flush::More).await?;
                out.file(&file, range, Some(&hot)).await
            }
            Body::Multipart { file, plan } => {
                out.bytes(&response.head, Flush::More).await?;
                for part in &plan.parts {
                    out.bytes(&part.head, Flush::More).await?;
                    out.file(&file, part.range, None).await?;
                }
                out.bytes(&plan.trailer, Flush::Now).await
            }
            Body::Pieces(mut body) => {
                let flush = if body.ready() {
                    Flush::More
                } else {
                    Flush::Now
                };
                out.bytes(&response.head, flush).await?;
                while let Some(piece) = body.next().await? {
                    match piece {
                        Piece::Bytes(b) => out.bytes(b, Flush::Now).await?,
                        Piece::File(file, range) => {
                            let hot = out.worker.stored_hot(file);
                            out.file(file, range, Some(&hot)).await?
                        }
                        Piece::Written(file, range) => {
                            let hot = crate::openfiles::Hot::default();
                            hot.proved(Instant::now(), range.start, range.start + range.len);
                            out.file(file, range, Some(&hot)).await?
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// One trip through the worker's pipe: put the parts from `at` in it while they fit
    /// (bytes; file ranges `hot` proved resident a moment ago or found resident now),
    /// send it to the socket, and advance `at` past what the socket took.
    fn through_pipe(
        &mut self,
        parts: &[Part<'_>],
        at: &mut (usize, u64),
    ) -> Result<Piped, TransferError> {
        let clock = self.clock.unwrap_or_else(Instant::now);
        let sock = self.stream.as_fd();
        let probe = self.worker.shared.probe;
        let from = *at;
        // Bytes the socket took (also when it then filled).
        let mut took = 0;
        let trip = self.stream.try_io(Interest::WRITABLE, || {
            let trip = self.worker.with_send_pipe(|pipe, null| {
                if pipe.capacity() < PIPED_ABOVE {
                    // A pipe the kernel would not enlarge (the user's pipe quota).
                    return Ok(None);
                }
                let mut batch = pipe.batch();
                let mut next = from;
                // Whether the batch ended for want of room (the next trip takes the
                // next part) rather than at a part that must go the ordinary way.
                let mut room = false;
                while next.0 < parts.len() {
                    let (i, done) = next;
                    let (want, put) = match &parts[i] {
                        Part::Bytes(b) => {
                            let rest = &b[done as usize..];
                            (rest.len(), batch.bytes(rest))
                        }
                        Part::File(file, range, hot) => {
                            let start = range.start + done;
                            let end = range.start + range.len;
                            // Proven a moment ago, else checked now (the proof is
                            // left as it is: narrowed to this frame, it would make
                            // every other frame of its chunk look unproven).
                            let resident = (range.len <= HOT_MAX_BYTES
                                && hot.is_some_and(|h| h.covers(clock, start, end)))
                                || resident_now(probe, file, start, end - start, false);
                            if !resident {
                                break;
                            }
                            let want = (end - start) as usize;
                            (want, batch.file(file.as_fd(), start, want))
                        }
                    };
                    match put {
                        Ok(n) if n == want => next = (i + 1, 0),
                        Ok(0) => {
                            room = true;
                            break;
                        }
                        // A file that ends early, or an error: what went in is sent,
                        // and the ordinary send meets the rest (and says what it is).
                        _ => break,
                    }
                }
                let held = batch.held();
                if held == 0 {
                    return Ok(Some((0, room)));
                }
                // More follows at once unless this is the batch's end: the next part
                // continues the last TLS record.
                took = batch.send(sock, null, next.0 < parts.len())?;
                if took < held {
                    // The socket is full: said as `WouldBlock`, so that tokio forgets
                    // its readiness and the wait for it is a real one.
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(Some((held, room)))
            });
            trip.unwrap_or(Ok(None))
        });
        let (full, held, room) = match trip {
            Ok(None) => return Ok(Piped::Unavailable),
            Ok(Some((held, room))) => (false, held, room),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => (true, 0, false),
            Err(e) => return Err(TransferError::ClientGone(e)),
        };
        self.sent += took as u64;
        let mut left = took as u64;
        while left > 0 {
            let rest = parts[at.0].len() - at.1;
            if left >= rest {
                left -= rest;
                *at = (at.0 + 1, 0);
            } else {
                at.1 += left;
                left = 0;
            }
        }
        Ok(if full {
            Piped::Full
        } else if held > 0 && (room || at.0 == parts.len()) {
            Piped::All
        } else {
            Piped::Stopped
        })
    }

    /// Send all of `bytes`.
    async fn bytes(&mut self, mut bytes: &[u8], flush: Flush) -> Result<(), TransferError> {
        while !bytes.is_empty() {
            let sock = self.stream.as_fd();
            match self
                .stream
                .try_io(Interest::WRITABLE, || net::send(sock, bytes, flush))
            {
                Ok(n) => {
                    self.sent += n as u64;
                    bytes = &bytes[n..];
                }
                Err(e) => self.on_error(e).await?,
            }
        }
        Ok(())
    }

    /// Send `range` of `file` with sendfile: each window the page cache holds (or that
    /// `hot` says was found resident a moment ago) inline, each one it does not from the
    /// disk pool, which sends what the socket takes while this connection waits and the
    /// worker serves the others (see `coldpool`). After every wait for the socket, the
    /// rest is checked again: pages found resident before the wait may be gone after it.
    async fn file(
        &mut self,
        file: &File,
        range: ByteRange,
        hot: Option<&Hot>,
    ) -> Result<(), TransferError> {
        let end = range.start + range.len;
        let mut offset = range.start;
        let start = self.clock.unwrap_or_else(Instant::now);
        // Only a short body skips the check: there one `cachestat` is a good share of
        // the response's system calls. A larger one is checked every time (one call per
        // 2 MiB window next to its sends), since a wrong guess there would hold the
        // loop for a long disk read.
        let hot = hot.filter(|_| range.len <= HOT_MAX_BYTES);
        let skip = hot.is_some_and(|h| h.covers(start, offset, end));
        // Bytes up to here may be sent inline.
        let mut resident_until = if skip { end } else { offset };
        // A window of this response needed the pool: later windows may be the pool's
        // read-ahead still in flight, which `cachestat` counts as cached although a
        // sendfile of it would wait; those are also checked with `RWF_NOWAIT`.
        let mut went_cold = false;
        while offset < end {
            if offset >= resident_until {
                let window = (end - offset).min(RESIDENCY_WINDOW);
                if self.resident(file, offset, window, went_cold) {
                    resident_until = offset + window;
                } else {
                    went_cold = true;
                    self.send_from_pool(file, &mut offset, window, end).await?;
                    continue;
                }
            }
            let count = usize::try_from(resident_until - offset)
                .unwrap_or(SENDFILE_CHUNK)
                .min(SENDFILE_CHUNK);
            let sock = self.stream.as_fd();
            let fd = file.as_fd();
            let timed = self.batch.is_none() && self.worker.request_stats().is_some();
            let before = timed.then(Instant::now);
            let piped = self.piped && count > PIPED_ABOVE;
            let result = self.stream.try_io(Interest::WRITABLE, || {
                let through_pipe = piped
                    .then(|| {
                        self.worker.with_send_pipe(|pipe, null| {
                            pipe.send_file(sock, fd, &mut offset, count, null)
                        })
                    })
                    .flatten();
                through_pipe.unwrap_or_else(|| net::sendfile(sock, fd, &mut offset, count))
            });
            if let (Some(stats), Some(before)) = (self.worker.request_stats(), before) {
                let ns = u64::try_from(before.elapsed().as_nanos()).unwrap_or(u64::MAX);
                let moved = result.as_ref().map_or(0, |&n| n as u64);
                stats.loop_io(ns, moved);
            }
            match result {
                Ok(0) => {
                    // Shorter than its cached length says: never serve that entry again.
                    self.worker.open_file_cache.forget_fd(fd.as_raw_fd());
                    return Err(TransferError::Truncated);
                }
                Ok(n) => self.sent += n as u64,
                Err(e) => {
                    let waited = e.kind() == io::ErrorKind::WouldBlock;
                    self.on_error(e).await?;
                    if waited && !hot.is_some_and(|h| h.covers(Instant::now(), offset, end)) {
                        resident_until = offset;
                    }
                }
            }
        }
        if let Some(h) = hot.filter(|_| !skip && !went_cold) {
            // Only a file found resident throughout is assumed to stay so for a while;
            // one the pool had to read was just cold, and is checked every time.
            h.proved(start, range.start, end);
        }
        Ok(())
    }

    /// Whether `file[offset .. offset+len)` can be sent without waiting for the disk.
    /// `cachestat` counts a page whose read is still in flight as cached: another
    /// connection's pool job reading the same file makes its pages cached before they
    /// hold data, and an inline `sendfile` of them would wait for the disk in the loop
    /// (seen on the slow disk: 92-95 ms inside the worker's `sendfile` of a cold 2 MiB
    /// file another connection's job was reading). So the window's last byte is also
    /// read with `RWF_NOWAIT` (one call; readahead completes in order, so the last page
    /// holding data means the window's read is done), and both ends after a window of
    /// the same response went to the pool (`strict`: its read-ahead may be in flight).
    fn resident(&self, file: &File, offset: u64, len: u64, strict: bool) -> bool {
        resident_now(self.worker.shared.probe, file, offset, len, strict)
    }

    /// Send (part of) the window `[*offset, *offset+len)` from the disk pool; the rest of
    /// the response (up to `end`) is read ahead. Returns once the pool is done with
    /// it; on `EAGAIN` after waiting until the socket takes more.
    async fn send_from_pool(
        &mut self,
        file: &File,
        offset: &mut u64,
        len: u64,
        end: u64,
    ) -> Result<(), TransferError> {
        // The job's own descriptors: this connection may die while it runs.
        let sock = self
            .stream
            .as_fd()
            .try_clone_to_owned()
            .map_err(TransferError::ClientGone)?;
        let dup = file.try_clone().map_err(TransferError::Disk)?;
        let window_end = *offset + len;
        tracing::debug!(
            offset = *offset,
            len,
            "cold window: sending from the disk pool"
        );
        let waiting = Waiting::start(&mut self.batch);
        let sent = self
            .worker
            .shared
            .cold
            .send(SendJob {
                sock,
                file: dup,
                offset: *offset,
                len,
                ahead: (end - window_end).min(RESIDENCY_WINDOW),
            })
            .await
            .map_err(TransferError::Disk)?;
        drop(waiting);
        *offset += sent.bytes;
        self.sent += sent.bytes;
        if let Some(stats) = self.worker.request_stats() {
            stats.pool_send(sent.bytes);
        }
        match sent.end {
            SendEnd::Complete => Ok(()),
            SendEnd::WouldBlock => {
                // The pool's EAGAIN happened outside tokio's view, so tokio may still
                // hold a writable event nobody consumed, and the wait below would return
                // at once: a client that stopped reading would then loop through the
                // pool (when every window is found cold again) and never meet the send
                // timeout. Ask the kernel inside `try_io`: a socket still full clears
                // that stale readiness (an event newer than this check survives it), one
                // that drained meanwhile goes on at once.
                let sock = self.stream.as_fd();
                let writable = self.stream.try_io(Interest::WRITABLE, || {
                    if net::writable_now(sock)? {
                        Ok(())
                    } else {
                        Err(io::ErrorKind::WouldBlock.into())
                    }
                });
                match writable {
                    Ok(()) => Ok(()),
                    Err(e) => self.on_error(e).await,
                }
            }
            SendEnd::Eof => {
                self.worker.open_file_cache.forget_fd(file.as_raw_fd());
                Err(TransferError::Truncated)
            }
            SendEnd::Failed(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            // A read error of the file (sendfile reports the disk's EIO as its own).
            SendEnd::Failed(e) if e.raw_os_error() == Some(libc::EIO) => {
                Err(TransferError::Disk(e))
            }
            SendEnd::Failed(e) => Err(TransferError::ClientGone(e)),
        }
    }

    /// Resume after `EAGAIN`/`EINTR` (waiting for writability, bounded by the send
    /// timeout); anything else means the client is gone.
    async fn on_error(&mut self, e: io::Error) -> Result<(), TransferError> {
        match e.kind() {
            io::ErrorKind::WouldBlock => {
                let limit = self.worker.live().options.timeouts.send;
                let _waiting = Waiting::start(&mut self.batch);
                match tokio::time::timeout(limit, self.stream.writable()).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(TransferError::ClientGone(e)),
                    Err(_) => Err(TransferError::SendTimeout),
                }
            }
            io::ErrorKind::Interrupted => Ok(()),
            _ => Err(TransferError::ClientGone(e)),
        }
    }
}

/// Time a batch's sender spends waiting (for the socket, or for the pool): added to the
/// batch's waits when dropped. Nothing (and no clock read) outside a batch.
struct Waiting<'a> {
    into: Option<(&'a mut std::time::Duration, Instant)>,
}

impl<'a> Waiting<'a> {
    fn start(batch: &'a mut Option<std::time::Duration>) -> Waiting<'a> {
        Waiting {
            into: batch.as_mut().map(|b| (b, Instant::now())),
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some((b, t)) = self.into.take() {
            *b += t.elapsed();
        }
    }
}
