//! Discovery from DNS (`[cluster] peers_dns`): the nodes are the targets of the SRV
//! records of a name (a Kubernetes headless Service's
//! `_http._tcp.<service>.<namespace>.svc.cluster.local`), each named by its target's
//! first label (a StatefulSet pod's name, stable across reschedules) at its target's
//! A/AAAA address and the record's port, weight 1.
//!
//! A thread resolves the name at start (before the server answers) and every
//! `peers_dns_interval_ms`, and hands a changed set to [`Cluster::apply_discovered`],
//! which applies it as a reload applies a peers file (peers that stay keep their state;
//! a changed node set restarts the previous-owner window). An answer that is not a
//! whole set (no answer, SERVFAIL, no records, a target without an address, a name
//! that is not a valid node name) changes nothing: the last good set stays, and the
//! failure is logged (when a run of failures starts or its error changes, then once a
//! minute; and the recovery).
//!
//! Not here: what a membership does (`cluster`), reading the configuration.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;

use super::Cluster;
use crate::admin::control::{Control, RunState};
use crate::clusteropts::PeerOptions;

/// How often the thread looks for a stop (or a changed interval) while it waits.
const TICK: Duration = Duration::from_millis(100);
/// Longest wait for one DNS answer (one attempt per server): a server that does not
/// answer delays only the next look, never a request.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// A failure run is logged at its start and then at most this often.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// A resolver for `server` (`ip:port`), or the system's (`/etc/resolv.conf`). No
/// cache: every look asks the server, so a changed set is seen on the next one.
fn resolver(server: Option<SocketAddr>) -> Result<TokioResolver, String> {
    let mut builder = match server {
        Some(addr) => {
            let mut udp = ConnectionConfig::udp();
            udp.port = addr.port();
            let mut tcp = ConnectionConfig::tcp();
            tcp.port = addr.port();
            let ns = NameServerConfig::new(addr.ip(), true, vec![udp, tcp]);
            TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(vec![ns]),
                TokioRuntimeProvider::default(),
            )
        }
        None => TokioResolver::builder_tokio()
            .map_err(|e| format!("cluster: peers_dns: the system's resolver: {e}"))?,
    };
    let o = builder.options_mut();
    o.cache_size = 0;
    o.timeout = LOOKUP_TIMEOUT;
    o.attempts = 1;
    builder
        .build()
        .map_err(|e| format!("cluster: peers_dns: resolver: {e}"))
}

/// The nodes `name`'s SRV records list, sorted by name, or why there is no whole set.
async fn resolve(r: &TokioResolver, name: &str) -> Result<Vec<PeerOptions>, String> {
    let srv = r
        .srv_lookup(name)
        .await
        .map_err(|e| format!("SRV {name}: {e}"))?;
    let mut nodes: BTreeMap<String, PeerOptions> = BTreeMap::new();
    for record in srv.answers() {
        let RData::SRV(s) = &record.data else {
            continue;
        };
        let target = s.target.to_ascii();
        let Some(label) = s.target.iter().next() else {
            return Err(format!("SRV {name}: target {target:?} has no label"));
        };
        let node = String::from_utf8_lossy(label).into_owned();
        let ip = r
            .lookup_ip(s.target.clone())
            .await
            .map_err(|e| format!("address of {target}: {e}"))?
            .iter()
            .next()
            .ok_or_else(|| format!("address of {target}: none"))?;
        let address = SocketAddr::new(ip, s.port);
        if let Some(other) = nodes.get(&node) {
            if other.address != address {
                return Err(format!(
                    "SRV {name}: two targets named {node:?} ({} and {address})",
                    other.address
                ));
            }
            continue;
        }
        nodes.insert(
            node.clone(),
            PeerOptions {
                name: node,
                address,
                weight: 1.0,
            },
        );
    }
    if nodes.is_empty() {
        return Err(format!("SRV {name}: no records"));
    }
    Ok(nodes.into_values().collect())
}

/// What the thread remembers between looks.
struct State {
    /// The resolver and the server it was made for.
    resolver: Option<(Option<SocketAddr>, TokioResolver)>,
    /// When the current failure run started and was last logged, and the error then.
    failing: Option<(Instant, Instant, String)>,
}

impl State {
    /// Resolve the name in force once and apply a changed set; log a failure.
    fn look(&mut self, rt: &tokio::runtime::Runtime, cluster: &Cluster) {
        let m = cluster.membership();
        let Some(name) = m.opts.peers_dns.clone() else {
            return;
        };
        let server = m.opts.dns_server;
        if self.resolver.as_ref().is_none_or(|(s, _)| *s != server) {
            match resolver(server) {
                Ok(r) => self.resolver = Some((server, r)),
                Err(e) => {
                    self.failed(&name, &e, &m.opts.peers);
                    return;
                }
            }
        }
        let Some((_, r)) = &self.resolver else {
            return;
        };
        let result = rt
            .block_on(resolve(r, &name))
            .and_then(|peers| cluster.apply_discovered(peers.clone()).map(|()| peers));
        match result {
            Ok(peers) => {
                if let Some((since, _, _)) = self.failing.take() {
                    tracing::info!(
                        name = %name,
                        failed_for_s = since.elapsed().as_secs(),
                        nodes = peers.len(),
                        "cluster: peers_dns answers again"
                    );
                }
            }
            Err(e) => self.failed(&name, &e, &m.opts.peers),
        }
    }

    fn failed(&mut self, name: &str, error: &str, kept: &[PeerOptions]) {
        let now = Instant::now();
        let log = match &mut self.failing {
            None => {
                self.failing = Some((now, now, error.to_string()));
                true
            }
            Some((_, logged, last)) if logged.elapsed() >= FAILURE_LOG_EVERY || last != error => {
                *logged = now;
                *last = error.to_string();
                true
            }
            Some(_) => false,
        };
        if log {
            let names: Vec<&str> = kept.iter().map(|p| p.name.as_str()).collect();
            tracing::warn!(
                name = %name,
                error = %error,
                kept = %names.join(" "),
                "cluster: peers_dns lookup failed; keeping the last good set (logged when a failure run starts or its error changes, and once a minute)"
            );
        }
    }
}

/// Resolve `peers_dns` once now (the set is in force before the server answers), then
/// start the thread that resolves it every `peers_dns_interval_ms` until the server
/// stops. The thread runs whatever the options: a reload may set or clear `peers_dns`.
pub(crate) fn start(cluster: Arc<Cluster>, control: Arc<Control>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut state = State {
        resolver: None,
        failing: None,
    };
    state.look(&rt, &cluster);
    std::thread::Builder::new()
        .name("linerate-dns".into())
        .spawn(move || {
            let mut last = Instant::now();
            while control.run_state() != RunState::Stopping {
                std::thread::sleep(TICK);
                if last.elapsed() >= cluster.membership().opts.peers_dns_interval {
                    last = Instant::now();
                    state.look(&rt, &cluster);
                }
            }
        })
        .map(|_| ())
}
