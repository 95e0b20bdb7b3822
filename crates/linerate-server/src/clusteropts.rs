//! Options of a cache-mode cluster (`[cluster]`): who this node is, its peers, and the
//! tunables of placement, bounded load and peer health, with documented defaults. The
//! type reads and prints itself in the file's shape (serde); the binary reads the files
//! it names (`peers_file`, `secret_file`) and then checks it, once
//! ([`ClusterOptions::into_checked`]): the server takes only a [`CheckedCluster`].
//!
//! Not here: placement itself (`cluster::ring`), the peer requests (`proxy::peer`), or
//! reading files.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::optserde;

/// Default bounded-load factor c: a peer is passed over for a key it owns while this
/// node's requests in flight to it exceed c × (the mean over up peers + 1). 1.25 is the
/// value of Mirrokni, Thorup and Zadimoghaddam's "consistent hashing with bounded
/// loads" that Vimeo and HAProxy ship (`hash-balance-factor 125`).
pub const DEFAULT_LOAD_FACTOR: f64 = 1.25;
/// Default failures in a row (connect, head, body) before a peer is marked down: one
/// lost packet or one restart must not move a third of the keys.
pub const DEFAULT_DOWN_AFTER: u32 = 3;
/// Default successful probes in a row before a down peer is used again (hysteresis: a
/// flapping peer is not flapped into and out of the ring).
pub const DEFAULT_UP_AFTER: u32 = 2;
/// Default time between probes of a down peer.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// Default time after start-up or a membership change during which an owner missing a
/// key first asks the node that owned it before (the next in rank order), from its
/// cache only. Long enough for a warm working set to be asked for once.
pub const DEFAULT_PREVIOUS_OWNER_WINDOW: Duration = Duration::from_secs(600);
/// Default time to connect to a peer: peers share a data centre, so a second is long.
pub const DEFAULT_PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default wait for a peer's response head. The owner may be waiting on its origin
/// (the origin's own first-byte timeout defaults to 10 s), so longer than that.
pub const DEFAULT_PEER_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(15);
/// Default time between two resolutions of `peers_dns`: a pod that starts or goes is
/// in every node's set within about this long (CoreDNS answers for a Service with a
/// 5 s TTL by default, and a slower cycle only delays joins).
pub const DEFAULT_PEERS_DNS_INTERVAL: Duration = Duration::from_secs(5);
/// Most peers a cluster may list (the ranking is computed per miss: O(peers)).
pub const MAX_PEERS: usize = 1024;

/// The request field that marks a request from a peer: the sender's name, the time and
/// a MAC with the cluster secret (`cluster::auth`). A node never forwards a request
/// that carries a valid one (one hop only); it removes any other.
pub const HOP_HEADER: &str = "Linerate-Peer";
/// Fewest bytes of a cluster secret: 256 bits, HMAC-SHA256's key strength (RFC 2104 §3:
/// less than the hash output length weakens the MAC).
pub const MIN_SECRET_BYTES: usize = 32;
/// Most cluster secrets at once: the one that signs and the one being rotated out.
pub const MAX_SECRETS: usize = 2;
/// What a `[cluster]` without a secret is told to add (the change that made it needed).
pub const NEEDS_SECRET: &str = "[cluster] needs `secret_file = \"/etc/linerate/cluster.key\"` (32+ bytes, the same on every node, e.g. `openssl rand -hex 32 > /etc/linerate/cluster.key`): peer requests between nodes are authenticated since the release after 0.1.0; see docs/config.md, [cluster]";

/// A cluster secret. Its bytes are never printed: `Debug` shows only its length.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Vec<u8>);

impl ClusterSecret {
    /// A secret of these bytes (checked by [`ClusterOptions::check`]).
    pub fn new(bytes: Vec<u8>) -> ClusterSecret {
        ClusterSecret(bytes)
    }

    /// Its bytes, for the HMAC key.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterSecret(<{} bytes, redacted>)", self.0.len())
    }
}

/// What `check-config` prints in place of a secret.
pub const REDACTED: &str = "<redacted>";

/// One node of the cluster (an entry of `peers`, inline or in a peers file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerOptions {
    /// Its name: what placement hashes, so it must be the same on every node.
    pub name: String,
    /// Its cache-mode data listener (plain HTTP), `ip:port`.
    pub address: SocketAddr,
    /// Its share of the keys relative to the others (> 0). Default 1.
    #[serde(default = "equal_weight")]
    pub weight: f64,
}

