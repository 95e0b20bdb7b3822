//! Purges across a cluster end to end, on 127.0.0.1: three real nodes (a, b, c) on
//! their own ports, one counting origin, exact origin request counts.
//!
//! - `purge_on_one_node_reaches_every_node`: after `POST /purge?url=` on a, GETs
//!   through b and c miss; the origin sees exactly one request more; the answer names
//!   every node as having applied it.
//! - `a_node_down_during_a_purge_catches_up_when_back`: c is stopped, the purge's
//!   answer says c has not applied it (202), c restarts on its store and applies it
//!   from a peer's log before it serves.
//! - `a_node_away_longer_than_the_log_drops_its_cache`: past the log's horizon.
//! - `tag_purge_reaches_every_node`, `tags_survive_a_restart_under_a_configured_field`:
//!   purge by tag (`Surrogate-Key`, or `[cache] tag_header`) on every node, and after a
//!   restart (the tag index rebuilt from the stored fields).
//! - `soft_purge_*`: `&soft=1` marks stale: one conditional request, a 304, body kept.
//! - `a_stalled_peer_delays_only_the_purge`: retries, and `/health` answers meanwhile.
//! - `a_200_without_the_applied_answer_is_not_proof`: only the node's own answer counts.
//! - `linerate_purge_on_the_command_line`: the `linerate purge` subcommand.
//! - `peer_purge_paths_refuse_unauthenticated_calls`: `/_linerate/purge` on a data
//!   listener without a valid `Linerate-Peer` MAC is 403 and removes nothing.
#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failed step should fail the test loudly"
)]

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;

use support::origin::{self, Origin};
use support::{read_response, Response, Server};

const TOKEN: &str = "purge-token-0123456789";
const SECRET: &str = "cluster-secret-for-purge-tests-0123456789";

/// Three free loopback ports (bound together, then released for the nodes).
fn ports() -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

fn name(i: usize) -> String {
    ((b'a' + i as u8) as char).to_string()
}

/// Node `i` of the cluster on `ports`, its store and files under `dir` (kept across a
/// restart).
/// Three nodes a, b, c of one cluster in front of `origin`, each on its own disk
/// directory (kept alive by the caller: a restarted node reuses its port and store).
fn three_nodes(origin: &Origin) -> (Vec<u16>, Vec<tempfile::TempDir>, Vec<Server>) {
    let ports = ports();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = (0..3)
        .map(|i| start_node(i, &ports, dirs[i].path(), origin))
        .collect();
    (ports, dirs, nodes)
}

fn start_node(i: usize, ports: &[u16], dir: &Path, origin: &Origin) -> Server {
    start_node_with(i, ports, dir, origin, "")
}

/// [`start_node`] with `cluster` lines added to `[cluster]`.
fn start_node_with(i: usize, ports: &[u16], dir: &Path, origin: &Origin, cluster: &str) -> Server {
    let peers: String = ports
        .iter()
        .enumerate()
        .map(|(j, p)| format!("{} 127.0.0.1:{p}\n", name(j)))
        .collect();
    let peers_file = dir.join("peers");
    std::fs::write(&peers_file, peers).unwrap();
    let key_file = dir.join("cluster.key");
    std::fs::write(&key_file, format!("{SECRET}\n")).unwrap();
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:{port}\"]\nworkers = 2\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n\
         [cache]\ndurability = \"no_sync\"\ncache_name = \"{n}\"\n\
         [[cache.disk]]\nname = \"d0\"\npath = {store:?}\nmax_bytes = 1073741824\n\
         [[origin]]\nname = \"o\"\nservers = [\"http://{o}\"]\n\
         [[route]]\npath_prefix = \"/\"\norigin = \"o\"\nslice_bytes = 0\n\
         [cluster]\nself = \"{n}\"\npeers_file = {pf:?}\nsecret_file = {kf:?}\n\
         connect_timeout_ms = 300\n{first_byte}{cluster}\n",
        port = ports[i],
        n = name(i),
        store = dir.join("cache").to_str().unwrap(),
        o = origin.addr(),
        pf = peers_file.to_str().unwrap(),
        kf = key_file.to_str().unwrap(),
        first_byte = if cluster.contains("first_byte_timeout_ms") {
            ""
        } else {
            "first_byte_timeout_ms = 5000\n"
        },
    );
    Server::start_text(&text, &[])
}

