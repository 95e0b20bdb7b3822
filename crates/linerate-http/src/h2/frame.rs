//! HTTP/2 frames (RFC 9113 §4 and §6): the connection preface, parsing one frame from the
//! start of a buffer, and encoding the frames a server sends.
//!
//! [`parse`] applies every rule of §4.1, §4.2 and §6 that needs no connection state:
//! the frame size against our advertised `SETTINGS_MAX_FRAME_SIZE`, which frame types
//! must or must not be on stream 0, fixed payload lengths, padding longer than the
//! payload, a PRIORITY frame depending on its own stream, and the SETTINGS values of
//! §6.5.2 (so a [`Frame::Settings`] that comes back is fully valid; [`check_setting`] is
//! the same check for a single value). Everything that needs state (stream states,
//! flow-control windows, HEADERS followed by CONTINUATION on the same stream, a
//! WINDOW_UPDATE increment of 0, a HEADERS priority on its own stream) is the caller's,
//! and the variant docs say which.
//!
//! Payloads are borrowed from the buffer: a DATA frame's data, a field-block fragment,
//! SETTINGS parameters, GOAWAY debug data.
//!
//! Errors: [`FrameError::Connection`] ends the connection with GOAWAY and the code;
//! [`FrameError::Stream`] resets one stream with RST_STREAM and the connection goes on,
//! skipping the frame: it is [`HEADER_LEN`] + the length [`peek_header`] reports. The
//! `&'static str` in each is a short stable label for logs and metrics.
//!
//! An oversized frame (§4.2) is always a connection error here, even a DATA frame a
//! peer could have been answered with RST_STREAM for: the frame's payload would have to
//! be read and thrown away first, and a peer that ignores our SETTINGS is not one to keep.

/// The client connection preface (§3.4): the first 24 bytes a client sends, before its
/// SETTINGS frame.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes in a frame header (§4.1).
pub const HEADER_LEN: usize = 9;
/// `SETTINGS_MAX_FRAME_SIZE` until a peer says otherwise, and its smallest value (§6.5.2).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest `SETTINGS_MAX_FRAME_SIZE` allowed (2^24-1, §6.5.2).
pub const MAX_MAX_FRAME_SIZE: u32 = 16_777_215;
/// Initial flow-control window of the connection and of every stream (§6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The largest flow-control window (2^31-1, §6.9.1).
pub const MAX_WINDOW: u32 = 0x7fff_ffff;

/// Frame types (§6, and the registry of §11.2).
pub mod kind {
    /// DATA (§6.1).
    pub const DATA: u8 = 0x0;
    /// HEADERS (§6.2).
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY (§6.3).
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM (§6.4).
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS (§6.5).
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE (§6.6).
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING (§6.7).
    pub const PING: u8 = 0x6;
    /// GOAWAY (§6.8).
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE (§6.9).
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION (§6.10).
    pub const CONTINUATION: u8 = 0x9;
    /// PRIORITY_UPDATE (RFC 9218 §7.1): parsed as [`super::Frame::Unknown`]; read its
    /// payload with [`super::priority_update`].
    pub const PRIORITY_UPDATE: u8 = 0x10;
}

/// Frame flags (§6). Each is defined only for some frame types.
pub mod flag {
    /// END_STREAM (DATA, HEADERS).
    pub const END_STREAM: u8 = 0x1;
    /// ACK (SETTINGS, PING): same bit as END_STREAM.
    pub const ACK: u8 = 0x1;
    /// END_HEADERS (HEADERS, PUSH_PROMISE, CONTINUATION).
    pub const END_HEADERS: u8 = 0x4;
    /// PADDED (DATA, HEADERS, PUSH_PROMISE).
    pub const PADDED: u8 = 0x8;
    /// PRIORITY (HEADERS).
    pub const PRIORITY: u8 = 0x20;
}

/// An error code (§7), as carried by RST_STREAM and GOAWAY. Codes this endpoint does not
/// know are kept as they are (§7: "MUST NOT trigger any special behavior").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// Graceful shutdown, or no error.
    pub const NO_ERROR: ErrorCode = ErrorCode(0x0);
    /// A protocol error was detected.
    pub const PROTOCOL_ERROR: ErrorCode = ErrorCode(0x1);
    /// An unexpected internal error.
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(0x2);
    /// The peer violated flow control.
    pub const FLOW_CONTROL_ERROR: ErrorCode = ErrorCode(0x3);
    /// A SETTINGS frame was not acknowledged in time.
    pub const SETTINGS_TIMEOUT: ErrorCode = ErrorCode(0x4);
    /// A frame arrived on a half-closed stream.
    pub const STREAM_CLOSED: ErrorCode = ErrorCode(0x5);
    /// A frame had an invalid size.
    pub const FRAME_SIZE_ERROR: ErrorCode = ErrorCode(0x6);
    /// The stream was refused before any processing.
    pub const REFUSED_STREAM: ErrorCode = ErrorCode(0x7);
    /// The stream is no longer needed.
    pub const CANCEL: ErrorCode = ErrorCode(0x8);
    /// The field-block compression context cannot be kept.
    pub const COMPRESSION_ERROR: ErrorCode = ErrorCode(0x9);
    /// A CONNECT tunnel was reset or closed abnormally.
    pub const CONNECT_ERROR: ErrorCode = ErrorCode(0xa);
    /// The peer behaves in a way that may cause excessive load.
    pub const ENHANCE_YOUR_CALM: ErrorCode = ErrorCode(0xb);
    /// The transport does not meet the minimum security requirements.
    pub const INADEQUATE_SECURITY: ErrorCode = ErrorCode(0xc);
    /// The request must be retried over HTTP/1.1.
    pub const HTTP_1_1_REQUIRED: ErrorCode = ErrorCode(0xd);

    /// Short stable name for logs and metric labels (`unknown` for codes §7 does not
    /// define, so a peer cannot mint label values).
    pub fn as_str(self) -> &'static str {
        match self.0 {
            0x0 => "no_error",
            0x1 => "protocol_error",
            0x2 => "internal_error",
            0x3 => "flow_control_error",
            0x4 => "settings_timeout",
            0x5 => "stream_closed",
            0x6 => "frame_size_error",
            0x7 => "refused_stream",
            0x8 => "cancel",
            0x9 => "compression_error",
            0xa => "connect_error",
            0xb => "enhance_your_calm",
            0xc => "inadequate_security",
            0xd => "http_1_1_required",
            _ => "unknown",
        }
    }
}

