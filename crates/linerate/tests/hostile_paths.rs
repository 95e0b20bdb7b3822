//! Hostile request targets in cache mode, end to end (issue 19, finding 1): the real
//! binary in front of an origin that resolves paths as real web servers do (decode,
//! remove dot segments), so a target that climbs out of a route's `path_prefix` at the
//! origin would read what no route serves. Every URL that enters (client requests in
//! origin and absolute form, relayed unsafe methods and the `Content-Location` they
//! invalidate, purges, fill jobs, prefetched playlist segments and CMCD hints) is
//! normalised once by `linerate_http::path::normalize_proxy_target` and routed, keyed
//! and forwarded in that form. Every test asserts exact origin request counts.
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::kit::{CacheConfig, CacheStatus};
use support::origin::{self, Origin, Request};
use support::Server;

const SECRET: &[u8] = b"TOP-SECRET";
const CACHEABLE: (&str, &str) = ("Cache-Control", "max-age=3600");
const TOKEN: &str = "hostile-paths-token-0123456789";
const WAIT: Duration = Duration::from_secs(10);

/// The path as a typical origin (nginx, a framework's router) resolves it: every escape
/// decoded, then dot segments removed, climbing clamped at the root (RFC 3986 §5.2.4).
fn resolve_like_an_origin(target: &str) -> String {
    let path = target.split('?').next().unwrap_or("");
    let raw = path.as_bytes();
    let mut decoded = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let hex = raw
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(b) if raw[i] == b'%' => {
                decoded.push(b);
                i += 3;
            }
            _ => {
                decoded.push(raw[i]);
                i += 1;
            }
        }
    }
    let decoded = String::from_utf8_lossy(&decoded).replace('\\', "/");
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = decoded.split('/').skip(1).collect();
    for (n, s) in segments.iter().enumerate() {
        match *s {
            "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
        if n + 1 == segments.len() && (*s == "." || *s == "..") {
            out.push("");
        }
    }
    format!("/{}", out.join("/"))
}

/// An origin serving a secret at `/private/secret.txt`, `public:<path>` for anything
/// under `/public/`, a media playlist at `/public/live/index.m3u8` that spells its
/// segments with encoded unreserved characters, and `201` with a `Content-Location` of
/// `/public/%61.txt` to a POST.
fn origin() -> Origin {
    Origin::start(|r: &Request| {
        let path = resolve_like_an_origin(r.path());
        if r.method == "POST" {
            return origin::status(201, &[("Content-Location", "/public/%61.txt")]);
        }
        if path == "/private/secret.txt" {
            return origin::ok(SECRET, &[CACHEABLE]);
        }
        if path == "/public/live/index.m3u8" {
            let mut p = String::from("#EXTM3U\n#EXT-X-TARGETDURATION:4\n");
            for i in 0..6 {
                p.push_str(&format!("#EXTINF:4.0,\n%73eg{i}.ts\n"));
            }
            p.push_str("#EXT-X-ENDLIST\n");
            return origin::ok(
                p.as_bytes(),
                &[("Content-Type", "application/vnd.apple.mpegurl"), CACHEABLE],
            );
        }
        if path.starts_with("/public/") {
            return origin::ok(format!("public:{path}").as_bytes(), &[CACHEABLE]);
        }
        origin::status(404, &[])
    })
}

/// One route, `path_prefix = "/public/"`, in front of `origin`.
fn public_only(origin: &Origin) -> CacheConfig {
    CacheConfig::new(origin).route("path_prefix = \"/public/\"")
}

/// Send `GET target` raw (as `curl --path-as-is` would), `Host: test`: status and body.
fn raw_get(server: &Server, target: &str) -> (u16, String) {
    raw(
        server,
        &format!("GET {target} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"),
    )
}

fn raw(server: &Server, request: &str) -> (u16, String) {
    status_and_body(&server.raw(request.as_bytes()))
}

