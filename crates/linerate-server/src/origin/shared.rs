//! What every worker shares about one origin: its options, the TLS client
//! configuration (built once at start-up), and each server's health and counters.
//!
//! Health is shared on purpose: when a server dies, one worker's failures should spare
//! every other worker the connect timeouts. It is a few relaxed atomics per server,
//! touched once per origin request, which happen on misses only (never on the hit path
//! that must scale), so the "no shared counter on the request path" rule holds where it
//! matters. Not here: connections (each worker pools its own, `conn`).

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use super::error::{OriginError, ERROR_KINDS};
use crate::cacheopts::OriginOptions;

/// The CA bundle used when an origin with https servers names no `ca_file`: Debian's
/// and Ubuntu's `ca-certificates` path (RHEL links it too). We bundle no roots.
pub(crate) const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The ALPN protocol we offer (RFC 7301): an origin that speaks h2 must not pick it.
const ALPN_HTTP11: &[u8] = b"http/1.1";

/// Built once at start-up per origin, shared by every worker (`Arc`): the TLS client
/// configuration and the servers' health.
pub(crate) struct OriginShared {
    /// The options it was built from.
    pub(crate) opts: OriginOptions,
    /// Client configuration for the https servers; `None` when there are none.
    tls: Option<Arc<ClientConfig>>,
    /// Per server, in `opts.servers` order.
    servers: Vec<ServerShared>,
    /// Zero of the `down_until` clock (monotonic, so a wall-clock step cannot revive or
    /// bury a server).
    epoch: Instant,
}

/// One server's fixed values, health and counters.
struct ServerShared {
    /// `Host` sent to it.
    host_header: String,
    /// SNI and verification name (https only).
    server_name: Option<ServerName<'static>>,
    /// Failures in a row since the last success.
    failures: AtomicU32,
    /// Milliseconds since `epoch` until which the server is skipped; 0: never marked.
    down_until_ms: AtomicU64,
    /// Counters (see [`ServerSnapshot`]).
    requests: AtomicU64,
    errors: [AtomicU64; ERROR_KINDS.len()],
    opened: AtomicU64,
    reused: AtomicU64,
}

/// Whether a server is being sent requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerState {
    /// In rotation (including a half-open server whose down period has ended).
    Up,
    /// Skipped until its down period ends.
    Down,
}

impl ServerState {
    /// Label for metrics and the admin API.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ServerState::Up => "up",
            ServerState::Down => "down",
        }
    }
}

/// Counters of one origin, for metrics.
#[derive(Debug, Clone)]
pub(crate) struct OriginSnapshot {
    /// The origin's name.
    pub(crate) name: String,
    /// Per server, in configuration order.
    pub(crate) servers: Vec<ServerSnapshot>,
}

/// Counters of one origin server (since start-up, summed over workers).
#[derive(Debug, Clone)]
pub(crate) struct ServerSnapshot {
    /// `host:port` as in `Host`.
    pub(crate) authority: String,
    /// Up or down now.
    pub(crate) state: ServerState,
    /// Failures in a row since the last success.
    pub(crate) consecutive_failures: u32,
    /// Requests sent (each attempt counts, retries included).
    pub(crate) requests: u64,
    /// Failures by [`OriginError::as_str`], every kind listed (zeros included).
    pub(crate) failures: Vec<(&'static str, u64)>,
    /// Connections opened.
    pub(crate) connections_opened: u64,
    /// Requests sent on a pooled connection.
    pub(crate) connections_reused: u64,
}

impl OriginShared {
    /// Check the options and build the TLS client configuration (loading the CA file or
    /// the system bundle). Errors name the origin and say what to fix.
    pub(crate) fn new(opts: OriginOptions) -> Result<Arc<OriginShared>, String> {
        let name = &opts.name;
        if opts.servers.is_empty() {
            return Err(format!("origin {name:?} has no servers"));
        }
        if opts.max_connections == 0 {
            return Err(format!("origin {name:?}: max_connections must be > 0"));
        }
        let tls = if opts.servers.iter().any(|s| s.tls) {
            Some(client_config(&opts)?)
        } else {
            None
        };
        let mut servers = Vec::with_capacity(opts.servers.len());
        for s in &opts.servers {
            let server_name = if s.tls {
                // An IP literal becomes `ServerName::IpAddress`: no SNI is sent (RFC 6066
                // §3 forbids literals) and the certificate must carry that IP.
                let sn = ServerName::try_from(s.host.clone()).map_err(|e| {
                    format!("origin {name:?}: {:?} is not a valid TLS name: {e}", s.host)
                })?;
                Some(sn)
            } else {
                None
            };
            servers.push(ServerShared {
                host_header: opts.host_header.clone().unwrap_or_else(|| s.authority()),
                server_name,
                failures: AtomicU32::new(0),
                down_until_ms: AtomicU64::new(0),
                requests: AtomicU64::new(0),
                errors: std::array::from_fn(|_| AtomicU64::new(0)),
                opened: AtomicU64::new(0),
                reused: AtomicU64::new(0),
            });
        }
        Ok(Arc::new(OriginShared {
            opts,
            tls,
            servers,
            epoch: Instant::now(),
        }))
    }

    /// Counters for metrics.
    pub(crate) fn snapshot(&self) -> OriginSnapshot {
        let servers = self
            .servers
            .iter()
            .enumerate()
            .map(|(i, s)| ServerSnapshot {
                authority: self.opts.servers[i].authority(),
                state: if self.is_down(i) {
                    ServerState::Down
                } else {
                    ServerState::Up
                },
                consecutive_failures: s.failures.load(Ordering::Relaxed),
                requests: s.requests.load(Ordering::Relaxed),
                failures: ERROR_KINDS
                    .iter()
                    .zip(&s.errors)
                    .map(|(k, n)| (*k, n.load(Ordering::Relaxed)))
                    .collect(),
                connections_opened: s.opened.load(Ordering::Relaxed),
                connections_reused: s.reused.load(Ordering::Relaxed),
            })
            .collect();
        OriginSnapshot {
            name: self.opts.name.clone(),
            servers,
        }
    }

