//! One exchange on a connection: send the request, read the response head within the
//! first-byte and idle timeouts, then hand out the body with its framing checked to
//! the byte. The body is complete only when its end is exactly where the framing says;
//! bytes past that end mean the framing lied, and nothing received may be stored.
//!
//! Not here: choosing the connection or retrying (the parent module).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use linerate_http::upstream::{
    parse_head, ChunkedDecoder, Framing, Head, ResponseError, ResponseHead, MAX_INTERIM_RESPONSES,
};
use tokio::time::Instant;

use super::conn::{Conn, Peek};
use super::error::OriginError;
use super::shared::OriginShared;
use super::{unix_ms, Failure, Phase};

/// Bytes read per call while the head is incomplete. Heads are usually under 1 KiB;
/// 68 KiB also takes the body bytes that arrive with it: a 64 KiB object (a small
/// segment, a slice's tail) and its head in one read, so its fill is one store write.
const HEAD_READ_CHUNK: usize = 68 * 1024;

/// Most bytes asked of a plain TCP origin in one body read. The read goes into the
/// buffer's spare capacity, never zeroed, and larger reads are fewer calls and fewer
/// trips through the fill loop (its write, the readers' wake-up): against 64 KiB,
/// 2 MiB misses ran 10-19 % more req/s at 15-25 % less CPU per GB and sliced 64 MiB
/// misses 14 % more (docs/benchmarks.md, "The kernel's limit for misses"), as
/// `bench/kernel-cache.c` showed first (its 64 KiB buffer made 0.76x nginx, 256 KiB
/// 1.07x).
const BODY_READ_CHUNK: usize = 256 * 1024;

/// The same for a TLS origin, and for raw chunked input: tokio-rustls zeroes the space
/// it is offered before every read, so that is kept near what one read returns (a few
/// 16 KiB records); chunked input goes through the head buffer, which stays small.
const SMALL_READ_CHUNK: usize = 64 * 1024;

/// Head buffers a thread keeps for reuse (1 MiB at most).
const KEPT_HEAD_BUFFERS: usize = 16;

thread_local! {
    /// Head buffers given back ([`recycle_head_buffer`]).
    static HEAD_BUFFERS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of `HEAD_READ_CHUNK` for a response head and the body bytes that come with
/// it: one given back before, or a new one. jemalloc's thread cache keeps sizes up to
/// 32 KiB only (its limit in the version we build); above that each allocation and free
/// takes the arena's large-extent path, about 1 % of a core on 64 KiB misses (perf).
fn head_buffer() -> Vec<u8> {
    HEAD_BUFFERS
        .with(|kept| kept.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(HEAD_READ_CHUNK))
}

/// Give a head buffer back for reuse once its bytes are used (a body's read-ahead, or
/// what [`OriginResponse::take_ahead`] handed over); any other buffer is just dropped.
pub(crate) fn recycle_head_buffer(mut buf: Vec<u8>) {
    if buf.capacity() != HEAD_READ_CHUNK {
        return;
    }
    buf.clear();
    HEAD_BUFFERS.with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept.len() < KEPT_HEAD_BUFFERS {
            kept.push(buf);
        }
    });
}

/// Where interim (1xx) response heads go as they arrive, ready to send to a client.
pub(crate) type InterimSink = tokio::sync::mpsc::UnboundedSender<Vec<u8>>;

