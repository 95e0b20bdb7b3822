//! Typed server options: what the binary's configuration file and flags turn into. Every
//! field has a documented default (the `DEFAULT_*` constants) and unit. Parsing TOML and
//! flags is the binary's job; this module only holds the validated result.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Default listen address: loopback only, so a first run exposes nothing.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Default per-worker connection limit. 16,384 lets one worker hold the 10,000 idle
/// player connections of the benchmark with room to spare; each idle connection costs
/// about 1 KiB of user memory here plus the kernel's socket (see docs/benchmarks.md).
pub const DEFAULT_MAX_CONNECTIONS_PER_WORKER: usize = 16_384;

/// Default `listen(2)` backlog per worker socket. Connections past it are refused by the
/// kernel (SYN dropped or reset), so the queue never grows without bound.
pub const DEFAULT_BACKLOG: u32 = 1024;

/// Default time allowed to receive a whole request head, from its first byte (or from
/// accept, for the first request). The slowloris defence; nginx's `client_header_timeout`
/// is 60 s, but a player sends its head in one packet, so 10 s is generous.
pub const DEFAULT_REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Default time an idle keep-alive connection waits for its next request. Players fetch a
/// segment every 2-6 s; 60 s covers a paused player without holding dead ones forever
/// (nginx `keepalive_timeout` is 75 s).
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default time a response may make no progress (socket never writable) before the
/// connection is closed: a client that stopped reading. nginx `send_timeout` is 60 s.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Default grace period on SIGTERM/SIGINT for in-flight responses to finish.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Default idle time after which a keep-alive connection is parked outside the async
/// runtime (see the `park` module): long enough that a connection in active use never
/// parks, short against a player's 2-6 s between segment fetches.
pub const DEFAULT_PARK_IDLE_AFTER: Duration = Duration::from_secs(1);

/// Default threads per disk for cold reads. Each blocks on one disk read at a time;
/// 8 keeps an SSD's queue busy without thousands of threads (nginx's default thread
/// pool has 32 for all disks).
pub const DEFAULT_COLD_THREADS_PER_DISK: usize = 8;

/// Default largest request body (on GET/HEAD) read and discarded to keep the connection
/// in sync; larger bodies get 413 and the connection closes.
pub const DEFAULT_MAX_DISCARDED_BODY: u64 = 64 * 1024;

/// Default open files cached per worker (appliance mode). Each holds one descriptor and
/// ~200 bytes. 16,384 covers the hot set of a busy edge's library (a 2 h title in 6 s
/// segments and five renditions is 6,000 segments; a hot set is a few titles plus the
/// live channels) so that hot requests never open a file; at start-up it is capped at
/// a quarter of the descriptor limit per worker, so on a small limit it shrinks rather
/// than starving connections. nginx's `open_file_cache max` has no default (off).
pub const DEFAULT_OPEN_FILE_CACHE: usize = 16_384;

/// Default time a cached open file is trusted before its path is checked again (one
/// `stat`): the longest a replaced, deleted or modified file may still be served as it
/// was. Live manifests change every segment duration (2-6 s), so 1 s; nginx's
/// `open_file_cache_valid` default is 60 s.
pub const DEFAULT_OPEN_FILE_CACHE_VALID: Duration = Duration::from_secs(1);

/// Default `Access-Control-Allow-Origin` of appliance mode: any origin. Its files are
/// public to anyone who can reach the port (no authentication, no cookies, nothing
/// per user), `*` never lets a browser send credentials, and web players on other
/// origins (the admin dashboard's player among them) need it, as from any video CDN.
pub const DEFAULT_CORS_ALLOW_ORIGIN: &str = "*";

