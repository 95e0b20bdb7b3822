//! Peer-field authentication end to end on 127.0.0.1, one node: a client's own
//! `Linerate-Peer` field without `[cluster]`, and the transition setting
//! (`accept_unsigned_from`) with a listed and an unlisted source address (the test
//! binds 127.0.0.2, which every Linux loopback answers). The cases that need several
//! nodes (a forger at a non-owner, a node with the wrong secret) are in cluster.rs.
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use support::kit::CacheConfig;
use support::origin::{self, Origin};
use support::{read_response, read_to_close};

/// An origin whose every object is fresh for an hour.
/// A path that node a owns in the two-node cluster a, b (so no request of a test goes
/// to b, where nothing listens).
fn owned_by_a() -> String {
    (0..)
        .map(|k| format!("/own{k}"))
        .find(|p| {
            let key = format!("http://test{p}");
            linerate_server::cluster_rank(&[("a", 1.0), ("b", 1.0)], key.as_bytes())[0] == 0
        })
        .unwrap()
}

fn start_origin() -> Origin {
    Origin::start(|_| origin::ok(b"body", &[("Cache-Control", "max-age=3600")]))
}

/// Every sample of `series` (a family name, or a name with its label set) on `admin`.
fn metric(admin: SocketAddr, series: &str) -> u64 {
    let mut s = TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let text = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
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

/// Guards finding 3 of issue 19 without a cluster: a client's `Linerate-Peer` field
/// used to make its `no-cache` (and `only-if-cached`) obeyed although
/// `honour_request_cache_control = false`, so every such request went to the origin.
/// Now the field is ignored: one origin request, and the origin never sees the field.
#[test]
fn forged_peer_field_without_cluster_is_ignored_and_not_forwarded() {
    let origin = start_origin();
    let cache = CacheConfig::new(&origin)
        .cache("honour_request_cache_control = false")
        .start();
    let forged = ["Cache-Control: no-cache", "Linerate-Peer: x"];
    for _ in 0..2 {
        let r = cache.server.get("/a", &forged);
        assert_eq!((r.status, r.body.as_slice()), (200, &b"body"[..]));
    }
    assert_eq!(origin.total(), 1, "{:?}", origin.requests());
    // A peer's `only-if-cached` (the previous-owner ask) is obeyed; a client's is not
    // here: a miss is filled, not answered 504.
    let r = cache
        .server
        .get("/b", &["Cache-Control: only-if-cached", "Linerate-Peer: x"]);
    assert_eq!(r.status, 200);
    assert_eq!(origin.total(), 2);
    // Relayed (not cached) requests drop it too.
    let r = cache
        .server
        .request("POST", "/c", &["Linerate-Peer: x", "Content-Length: 0"]);
    assert_eq!(r.status, 200);
    assert_eq!(origin.total(), 3);
    for r in origin.requests() {
        assert!(r.header("linerate-peer").is_none(), "{r:?}");
    }
    origin.assert_no_panics();
}

/// GET `path` from source address `from` with `fields` (CRLF-terminated lines).
fn get_from(from: &str, to: SocketAddr, path: &str, fields: &str) -> support::Response {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{from}:0").parse().unwrap();
    socket.bind(&from.into()).unwrap();
    socket.connect(&to.into()).unwrap();
    let mut s: TcpStream = socket.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut s, false).unwrap()
}