/// Send `wire` on `conn` and read the response head. `first_byte_timeout` bounds the
/// write and the wait for the first byte (a request the origin will not read is as
/// stuck as one it will not answer); `idle_timeout` each wait after that. Interim
/// responses before the final head go to `interim` (all but `100 Continue`), as they
/// arrive.
pub(super) async fn exchange(
    shared: &Arc<OriginShared>,
    server: usize,
    mut conn: Conn,
    wire: &[u8],
    is_head: bool,
    interim: Option<&InterimSink>,
) -> Result<OriginResponse, Failure> {
    let opts = &shared.opts;
    let request_time_ms = unix_ms();
    let first_byte_deadline = Instant::now() + opts.first_byte_timeout;
    match tokio::time::timeout_at(first_byte_deadline, conn.write_all(wire)).await {
        Err(_) => return Err(Failure::new(OriginError::FirstByteTimeout, Phase::Write)),
        Ok(Err(e)) => return Err(Failure::new(OriginError::before_response(e), Phase::Write)),
        Ok(Ok(())) => {}
    }
    let mut buf = head_buffer();
    let mut received = false;
    let mut interims = 0usize;
    loop {
        let nothing_yet = !received;
        let deadline = if nothing_yet {
            first_byte_deadline
        } else {
            Instant::now() + opts.idle_timeout
        };
        let error = match conn.read_until(&mut buf, HEAD_READ_CHUNK, deadline).await {
            Ok(Some(0)) if nothing_yet => Some(OriginError::Closed),
            Ok(Some(0)) => Some(OriginError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "origin closed the connection inside the response head",
            ))),
            Ok(Some(_)) => None,
            Ok(None) if nothing_yet => Some(OriginError::FirstByteTimeout),
            Ok(None) => Some(OriginError::IdleTimeout),
            Err(e) if nothing_yet => Some(OriginError::before_response(e)),
            Err(e) => Some(OriginError::Io(e)),
        };
        if let Some(error) = error {
            return Err(Failure::new(error, Phase::Head));
        }
        received = true;
        // Every head the buffer holds: interim ones are passed on and dropped, the final
        // one starts the body.
        loop {
            match parse_head(&buf, is_head) {
                Err(e) => return Err(Failure::new(OriginError::BadHead(e), Phase::Head)),
                Ok(None) => break,
                Ok(Some(Head::Interim {
                    status,
                    fields,
                    len,
                })) => {
                    interims += 1;
                    if interims > MAX_INTERIM_RESPONSES {
                        let e = OriginError::BadHead(ResponseError::TooLarge);
                        return Err(Failure::new(e, Phase::Head));
                    }
                    // RFC 9110 §15.2: forward 1xx "unless the proxy itself requested" it;
                    // we never send `Expect`, so a 100 Continue is not the client's either
                    // (a client that asked got ours before its body was read).
                    if let (Some(tx), true) = (interim, status != 100) {
                        let _ = tx.send(linerate_http::forward::interim_head(status, &fields));
                    }
                    buf.drain(..len);
                }
                Ok(Some(Head::Final {
                    head,
                    len: head_len,
                })) => {
                    let response_time_ms = unix_ms();
                    let mut body = Body {
                        conn: Some(conn),
                        pending: buf,
                        pos: head_len,
                        state: match head.framing {
                            Framing::Length(n) => BodyState::Length {
                                expected: n,
                                remaining: n,
                            },
                            Framing::Chunked => BodyState::Chunked,
                            Framing::UntilClose => BodyState::UntilClose,
                            Framing::Empty => BodyState::Empty,
                        },
                        decoder: ChunkedDecoder::new(),
                        keep_alive: head.keep_alive,
                        idle_timeout: opts.idle_timeout,
                    };
                    // A body that is already over goes back to the pool now, so a caller
                    // that never reads an empty body does not cost a connection.
                    match body.state {
                        BodyState::Empty => body.finish(End::Lenient).await,
                        BodyState::Length { remaining: 0, .. } => body.finish(End::Strict).await,
                        _ => {}
                    }
                    return Ok(OriginResponse {
                        head,
                        request_time_ms,
                        response_time_ms,
                        server,
                        shared: shared.clone(),
                        body,
                    });
                }
            }
        }
    }
}

/// A response from an origin server: the head, and the body still to be read.
pub(crate) struct OriginResponse {
    /// The final response head (interim 1xx responses skipped).
    pub(crate) head: ResponseHead,
    /// Unix milliseconds when the request was sent (RFC 9111 §4.2.3 `request_time`).
    pub(crate) request_time_ms: u64,
    /// Unix milliseconds when the head was parsed (RFC 9111 §4.2.3 `response_time`).
    pub(crate) response_time_ms: u64,
    /// Index of the server (in the origin's `servers`) that answered.
    pub(crate) server: usize,
    shared: Arc<OriginShared>,
    body: Body,
}

