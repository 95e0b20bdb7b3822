//! One client connection: read a request head, discard or refuse its body, answer it,
//! repeat while the connection persists (keep-alive, pipelining in order).
//!
//! Timeouts (each from [`crate::Timeouts`]): the whole head must arrive within
//! `request_head` of its first byte (of accept, for the first request); an idle
//! keep-alive connection waits `keepalive` for the next one; sending is bounded by
//! `send` per stall (in `transfer`). An idle connection holds no buffer: its read buffer
//! goes back to the worker's pool, so 10,000 idle players cost little more than their
//! sockets.
//!
//! The same loop serves plain HTTP and HTTPS: reads and sends go through the
//! connection's [`Transport`] (plain, kernel TLS or user-space TLS).
//!
//! Not here: deciding the response (the mode's handler, see `handler`) or moving its
//! bytes (`transfer`, `tls::send`).

use std::rc::Rc;

use linerate_http::request::FieldBuf;
use linerate_http::request::MAX_HEAD_BYTES;
use linerate_http::{parse_request, BodyFraming, ParseOutcome, Persistence};
use tokio::time::{timeout_at, Instant};

use crate::accesslog::{Finished, Pending};
use crate::context::Worker;
use crate::handler::Mode;
use crate::response::{self, Response};
use crate::stats::{CachePhase, CloseReason, ConnState, Refusal};
use crate::transport::Transport;

/// Bytes reserved per read into the head buffer. Players' heads are 200-800 bytes, so
/// one 4 KiB read takes a whole head, and pipelined ones after it.
const READ_CHUNK: usize = 4096;

/// Why a connection ended. For logs (and the metrics of a later issue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Client closed between requests, or asked to close.
    Done,
    /// Idle keep-alive or first-request wait expired with no bytes.
    Idle,
    /// Head incomplete within the request-head timeout (slowloris): 408.
    HeadTimeout,
    /// Client closed in the middle of a head or body.
    ClientClosed,
    /// Malformed or oversized request: error status sent, then closed.
    BadRequest,
    /// The response could not be completed (client gone, send timeout, truncation).
    Aborted,
    /// Graceful stop.
    Stopping,
    /// Idle long enough to leave the runtime, until this keep-alive deadline.
    Parked(Instant),
    /// The client sent the HTTP/2 connection preface (h2c with prior knowledge, RFC
    /// 9113 §3.3): the connection continues as HTTP/2.
    Http2,
}

impl Ending {
    fn as_str(self) -> &'static str {
        match self {
            Ending::Done => "done",
            Ending::Idle => "idle",
            Ending::HeadTimeout => "head_timeout",
            Ending::ClientClosed => "client_closed",
            Ending::BadRequest => "bad_request",
            Ending::Aborted => "aborted",
            Ending::Stopping => "stopping",
            Ending::Parked(_) => "parked",
            Ending::Http2 => "http2",
        }
    }

    /// The metric label of a connection that closed (a parked one has not).
    fn close_reason(self) -> CloseReason {
        match self {
            Ending::Done => CloseReason::Done,
            Ending::Idle | Ending::Parked(_) | Ending::Http2 => CloseReason::Idle,
            Ending::HeadTimeout => CloseReason::HeadTimeout,
            Ending::ClientClosed => CloseReason::ClientClosed,
            Ending::BadRequest => CloseReason::BadRequest,
            Ending::Aborted => CloseReason::Aborted,
            Ending::Stopping => CloseReason::Stopping,
        }
    }
}

/// How a connection's task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The socket is closed, for this reason.
    Closed(CloseReason),
    /// The socket is parked (see `park`); the connection is still open.
    Parked,
}