/// Guards the transition setting: with `accept_unsigned_from = ["127.0.0.2"]` (peer b's
/// address), an unsigned `Linerate-Peer: b` from 127.0.0.2 is a peer's request (its
/// `no-cache` is obeyed although clients' are not: one more origin request), counted
/// as unsigned; the same field from 127.0.0.1 is refused (`missing_mac`) and served
/// from the cache. The setting is logged as a warning at start.
#[test]
fn unsigned_peer_field_accepted_only_from_listed_addresses() {
    let origin = start_origin();
    // This node is a; b is a peer at 127.0.0.2 where nothing listens. The path is one
    // a owns, so no request of this test goes to b.
    let path = owned_by_a();
    let cache = CacheConfig::new(&origin)
        .cache("honour_request_cache_control = false")
        .route("slice_bytes = 0")
        .extra(
            "[cluster]\nself = \"a\"\n\
             peers = [{ name = \"a\", address = \"127.0.0.1:1\" }, { name = \"b\", address = \"127.0.0.2:1\" }]\n\
             secret = \"peers-test-secret-0123456789abcdef0123456789\"\n\
             accept_unsigned_from = [\"127.0.0.2\"]\n\
             previous_owner_window_s = 0",
        )
        .start();
    assert!(cache.server.logged("accepting UNSIGNED peer requests"));
    assert!(
        !cache.server.logged("peers-test-secret"),
        "the secret is never logged"
    );
    let addr = cache.server.addr;
    let admin = cache.server.admin_addr();
    let unsigned = "Cache-Control: no-cache\r\nLinerate-Peer: b\r\n";
    assert_eq!(get_from("127.0.0.1", addr, &path, "").status, 200);
    assert_eq!(origin.total(), 1);
    // Unlisted address: refused, a client's no-cache is not obeyed.
    assert_eq!(get_from("127.0.0.1", addr, &path, unsigned).status, 200);
    assert_eq!(origin.total(), 1);
    assert_eq!(
        metric(
            admin,
            "linerate_cluster_peer_auth_failures_total{reason=\"missing_mac\"}"
        ),
        1
    );
    // Listed address: a peer's request.
    assert_eq!(get_from("127.0.0.2", addr, &path, unsigned).status, 200);
    assert_eq!(origin.total(), 2);
    assert_eq!(
        metric(admin, "linerate_cluster_peer_unsigned_accepted_total"),
        1
    );
    assert_eq!(
        metric(admin, "linerate_cluster_hop_requests_received_total"),
        1
    );
    assert_eq!(
        metric(admin, "linerate_cluster_peer_auth_failures_total"),
        1
    );
    for r in origin.requests() {
        assert!(r.header("linerate-peer").is_none(), "{r:?}");
    }
    origin.assert_no_panics();
}

/// Run `linerate check-config` on `text`: exit code, stdout, stderr.
fn check_config(text: &str) -> (Option<i32>, String, String) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    let out = std::process::Command::new(support::binary())
        .arg("check-config")
        .arg(file.path())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// Guards the breaking change and the secret's secrecy: a `[cluster]` without a secret
/// is refused with the key to add; `check-config` prints a valid one as `<redacted>`
/// and names a bad one without quoting it.
#[test]
fn check_config_requires_the_secret_and_never_prints_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[cache]\n[[cache.disk]]\nname = \"d0\"\npath = {:?}\nmax_bytes = 1048576\n\
         [[origin]]\nname = \"o\"\nservers = [\"http://127.0.0.1:1\"]\n[[route]]\npath_prefix = \"/\"\norigin = \"o\"\n\
         [cluster]\nself = \"a\"\npeers = [{{ name = \"a\", address = \"127.0.0.1:1\" }}]\n",
        dir.path().join("cache").to_str().unwrap()
    );
    let (code, printed, err) = check_config(&base);
    assert_eq!(code, Some(1), "{printed}");
    assert!(
        err.contains("[cluster] needs `secret_file = \"/etc/linerate/cluster.key\"`"),
        "{err}"
    );
    let secret = "do-not-print-me-0123456789abcdef0123456789";
    let (code, printed, err) = check_config(&format!("{base}secret = {secret:?}\n"));
    assert_eq!(code, Some(0), "{err}");
    assert!(printed.contains("secret = \"<redacted>\""), "{printed}");
    assert!(!printed.contains(secret) && !err.contains(secret));
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "short-do-not-print\n").unwrap();
    let (code, printed, err) = check_config(&format!(
        "{base}secret_file = {:?}\n",
        key.to_str().unwrap()
    ));
    assert_eq!(code, Some(1), "{printed}");
    assert!(err.contains("has 18 bytes"), "{err}");
    assert!(!err.contains("short-do-not-print"), "{err}");
}

/// The `Linerate-Peer` value for a request, computed here from docs/config.md ("Peer
/// authentication") rather than with the server's code, so the documented encoding is
/// what the server checks.
#[allow(
    clippy::too_many_arguments,
    reason = "one argument per part of the documented encoding, in its order"
)]
fn sign_as_documented(
    secret: &str,
    sender: &str,
    recipient: &str,
    t: u64,
    method: &str,
    target: &str,
    authority: Option<&str>,
    fields: &[(&str, &str)],
) -> String {
    fn push(m: &mut Vec<u8>, b: &[u8]) {
        m.extend_from_slice(&(b.len() as u32).to_be_bytes());
        m.extend_from_slice(b);
    }
    let mut m = b"linerate-peer-v2\n".to_vec();
    push(&mut m, sender.as_bytes());
    push(&mut m, recipient.as_bytes());
    push(&mut m, t.to_string().as_bytes());
    push(&mut m, method.as_bytes());
    push(&mut m, target.as_bytes());
    match authority {
        None => m.push(0),
        Some(a) => {
            m.push(1);
            push(&mut m, a.as_bytes());
        }
    }
    for name in [
        "range",
        "if-range",
        "if-none-match",
        "if-modified-since",
        "if-match",
        "if-unmodified-since",
        "cache-control",
        "pragma",
    ] {
        let values: Vec<&str> = fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
            .collect();
        m.extend_from_slice(&(values.len() as u32).to_be_bytes());
        for v in values {
            push(&mut m, v.as_bytes());
        }
    }
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, &m);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("{sender}; t={t}; mac={hex}")
}

