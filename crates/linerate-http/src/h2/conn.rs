//! The server side of an HTTP/2 connection (RFC 9113), sans-I/O: the state machine
//! between the frames a client sends ([`super::frame`]) and the requests a server
//! answers. Bytes in ([`Connection::recv`]), [`Event`]s and bytes to write out
//! ([`Connection::output`]); no socket, no clock, no body bytes.
//!
//! How a server drives it: read from the socket into a buffer, call `recv` with the
//! unconsumed bytes, handle the events (an [`Event::Request`] starts that stream's
//! handler), write `output` (control frames and response HEADERS) before any DATA. For a
//! response body, ask [`Connection::send_window`] and
//! [`Connection::peer_max_frame_size`], then [`Connection::data_frame`] gives the 9-byte
//! DATA header to send (`MSG_MORE`) right before `n` bytes of the file (`sendfile`), so
//! the machine never holds body bytes. A stream whose window is 0 waits for
//! [`Event::WindowOpened`].
//!
//! What it enforces, each with its RFC 9113 answer:
//! - the client preface (§3.4), SETTINGS first, frames within our max frame size (§4.2);
//! - stream states and identifiers (§5.1, §5.1.1): odd, increasing, frames on idle,
//!   half-closed (remote) and closed streams; the concurrent-stream limit (§5.1.2,
//!   REFUSED_STREAM);
//! - header blocks (§4.3, §6.10): CONTINUATION right after its HEADERS on the same
//!   stream and nothing in between; the held block bounded by
//!   [`Limits::max_header_block`] (a CONTINUATION flood ends the connection with
//!   ENHANCE_YOUR_CALM, holding nothing more); every block decoded, even on a stream
//!   being refused, so the HPACK context stays in step;
//! - flow control both ways (§5.2, §6.9): our receive windows (data past them:
//!   FLOW_CONTROL_ERROR), the peer's send windows (WINDOW_UPDATE, INITIAL_WINDOW_SIZE
//!   applied to every open stream, overflow past 2^31-1);
//! - SETTINGS acknowledged, PING answered, PRIORITY accepted and ignored (§5.3.2;
//!   we send SETTINGS_NO_RFC7540_PRIORITIES), RFC 9218 priorities handed to the server
//!   (the `priority` field as [`RequestHead2::priority`], PRIORITY_UPDATE as
//!   [`Event::PriorityUpdate`], or kept for a stream not opened yet), PUSH_PROMISE from
//!   a client refused (§8.4), GOAWAY both ways (§6.8);
//! - request heads (§8.2, §8.3): lowercase names, no connection-specific fields,
//!   pseudo-header fields first, once, known and complete, values without NUL/CR/LF or
//!   surrounding whitespace, `content-length` equal to the DATA received (§8.1.1, with
//!   [`crate::framing::ContentLength`], the same folding as HTTP/1.1);
//! - floods, in bounded memory: rapid reset (CVE-2023-44487) and resets a client makes
//!   us send (CVE-2025-8671), SETTINGS/PING/PRIORITY/empty DATA/empty
//!   CONTINUATION/no-op frames, acknowledgements piling up unread (reading stops, see
//!   [`Limits::max_output`]), HPACK bombs (the decoder's list limit:
//!   [`Event::RequestTooLarge`]).
//!
//! Flood limits count frames received, not seconds: the machine has no clock, and a
//! budget per [`Limits::flood_window`] frames bounds the share of a client's traffic
//! that can be resets or no-op frames, which is what makes those attacks pay (each
//! wasted stream then costs the client as many useful frames as it costs us work);
//! a fast honest client is not punished for being fast, nor a slow attacker let off.

use std::collections::{BTreeMap, VecDeque};

use super::frame::{
    self, setting, ErrorCode, Frame, FrameError, DEFAULT_MAX_FRAME_SIZE, DEFAULT_WINDOW,
    HEADER_LEN, MAX_MAX_FRAME_SIZE, MAX_WINDOW, PREFACE,
};
use crate::framing::ContentLength;
use crate::request::{is_valid_host, Method};
use crate::syntax::{combine_lines, is_token};

use super::hpack::{DecodeError, Decoder, Encoder};
use super::priority::{self, Priority};

/// How many closed streams are remembered (id and how they closed), to tell a frame on
/// a stream we reset (ignored, §5.1) from one on a stream that ended normally
/// (STREAM_CLOSED) and from a stream id going down (PROTOCOL_ERROR). Older closed
/// streams are treated as ended normally. 256 entries are 2 KiB and cover 2.5 times the
/// default concurrent-stream limit.
pub const CLOSED_MEMORY: usize = 256;

/// `SETTINGS_NO_RFC7540_PRIORITIES` (RFC 9218 §2.1), which we send as 1.
pub const SETTINGS_NO_RFC7540_PRIORITIES: u16 = 0x9;