/// An origin whose every object is fresh for an hour, with a strong ETag; `/t/N`
/// objects carry tags (`Surrogate-Key` and `Cache-Tag`): `/t/1` "show-a all", `/t/2`
/// "show-b all". A request with `If-None-Match: "v1"` gets a 304.
fn start_origin() -> Origin {
    Origin::start(|req| {
        let body = format!("body of {}", req.path());
        let tags = match req.path() {
            "/t/1" => "show-a all",
            "/t/2" => "show-b  all",
            _ => "",
        };
        let mut fields = vec![("Cache-Control", "max-age=3600"), ("ETag", "\"v1\"")];
        if req.header("if-none-match") == Some("\"v1\"") {
            return origin::status(304, &fields);
        }
        if !tags.is_empty() {
            fields.push(("Surrogate-Key", tags));
            fields.push(("Cache-Tag", tags));
        }
        origin::ok(body.as_bytes(), &fields)
    })
}

fn fetch(addr: SocketAddr, path: &str) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    read_response(&mut s, false).unwrap()
}

fn get(addr: SocketAddr, path: &str) -> Response {
    let r = fetch(addr, path);
    assert_eq!(r.status, 200, "GET {path} via {addr}");
    r
}

fn post(addr: SocketAddr, target: &str, fields: &str) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(
        format!("POST {target} HTTP/1.1\r\nHost: {addr}\r\n{fields}Content-Length: 0\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    read_response(&mut s, false).unwrap()
}

fn purge(admin: SocketAddr, query: &str) -> (u16, serde_json::Value) {
    let r = post(
        admin,
        &format!("/purge?{query}"),
        &format!("Authorization: Bearer {TOKEN}\r\n"),
    );
    let body = String::from_utf8_lossy(&r.body).to_string();
    let v = serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    (r.status, v)
}

fn names(v: &serde_json::Value) -> Vec<String> {
    let mut n: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| {
            x.as_str()
                .unwrap_or_else(|| x["node"].as_str().unwrap())
                .to_string()
        })
        .collect();
    n.sort();
    n
}

/// Warm `path` through every node: one origin request, a copy on every node.
fn warm(nodes: &[Server], origin: &Origin, path: &str) {
    for n in nodes {
        get(n.addr, path);
    }
    for n in nodes {
        get(n.addr, path);
    }
    assert_eq!(
        origin.count(path),
        1,
        "one fill for {path} across the cluster"
    );
}

/// Guards the fan-out: a purge on one node used to leave the copies on the others
/// (GETs through b and c kept hitting). Now it removes every copy (exactly one origin
/// request more, whichever node owns the key), leaves other keys alone, and answers
/// which nodes applied it.
#[test]
fn purge_on_one_node_reaches_every_node() {
    let origin = start_origin();
    let (_ports, _dirs, nodes) = three_nodes(&origin);
    warm(&nodes, &origin, "/v/1");
    warm(&nodes, &origin, "/v/2");
    let (status, v) = purge(nodes[0].admin_addr(), "url=http%3A%2F%2Ftest%2Fv%2F1");
    assert_eq!(status, 200, "{v}");
    assert_eq!(names(&v["applied"]), ["a", "b", "c"], "{v}");
    assert_eq!(names(&v["not_applied"]), Vec::<String>::new(), "{v}");
    assert!(v["generation"].as_u64().is_some_and(|g| g > 0), "{v}");
    // Each node removed its copy.
    for n in ["a", "b", "c"] {
        assert_eq!(v["removed_by_node"][n], 1, "{v}");
    }
    for n in [&nodes[1], &nodes[2], &nodes[0]] {
        get(n.addr, "/v/1");
    }
    assert_eq!(origin.count("/v/1"), 2, "every copy gone: one refetch");
    for n in &nodes {
        get(n.addr, "/v/2");
    }
    assert_eq!(origin.count("/v/2"), 1, "other keys stay cached");
    // A prefix purge reaches every node too.
    let (status, v) = purge(nodes[1].admin_addr(), "prefix=http://test/v/");
    assert_eq!(status, 200, "{v}");
    assert_eq!(names(&v["applied"]), ["a", "b", "c"], "{v}");
    for n in [&nodes[0], &nodes[2], &nodes[1]] {
        get(n.addr, "/v/2");
    }
    assert_eq!(origin.count("/v/2"), 2);
    for n in nodes {
        n.stop();
    }
}

