//! Cache mode with an https origin: certificate verification against the configured CA,
//! end to end. The origin is linerate itself in appliance mode with a TLS listener and a
//! throw-away certificate for `localhost`; the cache in front of it trusts that
//! certificate through `ca_file` (and, in the second case, a different one).
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]

mod support;
mod tlssupport;

use support::kit::{Cache, CacheConfig};
use support::{content, library, Server};
use tlssupport::{https_addr, tls_section, TestCert};

/// A cache-mode server whose only origin is `https://localhost:PORT`, trusting `ca`.
fn cache_in_front(port: u16, ca: &std::path::Path) -> Cache {
    CacheConfig::for_url(&format!("https://localhost:{port}"))
        .server("workers = 1")
        .origin(&format!("ca_file = {:?}", ca.to_str().unwrap()))
        .start()
}

#[test]
fn https_origin_is_verified_against_the_configured_ca() {
    let body = content(500_000, 21);
    let lib = library(&[("seg.m4s", &body)]);
    let cert = TestCert::new(&["localhost"]);
    let origin = Server::start(
        lib.path(),
        &tls_section("", &[cert.toml(&["localhost"], true)]),
    );
    let port = https_addr(&origin.log).port();

    // Trusting the origin's certificate: a miss fetched over TLS, then a hit.
    let cache = cache_in_front(port, &cert.chain);
    let first = cache.get("/seg.m4s", &[]);
    assert_eq!(first.status, 200);
    assert!(first.body == body);
    let cs = first.header("cache-status").unwrap().to_owned();
    assert!(cs.contains("fwd=uri-miss"), "{cs}");
    let second = cache.get("/seg.m4s", &[]);
    assert!(second.body == body);
    assert!(second.header("cache-status").unwrap().contains("hit"));
    cache.stop();

    // Trusting another certificate: the handshake fails verification, 502 with a
    // detail, and nothing is fetched or stored.
    let other = TestCert::new(&["localhost"]);
    let cache = cache_in_front(port, &other.chain);
    let r = cache.get("/seg.m4s", &[]);
    assert_eq!(r.status, 502);
    let cs = r.header("cache-status").unwrap().to_owned();
    assert!(cs.contains("detail=\"tls\""), "{cs}");
    cache.stop();
    origin.stop();
}
