//! Per-worker counters, gauges and histograms. Each worker owns one [`WorkerStats`]
//! and is its only writer; the admin thread reads all of them and sums when scraped.
//!
//! Why atomics at all if one thread writes: the scrape reads from another thread, and a
//! `Relaxed` load followed by a `Relaxed` store compiles to two plain moves on x86-64 and
//! arm64 (no lock prefix, no fence), so the request path pays what a `Cell` would. Each
//! worker's block is aligned to 128 bytes (two cache lines, the adjacent-line prefetcher's
//! unit), so no two workers ever write the same line (DESIGN.md: "counters are per-core
//! and summed only when read"). A scrape may see a request counted but its bytes not yet:
//! every value is individually exact and monotonic, which is what Prometheus needs.
//!
//! Not here: formatting (see `metrics`) or deciding what to count (the callers).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use linerate_http::path::PathError;
use linerate_http::request::{Malformation, RequestError};
use linerate_http::StatusCode;

/// Add `n` to a counter only this thread writes (see the module doc for why not
/// `fetch_add`).
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Subtract `n` from a gauge only this thread writes.
#[inline]
fn drop_by(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).saturating_sub(n), Relaxed);
}

/// The first digit of a status code, as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    /// 1xx.
    Informational,
    /// 2xx.
    Success,
    /// 3xx.
    Redirection,
    /// 4xx: the client's fault.
    ClientError,
    /// 5xx: ours (or the origin's).
    ServerError,
}

impl StatusClass {
    /// All classes, in label order.
    pub const ALL: [StatusClass; 5] = [
        StatusClass::Informational,
        StatusClass::Success,
        StatusClass::Redirection,
        StatusClass::ClientError,
        StatusClass::ServerError,
    ];

    /// The class of a status code (anything out of range counts as 5xx).
    pub fn of(code: u16) -> StatusClass {
        match code / 100 {
            1 => StatusClass::Informational,
            2 => StatusClass::Success,
            3 => StatusClass::Redirection,
            4 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        }
    }

    /// Metric label: "1xx" ... "5xx".
    pub fn as_str(self) -> &'static str {
        match self {
            StatusClass::Informational => "1xx",
            StatusClass::Success => "2xx",
            StatusClass::Redirection => "3xx",
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
        }
    }
}

/// Where a response's bytes came from, with respect to a cache: the request's phase
/// (appliance mode serves everything from its own disks: `Local`).
pub use linerate_http::cache::CachePhase;

/// How a response's bytes reached the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryPath {
    /// Plain TCP: `send` + `sendfile(2)` (over 64 KiB: `splice(2)` through the
    /// worker's pipe, `transfer`).
    Sendfile,
    /// Kernel TLS: `sendfile(2)` on a kTLS socket (encrypted in the kernel).
    KernelTls,
    /// User-space TLS (rustls): read, encrypt, write (the fallback without kTLS).
    UserspaceTls,
}

impl DeliveryPath {
    /// All paths, in label order.
    pub const ALL: [DeliveryPath; 3] = [
        DeliveryPath::Sendfile,
        DeliveryPath::KernelTls,
        DeliveryPath::UserspaceTls,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryPath::Sendfile => "sendfile",
            DeliveryPath::KernelTls => "ktls",
            DeliveryPath::UserspaceTls => "userspace_tls",
        }
    }
}

/// Most buckets a histogram has (bounds plus the `+Inf` bucket).
const MAX_BUCKETS: usize = 16;

/// A fixed-bucket histogram with one writer. Buckets are stored non-cumulatively and
/// made cumulative when rendered.
pub struct Histogram {
    bounds: &'static [u64],
    buckets: [AtomicU64; MAX_BUCKETS],
    sum: AtomicU64,
}

impl Histogram {
    /// A histogram with these upper bounds (ascending; at most 15).
    pub const fn new(bounds: &'static [u64]) -> Histogram {
        assert!(bounds.len() < MAX_BUCKETS, "too many histogram bounds");
        Histogram {
            bounds,
            buckets: [const { AtomicU64::new(0) }; MAX_BUCKETS],
            sum: AtomicU64::new(0),
        }
    }

    /// Record one value (writer thread only).
    #[inline]
    pub fn observe(&self, v: u64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(self.bounds.len());
        bump(&self.buckets[i], 1);
        bump(&self.sum, v);
    }

