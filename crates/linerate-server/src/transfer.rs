//! Moving a response onto the socket: the head with `MSG_MORE`, then file bytes straight
//! from the page cache (never through a user-space buffer), multipart part heads between
//! them. On plain TCP a send of more than 64 KiB splices the bytes through the worker's
//! pipe of 1 MiB ([`PIPED_ABOVE`]); a smaller one, and kernel TLS, use `sendfile(2)`.
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

/// Send a batch of parts in order, each bytes part with `MSG_MORE` when more follows, so
/// a 9-byte DATA frame header and its `sendfile` payload leave in one segment. File
/// ranges take the same residency rules as a response's (a cold window goes to the
/// pool). `sent` as for [`send`].
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
    for (i, part) in parts.iter().enumerate() {
        let flush = if i + 1 == parts.len() {
            Flush::Now
        } else {
            Flush::More
        };
        result = match part {
            Part::Bytes(b) => out.bytes(b, flush).await,
            Part::File(file, range, hot) => out.file(file, *range, *hot).await,
        };
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
        let probe = self.worker.shared.probe;
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
