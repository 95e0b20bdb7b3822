//! Typed options for operating the server: the admin listener, the access log, and TCP
//! tuning and sampling. Parsed from the configuration file by the binary (the access
//! log reads and prints itself, serde); every default is a named constant with its
//! reason. Which of them a reload (SIGHUP) can change is stated on each field; the
//! rest need a restart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Smallest access-log buffer: below a page the buffer stops saving syscalls.
pub const MIN_LOG_BUFFER_BYTES: usize = 4096;

/// Largest access-log buffer per worker: lines lost on a crash grow with it.
pub const MAX_LOG_BUFFER_BYTES: usize = 16 * 1024 * 1024;

/// Longest access-log flush interval: a log that lags more than a minute is no longer
/// "live".
pub const MAX_LOG_FLUSH: Duration = Duration::from_secs(60);

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

/// The admin listener. Restart needed to change `listen` and `metrics`; the others reload.
#[derive(Clone, PartialEq)]
pub struct AdminOptions {
    /// Where the admin API listens; `None` turns it off. Default [`DEFAULT_ADMIN_LISTEN`].
    pub listen: Option<SocketAddr>,
    /// Bearer token the commands (drain, reload, reopen-logs, purge, upgrade, fill
    /// changes) require; empty turns those endpoints off (403). Default empty. A secret:
    /// `Debug` shows its length only. Reloadable.
    pub token: String,
    /// Host names (lower-case, no port) the admin API answers to besides the address a
    /// connection was accepted on and the loopback names; any other `Host` gets 421, so
    /// a web page cannot read the API through DNS rebinding. Default none. Reloadable.
    pub allowed_hosts: Vec<String>,
    /// Whether `POST /upgrade?binary=PATH` may start a program other than this binary
    /// (403 otherwise): with it, the token lets its holder run any program as the
    /// server's user. Default false. Reloadable.
    pub allow_upgrade_binary: bool,
    /// Whether workers count every request (requests by status and cache status, bytes
    /// sent, response durations, the active-connection gauge). Default
    /// [`Metrics::On`]. Cost when on: a few plain stores into the worker's own cache
    /// lines per request (see `stats`; docs/benchmarks.md measures it). Off: `/metrics`
    /// and `/stats.json` answer 404; connection counts, `/health` and TCP_INFO sampling
    /// stay. Restart needed (each worker copies it once at start).
    pub metrics: Metrics,
}

impl std::fmt::Debug for AdminOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminOptions")
            .field("listen", &self.listen)
            .field(
                "token",
                &format_args!("<redacted: {} bytes>", self.token.len()),
            )
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allow_upgrade_binary", &self.allow_upgrade_binary)
            .field("metrics", &self.metrics)
            .finish()
    }
}

/// Whether per-request metrics are counted ([`AdminOptions::metrics`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metrics {
    /// Count every request; `/metrics` and `/stats.json` serve them.
    On,
    /// Count nothing per request; `/metrics` and `/stats.json` answer 404.
    Off,
}

impl Metrics {
    /// Configuration and log name.
    pub fn as_str(self) -> &'static str {
        match self {
            Metrics::On => "on",
            Metrics::Off => "off",
        }
    }
}

impl Default for AdminOptions {
    fn default() -> Self {
        AdminOptions {
            // The constant is a valid literal address (checked by a unit test).
            listen: DEFAULT_ADMIN_LISTEN.parse().ok(),
            token: String::new(),
            allowed_hosts: Vec::new(),
            allow_upgrade_binary: false,
            metrics: Metrics::On,
        }
    }
}

/// Access-log line format (`format = "combined"` or `"json"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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

/// The access log (`[access_log]`). All of it reloads (a changed path is opened by
/// every worker).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogOptions {
    /// File appended to; `None` (written `path = ""`) turns logging off. Default off.
    /// Reopened on SIGUSR1.
    #[serde(with = "empty_is_none")]
    pub path: Option<PathBuf>,
    /// Line format. Default combined.
    pub format: LogFormat,
    /// Share of requests logged, 0.0-1.0. Default 1.0.
    #[serde(deserialize_with = "crate::optserde::share")]
    pub sample: f64,
    /// Per-worker buffer, bytes ([`MIN_LOG_BUFFER_BYTES`] to [`MAX_LOG_BUFFER_BYTES`]);
    /// a full buffer is written at once. Default 64 KiB.
    #[serde(deserialize_with = "log_buffer")]
    pub buffer_bytes: usize,
    /// Longest time a line waits in the buffer (`flush_ms`, 1 to 60000). Default 1 s.
    #[serde(
        rename = "flush_ms",
        deserialize_with = "flush_ms",
        serialize_with = "crate::optserde::ms::serialize"
    )]
    pub flush_every: Duration,
}

/// An optional path written as a string, `""` for none.
mod empty_is_none {
    use super::*;

    pub(super) fn serialize<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        p.clone().unwrap_or_default().serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<PathBuf>, D::Error> {
        Ok(Some(PathBuf::deserialize(d)?).filter(|p| !p.as_os_str().is_empty()))
    }
}

