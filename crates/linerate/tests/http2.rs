//! HTTP/2 end to end: the real binary, in appliance and cache mode, spoken to by real
//! clients (curl, nghttp2's `nghttp` and `h2load`, installed by scripts/test.sh) and by
//! a raw frame client (this file: frames from `linerate_http::h2::frame`, responses
//! decoded with its HPACK decoder) for what the tools cannot show: flow control held to
//! the byte, priorities, the flood defences, and a slow stream not holding others.
//! Every test checks bodies byte for byte, and cache-mode tests count origin requests.
#![allow(clippy::unwrap_used, reason = "tests")]

mod h2support;
mod support;
mod tlssupport;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use h2support::{Got, Raw, SlowReader};
use linerate_http::h2::frame::{self, ErrorCode};
use support::kit::CacheConfig;
use support::origin::{self, Origin, Reply};
use support::{content, library, Server};

fn curl(args: &[&str]) -> (String, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.stdout,
    )
}

/// `curl --http2-prior-knowledge` of `url`: (HTTP version, status, body).
fn curl_h2c(url: &str, extra: &[&str]) -> (String, u16, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let mut args = vec![
        "--http2-prior-knowledge",
        "-o",
        body.to_str().unwrap(),
        "-w",
        "%{http_version} %{http_code}",
    ];
    args.extend_from_slice(extra);
    args.push(url);
    let (_, meta) = curl(&args);
    let meta = String::from_utf8(meta).unwrap();
    let (version, code) = meta.split_once(' ').unwrap();
    (
        version.to_owned(),
        code.parse().unwrap(),
        std::fs::read(&body).unwrap_or_default(),
    )
}

fn h2load(args: &[&str]) -> String {
    let out = Command::new("h2load")
        .args(args)
        .output()
        .expect("h2load (Debian's nghttp2-client; scripts/test.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "h2load {args:?}: {text}");
    text
}

/// h2load's "requests: N total, N started, N done, N succeeded, N failed, N errored".
fn succeeded(report: &str) -> (u64, u64) {
    let line = report
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or_else(|| panic!("no requests line in {report}"));
    let num = |word: &str| -> u64 {
        let at = line.find(&format!(" {word}")).unwrap();
        line[..at].rsplit(' ').next().unwrap().parse().unwrap()
    };
    (num("succeeded"), num("failed") + num("errored"))
}

fn appliance(files: &[(&str, &[u8])], server_keys: &str) -> (tempfile::TempDir, Server) {
    let lib = library(files);
    let srv = Server::start_with(lib.path(), server_keys, "", &[]);
    (lib, srv)
}

/// GET, range, multipart ranges, HEAD, a conditional and a 404 over h2c give what
/// HTTP/1.1 gives, byte for byte, with the protocol in the access log and metrics.
#[test]
fn appliance_answers_over_h2c_as_over_http1() {
    let big = content(3 * 1024 * 1024 + 7, 1);
    let (lib, srv) = appliance(&[("v/big.mp4", &big), ("v/a.m3u8", b"#EXTM3U\n")], "");
    let base = format!("http://{}", srv.addr);
    let (version, code, body) = curl_h2c(&format!("{base}/v/big.mp4"), &[]);
    assert_eq!((version.as_str(), code), ("2", 200));
    assert!(body == big, "3 MiB body differs over h2c");
    let (_, code, body) = curl_h2c(&format!("{base}/v/big.mp4"), &["-r", "1000-2000000"]);
    assert_eq!(code, 206);
    assert!(body == big[1000..=2_000_000]);
    let (_, code, body) = curl_h2c(&format!("{base}/v/big.mp4"), &["-r", "0-9,20-29"]);
    assert_eq!(code, 206);
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("Content-Range: bytes 0-9/"), "{text}");
    assert!(text.contains("Content-Range: bytes 20-29/"), "{text}");
    let (_, code, body) = curl_h2c(&format!("{base}/v/big.mp4"), &["-I"]);
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&body).contains("content-length: 3145735"));
    let etag = srv
        .get("/v/big.mp4", &[])
        .header("etag")
        .unwrap()
        .to_owned();
    let inm = format!("if-none-match: {etag}");
    let (_, code, body) = curl_h2c(&format!("{base}/v/big.mp4"), &["-H", &inm]);
    assert_eq!((code, body.len()), (304, 0));
    let (_, code, _) = curl_h2c(&format!("{base}/v/missing.mp4"), &[]);
    assert_eq!(code, 404);
    drop(lib);
    let admin = srv.admin_addr();
    let m = Command::new("curl")
        .args(["-sS", &format!("http://{admin}/metrics")])
        .output()
        .unwrap();
    let m = String::from_utf8_lossy(&m.stdout);
    assert!(
        support::value(&m, "linerate_http2_requests_total").unwrap_or(0.0) >= 6.0,
        "{m}"
    );
}

