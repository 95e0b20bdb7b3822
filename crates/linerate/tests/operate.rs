//! End to end: operating a running server through its admin API and signals. Exact
//! metric values after a known sequence of requests, health and drain with a download
//! in flight, admin error answers, the access log (formats, SIGUSR1 rotation, a log
//! directory that disappears), SIGHUP reload with a valid and an invalid file while a
//! client downloads, sampled TCP_INFO, and the `drain` (with `--delay-s`/`--wait-s`,
//! as a Kubernetes preStop hook runs it) and `stats` subcommands, and `/live`.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{binary, content, eventually, library, read_to_close, value, Server};

const TOKEN: &str = "test-token-0123456789";

/// One admin call: (status, body).
fn admin(addr: SocketAddr, method: &str, path: &str, extra: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}\r\n").unwrap();
    let out = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    (status, body.to_owned())
}

fn metrics(srv: &Server) -> String {
    let (status, body) = admin(srv.admin_addr(), "GET", "/metrics", "");
    assert_eq!(status, 200);
    body
}

#[test]
fn metrics_count_a_known_sequence_exactly() {
    let body = content(1000, 1);
    let lib = library(&[("a.ts", &body)]);
    let srv = Server::start(lib.path(), "");
    let mut sent = 0usize;
    for _ in 0..3 {
        sent += srv
            .raw(b"GET /a.ts HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .len();
    }
    sent += srv
        .raw(b"GET /nope.ts HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .len();
    sent += srv
        .raw(b"GET /a.ts HTTP/1.1\r\nHost: t\r\nRange: bytes=0-9\r\nConnection: close\r\n\r\n")
        .len();
    sent += srv
        .raw(b"HEAD /a.ts HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .len();
    sent += srv.raw(b"GARBAGE\r\n\r\n").len();
    let expect = [
        (
            "linerate_requests_total{status=\"2xx\",cache=\"local\"}",
            5.0,
        ),
        (
            "linerate_requests_total{status=\"4xx\",cache=\"local\"}",
            2.0,
        ),
        (
            "linerate_requests_total{status=\"5xx\",cache=\"local\"}",
            0.0,
        ),
        ("linerate_requests_total{status=\"2xx\",cache=\"hit\"}", 0.0),
        ("linerate_sent_bytes_total{path=\"sendfile\"}", sent as f64),
        ("linerate_sent_bytes_total{path=\"ktls\"}", 0.0),
        ("linerate_connections_accepted_total", 7.0),
        ("linerate_connections_open", 0.0),
        ("linerate_connections{state=\"active\"}", 0.0),
        (
            "linerate_connections_closed_total{reason=\"bad_request\"}",
            1.0,
        ),
        ("linerate_response_duration_seconds_count", 7.0),
    ];
    let deadline = Instant::now() + Duration::from_secs(10);
    let last = loop {
        let last = metrics(&srv);
        if expect.iter().all(|(k, v)| value(&last, k) == Some(*v)) {
            break last;
        }
        assert!(Instant::now() < deadline, "{expect:?}\n{last}");
        std::thread::sleep(Duration::from_millis(50));
    };
    // Per-worker series sum to the totals.
    let per_worker: f64 = (0..2)
        .map(|w| {
            value(
                &last,
                &format!("linerate_worker_requests_total{{worker=\"{w}\"}}"),
            )
            .unwrap()
        })
        .sum();
    assert_eq!(per_worker, 7.0);
    assert!(last.contains("# TYPE linerate_response_duration_seconds histogram"));
    assert_eq!(value(&last, "linerate_workers"), Some(2.0));
    assert!(srv.stop().success());
}

#[test]
fn admin_answers_bad_requests_without_changing_anything() {
    let lib = library(&[("a.ts", b"A")]);
    let srv = Server::start(lib.path(), "");
    let a = srv.admin_addr();
    // No token configured: commands are off.
    assert_eq!(admin(a, "POST", "/drain", "").0, 403);
    assert_eq!(admin(a, "GET", "/nowhere", "").0, 404);
    assert_eq!(admin(a, "DELETE", "/metrics", "").0, 405);
    assert_eq!(admin(a, "GET", "/drain", "").0, 405);
    let mut s = TcpStream::connect(a).unwrap();
    s.write_all(b"\x00\x01 not http\r\n\r\n").unwrap();
    let out = read_to_close(&mut s);
    assert!(
        out.starts_with(b"HTTP/1.1 400 "),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    let (status, body) = admin(a, "GET", "/health", "");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"status\":\"serving\"") && body.contains("\"draining\":false"));
    let (status, page) = admin(a, "GET", "/", "");
    assert_eq!(status, 200);
    assert!(page.contains("<canvas"), "dashboard is served");
    assert_eq!(srv.get("/a.ts", &[]).status, 200);
}

#[test]
fn drain_fails_health_refuses_new_connections_and_finishes_in_flight() {
    let big = content(32 * 1024 * 1024, 5);
    let lib = library(&[("big.mp4", &big)]);
    let extra = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n[timeouts]\nshutdown_grace_ms = 20000\n"
    );
    let srv = Server::start(lib.path(), &extra);
    let a = srv.admin_addr();
    // A download in flight, read slowly so it is still running during the drain.
    let mut dl = srv.connect();
    dl.write_all(b"GET /big.mp4 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = vec![0u8; 1024 * 1024];
    dl.read_exact(&mut first).unwrap();

    // Wrong or missing token: 401 and nothing changes.
    assert_eq!(admin(a, "POST", "/drain", "").0, 401);
    assert_eq!(
        admin(
            a,
            "POST",
            "/drain",
            "Authorization: Bearer wrong-token-0000000\r\n"
        )
        .0,
        401
    );
    assert_eq!(admin(a, "GET", "/health", "").0, 200);
    assert_eq!(srv.get("/big.mp4", &["Range: bytes=0-0"]).status, 206);

    // The drain subcommand, with the token on the command line.
    let out = Command::new(binary())
        .args(["drain", "--admin", &a.to_string(), "--token", TOKEN])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, body) = admin(a, "GET", "/health", "");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"draining\":true"), "{body}");
    // New connections are refused (listeners closed) ...
    eventually("listeners closed", || match TcpStream::connect(srv.addr) {
        Err(_) => true,
        Ok(mut s) => {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = s.write_all(b"GET /big.mp4 HTTP/1.1\r\nHost: t\r\n\r\n");
            read_to_close(&mut s).is_empty()
        }
    });
    // ... while the download in flight finishes, every byte.
    let rest = read_to_close(&mut dl);
    let head_end = first.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(first.len() - head_end + rest.len(), big.len());
    assert!(value(&metrics(&srv), "linerate_draining") == Some(1.0));
    assert!(srv.stop().success());
}

