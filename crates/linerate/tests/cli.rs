//! End to end: the command line — `--version`, `check-config` (valid, unknown key, bad
//! value; appliance and cache mode), quick-start flags (cache mode's come in pairs, and
//! README's cache quick start shows a miss, then a hit), and
//! the out-of-the-box default that serves the bundled sample library on 127.0.0.1:8080.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use support::{binary, read_response, wait_for_listening, wait_timeout};

#[test]
fn version_prints_the_crate_version() {
    let out = Command::new(binary()).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("linerate {}", env!("CARGO_PKG_VERSION"))
    );
}

/// Run `linerate check-config` on a file holding `text`.
fn check_config(text: &str) -> (Option<i32>, String, String) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    let out = Command::new(binary())
        .arg("check-config")
        .arg(file.path())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn check_config_prints_effective_configuration_or_names_the_error() {
    let root = tempfile::tempdir().unwrap();
    let good = format!(
        "[server]\nworkers = 3\n[appliance]\nroot = {:?}\n",
        root.path().to_str().unwrap()
    );
    let (code, printed, err) = check_config(&good);
    assert_eq!(code, Some(0), "{err}");
    assert!(printed.contains("workers = 3"), "{printed}");
    assert!(
        printed.contains("keepalive_ms = 60000"),
        "defaults are filled in: {printed}"
    );
    assert!(
        printed.contains("m3u8 = \"public, max-age=2\""),
        "{printed}"
    );

    for (text, needles) in [
        (
            "[server]\nworkers = 3\nlisten_addr = \"x\"\n",
            &["listen_addr", "line 3"][..],
        ),
        (
            "[timeouts]\nsend_ms = \"soon\"\n",
            &["send_ms", "line 2"][..],
        ),
        (
            "[appliance]\nroot = \"/nonexistent/linerate\"\n",
            &["appliance.root", "/nonexistent/linerate"][..],
        ),
    ] {
        let (code, printed, err) = check_config(text);
        assert_eq!(code, Some(1), "{text}");
        assert!(
            printed.is_empty(),
            "nothing printed for an invalid file: {printed}"
        );
        for n in needles {
            assert!(err.contains(n), "{text}: {err} lacks {n}");
        }
    }
}

#[test]
fn check_config_accepts_cache_mode_and_names_its_errors() {
    // Cache mode needs no appliance root: a missing one is not an error here.
    let good = "[appliance]\nroot = \"/nonexistent/linerate\"\n\
        [cache]\ndurability = \"no_sync\"\n\
        [[cache.disk]]\nname = \"nvme0\"\npath = \"/var/cache/linerate/nvme0\"\nmax_bytes = \"900G\"\n\
        [[origin]]\nname = \"vod\"\nservers = [\"http://10.0.0.1:8080\", \"https://origin.example\"]\n\
        [[route]]\npath_prefix = \"/vod/\"\norigin = \"vod\"\n[route.ttl_s]\nm3u8 = 2\n";
    let (code, printed, err) = check_config(good);
    assert_eq!(code, Some(0), "{err}");
    for n in [
        "durability = \"no_sync\"",
        "max_bytes = 966367641600",
        "connect_timeout_ms = 3000",
        "cache_name = \"linerate\"",
        "[route.ttl_s]",
    ] {
        assert!(printed.contains(n), "defaults filled in, {n}: {printed}");
    }

    for (text, needles) in [
        (
            good.replace("durability", "durabilty"),
            &["durabilty", "line 4"][..],
        ),
        (
            good.replace("origin = \"vod\"", "origin = \"vdo\""),
            &["\"vdo\" is not defined", "line 14"][..],
        ),
        (
            good.replace("http://10.0.0.1:8080", "ftp://10.0.0.1"),
            &["http:// or https://", "line 11"][..],
        ),
    ] {
        let (code, printed, err) = check_config(&text);
        assert_eq!(code, Some(1), "{text}");
        assert!(printed.is_empty(), "{printed}");
        for n in needles {
            assert!(err.contains(n), "{text}: {err} lacks {n}");
        }
    }
}

