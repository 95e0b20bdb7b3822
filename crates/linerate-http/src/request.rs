//! Request-head parsing (RFC 9112 §2-§7), strict on purpose: a cache sits in front of
//! other servers, which is where request smuggling happens, so every ambiguity in message
//! framing is an error rather than a guess.
//!
//! The tokenising is `httparse`'s (request line, field lines, token and value bytes, bare
//! CR, obs-fold and whitespace before the colon are all refused by its default request
//! configuration; the tests below pin that down so an upgrade cannot relax it silently).
//! On top of it this module enforces the size limits, the framing rules of RFC 9112 §6
//! (`Content-Length` / `Transfer-Encoding`, decided by [`crate::framing`], which the
//! origin client and HTTP/2 share), `Host` (§3.2), persistence (§9.3) and the
//! at-most-once rule for the fields the server acts on.
//!
//! The head is parsed once: [`RequestHead`] carries the method token, the target in its
//! form (RFC 9112 §3.2), every field line in order, and the fields the server acts on,
//! all borrowed from the caller's buffer and [`FieldBuf`].
//!
//! Not here: reading from the socket (the server owns the buffer) or the request body
//! (the server discards or refuses it according to [`BodyFraming`]).

pub use crate::framing::BodyFraming;
use crate::framing::{request_framing, ContentLength, FramingError, TransferCodings};
use crate::syntax::list_members;

/// Longest request line accepted, in bytes. Longer gets 414 (RFC 9112 §3: "A server that
/// receives a request-target longer than any URI it wishes to parse MUST respond with a
/// 414"). 8 KiB matches nginx's `large_client_header_buffers` default and is far above any
/// real segment URL.
///
/// Measured without the line terminator and without the empty lines RFC 9112 §2.2 lets a
/// client send before the request line.
pub const MAX_REQUEST_LINE: usize = 8 * 1024;

/// Largest whole request head (request line + fields + blank line), in bytes. Larger
/// gets 431 (RFC 6585 §5). 32 KiB leaves room for large cookies/tokens in signed URLs.
///
/// It also bounds the parser's work: only the first `MAX_HEAD_BYTES` of the buffer are
/// ever scanned, however much the server has read.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;

/// Most header fields accepted in one request. More gets 431. Players send about 10.
pub const MAX_HEADERS: usize = 100;

/// The request method (RFC 9110 §9). Method names are case-sensitive (§9.1): `get` is
/// [`Method::Other`]. The token itself is [`RequestHead::method_token`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`
    Get,
    /// `HEAD`
    Head,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `DELETE`
    Delete,
    /// `CONNECT`
    Connect,
    /// `OPTIONS`
    Options,
    /// `TRACE`
    Trace,
    /// `PATCH` (RFC 5789)
    Patch,
    /// Any other syntactically valid method token.
    Other,
}

impl Method {
    /// The method of a token (case-sensitive, RFC 9110 §9.1).
    pub fn from_token(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "CONNECT" => Method::Connect,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "PATCH" => Method::Patch,
            _ => Method::Other,
        }
    }

    /// Short stable name for logs and metric labels (`other` for unknown methods, so a
    /// client cannot mint label values).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Connect => "CONNECT",
            Method::Options => "OPTIONS",
            Method::Trace => "TRACE",
            Method::Patch => "PATCH",
            Method::Other => "other",
        }
    }

    /// Safe (RFC 9110 §9.2.1): GET, HEAD, OPTIONS, TRACE. An unknown method is not.
    pub fn is_safe(self) -> bool {
        matches!(
            self,
            Method::Get | Method::Head | Method::Options | Method::Trace
        )
    }

    /// Idempotent (RFC 9110 §9.2.2): the safe methods, PUT and DELETE. Only these may be
    /// retried automatically after a connection failure.
    pub fn is_idempotent(self) -> bool {
        self.is_safe() || matches!(self, Method::Put | Method::Delete)
    }
}

/// The protocol version of the request (RFC 9112 §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `HTTP/1.0`: persistent only with `Connection: keep-alive`.
    Http10,
    /// `HTTP/1.1`: persistent unless `Connection: close`.
    Http11,
}

impl Version {
    /// Short stable name for logs and metric labels (`HTTP/1.0`, `HTTP/1.1`).
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

/// Whether the connection may carry another request after this one (RFC 9112 §9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Keep the connection open for the next request.
    KeepAlive,
    /// Close after the response.
    Close,
}

impl Persistence {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Persistence::KeepAlive => "keep_alive",
            Persistence::Close => "close",
        }
    }
}

/// Room for the field lines of one request head: [`parse_request`] fills it and the
/// [`RequestHead`] borrows from it, so a head is parsed once without allocating.
pub struct FieldBuf<'b>([httparse::Header<'b>; MAX_HEADERS]);

impl<'b> FieldBuf<'b> {
    /// Empty room for [`MAX_HEADERS`] fields.
    pub fn new() -> FieldBuf<'b> {
        FieldBuf([httparse::EMPTY_HEADER; MAX_HEADERS])
    }
}

impl Default for FieldBuf<'_> {
    fn default() -> Self {
        FieldBuf::new()
    }
}

/// The form of a request-target (RFC 9112 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetForm {
    /// `/path?query` (§3.2.1): the usual form.
    Origin,
    /// `http://authority/path?query` (§3.2.2): the authority replaces `Host`.
    Absolute,
    /// `host:port` (§3.2.3), only with CONNECT.
    Authority,
    /// `*` (§3.2.4), only with OPTIONS.
    Asterisk,
}

/// A parsed request head. Borrowed slices point into the caller's buffer.
///
/// Field values are as `httparse` delivers them: leading and trailing whitespace
/// removed, otherwise raw. Each of the singleton fields below may appear at most once;
/// a second field line for any of them makes the request invalid (see
/// [`parse_request`]). Every field line, these included, is in [`RequestHead::fields`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead<'a> {
    /// Method.
    pub method: Method,
    /// The method token as sent (RFC 9110 §9.1), for forwarding it.
    pub method_token: &'a str,
    /// Version.
    pub version: Version,
    /// Raw request-target, as sent (not decoded). It never contains `#`: a fragment is
    /// not part of a request-target (RFC 9112 §3.2) and such a request is refused.
    pub target: &'a [u8],
    /// The target's form.
    pub form: TargetForm,
    /// Connection persistence after this request.
    pub persistence: Persistence,
    /// Body framing.
    pub body: BodyFraming,
    /// `Host` field value, if any (HTTP/1.0 may omit it). Its characters have been checked
    /// against the `uri-host [":" port]` alphabet. With an absolute-form target RFC 9112
    /// §3.2.2 says the target's authority wins over this field; the server maps only the
    /// path, so it consults neither.
    pub host: Option<&'a [u8]>,
    /// `Range` field value, if any (only the first; a second one makes the request invalid).
    pub range: Option<&'a [u8]>,
    /// `If-Range`.
    pub if_range: Option<&'a [u8]>,
    /// `If-Match`.
    pub if_match: Option<&'a [u8]>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a [u8]>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<&'a [u8]>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<&'a [u8]>,
    /// `Expect: 100-continue` (RFC 9110 §10.1.1): the client waits for a `100 Continue`
    /// before sending its body.
    pub expect_continue: bool,
    /// Every field line, in order.
    pub(crate) fields: &'a [httparse::Header<'a>],
}

impl<'a> RequestHead<'a> {
    /// Every field line in order: (name as sent, value).
    pub fn fields(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.fields.iter().map(|h| (h.name.as_bytes(), h.value))
    }

