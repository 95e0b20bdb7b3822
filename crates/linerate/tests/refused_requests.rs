//! End to end, issue 19 finding 5: malformed requests leave a trace. Every request the
//! server refuses for the client's fault (a garbled request line or field line, a head
//! or URI over the limits, a target that is not a path) is answered with a body that
//! says why, counted in `linerate_requests_refused_total{reason}`, and written to the
//! access log with `reason=`, in both modes and both formats, at most
//! `REFUSALS_LOGGED_PER_S` (50) lines a second per worker: the first line after a flood
//! carries `suppressed=N`, so the log stays small and the count exact.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use support::kit::CacheConfig;
use support::origin::{ok, Origin};
use support::{library, read_to_close, Server};

/// The bound the server applies (accesslog.rs `REFUSALS_LOGGED_PER_S`).
const PER_SECOND: u64 = 50;

/// The malformed requests of both modes' tests: (request, status, reason, words of the
/// body).
fn cases() -> Vec<(Vec<u8>, u16, &'static str, &'static str)> {
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(9 * 1024));
    // 60 fields of 600 bytes: over 32 KiB, under the 100-field limit.
    let big_head = format!(
        "GET /ok.ts HTTP/1.1\r\nHost: t\r\n{}\r\n",
        format!("X-Filler: {}\r\n", "f".repeat(600)).repeat(60)
    );
    vec![
        (
            b"G(T /ok.ts HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(),
            400,
            "bad_request_line",
            "malformed request line",
        ),
        (
            b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nno colon on this line\r\n\r\n".to_vec(),
            400,
            "bad_field_name",
            "malformed field line",
        ),
        (
            b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nRange: bytes=0-1\r\nRange: bytes=1-2\r\n\r\n"
                .to_vec(),
            400,
            "repeated_field",
            "sent twice",
        ),
        (
            b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n".to_vec(),
            400,
            "bad_host",
            "Host",
        ),
        (long_uri.into_bytes(), 414, "uri_too_long", "8 KiB"),
        (big_head.into_bytes(), 431, "head_too_large", "32 KiB"),
    ]
}

/// Send `req` on a new connection; the whole answer.
fn raw(addr: SocketAddr, req: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server may answer and close before a large head is all written.
    let _ = s.write_all(req);
    String::from_utf8_lossy(&read_to_close(&mut s)).into_owned()
}