/// What a Kubernetes preStop hook (`linerate drain --delay-s N --wait-s M`, exec form)
/// relies on: the server keeps serving for the delay, then drains, and the command
/// returns as soon as the last response in flight is done (not after M seconds), while
/// `/live` (the liveness probe) stays 200 throughout, draining or not.
#[test]
fn drain_waits_only_while_requests_are_in_flight_and_live_stays_up() {
    let big = content(32 * 1024 * 1024, 6);
    let lib = library(&[("big.mp4", &big)]);
    let extra = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n[timeouts]\nshutdown_grace_ms = 60000\n"
    );
    let srv = Server::start(lib.path(), &extra);
    let a = srv.admin_addr();
    assert_eq!(admin(a, "GET", "/live", ""), (200, "alive\n".to_owned()));
    let mut dl = srv.connect();
    dl.write_all(b"GET /big.mp4 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = vec![0u8; 1024 * 1024];
    dl.read_exact(&mut first).unwrap();
    let started = Instant::now();
    let mut drain = Command::new(binary())
        .args(["drain", "--admin", &a.to_string(), "--token", TOKEN])
        .args(["--delay-s", "1", "--wait-s", "60"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    eventually("drained", || admin(a, "GET", "/health", "").0 == 503);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "drained before the delay"
    );
    assert_eq!(admin(a, "GET", "/live", "").0, 200, "live while draining");
    // The download is in flight: the command waits.
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        drain.try_wait().unwrap().is_none(),
        "returned with a response in flight"
    );
    let rest = read_to_close(&mut dl);
    let head_end = first.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(first.len() - head_end + rest.len(), big.len());
    drop(dl);
    // Done: it returns within a few polls, far before --wait-s.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = drain.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "drain still waiting with no connection open"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    let mut out = String::new();
    drain
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(out.contains("no connection open after"), "{out}");
    assert_eq!(admin(a, "GET", "/live", "").0, 200);
}