/// Serve one connection until it closes or parks. `first`: no request has been served
/// on it yet (the head timeout applies to the wait, not the keep-alive timeout). `h2c`:
/// when set, the HTTP/2 preface as its first bytes makes it an HTTP/2 connection
/// (`http2`), which the gate (the setting that allowed it) may close at a reload.
/// `io` is the connection's transport; `buf` holds request bytes already received (a
/// TLS handshake's last flight can carry the first request).
pub(crate) async fn serve(
    worker: &Rc<Worker>,
    mode: &Rc<Mode>,
    io: Transport,
    first: bool,
    h2c: Option<crate::http2::Gate>,
    buf: Vec<u8>,
) -> Outcome {
    // Sampling is decided per connection task: a connection resumed from parking is a
    // new draw (parking keeps a few bytes per socket and no sampling state).
    let sampled = worker.sample_tcp();
    if sampled && first {
        worker.stats.sampled();
    }
    // One getpeername per connection task, and only when requests are being logged;
    // one getsockopt(TCP_CONGESTION) more when the connection is also sampled.
    let logging = worker.log.borrow().enabled();
    let peer = if logging || mode.wants_peer() {
        io.tcp().peer_addr().ok()
    } else {
        None
    };
    let congestion = if logging && sampled {
        crate::tcpsample::congestion(io.tcp())
    } else {
        None
    };
    let mut conn = Conn {
        worker,
        mode,
        peer_ip: peer.map(|p| p.ip()),
        io,
        buf,
        sampled,
        peer,
        rtt_us: None,
        congestion,
    };
    let ending = conn.run(first, h2c.is_some()).await;
    if let (Ending::Http2, Some(gate)) = (ending, h2c) {
        let buf = std::mem::take(&mut conn.buf);
        return Outcome::Closed(
            Box::pin(crate::http2::serve(worker, mode, conn.io, buf, gate)).await,
        );
    }
    worker.give_buffer(std::mem::take(&mut conn.buf));
    if let Ending::Parked(deadline) = ending {
        if let Transport::Plain(stream) = conn.io {
            match worker.parking.park(stream, deadline) {
                Ok(()) => return Outcome::Parked,
                Err(e) => tracing::debug!(error = %e, "could not park; closing"),
            }
        }
        return Outcome::Closed(CloseReason::Idle);
    }
    if sampled {
        crate::tcpsample::at_end(worker, conn.io.tcp());
    }
    conn.io.goodbye();
    tracing::trace!(ending = ending.as_str(), "connection closed");
    Outcome::Closed(ending.close_reason())
}

struct Conn<'w> {
    worker: &'w Rc<Worker>,
    /// What answers the requests.
    mode: &'w Rc<Mode>,
    /// The client's address, when the mode or the access log needs it.
    peer_ip: Option<std::net::IpAddr>,
    io: Transport,
    /// Unconsumed request bytes; empty (and unallocated) while idle.
    buf: Vec<u8>,
    /// Whether this connection's TCP_INFO is sampled.
    sampled: bool,
    /// The client's address, when requests are logged.
    peer: Option<std::net::SocketAddr>,
    /// The latest sampled smoothed RTT.
    rtt_us: Option<u32>,
    /// The socket's congestion control, when sampled and logged.
    congestion: Option<String>,
}

/// What reading more bytes gave.
enum Read {
    /// Some bytes were appended.
    Data,
    /// End of stream.
    Eof,
    /// The deadline passed.
    TimedOut,
    /// A socket error (reset...).
    Failed,
}

