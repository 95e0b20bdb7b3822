//! The client side of HTTP/1.1, sans-I/O: response heads from an origin (RFC 9112 §4,
//! §6.3) and the chunked transfer coding (RFC 9112 §7.1), for the cache's origin client.
//!
//! We write this small client on top of `httparse` rather than use hyper's because a
//! cache must refuse a body longer than its `Content-Length`, must own every framing
//! error, head limit and per-phase timeout, and wants the body as raw bytes it can append
//! to the store.
//!
//! This module owns bytes only: the caller reads from the socket, hands the bytes in and
//! acts on the values that come back. It does not decide cacheability (the cache's
//! policy does), does not decode content codings, and does not look at trailer fields
//! beyond checking their syntax (a cache stores the body, not the trailers).

use crate::framing::{response_framing, ContentLength, FramingError, TransferCodings};
use crate::syntax::{is_token, list_members};

/// How the body of a response ends (RFC 9112 §6.3); the table is
/// [`crate::framing::response_framing`].
pub use crate::framing::ResponseFraming as Framing;

/// Largest response head accepted, interim (1xx) heads included. Origins send a few
/// hundred bytes to a few KiB; hyper's client allows about 400 KiB and nginx's
/// `proxy_buffer_size` is 4-8 KiB. 64 KiB takes long `Set-Cookie`/`Link` lists while
/// bounding what a broken origin can make each fetch hold.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// Most field lines in one response head. Real origins send 10-30; more than 128 is a
/// broken or hostile origin (httparse needs the bound up front for its array).
pub const MAX_RESPONSE_FIELDS: usize = 128;

/// Longest chunk-size line, extensions included. Nobody sends extensions in practice;
/// 4 KiB tolerates one that does while bounding the scan of a line that never ends.
pub const MAX_CHUNK_LINE: usize = 4096;

/// Most bytes of trailer section accepted (then discarded) after the last chunk.
pub const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// Most hex digits in a chunk size: 16 digits are every u64; more cannot be a size we
/// could hold (leading zeros that long are not sent by real encoders either).
const MAX_CHUNK_SIZE_DIGITS: u8 = 16;

/// A parsed final response head, owning its bytes.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    /// Status code, 200..=599 (interim 1xx responses are skipped by the parser).
    pub status: u16,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Field lines in order, names as sent (compare case-insensitively).
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// How the body ends.
    pub framing: Framing,
    /// Transfer codings other than `chunked`, in the order applied (`gzip` of
    /// `Transfer-Encoding: gzip, chunked`), as sent. The body as read (de-chunked) is
    /// still coded with these: it is not the representation, and a cache relays it with
    /// its codings rather than storing it.
    pub codings: Vec<Vec<u8>>,
    /// Whether the connection may carry another request after this response's body.
    pub keep_alive: bool,
}

impl ResponseHead {
    /// The value of the first field named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The values of every field named `name` (ASCII case-insensitive), in order.
    pub fn headers_named<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// Why a response head was refused. Every one means the origin is at fault and the
/// connection cannot be used further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseError {
    /// More than [`MAX_RESPONSE_HEAD`] bytes or [`MAX_RESPONSE_FIELDS`] field lines.
    TooLarge,
    /// Not an HTTP/1.x response head (status line, field syntax, status out of range).
    Malformed,
    /// Several differing `Content-Length` values, or one that is not a decimal number.
    BadContentLength,
    /// `Transfer-Encoding` whose last coding is not `chunked`, or with `Content-Length`,
    /// or in an HTTP/1.0 response.
    BadTransferEncoding,
    /// `101 Switching Protocols`: we never ask for an upgrade.
    Switching,
}

impl ResponseError {
    /// Short name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ResponseError::TooLarge => "too_large",
            ResponseError::Malformed => "malformed",
            ResponseError::BadContentLength => "bad_content_length",
            ResponseError::BadTransferEncoding => "bad_transfer_encoding",
            ResponseError::Switching => "switching_protocols",
        }
    }
}

