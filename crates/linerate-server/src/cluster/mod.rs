//! Cache mode as one node of a cluster (`[cluster]`): the membership in force (this
//! node, its peers, their weights), each peer's health with hysteresis, its in-flight
//! count for bounded load, its counters, and the plan for a key's fill: from the
//! origin (this node owns the key; maybe ask the previous owner's cache first) or from
//! a peer (it owns the key, or is next in rank when the owner is down or overloaded).
//!
//! Membership is swapped whole on a reload (`apply`); a peer whose name and address
//! stay keeps its health, counters and connection pools. A keeper thread (`keeper`)
//! applies reloads and probes down peers. With `peers_dns` the peers are what DNS
//! answered last (`discovery`), applied the same way (`apply_discovered`).
//!
//! A request's `Linerate-Peer` field is admitted here (`Cluster::admit`): a valid MAC
//! with the cluster secret (`auth`), or the unsigned form from an address of
//! `accept_unsigned_from`, makes it a peer's; anything else is counted by reason,
//! logged at most once a second, and the request is a client's.
//!
//! Not here: placement arithmetic (`ring`, pure), the MAC itself (`auth`, pure), or the
//! peer requests themselves and what a fill does with their answers (`proxy::peer`,
//! `proxy::fill`).

pub(crate) mod auth;
pub(crate) mod discovery;
pub(crate) mod ring;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use crate::admin::control::{Control, RunState};
use crate::cacheopts::{OriginOptions, OriginServer};
use crate::clusteropts::{CheckedCluster, ClusterOptions, PeerOptions, HOP_HEADER};
use crate::origin::{Origin, OriginShared};

/// How often the keeper looks for a reload or a stop between probes.
const KEEPER_TICK: Duration = Duration::from_millis(100);

/// One peer (another node), shared by every worker.
pub(crate) struct Peer {
    /// Its name (placement hashes it; metrics label it).
    pub(crate) name: String,
    /// Its data listener.
    pub(crate) address: std::net::SocketAddr,
    /// The HTTP client's shared part (TLS off, one server: the peer).
    pub(crate) client: Arc<OriginShared>,
    up: AtomicBool,
    failures_in_row: AtomicU32,
    probes_ok_in_row: AtomicU32,
    in_flight: AtomicU64,
    requests: AtomicU64,
    failures: AtomicU64,
    bytes: AtomicU64,
}

impl Peer {
    fn new(
        opts: &ClusterOptions,
        name: &str,
        address: std::net::SocketAddr,
    ) -> Result<Peer, String> {
        let server = OriginServer::parse(&format!("http://{address}"))?;
        let mut o = OriginOptions::new(name, vec![server]);
        o.connect_timeout = opts.connect_timeout;
        o.first_byte_timeout = opts.first_byte_timeout;
        Ok(Peer {
            name: name.to_string(),
            address,
            client: OriginShared::new(o)?,
            up: AtomicBool::new(true),
            failures_in_row: AtomicU32::new(0),
            probes_ok_in_row: AtomicU32::new(0),
            in_flight: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        })
    }

    /// Whether it is used (not marked down).
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Relaxed)
    }

    /// A response head arrived from it: the failure run is over.
    pub(crate) fn record_success(&self) {
        self.failures_in_row.store(0, Relaxed);
    }

    /// It could not be reached, gave no head in time, or broke a body: `down_after` in
    /// a row mark it down until `up_after` probes in a row succeed.
    pub(crate) fn record_failure(&self, down_after: u32) {
        self.failures.fetch_add(1, Relaxed);
        let n = self.failures_in_row.fetch_add(1, Relaxed) + 1;
        if n >= down_after && self.up.swap(false, Relaxed) {
            self.probes_ok_in_row.store(0, Relaxed);
            tracing::warn!(peer = %self.name, failures = n, "cluster peer marked down");
        }
    }

    /// Body bytes received from it.
    pub(crate) fn count_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Relaxed);
    }

    /// One request starts: counted, and in flight until the guard drops.
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(1, Relaxed);
        self.in_flight.fetch_add(1, Relaxed);
        InFlight(Arc::clone(self))
    }

    /// One probe of a down peer (blocking; the keeper thread): a TCP connect and an
    /// `OPTIONS *`, which every node answers (400) without touching its cache or origin.
    fn probe(&self, timeout: Duration, up_after: u32) {
        let ok = probe_once(self.address, timeout);
        if !ok {
            self.probes_ok_in_row.store(0, Relaxed);
            return;
        }
        let n = self.probes_ok_in_row.fetch_add(1, Relaxed) + 1;
        if n >= up_after && !self.up.swap(true, Relaxed) {
            self.failures_in_row.store(0, Relaxed);
            tracing::info!(peer = %self.name, probes = n, "cluster peer up again");
        }
    }
}

