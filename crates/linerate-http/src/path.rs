//! Request-target → file path under the served root (RFC 9112 §3.2, RFC 3986 §5.2.4).
//!
//! The output can never name anything outside the root: percent-decoding happens first,
//! then dot-segment removal; encoded slashes and NUL are refused. Symlinks are the
//! server's job (it opens with `RESOLVE_BENEATH`). The query string is dropped.
//!
//! Decoding before removing dot segments is the safe order for a file server: `%2e%2e`
//! is `..` to the filesystem, so it must be `..` here too. A `..` that would climb above
//! the root is an error rather than being clamped as RFC 3986 §5.2.4 would: no legitimate
//! player sends one, and clamping would make `/../../etc/passwd` and `/etc/passwd` the
//! same cache object.
//!
//! Backslash: a raw `\` is an ordinary byte, because on Linux it is an ordinary filename
//! byte and never a separator (neither for `openat2` nor for this module), so `..\..\x`
//! is one segment with an odd name and cannot climb. Browsers never send a raw `\` (the
//! WHATWG URL parser turns it into `/`), so accepting it only serves odd clients and costs
//! nothing. The encoded `%5C` is refused anyway, together with `%2F`: both are the
//! classic way to make one hop see a separator that another hop does not (IIS and some
//! proxies decode `%5C` to a separator), and no legitimate segment name needs them.
//!
//! Not here: the server's root, symlink policy, or mapping a directory to an index file
//! (directories are not listed and have no index).

/// Why a target cannot be mapped to a path. All answer 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Not origin-form or absolute-form (e.g. `*` or authority-form on GET).
    BadForm,
    /// `%` not followed by two hex digits.
    BadPercentEncoding,
    /// `%2F`/`%2f` or `%5C`/`%5c` in the path: refused, since it changes segment
    /// boundaries for some decoder along the way.
    EncodedSlash,
    /// A NUL byte (raw or `%00`).
    Nul,
    /// `..` segments that would climb above the root.
    EscapesRoot,
}

impl PathError {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            PathError::BadForm => "bad_form",
            PathError::BadPercentEncoding => "bad_percent_encoding",
            PathError::EncodedSlash => "encoded_slash",
            PathError::Nul => "nul",
            PathError::EscapesRoot => "escapes_root",
        }
    }
}

/// A decoded, normalised path relative to the root: no leading `/`, no `.`/`..`/empty
/// segments, no NUL. An empty path means the root itself. A trailing slash is kept as
/// [`NormalPath::is_directory_form`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormalPath {
    /// The relative path bytes, segments joined with `/`. Not necessarily UTF-8: Linux
    /// filenames are bytes, and `%C3%A9` decodes to the two bytes of `é`.
    pub relative: Vec<u8>,
    /// The target ended in `/` (the server answers 404: directories are not listed).
    /// Also true for the root, and for a last segment of `.` or `..` (`/a/b/..` is
    /// `/a/` after RFC 3986 §5.2.4).
    pub is_directory_form: bool,
}

/// Map a raw request-target (origin-form `/a/b?q` or absolute-form `http://h/a/b?q`).
///
/// Absolute-form (RFC 9112 §3.2.2) is accepted for `http` and `https`, scheme matched
/// case-insensitively (RFC 3986 §3.1); its authority is dropped here, must not be empty
/// and must not carry userinfo. Query and fragment are dropped. Percent-decoding accepts
/// either hex case.
pub fn normalize_target(target: &[u8]) -> Result<NormalPath, PathError> {
    let path = path_component(target)?;
    let decoded = percent_decode(path)?;
    remove_dot_segments(&decoded)
}