/// SETTINGS parameter identifiers (§6.5.2). Unknown identifiers are ignored (§6.5.2).
pub mod setting {
    /// `SETTINGS_HEADER_TABLE_SIZE`: the largest HPACK dynamic table the sender's decoder
    /// keeps (initial 4096).
    pub const HEADER_TABLE_SIZE: u16 = 1;
    /// `SETTINGS_ENABLE_PUSH`: 0 or 1 (initial 1).
    pub const ENABLE_PUSH: u16 = 2;
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` (initial: unlimited).
    pub const MAX_CONCURRENT_STREAMS: u16 = 3;
    /// `SETTINGS_INITIAL_WINDOW_SIZE`: at most 2^31-1 (initial 65,535).
    pub const INITIAL_WINDOW_SIZE: u16 = 4;
    /// `SETTINGS_MAX_FRAME_SIZE`: 16,384 to 16,777,215 (initial 16,384).
    pub const MAX_FRAME_SIZE: u16 = 5;
    /// `SETTINGS_MAX_HEADER_LIST_SIZE` (initial: unlimited).
    pub const MAX_HEADER_LIST_SIZE: u16 = 6;
}

/// Stream priority as HEADERS (PRIORITY flag) and PRIORITY frames carry it (RFC 7540
/// §5.3, deprecated by RFC 9113 §5.3.2: parsed so the frames are accepted, then ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    /// The stream this one depends on (31 bits).
    pub dependency: u32,
    /// The E flag.
    pub exclusive: bool,
    /// Weight as sent (0-255, meaning 1-256).
    pub weight: u8,
}

/// One frame, its payload borrowed from the buffer [`parse`] read.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// DATA (§6.1), on a stream other than 0.
    Data {
        /// The stream.
        stream: u32,
        /// The data, padding removed.
        data: &'a [u8],
        /// The whole payload, pad length and padding included: what flow control counts
        /// (§6.9.1).
        flow_len: u32,
        /// END_STREAM.
        end_stream: bool,
    },
    /// HEADERS (§6.2), on a stream other than 0. When `priority` depends on `stream`
    /// itself, the caller answers with a stream error PROTOCOL_ERROR (RFC 7540 §5.3.1),
    /// after decoding the block so that the HPACK context stays in step.
    Headers {
        /// The stream.
        stream: u32,
        /// The field-block fragment, padding and priority removed.
        block: &'a [u8],
        /// END_STREAM.
        end_stream: bool,
        /// END_HEADERS: when false, CONTINUATION frames on this stream follow, and only
        /// they (§6.10, the caller's check).
        end_headers: bool,
        /// The priority fields when the PRIORITY flag is set.
        priority: Option<Priority>,
    },
    /// PRIORITY (§6.3), on a stream other than 0, not depending on itself. Ignored by a
    /// server (RFC 9113 §5.3.2), in any stream state.
    Priority {
        /// The stream.
        stream: u32,
        /// Its priority.
        priority: Priority,
    },
    /// RST_STREAM (§6.4), on a stream other than 0 (an idle one is the caller's
    /// connection error).
    RstStream {
        /// The stream.
        stream: u32,
        /// Why.
        code: ErrorCode,
    },
    /// SETTINGS (§6.5), on stream 0, every value valid ([`check_setting`]).
    Settings {
        /// ACK: then `params` is empty.
        ack: bool,
        /// The parameters, 6 bytes each; read them with [`settings_params`].
        params: &'a [u8],
    },
    /// PUSH_PROMISE (§6.6). A client never sends one: a server receiving it answers
    /// with a connection error PROTOCOL_ERROR (§8.4). Its payload is not parsed.
    PushPromise {
        /// The stream it came on.
        stream: u32,
    },
    /// PING (§6.7), on stream 0.
    Ping {
        /// ACK: an answer to our PING.
        ack: bool,
        /// Opaque data, echoed in the answer.
        data: [u8; 8],
    },
    /// GOAWAY (§6.8), on stream 0.
    GoAway {
        /// The last stream the peer may have processed.
        last_stream: u32,
        /// Why.
        code: ErrorCode,
        /// Opaque debug data.
        debug: &'a [u8],
    },
    /// WINDOW_UPDATE (§6.9): stream 0 for the connection's window.
    WindowUpdate {
        /// The stream, or 0.
        stream: u32,
        /// The increment (31 bits). It may be 0: the caller answers with a stream error
        /// PROTOCOL_ERROR, or a connection error on stream 0 (§6.9).
        increment: u32,
    },
    /// CONTINUATION (§6.10), on a stream other than 0. Whether one may come now is the
    /// caller's check (only right after HEADERS without END_HEADERS, same stream).
    Continuation {
        /// The stream.
        stream: u32,
        /// The field-block fragment.
        block: &'a [u8],
        /// END_HEADERS.
        end_headers: bool,
    },
    /// A frame of a type this endpoint does not know: ignored by the caller (§4.1,
    /// §5.5). PRIORITY_UPDATE (RFC 9218) comes as this too, for [`priority_update`].
    Unknown {
        /// The type.
        kind: u8,
        /// The stream.
        stream: u32,
    },
}

/// The `(identifier, value)` pairs of a SETTINGS payload, in order (§6.5.1). A trailing
/// partial parameter (never in a payload [`parse`] returned) is skipped.
pub fn settings_params(params: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    params.chunks_exact(6).map(|p| {
        (
            u16::from_be_bytes([p[0], p[1]]),
            u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
        )
    })
}

/// A frame that cannot be accepted, and how §5.4 says to answer it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Connection error (§5.4.1): GOAWAY with the code, then close.
    Connection(ErrorCode, &'static str),
    /// Stream error (§5.4.2) on the stream: RST_STREAM with the code; the frame is
    /// skipped ([`HEADER_LEN`] + its length) and the connection goes on.
    Stream(u32, ErrorCode, &'static str),
}

impl FrameError {
    /// The error code to send.
    pub fn code(self) -> ErrorCode {
        match self {
            FrameError::Connection(code, _) | FrameError::Stream(_, code, _) => code,
        }
    }

    /// Short stable name for logs and metric labels (`settings_ack_with_payload`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            FrameError::Connection(_, why) | FrameError::Stream(_, _, why) => why,
        }
    }
}

/// Whether a SETTINGS value is allowed for its identifier (§6.5.2), with the error when
/// not: `ENABLE_PUSH` other than 0 or 1 (PROTOCOL_ERROR), `INITIAL_WINDOW_SIZE` above
/// 2^31-1 (FLOW_CONTROL_ERROR), `MAX_FRAME_SIZE` outside 16,384..=16,777,215
/// (PROTOCOL_ERROR). Every other identifier, unknown ones included, takes any value.
/// [`parse`] applies it to every parameter of a SETTINGS frame.
pub fn check_setting(id: u16, value: u32) -> Result<(), FrameError> {
    let conn = |code, why| Err(FrameError::Connection(code, why));
    match id {
        setting::ENABLE_PUSH if value > 1 => conn(ErrorCode::PROTOCOL_ERROR, "bad_enable_push"),
        setting::INITIAL_WINDOW_SIZE if value > MAX_WINDOW => {
            conn(ErrorCode::FLOW_CONTROL_ERROR, "bad_initial_window_size")
        }
        setting::MAX_FRAME_SIZE
            if !(DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&value) =>
        {
            conn(ErrorCode::PROTOCOL_ERROR, "bad_max_frame_size")
        }
        _ => Ok(()),
    }
}

/// Its 9-byte header alone (so a caller can refuse an oversized frame before its payload
/// arrives): `(payload length, type, flags, stream)`, the stream's reserved bit cleared
/// (§4.1: ignored on receipt). `None` until `buf` holds [`HEADER_LEN`] bytes.
pub fn peek_header(buf: &[u8]) -> Option<(u32, u8, u8, u32)> {
    let h = buf.get(..HEADER_LEN)?;
    let len = u32::from_be_bytes([0, h[0], h[1], h[2]]);
    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_WINDOW;
    Some((len, h[3], h[4], stream))
}

fn conn(code: ErrorCode, why: &'static str) -> FrameError {
    FrameError::Connection(code, why)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Removes the padding of a DATA, HEADERS or PUSH_PROMISE payload (§6.1, §6.2):
/// `(pad length field, rest without padding)`. `fixed` bytes (HEADERS' priority fields)
/// must fit between the pad length and the padding.
fn unpad<'a>(
    payload: &'a [u8],
    flags: u8,
    fixed: usize,
    too_short: &'static str,
    bad_pad: &'static str,
) -> Result<&'a [u8], FrameError> {
    if flags & flag::PADDED == 0 {
        if payload.len() < fixed {
            return Err(conn(ErrorCode::FRAME_SIZE_ERROR, too_short));
        }
        return Ok(payload);
    }
    let Some((&pad, rest)) = payload.split_first() else {
        return Err(conn(ErrorCode::FRAME_SIZE_ERROR, too_short));
    };
    if rest.len() < fixed {
        return Err(conn(ErrorCode::FRAME_SIZE_ERROR, too_short));
    }
    // §6.1/§6.2: padding as long as the rest of the payload or longer: PROTOCOL_ERROR.
    // "Rest" here is what follows the pad length and the fixed fields.
    let room = rest.len() - fixed;
    if usize::from(pad) > room {
        return Err(conn(ErrorCode::PROTOCOL_ERROR, bad_pad));
    }
    Ok(&rest[..rest.len() - usize::from(pad)])
}

fn priority_of(b: &[u8]) -> Priority {
    let dep = be32(b);
    Priority {
        dependency: dep & MAX_WINDOW,
        exclusive: dep & !MAX_WINDOW != 0,
        weight: b[4],
    }
}

/// One frame from the start of `buf`, checked against our advertised max frame size
/// (a larger one: FRAME_SIZE_ERROR, §4.2) and the per-type rules of §6 that need no
/// connection state (stream id 0 or not, fixed lengths, padding longer than the payload,
/// SETTINGS values, ...). Flags a type does not define are ignored (§4.1).
///
/// `Ok(None)`: `buf` holds less than a whole frame (an oversized one is refused as soon
/// as its header is in). `Ok(Some((frame, bytes_consumed)))`.
pub fn parse(buf: &[u8], max_frame_size: u32) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    let Some((len, kind, flags, stream)) = peek_header(buf) else {
        return Ok(None);
    };
    if len > max_frame_size {
        return Err(conn(ErrorCode::FRAME_SIZE_ERROR, "frame_too_large"));
    }
    // len < 2^24: no overflow on any platform with 32-bit usize or more.
    let total = HEADER_LEN + len as usize;
    let Some(payload) = buf.get(HEADER_LEN..total) else {
        return Ok(None);
    };
    let on_zero = |why| {
        if stream == 0 {
            Err(conn(ErrorCode::PROTOCOL_ERROR, why))
        } else {
            Ok(())
        }
    };
    let not_zero = |why| {
        if stream != 0 {
            Err(conn(ErrorCode::PROTOCOL_ERROR, why))
        } else {
            Ok(())
        }
    };
    let frame = match kind {
        kind::DATA => {
            on_zero("data_on_stream_0")?;
            let data = unpad(payload, flags, 0, "data_too_short", "data_padding_too_long")?;
            Frame::Data {
                stream,
                data,
                flow_len: len,
                end_stream: flags & flag::END_STREAM != 0,
            }
        }
        kind::HEADERS => {
            on_zero("headers_on_stream_0")?;
            let fixed = if flags & flag::PRIORITY != 0 { 5 } else { 0 };
            let rest = unpad(
                payload,
                flags,
                fixed,
                "headers_too_short",
                "headers_padding_too_long",
            )?;
            let (priority, block) = if fixed == 5 {
                (Some(priority_of(rest)), &rest[5..])
            } else {
                (None, rest)
            };
            Frame::Headers {
                stream,
                block,
                end_stream: flags & flag::END_STREAM != 0,
                end_headers: flags & flag::END_HEADERS != 0,
                priority,
            }
        }
        kind::PRIORITY => {
            on_zero("priority_on_stream_0")?;
            if len != 5 {
                return Err(FrameError::Stream(
                    stream,
                    ErrorCode::FRAME_SIZE_ERROR,
                    "priority_bad_length",
                ));
            }
            let priority = priority_of(payload);
            if priority.dependency == stream {
                return Err(FrameError::Stream(
                    stream,
                    ErrorCode::PROTOCOL_ERROR,
                    "priority_depends_on_itself",
                ));
            }
            Frame::Priority { stream, priority }
        }
        kind::RST_STREAM => {
            on_zero("rst_stream_on_stream_0")?;
            if len != 4 {
                return Err(conn(ErrorCode::FRAME_SIZE_ERROR, "rst_stream_bad_length"));
            }
            Frame::RstStream {
                stream,
                code: ErrorCode(be32(payload)),
            }
        }
        kind::SETTINGS => {
            not_zero("settings_on_stream")?;
            let ack = flags & flag::ACK != 0;
            if ack && len != 0 {
                return Err(conn(
                    ErrorCode::FRAME_SIZE_ERROR,
                    "settings_ack_with_payload",
                ));
            }
            if len % 6 != 0 {
                return Err(conn(ErrorCode::FRAME_SIZE_ERROR, "settings_bad_length"));
            }
            for (id, value) in settings_params(payload) {
                check_setting(id, value)?;
            }
            Frame::Settings {
                ack,
                params: payload,
            }
        }
        kind::PUSH_PROMISE => {
            on_zero("push_promise_on_stream_0")?;
            Frame::PushPromise { stream }
        }
        kind::PING => {
            not_zero("ping_on_stream")?;
            let Ok(data) = <[u8; 8]>::try_from(payload) else {
                return Err(conn(ErrorCode::FRAME_SIZE_ERROR, "ping_bad_length"));
            };
            Frame::Ping {
                ack: flags & flag::ACK != 0,
                data,
            }
        }
        kind::GOAWAY => {
            not_zero("goaway_on_stream")?;
            if len < 8 {
                return Err(conn(ErrorCode::FRAME_SIZE_ERROR, "goaway_too_short"));
            }
            Frame::GoAway {
                last_stream: be32(payload) & MAX_WINDOW,
                code: ErrorCode(be32(&payload[4..])),
                debug: &payload[8..],
            }
        }
        kind::WINDOW_UPDATE => {
            if len != 4 {
                return Err(conn(
                    ErrorCode::FRAME_SIZE_ERROR,
                    "window_update_bad_length",
                ));
            }
            Frame::WindowUpdate {
                stream,
                increment: be32(payload) & MAX_WINDOW,
            }
        }
        kind::CONTINUATION => {
            on_zero("continuation_on_stream_0")?;
            Frame::Continuation {
                stream,
                block: payload,
                end_headers: flags & flag::END_HEADERS != 0,
            }
        }
        _ => Frame::Unknown { kind, stream },
    };
    Ok(Some((frame, total)))
}

/// The payload of a PRIORITY_UPDATE frame (RFC 9218 §7.1), which [`parse`] returns as
/// [`Frame::Unknown`] with kind [`kind::PRIORITY_UPDATE`]; its payload is
/// `&buf[HEADER_LEN..consumed]`. `(prioritized stream, Priority Field Value)`, the value
/// for [`super::priority::parse`]. Sent on a stream other than 0 or naming stream 0:
/// connection error PROTOCOL_ERROR; shorter than 4 bytes: FRAME_SIZE_ERROR. Whether the
/// prioritized stream may be named (not a push stream, within the concurrency limit) is
/// the caller's.
pub fn priority_update(stream: u32, payload: &[u8]) -> Result<(u32, &[u8]), FrameError> {
    if stream != 0 {
        return Err(conn(ErrorCode::PROTOCOL_ERROR, "priority_update_on_stream"));
    }
    if payload.len() < 4 {
        return Err(conn(
            ErrorCode::FRAME_SIZE_ERROR,
            "priority_update_too_short",
        ));
    }
    let prioritized = be32(payload) & MAX_WINDOW;
    if prioritized == 0 {
        return Err(conn(
            ErrorCode::PROTOCOL_ERROR,
            "priority_update_for_stream_0",
        ));
    }
    Ok((prioritized, &payload[4..]))
}

/// A frame header (§4.1). `len` is cut to 24 bits and `stream` to 31: callers keep
/// payloads within the peer's max frame size.
fn header(len: u32, kind: u8, flags: u8, stream: u32) -> [u8; HEADER_LEN] {
    debug_assert!(len <= MAX_MAX_FRAME_SIZE, "frame payload over 2^24-1");
    let l = len.to_be_bytes();
    let s = (stream & MAX_WINDOW).to_be_bytes();
    [l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]
}

fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A SETTINGS frame with `params` (§6.5).
pub fn write_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    out.extend_from_slice(&header(len_u32(params.len() * 6), kind::SETTINGS, 0, 0));
    for &(id, value) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// A SETTINGS frame with ACK and no payload (§6.5.3).
pub fn write_settings_ack(out: &mut Vec<u8>) {
    out.extend_from_slice(&header(0, kind::SETTINGS, flag::ACK, 0));
}

/// A PING frame (§6.7); `ack` for the answer to a peer's PING, with its data.
pub fn write_ping(out: &mut Vec<u8>, ack: bool, data: [u8; 8]) {
    let flags = if ack { flag::ACK } else { 0 };
    out.extend_from_slice(&header(8, kind::PING, flags, 0));
    out.extend_from_slice(&data);
}

/// A WINDOW_UPDATE frame (§6.9); stream 0 for the connection. `increment` is cut to 31
/// bits; the caller never sends 0.
pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    out.extend_from_slice(&header(4, kind::WINDOW_UPDATE, 0, stream));
    out.extend_from_slice(&(increment & MAX_WINDOW).to_be_bytes());
}

/// An RST_STREAM frame (§6.4).
pub fn write_rst_stream(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    out.extend_from_slice(&header(4, kind::RST_STREAM, 0, stream));
    out.extend_from_slice(&code.0.to_be_bytes());
}

/// A GOAWAY frame (§6.8). `debug` must keep the payload within the peer's max frame
/// size (16,384 at least): a few words, never request data.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &[u8]) {
    out.extend_from_slice(&header(len_u32(8 + debug.len()), kind::GOAWAY, 0, 0));
    out.extend_from_slice(&(last_stream & MAX_WINDOW).to_be_bytes());
    out.extend_from_slice(&code.0.to_be_bytes());
    out.extend_from_slice(debug);
}

/// HEADERS then as many CONTINUATION frames as `block` needs at `max_frame_size` (§6.2,
/// §6.10); END_HEADERS on the last, END_STREAM (when asked) on the HEADERS frame. An
/// empty block is one empty HEADERS frame.
pub fn write_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    let max = max_frame_size.clamp(DEFAULT_MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE) as usize;
    let mut chunks = block.chunks(max).peekable();
    let mut kind = kind::HEADERS;
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        out.extend_from_slice(&header(0, kind, flags | flag::END_HEADERS, stream));
        return;
    }
    while let Some(chunk) = chunks.next() {
        if chunks.peek().is_none() {
            flags |= flag::END_HEADERS;
        }
        out.extend_from_slice(&header(len_u32(chunk.len()), kind, flags, stream));
        out.extend_from_slice(chunk);
        kind = kind::CONTINUATION;
        flags = 0;
    }
}

/// The 9-byte header of a DATA frame whose `len` payload bytes the caller sends itself
/// (zero copy: header, then `sendfile`). No padding; `len` within the peer's max frame
/// size.
pub fn data_header(stream: u32, len: u32, end_stream: bool) -> [u8; HEADER_LEN] {
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    header(len, kind::DATA, flags, stream)
}

/// A DATA frame carrying `data` (no padding), which must be within the peer's max frame
/// size.
pub fn write_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    out.extend_from_slice(&data_header(stream, len_u32(data.len()), end_stream));
    out.extend_from_slice(data);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    const MAX: u32 = DEFAULT_MAX_FRAME_SIZE;

    /// A frame: header fields then payload.
    fn fr(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = header(payload.len() as u32, kind, flags, stream).to_vec();
        v.extend_from_slice(payload);
        v
    }

    fn one(buf: &[u8]) -> Frame<'_> {
        let (f, n) = parse(buf, MAX).unwrap().unwrap();
        assert_eq!(n, buf.len());
        f
    }

    fn conn_err(buf: &[u8], code: ErrorCode, why: &str) {
        assert_eq!(
            parse(buf, MAX),
            Err(FrameError::Connection(code, leak(why)))
        );
    }

    fn leak(s: &str) -> &'static str {
        Box::leak(s.to_owned().into_boxed_str())
    }

    #[test]
    fn preface_and_constants() {
        assert_eq!(&PREFACE[..], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        assert_eq!(MAX_MAX_FRAME_SIZE, (1 << 24) - 1);
        assert_eq!(MAX_WINDOW, (1 << 31) - 1);
    }

    #[test]
    fn error_code_labels() {
        let all = [
            (ErrorCode::NO_ERROR, 0, "no_error"),
            (ErrorCode::PROTOCOL_ERROR, 1, "protocol_error"),
            (ErrorCode::INTERNAL_ERROR, 2, "internal_error"),
            (ErrorCode::FLOW_CONTROL_ERROR, 3, "flow_control_error"),
            (ErrorCode::SETTINGS_TIMEOUT, 4, "settings_timeout"),
            (ErrorCode::STREAM_CLOSED, 5, "stream_closed"),
            (ErrorCode::FRAME_SIZE_ERROR, 6, "frame_size_error"),
            (ErrorCode::REFUSED_STREAM, 7, "refused_stream"),
            (ErrorCode::CANCEL, 8, "cancel"),
            (ErrorCode::COMPRESSION_ERROR, 9, "compression_error"),
            (ErrorCode::CONNECT_ERROR, 10, "connect_error"),
            (ErrorCode::ENHANCE_YOUR_CALM, 11, "enhance_your_calm"),
            (ErrorCode::INADEQUATE_SECURITY, 12, "inadequate_security"),
            (ErrorCode::HTTP_1_1_REQUIRED, 13, "http_1_1_required"),
            (ErrorCode(14), 14, "unknown"),
            (ErrorCode(u32::MAX), u32::MAX, "unknown"),
        ];
        for (code, n, label) in all {
            assert_eq!(code.0, n);
            assert_eq!(code.as_str(), label);
        }
    }

    #[test]
    fn partial_frames_need_more() {
        let f = fr(kind::PING, 0, 0, &[7; 8]);
        for cut in 0..f.len() {
            assert_eq!(parse(&f[..cut], MAX), Ok(None), "cut at {cut}");
        }
        assert!(peek_header(&f[..8]).is_none());
        assert_eq!(peek_header(&f[..9]), Some((8, kind::PING, 0, 0)));
    }

    #[test]
    fn parse_consumes_one_frame_of_several() {
        let mut buf = fr(kind::PING, 0, 0, &[1; 8]);
        buf.extend(fr(kind::PING, flag::ACK, 0, &[2; 8]));
        let (f, n) = parse(&buf, MAX).unwrap().unwrap();
        assert_eq!(
            f,
            Frame::Ping {
                ack: false,
                data: [1; 8]
            }
        );
        assert_eq!(n, 17);
        let (f, n) = parse(&buf[n..], MAX).unwrap().unwrap();
        assert_eq!(
            f,
            Frame::Ping {
                ack: true,
                data: [2; 8]
            }
        );
        assert_eq!(n, 17);
    }

    #[test]
    fn oversized_frame_refused_from_its_header_alone() {
        let h = header(MAX + 1, kind::DATA, 0, 1);
        conn_err(&h, ErrorCode::FRAME_SIZE_ERROR, "frame_too_large");
        // A larger advertised size admits it (and then waits for its payload).
        assert_eq!(parse(&h, MAX + 1), Ok(None));
    }

    // --- h2spec http2/4.1 Frame Format

    /// h2spec 4.1.1: a frame of an unknown type is returned as Unknown (the caller drops it).
    #[test]
    fn h2spec_4_1_1_unknown_frame_type() {
        let buf = fr(0x16, 0, 0, &[0; 8]);
        assert_eq!(
            one(&buf),
            Frame::Unknown {
                kind: 0x16,
                stream: 0
            }
        );
        // On a stream, with flags, with a payload.
        let buf = fr(0xff, 0xff, 3, b"whatever");
        assert_eq!(
            one(&buf),
            Frame::Unknown {
                kind: 0xff,
                stream: 3
            }
        );
    }

    /// h2spec 4.1.2: undefined flags are ignored.
    #[test]
    fn h2spec_4_1_2_undefined_flags_ignored() {
        let buf = fr(kind::PING, 0x16, 0, &[0; 8]);
        assert_eq!(
            one(&buf),
            Frame::Ping {
                ack: false,
                data: [0; 8]
            }
        );
        let buf = fr(kind::DATA, 0xf6, 1, b"ab");
        assert_eq!(
            one(&buf),
            Frame::Data {
                stream: 1,
                data: b"ab",
                flow_len: 2,
                end_stream: false
            }
        );
    }

    /// h2spec 4.1.3: the reserved bit of the stream id is ignored.
    #[test]
    fn h2spec_4_1_3_reserved_bit_ignored() {
        let mut buf = fr(kind::PING, 0x16, 0, &[0; 8]);
        buf[5] |= 0x80;
        assert_eq!(
            one(&buf),
            Frame::Ping {
                ack: false,
                data: [0; 8]
            }
        );
        let mut buf = fr(kind::DATA, 0, 5, b"x");
        buf[5] |= 0x80;
        assert!(matches!(one(&buf), Frame::Data { stream: 5, .. }));
    }

    // --- h2spec http2/4.2 Frame Size

    /// h2spec 4.2.1: a DATA frame of 2^14 bytes is accepted.
    #[test]
    fn h2spec_4_2_1_data_frame_of_2_14_bytes() {
        let payload = vec![b'x'; 16_384];
        let buf = fr(kind::DATA, flag::END_STREAM, 1, &payload);
        match one(&buf) {
            Frame::Data {
                stream: 1,
                data,
                flow_len: 16_384,
                end_stream: true,
            } => {
                assert_eq!(data.len(), 16_384)
            }
            f => panic!("{f:?}"),
        }
    }

    /// h2spec 4.2.2: a DATA frame over SETTINGS_MAX_FRAME_SIZE: FRAME_SIZE_ERROR.
    #[test]
    fn h2spec_4_2_2_data_frame_over_max_frame_size() {
        let buf = fr(kind::DATA, 0, 1, &vec![0; 16_385]);
        conn_err(&buf, ErrorCode::FRAME_SIZE_ERROR, "frame_too_large");
    }

    /// h2spec 4.2.3: a HEADERS frame over SETTINGS_MAX_FRAME_SIZE: connection error
    /// FRAME_SIZE_ERROR.
    #[test]
    fn h2spec_4_2_3_headers_frame_over_max_frame_size() {
        let buf = fr(kind::HEADERS, flag::END_HEADERS, 1, &vec![0; 16_385]);
        conn_err(&buf, ErrorCode::FRAME_SIZE_ERROR, "frame_too_large");
    }

    // --- h2spec http2/5.3.1, 5.5, 7

    /// h2spec 5.3.1.1: HEADERS depending on itself is parsed (the caller raises the
    /// stream error after decoding the block); the priority carries the dependency.
    #[test]
    fn h2spec_5_3_1_1_headers_depends_on_itself() {
        let buf = fr(
            kind::HEADERS,
            flag::END_HEADERS | flag::PRIORITY,
            3,
            &[0, 0, 0, 3, 15, 0x82],
        );
        assert_eq!(
            one(&buf),
            Frame::Headers {
                stream: 3,
                block: &[0x82],
                end_stream: false,
                end_headers: true,
                priority: Some(Priority {
                    dependency: 3,
                    exclusive: false,
                    weight: 15
                }),
            }
        );
    }

    /// h2spec 5.3.1.2: PRIORITY depending on itself: stream error PROTOCOL_ERROR.
    #[test]
    fn h2spec_5_3_1_2_priority_depends_on_itself() {
        let buf = fr(kind::PRIORITY, 0, 1, &[0, 0, 0, 1, 15]);
        assert_eq!(
            parse(&buf, MAX),
            Err(FrameError::Stream(
                1,
                ErrorCode::PROTOCOL_ERROR,
                "priority_depends_on_itself"
            ))
        );
        // Exclusive bit set, still itself.
        let buf = fr(kind::PRIORITY, 0, 1, &[0x80, 0, 0, 1, 15]);
        assert!(matches!(
            parse(&buf, MAX),
            Err(FrameError::Stream(1, ErrorCode::PROTOCOL_ERROR, _))
        ));
    }

    /// h2spec 5.5.1: an unknown extension frame is ignored.
    #[test]
    fn h2spec_5_5_1_unknown_extension_frame() {
        let buf = fr(0xff, 0, 0, b"unknown");
        assert_eq!(
            one(&buf),
            Frame::Unknown {
                kind: 0xff,
                stream: 0
            }
        );
    }

    /// h2spec 7.1: GOAWAY with an unknown error code is parsed as is.
    #[test]
    fn h2spec_7_1_goaway_unknown_error_code() {
        let buf = fr(kind::GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0xff]);
        assert_eq!(
            one(&buf),
            Frame::GoAway {
                last_stream: 0,
                code: ErrorCode(0xff),
                debug: b""
            }
        );
    }

    /// h2spec 7.2: RST_STREAM with an unknown error code is parsed as is.
    #[test]
    fn h2spec_7_2_rst_stream_unknown_error_code() {
        let buf = fr(kind::RST_STREAM, 0, 1, &[0, 0, 0, 0xff]);
        assert_eq!(
            one(&buf),
            Frame::RstStream {
                stream: 1,
                code: ErrorCode(0xff)
            }
        );
    }

    // --- h2spec http2/6.1 DATA

    /// h2spec 6.1.1: DATA on stream 0: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_1_1_data_on_stream_0() {
        let buf = fr(kind::DATA, flag::END_STREAM, 0, b"test");
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "data_on_stream_0");
    }

    /// h2spec 6.1.3: DATA with a pad length past the payload: PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_1_3_data_invalid_pad_length() {
        // h2spec's bytes: length 5, PADDED|END_STREAM, stream 1, pad length 6.
        let buf = b"\x00\x00\x05\x00\x09\x00\x00\x00\x01\x06\x54\x65\x73\x74";
        conn_err(buf, ErrorCode::PROTOCOL_ERROR, "data_padding_too_long");
        // Pad length equal to the payload length (5): still too long (§6.1).
        let buf = fr(kind::DATA, flag::PADDED, 1, &[5, 0, 0, 0, 0]);
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "data_padding_too_long");
        // One less: all padding, no data; flow control still counts all 5 bytes.
        let buf = fr(kind::DATA, flag::PADDED, 1, &[4, 0, 0, 0, 0]);
        assert_eq!(
            one(&buf),
            Frame::Data {
                stream: 1,
                data: b"",
                flow_len: 5,
                end_stream: false
            }
        );
        // PADDED without room for the pad length.
        let buf = fr(kind::DATA, flag::PADDED, 1, &[]);
        conn_err(&buf, ErrorCode::FRAME_SIZE_ERROR, "data_too_short");
    }

    #[test]
    fn data_padding_removed_and_counted() {
        let buf = fr(
            kind::DATA,
            flag::PADDED | flag::END_STREAM,
            7,
            b"\x02abc\0\0",
        );
        assert_eq!(
            one(&buf),
            Frame::Data {
                stream: 7,
                data: b"abc",
                flow_len: 6,
                end_stream: true
            }
        );
        let buf = fr(kind::DATA, 0, 7, b"");
        assert_eq!(
            one(&buf),
            Frame::Data {
                stream: 7,
                data: b"",
                flow_len: 0,
                end_stream: false
            }
        );
    }

    // --- h2spec http2/6.2 HEADERS

    /// h2spec 6.2.3: HEADERS on stream 0: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_2_3_headers_on_stream_0() {
        let buf = fr(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            0,
            &[0x82],
        );
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "headers_on_stream_0");
    }

    /// h2spec 6.2.4: HEADERS whose padding exceeds the room left: PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_2_4_headers_invalid_pad_length() {
        // h2spec: length = fragment + 1, pad length = fragment + 2.
        let block = [0x82, 0x86, 0x84, 0x41, 0x01, b'a'];
        let mut payload = vec![block.len() as u8 + 2];
        payload.extend_from_slice(&block);
        let buf = fr(
            kind::HEADERS,
            flag::END_HEADERS | flag::PADDED | flag::END_STREAM,
            1,
            &payload,
        );
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "headers_padding_too_long");
        // With PRIORITY, the 5 priority bytes are not room for padding.
        let buf = fr(
            kind::HEADERS,
            flag::PADDED | flag::PRIORITY,
            1,
            &[1, 0, 0, 0, 0, 16],
        );
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "headers_padding_too_long");
        // Too short to hold the priority fields.
        let buf = fr(kind::HEADERS, flag::PRIORITY, 1, &[0, 0, 0, 0]);
        conn_err(&buf, ErrorCode::FRAME_SIZE_ERROR, "headers_too_short");
        let buf = fr(kind::HEADERS, flag::PADDED, 1, &[]);
        conn_err(&buf, ErrorCode::FRAME_SIZE_ERROR, "headers_too_short");
    }

    #[test]
    fn headers_padding_and_priority_removed() {
        let payload = [2, 0x80, 0, 0, 5, 200, 0x82, 0x86, 0, 0];
        let buf = fr(
            kind::HEADERS,
            flag::PADDED | flag::PRIORITY | flag::END_STREAM,
            9,
            &payload,
        );
        assert_eq!(
            one(&buf),
            Frame::Headers {
                stream: 9,
                block: &[0x82, 0x86],
                end_stream: true,
                end_headers: false,
                priority: Some(Priority {
                    dependency: 5,
                    exclusive: true,
                    weight: 200
                }),
            }
        );
        let buf = fr(kind::HEADERS, flag::END_HEADERS, 1, b"");
        assert_eq!(
            one(&buf),
            Frame::Headers {
                stream: 1,
                block: b"",
                end_stream: false,
                end_headers: true,
                priority: None
            }
        );
    }

    // --- h2spec http2/6.3 PRIORITY

    /// h2spec 6.3.1: PRIORITY on stream 0: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_3_1_priority_on_stream_0() {
        let buf = fr(kind::PRIORITY, 0, 0, &[0, 0, 0, 1, 255]);
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "priority_on_stream_0");
    }

    /// h2spec 6.3.2: PRIORITY of length other than 5: stream error FRAME_SIZE_ERROR.
    #[test]
    fn h2spec_6_3_2_priority_length_not_5() {
        for len in [0, 4, 6] {
            let buf = fr(kind::PRIORITY, 0, 3, &vec![0; len]);
            assert_eq!(
                parse(&buf, MAX),
                Err(FrameError::Stream(
                    3,
                    ErrorCode::FRAME_SIZE_ERROR,
                    "priority_bad_length"
                ))
            );
        }
        let buf = fr(kind::PRIORITY, 0, 3, &[0, 0, 0, 1, 15]);
        assert_eq!(
            one(&buf),
            Frame::Priority {
                stream: 3,
                priority: Priority {
                    dependency: 1,
                    exclusive: false,
                    weight: 15
                }
            }
        );
    }

    // --- h2spec http2/6.4 RST_STREAM

    /// h2spec 6.4.1: RST_STREAM on stream 0: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_4_1_rst_stream_on_stream_0() {
        let buf = fr(kind::RST_STREAM, 0, 0, &[0, 0, 0, 8]);
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "rst_stream_on_stream_0");
    }

    /// h2spec 6.4.3: RST_STREAM of length other than 4: connection error FRAME_SIZE_ERROR.
    #[test]
    fn h2spec_6_4_3_rst_stream_length_not_4() {
        for len in [0, 3, 5] {
            let buf = fr(kind::RST_STREAM, 0, 1, &vec![0; len]);
            conn_err(&buf, ErrorCode::FRAME_SIZE_ERROR, "rst_stream_bad_length");
        }
    }

    // --- h2spec http2/6.5 SETTINGS

    /// h2spec 6.5.1: SETTINGS with ACK and a payload: connection error FRAME_SIZE_ERROR.
    #[test]
    fn h2spec_6_5_1_settings_ack_with_payload() {
        let buf = fr(kind::SETTINGS, flag::ACK, 0, &[0, 3, 0, 0, 0, 100]);
        conn_err(
            &buf,
            ErrorCode::FRAME_SIZE_ERROR,
            "settings_ack_with_payload",
        );
        let buf = fr(kind::SETTINGS, flag::ACK, 0, &[]);
        assert_eq!(
            one(&buf),
            Frame::Settings {
                ack: true,
                params: b""
            }
        );
    }

    /// h2spec 6.5.2: SETTINGS on a stream: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_5_2_settings_on_stream() {
        let buf = fr(kind::SETTINGS, 0, 1, &[0, 3, 0, 0, 0, 100]);
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "settings_on_stream");
    }

    /// h2spec 6.5.3: SETTINGS length not a multiple of 6: connection error FRAME_SIZE_ERROR.
    #[test]
    fn h2spec_6_5_3_settings_length_not_multiple_of_6() {
        for len in [1, 3, 5, 7, 11] {
            let buf = fr(kind::SETTINGS, 0, 0, &vec![0; len]);
            conn_err(&buf, ErrorCode::FRAME_SIZE_ERROR, "settings_bad_length");
        }
    }

    fn settings(params: &[(u16, u32)]) -> Vec<u8> {
        let mut out = Vec::new();
        write_settings(&mut out, params);
        out
    }

    /// h2spec 6.5.2.1: ENABLE_PUSH other than 0 or 1: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_5_2_1_enable_push_not_0_or_1() {
        for v in [2, 255, u32::MAX] {
            conn_err(
                &settings(&[(setting::ENABLE_PUSH, v)]),
                ErrorCode::PROTOCOL_ERROR,
                "bad_enable_push",
            );
        }
        for v in [0, 1] {
            assert!(matches!(
                one(&settings(&[(setting::ENABLE_PUSH, v)])),
                Frame::Settings { .. }
            ));
        }
    }

    /// h2spec 6.5.2.2: INITIAL_WINDOW_SIZE above 2^31-1: connection error FLOW_CONTROL_ERROR.
    #[test]
    fn h2spec_6_5_2_2_initial_window_size_too_large() {
        conn_err(
            &settings(&[(setting::INITIAL_WINDOW_SIZE, MAX_WINDOW + 1)]),
            ErrorCode::FLOW_CONTROL_ERROR,
            "bad_initial_window_size",
        );
        assert!(matches!(
            one(&settings(&[(setting::INITIAL_WINDOW_SIZE, MAX_WINDOW)])),
            Frame::Settings { .. }
        ));
    }

    /// h2spec 6.5.2.3: MAX_FRAME_SIZE below 16,384: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_5_2_3_max_frame_size_below_initial() {
        for v in [0, 16_383] {
            conn_err(
                &settings(&[(setting::MAX_FRAME_SIZE, v)]),
                ErrorCode::PROTOCOL_ERROR,
                "bad_max_frame_size",
            );
        }
        assert!(matches!(
            one(&settings(&[(setting::MAX_FRAME_SIZE, 16_384)])),
            Frame::Settings { .. }
        ));
    }

    /// h2spec 6.5.2.4: MAX_FRAME_SIZE above 2^24-1: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_5_2_4_max_frame_size_above_maximum() {
        conn_err(
            &settings(&[(setting::MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE + 1)]),
            ErrorCode::PROTOCOL_ERROR,
            "bad_max_frame_size",
        );
        assert!(matches!(
            one(&settings(&[(setting::MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE)])),
            Frame::Settings { .. }
        ));
    }

    /// h2spec 6.5.2.5: an unknown identifier is accepted (and the caller ignores it).
    #[test]
    fn h2spec_6_5_2_5_unknown_setting_identifier() {
        let buf = settings(&[(0xff, 12345), (setting::MAX_CONCURRENT_STREAMS, 100)]);
        let Frame::Settings { ack: false, params } = one(&buf) else {
            panic!()
        };
        assert_eq!(
            settings_params(params).collect::<Vec<_>>(),
            [(0xff, 12345), (setting::MAX_CONCURRENT_STREAMS, 100)]
        );
        assert_eq!(check_setting(0xff, u32::MAX), Ok(()));
    }

    /// h2spec 6.5.3.1: several INITIAL_WINDOW_SIZE values come back in order.
    #[test]
    fn h2spec_6_5_3_1_settings_values_in_order() {
        let buf = settings(&[
            (setting::INITIAL_WINDOW_SIZE, 100),
            (setting::INITIAL_WINDOW_SIZE, 1),
        ]);
        let Frame::Settings { params, .. } = one(&buf) else {
            panic!()
        };
        assert_eq!(
            settings_params(params).collect::<Vec<_>>(),
            [
                (setting::INITIAL_WINDOW_SIZE, 100),
                (setting::INITIAL_WINDOW_SIZE, 1)
            ]
        );
    }

    /// A bad value after good ones still refuses the whole frame.
    #[test]
    fn settings_bad_value_anywhere_refuses_the_frame() {
        let buf = settings(&[
            (setting::HEADER_TABLE_SIZE, 0),
            (setting::MAX_FRAME_SIZE, 1),
        ]);
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "bad_max_frame_size");
    }

    // --- h2spec http2/6.7 PING

    /// h2spec 6.7.1 / 6.7.2: PING and PING with ACK are parsed with their data.
    #[test]
    fn h2spec_6_7_1_ping_and_ack() {
        let buf = fr(kind::PING, 0, 0, b"h2spec\0\0");
        assert_eq!(
            one(&buf),
            Frame::Ping {
                ack: false,
                data: *b"h2spec\0\0"
            }
        );
        let buf = fr(kind::PING, flag::ACK, 0, b"h2spec\0\0");
        assert_eq!(
            one(&buf),
            Frame::Ping {
                ack: true,
                data: *b"h2spec\0\0"
            }
        );
    }

    /// h2spec 6.7.3: PING on a stream: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_7_3_ping_on_stream() {
        let buf = fr(kind::PING, 0, 1, &[0; 8]);
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "ping_on_stream");
    }

    /// h2spec 6.7.4: PING of length other than 8: connection error FRAME_SIZE_ERROR.
    #[test]
    fn h2spec_6_7_4_ping_length_not_8() {
        for len in [0, 6, 7, 9] {
            let buf = fr(kind::PING, 0, 0, &vec![0; len]);
            conn_err(&buf, ErrorCode::FRAME_SIZE_ERROR, "ping_bad_length");
        }
    }

    // --- h2spec http2/6.8 GOAWAY

    /// h2spec 6.8.1: GOAWAY on a stream: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_8_1_goaway_on_stream() {
        let buf = fr(kind::GOAWAY, 0, 1, &[0; 8]);
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "goaway_on_stream");
        let buf = fr(kind::GOAWAY, 0, 0, &[0; 7]);
        conn_err(&buf, ErrorCode::FRAME_SIZE_ERROR, "goaway_too_short");
        let buf = fr(kind::GOAWAY, 0, 0, b"\x80\0\0\x07\0\0\0\x0bcalm down");
        assert_eq!(
            one(&buf),
            Frame::GoAway {
                last_stream: 7,
                code: ErrorCode::ENHANCE_YOUR_CALM,
                debug: b"calm down"
            }
        );
    }

    // --- h2spec http2/6.9 WINDOW_UPDATE

    /// h2spec 6.9.1 / 6.9.2: an increment of 0 is returned for the caller to judge.
    #[test]
    fn h2spec_6_9_1_window_update_increment_0() {
        let buf = fr(kind::WINDOW_UPDATE, 0, 0, &[0; 4]);
        assert_eq!(
            one(&buf),
            Frame::WindowUpdate {
                stream: 0,
                increment: 0
            }
        );
        let buf = fr(kind::WINDOW_UPDATE, 0, 1, &[0x80, 0, 0, 0]);
        assert_eq!(
            one(&buf),
            Frame::WindowUpdate {
                stream: 1,
                increment: 0
            }
        );
    }

    /// h2spec 6.9.3: WINDOW_UPDATE of length other than 4: connection error FRAME_SIZE_ERROR.
    #[test]
    fn h2spec_6_9_3_window_update_length_not_4() {
        let buf = b"\x00\x00\x03\x08\x00\x00\x00\x00\x00\x00\x00\x01";
        conn_err(buf, ErrorCode::FRAME_SIZE_ERROR, "window_update_bad_length");
        let buf = fr(kind::WINDOW_UPDATE, 0, 1, &[0; 5]);
        conn_err(
            &buf,
            ErrorCode::FRAME_SIZE_ERROR,
            "window_update_bad_length",
        );
    }

    // --- h2spec http2/6.10 CONTINUATION

    /// h2spec 6.10.3: CONTINUATION on stream 0: connection error PROTOCOL_ERROR.
    #[test]
    fn h2spec_6_10_3_continuation_on_stream_0() {
        let buf = fr(kind::CONTINUATION, flag::END_HEADERS, 0, &[0x82]);
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "continuation_on_stream_0");
        let buf = fr(kind::CONTINUATION, flag::END_HEADERS, 1, &[0x82]);
        assert_eq!(
            one(&buf),
            Frame::Continuation {
                stream: 1,
                block: &[0x82],
                end_headers: true
            }
        );
    }

    /// RFC 9113 §8.4: a client's PUSH_PROMISE is returned for the caller to refuse; on
    /// stream 0 it is malformed.
    #[test]
    fn push_promise() {
        let buf = fr(
            kind::PUSH_PROMISE,
            flag::END_HEADERS,
            1,
            &[0, 0, 0, 2, 0x82],
        );
        assert_eq!(one(&buf), Frame::PushPromise { stream: 1 });
        let buf = fr(kind::PUSH_PROMISE, flag::END_HEADERS, 0, &[0, 0, 0, 2]);
        conn_err(&buf, ErrorCode::PROTOCOL_ERROR, "push_promise_on_stream_0");
    }

    /// RFC 9218 §7.1: PRIORITY_UPDATE comes back as Unknown, its payload read by
    /// priority_update with the frame's own rules.
    #[test]
    fn priority_update_frame() {
        let buf = fr(kind::PRIORITY_UPDATE, 0, 0, b"\0\0\0\x05u=0, i");
        let (f, n) = parse(&buf, MAX).unwrap().unwrap();
        assert_eq!(
            f,
            Frame::Unknown {
                kind: kind::PRIORITY_UPDATE,
                stream: 0
            }
        );
        assert_eq!(
            priority_update(0, &buf[HEADER_LEN..n]),
            Ok((5, &b"u=0, i"[..]))
        );
        // Reserved bit ignored; empty field value allowed.
        assert_eq!(priority_update(0, b"\x80\0\0\x07"), Ok((7, &b""[..])));
        assert_eq!(
            priority_update(1, b"\0\0\0\x05u=0"),
            Err(FrameError::Connection(
                ErrorCode::PROTOCOL_ERROR,
                "priority_update_on_stream"
            ))
        );
        assert_eq!(
            priority_update(0, b"\0\0\0"),
            Err(FrameError::Connection(
                ErrorCode::FRAME_SIZE_ERROR,
                "priority_update_too_short"
            ))
        );
        assert_eq!(
            priority_update(0, b"\x80\0\0\0u=1"),
            Err(FrameError::Connection(
                ErrorCode::PROTOCOL_ERROR,
                "priority_update_for_stream_0"
            ))
        );
    }

    #[test]
    fn frame_error_labels() {
        let e = FrameError::Stream(3, ErrorCode::CANCEL, "x");
        assert_eq!((e.code(), e.as_str()), (ErrorCode::CANCEL, "x"));
        let e = FrameError::Connection(ErrorCode::PROTOCOL_ERROR, "y");
        assert_eq!((e.code(), e.as_str()), (ErrorCode::PROTOCOL_ERROR, "y"));
    }

    // --- encoders round-trip through parse

    #[test]
    fn encoders_round_trip() {
        let mut out = Vec::new();
        write_settings(
            &mut out,
            &[
                (setting::MAX_CONCURRENT_STREAMS, 100),
                (setting::INITIAL_WINDOW_SIZE, MAX_WINDOW),
            ],
        );
        write_settings_ack(&mut out);
        write_ping(&mut out, true, *b"12345678");
        write_window_update(&mut out, 0, 1 << 30);
        write_rst_stream(&mut out, 5, ErrorCode::REFUSED_STREAM);
        write_goaway(&mut out, 9, ErrorCode::NO_ERROR, b"bye");
        write_data(&mut out, 3, b"body", true);
        let mut frames = Vec::new();
        let mut at = 0;
        while let Some((f, n)) = parse(&out[at..], MAX).unwrap() {
            frames.push(f);
            at += n;
        }
        assert_eq!(at, out.len());
        let Frame::Settings { ack: false, params } = frames[0] else {
            panic!()
        };
        assert_eq!(
            settings_params(params).collect::<Vec<_>>(),
            [
                (setting::MAX_CONCURRENT_STREAMS, 100),
                (setting::INITIAL_WINDOW_SIZE, MAX_WINDOW)
            ]
        );
        assert_eq!(
            frames[1],
            Frame::Settings {
                ack: true,
                params: b""
            }
        );
        assert_eq!(
            frames[2],
            Frame::Ping {
                ack: true,
                data: *b"12345678"
            }
        );
        assert_eq!(
            frames[3],
            Frame::WindowUpdate {
                stream: 0,
                increment: 1 << 30
            }
        );
        assert_eq!(
            frames[4],
            Frame::RstStream {
                stream: 5,
                code: ErrorCode::REFUSED_STREAM
            }
        );
        assert_eq!(
            frames[5],
            Frame::GoAway {
                last_stream: 9,
                code: ErrorCode::NO_ERROR,
                debug: b"bye"
            }
        );
        assert_eq!(
            frames[6],
            Frame::Data {
                stream: 3,
                data: b"body",
                flow_len: 4,
                end_stream: true
            }
        );
        assert_eq!(frames.len(), 7);
    }

    #[test]
    fn data_header_bytes() {
        assert_eq!(
            data_header(1, 16_384, false),
            [0, 0x40, 0, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(
            data_header(0x7fff_ffff, 0xff_ffff, true),
            [0xff, 0xff, 0xff, 0, 1, 0x7f, 0xff, 0xff, 0xff]
        );
        // The reserved bit is never sent.
        assert_eq!(data_header(0xffff_ffff, 1, false)[5], 0x7f);
    }

    fn headers_frames(block: &[u8], end_stream: bool, max: u32) -> Vec<(u8, u8, Vec<u8>)> {
        let mut out = Vec::new();
        write_headers(&mut out, 5, block, end_stream, max);
        let mut frames = Vec::new();
        let mut at = 0;
        while let Some((len, kind, flags, stream)) = peek_header(&out[at..]) {
            assert_eq!(stream, 5);
            assert!(len <= max.max(DEFAULT_MAX_FRAME_SIZE));
            let start = at + HEADER_LEN;
            frames.push((kind, flags, out[start..start + len as usize].to_vec()));
            at = start + len as usize;
        }
        assert_eq!(at, out.len());
        frames
    }

    #[test]
    fn write_headers_splits_into_continuations() {
        // Fits: one HEADERS with END_HEADERS (and END_STREAM when asked).
        let f = headers_frames(b"abc", true, MAX);
        assert_eq!(
            f,
            [(
                kind::HEADERS,
                flag::END_HEADERS | flag::END_STREAM,
                b"abc".to_vec()
            )]
        );
        // Empty block: one empty HEADERS frame.
        let f = headers_frames(b"", false, MAX);
        assert_eq!(f, [(kind::HEADERS, flag::END_HEADERS, vec![])]);
        // Exactly the frame size: still one frame.
        let block: Vec<u8> = (0..MAX).map(|i| i as u8).collect();
        assert_eq!(headers_frames(&block, false, MAX).len(), 1);
        // 2.5 frames: HEADERS (END_STREAM only), CONTINUATION, CONTINUATION+END_HEADERS.
        let block: Vec<u8> = (0..MAX * 5 / 2).map(|i| i as u8).collect();
        let f = headers_frames(&block, true, MAX);
        assert_eq!(
            f.iter()
                .map(|(k, fl, p)| (*k, *fl, p.len()))
                .collect::<Vec<_>>(),
            [
                (kind::HEADERS, flag::END_STREAM, MAX as usize),
                (kind::CONTINUATION, 0, MAX as usize),
                (kind::CONTINUATION, flag::END_HEADERS, MAX as usize / 2),
            ]
        );
        assert_eq!(f.concat_payloads(), block);
        // A max below the protocol's minimum is raised to it.
        assert_eq!(headers_frames(&block, false, 1).len(), 3);
    }

    trait Concat {
        fn concat_payloads(&self) -> Vec<u8>;
    }
    impl Concat for Vec<(u8, u8, Vec<u8>)> {
        fn concat_payloads(&self) -> Vec<u8> {
            self.iter().flat_map(|(_, _, p)| p.clone()).collect()
        }
    }

    #[test]
    fn check_setting_values() {
        assert_eq!(check_setting(setting::HEADER_TABLE_SIZE, u32::MAX), Ok(()));
        assert_eq!(check_setting(setting::MAX_CONCURRENT_STREAMS, 0), Ok(()));
        assert_eq!(check_setting(setting::MAX_HEADER_LIST_SIZE, 0), Ok(()));
        assert!(check_setting(setting::ENABLE_PUSH, 2).is_err());
        assert!(check_setting(setting::INITIAL_WINDOW_SIZE, 1 << 31).is_err());
        assert!(check_setting(setting::MAX_FRAME_SIZE, 1 << 24).is_err());
    }
}
