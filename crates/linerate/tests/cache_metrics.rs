//! Cache mode's figures in the admin API, end to end: the real binary in front of a
//! counting in-process origin and an origin address where nothing listens. Exact values
//! after a known sequence (a miss, a hit, refused connections): the cache-status
//! counters, the per-disk gauges, the origin servers' request and failure counters and
//! their up/down state, and `/health` (which stays 200 for a down origin but is 503 when
//! no cache disk is in service).
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use support::kit::CacheConfig;
use support::origin::{self, Origin};
use support::Server;
use support::{read_to_close, value};

/// A loopback port with no listener (bound, then closed): connecting is refused.
fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A cache-mode server with one disk under `dir` and two origins: `o` (the live one,
/// path `/`) and `dead` (port `dead`, path `/dead/`), each with one server (so never
/// marked down, whatever `down_after` says).
fn config(live: &Origin, dead: u16) -> CacheConfig {
    CacheConfig::new(live)
        .origin("first_byte_timeout_ms = 1000\ndown_after = 2\ndown_for_ms = 60000")
        .before_route(&format!(
            "[[origin]]\nname = \"dead\"\nservers = [\"http://127.0.0.1:{dead}\"]\n\
             connect_timeout_ms = 1000\ndown_after = 2\ndown_for_ms = 60000\n\n\
             [[route]]\npath_prefix = \"/dead/\"\norigin = \"dead\"\nslice_bytes = 0\n"
        ))
        .route("slice_bytes = 0")
}

/// Every file under the disk's `objects/` directory, with its size.
fn object_files(disk: &std::path::Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut out = Vec::new();
    let mut dirs = vec![disk.join("objects")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                dirs.push(entry.path());
            } else {
                out.push((entry.path(), meta.len()));
            }
        }
    }
    out
}

/// One admin call: (status, body).
fn admin(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let out = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    (status, body.to_owned())
}

fn metrics(srv: &Server) -> String {
    let (status, body) = admin(srv.admin_addr(), "/metrics");
    assert_eq!(status, 200);
    body
}