/// Guards catch-up: a node that is down during a purge used to keep serving its copy
/// when it came back. Now the answer names it as not applied (202), and when it is
/// back it applies the purge from a peer's log before it serves: its GET misses.
#[test]
fn a_node_down_during_a_purge_catches_up_when_back() {
    let origin = start_origin();
    let ports = ports();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Server> = (0..3)
        .map(|i| start_node(i, &ports, dirs[i].path(), &origin))
        .collect();
    warm(&nodes, &origin, "/d/1");
    let c = nodes.pop().unwrap();
    c.stop();
    let (status, v) = purge(nodes[0].admin_addr(), "url=http://test/d/1");
    assert_eq!(status, 202, "{v}");
    assert_eq!(names(&v["applied"]), ["a", "b"], "{v}");
    assert_eq!(names(&v["not_applied"]), ["c"], "{v}");
    assert!(
        v["not_applied"][0]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{v}"
    );
    let c = start_node(2, &ports, dirs[2].path(), &origin);
    support::eventually("c caught up from a peer's log", || {
        c.logged("purge caught up from a peer's log")
    });
    get(c.addr, "/d/1");
    assert_eq!(
        origin.count("/d/1"),
        2,
        "c's copy was purged while it was away"
    );
    for n in &nodes {
        get(n.addr, "/d/1");
    }
    assert_eq!(origin.count("/d/1"), 2);
    c.stop();
    for n in nodes {
        n.stop();
    }
}

/// Guards the peer path: a client calling `/_linerate/purge` on a data listener (no
/// `Linerate-Peer` field, or an unsigned one naming a node) gets 403 and removes
/// nothing; it used to be relayed to the origin as any POST.
#[test]
fn peer_purge_paths_refuse_unauthenticated_calls() {
    let origin = start_origin();
    let (_ports, _dirs, nodes) = three_nodes(&origin);
    warm(&nodes, &origin, "/u/1");
    let key: String = b"http://test/u/1"
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let target = format!("/_linerate/purge?issuer=a&generation=1&at=1&kind=url&key={key}");
    for fields in ["", "Linerate-Peer: a\r\n"] {
        let r = post(nodes[1].addr, &target, fields);
        assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    }
    let r = fetch(nodes[1].addr, "/_linerate/purge-log?from=0");
    assert_eq!(r.status, 403);
    for n in &nodes {
        get(n.addr, "/u/1");
    }
    assert_eq!(origin.count("/u/1"), 1, "nothing was purged");
    assert_eq!(origin.total(), 1, "nothing reached the origin");
    // Both url= and prefix=: a defined 400.
    let r = post(
        nodes[0].admin_addr(),
        "/purge?url=http://test/u/1&prefix=http://test/",
        &format!("Authorization: Bearer {TOKEN}\r\n"),
    );
    assert_eq!(r.status, 400);
    for n in nodes {
        n.stop();
    }
}

/// Guards purge by tag: `POST /purge?tag=` on one node removes every object stored
/// with that tag (`Surrogate-Key`, space-separated) on every node, and nothing else;
/// it used to be ignored (a 400 for an unknown argument). An unknown tag is a 200
/// that removed nothing, on every node.
#[test]
fn tag_purge_reaches_every_node() {
    let origin = start_origin();
    let (_ports, _dirs, nodes) = three_nodes(&origin);
    for p in ["/t/1", "/t/2", "/v/9"] {
        warm(&nodes, &origin, p);
    }
    let (status, v) = purge(nodes[1].admin_addr(), "tag=no-such-tag");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["purged"], 0, "{v}");
    assert_eq!(names(&v["applied"]), ["a", "b", "c"], "{v}");
    let (status, v) = purge(nodes[1].admin_addr(), "tag=show-a");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["by"], "tag", "{v}");
    assert_eq!(names(&v["applied"]), ["a", "b", "c"], "{v}");
    for n in [&nodes[0], &nodes[2], &nodes[1]] {
        for p in ["/t/1", "/t/2", "/v/9"] {
            get(n.addr, p);
        }
    }
    assert_eq!(
        origin.count("/t/1"),
        2,
        "show-a: every copy gone, one refetch"
    );
    assert_eq!(origin.count("/t/2"), 1, "show-b untouched");
    assert_eq!(origin.count("/v/9"), 1, "untagged untouched");
    // "all" tags both (the field's keys are split on any run of spaces).
    let (status, v) = purge(nodes[2].admin_addr(), "tag=all");
    assert_eq!(status, 200, "{v}");
    for n in [&nodes[0], &nodes[1], &nodes[2]] {
        get(n.addr, "/t/1");
        get(n.addr, "/t/2");
    }
    assert_eq!(origin.count("/t/1"), 3);
    assert_eq!(origin.count("/t/2"), 2);
    // Bad input: both a URL and a tag, an empty tag.
    for q in ["tag=all&url=http://test/t/1", "tag=", "tag=a%20b"] {
        let r = post(
            nodes[0].admin_addr(),
            &format!("/purge?{q}"),
            &format!("Authorization: Bearer {TOKEN}\r\n"),
        );
        assert_eq!(r.status, 400, "{q}");
    }
    for n in nodes {
        n.stop();
    }
}