fn probe_once(address: std::net::SocketAddr, timeout: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&address, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    if s.write_all(b"OPTIONS * HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 9];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

/// A request to a peer in flight (bounded load counts these).
pub(crate) struct InFlight(Arc<Peer>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// Why a fill goes to a given peer (logs and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// It owns the key.
    Owner,
    /// The owner is down or loaded past the bound; this one is next in rank.
    Next,
}

impl Role {
    /// Label for logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Next => "next",
        }
    }
}

/// Where a fill of a key goes.
pub(crate) enum Plan {
    /// This node fetches from the origin, first asking `previous` (the owner before
    /// this node joined, within the window after a change) for its cached copy.
    Origin {
        /// The previous owner to ask from its cache only, if any.
        previous: Option<Arc<Peer>>,
    },
    /// A peer fetches it (with the hop header: it never forwards again).
    Peer(Arc<Peer>, Role),
}

/// The membership in force.
pub(crate) struct Membership {
    /// Bumped on every reload that is applied.
    pub(crate) generation: u64,
    /// The options it came from.
    pub(crate) opts: ClusterOptions,
    /// Per entry of `opts.peers`: `None` for this node.
    peers: Vec<Option<Arc<Peer>>>,
    /// When the set of nodes last changed (or the node started).
    changed: Instant,
    /// The HMAC keys of `opts.secrets`: the first signs this node's peer requests.
    pub(crate) keys: auth::Keys,
}

impl Membership {
    /// The `Linerate-Peer` value for a request to a peer (`covered` names it as the
    /// recipient), signed now.
    pub(crate) fn sign(&self, covered: &auth::Covered<'_>) -> String {
        self.keys.sign(&self.opts.self_name, unix_now(), covered)
    }

    /// Whether `field` (the one `Linerate-Peer` of request `head`, from address `from`)
    /// is a peer's.
    fn check(
        &self,
        field: &auth::Field<'_>,
        head: &linerate_http::RequestHead<'_>,
        from: Option<IpAddr>,
    ) -> Result<Admitted, auth::Reason> {
        // Any other name: a node that joined before this one's list was reloaded is
        // still a peer (the MAC, or the listed address, authenticates it), so stale
        // lists still make one hop.
        if field.sender() == self.opts.self_name {
            return Err(auth::Reason::OwnName);
        }
        let listed = from
            .map(|a| a.to_canonical())
            .is_some_and(|a| self.opts.accept_unsigned_from.contains(&a));
        match field {
            auth::Field::Unsigned { .. } if listed => Ok(Admitted::Unsigned),
            _ => self
                .keys
                .verify(
                    field,
                    unix_now(),
                    &auth::Covered::of_head(head).to(&self.opts.self_name),
                )
                .map(|()| Admitted::Signed),
        }
    }
}

/// How a peer request was admitted.
enum Admitted {
    /// With a valid MAC.
    Signed,
    /// Unsigned, from an address of `accept_unsigned_from`.
    Unsigned,
}

/// Seconds since the Unix epoch (0 for a clock before it: every MAC is then stale).
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Warn that the transition setting is on (at start and on each reload that keeps it).
fn warn_unsigned(opts: &ClusterOptions) {
    if !opts.accept_unsigned_from.is_empty() {
        let from: Vec<String> = opts
            .accept_unsigned_from
            .iter()
            .map(ToString::to_string)
            .collect();
        tracing::warn!(
            from = %from.join(" "),
            "cluster: accepting UNSIGNED peer requests from these addresses (accept_unsigned_from, a transition setting): remove it once every node has the secret"
        );
    }
}

impl Membership {
    fn weighted(&self) -> Vec<ring::Weighted<'_>> {
        self.opts
            .peers
            .iter()
            .map(|p| ring::Weighted {
                name: &p.name,
                weight: p.weight,
            })
            .collect()
    }

    /// The plan for `key` (the claim key: per slice when slicing). `tried` are peers
    /// that failed this fill already (a resume after a broken body), skipped.
    pub(crate) fn plan(&self, key: &[u8], tried: &[Arc<Peer>]) -> Plan {
        let ranked = ring::rank(&self.weighted(), key);
        let up: Vec<&Arc<Peer>> = self.peers.iter().flatten().filter(|p| p.is_up()).collect();
        let mean = if up.is_empty() {
            0.0
        } else {
            up.iter()
                .map(|p| p.in_flight.load(Relaxed) as f64)
                .sum::<f64>()
                / up.len() as f64
        };
        let bound = self.opts.load_factor * (mean + 1.0);
        for (pos, &i) in ranked.iter().enumerate() {
            let Some(peer) = &self.peers[i] else {
                // This node: it fetches from the origin. When it is the first choice and
                // the membership changed lately, the runner-up owned the key before.
                let previous = (pos == 0
                    && self.changed.elapsed() < self.opts.previous_owner_window)
                    .then(|| ranked.get(1).and_then(|&j| self.peers[j].clone()))
                    .flatten()
                    .filter(|p| p.is_up() && !tried.iter().any(|t| Arc::ptr_eq(t, p)));
                return Plan::Origin { previous };
            };
            if tried.iter().any(|t| Arc::ptr_eq(t, peer)) || !peer.is_up() {
                continue;
            }
            if peer.in_flight.load(Relaxed) as f64 >= bound {
                continue;
            }
            let role = if pos == 0 { Role::Owner } else { Role::Next };
            return Plan::Peer(Arc::clone(peer), role);
        }
        Plan::Origin { previous: None }
    }
}