/// Many streams at once on one connection (h2load: 1 connection, 20 streams in flight,
/// 400 requests over 4 files) all succeed, and nghttp's multiplexed GETs are exact.
#[test]
fn many_streams_on_one_connection() {
    let a = content(200 * 1024, 2);
    let b = content(2 * 1024 * 1024, 3);
    let (_lib, srv) = appliance(&[("a.ts", &a), ("b.ts", &b), ("c.m3u8", b"#EXTM3U\n")], "");
    let base = format!("http://{}", srv.addr);
    let report = h2load(&[
        "-n",
        "400",
        "-c",
        "1",
        "-m",
        "20",
        &format!("{base}/a.ts"),
        &format!("{base}/b.ts"),
        &format!("{base}/c.m3u8"),
        &format!("{base}/a.ts"),
    ]);
    assert_eq!(succeeded(&report), (400, 0), "{report}");
    let mut raw = Raw::connect(srv.addr, &[(4, 16 << 20)], 64 << 20);
    let mut reqs = Vec::new();
    for (i, path) in ["/a.ts", "/b.ts", "/c.m3u8", "/b.ts"].iter().enumerate() {
        reqs.extend(raw.get(1 + 2 * i as u32, path, &[]));
    }
    raw.send(&reqs);
    let (got, _) = raw.responses(&[1, 3, 5, 7]);
    assert!(got[&1] == (200, a.clone()));
    assert!(got[&3] == (200, b.clone()));
    assert!(got[&5] == (200, b"#EXTM3U\n".to_vec()));
    assert!(got[&7] == (200, b.clone()));
}

/// Flow control to the byte: with a 1,000-byte stream window the server sends exactly
/// 1,000 body bytes and waits; each WINDOW_UPDATE lets exactly that much more through.
#[test]
fn data_never_exceeds_the_window() {
    let body = content(64 * 1024, 4);
    let (_lib, srv) = appliance(&[("seg.ts", &body)], "");
    let mut raw = Raw::connect(srv.addr, &[(4, 1000)], 1 << 20);
    let req = raw.get(1, "/seg.ts", &[]);
    raw.send(&req);
    let mut got = Vec::new();
    raw.s
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    loop {
        match raw.next() {
            Some(Got::Data { data, .. }) => got.extend_from_slice(&data),
            Some(_) => {}
            None => break,
        }
    }
    assert_eq!(got.len(), 1000, "sent past the stream window");
    let mut more = Vec::new();
    frame::write_window_update(&mut more, 1, 5000);
    raw.send(&more);
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < 6000 && Instant::now() < deadline {
        if let Some(Got::Data { data, .. }) = raw.next() {
            got.extend_from_slice(&data);
        }
    }
    assert_eq!(
        got.len(),
        6000,
        "the update should release exactly 5000 bytes"
    );
    raw.s
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    frame::write_window_update(&mut rest, 1, 1 << 20);
    raw.send(&rest);
    let mut end = false;
    while !end {
        if let Got::Data { data, end: e, .. } = raw.next().expect("closed") {
            got.extend_from_slice(&data);
            end = e;
        }
    }
    assert!(got == body);
}