/// The limits of one connection: what we advertise in SETTINGS and what we hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`: streams open at once (a request being answered
    /// counts until its response ends). More: RST_STREAM REFUSED_STREAM (§5.1.2), which
    /// a client may retry. Default 100, nginx's and the RFC's recommended minimum.
    pub max_concurrent_streams: u32,
    /// `SETTINGS_INITIAL_WINDOW_SIZE`: our receive window per stream. Default 1 MiB:
    /// request bodies are counted and dropped, never held, so a large window costs no
    /// memory and lets an upload run at line rate. At most 2^31-1.
    pub initial_window: u32,
    /// Our receive window for the whole connection, opened with a WINDOW_UPDATE right
    /// after our SETTINGS when above 65,535 (the initial value, which it cannot go
    /// below). Default 16 MiB.
    pub connection_window: u32,
    /// `SETTINGS_MAX_FRAME_SIZE`: the largest frame payload we accept (larger:
    /// FRAME_SIZE_ERROR). 16,384 to 16,777,215; default 16,384.
    pub max_frame_size: u32,
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`: the largest request head (RFC 9113 §6.5.2 size:
    /// name + value + 32 per field) delivered. Larger: [`Event::RequestTooLarge`] (the
    /// server answers 431). Default 32 KiB + 100 fields' overhead, HTTP/1.1's
    /// `request::MAX_HEAD_BYTES` in h2 terms.
    pub max_header_list_size: u32,
    /// The most bytes of one HEADERS + CONTINUATION sequence held before decoding it.
    /// More: connection error ENHANCE_YOUR_CALM (the 2024 CONTINUATION flood), since the
    /// block cannot be decoded in part and the HPACK context would be lost anyway.
    /// Default 64 KiB: a compressed block is smaller than the list it decodes to.
    pub max_header_block: u32,
    /// `SETTINGS_HEADER_TABLE_SIZE`: the HPACK dynamic table the client may make us
    /// keep. Default 4,096 (the RFC's); values below it are raised to it, since a client
    /// may use 4,096 before it reads our SETTINGS.
    pub header_table_size: u32,
    /// The flood window: counters below start again every this many frames received.
    /// Default 1,000.
    pub flood_window: u32,
    /// Most stream resets per flood window: resets by the client of streams still
    /// being answered (rapid reset, CVE-2023-44487) plus stream errors it provoked
    /// (CVE-2025-8671), refused streams included. More: GOAWAY ENHANCE_YOUR_CALM.
    /// Default 200: a browser cancelling every one of 100 open streams stays below.
    pub max_resets_per_window: u32,
    /// Most frames per flood window that cost us work but do nothing for a request:
    /// SETTINGS, PING, PRIORITY, PRIORITY_UPDATE, DATA without data or END_STREAM, CONTINUATION without
    /// a fragment, WINDOW_UPDATE and RST_STREAM on closed streams, GOAWAY and unknown
    /// frame types. More: GOAWAY ENHANCE_YOUR_CALM. Default 500.
    pub max_control_frames_per_window: u32,
    /// Output bytes (acknowledgements, RST_STREAM, WINDOW_UPDATE, response heads) past
    /// which [`Connection::recv`] stops consuming input until the caller has written
    /// some: a client that sends PINGs or SETTINGS without reading the answers is held
    /// by TCP back-pressure instead of growing our buffer. The caller that sees `recv`
    /// consume less than it could writes `output` before reading more. Default 64 KiB.
    pub max_output: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_concurrent_streams: 100,
            initial_window: 1 << 20,
            connection_window: 16 << 20,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            max_header_list_size: 32 * 1024 + 100 * 32,
            max_header_block: 64 * 1024,
            header_table_size: 4096,
            flood_window: 1000,
            max_resets_per_window: 200,
            max_control_frames_per_window: 500,
            max_output: 64 * 1024,
        }
    }
}

/// A connection error (§5.4.1): a GOAWAY with `code` (and `reason` as its debug data)
/// is already at the end of [`Connection::output`]; the caller writes it and closes.
/// Every later `recv` returns the same error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnError {
    /// The GOAWAY's error code.
    pub code: ErrorCode,
    /// Short stable label for logs and metrics (`even_stream_id`, `rapid_reset`, ...).
    pub reason: &'static str,
}

/// Something the server acts on, in the order the frames came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A well-formed request head opened `stream`: start its handler. With
    /// `end_stream` false, body bytes follow as [`Event::Data`].
    Request {
        /// The stream.
        stream: u32,
        /// The request head.
        head: RequestHead2,
        /// The request has no body.
        end_stream: bool,
    },
    /// The request head on `stream` is over [`Limits::max_header_list_size`] (an HPACK
    /// bomb included): the stream is open, and the server answers 431 on it.
    RequestTooLarge {
        /// The stream.
        stream: u32,
    },
    /// `len` bytes of request body (padding not counted) arrived on `stream`; the
    /// server ignores or counts them, the machine returns the flow-control credit
    /// itself (immediately, in WINDOW_UPDATEs batched at half a window, since the
    /// server drops request bodies). `end_stream`: the request is complete; a trailer
    /// section (HEADERS with END_STREAM after the head) ends it as a `Data` of 0 bytes,
    /// its fields checked (no pseudo-header fields) and dropped (RFC 9110 §6.5.1 lets a
    /// recipient discard trailers).
    Data {
        /// The stream.
        stream: u32,
        /// Body bytes in this frame.
        len: u32,
        /// The last of the request.
        end_stream: bool,
    },
    /// `stream`, announced by an earlier [`Event::Request`] or
    /// [`Event::RequestTooLarge`], is gone: the client reset it, or we reset it for a
    /// stream error it made (`code` says which). The server stops its work; further
    /// sends on it are ignored.
    Reset {
        /// The stream.
        stream: u32,
        /// The RST_STREAM code.
        code: ErrorCode,
    },
    /// Send windows grew (WINDOW_UPDATE or a larger SETTINGS_INITIAL_WINDOW_SIZE): retry
    /// streams that were waiting on [`Connection::send_window`]. At most one per
    /// `recv` call.
    WindowOpened,
    /// The client changed the priority of an open stream (RFC 9218 PRIORITY_UPDATE): the
    /// scheduler reorders its DATA. A PRIORITY_UPDATE that arrives before its stream's
    /// request is applied to [`RequestHead2::priority`] instead.
    PriorityUpdate {
        /// The stream.
        stream: u32,
        /// Its new priority.
        priority: Priority,
    },
    /// The client sent GOAWAY: it opens no more streams. Finish the open ones, then
    /// close.
    GoAway {
        /// The last stream it says it may have processed (of ours: we never push, so
        /// informative only).
        last_stream: u32,
        /// Why.
        code: ErrorCode,
    },
}

/// A span of [`RequestHead2`]'s bytes.
type Span = (u32, u32);

/// A request head from HTTP/2 pseudo-header and regular fields (RFC 9113 §8.3.1),
/// checked, owning its bytes (one buffer, bounded by the header list limit). What a
/// server needs to treat it as an HTTP/1.1 request: method, scheme, authority (from
/// `:authority`, else `host`, §8.3.1), path and the regular fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead2 {
    bytes: Vec<u8>,
    method: Method,
    method_token: Span,
    scheme: Span,
    authority: Option<Span>,
    path: Span,
    fields: Vec<(Span, Span)>,
    content_length: Option<u64>,
    priority: Priority,
}

impl RequestHead2 {
    fn get(&self, (a, b): Span) -> &[u8] {
        &self.bytes[a as usize..b as usize]
    }

    /// The method (case-sensitive, RFC 9110 §9.1).
    pub fn method(&self) -> Method {
        self.method
    }

    /// The method token as sent (a token: checked).
    pub fn method_token(&self) -> &str {
        std::str::from_utf8(self.get(self.method_token)).unwrap_or("")
    }

    /// `:scheme` (`http`, `https`, ...); empty for CONNECT.
    pub fn scheme(&self) -> &[u8] {
        self.get(self.scheme)
    }

    /// `:authority`, else the `host` field (RFC 9113 §8.3.1); its characters checked
    /// as HTTP/1.1 checks `Host`. When both are present they are the same (ASCII case
    /// aside) or the request was refused.
    pub fn authority(&self) -> Option<&[u8]> {
        self.authority.map(|s| self.get(s))
    }

    /// `:path`: path and query as sent (origin form, starting with `/`, or `*` for
    /// OPTIONS); empty for CONNECT, which the server answers as it answers an HTTP/1.1
    /// CONNECT (405 today).
    pub fn path(&self) -> &[u8] {
        self.get(self.path)
    }

    /// `content-length`, when sent (folded as HTTP/1.1 folds it); the DATA received
    /// is held to it (§8.1.1).
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// The response's priority (RFC 9218): the `priority` field (its lines joined),
    /// unless a PRIORITY_UPDATE for the stream came first, which wins (§7); the defaults
    /// (urgency 3, not incremental) without either.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Every regular field (`host` included), in order: (lowercase name, value). A
    /// `cookie` may come split in several fields (§8.2.3): join them with `"; "`.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields.iter().map(|&(n, v)| (self.get(n), self.get(v)))
    }

    /// The values of the fields named `name` (lowercase), in order.
    pub fn values<'s>(&'s self, name: &'s [u8]) -> impl Iterator<Item = &'s [u8]> + 's {
        self.fields()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// The first value of the field named `name` (lowercase).
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// How a closed stream closed, for the frames that still arrive on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// Both sides ended it: HEADERS on it is a connection error STREAM_CLOSED.
    Ended,
    /// The client reset it: any frame but PRIORITY is a stream error STREAM_CLOSED.
    ResetByPeer,
    /// We reset it (or refused or ignored it): frames in flight are ignored (§5.1).
    ResetByUs,
}

/// An open stream: the request side may still send (unless `recv_closed`), and the
/// response side has not ended (a stream is removed when it does).
#[derive(Debug)]
struct Stream {
    /// END_STREAM received: half-closed (remote).
    recv_closed: bool,
    /// What we may still send on it (may go negative after a smaller
    /// SETTINGS_INITIAL_WINDOW_SIZE, §6.9.2).
    send_window: i64,
    /// What the client may still send on it.
    recv_window: i64,
    /// Received and not yet credited back.
    recv_unacked: u32,
    /// `content-length` of the request, if any.
    content_length: Option<u64>,
    /// Body bytes received.
    received: u64,
}

/// What to do with a header block once it is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disposition {
    /// A new stream's request head.
    NewStream,
    /// A trailer section (HEADERS with END_STREAM on an open stream).
    Trailers,
    /// Decode, then a stream error with this code.
    StreamError(ErrorCode, &'static str),
    /// Decode and drop (a stream we reset, or one opened after our GOAWAY).
    Ignore,
}

/// A header block being collected: its HEADERS came without END_HEADERS.
#[derive(Debug, Clone, Copy)]
struct Pending {
    stream: u32,
    end_stream: bool,
    self_dependent: bool,
    what: Disposition,
}

/// One HTTP/2 connection, server side. See the module docs.
#[derive(Debug)]
pub struct Connection {
    limits: Limits,
    out: Vec<u8>,
    events: VecDeque<Event>,
    decoder: Decoder,
    encoder: Encoder,
    /// The 24-byte preface has been read.
    preface_done: bool,
    /// The client's first SETTINGS has been read.
    peer_settings_seen: bool,
    /// The client acknowledged our SETTINGS.
    settings_acked: bool,
    /// Highest client stream id used (opened, refused or ignored).
    max_stream: u32,
    /// Highest stream id announced to the server (the GOAWAY last-stream-id).
    last_processed: u32,
    /// Our GOAWAY's last-stream-id, once sent.
    goaway_sent: Option<u32>,
    streams: BTreeMap<u32, Stream>,
    closed: VecDeque<(u32, Closed)>,
    /// PRIORITY_UPDATEs for streams not opened yet, newest last, at most
    /// `max_concurrent_streams` (RFC 9218 §7.1).
    early_priorities: VecDeque<(u32, Priority)>,
    /// The header block being collected, and its bytes.
    pending: Option<Pending>,
    block: Vec<u8>,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE.
    peer_initial_window: u32,
    peer_max_frame_size: u32,
    conn_send_window: i64,
    conn_recv_window: i64,
    conn_recv_unacked: u32,
    window_opened: bool,
    /// Flood counters for the current window.
    window_frames: u32,
    window_resets: u32,
    window_control: u32,
    dead: Option<ConnError>,
}

impl Connection {
    /// A connection with `limits` (out-of-range values clamped: see [`Limits`]), our
    /// SETTINGS (and a connection WINDOW_UPDATE when `connection_window` is above
    /// 65,535) already in [`Connection::output`]: a server may send them before the
    /// client preface arrives (§3.4).
    pub fn new(limits: Limits) -> Connection {
        let mut limits = limits;
        limits.max_frame_size = limits
            .max_frame_size
            .clamp(DEFAULT_MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE);
        limits.initial_window = limits.initial_window.min(MAX_WINDOW);
        limits.connection_window = limits.connection_window.clamp(DEFAULT_WINDOW, MAX_WINDOW);
        limits.header_table_size = limits.header_table_size.max(4096);
        limits.flood_window = limits.flood_window.max(1);
        let mut out = Vec::with_capacity(64);
        let mut params = vec![
            (
                setting::MAX_CONCURRENT_STREAMS,
                limits.max_concurrent_streams,
            ),
            (setting::MAX_HEADER_LIST_SIZE, limits.max_header_list_size),
            // RFC 9218 §2.1: we ignore RFC 7540 priorities; RFC 9218 ones are used.
            (SETTINGS_NO_RFC7540_PRIORITIES, 1),
        ];
        if limits.initial_window != DEFAULT_WINDOW {
            params.push((setting::INITIAL_WINDOW_SIZE, limits.initial_window));
        }
        if limits.max_frame_size != DEFAULT_MAX_FRAME_SIZE {
            params.push((setting::MAX_FRAME_SIZE, limits.max_frame_size));
        }
        if limits.header_table_size != 4096 {
            params.push((setting::HEADER_TABLE_SIZE, limits.header_table_size));
        }
        frame::write_settings(&mut out, &params);
        if limits.connection_window > DEFAULT_WINDOW {
            frame::write_window_update(&mut out, 0, limits.connection_window - DEFAULT_WINDOW);
        }
        Connection {
            decoder: Decoder::new(limits.header_table_size as usize),
            encoder: Encoder::new(),
            out,
            events: VecDeque::new(),
            preface_done: false,
            peer_settings_seen: false,
            settings_acked: false,
            max_stream: 0,
            last_processed: 0,
            goaway_sent: None,
            streams: BTreeMap::new(),
            closed: VecDeque::with_capacity(CLOSED_MEMORY),
            early_priorities: VecDeque::new(),
            pending: None,
            block: Vec::new(),
            peer_initial_window: DEFAULT_WINDOW,
            peer_max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            conn_send_window: i64::from(DEFAULT_WINDOW),
            conn_recv_window: i64::from(limits.connection_window),
            conn_recv_unacked: 0,
            window_opened: false,
            window_frames: 0,
            window_resets: 0,
            window_control: 0,
            dead: None,
            limits,
        }
    }

    /// Consume as much of `buf` as forms whole frames (the 24-byte client preface
    /// first): returns the bytes consumed; call again with the rest and more. Events are
    /// queued ([`Connection::next_event`]), frames to send appended to `output`.
    /// Consumes less than it could while `output` holds more than
    /// [`Limits::max_output`] bytes: write it, then call again.
    ///
    /// `Err`: a connection error; the GOAWAY is in `output`, write it and close.
    pub fn recv(&mut self, buf: &[u8]) -> Result<usize, ConnError> {
        if let Some(e) = self.dead {
            return Err(e);
        }
        let mut at = 0;
        if !self.preface_done {
            let n = buf.len().min(PREFACE.len());
            if buf[..n] != PREFACE[..n] {
                return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "bad_preface"));
            }
            if n < PREFACE.len() {
                return Ok(0);
            }
            self.preface_done = true;
            at = PREFACE.len();
        }
        let result = self.frames(buf, &mut at);
        if std::mem::take(&mut self.window_opened) {
            self.events.push_back(Event::WindowOpened);
        }
        result.map(|()| at)
    }

    fn frames(&mut self, buf: &[u8], at: &mut usize) -> Result<(), ConnError> {
        while self.out.len() <= self.limits.max_output {
            let rest = &buf[*at..];
            let Some((len, kind, _, stream)) = frame::peek_header(rest) else {
                return Ok(());
            };
            if !self.peer_settings_seen && kind != frame::kind::SETTINGS {
                return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "settings_not_first"));
            }
            // §6.10: a header block is a contiguous sequence of frames.
            if let Some(p) = self.pending {
                if kind != frame::kind::CONTINUATION || stream != p.stream {
                    return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "header_block_interrupted"));
                }
            }
            match frame::parse(rest, self.limits.max_frame_size) {
                Ok(None) => return Ok(()),
                Ok(Some((f, n))) => {
                    self.count_frame();
                    match f {
                        // RFC 9218 §7.1; `parse` leaves its payload to us.
                        Frame::Unknown {
                            kind: frame::kind::PRIORITY_UPDATE,
                            stream,
                        } => self.on_priority_update(stream, &rest[HEADER_LEN..n])?,
                        f => self.on_frame(f)?,
                    }
                    *at += n;
                }
                Err(FrameError::Connection(code, why)) => return Err(self.fail(code, why)),
                // A stream error on a stream never opened (a bad PRIORITY frame): RST_STREAM
                // must not be sent for an idle stream (§6.4), so it ends the connection.
                Err(FrameError::Stream(id, code, why)) if self.is_idle_stream(id) => {
                    return Err(self.fail(code, why));
                }
                Err(FrameError::Stream(id, code, why)) => {
                    // parse only reports a stream error on a whole frame: skip it.
                    self.count_frame();
                    self.stream_error(id, code, why)?;
                    *at += HEADER_LEN + len as usize;
                }
            }
        }
        Ok(())
    }

    /// The next queued event.
    pub fn next_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Bytes to write before any DATA: SETTINGS and their acknowledgements, PING
    /// answers, WINDOW_UPDATE, RST_STREAM, GOAWAY and response HEADERS. The caller
    /// drains what it wrote.
    pub fn output(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// HPACK-encode `fields` (lowercase names, `:status` first) as HEADERS (and
    /// CONTINUATION at the client's max frame size) on `stream`, with END_STREAM when
    /// `end_stream` (a response without body, or trailers). Returns false, sending
    /// nothing, when the stream is not open (reset meanwhile, or its response ended).
    pub fn send_headers(
        &mut self,
        stream: u32,
        fields: &[(&[u8], &[u8])],
        end_stream: bool,
    ) -> bool {
        if self.dead.is_some() || !self.streams.contains_key(&stream) {
            return false;
        }
        let mut block = Vec::with_capacity(128);
        self.encoder.encode(fields.iter().copied(), &mut block);
        frame::write_headers(
            &mut self.out,
            stream,
            &block,
            end_stream,
            self.peer_max_frame_size,
        );
        if end_stream {
            self.local_end(stream);
        }
        true
    }

    /// How many body bytes `stream` may send now: the smaller of the connection's and
    /// the stream's send windows, 0 when either is not positive or the stream is not
    /// open.
    pub fn send_window(&self, stream: u32) -> u32 {
        match self.streams.get(&stream) {
            Some(s) if self.dead.is_none() => {
                let w = s.send_window.min(self.conn_send_window).max(0);
                u32::try_from(w).unwrap_or(MAX_WINDOW)
            }
            _ => 0,
        }
    }

    /// The client's SETTINGS_MAX_FRAME_SIZE: the largest DATA payload one frame may
    /// carry.
    pub fn peer_max_frame_size(&self) -> u32 {
        self.peer_max_frame_size
    }

    /// The 9-byte header of a DATA frame of `len` bytes on `stream` (the caller sends
    /// the bytes itself, right after it), debiting both send windows; with
    /// `end_stream`, the response is complete. `None` when the stream is not open (it
    /// was reset: send nothing). `len` must be at most [`Connection::send_window`] and
    /// [`Connection::peer_max_frame_size`] (debug-asserted; in release the windows go
    /// negative and the client will end the connection).
    pub fn data_frame(
        &mut self,
        stream: u32,
        len: u32,
        end_stream: bool,
    ) -> Option<[u8; HEADER_LEN]> {
        debug_assert!(
            len <= self.peer_max_frame_size,
            "DATA past the peer's max frame size"
        );
        self.data_frames(stream, len, end_stream)
            .then(|| frame::data_header(stream, len, end_stream))
    }

    /// Debit `len` body bytes on `stream` that the caller sends as DATA frames it
    /// frames itself ([`frame::data_header`], each payload at most
    /// [`Connection::peer_max_frame_size`]): one call for a batch of frames, where
    /// [`Connection::data_frame`] is one per frame. With `end_stream`, the batch's last
    /// frame carries END_STREAM and the response is complete. False, debiting nothing,
    /// when the stream is not open. `len` must be at most [`Connection::send_window`]
    /// (debug-asserted, as for `data_frame`).
    pub fn data_frames(&mut self, stream: u32, len: u32, end_stream: bool) -> bool {
        if self.dead.is_some() || !self.streams.contains_key(&stream) {
            return false;
        }
        debug_assert!(len <= self.send_window(stream), "DATA past the send window");
        let Some(s) = self.streams.get_mut(&stream) else {
            return false;
        };
        s.send_window -= i64::from(len);
        self.conn_send_window -= i64::from(len);
        if end_stream {
            self.local_end(stream);
        }
        true
    }

    /// Reset `stream` with `code` (RST_STREAM), e.g. CANCEL when the server gives up on
    /// a response or INTERNAL_ERROR after a failure mid-body. Nothing when the stream is
    /// not open. No [`Event::Reset`] follows: the caller knows.
    pub fn reset_stream(&mut self, stream: u32, code: ErrorCode) {
        if self.dead.is_some() || self.streams.remove(&stream).is_none() {
            return;
        }
        frame::write_rst_stream(&mut self.out, stream, code);
        self.remember(stream, Closed::ResetByUs);
    }

    /// Send GOAWAY with `code` and `debug` (a few words, never request data) and the
    /// highest stream id handed to the server as last-stream-id (§6.8): streams the
    /// client opens after it are not processed (their heads decoded and dropped, their
    /// data ignored). Open streams go on; close when [`Connection::is_idle`]. For a
    /// graceful drain, reload or shutdown: `NO_ERROR`.
    pub fn go_away(&mut self, code: ErrorCode, debug: &[u8]) {
        if self.dead.is_some() {
            return;
        }
        frame::write_goaway(&mut self.out, self.last_processed, code, debug);
        self.goaway_sent = Some(self.last_processed);
    }

    /// Whether the client has acknowledged our SETTINGS. The machine has no clock: a
    /// server that wants SETTINGS_TIMEOUT (§6.5.3) checks this after its handshake
    /// timeout and, when still false, calls [`Connection::go_away`] with
    /// `SETTINGS_TIMEOUT` and closes.
    pub fn settings_acked(&self) -> bool {
        self.settings_acked
    }

    /// No stream is open and no header block half-read: the connection may be closed
    /// (after a GOAWAY) or timed out as idle.
    pub fn is_idle(&self) -> bool {
        self.streams.is_empty() && self.pending.is_none()
    }

    // ---- receiving ----

    fn on_frame(&mut self, f: Frame<'_>) -> Result<(), ConnError> {
        match f {
            Frame::Data {
                stream,
                data,
                flow_len,
                end_stream,
            } => self.on_data(stream, data.len(), flow_len, end_stream),
            Frame::Headers {
                stream,
                block,
                end_stream,
                end_headers,
                priority,
            } => {
                let self_dependent = priority.is_some_and(|p| p.dependency == stream);
                self.on_headers(stream, block, end_stream, end_headers, self_dependent)
            }
            Frame::Continuation {
                stream: _,
                block,
                end_headers,
            } => self.on_continuation(block, end_headers),
            Frame::Priority { .. } => self.control(),
            Frame::RstStream { stream, code } => self.on_rst_stream(stream, code),
            Frame::Settings { ack, params } => self.on_settings(ack, params),
            Frame::PushPromise { .. } => {
                Err(self.fail(ErrorCode::PROTOCOL_ERROR, "push_promise_from_client"))
            }
            Frame::Ping { ack, data } => {
                if !ack {
                    frame::write_ping(&mut self.out, true, data);
                }
                self.control()
            }
            Frame::GoAway {
                last_stream, code, ..
            } => {
                self.events.push_back(Event::GoAway { last_stream, code });
                self.control()
            }
            Frame::WindowUpdate { stream, increment } => self.on_window_update(stream, increment),
            Frame::Unknown { .. } => self.control(),
        }
    }

    /// Whether `stream` is idle (§5.1): never used by the client. Even ids are ours,
    /// and we never open one.
    fn is_idle_stream(&self, stream: u32) -> bool {
        stream % 2 == 0 || stream > self.max_stream
    }

    fn closed_as(&self, stream: u32) -> Option<Closed> {
        self.closed
            .iter()
            .rev()
            .find(|&&(id, _)| id == stream)
            .map(|&(_, c)| c)
    }

    fn on_data(
        &mut self,
        stream: u32,
        len: usize,
        flow_len: u32,
        end_stream: bool,
    ) -> Result<(), ConnError> {
        if self.is_idle_stream(stream) {
            return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "data_on_idle_stream"));
        }
        // §6.9: every DATA frame counts against the connection window, whatever its
        // stream's state.
        let flow = i64::from(flow_len);
        if flow > self.conn_recv_window {
            return Err(self.fail(ErrorCode::FLOW_CONTROL_ERROR, "connection_window_exceeded"));
        }
        self.conn_recv_window -= flow;
        self.conn_recv_unacked += flow_len;
        if i64::from(self.conn_recv_unacked) >= i64::from(self.limits.connection_window / 2) {
            frame::write_window_update(&mut self.out, 0, self.conn_recv_unacked);
            self.conn_recv_window += i64::from(self.conn_recv_unacked);
            self.conn_recv_unacked = 0;
        }
        if len == 0 && !end_stream {
            self.control()?;
        }
        let half = (self.stream_recv_initial() / 2).max(1);
        let Some(s) = self.streams.get_mut(&stream) else {
            return match self.closed_as(stream) {
                Some(Closed::ResetByUs) => Ok(()),
                _ => self.stream_error(stream, ErrorCode::STREAM_CLOSED, "data_on_closed_stream"),
            };
        };
        if s.recv_closed {
            return self.stream_error(stream, ErrorCode::STREAM_CLOSED, "data_after_end_stream");
        }
        if flow > s.recv_window {
            return self.stream_error(
                stream,
                ErrorCode::FLOW_CONTROL_ERROR,
                "stream_window_exceeded",
            );
        }
        s.recv_window -= flow;
        s.received += len as u64;
        // §8.1.1: more than content-length, or less when the request ends.
        let mismatch = s
            .content_length
            .is_some_and(|cl| s.received > cl || (end_stream && s.received != cl));
        if mismatch {
            return self.stream_error(stream, ErrorCode::PROTOCOL_ERROR, "content_length_mismatch");
        }
        if end_stream {
            s.recv_closed = true;
        } else {
            s.recv_unacked += flow_len;
            if i64::from(s.recv_unacked) >= half {
                frame::write_window_update(&mut self.out, stream, s.recv_unacked);
                s.recv_window += i64::from(s.recv_unacked);
                s.recv_unacked = 0;
            }
        }
        self.events.push_back(Event::Data {
            stream,
            len: u32::try_from(len).unwrap_or(u32::MAX),
            end_stream,
        });
        Ok(())
    }

    /// A new stream's receive window: ours once the client acknowledged our SETTINGS,
    /// until then at least the default it may assume (§6.9.2).
    fn stream_recv_initial(&self) -> i64 {
        if self.settings_acked {
            i64::from(self.limits.initial_window)
        } else {
            i64::from(self.limits.initial_window.max(DEFAULT_WINDOW))
        }
    }

    fn on_headers(
        &mut self,
        stream: u32,
        block: &[u8],
        end_stream: bool,
        end_headers: bool,
        self_dependent: bool,
    ) -> Result<(), ConnError> {
        if stream % 2 == 0 {
            return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "even_stream_id"));
        }
        let what = if stream > self.max_stream {
            self.max_stream = stream;
            match self.goaway_sent {
                Some(last) if stream > last => Disposition::Ignore,
                _ => Disposition::NewStream,
            }
        } else if let Some(s) = self.streams.get(&stream) {
            if s.recv_closed {
                Disposition::StreamError(ErrorCode::STREAM_CLOSED, "headers_after_end_stream")
            } else if end_stream {
                Disposition::Trailers
            } else {
                // §8.1: a second HEADERS without END_STREAM is no trailer section.
                Disposition::StreamError(ErrorCode::PROTOCOL_ERROR, "second_headers")
            }
        } else {
            match self.closed_as(stream) {
                Some(Closed::ResetByUs) => Disposition::Ignore,
                Some(Closed::ResetByPeer) => {
                    Disposition::StreamError(ErrorCode::STREAM_CLOSED, "headers_after_reset")
                }
                Some(Closed::Ended) => {
                    return Err(self.fail(ErrorCode::STREAM_CLOSED, "headers_on_closed_stream"))
                }
                None => return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "stream_id_went_down")),
            }
        };
        self.block.clear();
        self.pending = Some(Pending {
            stream,
            end_stream,
            self_dependent,
            what,
        });
        self.on_continuation(block, end_headers)
    }

    /// A fragment of the pending header block (the HEADERS frame's own included).
    fn on_continuation(&mut self, fragment: &[u8], end_headers: bool) -> Result<(), ConnError> {
        if self.pending.is_none() {
            // §6.10: only after HEADERS without END_HEADERS (or another CONTINUATION).
            return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "continuation_without_headers"));
        }
        if fragment.is_empty() && !end_headers {
            self.control()?;
        }
        if self.block.len() + fragment.len() > self.limits.max_header_block as usize {
            return Err(self.fail(ErrorCode::ENHANCE_YOUR_CALM, "header_block_too_large"));
        }
        self.block.extend_from_slice(fragment);
        if end_headers {
            self.finish_block()?;
        }
        Ok(())
    }

    fn finish_block(&mut self) -> Result<(), ConnError> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let block = std::mem::take(&mut self.block);
        let max_list = self.limits.max_header_list_size as usize;
        let mut head = Builder::default();
        let mut pseudo_in_trailers = false;
        let decoded = match p.what {
            Disposition::NewStream => self
                .decoder
                .decode(&block, max_list, |n, v| head.field(n, v)),
            Disposition::Trailers => self.decoder.decode(&block, max_list, |n, v| {
                pseudo_in_trailers |= n.first() == Some(&b':');
                let _ = v;
            }),
            Disposition::StreamError(..) | Disposition::Ignore => {
                self.decoder.decode(&block, max_list, |_, _| {})
            }
        };
        // Keep the buffer's capacity (bounded by max_header_block) for the next block.
        self.block = block;
        self.block.clear();
        let too_large = match decoded {
            Ok(()) => false,
            Err(DecodeError::ListTooLarge) => true,
            Err(DecodeError::Compression(why)) => {
                return Err(self.fail(ErrorCode::COMPRESSION_ERROR, why));
            }
        };
        let stream = p.stream;
        // A GOAWAY sent while this head was arriving covers it too.
        let what = match (p.what, self.goaway_sent) {
            (Disposition::NewStream, Some(last)) if stream > last => Disposition::Ignore,
            (what, _) => what,
        };
        match what {
            Disposition::Ignore => {
                if self.closed_as(stream) != Some(Closed::ResetByUs) {
                    self.remember(stream, Closed::ResetByUs);
                }
                Ok(())
            }
            Disposition::StreamError(code, why) => self.stream_error(stream, code, why),
            Disposition::Trailers => {
                if pseudo_in_trailers {
                    return self.stream_error(
                        stream,
                        ErrorCode::PROTOCOL_ERROR,
                        "pseudo_header_in_trailers",
                    );
                }
                self.on_data_end(stream)
            }
            Disposition::NewStream => {
                // RFC 7540 §5.3.1 (kept by RFC 9113 for PRIORITY's syntax).
                if p.self_dependent {
                    return self.stream_error(
                        stream,
                        ErrorCode::PROTOCOL_ERROR,
                        "stream_depends_on_itself",
                    );
                }
                if self.streams.len() >= self.limits.max_concurrent_streams as usize {
                    return self.stream_error(
                        stream,
                        ErrorCode::REFUSED_STREAM,
                        "too_many_streams",
                    );
                }
                if too_large {
                    self.open(stream, p.end_stream, None);
                    self.events.push_back(Event::RequestTooLarge { stream });
                    return Ok(());
                }
                let early = self
                    .early_priorities
                    .iter()
                    .position(|&(id, _)| id == stream)
                    .and_then(|i| self.early_priorities.remove(i))
                    .map(|(_, p)| p);
                match head.finish(p.end_stream, early) {
                    Ok(head) => {
                        self.open(stream, p.end_stream, head.content_length);
                        self.events.push_back(Event::Request {
                            stream,
                            head,
                            end_stream: p.end_stream,
                        });
                        Ok(())
                    }
                    Err(why) => self.stream_error(stream, ErrorCode::PROTOCOL_ERROR, why),
                }
            }
        }
    }

    /// A trailer section ended the request on `stream`.
    fn on_data_end(&mut self, stream: u32) -> Result<(), ConnError> {
        let Some(s) = self.streams.get_mut(&stream) else {
            return Ok(());
        };
        if s.content_length.is_some_and(|cl| cl != s.received) {
            return self.stream_error(stream, ErrorCode::PROTOCOL_ERROR, "content_length_mismatch");
        }
        s.recv_closed = true;
        self.events.push_back(Event::Data {
            stream,
            len: 0,
            end_stream: true,
        });
        Ok(())
    }

    fn open(&mut self, stream: u32, end_stream: bool, content_length: Option<u64>) {
        self.last_processed = stream;
        let recv_window = self.stream_recv_initial();
        self.streams.insert(
            stream,
            Stream {
                recv_closed: end_stream,
                send_window: i64::from(self.peer_initial_window),
                recv_window,
                recv_unacked: 0,
                content_length,
                received: 0,
            },
        );
    }

    fn on_priority_update(&mut self, stream: u32, payload: &[u8]) -> Result<(), ConnError> {
        let (prioritized, value) = match frame::priority_update(stream, payload) {
            Ok(p) => p,
            Err(e) => return Err(self.fail(e.code(), e.as_str())),
        };
        self.control()?;
        // §7.1: a push stream (even: ours) cannot be prioritized by the client.
        if prioritized % 2 == 0 {
            return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "priority_update_for_push_stream"));
        }
        let priority = priority::parse(value);
        if self.streams.contains_key(&prioritized) {
            self.events.push_back(Event::PriorityUpdate {
                stream: prioritized,
                priority,
            });
        } else if prioritized > self.max_stream {
            // Before its request: kept (the newest per stream) for when it opens, as
            // many as streams may be open.
            self.early_priorities.retain(|&(id, _)| id != prioritized);
            if self.early_priorities.len() >= self.limits.max_concurrent_streams as usize {
                self.early_priorities.pop_front();
            }
            if self.limits.max_concurrent_streams > 0 {
                self.early_priorities.push_back((prioritized, priority));
            }
        }
        // A closed stream: nothing to reorder.
        Ok(())
    }

    fn on_rst_stream(&mut self, stream: u32, code: ErrorCode) -> Result<(), ConnError> {
        if self.is_idle_stream(stream) {
            return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "rst_stream_on_idle_stream"));
        }
        if self.streams.remove(&stream).is_none() {
            // Closed already: nothing to do (§5.1).
            return self.control();
        }
        self.remember(stream, Closed::ResetByPeer);
        self.events.push_back(Event::Reset { stream, code });
        self.count_reset()
    }

    fn on_settings(&mut self, ack: bool, params: &[u8]) -> Result<(), ConnError> {
        if ack {
            if !self.settings_acked {
                self.settings_acked = true;
                // Streams opened before the ACK got the default window the client
                // assumed; ours now applies to them too (§6.9.2).
                let shrink = i64::from(DEFAULT_WINDOW) - i64::from(self.limits.initial_window);
                if shrink > 0 {
                    for s in self.streams.values_mut() {
                        s.recv_window -= shrink;
                    }
                }
            }
            return self.control();
        }
        self.peer_settings_seen = true;
        // §6.5.3: in the order they appear.
        for (id, value) in frame::settings_params(params) {
            match id {
                setting::HEADER_TABLE_SIZE => self.encoder.set_max_table_size(value as usize),
                setting::INITIAL_WINDOW_SIZE => {
                    // §6.9.2: every open stream's window moves by the difference; one
                    // past 2^31-1 is a connection error FLOW_CONTROL_ERROR.
                    let delta = i64::from(value) - i64::from(self.peer_initial_window);
                    self.peer_initial_window = value;
                    let mut overflow = false;
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        overflow |= s.send_window > i64::from(MAX_WINDOW);
                    }
                    if overflow {
                        return Err(
                            self.fail(ErrorCode::FLOW_CONTROL_ERROR, "initial_window_overflow")
                        );
                    }
                    if delta > 0 {
                        self.window_opened = true;
                    }
                }
                setting::MAX_FRAME_SIZE => self.peer_max_frame_size = value,
                // ENABLE_PUSH: we never push. MAX_CONCURRENT_STREAMS: we open none.
                // MAX_HEADER_LIST_SIZE: advisory; our response heads are small.
                _ => {}
            }
        }
        frame::write_settings_ack(&mut self.out);
        self.control()
    }

    fn on_window_update(&mut self, stream: u32, increment: u32) -> Result<(), ConnError> {
        if stream == 0 {
            if increment == 0 {
                return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "window_update_zero"));
            }
            self.conn_send_window += i64::from(increment);
            if self.conn_send_window > i64::from(MAX_WINDOW) {
                return Err(self.fail(ErrorCode::FLOW_CONTROL_ERROR, "window_overflow"));
            }
            self.window_opened = true;
            return Ok(());
        }
        if self.is_idle_stream(stream) {
            return Err(self.fail(ErrorCode::PROTOCOL_ERROR, "window_update_on_idle_stream"));
        }
        let Some(s) = self.streams.get_mut(&stream) else {
            // Closed: a WINDOW_UPDATE may still be in flight (§5.1); it does nothing.
            return self.control();
        };
        if increment == 0 {
            return self.stream_error(stream, ErrorCode::PROTOCOL_ERROR, "window_update_zero");
        }
        s.send_window += i64::from(increment);
        if s.send_window > i64::from(MAX_WINDOW) {
            return self.stream_error(stream, ErrorCode::FLOW_CONTROL_ERROR, "window_overflow");
        }
        self.window_opened = true;
        Ok(())
    }

    // ---- stream endings, errors, floods ----

    /// Our side of `stream` ended (END_STREAM sent). When the client's side is still
    /// open, its body is not needed: RST_STREAM NO_ERROR (§8.1) frees the stream
    /// instead of waiting for a body that may never end.
    fn local_end(&mut self, stream: u32) {
        let Some(s) = self.streams.remove(&stream) else {
            return;
        };
        if s.recv_closed {
            self.remember(stream, Closed::Ended);
        } else {
            frame::write_rst_stream(&mut self.out, stream, ErrorCode::NO_ERROR);
            self.remember(stream, Closed::ResetByUs);
        }
    }

    /// A stream error (§5.4.2): RST_STREAM with `code`; the stream, if open, is closed
    /// and the server told. Counts as a reset the client caused.
    fn stream_error(
        &mut self,
        stream: u32,
        code: ErrorCode,
        _why: &'static str,
    ) -> Result<(), ConnError> {
        frame::write_rst_stream(&mut self.out, stream, code);
        if self.streams.remove(&stream).is_some() {
            self.events.push_back(Event::Reset { stream, code });
        }
        if self.closed_as(stream) != Some(Closed::ResetByUs) {
            self.remember(stream, Closed::ResetByUs);
        }
        self.count_reset()
    }

    fn remember(&mut self, stream: u32, how: Closed) {
        if self.closed.len() == CLOSED_MEMORY {
            self.closed.pop_front();
        }
        self.closed.push_back((stream, how));
    }

    fn count_frame(&mut self) {
        self.window_frames += 1;
        if self.window_frames >= self.limits.flood_window {
            self.window_frames = 0;
            self.window_resets = 0;
            self.window_control = 0;
        }
    }

    fn count_reset(&mut self) -> Result<(), ConnError> {
        self.window_resets += 1;
        if self.window_resets > self.limits.max_resets_per_window {
            return Err(self.fail(ErrorCode::ENHANCE_YOUR_CALM, "rapid_reset"));
        }
        Ok(())
    }

    fn control(&mut self) -> Result<(), ConnError> {
        self.window_control += 1;
        if self.window_control > self.limits.max_control_frames_per_window {
            return Err(self.fail(ErrorCode::ENHANCE_YOUR_CALM, "control_frame_flood"));
        }
        Ok(())
    }

    /// A connection error: GOAWAY with the code and the reason as debug data; every
    /// stream is gone.
    fn fail(&mut self, code: ErrorCode, reason: &'static str) -> ConnError {
        let e = ConnError { code, reason };
        if self.dead.is_none() {
            frame::write_goaway(&mut self.out, self.last_processed, code, reason.as_bytes());
            self.dead = Some(e);
            self.pending = None;
            self.streams.clear();
        }
        e
    }
}

/// Collects and checks a request head's fields as the decoder hands them over
/// (§8.2, §8.3). The first problem is kept; later fields are still decoded (the HPACK
/// context must stay in step) but not stored.
#[derive(Default)]
struct Builder {
    bytes: Vec<u8>,
    method: Option<Span>,
    scheme: Option<Span>,
    authority: Option<Span>,
    path: Option<Span>,
    host: Option<Span>,
    hosts: u32,
    fields: Vec<(Span, Span)>,
    content_length: ContentLength,
    regular_seen: bool,
    error: Option<&'static str>,
}

/// Fields that are about one HTTP/1.1 connection and have no meaning in HTTP/2
/// (§8.2.2): a request carrying one is malformed.
const CONNECTION_SPECIFIC: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

impl Builder {
    fn push(&mut self, b: &[u8]) -> Span {
        let start = u32::try_from(self.bytes.len()).unwrap_or(u32::MAX);
        self.bytes.extend_from_slice(b);
        (start, u32::try_from(self.bytes.len()).unwrap_or(u32::MAX))
    }

    fn get(&self, (a, b): Span) -> &[u8] {
        &self.bytes[a as usize..b as usize]
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.error.is_none() {
            if let Err(why) = self.check(name, value) {
                self.error = Some(why);
            }
        }
    }

    fn check(&mut self, name: &[u8], value: &[u8]) -> Result<(), &'static str> {
        // §8.2.1: no NUL, CR or LF; no leading or trailing SP/HTAB.
        if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
            return Err("bad_field_value");
        }
        if value.first().is_some_and(|&b| b == b' ' || b == b'\t')
            || value.last().is_some_and(|&b| b == b' ' || b == b'\t')
        {
            return Err("field_value_whitespace");
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            // §8.3: pseudo-header fields first, each once, only the request ones.
            if self.regular_seen {
                return Err("pseudo_header_after_regular");
            }
            let slot = match pseudo {
                b"method" => &mut self.method,
                b"scheme" => &mut self.scheme,
                b"authority" => &mut self.authority,
                b"path" => &mut self.path,
                b"status" => return Err("response_pseudo_header"),
                _ => return Err("unknown_pseudo_header"),
            };
            if slot.is_some() {
                return Err("duplicate_pseudo_header");
            }
            let span = {
                let start = u32::try_from(self.bytes.len()).unwrap_or(u32::MAX);
                self.bytes.extend_from_slice(value);
                (start, u32::try_from(self.bytes.len()).unwrap_or(u32::MAX))
            };
            match pseudo {
                b"method" => self.method = Some(span),
                b"scheme" => self.scheme = Some(span),
                b"authority" => self.authority = Some(span),
                _ => self.path = Some(span),
            }
            return Ok(());
        }
        self.regular_seen = true;
        // §8.2.1: lowercase; and a token, as HTTP/1.1 requires.
        if name.iter().any(u8::is_ascii_uppercase) {
            return Err("uppercase_field_name");
        }
        if !is_token(name) {
            return Err("bad_field_name");
        }
        if CONNECTION_SPECIFIC.contains(&name) {
            return Err("connection_specific_field");
        }
        if name == b"te" && !value.eq_ignore_ascii_case(b"trailers") {
            return Err("te_not_trailers");
        }
        if name == b"content-length" {
            self.content_length = self.content_length.merge(value);
        }
        let n = self.push(name);
        let v = self.push(value);
        if name == b"host" {
            self.hosts += 1;
            self.host.get_or_insert(v);
        }
        self.fields.push((n, v));
        Ok(())
    }

    fn finish(
        self,
        end_stream: bool,
        early_priority: Option<Priority>,
    ) -> Result<RequestHead2, &'static str> {
        if let Some(why) = self.error {
            return Err(why);
        }
        let method_span = self.method.ok_or("missing_method")?;
        let token = std::str::from_utf8(self.get(method_span)).map_err(|_| "bad_method")?;
        if !is_token(token.as_bytes()) {
            return Err("bad_method");
        }
        let method = Method::from_token(token);
        let empty = (0, 0);
        let (scheme, path) = if method == Method::Connect {
            // §8.5: CONNECT has :authority only.
            if self.scheme.is_some() || self.path.is_some() || self.authority.is_none() {
                return Err("bad_connect");
            }
            (empty, empty)
        } else {
            let scheme = self.scheme.ok_or("missing_scheme")?;
            let path = self.path.ok_or("missing_path")?;
            let s = self.get(scheme);
            let scheme_ok = s.first().is_some_and(u8::is_ascii_alphabetic)
                && s.iter()
                    .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
            if !scheme_ok {
                return Err("bad_scheme");
            }
            let p = self.get(path);
            if p.is_empty() {
                return Err("empty_path");
            }
            // §8.3.1: origin form, or `*` for OPTIONS; visible ASCII without a
            // fragment, as HTTP/1.1 takes a request-target.
            let form_ok = p[0] == b'/' || (p == b"*" && method == Method::Options);
            if !form_ok || p.iter().any(|&b| !(0x21..0x7f).contains(&b) || b == b'#') {
                return Err("bad_path");
            }
            (scheme, path)
        };
        if self.hosts > 1 {
            return Err("repeated_host");
        }
        for span in [self.authority, self.host].into_iter().flatten() {
            if !is_valid_host(self.get(span)) {
                return Err("bad_authority");
            }
        }
        if let (Some(a), Some(h)) = (self.authority, self.host) {
            if !self.get(a).eq_ignore_ascii_case(self.get(h)) {
                return Err("host_differs_from_authority");
            }
        }
        let content_length = match self.content_length {
            ContentLength::Absent => None,
            ContentLength::Valid(n) => Some(n),
            ContentLength::Invalid => return Err("bad_content_length"),
        };
        if end_stream && content_length.is_some_and(|n| n > 0) {
            return Err("content_length_mismatch");
        }
        // RFC 9218 §4, §7: a PRIORITY_UPDATE that came first wins over the field.
        let priority = early_priority.unwrap_or_else(|| {
            let lines = self
                .fields
                .iter()
                .filter(|&&(n, _)| self.get(n) == b"priority")
                .map(|&(_, v)| self.get(v));
            priority::parse(&combine_lines(lines))
        });
        Ok(RequestHead2 {
            priority,
            method,
            method_token: method_span,
            scheme,
            authority: self.authority.or(self.host),
            path,
            fields: self.fields,
            content_length,
            bytes: self.bytes,
        })
    }
}

#[cfg(test)]
mod tests;