    /// Every value of the fields named `name` (ASCII case-insensitive), in order.
    pub fn values<'n>(&self, name: &'n [u8]) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        self.fields
            .iter()
            .filter(move |h| h.name.as_bytes().eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// The first value of the field named `name`.
    pub fn field(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.values(name).next()
    }

    /// The target's authority: the authority of an absolute-form target (RFC 9112
    /// §3.2.2: "the origin server MUST ignore the received Host header field ... and
    /// instead use the host information of the request-target"), else `Host`.
    pub fn authority(&self) -> Option<&'a [u8]> {
        match self.form {
            TargetForm::Absolute => split_absolute(self.target).map(|(a, _)| a),
            TargetForm::Authority => Some(self.target),
            TargetForm::Origin | TargetForm::Asterisk => self.host,
        }
    }

    /// The path and the query (with its `?`, or empty) of an origin-form or
    /// absolute-form target; an absolute-form target with an empty path has path `/`
    /// (RFC 9112 §3.2.1). `None` for the authority and asterisk forms.
    pub fn path_and_query(&self) -> Option<(&'a [u8], &'a [u8])> {
        let rest = match self.form {
            TargetForm::Origin => self.target,
            TargetForm::Absolute => split_absolute(self.target)?.1,
            TargetForm::Authority | TargetForm::Asterisk => return None,
        };
        let (path, query) = match rest.iter().position(|&b| b == b'?') {
            Some(i) => rest.split_at(i),
            None => (rest, &b""[..]),
        };
        Some((if path.is_empty() { b"/" } else { path }, query))
    }

    /// A head for unit tests of the modules that read one: GET `target`, HTTP/1.1,
    /// `Host: h`, no other field.
    #[cfg(test)]
    pub(crate) fn for_tests(method: Method, target: &'static [u8]) -> RequestHead<'static> {
        RequestHead {
            method,
            method_token: method.as_str(),
            version: Version::Http11,
            target,
            form: TargetForm::Origin,
            persistence: Persistence::KeepAlive,
            body: BodyFraming::None,
            host: Some(b"h"),
            range: None,
            if_range: None,
            if_match: None,
            if_none_match: None,
            if_modified_since: None,
            if_unmodified_since: None,
            expect_continue: false,
            fields: &[],
        }
    }
}

/// An absolute-form target (`scheme://authority[path-abempty][?query]`) split into its
/// authority and what follows it; `None` if it is not one.
fn split_absolute(target: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = target.windows(3).position(|w| w == b"://")?;
    let rest = &target[i + 3..];
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    Some(rest.split_at(end))
}

/// The form of a target that httparse accepted (visible ASCII, no whitespace), or why it
/// is refused.
fn target_form(method: Method, target: &[u8]) -> Result<TargetForm, RequestError> {
    // RFC 9112 §3.2: request-target = origin-form / absolute-form / authority-form /
    // asterisk-form; none of them has a fragment (RFC 3986 §3.5: a fragment is for the
    // user agent and "is not sent" in a request). Accepting one would put it in a cache
    // key and a log line the origin never sees.
    if target.contains(&b'#') {
        return Err(RequestError::Malformed);
    }
    if target.first() == Some(&b'/') {
        return Ok(TargetForm::Origin);
    }
    if target == b"*" {
        // §3.2.4: only for a server-wide OPTIONS.
        return match method {
            Method::Options => Ok(TargetForm::Asterisk),
            _ => Err(RequestError::Malformed),
        };
    }
    if method == Method::Connect {
        // §3.2.3: uri-host ":" port, and only for CONNECT.
        return if is_valid_host(target) && !target.is_empty() {
            Ok(TargetForm::Authority)
        } else {
            Err(RequestError::BadHost)
        };
    }
    // §3.2.2: absolute-URI. Only the http and https schemes mean anything to us.
    let scheme_end = target
        .windows(3)
        .position(|w| w == b"://")
        .ok_or(RequestError::Malformed)?;
    let scheme = &target[..scheme_end];
    if !(scheme.eq_ignore_ascii_case(b"http") || scheme.eq_ignore_ascii_case(b"https")) {
        return Err(RequestError::Malformed);
    }
    match split_absolute(target) {
        // RFC 9110 §4.2.1: an http(s) URI with an empty host is invalid; userinfo
        // (`@`) is refused by the host alphabet (§4.2.4: deprecated, a phishing vector).
        Some((authority, _)) if !authority.is_empty() && is_valid_host(authority) => {
            Ok(TargetForm::Absolute)
        }
        _ => Err(RequestError::BadHost),
    }
}

/// Result of feeding the bytes read so far to the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseOutcome<'a> {
    /// A whole head was parsed; `head_len` bytes of the buffer belong to it.
    Complete {
        /// The head.
        head: RequestHead<'a>,
        /// Bytes consumed from the start of the buffer.
        head_len: usize,
    },
    /// More bytes are needed (the buffer is within the limits so far).
    Partial,
}

/// Why a request head was rejected. Each maps to one status; the connection is closed
/// after the error response because framing can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestError {
    /// Request line longer than [`MAX_REQUEST_LINE`]: 414.
    UriTooLong,
    /// Head larger than [`MAX_HEAD_BYTES`]: 431.
    HeadTooLarge,
    /// More than [`MAX_HEADERS`] fields: 431.
    TooManyHeaders,
    /// Syntax error in the request line or a field (invalid token byte, bare CR, obs-fold,
    /// whitespace before the colon...): 400. Also a second field line for `Range`,
    /// `If-Range`, `If-Match`, `If-None-Match`, `If-Modified-Since` or
    /// `If-Unmodified-Since`.
    Malformed,
    /// Both `Content-Length` and `Transfer-Encoding` (RFC 9112 §6.3 ¶3): 400.
    LengthAndTransferEncoding,
    /// Several `Content-Length` values that differ, or one that is not a number (§6.3 ¶5): 400.
    BadContentLength,
    /// `Transfer-Encoding` whose final coding is not chunked (§6.3 ¶4): 400. Also chunked
    /// applied twice (§7) and any `Transfer-Encoding` in an HTTP/1.0 request (§6.1).
    BadTransferEncoding,
    /// HTTP/1.1 without exactly one `Host` (RFC 9112 §3.2): 400. Also more than one `Host`
    /// in HTTP/1.0, or a `Host` value with characters no `uri-host [":" port]` has.
    BadHost,
    /// A version other than HTTP/1.0 or HTTP/1.x: 505 (`HTTP/1.2` to `HTTP/1.9` are
    /// processed as HTTP/1.1, RFC 9110 §2.5). Only a well-formed `HTTP/x.y` (RFC 9112
    /// §2.3) gets this; a garbled version is [`RequestError::Malformed`].
    VersionNotSupported,
}

impl RequestError {
    /// The status to answer with.
    pub fn status(self) -> crate::StatusCode {
        use crate::StatusCode;
        match self {
            RequestError::UriTooLong => StatusCode::UriTooLong,
            RequestError::HeadTooLarge | RequestError::TooManyHeaders => {
                StatusCode::RequestHeaderFieldsTooLarge
            }
            RequestError::Malformed
            | RequestError::LengthAndTransferEncoding
            | RequestError::BadContentLength
            | RequestError::BadTransferEncoding
            | RequestError::BadHost => StatusCode::BadRequest,
            RequestError::VersionNotSupported => StatusCode::HttpVersionNotSupported,
        }
    }
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestError::UriTooLong => "uri_too_long",
            RequestError::HeadTooLarge => "head_too_large",
            RequestError::TooManyHeaders => "too_many_headers",
            RequestError::Malformed => "malformed",
            RequestError::LengthAndTransferEncoding => "length_and_transfer_encoding",
            RequestError::BadContentLength => "bad_content_length",
            RequestError::BadTransferEncoding => "bad_transfer_encoding",
            RequestError::BadHost => "bad_host",
            RequestError::VersionNotSupported => "version_not_supported",
        }
    }
}