    /// The bounds (excluding `+Inf`).
    pub fn bounds(&self) -> &'static [u64] {
        self.bounds
    }

    /// Per-bucket counts (non-cumulative; last is `+Inf`) and the sum.
    pub fn read(&self) -> (Vec<u64>, u64) {
        let n = self.bounds.len() + 1;
        (
            self.buckets[..n].iter().map(|b| b.load(Relaxed)).collect(),
            self.sum.load(Relaxed),
        )
    }
}

/// Response durations, microseconds: from a complete request head to the last byte
/// handed to the kernel. 100 µs (a hot small segment) to 10 s (a large file to a slow
/// player).
pub const DURATION_BOUNDS_US: &[u64] = &[
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
    2_500_000, 10_000_000,
];

/// Smoothed RTT, microseconds: loopback (tens of µs) to intercontinental and bufferbloat
/// (over a second).
pub const RTT_BOUNDS_US: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

/// Retransmitted share of data segments, in parts per million: 0.01% to 20%.
pub const RETRANS_BOUNDS_PPM: &[u64] = &[
    0, 100, 1_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000,
];

/// Delivery rate, bytes per second: 100 kB/s (a starved mobile player) to 10 GB/s.
pub const DELIVERY_RATE_BOUNDS: &[u64] = &[
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    12_500_000,
    25_000_000,
    125_000_000,
    1_250_000_000,
    10_000_000_000,
];

/// Congestion window, segments: the initial window (10) to a loopback-sized window.
pub const CWND_BOUNDS: &[u64] = &[10, 20, 40, 80, 160, 320, 640, 1_280, 2_560, 10_000];

/// Duration of one file send (or read) made on the event loop, microseconds: a
/// `sendfile` from the page cache takes tens of µs per 64 KiB; one that waits for a
/// disk takes milliseconds, and every other connection of that worker waits with it.
pub const LOOP_IO_BOUNDS_US: &[u64] = &[
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 1_000_000,
];

/// A file send on the event loop longer than this, plus [`STALL_NS_PER_BYTE`] for each
/// byte it moved, counts as a stall: it waited for the disk, or the thread was
/// preempted inside the call (wall time; either way the loop served nothing).
pub const STALL_NS: u64 = 1_000_000;

/// The time a send from memory may take per byte before it counts as a stall (1 GB/s;
/// on loopback, where the receiver's TCP work runs in the sender's call, one core moves
/// about 2 GB/s, so a 2 MiB send takes ~1 ms without any disk).
pub const STALL_NS_PER_BYTE: u64 = 1;

/// How a TLS connection's handshake ended, and which path its records took (the labels
/// of `linerate_tls_handshakes_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsOutcome {
    /// Completed; records in the kernel (kTLS).
    KernelTls,
    /// Completed; records in user space (rustls).
    UserspaceTls,
    /// Not finished within the handshake timeout (the TLS slowloris defence).
    Timeout,
    /// Plain HTTP sent to the TLS port (answered with 400).
    PlainHttp,
    /// Refused by rustls: not TLS, no common parameters, unknown SNI refused.
    Refused,
    /// The client left mid-handshake.
    Abandoned,
    /// Completed, but installing the keys in the kernel failed (closed).
    HandoverFailed,
}

impl TlsOutcome {
    /// All outcomes, in label order.
    pub const ALL: [TlsOutcome; 7] = [
        TlsOutcome::KernelTls,
        TlsOutcome::UserspaceTls,
        TlsOutcome::Timeout,
        TlsOutcome::PlainHttp,
        TlsOutcome::Refused,
        TlsOutcome::Abandoned,
        TlsOutcome::HandoverFailed,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsOutcome::KernelTls => "ktls",
            TlsOutcome::UserspaceTls => "userspace_tls",
            TlsOutcome::Timeout => "timeout",
            TlsOutcome::PlainHttp => "plain_http",
            TlsOutcome::Refused => "refused",
            TlsOutcome::Abandoned => "abandoned",
            TlsOutcome::HandoverFailed => "handover_failed",
        }
    }
}

