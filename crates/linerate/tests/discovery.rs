//! Cluster membership from DNS (`[cluster] peers_dns`, `self_env`, `dns_server`) end to
//! end: real `linerate` nodes in network namespaces (`support::netns`), each told its
//! name by `POD_NAME` as a StatefulSet pod is, finding the others in the SRV and A
//! records of a Kubernetes-style headless Service that a real DNS server (dnsmasq,
//! `support::dns`) answers, re-resolved every 200 ms. A counting origin in the test's
//! namespace; every count is exact and every owner is checked in `Via`.
//!
//! - `scale_3_4_2_and_a_silent_dns_keeps_the_last_set`: 3 nodes form one cache (one
//!   origin request per object whichever node is asked); a 4th pod appears in DNS and
//!   costs no origin request for the objects the three had (it asks the previous owner);
//!   2 pods leave DNS and the two left own every key between them; then the DNS server
//!   stops answering, and later answers with no records: both times the last good set
//!   stays (logged, generation unchanged), and the cache stays one.
//!
//! Needs root, iproute2 and dnsmasq (scripts/test.sh installs them); fails without.
#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failed step should fail the test loudly"
)]

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use support::dns::{Dns, SERVICE};
use support::netns::Net;
use support::origin::{self, Origin, Request};
use support::Server;

/// The host every client asks for.
const HOST: &str = "video.test";
/// The cluster secret (every node's `secret_file`).
const SECRET: &str = "discovery-test-secret-0123456789abcdef0123456789";
/// Each object's size.
const LEN: usize = 64 * 1024;

/// Pod names, as a StatefulSet `linerate` names them.
fn pod(i: usize) -> String {
    format!("linerate-{i}")
}

/// A running node.
struct Node {
    server: Server,
    addr: SocketAddr,
    admin: SocketAddr,
    _dir: tempfile::TempDir,
}

/// Start node `i` in its namespace: no peers listed, `self` from `POD_NAME`, the peers
/// from `dns`.
fn start_node(net: &mut Net, i: usize, origin: &Origin, dns: SocketAddr) -> Node {
    let ns = if net.nodes.len() > i {
        net.nodes[i].clone()
    } else {
        net.add_node(i)
    };
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("cluster.key");
    std::fs::write(&key_file, format!("{SECRET}\n")).unwrap();
    let ip = net.node_ip(i);
    let text = format!(
        "[server]\nlisten = [\"{ip}:8080\"]\nworkers = 2\n\
         [admin]\nlisten = \"{ip}:9090\"\n\
         [cache]\ndurability = \"no_sync\"\ncache_name = \"{n}\"\n\
         [[cache.disk]]\nname = \"d0\"\npath = {store:?}\nmax_bytes = 1073741824\n\
         [[origin]]\nname = \"o\"\nservers = [\"http://{o}\"]\n\
         [[route]]\npath_prefix = \"/\"\norigin = \"o\"\nslice_bytes = 0\n\
         [cluster]\nself_env = \"POD_NAME\"\npeers_dns = \"{SERVICE}\"\n\
         dns_server = \"{dns}\"\npeers_dns_interval_ms = 200\nsecret_file = {key:?}\n",
        n = pod(i),
        store = dir.path().join("cache").to_str().unwrap(),
        o = origin.addr(),
        key = key_file.to_str().unwrap(),
    );
    let server = Server::start_text_in(&text, &[("POD_NAME", &pod(i))], Some(&ns));
    Node {
        addr: server.addr,
        admin: format!("{ip}:9090").parse().unwrap(),
        server,
        _dir: dir,
    }
}

/// The DNS records of `members`: name and data address.
fn records(net: &Net, members: &[usize]) -> Vec<(String, SocketAddr)> {
    members
        .iter()
        .map(|&i| (pod(i), format!("{}:8080", net.node_ip(i)).parse().unwrap()))
        .collect()
}

