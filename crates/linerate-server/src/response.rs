//! What a handler gives the connection: the [`Response`] ready to send, whatever
//! produced it: the head bytes, what follows them ([`Body`]), and the facts the
//! connection needs afterwards (persistence, status, cache status). Both handlers
//! (appliance mode and cache mode) build responses; the send paths (`transfer`, `tls`)
//! consume them. Also the short error responses every mode uses.
//!
//! Not here: the request a handler is given (`exchange`, which sits above the send
//! paths), deciding a response (`appliance`, `proxy`) or moving its bytes (`transfer`,
//! `tls::send`).

use std::fs::File;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;

use linerate_http::multipart::MultipartPlan;
use linerate_http::range::ByteRange;
use linerate_http::{HeadWriter, Persistence, RequestHead, StatusCode, Version};

use crate::context::Worker;
use crate::stats::{CachePhase, Refusal};

/// `Server` field value.
pub(crate) const SERVER: &[u8] = b"linerate";

/// A response ready to send.
pub(crate) struct Response {
    /// Status line and fields, ending with the blank line.
    pub(crate) head: Vec<u8>,
    /// What follows the head.
    pub(crate) body: Body,
    /// Whether the connection continues after this response.
    pub(crate) persistence: Persistence,
    /// The status in `head` (for counters and the access log).
    pub(crate) status: StatusCode,
    /// Where the content came from (appliance mode: always `Local`).
    pub(crate) cache: CachePhase,
    /// Why the request was refused, when it was (see [`refused`]): the access log's
    /// `reason=` and `linerate_requests_refused_total`.
    pub(crate) refusal: Option<Refusal>,
}

/// The bytes after the head.
pub(crate) enum Body {
    /// Nothing (HEAD, 304, or a body already appended to the head).
    Empty,
    /// One range of a file (the whole file for 200).
    File {
        /// The open file (appliance mode: shared with its open-file cache entry).
        file: Rc<File>,
        /// What to send of it.
        range: ByteRange,
        /// When the file's bytes were last found in the page cache (shared with its
        /// open-file cache entry): a range proven resident a moment ago skips the check.
        hot: Rc<crate::openfiles::Hot>,
    },
    /// multipart/byteranges parts of a file.
    Multipart {
        /// The open file (shared like [`Body::File`]'s).
        file: Rc<File>,
        /// Part heads, ranges and trailer.
        plan: MultipartPlan,
    },
    /// Bytes produced piece by piece as they become available (cache mode: a stored
    /// object, possibly still being written, or an origin response relayed).
    Pieces(Box<dyn Pieces>),
}

/// One piece of a [`Body::Pieces`] body.
pub(crate) enum Piece<'a> {
    /// These bytes.
    Bytes(&'a [u8]),
    /// This range of this file (absolute file offsets). An `Arc`, so HTTP/2 can queue
    /// the range without copying its bytes (cache mode's files are the store's).
    File(&'a std::sync::Arc<File>, ByteRange),
    /// This range of a file this process is writing (a fill being followed): bytes
    /// written a moment ago, so in the page cache; sent without a residency check (up
    /// to the hot-proof bound, as a range found resident a moment ago is).
    Written(&'a std::sync::Arc<File>, ByteRange),
}

/// The future of [`Pieces::next`]. Boxed because the producers differ (a stored object,
/// a relay, slices); one allocation per piece, and a piece is up to a whole object.
pub(crate) type NextPiece<'s> =
    Pin<Box<dyn Future<Output = Result<Option<Piece<'s>>, TransferError>> + 's>>;

/// A body produced piece by piece, as its bytes become available.
pub(crate) trait Pieces {
    /// The next piece, `None` when the body is complete. An error means the body cannot
    /// be completed: the connection must close.
    fn next(&mut self) -> NextPiece<'_>;

    /// Whether the first piece is ready now (a complete stored object): the head may
    /// then wait for it in the same segment (`MSG_MORE`); a streamed body sends its
    /// head at once.
    fn ready(&self) -> bool;

    /// Bytes this body will send, when known, else 0 (for the kernel-TLS record
    /// estimate).
    fn len_hint(&self) -> u64;
}

/// Why a response could not be completed. The connection is closed in every case.
#[derive(Debug)]
pub(crate) enum TransferError {
    /// The client reset or closed the connection.
    ClientGone(io::Error),
    /// No progress for the send timeout: the client stopped reading.
    SendTimeout,
    /// The file ended before the promised length (truncated while being sent).
    Truncated,
    /// The disk failed reading a cold range.
    Disk(io::Error),
    /// Cache mode: the body's source failed part-way (origin error while filling,
    /// object changed at the origin); the client must not see a complete response.
    Upstream(&'static str),
}

impl std::fmt::Display for TransferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransferError::ClientGone(e) => write!(f, "client gone: {e}"),
            TransferError::SendTimeout => f.write_str("send timeout: client stopped reading"),
            TransferError::Truncated => {
                f.write_str("file shorter than promised (truncated while sending)")
            }
            TransferError::Disk(e) => write!(f, "disk read failed: {e}"),
            TransferError::Upstream(why) => write!(f, "upstream failed: {why}"),
        }
    }
}