/// The path component of an origin-form or absolute-form target, query and fragment cut.
fn path_component(target: &[u8]) -> Result<&[u8], PathError> {
    let after_scheme = if target.first() == Some(&b'/') {
        return Ok(cut_query(target));
    } else if let Some(rest) = strip_prefix_ignore_case(target, b"http://") {
        rest
    } else if let Some(rest) = strip_prefix_ignore_case(target, b"https://") {
        rest
    } else {
        // `*` (asterisk-form, OPTIONS only), authority-form (CONNECT only), relative
        // references: none of them names a file (RFC 9112 §3.2.3, §3.2.4).
        return Err(PathError::BadForm);
    };
    let authority_end = after_scheme
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(after_scheme.len());
    let authority = &after_scheme[..authority_end];
    // RFC 9110 §4.2.1: a recipient of an "http" URI with an empty host "MUST reject it as
    // invalid". RFC 9110 §4.2.4: a recipient SHOULD treat userinfo as an error.
    if authority.is_empty() || authority.contains(&b'@') {
        return Err(PathError::BadForm);
    }
    let rest = cut_query(&after_scheme[authority_end..]);
    if rest.is_empty() {
        // `http://h` and `http://h?q`: an empty path is the root (RFC 9112 §3.2.1).
        return Ok(b"/");
    }
    Ok(rest)
}

/// Everything before the first `?` or `#`.
fn cut_query(s: &[u8]) -> &[u8] {
    let end = s
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(s.len());
    &s[..end]
}

fn strip_prefix_ignore_case<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    if s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix) {
        Some(&s[prefix.len()..])
    } else {
        None
    }
}