/// Guards the tag index's rebuild at start and the configurable field: a lone node
/// with `tag_header = "Cache-Tag"` restarted on its store (objects written by the
/// previous process, as after an upgrade) still purges them by tag.
#[test]
fn tags_survive_a_restart_under_a_configured_field() {
    let origin = start_origin();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n\
         [cache]\ndurability = \"no_sync\"\ntag_header = \"Cache-Tag\"\n\
         [[cache.disk]]\nname = \"d0\"\npath = {store:?}\nmax_bytes = 1073741824\n\
         [[origin]]\nname = \"o\"\nservers = [\"http://{o}\"]\n\
         [[route]]\npath_prefix = \"/\"\norigin = \"o\"\nslice_bytes = 0\n",
        store = dir.path().join("cache").to_str().unwrap(),
        o = origin.addr(),
    );
    let server = Server::start_text(&text, &[]);
    get(server.addr, "/t/1");
    get(server.addr, "/t/2");
    server.stop();
    let server = Server::start_text(&text, &[]);
    get(server.addr, "/t/1");
    assert_eq!(
        origin.count("/t/1"),
        1,
        "served from the store after the restart"
    );
    let (status, v) = purge(server.admin_addr(), "tag=show-a");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["purged"], 1, "{v}");
    get(server.addr, "/t/1");
    get(server.addr, "/t/2");
    assert_eq!(origin.count("/t/1"), 2);
    assert_eq!(origin.count("/t/2"), 1);
    server.stop();
}

/// The origin's requests for `path` after the first `skip`: whether each was
/// conditional (`If-None-Match`).
fn conditional(origin: &Origin, path: &str, skip: usize) -> Vec<bool> {
    origin
        .requests()
        .iter()
        .filter(|r| r.path() == path)
        .skip(skip)
        .map(|r| r.header("if-none-match").is_some())
        .collect()
}

/// Guards soft purge: `&soft=1` keeps the object but marks it stale, so the next
/// request revalidates it with the origin (one conditional request, a 304, the body
/// kept) and the one after is a hit; it used to be ignored (a hard purge and an
/// unconditional refetch). A soft prefix purge is a defined 400.
#[test]
fn soft_purge_revalidates_instead_of_refetching() {
    let origin = start_origin();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n\
         [cache]\ndurability = \"no_sync\"\n\
         [[cache.disk]]\nname = \"d0\"\npath = {store:?}\nmax_bytes = 1073741824\n\
         [[origin]]\nname = \"o\"\nservers = [\"http://{o}\"]\n\
         [[route]]\npath_prefix = \"/\"\norigin = \"o\"\nslice_bytes = 0\n",
        store = dir.path().join("cache").to_str().unwrap(),
        o = origin.addr(),
    );
    let server = Server::start_text(&text, &[]);
    let first = get(server.addr, "/s/1");
    let (status, v) = purge(server.admin_addr(), "url=http://test/s/1&soft=1");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["purged"], 1, "{v}");
    let again = get(server.addr, "/s/1");
    assert_eq!(again.body, first.body);
    assert_eq!(
        conditional(&origin, "/s/1", 0),
        [false, true],
        "one revalidation"
    );
    get(server.addr, "/s/1");
    assert_eq!(origin.count("/s/1"), 2, "fresh again after the 304");
    // By tag: the tagged object revalidates, the other stays fresh.
    get(server.addr, "/t/1");
    get(server.addr, "/t/2");
    let (status, v) = purge(server.admin_addr(), "tag=show-a&soft=1");
    assert_eq!(status, 200, "{v}");
    get(server.addr, "/t/1");
    get(server.addr, "/t/2");
    assert_eq!(conditional(&origin, "/t/1", 0), [false, true]);
    assert_eq!(origin.count("/t/2"), 1);
    let (status, _) = purge_status(server.admin_addr(), "prefix=http://test/&soft=1");
    assert_eq!(status, 400);
    server.stop();
}