/// Why a connection ended (the labels of `linerate_connections_closed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Client closed between requests, or asked to close.
    Done,
    /// Idle past the keep-alive (or first-request) timeout.
    Idle,
    /// Head not complete within the head timeout.
    HeadTimeout,
    /// Client closed mid-request.
    ClientClosed,
    /// Malformed or oversized request.
    BadRequest,
    /// Response could not be completed.
    Aborted,
    /// Graceful stop or drain.
    Stopping,
}

impl CloseReason {
    /// All reasons, in label order.
    pub const ALL: [CloseReason; 7] = [
        CloseReason::Done,
        CloseReason::Idle,
        CloseReason::HeadTimeout,
        CloseReason::ClientClosed,
        CloseReason::BadRequest,
        CloseReason::Aborted,
        CloseReason::Stopping,
    ];

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Done => "done",
            CloseReason::Idle => "idle",
            CloseReason::HeadTimeout => "head_timeout",
            CloseReason::ClientClosed => "client_closed",
            CloseReason::BadRequest => "bad_request",
            CloseReason::Aborted => "aborted",
            CloseReason::Stopping => "stopping",
        }
    }
}

/// Why a request was refused with a 4xx/5xx of its own making (malformed, too large,
/// too slow, or a target that is not a path): the access log's `reason=`, the metric
/// label of `linerate_requests_refused_total` and, through [`Refusal::explain`], the
/// body of the answer. The client's fault in every case (a status the server chose
/// because of the request, not because of an origin or a disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A garbled request line (method, target or version token).
    BadRequestLine,
    /// A field line without a colon, with space before it, an invalid name or folded.
    BadFieldName,
    /// A control character in a field value.
    BadFieldValue,
    /// A CR not followed by LF.
    BadLineEnding,
    /// A second line for a field that takes one.
    RepeatedField,
    /// The request line is longer than the parser's limit: 414.
    UriTooLong,
    /// The head is larger than the parser's limit: 431.
    HeadTooLarge,
    /// More field lines than the parser's limit: 431.
    TooManyHeaders,
    /// Both `Content-Length` and `Transfer-Encoding`.
    LengthAndTransferEncoding,
    /// An invalid or conflicting `Content-Length`.
    BadContentLength,
    /// A `Transfer-Encoding` this server refuses.
    BadTransferEncoding,
    /// A missing (HTTP/1.1), repeated or invalid `Host`.
    BadHost,
    /// A well-formed version other than 1.0 and 1.1: 505.
    VersionNotSupported,
    /// The head (or a body) did not arrive within the timeout: 408.
    HeadTimeout,
    /// A body larger than this server takes: 413.
    BodyTooLarge,
    /// A chunked body where the length is needed up front: 411.
    LengthRequired,
    /// A target that is not an origin-form or absolute-form path.
    BadForm,
    /// `%` not followed by two hex digits.
    BadPercentEncoding,
    /// A percent-encoded `/` or `\\` in the path.
    EncodedSlash,
    /// A NUL byte in the path.
    Nul,
    /// Dot segments that climb above the root.
    EscapesRoot,
    /// A control character in the path, raw or encoded (cache mode).
    Control,
    /// A raw `\` in the path (cache mode).
    Backslash,
}

impl Refusal {
    /// All reasons, in label order (`Refusal as usize` indexes it).
    pub const ALL: [Refusal; 23] = [
        Refusal::BadRequestLine,
        Refusal::BadFieldName,
        Refusal::BadFieldValue,
        Refusal::BadLineEnding,
        Refusal::RepeatedField,
        Refusal::UriTooLong,
        Refusal::HeadTooLarge,
        Refusal::TooManyHeaders,
        Refusal::LengthAndTransferEncoding,
        Refusal::BadContentLength,
        Refusal::BadTransferEncoding,
        Refusal::BadHost,
        Refusal::VersionNotSupported,
        Refusal::HeadTimeout,
        Refusal::BodyTooLarge,
        Refusal::LengthRequired,
        Refusal::BadForm,
        Refusal::BadPercentEncoding,
        Refusal::EncodedSlash,
        Refusal::Nul,
        Refusal::EscapesRoot,
        Refusal::Control,
        Refusal::Backslash,
    ];

