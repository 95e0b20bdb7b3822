//! Cache-mode cluster end to end: 3-4 real `linerate` nodes, each in a network
//! namespace this test creates (veth pairs to a bridge in a hub namespace), a counting
//! origin and the clients in the test's own namespace (one more veth to the bridge).
//! Every test asserts the origin's exact request count and the SHA-256 of every body.
//!
//! - `herd_*`: 300 concurrent clients on one large object at random nodes: one origin
//!   request (one per slice when slicing), every body whole.
//! - `owner_killed_mid_body_*`: the owner is `kill -9`ed at half of a transfer (the
//!   object, or its first slice) a client reads through a non-owner: the client's body
//!   is whole (the non-owner continues with `Range` + `If-Range`), exactly one ranged
//!   origin request more.
//! - `fourth_node_*`: a 4th node joins 3 warm ones (peers file + SIGHUP): no origin
//!   request for any key cached before (the new owner asks the previous one).
//! - `stale_peer_lists_*`: two nodes with wrong peer lists: no request makes more than
//!   one hop (the origin sees at most two `Via` entries), counts exactly as modelled.
//! - `forged_peer_field_*`: a client's own `Linerate-Peer` field at a non-owner is
//!   refused and counted; the owner still fills, one origin request per key.
//! - `wrong_secret_is_not_a_peer`: a node with another secret is refused by the others.
//!
//! Needs root and iproute2 (`ip netns`); without them the tests fail, saying so.
#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failed step should fail the test loudly"
)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::netns::Net;
use support::origin::{self, Origin, Reply, Request};
use support::Server;

/// The host every client asks for (keys are `http://video.test/...`).
const HOST: &str = "video.test";
/// The herd's object, the 50 MB: 300 clients read and hash 15 GB through veth
/// in about 13 s per herd on the 2-core machine (both herds and the rest of this file:
/// about 45 s of wall time with the tests in parallel).
const HERD_BYTES: usize = 50_000_000;
/// Concurrent clients in the herd.
const HERD_CLIENTS: usize = 300;
/// Slice size when slicing is on (the default).
const SLICE: u64 = 4 << 20;
/// The cluster secret every node gets (in its `secret_file`) unless the test's
/// `[cluster]` lines set one.
const SECRET: &str = "cluster-test-secret-0123456789abcdef0123456789";

/// One node: the server, its directory (store, peers file), name and addresses.
struct Node {
    server: Server,
    name: String,
    addr: SocketAddr,
    admin: SocketAddr,
    peers_file: PathBuf,
    _dir: tempfile::TempDir,
}

/// Node names: a, b, c, d.
fn name(i: usize) -> String {
    ((b'a' + i as u8) as char).to_string()
}

/// A peers file listing `names` with their addresses on `net` (`extra`: more lines).
fn peers_text(net: &Net, members: &[usize], extra: &str) -> String {
    let mut t: String = members
        .iter()
        .map(|&i| format!("{} {}:8080\n", name(i), net.node_ip(i)))
        .collect();
    t.push_str(extra);
    t
}