/// A peer's default weight: an equal share.
fn equal_weight() -> f64 {
    1.0
}

/// `[cluster]`: this node and its peers. Every optional key's default is [`Default`]'s;
/// keys ending in `_ms` and `_s` are durations in that unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterOptions {
    /// This node's name (`self`); must be one of `peers`. Required.
    #[serde(rename = "self")]
    pub self_name: String,
    /// Every node, this one included (inline, or read from `peers_file`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerOptions>,
    /// A file listing the peers (TOML `peers = [{ name, address, weight }]`, or one
    /// `name address [weight]` a line), which the binary reads into `peers` at start
    /// and on every reload. Exclusive with inline `peers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peers_file: Option<PathBuf>,
    /// A DNS name of SRV records (`_http._tcp.<service>.<namespace>.svc.cluster.local`,
    /// a headless Service's) that lists the nodes: each target is a node, named by its
    /// first label, at the target's A/AAAA address and the record's port. Resolved at
    /// start and every `peers_dns_interval_ms` (`cluster::discovery`); a changed set is
    /// applied as a reload applies a peers file. Exclusive with `peers`/`peers_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peers_dns: Option<String>,
    /// Time between resolutions of `peers_dns` (`peers_dns_interval_ms`; 0 is read as
    /// 1). Default [`DEFAULT_PEERS_DNS_INTERVAL`].
    #[serde(rename = "peers_dns_interval_ms", with = "at_least_1ms")]
    pub peers_dns_interval: Duration,
    /// The DNS server `peers_dns` asks (`ip:port`, UDP then TCP); default the
    /// system's (`/etc/resolv.conf`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_server: Option<SocketAddr>,
    /// An environment variable holding this node's name (`self_env = "POD_NAME"`), read
    /// by the binary into `self` when the file is loaded. Exclusive with `self`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub self_env: Option<String>,
    /// Bounded-load factor c (≥ 1). Default [`DEFAULT_LOAD_FACTOR`].
    pub load_factor: f64,
    /// Failures in a row before a peer is down. Default [`DEFAULT_DOWN_AFTER`].
    pub down_after: u32,
    /// Successful probes in a row before it is up. Default [`DEFAULT_UP_AFTER`].
    pub up_after: u32,
    /// Time between probes of a down peer (`probe_interval_ms`; 0 is read as 1).
    /// Default [`DEFAULT_PROBE_INTERVAL`].
    #[serde(rename = "probe_interval_ms", with = "at_least_1ms")]
    pub probe_interval: Duration,
    /// See [`DEFAULT_PREVIOUS_OWNER_WINDOW`] (`previous_owner_window_s`); zero turns
    /// the previous-owner ask off.
    #[serde(rename = "previous_owner_window_s", with = "optserde::secs")]
    pub previous_owner_window: Duration,
    /// Connect timeout to a peer (`connect_timeout_ms`; 0 is read as 1). Default
    /// [`DEFAULT_PEER_CONNECT_TIMEOUT`].
    #[serde(rename = "connect_timeout_ms", with = "at_least_1ms")]
    pub connect_timeout: Duration,
    /// Response-head timeout from a peer (`first_byte_timeout_ms`; 0 is read as 1).
    /// Default [`DEFAULT_PEER_FIRST_BYTE_TIMEOUT`].
    #[serde(rename = "first_byte_timeout_ms", with = "at_least_1ms")]
    pub first_byte_timeout: Duration,
    /// The shared secret inline (`secret`): a string, or a list of two (the first
    /// signs, both verify: a rotation). Give this or `secret_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<InlineSecret>,
    /// A file holding the shared secret, or a list of two (the first signs), which the
    /// binary reads into `secrets` at start and on every reload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<SecretFiles>,
    /// The shared secrets that authenticate peer requests (from `secret` or
    /// `secret_file`): the first signs, every one verifies (1 or 2, each at least
    /// [`MIN_SECRET_BYTES`]). No default: required.
    #[serde(skip)]
    pub secrets: Vec<ClusterSecret>,
    /// Addresses (of configured peers) whose unsigned `Linerate-Peer` fields are
    /// accepted, while a fleet of nodes from before authentication is upgraded.
    /// Default none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub accept_unsigned_from: Vec<IpAddr>,
}

