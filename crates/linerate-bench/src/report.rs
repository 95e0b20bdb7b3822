//! Counters of a run and their two renderings: a human summary and one JSON object on
//! one line for scripts (`bench/bench.py` reads the last stdout line).
//!
//! Owns the error taxonomy (who failed and how, STYLE.md #9/#11) and the arithmetic of
//! rates. Does not time anything or talk to sockets; JSON is written by hand because the
//! object is flat and fixed, which is not worth a serde_json dependency.

use std::fmt::Write as _;
use std::time::Duration;

use crate::histogram::Histogram;

/// Why a connection or response failed. All are the server's (or the network's) side;
/// a generator bug would be a panic in a test, not a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `connect` failed (refused, reset, out of ports or file descriptors).
    Connect,
    /// A read or write on an open connection failed (e.g. reset by peer).
    Io,
    /// The server closed a keep-alive connection before sending any of the response.
    Closed,
    /// The server closed the connection in the middle of a response.
    Truncated,
    /// The response head could not be used (see `response::HeadError`), or the server
    /// sent bytes nobody asked for.
    Protocol,
    /// The status was not the expected one (the body was still read by its length).
    Status,
    /// A range response's length differed from the range asked for.
    Length,
}

impl ErrorKind {
    /// Every kind, in report order.
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::Connect,
        ErrorKind::Io,
        ErrorKind::Closed,
        ErrorKind::Truncated,
        ErrorKind::Protocol,
        ErrorKind::Status,
        ErrorKind::Length,
    ];

    /// Label for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Io => "io",
            ErrorKind::Closed => "closed",
            ErrorKind::Truncated => "truncated",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Status => "status",
            ErrorKind::Length => "length",
        }
    }
}

/// Error counts by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorCounts([u64; ErrorKind::ALL.len()]);

impl ErrorCounts {
    /// Count one error.
    pub fn add(&mut self, kind: ErrorKind) {
        self.0[kind as usize] += 1;
    }

    /// Errors of one kind.
    pub fn of(&self, kind: ErrorKind) -> u64 {
        self.0[kind as usize]
    }

    /// All errors.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Status codes counted individually: 0..=599 (RFC 9110 §15 defines 100-599).
const STATUS_SLOTS: usize = 600;

/// What the active connections did during the measured window.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Complete responses, any status.
    pub responses: u64,
    /// Complete responses with the expected status (and length, for ranges).
    pub ok: u64,
    by_status: Box<[u64]>,
    /// Failures of the active connections.
    pub errors: ErrorCounts,
    /// Body bytes received (counted as they arrive, so a large body in flight at the
    /// end counts its received part).
    pub body_bytes: u64,
    /// Request start to last body byte, nanoseconds, responses with the expected status.
    pub latency: Histogram,
    /// The same, for requests of the first `--hot-count` paths only (empty without it).
    pub hot_latency: Histogram,
    /// Reconnections after the server closed a connection cleanly (`Connection: close`).
    pub reconnects: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            responses: 0,
            ok: 0,
            by_status: vec![0; STATUS_SLOTS].into_boxed_slice(),
            errors: ErrorCounts::default(),
            body_bytes: 0,
            latency: Histogram::new(),
            hot_latency: Histogram::new(),
            reconnects: 0,
        }
    }
}

impl Stats {
    /// Count a complete response's status (an out-of-range status counts under 0).
    pub fn add_status(&mut self, status: u16) {
        let slot = usize::from(status);
        let slot = if slot < STATUS_SLOTS { slot } else { 0 };
        self.by_status[slot] += 1;
        self.responses += 1;
    }

    /// `(status, count)` for every status seen, ascending.
    pub fn statuses(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.by_status
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(s, &n)| (s as u16, n))
    }

    /// Forget everything (the warm-up's numbers), keeping the allocations.
    pub fn clear(&mut self) {
        self.responses = 0;
        self.ok = 0;
        self.by_status.fill(0);
        self.errors = ErrorCounts::default();
        self.body_bytes = 0;
        self.latency.clear();
        self.hot_latency.clear();
        self.reconnects = 0;
    }
}