/// Guards soft purge across the cluster: after a soft purge on a, no node serves its
/// copy without asking: exactly one origin request follows, conditional (the owner's
/// revalidation; the other nodes revalidate with the owner), the bodies are kept, and
/// every copy is fresh again after it. It used to be a hard purge: an unconditional
/// refetch.
#[test]
fn soft_purge_reaches_every_node() {
    let origin = start_origin();
    let (_ports, _dirs, nodes) = three_nodes(&origin);
    warm(&nodes, &origin, "/s/2");
    let (status, v) = purge(nodes[0].admin_addr(), "url=http://test/s/2&soft=1");
    assert_eq!(status, 200, "{v}");
    assert_eq!(names(&v["applied"]), ["a", "b", "c"], "{v}");
    for n in [&nodes[1], &nodes[2], &nodes[0]] {
        assert_eq!(get(n.addr, "/s/2").body, b"body of /s/2");
    }
    let after = conditional(&origin, "/s/2", 1);
    assert_eq!(after, [true], "one revalidation, by the owner");
    let n = origin.count("/s/2");
    for n in &nodes {
        get(n.addr, "/s/2");
    }
    assert_eq!(origin.count("/s/2"), n, "fresh again everywhere");
    for n in nodes {
        n.stop();
    }
}

fn purge_status(admin: SocketAddr, query: &str) -> (u16, String) {
    let r = post(
        admin,
        &format!("/purge?{query}"),
        &format!("Authorization: Bearer {TOKEN}\r\n"),
    );
    (r.status, String::from_utf8_lossy(&r.body).to_string())
}