#[test]
fn cache_quick_start_flags_come_together() {
    for args in [
        &["--origin", "http://127.0.0.1:8081"][..],
        &["--cache-dir", "/tmp/linerate-never-created"][..],
    ] {
        let out = Command::new(binary())
            .arg("serve")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let missing = if args[0] == "--origin" {
            "--cache-dir"
        } else {
            "--origin"
        };
        assert!(err.contains("required") && err.contains(missing), "{err}");
    }
    assert!(!std::path::Path::new("/tmp/linerate-never-created").exists());
    let out = Command::new(binary())
        .args(["serve", "--origin", "ftp://x", "--cache-dir", "/tmp/x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("http:// or https://"));
}

#[test]
fn serve_fails_clearly_on_a_missing_root_or_busy_port() {
    let out = Command::new(binary())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--root",
            "/nonexistent/linerate",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/linerate"));
}

#[test]
fn a_port_already_served_is_refused_even_by_a_reuseport_listener() {
    // The first server's sockets have SO_REUSEPORT; without the start-up probe a second
    // server of the same user would silently share its port and split its traffic.
    let lib = support::library(&[("a.ts", b"A")]);
    let first = support::Server::start(lib.path(), "");
    let out = Command::new(binary())
        .args(["serve", "--listen", &first.addr.to_string(), "--root"])
        .arg(lib.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Address already in use") && err.contains(&first.addr.to_string()),
        "{err}"
    );
    assert_eq!(first.get("/a.ts", &[]).body, b"A");
}

/// `linerate serve` with no configuration at all serves the bundled sample library on
/// 127.0.0.1:8080 (README's first command). Needs port 8080 free on this machine.
#[test]
fn default_serve_plays_the_bundled_sample() {
    let (child, addr, log) = serve(Command::new(binary()).arg("serve"));
    let result = std::panic::catch_unwind(|| {
        assert_eq!(
            addr,
            Some("127.0.0.1:8080".parse().unwrap()),
            "log: {:?}",
            log.lock().unwrap()
        );
        let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sample");
        let mut checked = 0;
        for rel in [
            "hls/index.m3u8",
            "dash/manifest.mpd",
            "hls-byterange/index.m3u8",
        ] {
            let Ok(want) = std::fs::read(sample.join(rel)) else {
                continue;
            };
            let mut s = std::net::TcpStream::connect("127.0.0.1:8080").unwrap();
            write!(s, "GET /{rel} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
            let r = read_response(&mut s, false).unwrap();
            assert_eq!((r.status, r.body == want), (200, true), "{rel}");
            checked += 1;
        }
        assert!(
            checked >= 2,
            "the sample library has HLS and DASH manifests"
        );
    });
    stop_then_check(child, result);
}

/// README's cache-mode quick start, flags and all, in front of an origin that behaves
/// like `python3 -m http.server`: `Last-Modified` (the file a day old), no
/// `Cache-Control`, `Range` ignored. With the default (RFC 9111) policy the first
/// request is a miss that stores, the second a hit from heuristic freshness; exactly
/// one origin request. (Only the admin listener comes from a file, so that tests run
/// side by side.)
#[test]
fn the_readme_cache_quick_start_shows_a_miss_then_a_hit() {
    let body = support::content(300_000, 11);
    let served = body.clone();
    let modified = httpdate::fmt_http_date(
        std::time::SystemTime::now() - std::time::Duration::from_secs(86_400),
    );
    let origin = support::origin::Origin::start(move |_| {
        support::origin::ok(
            &served,
            &[
                ("Server", "SimpleHTTP/0.6 Python/3.11.2"),
                (
                    "Date",
                    &httpdate::fmt_http_date(std::time::SystemTime::now()),
                ),
                ("Content-type", "video/mp4"),
                ("Last-Modified", &modified),
            ],
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let mut config = tempfile::NamedTempFile::new().unwrap();
    writeln!(config, "[admin]\nlisten = \"127.0.0.1:0\"").unwrap();
    let (child, addr, log) = serve(
        Command::new(binary())
            .args(["serve", "--config"])
            .arg(config.path())
            .args(["--listen", "127.0.0.1:0", "--origin", &origin.url()])
            .arg("--cache-dir")
            .arg(dir.path().join("cache")),
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let addr = addr.unwrap_or_else(|| panic!("log: {:?}", log.lock().unwrap()));
        let ask = |method: &str| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            write!(
                s,
                "{method} /video.mp4 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
            )
            .unwrap();
            read_response(&mut s, method == "HEAD").unwrap()
        };
        let first = ask("HEAD");
        let status = first.header("cache-status").unwrap_or_default().to_owned();
        assert_eq!(first.status, 200);
        assert!(
            status.contains("fwd=uri-miss") && status.contains("stored"),
            "{status}"
        );
        let second = ask("HEAD");
        let status = second.header("cache-status").unwrap_or_default().to_owned();
        assert!(status.starts_with("linerate; hit; ttl="), "{status}");
        // 10 % of a day: about 8640 s of heuristic freshness.
        let ttl: i64 = status.rsplit('=').next().unwrap().parse().unwrap();
        assert!((8_000..=8_640).contains(&ttl), "{status}");
        let third = ask("GET");
        assert_eq!(third.status, 200);
        assert!(third.body == body, "the stored body is the origin's");
        assert_eq!(origin.total(), 1, "one origin request for all three");
    }));
    stop_then_check(child, result);
}

/// The server `cmd` starts, with its log collected, and the address it announced
/// listening on (`None` if it did not within the kit's start timeout).
fn serve(
    cmd: &mut Command,
) -> (
    std::process::Child,
    Option<std::net::SocketAddr>,
    Arc<Mutex<Vec<String>>>,
) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .env("RUST_LOG", "info")
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let addr = wait_for_listening(child.stderr.take().unwrap(), log.clone());
    (child, addr, log)
}

/// SIGTERM the server, wait for it, then re-raise a failure of the checks made while
/// it ran (after the server is gone, so no test leaves one behind), and require a
/// clean exit.
fn stop_then_check(mut child: std::process::Child, checks: std::thread::Result<()>) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let status = wait_timeout(&mut child, std::time::Duration::from_secs(20));
    if let Err(p) = checks {
        std::panic::resume_unwind(p);
    }
    assert!(status.unwrap().success());
}

/// Issue 22 part 4: without `--cache-size`, the quick start sizes its disk from the
/// filesystem's free space (it took 90 % of the filesystem's whole size, 243 GB where
/// 84 GB were free, so the store would hit ENOSPC long before evicting), and says so in
/// the start-up log.
#[test]
fn quick_start_cache_size_is_a_share_of_free_space_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = tempfile::NamedTempFile::new().unwrap();
    writeln!(config, "[admin]\nlisten = \"127.0.0.1:0\"").unwrap();
    let (child, addr, log) = serve(
        Command::new(binary())
            .args(["serve", "--config"])
            .arg(config.path())
            .args(["--listen", "127.0.0.1:0", "--origin", "http://127.0.0.1:9"])
            .arg("--cache-dir")
            .arg(dir.path().join("cache")),
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(addr.is_some(), "log: {:?}", log.lock().unwrap());
        let line = || {
            log.lock()
                .unwrap()
                .iter()
                .find(|l| l.contains("cache size:"))
                .cloned()
        };
        support::eventually("the cache size line", || line().is_some());
        let line = line().unwrap();
        assert!(line.contains("free space"), "{line}");
        let logged: u64 = line
            .split("max_bytes=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        let space = linerate_sys::fs::fs_space(dir.path()).unwrap();
        // 90 % of what was free at start: still below what is free now (the store has
        // written a few small files since).
        assert!(
            logged > 0 && logged <= space.available_bytes,
            "{logged} of {} free: {line}",
            space.available_bytes
        );
    }));
    stop_then_check(child, result);
}