/// A multipart range response through a 7-byte stream window, opened 7 bytes at a
/// time: frame boundaries fall inside part heads (byte chunks), file ranges and the
/// trailer, and the body is HTTP/1.1's byte for byte (boundaries aside). Guards the
/// DATA turn, which frames byte chunks and file ranges from one buffer and debits the
/// windows once per turn.
#[test]
fn a_multipart_body_through_a_tiny_window_is_exact() {
    let body = content(100_000, 6);
    let (_lib, srv) = appliance(&[("v.mp4", &body)], "");
    let ranges = "bytes=0-9,5000-5099,99990-";
    let h1 = srv.get("/v.mp4", &[&format!("range: {ranges}")]);
    assert_eq!(h1.status, 206);
    let boundary = |content_type: &str| {
        content_type
            .split("boundary=")
            .nth(1)
            .expect("a multipart boundary")
            .to_owned()
    };
    let h1_boundary = boundary(h1.header("content-type").unwrap());
    let mut raw = Raw::connect(srv.addr, &[(4, 7)], 1 << 20);
    let req = raw.get(1, "/v.mp4", &[("range", ranges)]);
    raw.send(&req);
    let mut got = Vec::new();
    let mut h2_boundary = None;
    let mut credit = 7;
    loop {
        match raw.next().expect("closed") {
            Got::Headers { fields, .. } => {
                let ct = fields.iter().find(|(n, _)| n == "content-type").unwrap();
                h2_boundary = Some(boundary(&ct.1));
            }
            Got::Data { data, end, .. } => {
                assert!(data.len() <= credit, "{} bytes past the window", data.len());
                credit -= data.len();
                got.extend_from_slice(&data);
                if end {
                    break;
                }
                if credit == 0 {
                    let mut more = Vec::new();
                    frame::write_window_update(&mut more, 1, 7);
                    raw.send(&more);
                    credit = 7;
                }
            }
            Got::Reset { code, .. } => panic!("reset: {code:?}"),
            _ => {}
        }
    }
    let h2_boundary = h2_boundary.expect("HEADERS before DATA");
    let got = String::from_utf8_lossy(&got).replace(&h2_boundary, "B");
    let want = String::from_utf8_lossy(&h1.body).replace(&h1_boundary, "B");
    assert!(got.len() > 300, "{got}");
    assert_eq!(got, want);
}

/// What a full socket does not take of a DATA turn is sent later from the first byte it
/// did not take: with a client reading slowly (the socket fills in the middle of
/// turns), three incremental streams taking turns and a multipart body (part heads from
/// memory between file ranges) all arrive byte for byte. (On kernel TLS the turn goes
/// through the worker's pipe first; ktls_vm.rs runs the same check there.)
#[test]
fn bodies_through_a_socket_that_fills_mid_turn_are_exact() {
    let a = content(3 * 1024 * 1024 + 11, 21);
    let b = content(2 * 1024 * 1024 + 4093, 22);
    let (_lib, srv) = appliance(&[("a.ts", &a), ("b.ts", &b)], "");
    let h1 = srv.get("/b.ts", &[&format!("range: {}", h2support::SLOW_RANGES)]);
    assert_eq!(h1.status, 206);
    let s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut raw = Raw::over(
        SlowReader(s, Duration::from_micros(300)),
        &[(4, 64 << 20)],
        1 << 30,
    );
    h2support::incremental_streams_are_exact(&mut raw, &a, &b, &h1.body);
}

/// Read stream 1 (a segment) and stream 3 (a playlist) to their ends. Returns the
/// segment's bytes and how many of them had arrived when the playlist ended.
/// `segment_started` runs once, on the segment's first DATA frame.
fn segment_and_playlist(raw: &mut Raw, segment_started: impl FnOnce(&mut Raw)) -> (Vec<u8>, usize) {
    let mut started = Some(segment_started);
    let mut seg_got = Vec::new();
    let mut seg_before_playlist = None;
    let mut seg_done = false;
    while !(seg_done && seg_before_playlist.is_some()) {
        match raw.next().expect("closed") {
            Got::Data {
                stream: 1,
                data,
                end,
            } => {
                seg_got.extend_from_slice(&data);
                seg_done = end;
                if let Some(f) = started.take() {
                    f(raw);
                }
            }
            Got::Data {
                stream: 3,
                end: true,
                ..
            }
            | Got::Headers {
                stream: 3,
                end: true,
                ..
            } => {
                seg_before_playlist = Some(seg_got.len());
            }
            _ => {}
        }
    }
    (seg_got, seg_before_playlist.expect("playlist ended"))
}

/// A playlist asked after a large segment on the same connection is not queued behind
/// it: it is sent at a more urgent priority (RFC 9218), so it ends after at most a turn
/// or two of the segment's DATA (256 KiB each), not after the segment's queue (2 MiB).
#[test]
fn a_playlist_is_not_queued_behind_a_segment() {
    let seg = content(8 * 1024 * 1024, 5);
    let playlist = b"#EXTM3U\n#EXT-X-VERSION:3\n";
    let (_lib, srv) = appliance(&[("seg.ts", &seg), ("live.m3u8", playlist)], "");
    let mut raw = Raw::connect(srv.addr, &[(4, 16 << 20)], 64 << 20);
    let mut reqs = raw.get(1, "/seg.ts", &[]);
    reqs.extend(raw.get(3, "/live.m3u8", &[]));
    raw.send(&reqs);
    let (seg_got, before) = segment_and_playlist(&mut raw, |_| {});
    assert!(seg_got == seg);
    assert!(
        before <= 512 * 1024,
        "{before} segment bytes went before the playlist"
    );
}