/// Guards finding 1's reproduction: with one route for `/public/`, every spelling of a
/// climb into `/private/` used to be routed by its raw prefix, forwarded as sent, and
/// answered with the secret (then stored). Now each is normalised first, names
/// `/private/secret.txt`, which no route serves: 404, and the origin is never asked.
#[test]
fn climbing_out_of_a_route_reaches_no_origin() {
    let origin = origin();
    let cache = public_only(&origin).start();
    for target in [
        "/public/../private/secret.txt",
        "/public/%2e%2e/private/secret.txt",
        "/public/%2E%2e/private/secret.txt",
        "/public/.%2e/private/secret.txt",
        "/public/a/../../private/secret.txt",
        "/public/./../private/secret.txt",
        "/public/a/%2e%2e/%2E%2E/private/secret.txt",
        "http://test/public/../private/secret.txt",
    ] {
        let (status, body) = raw_get(&cache, target);
        assert!(!body.contains("TOP-SECRET"), "{target} leaked the secret");
        assert_eq!(status, 404, "{target}: {body}");
    }
    assert_eq!(origin.total(), 0, "{:?}", origin.requests());
    // The route still serves what is really under it, however it is spelled.
    let (status, body) = raw_get(&cache, "/public/private/../b.txt");
    assert_eq!((status, body.as_str()), (200, "public:/public/b.txt"));
    assert_eq!(origin.total(), 1);
    origin.assert_no_panics();
    cache.stop();
}

/// Guards the refusals: a target with an encoded separator, NUL, a control character,
/// a raw backslash, a bad escape or a climb above the root is answered 400 with the
/// reason in the body and costs no origin request (it used to be forwarded as sent,
/// each under its own key).
#[test]
fn refused_targets_answer_400_with_the_reason() {
    let origin = origin();
    let cache = public_only(&origin).start();
    for (target, reason) in [
        ("/public/a%2Fb.txt", "encoded_slash"),
        ("/public/a%2fb.txt", "encoded_slash"),
        ("/public/..%2f..%2fprivate%2fsecret.txt", "encoded_slash"),
        ("/public/a%5Cb.txt", "encoded_slash"),
        ("/public/..%5c..%5cprivate%5csecret.txt", "encoded_slash"),
        ("/public/a.txt%00.m3u8", "nul"),
        ("/public/a%0d%0aX-Injected:%201", "control_character"),
        ("/public/a%01", "control_character"),
        ("/public/a%7F", "control_character"),
        ("/public/..\\..\\private\\secret.txt", "backslash"),
        ("/public/%zz", "bad_percent_encoding"),
        ("/public/a%", "bad_percent_encoding"),
        ("/public/../../private/secret.txt", "escapes_root"),
        ("/public/%2e%2e/%2e%2e/etc/passwd", "escapes_root"),
        ("http://test/public/../../x", "escapes_root"),
    ] {
        let (status, body) = raw_get(&cache, target);
        assert_eq!(status, 400, "{target}: {body}");
        assert!(
            body.starts_with("400 Bad Request: ") && body.ends_with(&format!(" ({reason})\n")),
            "{target}: {body:?}"
        );
    }
    assert_eq!(origin.total(), 0, "{:?}", origin.requests());
    cache.stop();
}

matrix! {
    /// Guards one object per resource: `/public/./a.txt`, `/public/x/../a.txt`,
    /// `/public/%61.txt`, `/public/a.txt` (and the absolute form a peer sends) are one
    /// key and one origin request, and the origin receives `/public/a.txt`, in every
    /// slicing cell. They used to be five keys and five origin requests, each target
    /// forwarded as sent. The query is forwarded exactly as sent, its own escapes and
    /// dots untouched.
    fn every_spelling_is_one_object_and_one_origin_request(v) {
        let origin = v.origin(|r: &Request| {
            origin::ok(format!("public:{}", resolve_like_an_origin(r.path())).as_bytes(), &[CACHEABLE])
        });
        let cache = v.config(&origin).route("path_prefix = \"/public/\"").start();
        for target in [
            "/public/./a.txt",
            "/public/x/../a.txt",
            "/public/%61.txt",
            "/public/a.txt",
            "http://test/public/%2E/a.txt",
        ] {
            let (status, body) = raw_get(&cache, target);
            assert_eq!((status, body.as_str()), (200, "public:/public/a.txt"), "{target}");
        }
        let targets: Vec<String> = origin.requests().iter().map(|r| r.target.clone()).collect();
        assert_eq!(targets, ["/public/a.txt"], "one origin request, normalised");
        assert!(CacheStatus::of(&cache.get("/public/%61.txt", &[])).is_hit());

        let query = "?x=%2e%2E&y=/../..&z=%7e";
        let (status, _) = raw_get(&cache, &format!("/public/b.txt{query}"));
        assert_eq!(status, 200);
        let (status, _) = raw_get(&cache, &format!("/public/./b.txt{query}"));
        assert_eq!(status, 200);
        let last: Vec<String> = origin.requests().iter().skip(1).map(|r| r.target.clone()).collect();
        assert_eq!(last, [format!("/public/b.txt{query}")], "query as sent, one request");
        assert_eq!(origin.total(), 2);
        origin.assert_no_panics();
        cache.stop();
    }
}