/// Most interim (1xx) responses accepted before a final one. Origins send one or two
/// (`103 Early Hints`, a `100 Continue`); a `102 Processing` every few seconds for a
/// long job stays far below this, an origin streaming 1xx heads to stall a fill does
/// not.
pub const MAX_INTERIM_RESPONSES: usize = 32;

/// One head at the start of a buffer.
#[derive(Debug, Clone)]
pub enum Head {
    /// An interim (1xx, not 101) response: RFC 9110 §15.2 says a client MUST be able to
    /// parse one or more before the final response; a proxy forwards them (see
    /// `forward::interim_head`).
    Interim {
        /// Its status (100-199, not 101).
        status: u16,
        /// Its fields, in order.
        fields: Vec<(Vec<u8>, Vec<u8>)>,
        /// Bytes of the buffer it took.
        len: usize,
    },
    /// The final response head.
    Final {
        /// The head.
        head: ResponseHead,
        /// Bytes of the buffer it took; the body starts there.
        len: usize,
    },
}

/// Parse the head at the start of `buf`, interim or final.
///
/// `Ok(None)`: the head is not complete yet; read more and call again with all bytes.
/// `101` is [`ResponseError::Switching`] (we never ask for an upgrade).
/// `request_was_head` says whether the request was HEAD, whose response never has a
/// body (RFC 9110 §9.3.2).
///
/// Framing follows RFC 9112 §6.3 ([`crate::framing::response_framing`], the table the
/// request parser's twin shares), refusing each ambiguous case rather than guessing,
/// because a framing guess that differs from the origin's is how responses desync:
/// 1. HEAD, 1xx, 204 and 304 responses end at the head ([`Framing::Empty`]).
/// 2. `Transfer-Encoding` with `Content-Length` is refused (§6.3 ¶3 lets a recipient
///    treat it as an error; a cache that guessed could be poisoned); in HTTP/1.0 it is
///    refused (§6.1: "MUST treat the message as if the framing is faulty"); `chunked`
///    may be applied once (§7) and only last. When it is last, the body is chunked
///    ([`Framing::Chunked`]); when other codings are there without it, the body runs
///    until the connection closes (§6.3 ¶4); either way [`ResponseHead::codings`] lists
///    the other codings, which this client does not decode.
/// 3. `Content-Length` must be one decimal value; repeats of the same value, on one line
///    (`5, 5`) or several, are that value (RFC 9110 §8.6); anything else is refused
///    (§6.3 ¶5: "MUST treat it as an unrecoverable error").
/// 4. Otherwise the body runs until the connection closes (§6.3 ¶8).
pub fn parse_head(buf: &[u8], request_was_head: bool) -> Result<Option<Head>, ResponseError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_RESPONSE_FIELDS];
    let mut resp = httparse::Response::new(&mut fields);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > MAX_RESPONSE_HEAD => {
            return Err(ResponseError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::TooLarge),
        Err(_) => return Err(ResponseError::Malformed),
    };
    if len > MAX_RESPONSE_HEAD {
        return Err(ResponseError::TooLarge);
    }
    let status = resp.code.ok_or(ResponseError::Malformed)?;
    // RFC 9110 §15: status codes are 100..=599; others are not HTTP.
    if !(100..=599).contains(&status) {
        return Err(ResponseError::Malformed);
    }
    if status == 101 {
        return Err(ResponseError::Switching);
    }
    if status < 200 {
        let fields = resp
            .headers
            .iter()
            .map(|h| (h.name.as_bytes().to_vec(), h.value.to_vec()))
            .collect();
        return Ok(Some(Head::Interim {
            status,
            fields,
            len,
        }));
    }
    let head = interpret(&resp, status, request_was_head)?;
    Ok(Some(Head::Final { head, len }))
}