/// A playlist asked while a large segment is being sent on the same connection is read
/// and answered before the segment ends: the connection reads new requests between its
/// DATA turns, not only once nothing is left to send (it used to send the whole 32 MiB
/// segment before reading the request, so RFC 9218 urgency never came into play).
#[test]
fn a_playlist_asked_mid_segment_is_not_queued_behind_it() {
    let seg = content(32 * 1024 * 1024, 7);
    let playlist = b"#EXTM3U\n#EXT-X-VERSION:3\n";
    let (_lib, srv) = appliance(&[("seg.ts", &seg), ("live.m3u8", playlist)], "");
    let mut raw = Raw::connect(srv.addr, &[(4, 64 << 20)], 1 << 30);
    let req = raw.get(1, "/seg.ts", &[]);
    raw.send(&req);
    // Once the segment is under way, ask for the playlist.
    let (seg_got, before) = segment_and_playlist(&mut raw, |raw| {
        let req = raw.get(3, "/live.m3u8", &[]);
        raw.send(&req);
    });
    assert!(seg_got == seg);
    assert!(
        before <= 16 * 1024 * 1024,
        "{before} of 33554432 segment bytes went before the playlist"
    );
}

/// Cache mode: 20 streams of one connection asking one uncached object at once cost
/// one origin request, and every stream gets the whole body.
#[test]
fn cache_mode_collapses_streams_of_one_connection() {
    let body = content(1024 * 1024 + 3, 6);
    let b2 = body.clone();
    let origin = Origin::start(move |_| Reply::Delayed {
        delay: Duration::from_millis(300),
        reply: Box::new(origin::ok(&b2, &[("cache-control", "max-age=60")])),
    });
    let cache = CacheConfig::new(&origin).start();
    let addr = cache.server.addr;
    let mut raw = Raw::connect(addr, &[(4, 16 << 20)], 64 << 20);
    let mut reqs = Vec::new();
    let ids: Vec<u32> = (0..20).map(|i| 1 + 2 * i).collect();
    for &id in &ids {
        reqs.extend(raw.get(id, "/obj.mp4", &[]));
    }
    raw.send(&reqs);
    let (got, _) = raw.responses(&ids);
    for id in &ids {
        assert!(got[id] == (200, body.clone()), "stream {id}");
    }
    assert_eq!(origin.count("/obj.mp4"), 1);
    // And over curl, a hit (same authority, so the same key).
    let connect = format!("test:80:{}:{}", addr.ip(), addr.port());
    let (version, code, b) = curl_h2c("http://test/obj.mp4", &["--connect-to", &connect]);
    assert_eq!((version.as_str(), code), ("2", 200));
    assert!(b == body);
    assert_eq!(origin.count("/obj.mp4"), 1);
}

/// A stream waiting on a slow origin holds nothing up: a cached object asked on the
/// same connection after it is answered while the slow one still waits.
#[test]
fn a_stream_waiting_on_the_origin_does_not_stall_the_others() {
    let fast = content(100 * 1024, 7);
    let f2 = fast.clone();
    let origin = Origin::start(move |req| {
        if req.path() == "/slow.ts" {
            Reply::Delayed {
                delay: Duration::from_millis(1500),
                reply: Box::new(origin::ok(b"slow", &[("cache-control", "max-age=60")])),
            }
        } else {
            origin::ok(&f2, &[("cache-control", "max-age=60")])
        }
    });
    let cache = CacheConfig::new(&origin).start();
    assert_eq!(cache.server.get("/fast.ts", &[]).status, 200);
    let mut raw = Raw::connect(cache.server.addr, &[(4, 16 << 20)], 64 << 20);
    let mut reqs = raw.get(1, "/slow.ts", &[]);
    reqs.extend(raw.get(3, "/fast.ts", &[]));
    raw.send(&reqs);
    let (got, order) = raw.responses(&[1, 3]);
    assert_eq!(order, [3, 1]);
    assert!(got[&3] == (200, fast));
    assert_eq!(got[&1], (200, b"slow".to_vec()));
    assert_eq!(origin.count("/fast.ts"), 1);
}