impl Conn<'_> {
    async fn run(&mut self, mut first: bool, h2c: bool) -> Ending {
        loop {
            if self.buf.is_empty() {
                if let Some(ending) = self.wait_for_request(first).await {
                    return ending;
                }
            }
            if first && h2c {
                if let Some(ending) = self.h2c_preface().await {
                    return ending;
                }
            }
            first = false;
            // Boxed so that the (small) idle state above is all an idle connection's task
            // holds: inline, the transfer's nested futures made every connection's task
            // 1,200 bytes even while idle (measured with size_of_val; see
            // docs/benchmarks.md, idle connections). One allocation per request instead.
            let stats = self.worker.request_stats();
            if let Some(s) = stats {
                s.enter(ConnState::Active);
            }
            let ending = Box::pin(self.serve_one()).await;
            if let Some(s) = stats {
                s.leave(ConnState::Active);
            }
            if let Some(ending) = ending {
                return ending;
            }
        }
    }

    /// Read, answer and account for one request whose first bytes are buffered. `None`
    /// when the connection continues.
    async fn serve_one(&mut self) -> Option<Ending> {
        let live = self.worker.live();
        let timeouts = live.options.timeouts;
        let deadline = Instant::now() + timeouts.request_head;
        // Read until a whole head parses (or fails to). The head is parsed once and
        // borrowed from the buffer while the body is read and the mode answers; body
        // bytes read from the socket meanwhile go to their own buffers.
        let (response, head_len, consumed, excess, pending, started) = loop {
            let mut fields = FieldBuf::new();
            match parse_request(&self.buf, &mut fields) {
                Ok(ParseOutcome::Complete { head, head_len }) => {
                    let pending = if self.worker.log.borrow_mut().wants() {
                        Some(Pending::capture(&self.buf[..head_len]))
                    } else {
                        None
                    };
                    // A response's duration runs from its head parsed to its last byte
                    // handed to the kernel: a miss's wait for the origin included, as in
                    // nginx's `$request_time` and HTTP/2's streams. The clock is read
                    // only when something uses the duration: with metrics off and this
                    // request not logged, the request path makes no clock call at all.
                    let started = (self.worker.request_stats().is_some() || pending.is_some())
                        .then(Instant::now);
                    let buffered = &self.buf[head_len..];
                    let mut body = Vec::new();
                    let mut excess = Vec::new();
                    // The body of a GET/HEAD (or of a refused method) is read and dropped
                    // so the next request starts where it should; bodies we cannot bound
                    // are refused. In cache mode the body of another method is read
                    // whole, to be forwarded.
                    let limit = self.mode.forwarded_body_limit(head.method);
                    let taken = match (head.body, limit) {
                        (BodyFraming::None, _) => Ok(0),
                        (BodyFraming::Length(n), Some(limit)) if n > limit => {
                            Err((Some(Refusal::BodyTooLarge), Ending::BadRequest))
                        }
                        (BodyFraming::Length(n), Some(_)) => {
                            // RFC 9110 §10.1.1: a client that sent `Expect: 100-continue`
                            // waits for a 100 before its body (a server MAY omit it once
                            // body bytes have arrived).
                            let waiting = head.expect_continue
                                && head.version == linerate_http::Version::Http11
                                && (buffered.len() as u64) < n;
                            if waiting {
                                let go = response::interim_continue();
                                let mut sent = 0;
                                let _ = self.io.send(self.worker, go, &mut sent).await;
                            }
                            let to = BodySink::Keep(&mut body);
                            read_body(&mut self.io, buffered, n, deadline, to, &mut excess).await
                        }
                        (BodyFraming::Length(n), None) if n <= live.options.max_discarded_body => {
                            let to = BodySink::Drop;
                            read_body(&mut self.io, buffered, n, deadline, to, &mut excess).await
                        }
                        // Cache mode forwards bodies it can buffer whole, so it needs their
                        // length up front (RFC 9110 §15.5.12).
                        (BodyFraming::Chunked, Some(_)) => {
                            Err((Some(Refusal::LengthRequired), Ending::BadRequest))
                        }
                        (BodyFraming::Length(_) | BodyFraming::Chunked, None) => {
                            Err((Some(Refusal::BodyTooLarge), Ending::BadRequest))
                        }
                    };
                    let taken = match taken {
                        Ok(t) => t,
                        Err((why, ending)) => {
                            if let Some(why) = why {
                                self.refuse(why, head_len).await;
                            }
                            return Some(ending);
                        }
                    };
                    let secure = !matches!(self.io, crate::transport::Transport::Plain(_));
                    let http11 = head.version == linerate_http::Version::Http11;
                    let request = crate::exchange::Request {
                        head: &head,
                        body,
                        peer: self.peer_ip,
                        secure,
                        http2: false,
                        interim: crate::exchange::Interim::new(&mut self.io, self.worker, http11),
                    };
                    let response = self.mode.respond(self.worker, request).await;
                    break (
                        response,
                        head_len,
                        head_len + taken,
                        excess,
                        pending,
                        started,
                    );
                }
                Ok(ParseOutcome::Partial) => match self.read_more(deadline).await {
                    Read::Data => {}
                    Read::Eof | Read::Failed => {
                        return Some(if self.buf.is_empty() {
                            Ending::Done
                        } else {
                            Ending::ClientClosed
                        });
                    }
                    Read::TimedOut => {
                        self.refuse(Refusal::HeadTimeout, self.buf.len()).await;
                        return Some(Ending::HeadTimeout);
                    }
                },
                Err(e) => {
                    let why = Refusal::of_head(e, &self.buf);
                    tracing::debug!(
                        error = e.as_str(),
                        reason = why.as_str(),
                        "bad request head"
                    );
                    self.refuse(why, self.buf.len()).await;
                    return Some(Ending::BadRequest);
                }
            }
        };
        // A refused request is logged whatever the sampling, within the log's bound.
        let refusal = response.refusal;
        let mut suppressed = 0;
        let pending = match refusal {
            None => pending,
            Some(why) => {
                self.worker.stats.refusal(why);
                let admitted = self.worker.log.borrow_mut().admit_refusal();
                admitted.map(|left_out| {
                    suppressed = left_out;
                    pending.unwrap_or_else(|| Pending::capture(&self.buf[..head_len]))
                })
            }
        };
        // The head and the body bytes that were buffered are done with; bytes read past
        // the body (a pipelined request) come next.
        self.buf.drain(..consumed);
        self.buf.extend_from_slice(&excess);
        let persistence = response.persistence;
        let (status, cache) = (response.status, response.cache);
        let stats = self.worker.request_stats();
        // A refused request's line is admitted after its answer was made: its clock
        // starts here.
        let started = started.or_else(|| pending.is_some().then(Instant::now));
        let mut sent = 0;
        let result = self.io.send(self.worker, response, &mut sent).await;
        let duration_us = started.map_or(0, |t| {
            u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
        });
        if let Some(s) = stats {
            s.response(status.code(), cache, duration_us);
        }
        if self.sampled {
            self.rtt_us = crate::tcpsample::during(self.worker, self.io.tcp());
        }
        if let Some(pending) = pending {
            let done = Finished {
                status: status.code(),
                bytes: sent,
                duration_us,
                cache,
                rtt_us: self.rtt_us,
                congestion: self.congestion.as_deref(),
                worker: self.worker.index,
                refusal,
                suppressed,
            };
            self.log(&pending, &done);
        }
        if let Err(e) = result {
            match e {
                // Our side failed: worth an operator's attention.
                response::TransferError::Disk(_) | response::TransferError::Truncated => {
                    tracing::warn!(error = %e, kind = e.as_str(), "response aborted")
                }
                // The client's side: routine on the Internet.
                _ => tracing::debug!(error = %e, kind = e.as_str(), "response aborted"),
            }
            return Some(Ending::Aborted);
        }
        match persistence {
            Persistence::KeepAlive if !self.worker.stopping() => None,
            Persistence::KeepAlive => Some(Ending::Stopping),
            Persistence::Close => Some(Ending::Done),
        }
    }

    /// Idle: give the buffer back and wait for the next request's first bytes, for the
    /// keep-alive timeout (the head timeout before the first request), or until a
    /// graceful stop. `None` when bytes arrived.
    async fn wait_for_request(&mut self, first: bool) -> Option<Ending> {
        let live = self.worker.live();
        let timeouts = live.options.timeouts;
        let now = Instant::now();
        let deadline = now
            + if first {
                timeouts.request_head
            } else {
                timeouts.keepalive
            };
        // Only plain connections park (see `transport`); for the others the idle
        // wait simply lasts until the deadline.
        let park_at = if self.io.parkable() {
            now + live.options.timeouts.park_idle_after
        } else {
            deadline
        };
        loop {
            self.worker.give_buffer(std::mem::take(&mut self.buf));
            // Stopping: a connection that has not sent its first request yet was
            // accepted just now, and its client is sending it: it is answered (with
            // `Connection: close`), bounded by the head timeout and the grace period.
            // An idle keep-alive connection closes at once, or, after a hand-over to
            // the next process, waits a moment for one more request (`begin_stop`).
            let stopping = self.worker.stopping();
            let until = match (stopping, first, self.worker.linger_until()) {
                (false, _, _) | (true, true, _) => deadline,
                (true, false, Some(linger)) => deadline.min(linger),
                (true, false, None) => return Some(Ending::Stopping),
            };
            // No parking once stopping: the parking task closes what it holds.
            let wake_at = if stopping { until } else { until.min(park_at) };
            tokio::select! {
                r = timeout_at(wake_at, self.io.readable()) => match r {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Some(Ending::ClientClosed),
                    Err(_) if stopping => return Some(Ending::Stopping),
                    Err(_) if Instant::now() >= deadline => return Some(Ending::Idle),
                    Err(_) => return Some(Ending::Parked(deadline)),
                },
                // Wakes the wait when a stop begins, to apply the rule above.
                _ = self.worker.stopped(), if !stopping => continue,
            }
            self.buf = self.worker.take_buffer();
            self.buf.reserve(READ_CHUNK);
            match self.io.try_read_buf(&mut self.buf) {
                Ok(0) => return Some(Ending::Done),
                Ok(_) => return None,
                // Readiness can be spurious; wait again.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Some(Ending::ClientClosed),
            }
        }
    }

    /// On a connection's first bytes: `Some(Ending::Http2)` when they are the HTTP/2
    /// preface (read until it is whole or differs from it), `None` for HTTP/1.
    async fn h2c_preface(&mut self) -> Option<Ending> {
        const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let deadline = Instant::now() + self.worker.live().options.timeouts.request_head;
        loop {
            let n = self.buf.len().min(PREFACE.len());
            if self.buf[..n] != PREFACE[..n] {
                return None;
            }
            if n == PREFACE.len() {
                return Some(Ending::Http2);
            }
            match self.read_more(deadline).await {
                Read::Data => {}
                Read::Eof | Read::Failed => return Some(Ending::ClientClosed),
                Read::TimedOut => return Some(Ending::HeadTimeout),
            }
        }
    }

    /// Append whatever the socket has, waiting until `deadline`.
    async fn read_more(&mut self, deadline: Instant) -> Read {
        if self.buf.capacity() == 0 {
            self.buf = self.worker.take_buffer();
        }
        // Never hold more than a maximal head plus one read: the parser rejects past it.
        if self.buf.len() > MAX_HEAD_BYTES + READ_CHUNK {
            return Read::Failed;
        }
        self.buf.reserve(READ_CHUNK);
        loop {
            match self.io.try_read_buf(&mut self.buf) {
                Ok(0) => return Read::Eof,
                Ok(_) => return Read::Data,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Read::Failed,
            }
            match timeout_at(deadline, self.io.readable()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Read::Failed,
                Err(_) => return Read::TimedOut,
            }
        }
    }

    /// Buffer one access-log line.
    fn log(&self, pending: &Pending, done: &Finished<'_>) {
        self.worker.date.with(|date| {
            self.worker
                .log
                .borrow_mut()
                .record(self.peer, date, pending, done, &self.worker.stats)
        });
    }

    /// Best-effort answer to a request refused before it reached the mode (its body says
    /// why), then close (framing can no longer be trusted). Counted, and logged with
    /// `reason=` within the access log's bound; the line's request is the first `head`
    /// bytes of the buffer (all of it when the head never parsed).
    async fn refuse(&mut self, why: Refusal, head: usize) {
        let response: Response = response::refused(self.worker, why, Persistence::Close);
        let status = response.status.code();
        let mut sent = 0;
        let _ = self.io.send(self.worker, response, &mut sent).await;
        self.worker.stats.response(status, CachePhase::Local, 0);
        self.worker.stats.refusal(why);
        let admitted = self.worker.log.borrow_mut().admit_refusal();
        if let Some(suppressed) = admitted {
            let pending = Pending::capture(&self.buf[..head.min(self.buf.len())]);
            let done = Finished {
                status,
                bytes: sent,
                duration_us: 0,
                cache: CachePhase::Local,
                rtt_us: self.rtt_us,
                congestion: self.congestion.as_deref(),
                worker: self.worker.index,
                refusal: Some(why),
                suppressed,
            };
            self.log(&pending, &done);
        }
    }
}

