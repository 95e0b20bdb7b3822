//! HTTP/2 connections (RFC 9113): h2c with prior knowledge on plain listeners, ALPN `h2`
//! on TLS ones. The protocol itself (frames, HPACK, stream states, flow control, the
//! flood defences) is the sans-I/O `linerate_http::h2::conn`; this module drives it on
//! the worker and gives each stream to the same handlers, responses and send paths as
//! HTTP/1.1.
//!
//! Each request stream runs as its own task: it builds the request (the pseudo-header
//! fields made into the HTTP/1.1 head the handlers already parse, after the state
//! machine has refused every field an HTTP/1.1 head could not carry), asks the mode for
//! a [`Response`], and queues what the response's body is made of: byte strings and
//! *file ranges*, never file bytes. The connection task owns the socket: it reads and
//! feeds the state machine, sends HEADERS, and turns queued file ranges into DATA
//! frames, a 9-byte header followed by `sendfile` of the payload (zero copy on plain
//! and kernel-TLS connections; user-space TLS copies, as HTTP/1.1 does), up to the
//! flow-control windows and the client's `SETTINGS_MAX_FRAME_SIZE`. On kernel TLS a
//! turn of 128 KiB or more goes through the worker's pipe instead: headers written,
//! payloads spliced from the file, the whole sent with one splice (`transfer::send_parts`).
//!
//! A stream waiting on its handler (a fill, the origin, a collapsed LL-HLS request) or
//! on the disk (its task makes the next window resident on the disk pool before queueing
//! it) holds nothing up: the connection sends the other streams meanwhile. Streams are
//! served by RFC 9218 priority: lowest urgency first; within one urgency, incremental
//! streams take turns and the others go in stream order. A playlist, manifest or
//! LL-HLS part is sent at urgency 2 unless the client asked for more (RFC 9218 §9
//! leaves the server free to), so it never queues behind a segment.
//!
//! Not here: the HTTP/1.1 connection loop (`conn`), the transports' send paths
//! (`transfer::send_parts`, `tls::send::send_parts`).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::rc::Rc;
use std::sync::Arc;

use linerate_http::h2::conn::{Connection, Event, Limits, RequestHead2};
use linerate_http::h2::frame::{self, ErrorCode, HEADER_LEN};
use linerate_http::range::ByteRange;
use linerate_http::request::FieldBuf;
use linerate_http::{parse_request, ParseOutcome};
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

use crate::accesslog::{Finished, Pending};
use crate::context::Worker;
use crate::handler::Mode;
use crate::openfiles::Hot;
use crate::response::{self, Body, Piece, Response, TransferError};
use crate::stats::{CachePhase, CloseReason, ConnState, Refusal};
use crate::transfer::Part;
use crate::transport::Transport;

/// What let a connection speak HTTP/2, read again when its worker applies a reload (an
/// idle connection is woken for it, see `H2::run`): a
/// reload that turns HTTP/2 off for it sends GOAWAY (its open streams finish; the
/// client's next connection speaks HTTP/1.1). Other reloads need none: each stream's
/// request reads the options in force when it starts, as an HTTP/1.1 request does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Gate {
    /// h2c with prior knowledge on the plain listener configured as this address: its
    /// `[tcp.listeners]` entry's `http2`, else `[server] http2`.
    Plain(std::net::SocketAddr),
    /// ALPN `h2` on a TLS listener (`[tls] http2`, in the worker's TLS configuration).
    Tls,
}

impl Gate {
    /// Whether the worker's settings in force let the connection speak HTTP/2.
    pub(crate) fn open(self, worker: &Worker) -> bool {
        match self {
            Gate::Plain(listen) => {
                let live = worker.live();
                live.options
                    .tcp
                    .http2_for(listen)
                    .unwrap_or(live.options.http2)
            }
            Gate::Tls => worker.tls_config().is_some_and(|c| {
                c.alpn_protocols
                    .iter()
                    .any(|p| p == crate::tls::config::ALPN_H2)
            }),
        }
    }
}

/// Bytes read from the socket at once.
const READ_CHUNK: usize = 16 * 1024;

/// Received bytes held while the state machine is not consuming (its output is full
/// because the client does not read): reading stops here, and TCP holds the client.
const MAX_BUFFERED: usize = 256 * 1024;

/// Body bytes a stream's task queues ahead of the connection (file ranges cost no
/// memory; byte strings do: relayed origin bytes, multipart heads).
const QUEUE_AHEAD: u64 = 2 * 1024 * 1024;

/// Most DATA payload bytes one stream sends in one turn before the scheduler looks
/// again: a playlist that became ready waits at most this behind a segment.
const TURN_BYTES: u32 = 256 * 1024;

/// Body bytes (not file ranges) a stream's task may hold in memory ahead of the
/// connection: relayed origin bytes and multipart heads. A client that stops reading
/// holds at most this (plus one piece) per stream, for at most the send timeout.
const HELD_BYTES: u64 = 64 * 1024;

/// The largest DATA payload on a kernel-TLS connection: header and payload make one
/// full TLS record (2^14 bytes of plaintext).
const KTLS_FRAME: u32 = (1 << 14) - HEADER_LEN as u32;