/// Rapid reset (CVE-2023-44487): a client that opens and cancels streams without end
/// gets GOAWAY ENHANCE_YOUR_CALM and is closed; the server serves the next client.
#[test]
fn rapid_reset_is_refused() {
    let body = content(1024 * 1024, 8);
    let (_lib, srv) = appliance(&[("seg.ts", &body)], "");
    let mut raw = Raw::connect(srv.addr, &[], 0);
    let mut burst = Vec::new();
    for i in 0..5000u32 {
        let id = 1 + 2 * i;
        burst.extend(raw.get(id, "/seg.ts", &[]));
        frame::write_rst_stream(&mut burst, id, ErrorCode::CANCEL);
    }
    // The server may close while we still write.
    let _ = raw.s.write_all(&burst);
    let mut calm = false;
    while let Some(got) = raw.next() {
        if let Got::GoAway { code, .. } = got {
            calm = code == ErrorCode::ENHANCE_YOUR_CALM;
            break;
        }
    }
    assert!(calm, "no GOAWAY ENHANCE_YOUR_CALM");
    let (version, code, b) = curl_h2c(&format!("http://{}/seg.ts", srv.addr), &[]);
    assert_eq!((version.as_str(), code), ("2", 200));
    assert!(b == body);
}

/// `[server] http2 = false`: the preface is an HTTP/1 request with a version we do
/// not speak (505), as before HTTP/2 existed here.
#[test]
fn h2c_can_be_turned_off() {
    let (_lib, srv) = appliance(&[("a.ts", b"abc")], "http2 = false");
    let mut s = srv.connect();
    s.write_all(frame::PREFACE).unwrap();
    let out = support::read_to_close(&mut s);
    assert!(
        String::from_utf8_lossy(&out).starts_with("HTTP/1.1 505"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    // And on: the same bytes start HTTP/2.
    let (_lib2, srv2) = appliance(&[("a.ts", b"abc")], "");
    let (version, code, body) = curl_h2c(&format!("http://{}/a.ts", srv2.addr), &[]);
    assert_eq!(
        (version.as_str(), code, body.as_slice()),
        ("2", 200, &b"abc"[..])
    );
}

/// Over TLS, ALPN picks h2 when the client offers it (curl), and `[tls] http2 = false`
/// leaves only http/1.1; bodies are exact either way.
#[test]
fn alpn_h2_over_tls_and_off_switch() {
    let body = content(2 * 1024 * 1024 + 5, 9);
    let lib = library(&[("v/seg.ts", &body)]);
    let cert = tlssupport::TestCert::new(&["localhost"]);
    for (keys, want) in [("", "2"), ("http2 = false", "1.1")] {
        let extra = tlssupport::tls_section(keys, &[cert.toml(&["localhost"], true)]);
        let srv = Server::start(lib.path(), &extra);
        let addr = tlssupport::https_addr(&srv.log);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("b");
        let ca = &cert.chain;
        let url = format!("https://localhost:{}/v/seg.ts", addr.port());
        let resolve = format!("localhost:{}:127.0.0.1", addr.port());
        let (_, meta) = curl(&[
            "--http2",
            "--cacert",
            ca.to_str().unwrap(),
            "--resolve",
            &resolve,
            "-o",
            out.to_str().unwrap(),
            "-w",
            "%{http_version} %{http_code}",
            &url,
        ]);
        assert_eq!(String::from_utf8(meta).unwrap(), format!("{want} 200"));
        assert!(std::fs::read(&out).unwrap() == body);
    }
}

/// A graceful stop (SIGTERM; drain and upgrade hand-over take the same path) sends
/// GOAWAY NO_ERROR naming the last stream it took, lets that stream finish whole, then
/// closes the connection.
#[test]
fn stopping_sends_goaway_and_finishes_open_streams() {
    let body = content(4 * 1024 * 1024, 10);
    let (_lib, srv) = appliance(&[("seg.ts", &body)], "");
    let mut raw = Raw::connect(srv.addr, &[(4, 1000)], 64 << 20);
    let req = raw.get(1, "/seg.ts", &[]);
    raw.send(&req);
    let mut got = Vec::new();
    while got.is_empty() {
        if let Some(Got::Data { data, .. }) = raw.next() {
            got.extend_from_slice(&data);
        }
    }
    srv.signal("TERM");
    loop {
        match raw.next().expect("closed before GOAWAY") {
            Got::GoAway { last_stream, code } => {
                assert_eq!((last_stream, code), (1, ErrorCode::NO_ERROR));
                break;
            }
            Got::Data { data, .. } => got.extend_from_slice(&data),
            _ => {}
        }
    }
    let mut more = Vec::new();
    frame::write_window_update(&mut more, 1, 64 << 20);
    raw.send(&more);
    loop {
        match raw.next() {
            Some(Got::Data { data, end, .. }) => {
                got.extend_from_slice(&data);
                if end {
                    break;
                }
            }
            Some(_) => {}
            None => panic!("closed before the open stream ended"),
        }
    }
    assert!(got == body, "the open stream was cut by the stop");
    while let Some(g) = raw.next() {
        assert!(matches!(g, Got::Other), "after the end: {g:?}");
    }
    srv.stop_waiting();
}

/// A reload that turns h2c off sends GOAWAY NO_ERROR to the HTTP/2 connections it
/// closes (naming the last stream taken) and new connections get HTTP/1.1's answer to
/// the preface; a reload that leaves HTTP/2 on sends none (the connection serves the
/// next stream). An idle connection is told at once, not at its next request.
#[test]
fn a_reload_that_turns_http2_off_sends_goaway() {
    let (_lib, srv) = appliance(&[("a.ts", b"abc")], "");
    let mut raw = Raw::connect(srv.addr, &[], 0);
    let req = raw.get(1, "/a.ts", &[]);
    raw.send(&req);
    let (got, _) = raw.responses(&[1]);
    assert_eq!(got[&1], (200, b"abc".to_vec()));

    // A reload that changes nothing for HTTP/2: the connection goes on.
    srv.signal("HUP");
    support::eventually("reloaded", || srv.logged("configuration reloaded"));
    let req = raw.get(3, "/a.ts", &[]);
    raw.send(&req);
    let (got, _) = raw.responses(&[3]);
    assert_eq!(
        got[&3],
        (200, b"abc".to_vec()),
        "GOAWAY at a reload that kept HTTP/2"
    );

    // `[server] http2 = false`: the idle connection is sent GOAWAY, then closed.
    let config = std::fs::read_to_string(srv.config_path()).unwrap();
    let off = config.replacen("[server]\n", "[server]\nhttp2 = false\n", 1);
    assert_ne!(off, config, "{config}");
    std::fs::write(srv.config_path(), off).unwrap();
    srv.signal("HUP");
    let mut away = None;
    while let Some(g) = raw.next() {
        if let Got::GoAway { last_stream, code } = g {
            away = Some((last_stream, code));
        }
    }
    assert_eq!(
        away,
        Some((3, ErrorCode::NO_ERROR)),
        "no GOAWAY at the reload"
    );
    // Every worker applies the reload on its own: new connections are refused h2c once
    // theirs has.
    // A connection to a worker that has not applied it yet is spoken HTTP/2 to (its
    // SETTINGS come back): only the first bytes are read, so a try costs no timeout.
    support::eventually("h2c refused on new connections", || {
        let mut s = srv.connect();
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        s.write_all(frame::PREFACE).unwrap();
        let mut first = [0u8; 12];
        s.read_exact(&mut first).is_ok() && first.starts_with(b"HTTP/1.1 505")
    });
    srv.stop();
}

/// A body the origin cuts short is never ended as whole: the stream is reset
/// (INTERNAL_ERROR) after the bytes that came, and the object is not stored.
#[test]
fn a_cut_origin_body_resets_the_stream() {
    let body = content(8 * 1024 * 1024, 11);
    let b2 = body.clone();
    let origin = Origin::start(move |_| Reply::Short {
        headers: origin::owned(&[("cache-control", "max-age=60")]),
        body: b2.clone(),
        send: 4 * 1024 * 1024,
    });
    let cache = CacheConfig::new(&origin).start();
    let mut raw = Raw::connect(cache.server.addr, &[(4, 16 << 20)], 64 << 20);
    let req = raw.get(1, "/cut.mp4", &[]);
    raw.send(&req);
    let mut got = Vec::new();
    let code = loop {
        match raw.next().expect("closed") {
            Got::Data { data, end, .. } => {
                assert!(!end, "a cut body was ended as whole");
                got.extend_from_slice(&data);
            }
            Got::Reset { stream: 1, code } => break code,
            _ => {}
        }
    };
    assert_eq!(code, ErrorCode::INTERNAL_ERROR);
    assert!(got.len() < body.len() && body.starts_with(&got));
    // Not stored: the next request goes to the origin again (and is cut again: a reset
    // after a 200 head, or a 502 when the cut is seen before the head goes out).
    let req = raw.get(3, "/cut.mp4", &[]);
    raw.send(&req);
    let mut status = 0;
    loop {
        match raw.next().expect("closed before stream 3 ended") {
            Got::Reset { stream: 3, .. } => break,
            Got::Headers {
                stream: 3,
                fields,
                end,
            } => {
                status = fields
                    .iter()
                    .find(|(n, _)| n == ":status")
                    .unwrap()
                    .1
                    .parse()
                    .unwrap();
                assert!(!(end && status == 200));
            }
            Got::Data {
                stream: 3,
                end: true,
                ..
            } => {
                assert_eq!(status, 502, "the second cut body was ended as whole");
                break;
            }
            _ => {}
        }
    }
    assert_eq!(origin.count("/cut.mp4"), 2);
}

/// A request with a body that cache mode would forward (POST) is answered with
/// RST_STREAM HTTP_1_1_REQUIRED (clients retry over HTTP/1.1) and never reaches the
/// origin without its body; a GET without body on the same connection is served.
#[test]
fn a_forwarded_request_body_asks_for_http1() {
    let origin = Origin::start(|_| origin::ok(b"fine", &[("cache-control", "max-age=60")]));
    let cache = CacheConfig::new(&origin).start();
    let mut raw = Raw::connect(cache.server.addr, &[], 0);
    let mut block = Vec::new();
    for (n, v) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", "test"),
        (":path", "/api"),
    ] {
        block.push(0x00);
        block.push(n.len() as u8);
        block.extend_from_slice(n.as_bytes());
        block.push(v.len() as u8);
        block.extend_from_slice(v.as_bytes());
    }
    let mut out = Vec::new();
    frame::write_headers(&mut out, 1, &block, false, frame::DEFAULT_MAX_FRAME_SIZE);
    frame::write_data(&mut out, 1, b"payload", true);
    out.extend(raw.get(3, "/ok.ts", &[]));
    raw.send(&out);
    let mut reset = None;
    let mut ok = None;
    while reset.is_none() || ok.is_none() {
        match raw.next().expect("closed") {
            Got::Reset { stream: 1, code } => reset = Some(code),
            Got::Data {
                stream: 3,
                data,
                end: true,
            } => ok = Some(data),
            _ => {}
        }
    }
    assert_eq!(reset, Some(ErrorCode::HTTP_1_1_REQUIRED));
    assert_eq!(ok.as_deref(), Some(&b"fine"[..]));
    assert_eq!(origin.count("/api"), 0);
}

/// Slow read: a client that opens streams and then no window holds only what the
/// limits allow, for the send timeout: then GOAWAY and the connection closes, and the
/// server serves the next client.
#[test]
fn a_client_that_opens_no_window_is_closed_after_the_send_timeout() {
    let body = content(4 * 1024 * 1024, 12);
    let lib = library(&[("seg.ts", &body)]);
    let srv = Server::start(lib.path(), "[timeouts]\nsend_ms = 1000\n");
    // Stream windows of 0: nothing may be sent until the client says so, and it never does.
    let mut raw = Raw::connect(srv.addr, &[(4, 0)], 0);
    let mut reqs = Vec::new();
    for i in 0..50u32 {
        reqs.extend(raw.get(1 + 2 * i, "/seg.ts", &[]));
    }
    raw.send(&reqs);
    let started = Instant::now();
    let mut data = 0;
    let mut away = None;
    while let Some(got) = raw.next() {
        match got {
            Got::Data { data: d, .. } => data += d.len(),
            Got::GoAway { code, .. } => away = Some(code),
            _ => {}
        }
    }
    let took = started.elapsed();
    assert_eq!(data, 0, "DATA sent with a window of 0");
    assert_eq!(away, Some(ErrorCode::NO_ERROR));
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(8),
        "closed after {took:?}"
    );
    let (version, code, b) = curl_h2c(&format!("http://{}/seg.ts", srv.addr), &[]);
    assert_eq!((version.as_str(), code), ("2", 200));
    assert!(b == body);
}