/// Where [`read_body`] puts the body.
enum BodySink<'a> {
    /// Append it here (to forward it).
    Keep(&'a mut Vec<u8>),
    /// Discard it.
    Drop,
}

/// Read a request body of `n` bytes: first from `buffered` (the bytes already read after
/// the head), then from the socket until `deadline`. Returns how many of `buffered`
/// belong to the body; bytes read from the socket past the body (a pipelined request)
/// go to `excess`. On failure, why it is refused (`None`: the client is gone) and how
/// the connection ends.
async fn read_body(
    io: &mut Transport,
    buffered: &[u8],
    n: u64,
    deadline: Instant,
    mut sink: BodySink<'_>,
    excess: &mut Vec<u8>,
) -> Result<usize, (Option<Refusal>, Ending)> {
    let here = usize::try_from(n).map_or(buffered.len(), |n| n.min(buffered.len()));
    if let BodySink::Keep(out) = &mut sink {
        out.extend_from_slice(&buffered[..here]);
    }
    let mut left = n - here as u64;
    let mut chunk = Vec::with_capacity(READ_CHUNK);
    while left > 0 {
        chunk.clear();
        match io.try_read_buf(&mut chunk) {
            Ok(0) => return Err((None, Ending::ClientClosed)),
            Ok(got) => {
                let body = usize::try_from(left).map_or(got, |l| l.min(got));
                if let BodySink::Keep(out) = &mut sink {
                    out.extend_from_slice(&chunk[..body]);
                }
                excess.extend_from_slice(&chunk[body..]);
                left -= body as u64;
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err((None, Ending::ClientClosed)),
        }
        match timeout_at(deadline, io.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err((None, Ending::ClientClosed)),
            Err(_) => return Err((Some(Refusal::HeadTimeout), Ending::HeadTimeout)),
        }
    }
    Ok(here)
}