/// Run `linerate purge ARGS` against `admin`; exit success and stdout.
fn cli_purge(admin: SocketAddr, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(support::binary())
        .arg("purge")
        .args(["--admin", &admin.to_string(), "--token", TOKEN])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Guards `linerate purge`: it purges by URL (normalised as requests are: a dot
/// segment names the same object) and by tag through the admin API with the token,
/// prints the answer naming the nodes, and exits non-zero when a node has not applied
/// it or when given nothing to purge. The subcommand did not exist.
#[test]
fn linerate_purge_on_the_command_line() {
    let origin = start_origin();
    let ports = ports();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Server> = (0..3)
        .map(|i| start_node(i, &ports, dirs[i].path(), &origin))
        .collect();
    warm(&nodes, &origin, "/c/1");
    warm(&nodes, &origin, "/t/2");
    let (ok, out, err) = cli_purge(nodes[2].admin_addr(), &["--url", "http://test/c/./1"]);
    assert!(ok, "{out} {err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(names(&v["applied"]), ["a", "b", "c"], "{v}");
    for n in &nodes {
        get(n.addr, "/c/1");
    }
    assert_eq!(origin.count("/c/1"), 2);
    let (ok, _, err) = cli_purge(nodes[0].admin_addr(), &[]);
    assert!(!ok, "{err}");
    let c = nodes.pop().unwrap();
    c.stop();
    let (ok, out, err) = cli_purge(nodes[0].admin_addr(), &["--tag", "show-b"]);
    assert!(!ok, "c is down: {out}");
    assert!(err.contains("not yet applied"), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(names(&v["not_applied"]), ["c"], "{v}");
    for n in &nodes {
        get(n.addr, "/t/2");
    }
    assert_eq!(origin.count("/t/2"), 2);
    for n in nodes {
        n.stop();
    }
}

/// A path that node `owner` of a, b, c owns.
fn owned_by(owner: usize) -> String {
    (0..)
        .map(|k| format!("/own/{k}"))
        .find(|p| {
            let key = format!("http://test{p}");
            let names = [("a", 1.0), ("b", 1.0), ("c", 1.0)];
            linerate_server::cluster_rank(&names, key.as_bytes())[0] == owner
        })
        .unwrap()
}

/// Guards the log's horizon: a node that was away longer than its peers' purge logs
/// reach back (7 days; here its record of its last run is set to 8 days ago while it
/// is stopped) cannot know which purges it missed, so it drops every object it holds
/// when it comes back: a key it owns is fetched from the origin again (with the
/// previous-owner window off, so it does not ask a peer's copy). Before, it served
/// its old copy.
#[test]
fn a_node_away_longer_than_the_log_drops_its_cache() {
    let origin = start_origin();
    let ports = ports();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Server> = (0..3)
        .map(|i| start_node(i, &ports, dirs[i].path(), &origin))
        .collect();
    let path = owned_by(2);
    warm(&nodes, &origin, &path);
    let c = nodes.pop().unwrap();
    c.stop();
    let eight_days_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        - 8 * 24 * 3600 * 1000;
    std::fs::write(
        dirs[2].path().join("cache").join("purge-alive"),
        format!("{eight_days_ago}\n"),
    )
    .unwrap();
    let no_window = "previous_owner_window_s = 0";
    let c = start_node_with(2, &ports, dirs[2].path(), &origin, no_window);
    assert!(c.logged("away longer than the peer's purge log reaches back"));
    get(c.addr, &path);
    assert_eq!(origin.count(&path), 2, "c's copy was dropped");
    // Back in step: a restart now keeps its cache.
    c.stop();
    let c = start_node_with(2, &ports, dirs[2].path(), &origin, no_window);
    get(c.addr, &path);
    assert_eq!(origin.count(&path), 2, "a short absence keeps the cache");
    c.stop();
    for n in nodes {
        n.stop();
    }
}

/// Guards the admin API while a purge waits on a peer: a peer that accepts and never
/// answers costs the purge its 3 tries (each bounded by `first_byte_timeout_ms`), and
/// meanwhile `/health` still answers at once (a load balancer's check must not time
/// out because of a purge). The peer is then listed as not applied, with why.
#[test]
fn a_stalled_peer_delays_only_the_purge() {
    let origin = start_origin();
    let ports = ports();
    // c: a listener that accepts and never answers.
    let (stop, held) = fake_peer(ports[2], None);
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes: Vec<Server> = (0..2)
        .map(|i| {
            start_node_with(
                i,
                &ports,
                dirs[i].path(),
                &origin,
                "first_byte_timeout_ms = 700",
            )
        })
        .collect();
    let admin = nodes[0].admin_addr();
    let started = std::time::Instant::now();
    let purging = std::thread::spawn(move || purge(admin, "url=http://test/x/1"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut s = TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(1)))
        .unwrap();
    s.write_all(
        format!("GET /health HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let health = read_response(&mut s, false).expect("health answered while the purge waits");
    assert_eq!(health.status, 200);
    let (status, v) = purging.join().unwrap();
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(2100),
        "3 tries"
    );
    assert_eq!(status, 202, "{v}");
    assert_eq!(names(&v["applied"]), ["a", "b"], "{v}");
    assert_eq!(names(&v["not_applied"]), ["c"], "{v}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(
        held.join().unwrap() >= 3,
        "every try reached the stalled peer"
    );
    for n in nodes {
        n.stop();
    }
}

/// A stand-in for node c on `port`: it accepts every connection and holds it, and
/// answers each request with `answer` when given. Stopped by setting the flag; the
/// thread returns how many connections it accepted.
fn fake_peer(
    port: u16,
    answer: Option<&'static [u8]>,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<usize>,
) {
    let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
    l.set_nonblocking(true).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut held = Vec::new();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok((mut s, _)) = l.accept() {
                if let Some(a) = answer {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(std::time::Duration::from_secs(1)))
                        .unwrap();
                    let mut buf = [0u8; 4096];
                    let _ = std::io::Read::read(&mut s, &mut buf);
                    let _ = s.write_all(a);
                }
                held.push(s);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        held.len()
    });
    (stop, thread)
}

/// Guards the proof: a node that answers 200 without applying the purge (a node of
/// an older version relays the path to its origin, which may well say 200) is listed
/// as not applied, with why.
#[test]
fn a_200_without_the_applied_answer_is_not_proof() {
    let origin = start_origin();
    let ports = ports();
    let (stop, held) = fake_peer(
        ports[2],
        Some(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"),
    );
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes: Vec<Server> = (0..2)
        .map(|i| start_node(i, &ports, dirs[i].path(), &origin))
        .collect();
    let (status, v) = purge(nodes[1].admin_addr(), "url=http://test/x/2");
    assert_eq!(status, 202, "{v}");
    assert_eq!(names(&v["applied"]), ["a", "b"], "{v}");
    assert_eq!(names(&v["not_applied"]), ["c"], "{v}");
    assert!(
        v["not_applied"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("without applying")),
        "{v}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    held.join().unwrap();
    for n in nodes {
        n.stop();
    }
}
