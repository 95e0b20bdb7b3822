//! End to end: the open-file cache of appliance mode (`[appliance] open_file_cache`,
//! `open_file_cache_valid_ms`, `open_file_cache_watch`) never serves a wrong length or
//! mixed versions. Without inotify, files replaced by rename, modified in place (same
//! and different size), deleted and truncated are served as they now are once the
//! revalidation bound has passed; before it, every response is one whole version. With
//! inotify (the default) every such change, a rename of a directory above the file and
//! a file appearing where one was missing are seen by the very next request although
//! the bound is longer than the test. The count bound holds; 0 disables it.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use support::{content, library, read_to_close, Server};

/// The revalidation bound the tests configure, and how long they wait past it.
const VALID_MS: u64 = 200;
const PAST_BOUND: Duration = Duration::from_millis(VALID_MS + 150);

/// One response read to the close: status, `Content-Length`, body, `ETag`.
struct Got {
    status: u16,
    length: Option<usize>,
    body: Vec<u8>,
    etag: Option<String>,
}

fn get(srv: &Server, path: &str) -> Got {
    let mut s = srv.connect();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let raw = read_to_close(&mut s);
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(raw[..end].to_vec()).unwrap();
    let field = |name: &str| {
        head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    Got {
        status: head[9..12].parse().unwrap(),
        length: field("content-length").map(|v| v.parse().unwrap()),
        body: raw[end + 4..].to_vec(),
        etag: field("etag"),
    }
}

/// A 200 that is exactly one of `versions`, its length matching its body.
fn assert_one_of(got: &Got, versions: &[&[u8]], what: &str) {
    assert_eq!(got.status, 200, "{what}");
    assert_eq!(
        got.length,
        Some(got.body.len()),
        "{what}: length matches body"
    );
    assert!(
        versions.iter().any(|v| got.body == *v),
        "{what}: body is one whole version ({} bytes)",
        got.body.len()
    );
}

fn start(root: &Path, keys: &str) -> Server {
    // One worker, so every request meets the same cache.
    Server::start_with(root, "workers = 1\n", keys, &[])
}

fn replace(root: &Path, rel: &str, bytes: &[u8]) {
    let tmp = root.join(format!("{rel}.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, root.join(rel)).unwrap();
}

fn write_in_place(root: &Path, rel: &str, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(false)
        .open(root.join(rel))
        .unwrap();
    f.write_all(bytes).unwrap();
    f.set_len(bytes.len() as u64).unwrap();
}

#[test]
fn changed_files_are_served_as_they_are_after_the_bound() {
    let a1 = content(40_000, 1);
    let a2 = content(70_000, 2);
    let b1 = content(30_000, 3);
    let b2 = content(30_000, 4);
    let c1 = content(20_000, 5);
    let c2 = content(50_000, 6);
    let lib = library(&[
        ("a.ts", &a1),
        ("b.ts", &b1),
        ("c.ts", &c1),
        ("d.ts", b"gone"),
    ]);
    let root = lib.path();
    // inotify off: the time bound alone is under test here.
    let srv = start(
        root,
        &format!("open_file_cache_valid_ms = {VALID_MS}\nopen_file_cache_watch = false\n"),
    );
    for p in ["/a.ts", "/b.ts", "/c.ts", "/d.ts"] {
        assert_eq!(get(&srv, p).status, 200);
    }
    let b_etag = get(&srv, "/b.ts").etag;

    replace(root, "a.ts", &a2); // rename over: a new inode
    write_in_place(root, "b.ts", &b2); // same size, same inode, new mtime
    write_in_place(root, "c.ts", &c2); // grows in place
    std::fs::remove_file(root.join("d.ts")).unwrap();

    // Within the bound: never a mix, never a wrong length.
    assert_one_of(
        &get(&srv, "/a.ts"),
        &[&a1, &a2],
        "renamed, within the bound",
    );

    std::thread::sleep(PAST_BOUND);
    assert_one_of(&get(&srv, "/a.ts"), &[&a2], "renamed");
    let b = get(&srv, "/b.ts");
    assert_one_of(&b, &[&b2], "rewritten in place, same size");
    assert_ne!(b.etag, b_etag, "a new version has a new ETag");
    assert_one_of(&get(&srv, "/c.ts"), &[&c2], "grown in place");
    assert_eq!(get(&srv, "/d.ts").status, 404, "deleted");
    // And it stays right: the new entries are cached in turn.
    assert_one_of(&get(&srv, "/a.ts"), &[&a2], "renamed, cached again");
    srv.stop();
}

#[test]
fn a_truncated_file_is_never_padded_and_its_entry_is_dropped() {
    let big = content(300_000, 7);
    let lib = library(&[("t.mp4", &big)]);
    let root = lib.path();
    // A bound far longer than the test and no inotify (which would report the
    // truncation before the next request): only the transfer's own check can drop the
    // entry, as when a file is truncated while a response is being sent.
    let srv = start(
        root,
        "open_file_cache_valid_ms = 600000\nopen_file_cache_watch = false\n",
    );
    assert_one_of(&get(&srv, "/t.mp4"), &[&big], "first");
    let short = big[..1000].to_vec();
    std::fs::OpenOptions::new()
        .write(true)
        .open(root.join("t.mp4"))
        .unwrap()
        .set_len(1000)
        .unwrap();
    // The cached entry promises 300,000 bytes: the response ends early (closed), with
    // only bytes the file has, never padding.
    let cut = get(&srv, "/t.mp4");
    assert_eq!(cut.status, 200);
    assert_eq!(cut.length, Some(big.len()));
    assert!(cut.body.len() <= short.len(), "{} bytes", cut.body.len());
    assert_eq!(cut.body, short[..cut.body.len()]);
    // That dropped the entry: the next request sees the file as it is, at once.
    assert_one_of(&get(&srv, "/t.mp4"), &[&short], "after the truncation");
    srv.stop();
}

#[test]
fn more_files_than_entries_are_all_served() {
    let files: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| (format!("s/{i}.m4s"), content(1000 + i * 37, i as u64)))
        .collect();
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (p.as_str(), &b[..])).collect();
    let lib = library(&refs);
    let srv = start(lib.path(), "open_file_cache = 4\n");
    for _ in 0..3 {
        for (p, b) in &files {
            assert_one_of(&get(&srv, &format!("/{p}")), &[b], p);
        }
    }
    // Each cached entry holds one descriptor; with 4 entries the server holds few.
    let fds = std::fs::read_dir(format!("/proc/{}/fd", srv.pid()))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .filter(|t| t.starts_with(lib.path()))
        .count();
    assert!(
        fds <= 4 + 1,
        "{fds} descriptors under the root (4 entries and the root)"
    );
    srv.stop();
}

#[test]
fn disabled_cache_serves_every_change_at_once() {
    let v1 = content(10_000, 8);
    let v2 = content(12_000, 9);
    let lib = library(&[("x.ts", &v1)]);
    let root = lib.path();
    let srv = start(root, "open_file_cache = 0\n");
    assert_one_of(&get(&srv, "/x.ts"), &[&v1], "first");
    replace(root, "x.ts", &v2);
    assert_one_of(&get(&srv, "/x.ts"), &[&v2], "replaced, no cache");
    std::fs::remove_file(root.join("x.ts")).unwrap();
    assert_eq!(get(&srv, "/x.ts").status, 404);
    srv.stop();
}

#[test]
fn watched_changes_are_seen_by_the_next_request() {
    let a1 = content(40_000, 11);
    let a2 = content(70_000, 12);
    let b1 = content(30_000, 13);
    let b2 = content(30_000, 14);
    let e1 = content(20_000, 15);
    let e2 = content(25_000, 16);
    let lib = library(&[
        ("a.ts", &a1),
        ("b.ts", &b1),
        ("d.ts", b"gone"),
        ("x/y/e.ts", &e1),
        ("p.ts", b"private"),
    ]);
    let root = lib.path();
    // A bound far longer than the test: only inotify can tell the cache.
    let srv = start(root, "open_file_cache_valid_ms = 600000\n");
    for p in ["/a.ts", "/b.ts", "/d.ts", "/x/y/e.ts", "/p.ts"] {
        assert_eq!(get(&srv, p).status, 200, "{p}");
    }
    assert_eq!(
        get(&srv, "/n.ts").status,
        404,
        "missing, and remembered as missing"
    );
    let b_etag = get(&srv, "/b.ts").etag;

    replace(root, "a.ts", &a2);
    assert_one_of(&get(&srv, "/a.ts"), &[&a2], "renamed over");
    write_in_place(root, "b.ts", &b2);
    let b = get(&srv, "/b.ts");
    assert_one_of(&b, &[&b2], "rewritten in place, same size");
    assert_ne!(b.etag, b_etag, "a new version has a new ETag");
    std::fs::remove_file(root.join("d.ts")).unwrap();
    assert_eq!(get(&srv, "/d.ts").status, 404, "deleted");
    // A directory two levels up renamed, another put in its place.
    std::fs::rename(root.join("x"), root.join("x-old")).unwrap();
    assert_eq!(
        get(&srv, "/x/y/e.ts").status,
        404,
        "an ancestor renamed away"
    );
    std::fs::create_dir_all(root.join("x/y")).unwrap();
    std::fs::write(root.join("x/y/e.ts"), &e2).unwrap();
    assert_one_of(
        &get(&srv, "/x/y/e.ts"),
        &[&e2],
        "a new file under a new ancestor",
    );
    std::fs::write(root.join("n.ts"), b"now here").unwrap();
    assert_one_of(
        &get(&srv, "/n.ts"),
        &[b"now here"],
        "created where one was missing",
    );
    // Permissions: a file made unreadable answers 403 at once (a chmod is IN_ATTRIB).
    // Root reads anything, so only when the test does not run as root.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("p.ts"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let p = get(&srv, "/p.ts");
    if is_root() {
        assert_one_of(&p, &[b"private"], "root reads a mode-000 file");
    } else {
        assert_eq!(p.status, 403, "made unreadable");
    }
    // And the new versions are cached in turn.
    assert_one_of(&get(&srv, "/a.ts"), &[&a2], "renamed, cached again");
    srv.stop();
}

#[test]
fn missing_files_are_remembered_for_the_bound_without_inotify() {
    // A bound far longer than the test: the remembered 404 must stand.
    let lib = library(&[("here.ts", b"here")]);
    let root = lib.path();
    let srv = start(
        root,
        "open_file_cache_valid_ms = 600000\nopen_file_cache_watch = false\n",
    );
    assert_eq!(get(&srv, "/late.ts").status, 404);
    std::fs::write(root.join("late.ts"), b"late").unwrap();
    assert_eq!(
        get(&srv, "/late.ts").status,
        404,
        "remembered as missing within the bound"
    );
    assert_one_of(&get(&srv, "/here.ts"), &[b"here"], "other files unaffected");
    srv.stop();

    // A short bound: once it has passed, the file is found.
    let lib = library(&[("here.ts", b"here")]);
    let root = lib.path();
    let srv = start(
        root,
        &format!("open_file_cache_valid_ms = {VALID_MS}\nopen_file_cache_watch = false\n"),
    );
    assert_eq!(get(&srv, "/late.ts").status, 404);
    std::fs::write(root.join("late.ts"), b"late").unwrap();
    std::thread::sleep(PAST_BOUND);
    assert_one_of(&get(&srv, "/late.ts"), &[b"late"], "after the bound");
    srv.stop();
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}