/// The access log names the protocol: an HTTP/2 request's line ends `HTTP/2.0`, with
/// its status and bytes; an HTTP/1.1 request beside it keeps `HTTP/1.1`.
#[test]
fn the_access_log_says_http2() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let lib = library(&[("a.ts", b"abcdef")]);
    let srv = Server::start(
        lib.path(),
        &format!(
            "[access_log]\npath = {:?}\nflush_ms = 50\n",
            log.to_str().unwrap()
        ),
    );
    let (version, code, _) = curl_h2c(&format!("http://{}/a.ts?via=h2", srv.addr), &[]);
    assert_eq!((version.as_str(), code), ("2", 200));
    assert_eq!(srv.get("/a.ts?via=h1", &[]).status, 200);
    support::eventually("both requests logged", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("\"GET /a.ts?via=h2 HTTP/2.0\" 200")
            && text.contains("\"GET /a.ts?via=h1 HTTP/1.1\" 200")
    });
}

/// h2c per plain listener: `[tcp.listeners."ip:port"] http2` overrides `[server]
/// http2` both ways; on a TLS listener the key is a configuration error (ALPN is
/// `[tls] http2`'s).
#[test]
fn h2c_per_listener() {
    let lib = library(&[("a.ts", b"abc")]);
    let text = format!(
        "[server]\nworkers = 1\nlisten = [\"127.0.0.1:0\", \"127.0.0.2:0\"]\nhttp2 = false\n[appliance]\nroot = {:?}\n[tcp.listeners.\"127.0.0.2:0\"]\nhttp2 = true\n",
        lib.path().to_str().unwrap()
    );
    let srv = Server::start_text(&text, &[]);
    support::eventually("both listeners announced", || srv.listening().len() == 2);
    let addrs = srv.listening();
    let (off, on) = if addrs[0].ip().to_string() == "127.0.0.1" {
        (addrs[0], addrs[1])
    } else {
        (addrs[1], addrs[0])
    };
    let (version, code, body) = curl_h2c(&format!("http://{on}/a.ts"), &[]);
    assert_eq!(
        (version.as_str(), code, body.as_slice()),
        ("2", 200, &b"abc"[..])
    );
    let mut s = TcpStream::connect(off).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(frame::PREFACE).unwrap();
    let out = support::read_to_close(&mut s);
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 505"));
    // A TLS listener's override with http2: refused with the reason.
    let cert = tlssupport::TestCert::new(&["localhost"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n[appliance]\nroot = {:?}\n{}[tcp.listeners.\"127.0.0.1:8443\"]\nhttp2 = false\n",
            lib.path().to_str().unwrap(),
            tlssupport::tls_section("", &[cert.toml(&["localhost"], true)])
                .replace("127.0.0.1:0", "127.0.0.1:8443"),
        ),
    )
    .unwrap();
    let out = Command::new(support::binary())
        .args(["check-config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("http2 is for plain listeners"), "{err}");
}

/// An origin's `103 Early Hints` reaches an HTTP/2 client as an interim HEADERS frame
/// (`:status` 103 and its `link`), before the final response's HEADERS, as HTTP/1.1
/// clients get it as an interim head.
#[test]
fn early_hints_are_relayed_as_interim_headers() {
    let origin = Origin::start(|_| Reply::Interim {
        heads: vec![(103, origin::owned(&[("link", "</seg1.ts>; rel=preload")]))],
        reply: Box::new(origin::ok(b"#EXTM3U\n", &[("cache-control", "max-age=60")])),
    });
    let cache = CacheConfig::new(&origin).start();
    let mut raw = Raw::connect(cache.server.addr, &[], 0);
    let req = raw.get(1, "/live.m3u8", &[]);
    raw.send(&req);
    let mut statuses = Vec::new();
    let mut link = None;
    loop {
        match raw.next().expect("closed") {
            Got::Headers {
                stream: 1,
                fields,
                end,
            } => {
                let status = fields
                    .iter()
                    .find(|(n, _)| n == ":status")
                    .unwrap()
                    .1
                    .clone();
                if status == "103" {
                    link = fields
                        .iter()
                        .find(|(n, _)| n == "link")
                        .map(|(_, v)| v.clone());
                }
                statuses.push(status);
                if end {
                    break;
                }
            }
            Got::Data {
                stream: 1,
                end: true,
                ..
            } => break,
            _ => {}
        }
    }
    assert_eq!(statuses, ["103", "200"]);
    assert_eq!(link.as_deref(), Some("</seg1.ts>; rel=preload"));
}
