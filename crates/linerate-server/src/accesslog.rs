//! The access log of one worker: lines are formatted into a worker-owned buffer and
//! written with one `write(2)` when the buffer fills or the flush timer fires, never one
//! per request and never under a lock. Every worker appends to the same file with
//! `O_APPEND`, so each buffer lands whole (the kernel serialises appends per write).
//!
//! Failure is not the request path's problem: a file that cannot be opened or written
//! (a full disk, a directory that became unwritable or vanished) loses those lines, which
//! are counted (`linerate_access_log_dropped_total`, `..._errors_total`) and logged once
//! per failure streak; serving continues and the next reopen (SIGUSR1) or flush tries
//! again.
//!
//! A refused request (malformed, too large, too slow: see [`Refusal`]) is logged with
//! `reason=` whatever the sampling, but at most [`REFUSALS_LOGGED_PER_S`] a second per
//! worker: a client can send thousands of bad heads a second, each costing it a few
//! bytes and the disk a line. The first line logged after some were left out carries
//! `suppressed=N`; `linerate_requests_refused_total` counts every one.
//!
//! Not here: deciding what a request's status or bytes were (the connection reports
//! them) or rotating files (an external tool renames them, then sends SIGUSR1, as with
//! nginx).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;

use crate::logbudget::{Admit, LogBudget};
use crate::operate::{AccessLogOptions, LogFormat};
use crate::stats::{CachePhase, Refusal, WorkerStats};

/// Refused requests logged per second per worker at most. At a line of about 200 bytes
/// that is 10 KB/s per worker under a flood, against the gigabytes a second of bad
/// heads could write unbounded; far above what honest clients produce.
pub(crate) const REFUSALS_LOGGED_PER_S: u32 = 50;

/// Longest request line kept in a log entry; a longer one is cut (the limit on request
/// lines themselves is 8 KiB, and log lines that long help no one).
const MAX_LOGGED_REQUEST_LINE: usize = 2048;

/// Longest `Referer` or `User-Agent` value kept.
const MAX_LOGGED_FIELD: usize = 512;

/// What a connection knows about a request when it starts: captured only for requests
/// that will be logged, because it allocates.
pub(crate) struct Pending {
    request_line: Vec<u8>,
    referer: Vec<u8>,
    user_agent: Vec<u8>,
}

impl Pending {
    /// Capture from the raw head bytes (`head` is the whole head, CRLFs included).
    pub(crate) fn capture(head: &[u8]) -> Pending {
        let mut lines = head.split(|&b| b == b'\n');
        let first = lines.next().unwrap_or_default();
        let first = first.strip_suffix(b"\r").unwrap_or(first);
        let mut p = Pending {
            request_line: first[..first.len().min(MAX_LOGGED_REQUEST_LINE)].to_vec(),
            referer: Vec::new(),
            user_agent: Vec::new(),
        };
        for line in lines {
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
            let value = &value[..value.len().min(MAX_LOGGED_FIELD)];
            if name.eq_ignore_ascii_case(b"referer") && p.referer.is_empty() {
                p.referer = value.to_vec();
            } else if name.eq_ignore_ascii_case(b"user-agent") && p.user_agent.is_empty() {
                p.user_agent = value.to_vec();
            }
        }
        p
    }
}

/// What is known when the response ends.
pub(crate) struct Finished<'c> {
    /// Status sent.
    pub(crate) status: u16,
    /// Bytes handed to the kernel (head and body).
    pub(crate) bytes: u64,
    /// From complete head to last byte, microseconds.
    pub(crate) duration_us: u64,
    /// Cache status.
    pub(crate) cache: CachePhase,
    /// Smoothed RTT, if this connection is sampled.
    pub(crate) rtt_us: Option<u32>,
    /// The socket's congestion control (e.g. `cubic`), if this connection is sampled.
    pub(crate) congestion: Option<&'c str>,
    /// Worker index.
    pub(crate) worker: usize,
    /// Why the request was refused, when it was.
    pub(crate) refusal: Option<Refusal>,
    /// Refused requests not logged before this one (see [`AccessLog::admit_refusal`]).
    pub(crate) suppressed: u64,
}

/// One worker's log.
pub(crate) struct AccessLog {
    options: AccessLogOptions,
    file: Option<File>,
    buf: Vec<u8>,
    lines: u64,
    /// In a failure streak (logged once, at its start).
    failing: bool,
    /// xorshift state for sampling.
    rng: u64,
    /// The bound on refused-request lines.
    refusals: LogBudget,
}

impl AccessLog {
    /// A log with `options`, its file opened now (a failure is counted and logged).
    pub(crate) fn new(options: AccessLogOptions, seed: u64, stats: &WorkerStats) -> AccessLog {
        let mut log = AccessLog {
            options,
            file: None,
            buf: Vec::new(),
            lines: 0,
            failing: false,
            rng: seed | 1,
            refusals: LogBudget::new(REFUSALS_LOGGED_PER_S),
        };
        log.reopen(stats);
        log
    }

    /// Whether logging is on at all.
    pub(crate) fn enabled(&self) -> bool {
        self.options.path.is_some()
    }