/// The cluster state every worker shares.
pub(crate) struct Cluster {
    current: RwLock<Arc<Membership>>,
    hops_received: AtomicU64,
    resumes: AtomicU64,
    previous_hits: AtomicU64,
    /// Per entry of [`auth::Reason::ALL`]: peer fields refused.
    auth_failures: [AtomicU64; auth::Reason::ALL.len()],
    /// Unsigned peer fields accepted (`accept_unsigned_from`).
    unsigned_accepted: AtomicU64,
    /// The Unix second of the last refusal logged: at most one line a second.
    last_refusal_logged: AtomicU64,
    /// With `peers_dns`: the last whole set DNS answered (the peers of every
    /// membership while `peers_dns` is set, reloads included). Held while one is
    /// applied, so a reload and an answer are applied one after the other.
    discovered: Mutex<Option<Vec<PeerOptions>>>,
}

impl Cluster {
    /// The cluster of `opts`, every peer up.
    pub(crate) fn new(opts: CheckedCluster) -> Result<Arc<Cluster>, String> {
        let opts = opts.into_options();
        warn_unsigned(&opts);
        let membership = build(opts, None, 1)?;
        Ok(Arc::new(Cluster {
            current: RwLock::new(Arc::new(membership)),
            hops_received: AtomicU64::new(0),
            resumes: AtomicU64::new(0),
            previous_hits: AtomicU64::new(0),
            auth_failures: Default::default(),
            unsigned_accepted: AtomicU64::new(0),
            last_refusal_logged: AtomicU64::new(0),
            discovered: Mutex::new(None),
        }))
    }

    /// Whether request `head` from address `from` comes from a peer: its
    /// `Linerate-Peer` field (one) has a valid MAC, or is unsigned from an address of
    /// `accept_unsigned_from`. Otherwise the field is to be ignored (the request is a
    /// client's; the caller never forwards the field), and a field present is counted
    /// by reason and logged (at most one line a second).
    pub(crate) fn admit(
        &self,
        head: &linerate_http::RequestHead<'_>,
        from: Option<IpAddr>,
    ) -> bool {
        let mut values = head.values(HOP_HEADER.as_bytes());
        let Some(value) = values.next() else {
            return false;
        };
        let verdict = match (values.next(), auth::Field::parse(value)) {
            (None, Some(field)) => self.membership().check(&field, head, from),
            _ => Err(auth::Reason::Malformed),
        };
        match verdict {
            Ok(admitted) => {
                self.hops_received.fetch_add(1, Relaxed);
                if let Admitted::Unsigned = admitted {
                    self.unsigned_accepted.fetch_add(1, Relaxed);
                }
                true
            }
            Err(reason) => {
                self.refused(reason, from);
                false
            }
        }
    }

    /// Whether request `head` from `from` is a peer's own call (a purge, a read of the
    /// purge log): the same check as [`Cluster::admit`], without counting it as a hop
    /// or a refusal (those metrics are about requests relayed for clients).
    pub(crate) fn is_peer_call(
        &self,
        head: &linerate_http::RequestHead<'_>,
        from: Option<IpAddr>,
    ) -> Result<(), auth::Reason> {
        let mut values = head.values(HOP_HEADER.as_bytes());
        let Some(value) = values.next() else {
            return Err(auth::Reason::MissingMac);
        };
        match (values.next(), auth::Field::parse(value)) {
            (None, Some(field)) => self.membership().check(&field, head, from).map(|_| ()),
            _ => Err(auth::Reason::Malformed),
        }
    }

    /// Count a refused peer field, and log it unless one was logged this second.
    fn refused(&self, reason: auth::Reason, from: Option<IpAddr>) {
        if let Some(i) = auth::Reason::ALL.iter().position(|r| *r == reason) {
            self.auth_failures[i].fetch_add(1, Relaxed);
        }
        self.log_refused(reason, from, "Linerate-Peer field refused; handled as a client's request (at most one such line a second; linerate_cluster_peer_auth_failures_total counts them all)");
    }

    /// A refused call to the peers' own paths (`/_linerate/`, answered `403`): logged
    /// at most once a second with the refused fields, not counted with them (that
    /// metric counts client requests whose peer field was refused).
    pub(crate) fn refused_peer_call(&self, reason: auth::Reason, from: Option<IpAddr>) {
        self.log_refused(
            reason,
            from,
            "peer call refused (403; at most one such line a second)",
        );
    }

