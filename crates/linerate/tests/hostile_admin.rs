//! End to end, issue 19 finding 4: the admin API against a hostile client. A web page
//! that rebinds its own name to the admin address gets `421` for every path (the API
//! answers only to the address a connection was accepted on, loopback names and
//! `admin.allowed_hosts`); the token is never printed (`check-config`, start-up and
//! reload errors); `token_file` is read at start and on reload; `POST /upgrade?binary=`
//! is refused unless `admin.allow_upgrade_binary`; the `Bearer` scheme is
//! case-insensitive; refused calls are logged with the client's address, a bounded
//! number a second. The `accepted address` case runs the server in a network namespace
//! this test creates (needs root and iproute2, like tests/cluster.rs).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{binary, eventually, library, read_to_close, Server};

const TOKEN: &str = "first-token-0123456789";
const ROTATED: &str = "second-token-9876543210";

/// One raw admin request: (status, body).
fn call(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let out = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    (status, body.to_owned())
}

/// `method path` with this `Host` (and extra field lines, each ending in CRLF).
fn with_host(addr: SocketAddr, method: &str, path: &str, host: &str, extra: &str) -> u16 {
    let req =
        format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n");
    call(addr, &req).0
}

/// The server's log lines that contain `needle`.
fn lines(srv: &Server, needle: &str) -> Vec<String> {
    let log = srv.log.lock().unwrap();
    log.iter().filter(|l| l.contains(needle)).cloned().collect()
}

