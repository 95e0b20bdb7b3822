//! Response-head encoding (RFC 9112 §4, §5): status line and fields into a reusable
//! buffer, so each response costs no allocation once the buffer has grown.
//!
//! Not here: choosing the status or the fields (the server does), `Date` caching, or the
//! body. Values are written verbatim except that CR, LF and NUL become SP, so a value
//! that slipped through validation cannot split the response.

/// The statuses this server produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusCode {
    /// 200
    Ok,
    /// 206
    PartialContent,
    /// 304
    NotModified,
    /// 400
    BadRequest,
    /// 403
    Forbidden,
    /// 404
    NotFound,
    /// 405
    MethodNotAllowed,
    /// 408
    RequestTimeout,
    /// 412
    PreconditionFailed,
    /// 413
    ContentTooLarge,
    /// 414
    UriTooLong,
    /// 416
    RangeNotSatisfiable,
    /// 431
    RequestHeaderFieldsTooLarge,
    /// 500
    InternalServerError,
    /// 501
    NotImplemented,
    /// 503
    ServiceUnavailable,
    /// 505
    HttpVersionNotSupported,
    /// 502 (cache mode: the origin failed or answered something invalid)
    BadGateway,
    /// 504 (cache mode: the origin did not answer in time, or `only-if-cached` missed)
    GatewayTimeout,
    /// Any other status, passed through from an origin (cache mode). Reason phrase
    /// from RFC 9110 §15 where registered, else empty (RFC 9112 §4 allows that).
    Other(u16),
}

impl StatusCode {
    /// Numeric code.
    pub fn code(self) -> u16 {
        match self {
            StatusCode::Ok => 200,
            StatusCode::PartialContent => 206,
            StatusCode::NotModified => 304,
            StatusCode::BadRequest => 400,
            StatusCode::Forbidden => 403,
            StatusCode::NotFound => 404,
            StatusCode::MethodNotAllowed => 405,
            StatusCode::RequestTimeout => 408,
            StatusCode::PreconditionFailed => 412,
            StatusCode::ContentTooLarge => 413,
            StatusCode::UriTooLong => 414,
            StatusCode::RangeNotSatisfiable => 416,
            StatusCode::RequestHeaderFieldsTooLarge => 431,
            StatusCode::InternalServerError => 500,
            StatusCode::NotImplemented => 501,
            StatusCode::ServiceUnavailable => 503,
            StatusCode::HttpVersionNotSupported => 505,
            StatusCode::BadGateway => 502,
            StatusCode::GatewayTimeout => 504,
            StatusCode::Other(n) => n,
        }
    }
    /// Reason phrase: the one RFC 9110 §15 registers (RFC 6585 §5 for 431).
    pub fn reason(self) -> &'static str {
        match self {
            StatusCode::Ok => "OK",
            StatusCode::PartialContent => "Partial Content",
            StatusCode::NotModified => "Not Modified",
            StatusCode::BadRequest => "Bad Request",
            StatusCode::Forbidden => "Forbidden",
            StatusCode::NotFound => "Not Found",
            StatusCode::MethodNotAllowed => "Method Not Allowed",
            StatusCode::RequestTimeout => "Request Timeout",
            StatusCode::PreconditionFailed => "Precondition Failed",
            StatusCode::ContentTooLarge => "Content Too Large",
            StatusCode::UriTooLong => "URI Too Long",
            StatusCode::RangeNotSatisfiable => "Range Not Satisfiable",
            StatusCode::RequestHeaderFieldsTooLarge => "Request Header Fields Too Large",
            StatusCode::InternalServerError => "Internal Server Error",
            StatusCode::NotImplemented => "Not Implemented",
            StatusCode::ServiceUnavailable => "Service Unavailable",
            StatusCode::HttpVersionNotSupported => "HTTP Version Not Supported",
            StatusCode::BadGateway => "Bad Gateway",
            StatusCode::GatewayTimeout => "Gateway Timeout",
            StatusCode::Other(n) => other_reason(n),
        }
    }
    /// Whether this status never carries a body (RFC 9110 §6.4.1: 1xx, 204, 304).
    /// Of the statuses here only 304 qualifies. (A response to HEAD has no body either,
    /// whatever its status; that is the server's decision, not the status's.)
    pub fn is_bodiless(self) -> bool {
        match self {
            StatusCode::NotModified => true,
            StatusCode::Other(n) => n < 200 || n == 204 || n == 304,
            _ => false,
        }
    }

    /// The status for code `n`: a named variant when there is one, else `Other(n)`.
    pub fn from_code(n: u16) -> StatusCode {
        match n {
            200 => StatusCode::Ok,
            206 => StatusCode::PartialContent,
            304 => StatusCode::NotModified,
            400 => StatusCode::BadRequest,
            403 => StatusCode::Forbidden,
            404 => StatusCode::NotFound,
            405 => StatusCode::MethodNotAllowed,
            408 => StatusCode::RequestTimeout,
            412 => StatusCode::PreconditionFailed,
            413 => StatusCode::ContentTooLarge,
            414 => StatusCode::UriTooLong,
            416 => StatusCode::RangeNotSatisfiable,
            431 => StatusCode::RequestHeaderFieldsTooLarge,
            500 => StatusCode::InternalServerError,
            501 => StatusCode::NotImplemented,
            502 => StatusCode::BadGateway,
            503 => StatusCode::ServiceUnavailable,
            504 => StatusCode::GatewayTimeout,
            505 => StatusCode::HttpVersionNotSupported,
            n => StatusCode::Other(n),
        }
    }
}

