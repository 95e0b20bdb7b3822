//! Network namespaces for multi-node tests: a hub namespace with a bridge, a veth from
//! the test's own namespace to it (origins, clients and test servers such as DNS live
//! there, at `prefix.254`), and one namespace per node (`prefix.(i+1)`). Needs root and
//! iproute2 (`ip netns`).

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT_NET: AtomicUsize = AtomicUsize::new(0);

/// Run `ip` with `args`; panics with its stderr.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!("cannot run `ip` ({e}): the cluster tests need iproute2 and root (scripts/test.sh installs iproute2)")
    });
    assert!(
        out.status.success(),
        "ip {}: {} (the cluster tests need root and network namespaces)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The namespaces of one test: a hub with a bridge, a veth from the test's namespace
/// to it (the origin's and clients' side), and one namespace per node. Deleted on drop.
pub struct Net {
    pub tag: String,
    /// `10.x.y` of this net's /24.
    pub prefix: String,
    pub nodes: Vec<String>,
}

impl Net {
    pub fn new() -> Net {
        let n = NEXT_NET.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let tag = format!("lrc{}x{n}", pid % 100_000);
        let prefix = format!("10.{}.{}", 100 + pid % 100, 10 + n);
        let net = Net {
            tag,
            prefix,
            nodes: Vec::new(),
        };
        let hub = net.hub();
        ip(&["netns", "add", &hub]);
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &hub, "link", "set", "br0", "up"]);
        let outer = format!("{}o", net.tag);
        ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", "o0", "netns", &hub,
        ]);
        ip(&["-n", &hub, "link", "set", "o0", "master", "br0", "up"]);
        ip(&[
            "addr",
            "add",
            &format!("{}.254/24", net.prefix),
            "dev",
            &outer,
        ]);
        ip(&["link", "set", &outer, "up"]);
        net
    }

    pub fn hub(&self) -> String {
        format!("{}h", self.tag)
    }

    /// Add node `i`'s namespace (address `prefix.(i+1)`); returns its name.
    pub fn add_node(&mut self, i: usize) -> String {
        let ns = format!("{}n{i}", self.tag);
        let hub = self.hub();
        let port = format!("p{i}");
        ip(&["netns", "add", &ns]);
        self.nodes.push(ns.clone());
        ip(&[
            "-n", &hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ]);
        ip(&["-n", &hub, "link", "set", &port, "master", "br0", "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{}.{}/24", self.prefix, i + 1),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ns
    }

    pub fn node_ip(&self, i: usize) -> String {
        format!("{}.{}", self.prefix, i + 1)
    }

    pub fn origin_ip(&self) -> String {
        format!("{}.254", self.prefix)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain([&self.hub()]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        // Gone with the hub already (its peer was there); this is for a half-built net.
        let _ = Command::new("ip")
            .args(["link", "del", &format!("{}o", self.tag)])
            .stderr(std::process::Stdio::null())
            .status();
    }
}