    /// Log one refusal unless one was logged this second.
    fn log_refused(&self, reason: auth::Reason, from: Option<IpAddr>, what: &'static str) {
        let now = unix_now();
        let last = self.last_refusal_logged.load(Relaxed);
        if now > last
            && self
                .last_refusal_logged
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            let from = from.map_or_else(|| "-".to_string(), |a| a.to_string());
            tracing::warn!(peer = %from, reason = reason.as_str(), "{what}");
        }
    }

    /// The membership in force.
    pub(crate) fn membership(&self) -> Arc<Membership> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Put new options in force (a reload). Peers that keep their name and address keep
    /// their state; the previous-owner window restarts when the node set changed.
    /// With `peers_dns`, the peers are the last set DNS answered, not the file's.
    pub(crate) fn apply(&self, opts: CheckedCluster) -> Result<(), String> {
        let discovered = self
            .discovered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut opts = opts.into_options();
        if let (Some(_), Some(peers)) = (&opts.peers_dns, discovered.as_ref()) {
            opts.peers = peers.clone();
            opts = opts.into_checked()?.into_options();
        }
        self.put(opts)
    }

    /// Put the set `peers_dns` answered in force (`discovery`): the options in force
    /// with these peers, checked, applied as [`Cluster::apply`] applies a reload. An
    /// error (e.g. a name that is not a node name) changes nothing.
    pub(crate) fn apply_discovered(&self, peers: Vec<PeerOptions>) -> Result<(), String> {
        let mut discovered = self
            .discovered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut opts = self.membership().opts.clone();
        if opts.peers == peers {
            *discovered = Some(peers);
            return Ok(());
        }
        opts.peers = peers.clone();
        let opts = opts.into_checked()?.into_options();
        let names: Vec<&str> = peers.iter().map(|p| p.name.as_str()).collect();
        tracing::info!(
            name = opts.peers_dns.as_deref().unwrap_or(""),
            nodes = %names.join(" "),
            "cluster: peers_dns answered a new set"
        );
        self.put(opts)?;
        *discovered = Some(peers);
        Ok(())
    }

    /// Build and swap in the membership of `opts` (checked), unless it is the one in
    /// force.
    fn put(&self, opts: ClusterOptions) -> Result<(), String> {
        let old = self.membership();
        if old.opts == opts {
            return Ok(());
        }
        warn_unsigned(&opts);
        let m = build(opts, Some(&old), old.generation + 1)?;
        tracing::info!(
            generation = m.generation,
            peers = m.opts.peers.len(),
            "cluster membership applied"
        );
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(m);
        Ok(())
    }

    /// A broken peer body was continued from another source.
    pub(crate) fn count_resume(&self) {
        self.resumes.fetch_add(1, Relaxed);
    }

    /// The previous owner answered from its cache.
    pub(crate) fn count_previous_hit(&self) {
        self.previous_hits.fetch_add(1, Relaxed);
    }

    /// Append the cluster's metric families (Prometheus text format).
    pub(crate) fn render(&self, out: &mut String) {
        let m = self.membership();
        let peers: Vec<&Arc<Peer>> = m.peers.iter().flatten().collect();
        let mut family = |name: &str, kind: &str, help: &str, v: &dyn Fn(&Peer) -> u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for p in &peers {
                // Names are restricted to [A-Za-z0-9._-]: nothing to escape.
                let _ = writeln!(out, "{name}{{peer=\"{}\"}} {}", p.name, v(p));
            }
        };
        family(
            "linerate_cluster_peer_up",
            "gauge",
            "1 while the peer is used, 0 while marked down (cluster.down_after failures in a row, until cluster.up_after probes succeed).",
            &|p| u64::from(p.is_up()),
        );
        family(
            "linerate_cluster_peer_requests_total",
            "counter",
            "Requests this node sent to the peer (fills it owns, previous-owner asks, resumes).",
            &|p| p.requests.load(Relaxed),
        );
        family(
            "linerate_cluster_peer_failures_total",
            "counter",
            "Requests to the peer that failed: not reached, no head in time, or a body broken off.",
            &|p| p.failures.load(Relaxed),
        );
        family(
            "linerate_cluster_peer_in_flight",
            "gauge",
            "Requests to the peer in flight from this node (bounded load compares these).",
            &|p| p.in_flight.load(Relaxed),
        );
        family(
            "linerate_cluster_peer_bytes_total",
            "counter",
            "Body bytes received from the peer.",
            &|p| p.bytes.load(Relaxed),
        );
        let name = "linerate_cluster_peer_auth_failures_total";
        let _ = writeln!(
            out,
            "# HELP {name} Requests whose Linerate-Peer field was refused (and ignored: handled as a client's), by reason.\n# TYPE {name} counter"
        );
        for (r, n) in auth::Reason::ALL.iter().zip(&self.auth_failures) {
            let _ = writeln!(
                out,
                "{name}{{reason=\"{}\"}} {}",
                r.as_str(),
                n.load(Relaxed)
            );
        }
        let singles: [(&str, &str, &str, u64); 6] = [
            (
                "linerate_cluster_hop_requests_received_total",
                "counter",
                "Requests received from peers (a Linerate-Peer field with a valid MAC, or unsigned from accept_unsigned_from); never forwarded again.",
                self.hops_received.load(Relaxed),
            ),
            (
                "linerate_cluster_peer_unsigned_accepted_total",
                "counter",
                "Unsigned peer requests accepted from an address of accept_unsigned_from (the transition setting).",
                self.unsigned_accepted.load(Relaxed),
            ),
            (
                "linerate_cluster_resumes_total",
                "counter",
                "Peer bodies broken off and continued from the next node or the origin with Range and If-Range.",
                self.resumes.load(Relaxed),
            ),
            (
                "linerate_cluster_previous_owner_hits_total",
                "counter",
                "Misses answered from the previous owner's cache after a membership change.",
                self.previous_hits.load(Relaxed),
            ),
            (
                "linerate_cluster_members",
                "gauge",
                "Nodes in the membership in force, this one included.",
                m.opts.peers.len() as u64,
            ),
            (
                "linerate_cluster_generation",
                "gauge",
                "Membership generation (1 at start, +1 per reload that changed it).",
                m.generation,
            ),
        ];
        for (name, kind, help, v) in singles {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
    }
}