/// The origin: `objects` by path, strong ETag, an hour fresh.
fn start_origin(net: &Net, objects: BTreeMap<String, Arc<Vec<u8>>>) -> Origin {
    Origin::start_on(&format!("{}:0", net.origin_ip()), move |req: &Request| {
        let Some(body) = objects.get(req.path()) else {
            return origin::status(404, &[]);
        };
        let etag = format!("\"v{}\"", req.path().len());
        origin::ranged(
            body.clone(),
            &[
                ("ETag", etag.as_str()),
                ("Cache-Control", "max-age=3600"),
                ("Content-Type", "video/mp4"),
            ],
        )
    })
}

/// GET `path` at `addr`: status, `Via`, body.
fn get(addr: SocketAddr, path: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let r = support::read_response(&mut s, false).unwrap();
    (r.status, r.values("via").join(", "), r.body)
}

/// A metric's value on `admin` (the sample without labels).
fn metric(admin: SocketAddr, series: &str) -> u64 {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let text = String::from_utf8_lossy(&support::read_to_close(&mut s)).into_owned();
    support::value(&text, series).unwrap_or_else(|| panic!("no {series}")) as u64
}

/// The owner of `path` among `members` (placement's own ranking).
fn owner(members: &[usize], path: &str) -> usize {
    let names: Vec<String> = members.iter().map(|&i| pod(i)).collect();
    let nodes: Vec<(&str, f64)> = names.iter().map(|n| (n.as_str(), 1.0)).collect();
    let key = format!("http://{HOST}{path}").into_bytes();
    members[linerate_server::cluster_rank(&nodes, &key)[0]]
}

/// GET a key the cluster has never seen at node `at`: a whole body, filled by the
/// owner among `members` (first in `Via`; alone when `at` is the owner).
fn first_get(nodes: &[Option<Node>], at: usize, members: &[usize], path: &str, body: &[u8]) {
    let (status, via, got) = get(nodes[at].as_ref().unwrap().addr, path);
    assert_eq!(status, 200, "{path} at {}", pod(at));
    assert!(got == body, "{path} at {}: body differs", pod(at));
    let o = pod(owner(members, path));
    let want = if o == pod(at) {
        format!("1.1 {o}")
    } else {
        format!("1.1 {o}, 1.1 {}", pod(at))
    };
    assert_eq!(via, want, "{path} at {}", pod(at));
}

/// Wait until every node of `which` has `n` members.
fn wait_members(nodes: &[Option<Node>], which: &[usize], n: u64) {
    for &i in which {
        let admin = nodes[i].as_ref().unwrap().admin;
        support::eventually(&format!("{} sees {n} members", pod(i)), || {
            metric(admin, "linerate_cluster_members") == n
        });
    }
}

