//! A real DNS server for the discovery tests: Debian's dnsmasq (`dnsmasq-base`;
//! scripts/test.sh installs it), answering over UDP and TCP on one address the test
//! chose, with the SRV and A records of a Kubernetes headless Service: for each node,
//! `_http._tcp.<SERVICE>` → `<node>.<SERVICE_HOST>` at the node's port, and that
//! target's A record. Only that zone is answered (`--local`: anything else is
//! NXDOMAIN, nothing is forwarded). Stopped on drop.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The headless Service's domain (what a pod's FQDN ends in).
pub const SERVICE_HOST: &str = "linerate.video.svc.cluster.local";
/// The SRV name `peers_dns` names.
pub const SERVICE: &str = "_http._tcp.linerate.video.svc.cluster.local";

/// One dnsmasq process.
pub struct Dns {
    child: Option<Child>,
    /// Where it answers.
    pub addr: SocketAddr,
}

impl Dns {
    /// Answer at `addr` for `nodes` (`name`, `ip:port`) as the Service [`SERVICE_HOST`].
    pub fn start(addr: SocketAddr, nodes: &[(String, SocketAddr)]) -> Dns {
        Dns::start_for(addr, SERVICE_HOST, nodes)
    }

    /// Answer at `addr` for `nodes` as the headless Service whose domain is `host`
    /// (`<service>.<namespace>.svc.cluster.local`): SRV `_http._tcp.<host>`.
    pub fn start_for(addr: SocketAddr, host: &str, nodes: &[(String, SocketAddr)]) -> Dns {
        let mut cmd = Command::new("dnsmasq");
        cmd.args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--no-poll",
            "--bind-interfaces",
            "--user=root",
            "--pid-file=",
            "--local-ttl=0",
            "--log-facility=-",
        ]);
        cmd.arg(format!("--listen-address={}", addr.ip()));
        cmd.arg(format!("--port={}", addr.port()));
        cmd.arg("--local=/cluster.local/");
        for (name, at) in nodes {
            let target = format!("{name}.{host}");
            cmd.arg(format!(
                "--srv-host=_http._tcp.{host},{target},{},0,100",
                at.port()
            ));
            cmd.arg(format!("--host-record={target},{}", at.ip()));
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot run dnsmasq ({e}): the discovery tests need Debian's dnsmasq-base (scripts/test.sh installs it)")
        });
        let dns = Dns {
            child: Some(child),
            addr,
        };
        dns.wait_listening();
        dns
    }

    /// Wait until it answers over TCP (it binds UDP and TCP together).
    fn wait_listening(&self) {
        for _ in 0..100 {
            if std::net::TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("dnsmasq did not listen on {}", self.addr);
    }

    /// Stop answering (SIGSTOP: queries go unanswered, as from a dead server).
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Answer again (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        if let Some(c) = &self.child {
            let ok = Command::new("kill")
                .args([format!("-{name}"), c.id().to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill -{name} dnsmasq");
        }
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