/// The idle connections' story.
#[derive(Debug, Clone, Default)]
pub struct IdleReport {
    /// Idle connections asked for.
    pub requested: usize,
    /// Opened and answered their one request.
    pub established: usize,
    /// Could not be opened or their request failed.
    pub failed: usize,
    /// Established, then closed by the server before the end of the run.
    pub closed_by_server: usize,
    /// Still open and quiet when the run ended.
    pub open_at_end: usize,
    /// Time to open and establish them all.
    pub open_time: Duration,
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// Workload name.
    pub workload: &'static str,
    /// Server address.
    pub target: String,
    /// Active connections.
    pub connections: usize,
    /// Measured window.
    pub elapsed: Duration,
    /// Active connections' results in the window.
    pub stats: Stats,
    /// Errors outside the window (idle set-up, warm-up, settle).
    pub setup_errors: ErrorCounts,
    /// First error message seen, for the human report.
    pub first_error: Option<String>,
    /// Present when idle connections were asked for.
    pub idle: Option<IdleReport>,
}

impl Report {
    /// Responses per second in the window.
    pub fn requests_per_sec(&self) -> f64 {
        per_sec(self.stats.responses as f64, self.elapsed)
    }

    /// Body gigabytes (10^9 bytes) per second in the window.
    pub fn gb_per_sec(&self) -> f64 {
        per_sec(self.stats.body_bytes as f64 / 1e9, self.elapsed)
    }

    /// Whether the active clients were served: at least one expected response.
    pub fn served(&self) -> bool {
        self.stats.ok > 0
    }

    /// Multi-line summary for people.
    pub fn human(&self) -> String {
        let s = &self.stats;
        let mut out = String::new();
        let us = |ns: u64| ns as f64 / 1e3;
        let _ = writeln!(
            out,
            "linerate-bench: {} workload against {}, {} connections, {:.2} s measured",
            self.workload,
            self.target,
            self.connections,
            self.elapsed.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "  responses {} ({} as expected), {:.0} req/s, {} body bytes, {:.3} GB/s",
            s.responses,
            s.ok,
            self.requests_per_sec(),
            s.body_bytes,
            self.gb_per_sec()
        );
        let statuses: Vec<String> = s.statuses().map(|(st, n)| format!("{st}: {n}")).collect();
        let _ = writeln!(
            out,
            "  by status: {}",
            if statuses.is_empty() {
                "-".into()
            } else {
                statuses.join(", ")
            }
        );
        let _ = writeln!(
            out,
            "  latency us: p50 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1}, mean {:.1}",
            us(s.latency.quantile(0.50)),
            us(s.latency.quantile(0.99)),
            us(s.latency.quantile(0.999)),
            us(s.latency.max()),
            s.latency.mean() / 1e3
        );
        if s.hot_latency.count() > 0 {
            let _ = writeln!(
                out,
                "  hot latency us ({} requests of the first --hot-count paths): p50 {:.1}, p99 {:.1}",
                s.hot_latency.count(),
                us(s.hot_latency.quantile(0.50)),
                us(s.hot_latency.quantile(0.99)),
            );
        }
        let _ = writeln!(
            out,
            "  errors: {} ({}), outside the window: {}, clean reconnects: {}",
            s.errors.total(),
            error_list(&s.errors),
            self.setup_errors.total(),
            s.reconnects
        );
        if let Some(e) = &self.first_error {
            let _ = writeln!(out, "  first error: {e}");
        }
        if let Some(i) = &self.idle {
            let _ = writeln!(
                out,
                "  idle: {} requested, {} established in {:.2} s, {} failed, {} closed by server, \
                 {} open at end; active clients served: {}",
                i.requested,
                i.established,
                i.open_time.as_secs_f64(),
                i.failed,
                i.closed_by_server,
                i.open_at_end,
                if self.served() { "yes" } else { "NO" }
            );
        }
        out
    }