/// Reason phrases of the other statuses an origin commonly sends (RFC 9110 §15).
fn other_reason(n: u16) -> &'static str {
    match n {
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        401 => "Unauthorized",
        402 => "Payment Required",
        406 => "Not Acceptable",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        _ => "",
    }
}

/// Writes one response head into a caller-owned buffer (cleared first).
#[derive(Debug)]
pub struct HeadWriter<'b> {
    buf: &'b mut Vec<u8>,
}

impl<'b> HeadWriter<'b> {
    /// Start `HTTP/1.1 <code> <reason>\r\n` (always 1.1, RFC 9110 §2.5), clearing `buf`.
    ///
    /// RFC 9110 §6.2 / RFC 9112 §2.3: a server sends its own highest conformant version,
    /// 1.1, also to HTTP/1.0 clients.
    pub fn new(buf: &'b mut Vec<u8>, status: StatusCode) -> Self {
        buf.clear();
        buf.extend_from_slice(b"HTTP/1.1 ");
        push_u64(buf, u64::from(status.code()));
        buf.push(b' ');
        buf.extend_from_slice(status.reason().as_bytes());
        buf.extend_from_slice(b"\r\n");
        Self { buf }
    }
    /// Append field lines to `buf` as they are, without a status line: for rendering
    /// fields once and writing the bytes into many heads ([`HeadWriter::rendered`]).
    pub fn fields_into(buf: &'b mut Vec<u8>) -> Self {
        Self { buf }
    }

    /// Append field lines that a [`HeadWriter::fields_into`] writer wrote earlier, as
    /// they are (they went through [`HeadWriter::field`]'s checks then).
    pub fn rendered(&mut self, fields: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(fields);
        self
    }

    /// Append `name: value\r\n`. Name and value must not contain CR/LF (the server only
    /// passes its own constants and validated configuration).
    ///
    /// Should a CR, LF or NUL reach `value` anyway, it is written as SP: RFC 9110 §5.5
    /// says a sender MUST NOT generate them, and this is the last place to stop a
    /// response-splitting bug. `name` is trusted (debug builds assert it is a token).
    pub fn field(&mut self, name: &str, value: &[u8]) -> &mut Self {
        debug_assert!(
            crate::syntax::is_token(name.as_bytes()),
            "field name {name:?} is not a token"
        );
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b": ");
        if value.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0)) {
            self.buf.extend(value.iter().map(|&b| match b {
                b'\r' | b'\n' | 0 => b' ',
                other => other,
            }));
        } else {
            self.buf.extend_from_slice(value);
        }
        self.buf.extend_from_slice(b"\r\n");
        self
    }
    /// Append a field whose name came from elsewhere (an origin's response, already
    /// validated as a token by the parser); same value sanitising as [`Self::field`].
    pub fn field_raw(&mut self, name: &[u8], value: &[u8]) -> &mut Self {
        if !crate::syntax::is_token(name) {
            return self;
        }
        // A token is ASCII, so this cannot fail.
        match std::str::from_utf8(name) {
            Ok(n) => self.field(n, value),
            Err(_) => self,
        }
    }
    /// Append `name: <decimal>\r\n` without allocating.
    pub fn field_u64(&mut self, name: &str, value: u64) -> &mut Self {
        let mut digits = DecimalBuf::new();
        self.field(name, digits.format(value))
    }
    /// Append `Content-Range: bytes first-last/len\r\n`.
    pub fn content_range(&mut self, first: u64, last: u64, len: u64) -> &mut Self {
        self.buf.extend_from_slice(b"Content-Range: bytes ");
        push_u64(self.buf, first);
        self.buf.push(b'-');
        push_u64(self.buf, last);
        self.buf.push(b'/');
        push_u64(self.buf, len);
        self.buf.extend_from_slice(b"\r\n");
        self
    }
    /// Append `Content-Range: bytes */len\r\n` (for 416).
    pub fn content_range_unsatisfied(&mut self, len: u64) -> &mut Self {
        self.buf.extend_from_slice(b"Content-Range: bytes */");
        push_u64(self.buf, len);
        self.buf.extend_from_slice(b"\r\n");
        self
    }
    /// Append the final CRLF.
    pub fn finish(&mut self) {
        self.buf.extend_from_slice(b"\r\n");
    }
}

/// Digits of `u64::MAX`.
const U64_DIGITS: usize = 20;

/// A stack buffer for one decimal `u64`.
struct DecimalBuf {
    bytes: [u8; U64_DIGITS],
}