/// Guards the documented MAC and the skew bound with the real binary: a request signed
/// as docs/config.md says is a peer's (its `no-cache` obeyed although clients' are
/// not); the same signed 2 minutes ago is refused as `stale`, and one signed with
/// another secret as `bad_mac`, both then served from the cache as a client's.
#[test]
fn documented_mac_is_accepted_and_stale_or_wrong_ones_are_not() {
    let origin = start_origin();
    let secret = "peers-test-secret-0123456789abcdef0123456789";
    let path = owned_by_a();
    let cache = CacheConfig::new(&origin)
        .cache("honour_request_cache_control = false")
        .route("slice_bytes = 0")
        .extra(&format!(
            "[cluster]\nself = \"a\"\n\
             peers = [{{ name = \"a\", address = \"127.0.0.1:1\" }}, {{ name = \"b\", address = \"127.0.0.2:1\" }}]\n\
             secret = {secret:?}\nprevious_owner_window_s = 0"
        ))
        .start();
    let addr = cache.server.addr;
    let admin = cache.server.admin_addr();
    let target = format!("http://test{path}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let fields = [("Cache-Control", "no-cache")];
    let send = |peer: &str| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nCache-Control: no-cache\r\nLinerate-Peer: {peer}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        read_response(&mut s, false).unwrap().status
    };
    let sign_for = |secret: &str, recipient: &str, t: u64| {
        sign_as_documented(
            secret,
            "b",
            recipient,
            t,
            "GET",
            &target,
            Some("test"),
            &fields,
        )
    };
    let sign = |secret: &str, t: u64| sign_for(secret, "a", t);
    assert_eq!(send(&sign(secret, now)), 200);
    assert_eq!(origin.total(), 1);
    assert_eq!(send(&sign(secret, now)), 200, "a peer's no-cache is obeyed");
    assert_eq!(origin.total(), 2);
    assert_eq!(
        metric(admin, "linerate_cluster_hop_requests_received_total"),
        2
    );
    assert_eq!(send(&sign(secret, now - 120)), 200);
    let other = "another-secret-0123456789abcdef0123456789";
    assert_eq!(send(&sign(other, now)), 200);
    // Signed for another node (captured on its way to "c", replayed here): refused.
    assert_eq!(send(&sign_for(secret, "c", now)), 200);
    assert_eq!(
        origin.total(),
        2,
        "refused: a client's no-cache is not obeyed"
    );
    for (reason, n) in [("stale", 1), ("bad_mac", 2)] {
        let series = format!("linerate_cluster_peer_auth_failures_total{{reason=\"{reason}\"}}");
        assert_eq!(metric(admin, &series), n, "{reason}");
    }
    // A peer asking for an HTTPS client's object (absolute form `https://`, over the
    // plain peer connection): keyed and forwarded as https, so the origin sees that
    // client's `X-Forwarded-Proto` (it used to be keyed as http and sent `http`, and an
    // origin redirecting http to https got its 301 stored under the asker's https key).
    let proto = |i: usize| {
        origin.requests()[i]
            .header("x-forwarded-proto")
            .map(str::to_owned)
    };
    assert_eq!(proto(1).as_deref(), Some("http"));
    let https_target = format!("https://test{path}");
    let signed_https = sign_as_documented(
        secret,
        "b",
        "a",
        now,
        "GET",
        &https_target,
        Some("test"),
        &fields,
    );
    let send_to = |target: &str, peer: &str| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nCache-Control: no-cache\r\nLinerate-Peer: {peer}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        read_response(&mut s, false).unwrap().status
    };
    assert_eq!(send_to(&https_target, &signed_https), 200);
    assert_eq!(origin.total(), 3);
    assert_eq!(proto(2).as_deref(), Some("https"));
    // A client's `https://` target on a plain listener is still an http request: the
    // object stored above as http answers it, and no origin request is made.
    assert_eq!(send_to(&https_target, "b"), 200);
    assert_eq!(origin.total(), 3);
    origin.assert_no_panics();
}