/// Percent-decode (RFC 3986 §2.1), refusing NUL and encoded separators.
fn percent_decode(path: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        match path[i] {
            0 => return Err(PathError::Nul),
            b'%' => {
                let hi = path.get(i + 1).and_then(|&b| hex_value(b));
                let lo = path.get(i + 2).and_then(|&b| hex_value(b));
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(PathError::BadPercentEncoding);
                };
                match (hi << 4) | lo {
                    0 => return Err(PathError::Nul),
                    b'/' | b'\\' => return Err(PathError::EncodedSlash),
                    byte => out.push(byte),
                }
                i += 3;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    Ok(out)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// RFC 3986 §5.2.4 on an absolute decoded path, with two deliberate differences: empty
/// segments are dropped (`//` is `/`, as the filesystem would read it anyway, and it
/// keeps one cache key per file), and climbing above the root is an error.
fn remove_dot_segments(path: &[u8]) -> Result<NormalPath, PathError> {
    let mut segments: Vec<&[u8]> = Vec::new();
    // The root itself is a directory; each later segment decides afresh.
    let mut is_directory_form = true;
    // The path starts with `/`, so the first split item is the empty string before it.
    for segment in path.split(|&b| b == b'/') {
        match segment {
            b"" | b"." => is_directory_form = true,
            b".." => {
                if segments.pop().is_none() {
                    return Err(PathError::EscapesRoot);
                }
                is_directory_form = true;
            }
            name => {
                segments.push(name);
                is_directory_form = false;
            }
        }
    }
    Ok(NormalPath {
        relative: segments.join(&b'/'),
        is_directory_form,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;

    fn ok(target: &[u8]) -> (String, bool) {
        let p = normalize_target(target).unwrap();
        (String::from_utf8(p.relative).unwrap(), p.is_directory_form)
    }

    fn file(s: &str) -> (String, bool) {
        (s.to_owned(), false)
    }

    fn dir(s: &str) -> (String, bool) {
        (s.to_owned(), true)
    }

    #[test]
    fn origin_form() {
        assert_eq!(ok(b"/a/b.ts"), file("a/b.ts"));
        assert_eq!(ok(b"/a/b.ts?x=1&y=/../.."), file("a/b.ts"));
        assert_eq!(ok(b"/a/b.ts#frag"), file("a/b.ts"));
        assert_eq!(ok(b"/"), dir(""));
        assert_eq!(ok(b"/?q"), dir(""));
        assert_eq!(ok(b"/a/"), dir("a"));
    }

    #[test]
    fn absolute_form() {
        assert_eq!(ok(b"http://cdn.example/a/b.ts?x"), file("a/b.ts"));
        assert_eq!(ok(b"HTTPS://cdn.example:443/a/"), dir("a"));
        assert_eq!(ok(b"http://cdn.example"), dir(""));
        assert_eq!(ok(b"http://cdn.example?q=/x"), dir(""));
        assert_eq!(ok(b"http://[::1]:8080/x"), file("x"));
        assert_eq!(normalize_target(b"http:///a"), Err(PathError::BadForm));
        assert_eq!(
            normalize_target(b"http://user@h/a"),
            Err(PathError::BadForm)
        );
        assert_eq!(normalize_target(b"ftp://h/a"), Err(PathError::BadForm));
        assert_eq!(normalize_target(b"http:/a"), Err(PathError::BadForm));
    }

    #[test]
    fn bad_forms() {
        for t in [
            &b"*"[..],
            b"",
            b"a/b",
            b"cdn.example:443",
            b"?q",
            b"%2Fa",
            b"..",
        ] {
            assert_eq!(normalize_target(t), Err(PathError::BadForm), "{t:?}");
        }
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(ok(b"/a%20b"), file("a b"));
        assert_eq!(ok(b"/%41%6a%6A"), file("Ajj"));
        assert_eq!(ok(b"/caf%C3%A9.mp4"), file("café.mp4"));
        // A decoded `?` or `#` is part of the name, not a delimiter.
        assert_eq!(ok(b"/a%3Fb%23c"), file("a?b#c"));
        // Decoding happens once: `%2541` is `%41`, not `A`.
        assert_eq!(ok(b"/%2541"), file("%41"));
    }

    #[test]
    fn bad_percent_encoding() {
        for t in [
            &b"/%"[..],
            b"/%4",
            b"/%G0",
            b"/%0G",
            b"/a%",
            b"/a%zz",
            b"/%%41",
            b"/% 41",
        ] {
            assert_eq!(
                normalize_target(t),
                Err(PathError::BadPercentEncoding),
                "{t:?}"
            );
        }
    }

    #[test]
    fn encoded_slashes() {
        for t in [
            &b"/a%2Fb"[..],
            b"/a%2fb",
            b"/a%5Cb",
            b"/a%5cb",
            b"/%2e%2e%2f%2e%2e%2fetc",
        ] {
            assert_eq!(normalize_target(t), Err(PathError::EncodedSlash), "{t:?}");
        }
    }

    #[test]
    fn nul() {
        assert_eq!(normalize_target(b"/a\0b"), Err(PathError::Nul));
        assert_eq!(normalize_target(b"/a%00b"), Err(PathError::Nul));
        assert_eq!(normalize_target(b"http://h/%00"), Err(PathError::Nul));
    }

    #[test]
    fn dot_segments() {
        assert_eq!(ok(b"/a/./b"), file("a/b"));
        assert_eq!(ok(b"/a/../b"), file("b"));
        assert_eq!(ok(b"/a/b/.."), dir("a"));
        assert_eq!(ok(b"/a/b/."), dir("a/b"));
        assert_eq!(ok(b"/a/.."), dir(""));
        assert_eq!(ok(b"/."), dir(""));
        assert_eq!(ok(b"/a/b/../../c"), file("c"));
        // Encoded dots are dots (decoding comes first).
        assert_eq!(ok(b"/a/%2e%2E/b"), file("b"));
        assert_eq!(ok(b"/a/.%2e/b"), file("b"));
        assert_eq!(ok(b"/a/%2e/b"), file("a/b"));
        // Not dot segments.
        assert_eq!(ok(b"/.../a"), file(".../a"));
        assert_eq!(ok(b"/..a/.b"), file("..a/.b"));
        assert_eq!(ok(b"/a..b"), file("a..b"));
    }

    #[test]
    fn escapes_root() {
        for t in [
            &b"/.."[..],
            b"/../etc/passwd",
            b"/a/../../b",
            b"/%2e%2e/etc/passwd",
            b"/.%2E/x",
            b"/a/./../..",
            b"http://h/../x",
            b"//../x",
        ] {
            assert_eq!(normalize_target(t), Err(PathError::EscapesRoot), "{t:?}");
        }
    }

    #[test]
    fn empty_segments_collapse() {
        assert_eq!(ok(b"//a///b"), file("a/b"));
        assert_eq!(ok(b"//"), dir(""));
        assert_eq!(ok(b"/a//"), dir("a"));
    }

    #[test]
    fn raw_backslash_is_an_ordinary_byte() {
        assert_eq!(ok(b"/a\\b"), file("a\\b"));
        // `..\` is a segment with an odd name, not a parent reference.
        assert_eq!(ok(b"/..\\..\\etc\\passwd"), file("..\\..\\etc\\passwd"));
        assert_eq!(ok(b"/a/..\\"), file("a/..\\"));
    }

    #[test]
    fn error_names() {
        assert_eq!(PathError::BadForm.as_str(), "bad_form");
        assert_eq!(
            PathError::BadPercentEncoding.as_str(),
            "bad_percent_encoding"
        );
        assert_eq!(PathError::EncodedSlash.as_str(), "encoded_slash");
        assert_eq!(PathError::Nul.as_str(), "nul");
        assert_eq!(PathError::EscapesRoot.as_str(), "escapes_root");
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        /// Segments from a small alphabet rich in dots, slashes and escapes.
        fn target() -> impl Strategy<Value = Vec<u8>> {
            let piece = prop_oneof![
                Just(b"/".to_vec()),
                Just(b".".to_vec()),
                Just(b"..".to_vec()),
                Just(b"%2e".to_vec()),
                Just(b"%2E".to_vec()),
                Just(b"a".to_vec()),
                Just(b"b.ts".to_vec()),
                Just(b"\\".to_vec()),
                Just(b"%41".to_vec()),
            ];
            proptest::collection::vec(piece, 0..12).prop_map(|pieces| {
                let mut t = b"/".to_vec();
                t.extend(pieces.concat());
                t
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn output_is_normal(t in target()) {
                if let Ok(p) = normalize_target(&t) {
                    prop_assert!(!p.relative.starts_with(b"/"));
                    prop_assert!(!p.relative.ends_with(b"/"));
                    prop_assert!(!p.relative.contains(&0));
                    for seg in p.relative.split(|&b| b == b'/') {
                        prop_assert!(seg != b"." && seg != b"..", "{:?}", p);
                        prop_assert!(!seg.is_empty() || p.relative.is_empty(), "{:?}", p);
                    }
                    if p.relative.is_empty() {
                        prop_assert!(p.is_directory_form);
                    }
                }
            }

            #[test]
            fn arbitrary_bytes_never_panic_and_stay_normal(t in proptest::collection::vec(any::<u8>(), 0..64)) {
                if let Ok(p) = normalize_target(&t) {
                    prop_assert!(!p.relative.starts_with(b"/"));
                    for seg in p.relative.split(|&b| b == b'/') {
                        prop_assert!(seg != b"." && seg != b"..");
                    }
                }
            }

            /// Plain safe characters never fail and come back unchanged (minus the slash).
            #[test]
            fn plain_paths_pass_through(segs in proptest::collection::vec("[A-Za-z0-9_-][A-Za-z0-9._-]{0,11}", 1..6)) {
                let segs: Vec<String> = segs.into_iter().filter(|s| s != "." && s != "..").collect();
                prop_assume!(!segs.is_empty());
                let joined = segs.join("/");
                let p = normalize_target(format!("/{joined}").as_bytes());
                prop_assert_eq!(p, Ok(NormalPath { relative: joined.clone().into_bytes(), is_directory_form: false }));
                let d = normalize_target(format!("/{joined}/").as_bytes());
                prop_assert_eq!(d, Ok(NormalPath { relative: joined.into_bytes(), is_directory_form: true }));
            }
        }
    }
}
