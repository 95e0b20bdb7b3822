//! Typed options for operating the server: the admin listener, the access log, and TCP
//! tuning and sampling. Parsed from the configuration file by the binary; every default
//! is a named constant with its reason. Which of them a reload (SIGHUP) can change is
//! stated on each field; the rest need a restart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Default admin address: loopback only, because `/metrics` and `/health` tell anyone who
/// can reach them about the box, and the mutating endpoints only have a token.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9090";

/// Default share of connections whose `TCP_INFO` is sampled: 1%, Netflix's lesson that
/// full per-connection statistics cost 5-10% CPU while a sample tells the same story.
pub const DEFAULT_TCP_INFO_SAMPLE: f64 = 0.01;

/// Default access-log buffer per worker, bytes: one `write(2)` per 64 KiB of lines
/// (about 300 requests) rather than one per request (nginx's `buffer=` does the same).
pub const DEFAULT_LOG_BUFFER_BYTES: usize = 64 * 1024;

/// Default longest time a buffered access-log line waits before it is written.
pub const DEFAULT_LOG_FLUSH: Duration = Duration::from_secs(1);

/// The admin listener. Restart needed to change `listen`; `token` reloads.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminOptions {
    /// Where the admin API listens; `None` turns it off. Default [`DEFAULT_ADMIN_LISTEN`].
    pub listen: Option<SocketAddr>,
    /// Bearer token the mutating endpoints (drain, reload, reopen-logs) require; empty
    /// turns those endpoints off (403). Default empty. Reloadable.
    pub token: String,
}

impl Default for AdminOptions {
    fn default() -> Self {
        AdminOptions {
            // The constant is a valid literal address (checked by a unit test).
            listen: DEFAULT_ADMIN_LISTEN.parse().ok(),
            token: String::new(),
        }
    }
}

/// Access-log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// NCSA combined (what nginx, Apache and log tools expect), followed by
    /// `cache=… dur_us=… rtt_us=…`.
    Combined,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// Configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Combined => "combined",
            LogFormat::Json => "json",
        }
    }
}

/// The access log. All of it reloads (a changed path is opened by every worker).
#[derive(Debug, Clone, PartialEq)]
pub struct AccessLogOptions {
    /// File appended to; `None` turns logging off. Default off. Reopened on SIGUSR1.
    pub path: Option<PathBuf>,
    /// Line format. Default combined.
    pub format: LogFormat,
    /// Share of requests logged, 0.0-1.0. Default 1.0.
    pub sample: f64,
    /// Per-worker buffer, bytes; a full buffer is written at once. Default 64 KiB.
    pub buffer_bytes: usize,
    /// Longest time a line waits in the buffer. Default 1 s.
    pub flush_every: Duration,
}

impl Default for AccessLogOptions {
    fn default() -> Self {
        AccessLogOptions {
            path: None,
            format: LogFormat::Combined,
            sample: 1.0,
            buffer_bytes: DEFAULT_LOG_BUFFER_BYTES,
            flush_every: DEFAULT_LOG_FLUSH,
        }
    }
}

/// TCP tuning (applied to every listener at start-up; restart needed) and sampling
/// (reloadable).
#[derive(Debug, Clone, PartialEq)]
pub struct TcpOptions {
    /// Congestion control set on every listener (accepted sockets inherit it), e.g.
    /// `bbr` or `cubic`; `None` keeps the system default. An algorithm the kernel lacks is
    /// a start-up error. Default `None`.
    pub congestion: Option<String>,
    /// `SO_MAX_PACING_RATE` per connection, bytes per second; `None` = no cap. Default
    /// `None`.
    pub max_pacing_rate: Option<u64>,
    /// Share of connections whose `TCP_INFO` is read after every response and at the
    /// end, 0.0-1.0. Cost: one `getsockopt` per response on sampled connections.
    /// Default [`DEFAULT_TCP_INFO_SAMPLE`]. Reloadable.
    pub info_sample: f64,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            congestion: None,
            max_pacing_rate: None,
            info_sample: DEFAULT_TCP_INFO_SAMPLE,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn default_admin_address_parses() {
        assert!(super::AdminOptions::default().listen.is_some());
    }
}