/// A duration in whole milliseconds of which 0 is read as 1 ms (a zero timeout or
/// probe interval would spin).
mod at_least_1ms {
    use super::*;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        optserde::ms::serialize(d, s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(|n| Duration::from_millis(n.max(1)))
    }
}

/// `secret_file`: one path, or a list (the first signs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SecretFiles {
    /// One file.
    One(PathBuf),
    /// One or two files, the first signing.
    List(Vec<PathBuf>),
}

/// `secret` as written. Read whatever its type, so that no parse error quotes it (a
/// wrong type is reported by [`InlineSecret::secrets`], without the value); `Debug`
/// and `Serialize` (what `check-config` prints) show only its shape.
#[derive(Clone, PartialEq, Eq)]
pub enum InlineSecret {
    /// A string.
    One(String),
    /// A list; `None` for an item that is not a string.
    List(Vec<Option<String>>),
    /// Any other value.
    Other,
}

impl InlineSecret {
    /// The secrets it holds, or why it is not a string or a list of 1 to
    /// [`MAX_SECRETS`] strings (without the value).
    pub fn secrets(&self) -> Result<Vec<ClusterSecret>, String> {
        let shape =
            || format!("cluster: secret must be a string or a list of 1 to {MAX_SECRETS} strings");
        match self {
            InlineSecret::One(s) => Ok(vec![ClusterSecret::new(s.as_bytes().to_vec())]),
            InlineSecret::List(list) if !list.is_empty() && list.len() <= MAX_SECRETS => list
                .iter()
                .map(|v| match v {
                    Some(s) => Ok(ClusterSecret::new(s.as_bytes().to_vec())),
                    None => Err(shape()),
                })
                .collect(),
            _ => Err(shape()),
        }
    }
}

impl std::fmt::Debug for InlineSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InlineSecret(<redacted>)")
    }
}

impl Serialize for InlineSecret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            InlineSecret::List(a) => s.collect_seq(a.iter().map(|_| REDACTED)),
            _ => s.serialize_str(REDACTED),
        }
    }
}

impl<'de> Deserialize<'de> for InlineSecret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyValue(true))
    }
}

/// A string taken whole, anything else noted and skipped; `.0`: a list is read into
/// its items (the top level of `secret`), not skipped.
struct AnyValue(bool);