fn build(
    opts: ClusterOptions,
    old: Option<&Membership>,
    generation: u64,
) -> Result<Membership, String> {
    let mut peers = Vec::with_capacity(opts.peers.len());
    for p in &opts.peers {
        if p.name == opts.self_name {
            peers.push(None);
            continue;
        }
        let kept = old.and_then(|o| {
            o.peers
                .iter()
                .flatten()
                .find(|q| q.name == p.name && q.address == p.address)
                .cloned()
        });
        peers.push(Some(match kept {
            Some(k) => k,
            None => Arc::new(Peer::new(&opts, &p.name, p.address)?),
        }));
    }
    let same_nodes = old.is_some_and(|o| {
        let names = |m: &ClusterOptions| {
            let mut v: Vec<String> = m.peers.iter().map(|p| p.name.clone()).collect();
            v.sort();
            v
        };
        names(&o.opts) == names(&opts)
    });
    let changed = match old {
        Some(o) if same_nodes => o.changed,
        _ => Instant::now(),
    };
    let keys = auth::Keys::new(opts.secrets.iter().map(|s| s.bytes()));
    Ok(Membership {
        generation,
        opts,
        peers,
        changed,
        keys,
    })
}

/// Start the keeper thread: it applies the `[cluster]` of each reloaded configuration
/// and probes down peers every `probe_interval`, until the server stops.
///
/// The DNS thread (`discovery`) starts here too, after resolving `peers_dns` once.
pub(crate) fn keeper(cluster: Arc<Cluster>, control: Arc<Control>) -> std::io::Result<()> {
    discovery::start(Arc::clone(&cluster), Arc::clone(&control))?;
    let mut options = control.watch_options();
    std::thread::Builder::new()
        .name("linerate-cluster".into())
        .spawn(move || {
            let mut last_probe = Instant::now();
            while control.run_state() != RunState::Stopping {
                std::thread::sleep(KEEPER_TICK);
                if options.has_changed().unwrap_or(false) {
                    let new = options.borrow_and_update().cluster.clone();
                    match new {
                        Some(c) => {
                            if let Err(e) = cluster.apply(c) {
                                tracing::error!(error = %e, "cluster membership not applied");
                            }
                        }
                        None => tracing::warn!(
                            "[cluster] removed from the configuration: needs a restart; the membership stays"
                        ),
                    }
                }
                let m = cluster.membership();
                if last_probe.elapsed() >= m.opts.probe_interval {
                    last_probe = Instant::now();
                    for p in m.peers.iter().flatten().filter(|p| !p.is_up()) {
                        p.probe(m.opts.connect_timeout, m.opts.up_after);
                    }
                }
            }
        })
        .map(|_| ())
}

/// A worker's client for one peer, with the peer it was made for (a peer that moved
/// address is a new `Peer`, and needs a new client).
type PeerClient = (Arc<Peer>, Rc<Origin>);

/// One worker's HTTP clients to the peers (their connection pools), rebuilt when the
/// membership changes.
#[derive(Default)]
pub(crate) struct PeerClients {
    generation: Cell<u64>,
    clients: RefCell<HashMap<String, PeerClient>>,
}