/// Parse the final response head at the start of `buf`, skipping interim responses
/// (at most [`MAX_INTERIM_RESPONSES`]); `head_len` covers them too. Same rules as
/// [`parse_head`].
pub fn parse_response_head(
    buf: &[u8],
    request_was_head: bool,
) -> Result<Option<(ResponseHead, usize)>, ResponseError> {
    let mut start = 0;
    for _ in 0..=MAX_INTERIM_RESPONSES {
        match parse_head(&buf[start..], request_was_head)? {
            None => return Ok(None),
            Some(Head::Interim { len, .. }) => start += len,
            Some(Head::Final { head, len }) => return Ok(Some((head, start + len))),
        }
        if start > MAX_RESPONSE_HEAD {
            return Err(ResponseError::TooLarge);
        }
    }
    Err(ResponseError::TooLarge)
}

/// Field-level interpretation of a syntactically valid final head.
fn interpret(
    resp: &httparse::Response<'_, '_>,
    status: u16,
    request_was_head: bool,
) -> Result<ResponseHead, ResponseError> {
    let minor_version = resp.version.ok_or(ResponseError::Malformed)?;
    let mut content_length = ContentLength::Absent;
    let mut te = TransferCodings::default();
    let mut codings = Vec::new();
    let mut close = false;
    let mut keep_alive_option = false;
    let mut headers = Vec::with_capacity(resp.headers.len());
    for field in resp.headers.iter() {
        let name = field.name.as_bytes();
        let value = field.value;
        if name.eq_ignore_ascii_case(b"content-length") {
            content_length = content_length.merge(value);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            te.add_each(value, |other| codings.push(other.to_vec()));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in list_members(value) {
                close |= option.eq_ignore_ascii_case(b"close");
                keep_alive_option |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        }
        headers.push((name.to_vec(), value.to_vec()));
    }

    // RFC 9112 §6.3 for responses: see `response_framing`. Interim heads never get here.
    let framing = response_framing(
        request_was_head,
        status,
        minor_version == 0,
        content_length,
        te,
    )
    .map_err(|e| match e {
        FramingError::BadContentLength => ResponseError::BadContentLength,
        FramingError::LengthAndTransferEncoding | FramingError::BadTransferEncoding => {
            ResponseError::BadTransferEncoding
        }
    })?;

    // RFC 9112 §9.3: "close" always wins; HTTP/1.1 persists by default, HTTP/1.0 only
    // with "keep-alive"; a body delimited by close cannot be followed by anything.
    let keep_alive =
        !close && (minor_version == 1 || keep_alive_option) && framing != Framing::UntilClose;

    Ok(ResponseHead {
        status,
        minor_version,
        headers,
        framing,
        codings,
        keep_alive,
    })
}

/// Why a chunked body was refused. Each one leaves the connection unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// A chunk size that is missing, not hex, or longer than 16 hex digits.
    BadSize,
    /// A line not ended by CRLF (bare LF, stray CR, control bytes in an extension, or
    /// chunk data not followed by CRLF).
    BadLine,
    /// A chunk-size line over [`MAX_CHUNK_LINE`] or a trailer section over
    /// [`MAX_TRAILER_BYTES`].
    TooLong,
    /// A trailer line that is not `name: value`.
    BadTrailer,
}

impl ChunkError {
    /// Short name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ChunkError::BadSize => "bad_size",
            ChunkError::BadLine => "bad_line",
            ChunkError::TooLong => "too_long",
            ChunkError::BadTrailer => "bad_trailer",
        }
    }
}