/// Start node `i` in its namespace with this peers-file text; `route` and `cluster`
/// are extra lines for `[[route]]` and `[cluster]`.
fn start_node(
    net: &mut Net,
    i: usize,
    origin: &Origin,
    peers: &str,
    route: &str,
    cluster: &str,
) -> Node {
    let ns = if net.nodes.len() > i {
        net.nodes[i].clone()
    } else {
        net.add_node(i)
    };
    let dir = tempfile::tempdir().unwrap();
    let peers_file = dir.path().join("peers");
    std::fs::write(&peers_file, peers).unwrap();
    let key_file = dir.path().join("cluster.key");
    std::fs::write(&key_file, format!("{SECRET}\n")).unwrap();
    let secret = if cluster.contains("secret") {
        String::new()
    } else {
        format!("secret_file = {:?}", key_file.to_str().unwrap())
    };
    let ipaddr = net.node_ip(i);
    let text = format!(
        "[server]\nlisten = [\"{ipaddr}:8080\"]\nworkers = 2\n\
         [admin]\nlisten = \"{ipaddr}:9090\"\n\
         [cache]\ndurability = \"no_sync\"\ncache_name = \"{n}\"\n\
         [[cache.disk]]\nname = \"d0\"\npath = {store:?}\nmax_bytes = 1073741824\n\
         [[origin]]\nname = \"o\"\nservers = [\"http://{o}\"]\nconnect_timeout_ms = 1000\nfirst_byte_timeout_ms = 10000\nidle_timeout_ms = 10000\n\
         [[route]]\npath_prefix = \"/\"\norigin = \"o\"\n{route}\n\
         [cluster]\nself = \"{n}\"\npeers_file = {pf:?}\n{secret}\n{cluster}\n",
        n = name(i),
        store = dir.path().join("cache").to_str().unwrap(),
        o = origin.addr(),
        pf = peers_file.to_str().unwrap(),
    );
    let server = Server::start_text_in(&text, &[], Some(&ns));
    Node {
        addr: server.addr,
        admin: format!("{ipaddr}:9090").parse().unwrap(),
        server,
        name: name(i),
        peers_file,
        _dir: dir,
    }
}

/// What a client got.
struct Got {
    status: u16,
    /// The `Via` field: the nodes the response passed, owner first.
    via: String,
    /// The `Cache-Status` field lines, joined with `, `.
    cache_status: String,
    len: u64,
    sha: Vec<u8>,
}

/// GET `path` from `addr` on a fresh connection (`Connection: close`), hashing the body
/// as it arrives; `progress` counts body bytes read so far.
fn get(addr: SocketAddr, path: &str, progress: Option<&AtomicU64>) -> Got {
    get_with(addr, path, "", progress)
}