impl PeerClients {
    /// This worker's client for `peer` of membership `m`.
    pub(crate) fn client(&self, m: &Membership, peer: &Arc<Peer>) -> Rc<Origin> {
        let mut map = self.clients.borrow_mut();
        if self.generation.get() != m.generation {
            // Drop clients of peers that left or moved; keep the pools of the others.
            map.retain(|_, (p, _)| m.peers.iter().flatten().any(|q| Arc::ptr_eq(p, q)));
            self.generation.set(m.generation);
        }
        match map.get(&peer.name) {
            Some((p, c)) if Arc::ptr_eq(p, peer) => Rc::clone(c),
            _ => {
                let c = Rc::new(Origin::new(Arc::clone(&peer.client)));
                map.insert(peer.name.clone(), (Arc::clone(peer), Rc::clone(&c)));
                c
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clusteropts::PeerOptions;

    fn checked(o: ClusterOptions) -> CheckedCluster {
        o.into_checked().unwrap_or_else(|e| panic!("{e}"))
    }

    fn opts(me: &str, names: &[&str]) -> ClusterOptions {
        let peers = names
            .iter()
            .enumerate()
            .map(|(i, n)| PeerOptions {
                name: (*n).into(),
                address: std::net::SocketAddr::from(([127, 0, 0, 1], 1 + i as u16)),
                weight: 1.0,
            })
            .collect();
        let mut o = ClusterOptions::new(me, peers);
        o.secrets = vec![crate::clusteropts::ClusterSecret::new(vec![b'k'; 32])];
        o
    }

    fn owner_name(m: &Membership, key: &[u8]) -> String {
        match m.plan(key, &[]) {
            Plan::Origin { .. } => m.opts.self_name.clone(),
            Plan::Peer(p, _) => p.name.clone(),
        }
    }

    #[test]
    fn every_node_agrees_on_the_owner() {
        let names = ["a", "b", "c"];
        let views: Vec<Arc<Cluster>> = names
            .iter()
            .map(|n| Cluster::new(checked(opts(n, &names))).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        for k in 0..300 {
            let key = format!("http://h/{k}");
            let owners: Vec<String> = views
                .iter()
                .map(|c| owner_name(&c.membership(), key.as_bytes()))
                .collect();
            assert!(owners.windows(2).all(|w| w[0] == w[1]), "{owners:?}");
        }
    }

    #[test]
    fn down_after_three_up_after_probes_and_skipped_while_down() {
        let c = Cluster::new(checked(opts("a", &["a", "b"]))).unwrap_or_else(|e| panic!("{e}"));
        let m = c.membership();
        let b = m.peers[1].clone().unwrap_or_else(|| unreachable!());
        // A key b owns.
        let key = (0..)
            .map(|k| format!("http://h/{k}"))
            .find(|k| matches!(m.plan(k.as_bytes(), &[]), Plan::Peer(..)))
            .unwrap_or_default();
        b.record_failure(3);
        b.record_failure(3);
        assert!(b.is_up());
        b.record_success();
        b.record_failure(3);
        b.record_failure(3);
        assert!(b.is_up(), "a success resets the run");
        b.record_failure(3);
        assert!(!b.is_up());
        assert!(matches!(
            m.plan(key.as_bytes(), &[]),
            Plan::Origin { previous: None }
        ));
        // Nothing listens on 127.0.0.1:2: probes fail and keep it down.
        b.probe(Duration::from_millis(200), 2);
        assert!(!b.is_up());
    }

    #[test]
    fn a_down_peer_is_up_after_two_good_probes_in_a_row() {
        // A stand-in peer that answers every probe the way a node answers `OPTIONS *`.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let answering = std::thread::spawn(move || {
            for _ in 0..2 {
                let (mut s, _) = listener.accept().unwrap_or_else(|e| panic!("{e}"));
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            }
        });
        let mut o = opts("a", &["a", "b"]);
        o.peers[1].address = addr;
        let c = Cluster::new(checked(o)).unwrap_or_else(|e| panic!("{e}"));
        let m = c.membership();
        let b = m.peers[1].clone().unwrap_or_else(|| unreachable!());
        for _ in 0..3 {
            b.record_failure(3);
        }
        assert!(!b.is_up());
        b.probe(Duration::from_secs(2), 2);
        assert!(!b.is_up(), "one good probe is not enough");
        b.probe(Duration::from_secs(2), 2);
        assert!(b.is_up());
        answering.join().unwrap_or_else(|_| panic!("stand-in peer"));
        // Up again, its failure run starts from zero: two more failures keep it up.
        b.record_failure(3);
        b.record_failure(3);
        assert!(b.is_up());
    }

    #[test]
    fn bounded_load_passes_an_overloaded_owner_over() {
        let c =
            Cluster::new(checked(opts("a", &["a", "b", "c"]))).unwrap_or_else(|e| panic!("{e}"));
        let m = c.membership();
        let key = (0..)
            .map(|k| format!("http://h/{k}"))
            .find(|k| matches!(m.plan(k.as_bytes(), &[]), Plan::Peer(_, Role::Owner)))
            .unwrap_or_default();
        let Plan::Peer(owner, _) = m.plan(key.as_bytes(), &[]) else {
            unreachable!()
        };
        // n in flight to the owner, 0 to the other: mean n/2, bound 1.25 (n/2 + 1),
        // which n reaches from n = 4 (3 < 3.125).
        let three: Vec<InFlight> = (0..3).map(|_| owner.start()).collect();
        assert!(
            matches!(m.plan(key.as_bytes(), &[]), Plan::Peer(p, Role::Owner) if Arc::ptr_eq(&p, &owner))
        );
        let held: Vec<InFlight> = (0..1).map(|_| owner.start()).collect();
        match m.plan(key.as_bytes(), &[]) {
            Plan::Peer(p, role) => {
                assert!(!Arc::ptr_eq(&p, &owner));
                assert_eq!(role, Role::Next);
            }
            Plan::Origin { .. } => {}
        }
        drop(held);
        drop(three);
        assert!(
            matches!(m.plan(key.as_bytes(), &[]), Plan::Peer(p, Role::Owner) if Arc::ptr_eq(&p, &owner))
        );
    }

    #[test]
    fn a_new_node_asks_the_previous_owner_and_a_reload_keeps_peer_state() {
        let c = Cluster::new(checked(opts("d", &["a", "b", "c", "d"])))
            .unwrap_or_else(|e| panic!("{e}"));
        let m = c.membership();
        let three =
            Cluster::new(checked(opts("a", &["a", "b", "c"]))).unwrap_or_else(|e| panic!("{e}"));
        let mut asked = 0;
        for k in 0..200 {
            let key = format!("http://h/{k}");
            if let Plan::Origin { previous: Some(p) } = m.plan(key.as_bytes(), &[]) {
                assert_eq!(p.name, owner_name(&three.membership(), key.as_bytes()));
                asked += 1;
            }
        }
        assert!(asked > 20, "d owns about a quarter of the keys: {asked}");
        // Reload with a weight change: same peers (same Arc), same generation + 1.
        let a = m.peers[0].clone().unwrap_or_else(|| unreachable!());
        let mut o = m.opts.clone();
        o.peers[1].weight = 2.0;
        c.apply(checked(o)).unwrap_or_else(|e| panic!("{e}"));
        let m2 = c.membership();
        assert_eq!(m2.generation, 2);
        assert!(Arc::ptr_eq(
            m2.peers[0].as_ref().unwrap_or_else(|| unreachable!()),
            &a
        ));
    }

    /// Admit the request `raw` from `from` on a cluster `c`.
    fn admit(c: &Cluster, raw: &[u8], from: &str) -> bool {
        let mut buf = linerate_http::request::FieldBuf::new();
        let Ok(linerate_http::request::ParseOutcome::Complete { head, .. }) =
            linerate_http::request::parse_request(raw, &mut buf)
        else {
            panic!("unparsable test request");
        };
        c.admit(&head, from.parse().ok())
    }

    fn failures(c: &Cluster, reason: auth::Reason) -> u64 {
        let i = auth::Reason::ALL.iter().position(|r| *r == reason);
        c.auth_failures[i.unwrap_or_else(|| unreachable!())].load(Relaxed)
    }

    /// Guards the admission of peer fields: only a valid MAC (or an unsigned field
    /// from a listed address) makes a request a peer's; each other field is refused,
    /// counted under its reason, and the request is a client's.
    #[test]
    fn only_a_signed_or_listed_peer_field_is_admitted() {
        let mut o = opts("a", &["a", "b"]);
        // b is 127.0.0.2 (opts numbers ports, not addresses: give b its own).
        o.peers[1].address = "127.0.0.2:80".parse().unwrap_or_else(|_| unreachable!());
        o.accept_unsigned_from = vec!["127.0.0.2".parse().unwrap_or_else(|_| unreachable!())];
        let a = Cluster::new(checked(o.clone())).unwrap_or_else(|e| panic!("{e}"));
        let signer = {
            let mut b = o.clone();
            b.self_name = "b".into();
            b.accept_unsigned_from.clear();
            Cluster::new(checked(b)).unwrap_or_else(|e| panic!("{e}"))
        };
        let target = b"http://video.test/x";
        let signed = signer
            .membership()
            .sign(&auth::Covered::with_fields(b"GET", target, Some(b"video.test"), &[]).to("a"));
        let req = |peer: &str| {
            format!("GET http://video.test/x HTTP/1.1\r\nHost: 10.0.0.1\r\nLinerate-Peer: {peer}\r\n\r\n")
                .into_bytes()
        };
        assert!(
            admit(&a, &req(&signed), "198.51.100.7"),
            "signed, any address"
        );
        assert!(!admit(
            &a,
            b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
            "198.51.100.7"
        ));
        // Forged: just a name, from a client.
        assert!(!admit(&a, &req("b"), "198.51.100.7"));
        assert_eq!(failures(&a, auth::Reason::MissingMac), 1);
        // The same unsigned field from the listed peer address: admitted (IPv4-mapped
        // too), and counted as unsigned.
        assert!(admit(&a, &req("b"), "127.0.0.2"));
        assert!(admit(&a, &req("b"), "::ffff:127.0.0.2"));
        assert_eq!(a.unsigned_accepted.load(Relaxed), 2);
        // Naming this node: refused, signed or not. A name this node does not list
        // (a node that joined before this list was reloaded) is a peer when signed.
        assert!(!admit(&a, &req("a"), "127.0.0.2"));
        let own = signer.membership().keys.sign(
            "a",
            unix_now(),
            &auth::Covered::with_fields(b"GET", target, Some(b"video.test"), &[]).to("a"),
        );
        assert!(!admit(&a, &req(&own), "198.51.100.7"));
        assert_eq!(failures(&a, auth::Reason::OwnName), 2);
        let newcomer = signer.membership().keys.sign(
            "zed",
            unix_now(),
            &auth::Covered::with_fields(b"GET", target, Some(b"video.test"), &[]).to("a"),
        );
        assert!(admit(&a, &req(&newcomer), "198.51.100.7"));
        // Signed for another node (a request captured on its way to "c", replayed
        // here): refused.
        let for_c = signer
            .membership()
            .sign(&auth::Covered::with_fields(b"GET", target, Some(b"video.test"), &[]).to("c"));
        assert!(!admit(&a, &req(&for_c), "198.51.100.7"));
        assert_eq!(failures(&a, auth::Reason::BadMac), 1);
        // A valid field with a covered part changed, or twice, or garbage.
        let changed = format!(
            "GET http://video.test/y HTTP/1.1\r\nHost: 10.0.0.1\r\nLinerate-Peer: {signed}\r\n\r\n"
        );
        assert!(!admit(&a, changed.as_bytes(), "127.0.0.2"));
        assert_eq!(failures(&a, auth::Reason::BadMac), 2);
        let twice = format!(
            "GET http://video.test/x HTTP/1.1\r\nHost: 10.0.0.1\r\nLinerate-Peer: {signed}\r\nLinerate-Peer: {signed}\r\n\r\n"
        );
        assert!(!admit(&a, twice.as_bytes(), "127.0.0.2"));
        assert!(!admit(&a, &req("b; t=x"), "127.0.0.2"));
        assert_eq!(failures(&a, auth::Reason::Malformed), 2);
        // A node with another secret is not a peer.
        let mut other = o.clone();
        other.self_name = "b".into();
        other.accept_unsigned_from.clear();
        other.secrets = vec![crate::clusteropts::ClusterSecret::new(vec![b'o'; 32])];
        let other = Cluster::new(checked(other)).unwrap_or_else(|e| panic!("{e}"));
        let wrong = other
            .membership()
            .sign(&auth::Covered::with_fields(b"GET", target, Some(b"video.test"), &[]).to("a"));
        assert!(!admit(&a, &req(&wrong), "127.0.0.2"));
        assert_eq!(failures(&a, auth::Reason::BadMac), 3);
        assert_eq!(a.hops_received.load(Relaxed), 4);
        let mut text = String::new();
        a.render(&mut text);
        assert!(
            text.contains("linerate_cluster_peer_auth_failures_total{reason=\"bad_mac\"} 3"),
            "{text}"
        );
    }

    /// Guards rotation on reload: a reload with a new secret list puts the new keys
    /// in force (the first signs), and requests signed with either verify.
    #[test]
    fn a_reload_applies_new_secrets() {
        let o = opts("a", &["a", "b"]);
        let c = Cluster::new(checked(o.clone())).unwrap_or_else(|e| panic!("{e}"));
        let covered = auth::Covered::with_fields(b"GET", b"/x", Some(b"h"), &[]);
        let old = c.membership().sign(&covered);
        let mut rotated = o.clone();
        rotated
            .secrets
            .insert(0, crate::clusteropts::ClusterSecret::new(vec![b'n'; 40]));
        c.apply(checked(rotated)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.membership().generation, 2);
        let new = c.membership().sign(&covered);
        assert_ne!(old, new, "the first (new) secret signs");
        let keys = &c.membership().keys;
        for value in [&old, &new] {
            let field = auth::Field::parse(value.as_bytes()).unwrap_or_else(|| unreachable!());
            assert_eq!(keys.verify(&field, unix_now(), &covered), Ok(()));
        }
    }

    /// Guards `peers_dns` membership: before DNS answers a node has no peers (it fills
    /// from the origin itself); an answer is applied (new generation), the same answer
    /// again is not, a reload keeps the set DNS answered (the file lists no peers), and
    /// an answer that fails the checks changes nothing.
    #[test]
    fn dns_sets_survive_reloads_and_bad_answers() {
        let mut o = opts("b", &[]);
        o.peers_dns = Some("_http._tcp.linerate.video.svc.cluster.local".into());
        let c = Cluster::new(checked(o.clone())).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            c.membership().plan(b"k", &[]),
            Plan::Origin { previous: None }
        ));
        let set = opts("b", &["a", "b", "c"]).peers;
        c.apply_discovered(set.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (c.membership().generation, c.membership().opts.peers.len()),
            (2, 3)
        );
        c.apply_discovered(set.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.membership().generation, 2);
        let mut reloaded = o.clone();
        reloaded.load_factor = 2.0;
        c.apply(checked(reloaded)).unwrap_or_else(|e| panic!("{e}"));
        let m = c.membership();
        assert_eq!((m.generation, m.opts.load_factor), (3, 2.0));
        assert_eq!(m.opts.peers, set, "the reload kept the DNS set");
        let mut bad = set.clone();
        bad[0].name = "not a name".into();
        assert!(c.apply_discovered(bad).is_err());
        assert_eq!(c.membership().generation, 3);
        assert_eq!(c.membership().opts.peers, set);
    }
}