/// Where the decoder is in `chunked-body = *chunk last-chunk trailer-section CRLF`.
#[derive(Debug, Clone)]
enum ChunkState {
    /// In a chunk-size line: the size so far and how many hex digits made it.
    Size { size: u64, digits: u8, line: usize },
    /// After the size, in BWS before `;` (RFC 9112 §7.1.1: `BWS ";"`).
    SizeBws { size: u64, line: usize },
    /// In chunk extensions (after `;`), which are skipped.
    Ext { size: u64, line: usize },
    /// Saw CR ending a size line; LF must follow.
    SizeLf { size: u64 },
    /// Inside chunk data, this many bytes left.
    Data { remaining: u64 },
    /// After chunk data: CR must follow.
    DataCr,
    /// After chunk data and CR: LF must follow.
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer line (its bytes so far are in `trailer_line`).
    TrailerLine,
    /// Saw CR ending a trailer line; LF must follow. `empty`: the line was empty (end).
    TrailerLf { empty: bool },
    /// The whole body, trailers included, has been consumed.
    Done,
    /// An error was reported; every later call reports it again.
    Failed(ChunkError),
}

/// Incremental decoder of the chunked transfer coding (RFC 9112 §7.1).
///
/// Strict where leniency lets two parsers disagree about where a body ends (the request
/// smuggling family): sizes are hex only, no sign, no whitespace before them, at most 16
/// digits; every line ends in CRLF (a bare LF is refused, though RFC 9112 §2.2 lets a
/// recipient accept it); chunk data must be followed by exactly CRLF. Extensions are
/// skipped but bounded; trailers are syntax-checked, bounded and discarded.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: ChunkState,
    /// Bytes of trailer section seen so far (for [`MAX_TRAILER_BYTES`]).
    trailer_bytes: usize,
    /// The current trailer line, to check its syntax at its end.
    trailer_line: Vec<u8>,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a chunked body.
    pub fn new() -> Self {
        ChunkedDecoder {
            state: ChunkState::Size {
                size: 0,
                digits: 0,
                line: 0,
            },
            trailer_bytes: 0,
            trailer_line: Vec::new(),
        }
    }

    /// Whether the last chunk and the trailer section have been consumed.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, ChunkState::Done)
    }

    /// Decode `input`, appending the body bytes it carries to `out`. Returns how many
    /// bytes of `input` were consumed and whether the body is finished; when it is,
    /// `input[consumed..]` follows the body (for an origin response: bytes past the end,
    /// which the caller must treat as an error). Decoded bytes never outnumber consumed
    /// bytes, so the caller can bound `out`'s growth by bounding `input`.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(usize, bool), ChunkError> {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                ChunkState::Done => break,
                ChunkState::Failed(e) => return Err(e),
                ChunkState::Data { remaining } => {
                    let avail = input.len() - i;
                    let take = usize::try_from(remaining).map_or(avail, |r| r.min(avail));
                    out.extend_from_slice(&input[i..i + take]);
                    i += take;
                    let remaining = remaining - take as u64;
                    self.state = if remaining == 0 {
                        ChunkState::DataCr
                    } else {
                        ChunkState::Data { remaining }
                    };
                }
                _ => {
                    let b = input[i];
                    i += 1;
                    if let Err(e) = self.step(b) {
                        self.state = ChunkState::Failed(e);
                        return Err(e);
                    }
                }
            }
        }
        if let ChunkState::Failed(e) = self.state {
            return Err(e);
        }
        Ok((i, self.is_finished()))
    }

    /// One byte of framing (everything but chunk data).
    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        self.state = match self.state {
            ChunkState::Size { size, digits, line } => {
                let line = bump_line(line)?;
                if let Some(d) = hex_value(b) {
                    if digits >= MAX_CHUNK_SIZE_DIGITS {
                        return Err(ChunkError::BadSize);
                    }
                    // 16 digits at most, so this cannot overflow.
                    ChunkState::Size {
                        size: (size << 4) | u64::from(d),
                        digits: digits + 1,
                        line,
                    }
                } else if digits == 0 {
                    return Err(ChunkError::BadSize);
                } else {
                    match b {
                        b'\r' => ChunkState::SizeLf { size },
                        b';' => ChunkState::Ext { size, line },
                        b' ' | b'\t' => ChunkState::SizeBws { size, line },
                        b'\n' => return Err(ChunkError::BadLine),
                        _ => return Err(ChunkError::BadSize),
                    }
                }
            }
            ChunkState::SizeBws { size, line } => {
                let line = bump_line(line)?;
                match b {
                    b' ' | b'\t' => ChunkState::SizeBws { size, line },
                    b';' => ChunkState::Ext { size, line },
                    b'\r' | b'\n' => return Err(ChunkError::BadLine),
                    _ => return Err(ChunkError::BadSize),
                }
            }
            ChunkState::Ext { size, line } => {
                let line = bump_line(line)?;
                match b {
                    b'\r' => ChunkState::SizeLf { size },
                    // Extensions are tokens, quoted strings and BWS (RFC 9112 §7.1.1):
                    // no control byte but HTAB can be part of one.
                    b'\t' => ChunkState::Ext { size, line },
                    0..=0x1f | 0x7f => return Err(ChunkError::BadLine),
                    _ => ChunkState::Ext { size, line },
                }
            }
            ChunkState::SizeLf { size } => {
                if b != b'\n' {
                    return Err(ChunkError::BadLine);
                }
                if size == 0 {
                    ChunkState::TrailerStart
                } else {
                    ChunkState::Data { remaining: size }
                }
            }
            ChunkState::DataCr => {
                if b != b'\r' {
                    return Err(ChunkError::BadLine);
                }
                ChunkState::DataLf
            }
            ChunkState::DataLf => {
                if b != b'\n' {
                    return Err(ChunkError::BadLine);
                }
                ChunkState::Size {
                    size: 0,
                    digits: 0,
                    line: 0,
                }
            }
            ChunkState::TrailerStart | ChunkState::TrailerLine => {
                self.trailer_bytes += 1;
                if self.trailer_bytes > MAX_TRAILER_BYTES {
                    return Err(ChunkError::TooLong);
                }
                let empty = matches!(self.state, ChunkState::TrailerStart);
                match b {
                    b'\r' => ChunkState::TrailerLf { empty },
                    b'\n' => return Err(ChunkError::BadLine),
                    _ => {
                        if empty {
                            self.trailer_line.clear();
                        }
                        self.trailer_line.push(b);
                        ChunkState::TrailerLine
                    }
                }
            }
            ChunkState::TrailerLf { empty } => {
                self.trailer_bytes += 1;
                if self.trailer_bytes > MAX_TRAILER_BYTES {
                    return Err(ChunkError::TooLong);
                }
                if b != b'\n' {
                    return Err(ChunkError::BadLine);
                }
                if empty {
                    ChunkState::Done
                } else {
                    if !is_field_line(&self.trailer_line) {
                        return Err(ChunkError::BadTrailer);
                    }
                    ChunkState::TrailerStart
                }
            }
            ChunkState::Data { .. } | ChunkState::Done | ChunkState::Failed(_) => {
                // `decode` handles these without calling `step`.
                return Ok(());
            }
        };
        Ok(())
    }
}

