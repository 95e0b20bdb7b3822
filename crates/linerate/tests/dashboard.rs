//! The dashboard in a real browser: headless Chromium (Debian's `chromium` package)
//! loads the admin page of a running server under load, and the page must have drawn
//! live data (several samples on every chart, a non-zero throughput). A screenshot is
//! kept in `target/test-artifacts/dashboard.png`.
//!
//! `#[ignore]`d so that a plain `cargo test` on a machine without Chromium reports it as
//! ignored (never as passed); `scripts/test.sh` installs Chromium when it can and runs
//! it with `--ignored`, where a missing browser is a failure.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{content, library, read_to_close, Server};

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            let out = Command::new("which").arg(name).output().ok()?;
            out.status
                .success()
                .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        })
}

fn headless(browser: &PathBuf, extra: &[&str], url: &str) -> std::process::Output {
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1200,800",
            // Virtual time runs the page's 1 s poll several times without waiting for
            // it; each poll is a real fetch from the server.
            "--virtual-time-budget=5000",
        ])
        .args(extra)
        .arg(url)
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs headless Chromium; scripts/test.sh runs it with --ignored"]
fn dashboard_charts_show_live_data_in_chromium() {
    let browser = chromium().expect("chromium is not installed (apt-get install chromium)");
    let body = content(512 * 1024, 2);
    let lib = library(&[("seg.ts", &body)]);
    let srv = Server::start(lib.path(), "");
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (addr, stop) = (srv.addr, stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"GET /seg.ts HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                    .unwrap();
                read_to_close(&mut s);
            }
        })
    };
    // Let the admin thread compute at least one non-zero rate.
    std::thread::sleep(Duration::from_millis(1500));
    let url = format!("http://{}/", srv.admin_addr());
    let dom = headless(&browser, &["--dump-dom"], &url);
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();

    let artifacts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let out = headless(
        &browser,
        &[&format!("--screenshot={}", shot.display())],
        &url,
    );
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();

    assert!(
        dom.contains("data-live=\"1\""),
        "page never got data: {dom}"
    );
    let samples: u32 = dom
        .split("id=\"samples\">")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(samples >= 2, "live polling: {samples} samples\n{dom}");
    for chart in ["throughput", "requests", "connections"] {
        let points: u32 = dom
            .split(&format!("id=\"{chart}\""))
            .nth(1)
            .and_then(|r| r.split("data-points=\"").nth(1))
            .and_then(|r| r.split('"').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(points >= 2, "{chart} chart has {points} points");
    }
    let now = dom
        .split("id=\"throughput-now\">")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .unwrap_or("");
    assert!(
        now.ends_with("b/s") && !now.starts_with("0 "),
        "throughput shows live data: {now:?}"
    );
    assert!(
        std::fs::metadata(&shot)
            .map(|m| m.len() > 1000)
            .unwrap_or(false),
        "screenshot written: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(srv.stop().success());
}