impl<'de> Visitor<'de> for AnyValue {
    type Value = InlineSecret;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<InlineSecret, E> {
        Ok(InlineSecret::One(v.to_owned()))
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<InlineSecret, E> {
        Ok(InlineSecret::Other)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<InlineSecret, E> {
        Ok(InlineSecret::Other)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<InlineSecret, E> {
        Ok(InlineSecret::Other)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<InlineSecret, E> {
        Ok(InlineSecret::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InlineSecret, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(InlineSecret::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<InlineSecret, A::Error> {
        if !self.0 {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(InlineSecret::Other);
        }
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<ListItem>()? {
            items.push(match item.0 {
                InlineSecret::One(s) => Some(s),
                _ => None,
            });
        }
        Ok(InlineSecret::List(items))
    }
}

/// An item of a `secret` list.
struct ListItem(InlineSecret);

impl<'de> Deserialize<'de> for ListItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyValue(false)).map(ListItem)
    }
}

/// Cluster options that passed [`ClusterOptions::check`], the only kind the server
/// takes: the check runs once, where the options are made (the file's parser, at start
/// and on every reload), not again in the server. Reads as a [`ClusterOptions`].
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedCluster(ClusterOptions);

impl CheckedCluster {
    /// The options.
    pub fn into_options(self) -> ClusterOptions {
        self.0
    }
}

impl std::ops::Deref for CheckedCluster {
    type Target = ClusterOptions;

    fn deref(&self) -> &ClusterOptions {
        &self.0
    }
}

impl Default for ClusterOptions {
    /// Every optional key at its default; no node, peers or secret yet, so not a
    /// cluster until those are given ([`ClusterOptions::check`] says which is missing).
    fn default() -> Self {
        ClusterOptions::new("", Vec::new())
    }
}

impl ClusterOptions {
    /// A cluster of `peers` seen from `self_name`, with every default.
    pub fn new(self_name: &str, peers: Vec<PeerOptions>) -> ClusterOptions {
        ClusterOptions {
            self_name: self_name.to_string(),
            peers,
            peers_file: None,
            peers_dns: None,
            peers_dns_interval: DEFAULT_PEERS_DNS_INTERVAL,
            dns_server: None,
            self_env: None,
            load_factor: DEFAULT_LOAD_FACTOR,
            down_after: DEFAULT_DOWN_AFTER,
            up_after: DEFAULT_UP_AFTER,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            previous_owner_window: DEFAULT_PREVIOUS_OWNER_WINDOW,
            connect_timeout: DEFAULT_PEER_CONNECT_TIMEOUT,
            first_byte_timeout: DEFAULT_PEER_FIRST_BYTE_TIMEOUT,
            secret: None,
            secret_file: None,
            secrets: Vec::new(),
            accept_unsigned_from: Vec::new(),
        }
    }

    /// [`ClusterOptions::check`], and the options as the server takes them.
    pub fn into_checked(self) -> Result<CheckedCluster, String> {
        self.check()?;
        Ok(CheckedCluster(self))
    }

    /// Check what the types cannot: `self` given and listed, names unique and
    /// hop-header safe, weights positive and finite, factors in range, secrets present
    /// and long enough, unsigned senders among the peers. No message holds a secret.
    ///
    /// With `peers_dns`, the peers are what DNS answered last (none before the first
    /// answer), and `self` need not be among them: DNS may list a node only once it is
    /// ready, and until then the others do not rank it either.
    pub fn check(&self) -> Result<(), String> {
        if self.self_name.is_empty() {
            return Err(
                "cluster: missing field `self` (this node's name, one of the peers; or `self_env`)"
                    .into(),
            );
        }
        if let Some(name) = &self.peers_dns {
            if self.peers_file.is_some() {
                return Err("cluster: give peers_dns or peers_file, not both".into());
            }
            check_dns_name(name)?;
            if !self.accept_unsigned_from.is_empty() {
                return Err(
                    "cluster: accept_unsigned_from needs listed peers (peers or peers_file), not peers_dns".into(),
                );
            }
        }
        let discovered = self.peers_dns.is_some();
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.len() <= 64
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        if self.peers.is_empty() && !discovered {
            return Err("cluster: peers is empty (list every node, this one included)".into());
        }
        if self.peers.len() > MAX_PEERS {
            return Err(format!("cluster: more than {MAX_PEERS} peers"));
        }
        for (i, p) in self.peers.iter().enumerate() {
            if !name_ok(&p.name) {
                return Err(format!(
                    "cluster: peer name {:?} must be 1-64 characters of A-Z a-z 0-9 - _ .",
                    p.name
                ));
            }
            if !(p.weight.is_finite() && p.weight > 0.0) {
                return Err(format!("cluster: peer {:?} weight must be > 0", p.name));
            }
            if self.peers[..i].iter().any(|q| q.name == p.name) {
                return Err(format!("cluster: peer {:?} listed twice", p.name));
            }
            if let Some(q) = self.peers[..i].iter().find(|q| q.address == p.address) {
                return Err(format!(
                    "cluster: peers {:?} and {:?} have the same address {}: two nodes cannot share one",
                    q.name, p.name, p.address
                ));
            }
        }
        if !discovered && !self.peers.iter().any(|p| p.name == self.self_name) {
            return Err(format!(
                "cluster: self = {:?} is not one of the peers",
                self.self_name
            ));
        }
        if !(self.load_factor.is_finite() && self.load_factor >= 1.0) {
            return Err("cluster: load_factor must be at least 1".into());
        }
        if self.down_after == 0 || self.up_after == 0 {
            return Err("cluster: down_after and up_after must be at least 1".into());
        }
        if self.secrets.is_empty() {
            return Err(NEEDS_SECRET.into());
        }
        if self.secrets.len() > MAX_SECRETS {
            return Err(format!(
                "cluster: at most {MAX_SECRETS} secrets (the one that signs, then the one being rotated out)"
            ));
        }
        if let Some(i) = self
            .secrets
            .iter()
            .position(|s| s.bytes().len() < MIN_SECRET_BYTES)
        {
            return Err(format!(
                "cluster: secret {} has {} bytes; at least {MIN_SECRET_BYTES} needed (e.g. `openssl rand -hex 32`)",
                i + 1,
                self.secrets[i].bytes().len()
            ));
        }
        for a in &self.accept_unsigned_from {
            let peer = self
                .peers
                .iter()
                .any(|p| p.address.ip() == *a && p.name != self.self_name);
            if !peer {
                return Err(format!(
                    "cluster: accept_unsigned_from {a} is not the address of another peer"
                ));
            }
        }
        Ok(())
    }
}

/// Whether `name` can be resolved as `peers_dns`: a DNS name (the error says why not).
/// Here, with the other checks of the section, so reading options needs nothing of the
/// cluster's runtime (`cluster::discovery` resolves it).
pub(crate) fn check_dns_name(name: &str) -> Result<(), String> {
    use hickory_resolver::proto::rr::Name;
    match Name::from_ascii(name) {
        Ok(n) if n.num_labels() >= 1 => Ok(()),
        Ok(_) => Err(format!("cluster: peers_dns {name:?} is not a DNS name")),
        Err(e) => Err(format!(
            "cluster: peers_dns {name:?} is not a DNS name: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_checked() {
        assert!(check_dns_name("_http._tcp.linerate.default.svc.cluster.local").is_ok());
        assert!(check_dns_name("_http._tcp.linerate.default.svc.cluster.local.").is_ok());
        assert!(check_dns_name("").is_err());
        assert!(check_dns_name("a..b").is_err());
    }

    use super::*;

    fn peer(name: &str, weight: f64) -> PeerOptions {
        PeerOptions {
            name: name.into(),
            // One address per name.
            address: std::net::SocketAddr::from((
                [127, 0, 0, 1],
                1000 + name.bytes().map(u16::from).sum::<u16>(),
            )),
            weight,
        }
    }

    #[test]
    fn checks() {
        let secret = ClusterSecret::new(vec![b'k'; MIN_SECRET_BYTES]);
        let with_secret = |mut o: ClusterOptions| {
            o.secrets = vec![secret.clone()];
            o
        };
        let ok = with_secret(ClusterOptions::new(
            "a",
            vec![peer("a", 1.0), peer("b", 2.0)],
        ));
        assert_eq!(ok.check(), Ok(()));
        let not_listed = with_secret(ClusterOptions::new("c", ok.peers.clone()));
        assert!(not_listed.check().is_err());
        let twice = with_secret(ClusterOptions::new(
            "a",
            vec![peer("a", 1.0), peer("a", 1.0)],
        ));
        assert!(twice.check().is_err());
        let mut one_address = ok.clone();
        one_address.peers[1].address = one_address.peers[0].address;
        assert!(matches!(one_address.check(), Err(e) if e.contains("same address")));
        let zero = with_secret(ClusterOptions::new("a", vec![peer("a", 0.0)]));
        assert!(zero.check().is_err());
        let bad_name = with_secret(ClusterOptions::new("a b", vec![peer("a b", 1.0)]));
        assert!(bad_name.check().is_err());
        let mut low = ok.clone();
        low.load_factor = 0.9;
        assert!(low.check().is_err());
    }

    #[test]
    fn secrets_are_required_checked_and_never_shown() {
        let mut o = ClusterOptions::new("a", vec![peer("a", 1.0), peer("b", 1.0)]);
        assert_eq!(o.check(), Err(NEEDS_SECRET.to_string()));
        let short = ClusterSecret::new(b"short-secret-xyzzy".to_vec());
        o.secrets = vec![ClusterSecret::new(vec![b'k'; 32]), short.clone()];
        let e = o.check().expect_err("short");
        assert!(e.contains("secret 2 has 18 bytes"), "{e}");
        assert!(!e.contains("xyzzy"), "{e}");
        assert!(!format!("{o:?}").contains("xyzzy"));
        o.secrets = vec![ClusterSecret::new(vec![b'k'; 32]); 3];
        assert!(o.check().is_err());
        o.secrets.truncate(2);
        assert_eq!(o.check(), Ok(()));
        // Unsigned senders must be other peers: 127.0.0.1 is both here, so listing
        // it is fine; another address is not.
        o.accept_unsigned_from = vec!["127.0.0.1".parse().unwrap_or_else(|_| unreachable!())];
        assert_eq!(o.check(), Ok(()));
        o.accept_unsigned_from = vec!["10.9.9.9".parse().unwrap_or_else(|_| unreachable!())];
        assert!(o.check().is_err());
    }
}