/// Count one more byte of a chunk-size line against [`MAX_CHUNK_LINE`].
fn bump_line(line: usize) -> Result<usize, ChunkError> {
    if line >= MAX_CHUNK_LINE {
        return Err(ChunkError::TooLong);
    }
    Ok(line + 1)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `field-name ":" OWS field-value OWS` (RFC 9112 §5) with no control bytes but HTAB in
/// the value (RFC 9110 §5.5).
fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    is_token(&line[..colon])
        && line[colon + 1..]
            .iter()
            .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(buf: &[u8]) -> Result<Option<(ResponseHead, usize)>, ResponseError> {
        parse_response_head(buf, false)
    }

    fn complete(buf: &[u8]) -> (ResponseHead, usize) {
        match parse(buf) {
            Ok(Some(x)) => x,
            other => panic!("expected a complete head, got {other:?}"),
        }
    }

    #[test]
    fn simple_head_with_length() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello";
        let (head, len) = complete(raw);
        assert_eq!(len, raw.len() - 5);
        assert_eq!(head.status, 200);
        assert_eq!(head.minor_version, 1);
        assert_eq!(head.framing, Framing::Length(5));
        assert!(head.keep_alive);
        assert_eq!(head.header(b"X-a"), Some(&b"1"[..]));
        let all: Vec<&[u8]> = head.headers_named(b"X-A").collect();
        assert_eq!(all, vec![&b"1"[..], &b"2"[..]]);
        assert_eq!(head.header(b"missing"), None);
    }

    #[test]
    fn partial_heads_need_more() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        for cut in 0..raw.len() {
            assert_eq!(parse(&raw[..cut]).map(|o| o.is_none()), Ok(true), "{cut}");
        }
    }

    #[test]
    fn other_codings_are_listed() {
        let (head, _) = complete(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert_eq!(head.codings, vec![b"gzip".to_vec()]);
        assert!(head.keep_alive);
        let (head, _) = complete(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: x-custom;q=1\r\n\r\n");
        assert_eq!(head.codings, vec![b"x-custom;q=1".to_vec()]);
        assert_eq!(head.framing, Framing::UntilClose);
        assert!(!head.keep_alive);
        let (head, _) = complete(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(head.codings.is_empty());
    }

    #[test]
    fn interim_heads_one_at_a_time() {
        let raw = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let Some(Head::Interim {
            status,
            fields,
            len,
        }) = parse_head(raw, false).unwrap()
        else {
            panic!("interim first");
        };
        assert_eq!((status, len), (103, 40));
        assert_eq!(fields, vec![(b"Link".to_vec(), b"</a>".to_vec())]);
        let Some(Head::Final { head, len: rest }) = parse_head(&raw[len..], false).unwrap() else {
            panic!("then the final head");
        };
        assert_eq!((head.status, len + rest), (200, raw.len()));
        // An endless stream of 1xx heads is refused.
        let flood = b"HTTP/1.1 102 Processing\r\n\r\n".repeat(MAX_INTERIM_RESPONSES + 1);
        assert_eq!(
            parse_response_head(&flood, false).err(),
            Some(ResponseError::TooLarge)
        );
    }

    #[test]
    fn interim_responses_are_skipped() {
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let (head, len) = complete(raw);
        assert_eq!(len, raw.len());
        assert_eq!(head.status, 200);
        assert_eq!(head.header(b"link"), None);
        // Interim complete, final not yet.
        assert_eq!(
            parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2").map(|o| o.is_none()),
            Ok(true)
        );
        assert_eq!(
            parse(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n").err(),
            Some(ResponseError::Switching)
        );
    }

    #[test]
    fn bodiless_statuses_and_head() {
        for status in ["204 No Content", "304 Not Modified"] {
            let raw = format!("HTTP/1.1 {status}\r\nContent-Length: 10\r\n\r\n");
            assert_eq!(complete(raw.as_bytes()).0.framing, Framing::Empty);
        }
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
        let (head, _) = parse_response_head(raw, true).unwrap().unwrap();
        assert_eq!(head.framing, Framing::Empty);
        assert!(head.keep_alive);
        assert_eq!(head.header(b"content-length"), Some(&b"10"[..]));
    }

    #[test]
    fn keep_alive_rules() {
        let ka = |raw: &str| complete(raw.as_bytes()).0.keep_alive;
        assert!(ka("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(!ka(
            "HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(!ka("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(ka(
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(!ka("HTTP/1.1 200 OK\r\n\r\n"), "until-close never persists");
        assert!(!ka(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n"
        ));
    }

    #[test]
    fn malformed_and_oversized_heads() {
        for bad in [
            &b"HTTP/2 200 OK\r\n\r\n"[..],
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/1.1 099 Low\r\n\r\n",
            b"HTTP/1.1 600 High\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
            b"garbage\r\n\r\n",
            b"\0\0\0\0",
        ] {
            assert_eq!(parse(bad).err(), Some(ResponseError::Malformed), "{bad:?}");
        }
        let mut big = b"HTTP/1.1 200 OK\r\n".to_vec();
        while big.len() <= MAX_RESPONSE_HEAD {
            big.extend_from_slice(
                b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
            );
        }
        assert_eq!(parse(&big).err(), Some(ResponseError::TooLarge));
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..=MAX_RESPONSE_FIELDS {
            many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse(&many).err(), Some(ResponseError::TooLarge));
        // A complete head just over the limit is refused too.
        let mut exact = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        exact.resize(MAX_RESPONSE_HEAD - 3, b'a');
        exact.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse(&exact).err(), Some(ResponseError::TooLarge));
    }

    fn decode_all(input: &[u8]) -> Result<(Vec<u8>, usize, bool), ChunkError> {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        let (n, done) = d.decode(input, &mut out)?;
        Ok((out, n, done))
    }

    #[test]
    fn chunked_basics() {
        let raw = b"5\r\nhello\r\n6;name=\"v\" ; x\r\n world\r\n0\r\nX-T: 1\r\n\r\nEXTRA";
        let (out, n, done) = decode_all(raw).unwrap();
        assert_eq!(out, b"hello world");
        assert!(done);
        assert_eq!(&raw[n..], b"EXTRA");
        let (out, n, done) = decode_all(b"A\r\n0123456789\r\n0\r\n\r\n").unwrap();
        assert_eq!((out.as_slice(), n, done), (&b"0123456789"[..], 20, true));
        let (out, _, done) = decode_all(b"5 ;ext\r\nhello\r\n0\r\n").unwrap();
        assert_eq!((out.as_slice(), done), (&b"hello"[..], false));
        let (_, _, done) = decode_all(b"0000000000000000\r\n\r\n").unwrap();
        assert!(done);
    }

    #[test]
    fn chunked_malformed() {
        let cases: &[(&[u8], ChunkError)] = &[
            (b"\r\n", ChunkError::BadSize),
            (b"x\r\n", ChunkError::BadSize),
            (b" 5\r\nhello\r\n", ChunkError::BadSize),
            (b"-5\r\n", ChunkError::BadSize),
            (b"0x5\r\n", ChunkError::BadSize),
            (b"5g\r\n", ChunkError::BadSize),
            (b"5 x\r\n", ChunkError::BadSize),
            (b"11111111111111111\r\n", ChunkError::BadSize),
            (b"5\nhello\r\n", ChunkError::BadLine),
            (b"5\rhello\r\n", ChunkError::BadLine),
            (b"5 \r\nhello\r\n", ChunkError::BadLine),
            (b"5\r\nhelloX\r\n", ChunkError::BadLine),
            (b"5\r\nhello\n0\r\n\r\n", ChunkError::BadLine),
            (b"5\r\nhello\r\r", ChunkError::BadLine),
            (b"5;a\0\r\n", ChunkError::BadLine),
            (b"0\r\n\n", ChunkError::BadLine),
            (b"0\r\nX: 1\n\r\n", ChunkError::BadLine),
            (b"0\r\nno colon\r\n\r\n", ChunkError::BadTrailer),
            (b"0\r\nBad Name: 1\r\n\r\n", ChunkError::BadTrailer),
            (b"0\r\nX: a\x01b\r\n\r\n", ChunkError::BadTrailer),
        ];
        for (input, want) in cases {
            assert_eq!(decode_all(input).err(), Some(*want), "{input:?}");
        }
        let mut long = b"5;".to_vec();
        long.resize(MAX_CHUNK_LINE + 10, b'a');
        assert_eq!(decode_all(&long).err(), Some(ChunkError::TooLong));
        let mut trailers = b"0\r\n".to_vec();
        while trailers.len() < MAX_TRAILER_BYTES + 100 {
            trailers.extend_from_slice(b"X-Trailer: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        assert_eq!(decode_all(&trailers).err(), Some(ChunkError::TooLong));
    }

    #[test]
    fn chunked_errors_stick() {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        assert_eq!(d.decode(b"zz", &mut out), Err(ChunkError::BadSize));
        assert_eq!(d.decode(b"5\r\nhello", &mut out), Err(ChunkError::BadSize));
        assert!(out.is_empty());
        assert!(!d.is_finished());
    }

    #[test]
    fn finished_decoder_consumes_nothing() {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        assert_eq!(d.decode(b"0\r\n\r\n", &mut out), Ok((5, true)));
        assert_eq!(d.decode(b"more", &mut out), Ok((0, true)));
        assert!(d.is_finished());
    }

    /// Encode `chunks` (empty ones skipped: a zero size would end the body) with an
    /// extension on every other chunk and the given trailers.
    fn encode(chunks: &[Vec<u8>], trailers: &[(String, String)], upper: bool) -> Vec<u8> {
        let mut enc = Vec::new();
        for (i, c) in chunks.iter().filter(|c| !c.is_empty()).enumerate() {
            let size = if upper {
                format!("{:X}", c.len())
            } else {
                format!("{:x}", c.len())
            };
            enc.extend_from_slice(size.as_bytes());
            if i % 2 == 1 {
                enc.extend_from_slice(b" ; ext=\"v\"");
            }
            enc.extend_from_slice(b"\r\n");
            enc.extend_from_slice(c);
            enc.extend_from_slice(b"\r\n");
        }
        enc.extend_from_slice(b"0\r\n");
        for (n, v) in trailers {
            enc.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        enc.extend_from_slice(b"\r\n");
        enc
    }

    proptest! {
        #[test]
        fn chunked_round_trip_with_random_splits(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..8),
            trailers in proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,10}", "[ -~]{0,20}"), 0..3),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
            upper in any::<bool>(),
            extra in proptest::collection::vec(any::<u8>(), 0..5),
        ) {
            let enc = encode(&chunks, &trailers, upper);
            let mut input = enc.clone();
            input.extend_from_slice(&extra);
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
            points.push(0);
            points.push(input.len());
            points.sort_unstable();
            let mut d = ChunkedDecoder::new();
            let mut out = Vec::new();
            let mut consumed = 0;
            for w in points.windows(2) {
                // Whatever the previous call left unconsumed is fed again with the next piece.
                let (n, _) = d.decode(&input[consumed..w[1]], &mut out).unwrap();
                consumed += n;
            }
            prop_assert!(d.is_finished());
            prop_assert_eq!(consumed, enc.len());
            prop_assert_eq!(out, chunks.concat());
        }

        #[test]
        fn chunked_never_panics_and_split_agrees(
            input in proptest::collection::vec(any::<u8>(), 0..200),
            cut in any::<prop::sample::Index>(),
        ) {
            let whole = decode_all(&input);
            let cut = cut.index(input.len() + 1);
            let mut d = ChunkedDecoder::new();
            let mut out = Vec::new();
            let split = d.decode(&input[..cut], &mut out).and_then(|(n1, done)| {
                if done {
                    return Ok((n1, true));
                }
                let (n2, done) = d.decode(&input[cut..], &mut out)?;
                Ok((n1 + n2, done))
            });
            match (whole, split) {
                (Ok((w, n, done)), Ok((n2, done2))) => {
                    prop_assert_eq!((n, done), (n2, done2));
                    prop_assert_eq!(w, out);
                }
                (Err(e), Err(e2)) => prop_assert_eq!(e, e2),
                (a, b) => prop_assert!(false, "whole {:?} vs split {:?}", a, b),
            }
        }

        #[test]
        fn response_heads_never_panic(input in proptest::collection::vec(any::<u8>(), 0..300), head in any::<bool>()) {
            if let Ok(Some((_, len))) = parse_response_head(&input, head) {
                prop_assert!(len <= input.len());
            }
        }
    }
}
