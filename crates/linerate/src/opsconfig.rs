//! The operating sections of the configuration file: `[admin]`, `[access_log]` and
//! `[tcp]` (reference: docs/config.md). Same rules as the rest of the file: unknown keys
//! and bad values are errors naming the key and line; defaults come from
//! `linerate_server::operate`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::collections::BTreeMap;

use linerate_server::operate::{
    self, AccessLogOptions, AdminOptions, ListenerTcp, LogFormat, Metrics, TcpOptions, TcpTuning,
};
use serde::{Deserialize, Deserializer, Serialize};
use toml::Spanned;

/// Shortest admin token accepted: a guessable token would make the commands public to
/// anyone who can reach the admin address.
const MIN_TOKEN_LEN: usize = 16;

/// Smallest access-log buffer: below a page the buffer stops saving syscalls.
const MIN_LOG_BUFFER: u64 = 4096;

/// Largest access-log buffer per worker: lines lost on a crash grow with it.
const MAX_LOG_BUFFER: u64 = 16 * 1024 * 1024;

/// Longest flush interval: a log that lags more than a minute is no longer "live".
const MAX_LOG_FLUSH_MS: u64 = 60_000;

/// `[admin]`: the admin API.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSection {
    /// `"ip:port"` or `"off"`. Default `"127.0.0.1:9090"`. Restart needed to change.
    #[serde(deserialize_with = "admin_listen")]
    pub listen: String,
    /// Bearer token for drain/reload/reopen-logs; empty disables them. Default empty.
    #[serde(deserialize_with = "token")]
    pub token: String,
    /// Count per-request metrics; false makes `/metrics` and `/stats.json` answer 404.
    /// Default true. Restart needed to change.
    pub metrics: bool,
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection {
            listen: operate::DEFAULT_ADMIN_LISTEN.to_owned(),
            token: String::new(),
            metrics: true,
        }
    }
}

/// `[access_log]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogSection {
    /// File appended to; empty = off. Default empty.
    pub path: PathBuf,
    /// `combined` or `json`. Default `combined`.
    pub format: FormatName,
    /// Share of requests logged, 0.0-1.0. Default 1.0.
    #[serde(deserialize_with = "share")]
    pub sample: f64,
    /// Per-worker buffer, bytes. Default 65536.
    #[serde(deserialize_with = "log_buffer")]
    pub buffer_bytes: u64,
    /// Longest wait before buffered lines are written, ms. Default 1000.
    #[serde(deserialize_with = "flush_ms")]
    pub flush_ms: u64,
}

/// Access-log format names.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FormatName {
    /// NCSA combined plus cache status, duration and RTT.
    Combined,
    /// One JSON object per line.
    Json,
}

impl Default for AccessLogSection {
    fn default() -> Self {
        let o = AccessLogOptions::default();
        AccessLogSection {
            path: PathBuf::new(),
            format: FormatName::Combined,
            sample: o.sample,
            buffer_bytes: o.buffer_bytes as u64,
            flush_ms: o.flush_every.as_millis() as u64,
        }
    }
}

/// `[tcp]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TcpSection {
    /// Congestion control for every listener without an override (`bbr`, `cubic`...);
    /// empty = system default. Default empty.
    #[serde(deserialize_with = "congestion")]
    pub congestion: String,
    /// Pacing cap per connection, bytes/s, for listeners without an override; 0 = none.
    /// Default 0.
    pub max_pacing_rate: u64,
    /// Share of connections whose TCP_INFO is sampled, 0.0-1.0. Default 0.01.
    #[serde(deserialize_with = "share")]
    pub info_sample: f64,
    /// `[tcp.listeners."ip:port"]`: overrides for one listen address (plain or TLS),
    /// which must be configured in `server.listen` or `tls.listen`. Default none.
    /// The keys keep their position in the file for the error that names them.
    #[serde(
        deserialize_with = "listener_overrides",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub listeners: BTreeMap<Spanned<SocketAddr>, ListenerTcpSection>,
}

/// `[tcp.listeners."ip:port"]`: a key left out takes the `[tcp]` value.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTcpSection {
    /// Congestion control on this listener; empty = system default. Default: `tcp.congestion`.
    #[serde(
        default,
        deserialize_with = "congestion_override",
        skip_serializing_if = "Option::is_none"
    )]
    pub congestion: Option<String>,
    /// Pacing cap per connection on this listener, bytes/s; 0 = none. Default:
    /// `tcp.max_pacing_rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pacing_rate: Option<u64>,
}

impl Default for TcpSection {
    fn default() -> Self {
        TcpSection {
            congestion: String::new(),
            max_pacing_rate: 0,
            info_sample: operate::DEFAULT_TCP_INFO_SAMPLE,
            listeners: BTreeMap::new(),
        }
    }
}

