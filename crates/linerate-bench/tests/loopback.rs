//! End-to-end tests of the generator against a tiny HTTP/1.1 server started in the test
//! on 127.0.0.1 (std `TcpListener`, one thread per connection, fixed responses): counts,
//! bytes, statuses, reconnects, idle connections, and refusing what must be refused.
//! Does not measure speed (`bench/run.sh` does): counts are checked for consistency,
//! not size, because the tests share the machine with whatever else runs.

#![allow(clippy::unwrap_used, reason = "test")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use linerate_bench::report::ErrorKind;
use linerate_bench::{run_plan, Report};

/// What the test server answers to one request.
#[derive(Clone, Copy)]
struct Answer {
    status: u16,
    body_len: usize,
    close: bool,
}

/// A parsed request: path and, if any, the inclusive byte range asked for.
struct Req {
    path: String,
    range: Option<(u64, u64)>,
}

struct TestServer {
    addr: SocketAddr,
    served: Arc<AtomicU64>,
}

/// Start a server whose answers come from `answer`. Its threads end when the test
/// process does.
fn server(answer: fn(&Req) -> Answer) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicU64::new(0));
    let counter = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let counter = counter.clone();
            std::thread::spawn(move || serve_conn(stream, answer, &counter));
        }
    });
    TestServer { addr, served }
}

fn serve_conn(mut s: TcpStream, answer: fn(&Req) -> Answer, served: &AtomicU64) {
    // Two writes per response: without NODELAY the second waits for the client's
    // delayed ACK (40 ms), which would test Nagle instead of the generator.
    s.set_nodelay(true).unwrap();
    let body = vec![b'x'; 4 << 20];
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8(buf.drain(..end).collect()).unwrap();
        let path = head.split(' ').nth(1).unwrap().to_owned();
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("Range: bytes="))
            .map(|r| {
                let (a, b) = r.split_once('-').unwrap();
                (a.parse().unwrap(), b.parse().unwrap())
            });
        let a = answer(&Req { path, range });
        let mut resp = format!(
            "HTTP/1.1 {} X\r\nContent-Length: {}\r\n",
            a.status, a.body_len
        );
        if a.close {
            resp.push_str("Connection: close\r\n");
        }
        resp.push_str("\r\n");
        // Head and first body bytes in one write, as sendfile servers with MSG_MORE do:
        // the generator must count body bytes that arrive with the head.
        let first = a.body_len.min(100);
        let mut out = resp.into_bytes();
        out.extend_from_slice(&body[..first]);
        if s.write_all(&out).is_err() || s.write_all(&body[first..a.body_len]).is_err() {
            return;
        }
        served.fetch_add(1, Ordering::Relaxed);
        if a.close {
            return;
        }
    }
}

/// Long enough that a run completes some responses even when other jobs saturate the
/// machine (a 400 ms window failed that way once, while a benchmark pinned both CPUs).
const TEST_DURATION: &str = "1s";

#[derive(Parser)]
#[command(args_override_self = true)]
struct Cli {
    #[command(flatten)]
    args: linerate_bench::BenchArgs,
}

/// Run the generator for [`TEST_DURATION`] (later `extra` options override earlier ones).
fn bench(addr: SocketAddr, extra: &[&str]) -> anyhow::Result<Report> {
    bench_for(addr, TEST_DURATION, extra)
}

fn bench_for(addr: SocketAddr, duration: &str, extra: &[&str]) -> anyhow::Result<Report> {
    let target = addr.to_string();
    let mut argv = vec![
        "bench",
        "--target",
        &target,
        "--warmup",
        "0",
        "--duration",
        duration,
    ];
    argv.extend_from_slice(extra);
    let plan = Cli::try_parse_from(argv)?.args.plan()?;
    run_plan(&plan, &mut |_| {})
}

#[test]
fn files_counts_and_bytes_add_up() {
    let srv = server(|_| Answer {
        status: 200,
        body_len: 1000,
        close: false,
    });
    let r = bench(
        srv.addr,
        &["--prefix", "/f/", "--count", "10", "--connections", "4"],
    )
    .unwrap();
    let s = &r.stats;
    assert!(s.responses > 0, "{}", r.human());
    assert_eq!(s.ok, s.responses);
    assert_eq!(s.statuses().collect::<Vec<_>>(), [(200, s.responses)]);
    assert_eq!(s.errors.total(), 0, "{}", r.human());
    // Bytes arrive before their response completes: at most the 4 in-flight bodies extra.
    assert!(
        s.body_bytes >= s.responses * 1000 && s.body_bytes <= (s.responses + 4) * 1000,
        "{}",
        r.human()
    );
    // The server may have finished responses the generator had not read at the end.
    let served = srv.served.load(Ordering::Relaxed);
    assert!(
        served >= s.responses && served <= s.responses + 4,
        "{served} vs {}",
        s.responses
    );
    assert_eq!(s.latency.count(), s.ok);
    assert!(r.requests_per_sec() > 0.0 && r.gb_per_sec() > 0.0);
    let json = r.json();
    assert!(
        json.contains(&format!("\"requests\":{}", s.responses)),
        "{json}"
    );
}