/// Everything a server run needs. Build with [`ServerOptions::new`] and adjust fields.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Addresses to listen on; each worker has its own `SO_REUSEPORT` socket for each.
    pub listen: Vec<SocketAddr>,
    /// Worker threads. Default: one per CPU this process may run on.
    pub workers: usize,
    /// Pin worker i to the i-th allowed CPU. Default: on.
    pub pin_workers: Pinning,
    /// Connections one worker holds at once; past it, new ones are closed at accept.
    pub max_connections_per_worker: usize,
    /// `listen(2)` backlog of each worker socket.
    pub backlog: u32,
    /// The directory served (appliance mode).
    pub root: PathBuf,
    /// Open files cached per worker (appliance mode); 0 disables the cache.
    pub open_file_cache: usize,
    /// How long a cached open file is trusted before its path is checked again (when
    /// its directories are not watched, see `open_file_cache_watch`), and how long a
    /// missing path is remembered as missing.
    pub open_file_cache_valid: Duration,
    /// Watch the directories of cached open files with inotify, so a change drops
    /// the entry at once and a watched entry needs no `stat`. Default: on.
    pub open_file_cache_watch: bool,
    /// `Access-Control-Allow-Origin` sent on appliance mode's file responses (so a web
    /// player on another origin, such as the admin dashboard's, may read them); `None`
    /// sends none. Default `*`.
    pub cors_allow_origin: Option<String>,
    /// Connection timeouts.
    pub timeouts: Timeouts,
    /// `Cache-Control` per lower-case file extension (no dot).
    pub cache_control: Vec<(String, String)>,
    /// `Cache-Control` for extensions not listed; `None` sends no header.
    pub default_cache_control: Option<String>,
    /// Blocking threads per disk for cold reads.
    pub cold_threads_per_disk: usize,
    /// Largest request body read and discarded (bytes).
    pub max_discarded_body: u64,
    /// HTTP/2 with prior knowledge (h2c) on the plain listeners (`[server] http2`).
    /// Default true.
    pub http2: bool,
    /// The admin listener (metrics, health, drain, reload).
    pub admin: crate::operate::AdminOptions,
    /// The access log.
    pub access_log: crate::operate::AccessLogOptions,
    /// TCP tuning and `TCP_INFO` sampling.
    pub tcp: crate::operate::TcpOptions,
    /// HTTPS listeners and their certificates. Default: none.
    pub tls: Option<TlsOptions>,
    /// Cache mode (origins, routes, store). `None`: appliance mode, serving `root`.
    pub cache: Option<crate::cacheopts::CacheOptions>,
    /// Cache mode as one node of a cluster (`[cluster]`): peers and placement. Reloads
    /// apply. Default: none (a lone node).
    pub cluster: Option<crate::clusteropts::CheckedCluster>,
    /// `[fill]`: pre-positioning jobs (cache mode).
    pub fill: crate::fillopts::FillOptions,
}

/// Default time a TLS client gets to finish its handshake, from accept. The TLS
/// slowloris defence: a handshake is two round trips, so 10 s is generous even on a
/// lossy mobile link, and matches the request-head timeout.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest handshake timeout accepted: past a minute the slowloris defence is gone.
pub const MAX_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

/// HTTPS (`[tls]`): where to listen, which certificates, and what to do with names we
/// lack. Reads and prints itself in the file's shape (serde); [`TlsOptions::check`]
/// makes the checks that span keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsOptions {
    /// Addresses to listen on for TLS; each worker has its own `SO_REUSEPORT` socket.
    /// Default none (no TLS).
    pub listen: Vec<SocketAddr>,
    /// What a client gets when its SNI name matches no certificate (`"default"` or
    /// `"refuse"`). Default: [`UnknownSni::Default`].
    pub unknown_sni: UnknownSni,
    /// Whole-handshake deadline from accept (`handshake_timeout_ms`, 1 to 60000).
    /// Default [`DEFAULT_HANDSHAKE_TIMEOUT`].
    #[serde(
        rename = "handshake_timeout_ms",
        deserialize_with = "handshake_timeout",
        serialize_with = "crate::optserde::ms::serialize"
    )]
    pub handshake_timeout: Duration,
    /// Whether to hand records to kernel TLS when the kernel supports the cipher
    /// (`ktls = true` or `false`). Default [`KtlsMode::Auto`].
    pub ktls: KtlsMode,
    /// Certificates (`[[tls.certificates]]`); the one marked default (or else the
    /// first) answers clients that send no SNI name.
    pub certificates: Vec<CertificateOptions>,
    /// Offer HTTP/2 in ALPN (`h2` before `http/1.1`). Default true.
    pub http2: bool,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            listen: Vec::new(),
            unknown_sni: UnknownSni::Default,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            ktls: KtlsMode::Auto,
            certificates: Vec::new(),
            http2: true,
        }
    }
}