impl std::fmt::Debug for OriginResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginResponse")
            .field("head", &self.head)
            .field("server", &self.server)
            .field("state", &self.body.state)
            .finish_non_exhaustive()
    }
}

impl OriginResponse {
    /// Append up to `max` decoded body bytes to `buf` (a `max` of 0 counts as 1).
    ///
    /// `Ok(0)` only when the body is complete and valid: exactly `Content-Length` bytes
    /// (fewer before end of file: [`OriginError::BodyShort`]; more, received already or
    /// readable without waiting: [`OriginError::BodyLong`]), the chunked terminator
    /// (then any byte more: `BodyLong`), or end of file for a body delimited by close.
    /// Each wait is bounded by `idle_timeout`. When the body ends cleanly on a
    /// persistent connection, the connection goes back to this worker's pool; dropping
    /// an unfinished response closes it. After an error every later call fails too.
    pub(crate) async fn read(
        &mut self,
        buf: &mut Vec<u8>,
        max: usize,
    ) -> Result<usize, OriginError> {
        let result = self.body.read(buf, max.max(1)).await;
        if let Err(e) = &result {
            if !matches!(self.body.state, BodyState::Failed) {
                self.shared.count_error(self.server, e);
            }
            self.body.state = BodyState::Failed;
            self.body.conn = None;
        }
        result
    }

    /// The body bytes that arrived with the head, handed over where they lie instead of
    /// copied by [`OriginResponse::read`]: the buffer and their range in it. Only for a
    /// `Content-Length` body whose read-ahead bytes are all body and at most `max` (the
    /// whole body of a small object, read in one go with its head); `None` otherwise,
    /// and then `read` hands them out. The body is accounted as read, and finished
    /// (the connection pooled) when they are all of it.
    pub(crate) async fn take_ahead(
        &mut self,
        max: usize,
    ) -> Option<(Vec<u8>, std::ops::Range<usize>)> {
        self.body.take_ahead(max).await
    }

    /// The body's length when the framing gives it: `Content-Length`, or 0 for a body
    /// that cannot exist (HEAD, 204, 304); `None` for chunked or until-close bodies.
    pub(crate) fn content_length(&self) -> Option<u64> {
        match self.head.framing {
            Framing::Length(n) => Some(n),
            Framing::Empty => Some(0),
            Framing::Chunked | Framing::UntilClose => None,
        }
    }

    /// Whether the connection has gone back to the pool (or been closed) because the
    /// body is over.
    #[cfg(test)]
    pub(super) fn is_released(&self) -> bool {
        self.body.conn.is_none()
    }
}

/// Where the body stands.
#[derive(Debug, Clone, Copy)]
enum BodyState {
    /// `Content-Length` body with `remaining` of `expected` bytes to come.
    Length { expected: u64, remaining: u64 },
    /// Chunked body (the decoder is `Body::decoder`).
    Chunked,
    /// Body delimited by the connection closing.
    UntilClose,
    /// No body (HEAD, 204, 304), not yet finished.
    Empty,
    /// Ended exactly where the framing said.
    Complete,
    /// Bytes followed the end: the next read reports [`OriginError::BodyLong`].
    Extra,
    /// An error was returned; the connection is closed.
    Failed,
}

/// How to treat bytes after the end of a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// They are an error (`BodyLong`): `Content-Length` or chunked framing.
    Strict,
    /// They only make the connection unusable: a response that has no body by rule
    /// (RFC 9112 §6.3 ¶1) is complete at its head whatever follows.
    Lenient,
}

/// The body half of a response: the connection and what was read ahead.
struct Body {
    /// The connection, until the body is over.
    conn: Option<Conn>,
    /// Bytes read but not yet handed out (from `pos`): what followed the head, or
    /// raw chunked input.
    pending: Vec<u8>,
    pos: usize,
    state: BodyState,
    decoder: ChunkedDecoder,
    keep_alive: bool,
    idle_timeout: Duration,
}