/// The binary at `dir/linerate` (a hard link, or a copy across filesystems): a release
/// moved out of the build tree.
fn moved_binary(dir: &std::path::Path) -> std::path::PathBuf {
    let moved = dir.join("linerate");
    if std::fs::hard_link(binary(), &moved).is_err() {
        std::fs::copy(binary(), &moved).unwrap();
    }
    moved
}

/// A configuration file with the admin API on an ephemeral port (tests run side by side).
fn admin_on_any_port(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("linerate.toml");
    std::fs::write(&path, "[admin]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    path
}

/// Issue 22 part 4: a binary moved out of the build tree finds the sample library
/// beside it (`sample/`, as a release unpacks), not the build tree's path compiled in.
#[test]
fn a_moved_binary_serves_the_sample_library_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sample")).unwrap();
    std::fs::write(dir.path().join("sample/beside.txt"), b"next to the binary").unwrap();
    let (child, addr, log) = serve(
        Command::new(moved_binary(dir.path()))
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(admin_on_any_port(dir.path())),
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let addr = addr.unwrap_or_else(|| panic!("log: {:?}", log.lock().unwrap()));
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(s, "GET /beside.txt HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"next to the binary"[..])
        );
    }));
    stop_then_check(child, result);
}

/// Issue 22 part 4: a moved binary with no sample library anywhere it looks fails at
/// once with an error that names `--root` and the places looked (it failed with the
/// build tree's path and no hint), and `check-config` says the same.
#[test]
fn a_moved_binary_without_a_sample_library_asks_for_root() {
    let dir = tempfile::tempdir().unwrap();
    let moved = moved_binary(dir.path());
    let mut child = Command::new(&moved)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(admin_on_any_port(dir.path()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_timeout(&mut child, std::time::Duration::from_secs(10));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{err}");
    let beside = dir.path().join("sample");
    assert!(
        err.contains("--root") && err.contains(&beside.display().to_string()),
        "{err}"
    );
    assert!(!err.contains("crates/linerate"), "{err}");
    let out = Command::new(&moved)
        .arg("check-config")
        .arg(admin_on_any_port(dir.path()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--root"), "{err}");
}

/// Issue 22 part 4: `serve --admin ADDR --token-file FILE` turns the admin API's
/// commands on without a configuration file (the quick start could not purge or
/// drain).
#[test]
fn serve_takes_the_admin_address_and_token_file_on_the_command_line() {
    let lib = support::library(&[("a.ts", b"A")]);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "a-token-from-a-file-0123\n").unwrap();
    let (child, addr, log) = serve(
        Command::new(binary())
            .args(["serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .arg("--token-file")
            .arg(&token)
            .arg("--root")
            .arg(lib.path()),
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(addr.is_some(), "log: {:?}", log.lock().unwrap());
        let admin_line = || {
            log.lock()
                .unwrap()
                .iter()
                .find_map(|l| l.split("admin api at http://").nth(1).map(str::to_owned))
        };
        support::eventually("the admin address in the log", || admin_line().is_some());
        let admin = admin_line().unwrap();
        let admin = admin.split_whitespace().next().unwrap().to_owned();
        // A wrong token is refused, the file's is taken.
        let wrong = Command::new(binary())
            .args([
                "drain",
                "--admin",
                &admin,
                "--token",
                "not-the-token-0123456",
            ])
            .output()
            .unwrap();
        assert_ne!(wrong.status.code(), Some(0));
        let out = Command::new(binary())
            .args(["drain", "--admin", &admin, "--token"])
            .arg("a-token-from-a-file-0123")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }));
    stop_then_check(child, result);
}

/// Issue 22 part 4: when the admin API's port is taken, the error says it is the admin
/// API's (`admin.listen`), not just "listen ADDR: Address already in use", which reads
/// like a clash on the data port.
#[test]
fn a_clash_on_the_admin_port_says_it_is_the_admin_port() {
    let lib = support::library(&[("a.ts", b"A")]);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap();
    let mut config = tempfile::NamedTempFile::new().unwrap();
    writeln!(config, "[admin]\nlisten = \"{port}\"").unwrap();
    let out = Command::new(binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config.path())
        .arg("--root")
        .arg(lib.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("admin API")
            && err.contains("admin.listen")
            && err.contains(&port.to_string())
            && err.contains("Address already in use"),
        "{err}"
    );
}

/// Issue 22 part 4: a new process of an upgrade whose old process calls the upgrade
/// off says so once: "upgrade: the old process said ...", not "upgrade: upgrade: ..."
/// (both in its own error and in the reason it sends the old process). The test plays
/// the old process over a socket given as the new one's upgrade channel.
#[test]
fn a_called_off_upgrade_is_reported_with_one_upgrade_prefix() {
    use std::io::Read;
    let lib = support::library(&[("a.ts", b"A")]);
    let (mut old, new_end) = std::os::unix::net::UnixStream::pair().unwrap();
    old.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut child = Command::new(binary())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "off",
            "--root",
        ])
        .arg(lib.path())
        .env("LINERATE_UPGRADE_FD", "0")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(new_end)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // No listeners to hand over; then the new process asks for the store's lease.
    old.write_all(b"LINERATE-UPGRADE 1\n").unwrap();
    let mut buf = [0u8; 256];
    let n = old.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"LEASE");
    old.write_all(b"ABORT upgrade abandoned").unwrap();
    let n = old.read(&mut buf).unwrap();
    let reason = String::from_utf8_lossy(&buf[..n]).into_owned();
    let status = wait_timeout(&mut child, std::time::Duration::from_secs(10));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{err}");
    for said in [&reason, &err] {
        assert!(said.contains("the old process said"), "{said}");
        assert_eq!(said.matches("upgrade:").count(), 1, "{said}");
    }
}

