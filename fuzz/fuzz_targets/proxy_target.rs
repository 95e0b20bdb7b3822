//! Fuzz target: cache mode's request-target normaliser, `path::normalize_proxy_target`,
//! on any bytes. Nothing may panic; an accepted target must come out in normal form:
//! the path starts with `/`, has no `.` or `..` segment, no `?` or `#`, no raw byte
//! outside RFC 3986 `pchar`, and every escape is upper-case hex naming neither an
//! unreserved character (those are decoded), nor `/`, `\`, NUL or a control (those are
//! refused); normalising the output again gives it back unchanged; the query is the
//! input's, byte for byte. Together these are what keeps a route's `path_prefix`
//! meaningful: the path matched is the path forwarded, and it cannot climb.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_http::path::normalize_proxy_target;

fuzz_target!(|data: &[u8]| {
    let Ok(t) = normalize_proxy_target(data) else {
        return;
    };
    let path = t.path();
    assert!(path.starts_with(b"/"), "{t:?}");
    assert!(!path.contains(&b'?') && !path.contains(&b'#'), "{t:?}");
    for seg in path.split(|&b| b == b'/').skip(1) {
        assert!(seg != b"." && seg != b"..", "dot segment in {t:?}");
    }
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b == b'%' {
            let hex = &path[i + 1..i + 3];
            assert!(
                hex.iter().all(|c| matches!(c, b'0'..=b'9' | b'A'..=b'F')),
                "{t:?}"
            );
            let v = (hex_value(hex[0]) << 4) | hex_value(hex[1]);
            assert!(!is_unreserved(v), "unreserved left encoded in {t:?}");
            assert!(
                !matches!(v, 0..=0x1f | 0x7f | b'/' | b'\\'),
                "separator, NUL or control encoded in {t:?}"
            );
            i += 3;
        } else {
            assert!(b == b'/' || is_pchar(b), "raw {b:#x} in {t:?}");
            i += 1;
        }
    }
    // The query is forwarded as sent: from the first `?` to a fragment's `#`.
    let before_fragment = &data[..data.iter().position(|&b| b == b'#').unwrap_or(data.len())];
    let query = match before_fragment.iter().position(|&b| b == b'?') {
        Some(q) => &before_fragment[q..],
        None => &b""[..],
    };
    assert_eq!(t.query(), query, "query changed: {t:?}");
    let again = normalize_proxy_target(t.as_bytes());
    assert_eq!(again.as_ref(), Ok(&t), "not idempotent");
});

fn hex_value(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        _ => c - b'A' + 10,
    }
}

/// RFC 3986 §2.3 `unreserved`.
fn is_unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 §3.3 `pchar` less `pct-encoded`.
fn is_pchar(c: u8) -> bool {
    is_unreserved(c) || b"!$&'()*+,;=:@".contains(&c)
}
