//! deploy/kubernetes on simulated pods: the ConfigMap's `linerate.toml` as shipped,
//! run by three `linerate` processes, each in a network namespace of its own (a pod's
//! network), with `POD_NAME` set as the StatefulSet sets it, and the pod's
//! `/etc/resolv.conf` as the kubelet writes it (a search list for namespace `video`,
//! `ndots:5`; `ip netns exec` mounts `/etc/netns/<ns>/resolv.conf` over it) naming a
//! real DNS server (dnsmasq) that answers as CoreDNS does for the headless Service
//! `linerate-peers`. Only what a volume or a Service provides in a cluster is mapped:
//! the Secret's mount point and the cache volume to temporary directories, the origin
//! Service to the test's counting origin.
//!
//! - `configmap_forms_one_cache`: the three form one cache (one origin request per
//!   object whichever pod is asked; a pod that does not own an object, by the pods'
//!   names, gets it from its owner), and each
//!   answers the probes the StatefulSet uses (`/ready`, `/live`).
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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use support::dns::Dns;
use support::netns::Net;
use support::origin::{self, Origin, Request};
use support::Server;

/// The namespace the simulated StatefulSet runs in.
const NAMESPACE: &str = "video";
/// The host clients ask for.
const HOST: &str = "video.test";

/// The ConfigMap's `linerate.toml`, as kubectl would mount it.
fn shipped_config() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/configmap.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "linerate.toml: |");
    assert!(
        lines.next().is_some(),
        "no linerate.toml in {}",
        path.display()
    );
    let mut out = String::new();
    for line in lines {
        if line.trim().is_empty() {
            out.push('\n');
            continue;
        }
        let Some(rest) = line.strip_prefix("    ") else {
            break;
        };
        out.push_str(rest);
        out.push('\n');
    }
    out
}

/// `text` with `from` replaced by `to`, which must occur (the test says when the
/// manifest moved a path it maps).
fn map(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the ConfigMap no longer has {from:?}");
    text.replace(from, to)
}

/// A pod's `/etc/resolv.conf` in namespace `ns`, for the kubelet's DNS policy
/// `ClusterFirst`; removed on drop.
struct ResolvConf(PathBuf);

impl ResolvConf {
    fn write(netns: &str, nameserver: &str) -> ResolvConf {
        let dir = PathBuf::from("/etc/netns").join(netns);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("resolv.conf"),
            format!(
                "search {NAMESPACE}.svc.cluster.local svc.cluster.local cluster.local\n\
                 nameserver {nameserver}\noptions ndots:5\n"
            ),
        )
        .unwrap();
        ResolvConf(dir)
    }
}