impl Body {
    /// [`OriginResponse::read`], by framing.
    async fn read(&mut self, buf: &mut Vec<u8>, max: usize) -> Result<usize, OriginError> {
        match self.state {
            BodyState::Length {
                expected,
                remaining,
            } => self.read_length(buf, max, expected, remaining).await,
            BodyState::Chunked => self.read_chunked(buf, max).await,
            BodyState::UntilClose => self.read_until_close(buf, max).await,
            BodyState::Empty => {
                self.finish(End::Lenient).await;
                self.ended()
            }
            BodyState::Complete | BodyState::Extra => self.ended(),
            BodyState::Failed => Err(OriginError::Io(std::io::Error::other(
                "the origin response already failed",
            ))),
        }
    }

    /// A `Content-Length` body: never reads past the declared end, so bytes beyond it
    /// stay in the socket for `finish` to find.
    async fn read_length(
        &mut self,
        buf: &mut Vec<u8>,
        max: usize,
        expected: u64,
        remaining: u64,
    ) -> Result<usize, OriginError> {
        if remaining == 0 {
            self.finish(End::Strict).await;
            return self.ended();
        }
        let want = usize::try_from(remaining).map_or(max, |r| r.min(max));
        let mut drained = false;
        let n = match self.take_pending(buf, want) {
            0 => {
                // A read that can end the body asks for one byte more: what the socket
                // holds past the end shows now (one read instead of a read and the
                // `peek` that looks for stray bytes before pooling the connection).
                let chunk = want.min(self.read_chunk());
                let last = remaining <= chunk as u64;
                let n = self.fill(buf, if last { chunk + 1 } else { chunk }).await?;
                if n == 0 {
                    return Err(OriginError::BodyShort {
                        expected,
                        got: expected - remaining,
                    });
                }
                if last && n as u64 > remaining {
                    // Bytes past the declared end: the body as declared, then `BodyLong`.
                    buf.truncate(buf.len() - (n - chunk));
                    recycle_head_buffer(std::mem::take(&mut self.pending));
                    self.pos = 0;
                    self.conn = None;
                    self.state = BodyState::Extra;
                    return Ok(chunk);
                }
                drained = last && n as u64 == remaining;
                n
            }
            n => n,
        };
        let remaining = remaining - n as u64;
        self.state = BodyState::Length {
            expected,
            remaining,
        };
        if remaining == 0 {
            // Finish now: the connection returns to the pool even if the caller, which
            // knows the length, never asks for the end.
            if drained {
                // The read that ended the body found nothing after it.
                self.finish_drained();
            } else {
                self.finish(End::Strict).await;
            }
        }
        Ok(n)
    }

    /// [`OriginResponse::take_ahead`].
    async fn take_ahead(&mut self, max: usize) -> Option<(Vec<u8>, std::ops::Range<usize>)> {
        let BodyState::Length {
            expected,
            remaining,
        } = self.state
        else {
            return None;
        };
        let n = self.pending.len() - self.pos;
        // Bytes past the declared end are `read`'s to report (`BodyLong`).
        if n == 0 || n > max || n as u64 > remaining {
            return None;
        }
        let range = self.pos..self.pos + n;
        let bytes = std::mem::take(&mut self.pending);
        self.pos = 0;
        let remaining = remaining - n as u64;
        self.state = BodyState::Length {
            expected,
            remaining,
        };
        if remaining == 0 {
            // As `read_length`: the connection goes back to the pool now.
            self.finish(End::Strict).await;
        }
        Some((bytes, range))
    }

    /// A body delimited by close: end of file is its (only) valid end.
    async fn read_until_close(
        &mut self,
        buf: &mut Vec<u8>,
        max: usize,
    ) -> Result<usize, OriginError> {
        let n = match self.take_pending(buf, max) {
            0 => self.fill(buf, max.min(self.read_chunk())).await?,
            n => n,
        };
        if n == 0 {
            self.state = BodyState::Complete;
            self.conn = None;
        }
        Ok(n)
    }

