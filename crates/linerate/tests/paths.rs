//! End to end: nothing outside the root is ever served, whatever the encoding of the
//! path — dot segments, percent-encoded dots and slashes, NUL, symlinks out of the root.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use support::Server;

#[test]
fn traversal_tricks_never_reach_outside_the_root() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(base.path().join("secret.ts"), b"SECRET").unwrap();
    std::fs::write(root.join("a/b/seg.ts"), b"segment").unwrap();
    std::fs::write(root.join("top.ts"), b"top").unwrap();
    std::os::unix::fs::symlink("../secret.ts", root.join("link-out.ts")).unwrap();
    std::os::unix::fs::symlink(base.path().join("secret.ts"), root.join("abs-out.ts")).unwrap();
    std::os::unix::fs::symlink(base.path(), root.join("dir-out")).unwrap();
    std::os::unix::fs::symlink("a/b/seg.ts", root.join("link-in.ts")).unwrap();
    let srv = Server::start(&root, "");

    let cases: &[(&str, u16)] = &[
        ("/../secret.ts", 400),
        ("/a/../../secret.ts", 400),
        ("/a/b/../../../secret.ts", 400),
        ("/%2e%2e/secret.ts", 400),
        ("/%2E%2E/secret.ts", 400),
        ("/a/%2e%2e/%2e%2e/secret.ts", 400),
        ("/.%2e/secret.ts", 400),
        ("/..%2fsecret.ts", 400),
        ("/a%2f..%2f..%2fsecret.ts", 400),
        ("/..%5csecret.ts", 400),
        ("/top.ts%00.m3u8", 400),
        ("/top.ts%00", 400),
        ("/%", 400),
        ("/%zz", 400),
        ("/link-out.ts", 404),
        ("/abs-out.ts", 404),
        ("/dir-out/secret.ts", 404),
        ("//etc/passwd", 404),
        ("http://evil/../secret.ts", 400),
    ];
    for (target, status) in cases {
        let out = srv.raw(
            format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        let text = String::from_utf8_lossy(&out);
        assert!(
            !text.contains("SECRET"),
            "{target} leaked the secret: {text}"
        );
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status} ")),
            "{target}: {text}"
        );
    }
    // Normalisation that stays inside the root is fine.
    for ok in [
        "/a/b/seg.ts",
        "/a/./b/seg.ts",
        "/a/x/../b/seg.ts",
        "//a//b//seg.ts",
        "/a/%62/seg.ts",
        "/link-in.ts",
        "http://host/a/b/seg.ts",
    ] {
        let r = srv.get(ok, &[]);
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"segment"[..]),
            "{ok}"
        );
    }
}