#[test]
fn large_bodies_are_discarded_exactly() {
    // 3 MiB + 1: several MSG_TRUNC reads per body, and a length no buffer size divides.
    let srv = server(|_| Answer {
        status: 200,
        body_len: (3 << 20) + 1,
        close: false,
    });
    // 3 s: a 3 MiB body must complete inside the window even when other jobs starve
    // the test server's thread (1 s once completed none under a load average of 11).
    let r = bench_for(
        srv.addr,
        "3s",
        &["--prefix", "/big", "--count", "1", "--connections", "2"],
    )
    .unwrap();
    let s = &r.stats;
    assert!(s.responses > 0, "{}", r.human());
    assert_eq!((s.ok, s.errors.total()), (s.responses, 0), "{}", r.human());
    let len = (3u64 << 20) + 1;
    assert!(s.body_bytes >= s.responses * len && s.body_bytes <= (s.responses + 2) * len);
}

#[test]
fn ranges_expect_206_and_exact_length() {
    let srv = server(|req| match req.range {
        Some((a, b)) if b < 100_000 => Answer {
            status: 206,
            body_len: (b - a + 1) as usize,
            close: false,
        },
        _ => Answer {
            status: 416,
            body_len: 0,
            close: false,
        },
    });
    let r = bench(
        srv.addr,
        &[
            "--workload",
            "ranges",
            "--path",
            "/v.mp4",
            "--file-size",
            "100000",
            "--range-size",
            "4K",
        ],
    )
    .unwrap();
    assert!(
        r.stats.ok > 0 && r.stats.errors.total() == 0,
        "{}",
        r.human()
    );
    assert_eq!(
        r.stats.statuses().collect::<Vec<_>>(),
        [(206, r.stats.responses)]
    );

    // A server that ignores Range answers 200 with the whole file: every response is a
    // status error, yet the connection keeps going (the body was skipped by length).
    let srv = server(|_| Answer {
        status: 200,
        body_len: 5000,
        close: false,
    });
    let r = bench(
        srv.addr,
        &[
            "--workload",
            "ranges",
            "--path",
            "/v",
            "--file-size",
            "5000",
            "--range-size",
            "1K",
        ],
    )
    .unwrap();
    assert!(r.stats.responses > 0);
    assert_eq!(r.stats.ok, 0);
    assert_eq!(r.stats.errors.of(ErrorKind::Status), r.stats.responses);
    assert!(!r.served());
}

#[test]
fn wrong_status_and_connection_close() {
    let srv = server(|req| {
        if req.path == "/f/0" {
            Answer {
                status: 404,
                body_len: 10,
                close: false,
            }
        } else {
            Answer {
                status: 200,
                body_len: 10,
                close: true,
            }
        }
    });
    let r = bench(
        srv.addr,
        &["--prefix", "/f/", "--count", "2", "--connections", "2"],
    )
    .unwrap();
    let s = &r.stats;
    let by: Vec<_> = s.statuses().collect();
    assert_eq!(by.len(), 2, "{}", r.human());
    let n404 = by[1].1;
    assert_eq!(by[1].0, 404);
    assert_eq!(s.errors.of(ErrorKind::Status), n404);
    assert_eq!(s.ok, by[0].1);
    assert!(
        s.reconnects > 0,
        "each 200 closes its connection: {}",
        r.human()
    );
    assert_eq!(
        s.errors.total(),
        n404,
        "a clean close is not an error: {}",
        r.human()
    );
}

#[test]
fn idle_connections_are_held_while_load_runs() {
    let srv = server(|_| Answer {
        status: 200,
        body_len: 100,
        close: false,
    });
    let mut events = Vec::new();
    let target = srv.addr.to_string();
    let argv = [
        "bench",
        "--target",
        &target,
        "--workload",
        "idle",
        "--idle-connections",
        "300",
        "--idle-settle",
        "50ms",
        "--prefix",
        "/i",
        "--count",
        "1",
        "--warmup",
        "0",
        "--duration",
        TEST_DURATION,
        "--connections",
        "2",
    ];
    let plan = Cli::try_parse_from(argv).unwrap().args.plan().unwrap();
    let r = run_plan(&plan, &mut |e| events.push(e.to_owned())).unwrap();
    let idle = r.idle.clone().unwrap();
    assert_eq!(
        (
            idle.requested,
            idle.established,
            idle.failed,
            idle.closed_by_server
        ),
        (300, 300, 0, 0)
    );
    assert_eq!(idle.open_at_end, 300);
    assert!(r.served(), "{}", r.human());
    assert_eq!(events.len(), 0, "events only with --events");

    let mut argv = argv.to_vec();
    argv.push("--events");
    let plan = Cli::try_parse_from(argv).unwrap().args.plan().unwrap();
    run_plan(&plan, &mut |e| events.push(e.to_owned())).unwrap();
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        events[0].starts_with("{\"event\":\"idle_ready\",\"established\":300,"),
        "{events:?}"
    );
    assert_eq!(events[1], "{\"event\":\"measure_start\"}");
    assert_eq!(events[2], "{\"event\":\"measure_end\"}");
}

#[test]
fn refuses_a_closed_port_fast_and_non_loopback_always() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let start = std::time::Instant::now();
    let e = bench(addr, &["--prefix", "/", "--count", "1", "--duration", "5s"]).unwrap_err();
    assert!(e.to_string().contains("cannot connect"), "{e}");
    // Well under the 5 s run: it stopped at the first refusals, not at the deadline.
    assert!(start.elapsed() < Duration::from_secs(4));

    let e = bench(
        "192.0.2.1:80".parse().unwrap(),
        &["--prefix", "/", "--count", "1"],
    )
    .unwrap_err();
    assert!(e.to_string().contains("loopback"), "{e}");
}
