//! The operator's side of the admin API: `linerate drain`, `linerate upgrade`,
//! `linerate purge` and `linerate stats` (a live
//! terminal view in the spirit of varnishstat/top). A minimal blocking HTTP/1.1 client:
//! one request per connection, read to close. No serving logic.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

/// How long an admin call may take (connect, send, read): the admin API answers from
/// memory, so a slow answer means a stuck server, which the operator should hear about.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long `linerate upgrade` waits for its answer: the server waits up to 30 s for
/// each step of the new process and 10 s for its store writes in flight (see the
/// server's `upgrade` module), so this covers the slowest outcome it can report.
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(120);

/// Largest admin answer read (the dashboard page is the biggest, under 64 KiB).
const MAX_ANSWER: u64 = 4 * 1024 * 1024;

/// Where the admin API is and how to authenticate.
#[derive(clap::Args)]
pub struct AdminArgs {
    /// Admin address. Default: `admin.listen` of `--config`, else 127.0.0.1:9090.
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Configuration file to take the admin address and token from.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Bearer token; default: `admin.token` of `--config` (which keeps it out of `ps`).
    #[arg(long)]
    token: Option<String>,
}

/// `linerate drain` options.
#[derive(clap::Args)]
pub struct DrainArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// Keep serving this many seconds before draining (while a load balancer, or
    /// Kubernetes' endpoints, stop sending new connections here). Default 0.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    delay_s: u64,
    /// After draining, wait while connections are open (responses in flight), at most
    /// this many seconds, and return as soon as none is (a preStop hook that waits only
    /// as long as needed). Default 0: return at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    wait_s: u64,
}

/// How often `drain --wait-s` looks at the open connections.
const DRAIN_POLL: Duration = Duration::from_millis(200);

/// `linerate upgrade` options.
#[derive(clap::Args)]
pub struct UpgradeArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// Start this binary instead of the one the server was started from (as it is on
    /// disk now).
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
}

/// How long `linerate purge` waits: in a cluster the node sends the purge to every
/// peer, each tried 3 times within its connect and first-byte timeouts.
const PURGE_TIMEOUT: Duration = Duration::from_secs(120);

/// `linerate purge` options: exactly one of `--url`, `--prefix`, `--tag`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["url", "prefix", "tag"])))]
pub struct PurgeArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// Remove one URL (its variants and slices), e.g. `http://host/path`; normalised
    /// as requests are.
    #[arg(long)]
    url: Option<String>,
    /// Remove every URL starting with this one.
    #[arg(long)]
    prefix: Option<String>,
    /// Remove every object tagged with this key (`[cache] tag_header`).
    #[arg(long)]
    tag: Option<String>,
    /// Mark stale (revalidated on next use) instead of removing; with `--url` or `--tag`.
    #[arg(long)]
    soft: bool,
}

/// `linerate stats` options.
#[derive(clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// Print one sample and exit (for scripts and tests).
    #[arg(long)]
    once: bool,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1)]
    interval: u64,
}

impl AdminArgs {
    pub(crate) fn resolve(&self) -> anyhow::Result<(SocketAddr, String)> {
        let config = match &self.config {
            Some(p) => Some(crate::config::Config::load(p)?),
            None => None,
        };
        let addr = match (self.admin, &config) {
            (Some(a), _) => a,
            (None, Some(c)) => c
                .admin
                .to_options()
                .listen
                .context("admin.listen is \"off\" in the configuration")?,
            (None, None) => linerate_server::operate::DEFAULT_ADMIN_LISTEN.parse()?,
        };
        // A server listening on every address (`0.0.0.0`, `::`) is called on loopback:
        // that is an address it was accepted on, so the admin API's `Host` check (which
        // refuses names it does not know, see docs/config.md) passes; `0.0.0.0` is not.
        let addr = match addr.ip() {
            std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, addr.port()))
            }
            std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port()))
            }
            _ => addr,
        };
        let token = match (&self.token, &config) {
            (Some(t), _) => t.clone(),
            (None, Some(c)) => c.admin.effective_token().expose().to_owned(),
            (None, None) => String::new(),
        };
        Ok((addr, token))
    }
}

/// One admin call; returns status and body.
fn call(addr: SocketAddr, method: &str, path: &str, token: &str) -> anyhow::Result<(u16, String)> {
    call_within(addr, method, path, token, b"", CALL_TIMEOUT)
}