/// Parse one request head from the start of `buf`.
///
/// Checks run in this order, so each input gets one deterministic answer:
/// 1. the request line's length ([`RequestError::UriTooLong`], even before it is complete);
/// 2. syntax, by `httparse` ([`RequestError::Malformed`], [`RequestError::TooManyHeaders`],
///    [`RequestError::VersionNotSupported`]);
/// 3. the head's size ([`RequestError::HeadTooLarge`] once more than [`MAX_HEAD_BYTES`]
///    are buffered without a complete head);
/// 4. field semantics: duplicates, framing, then `Host`.
///
/// `Ok(ParseOutcome::Partial)` means "read more and call again with the longer buffer"
/// (and a fresh or reused `fields`). Bytes after `head_len` (a body or a pipelined
/// request) are not looked at.
pub fn parse_request<'b>(
    buf: &'b [u8],
    fields: &'b mut FieldBuf<'b>,
) -> Result<ParseOutcome<'b>, RequestError> {
    let line = scan_request_line(buf);
    if line == LineScan::TooLong {
        return Err(RequestError::UriTooLong);
    }
    if let LineScan::Complete { start, len } = line {
        if is_higher_http1_minor(&buf[start..start + len]) {
            return parse_as_http11(buf, start, len, fields);
        }
    }

    // Parsing only a bounded window caps the work per call; a head that does not fit in
    // it is too large whatever follows.
    let window = &buf[..buf.len().min(MAX_HEAD_BYTES)];
    let mut req = httparse::Request::new(&mut fields.0);
    match req.parse(window) {
        Ok(httparse::Status::Complete(head_len)) => {
            let head = interpret(req)?;
            Ok(ParseOutcome::Complete { head, head_len })
        }
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            Err(RequestError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => Ok(ParseOutcome::Partial),
        Err(httparse::Error::TooManyHeaders) => Err(RequestError::TooManyHeaders),
        Err(httparse::Error::Version) => classify_version_error(buf, line),
        Err(_) => Err(RequestError::Malformed),
    }
}

/// Whether a complete request line ends in ` HTTP/1.D` with a minor version above 1
/// (`HTTP/1.2` to `HTTP/1.9`): RFC 9110 §2.5, "A recipient that receives a message with
/// a major version number that it implements and a minor version number higher than
/// what it implements SHOULD process the message as if it were in the highest minor
/// version within that major version to which the recipient is conformant". httparse
/// refuses those, so [`parse_as_http11`] reads them. A higher major version (`HTTP/2.0`
/// over HTTP/1 framing) stays a 505.
fn is_higher_http1_minor(line: &[u8]) -> bool {
    line.len() > 9
        && line[line.len() - 9..line.len() - 1] == *b" HTTP/1."
        && matches!(line[line.len() - 1], b'2'..=b'9')
}

/// Parse a request whose complete request line `buf[start..start + len]` names a
/// higher HTTP/1 minor version ([`is_higher_http1_minor`]) as the HTTP/1.1 request it
/// is processed as. The method and target are checked by httparse exactly as for
/// `HTTP/1.1` (on a copy of the line with the minor version replaced, a rare path),
/// the field lines by httparse's field parser; then the same [`interpret`] runs, with
/// the same limits and answers as [`parse_request`].
fn parse_as_http11<'b>(
    buf: &'b [u8],
    start: usize,
    len: usize,
    fields: &'b mut FieldBuf<'b>,
) -> Result<ParseOutcome<'b>, RequestError> {
    let line = &buf[start..start + len];
    // With the empty lines before it (`start`), which httparse judges too.
    let mut probe = Vec::with_capacity(start + len + 4);
    probe.extend_from_slice(&buf[..start + len - 1]);
    probe.extend_from_slice(b"1\r\n\r\n");
    let mut no_fields = [httparse::EMPTY_HEADER; 0];
    let mut checked = httparse::Request::new(&mut no_fields);
    let (method_len, path_len) = match checked.parse(&probe) {
        Ok(httparse::Status::Complete(_)) => (
            checked.method.map_or(0, str::len),
            checked.path.map_or(0, str::len),
        ),
        _ => return Err(RequestError::Malformed),
    };
    // httparse accepted `METHOD SP target SP HTTP/1.1`, one SP each: the same offsets
    // in the original line.
    let method = std::str::from_utf8(&line[..method_len]).map_err(|_| RequestError::Malformed)?;
    let path = std::str::from_utf8(&line[method_len + 1..method_len + 1 + path_len])
        .map_err(|_| RequestError::Malformed)?;
    // The line terminator is CRLF or a bare LF (see `scan_request_line`).
    let fields_start = start + len + if buf[start + len] == b'\r' { 2 } else { 1 };
    let window = &buf[..buf.len().min(MAX_HEAD_BYTES)];
    let Some(section) = window.get(fields_start..) else {
        return Err(RequestError::HeadTooLarge);
    };
    let (section_len, count) = match httparse::parse_headers(section, &mut fields.0) {
        Ok(httparse::Status::Complete((n, parsed))) => (n, parsed.len()),
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Err(RequestError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(ParseOutcome::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::TooManyHeaders),
        Err(_) => return Err(RequestError::Malformed),
    };
    let req = httparse::Request {
        method: Some(method),
        path: Some(path),
        version: Some(1),
        headers: &mut fields.0[..count],
    };
    let head = interpret(req)?;
    Ok(ParseOutcome::Complete {
        head,
        head_len: fields_start + section_len,
    })
}

/// Where the request line ends, as far as the buffer shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineScan {
    /// The line `buf[start..start + len]` (terminator excluded) is complete.
    Complete { start: usize, len: usize },
    /// No line terminator yet, and what is there is within the limit.
    Incomplete { start: usize },
    /// Longer than [`MAX_REQUEST_LINE`], complete or not.
    TooLong,
}

/// Locate the request line without parsing it, so the 414 decision does not depend on
/// how far the syntax check got.
fn scan_request_line(buf: &[u8]) -> LineScan {
    // RFC 9112 §2.2: a server SHOULD ignore at least one empty line before the request
    // line. httparse skips any number (a bare CR among them is its error to report); the
    // total is still bounded by MAX_HEAD_BYTES.
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[start..];
    // Room for the longest accepted line plus CRLF: not finding LF in there settles it.
    let window = &rest[..rest.len().min(MAX_REQUEST_LINE + 2)];
    match window.iter().position(|&b| b == b'\n') {
        Some(lf) => {
            let len = if lf > 0 && window[lf - 1] == b'\r' {
                lf - 1
            } else {
                lf
            };
            if len > MAX_REQUEST_LINE {
                LineScan::TooLong
            } else {
                LineScan::Complete { start, len }
            }
        }
        None => {
            // A trailing CR may be the first half of the terminator, not part of the line.
            let so_far = match window.last() {
                Some(b'\r') => window.len() - 1,
                _ => window.len(),
            };
            if so_far > MAX_REQUEST_LINE {
                LineScan::TooLong
            } else {
                LineScan::Incomplete { start }
            }
        }
    }
}

/// httparse reports every version other than exactly `HTTP/1.0`/`HTTP/1.1` as
/// `Error::Version`, including garbage. Look at the version token ourselves: a
/// well-formed `HTTP/DIGIT.DIGIT` (RFC 9112 §2.3) is an unsupported version (505, which
/// is what an HTTP/2 prior-knowledge preface `PRI * HTTP/2.0` gets); anything else is a
/// syntax error (400). While the token could still grow into a well-formed version,
/// wait for the rest of the line.
fn classify_version_error(buf: &[u8], line: LineScan) -> Result<ParseOutcome<'_>, RequestError> {
    let (text, complete) = match line {
        LineScan::Complete { start, len } => (&buf[start..start + len], true),
        LineScan::Incomplete { start } => {
            let text = &buf[start..];
            // A trailing CR is the first half of the terminator still in flight.
            (text.strip_suffix(b"\r").unwrap_or(text), false)
        }
        LineScan::TooLong => return Err(RequestError::UriTooLong),
    };
    // httparse got as far as the version, so method and target were each followed by
    // exactly one SP: the version is everything after the second SP.
    let version = text
        .splitn(3, |&b| b == b' ')
        .nth(2)
        .ok_or(RequestError::Malformed)?;
    const PATTERN: &[u8; 8] = b"HTTP/D.D";
    let fits = version.len() <= PATTERN.len()
        && version.iter().zip(PATTERN.iter()).all(|(&b, &p)| match p {
            b'D' => b.is_ascii_digit(),
            _ => b == p,
        });
    match (fits, complete) {
        (true, true) if version.len() == PATTERN.len() => Err(RequestError::VersionNotSupported),
        (true, false) => Ok(ParseOutcome::Partial),
        _ => Err(RequestError::Malformed),
    }
}