/// Guards the relay path and RFC 9111 §4.4 invalidation: a POST is forwarded with its
/// normalised target, and the `Content-Location` it answers with (`/public/%61.txt`)
/// invalidates the object stored as `/public/a.txt`. Both used to use the raw spelling:
/// the origin got `/public/y/../form`, and the stored object survived.
#[test]
fn relayed_requests_and_invalidation_use_the_normal_form() {
    let origin = origin();
    let cache = public_only(&origin).start();
    assert_eq!(raw_get(&cache, "/public/a.txt").0, 200);
    assert!(CacheStatus::of(&cache.get("/public/a.txt", &[])).is_hit());
    assert_eq!(origin.count("/public/a.txt"), 1);
    let (status, _) = raw(
        &cache,
        "POST /public/y/../form HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    );
    assert_eq!(status, 201);
    let posted: Vec<(String, String)> = origin
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| {
            (
                r.target.clone(),
                String::from_utf8_lossy(&r.body).into_owned(),
            )
        })
        .collect();
    assert_eq!(posted, [("/public/form".to_owned(), "hi".to_owned())]);
    let r = cache.get("/public/a.txt", &[]);
    assert_eq!(r.status, 200);
    assert!(
        !CacheStatus::of(&r).is_hit(),
        "Content-Location invalidated it"
    );
    assert_eq!(origin.count("/public/a.txt"), 2);
    assert_eq!(origin.total(), 3);
    cache.stop();
}

/// A POST to the admin API with the token: status and body.
fn admin_post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "{} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        if path.starts_with("/fill/") { "PUT" } else { "POST" },
        body.len()
    )
    .unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    status_and_body(&answer)
}

fn with_admin(config: CacheConfig) -> CacheConfig {
    config.extra(&format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n[fill]\nconcurrency = 1\nretries = 0\n"
    ))
}

/// Guards purges by URL: the purge argument is normalised as a request is, so
/// `/obj/./1` (or `/obj/1`) removes the object a client stored via `/obj/%2E/1`; it
/// used to purge a key nothing was stored under. A purge URL the normaliser refuses is
/// a 400 with the reason, not a silent no-op.
#[test]
fn purges_name_the_normalised_object() {
    let origin = origin();
    let cache = with_admin(CacheConfig::new(&origin)).start();
    let admin = cache.admin_addr();
    for (stored_as, purged_as) in [
        (
            "/public/obj/%2E/1",
            "http%3A%2F%2Ftest%2Fpublic%2Fobj%2F.%2F1",
        ),
        ("/public/obj/./2", "http%3A%2F%2Ftest%2Fpublic%2Fobj%2F2"),
    ] {
        let plain = stored_as.replace("/%2E", "").replace("/.", "");
        assert_eq!(raw_get(&cache, stored_as).0, 200);
        assert!(CacheStatus::of(&cache.get(&plain, &[])).is_hit(), "{plain}");
        assert_eq!(origin.count(&plain), 1, "{plain}");
        let (status, body) = admin_post(admin, &format!("/purge?url={purged_as}"), "");
        assert_eq!(status, 200, "{body}");
        assert!(!body.contains("\"purged\":0"), "{purged_as}: {body}");
        assert!(
            !CacheStatus::of(&cache.get(&plain, &[])).is_hit(),
            "{plain} purged"
        );
        assert_eq!(origin.count(&plain), 2, "{plain}");
    }
    for (url, reason) in [
        ("http%3A%2F%2Ftest%2F..%2Fx", "escapes_root"),
        ("http%3A%2F%2Ftest%2Fa%252Fb", "encoded_slash"),
        ("ftp%3A%2F%2Ftest%2Fa", "not an http"),
    ] {
        let (status, body) = admin_post(admin, &format!("/purge?url={url}"), "");
        assert_eq!(status, 400, "{url}: {body}");
        assert!(body.contains(reason), "{url}: {body}");
    }
    assert_eq!(origin.total(), 4);
    cache.stop();
}