    /// Why the parser refused the head in `buf` (a `Malformed` head is located again in
    /// the bytes, see [`linerate_http::request::malformation`]).
    pub fn of_head(e: RequestError, buf: &[u8]) -> Refusal {
        match e {
            RequestError::Malformed => match linerate_http::request::malformation(buf) {
                Malformation::RequestLine => Refusal::BadRequestLine,
                Malformation::FieldName => Refusal::BadFieldName,
                Malformation::FieldValue => Refusal::BadFieldValue,
                Malformation::LineEnding => Refusal::BadLineEnding,
                Malformation::RepeatedField => Refusal::RepeatedField,
            },
            RequestError::UriTooLong => Refusal::UriTooLong,
            RequestError::HeadTooLarge => Refusal::HeadTooLarge,
            RequestError::TooManyHeaders => Refusal::TooManyHeaders,
            RequestError::LengthAndTransferEncoding => Refusal::LengthAndTransferEncoding,
            RequestError::BadContentLength => Refusal::BadContentLength,
            RequestError::BadTransferEncoding => Refusal::BadTransferEncoding,
            RequestError::BadHost => Refusal::BadHost,
            RequestError::VersionNotSupported => Refusal::VersionNotSupported,
        }
    }

    /// The status it is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::UriTooLong => StatusCode::UriTooLong,
            Refusal::HeadTooLarge | Refusal::TooManyHeaders => {
                StatusCode::RequestHeaderFieldsTooLarge
            }
            Refusal::VersionNotSupported => StatusCode::HttpVersionNotSupported,
            Refusal::HeadTimeout => StatusCode::RequestTimeout,
            Refusal::BodyTooLarge => StatusCode::ContentTooLarge,
            Refusal::LengthRequired => StatusCode::Other(411),
            _ => StatusCode::BadRequest,
        }
    }

    /// Log field and metric label (the parser's own names where it has one).
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::BadRequestLine => Malformation::RequestLine.as_str(),
            Refusal::BadFieldName => Malformation::FieldName.as_str(),
            Refusal::BadFieldValue => Malformation::FieldValue.as_str(),
            Refusal::BadLineEnding => Malformation::LineEnding.as_str(),
            Refusal::RepeatedField => Malformation::RepeatedField.as_str(),
            Refusal::UriTooLong => RequestError::UriTooLong.as_str(),
            Refusal::HeadTooLarge => RequestError::HeadTooLarge.as_str(),
            Refusal::TooManyHeaders => RequestError::TooManyHeaders.as_str(),
            Refusal::LengthAndTransferEncoding => RequestError::LengthAndTransferEncoding.as_str(),
            Refusal::BadContentLength => RequestError::BadContentLength.as_str(),
            Refusal::BadTransferEncoding => RequestError::BadTransferEncoding.as_str(),
            Refusal::BadHost => RequestError::BadHost.as_str(),
            Refusal::VersionNotSupported => RequestError::VersionNotSupported.as_str(),
            Refusal::HeadTimeout => "head_timeout",
            Refusal::BodyTooLarge => "body_too_large",
            Refusal::LengthRequired => "length_required",
            Refusal::BadForm => PathError::BadForm.as_str(),
            Refusal::BadPercentEncoding => PathError::BadPercentEncoding.as_str(),
            Refusal::EncodedSlash => PathError::EncodedSlash.as_str(),
            Refusal::Nul => PathError::Nul.as_str(),
            Refusal::EscapesRoot => PathError::EscapesRoot.as_str(),
            Refusal::Control => PathError::Control.as_str(),
            Refusal::Backslash => PathError::Backslash.as_str(),
        }
    }

    /// One short sentence for the body of the answer: what was wrong, not the bytes
    /// (the client has those).
    pub fn explain(self) -> &'static str {
        match self {
            Refusal::BadRequestLine => "malformed request line",
            Refusal::BadFieldName => {
                "malformed field line (no colon, space before the colon, an invalid name or a folded line)"
            }
            Refusal::BadFieldValue => "control character in a field value",
            Refusal::BadLineEnding => "CR not followed by LF",
            Refusal::RepeatedField => {
                "a field that takes one line (Range, If-Range or a conditional) was sent twice"
            }
            Refusal::UriTooLong => "request line longer than 8 KiB",
            Refusal::HeadTooLarge => "request head larger than 32 KiB",
            Refusal::TooManyHeaders => "more than 100 field lines",
            Refusal::LengthAndTransferEncoding => "both Content-Length and Transfer-Encoding",
            Refusal::BadContentLength => "invalid or conflicting Content-Length",
            Refusal::BadTransferEncoding => "Transfer-Encoding not ending in chunked, or in HTTP/1.0",
            Refusal::BadHost => "missing, repeated or invalid Host",
            Refusal::VersionNotSupported => "only HTTP/1.0 and HTTP/1.1 are served",
            Refusal::HeadTimeout => "the request did not arrive in time",
            Refusal::BodyTooLarge => "request body too large",
            Refusal::LengthRequired => "send the body with Content-Length",
            Refusal::BadForm => "the target is not a path",
            Refusal::BadPercentEncoding => "% not followed by two hex digits",
            Refusal::EncodedSlash => "percent-encoded slash or backslash in the path",
            Refusal::Nul => "NUL byte in the path",
            Refusal::EscapesRoot => "dot segments climb above the root",
            Refusal::Control => "control character in the path",
            Refusal::Backslash => "backslash in the path (some origins read it as a slash)",
        }
    }
}