impl AdminSection {
    /// Typed options.
    pub fn to_options(&self) -> AdminOptions {
        AdminOptions {
            listen: self.listen.parse::<SocketAddr>().ok(),
            token: self.token.clone(),
            metrics: if self.metrics {
                Metrics::On
            } else {
                Metrics::Off
            },
        }
    }
}

impl AccessLogSection {
    /// Typed options.
    pub fn to_options(&self) -> AccessLogOptions {
        AccessLogOptions {
            path: Some(self.path.clone()).filter(|p| !p.as_os_str().is_empty()),
            format: match self.format {
                FormatName::Combined => LogFormat::Combined,
                FormatName::Json => LogFormat::Json,
            },
            sample: self.sample,
            buffer_bytes: self.buffer_bytes as usize,
            flush_every: Duration::from_millis(self.flush_ms),
        }
    }
}

impl TcpSection {
    /// Typed options; each override is resolved against the `[tcp]` defaults.
    pub fn to_options(&self) -> TcpOptions {
        let tuning = |congestion: &str, rate: u64| TcpTuning {
            congestion: Some(congestion.to_owned()).filter(|c| !c.is_empty()),
            max_pacing_rate: Some(rate).filter(|&r| r > 0),
        };
        let default = tuning(&self.congestion, self.max_pacing_rate);
        TcpOptions {
            congestion: default.congestion,
            max_pacing_rate: default.max_pacing_rate,
            listeners: self
                .listeners
                .iter()
                .map(|(listen, o)| ListenerTcp {
                    listen: *listen.get_ref(),
                    tuning: tuning(
                        o.congestion.as_deref().unwrap_or(&self.congestion),
                        o.max_pacing_rate.unwrap_or(self.max_pacing_rate),
                    ),
                })
                .collect(),
            info_sample: self.info_sample,
        }
    }

    /// The first override whose address is not among `listen` (the plain and TLS listen
    /// addresses), with its position in the file when it came from one.
    pub fn unknown_listener(&self, listen: &[SocketAddr]) -> Option<&Spanned<SocketAddr>> {
        self.listeners
            .keys()
            .find(|k| !listen.contains(k.get_ref()))
    }
}

/// The override table, refusing two keys that spell the same address differently
/// (`"[::1]:80"` and `"[0:0:0:0:0:0:0:1]:80"` would otherwise silently merge).
fn listener_overrides<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<Spanned<SocketAddr>, ListenerTcpSection>, D::Error> {
    struct Overrides;
    impl<'de> serde::de::Visitor<'de> for Overrides {
        type Value = BTreeMap<Spanned<SocketAddr>, ListenerTcpSection>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a table of \"ip:port\" = { congestion, max_pacing_rate }")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((k, v)) = m.next_entry::<Spanned<SocketAddr>, ListenerTcpSection>()? {
                let addr = *k.get_ref();
                if out.insert(k, v).is_some() {
                    return Err(serde::de::Error::custom(format!(
                        "tcp.listeners: {addr} is listed twice"
                    )));
                }
            }
            Ok(out)
        }
    }
    d.deserialize_map(Overrides)
}

fn congestion_override<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    congestion(d).map(Some)
}

fn admin_listen<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s == "off" || s.parse::<SocketAddr>().is_ok() {
        Ok(s)
    } else {
        Err(serde::de::Error::custom("must be \"ip:port\" or \"off\""))
    }
}

fn token<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        return Ok(s);
    }
    if s.len() < MIN_TOKEN_LEN || !s.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(serde::de::Error::custom(format!(
            "must be empty (commands off) or at least {MIN_TOKEN_LEN} visible ASCII characters without spaces"
        )));
    }
    Ok(s)
}

fn share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if !(0.0..=1.0).contains(&v) {
        return Err(serde::de::Error::custom("must be between 0.0 and 1.0"));
    }
    Ok(v)
}

fn log_buffer<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if !(MIN_LOG_BUFFER..=MAX_LOG_BUFFER).contains(&v) {
        return Err(serde::de::Error::custom(format!(
            "must be between {MIN_LOG_BUFFER} and {MAX_LOG_BUFFER}"
        )));
    }
    Ok(v)
}

fn flush_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if v == 0 || v > MAX_LOG_FLUSH_MS {
        return Err(serde::de::Error::custom(format!(
            "must be between 1 and {MAX_LOG_FLUSH_MS}"
        )));
    }
    Ok(v)
}

fn congestion<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.len() >= linerate_sys_name_max()
        || !s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(serde::de::Error::custom(
            "an algorithm name such as \"bbr\" or \"cubic\" (lower-case letters, digits, _; under 16 characters)",
        ));
    }
    Ok(s)
}

/// The kernel's `TCP_CA_NAME_MAX` (16, including the terminating NUL).
const fn linerate_sys_name_max() -> usize {
    16
}