/// Drain is not one-way (issue 22): `linerate undrain` (admin `POST /undrain`) serves
/// again: new connections are answered, `/ready` and `/health` are 200, a drain after
/// it works as before, and a stop after that too.
#[test]
fn undrain_serves_again_after_a_drain() {
    let lib = library(&[("a.ts", b"AAAA")]);
    let extra = format!("[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n");
    let srv = Server::start(lib.path(), &extra);
    let a = srv.admin_addr();
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let refused = || match TcpStream::connect(srv.addr) {
        Err(_) => true,
        Ok(mut s) => {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = s.write_all(b"GET /a.ts HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            read_to_close(&mut s).is_empty()
        }
    };
    let cli = |cmd: &str| {
        Command::new(binary())
            .args([cmd, "--admin", &a.to_string(), "--token", TOKEN])
            .output()
            .unwrap()
    };
    for round in 0..2 {
        assert_eq!(admin(a, "POST", "/drain", &auth).0, 200, "round {round}");
        assert_eq!(admin(a, "GET", "/ready", "").0, 503);
        assert_eq!(admin(a, "GET", "/health", "").0, 503);
        eventually("new connections refused", refused);
        // Undrain without the token: refused, still draining.
        assert_eq!(admin(a, "POST", "/undrain", "").0, 401);
        assert_eq!(admin(a, "GET", "/ready", "").0, 503);
        let out = cli("undrain");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("serving"));
        let (status, body) = admin(a, "GET", "/ready", "");
        assert_eq!(status, 200, "{body}");
        let (status, body) = admin(a, "GET", "/health", "");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"draining\":false"), "{body}");
        eventually("answering again", || !refused());
        let r = srv.get("/a.ts", &[]);
        assert_eq!((r.status, r.body.as_slice()), (200, &b"AAAA"[..]));
        // A keep-alive connection idle long enough to be parked (1 s) is answered.
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        for _ in 0..2 {
            s.write_all(b"GET /a.ts HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            let r = support::read_response(&mut s, false).expect("answered");
            assert_eq!((r.status, r.body.as_slice()), (200, &b"AAAA"[..]));
            std::thread::sleep(Duration::from_millis(1500));
        }
    }
    // Undrain while serving changes nothing.
    assert_eq!(admin(a, "POST", "/undrain", &auth).0, 200);
    assert_eq!(srv.get("/a.ts", &[]).status, 200);
    assert!(value(&metrics(&srv), "linerate_draining") == Some(0.0));
    assert_eq!(admin(a, "POST", "/drain", &auth).0, 200);
    assert!(srv.stop().success());
}