fn log_buffer<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let v = usize::deserialize(d)?;
    if !(MIN_LOG_BUFFER_BYTES..=MAX_LOG_BUFFER_BYTES).contains(&v) {
        return Err(serde::de::Error::custom(format!(
            "must be between {MIN_LOG_BUFFER_BYTES} and {MAX_LOG_BUFFER_BYTES}"
        )));
    }
    Ok(v)
}

fn flush_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let max = MAX_LOG_FLUSH.as_millis();
    let v = u64::deserialize(d)?;
    if v == 0 || u128::from(v) > max {
        return Err(serde::de::Error::custom(format!(
            "must be between 1 and {max}"
        )));
    }
    Ok(Duration::from_millis(v))
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

/// TCP tuning (applied to the listeners at start-up; restart needed) and sampling
/// (reloadable).
#[derive(Debug, Clone, PartialEq)]
pub struct TcpOptions {
    /// Congestion control set on every listener without its own entry in `listeners`
    /// (accepted sockets inherit it), e.g. `bbr` or `cubic`; `None` keeps the system
    /// default. An algorithm the kernel lacks is a start-up error. Default `None`.
    pub congestion: Option<String>,
    /// `SO_MAX_PACING_RATE` per connection, bytes per second, for listeners without
    /// their own entry; `None` = no cap. Default `None`.
    pub max_pacing_rate: Option<u64>,
    /// Per-listener tuning that replaces the two defaults above for one listen address
    /// (plain or TLS). Default none. Restart needed.
    pub listeners: Vec<ListenerTcp>,
    /// Share of connections whose `TCP_INFO` is read after every response and at the
    /// end, 0.0-1.0. Cost: one `getsockopt` per response on sampled connections.
    /// Default [`DEFAULT_TCP_INFO_SAMPLE`]. Reloadable.
    pub info_sample: f64,
}

/// The tuning of one listen address, resolved: the binary fills what the
/// configuration's override leaves out from the `[tcp]` defaults, so `None` here means
/// "system default" / "no cap", never "inherit".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTcp {
    /// The listen address exactly as configured in `server.listen` or `tls.listen`
    /// (port 0 included: matched before the port is resolved).
    pub listen: SocketAddr,
    /// Its tuning.
    pub tuning: TcpTuning,
    /// h2c with prior knowledge on this (plain) listener; `None`: `[server] http2`.
    pub http2: Option<bool>,
}

/// What is set on a listener socket (and inherited by its accepted sockets).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TcpTuning {
    /// `TCP_CONGESTION`; `None` keeps the system default.
    pub congestion: Option<String>,
    /// `SO_MAX_PACING_RATE`, bytes per second; `None` = no cap.
    pub max_pacing_rate: Option<u64>,
}

impl TcpOptions {
    /// Whether the plain listener configured as `listen` has its own h2c switch
    /// (`[tcp.listeners."ip:port"] http2`); `None`: `[server] http2` decides.
    pub fn http2_for(&self, listen: SocketAddr) -> Option<bool> {
        self.listeners
            .iter()
            .find(|l| l.listen == listen)
            .and_then(|l| l.http2)
    }

    /// The tuning for the listener configured as `listen`: its own entry, or the
    /// defaults. Called once per listener socket at start-up.
    pub fn tuning_for(&self, listen: SocketAddr) -> TcpTuning {
        match self.listeners.iter().find(|l| l.listen == listen) {
            Some(l) => l.tuning.clone(),
            None => TcpTuning {
                congestion: self.congestion.clone(),
                max_pacing_rate: self.max_pacing_rate,
            },
        }
    }
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            congestion: None,
            max_pacing_rate: None,
            listeners: Vec::new(),
            info_sample: DEFAULT_TCP_INFO_SAMPLE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_admin_address_parses() {
        assert!(AdminOptions::default().listen.is_some());
        assert_eq!(AdminOptions::default().metrics.as_str(), "on");
    }

    #[test]
    fn listener_tuning_overrides_the_defaults() {
        let a: SocketAddr = ([127, 0, 0, 1], 8080).into();
        let b: SocketAddr = ([127, 0, 0, 1], 8443).into();
        let tcp = TcpOptions {
            congestion: Some("cubic".into()),
            max_pacing_rate: Some(1000),
            listeners: vec![ListenerTcp {
                listen: b,
                tuning: TcpTuning {
                    congestion: Some("bbr".into()),
                    max_pacing_rate: None,
                },
                http2: Some(false),
            }],
            ..TcpOptions::default()
        };
        assert_eq!((tcp.http2_for(a), tcp.http2_for(b)), (None, Some(false)));
        assert_eq!(tcp.tuning_for(a).congestion.as_deref(), Some("cubic"));
        assert_eq!(tcp.tuning_for(a).max_pacing_rate, Some(1000));
        assert_eq!(tcp.tuning_for(b).congestion.as_deref(), Some("bbr"));
        assert_eq!(tcp.tuning_for(b).max_pacing_rate, None);
    }
}