    /// Whether the next request should be logged (sampling decided here).
    pub(crate) fn wants(&mut self) -> bool {
        if self.options.path.is_none() {
            return false;
        }
        let s = self.options.sample;
        if s >= 1.0 {
            return true;
        }
        if s <= 0.0 {
            return false;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64 <= s
    }

    /// Whether a refused request gets its line (sampling aside, within
    /// [`REFUSALS_LOGGED_PER_S`]): `Some(n)` with the number left out before it.
    pub(crate) fn admit_refusal(&mut self) -> Option<u64> {
        self.options.path.as_ref()?;
        match self.refusals.admit(std::time::Instant::now()) {
            Admit::Log { suppressed } => Some(suppressed),
            Admit::Suppress => None,
        }
    }

    /// Buffer one line; write the buffer if it is full.
    pub(crate) fn record(
        &mut self,
        peer: Option<SocketAddr>,
        date: &[u8],
        pending: &Pending,
        done: &Finished,
        stats: &WorkerStats,
    ) {
        match self.options.format {
            LogFormat::Combined => combined(&mut self.buf, peer, date, pending, done),
            LogFormat::Json => json(&mut self.buf, peer, date, pending, done),
        }
        self.lines += 1;
        stats.log_line();
        if self.buf.len() >= self.options.buffer_bytes {
            self.flush(stats);
        }
    }

    /// Write what is buffered.
    pub(crate) fn flush(&mut self, stats: &WorkerStats) {
        if self.buf.is_empty() {
            return;
        }
        let result = match self.file.as_mut() {
            Some(f) => f.write_all(&self.buf),
            None => Err(std::io::Error::other("no open log file")),
        };
        match result {
            Ok(()) => self.failing = false,
            Err(e) => {
                stats.log_dropped(self.lines);
                if self.file.is_some() {
                    stats.log_error();
                }
                if !self.failing {
                    tracing::error!(error = %e, lines = self.lines, "access log write failed; lines dropped, serving continues");
                    self.failing = true;
                }
            }
        }
        self.buf.clear();
        self.lines = 0;
    }

    /// Flush, then open the configured path again (SIGUSR1, or a changed path).
    pub(crate) fn reopen(&mut self, stats: &WorkerStats) {
        self.flush(stats);
        self.file = None;
        let Some(path) = &self.options.path else {
            return;
        };
        match OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(path)
        {
            Ok(f) => {
                self.file = Some(f);
                self.failing = false;
            }
            Err(e) => {
                stats.log_error();
                tracing::error!(path = %path.display(), error = %e, "cannot open the access log; lines will be dropped, serving continues");
                self.failing = true;
            }
        }
    }

    /// Apply reloaded options: reopen if the path changed.
    pub(crate) fn reconfigure(&mut self, options: &AccessLogOptions, stats: &WorkerStats) {
        if *options == self.options {
            return;
        }
        let reopen = options.path != self.options.path;
        self.flush(stats);
        self.options = options.clone();
        if reopen {
            self.reopen(stats);
        }
    }
}

fn peer_ip(out: &mut Vec<u8>, peer: Option<SocketAddr>) {
    match peer {
        Some(p) => {
            let _ = write!(out, "{}", p.ip());
        }
        None => out.push(b'-'),
    }
}

/// Bytes as a log field: printable ASCII kept, `"` and `\` and anything else escaped
/// as `\xHH` (nginx's escaping), so a client cannot forge lines or break quoting.
fn escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.is_empty() {
        out.push(b'-');
        return;
    }
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b);
        } else {
            let _ = write!(out, "\\x{b:02X}");
        }
    }
}

/// `ip - - [date] "request" status bytes "referer" "agent" cache=… dur_us=… rtt_us=… cc=…`,
/// then ` reason=… ` (and ` suppressed=N` when lines were left out) for a refused request.
/// The date is the response's HTTP date (RFC 9110 IMF-fixdate, UTC) rather than
/// nginx's `$time_local`: it is already formatted once a second per worker.
fn combined(out: &mut Vec<u8>, peer: Option<SocketAddr>, date: &[u8], p: &Pending, d: &Finished) {
    peer_ip(out, peer);
    out.extend_from_slice(b" - - [");
    out.extend_from_slice(date);
    out.extend_from_slice(b"] \"");
    escaped(out, &p.request_line);
    let _ = write!(out, "\" {} {} \"", d.status, d.bytes);
    escaped(out, &p.referer);
    out.extend_from_slice(b"\" \"");
    escaped(out, &p.user_agent);
    let _ = write!(
        out,
        "\" cache={} dur_us={} rtt_us=",
        d.cache.as_str(),
        d.duration_us
    );
    match d.rtt_us {
        Some(r) => {
            let _ = write!(out, "{r}");
        }
        None => out.push(b'-'),
    }
    out.extend_from_slice(b" cc=");
    // The kernel's names are lower-case letters, digits and `_`; escaped all the same.
    escaped(out, d.congestion.unwrap_or("-").as_bytes());
    if let Some(r) = d.refusal {
        let _ = write!(out, " reason={}", r.as_str());
        if d.suppressed > 0 {
            let _ = write!(out, " suppressed={}", d.suppressed);
        }
    }
    out.push(b'\n');
}