#[test]
fn access_log_formats_rotation_and_a_vanished_directory() {
    let lib = library(&[("a.ts", b"AAAA")]);
    let logs = tempfile::tempdir().unwrap();
    let dir = logs.path().join("logs");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("access.log");
    let extra = format!(
        "[access_log]\npath = {:?}\nflush_ms = 50\n",
        path.to_str().unwrap()
    );
    let srv = Server::start(lib.path(), &extra);
    assert_eq!(
        srv.get("/a.ts", &["User-Agent: player/1.0", "Referer: http://r/x"])
            .status,
        200
    );
    assert_eq!(srv.get("/missing.ts", &[]).status, 404);
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    eventually("two lines", || read(&path).lines().count() == 2);
    let text = read(&path);
    let first = text.lines().find(|l| l.contains("/a.ts")).unwrap();
    assert!(first.starts_with("127.0.0.1 - - ["), "{first}");
    assert!(
        first.contains("\"GET /a.ts HTTP/1.1\" 200 ")
            && first.contains("\"http://r/x\" \"player/1.0\" cache=local dur_us="),
        "{first}"
    );
    assert!(text.contains("\"GET /missing.ts HTTP/1.1\" 404 "), "{text}");

    // Rotation: rename, SIGUSR1, and the next line goes to a new file.
    let rotated = dir.join("access.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    srv.signal("USR1");
    eventually("reopened", || srv.logged("reopening access logs"));
    // That line is logged before the workers act: wait until both workers (not a
    // fixed sleep, which a loaded machine outlasts) hold the new file open, and none
    // the rotated one.
    let open_on = |p: &std::path::Path| {
        std::fs::read_dir(format!("/proc/{}/fd", srv.pid()))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l == p)
            .count()
    };
    eventually("both workers reopened the log", || {
        open_on(&path) == 2 && open_on(&rotated) == 0
    });
    assert_eq!(srv.get("/a.ts", &[]).status, 200);
    eventually("line in the new file", || read(&path).lines().count() == 1);
    assert_eq!(read(&rotated).lines().count(), 2);

    // The directory goes away (a file in its place, so even root cannot write there):
    // serving continues, the failure is counted and logged.
    std::fs::rename(&dir, logs.path().join("gone")).unwrap();
    std::fs::write(&dir, b"not a directory").unwrap();
    srv.signal("USR1");
    eventually("open failure logged", || {
        srv.logged("cannot open the access log")
    });
    assert_eq!(srv.get("/a.ts", &[]).status, 200);
    eventually("dropped line counted", || {
        let m = metrics(&srv);
        value(&m, "linerate_access_log_errors_total").unwrap_or(0.0) >= 1.0
            && value(&m, "linerate_access_log_dropped_total").unwrap_or(0.0) >= 1.0
    });
    assert!(srv.stop().success());
}

