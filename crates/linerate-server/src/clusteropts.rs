//! Options of a cache-mode cluster (`[cluster]`): who this node is, its peers, and the
//! tunables of placement, bounded load and peer health. Plain values with documented
//! defaults; the binary parses the file (and a `peers_file`) into them.
//!
//! Not here: placement itself (`cluster::ring`) or the peer requests (`proxy::peer`).

use std::net::SocketAddr;
use std::time::Duration;

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
/// Most peers a cluster may list (the ranking is computed per miss: O(peers)).
pub const MAX_PEERS: usize = 1024;

/// The request field that marks a request from a peer; its value is the sender's name.
/// A node never forwards a request that carries it (one hop only).
pub const HOP_HEADER: &str = "Linerate-Peer";

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerOptions {
    /// Its name: what placement hashes, so it must be the same on every node.
    pub name: String,
    /// Its cache-mode data listener (plain HTTP).
    pub address: SocketAddr,
    /// Its share of the keys relative to the others (> 0). Default 1.
    pub weight: f64,
}

/// `[cluster]`: this node and its peers.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterOptions {
    /// This node's name; must be one of `peers`.
    pub self_name: String,
    /// Every node, this one included.
    pub peers: Vec<PeerOptions>,
    /// Bounded-load factor c (≥ 1). Default [`DEFAULT_LOAD_FACTOR`].
    pub load_factor: f64,
    /// Failures in a row before a peer is down. Default [`DEFAULT_DOWN_AFTER`].
    pub down_after: u32,
    /// Successful probes in a row before it is up. Default [`DEFAULT_UP_AFTER`].
    pub up_after: u32,
    /// Time between probes of a down peer. Default [`DEFAULT_PROBE_INTERVAL`].
    pub probe_interval: Duration,
    /// See [`DEFAULT_PREVIOUS_OWNER_WINDOW`]; zero turns the previous-owner ask off.
    pub previous_owner_window: Duration,
    /// Connect timeout to a peer. Default [`DEFAULT_PEER_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// Response-head timeout from a peer. Default [`DEFAULT_PEER_FIRST_BYTE_TIMEOUT`].
    pub first_byte_timeout: Duration,
}

impl ClusterOptions {
    /// A cluster of `peers` seen from `self_name`, with every default.
    pub fn new(self_name: &str, peers: Vec<PeerOptions>) -> ClusterOptions {
        ClusterOptions {
            self_name: self_name.to_string(),
            peers,
            load_factor: DEFAULT_LOAD_FACTOR,
            down_after: DEFAULT_DOWN_AFTER,
            up_after: DEFAULT_UP_AFTER,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            previous_owner_window: DEFAULT_PREVIOUS_OWNER_WINDOW,
            connect_timeout: DEFAULT_PEER_CONNECT_TIMEOUT,
            first_byte_timeout: DEFAULT_PEER_FIRST_BYTE_TIMEOUT,
        }
    }

    /// Check what the types cannot: `self` listed, names unique and hop-header safe,
    /// weights positive and finite, factors in range.
    pub fn check(&self) -> Result<(), String> {
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.len() <= 64
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        if self.peers.is_empty() {
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
        }
        if !self.peers.iter().any(|p| p.name == self.self_name) {
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str, weight: f64) -> PeerOptions {
        PeerOptions {
            name: name.into(),
            address: "127.0.0.1:1".parse().unwrap_or_else(|_| unreachable!()),
            weight,
        }
    }

    #[test]
    fn checks() {
        let ok = ClusterOptions::new("a", vec![peer("a", 1.0), peer("b", 2.0)]);
        assert_eq!(ok.check(), Ok(()));
        let not_listed = ClusterOptions::new("c", ok.peers.clone());
        assert!(not_listed.check().is_err());
        let twice = ClusterOptions::new("a", vec![peer("a", 1.0), peer("a", 1.0)]);
        assert!(twice.check().is_err());
        let zero = ClusterOptions::new("a", vec![peer("a", 0.0)]);
        assert!(zero.check().is_err());
        let bad_name = ClusterOptions::new("a b", vec![peer("a b", 1.0)]);
        assert!(bad_name.check().is_err());
        let mut low = ok.clone();
        low.load_factor = 0.9;
        assert!(low.check().is_err());
    }
}