/// A JSON string value; the same escaping of non-printable bytes, as `\u00HH`.
fn json_str(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b);
        } else {
            let _ = write!(out, "\\u{:04x}", b);
        }
    }
    out.push(b'"');
}

fn json(out: &mut Vec<u8>, peer: Option<SocketAddr>, date: &[u8], p: &Pending, d: &Finished) {
    out.extend_from_slice(b"{\"time\":");
    json_str(out, date);
    out.extend_from_slice(b",\"remote\":");
    match peer {
        Some(peer) => json_str(out, peer.ip().to_string().as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"request\":");
    json_str(out, &p.request_line);
    let _ = write!(out, ",\"status\":{},\"bytes\":{}", d.status, d.bytes);
    out.extend_from_slice(b",\"referer\":");
    json_str(out, &p.referer);
    out.extend_from_slice(b",\"user_agent\":");
    json_str(out, &p.user_agent);
    let _ = write!(
        out,
        ",\"cache\":\"{}\",\"duration_us\":{},\"rtt_us\":",
        d.cache.as_str(),
        d.duration_us
    );
    match d.rtt_us {
        Some(r) => {
            let _ = write!(out, "{r}");
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"cc\":");
    match d.congestion {
        Some(cc) => json_str(out, cc.as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    let _ = write!(out, ",\"worker\":{}", d.worker);
    if let Some(r) = d.refusal {
        let _ = write!(out, ",\"reason\":\"{}\"", r.as_str());
        if d.suppressed > 0 {
            let _ = write!(out, ",\"suppressed\":{}", d.suppressed);
        }
    }
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn sample() -> (Pending, Finished<'static>) {
        let p = Pending::capture(
            b"GET /a\"b.ts HTTP/1.1\r\nHost: x\r\nUser-Agent: player/1\r\nreferer: http://r/\r\n\r\n",
        );
        let d = Finished {
            status: 206,
            bytes: 1234,
            duration_us: 56,
            cache: CachePhase::Local,
            rtt_us: Some(42),
            congestion: Some("cubic"),
            worker: 3,
            refusal: None,
            suppressed: 0,
        };
        (p, d)
    }

    #[test]
    fn combined_line_is_escaped_and_complete() {
        let (p, d) = sample();
        let mut out = Vec::new();
        let peer = "127.0.0.1:5555".parse().ok();
        combined(&mut out, peer, b"Sun, 06 Nov 1994 08:49:37 GMT", &p, &d);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "127.0.0.1 - - [Sun, 06 Nov 1994 08:49:37 GMT] \"GET /a\\x22b.ts HTTP/1.1\" 206 1234 \"http://r/\" \"player/1\" cache=local dur_us=56 rtt_us=42 cc=cubic\n"
        );
    }

    #[test]
    fn json_line() {
        let (p, mut d) = sample();
        d.rtt_us = None;
        d.congestion = None;
        let mut out = Vec::new();
        json(&mut out, None, b"D", &p, &d);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"time\":\"D\",\"remote\":null,\"request\":\"GET /a\\u0022b.ts HTTP/1.1\",\"status\":206,\"bytes\":1234,\"referer\":\"http://r/\",\"user_agent\":\"player/1\",\"cache\":\"local\",\"duration_us\":56,\"rtt_us\":null,\"cc\":null,\"worker\":3}\n"
        );
    }

    #[test]
    fn a_refused_request_carries_its_reason_and_what_was_left_out() {
        let (p, mut d) = sample();
        d.refusal = Some(Refusal::BadFieldName);
        let mut out = Vec::new();
        combined(&mut out, None, b"D", &p, &d);
        let line = String::from_utf8(out).unwrap();
        assert!(
            line.ends_with(" cc=cubic reason=bad_field_name\n"),
            "{line}"
        );
        d.suppressed = 7;
        let mut out = Vec::new();
        json(&mut out, None, b"D", &p, &d);
        let line = String::from_utf8(out).unwrap();
        assert!(
            line.ends_with(",\"worker\":3,\"reason\":\"bad_field_name\",\"suppressed\":7}\n"),
            "{line}"
        );
    }

    #[test]
    fn missing_fields_and_sampling() {
        let p = Pending::capture(b"GET / HTTP/1.0\r\n\r\n");
        assert!(p.referer.is_empty() && p.user_agent.is_empty());
        let stats = WorkerStats::new();
        let mut off = AccessLog::new(AccessLogOptions::default(), 1, &stats);
        assert!(!off.wants());
        let mut o = AccessLogOptions {
            path: Some(std::env::temp_dir().join(format!("lr-al-{}", std::process::id()))),
            sample: 0.25,
            ..AccessLogOptions::default()
        };
        let mut log = AccessLog::new(o.clone(), 7, &stats);
        let n = (0..10_000).filter(|_| log.wants()).count();
        assert!((2_000..3_000).contains(&n), "{n}");
        o.sample = 0.0;
        log.reconfigure(&o, &stats);
        assert!(!log.wants());
        let _ = std::fs::remove_file(o.path.as_ref().unwrap());
    }
}
