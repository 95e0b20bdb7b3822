//! Response-head handling for the load generator, sans-I/O: bytes in, a parsed head (status,
//! head length, body length, keep-alive or close) out.
//!
//! The generator only needs to know where a response ends, so this module decides the
//! body length by RFC 9112 §6.3 and nothing else. It deliberately does not support
//! bodies it cannot skip by count: `Transfer-Encoding` (chunked) and close-delimited
//! bodies are reported as errors, because a server under benchmark that answers a
//! plain `GET` for a static file that way is not comparable anyway. It does not read
//! sockets, keep buffers or look at header values other than `Content-Length`,
//! `Transfer-Encoding` and `Connection`.

use std::fmt;

use linerate_http::framing::{response_framing, ContentLength, ResponseFraming, TransferCodings};

/// Largest response head accepted, in bytes. Static-file servers send 150-400 bytes;
/// 16 KiB is hyper's and nginx's order of magnitude for a head and bounds the
/// per-connection buffer. Larger heads are a [`HeadError::TooLarge`].
pub const MAX_HEAD_LEN: usize = 16 * 1024;

/// Most header lines parsed in one head. nginx sends 6-9 for a static file; 64 leaves
/// room for a server adding its own diagnostics without costing more than a stack array.
const MAX_HEADERS: usize = 64;

/// Whether the connection can carry another request after this response
/// (RFC 9112 §9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// HTTP/1.1 default, or HTTP/1.0 with `Connection: keep-alive`.
    KeepAlive,
    /// `Connection: close`, or HTTP/1.0 without keep-alive: reconnect after the body.
    Close,
}

impl Persistence {
    /// Label for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Persistence::KeepAlive => "keep-alive",
            Persistence::Close => "close",
        }
    }
}

/// A complete, understood response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    /// Status code, 200-599 (interim 1xx responses are rejected).
    pub status: u16,
    /// Bytes of the head including the blank line; body bytes start at this offset.
    pub head_len: usize,
    /// Bytes of body that follow the head.
    pub body_len: u64,
    /// Whether the connection may be reused.
    pub persistence: Persistence,
}

/// Outcome of looking at the bytes read so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadParse {
    /// The head is not complete yet: read more.
    Partial,
    /// The head is complete.
    Complete(ResponseHead),
}

/// Why a response head cannot be used. Every variant is the server's fault (or a
/// server feature this generator does not measure); the connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Not HTTP/1.x syntax (httparse's verdict).
    Malformed(httparse::Error),
    /// No blank line within [`MAX_HEAD_LEN`] bytes.
    TooLarge,
    /// A 1xx interim response; we never send `Expect`, so none should come
    /// (RFC 9110 §15.2: a server must not send 1xx to an HTTP/1.0 client and has no
    /// reason to send `100 Continue` without `Expect`).
    Interim(u16),
    /// `Transfer-Encoding` is present (chunked bodies are not skipped by count).
    TransferEncoding,
    /// No `Content-Length` on a response that has a body: the body would run until
    /// the server closes (RFC 9112 §6.3 item 8), which a keep-alive benchmark cannot use.
    NoLength,
    /// `Content-Length` is not a decimal number, or several differ (RFC 9112 §6.3 item 5).
    BadContentLength,
}

impl HeadError {
    /// Label for reports and error counters.
    pub fn as_str(self) -> &'static str {
        match self {
            HeadError::Malformed(_) => "malformed",
            HeadError::TooLarge => "head-too-large",
            HeadError::Interim(_) => "interim-1xx",
            HeadError::TransferEncoding => "transfer-encoding",
            HeadError::NoLength => "no-content-length",
            HeadError::BadContentLength => "bad-content-length",
        }
    }
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadError::Malformed(e) => write!(f, "malformed response head: {e}"),
            HeadError::TooLarge => write!(f, "response head longer than {MAX_HEAD_LEN} bytes"),
            HeadError::Interim(s) => write!(f, "unexpected interim response {s}"),
            HeadError::TransferEncoding => write!(f, "Transfer-Encoding bodies are not supported"),
            HeadError::NoLength => write!(f, "response has a body but no Content-Length"),
            HeadError::BadContentLength => write!(f, "invalid Content-Length"),
        }
    }
}

impl std::error::Error for HeadError {}