#[test]
fn json_access_log_with_sampled_tcp_info_and_congestion_control() {
    let lib = library(&[("a.ts", b"AAAA")]);
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.json");
    let extra = format!(
        "[access_log]\npath = {:?}\nformat = \"json\"\nflush_ms = 50\n[tcp]\ncongestion = \"reno\"\ninfo_sample = 1.0\n",
        path.to_str().unwrap()
    );
    let srv = Server::start(lib.path(), &extra);
    let mut s = srv.connect();
    for _ in 0..3 {
        s.write_all(b"GET /a.ts HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(support::read_response(&mut s, false).unwrap().body, b"AAAA");
    }
    drop(s);
    eventually("three json lines", || {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .count()
            == 3
    });
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text.lines().next().unwrap();
    assert!(
        line.starts_with("{\"time\":\"") && line.ends_with('}'),
        "{line}"
    );
    assert!(
        line.contains("\"request\":\"GET /a.ts HTTP/1.1\",\"status\":200,\"bytes\":"),
        "{line}"
    );
    assert!(
        !line.contains("\"rtt_us\":null"),
        "sampled connections log their RTT: {line}"
    );
    assert!(
        line.contains("\"cc\":\"reno\""),
        "and the algorithm read back from the server's socket: {line}"
    );
    eventually("tcp histograms", || {
        let m = metrics(&srv);
        value(&m, "linerate_tcp_sampled_connections_total") == Some(1.0)
            && value(&m, "linerate_tcp_rtt_seconds_count") == Some(3.0)
            && value(&m, "linerate_tcp_congestion_window_segments_count") == Some(3.0)
            && value(&m, "linerate_tcp_retransmit_ratio_count") == Some(1.0)
    });
    assert!(srv.stop().success());

    // An algorithm the kernel lacks is a start-up error naming it.
    let mut cfg = tempfile::NamedTempFile::new().unwrap();
    write!(
        cfg,
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"off\"\n[appliance]\nroot = {:?}\n[tcp]\ncongestion = \"nosuchcc\"\n",
        lib.path().to_str().unwrap()
    )
    .unwrap();
    let out = Command::new(binary())
        .args(["serve", "--config"])
        .arg(cfg.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("congestion"));
}

/// An algorithm other than reno that this process may set, from the kernel's list of
/// those allowed to unprivileged sockets (reno is always there; the default, usually
/// cubic, is too).
fn congestion_other_than_reno() -> Option<String> {
    let allowed =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control").ok()?;
    let available =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").ok()?;
    let available: Vec<&str> = available.split_whitespace().collect();
    allowed
        .split_whitespace()
        .find(|a| *a != "reno" && available.contains(a))
        .map(str::to_owned)
}

#[test]
fn congestion_control_per_listener_seen_on_the_server_sockets() {
    let Some(other) = congestion_other_than_reno() else {
        eprintln!("skipped: the kernel allows no congestion control besides reno");
        return;
    };
    let lib = library(&[("a.ts", b"AAAA")]);
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.json");
    // Two plain listeners (127.0.0.2 is loopback too on Linux): the first gets [tcp]'s
    // reno, the second its own override. info_sample = 1.0 makes every connection
    // sampled, so each log line carries the algorithm read back from the server's
    // accepted socket with getsockopt(TCP_CONGESTION).
    let text = format!(
        "[server]\nworkers = 2\nlisten = [\"127.0.0.1:0\", \"127.0.0.2:0\"]\n[appliance]\nroot = {:?}\n[access_log]\npath = {:?}\nformat = \"json\"\nflush_ms = 50\n[tcp]\ncongestion = \"reno\"\ninfo_sample = 1.0\n[tcp.listeners.\"127.0.0.2:0\"]\ncongestion = \"{other}\"\nmax_pacing_rate = 125000000\n",
        lib.path().to_str().unwrap(),
        path.to_str().unwrap()
    );
    let srv = Server::start_text(&text, &[]);
    eventually("both listeners announced", || srv.listening().len() == 2);
    let addrs = srv.listening();
    for (i, addr) in addrs.iter().enumerate() {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let req = format!("GET /a.ts?l={i} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        assert_eq!(support::read_response(&mut s, false).unwrap().body, b"AAAA");
    }
    eventually("two json lines", || {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .count()
            == 2
    });
    let text = std::fs::read_to_string(&path).unwrap();
    let line_for = |i: usize| {
        text.lines()
            .find(|l| l.contains(&format!("/a.ts?l={i} ")))
            .unwrap_or_else(|| panic!("no line for listener {i}: {text}"))
            .to_owned()
    };
    assert!(line_for(0).contains("\"cc\":\"reno\""), "{}", line_for(0));
    assert!(
        line_for(1).contains(&format!("\"cc\":\"{other}\"")),
        "{}",
        line_for(1)
    );
    assert!(srv.stop().success());

    // An override for an address that is not a listener is refused at parse time.
    let mut cfg = tempfile::NamedTempFile::new().unwrap();
    write!(
        cfg,
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"off\"\n[appliance]\nroot = {:?}\n[tcp.listeners.\"127.0.0.1:1\"]\ncongestion = \"reno\"\n",
        lib.path().to_str().unwrap()
    )
    .unwrap();
    let out = Command::new(binary())
        .args(["check-config"])
        .arg(cfg.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 7") && err.contains("not a listen address"),
        "{err}"
    );
}

#[test]
fn metrics_off_counts_nothing_and_says_so() {
    let lib = library(&[("a.ts", b"AAAA")]);
    let srv = Server::start(
        lib.path(),
        "[admin]\nlisten = \"127.0.0.1:0\"\nmetrics = false\n",
    );
    assert_eq!(srv.get("/a.ts", &[]).body, b"AAAA");
    let admin_addr = srv.admin_addr();
    for path in ["/metrics", "/stats.json"] {
        let (status, body) = admin(admin_addr, "GET", path, "");
        assert_eq!(status, 404, "{path}");
        assert!(body.contains("admin.metrics"), "{path}: {body}");
    }
    let (status, body) = admin(admin_addr, "GET", "/health", "");
    assert_eq!(status, 200);
    assert!(
        body.contains("\"throughput_bytes_per_second\":null,\"requests_per_second\":null"),
        "{body}"
    );
    assert!(srv.stop().success());
}

#[test]
fn reload_valid_and_invalid_files_while_a_client_downloads() {
    let big = content(32 * 1024 * 1024, 9);
    let lib = library(&[("big.mp4", &big), ("a.ts", b"A")]);
    let base = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n[appliance]\nroot = {:?}\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n",
        lib.path().to_str().unwrap()
    );
    let srv = Server::start(
        lib.path(),
        &format!("[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"),
    );
    let a = srv.admin_addr();
    let cc = |srv: &Server| {
        srv.get("/a.ts", &[])
            .header("cache-control")
            .map(str::to_owned)
    };
    assert_eq!(cc(&srv).as_deref(), Some("public, max-age=86400"));

    let mut dl = srv.connect();
    dl.write_all(b"GET /big.mp4 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut first = vec![0u8; 1024 * 1024];
    dl.read_exact(&mut first).unwrap();

    // A valid file: applied (a restart-only change is reported and ignored).
    std::fs::write(
        srv.config_path(),
        format!("{base}[cache_control.extensions]\nts = \"max-age=5\"\n")
            .replace("workers = 2", "workers = 3"),
    )
    .unwrap();
    srv.signal("HUP");
    eventually("reloaded", || srv.logged("configuration reloaded"));
    assert!(srv.logged("server.workers"), "restart-only key reported");
    // Accepted means published: each worker switches at its next turn, so wait (bounded)
    // until fresh connections, which land on either worker, all see the new value.
    eventually("every worker applies max-age=5", || {
        (0..8).all(|_| cc(&srv).as_deref() == Some("max-age=5"))
    });

    // An invalid file: rejected with the reason, the running configuration stays.
    std::fs::write(srv.config_path(), format!("{base}[server]\nworkres = 3\n")).unwrap();
    srv.signal("HUP");
    eventually("rejected", || srv.logged("reload rejected"));
    // The reason (a TOML error) spans several lines after the first: wait for it too,
    // since the log reader may not have taken them yet.
    eventually("reason logged", || {
        srv.logged("workres") || srv.logged("duplicate")
    });
    assert_eq!(cc(&srv).as_deref(), Some("max-age=5"));
    std::fs::write(srv.config_path(), "[server\n").unwrap();
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let (status, body) = admin(a, "POST", "/reload", &auth);
    assert_eq!(status, 422, "{body}");
    assert_eq!(cc(&srv).as_deref(), Some("max-age=5"));

    // The admin reload with a valid file.
    std::fs::write(
        srv.config_path(),
        format!("{base}[cache_control.extensions]\nts = \"max-age=7\"\n"),
    )
    .unwrap();
    let (status, body) = admin(a, "POST", "/reload", &auth);
    assert_eq!(status, 200, "{body}");
    eventually("every worker applies max-age=7", || {
        (0..8).all(|_| cc(&srv).as_deref() == Some("max-age=7"))
    });
    let m = metrics(&srv);
    assert_eq!(
        value(&m, "linerate_config_reloads_total{result=\"applied\"}"),
        Some(2.0)
    );
    assert_eq!(
        value(&m, "linerate_config_reloads_total{result=\"rejected\"}"),
        Some(2.0)
    );

    // The download went on undisturbed.
    let rest = read_to_close(&mut dl);
    let head_end = first.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(first.len() - head_end + rest.len(), big.len());
    assert_eq!(&rest[rest.len() - 100..], &big[big.len() - 100..]);
    assert!(srv.stop().success());
}

#[test]
fn stats_view_and_scrapes_under_load() {
    let body = content(256 * 1024, 3);
    let lib = library(&[("seg.ts", &body)]);
    let srv = Server::start(lib.path(), "");
    let a = srv.admin_addr();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (addr, stop) = (srv.addr, stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut s = TcpStream::connect(addr).unwrap();
                    s.write_all(b"GET /seg.ts HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                        .unwrap();
                    n += read_to_close(&mut s).len() as u64;
                }
                n
            })
        })
        .collect();
    // Scrapes under load always answer, with monotonic counters.
    let mut last = 0.0;
    for _ in 0..20 {
        let m = metrics(&srv);
        let now = value(
            &m,
            "linerate_requests_total{status=\"2xx\",cache=\"local\"}",
        )
        .unwrap();
        assert!(now >= last);
        last = now;
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1100));
    let out = Command::new(binary())
        .args(["stats", "--once", "--admin", &a.to_string()])
        .output()
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in load {
        assert!(t.join().unwrap() > 0);
    }
    let view = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        view.contains("mode serving") && view.contains("throughput"),
        "{view}"
    );
    assert!(
        !view.contains("throughput              0 b/s"),
        "live rate shown: {view}"
    );
    let (status, json) = admin(a, "GET", "/stats.json", "");
    assert_eq!(status, 200);
    assert!(json.contains("\"per_worker\":[{\"worker\":0"), "{json}");
    assert!(srv.stop().success());
}