/// Urgency given to playlists, manifests and LL-HLS parts (RFC 9218 §4.1: 0 is the
/// most urgent, 3 the default).
const PLAYLIST_URGENCY: u8 = 2;

/// An open file a DATA frame's payload comes from: appliance mode shares its
/// open-file cache's `Rc`, cache mode the store's `Arc`.
#[derive(Clone)]
enum FileRef {
    Local(Rc<File>),
    Shared(Arc<File>),
}

impl std::ops::Deref for FileRef {
    type Target = File;
    fn deref(&self) -> &File {
        match self {
            FileRef::Local(f) => f,
            FileRef::Shared(f) => f,
        }
    }
}

/// What a stream's body is made of, queued by its task for the connection.
enum Chunk {
    Bytes(Vec<u8>),
    File(FileRef, ByteRange, Option<Rc<Hot>>),
}

impl Chunk {
    fn len(&self) -> u64 {
        match self {
            Chunk::Bytes(b) => b.len() as u64,
            Chunk::File(_, r, _) => r.len,
        }
    }
}

/// Response fields: lowercase names, `:status` first.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// A stream's response as its task hands it to the connection.
#[derive(Default)]
struct Out {
    /// Interim (1xx) responses' fields, sent as HEADERS before the final ones.
    interim: Vec<Fields>,
    /// The response's fields (`:status` first), until sent as HEADERS.
    fields: Option<Fields>,
    headers_sent: bool,
    chunks: VecDeque<Chunk>,
    /// Bytes in `chunks`.
    queued: u64,
    /// Of those, bytes held in memory (byte chunks).
    held: u64,
    /// No more chunks will come.
    done: bool,
    /// The body could not be completed: the stream is reset, never ended cleanly.
    failed: Option<&'static str>,
    /// The task waits for `queued` to drop.
    blocked: bool,
    /// RFC 9218 urgency (0-7) and incremental flag.
    urgency: u8,
    incremental: bool,
    /// A playlist or manifest (sent at [`PLAYLIST_URGENCY`] at least).
    playlist: bool,
    /// For the access log and counters.
    status: u16,
    cache: Option<CachePhase>,
    refusal: Option<Refusal>,
    sent: u64,
}

/// One turn's frames, planned before they are sent (`H2::send_turn`). Kept from turn
/// to turn, so its buffers are allocated once per connection, not per frame or turn.
#[derive(Default)]
struct Turn {
    /// Everything the turn sends from memory, in order: control frames, DATA frame
    /// headers, byte payloads.
    bytes: Vec<u8>,
    /// File payloads: where in `bytes` each goes (before the byte at that offset), the
    /// index of its file in `files`, and its range.
    payloads: Vec<(usize, usize, ByteRange)>,
    /// The files the payloads come from: one entry per queued chunk, not per frame.
    files: Vec<(FileRef, Option<Rc<Hot>>)>,
    /// The parts handed to the transport: empty between turns, kept for its allocation.
    parts: Vec<Part<'static>>,
}

impl Turn {
    fn clear(&mut self) {
        self.bytes.clear();
        self.payloads.clear();
        self.files.clear();
    }

    /// `n` bytes of `files[file]` from `start` follow what `bytes` holds now.
    fn frame_payload(&mut self, file: usize, start: u64, n: u32) {
        let range = ByteRange {
            start,
            len: u64::from(n),
        };
        self.payloads.push((self.bytes.len(), file, range));
    }

    /// Send the turn as one batch: runs of `bytes` between the file payloads.
    async fn send(&mut self, worker: &Worker, io: &mut Transport) -> Result<(), TransferError> {
        let mut parts = recycle(std::mem::take(&mut self.parts));
        let mut at = 0;
        for &(upto, i, range) in &self.payloads {
            if upto > at {
                parts.push(Part::Bytes(&self.bytes[at..upto]));
                at = upto;
            }
            let (file, hot) = &self.files[i];
            parts.push(Part::File(file, range, hot.as_deref()));
        }
        if at < self.bytes.len() {
            parts.push(Part::Bytes(&self.bytes[at..]));
        }
        let r = if parts.is_empty() {
            Ok(())
        } else {
            let mut sent = 0;
            io.send_parts(worker, &parts, &mut sent).await
        };
        self.parts = recycle(parts);
        r
    }
}

/// Whether the socket has bytes (or an end) to read as of the event loop's last look,
/// without waiting and without a system call.
fn readable_now(tcp: &tokio::net::TcpStream) -> bool {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    tcp.poll_read_ready(&mut cx).is_ready()
}

/// An empty vector of parts holding `v`'s allocation, for borrows of another lifetime
/// (collected in place: no allocation).
fn recycle<'a>(mut v: Vec<Part<'_>>) -> Vec<Part<'a>> {
    v.clear();
    v.into_iter().map(|_| unreachable!("cleared")).collect()
}

/// One open request stream.
struct Stream {
    out: Rc<RefCell<Out>>,
    /// Wakes the stream's task when its queue has room again.
    room: Rc<Notify>,
    task: tokio::task::JoinHandle<()>,
    started: Instant,
    pending: Option<Pending>,
    /// Position in the incremental round.
    turn: u64,
}