    /// One JSON object on one line (no trailing newline).
    pub fn json(&self) -> String {
        let s = &self.stats;
        let us = |ns: u64| ns as f64 / 1e3;
        let mut out = String::new();
        let _ = write!(
            out,
            "{{\"event\":\"result\",\"workload\":\"{}\",\"target\":\"{}\",\"connections\":{},\
             \"elapsed_s\":{:.6},\"requests\":{},\"ok\":{},\"requests_per_s\":{:.1},\
             \"body_bytes\":{},\"gb_per_s\":{:.6},\"served\":{},",
            self.workload,
            self.target,
            self.connections,
            self.elapsed.as_secs_f64(),
            s.responses,
            s.ok,
            self.requests_per_sec(),
            s.body_bytes,
            self.gb_per_sec(),
            self.served()
        );
        out.push_str("\"status\":{");
        for (i, (st, n)) in s.statuses().enumerate() {
            let _ = write!(out, "{}\"{st}\":{n}", if i > 0 { "," } else { "" });
        }
        out.push_str("},\"errors\":{");
        for (i, k) in ErrorKind::ALL.iter().enumerate() {
            let _ = write!(
                out,
                "{}\"{}\":{}",
                if i > 0 { "," } else { "" },
                k.as_str(),
                s.errors.of(*k)
            );
        }
        let _ = write!(
            out,
            "}},\"errors_total\":{},\"setup_errors\":{},\"reconnects\":{},\
             \"latency_us\":{{\"p50\":{:.1},\"p99\":{:.1},\"p999\":{:.1},\"max\":{:.1},\"mean\":{:.1},\"count\":{}}},\
             \"hot_latency_us\":{{\"p50\":{:.1},\"p99\":{:.1},\"count\":{}}}",
            s.errors.total(),
            self.setup_errors.total(),
            s.reconnects,
            us(s.latency.quantile(0.50)),
            us(s.latency.quantile(0.99)),
            us(s.latency.quantile(0.999)),
            us(s.latency.max()),
            s.latency.mean() / 1e3,
            s.latency.count(),
            us(s.hot_latency.quantile(0.50)),
            us(s.hot_latency.quantile(0.99)),
            s.hot_latency.count()
        );
        match &self.idle {
            None => out.push_str(",\"idle\":null}"),
            Some(i) => {
                let _ = write!(
                    out,
                    ",\"idle\":{{\"requested\":{},\"established\":{},\"failed\":{},\
                     \"closed_by_server\":{},\"open_at_end\":{},\"open_s\":{:.3}}}}}",
                    i.requested,
                    i.established,
                    i.failed,
                    i.closed_by_server,
                    i.open_at_end,
                    i.open_time.as_secs_f64()
                );
            }
        }
        out
    }
}

fn per_sec(amount: f64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        amount / secs
    } else {
        0.0
    }
}

fn error_list(e: &ErrorCounts) -> String {
    let parts: Vec<String> = ErrorKind::ALL
        .iter()
        .filter(|k| e.of(**k) > 0)
        .map(|k| format!("{} {}", k.as_str(), e.of(*k)))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_one_line_with_rates() {
        let mut stats = Stats::default();
        stats.add_status(200);
        stats.add_status(200);
        stats.add_status(404);
        stats.ok = 2;
        stats.body_bytes = 3_000_000_000;
        stats.latency.record(50_000);
        stats.hot_latency.record(40_000);
        stats.errors.add(ErrorKind::Status);
        let r = Report {
            workload: "files",
            target: "127.0.0.1:1".into(),
            connections: 2,
            elapsed: Duration::from_secs(2),
            stats,
            setup_errors: ErrorCounts::default(),
            first_error: None,
            idle: Some(IdleReport {
                requested: 5,
                established: 5,
                open_at_end: 5,
                ..Default::default()
            }),
        };
        let j = r.json();
        assert!(!j.contains('\n'));
        assert!(j.starts_with("{\"event\":\"result\""), "{j}");
        assert!(
            j.contains("\"requests\":3,\"ok\":2,\"requests_per_s\":1.5"),
            "{j}"
        );
        assert!(j.contains("\"gb_per_s\":1.500000"), "{j}");
        assert!(j.contains("\"status\":{\"200\":2,\"404\":1}"), "{j}");
        assert!(
            j.contains("\"status\":1,\"length\":0},\"errors_total\":1"),
            "{j}"
        );
        assert!(j.contains("\"p50\":50.0"), "{j}");
        assert!(
            j.contains("\"hot_latency_us\":{\"p50\":40.0,\"p99\":40.0,\"count\":1}"),
            "{j}"
        );
        assert!(j.ends_with("\"open_at_end\":5,\"open_s\":0.000}}"), "{j}");
        assert!(r.human().contains("active clients served: yes"));
        let mut none = r.clone();
        none.idle = None;
        assert!(none.json().ends_with(",\"idle\":null}"));
    }

    #[test]
    fn clear_keeps_nothing() {
        let mut s = Stats::default();
        s.add_status(206);
        s.add_status(1000);
        assert_eq!(s.statuses().collect::<Vec<_>>(), [(0, 1), (206, 1)]);
        s.clear();
        assert_eq!((s.responses, s.statuses().count()), (0, 0));
    }
}