fn metrics(admin: SocketAddr) -> String {
    raw(
        admin,
        format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

fn value(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} missing"))
}

/// The log's lines once `n` lines with `needle` are in it (flushed every 50 ms).
fn log_lines_with(path: &Path, needle: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Send every case; check the answer says why and the metric counts it.
fn send_cases(addr: SocketAddr, admin: SocketAddr) {
    for (req, status, reason, why) in cases() {
        let answer = raw(addr, &req);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{reason}: {answer:.200}"
        );
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert!(
            body.starts_with(&format!("{status} ")) && body.contains(why),
            "{reason}: body {body:?}"
        );
    }
    let m = metrics(admin);
    for (_, _, reason, _) in cases() {
        assert_eq!(
            value(
                &m,
                &format!("linerate_requests_refused_total{{reason=\"{reason}\"}}")
            ),
            1,
            "{reason}"
        );
    }
}

/// An appliance-mode server on one worker with an access log (combined format, flushed
/// every 50 ms): its library and log directory (kept alive), the log's path, the server.
fn appliance_with_access_log() -> (
    tempfile::TempDir,
    tempfile::TempDir,
    std::path::PathBuf,
    Server,
) {
    let lib = library(&[("ok.ts", b"ok")]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let srv = Server::start_with(
        lib.path(),
        "workers = 1\n",
        &format!(
            "[access_log]\npath = {:?}\nflush_ms = 50\n",
            log.to_str().unwrap()
        ),
        &[],
    );
    (lib, dir, log, srv)
}

/// Guards finding 5 in appliance mode (combined format): before, a malformed request
/// left no access-log line, its 400 body was `400 Bad Request` with no why, and no
/// metric said which kind it was. Also an undecodable path (`%2F`), refused by the
/// appliance's path normaliser rather than the parser.
#[test]
fn appliance_mode_logs_refused_requests_with_a_reason_and_says_why() {
    let (_lib, _dir, log, srv) = appliance_with_access_log();
    send_cases(srv.addr, srv.admin_addr());
    let answer = raw(srv.addr, b"GET /a%2Fb.ts HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(
        answer.starts_with("HTTP/1.1 400 ") && answer.contains("encoded slash"),
        "{answer}"
    );
    let lines = log_lines_with(&log, " reason=", cases().len() + 1);
    assert_eq!(lines.len(), cases().len() + 1, "{lines:#?}");
    for (_, status, reason, _) in cases() {
        assert!(
            lines.iter().any(|l| l.contains(&format!("\" {status} "))
                && l.ends_with(&format!(" reason={reason}"))),
            "{reason}: {lines:#?}"
        );
    }
    assert!(lines
        .iter()
        .any(|l| l.contains("\"GET /a%2Fb.ts HTTP/1.1\" 400 ")
            && l.ends_with(" reason=encoded_slash")));
    // The garbled request line is logged as it came, escaped.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"G(T /ok.ts HTTP/1.1\" 400 ")),
        "{lines:#?}"
    );
    // A good request after them is logged without a reason.
    assert_eq!(srv.get("/ok.ts", &[]).status, 200);
    let all = log_lines_with(&log, "\"GET /ok.ts HTTP/1.1\" 200 ", 1);
    assert!(all.len() == 1 && !all[0].contains("reason="), "{all:?}");
    assert!(srv.stop().success());
}

/// Guards finding 5 in cache mode (JSON format): the same refusals, logged with
/// `"reason"`, and none reaches the origin.
#[test]
fn cache_mode_logs_refused_requests_with_a_reason_and_never_asks_the_origin() {
    let origin = Origin::start(|_| ok(b"ok", &[("Cache-Control", "max-age=60")]));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let cache = CacheConfig::new(&origin)
        .server("workers = 1")
        .access_log(&log, "format = \"json\"")
        .start();
    send_cases(cache.addr, cache.admin_addr());
    let lines = log_lines_with(&log, "\"reason\":", cases().len());
    assert_eq!(lines.len(), cases().len(), "{lines:#?}");
    for (_, status, reason, _) in cases() {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("\"status\":{status},"))
                    && l.ends_with(&format!("\"reason\":\"{reason}\"}}"))),
            "{reason}: {lines:#?}"
        );
    }
    assert_eq!(origin.total(), 0);
}

/// Guards the bound: 500 malformed requests as fast as one client can send them leave
/// at most 50 lines a second (per worker), and the first line after the flood says how
/// many were left out, so lines plus `suppressed` is exactly what was sent (and the
/// metric counts every one).
#[test]
fn a_flood_of_malformed_requests_is_logged_at_a_bounded_rate() {
    let (_lib, _dir, log, srv) = appliance_with_access_log();
    let started = Instant::now();
    for _ in 0..500 {
        let answer = raw(
            srv.addr,
            b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nbad line\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    }
    let seconds = started.elapsed().as_secs() + 1;
    // A window later, one more: its line reports what the flood's windows left out.
    std::thread::sleep(Duration::from_millis(1100));
    raw(
        srv.addr,
        b"GET /ok.ts HTTP/1.1\r\nHost: t\r\nbad line\r\n\r\n",
    );
    let count = |lines: &[String]| -> u64 {
        let suppressed: u64 = lines
            .iter()
            .filter_map(|l| l.split(" suppressed=").nth(1))
            .map(|n| n.trim().parse::<u64>().unwrap())
            .sum();
        lines.len() as u64 + suppressed
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let lines = log_lines_with(&log, " reason=bad_field_name", 1);
        if count(&lines) >= 501 || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        lines.len() as u64 <= PER_SECOND * (seconds + 1),
        "{} lines for a flood of {seconds} s",
        lines.len()
    );
    assert!(lines.len() < 500, "the flood was not bounded");
    assert_eq!(count(&lines), 501, "{lines:#?}");
    let m = metrics(srv.admin_addr());
    assert_eq!(
        value(
            &m,
            "linerate_requests_refused_total{reason=\"bad_field_name\"}"
        ),
        501
    );
    assert!(srv.stop().success());
}