/// Scrape until `check` holds (a response is counted after its last byte is handed to
/// the kernel, so a client can see it a moment before the counter moves); the last
/// scrape.
fn scrape_until(srv: &Server, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = metrics(srv);
        if check(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn disks_origins_and_cache_statuses_are_exported_exactly() {
    let live = Origin::start(|_| origin::ok(b"segment-bytes", &[("Cache-Control", "max-age=600")]));
    let dead = dead_port();
    let srv = config(&live, dead).start();
    let o = format!("origin=\"o\",server=\"{}\"", live.addr());
    let d = format!("origin=\"dead\",server=\"127.0.0.1:{dead}\"");

    // A miss, then a hit.
    let first = srv.get("/seg1.m4s", &[]);
    assert_eq!(first.status, 200);
    assert_eq!(first.body, b"segment-bytes");
    let second = srv.get("/seg1.m4s", &[]);
    assert_eq!(second.status, 200);
    assert!(
        second
            .header("cache-status")
            .unwrap()
            .starts_with("linerate; hit"),
        "{:?}",
        second.header("cache-status")
    );
    assert_eq!(live.count("/seg1.m4s"), 1);
    let hit = "linerate_requests_total{status=\"2xx\",cache=\"hit\"}";
    let miss = "linerate_requests_total{status=\"2xx\",cache=\"miss\"}";
    let text = scrape_until(&srv, "one hit and one miss counted", |t| {
        value(t, hit) == Some(1.0) && value(t, miss) == Some(1.0)
    });
    assert_eq!(value(&text, "linerate_cache_hit_ratio"), Some(0.5));
    assert_eq!(
        value(&text, &format!("linerate_origin_requests_total{{{o}}}")),
        Some(1.0)
    );
    assert_eq!(
        value(&text, &format!("linerate_origin_up{{{o}}}")),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("linerate_origin_connections_opened_total{{{o}}}")
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("linerate_origin_connections_reused_total{{{o}}}")
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("linerate_origin_failures_total{{{o},kind=\"connect\"}}")
        ),
        Some(0.0)
    );
    // The dead origin is up until it has failed: nothing was sent to it yet.
    assert_eq!(
        value(&text, &format!("linerate_origin_up{{{d}}}")),
        Some(1.0)
    );
    assert_eq!(
        value(&text, &format!("linerate_origin_requests_total{{{d}}}")),
        Some(0.0)
    );
    assert_eq!(
        value(
            &text,
            "linerate_cache_disk_state{disk=\"d0\",state=\"in_service\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "linerate_cache_disk_state{disk=\"d0\",state=\"out_of_service\"}"
        ),
        Some(0.0)
    );
    // The one object stored, its file's size charged in whole 4 KiB blocks, and the
    // configured max_bytes capped by the filesystem's size.
    let files = object_files(&srv.dir().join("cache"));
    assert_eq!(files.len(), 1, "one object file: {files:?}");
    assert_eq!(
        value(&text, "linerate_cache_disk_objects{disk=\"d0\"}"),
        Some(1.0)
    );
    let charged: u64 = files.iter().map(|(_, len)| len.div_ceil(4096) * 4096).sum();
    assert_eq!(
        value(&text, "linerate_cache_disk_bytes_used{disk=\"d0\"}"),
        Some(charged as f64),
        "{files:?}"
    );
    let fs_total = linerate_sys::fs::fs_space(srv.dir()).unwrap().total_bytes;
    assert_eq!(
        value(&text, "linerate_cache_disk_bytes_capacity{disk=\"d0\"}"),
        Some(fs_total.min(1_073_741_824) as f64)
    );
    assert_eq!(
        value(&text, "linerate_cache_disk_errors_total{disk=\"d0\"}"),
        Some(0.0)
    );

    // Refused connections count as failures; but an origin with one server is never
    // marked down (skipping its only server would fail every request for down_for):
    // each request still tries it.
    for i in 0..3 {
        let r = srv.get(&format!("/dead/x{i}"), &[]);
        assert_eq!(r.status, 502, "{:?}", r.header("cache-status"));
        assert!(r.header("cache-status").unwrap().contains("connect"));
    }
    let text = metrics(&srv);
    assert_eq!(
        value(&text, &format!("linerate_origin_up{{{d}}}")),
        Some(1.0)
    );
    assert_eq!(
        value(&text, &format!("linerate_origin_requests_total{{{d}}}")),
        Some(3.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("linerate_origin_failures_total{{{d},kind=\"connect\"}}")
        ),
        Some(3.0)
    );
    assert_eq!(
        value(
            &text,
            &format!("linerate_origin_consecutive_failures{{{d}}}")
        ),
        Some(3.0)
    );
    // The live origin is untouched.
    assert_eq!(live.total(), 1);
    assert_eq!(
        value(&text, &format!("linerate_origin_up{{{o}}}")),
        Some(1.0)
    );
    assert_eq!(
        value(&text, &format!("linerate_origin_requests_total{{{o}}}")),
        Some(1.0)
    );
    // The hit and miss counts are unchanged by the failures except for misses: a 5xx
    // after going forward is a miss (the cache was consulted and could not answer).
    let text = scrape_until(&srv, "three 5xx misses", |t| {
        value(t, "linerate_requests_total{status=\"5xx\",cache=\"miss\"}") == Some(3.0)
    });
    assert_eq!(value(&text, hit), Some(1.0));
    assert_eq!(value(&text, miss), Some(1.0));

    // /health: still 200 with an origin failing (every edge would fail it alike), and it
    // lists the disk and both origins.
    let (status, body) = admin(srv.admin_addr(), "/health");
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("\"reason\""), "{body}");
    assert!(
        body.contains("\"disks\":[{\"name\":\"d0\",\"state\":\"in_service\",\"index_loaded\":"),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "\"origins\":[{{\"name\":\"o\",\"servers\":[{{\"server\":\"{}\",\"up\":true,\"state\":\"up\",\"consecutive_failures\":0}}]}},\
{{\"name\":\"dead\",\"servers\":[{{\"server\":\"127.0.0.1:{dead}\",\"up\":true,\"state\":\"up\",\"consecutive_failures\":3}}]}}]",
            live.addr()
        )),
        "{body}"
    );
    // /stats.json carries every counter.
    let (status, doc) = admin(srv.admin_addr(), "/stats.json");
    assert_eq!(status, 200);
    assert!(
        doc.contains(&format!(
            "{{\"server\":\"127.0.0.1:{dead}\",\"up\":true,\"state\":\"up\",\"consecutive_failures\":3,\
\"requests\":3,\"connections_opened\":0,\"connections_reused\":0,\"failures\":{{\"connect\":3,"
        )),
        "{doc}"
    );
    assert!(doc.contains("\"disks\":[{\"name\":\"d0\""), "{doc}");
    assert!(srv.stop().success());
}

#[test]
fn health_is_503_when_no_cache_disk_is_in_service() {
    let live = Origin::start(|_| origin::ok(b"x", &[("Cache-Control", "max-age=600")]));
    let dir = tempfile::tempdir().unwrap();
    // The store remembers a failed disk across restarts by this marker; it is probed
    // back after `probe_interval` (30 s), well after this test.
    let disk = dir.path().join("cache");
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::write(disk.join("OUT_OF_SERVICE"), b"").unwrap();
    let srv = config(&live, dead_port()).start_on(dir);
    let (status, body) = admin(srv.admin_addr(), "/health");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.starts_with(
            "{\"status\":\"serving\",\"draining\":false,\"reason\":\"all_disks_out_of_service\","
        ),
        "{body}"
    );
    assert!(
        body.contains("\"disks\":[{\"name\":\"d0\",\"state\":\"out_of_service\""),
        "{body}"
    );
    let text = metrics(&srv);
    assert_eq!(
        value(
            &text,
            "linerate_cache_disk_state{disk=\"d0\",state=\"out_of_service\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "linerate_cache_disk_state{disk=\"d0\",state=\"in_service\"}"
        ),
        Some(0.0)
    );
    assert_eq!(live.total(), 0, "nothing was asked of the origin");
    assert!(srv.stop().success());
}