impl TlsOptions {
    /// Checks the per-key ones cannot make: certificates for the listeners, at most one
    /// default, no name listed for two certificates.
    pub fn check(&self) -> Result<(), String> {
        if !self.listen.is_empty() && self.certificates.is_empty() {
            return Err("tls.listen is set but there is no [[tls.certificates]] entry".into());
        }
        if self.certificates.iter().filter(|c| c.default).count() > 1 {
            return Err("only one [[tls.certificates]] entry may have default = true".into());
        }
        let mut seen = std::collections::HashSet::new();
        for name in self.certificates.iter().flat_map(|c| &c.names) {
            if !seen.insert(name) {
                return Err(format!(
                    "tls server name {name} is listed for two certificates"
                ));
            }
        }
        Ok(())
    }
}

fn handshake_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let max = MAX_HANDSHAKE_TIMEOUT.as_millis();
    let n = u64::deserialize(d)?;
    if n == 0 || u128::from(n) > max {
        return Err(serde::de::Error::custom(format!(
            "must be between 1 and {max}"
        )));
    }
    Ok(Duration::from_millis(n))
}

/// One certificate chain and its key (`[[tls.certificates]]`), and the names it
/// answers for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateOptions {
    /// PEM file: the leaf certificate first, then intermediates.
    pub chain: PathBuf,
    /// PEM file: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// SNI names (lower-case DNS names; `*.example.com` matches one label). Default
    /// none.
    #[serde(default, deserialize_with = "server_names")]
    pub names: Vec<String>,
    /// Whether this is the certificate for clients without SNI (and unknown names).
    /// Default false (the first one is).
    #[serde(default)]
    pub default: bool,
}

/// DNS names as SNI carries them (RFC 6066 §3: no IP literals, no trailing dot), lower
/// case; a leading `*.` label is a one-label wildcard.
fn server_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    names
        .into_iter()
        .map(|n| {
            let lower = n.to_ascii_lowercase();
            let bare = lower.strip_prefix("*.").unwrap_or(&lower);
            let ok = !bare.is_empty()
                && bare.len() <= 253
                && bare.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
                && bare.parse::<std::net::IpAddr>().is_err();
            if ok {
                Ok(lower)
            } else {
                Err(serde::de::Error::custom(format!(
                    "server name `{n}`: a DNS name (letters, digits, hyphens, dots; optional leading `*.`)"
                )))
            }
        })
        .collect()
}

/// The answer to an SNI name that no certificate lists (RFC 6066 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownSni {
    /// Complete the handshake with the default certificate (the client decides whether
    /// the name mismatch matters, as nginx's default server does).
    Default,
    /// Refuse the handshake with a fatal alert.
    Refuse,
}

impl UnknownSni {
    /// The name in the configuration file.
    pub fn as_str(self) -> &'static str {
        match self {
            UnknownSni::Default => "default",
            UnknownSni::Refuse => "refuse",
        }
    }
}

impl Serialize for UnknownSni {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for UnknownSni {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "default" => Ok(UnknownSni::Default),
            "refuse" => Ok(UnknownSni::Refuse),
            _ => Err(serde::de::Error::custom(
                "must be \"default\" (serve the default certificate) or \"refuse\"",
            )),
        }
    }
}

/// Whether kernel TLS is used; in the file, `ktls = true` (auto) or `false` (off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KtlsMode {
    /// Use kTLS for every connection whose version and cipher the start-up probe found
    /// the kernel accepts; user-space TLS otherwise.
    Auto,
    /// Never: every connection encrypts in user space (for comparison and debugging).
    Off,
}

impl Serialize for KtlsMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(*self == KtlsMode::Auto)
    }
}

impl<'de> Deserialize<'de> for KtlsMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(if bool::deserialize(d)? {
            KtlsMode::Auto
        } else {
            KtlsMode::Off
        })
    }
}

/// Whether workers are pinned to CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinning {
    /// Worker i runs only on the i-th allowed CPU (wrapping).
    Pinned,
    /// The kernel schedules workers freely.
    Unpinned,
}