impl Drop for ResolvConf {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

/// The rank order of pods `0..n` for `path` (the owner first): of its first slice's
/// key, as the ConfigMap's route slices (the default).
fn ranked(n: usize, path: &str) -> Vec<usize> {
    let names: Vec<String> = (0..n).map(|i| format!("linerate-{i}")).collect();
    let nodes: Vec<(&str, f64)> = names.iter().map(|n| (n.as_str(), 1.0)).collect();
    let key = linerate_http::cache::key::slice(format!("http://{HOST}{path}").as_bytes(), 0);
    linerate_server::cluster_rank(&nodes, &key)
}

#[test]
fn configmap_forms_one_cache() {
    let mut net = Net::new();
    let paths: Vec<String> = (0..24).map(|k| format!("/v/seg{k}.m4s")).collect();
    let objects: BTreeMap<String, Arc<Vec<u8>>> = paths
        .iter()
        .enumerate()
        .map(|(k, p)| (p.clone(), Arc::new(support::content(32 * 1024, k as u64))))
        .collect();
    let served = objects.clone();
    let origin = Origin::start_on(&format!("{}:0", net.origin_ip()), move |req: &Request| {
        let Some(body) = served.get(req.path()) else {
            return origin::status(404, &[]);
        };
        origin::ranged(
            body.clone(),
            &[("ETag", "\"v1\""), ("Cache-Control", "max-age=3600")],
        )
    });
    let pods = 3;
    let records: Vec<(String, SocketAddr)> = (0..pods)
        .map(|i| {
            (
                format!("linerate-{i}"),
                format!("{}:8080", net.node_ip(i)).parse().unwrap(),
            )
        })
        .collect();
    let _dns = Dns::start_for(
        format!("{}:53", net.origin_ip()).parse().unwrap(),
        &format!("linerate-peers.{NAMESPACE}.svc.cluster.local"),
        &records,
    );
    let shipped = shipped_config();
    // The Secret, as its volume shows it.
    let secret = tempfile::tempdir().unwrap();
    std::fs::write(
        secret.path().join("admin-token"),
        "simulated-admin-token-0123456789",
    )
    .unwrap();
    std::fs::write(
        secret.path().join("cluster.key"),
        "simulated-cluster-key-0123456789abcdef",
    )
    .unwrap();
    let mut servers = Vec::new();
    let mut resolv = Vec::new();
    let mut volumes = Vec::new();
    for i in 0..pods {
        let ns = net.add_node(i);
        resolv.push(ResolvConf::write(&ns, &net.origin_ip()));
        let volume = tempfile::tempdir().unwrap();
        let mut text = map(
            &shipped,
            "/etc/linerate-secret/",
            &format!("{}/", secret.path().display()),
        );
        text = map(
            &text,
            "/var/cache/linerate/",
            &format!("{}/", volume.path().display()),
        );
        text = map(&text, "\"http://origin\"", &format!("\"{}\"", origin.url()));
        volumes.push(volume);
        let pod = format!("linerate-{i}");
        servers.push(Server::start_text_in(
            &text,
            &[("POD_NAME", &pod)],
            Some(&ns),
        ));
    }
    let addr = |i: usize| -> SocketAddr { format!("{}:8080", net.node_ip(i)).parse().unwrap() };
    let admin = |i: usize| -> SocketAddr { format!("{}:9090", net.node_ip(i)).parse().unwrap() };
    for i in 0..pods {
        support::eventually(&format!("linerate-{i} sees {pods} members"), || {
            let mut s = TcpStream::connect_timeout(&admin(i), Duration::from_secs(5)).unwrap();
            write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                admin(i)
            )
            .unwrap();
            let text = String::from_utf8_lossy(&support::read_to_close(&mut s)).into_owned();
            support::value(&text, "linerate_cluster_members") == Some(pods as f64)
        });
        for probe in ["/ready", "/live"] {
            let mut s = TcpStream::connect_timeout(&admin(i), Duration::from_secs(5)).unwrap();
            write!(
                s,
                "GET {probe} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                admin(i)
            )
            .unwrap();
            let r = support::read_response(&mut s, false).unwrap();
            assert_eq!(r.status, 200, "{probe} at linerate-{i}");
        }
    }
    // One cache: each object once at a pod chosen by the object. The pods agree on
    // each object's owner, by their names: a pod that owns it fills it (one `Via`
    // entry), any other gets it from the owner (two). Then each object at every pod:
    // still one origin request per object.
    for (k, p) in paths.iter().enumerate() {
        let at = k % pods;
        let (status, via, body) = get(addr(at), p);
        assert_eq!(status, 200);
        assert!(body == *objects[p], "{p}: body differs");
        let hops = if ranked(pods, p)[0] == at { 1 } else { 2 };
        assert_eq!(
            via.split(',').count(),
            hops,
            "{p} at linerate-{at}: Via {via}"
        );
    }
    assert_eq!(origin.total(), paths.len(), "{:?}", origin.requests());
    for p in &paths {
        for i in 0..pods {
            assert!(get(addr(i), p).2 == *objects[p]);
        }
    }
    assert_eq!(origin.total(), paths.len(), "{:?}", origin.requests());
    drop(servers);
    origin.assert_no_panics();
}