/// A miss's duration covers the wait for the origin, in the access log (`dur_us`) and in
/// `linerate_response_duration_seconds`, as nginx's `$request_time` and our HTTP/2
/// streams count it: an origin that answers after 300 ms makes a miss of at least
/// 300 ms, and the hit after it is quick. Before, the clock started when the answer was
/// ready, so a miss logged its send alone (tens of microseconds) and an operator's
/// latency figures left out every wait for the origin.
#[test]
fn a_miss_duration_includes_the_wait_for_the_origin() {
    let o = Origin::start(|_| origin::Reply::Delayed {
        delay: Duration::from_millis(300),
        reply: Box::new(origin::ok(
            &[7u8; 4096],
            &[("Cache-Control", "max-age=600")],
        )),
    });
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.log");
    let cache = CacheConfig::new(&o)
        .route("slice_bytes = 0")
        .access_log(&path, "")
        .start();
    for _ in 0..2 {
        let r = cache.get("/v/seg.ts", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 4096);
    }
    assert_eq!(o.count("/v/seg.ts"), 1);
    let read = || std::fs::read_to_string(&path).unwrap_or_default();
    support::eventually("two log lines", || read().lines().count() == 2);
    let dur_us = |phase: &str| -> u64 {
        let text = read();
        let line = text
            .lines()
            .find(|l| l.contains(&format!("cache={phase} ")))
            .unwrap_or_else(|| panic!("no {phase} line in {text}"));
        line.split(" dur_us=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (miss, hit) = (dur_us("miss"), dur_us("hit"));
    assert!(miss >= 300_000, "miss logged {miss} µs");
    assert!(hit < 300_000, "hit logged {hit} µs");
    // The histogram saw one response of 0.3 s or more (the miss) and one under it.
    let text = scrape_until(&cache, "two responses timed", |t| {
        value(t, "linerate_response_duration_seconds_count") == Some(2.0)
    });
    let under = |le: &str| {
        value(
            &text,
            &format!("linerate_response_duration_seconds_bucket{{le=\"{le}\"}}"),
        )
    };
    assert_eq!(under("0.25"), Some(1.0), "{text}");
    cache.stop();
}

/// Where a fill's disk writes run, by the body's declared length: a small one's create
/// and appends on the worker (unless its writes just went slow: counted apart), one of
/// more than 256 KiB on the fill threads from its first write; both stored whole and
/// served as hits afterwards.
#[test]
fn a_large_body_is_written_on_the_fill_threads_and_a_small_one_on_the_worker() {
    let small: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
    let large: Vec<u8> = (0..(1u32 << 20) + 1).map(|i| (i % 241) as u8).collect();
    let (s, l) = (small.clone(), large.clone());
    let o = Origin::start(move |req| {
        let body = if req.path() == "/large.mp4" { &l } else { &s };
        origin::ok(body, &[("Cache-Control", "max-age=600")])
    });
    let cache = CacheConfig::new(&o).route("slice_bytes = 0").start();
    let on = |t: &str, w: &str| {
        value(
            t,
            &format!("linerate_cache_fill_writes_total{{on=\"{w}\"}}"),
        )
        .unwrap()
    };

    let r = cache.get("/small.ts", &[]);
    assert_eq!((r.status, r.body == small), (200, true));
    let text = scrape_until(&cache, "the small fill's writes counted", |t| {
        on(t, "worker") + on(t, "fill_threads") >= 2.0
    });
    // Its create and at least one append; on the worker unless the worker's writes were
    // slow just then (the slow-writes counter says so).
    let slow = value(&text, "linerate_cache_fill_slow_writes_total").unwrap();
    if slow == 0.0 {
        assert_eq!(on(&text, "fill_threads"), 0.0, "{text}");
        assert!(on(&text, "worker") >= 2.0, "{text}");
    }
    let before = (on(&text, "worker"), on(&text, "fill_threads"));

    let r = cache.get("/large.mp4", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == large, "the large body, byte for byte");
    // Its create and the appends of 1 MiB + 1 byte read at most 256 KiB at a time.
    let text = scrape_until(&cache, "the large fill's writes counted", |t| {
        on(t, "fill_threads") >= before.1 + 6.0
    });
    assert_eq!(on(&text, "worker"), before.0, "none on the worker: {text}");

    for (path, body) in [("/small.ts", &small), ("/large.mp4", &large)] {
        let r = cache.get(path, &[]);
        assert_eq!(r.status, 200);
        assert!(r.body == *body, "{path} served whole from the cache");
        let status = r.header("cache-status").unwrap_or_default();
        assert!(status.starts_with("linerate; hit"), "{path}: {status}");
        assert_eq!(o.count(path), 1);
    }
    cache.stop();
}