impl TransferError {
    /// Short stable name for logs and metric labels.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            TransferError::ClientGone(_) => "client_gone",
            TransferError::SendTimeout => "send_timeout",
            TransferError::Truncated => "truncated",
            TransferError::Disk(_) => "disk",
            TransferError::Upstream(_) => "upstream",
        }
    }
}

/// `100 Continue` (RFC 9110 §15.2.1), for a client waiting to send its body.
pub(crate) fn interim_continue() -> Response {
    Response {
        head: b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(),
        body: Body::Empty,
        persistence: Persistence::KeepAlive,
        status: StatusCode::Other(100),
        cache: CachePhase::Local,
        refusal: None,
    }
}

/// A short text response for an error status.
pub(crate) fn error(worker: &Worker, status: StatusCode, persistence: Persistence) -> Response {
    simple(worker, status, persistence, None)
}

/// The answer to a request refused for the client's fault: the refusal's status, and a
/// body that says why, then the reason's stable name as logged and counted (`400 Bad
/// Request: malformed request line (bad_request_line)`), so the client's developer need
/// not guess. The connection logs it with `reason=` and counts it. Use
/// this, not [`error`], for every answer caused by what the client sent.
pub(crate) fn refused(worker: &Worker, why: Refusal, persistence: Persistence) -> Response {
    let why_text = format!("{} ({})", why.explain(), why.as_str());
    let mut r = text(worker, why.status(), persistence, None, Some(&why_text));
    r.refusal = Some(why);
    r
}

/// A short text response: `NNN Reason` as the body, with one `extra` field.
pub(crate) fn simple(
    worker: &Worker,
    status: StatusCode,
    persistence: Persistence,
    extra: Option<(&str, &[u8])>,
) -> Response {
    text(worker, status, persistence, extra, None)
}

/// `NNN Reason` (and `: why` when given) as a text body.
fn text(
    worker: &Worker,
    status: StatusCode,
    persistence: Persistence,
    extra: Option<(&str, &[u8])>,
    why: Option<&str>,
) -> Response {
    let mut head = Vec::with_capacity(256);
    let reason = status.reason();
    let body = match why {
        Some(why) => format!("{} {reason}: {why}\n", status.code()),
        None => format!("{} {reason}\n", status.code()),
    };
    let mut w = HeadWriter::new(&mut head, status);
    worker.date.with(|d| w.field("Date", d));
    w.field("Server", SERVER);
    if let Some((name, value)) = extra {
        w.field(name, value);
    }
    w.field("Content-Type", b"text/plain; charset=utf-8");
    w.field_u64("Content-Length", body.len() as u64);
    if matches!(persistence, Persistence::Close) {
        w.field("Connection", b"close");
    }
    w.finish();
    head.extend_from_slice(body.as_bytes());
    Response {
        head,
        body: Body::Empty,
        persistence,
        status,
        cache: CachePhase::Local,
        refusal: None,
    }
}

/// `Connection: close` when closing; `Connection: keep-alive` to HTTP/1.0 clients that
/// asked for it (RFC 9112 §9.3: 1.0 persistence must be announced).
pub(crate) fn persistence_field(
    w: &mut HeadWriter<'_>,
    req: &RequestHead<'_>,
    persistence: Persistence,
) {
    match (persistence, &req.version) {
        (Persistence::Close, _) => {
            w.field("Connection", b"close");
        }
        (Persistence::KeepAlive, Version::Http10) => {
            w.field("Connection", b"keep-alive");
        }
        (Persistence::KeepAlive, Version::Http11) => {}
    }
}