    /// A chunked body: raw input goes through `pending` and the decoder.
    async fn read_chunked(&mut self, buf: &mut Vec<u8>, max: usize) -> Result<usize, OriginError> {
        loop {
            if self.pos == self.pending.len() {
                self.pending.clear();
                self.pos = 0;
                let Some(conn) = self.conn.as_mut() else {
                    return Err(closed_inside("a chunked body"));
                };
                let deadline = Instant::now() + self.idle_timeout;
                match conn
                    .read_until(&mut self.pending, SMALL_READ_CHUNK, deadline)
                    .await
                {
                    Ok(Some(0)) => return Err(closed_inside("a chunked body")),
                    Ok(Some(_)) => {}
                    Ok(None) => return Err(OriginError::IdleTimeout),
                    Err(e) => return Err(OriginError::Io(e)),
                }
            }
            // Decoded bytes never outnumber input bytes, so this bounds the output.
            let end = self.pending.len().min(self.pos.saturating_add(max));
            let before = buf.len();
            let (used, done) = self
                .decoder
                .decode(&self.pending[self.pos..end], buf)
                .map_err(OriginError::BadChunked)?;
            self.pos += used;
            let produced = buf.len() - before;
            if done {
                self.finish(End::Strict).await;
                if produced == 0 {
                    return self.ended();
                }
            }
            if produced > 0 {
                return Ok(produced);
            }
        }
    }

    /// Most bytes one body read asks the connection for.
    fn read_chunk(&self) -> usize {
        match &self.conn {
            Some(c) if c.is_tls() => SMALL_READ_CHUNK,
            _ => BODY_READ_CHUNK,
        }
    }

    /// Move up to `want` pending bytes to `buf`; the count moved.
    fn take_pending(&mut self, buf: &mut Vec<u8>, want: usize) -> usize {
        let n = (self.pending.len() - self.pos).min(want);
        buf.extend_from_slice(&self.pending[self.pos..self.pos + n]);
        self.pos += n;
        if n > 0 && self.pos == self.pending.len() {
            // Drained: give the head buffer back; later reads go straight into `buf`.
            recycle_head_buffer(std::mem::take(&mut self.pending));
            self.pos = 0;
        }
        n
    }

    /// Read up to `want` bytes from the connection into `buf`; 0 at end of file.
    async fn fill(&mut self, buf: &mut Vec<u8>, want: usize) -> Result<usize, OriginError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(0);
        };
        match conn
            .read_until(buf, want, Instant::now() + self.idle_timeout)
            .await
        {
            Ok(Some(n)) => Ok(n),
            Ok(None) => Err(OriginError::IdleTimeout),
            Err(e) => Err(OriginError::Io(e)),
        }
    }

    /// The body is over: look for bytes past its end, then pool or close the
    /// connection.
    async fn finish(&mut self, end: End) {
        let buffered_extra = self.pos < self.pending.len();
        recycle_head_buffer(std::mem::take(&mut self.pending));
        self.pos = 0;
        let mut clean = !buffered_extra;
        if let Some(mut conn) = self.conn.take() {
            if clean {
                match conn.peek().await {
                    Peek::Quiet if self.keep_alive => conn.release(),
                    Peek::Quiet | Peek::Closed => {}
                    Peek::Data => clean = false,
                }
            }
        }
        self.state = if clean || end == End::Lenient {
            BodyState::Complete
        } else {
            BodyState::Extra
        };
    }

    /// The body is over and the read that ended it found the socket empty after it
    /// (it asked for a byte more than was left): pool the connection without a `peek`.
    fn finish_drained(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.keep_alive {
                conn.release();
            }
        }
        self.state = BodyState::Complete;
    }

    /// The answer for a body that is over: `Ok(0)`, or `BodyLong` if bytes followed.
    fn ended(&self) -> Result<usize, OriginError> {
        match self.state {
            BodyState::Extra => Err(OriginError::BodyLong),
            _ => Ok(0),
        }
    }
}

/// End of file where the framing says more must come.
fn closed_inside(what: &str) -> OriginError {
    OriginError::Io(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("origin closed the connection inside {what}"),
    ))
}