/// Connection timeouts (`[timeouts]`, each in milliseconds: the key is the field's
/// name with `_ms`); see the `DEFAULT_*` constants for the defaults and why. Reads and
/// prints itself in the file's shape (serde).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// Receiving one whole request head (> 0).
    #[serde(rename = "request_head_ms", with = "positive_ms")]
    pub request_head: Duration,
    /// Waiting for the next request on an idle keep-alive connection (> 0).
    #[serde(rename = "keepalive_ms", with = "positive_ms")]
    pub keepalive: Duration,
    /// A response making no progress (> 0).
    #[serde(rename = "send_ms", with = "positive_ms")]
    pub send: Duration,
    /// In-flight responses after SIGTERM/SIGINT (0: none).
    #[serde(rename = "shutdown_grace_ms", with = "crate::optserde::ms")]
    pub shutdown_grace: Duration,
    /// Idle time before a keep-alive connection is parked outside the async runtime
    /// (see the `park` module; > 0).
    #[serde(rename = "park_idle_after_ms", with = "positive_ms")]
    pub park_idle_after: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            request_head: DEFAULT_REQUEST_HEAD_TIMEOUT,
            keepalive: DEFAULT_KEEPALIVE_TIMEOUT,
            send: DEFAULT_SEND_TIMEOUT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            park_idle_after: DEFAULT_PARK_IDLE_AFTER,
        }
    }
}

/// A duration in whole milliseconds, at least 1.
mod positive_ms {
    use super::*;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        crate::optserde::ms::serialize(d, s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        crate::optserde::positive::<D, u64>(d).map(Duration::from_millis)
    }
}

/// Default `Cache-Control` by extension: manifests change every segment duration
/// (short), segments and files never change once published (long, immutable).
pub fn default_cache_control() -> Vec<(String, String)> {
    use crate::media::{MediaKind, MEDIA_EXTENSIONS};
    MEDIA_EXTENSIONS
        .iter()
        .map(|(e, kind)| {
            let value = match kind {
                MediaKind::Manifest => "public, max-age=2",
                MediaKind::Segment => "public, max-age=86400",
            };
            ((*e).to_owned(), value.to_owned())
        })
        .collect()
}

impl ServerOptions {
    /// Options with every default, serving `root`.
    pub fn new(root: PathBuf) -> Self {
        ServerOptions {
            // The constant is a valid literal address.
            #[allow(
                clippy::unwrap_used,
                reason = "constant literal, checked by a unit test"
            )]
            listen: vec![DEFAULT_LISTEN.parse().unwrap()],
            workers: default_workers(),
            pin_workers: Pinning::Pinned,
            max_connections_per_worker: DEFAULT_MAX_CONNECTIONS_PER_WORKER,
            backlog: DEFAULT_BACKLOG,
            root,
            open_file_cache: DEFAULT_OPEN_FILE_CACHE,
            open_file_cache_valid: DEFAULT_OPEN_FILE_CACHE_VALID,
            open_file_cache_watch: true,
            cors_allow_origin: Some(DEFAULT_CORS_ALLOW_ORIGIN.to_owned()),
            timeouts: Timeouts::default(),
            cache_control: default_cache_control(),
            default_cache_control: None,
            cold_threads_per_disk: DEFAULT_COLD_THREADS_PER_DISK,
            max_discarded_body: DEFAULT_MAX_DISCARDED_BODY,
            http2: true,
            admin: crate::operate::AdminOptions::default(),
            access_log: crate::operate::AccessLogOptions::default(),
            tcp: crate::operate::TcpOptions::default(),
            tls: None,
            cache: None,
            cluster: None,
            fill: crate::fillopts::FillOptions::default(),
        }
    }
}

/// One worker per CPU this process may run on (respects taskset/cgroup cpusets).
pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    /// Issue 22 part 5: appliance mode's `Cache-Control` table and the video profile's
    /// TTL table name the same extensions (they drifted: `webm` was in one only), and
    /// agree on which are manifests (short) and which segments (long).
    #[test]
    fn one_extension_table_for_cache_control_and_video_ttls() {
        let cc = crate::options::default_cache_control();
        let ttl = crate::cacheopts::video_ttl_by_extension();
        let names = |v: Vec<&String>| v.into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(
            names(cc.iter().map(|(e, _)| e).collect()),
            names(ttl.iter().map(|(e, _)| e).collect())
        );
        assert!(ttl.iter().any(|(e, _)| e == "webm"));
        for ((e, value), (_, t)) in cc.iter().zip(&ttl) {
            let short = *t == std::time::Duration::from_secs(2);
            assert_eq!(value.ends_with("max-age=2"), short, "{e}");
        }
    }

    #[test]
    fn defaults_are_valid() {
        let o = super::ServerOptions::new("/srv".into());
        assert_eq!(o.listen[0].to_string(), super::DEFAULT_LISTEN);
        assert!(o.workers >= 1);
    }
}