    /// The TLS client configuration (`Some` whenever a server is https).
    pub(super) fn tls(&self) -> Option<&Arc<ClientConfig>> {
        self.tls.as_ref()
    }

    /// SNI and verification name of `server` (https servers only).
    pub(super) fn server_name(&self, server: usize) -> Option<&ServerName<'static>> {
        self.servers[server].server_name.as_ref()
    }

    /// The `Host` value sent to `server`.
    pub(super) fn host_header(&self, server: usize) -> &str {
        &self.servers[server].host_header
    }

    /// Milliseconds since `epoch`.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether `server` is marked down now. Once its period ends it is up again
    /// ("half-open"): the next request tries it, and one more failure marks it down
    /// again at once (its failure count is still at the threshold).
    pub(super) fn is_down(&self, server: usize) -> bool {
        self.now_ms() < self.servers[server].down_until_ms.load(Ordering::Relaxed)
    }

    /// The server whose down period ends first (all are down).
    pub(super) fn soonest_up(&self) -> usize {
        self.servers
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| s.down_until_ms.load(Ordering::Relaxed))
            .map_or(0, |(i, _)| i)
    }

    /// A response head arrived from `server`: it is healthy.
    pub(super) fn record_success(&self, server: usize) {
        let s = &self.servers[server];
        let before = s.failures.swap(0, Ordering::Relaxed);
        let threshold = self.opts.down_after;
        if threshold > 0 && before >= threshold {
            s.down_until_ms.store(0, Ordering::Relaxed);
            tracing::warn!(
                origin = %self.opts.name,
                server = %self.opts.servers[server].authority(),
                "origin server is up again"
            );
        }
    }

    /// `server` could not be reached (see `OriginError::is_unreachable`). `down_after`
    /// failures in a row mark it down for `down_for` (`down_after` 0: never), unless it
    /// is the origin's only server.
    pub(super) fn record_failure(&self, server: usize, error: &OriginError) {
        let s = &self.servers[server];
        let failures = s
            .failures
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(1))
            })
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        let threshold = self.opts.down_after;
        if threshold == 0 || failures < threshold || self.servers.len() == 1 {
            return;
        }
        let now = self.now_ms();
        let down_for = u64::try_from(self.opts.down_for.as_millis()).unwrap_or(u64::MAX);
        let before = s
            .down_until_ms
            .swap(now.saturating_add(down_for), Ordering::Relaxed);
        // Log the transition only (not every failure of requests already in flight).
        if before <= now {
            tracing::warn!(
                origin = %self.opts.name,
                server = %self.opts.servers[server].authority(),
                failures,
                last_error = %error,
                down_for_ms = down_for,
                "origin server marked down"
            );
        }
    }

    /// One request sent to `server` (each attempt).
    pub(super) fn count_request(&self, server: usize) {
        self.servers[server]
            .requests
            .fetch_add(1, Ordering::Relaxed);
    }

    /// One failure of a request to `server`, by kind.
    pub(super) fn count_error(&self, server: usize, error: &OriginError) {
        self.servers[server].errors[error.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// One connection opened to `server`.
    pub(super) fn count_opened(&self, server: usize) {
        self.servers[server].opened.fetch_add(1, Ordering::Relaxed);
    }

    /// One request sent on a pooled connection to `server`.
    pub(super) fn count_reused(&self, server: usize) {
        self.servers[server].reused.fetch_add(1, Ordering::Relaxed);
    }
}

/// The rustls client configuration: the ring provider the server side uses, TLS 1.3 and
/// 1.2, ALPN `http/1.1`, roots from `ca_file` or the system bundle. Session resumption
/// keeps rustls's default in-memory cache (its lock is taken per handshake, and pooled
/// connections make handshakes rare).
fn client_config(opts: &OriginOptions) -> Result<Arc<ClientConfig>, String> {
    let name = &opts.name;
    let roots = match &opts.ca_file {
        Some(path) => roots_from_file(path, true),
        None => {
            let path = Path::new(SYSTEM_CA_BUNDLE);
            if !path.exists() {
                return Err(format!(
                    "origin {name:?} has https servers but no ca_file, and the system CA \
                     bundle {SYSTEM_CA_BUNDLE} does not exist: set ca_file to a PEM bundle"
                ));
            }
            roots_from_file(path, false)
        }
    }
    .map_err(|e| format!("origin {name:?}: {e}"))?;
    let mut config = ClientConfig::builder_with_provider(crate::tls::config::provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("origin {name:?}: TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// Trust anchors from a PEM file. `strict` (an operator's own file): every certificate
/// must parse. Otherwise (the system bundle) unusable ones are skipped, as every TLS
/// client does with it. Either way at least one must load.
fn roots_from_file(path: &Path, strict: bool) -> Result<RootCertStore, String> {
    let shown = path.display();
    let mut certs = Vec::new();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| format!("{shown}: {e}"))? {
        certs.push(cert.map_err(|e| format!("{shown}: {e}"))?);
    }
    let mut roots = RootCertStore::empty();
    if strict {
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("{shown}: unusable CA certificate: {e}"))?;
        }
    } else {
        roots.add_parsable_certificates(certs);
    }
    if roots.is_empty() {
        return Err(format!("{shown}: no CA certificates"));
    }
    Ok(roots)
}
