//! End to end: byte ranges (RFC 9110 §14) and preconditions (§13), bodies compared
//! byte for byte with the file, multipart parts parsed and checked.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use support::{content, library, Server};

const LEN: usize = 1_000_000;

fn setup() -> (tempfile::TempDir, Server, Vec<u8>) {
    let body = content(LEN, 9);
    let lib = library(&[("f.mp4", &body)]);
    let srv = Server::start(lib.path(), "");
    (lib, srv, body)
}

#[test]
fn single_suffix_and_open_ended_ranges() {
    let (_lib, srv, body) = setup();
    for (spec, start, end) in [
        ("bytes=0-0", 0, 1),
        ("bytes=100-199", 100, 200),
        ("bytes=999999-", 999_999, LEN),
        ("bytes=500000-", 500_000, LEN),
        ("bytes=-1", LEN - 1, LEN),
        ("bytes=-4096", LEN - 4096, LEN),
        ("bytes=-2000000", 0, LEN),
        ("bytes=900000-5000000", 900_000, LEN),
        ("BYTES=10-20", 10, 21),
    ] {
        let r = srv.get("/f.mp4", &[&format!("Range: {spec}")]);
        assert_eq!(r.status, 206, "{spec}");
        assert!(r.body == body[start..end], "{spec}: wrong bytes");
        assert_eq!(
            r.header("content-range").unwrap(),
            format!("bytes {}-{}/{LEN}", start, end - 1),
            "{spec}"
        );
        assert_eq!(
            r.header("content-length").unwrap(),
            (end - start).to_string()
        );
    }
}

#[test]
fn unsatisfiable_and_ignored_ranges() {
    let (_lib, srv, body) = setup();
    for spec in ["bytes=1000000-", "bytes=2000000-3000000", "bytes=-0"] {
        let r = srv.get("/f.mp4", &[&format!("Range: {spec}")]);
        assert_eq!(r.status, 416, "{spec}");
        assert_eq!(r.header("content-range").unwrap(), format!("bytes */{LEN}"));
    }
    // Invalid syntax or another unit: the header is ignored, whole file with 200.
    for spec in [
        "bytes=5-1",
        "bytes=abc",
        "items=0-1",
        "bytes",
        "bytes=1-2-3",
    ] {
        let r = srv.get("/f.mp4", &[&format!("Range: {spec}")]);
        assert_eq!(r.status, 200, "{spec}");
        assert!(r.body == body, "{spec}");
    }
    // HEAD ignores Range (range handling is defined only for GET).
    let r = srv.request("HEAD", "/f.mp4", &["Range: bytes=0-9"]);
    assert_eq!(
        (r.status, r.header("content-length")),
        (200, Some("1000000"))
    );
}

/// Split a multipart/byteranges body into (content-range, bytes) parts.
fn parts(r: &support::Response) -> Vec<(String, Vec<u8>)> {
    let ct = r.header("content-type").unwrap();
    let boundary = ct.split("boundary=").nth(1).unwrap();
    let delim = format!("--{boundary}");
    let mut out = Vec::new();
    let body = &r.body;
    let mut pos = 0;
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay[from..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|p| p + from)
    };
    loop {
        let d = find(body, delim.as_bytes(), pos).unwrap();
        let after = d + delim.len();
        if body[after..].starts_with(b"--") {
            assert_eq!(&body[after..], b"--\r\n", "closing delimiter ends the body");
            break;
        }
        let head_end = find(body, b"\r\n\r\n", after).unwrap();
        let head = String::from_utf8_lossy(&body[after..head_end]).to_string();
        let cr = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .unwrap()
            .to_string();
        assert!(head.contains("Content-Type: video/mp4"), "{head}");
        let range = cr
            .trim_start_matches("bytes ")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let (a, b) = range.split_once('-').unwrap();
        let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
        let start = head_end + 4;
        out.push((cr, body[start..start + (b - a + 1)].to_vec()));
        pos = start + (b - a + 1);
        assert_eq!(&body[pos..pos + 2], b"\r\n");
    }
    out
}