impl From<PathError> for Refusal {
    fn from(e: PathError) -> Refusal {
        match e {
            PathError::BadForm => Refusal::BadForm,
            PathError::BadPercentEncoding => Refusal::BadPercentEncoding,
            PathError::EncodedSlash => Refusal::EncodedSlash,
            PathError::Nul => Refusal::Nul,
            PathError::EscapesRoot => Refusal::EscapesRoot,
            PathError::Control => Refusal::Control,
            PathError::Backslash => Refusal::Backslash,
        }
    }
}

/// Connection states counted as gauges (kept up to date by transitions, never by
/// scanning sockets; idle = open − active − parked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// Reading a request or sending a response.
    Active,
    /// Keep-alive, waiting for the next request inside the runtime.
    Idle,
    /// Keep-alive, parked outside the runtime.
    Parked,
}

impl ConnState {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnState::Active => "active",
            ConnState::Idle => "idle",
            ConnState::Parked => "parked",
        }
    }
}

/// One worker's statistics. Written only by that worker.
#[repr(align(128))]
pub struct WorkerStats {
    requests: [[AtomicU64; 5]; 5],
    sent: [AtomicU64; 3],
    accepted: AtomicU64,
    refused: AtomicU64,
    closed: [AtomicU64; 7],
    tls: [AtomicU64; 7],
    tls_resumed: AtomicU64,
    open: AtomicU64,
    active: AtomicU64,
    parked: AtomicU64,
    /// Response durations.
    pub duration: Histogram,
    sampled: AtomicU64,
    http2_connections: AtomicU64,
    http2_streams: AtomicU64,
    /// Sampled connections' smoothed RTT.
    pub rtt: Histogram,
    /// Sampled connections' retransmission share, at their end.
    pub retrans: Histogram,
    /// Sampled connections' delivery rate.
    pub delivery_rate: Histogram,
    /// Sampled connections' congestion window.
    pub cwnd: Histogram,
    log_lines: AtomicU64,
    log_dropped: AtomicU64,
    log_errors: AtomicU64,
    refusals: [AtomicU64; Refusal::ALL.len()],
    /// Durations of the file sends (and user-space TLS file reads) made on the event
    /// loop.
    pub loop_io: Histogram,
    stall_ns: AtomicU64,
    stalls: AtomicU64,
    pool_sends: AtomicU64,
    pool_bytes: AtomicU64,
}

impl Default for WorkerStats {
    fn default() -> Self {
        WorkerStats::new()
    }
}