/// Field-level interpretation of a syntactically valid head.
fn interpret<'b>(req: httparse::Request<'b, 'b>) -> Result<RequestHead<'b>, RequestError> {
    // RFC 9110 §9.1: method names are case-sensitive; `get` is some other method.
    let method_token = req.method.ok_or(RequestError::Malformed)?;
    let method = Method::from_token(method_token);
    let version = match req.version {
        Some(0) => Version::Http10,
        Some(1) => Version::Http11,
        _ => return Err(RequestError::VersionNotSupported),
    };
    let target = req.path.ok_or(RequestError::Malformed)?.as_bytes();
    let form = target_form(method, target)?;

    let mut host = None;
    let mut host_lines = 0usize;
    let mut content_length = ContentLength::Absent;
    let mut te = TransferCodings::default();
    let mut close = false;
    let mut keep_alive = false;
    let mut range = None;
    let mut if_range = None;
    let mut if_match = None;
    let mut if_none_match = None;
    let mut if_modified_since = None;
    let mut if_unmodified_since = None;
    let mut expect_continue = false;

    for field in req.headers.iter() {
        let name = field.name.as_bytes();
        let value = field.value;
        if name.eq_ignore_ascii_case(b"host") {
            host_lines += 1;
            host.get_or_insert(value);
        } else if name.eq_ignore_ascii_case(b"content-length") {
            content_length = content_length.merge(value);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            te.add(value);
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in list_members(value) {
                close |= option.eq_ignore_ascii_case(b"close");
                keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"range") {
            set_once(&mut range, value)?;
        } else if name.eq_ignore_ascii_case(b"if-range") {
            set_once(&mut if_range, value)?;
        } else if name.eq_ignore_ascii_case(b"if-match") {
            set_once(&mut if_match, value)?;
        } else if name.eq_ignore_ascii_case(b"if-none-match") {
            set_once(&mut if_none_match, value)?;
        } else if name.eq_ignore_ascii_case(b"if-modified-since") {
            set_once(&mut if_modified_since, value)?;
        } else if name.eq_ignore_ascii_case(b"if-unmodified-since") {
            set_once(&mut if_unmodified_since, value)?;
        } else if name.eq_ignore_ascii_case(b"expect") {
            // RFC 9110 §10.1.1: "100-continue" is the only expectation defined
            // (case-insensitive); others are ignored here.
            expect_continue |= list_members(value).any(|e| e.eq_ignore_ascii_case(b"100-continue"));
        }
    }

    // RFC 9112 §6.3 for requests: see `request_framing`.
    let body =
        request_framing(version == Version::Http10, content_length, te).map_err(|e| match e {
            FramingError::LengthAndTransferEncoding => RequestError::LengthAndTransferEncoding,
            FramingError::BadContentLength => RequestError::BadContentLength,
            FramingError::BadTransferEncoding => RequestError::BadTransferEncoding,
        })?;

    // RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status code to any
    // HTTP/1.1 request message that lacks a Host header field and to any request message
    // that contains more than one Host header field line or a Host header field with an
    // invalid field value."
    let host_count_ok = match version {
        Version::Http11 => host_lines == 1,
        Version::Http10 => host_lines <= 1,
    };
    if !host_count_ok || host.is_some_and(|h| !is_valid_host(h)) {
        return Err(RequestError::BadHost);
    }

    // RFC 9112 §9.3: "close" always wins; HTTP/1.1 persists by default; HTTP/1.0 only
    // with the "keep-alive" option.
    let persistence = match (version, close, keep_alive) {
        (_, true, _) => Persistence::Close,
        (Version::Http11, false, _) => Persistence::KeepAlive,
        (Version::Http10, false, true) => Persistence::KeepAlive,
        (Version::Http10, false, false) => Persistence::Close,
    };

    let fields: &'b [httparse::Header<'b>] = req.headers;
    Ok(RequestHead {
        method,
        method_token,
        version,
        target,
        form,
        persistence,
        body,
        host,
        range,
        if_range,
        if_match,
        if_none_match,
        if_modified_since,
        if_unmodified_since,
        expect_continue,
        fields,
    })
}

/// Record a field that may appear once. RFC 9110 §5.3: a sender MUST NOT send several
/// lines of a field that is not a list; for the list-valued `If-Match`/`If-None-Match`
/// combining would be allowed, but no real client splits them and keeping one borrowed
/// slice per field is worth refusing that oddity.
fn set_once<'b>(slot: &mut Option<&'b [u8]>, value: &'b [u8]) -> Result<(), RequestError> {
    if slot.is_some() {
        return Err(RequestError::Malformed);
    }
    *slot = Some(value);
    Ok(())
}

/// Whether `value` only uses characters of `uri-host [":" port]` (RFC 3986 §3.2.2: reg-name
/// is unreserved / pct-encoded / sub-delims; IP-literal adds `[`, `]` and `:`). This keeps
/// `/`, `@`, `?`, `#`, whitespace and non-ASCII out of anything that might later key a
/// cache or a log line. An empty value is valid (RFC 9112 §3.2, for targets without an
/// authority).
pub(crate) fn is_valid_host(value: &[u8]) -> bool {
    value.iter().all(|&b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'['
                    | b']'
            )
    })
}

/// Which part of a [`RequestError::Malformed`] head is wrong, for the access log's
/// `reason=` and the body of the `400`, so an operator (and the client's developer) can
/// tell a garbled request line from a bad field line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformation {
    /// The request line: method, target (a fragment, a bare `*`, an absolute URI that is
    /// not http or https...) or the version token.
    RequestLine,
    /// A field line without a colon, with whitespace before it, with an invalid name
    /// byte, or folded onto the next line (obs-fold, RFC 9112 §5.2).
    FieldName,
    /// A control character in a field value.
    FieldValue,
    /// A CR not followed by LF (RFC 9112 §2.2).
    LineEnding,
    /// A second line for a field that takes one (`Range`, `If-Range`, the conditionals).
    RepeatedField,
}

impl Malformation {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Malformation::RequestLine => "bad_request_line",
            Malformation::FieldName => "bad_field_name",
            Malformation::FieldValue => "bad_field_value",
            Malformation::LineEnding => "bad_line_ending",
            Malformation::RepeatedField => "repeated_field",
        }
    }
}