/// A cache-mode configuration file whose one disk is at `disk_path`, with `cache_keys`
/// in `[cache]`.
fn cache_config_file(disk_path: &str, cache_keys: &str) -> tempfile::NamedTempFile {
    let mut config = tempfile::NamedTempFile::new().unwrap();
    write!(
        config,
        "[admin]\nlisten = \"off\"\n[server]\nlisten = [\"127.0.0.1:0\"]\n[cache]\n{cache_keys}\n\
         [[cache.disk]]\nname = \"d0\"\npath = {disk_path:?}\nmax_bytes = 1000000\n\
         [[origin]]\nname = \"o\"\nservers = [\"http://127.0.0.1:9\"]\n[[route]]\norigin = \"o\"\n"
    )
    .unwrap();
    config
}

/// Issue 22 part 4: a cache directory the store cannot create (here under `/proc`,
/// which refuses new entries even to root) is reported by `check-config` (it passed)
/// and by `serve` with the configuration file, the disk and its key, not as the
/// store's "lock file: No such file or directory".
#[test]
fn an_unusable_cache_directory_names_the_file_and_key_in_check_config_and_serve() {
    let config = cache_config_file("/proc/linerate-cannot-be-here", "");
    let file = config.path().display().to_string();
    let check = Command::new(binary())
        .arg("check-config")
        .arg(config.path())
        .output()
        .unwrap();
    let serve = Command::new(binary())
        .args(["serve", "--config"])
        .arg(config.path())
        .output()
        .unwrap();
    for out in [check, serve] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&file)
                && err.contains("cache.disk \"d0\"")
                && err.contains("/proc/linerate-cannot-be-here")
                && err.contains("cannot create"),
            "{err}"
        );
    }
    // check-config leaves nothing behind where it could create the directory.
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("a/b/cache");
    let config = cache_config_file(fresh.to_str().unwrap(), "");
    let out = Command::new(binary())
        .arg("check-config")
        .arg(config.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.path().join("a").exists());
}