/// A summed or per-worker copy of the counters, for rendering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `[status class][cache status]` request counts.
    pub requests: [[u64; 5]; 5],
    /// Bytes sent per delivery path.
    pub sent: [u64; 3],
    /// Connections accepted.
    pub accepted: u64,
    /// Connections refused at the per-worker limit.
    pub refused: u64,
    /// Connections closed, per [`CloseReason`].
    pub closed: [u64; 7],
    /// TLS handshakes per [`TlsOutcome`].
    pub tls: [u64; 7],
    /// TLS handshakes that resumed a session.
    pub tls_resumed: u64,
    /// Open connections now.
    pub open: u64,
    /// Active connections now.
    pub active: u64,
    /// Parked connections now.
    pub parked: u64,
    /// Connections whose TCP_INFO was sampled.
    pub sampled: u64,
    /// Connections that spoke HTTP/2 (h2c or ALPN `h2`).
    pub http2_connections: u64,
    /// Requests answered on HTTP/2 streams (also in the request counters).
    pub http2_streams: u64,
    /// Access-log lines written to the buffer.
    pub log_lines: u64,
    /// Access-log lines lost (write failure or no file).
    pub log_dropped: u64,
    /// Access-log open/write failures.
    pub log_errors: u64,
    /// Requests refused, per [`Refusal`].
    pub refusals: [u64; Refusal::ALL.len()],
    /// Nanoseconds the event loop spent in file sends longer than [`STALL_NS`].
    pub stall_ns: u64,
    /// File sends on the event loop longer than [`STALL_NS`].
    pub stalls: u64,
    /// Windows not in the page cache sent by the disk pool instead of the event loop.
    pub pool_sends: u64,
    /// Bytes those sent.
    pub pool_bytes: u64,
}

impl Snapshot {
    /// Add another snapshot into this one.
    pub fn add(&mut self, o: &Snapshot) {
        for (a, b) in self.requests.iter_mut().zip(o.requests.iter()) {
            for (x, y) in a.iter_mut().zip(b.iter()) {
                *x += y;
            }
        }
        for (x, y) in self.sent.iter_mut().zip(o.sent.iter()) {
            *x += y;
        }
        for (x, y) in self.closed.iter_mut().zip(o.closed.iter()) {
            *x += y;
        }
        for (x, y) in self.tls.iter_mut().zip(o.tls.iter()) {
            *x += y;
        }
        for (x, y) in self.refusals.iter_mut().zip(o.refusals.iter()) {
            *x += y;
        }
        self.tls_resumed += o.tls_resumed;
        self.accepted += o.accepted;
        self.refused += o.refused;
        self.open += o.open;
        self.active += o.active;
        self.parked += o.parked;
        self.sampled += o.sampled;
        self.http2_connections += o.http2_connections;
        self.http2_streams += o.http2_streams;
        self.log_lines += o.log_lines;
        self.log_dropped += o.log_dropped;
        self.log_errors += o.log_errors;
        self.stall_ns += o.stall_ns;
        self.stalls += o.stalls;
        self.pool_sends += o.pool_sends;
        self.pool_bytes += o.pool_bytes;
    }

    /// All requests answered.
    pub fn requests_total(&self) -> u64 {
        self.requests.iter().flatten().sum()
    }

    /// All bytes sent.
    pub fn sent_total(&self) -> u64 {
        self.sent.iter().sum()
    }

    /// Requests answered from cache (hit or stale) and from the cache at all (hit,
    /// stale or miss): the hit ratio's numerator and denominator.
    pub fn hit_counts(&self) -> (u64, u64) {
        let by = |c: CachePhase| -> u64 {
            let i = CachePhase::ALL.iter().position(|&x| x == c).unwrap_or(0);
            self.requests.iter().map(|row| row[i]).sum()
        };
        let hits = by(CachePhase::Hit) + by(CachePhase::Stale);
        (hits, hits + by(CachePhase::Miss))
    }
}

impl WorkerStats {
    /// All zero.
    pub fn new() -> WorkerStats {
        WorkerStats {
            requests: [const { [const { AtomicU64::new(0) }; 5] }; 5],
            sent: [const { AtomicU64::new(0) }; 3],
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            closed: [const { AtomicU64::new(0) }; 7],
            tls: [const { AtomicU64::new(0) }; 7],
            tls_resumed: AtomicU64::new(0),
            open: AtomicU64::new(0),
            active: AtomicU64::new(0),
            parked: AtomicU64::new(0),
            duration: Histogram::new(DURATION_BOUNDS_US),
            sampled: AtomicU64::new(0),
            http2_connections: AtomicU64::new(0),
            http2_streams: AtomicU64::new(0),
            rtt: Histogram::new(RTT_BOUNDS_US),
            retrans: Histogram::new(RETRANS_BOUNDS_PPM),
            delivery_rate: Histogram::new(DELIVERY_RATE_BOUNDS),
            cwnd: Histogram::new(CWND_BOUNDS),
            log_lines: AtomicU64::new(0),
            log_dropped: AtomicU64::new(0),
            log_errors: AtomicU64::new(0),
            refusals: [const { AtomicU64::new(0) }; Refusal::ALL.len()],
            loop_io: Histogram::new(LOOP_IO_BOUNDS_US),
            stall_ns: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            pool_sends: AtomicU64::new(0),
            pool_bytes: AtomicU64::new(0),
        }
    }