/// Where a head that [`parse_request`] refused as [`RequestError::Malformed`] went
/// wrong. Worked out again from the same bytes, on the error path only: parsing the
/// request line alone (httparse with no room for fields stops after it), then the whole
/// head; a head that parses whole was refused for a repeated field or its target.
pub fn malformation(buf: &[u8]) -> Malformation {
    let window = &buf[..buf.len().min(MAX_HEAD_BYTES)];
    let mut no_fields: [httparse::Header<'_>; 0] = [];
    let mut line_only = httparse::Request::new(&mut no_fields);
    match line_only.parse(window) {
        Err(httparse::Error::NewLine) => return Malformation::LineEnding,
        Err(httparse::Error::TooManyHeaders) | Ok(_) => {}
        Err(_) => return Malformation::RequestLine,
    }
    let mut fields = FieldBuf::new();
    let mut req = httparse::Request::new(&mut fields.0);
    match req.parse(window) {
        Err(httparse::Error::HeaderValue) => Malformation::FieldValue,
        Err(httparse::Error::NewLine) => Malformation::LineEnding,
        Err(_) => Malformation::FieldName,
        Ok(_) => {
            let method = req.method.map_or(Method::Other, Method::from_token);
            let target = req.path.unwrap_or("").as_bytes();
            match target_form(method, target) {
                Err(_) => Malformation::RequestLine,
                Ok(_) => Malformation::RepeatedField,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use crate::StatusCode;

    /// `parse_request` with room for fields that lives as long as the test (leaked: a
    /// few KiB per call, in a test process).
    fn parse(buf: &[u8]) -> Result<ParseOutcome<'_>, RequestError> {
        parse_request(buf, Box::leak(Box::new(FieldBuf::new())))
    }

    fn complete(buf: &[u8]) -> (RequestHead<'_>, usize) {
        match parse(buf) {
            Ok(ParseOutcome::Complete { head, head_len }) => (head, head_len),
            other => panic!(
                "expected Complete for {:?}, got {other:?}",
                String::from_utf8_lossy(buf)
            ),
        }
    }

    fn head(buf: &[u8]) -> RequestHead<'_> {
        complete(buf).0
    }

    fn err(buf: &[u8]) -> RequestError {
        match parse(buf) {
            Err(e) => e,
            other => panic!(
                "expected an error for {:?}, got {other:?}",
                String::from_utf8_lossy(buf)
            ),
        }
    }

    fn partial(buf: &[u8]) {
        assert_eq!(
            parse(buf),
            Ok(ParseOutcome::Partial),
            "{:?}",
            String::from_utf8_lossy(buf)
        );
    }

    // ---- happy paths ----

    #[test]
    fn simple_get() {
        let buf = b"GET /live/seg1.ts HTTP/1.1\r\nHost: cdn.example\r\n\r\n";
        let (h, len) = complete(buf);
        assert_eq!(len, buf.len());
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.version, Version::Http11);
        assert_eq!(h.target, b"/live/seg1.ts");
        assert_eq!(h.host, Some(&b"cdn.example"[..]));
        assert_eq!(h.persistence, Persistence::KeepAlive);
        assert_eq!(h.body, BodyFraming::None);
        assert_eq!(h.range, None);
    }

    #[test]
    fn head_len_excludes_pipelined_bytes() {
        let buf = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\n";
        let (_, len) = complete(buf);
        assert_eq!(len, b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n".len());
    }

    #[test]
    fn bare_lf_line_endings_accepted() {
        // RFC 9112 §2.2: a recipient MAY recognise a single LF as a line terminator.
        let (h, len) = complete(b"GET / HTTP/1.1\nHost: h\n\n");
        assert_eq!(len, 24);
        assert_eq!(h.host, Some(&b"h"[..]));
    }

    #[test]
    fn leading_empty_lines_ignored() {
        // RFC 9112 §2.2: SHOULD ignore at least one empty line before the request line.
        let h = head(b"\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(h.method, Method::Get);
    }

    #[test]
    fn methods() {
        assert_eq!(
            head(b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n").method,
            Method::Head
        );
        assert_eq!(
            head(b"POST / HTTP/1.1\r\nHost: h\r\n\r\n").method,
            Method::Post
        );
        assert_eq!(
            head(b"BREW / HTTP/1.1\r\nHost: h\r\n\r\n").method,
            Method::Other
        );
        // RFC 9110 §9.1: case-sensitive.
        assert_eq!(
            head(b"get / HTTP/1.1\r\nHost: h\r\n\r\n").method,
            Method::Other
        );
        assert_eq!(
            head(b"Head / HTTP/1.1\r\nHost: h\r\n\r\n").method,
            Method::Other
        );
    }

    #[test]
    fn field_names_case_insensitive() {
        let h = head(
            b"GET / HTTP/1.1\r\nHOST: h\r\nrAnGe: bytes=0-1\r\nif-none-match: \"x\"\r\n\
              IF-MODIFIED-SINCE: Sun, 06 Nov 1994 08:49:37 GMT\r\nIf-Match: *\r\n\
              if-unmodified-since: a\r\nIF-RANGE: \"x\"\r\n\r\n",
        );
        assert_eq!(h.host, Some(&b"h"[..]));
        assert_eq!(h.range, Some(&b"bytes=0-1"[..]));
        assert_eq!(h.if_none_match, Some(&b"\"x\""[..]));
        assert_eq!(
            h.if_modified_since,
            Some(&b"Sun, 06 Nov 1994 08:49:37 GMT"[..])
        );
        assert_eq!(h.if_match, Some(&b"*"[..]));
        assert_eq!(h.if_unmodified_since, Some(&b"a"[..]));
        assert_eq!(h.if_range, Some(&b"\"x\""[..]));
    }

    #[test]
    fn field_values_trimmed() {
        let h = head(b"GET / HTTP/1.1\r\nHost: \t h \t\r\nRange:bytes=1-2  \r\n\r\n");
        assert_eq!(h.host, Some(&b"h"[..]));
        assert_eq!(h.range, Some(&b"bytes=1-2"[..]));
    }

    #[test]
    fn absolute_form_target_kept_raw() {
        let h = head(b"GET http://cdn.example/a/b.ts?x=1 HTTP/1.1\r\nHost: cdn.example\r\n\r\n");
        assert_eq!(h.target, b"http://cdn.example/a/b.ts?x=1");
    }

    // ---- persistence (RFC 9112 §9.3) ----

    #[test]
    fn persistence_http11() {
        let p = |b: &[u8]| head(b).persistence;
        assert_eq!(
            p(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"),
            Persistence::KeepAlive
        );
        assert_eq!(
            p(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"),
            Persistence::Close
        );
        assert_eq!(
            p(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: CLOSE\r\n\r\n"),
            Persistence::Close
        );
        assert_eq!(
            p(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade , Close\r\n\r\n"),
            Persistence::Close
        );
        assert_eq!(
            p(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: te\r\nConnection: close\r\n\r\n"),
            Persistence::Close
        );
        assert_eq!(
            p(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n"),
            Persistence::KeepAlive
        );
        assert_eq!(
            p(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n"),
            Persistence::KeepAlive
        );
    }

    #[test]
    fn persistence_http10() {
        let p = |b: &[u8]| head(b).persistence;
        assert_eq!(p(b"GET / HTTP/1.0\r\n\r\n"), Persistence::Close);
        assert_eq!(
            p(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"),
            Persistence::KeepAlive
        );
        assert_eq!(
            p(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"),
            Persistence::KeepAlive
        );
        assert_eq!(
            p(b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"),
            Persistence::Close
        );
        assert_eq!(
            p(b"GET / HTTP/1.0\r\nConnection: keep-alive-ish\r\n\r\n"),
            Persistence::Close
        );
    }

    // ---- framing (RFC 9112 §6): the cases are in `crate::framing`'s tests, which run
    // each one through this parser and the origin client's ----

    // ---- syntax errors httparse must keep refusing ----

    #[test]
    fn obs_fold_rejected() {
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n  folded\r\n\r\n"),
            RequestError::Malformed
        );
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n\tchunked\r\n\r\n"),
            RequestError::Malformed
        );
    }

    #[test]
    fn bare_cr_rejected() {
        for buf in [
            &b"GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n"[..],
            b"GET / HTTP/1.1\rHost: h\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: h\r\n\rX",
            b"GET /a\rb HTTP/1.1\r\nHost: h\r\n\r\n",
            b"\rGET / HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET / HTTP/1.1\r\nX\r: y\r\nHost: h\r\n\r\n",
        ] {
            assert_eq!(
                err(buf),
                RequestError::Malformed,
                "{:?}",
                String::from_utf8_lossy(buf)
            );
        }
    }

    #[test]
    fn whitespace_before_colon_rejected() {
        // RFC 9112 §5.1: "A server MUST reject, with a response status code of 400 (Bad
        // Request), any received request message that contains whitespace between a
        // header field name and colon."
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost : h\r\n\r\n"),
            RequestError::Malformed
        );
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding\t: chunked\r\n\r\n"),
            RequestError::Malformed
        );
    }

    #[test]
    fn whitespace_before_first_field_rejected() {
        assert_eq!(
            err(b"GET / HTTP/1.1\r\n Host: h\r\n\r\n"),
            RequestError::Malformed
        );
    }

    #[test]
    fn invalid_bytes_rejected() {
        for buf in [
            // NUL and other CTLs in a value (RFC 9110 §5.5).
            &b"GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x01b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x7fb\r\n\r\n",
            // Non-token bytes in a field name.
            b"GET / HTTP/1.1\r\nHost: h\r\nX(y): z\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: h\r\nX\0: z\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: h\r\n: z\r\n\r\n",
            // Non-token bytes in the method.
            b"G(T / HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET\0 / HTTP/1.1\r\nHost: h\r\n\r\n",
            b"G\xc3\xa9T / HTTP/1.1\r\nHost: h\r\n\r\n",
            // Request-line shape.
            b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n",
            b"GET /\r\n\r\n",
            b" GET / HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET /a\0b HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET /a\x7fb HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET /a\tb HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET / HTTP/1.10\r\nHost: h\r\n\r\n",
            b"GET / http/1.1\r\nHost: h\r\n\r\n",
            b"GET / HTTP/1\r\nHost: h\r\n\r\n",
            b"GET / HTTP/11.1\r\nHost: h\r\n\r\n",
            b"GET /a b HTTP/1.1\r\nHost: h\r\n\r\n",
        ] {
            assert_eq!(
                err(buf),
                RequestError::Malformed,
                "{:?}",
                String::from_utf8_lossy(buf)
            );
        }
    }

    #[test]
    fn duplicate_singleton_fields_rejected() {
        for name in [
            "Range",
            "If-Range",
            "If-Match",
            "If-None-Match",
            "If-Modified-Since",
            "If-Unmodified-Since",
        ] {
            let buf = format!(
                "GET / HTTP/1.1\r\nHost: h\r\n{name}: a\r\n{}: b\r\n\r\n",
                name.to_ascii_lowercase()
            );
            assert_eq!(err(buf.as_bytes()), RequestError::Malformed, "{name}");
        }
    }

    // ---- Host (RFC 9112 §3.2) ----

    #[test]
    fn host_rules() {
        assert_eq!(err(b"GET / HTTP/1.1\r\n\r\n"), RequestError::BadHost);
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"),
            RequestError::BadHost
        );
        assert_eq!(
            err(b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"),
            RequestError::BadHost
        );
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"),
            RequestError::BadHost
        );
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost: user@a\r\n\r\n"),
            RequestError::BadHost
        );
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"),
            RequestError::BadHost
        );
        assert_eq!(
            err(b"GET / HTTP/1.1\r\nHost: \xc3\xa9\r\n\r\n"),
            RequestError::BadHost
        );
        // HTTP/1.0 may omit Host.
        assert_eq!(head(b"GET / HTTP/1.0\r\n\r\n").host, None);
        // Empty Host is valid; ports and IPv6 literals too.
        assert_eq!(
            head(b"GET / HTTP/1.1\r\nHost:\r\n\r\n").host,
            Some(&b""[..])
        );
        assert_eq!(
            head(b"GET / HTTP/1.1\r\nHost: a.b:8080\r\n\r\n").host,
            Some(&b"a.b:8080"[..])
        );
        assert_eq!(
            head(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n").host,
            Some(&b"[::1]:80"[..])
        );
    }

    // ---- versions ----

    #[test]
    fn versions() {
        assert_eq!(head(b"GET / HTTP/1.0\r\n\r\n").version, Version::Http10);
        assert_eq!(
            err(b"GET / HTTP/2.0\r\nHost: h\r\n\r\n"),
            RequestError::VersionNotSupported
        );
        assert_eq!(
            err(b"GET / HTTP/0.9\r\n\r\n"),
            RequestError::VersionNotSupported
        );
        assert_eq!(
            err(b"GET / HTTP/3.0\n\n"),
            RequestError::VersionNotSupported
        );
        assert_eq!(
            err(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            RequestError::VersionNotSupported
        );
        assert_eq!(err(b"GET / HTTP/2.x\r\n\r\n"), RequestError::Malformed);
        assert_eq!(err(b"GET / HTTQ/1.1\r\n\r\n"), RequestError::Malformed);
    }

    #[test]
    fn a_higher_http1_minor_is_processed_as_http11() {
        // RFC 9110 §2.5. It was a 505.
        let raw = b"GET /a?b HTTP/1.2\r\nHost: h\r\nX-A: 1\r\n\r\nrest";
        let (h, len) = complete(raw);
        assert_eq!(h.version, Version::Http11);
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.target, b"/a?b");
        assert_eq!(h.host, Some(&b"h"[..]));
        assert_eq!(h.field(b"x-a"), Some(&b"1"[..]));
        assert_eq!(h.persistence, Persistence::KeepAlive);
        assert_eq!(len, raw.len() - 4);
        // Bare LF line ends, and the last minor digit.
        let (h, _) = complete(b"HEAD / HTTP/1.9\nHost: h\n\n");
        assert_eq!((h.method, h.version), (Method::Head, Version::Http11));
        // HTTP/1.1's rules apply: Host is required, framing is checked.
        assert_eq!(err(b"GET / HTTP/1.2\r\n\r\n"), RequestError::BadHost);
        assert_eq!(
            err(b"GET / HTTP/1.2\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            RequestError::BadContentLength
        );
        // Field syntax and the method and target are httparse's, as for HTTP/1.1.
        assert_eq!(
            err(b"GET / HTTP/1.2\r\nBad Name: x\r\n\r\n"),
            RequestError::Malformed
        );
        assert_eq!(
            err(b"G(T / HTTP/1.2\r\nHost: h\r\n\r\n"),
            RequestError::Malformed
        );
        assert_eq!(
            err(b"GET  / HTTP/1.2\r\nHost: h\r\n\r\n"),
            RequestError::Malformed
        );
        // Incomplete: wait for the rest of the head.
        partial(b"GET / HTTP/1.2\r\nHost: h\r\n");
        partial(b"GET / HTTP/1.2\r");
        // Not a higher minor: other versions as before.
        assert_eq!(err(b"GET / HTTP/1.10\r\n\r\n"), RequestError::Malformed);
        assert_eq!(
            err(b"GET / HTTP/2.1\r\nHost: h\r\n\r\n"),
            RequestError::VersionNotSupported
        );
    }

    #[test]
    fn a_higher_minor_parses_exactly_as_http11() {
        // Same head, same length, same error, whatever the request: only the version
        // token differs.
        let cases: [&[u8]; 12] = [
            b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
            b"\rGET /a HTTP/1.1\r\nHost: h\r\n\r\n",
            b"\n\r\nGET /a HTTP/1.1\r\nHost: h\r\n\r\n",
            b"\r\nGET /a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nbody",
            b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET http://x.example/a HTTP/1.1\r\nHost: h\r\n\r\n",
            b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
            b"GET /a HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\nRange: bytes=2-3\r\n\r\n",
            b"GET /a HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n",
            b"GET /a HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n",
            b"GET /a HTTP/1.1\r\nHost: h\r\nX: 1\r\n",
        ];
        for case in cases {
            let higher: Vec<u8> = String::from_utf8_lossy(case)
                .replacen("HTTP/1.1", "HTTP/1.2", 1)
                .into_bytes();
            assert_eq!(
                parse(&higher),
                parse(case),
                "{:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    proptest::proptest! {
        /// Any request-like head, complete or cut anywhere: `HTTP/1.2` gets exactly the
        /// answer `HTTP/1.1` gets.
        #[test]
        fn a_higher_minor_is_http11_for_any_head(
            pre in proptest::sample::select(vec!["", "\r\n", "\n", "\r"]),
            method in proptest::sample::select(vec!["GET", "HEAD", "POST", "G(T", ""]),
            target in proptest::sample::select(vec!["/", "/a?b=c", "*", "http://x/y", "/a b", "/#f", ""]),
            fields in proptest::collection::vec(proptest::sample::select(vec![
                "Host: h", "Host: a", "Content-Length: 5", "Content-Length: x",
                "Transfer-Encoding: chunked", "Connection: close", "Range: bytes=0-1",
                " folded", "Bad Name: x", "X: a\rb", "X_U: 1", ":", "",
            ]), 0..6),
            eol in proptest::sample::select(vec!["\r\n", "\n"]),
            cut in proptest::option::of(0usize..200),
        ) {
            let head = |version: &str| {
                let mut h = format!("{pre}{method} {target} {version}{eol}");
                for f in &fields {
                    h.push_str(f);
                    h.push_str(eol);
                }
                h.push_str(eol);
                h.push_str("body");
                let mut b = h.into_bytes();
                if let Some(c) = cut {
                    b.truncate(c);
                }
                b
            };
            let (old, new) = (head("HTTP/1.1"), head("HTTP/1.2"));
            proptest::prop_assert_eq!(parse(&new), parse(&old));
        }
    }

    #[test]
    fn unsupported_version_waits_for_end_of_line() {
        // Could still be `HTTP/2.0` (505) or `HTTP/2x` (400): wait.
        partial(b"GET / HTTP/2");
        partial(b"GET / HTTP/2.0");
        partial(b"GET / HTTP/2.0\r");
        assert_eq!(err(b"GET / HTTP/2x"), RequestError::Malformed);
        assert_eq!(
            err(b"GET / HTTP/2.0\r\n"),
            RequestError::VersionNotSupported
        );
    }

    // ---- partial input and limits ----

    #[test]
    fn every_prefix_is_partial() {
        let buf = b"GET /a/b.ts HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\n\r\n";
        for n in 0..buf.len() {
            partial(&buf[..n]);
        }
        complete(buf);
    }

    #[test]
    fn request_line_limit() {
        let line_of = |len: usize| {
            // "GET " + "/" + filler + " HTTP/1.1" is `len` bytes long.
            let filler = len - b"GET / HTTP/1.1".len();
            let mut v = b"GET /".to_vec();
            v.extend(std::iter::repeat_n(b'a', filler));
            v.extend_from_slice(b" HTTP/1.1");
            v
        };
        let mut ok = line_of(MAX_REQUEST_LINE);
        ok.extend_from_slice(b"\r\nHost: h\r\n\r\n");
        complete(&ok);

        let mut long = line_of(MAX_REQUEST_LINE + 1);
        long.extend_from_slice(b"\r\nHost: h\r\n\r\n");
        assert_eq!(err(&long), RequestError::UriTooLong);
        // Detected as soon as the line itself is complete.
        let mut long_line_only = line_of(MAX_REQUEST_LINE + 1);
        long_line_only.extend_from_slice(b"\r\n");
        assert_eq!(err(&long_line_only), RequestError::UriTooLong);

        // Incomplete: within the limit is Partial, past it is 414, checked before syntax.
        let mut v = line_of(MAX_REQUEST_LINE);
        partial(&v);
        v.push(b'\r');
        partial(&v);
        v.pop();
        v.push(b'x');
        assert_eq!(err(&v), RequestError::UriTooLong);
        let mut w = b"GET /".to_vec();
        w.resize(MAX_REQUEST_LINE + 1, b'a');
        assert_eq!(err(&w), RequestError::UriTooLong);
    }

    #[test]
    fn head_size_limit() {
        // Many medium fields: fewer than MAX_HEADERS, more than MAX_HEAD_BYTES in total.
        let mut v = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        let field = format!("X-Pad: {}\r\n", "p".repeat(1000));
        while v.len() <= MAX_HEAD_BYTES {
            v.extend_from_slice(field.as_bytes());
        }
        // Incomplete and over the limit.
        assert_eq!(err(&v), RequestError::HeadTooLarge);
        // Complete but over the limit.
        v.extend_from_slice(b"\r\n");
        assert_eq!(err(&v), RequestError::HeadTooLarge);

        // Just under the limit is fine; the buffer may hold more (pipelining).
        let mut w = b"GET / HTTP/1.1\r\nHost: h\r\nX-Pad: ".to_vec();
        let pad = MAX_HEAD_BYTES - w.len() - 4;
        w.extend(std::iter::repeat_n(b'p', pad));
        w.extend_from_slice(b"\r\n\r\n");
        assert_eq!(w.len(), MAX_HEAD_BYTES);
        let mut pipelined = w.clone();
        pipelined.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(complete(&pipelined).1, MAX_HEAD_BYTES);

        // Partial at exactly the limit is still Partial.
        w.truncate(MAX_HEAD_BYTES - 1);
        partial(&w);
    }

    #[test]
    fn header_count_limit() {
        let mut v = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        for i in 1..MAX_HEADERS {
            v.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        let mut ok = v.clone();
        ok.extend_from_slice(b"\r\n");
        complete(&ok);
        v.extend_from_slice(b"X-Last: v\r\n\r\n");
        assert_eq!(err(&v), RequestError::TooManyHeaders);
    }

    // ---- error mapping ----

    #[test]
    fn status_and_names() {
        let all = [
            (RequestError::UriTooLong, 414, "uri_too_long"),
            (RequestError::HeadTooLarge, 431, "head_too_large"),
            (RequestError::TooManyHeaders, 431, "too_many_headers"),
            (RequestError::Malformed, 400, "malformed"),
            (
                RequestError::LengthAndTransferEncoding,
                400,
                "length_and_transfer_encoding",
            ),
            (RequestError::BadContentLength, 400, "bad_content_length"),
            (
                RequestError::BadTransferEncoding,
                400,
                "bad_transfer_encoding",
            ),
            (RequestError::BadHost, 400, "bad_host"),
            (
                RequestError::VersionNotSupported,
                505,
                "version_not_supported",
            ),
        ];
        for (e, code, name) in all {
            assert_eq!(e.status().code(), code);
            assert_eq!(e.as_str(), name);
        }
        assert_eq!(
            RequestError::VersionNotSupported.status(),
            StatusCode::HttpVersionNotSupported
        );
        assert_eq!(Method::Head.as_str(), "HEAD");
        assert_eq!(Version::Http10.as_str(), "HTTP/1.0");
        assert_eq!(Persistence::KeepAlive.as_str(), "keep_alive");
        assert_eq!(BodyFraming::Length(3).as_str(), "length");
    }

    // ---- every field, method tokens, target forms ----

    #[test]
    fn every_field_line_is_kept_in_order() {
        let h = head(
            b"GET / HTTP/1.1\r\nHost: h\r\nAccept: a\r\nX-Two: 1\r\nx-two: 2\r\nRange: bytes=0-1\r\n\r\n",
        );
        let all: Vec<_> = h.fields().collect();
        assert_eq!(
            all,
            vec![
                (&b"Host"[..], &b"h"[..]),
                (b"Accept", b"a"),
                (b"X-Two", b"1"),
                (b"x-two", b"2"),
                (b"Range", b"bytes=0-1"),
            ]
        );
        assert_eq!(
            h.values(b"X-TWO").collect::<Vec<_>>(),
            vec![&b"1"[..], b"2"]
        );
        assert_eq!(h.field(b"accept"), Some(&b"a"[..]));
        assert_eq!(h.field(b"missing"), None);
    }

    #[test]
    fn method_tokens() {
        fn m(b: &[u8]) -> (Method, &str) {
            let h = head(b);
            (h.method, h.method_token)
        }
        assert_eq!(
            m(b"PATCH / HTTP/1.1\r\nHost: h\r\n\r\n"),
            (Method::Patch, "PATCH")
        );
        assert_eq!(
            m(b"BREW / HTTP/1.1\r\nHost: h\r\n\r\n"),
            (Method::Other, "BREW")
        );
        assert_eq!(
            m(b"post / HTTP/1.1\r\nHost: h\r\n\r\n"),
            (Method::Other, "post")
        );
        assert!(Method::Get.is_safe() && Method::Options.is_safe() && !Method::Post.is_safe());
        assert!(Method::Put.is_idempotent() && Method::Delete.is_idempotent());
        assert!(!Method::Post.is_idempotent() && !Method::Patch.is_idempotent());
        assert!(!Method::Other.is_safe() && !Method::Other.is_idempotent());
        assert_eq!(Method::Other.as_str(), "other");
    }

    #[test]
    fn fragments_are_refused() {
        // RFC 9112 §3.2: no request-target form has a fragment.
        assert_eq!(
            err(b"GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n"),
            RequestError::Malformed
        );
        assert_eq!(
            err(b"GET /a?x=1# HTTP/1.1\r\nHost: h\r\n\r\n"),
            RequestError::Malformed
        );
        assert_eq!(
            err(b"GET http://h/a#b HTTP/1.1\r\nHost: h\r\n\r\n"),
            RequestError::Malformed
        );
    }

    #[test]
    fn target_forms_and_authority() {
        let h = head(b"GET /p?q=1 HTTP/1.1\r\nHost: cdn.example:8080\r\n\r\n");
        assert_eq!(h.form, TargetForm::Origin);
        assert_eq!(h.authority(), Some(&b"cdn.example:8080"[..]));
        assert_eq!(h.path_and_query(), Some((&b"/p"[..], &b"?q=1"[..])));

        // RFC 9112 §3.2.2: the target's authority wins over Host.
        let h = head(b"GET HTTP://Other.example/x/y?z HTTP/1.1\r\nHost: cdn.example\r\n\r\n");
        assert_eq!(h.form, TargetForm::Absolute);
        assert_eq!(h.authority(), Some(&b"Other.example"[..]));
        assert_eq!(h.path_and_query(), Some((&b"/x/y"[..], &b"?z"[..])));
        let h = head(b"GET https://o.example HTTP/1.1\r\nHost: o.example\r\n\r\n");
        assert_eq!(h.path_and_query(), Some((&b"/"[..], &b""[..])));
        let h = head(b"GET http://o.example?a HTTP/1.1\r\nHost: o.example\r\n\r\n");
        assert_eq!(h.path_and_query(), Some((&b"/"[..], &b"?a"[..])));

        // Userinfo, an empty host, other schemes, relative references: refused.
        assert_eq!(
            err(b"GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n"),
            RequestError::BadHost
        );
        assert_eq!(
            err(b"GET http:///x HTTP/1.1\r\nHost: h\r\n\r\n"),
            RequestError::BadHost
        );
        assert_eq!(
            err(b"GET ftp://h/x HTTP/1.1\r\nHost: h\r\n\r\n"),
            RequestError::Malformed
        );
        assert_eq!(
            err(b"GET a/b HTTP/1.1\r\nHost: h\r\n\r\n"),
            RequestError::Malformed
        );

        // §3.2.4: `*` only with OPTIONS; §3.2.3: authority-form only with CONNECT.
        let h = head(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!((h.form, h.path_and_query()), (TargetForm::Asterisk, None));
        assert_eq!(
            err(b"GET * HTTP/1.1\r\nHost: h\r\n\r\n"),
            RequestError::Malformed
        );
        let h = head(b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n");
        assert_eq!(h.form, TargetForm::Authority);
        assert_eq!(h.authority(), Some(&b"h:443"[..]));
    }

    #[test]
    fn expect_continue() {
        assert!(
            head(b"PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n")
                .expect_continue
        );
        assert!(!head(b"PUT / HTTP/1.1\r\nHost: h\r\nExpect: other\r\n\r\n").expect_continue);
        assert!(!head(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").expect_continue);
    }

    mod props {
        use super::super::*;
        use super::parse;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn never_panics_on_arbitrary_bytes(buf in proptest::collection::vec(any::<u8>(), 0..600)) {
                let _ = parse(&buf);
            }

            #[test]
            fn never_panics_on_request_like_bytes(
                method in "[A-Za-z]{1,6}",
                target in "[ -~]{0,40}",
                version in "HTTP/[0-9]\\.[0-9]",
                fields in proptest::collection::vec(("[ -~]{0,12}", "[ -~\t\r\n]{0,20}"), 0..8),
            ) {
                let mut buf = format!("{method} {target} {version}\r\n").into_bytes();
                for (n, v) in fields {
                    buf.extend_from_slice(format!("{n}:{v}\r\n").as_bytes());
                }
                buf.extend_from_slice(b"\r\n");
                if let Ok(ParseOutcome::Complete { head_len, .. }) = parse(&buf) {
                    prop_assert!(head_len <= buf.len());
                }
            }

            /// Splitting a valid request anywhere yields Partial, never an error.
            #[test]
            fn prefixes_of_valid_requests_are_partial(
                path in "/[a-z0-9/._-]{0,30}",
                range in "bytes=[0-9]{1,4}-[0-9]{0,4}",
            ) {
                let buf = format!("GET {path} HTTP/1.1\r\nHost: h\r\nRange: {range}\r\n\r\n").into_bytes();
                for n in 0..buf.len() {
                    prop_assert_eq!(parse(&buf[..n]), Ok(ParseOutcome::Partial));
                }
                let is_complete = matches!(parse(&buf), Ok(ParseOutcome::Complete { .. }));
                prop_assert!(is_complete);
            }
        }
    }
}

#[cfg(test)]
mod malformation_tests {
    use super::*;

    #[test]
    fn each_malformed_head_is_located() {
        for (head, want) in [
            (
                &b"G(T / HTTP/1.1\r\nHost: t\r\n\r\n"[..],
                Malformation::RequestLine,
            ),
            (b"\x00\x01 not http\r\n\r\n", Malformation::RequestLine),
            (
                b"GET /a#frag HTTP/1.1\r\nHost: t\r\n\r\n",
                Malformation::RequestLine,
            ),
            (
                b"GET ftp://h/a HTTP/1.1\r\nHost: t\r\n\r\n",
                Malformation::RequestLine,
            ),
            (
                b"GET / HTTQ/1.1\r\nHost: t\r\n\r\n",
                Malformation::RequestLine,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: t\r\nno colon here\r\n\r\n",
                Malformation::FieldName,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: t\r\nX-A : b\r\n\r\n",
                Malformation::FieldName,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n",
                Malformation::FieldName,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n",
                Malformation::FieldValue,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n",
                Malformation::FieldValue,
            ),
            (b"GET / HTTP/1.1\rHost: t\r\n\r\n", Malformation::LineEnding),
            (
                b"GET / HTTP/1.1\r\nHost: t\r\nRange: bytes=0-1\r\nRange: bytes=2-3\r\n\r\n",
                Malformation::RepeatedField,
            ),
        ] {
            let mut fields = FieldBuf::new();
            assert_eq!(
                parse_request(head, &mut fields).err(),
                Some(RequestError::Malformed),
                "{:?}",
                String::from_utf8_lossy(head)
            );
            assert_eq!(
                malformation(head),
                want,
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