/// Guards the DNS-rebinding defence: before it, `Host: evil.example` read `/metrics`
/// and `/stats.json` (200) and a command with the token ran.
#[test]
fn the_admin_api_answers_only_to_its_own_names() {
    let lib = library(&[("a.ts", b"A")]);
    let srv = Server::start(
        lib.path(),
        &format!(
            "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\nallowed_hosts = [\"admin.test\"]\n"
        ),
    );
    let a = srv.admin_addr();
    let port = a.port();
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    for path in [
        "/metrics",
        "/stats.json",
        "/health",
        "/ready",
        "/",
        "/fill/jobs",
    ] {
        for host in [
            "evil.example".to_owned(),
            format!("evil.example:{port}"),
            "127.0.0.1.evil.example".to_owned(),
            format!("admin.test.evil.example:{port}"),
        ] {
            assert_eq!(with_host(a, "GET", path, &host, ""), 421, "{path} {host}");
        }
    }
    // A command with the right token, but through a rebound name: refused, and nothing
    // changes (still serving).
    assert_eq!(with_host(a, "POST", "/drain", "evil.example", &auth), 421);
    // An absolute-form target's authority replaces Host (RFC 9112 §3.2.2).
    let absolute = format!(
        "GET http://evil.example/metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(call(a, &absolute).0, 421);
    let (status, body) = call(
        a,
        "GET /metrics HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    );
    assert!(status == 421 && body.contains("allowed_hosts"), "{body}");
    // Its own address, loopback names (port ignored), an allowed name, no Host (1.0).
    for host in [
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_owned(),
        format!("localhost:{port}"),
        "LocalHost".to_owned(),
        "[::1]:9090".to_owned(),
        format!("admin.test:{port}"),
        "ADMIN.TEST".to_owned(),
    ] {
        for path in ["/metrics", "/stats.json", "/health"] {
            assert_eq!(with_host(a, "GET", path, &host, ""), 200, "{path} {host}");
        }
    }
    assert_eq!(call(a, "GET /stats.json HTTP/1.0\r\n\r\n").0, 200);
    let (status, body) = call(
        a,
        "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert!(status == 200 && body.contains("serving"), "{body}");
    // The CLI sends the address it calls as Host.
    let out = Command::new(binary())
        .args(["stats", "--once", "--admin", &a.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each refusal is logged with the client's address (the log is read by a thread:
    // the line may arrive after the response).
    let logged = |l: &String| {
        l.contains("peer=127.0.0.1:") && l.contains("host_not_allowed") && l.contains("status=421")
    };
    eventually("the refusal logged", || {
        lines(&srv, "admin call refused").iter().any(logged)
    });
}

/// Guards the accepted-address rule and the CLI: a server whose admin listener is on a
/// non-loopback address (a pod IP) answers requests naming that address (a Kubernetes
/// probe, a Prometheus scrape, `linerate stats`), and still refuses other names.
#[test]
fn the_address_a_connection_was_accepted_on_is_its_own_name() {
    let ns = format!("lr-adm-{}", std::process::id());
    let ip = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
            panic!("cannot run `ip` ({e}): this test needs iproute2 and root (scripts/test.sh installs iproute2)")
        });
        assert!(
            out.status.success(),
            "ip {}: {} (this test needs root and network namespaces)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    struct Ns(String);
    impl Drop for Ns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    ip(&["netns", "add", &ns]);
    let _ns = Ns(ns.clone());
    ip(&["-n", &ns, "link", "set", "lo", "up"]);
    // A non-loopback address (a pod IP) on the namespace's own loopback device.
    ip(&["-n", &ns, "addr", "add", "10.77.0.1/32", "dev", "lo"]);
    let lib = library(&[("a.ts", b"A")]);
    let text = format!(
        "[admin]\nlisten = \"10.77.0.1:9090\"\n[server]\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\n[appliance]\nroot = {:?}\n",
        lib.path().to_str().unwrap()
    );
    let srv = Server::start_text_in(&text, &[], Some(&ns));
    // A raw request from inside the namespace (bash's /dev/tcp), its status line.
    let status_for = |host: &str| -> String {
        let script = format!(
            "exec 3<>/dev/tcp/10.77.0.1/9090; printf 'GET /metrics HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n' >&3; head -n1 <&3"
        );
        let out = Command::new("ip")
            .args(["netns", "exec", &ns, "bash", "-c", &script])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(status_for("10.77.0.1:9090"), "HTTP/1.1 200 OK");
    assert_eq!(status_for("10.77.0.1"), "HTTP/1.1 200 OK");
    assert_eq!(
        status_for("10.77.0.2:9090"),
        "HTTP/1.1 421 Misdirected Request"
    );
    assert_eq!(
        status_for("pod.evil.example"),
        "HTTP/1.1 421 Misdirected Request"
    );
    let out = Command::new("ip")
        .args(["netns", "exec", &ns])
        .arg(binary())
        .args(["stats", "--once", "--admin", "10.77.0.1:9090"])
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("mode serving"),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(srv.stop().success());
}

/// Guards `token_file` (new: before it, the key was unknown and the server refused to
/// start), its re-reading on reload, and the case-insensitive `Bearer` scheme (before:
/// `bearer TOKEN` got 401).
#[test]
fn token_file_is_read_on_start_and_on_reload_and_bearer_is_case_insensitive() {
    let lib = library(&[("a.ts", b"A")]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin-token");
    // A Kubernetes Secret written with `echo`: the trailing newline is not the token's.
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let srv = Server::start(
        lib.path(),
        &format!(
            "[admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = {:?}\n",
            file.to_str().unwrap()
        ),
    );
    let a = srv.admin_addr();
    let host = a.to_string();
    let reopen = |auth: &str| {
        with_host(
            a,
            "POST",
            "/reopen-logs",
            &host,
            &format!("Authorization: {auth}\r\n"),
        )
    };
    assert_eq!(reopen(&format!("Bearer {TOKEN}")), 200);
    assert_eq!(reopen(&format!("bearer {TOKEN}")), 200);
    assert_eq!(reopen(&format!("BEARER {TOKEN}")), 200);
    assert_eq!(reopen(&format!("Bearer {ROTATED}")), 401);
    // Rotated: the reload reads the file again.
    std::fs::write(&file, ROTATED).unwrap();
    srv.signal("HUP");
    eventually("reloaded", || srv.logged("configuration reloaded"));
    assert_eq!(reopen(&format!("Bearer {TOKEN}")), 401);
    assert_eq!(reopen(&format!("bEaReR {ROTATED}")), 200);
    assert!(srv.stop().success());
}

/// Guards "never print a secret": before, `check-config` printed `admin.token`, and an
/// invalid token's line was quoted in the start-up error, the reload log and the
/// `POST /reload` answer.
#[test]
fn the_token_never_reaches_check_config_or_the_logs() {
    let lib = library(&[("a.ts", b"A")]);
    let root = format!("[appliance]\nroot = {:?}\n", lib.path().to_str().unwrap());
    // check-config: the effective configuration, the token's length only.
    let mut good = tempfile::NamedTempFile::new().unwrap();
    write!(
        good,
        "{root}[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"
    )
    .unwrap();
    let out = Command::new(binary())
        .arg("check-config")
        .arg(good.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains(TOKEN), "{stdout}");
    assert!(
        stdout.contains(&format!("token = \"<redacted: {} bytes>\"", TOKEN.len())),
        "{stdout}"
    );
    // An invalid token (a space in it; not a string; unquoted): check-config and a
    // start both fail without quoting it.
    let bad_secret = "leaky secret value 12345";
    for bad in [
        format!("token = \"{bad_secret}\""),
        format!("token = {}", bad_secret.replace(' ', "-")),
        "token = 3141592653589793".to_owned(),
    ] {
        let text = format!("{root}[admin]\nlisten = \"127.0.0.1:0\"\n{bad}\n");
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        let out = Command::new(binary())
            .arg("check-config")
            .arg(f.path())
            .output()
            .unwrap();
        let serve = Command::new(binary())
            .args(["serve", "--config"])
            .arg(f.path())
            .output()
            .unwrap();
        for (what, o) in [("check-config", &out), ("serve", &serve)] {
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(!o.status.success(), "{what} {bad}: {all}");
            assert!(all.contains("line 5"), "{what} {bad}: {all}");
            for leak in ["leaky", "12345", "3141592653589793"] {
                assert!(!all.contains(leak), "{what} {bad}: {all}");
            }
        }
    }
    // A running server: a reload (SIGHUP and POST /reload) of a file with a bad token
    // is rejected, and neither the log nor the answer shows it.
    let srv = Server::start(
        lib.path(),
        &format!("[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"),
    );
    let a = srv.admin_addr();
    let config = std::fs::read_to_string(srv.config_path()).unwrap();
    let bad = config.replace(TOKEN, bad_secret);
    std::fs::write(srv.config_path(), &bad).unwrap();
    srv.signal("HUP");
    eventually("rejected", || srv.logged("reload rejected"));
    let (status, body) = call(
        a,
        &format!("POST /reload HTTP/1.1\r\nHost: {a}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("secret") && !body.contains("leaky"), "{body}");
    // The old token still works; then a rejected token file names the file only.
    let tf = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tf.path(), "leaky-short\n").unwrap();
    let with_file = config.replace(
        &format!("token = \"{TOKEN}\""),
        &format!("token_file = {:?}", tf.path().to_str().unwrap()),
    );
    std::fs::write(srv.config_path(), with_file).unwrap();
    let (status, body) = call(
        a,
        &format!("POST /reload HTTP/1.1\r\nHost: {a}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"),
    );
    assert!(status == 422 && body.contains("token_file"), "{body}");
    assert!(!body.contains("leaky"), "{body}");
    let log = srv.log.lock().unwrap().join("\n");
    for leak in [TOKEN, "leaky"] {
        assert!(!log.contains(leak), "{log}");
    }
}

/// Guards `POST /upgrade?binary=`: before, the token's holder could start any program
/// (here `/bin/true`, which the server started and waited for: 500); now 403 unless
/// `admin.allow_upgrade_binary = true`, the refusal logged with the client's address.
#[test]
fn upgrade_to_another_binary_is_off_by_default() {
    let lib = library(&[("a.ts", b"A")]);
    let srv = Server::start(
        lib.path(),
        &format!("[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"),
    );
    let a = srv.admin_addr();
    let (status, body) = call(
        a,
        &format!("POST /upgrade?binary=/bin/true HTTP/1.1\r\nHost: {a}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("allow_upgrade_binary"), "{body}");
    // The log is read by a thread: wait for the refusal's line, then check nothing
    // logged before it said the upgrade started.
    eventually("the refusal logged", || {
        lines(&srv, "admin call refused")
            .iter()
            .any(|l| l.contains("upgrade_binary_off") && l.contains("peer=127.0.0.1:"))
    });
    assert!(!srv.logged("upgrade requested"));
    // The CLI's `--binary` gets the same answer and says so.
    let out = Command::new(binary())
        .args([
            "upgrade",
            "--admin",
            &a.to_string(),
            "--token",
            TOKEN,
            "--binary",
            "/bin/true",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("403") && stderr.contains("allow_upgrade_binary"),
        "{stderr}"
    );
    assert!(srv.stop().success());
}

/// Guards the bound on refusal log lines: a client guessing tokens as fast as it can
/// gets at most 10 lines a second in the log, and the next line logged says how many
/// were left out, so the count stays exact (before: no refusal was logged at all).
#[test]
fn refused_calls_are_logged_with_the_peer_at_a_bounded_rate() {
    let lib = library(&[("a.ts", b"A")]);
    let srv = Server::start(
        lib.path(),
        &format!("[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"),
    );
    let a = srv.admin_addr();
    let host = a.to_string();
    let started = Instant::now();
    for i in 0..200 {
        let status = with_host(
            a,
            "POST",
            "/drain",
            &host,
            &format!("Authorization: Bearer guess-{i:016}\r\n"),
        );
        assert_eq!(status, 401);
    }
    let seconds = started.elapsed().as_secs() + 1;
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(with_host(a, "POST", "/drain", &host, ""), 401);
    let count = |refused: &[String]| -> u64 {
        let suppressed: u64 = refused
            .iter()
            .map(|l| {
                l.split("suppressed=")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap()
            })
            .sum();
        refused.len() as u64 + suppressed
    };
    eventually("every refusal accounted for", || {
        count(&lines(&srv, "admin call refused")) == 201
    });
    let refused = lines(&srv, "admin call refused");
    assert!(
        refused.len() as u64 <= 10 * (seconds + 1),
        "{} lines in {seconds} s",
        refused.len()
    );
    assert!(refused
        .iter()
        .all(|l| l.contains("peer=127.0.0.1:") && l.contains("bad_token")));
    // Still serving: none of them drained it.
    assert_eq!(with_host(a, "GET", "/health", &host, ""), 200);
    assert!(srv.stop().success());
}