#[test]
fn multipart_ranges_are_exact_merged_and_capped() {
    let (_lib, srv, body) = setup();
    let r = srv.get("/f.mp4", &["Range: bytes=0-9, 500-599, -10"]);
    assert_eq!(r.status, 206);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("multipart/byteranges; boundary="));
    assert_eq!(
        r.header("content-length").unwrap(),
        r.body.len().to_string()
    );
    let p = parts(&r);
    assert_eq!(p.len(), 3);
    assert_eq!(p[0], (format!("bytes 0-9/{LEN}"), body[0..10].to_vec()));
    assert_eq!(
        p[1],
        (format!("bytes 500-599/{LEN}"), body[500..600].to_vec())
    );
    assert_eq!(
        p[2],
        (
            format!("bytes {}-{}/{LEN}", LEN - 10, LEN - 1),
            body[LEN - 10..].to_vec()
        )
    );

    // Overlapping and adjacent ranges merge; out-of-order ranges come back sorted.
    let r = srv.get("/f.mp4", &["Range: bytes=700-799,0-99,50-149,150-199"]);
    let p = parts(&r);
    assert_eq!(p.len(), 2);
    assert_eq!(p[0], (format!("bytes 0-199/{LEN}"), body[0..200].to_vec()));
    assert_eq!(
        p[1],
        (format!("bytes 700-799/{LEN}"), body[700..800].to_vec())
    );

    // Ranges that merge into one give a plain 206.
    let r = srv.get("/f.mp4", &["Range: bytes=0-99,100-199"]);
    assert_eq!(
        r.header("content-range").unwrap(),
        format!("bytes 0-199/{LEN}")
    );

    // Unsatisfiable members are dropped; the rest are served.
    let r = srv.get("/f.mp4", &["Range: bytes=5000000-6000000, 1-2"]);
    assert_eq!((r.status, r.body.as_slice()), (206, &body[1..3]));

    // Thousands of tiny parts: the cap answers with the whole file instead.
    let many: Vec<String> = (0..2000)
        .map(|i| format!("{}-{}", i * 10, i * 10))
        .collect();
    let header = format!("Range: bytes={}", many[..90].join(","));
    let r = srv.get("/f.mp4", &[&header]);
    assert_eq!(r.status, 200);
    assert!(r.body == body);
}

#[test]
fn preconditions_and_if_range() {
    let (_lib, srv, body) = setup();
    let full = srv.get("/f.mp4", &[]);
    let etag = full.header("etag").unwrap().to_string();
    let lm = full.header("last-modified").unwrap().to_string();

    let r = srv.get("/f.mp4", &[&format!("If-None-Match: {etag}")]);
    assert_eq!((r.status, r.body.len()), (304, 0));
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert_eq!(r.header("cache-control"), Some("public, max-age=86400"));
    assert_eq!(
        srv.get("/f.mp4", &[&format!("If-None-Match: \"other\", W/{etag}")])
            .status,
        304,
        "weak comparison"
    );
    assert_eq!(srv.get("/f.mp4", &["If-None-Match: *"]).status, 304);
    assert_eq!(srv.get("/f.mp4", &["If-None-Match: \"other\""]).status, 200);
    assert_eq!(
        srv.get("/f.mp4", &[&format!("If-Modified-Since: {lm}")])
            .status,
        304
    );
    assert_eq!(
        srv.get(
            "/f.mp4",
            &["If-Modified-Since: Thu, 01 Jan 1970 00:00:01 GMT"]
        )
        .status,
        200
    );
    assert_eq!(
        srv.get("/f.mp4", &["If-Modified-Since: garbage"]).status,
        200,
        "invalid date ignored"
    );
    // If-None-Match takes precedence over If-Modified-Since (§13.2.2).
    assert_eq!(
        srv.get(
            "/f.mp4",
            &[
                "If-None-Match: \"other\"",
                &format!("If-Modified-Since: {lm}")
            ]
        )
        .status,
        200
    );

    assert_eq!(srv.get("/f.mp4", &["If-Match: \"other\""]).status, 412);
    assert_eq!(
        srv.get("/f.mp4", &[&format!("If-Match: W/{etag}")]).status,
        412,
        "strong comparison"
    );
    assert_eq!(
        srv.get("/f.mp4", &[&format!("If-Match: {etag}")]).status,
        200
    );
    assert_eq!(srv.get("/f.mp4", &["If-Match: *"]).status, 200);
    assert_eq!(
        srv.get(
            "/f.mp4",
            &["If-Unmodified-Since: Thu, 01 Jan 1970 00:00:01 GMT"]
        )
        .status,
        412
    );
    assert_eq!(
        srv.get("/f.mp4", &[&format!("If-Unmodified-Since: {lm}")])
            .status,
        200
    );

    // If-Range: a matching validator applies the range, anything else sends it all.
    let r = srv.get(
        "/f.mp4",
        &["Range: bytes=0-3", &format!("If-Range: {etag}")],
    );
    assert_eq!((r.status, r.body.as_slice()), (206, &body[..4]));
    let r = srv.get("/f.mp4", &["Range: bytes=0-3", &format!("If-Range: {lm}")]);
    assert_eq!(r.status, 206);
    let r = srv.get("/f.mp4", &["Range: bytes=0-3", "If-Range: \"stale\""]);
    assert_eq!((r.status, r.body.len()), (200, LEN));
    let r = srv.get(
        "/f.mp4",
        &[
            "Range: bytes=0-3",
            "If-Range: Thu, 01 Jan 1970 00:00:01 GMT",
        ],
    );
    assert_eq!(r.status, 200);
}