impl DecimalBuf {
    fn new() -> Self {
        Self {
            bytes: [0; U64_DIGITS],
        }
    }

    /// The decimal digits of `value`, no sign, no leading zeros ("0" for zero).
    fn format(&mut self, mut value: u64) -> &[u8] {
        let mut start = U64_DIGITS;
        loop {
            start -= 1;
            // `value % 10` < 10, so the cast cannot truncate.
            self.bytes[start] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        &self.bytes[start..]
    }
}

/// Append the decimal form of `value` to `out` without a temporary allocation.
pub(crate) fn push_u64(out: &mut Vec<u8>, value: u64) {
    let mut digits = DecimalBuf::new();
    out.extend_from_slice(digits.format(value));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ALL: [StatusCode; 17] = [
        StatusCode::Ok,
        StatusCode::PartialContent,
        StatusCode::NotModified,
        StatusCode::BadRequest,
        StatusCode::Forbidden,
        StatusCode::NotFound,
        StatusCode::MethodNotAllowed,
        StatusCode::RequestTimeout,
        StatusCode::PreconditionFailed,
        StatusCode::ContentTooLarge,
        StatusCode::UriTooLong,
        StatusCode::RangeNotSatisfiable,
        StatusCode::RequestHeaderFieldsTooLarge,
        StatusCode::InternalServerError,
        StatusCode::NotImplemented,
        StatusCode::ServiceUnavailable,
        StatusCode::HttpVersionNotSupported,
    ];

    #[test]
    fn codes_and_reasons() {
        let expected = [
            (200, "OK"),
            (206, "Partial Content"),
            (304, "Not Modified"),
            (400, "Bad Request"),
            (403, "Forbidden"),
            (404, "Not Found"),
            (405, "Method Not Allowed"),
            (408, "Request Timeout"),
            (412, "Precondition Failed"),
            (413, "Content Too Large"),
            (414, "URI Too Long"),
            (416, "Range Not Satisfiable"),
            (431, "Request Header Fields Too Large"),
            (500, "Internal Server Error"),
            (501, "Not Implemented"),
            (503, "Service Unavailable"),
            (505, "HTTP Version Not Supported"),
        ];
        for (status, (code, reason)) in ALL.iter().zip(expected) {
            assert_eq!(status.code(), code);
            assert_eq!(status.reason(), reason);
            assert_eq!(status.is_bodiless(), code == 304);
        }
    }

    #[test]
    fn writes_a_head() {
        let mut buf = b"stale bytes".to_vec();
        let mut w = HeadWriter::new(&mut buf, StatusCode::PartialContent);
        w.field("Content-Type", b"video/mp2t")
            .field_u64("Content-Length", 100)
            .content_range(0, 99, 1000);
        w.finish();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "HTTP/1.1 206 Partial Content\r\n\
             Content-Type: video/mp2t\r\n\
             Content-Length: 100\r\n\
             Content-Range: bytes 0-99/1000\r\n\
             \r\n"
        );
    }

    #[test]
    fn status_line_only() {
        let mut buf = Vec::new();
        HeadWriter::new(&mut buf, StatusCode::NotModified).finish();
        assert_eq!(buf, b"HTTP/1.1 304 Not Modified\r\n\r\n");
    }

    #[test]
    fn unsatisfied_range() {
        let mut buf = Vec::new();
        HeadWriter::new(&mut buf, StatusCode::RangeNotSatisfiable)
            .content_range_unsatisfied(0)
            .finish();
        assert_eq!(
            buf,
            b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */0\r\n\r\n"
        );
    }

    #[test]
    fn extreme_numbers() {
        let mut buf = Vec::new();
        HeadWriter::new(&mut buf, StatusCode::Ok)
            .field_u64("Content-Length", 0)
            .field_u64("X-Max", u64::MAX)
            .content_range(u64::MAX - 1, u64::MAX - 1, u64::MAX);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Max: 18446744073709551615\r\n\
             Content-Range: bytes 18446744073709551614-18446744073709551614/18446744073709551615\r\n"
        );
    }

    #[test]
    fn values_cannot_split_the_response() {
        let mut buf = Vec::new();
        HeadWriter::new(&mut buf, StatusCode::Ok)
            .field("X-A", b"a\r\nSet-Cookie: x\0")
            .finish();
        assert_eq!(buf, b"HTTP/1.1 200 OK\r\nX-A: a  Set-Cookie: x \r\n\r\n");
    }

    #[test]
    fn buffer_is_reused() {
        let mut buf = Vec::new();
        HeadWriter::new(&mut buf, StatusCode::NotFound)
            .field("A", b"b")
            .finish();
        HeadWriter::new(&mut buf, StatusCode::Ok).finish();
        assert_eq!(buf, b"HTTP/1.1 200 OK\r\n\r\n");
    }

    proptest! {
        #[test]
        fn decimal_matches_std(v in any::<u64>()) {
            let mut out = Vec::new();
            push_u64(&mut out, v);
            prop_assert_eq!(out, v.to_string().into_bytes());
        }
    }
}