/// Serve one HTTP/2 connection until it closes (HTTP/2 connections never park); why
/// it closed. `buf` holds bytes already received (the client preface at least in part).
pub(crate) async fn serve(
    worker: &Rc<Worker>,
    mode: &Rc<Mode>,
    io: Transport,
    buf: Vec<u8>,
    gate: Gate,
) -> CloseReason {
    let logging = worker.log.borrow().enabled();
    let peer = if logging || mode.wants_peer() {
        io.tcp().peer_addr().ok()
    } else {
        None
    };
    if let Some(s) = worker.request_stats() {
        s.http2_connection();
    }
    let mut c = H2 {
        worker,
        mode,
        secure: io.secure(),
        io,
        conn: Connection::new(Limits::default()),
        buf,
        streams: HashMap::new(),
        wake: Rc::new(Notify::new()),
        peer,
        turns: 0,
        going_away: false,
        gate,
        reloads: worker.reloads(),
        turn: Turn::default(),
    };
    let why = c.run().await;
    for (_, s) in c.streams.drain() {
        s.task.abort();
    }
    worker.give_buffer(std::mem::take(&mut c.buf));
    c.io.goodbye();
    tracing::trace!(why = ?why, "h2 connection closed");
    why
}

struct H2<'w> {
    worker: &'w Rc<Worker>,
    mode: &'w Rc<Mode>,
    secure: bool,
    io: Transport,
    conn: Connection,
    /// Received bytes not yet consumed by the state machine.
    buf: Vec<u8>,
    streams: HashMap<u32, Stream>,
    /// Woken by stream tasks when they queue something.
    wake: Rc<Notify>,
    peer: Option<std::net::SocketAddr>,
    /// Counter for the incremental round.
    turns: u64,
    /// A GOAWAY was sent: finish the open streams, then close.
    going_away: bool,
    /// What let this connection speak HTTP/2 (read again after a reload).
    gate: Gate,
    /// The worker's reload count when the gate was last read.
    reloads: u64,
    /// The DATA turn being planned and sent (its buffers reused).
    turn: Turn,
}