#[test]
fn scale_3_4_2_and_a_silent_dns_keeps_the_last_set() {
    let mut net = Net::new();
    let paths: Vec<String> = (0..40).map(|k| format!("/v/seg{k}.m4s")).collect();
    let objects: BTreeMap<String, Arc<Vec<u8>>> = paths
        .iter()
        .enumerate()
        .map(|(k, p)| (p.clone(), Arc::new(support::content(LEN, k as u64))))
        .collect();
    let path = |k: usize| paths[k].as_str();
    let body = |k: usize| objects[path(k)].as_slice();
    let origin = start_origin(&net, objects.clone());
    let dns_addr: SocketAddr = format!("{}:5353", net.origin_ip()).parse().unwrap();
    let mut dns = Dns::start(dns_addr, &records(&net, &[0, 1, 2]));
    let mut nodes: Vec<Option<Node>> = (0..3)
        .map(|i| Some(start_node(&mut net, i, &origin, dns_addr)))
        .collect();
    // The first answer is in force before a node listens.
    for n in nodes.iter().flatten() {
        assert_eq!(metric(n.admin, "linerate_cluster_members"), 3);
    }

    // Three pods: one cache. Each key once at a node chosen by the key, then at every
    // node: one origin request per key.
    let three = [0, 1, 2];
    for k in 0..12 {
        first_get(&nodes, k % 3, &three, path(k), body(k));
    }
    for k in 0..12 {
        for n in nodes.iter().flatten() {
            assert!(get(n.addr, path(k)).2 == body(k));
        }
    }
    assert_eq!(origin.total(), 12, "{:?}", origin.requests());

    // A fourth pod: in DNS, then started. Every node takes the set of four; the new
    // node owns about a quarter of the keys and asks their previous owner, so the keys
    // the three had cost nothing; new keys cost one request each, at their owner.
    let four = [0, 1, 2, 3];
    drop(dns);
    dns = Dns::start(dns_addr, &records(&net, &four));
    nodes.push(Some(start_node(&mut net, 3, &origin, dns_addr)));
    wait_members(&nodes, &four, 4);
    let d_owns = (0..12).filter(|&k| owner(&four, path(k)) == 3).count() as u64;
    assert!(d_owns > 0);
    for k in 0..12 {
        let (status, _, got) = get(nodes[3].as_ref().unwrap().addr, path(k));
        assert_eq!(status, 200);
        assert!(got == body(k));
    }
    assert_eq!(origin.total(), 12, "{:?}", &origin.requests()[12..]);
    assert_eq!(
        metric(
            nodes[3].as_ref().unwrap().admin,
            "linerate_cluster_previous_owner_hits_total"
        ),
        d_owns
    );
    for k in 12..24 {
        first_get(&nodes, k % 4, &four, path(k), body(k));
    }
    assert_eq!(origin.total(), 24);

    // Down to two: pods 2 and 3 leave DNS, then stop. Nodes 0 and 1 own every key
    // between them: a new key costs one request, filled by its owner of the two.
    let two = [0, 1];
    drop(dns);
    dns = Dns::start(dns_addr, &records(&net, &two));
    wait_members(&nodes, &two, 2);
    nodes[2] = None;
    nodes[3] = None;
    for k in 24..30 {
        first_get(&nodes, k % 2, &two, path(k), body(k));
        assert!(get(nodes[(k + 1) % 2].as_ref().unwrap().addr, path(k)).2 == body(k));
    }
    assert_eq!(origin.total(), 30);

    // The DNS server stops answering: the set of two stays (logged; no new
    // generation), and the cache stays one.
    let generation = |i: usize| {
        metric(
            nodes[i].as_ref().unwrap().admin,
            "linerate_cluster_generation",
        )
    };
    let generations = (generation(0), generation(1));
    let kept = "peers_dns lookup failed; keeping the last good set";
    let count = |i: usize, needle: &str| nodes[i].as_ref().unwrap().server.logged_count(needle);
    let before = (count(0, kept), count(1, kept));
    dns.pause();
    support::eventually("both nodes log the silent DNS server", || {
        count(0, kept) > before.0 && count(1, kept) > before.1
    });
    assert_eq!((generation(0), generation(1)), generations);
    wait_members(&nodes, &two, 2);
    for k in 30..34 {
        first_get(&nodes, k % 2, &two, path(k), body(k));
        assert!(get(nodes[(k + 1) % 2].as_ref().unwrap().addr, path(k)).2 == body(k));
    }
    assert_eq!(origin.total(), 34);

    // It answers again (the recovery is logged), then answers with no records at all:
    // an empty set is not applied either.
    dns.resume();
    let again = "peers_dns answers again";
    support::eventually("both nodes log the recovery", || {
        count(0, again) >= 1 && count(1, again) >= 1
    });
    drop(dns);
    let _empty = Dns::start(dns_addr, &[]);
    let empty = |i: usize| {
        nodes[i]
            .as_ref()
            .unwrap()
            .server
            .logged_lines()
            .iter()
            .any(|l| l.contains(kept) && l.contains("no records found"))
    };
    support::eventually("both nodes log the empty answer", || empty(0) && empty(1));
    assert_eq!((generation(0), generation(1)), generations);
    wait_members(&nodes, &two, 2);
    for k in 34..40 {
        first_get(&nodes, k % 2, &two, path(k), body(k));
    }
    assert_eq!(origin.total(), 40);
    origin.assert_no_panics();
}
