//! How a fetch from an origin failed. Every variant is the origin's fault or the path
//! to it (never the client's, never ours), so each maps to 502 or 504 and to one metric
//! label; the retry and health rules key off [`OriginError::nothing_received`].

use linerate_http::upstream::{ChunkError, ResponseError};
use linerate_http::StatusCode;

/// A failed origin fetch.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OriginError {
    /// The TCP connection could not be made (refused, unreachable, name not resolved).
    #[error("connect: {0}")]
    Connect(std::io::Error),
    /// TCP connect plus TLS handshake took longer than `connect_timeout`, or every
    /// connection this worker may hold to the server stayed busy that long.
    #[error("connect timed out")]
    ConnectTimeout,
    /// The origin has no server to try (kept for the metric label; an origin always has
    /// at least one server, and a down one is still tried when no other is up).
    #[error("no origin server to try")]
    AllDown,
    /// The TLS handshake failed (certificate not trusted, name mismatch, protocol).
    #[error("tls: {0}")]
    Tls(String),
    /// The connection was reset (or the pipe broke) before any byte of a response.
    #[error("connection reset before the response")]
    Reset,
    /// The origin closed the connection before any byte of a response.
    #[error("connection closed before the response")]
    Closed,
    /// No response byte within `first_byte_timeout` of starting to send the request.
    #[error("no response within the first-byte timeout")]
    FirstByteTimeout,
    /// A response stalled: no byte for `idle_timeout` once it had begun.
    #[error("response stalled past the idle timeout")]
    IdleTimeout,
    /// The response head was refused.
    #[error("bad response head: {}", .0.as_str())]
    BadHead(ResponseError),
    /// The origin closed before sending all `Content-Length` bytes.
    #[error("body short: {got} of {expected} bytes")]
    BodyShort {
        /// The `Content-Length`.
        expected: u64,
        /// Bytes received.
        got: u64,
    },
    /// Bytes followed the declared end of the body: `Content-Length` or the chunked
    /// framing is wrong, and what we received cannot be trusted.
    #[error("bytes after the end of the body")]
    BodyLong,
    /// The chunked framing was refused.
    #[error("bad chunked body: {}", .0.as_str())]
    BadChunked(ChunkError),
    /// Another I/O error once the response had begun (including the connection
    /// closing inside a head or a chunked body).
    #[error("io: {0}")]
    Io(std::io::Error),
}

/// Every [`OriginError::as_str`] value, in [`OriginError::index`] order (for counters).
pub(crate) const ERROR_KINDS: [&str; 13] = [
    "connect",
    "connect_timeout",
    "all_down",
    "tls",
    "reset",
    "closed",
    "first_byte_timeout",
    "idle_timeout",
    "bad_head",
    "body_short",
    "body_long",
    "bad_chunked",
    "io",
];

impl OriginError {
    /// The status a client gets when this failure cannot be hidden (RFC 9110 §15.6.3:
    /// 502 for an invalid response; §15.6.5: 504 for no timely response).
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            OriginError::ConnectTimeout
            | OriginError::FirstByteTimeout
            | OriginError::IdleTimeout => StatusCode::GatewayTimeout,
            _ => StatusCode::BadGateway,
        }
    }

    /// Short snake_case name for `Cache-Status` details, logs and metric labels.
    pub(crate) fn as_str(&self) -> &'static str {
        ERROR_KINDS[self.index()]
    }

    /// Position in [`ERROR_KINDS`].
    pub(crate) fn index(&self) -> usize {
        match self {
            OriginError::Connect(_) => 0,
            OriginError::ConnectTimeout => 1,
            OriginError::AllDown => 2,
            OriginError::Tls(_) => 3,
            OriginError::Reset => 4,
            OriginError::Closed => 5,
            OriginError::FirstByteTimeout => 6,
            OriginError::IdleTimeout => 7,
            OriginError::BadHead(_) => 8,
            OriginError::BodyShort { .. } => 9,
            OriginError::BodyLong => 10,
            OriginError::BadChunked(_) => 11,
            OriginError::Io(_) => 12,
        }
    }

    /// Whether the failure came before any byte of a response, so the request may be
    /// sent again (to a fresh connection, or another server) without anyone having seen
    /// a partial answer.
    pub(crate) fn nothing_received(&self) -> bool {
        matches!(
            self,
            OriginError::Connect(_)
                | OriginError::ConnectTimeout
                | OriginError::AllDown
                | OriginError::Tls(_)
                | OriginError::Reset
                | OriginError::Closed
                | OriginError::FirstByteTimeout
        )
    }

    /// Whether the failure says the server could not be reached or did not answer at
    /// all (what down-marking counts): a refused or timed-out connect, a failed TLS
    /// handshake, no first byte or a stalled head. A connection the origin closed or
    /// reset, a bad head or a bad body came from a server that is up.
    pub(crate) fn is_unreachable(&self) -> bool {
        matches!(
            self,
            OriginError::Connect(_)
                | OriginError::ConnectTimeout
                | OriginError::Tls(_)
                | OriginError::FirstByteTimeout
                | OriginError::IdleTimeout
        )
    }

    /// An I/O error before any response byte: resets become [`OriginError::Reset`],
    /// anything else stays an [`OriginError::Io`] (and is not retried).
    pub(super) fn before_response(e: std::io::Error) -> OriginError {
        use std::io::ErrorKind;
        match e.kind() {
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
                OriginError::Reset
            }
            _ => OriginError::Io(e),
        }
    }
}