    /// A file send (or read) on the event loop took `ns` nanoseconds to move `bytes`;
    /// over [`STALL_NS`] (plus [`STALL_NS_PER_BYTE`] per byte) it counts as a stall of
    /// the whole worker.
    #[inline]
    pub fn loop_io(&self, ns: u64, bytes: u64) {
        self.loop_io.observe(ns / 1_000);
        if ns > STALL_NS.saturating_add(bytes.saturating_mul(STALL_NS_PER_BYTE)) {
            bump(&self.stall_ns, ns);
            bump(&self.stalls, 1);
        }
    }

    /// The disk pool sent a window that was not in the page cache (`bytes` of it).
    pub fn pool_send(&self, bytes: u64) {
        bump(&self.pool_sends, 1);
        bump(&self.pool_bytes, bytes);
    }

    /// One response finished (completely or not): its status, cache status, duration.
    #[inline]
    pub fn response(&self, status: u16, cache: CachePhase, duration_us: u64) {
        let class = StatusClass::of(status) as usize;
        bump(&self.requests[class][cache as usize], 1);
        self.duration.observe(duration_us);
    }

    /// `n` bytes handed to the kernel on `path`. The TLS paths call this with their
    /// own variant.
    #[inline]
    pub fn sent(&self, path: DeliveryPath, n: u64) {
        bump(&self.sent[path as usize], n);
    }

    /// A connection was accepted (it is open and idle until its first request).
    pub fn accepted(&self) {
        bump(&self.accepted, 1);
        bump(&self.open, 1);
    }

    /// A TLS handshake ended with `outcome`; `resumed`: it resumed a session.
    pub fn tls(&self, outcome: TlsOutcome, resumed: bool) {
        bump(&self.tls[outcome as usize], 1);
        if resumed {
            bump(&self.tls_resumed, 1);
        }
    }

    /// A connection was refused at the per-worker limit.
    pub fn refused(&self) {
        bump(&self.refused, 1);
    }

    /// A connection closed.
    pub fn closed(&self, why: CloseReason) {
        bump(&self.closed[why as usize], 1);
        drop_by(&self.open, 1);
    }

    /// A connection entered `state` (`Idle` is implicit: leaving another state).
    #[inline]
    pub fn enter(&self, state: ConnState) {
        match state {
            ConnState::Active => bump(&self.active, 1),
            ConnState::Parked => bump(&self.parked, 1),
            ConnState::Idle => {}
        }
    }

    /// A connection left `state`.
    #[inline]
    pub fn leave(&self, state: ConnState) {
        match state {
            ConnState::Active => drop_by(&self.active, 1),
            ConnState::Parked => drop_by(&self.parked, 1),
            ConnState::Idle => {}
        }
    }

    /// A connection was chosen for TCP_INFO sampling.
    pub fn sampled(&self) {
        bump(&self.sampled, 1);
    }

    /// A connection began speaking HTTP/2.
    pub fn http2_connection(&self) {
        bump(&self.http2_connections, 1);
    }

    /// A request was answered on an HTTP/2 stream.
    pub fn http2_stream(&self) {
        bump(&self.http2_streams, 1);
    }

    /// An access-log line was buffered.
    pub fn log_line(&self) {
        bump(&self.log_lines, 1);
    }

    /// `n` access-log lines were lost.
    pub fn log_dropped(&self, n: u64) {
        bump(&self.log_dropped, n);
    }

    /// An access-log file could not be opened or written.
    pub fn log_error(&self) {
        bump(&self.log_errors, 1);
    }

    /// A request was refused (counted whether or not its log line was written).
    pub fn refusal(&self, why: Refusal) {
        bump(&self.refusals[why as usize], 1);
    }

