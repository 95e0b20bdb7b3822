//! End to end: files not in the page cache (dropped with `POSIX_FADV_DONTNEED` before
//! the request, checked cold with `cachestat`) are sent by the disk's blocking pool, not
//! the event loop (issue 20), and served whole: in appliance mode, as a range, and as a
//! cache-mode hit. A client that closes while the pool sends its response crashes
//! nothing and leaves no descriptor behind. The event-loop stall metrics exist and the
//! per-send histogram moves.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use linerate_sys::pagecache::{fadvise, Advice, PageCacheProbe, Residency};
use support::kit::{CacheConfig, CacheStatus};
use support::origin::{self, Origin};
use support::{content, eventually, read_to_close, value, Server};

/// A directory on the build's own disk: /tmp may be tmpfs, whose pages cannot be dropped.
fn disk_dir() -> tempfile::TempDir {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    std::fs::create_dir_all(&target).unwrap();
    tempfile::tempdir_in(target).unwrap()
}

/// Write back and drop `path`'s pages, and check they are gone (else the test would
/// pass without testing anything).
fn evict(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    let len = f.metadata().unwrap().len();
    let probe = PageCacheProbe::detect(f.as_fd());
    // Pages still held by a socket buffer a moment after the client read them cannot
    // be dropped yet: try again shortly.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        fadvise(f.as_fd(), 0, 0, Advice::DontNeed).unwrap();
        if probe.residency(f.as_fd(), 0, len) == Residency::Cold {
            return;
        }
        assert!(Instant::now() < deadline, "{} still cached", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One admin call's body.
fn metrics(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let out = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// GET `path` (with extra header lines) on a fresh connection, read to the close:
/// (head, body).
fn get(addr: SocketAddr, path: &str, extra: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let raw = read_to_close(&mut s);
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    (
        String::from_utf8(raw[..end].to_vec()).unwrap(),
        raw[end + 4..].to_vec(),
    )
}

fn pool_sends(m: &str) -> f64 {
    value(m, "linerate_disk_pool_sends_total").expect("linerate_disk_pool_sends_total")
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[test]
fn a_file_not_in_the_page_cache_is_sent_whole_by_the_disk_pool() {
    // Guards the pool send path: cold windows go to the socket from a pool thread, every
    // byte in place, for a whole file of several windows and for a range in its middle;
    // the file is found hot afterwards (no pool send for the next request).
    let dir = disk_dir();
    let body = content(5 * 1024 * 1024 + 123, 20);
    let path = dir.path().join("movie.mp4");
    std::fs::write(&path, &body).unwrap();
    let srv = Server::start_with(dir.path(), "workers = 1\n", "", &[]);
    let admin = srv.admin_addr();
    let m = metrics(admin);
    let before = pool_sends(&m);
    // The stall metrics are there for the one worker, at zero.
    assert_eq!(
        value(&m, "linerate_worker_stall_seconds_total{worker=\"0\"}"),
        Some(0.0)
    );
    assert_eq!(
        value(&m, "linerate_worker_stalls_total{worker=\"0\"}"),
        Some(0.0)
    );

    evict(&path);
    let (head, got) = get(srv.addr, "/movie.mp4", "");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        got == body,
        "whole body ({} bytes of {})",
        got.len(),
        body.len()
    );
    let m = metrics(admin);
    let after_whole = pool_sends(&m);
    assert!(after_whole > before, "no pool send for a cold file: {m}");
    assert!(value(&m, "linerate_disk_pool_sent_bytes_total").unwrap() > 0.0);

    // A range across a window boundary, cold again.
    evict(&path);
    let (head, got) = get(srv.addr, "/movie.mp4", "Range: bytes=1000000-3500000\r\n");
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    assert!(got == body[1_000_000..=3_500_000], "range body");
    let m = metrics(admin);
    assert!(
        pool_sends(&m) > after_whole,
        "no pool send for a cold range"
    );

    // The rest of the file is still cold: one more whole read brings it in. Hot then:
    // served by the event loop, and each of those sends is in the histogram.
    let (_, got) = get(srv.addr, "/movie.mp4", "");
    assert!(got == body, "whole body after the range");
    let m = metrics(admin);
    let sends = value(&m, "linerate_loop_file_io_seconds_count").unwrap();
    let hot_before = pool_sends(&m);
    let (_, got) = get(srv.addr, "/movie.mp4", "");
    assert!(got == body, "hot body");
    eventually("the hot sends counted", || {
        value(&metrics(admin), "linerate_loop_file_io_seconds_count").unwrap() > sends
    });
    assert_eq!(
        pool_sends(&metrics(admin)),
        hot_before,
        "a hot file went to the pool"
    );
    srv.stop();
}

#[test]
fn a_client_that_leaves_during_a_pool_send_leaves_nothing_behind() {
    // Guards the job's own descriptors: a client that closes while the pool sends its
    // cold window neither crashes the server nor leaks the job's socket or file
    // duplicate, and the worker goes on serving.
    let dir = disk_dir();
    let body = content(24 * 1024 * 1024, 21);
    let path = dir.path().join("big.bin");
    std::fs::write(&path, &body).unwrap();
    std::fs::write(dir.path().join("small.bin"), b"still here").unwrap();
    let srv = Server::start_with(dir.path(), "workers = 1\n", "", &[]);
    let admin = srv.admin_addr();
    // Open what stays open (the file in the open-file cache, the admin listener's
    // connection state) before counting.
    let (_, got) = get(srv.addr, "/big.bin", "");
    assert_eq!(got.len(), body.len());
    let (_, small) = get(srv.addr, "/small.bin", "");
    assert_eq!(small, b"still here");
    let before_sends = pool_sends(&metrics(admin));
    let baseline = open_fds(srv.pid());
    // Past the time a file found resident is trusted without a check (500 ms).
    std::thread::sleep(Duration::from_millis(700));

    for i in 0..6 {
        evict(&path);
        let mut s = TcpStream::connect(srv.addr).unwrap();
        write!(s, "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        if i % 2 == 0 {
            // Read the head and a little of the body, then leave.
            let mut some = [0u8; 4096];
            let _ = s.read(&mut some).unwrap();
        }
        drop(s);
    }
    eventually("the cold sends went to the pool", || {
        pool_sends(&metrics(admin)) > before_sends
    });
    eventually("every descriptor of the abandoned responses closed", || {
        open_fds(srv.pid()) <= baseline
    });
    let (head, small) = get(srv.addr, "/small.bin", "");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(small, b"still here");
    assert!(!srv.logged("panicked"), "a thread panicked");
    srv.stop();
}

#[test]
fn a_client_that_stops_reading_during_pool_sends_meets_the_send_timeout() {
    // Guards the send timeout on the pool path: a client that stops reading while its
    // windows keep going cold (an evictor drops the file's pages every millisecond) is
    // dropped after `send_ms` without progress. Before the fix in `send_from_pool`, the
    // pool's EAGAIN (outside tokio's view) left a stale writable event, so whenever the
    // recheck found the window cold again the worker went straight back to the pool
    // without waiting, and the timeout could not fire while that lasted. That spin
    // needs the evictor to win the race each time (certain only on a filesystem
    // without `RWF_NOWAIT`), so this test shows it only sometimes; it always checks
    // the timeout.
    let dir = disk_dir();
    let body = content(24 * 1024 * 1024, 33);
    let path = dir.path().join("big.bin");
    std::fs::write(&path, &body).unwrap();
    let srv = Server::start_with(
        dir.path(),
        "workers = 1\n",
        "[timeouts]\nsend_ms = 1000\n",
        &[],
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let evictor = {
        let stop = std::sync::Arc::clone(&stop);
        let path = path.clone();
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = fadvise(f.as_fd(), 0, 0, Advice::DontNeed);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    evict(&path);
    let mut s = TcpStream::connect(srv.addr).unwrap();
    // A small receive buffer fills at once; the client never reads.
    socket2::SockRef::from(&s)
        .set_recv_buffer_size(4096)
        .unwrap();
    write!(s, "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    // The server must give up on this client within the send timeout (1 s) and a
    // margin, while the client still does not read.
    let aborted = || {
        value(
            &metrics(srv.admin_addr()),
            "linerate_connections_closed_total{reason=\"aborted\"}",
        )
        .unwrap_or(0.0)
    };
    let deadline = Instant::now() + Duration::from_secs(6);
    while aborted() < 1.0 {
        assert!(
            Instant::now() < deadline,
            "a client that stopped reading was still being served after 6 s (send_ms = 1000)"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    evictor.join().unwrap();
    drop(s);
    assert!(!srv.logged("panicked"), "a thread panicked");
    srv.stop();
}

#[test]
fn a_large_file_is_checked_every_time_even_just_after_it_was_found_resident() {
    // Guards the limit on trusting a file found resident a moment ago: above 1 MiB a
    // body is checked before every send, so one evicted right after a hot response is
    // still sent by the pool, not by a sendfile that waits on the event loop.
    let dir = disk_dir();
    let body = content(2 * 1024 * 1024, 23);
    let path = dir.path().join("seg.bin");
    std::fs::write(&path, &body).unwrap();
    let srv = Server::start_with(dir.path(), "workers = 1\n", "", &[]);
    let admin = srv.admin_addr();
    // Twice: the second response finds it resident throughout.
    for _ in 0..2 {
        let (_, got) = get(srv.addr, "/seg.bin", "");
        assert!(got == body, "hot body");
    }
    let before = pool_sends(&metrics(admin));
    evict(&path);
    let (_, got) = get(srv.addr, "/seg.bin", "");
    assert!(got == body, "body after eviction");
    assert!(
        pool_sends(&metrics(admin)) > before,
        "sent inline although just evicted"
    );
    srv.stop();
}

/// Every file under the cache disk's `objects/` directory.
fn object_files(disk: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![disk.join("objects")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.metadata().unwrap().is_dir() {
                dirs.push(entry.path());
            } else {
                out.push(entry.path());
            }
        }
    }
    out
}

#[test]
fn a_cache_hit_from_an_object_file_not_in_the_page_cache_is_sent_by_the_pool() {
    // Guards issue 20 part 2: a cache-mode hit whose object file was dropped from the
    // page cache takes the same pool path, whole and correct, with no origin request.
    let body = content(3 * 1024 * 1024 + 7, 22);
    let served = body.clone();
    let origin = Origin::start(move |_| origin::ok(&served, &[("Cache-Control", "max-age=600")]));
    let cache = CacheConfig::new(&origin)
        .server("workers = 1")
        .route("slice_bytes = 0")
        .start_on(disk_dir());
    let r = cache.get("/v/seg.m4s", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == body, "miss body");
    // Stored: the next request is a hit.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = cache.get("/v/seg.m4s", &[]);
        if CacheStatus::of(&r).is_hit() {
            break;
        }
        assert!(Instant::now() < deadline, "never a hit");
        std::thread::sleep(Duration::from_millis(50));
    }
    let admin = cache.admin_addr();
    let before = pool_sends(&metrics(admin));
    let files = object_files(&cache.dir().join("cache"));
    assert!(!files.is_empty(), "no object file");
    for f in &files {
        evict(f);
    }
    let r = cache.get("/v/seg.m4s", &[]);
    assert_eq!(r.status, 200);
    assert!(CacheStatus::of(&r).is_hit(), "not a hit");
    assert!(r.body == body, "cold hit body ({} bytes)", r.body.len());
    assert!(
        pool_sends(&metrics(admin)) > before,
        "a cold hit did not go to the pool"
    );
    assert_eq!(origin.count("/v/seg.m4s"), 1, "origin asked again");
}