/// [`get`] with `fields` (whole lines, each ending in CRLF) added to the request.
fn get_with(addr: SocketAddr, path: &str, fields: &str, progress: Option<&AtomicU64>) -> Got {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {HOST}\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let body_start = loop {
        let n = read_some(&mut s, &mut buf).unwrap();
        assert!(n > 0, "closed before the head from {addr}");
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut fields);
    r.parse(&head).unwrap();
    let status = r.code.unwrap();
    let via = r
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("via"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
        .collect::<Vec<_>>()
        .join(", ");
    let cache_status = r
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("cache-status"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
        .collect::<Vec<_>>()
        .join(", ");
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let first = &head[body_start..];
    ctx.update(first);
    let mut len = first.len() as u64;
    loop {
        match read_some(&mut s, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                ctx.update(&buf[..n]);
                len += n as u64;
                if let Some(p) = progress {
                    p.store(len, Ordering::SeqCst);
                }
            }
            // A reset after a short body reads as the body being short: the assert
            // on the length below reports it.
            Err(_) => break,
        }
    }
    Got {
        status,
        via,
        cache_status,
        len,
        sha: ctx.finish().as_ref().to_vec(),
    }
}

/// `read`, again when a signal interrupted it (EINTR: the test process gets signals
/// from the processes it starts and stops).
fn read_some(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

fn sha(body: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, body)
        .as_ref()
        .to_vec()
}

/// Every sample of a metric family on `admin`, summed (`series` is the name, or the
/// name with its label set).
fn metric(admin: SocketAddr, series: &str) -> u64 {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let text = String::from_utf8_lossy(&support::read_to_close(&mut s)).into_owned();
    text.lines()
        .filter(|l| {
            l.strip_prefix(series).is_some_and(|rest| {
                rest.starts_with(' ') || (!series.contains('{') && rest.starts_with('{'))
            })
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// The origin: `objects` by path, with a strong ETag and an hour of freshness, `Range`
/// and `If-Range` honoured; paths in `slow` drip their body (64 KiB per 20 ms) to a
/// request without `Range`, so a transfer can be cut mid-body. Heads wait 200 ms so
/// concurrent clients pile onto one fill.
fn start_origin(net: &Net, objects: BTreeMap<String, Arc<Vec<u8>>>, slow: &[&str]) -> Origin {
    let slow: BTreeSet<String> = slow.iter().map(|s| (*s).to_string()).collect();
    Origin::start_on(&format!("{}:0", net.origin_ip()), move |req: &Request| {
        let Some(body) = objects.get(req.path()) else {
            return origin::status(404, &[]);
        };
        let etag = format!("\"v1{}\"", req.path().len());
        let headers = [
            ("ETag", etag.as_str()),
            ("Cache-Control", "max-age=3600"),
            ("Content-Type", "video/mp4"),
        ];
        if slow.contains(req.path()) {
            let total = body.len() as u64;
            let current = req.header("if-range").is_none_or(|v| v == etag);
            let (status, mut headers, part) = match req.range() {
                Some((a, b)) if current && a < total => {
                    let last = b.map_or(total - 1, |b| b.min(total - 1));
                    let range = format!("bytes {a}-{last}/{total}");
                    let mut h = origin::owned(&headers);
                    h.push(("Content-Range".into(), range));
                    (206, h, body[a as usize..=last as usize].to_vec())
                }
                _ => (200, origin::owned(&headers), body.to_vec()),
            };
            headers.push(("Accept-Ranges".into(), "bytes".into()));
            return Reply::Drip {
                status,
                headers,
                body: part,
                chunk: 64 * 1024,
                delay: Duration::from_millis(20),
            };
        }
        Reply::Delayed {
            delay: Duration::from_millis(200),
            reply: Box::new(origin::ranged(body.clone(), &headers)),
        }
    })
}

/// The owner order of `path` (or of its slice `slice`) among nodes `members`.
fn ranked(members: &[usize], path: &str, slice: Option<u64>) -> Vec<usize> {
    let names: Vec<String> = members.iter().map(|&i| name(i)).collect();
    let nodes: Vec<(&str, f64)> = names.iter().map(|n| (n.as_str(), 1.0)).collect();
    let mut key = format!("http://{HOST}{path}").into_bytes();
    if let Some(n) = slice {
        key = linerate_http::cache::key::slice(&key, n);
    }
    linerate_server::cluster_rank(&nodes, &key)
        .into_iter()
        .map(|i| members[i])
        .collect()
}

/// No origin request carried the hop header, and none made more than one hop: at most
/// two `Via` entries (a non-owner's and the owner's).
fn assert_one_hop(origin: &Origin) {
    for r in origin.requests() {
        assert!(
            r.header("linerate-peer").is_none(),
            "hop header reached the origin: {r:?}"
        );
        let via = r.header("via").unwrap_or("");
        assert!(
            via.split(',').count() <= 2,
            "more than one hop: Via {via:?}"
        );
    }
}

fn slice_route(slicing: bool) -> String {
    format!("slice_bytes = {}", if slicing { SLICE } else { 0 })
}

fn herd(slicing: bool) {
    let started = Instant::now();
    let mut net = Net::new();
    let body = Arc::new(support::content(HERD_BYTES, 7));
    let path = "/v/herd.mp4";
    let origin = start_origin(
        &net,
        BTreeMap::from([(path.to_string(), body.clone())]),
        &[],
    );
    let peers = peers_text(&net, &[0, 1, 2], "");
    let nodes: Vec<Node> = (0..3)
        .map(|i| start_node(&mut net, i, &origin, &peers, &slice_route(slicing), ""))
        .collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    // Clients at random nodes (a fixed-seed LCG: the same spread every run).
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let threads: Vec<_> = (0..HERD_CLIENTS)
        .map(|_| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let node = (seed >> 33) as usize % 3;
            let addr = addrs[node];
            (node, std::thread::spawn(move || get(addr, path, None)))
        })
        .collect();
    let want = sha(&body);
    // Who served what shows in Via: the owner of the first slice (or of the object),
    // then the node asked when that is another one.
    let owner = name(ranked(&[0, 1, 2], path, slicing.then_some(0))[0]);
    for (node, t) in threads {
        let got = t.join().unwrap();
        let via = if name(node) == owner {
            format!("1.1 {owner}")
        } else {
            format!("1.1 {owner}, 1.1 {}", name(node))
        };
        assert_eq!(got.via, via);
        assert_eq!(got.status, 200);
        assert_eq!(got.len, HERD_BYTES as u64);
        assert!(got.sha == want, "body differs");
    }
    let slices = if slicing {
        (HERD_BYTES as u64).div_ceil(SLICE)
    } else {
        1
    };
    // One origin request per object (per slice when slicing), whichever node asked.
    assert_eq!(origin.total() as u64, slices, "{:?}", origin.requests());
    assert_one_hop(&origin);
    // Per fill claim (the object, or each slice): the two non-owners each ask the owner
    // once, and the owner asks the previous owner (the runner-up) once.
    let hops: u64 = nodes
        .iter()
        .map(|n| metric(n.admin, "linerate_cluster_hop_requests_received_total"))
        .sum();
    assert_eq!(hops, 3 * slices);
    eprintln!("herd (slicing {slicing}): {:?}", started.elapsed());
    origin.assert_no_panics();
}

#[test]
fn herd_slicing_off() {
    herd(false);
}

#[test]
fn herd_slicing_on() {
    herd(true);
}

/// A non-owner's copy of an object it got from the owner answers each hit with what
/// this node did (its own member alone): the owner's `Cache-Status` member describes
/// the fill that made the copy, and is kept only on the responses that went forward
/// with it (the miss). Before, every hit replayed the owner's member from fill time.
#[test]
fn non_owner_hit_says_what_it_did() {
    let mut net = Net::new();
    let body = Arc::new(support::content(100_000, 3));
    let path = "/v/status.mp4";
    let origin = start_origin(
        &net,
        BTreeMap::from([(path.to_string(), body.clone())]),
        &[],
    );
    let peers = peers_text(&net, &[0, 1, 2], "");
    let nodes: Vec<Node> = (0..3)
        .map(|i| start_node(&mut net, i, &origin, &peers, &slice_route(false), ""))
        .collect();
    let rank = ranked(&[0, 1, 2], path, None);
    let (owner, other) = (name(rank[0]), rank[2]);
    let miss = get(nodes[other].addr, path, None);
    assert_eq!((miss.status, miss.len), (200, body.len() as u64));
    // The miss: the owner's member (its fill), then this node's.
    let members: Vec<&str> = miss.cache_status.split(", ").collect();
    assert_eq!(members.len(), 2, "{}", miss.cache_status);
    assert!(
        members[0].starts_with(&format!("{owner}; fwd=")),
        "{}",
        miss.cache_status
    );
    assert!(
        members[1].starts_with(&format!("{}; fwd=", name(other))),
        "{}",
        miss.cache_status
    );
    for _ in 0..2 {
        let hit = get(nodes[other].addr, path, None);
        assert_eq!((hit.status, hit.len), (200, body.len() as u64));
        assert!(hit.sha == sha(&body), "body differs");
        assert!(
            hit.cache_status
                .starts_with(&format!("{}; hit; ttl=", name(other)))
                && !hit.cache_status.contains(", "),
            "a hit says what this node did, alone: {}",
            hit.cache_status
        );
    }
    assert_eq!(origin.total(), 1, "{:?}", origin.requests());
    origin.assert_no_panics();
}

fn owner_killed_mid_body(slicing: bool) {
    let mut net = Net::new();
    let len = 8 << 20;
    let body = Arc::new(support::content(len, 11));
    // When slicing: a URL whose two slices have different owners, so the dead owner
    // held only the first.
    let path = (0..)
        .map(|k| format!("/v/kill{k}.mp4"))
        .find(|p| {
            !slicing || ranked(&[0, 1, 2], p, Some(0))[0] != ranked(&[0, 1, 2], p, Some(1))[0]
        })
        .unwrap();
    let path = path.as_str();
    let objects = BTreeMap::from([(path.to_string(), body.clone())]);
    let origin = start_origin(&net, objects, &[path]);
    let peers = peers_text(&net, &[0, 1, 2], "");
    let mut nodes: Vec<Option<Node>> = (0..3)
        .map(|i| {
            Some(start_node(
                &mut net,
                i,
                &origin,
                &peers,
                &slice_route(slicing),
                "",
            ))
        })
        .collect();
    let order = ranked(&[0, 1, 2], path, slicing.then_some(0));
    let (owner, through, third) = (order[0], order[1], order[2]);
    // What the owner transfers: the object, or its first slice.
    let transfer = if slicing { SLICE } else { len as u64 };
    // A client reads through the runner-up, which fills from the owner, which fills
    // from the dripping origin (64 KiB per 20 ms). At half the transfer, the owner dies.
    let progress = Arc::new(AtomicU64::new(0));
    let addr = nodes[through].as_ref().unwrap().addr;
    let p = progress.clone();
    let owned_path = path.to_string();
    let client = std::thread::spawn(move || get(addr, &owned_path, Some(&p)));
    let deadline = Instant::now() + Duration::from_secs(30);
    while progress.load(Ordering::SeqCst) < transfer / 2 {
        assert!(Instant::now() < deadline, "transfer did not reach half");
        std::thread::sleep(Duration::from_millis(5));
    }
    nodes[owner].as_ref().unwrap().server.signal("KILL");
    let got = client.join().unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.len, len as u64, "the client's body was cut");
    assert!(got.sha == sha(&body), "body differs");
    // The owner's fill; then the rest of it by range from the origin (the runner-up is
    // next in rank after the dead owner, and it is itself); when slicing, the second
    // slice by its owner (not the dead one).
    let reqs = origin.requests();
    assert_eq!(reqs.len(), if slicing { 3 } else { 2 }, "{reqs:?}");
    let resumes: Vec<&Request> = reqs
        .iter()
        .filter(|r| r.header("if-range").is_some())
        .collect();
    assert_eq!(resumes.len(), 1, "{reqs:?}");
    let (from, to) = resumes[0].range().unwrap();
    assert!(
        from >= transfer / 4 && from < transfer,
        "resumed from {from}"
    );
    assert_eq!(to, Some(transfer - 1));
    let etag = format!("\"v1{}\"", path.len());
    assert_eq!(resumes[0].header("if-range"), Some(etag.as_str()));
    let through_admin = nodes[through].as_ref().unwrap().admin;
    assert_eq!(metric(through_admin, "linerate_cluster_resumes_total"), 1);
    // Stored whole at the runner-up: the third node, whose owner is dead, gets it from
    // there (next in rank) with no origin request.
    let got = get(nodes[third].as_ref().unwrap().addr, path, None);
    assert_eq!((got.status, got.len), (200, len as u64));
    assert!(got.sha == sha(&body));
    assert_eq!(origin.total(), reqs.len());
    assert_one_hop(&origin);
    drop(nodes[owner].take());
    origin.assert_no_panics();
}

#[test]
fn owner_killed_mid_body_slicing_off() {
    owner_killed_mid_body(false);
}

#[test]
fn owner_killed_mid_body_slicing_on() {
    owner_killed_mid_body(true);
}

fn fourth_node(slicing: bool) {
    let mut net = Net::new();
    let keys = 24;
    let len = if slicing { 5 << 20 } else { 64 * 1024 };
    let paths: Vec<String> = (0..keys).map(|k| format!("/v/seg{k}.m4s")).collect();
    let objects: BTreeMap<String, Arc<Vec<u8>>> = paths
        .iter()
        .enumerate()
        .map(|(k, p)| (p.clone(), Arc::new(support::content(len, k as u64))))
        .collect();
    let origin = start_origin(&net, objects.clone(), &[]);
    let three = peers_text(&net, &[0, 1, 2], "");
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| start_node(&mut net, i, &origin, &three, &slice_route(slicing), ""))
        .collect();
    // Warm: each key once, at a node chosen by the key.
    for (k, p) in paths.iter().enumerate() {
        let got = get(nodes[k % 3].addr, p, None);
        assert_eq!((got.status, got.len), (200, len as u64));
    }
    let claims_per_key = if slicing {
        (len as u64).div_ceil(SLICE)
    } else {
        1
    };
    assert_eq!(origin.total() as u64, keys as u64 * claims_per_key);
    // d joins: its own list has four nodes; a, b and c reload theirs (SIGHUP).
    let four = peers_text(&net, &[0, 1, 2, 3], "");
    nodes.push(start_node(
        &mut net,
        3,
        &origin,
        &four,
        &slice_route(slicing),
        "",
    ));
    for n in &nodes[..3] {
        std::fs::write(&n.peers_file, &four).unwrap();
        n.server.signal("HUP");
    }
    for n in &nodes {
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric(n.admin, "linerate_cluster_members") != 4 {
            assert!(
                Instant::now() < deadline,
                "{} did not apply the new peers",
                n.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // d owns about a quarter of the claim keys (fixed names and keys: the same ones
    // every run).
    let d_owns: u64 = paths
        .iter()
        .map(|p| {
            (0..claims_per_key)
                .filter(|&s| ranked(&[0, 1, 2, 3], p, slicing.then_some(s))[0] == 3)
                .count() as u64
        })
        .sum();
    assert!(d_owns > 0);
    let before = origin.total();
    for (k, p) in paths.iter().enumerate() {
        // Half the keys at d first, half at a, b, c first (they forward to d when it
        // owns the key and they hold no copy).
        let order: Vec<&Node> = if k % 2 == 0 {
            nodes.iter().rev().collect()
        } else {
            nodes.iter().collect()
        };
        for n in order {
            let got = get(n.addr, p, None);
            assert_eq!(
                (got.status, got.len),
                (200, len as u64),
                "{p} at {}",
                n.name
            );
            assert!(got.sha == sha(&objects[p]));
        }
    }
    // Not one origin request for a key the three had: d asked the previous owner of
    // each claim key it now owns, and the others' keys stayed with their owners.
    assert_eq!(origin.total(), before, "{:?}", &origin.requests()[before..]);
    assert_eq!(
        metric(nodes[3].admin, "linerate_cluster_previous_owner_hits_total"),
        d_owns
    );
    assert_one_hop(&origin);
    origin.assert_no_panics();
}

#[test]
fn fourth_node_slicing_off() {
    fourth_node(false);
}

#[test]
fn fourth_node_slicing_on() {
    fourth_node(true);
}

fn stale_peer_lists(slicing: bool) {
    let mut net = Net::new();
    let keys = 16;
    let len = 64 * 1024;
    let paths: Vec<String> = (0..keys).map(|k| format!("/v/s{k}.ts")).collect();
    let objects: BTreeMap<String, Arc<Vec<u8>>> = paths
        .iter()
        .enumerate()
        .map(|(k, p)| (p.clone(), Arc::new(support::content(len, 100 + k as u64))))
        .collect();
    let origin = start_origin(&net, objects.clone(), &[]);
    // a does not know c; b lists a d that does not exist (nothing listens there);
    // c knows the truth. The previous-owner ask is off, so the model below is simple.
    let d_addr = format!("{}:8081", net.node_ip(0));
    let lists: [Vec<&str>; 3] = [
        vec!["a", "b"],
        vec!["a", "b", "c", "d"],
        vec!["a", "b", "c"],
    ];
    let files = [
        peers_text(&net, &[0, 1], ""),
        peers_text(&net, &[0, 1, 2], &format!("d {d_addr}\n")),
        peers_text(&net, &[0, 1, 2], ""),
    ];
    let cluster = "previous_owner_window_s = 0";
    let nodes: Vec<Node> = (0..3)
        .map(|i| {
            start_node(
                &mut net,
                i,
                &origin,
                &files[i],
                &slice_route(slicing),
                cluster,
            )
        })
        .collect();
    // The model: a node serves what it stored; else it asks the first node of its own
    // list's ranking that exists (itself: the origin); a node asked by a peer serves
    // what it stored or fills from the origin, never forwarding. Both store.
    let mut stored: Vec<BTreeSet<String>> = vec![BTreeSet::new(); 3];
    let (mut origin_expected, mut hops_expected, mut d_tries) = (0usize, 0u64, 0u64);
    for p in &paths {
        for (i, n) in nodes.iter().enumerate() {
            let got = get(n.addr, p, None);
            assert_eq!((got.status, got.len), (200, len as u64));
            assert!(got.sha == sha(&objects[p]));
            if stored[i].contains(p) {
                continue;
            }
            let names: Vec<(&str, f64)> = lists[i].iter().map(|n| (*n, 1.0)).collect();
            // The claim key: the URL's, or on a sliced route its first slice's (these
            // objects fit one slice and are then stored whole).
            let mut key = format!("http://{HOST}{p}").into_bytes();
            if slicing {
                key = linerate_http::cache::key::slice(&key, 0);
            }
            let order: Vec<&str> = linerate_server::cluster_rank(&names, &key)
                .into_iter()
                .map(|j| lists[i][j])
                .collect();
            if order[0] == "d" {
                d_tries += 1;
            }
            let to = order.into_iter().find(|&n| n != "d").unwrap();
            let to = (to.as_bytes()[0] - b'a') as usize;
            if to != i {
                hops_expected += 1;
                if stored[to].insert(p.clone()) {
                    origin_expected += 1;
                }
            } else {
                origin_expected += 1;
            }
            stored[i].insert(p.clone());
        }
    }
    assert_eq!(origin.total(), origin_expected, "{:?}", origin.requests());
    let hops: u64 = nodes
        .iter()
        .map(|n| metric(n.admin, "linerate_cluster_hop_requests_received_total"))
        .sum();
    assert_eq!(hops, hops_expected);
    assert_one_hop(&origin);
    // b found d unreachable each time it ranked first, until 3 failures in a row
    // marked it down (then it was skipped without a try).
    let b = nodes[1].admin;
    assert_eq!(
        metric(b, "linerate_cluster_peer_failures_total{peer=\"d\"}"),
        d_tries.min(3)
    );
    assert_eq!(
        metric(b, "linerate_cluster_peer_up{peer=\"d\"}"),
        u64::from(d_tries < 3)
    );
    origin.assert_no_panics();
}

#[test]
fn stale_peer_lists_slicing_off() {
    stale_peer_lists(false);
}

#[test]
fn stale_peer_lists_slicing_on() {
    stale_peer_lists(true);
}

/// The peers file of a running node is read again on SIGHUP; a bad one is rejected and
/// the running membership stays (the node keeps serving).
#[test]
fn bad_peers_file_on_reload_keeps_membership() {
    let mut net = Net::new();
    let path = "/v/one.ts";
    let body = Arc::new(support::content(1000, 3));
    let origin = start_origin(
        &net,
        BTreeMap::from([(path.to_string(), body.clone())]),
        &[],
    );
    let alone = peers_text(&net, &[0], "");
    let node = start_node(&mut net, 0, &origin, &alone, &slice_route(false), "");
    std::fs::write(&node.peers_file, "a not-an-address\n").unwrap();
    node.server.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !node.server.logged("reload rejected") {
        assert!(Instant::now() < deadline, "no rejection logged");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(metric(node.admin, "linerate_cluster_members"), 1);
    assert_eq!(metric(node.admin, "linerate_cluster_generation"), 1);
    let got = get(node.addr, path, None);
    assert_eq!((got.status, got.len), (200, 1000));
    assert_eq!(origin.total(), 1);
}

/// Guards finding 3 of issue 19 (forged peer requests): a client's own
/// `Linerate-Peer` field (naming a real node, unsigned) at a non-owner used to make that
/// node fill from the origin itself, so every node a forger reached cost one more origin
/// request per key (per slice). Now the field is refused (counted as `missing_mac`) and
/// the request is a client's: the owner fills, one origin request per key, and the
/// origin never sees the field.
fn forged_peer_field(slicing: bool) {
    let mut net = Net::new();
    let keys = 4;
    let len = if slicing { 9 << 20 } else { 256 * 1024 };
    let paths: Vec<String> = (0..keys).map(|k| format!("/v/forged{k}.mp4")).collect();
    let objects: BTreeMap<String, Arc<Vec<u8>>> = paths
        .iter()
        .enumerate()
        .map(|(k, p)| (p.clone(), Arc::new(support::content(len, 40 + k as u64))))
        .collect();
    let origin = start_origin(&net, objects.clone(), &[]);
    let peers = peers_text(&net, &[0, 1, 2], "");
    let nodes: Vec<Node> = (0..3)
        .map(|i| start_node(&mut net, i, &origin, &peers, &slice_route(slicing), ""))
        .collect();
    let mut forged_at = vec![0u64; 3];
    for p in &paths {
        // The forger asks every node that does not own the object (its first slice),
        // naming another node as the sender; then a plain client asks every node.
        let order = ranked(&[0, 1, 2], p, slicing.then_some(0));
        for &n in &order[1..] {
            let sender = name(order[0]);
            let got = get_with(
                nodes[n].addr,
                p,
                &format!("Linerate-Peer: {sender}\r\n"),
                None,
            );
            assert_eq!((got.status, got.len), (200, len as u64), "{p} at {n}");
            assert!(got.sha == sha(&objects[p]), "body differs");
            forged_at[n] += 1;
        }
        for n in &nodes {
            let got = get(n.addr, p, None);
            assert_eq!((got.status, got.len), (200, len as u64));
        }
    }
    let claims_per_key = if slicing {
        (len as u64).div_ceil(SLICE)
    } else {
        1
    };
    assert_eq!(
        origin.total() as u64,
        keys as u64 * claims_per_key,
        "{:?}",
        origin.requests()
    );
    assert_one_hop(&origin);
    for (n, forged) in nodes.iter().zip(forged_at) {
        assert_eq!(
            metric(
                n.admin,
                "linerate_cluster_peer_auth_failures_total{reason=\"missing_mac\"}"
            ),
            forged,
            "{}",
            n.name
        );
        assert_eq!(
            metric(n.admin, "linerate_cluster_peer_auth_failures_total"),
            forged,
            "{}: no other reason",
            n.name
        );
    }
    assert!(nodes
        .iter()
        .any(|n| n.server.logged("Linerate-Peer field refused")));
    origin.assert_no_panics();
}

#[test]
fn forged_peer_field_slicing_off() {
    forged_peer_field(false);
}

#[test]
fn forged_peer_field_slicing_on() {
    forged_peer_field(true);
}

/// Guards the secret check between nodes: a node with another secret (a wrong key
/// file) is not a peer. Its request to the owner is refused (`bad_mac`) and handled as
/// a client's; with the same secret the same request is a peer's (hop counted).
#[test]
fn wrong_secret_is_not_a_peer() {
    let mut net = Net::new();
    let len = 64 * 1024;
    // Two keys owned by a, each asked at b.
    let paths: Vec<String> = (0..)
        .map(|k| format!("/v/key{k}.ts"))
        .filter(|p| ranked(&[0, 1], p, None)[0] == 0)
        .take(2)
        .collect();
    let objects: BTreeMap<String, Arc<Vec<u8>>> = paths
        .iter()
        .map(|p| (p.clone(), Arc::new(support::content(len, 5))))
        .collect();
    let origin = start_origin(&net, objects, &[]);
    let peers = peers_text(&net, &[0, 1], "");
    let route = slice_route(false);
    let a = start_node(&mut net, 0, &origin, &peers, &route, "");
    let wrong = "secret = \"another-secret-0123456789abcdef0123456789\"";
    let b = start_node(&mut net, 1, &origin, &peers, &route, wrong);
    let got = get(b.addr, &paths[0], None);
    assert_eq!((got.status, got.len), (200, len as u64));
    assert_eq!(origin.total(), 1);
    assert_eq!(
        metric(
            a.admin,
            "linerate_cluster_peer_auth_failures_total{reason=\"bad_mac\"}"
        ),
        1
    );
    assert_eq!(
        metric(a.admin, "linerate_cluster_hop_requests_received_total"),
        0
    );
    // b again, with the right secret: a peer.
    drop(b);
    let b = start_node(&mut net, 1, &origin, &peers, &route, "");
    let got = get(b.addr, &paths[1], None);
    assert_eq!((got.status, got.len), (200, len as u64));
    assert_eq!(origin.total(), 2);
    assert_eq!(
        metric(a.admin, "linerate_cluster_hop_requests_received_total"),
        1
    );
    assert_eq!(
        metric(a.admin, "linerate_cluster_peer_auth_failures_total"),
        1
    );
    assert_one_hop(&origin);
    origin.assert_no_panics();
}