    /// A copy of the plain counters (histograms are read separately).
    pub fn snapshot(&self) -> Snapshot {
        let r = |a: &AtomicU64| a.load(Relaxed);
        let mut s = Snapshot::default();
        for (row, src) in s.requests.iter_mut().zip(self.requests.iter()) {
            for (x, y) in row.iter_mut().zip(src.iter()) {
                *x = r(y);
            }
        }
        for (x, y) in s.sent.iter_mut().zip(self.sent.iter()) {
            *x = r(y);
        }
        for (x, y) in s.closed.iter_mut().zip(self.closed.iter()) {
            *x = r(y);
        }
        for (x, y) in s.tls.iter_mut().zip(self.tls.iter()) {
            *x = r(y);
        }
        s.tls_resumed = r(&self.tls_resumed);
        s.accepted = r(&self.accepted);
        s.refused = r(&self.refused);
        s.open = r(&self.open);
        s.active = r(&self.active);
        s.parked = r(&self.parked);
        s.sampled = r(&self.sampled);
        s.http2_connections = r(&self.http2_connections);
        s.http2_streams = r(&self.http2_streams);
        s.log_lines = r(&self.log_lines);
        s.log_dropped = r(&self.log_dropped);
        s.log_errors = r(&self.log_errors);
        s.stall_ns = r(&self.stall_ns);
        s.stalls = r(&self.stalls);
        s.pool_sends = r(&self.pool_sends);
        s.pool_bytes = r(&self.pool_bytes);
        for (x, y) in s.refusals.iter_mut().zip(self.refusals.iter()) {
            *x = r(y);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sum_and_histogram_buckets() {
        let a = WorkerStats::new();
        let b = WorkerStats::new();
        a.response(200, CachePhase::Local, 50);
        a.response(206, CachePhase::Local, 300);
        b.response(404, CachePhase::Local, 20_000_000);
        a.sent(DeliveryPath::Sendfile, 10);
        b.sent(DeliveryPath::KernelTls, 5);
        let mut sum = a.snapshot();
        sum.add(&b.snapshot());
        assert_eq!(sum.requests_total(), 3);
        assert_eq!(sum.requests[1][0], 2);
        assert_eq!(sum.requests[3][0], 1);
        assert_eq!(sum.sent, [10, 5, 0]);
        let (buckets, total) = a.duration.read();
        assert_eq!(buckets[0], 1); // 50 ≤ 100
        assert_eq!(buckets[2], 1); // 300 ≤ 500
        assert_eq!(total, 350);
        let (buckets, _) = b.duration.read();
        assert_eq!(*buckets.last().unwrap_or(&0), 1); // +Inf
        assert_eq!(std::mem::align_of::<WorkerStats>(), 128);
    }

    #[test]
    fn only_slow_loop_io_counts_as_a_stall() {
        // Guards linerate_worker_stall_seconds_total: a send from memory (tens of µs)
        // is observed but is no stall; one that waited 3 ms for a disk is both.
        // A 2 MiB send from memory to loopback takes ~1 ms: no stall either.
        let s = WorkerStats::new();
        s.loop_io(40_000, 65_536);
        s.loop_io(STALL_NS, 0);
        s.loop_io(2_500_000, 2 << 20);
        assert_eq!((s.snapshot().stalls, s.snapshot().stall_ns), (0, 0));
        s.loop_io(3_000_000, 65_536);
        let snap = s.snapshot();
        assert_eq!((snap.stalls, snap.stall_ns), (1, 3_000_000));
        let (buckets, sum_us) = s.loop_io.read();
        assert_eq!(buckets.iter().sum::<u64>(), 4);
        assert_eq!(sum_us, 40 + 1_000 + 2_500 + 3_000);
        s.pool_send(2 << 20);
        let mut sum = Snapshot::default();
        sum.add(&s.snapshot());
        assert_eq!(
            (sum.pool_sends, sum.pool_bytes, sum.stalls),
            (1, 2 << 20, 1)
        );
    }

    #[test]
    fn gauges_follow_transitions() {
        let s = WorkerStats::new();
        s.accepted();
        s.enter(ConnState::Active);
        s.leave(ConnState::Active);
        s.enter(ConnState::Parked);
        let snap = s.snapshot();
        assert_eq!((snap.open, snap.active, snap.parked), (1, 0, 1));
        s.leave(ConnState::Parked);
        s.closed(CloseReason::Idle);
        assert_eq!(s.snapshot().open, 0);
        assert_eq!(StatusClass::of(999), StatusClass::ServerError);
    }
}