impl H2<'_> {
    async fn run(&mut self) -> CloseReason {
        let timeouts = self.worker.live().options.timeouts;
        // The preface and first request must come within the head timeout, and the
        // client must acknowledge our SETTINGS within it (RFC 9113 §6.5.3).
        let opened = Instant::now();
        let mut idle_since = opened;
        let mut first = true;
        // Since when every stream with bytes to send has waited on flow control.
        let mut blocked_since: Option<Instant> = None;
        // The client's end of stream was read between DATA turns.
        let mut ended = false;
        loop {
            // Bytes the state machine left (it stops consuming while its output is
            // full, until that is written below).
            if !self.buf.is_empty() {
                if let Err(why) = self.receive() {
                    let _ = self.flush().await;
                    return why;
                }
            }
            if self.flush().await.is_err() {
                return CloseReason::Aborted;
            }
            match self.send_some().await {
                Ok(true) => {
                    // Let the streams' tasks queue more (and the worker's other
                    // connections run) between turns.
                    tokio::task::yield_now().await;
                    // Requests that came meanwhile (a playlist while a segment is sent)
                    // are read now, not once nothing is left to send, so that their
                    // priority counts. No system call unless the socket is readable.
                    // The client's end of stream is acted on where it was before: once
                    // nothing is left to send (below).
                    if !ended && self.buf.len() < MAX_BUFFERED && readable_now(self.io.tcp()) {
                        match self.read() {
                            Ok(true) => {}
                            Ok(false) => ended = true,
                            Err(why) => {
                                let _ = self.flush().await;
                                return why;
                            }
                        }
                    }
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(error = %e, kind = e.as_str(), "h2 connection aborted");
                    return CloseReason::Aborted;
                }
            }
            if self.going_away && self.streams.is_empty() {
                let _ = self.flush().await;
                return CloseReason::Stopping;
            }
            if !self.streams.is_empty() {
                idle_since = Instant::now();
                first = false;
            }
            let stopping = self.worker.stopping();
            if stopping && !self.going_away {
                self.conn.go_away(ErrorCode::NO_ERROR, b"");
                self.going_away = true;
                continue;
            }
            if self.reloads != self.worker.reloads() && !self.going_away {
                // A reload: one integer compare per turn until one happens.
                self.reloads = self.worker.reloads();
                if !self.gate.open(self.worker) {
                    tracing::debug!("HTTP/2 turned off by a reload: GOAWAY");
                    self.conn.go_away(ErrorCode::NO_ERROR, b"http2 turned off");
                    self.going_away = true;
                    continue;
                }
            }
            let idle_deadline = idle_since
                + if first {
                    timeouts.request_head
                } else {
                    timeouts.keepalive
                };
            // A client that opens no window for the send timeout is treated as one
            // that stopped reading (HTTP/1.1's send timeout): its streams hold file
            // ranges and up to [`HELD_BYTES`] each, and no longer.
            if self.waiting_on_window() {
                let since = *blocked_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= timeouts.send {
                    tracing::debug!("h2 client opened no window for the send timeout");
                    self.conn.go_away(ErrorCode::NO_ERROR, b"send timeout");
                    let _ = self.flush().await;
                    return CloseReason::Aborted;
                }
            } else {
                blocked_since = None;
            }
            let window_deadline = blocked_since.map_or(idle_deadline, |t| t + timeouts.send);
            // An idle connection holds no read buffer (as an idle HTTP/1.1 one): it goes
            // back to the worker's pool until the next bytes arrive.
            if self.streams.is_empty() && self.buf.is_empty() {
                self.worker.give_buffer(std::mem::take(&mut self.buf));
            }
            let settings_deadline = opened + timeouts.request_head;
            let settings_pending = !self.conn.settings_acked();
            tokio::select! {
                r = self.io.readable(), if self.buf.len() < MAX_BUFFERED => {
                    if r.is_err() {
                        return CloseReason::ClientClosed;
                    }
                    match self.read() {
                        Ok(true) => {}
                        Ok(false) => return if self.streams.is_empty() {
                            CloseReason::Done
                        } else {
                            CloseReason::ClientClosed
                        },
                        Err(why) => {
                            let _ = self.flush().await;
                            return why;
                        }
                    }
                }
                _ = self.wake.notified() => {}
                _ = sleep_until(idle_deadline), if self.streams.is_empty() => {
                    self.conn.go_away(ErrorCode::NO_ERROR, b"");
                    let _ = self.flush().await;
                    return if first { CloseReason::HeadTimeout } else { CloseReason::Idle };
                }
                _ = self.worker.stopped(), if !stopping => {}
                _ = self.worker.reloaded(), if !self.going_away => {}
                _ = sleep_until(window_deadline), if blocked_since.is_some() => {}
                _ = sleep_until(settings_deadline), if settings_pending => {
                    if !self.conn.settings_acked() {
                        self.conn.go_away(ErrorCode::SETTINGS_TIMEOUT, b"");
                        let _ = self.flush().await;
                        return CloseReason::HeadTimeout;
                    }
                }
            }
        }
    }

    /// Read what the socket has and feed it to the state machine. `Ok(false)` at end of
    /// stream.
    fn read(&mut self) -> Result<bool, CloseReason> {
        if self.buf.capacity() == 0 {
            self.buf = self.worker.take_buffer();
        }
        self.buf.reserve(READ_CHUNK);
        loop {
            match self.io.try_read_buf(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(CloseReason::ClientClosed),
            }
        }
        self.receive()?;
        Ok(true)
    }

    /// Feed buffered bytes to the state machine and act on its events.
    fn receive(&mut self) -> Result<(), CloseReason> {
        let consumed = match self.conn.recv(&self.buf) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = ?e, "h2 connection error");
                return Err(CloseReason::BadRequest);
            }
        };
        self.buf.drain(..consumed);
        while let Some(event) = self.conn.next_event() {
            match event {
                Event::Request {
                    stream,
                    head,
                    end_stream,
                } => {
                    if !end_stream && self.mode.forwarded_body_limit(head.method()).is_some() {
                        // Cache mode forwards this method's body to the origin, which
                        // this HTTP/2 layer does not do yet: RFC 9113 §7's answer for
                        // "ask me over HTTP/1.1", which browsers and curl retry on.
                        self.conn.reset_stream(stream, ErrorCode::HTTP_1_1_REQUIRED);
                        continue;
                    }
                    // Other bodies are discarded, as HTTP/1.1 discards them (the
                    // state machine returns their flow-control credit).
                    self.start(stream, &head)
                }
                Event::RequestTooLarge { stream } => {
                    self.start_refused(stream, Refusal::HeadTooLarge);
                }
                Event::Reset { stream, .. } => {
                    if let Some(s) = self.streams.remove(&stream) {
                        s.task.abort();
                        self.finish(stream, s, false);
                    }
                }
                Event::PriorityUpdate { stream, priority } => {
                    if let Some(s) = self.streams.get(&stream) {
                        let mut o = s.out.borrow_mut();
                        // A playlist keeps at least its own urgency (see `queue_response`).
                        o.urgency = if o.playlist {
                            priority.urgency.min(PLAYLIST_URGENCY)
                        } else {
                            priority.urgency
                        };
                        o.incremental = priority.incremental;
                    }
                }
                Event::Data { .. } | Event::WindowOpened => {}
                Event::GoAway { .. } => self.going_away = true,
            }
        }
        Ok(())
    }

    /// Start a stream's task for a request the state machine accepted.
    fn start(&mut self, id: u32, head: &RequestHead2) {
        if self.going_away {
            self.conn.reset_stream(id, ErrorCode::REFUSED_STREAM);
            return;
        }
        // The head the handlers parse: the state machine has already refused every
        // name or value an HTTP/1.1 head could not carry (CR, LF, NUL, uppercase,
        // connection-specific fields), so this cannot smuggle a second request.
        let mut raw = Vec::with_capacity(256);
        raw.extend_from_slice(head.method_token().as_bytes());
        raw.push(b' ');
        raw.extend_from_slice(head.path());
        raw.extend_from_slice(b" HTTP/1.1\r\n");
        if let Some(authority) = head.authority() {
            raw.extend_from_slice(b"host: ");
            raw.extend_from_slice(authority);
            raw.extend_from_slice(b"\r\n");
        }
        let priority = head.priority();
        let mut cookies: Vec<&[u8]> = Vec::new();
        for (name, value) in head.fields() {
            match name {
                // :authority (or host) is already the Host field.
                b"host" => continue,
                // Split cookie fields are one field again (RFC 9113 §8.2.3).
                b"cookie" => {
                    cookies.push(value);
                    continue;
                }
                _ => {}
            }
            raw.extend_from_slice(name);
            raw.extend_from_slice(b": ");
            raw.extend_from_slice(value);
            raw.extend_from_slice(b"\r\n");
        }
        if !cookies.is_empty() {
            raw.extend_from_slice(b"cookie: ");
            raw.extend_from_slice(&cookies.join(&b"; "[..]));
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"\r\n");
        let pending = if self.worker.log.borrow_mut().wants() {
            let line_end = raw.iter().position(|&b| b == b'\r').unwrap_or(raw.len());
            let mut logged = raw.clone();
            // The log's request line says the protocol the client spoke.
            logged.splice(line_end - 8..line_end, b"HTTP/2.0".iter().copied());
            Some(Pending::capture(&logged))
        } else {
            None
        };
        let out = Rc::new(RefCell::new(Out {
            urgency: priority.urgency,
            incremental: priority.incremental,
            ..Out::default()
        }));
        let room = Rc::new(Notify::new());
        let task = tokio::task::spawn_local(produce(
            self.worker.clone(),
            self.mode.clone(),
            raw,
            self.peer.map(|p| p.ip()),
            self.secure,
            out.clone(),
            room.clone(),
            self.wake.clone(),
        ));
        self.open(id, out, room, task, pending);
    }

    /// A stream whose request is refused before it reaches the mode.
    fn start_refused(&mut self, id: u32, why: Refusal) {
        let response = response::refused(self.worker, why, linerate_http::Persistence::KeepAlive);
        let out = Rc::new(RefCell::new(Out::default()));
        queue_response(&out, response, Some(why));
        out.borrow_mut().done = true;
        let task = tokio::task::spawn_local(async {});
        self.open(id, out, Rc::new(Notify::new()), task, None);
    }

    fn open(
        &mut self,
        id: u32,
        out: Rc<RefCell<Out>>,
        room: Rc<Notify>,
        task: tokio::task::JoinHandle<()>,
        pending: Option<Pending>,
    ) {
        if self.streams.is_empty() {
            if let Some(s) = self.worker.request_stats() {
                s.enter(ConnState::Active);
            }
        }
        self.turns += 1;
        self.streams.insert(
            id,
            Stream {
                out,
                room,
                task,
                started: Instant::now(),
                pending,
                turn: self.turns,
            },
        );
    }

    /// Write the state machine's pending output (control frames, HEADERS).
    async fn flush(&mut self) -> Result<(), TransferError> {
        if self.conn.output().is_empty() {
            return Ok(());
        }
        let bytes = std::mem::take(self.conn.output());
        let mut sent = 0;
        let r = self
            .io
            .send_parts(self.worker, &[Part::Bytes(&bytes)], &mut sent)
            .await;
        let mut bytes = bytes;
        bytes.clear();
        // Keep the allocation for the next frames.
        if self.conn.output().is_empty() {
            *self.conn.output() = bytes;
        }
        r
    }

    /// Send HEADERS for every stream whose response is ready, then one turn of DATA for
    /// the most urgent stream that has bytes and window. `Ok(false)`: nothing to send.
    async fn send_some(&mut self) -> Result<bool, TransferError> {
        // Interim HEADERS (103 Early Hints relayed from the origin), then final HEADERS
        // (they cost no window), in stream order.
        for (&id, s) in &self.streams {
            let mut out = s.out.borrow_mut();
            for fields in std::mem::take(&mut out.interim) {
                let refs: Vec<(&[u8], &[u8])> = fields
                    .iter()
                    .map(|(n, v)| (n.as_slice(), v.as_slice()))
                    .collect();
                self.conn.send_headers(id, &refs, false);
            }
        }
        let mut ready: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| s.out.borrow().fields.is_some())
            .map(|(&id, _)| id)
            .collect();
        ready.sort_unstable();
        let mut finished = Vec::new();
        for id in ready {
            let s = &self.streams[&id];
            let mut out = s.out.borrow_mut();
            let fields = out.fields.take().unwrap_or_default();
            let end = out.done && out.chunks.is_empty() && out.failed.is_none();
            let refs: Vec<(&[u8], &[u8])> = fields
                .iter()
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .collect();
            self.conn.send_headers(id, &refs, end);
            out.headers_sent = true;
            if end {
                finished.push(id);
            }
        }
        for id in finished {
            if let Some(s) = self.streams.remove(&id) {
                self.finish(id, s, true);
            }
        }
        // Failed bodies: reset at once, whatever is still queued (the client must not
        // take a cut body for a whole one, and the rest would not complete it).
        let failed: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| s.out.borrow().failed.is_some())
            .map(|(&id, _)| id)
            .collect();
        for id in failed {
            if let Some(s) = self.streams.remove(&id) {
                self.conn.reset_stream(id, ErrorCode::INTERNAL_ERROR);
                self.finish(id, s, false);
            }
        }
        let Some(id) = self.pick() else {
            let had_output = !self.conn.output().is_empty();
            self.flush().await?;
            return Ok(had_output);
        };
        self.send_turn(id).await?;
        Ok(true)
    }

    /// Some stream has body bytes queued and none of them has window to send them.
    fn waiting_on_window(&self) -> bool {
        self.streams.iter().any(|(&id, s)| {
            let o = s.out.borrow();
            o.headers_sent && o.queued > 0 && self.conn.send_window(id) == 0
        }) && self.pick().is_none()
    }

    /// The stream to send next: lowest urgency with bytes (or an end) to send and window
    /// for them; within one urgency, the incremental stream that waited longest, else
    /// the lowest stream id.
    fn pick(&self) -> Option<u32> {
        let mut best: Option<(u8, bool, u64, u32)> = None;
        for (&id, s) in &self.streams {
            let o = s.out.borrow();
            if !o.headers_sent || o.failed.is_some() {
                continue;
            }
            let has_bytes = o.chunks.iter().any(|c| c.len() > 0);
            let ends = o.done && !has_bytes;
            if !ends && (!has_bytes || self.conn.send_window(id) == 0) {
                continue;
            }
            // Non-incremental first within an urgency, in stream order; incremental
            // ones by turn.
            let key = (
                o.urgency,
                o.incremental,
                if o.incremental { s.turn } else { id as u64 },
                id,
            );
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        best.map(|b| b.3)
    }

    /// Send up to [`TURN_BYTES`] of stream `id`'s body as DATA frames (ending it when
    /// its body is done), with any pending control frames in front.
    ///
    /// The turn is planned first, then sent as one batch of parts: every byte the turn
    /// sends from memory (control frames, the 9-byte frame headers, byte payloads) goes
    /// into one reused buffer, each file payload is a range of a file the turn holds
    /// once per queued chunk (not per frame), and both send windows are debited once
    /// for the whole turn. So a frame costs its two system calls and no allocation,
    /// reference count or stream lookup of its own.
    async fn send_turn(&mut self, id: u32) -> Result<(), TransferError> {
        // On kernel TLS a frame's header and payload fill exactly one 16 KiB record:
        // each sendfile ends its record, so a 16,384-byte payload after the 9-byte
        // header would cost a second, 9-byte record per frame.
        let max_frame = match self.io {
            Transport::Ktls(_) => self.conn.peer_max_frame_size().min(KTLS_FRAME),
            _ => self.conn.peer_max_frame_size(),
        };
        let mut t = std::mem::take(&mut self.turn);
        t.clear();
        // Pending control frames (HEADERS, WINDOW_UPDATE, ...) go in front.
        let output = self.conn.output();
        t.bytes.extend_from_slice(output);
        output.clear();
        let mut window = self.conn.send_window(id).min(TURN_BYTES);
        let s = self.streams.get_mut(&id).expect("picked stream");
        let mut total = 0u32;
        let mut ended = false;
        {
            let mut out = s.out.borrow_mut();
            // The index in `t.files` of the front chunk's file, once taken.
            let mut front_file: Option<usize> = None;
            while let Some(front) = out.chunks.front_mut() {
                let len = front.len();
                if len == 0 {
                    out.chunks.pop_front();
                    front_file = None;
                    continue;
                }
                if window == 0 {
                    break;
                }
                let n = len.min(u64::from(window)).min(u64::from(max_frame)) as u32;
                let header_at = t.bytes.len();
                t.bytes.extend_from_slice(&[0; HEADER_LEN]);
                let bytes = match front {
                    Chunk::Bytes(b) => {
                        t.bytes.extend_from_slice(&b[..n as usize]);
                        b.drain(..n as usize);
                        true
                    }
                    Chunk::File(f, r, hot) => {
                        let i = *front_file.get_or_insert_with(|| {
                            t.files.push((f.clone(), hot.clone()));
                            t.files.len() - 1
                        });
                        t.frame_payload(i, r.start, n);
                        r.start += u64::from(n);
                        r.len -= u64::from(n);
                        false
                    }
                };
                if u64::from(n) == len {
                    out.chunks.pop_front();
                    front_file = None;
                }
                out.queued -= u64::from(n);
                if bytes {
                    out.held -= u64::from(n);
                }
                let end = out.done && out.chunks.is_empty() && out.failed.is_none();
                t.bytes[header_at..header_at + HEADER_LEN]
                    .copy_from_slice(&frame::data_header(id, n, end));
                window -= n;
                total += n;
                out.sent += u64::from(n);
                if end {
                    ended = true;
                    break;
                }
            }
            // Debit both windows for the turn's frames (`window` was the stream's: it
            // is open).
            if total > 0 {
                self.conn.data_frames(id, total, ended);
            }
            if !ended && out.done && out.chunks.is_empty() && out.failed.is_none() {
                // Everything sent: an empty DATA frame carries the END_STREAM flag.
                if let Some(header) = self.conn.data_frame(id, 0, true) {
                    t.bytes.extend_from_slice(&header);
                }
                ended = true;
            }
            if out.blocked && out.queued < QUEUE_AHEAD / 2 && out.held < HELD_BYTES {
                out.blocked = false;
                s.room.notify_one();
            }
        }
        let r = t.send(self.worker, &mut self.io).await;
        t.files.clear();
        self.turn = t;
        if ended {
            if let Some(s) = self.streams.remove(&id) {
                self.finish(id, s, r.is_ok());
            }
        }
        r
    }

    /// A stream is done (ended, reset, or failed): count and log it.
    fn finish(&mut self, _id: u32, s: Stream, complete: bool) {
        let out = s.out.borrow();
        let cache = out.cache.unwrap_or(CachePhase::Local);
        let stats = self.worker.request_stats();
        let duration_us = u64::try_from(s.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        if out.status != 0 {
            if let Some(st) = stats {
                st.response(out.status, cache, duration_us);
                st.http2_stream();
            }
            if let Some(why) = out.refusal {
                self.worker.stats.refusal(why);
            }
        }
        if let Some(pending) = &s.pending {
            let done = Finished {
                status: out.status,
                bytes: out.sent,
                duration_us,
                cache,
                rtt_us: None,
                congestion: None,
                worker: self.worker.index,
                refusal: out.refusal,
                suppressed: 0,
            };
            self.worker.date.with(|date| {
                self.worker.log.borrow_mut().record(
                    self.peer,
                    date,
                    pending,
                    &done,
                    &self.worker.stats,
                )
            });
        }
        if !complete {
            tracing::debug!("h2 stream ended early");
        }
        drop(out);
        if self.streams.is_empty() {
            if let Some(st) = stats {
                st.leave(ConnState::Active);
            }
        }
    }
}

/// A stream's task: build the request, ask the mode, queue the response.
#[allow(clippy::too_many_arguments)]
async fn produce(
    worker: Rc<Worker>,
    mode: Rc<Mode>,
    raw: Vec<u8>,
    peer: Option<std::net::IpAddr>,
    secure: bool,
    out: Rc<RefCell<Out>>,
    room: Rc<Notify>,
    wake: Rc<Notify>,
) {
    let mut fields = FieldBuf::new();
    let response = match parse_request(&raw, &mut fields) {
        Ok(ParseOutcome::Complete { head, .. }) => {
            let request = crate::exchange::Request {
                head: &head,
                body: Vec::new(),
                peer,
                secure,
                http2: true,
                interim: crate::exchange::Interim::stream(&worker, |head| {
                    let (fields, _) = h1_head_to_fields(&head);
                    out.borrow_mut().interim.push(fields);
                    wake.notify_one();
                }),
            };
            mode.respond(&worker, request).await
        }
        Ok(ParseOutcome::Partial) => response::refused(
            &worker,
            Refusal::HeadTooLarge,
            linerate_http::Persistence::KeepAlive,
        ),
        Err(e) => {
            let why = Refusal::of_head(e, &raw);
            response::refused(&worker, why, linerate_http::Persistence::KeepAlive)
        }
    };
    let refusal = response.refusal;
    let body = queue_response(&out, response, refusal);
    wake.notify_one();
    let result = queue_body(&worker, &out, &room, &wake, body).await;
    let mut o = out.borrow_mut();
    if let Err(e) = result {
        tracing::debug!(error = %e, kind = e.as_str(), "h2 stream body failed");
        o.failed = Some(e.as_str());
    }
    o.done = true;
    drop(o);
    wake.notify_one();
}

/// Turn a response's HTTP/1.1 head into HTTP/2 fields on `out`, queue the bytes that
/// followed the head (a short response's text), and give back the body.
fn queue_response(out: &Rc<RefCell<Out>>, response: Response, refusal: Option<Refusal>) -> Body {
    let mut o = out.borrow_mut();
    let (fields, rest) = h1_head_to_fields(&response.head);
    if fields
        .iter()
        .any(|(n, v)| n == b"content-type" && is_playlist(v))
    {
        o.urgency = o.urgency.min(PLAYLIST_URGENCY);
        o.playlist = true;
    }
    o.status = response.status.code();
    o.cache = Some(response.cache);
    o.refusal = refusal;
    o.fields = Some(fields);
    if !rest.is_empty() {
        o.queued += rest.len() as u64;
        o.held += rest.len() as u64;
        o.chunks.push_back(Chunk::Bytes(rest));
    }
    if matches!(response.body, Body::Empty) {
        o.done = true;
    }
    response.body
}

/// Queue a body's pieces, waiting for room (and, for a file window the page cache does
/// not hold, for the disk pool to read it) so that the connection never waits.
async fn queue_body(
    worker: &Worker,
    out: &Rc<RefCell<Out>>,
    room: &Notify,
    wake: &Notify,
    body: Body,
) -> Result<(), TransferError> {
    match body {
        Body::Empty => Ok(()),
        Body::File { file, range, hot } => {
            let f = FileRef::Local(file);
            queue_file(worker, out, room, wake, &f, range, Some(hot)).await
        }
        Body::Multipart { file, plan } => {
            let f = FileRef::Local(file);
            for part in plan.parts {
                push(out, room, wake, Chunk::Bytes(part.head)).await;
                queue_file(worker, out, room, wake, &f, part.range, None).await?;
            }
            push(out, room, wake, Chunk::Bytes(plan.trailer)).await;
            Ok(())
        }
        Body::Pieces(mut body) => {
            while let Some(piece) = body.next().await? {
                match piece {
                    Piece::Bytes(b) => push(out, room, wake, Chunk::Bytes(b.to_vec())).await,
                    Piece::File(f, r) => {
                        let f = FileRef::Shared(f.clone());
                        queue_file(worker, out, room, wake, &f, r, None).await?
                    }
                    Piece::Written(f, r) => {
                        // Written a moment ago: in the page cache.
                        let hot = Rc::new(Hot::default());
                        hot.proved(std::time::Instant::now(), r.start, r.start + r.len);
                        let chunk = Chunk::File(FileRef::Shared(f.clone()), r, Some(hot));
                        push(out, room, wake, chunk).await
                    }
                }
            }
            Ok(())
        }
    }
}

/// Queue `range` of `file` window by window, each made resident first (on the disk
/// pool when the page cache does not hold it) unless `hot` proves it resident.
async fn queue_file(
    worker: &Worker,
    out: &Rc<RefCell<Out>>,
    room: &Notify,
    wake: &Notify,
    file: &FileRef,
    range: ByteRange,
    hot: Option<Rc<Hot>>,
) -> Result<(), TransferError> {
    let end = range.start + range.len;
    if hot
        .as_ref()
        .is_some_and(|h| h.covers(std::time::Instant::now(), range.start, end))
    {
        push(out, room, wake, Chunk::File(file.clone(), range, hot)).await;
        return Ok(());
    }
    let mut offset = range.start;
    while offset < end {
        let upto = crate::transfer::ensure_resident(worker, file, offset, end).await?;
        let window = ByteRange {
            start: offset,
            len: upto - offset,
        };
        // Resident as of now: the connection sends its frames without checking each
        // one again (within `HOT_RECHECK`; after it, each frame is checked). A proof of
        // its own, so the open-file cache's proof for the whole file is kept.
        let proof = Rc::new(Hot::default());
        proof.proved(std::time::Instant::now(), offset, upto);
        push(
            out,
            room,
            wake,
            Chunk::File(file.clone(), window, Some(proof)),
        )
        .await;
        offset = upto;
    }
    Ok(())
}

/// Queue one chunk, first waiting while the queue is full.
async fn push(out: &Rc<RefCell<Out>>, room: &Notify, wake: &Notify, chunk: Chunk) {
    loop {
        {
            let mut o = out.borrow_mut();
            let bytes = matches!(chunk, Chunk::Bytes(_));
            if o.queued < QUEUE_AHEAD && (!bytes || o.held < HELD_BYTES) {
                o.queued += chunk.len();
                if bytes {
                    o.held += chunk.len();
                }
                o.chunks.push_back(chunk);
                break;
            }
            o.blocked = true;
        }
        wake.notify_one();
        room.notified().await;
    }
    wake.notify_one();
}

/// Whether a `content-type` is an HLS playlist or a DASH manifest (the media types
/// prefetch reads them by).
fn is_playlist(value: &[u8]) -> bool {
    linerate_http::hls::is_playlist_type(value) || linerate_http::dash::is_mpd_type(value)
}

/// Split an HTTP/1.1 response head (as the handlers write it) into HTTP/2 fields
/// (`:status` first, names lowercased, the connection-specific fields of RFC 9113
/// §8.2.2 dropped) and the bytes after the head.
fn h1_head_to_fields(head: &[u8]) -> (Fields, Vec<u8>) {
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(head.len(), |i| i + 4);
    let rest = head[end..].to_vec();
    let mut lines = head[..end].split(|&b| b == b'\n');
    let status_line = lines.next().unwrap_or_default();
    let status = status_line.get(9..12).unwrap_or(b"500").to_vec();
    let mut fields = vec![(b":status".to_vec(), status)];
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = line[..colon].to_ascii_lowercase();
        if matches!(
            name.as_slice(),
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade"
        ) {
            continue;
        }
        let value = line[colon + 1..].trim_ascii().to_vec();
        fields.push((name, value));
    }
    (fields, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_to_fields() {
        let head = b"HTTP/1.1 206 Partial Content\r\nDate: x\r\nConnection: close\r\n\
Transfer-Encoding: chunked\r\nContent-Range: bytes 0-1/10\r\n\r\nbody";
        let (fields, rest) = h1_head_to_fields(head);
        assert_eq!(rest, b"body");
        let names: Vec<&[u8]> = fields.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(names, [&b":status"[..], b"date", b"content-range"]);
        assert_eq!(fields[0].1, b"206");
        assert_eq!(fields[2].1, b"bytes 0-1/10");
    }
}