/// One admin call sending `body`; returns status and body.
pub(crate) fn call_with_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: &[u8],
) -> anyhow::Result<(u16, String)> {
    call_within(addr, method, path, token, body, CALL_TIMEOUT)
}

/// One admin call sending `body`, waiting up to `timeout` for the answer.
fn call_within(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: &[u8],
    timeout: Duration,
) -> anyhow::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, CALL_TIMEOUT)
        .with_context(|| format!("admin API at {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(CALL_TIMEOUT))?;
    let auth = if token.is_empty() {
        String::new()
    } else {
        format!("Authorization: Bearer {token}\r\n")
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    let mut answer = Vec::new();
    s.take(MAX_ANSWER).read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("admin API: malformed answer")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("admin API: malformed status line")?;
    Ok((status, body.to_owned()))
}

/// `linerate drain`: after `--delay-s`, drain; then, with `--wait-s`, wait until no
/// connection is open (`linerate_connections_open` is 0) or the time is up. Exits 0
/// either way once drained (a preStop hook must not fail for a slow client); says
/// which.
pub fn drain(args: &DrainArgs) -> anyhow::Result<()> {
    let (addr, token) = args.admin.resolve()?;
    std::thread::sleep(Duration::from_secs(args.delay_s));
    let (status, body) = call(addr, "POST", "/drain", &token)?;
    if status != 200 {
        anyhow::bail!("drain refused ({status}): {}", body.trim());
    }
    println!("{}", body.trim());
    if args.wait_s == 0 {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let limit = Duration::from_secs(args.wait_s);
    loop {
        let open = open_connections(addr, &token)?;
        if open == 0 {
            println!(
                "no connection open after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if started.elapsed() >= limit {
            println!("{open} connections still open after {} s", args.wait_s);
            return Ok(());
        }
        std::thread::sleep(DRAIN_POLL);
    }
}

/// `linerate_connections_open` from the admin API's `/metrics`.
fn open_connections(addr: SocketAddr, token: &str) -> anyhow::Result<u64> {
    let (status, body) = call(addr, "GET", "/metrics", token)?;
    if status != 200 {
        anyhow::bail!("metrics refused ({status}): {}", body.trim());
    }
    body.lines()
        .find_map(|l| l.strip_prefix("linerate_connections_open "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .context("no linerate_connections_open in /metrics (is [admin] metrics off?)")
}

/// `linerate undrain`: serve again after a drain (`/ready` and `/health` back to 200).
pub fn undrain(args: &AdminArgs) -> anyhow::Result<()> {
    let (addr, token) = args.resolve()?;
    let (status, body) = call(addr, "POST", "/undrain", &token)?;
    if status != 200 {
        anyhow::bail!("undrain refused ({status}): {}", body.trim());
    }
    println!("{}", body.trim());
    Ok(())
}

/// `linerate upgrade`: the server starts the next process and hands over; exits 0 once
/// the new process serves, non-zero with the reason when it failed (the old one then
/// keeps serving).
pub fn upgrade(args: &UpgradeArgs) -> anyhow::Result<()> {
    let (addr, token) = args.admin.resolve()?;
    let path = match &args.binary {
        Some(b) => {
            let abs = std::path::absolute(b).with_context(|| format!("{}", b.display()))?;
            format!("/upgrade?binary={}", percent_encode(&abs.to_string_lossy()))
        }
        None => "/upgrade".to_owned(),
    };
    let (status, body) = call_within(addr, "POST", &path, &token, b"", UPGRADE_TIMEOUT)?;
    if status != 200 {
        anyhow::bail!("upgrade failed ({status}): {}", body.trim());
    }
    println!("{}", body.trim());
    Ok(())
}

/// `linerate purge`: prints the server's answer (JSON: the nodes that applied it and
/// those that have not); exits non-zero when it was refused, or when a node of the
/// cluster has not applied it yet (202; it applies it from a peer's log when back).
pub fn purge(args: &PurgeArgs) -> anyhow::Result<()> {
    let (addr, token) = args.admin.resolve()?;
    let (name, value) = match (&args.url, &args.prefix, &args.tag) {
        (Some(u), None, None) => ("url", u),
        (None, Some(p), None) => ("prefix", p),
        (None, None, Some(t)) => ("tag", t),
        _ => anyhow::bail!("give exactly one of --url, --prefix, --tag"),
    };
    let mut path = format!("/purge?{name}={}", percent_encode(value));
    if args.soft {
        path.push_str("&soft=1");
    }
    let (status, body) = call_within(addr, "POST", &path, &token, b"", PURGE_TIMEOUT)?;
    match status {
        200 => {
            println!("{}", body.trim());
            Ok(())
        }
        202 => {
            println!("{}", body.trim());
            anyhow::bail!("purge not yet applied on every node (see not_applied; they apply it from a peer's purge log when back)")
        }
        _ => anyhow::bail!("purge refused ({status}): {}", body.trim()),
    }
}

/// Percent-encode everything but unreserved characters and `/` (RFC 3986 §2.3).
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `linerate stats`.
pub fn stats(args: &StatsArgs) -> anyhow::Result<()> {
    let (addr, _) = args.admin.resolve()?;
    loop {
        let (status, body) = call(addr, "GET", "/stats.json", "")?;
        if status != 200 {
            anyhow::bail!("stats ({status}): {}", body.trim());
        }
        let view = render(&body);
        if args.once {
            print!("{view}");
            return Ok(());
        }
        // Clear the screen and home the cursor, like top.
        print!("\x1b[2J\x1b[H{view}");
        std::io::stdout().flush()?;
        std::thread::sleep(Duration::from_secs(args.interval.max(1)));
    }
}

/// A number field of a flat JSON document (the admin API's own output, so a tiny
/// scanner is enough; a missing field shows as 0).
fn field(json: &str, key: &str) -> f64 {
    let needle = format!("\"{key}\":");
    json.find(&needle)
        .map(|i| &json[i + needle.len()..])
        .and_then(|rest| {
            let end = rest.find([',', '}']).unwrap_or(rest.len());
            rest[..end].trim().parse().ok()
        })
        .unwrap_or(0.0)
}

fn text_field<'a>(json: &'a str, key: &str) -> &'a str {
    let needle = format!("\"{key}\":\"");
    json.find(&needle)
        .map(|i| &json[i + needle.len()..])
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("?")
}

fn human_bits(bytes_per_s: f64) -> String {
    let bits = bytes_per_s * 8.0;
    for (unit, scale) in [("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)] {
        if bits >= scale {
            return format!("{:.2} {unit}", bits / scale);
        }
    }
    format!("{bits:.0} b/s")
}

/// The text view of one `/stats.json` document.
fn render(json: &str) -> String {
    // Only cache mode lists origins; its ratio is null until a lookup happens.
    let cache_mode = json.contains("\"origins\":[");
    let hit = if json.contains("\"hit_ratio\":null") {
        if cache_mode {
            "n/a (no lookups yet)".to_owned()
        } else {
            "n/a (appliance)".to_owned()
        }
    } else {
        format!("{:.1}%", field(json, "hit_ratio") * 100.0)
    };
    let mut out = format!(
        "linerate  mode {}  uptime {:.0}s  workers {}\n\n\
throughput   {:>14}\nrequests/s   {:>14.1}\nhit ratio    {:>14}\n\
requests     {:>14}\nsent bytes   {:>14}\n\n\
connections  open {}  active {}  idle {}  parked {}\n\nworker  requests        sent bytes   throughput\n",
        text_field(json, "mode"),
        field(json, "uptime_s"),
        field(json, "workers"),
        human_bits(field(json, "bytes_per_s")),
        field(json, "requests_per_s"),
        hit,
        field(json, "requests_total"),
        field(json, "sent_bytes_total"),
        field(json, "open"),
        field(json, "active"),
        field(json, "idle"),
        field(json, "parked"),
    );
    if let Some(list) = json.split("\"per_worker\":[").nth(1) {
        for w in list.split("},{") {
            if !w.contains("\"worker\":") {
                continue;
            }
            out.push_str(&format!(
                "{:>6}  {:>8}  {:>16}  {:>11}\n",
                field(w, "worker"),
                field(w, "requests"),
                field(w, "sent_bytes"),
                human_bits(field(w, "bytes_per_s"))
            ));
        }
    }
    let disks = json
        .split("\"disks\":[")
        .nth(1)
        .and_then(|l| l.split(']').next())
        .unwrap_or("");
    if disks.trim().is_empty() {
        out.push_str("\ndisks        none (appliance mode)\n");
    } else {
        out.push_str("\n  disk  state            used bytes      capacity     objects\n");
        for d in disks.split("},{") {
            out.push_str(&format!(
                "{:>6}  {:<14}  {:>12}  {:>12}  {:>10}\n",
                text_field(d, "name"),
                text_field(d, "state"),
                field(d, "used_bytes"),
                field(d, "capacity_bytes"),
                field(d, "objects"),
            ));
        }
    }
    // Cache mode: segment prefetch, and per route that prefetches the share read.
    if let Some(p) = json.split("\"prefetch\":{").nth(1) {
        out.push_str(&format!(
            "\nprefetch     issued {}  used {}  wasted {}  skipped {}  dropped on switch {}\n",
            field(p, "issued"),
            field(p, "used"),
            field(p, "wasted"),
            field(p, "skipped"),
            field(p, "dropped_switch"),
        ));
        let routes = p.split("\"routes\":[").nth(1).unwrap_or("");
        for r in routes.split("},{").filter(|r| r.contains("\"route\":")) {
            let ratio = if r.contains("\"used_ratio\":null") {
                "n/a".to_owned()
            } else {
                format!("{:.1}%", field(r, "used_ratio") * 100.0)
            };
            out.push_str(&format!(
                "  route {} {}{}: {} of {} prefetches read\n",
                field(r, "route"),
                text_field(r, "host"),
                text_field(r, "path_prefix"),
                ratio,
                field(r, "issued"),
            ));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    /// A server listening on every address is called on loopback, which its admin API's
    /// `Host` check accepts (`0.0.0.0` is not one of its names); the token comes from
    /// `token_file` when the configuration names one.
    #[test]
    fn an_unspecified_admin_address_is_called_on_loopback_with_the_files_token() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "a-token-from-a-file-0123\n").unwrap();
        for (listen, want) in [
            ("0.0.0.0:9191", "127.0.0.1:9191"),
            ("[::]:9191", "[::1]:9191"),
            ("10.1.2.3:9191", "10.1.2.3:9191"),
        ] {
            let mut config = tempfile::NamedTempFile::new().unwrap();
            write!(
                config,
                "[admin]\nlisten = {listen:?}\ntoken_file = {:?}\n",
                token.to_str().unwrap()
            )
            .unwrap();
            let args = super::AdminArgs {
                admin: None,
                config: Some(config.path().to_owned()),
                token: None,
            };
            let (addr, t) = args.resolve().unwrap();
            assert_eq!(addr.to_string(), want);
            assert_eq!(t, "a-token-from-a-file-0123");
        }
    }

    #[test]
    fn renders_a_stats_document() {
        let doc = "{\"mode\":\"serving\",\"uptime_s\":3.0,\"workers\":2,\"requests_total\":5,\"sent_bytes_total\":100,\"requests_per_s\":2.0,\"bytes_per_s\":125000000,\"hit_ratio\":null,\"hit_ratio_total\":null,\"connections\":{\"open\":1,\"active\":0,\"idle\":1,\"parked\":0},\"per_worker\":[{\"worker\":0,\"requests\":3,\"sent_bytes\":60,\"bytes_per_s\":0,\"open\":1},{\"worker\":1,\"requests\":2,\"sent_bytes\":40,\"bytes_per_s\":0,\"open\":0}],\"disks\":[]}";
        let v = super::render(doc);
        assert!(v.contains("mode serving"), "{v}");
        assert!(v.contains("1.00 Gb/s"), "{v}");
        assert!(v.contains("n/a (appliance)"), "{v}");
        assert!(v.contains("     1         2"), "{v}");
        assert!(!v.contains("prefetch"), "{v}");
    }

    #[test]
    fn prefetch_routes_show_the_share_read() {
        let doc = "{\"mode\":\"serving\",\"per_worker\":[],\"disks\":[{\"name\":\"d0\",\"used_bytes\":5}],\"origins\":[],\"prefetch\":{\"issued\":8,\"used\":6,\"wasted\":1,\"skipped\":0,\"dropped_switch\":2,\"switches\":1,\"routes\":[{\"route\":0,\"host\":\"*\",\"path_prefix\":\"/v/\",\"issued\":8,\"used\":6,\"used_ratio\":0.7500},{\"route\":2,\"host\":\"a.example\",\"path_prefix\":\"/\",\"issued\":0,\"used\":0,\"used_ratio\":null}]}}";
        let v = super::render(doc);
        assert!(
            v.contains("prefetch     issued 8  used 6  wasted 1  skipped 0  dropped on switch 2"),
            "{v}"
        );
        assert!(
            v.contains("  route 0 */v/: 75.0% of 8 prefetches read"),
            "{v}"
        );
        assert!(
            v.contains("  route 2 a.example/: n/a of 0 prefetches read"),
            "{v}"
        );
    }
}