/// Parse the response head at the start of `buf`, which holds everything read so far
/// for this response (head, then possibly body bytes). `Partial` means read more; a
/// caller whose buffer already holds [`MAX_HEAD_LEN`] bytes gets `TooLarge` instead.
/// The response is assumed to answer a `GET` (a `HEAD` response would have no body).
pub fn parse_head(buf: &[u8]) -> Result<HeadParse, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_LEN => {
            return Err(HeadError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(HeadParse::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(e) => return Err(HeadError::Malformed(e)),
    };
    // httparse guarantees both are present on a complete parse; treat absence as malformed
    // rather than unwrapping (STYLE.md #10).
    let (Some(status), Some(minor)) = (resp.code, resp.version) else {
        return Err(HeadError::Malformed(httparse::Error::Status));
    };
    if (100..200).contains(&status) {
        return Err(HeadError::Interim(status));
    }

    // The fields are folded by the framing rules the server and its origin client use
    // (`linerate_http::framing`), so the generator cannot disagree with them on where a
    // response ends.
    let mut content_length = ContentLength::Absent;
    let mut te = TransferCodings::default();
    let mut close = false;
    let mut keep_alive = false;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            content_length = content_length.merge(h.value);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            te.add(h.value);
        } else if h.name.eq_ignore_ascii_case("connection") {
            // RFC 9110 §7.6.1: a comma-separated list of case-insensitive tokens.
            for token in h.value.split(|&b| b == b',').map(trim_ows) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }

    // Bodies that cannot be skipped by count are refused whatever the status, and so is
    // an invalid Content-Length (RFC 9112 §6.3 item 5), even on a 204 or 304.
    if te.is_present() {
        return Err(HeadError::TransferEncoding);
    }
    if content_length == ContentLength::Invalid {
        return Err(HeadError::BadContentLength);
    }
    // RFC 9112 §6.3 item 1: 204 and 304 never have a body, whatever the headers say. The
    // request was a GET, never HEAD.
    let body_len = match response_framing(false, status, minor == 0, content_length, te) {
        Ok(ResponseFraming::Empty) => 0,
        Ok(ResponseFraming::Length(n)) => n,
        Ok(ResponseFraming::UntilClose) => return Err(HeadError::NoLength),
        Ok(ResponseFraming::Chunked) => return Err(HeadError::TransferEncoding),
        Err(_) => return Err(HeadError::BadContentLength),
    };
    // RFC 9112 §9.3: HTTP/1.1 persists unless "close"; HTTP/1.0 only with "keep-alive".
    let persistence = if close || (minor == 0 && !keep_alive) {
        Persistence::Close
    } else {
        Persistence::KeepAlive
    };
    Ok(HeadParse::Complete(ResponseHead {
        status,
        head_len,
        body_len,
        persistence,
    }))
}

/// Strip optional whitespace (RFC 9110 §5.6.3: SP / HTAB) from both ends.
fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;

    fn complete(raw: &[u8]) -> ResponseHead {
        match parse_head(raw).unwrap() {
            HeadParse::Complete(h) => h,
            HeadParse::Partial => panic!("partial"),
        }
    }

    #[test]
    fn ok_with_length_and_body_bytes_after_head() {
        let raw = b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 5\r\n\r\nhel";
        let h = complete(raw);
        assert_eq!(h.status, 200);
        assert_eq!(h.head_len, raw.len() - 3);
        assert_eq!(h.body_len, 5);
        assert_eq!(h.persistence, Persistence::KeepAlive);
    }

    #[test]
    fn partial_until_blank_line() {
        let raw = b"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\n";
        for cut in 0..raw.len() {
            assert_eq!(
                parse_head(&raw[..cut]).unwrap(),
                HeadParse::Partial,
                "cut {cut}"
            );
        }
        assert_eq!(complete(raw).status, 206);
    }

    #[test]
    fn connection_close_and_http10() {
        let h =
            complete(b"HTTP/1.1 200 OK\r\nConnection: Upgrade, CLOSE\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(h.persistence, Persistence::Close);
        let h = complete(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(h.persistence, Persistence::Close);
        let h = complete(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(h.persistence, Persistence::KeepAlive);
    }

    #[test]
    fn content_length_rules() {
        assert_eq!(
            complete(b"HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n").body_len,
            7
        );
        assert_eq!(
            complete(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n").body_len,
            3
        );
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        ] {
            assert_eq!(parse_head(bad), Err(HeadError::BadContentLength));
        }
    }

    #[test]
    fn bodies_without_count_are_errors() {
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(HeadError::TransferEncoding)
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\n\r\n"),
            Err(HeadError::NoLength)
        );
    }

    #[test]
    fn no_body_statuses_need_no_length() {
        assert_eq!(complete(b"HTTP/1.1 304 Not Modified\r\n\r\n").body_len, 0);
        assert_eq!(
            complete(b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n").body_len,
            0
        );
    }

    #[test]
    fn rejects_interim_garbage_and_huge_heads() {
        assert_eq!(
            parse_head(b"HTTP/1.1 100 Continue\r\n\r\n"),
            Err(HeadError::Interim(100))
        );
        assert!(matches!(
            parse_head(b"SSH-2.0-OpenSSH\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
        let mut big = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        big.resize(MAX_HEAD_LEN, b'a');
        assert_eq!(parse_head(&big), Err(HeadError::TooLarge));
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..=MAX_HEADERS {
            many.extend_from_slice(b"A: b\r\n");
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&many), Err(HeadError::TooLarge));
    }
}