/// Issue 22 part 4: watermarks the store refuses are reported at their line (the error
/// named no position).
#[test]
fn a_watermark_error_carries_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = cache_config_file(
        dir.path().join("cache").to_str().unwrap(),
        "durability = \"no_sync\"\nhigh_watermark_percent = 50",
    );
    let out = Command::new(binary())
        .arg("check-config")
        .arg(config.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("line 7")
            && err.contains("high_watermark_percent = 50")
            && err.contains("watermarks"),
        "{err}"
    );
}

/// A peers file naming two nodes at one address is refused (issue 22): both would own
/// keys, and every request for one of them would reach the other. `check-config` names
/// the file's line; inline peers name both nodes.
#[test]
fn two_peers_at_one_address_are_refused_with_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let peers = dir.path().join("peers");
    std::fs::write(
        &peers,
        "# the cluster\na 127.0.0.1:8081\nb 127.0.0.2:8081\nc 127.0.0.1:8081\n",
    )
    .unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef\n").unwrap();
    let config = |cluster: &str| {
        format!(
            "[cache]\ndurability = \"no_sync\"\n\
             [[cache.disk]]\nname = \"d0\"\npath = {:?}\nmax_bytes = 1073741824\n\
             [[origin]]\nname = \"o\"\nservers = [\"http://127.0.0.1:9\"]\n\
             [[route]]\npath_prefix = \"/\"\norigin = \"o\"\n\
             [cluster]\nself = \"a\"\nsecret_file = {:?}\n{cluster}\n",
            dir.path().join("cache").to_str().unwrap(),
            key.to_str().unwrap()
        )
    };
    let (code, _, err) = check_config(&config(&format!(
        "peers_file = {:?}",
        peers.to_str().unwrap()
    )));
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("line 4")
            && err.contains("\"c\"")
            && err.contains("\"a\"")
            && err.contains("127.0.0.1:8081"),
        "{err}"
    );
    let inline = "peers = [{ name = \"a\", address = \"127.0.0.1:8081\" }, \
                  { name = \"b\", address = \"127.0.0.1:8081\" }]";
    let (code, _, err) = check_config(&config(inline));
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("\"a\" and \"b\"") && err.contains("same address 127.0.0.1:8081"),
        "{err}"
    );
    // Distinct addresses pass.
    std::fs::write(&peers, "a 127.0.0.1:8081\nb 127.0.0.1:8082\n").unwrap();
    let (code, _, err) = check_config(&config(&format!(
        "peers_file = {:?}",
        peers.to_str().unwrap()
    )));
    assert_eq!(code, Some(0), "{err}");
}