/// Guards fill jobs. Defined behaviour: a job URL is normalised as the request it
/// sends will be (`/public/x/../a.txt` fetches and holds `/public/a.txt`, one origin
/// request, and clients then hit); a URL that climbs above the root, out of every
/// route, or has an encoded slash is refused at submission with a 400 naming the URL
/// and why. These used to be accepted and requested as written (and
/// `/public/../private/secret.txt` fetched the secret).
#[test]
fn fill_job_urls_are_normalised_or_refused() {
    let origin = origin();
    let cache = with_admin(public_only(&origin)).start();
    let admin = cache.admin_addr();
    for (url, reason) in [
        ("http://test/../private/secret.txt", "escapes_root"),
        ("http://test/public/../private/secret.txt", "no cache route"),
        ("http://test/public/a%2Fb", "encoded_slash"),
        ("http://test/public/%0a", "control_character"),
    ] {
        let spec = format!("{{\"urls\":[\"{url}\"]}}");
        let (status, body) = admin_post(admin, "/fill/manifests/bad", &spec);
        assert_eq!(status, 400, "{url}: {body}");
        assert!(body.contains(reason), "{url}: {body}");
    }
    assert_eq!(origin.total(), 0);
    let spec = "{\"urls\":[\"http://test/public/x/../a.txt\"]}";
    let (status, body) = admin_post(admin, "/fill/manifests/dots", spec);
    assert_eq!(status, 201, "{body}");
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, job) = admin_get(admin, "/fill/jobs/dots");
        let job: serde_json::Value = serde_json::from_str(&job).unwrap();
        if job["state"] == "done" {
            assert_eq!(
                (job["done"].as_u64(), job["failed"].as_u64()),
                (Some(1), Some(0)),
                "{job}"
            );
            break;
        }
        assert_ne!(job["state"], "failed", "{job}");
        assert!(Instant::now() < deadline, "job never finished: {job}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let targets: Vec<String> = origin.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(targets, ["/public/a.txt"]);
    assert!(CacheStatus::of(&cache.get("/public/a.txt", &[])).is_hit());
    assert_eq!(origin.total(), 1);
    cache.stop();
}

fn admin_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    status_and_body(&answer)
}

/// Guards prefetch: the playlist spells its segments `%73eg1.ts`; a prefetch is
/// normalised as a client's request is, so the segment after the one a client asked
/// for as `seg0.ts` is found, fetched once as `/public/live/seg1.ts` and is the object
/// the client then asks for. Likewise for a CMCD `nor` hint naming `%73eg4.ts`. Both
/// used to be keyed and forwarded in the playlist's spelling: no prefetch followed a
/// plainly spelt request, and a hinted object was fetched twice.
#[test]
fn prefetched_segments_are_the_objects_clients_ask_for() {
    let origin = origin();
    let cache = public_only(&origin).route("prefetch_segments = 1").start();
    assert_eq!(cache.get("/public/live/index.m3u8", &[]).status, 200);
    let deadline = Instant::now() + WAIT;
    while !admin_get(cache.admin_addr(), "/metrics")
        .1
        .lines()
        .any(|l| l == "linerate_cache_prefetch_playlists_read_total 1")
    {
        assert!(Instant::now() < deadline, "playlist never read");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cache.get("/public/live/seg0.ts", &[]).status, 200);
    assert!(
        origin.wait_count("/public/live/seg1.ts", 1, WAIT),
        "{:?}",
        origin.requests()
    );
    let r = cache.get(
        "/public/live/%73eg1.ts",
        &["CMCD-Request: nor=\"%2573eg4.ts\""],
    );
    assert_eq!(r.status, 200);
    assert!(
        origin.wait_count("/public/live/seg4.ts", 1, WAIT),
        "{:?}",
        origin.requests()
    );
    // The hit on seg1 prefetched seg2 too (one ahead).
    assert!(origin.wait_count("/public/live/seg2.ts", 1, WAIT));
    std::thread::sleep(Duration::from_millis(400));
    for p in [
        "/public/live/seg1.ts",
        "/public/live/seg2.ts",
        "/public/live/seg4.ts",
    ] {
        assert_eq!(cache.get(p, &[]).status, 200);
        assert_eq!(origin.count(p), 1, "{p}");
    }
    assert!(
        origin.requests().iter().all(|r| !r.target.contains('%')),
        "{:?}",
        origin.requests()
    );
    cache.stop();
}

/// An answer's status and body (panics, naming the answer, when it has no status line).
fn status_and_body(answer: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}
