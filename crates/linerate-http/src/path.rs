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
//! Cache mode has its own flavour, [`normalize_proxy_target`]: the path is forwarded to
//! an origin and is a cache key, so it must stay a URI naming the same resource rather
//! than become a file name. It decodes only percent-encoded *unreserved* characters
//! (RFC 3986 §6.2.2.2: `%2e` is `.`, `%41` is `A`; these are equivalent to the plain
//! character for every URI consumer), keeps every other escape with its hex upper-cased
//! (§6.2.2.1: `%3b` is `%3B`; decoding it to `;` could change what the origin reads),
//! then removes dot segments (§5.2.4, §6.2.2.3). Routing, keying and forwarding all
//! use the result, so a route's `path_prefix` is checked against the very path the
//! origin receives, and that path has no dot segment left to climb out of it with. It
//! refuses what the file-server flavour refuses, plus control characters (raw or
//! encoded: no origin path needs one, and some log or split on them) and a raw `\`
//! (an origin on Windows, or behind IIS, reads it as a separator, which would make
//! `/public/..\private` climb there after passing here as one segment).
//!
//! Not here: the server's root, symlink policy, or mapping a directory to an index file
//! (directories are not listed and have no index); route matching (the server's).

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
    /// A control character, raw or percent-encoded (0x01-0x1F, 0x7F; NUL is [`Nul`](
    /// PathError::Nul)). Only [`normalize_proxy_target`] checks for these.
    Control,
    /// A raw `\` in the path. Only [`normalize_proxy_target`] refuses it (see the
    /// module documentation).
    Backslash,
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
            PathError::Control => "control_character",
            PathError::Backslash => "backslash",
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
    split_target(target).map(|(path, _)| path)
}

/// The path and the query (with its `?`, or empty) of an origin-form or absolute-form
/// target; a fragment is cut (RFC 3986 §3.5: it is never part of a request).
fn split_target(target: &[u8]) -> Result<(&[u8], &[u8]), PathError> {
    let after_scheme = if target.first() == Some(&b'/') {
        return Ok(split_query(target));
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
    let (path, query) = split_query(&after_scheme[authority_end..]);
    if path.is_empty() {
        // `http://h` and `http://h?q`: an empty path is the root (RFC 9112 §3.2.1).
        return Ok((b"/", query));
    }
    Ok((path, query))
}

/// Everything before the first `?` or `#`, and the query (from its `?` to the `#` or
/// the end; empty when there is none).
fn split_query(s: &[u8]) -> (&[u8], &[u8]) {
    let end = s.iter().position(|&b| b == b'#').unwrap_or(s.len());
    let s = &s[..end];
    let path_end = s.iter().position(|&b| b == b'?').unwrap_or(s.len());
    s.split_at(path_end)
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

/// A request-target as cache mode routes, keys and forwards it (see
/// [`normalize_proxy_target`]): an origin-form path in normal form, then the query
/// exactly as it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyTarget {
    /// The path, then the query with its `?` (when there is one).
    bytes: Vec<u8>,
    /// Where the query starts in `bytes`.
    path_len: usize,
}

impl ProxyTarget {
    /// The normalised path: starts with `/`, no dot segment, only unreserved characters
    /// and `pchar` delimiters raw, everything else percent-encoded with upper-case hex.
    pub fn path(&self) -> &[u8] {
        &self.bytes[..self.path_len]
    }

    /// The query with its `?`, as sent; empty when there is none.
    pub fn query(&self) -> &[u8] {
        &self.bytes[self.path_len..]
    }

    /// Path and query: the origin-form target to forward.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Path and query, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// Normalise a raw request-target (origin-form `/a/b?q` or absolute-form
/// `http://h/a/b?q`) for cache mode: the path a route's `path_prefix` is matched
/// against, the cache key is built from and the origin receives.
///
/// In order, per byte of the path: a percent-encoded unreserved character (RFC 3986
/// §2.3: `ALPHA / DIGIT / "-" / "." / "_" / "~"`) is decoded (§6.2.2.2); any other
/// escape stays, hex upper-cased (§6.2.2.1); a raw byte that may not appear in a path
/// (§3.3 `pchar`: a space, `"`, `<`, `>`, `[`, `]`, `^`, `` ` ``, `{`, `|`, `}`, and
/// every byte from 0x80) is percent-encoded, as it must be on the wire, so `/café`
/// and `/caf%C3%A9` are one resource. Then dot segments are removed (§5.2.4).
///
/// Refused: what [`normalize_target`] refuses (the form, a bad escape, `%2F` and `%5C`,
/// NUL raw or encoded, a `..` that would climb above the root) plus control characters
/// raw or encoded ([`PathError::Control`]) and a raw `\` ([`PathError::Backslash`]).
///
/// Unlike [`normalize_target`], empty segments are kept (`/a//b` is not `/a/b` to
/// every origin: object stores keep both), and a `..` after one removes only it (RFC
/// 3986 §5.2.4: `/a//../b` is `/a/b`); neither can leave a prefix the path started
/// under, since the result has no dot segment. The query is kept exactly as sent: its
/// syntax is the origin's own, and [`crate::cache::key::query`] reads it for the key.
///
/// The result is its own normal form: normalising it again gives it back.
pub fn normalize_proxy_target(target: &[u8]) -> Result<ProxyTarget, PathError> {
    let (path, query) = split_target(target)?;
    let mut bytes = Vec::with_capacity(path.len() + query.len() + 1);
    normalize_proxy_path_into(path, &mut bytes)?;
    let path_len = bytes.len();
    bytes.extend_from_slice(query);
    Ok(ProxyTarget { bytes, path_len })
}

/// Append the proxy normal form of `path` (which starts with `/`, query already cut).
fn normalize_proxy_path_into(path: &[u8], out: &mut Vec<u8>) -> Result<(), PathError> {
    // `out` holds the segments kept so far, each with its leading `/` (segments have no
    // raw `/`): a `..` truncates to the last `/`. Empty: nothing to climb into.
    let base = out.len();
    let mut trailing_dot = false;
    // The path starts with `/`: the first split item is the empty string before it.
    for raw in path.split(|&b| b == b'/').skip(1) {
        let start = out.len();
        out.push(b'/');
        push_proxy_segment(raw, out)?;
        let segment = &out[start + 1..];
        trailing_dot = segment == b"." || segment == b"..";
        if segment == b".." {
            out.truncate(start);
            // §5.2.4 2C: remove the last segment; there is none to climb into.
            if out.len() == base {
                return Err(PathError::EscapesRoot);
            }
            let parent = out[base..].iter().rposition(|&b| b == b'/').unwrap_or(0);
            out.truncate(base + parent);
        } else if segment == b"." {
            out.truncate(start);
        }
    }
    // `/a/.` and `/a/b/..` both name the directory `/a/` (§5.2.4 2B, 2C).
    if trailing_dot || out.len() == base {
        out.push(b'/');
    }
    Ok(())
}

/// Append one raw segment (no `/`) in proxy normal form; see [`normalize_proxy_target`].
fn push_proxy_segment(raw: &[u8], out: &mut Vec<u8>) -> Result<(), PathError> {
    let mut i = 0;
    while i < raw.len() {
        let byte = raw[i];
        if byte == b'%' {
            let hi = raw.get(i + 1).and_then(|&b| hex_value(b));
            let lo = raw.get(i + 2).and_then(|&b| hex_value(b));
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(PathError::BadPercentEncoding);
            };
            match (hi << 4) | lo {
                0 => return Err(PathError::Nul),
                b'/' | b'\\' => return Err(PathError::EncodedSlash),
                c if is_control(c) => return Err(PathError::Control),
                c if is_unreserved(c) => out.push(c),
                c => push_escaped(out, c),
            }
            i += 3;
            continue;
        }
        match byte {
            0 => return Err(PathError::Nul),
            b'\\' => return Err(PathError::Backslash),
            c if is_control(c) => return Err(PathError::Control),
            c if is_pchar(c) => out.push(c),
            c => push_escaped(out, c),
        }
        i += 1;
    }
    Ok(())
}

/// `%XX` with upper-case hex (RFC 3986 §2.1: "should use uppercase hexadecimal digits").
fn push_escaped(out: &mut Vec<u8>, c: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(&[b'%', HEX[usize::from(c >> 4)], HEX[usize::from(c & 0xf)]]);
}

/// C0 controls other than NUL, and DEL.
fn is_control(c: u8) -> bool {
    matches!(c, 0x01..=0x1f | 0x7f)
}

/// RFC 3986 §2.3 `unreserved`.
fn is_unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 §3.3 `pchar` less `pct-encoded`: what may stand raw in a path segment.
fn is_pchar(c: u8) -> bool {
    is_unreserved(c)
        || matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
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
        assert_eq!(PathError::Control.as_str(), "control_character");
        assert_eq!(PathError::Backslash.as_str(), "backslash");
    }

    fn proxy(target: &[u8]) -> String {
        String::from_utf8(normalize_proxy_target(target).unwrap().into_bytes()).unwrap()
    }

    fn proxy_err(target: &[u8]) -> PathError {
        normalize_proxy_target(target).unwrap_err()
    }

    #[test]
    fn proxy_rfc3986_dot_segment_examples() {
        // §5.2.4's own examples, made absolute.
        assert_eq!(proxy(b"/a/b/c/./../../g"), "/a/g");
        assert_eq!(proxy(b"/mid/content=5/../6"), "/mid/6");
        // §5.4.1/§5.4.2 results that stay below the root, resolved against
        // `http://a/b/c/d;p?q` by hand.
        assert_eq!(proxy(b"/b/c/./g"), "/b/c/g");
        assert_eq!(proxy(b"/b/c/."), "/b/c/");
        assert_eq!(proxy(b"/b/c/./"), "/b/c/");
        assert_eq!(proxy(b"/b/c/.."), "/b/");
        assert_eq!(proxy(b"/b/c/../"), "/b/");
        assert_eq!(proxy(b"/b/c/../g"), "/b/g");
        assert_eq!(proxy(b"/b/c/../.."), "/");
        assert_eq!(proxy(b"/b/c/../../g"), "/g");
        assert_eq!(proxy(b"/b/c/g."), "/b/c/g.");
        assert_eq!(proxy(b"/b/c/.g"), "/b/c/.g");
        assert_eq!(proxy(b"/b/c/g.."), "/b/c/g..");
        assert_eq!(proxy(b"/b/c/..g"), "/b/c/..g");
        assert_eq!(proxy(b"/b/c/./../g"), "/b/g");
        assert_eq!(proxy(b"/b/c/./g/."), "/b/c/g/");
        assert_eq!(proxy(b"/b/c/g/./h"), "/b/c/g/h");
        assert_eq!(proxy(b"/b/c/g/../h"), "/b/c/h");
        assert_eq!(proxy(b"/b/c/g;x=1/./y"), "/b/c/g;x=1/y");
        assert_eq!(proxy(b"/b/c/g;x=1/../y"), "/b/c/y");
        // §5.4.2's `../../../g` climbs above the root: clamped by RFC 3986, refused
        // here (as `normalize_target` does).
        assert_eq!(proxy_err(b"/b/c/../../../g"), PathError::EscapesRoot);
        assert_eq!(proxy_err(b"/../g"), PathError::EscapesRoot);
        assert_eq!(proxy_err(b"/.."), PathError::EscapesRoot);
    }

    #[test]
    fn proxy_rfc3986_equivalence_examples() {
        // §6.2.2: `eXAMPLE://a/./b/../b/%63/%7bfoo%7d` is `example://a/b/c/%7Bfoo%7D`.
        assert_eq!(proxy(b"/./b/../b/%63/%7bfoo%7d"), "/b/c/%7Bfoo%7D");
        // §6.2.2.2: `%7Euser` is `~user`; every unreserved character decodes.
        assert_eq!(proxy(b"/%7Euser/%7e"), "/~user/~");
        assert_eq!(proxy(b"/%41%5a%61%7a%30%39%2D%2e%5F%7E"), "/AZaz09-._~");
        // §6.2.2.1: other escapes stay, hex upper-cased (`%3b` could mean a parameter
        // to the origin once decoded).
        assert_eq!(proxy(b"/a%3bb%3D%20%c3%a9%25"), "/a%3Bb%3D%20%C3%A9%25");
        // Encoded dots are dots, decoded before dot segments are removed.
        assert_eq!(proxy(b"/public/%2e%2e/private/x"), "/private/x");
        assert_eq!(proxy(b"/public/%2E%2e/private/x"), "/private/x");
        assert_eq!(proxy(b"/public/.%2e/private/x"), "/private/x");
        assert_eq!(proxy(b"/public/%2e/a.txt"), "/public/a.txt");
        // The four spellings of one object.
        for t in [
            &b"/public/a.txt"[..],
            b"/public/./a.txt",
            b"/public/x/../a.txt",
            b"/public/%61.txt",
        ] {
            assert_eq!(proxy(t), "/public/a.txt", "{t:?}");
        }
        // Decoding happens once: `%252e` is the three characters `%2e`, not a dot.
        assert_eq!(proxy(b"/a/%252e%252e/b"), "/a/%252e%252e/b");
    }

    #[test]
    fn proxy_raw_bytes_outside_pchar_are_encoded() {
        assert_eq!(proxy("/caf\u{e9}".as_bytes()), "/caf%C3%A9");
        assert_eq!(
            proxy(b"/a\"b<c>d[e]f^g`h{i|j}k"),
            "/a%22b%3Cc%3Ed%5Be%5Df%5Eg%60h%7Bi%7Cj%7Dk"
        );
        assert_eq!(proxy(b"/a b"), "/a%20b");
        // Sub-delims, `:` and `@` stay raw: they are the origin's to read.
        assert_eq!(proxy(b"/!$&'()*+,;=:@"), "/!$&'()*+,;=:@");
    }

    #[test]
    fn proxy_query_is_kept_as_sent() {
        let t = normalize_proxy_target(b"/a/./b?x=%2e%2E&y=/../..&z=%7e").unwrap();
        assert_eq!(t.path(), b"/a/b");
        assert_eq!(t.query(), b"?x=%2e%2E&y=/../..&z=%7e");
        assert_eq!(t.as_bytes(), b"/a/b?x=%2e%2E&y=/../..&z=%7e");
        assert_eq!(proxy(b"/a?"), "/a?");
        // A fragment is never part of a request (RFC 3986 §3.5).
        assert_eq!(proxy(b"/a?q#f"), "/a?q");
        assert_eq!(proxy(b"/a#f?q"), "/a");
    }

    #[test]
    fn proxy_absolute_form() {
        assert_eq!(proxy(b"http://h/public/../x?q"), "/x?q");
        assert_eq!(proxy(b"HTTPS://h:8443/%61"), "/a");
        assert_eq!(proxy(b"http://h"), "/");
        assert_eq!(proxy(b"http://h?q"), "/?q");
        assert_eq!(proxy_err(b"http://h/../x"), PathError::EscapesRoot);
        assert_eq!(proxy_err(b"http:///a"), PathError::BadForm);
        assert_eq!(proxy_err(b"http://u@h/a"), PathError::BadForm);
        assert_eq!(proxy_err(b"ftp://h/a"), PathError::BadForm);
        assert_eq!(proxy_err(b"*"), PathError::BadForm);
        assert_eq!(proxy_err(b"a/b"), PathError::BadForm);
    }

    #[test]
    fn proxy_empty_segments_are_kept() {
        assert_eq!(proxy(b"/a//b"), "/a//b");
        assert_eq!(proxy(b"//"), "//");
        // A `..` after an empty segment removes only it (§5.2.4).
        assert_eq!(proxy(b"/a//../b"), "/a/b");
        assert_eq!(proxy(b"//../x"), "/x");
        assert_eq!(proxy(b"/"), "/");
        assert_eq!(proxy(b"/."), "/");
        assert_eq!(proxy(b"/a/.."), "/");
    }

    #[test]
    fn proxy_refusals() {
        let cases: &[(&[u8], PathError)] = &[
            (b"/a%2Fb", PathError::EncodedSlash),
            (b"/a%2fb", PathError::EncodedSlash),
            (b"/a%5Cb", PathError::EncodedSlash),
            (b"/a%5cb", PathError::EncodedSlash),
            (b"/..%2f..%2fetc", PathError::EncodedSlash),
            (b"/a\\b", PathError::Backslash),
            (b"/public/..\\private", PathError::Backslash),
            (b"/a\0b", PathError::Nul),
            (b"/a%00b", PathError::Nul),
            (b"/a%01", PathError::Control),
            (b"/a%0d%0aX-Injected:1", PathError::Control),
            (b"/a%1F", PathError::Control),
            (b"/a%7f", PathError::Control),
            (b"/a\x01", PathError::Control),
            (b"/a\tb", PathError::Control),
            (b"/a\x7f", PathError::Control),
            (b"/%", PathError::BadPercentEncoding),
            (b"/%4", PathError::BadPercentEncoding),
            (b"/%G0", PathError::BadPercentEncoding),
            (b"/a%zz", PathError::BadPercentEncoding),
            (b"/%%41", PathError::BadPercentEncoding),
            (b"/public/../../x", PathError::EscapesRoot),
            (b"/%2e%2e/x", PathError::EscapesRoot),
            (b"/a/./../..", PathError::EscapesRoot),
        ];
        for (t, e) in cases {
            assert_eq!(normalize_proxy_target(t), Err(*e), "{t:?}");
        }
        // The query is not the path's to check.
        assert_eq!(proxy(b"/a?b=%2F%00%5C\\"), "/a?b=%2F%00%5C\\");
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

        /// Targets for the proxy flavour: `/` then pieces rich in dots (plain and
        /// encoded), encoded unreserved and reserved characters, raw bytes that must be
        /// encoded, and the prefixes of two routes (`/public/`, `/private/`), spelled
        /// plainly and encoded.
        fn proxy_target() -> impl Strategy<Value = Vec<u8>> {
            let piece = prop_oneof![
                Just(b"/".to_vec()),
                Just(b"/".to_vec()),
                Just(b".".to_vec()),
                Just(b"..".to_vec()),
                Just(b"%2e".to_vec()),
                Just(b"%2E".to_vec()),
                Just(b"%2E%2e".to_vec()),
                Just(b".%2e".to_vec()),
                Just(b"public".to_vec()),
                Just(b"%70ublic".to_vec()),
                Just(b"private".to_vec()),
                Just(b"pr%69vate".to_vec()),
                Just(b"a".to_vec()),
                Just(b"%61".to_vec()),
                Just(b"%7e".to_vec()),
                Just(b"%3b".to_vec()),
                Just(b"%3B".to_vec()),
                Just(b"%25".to_vec()),
                Just(b"|".to_vec()),
                Just("\u{e9}".as_bytes().to_vec()),
            ];
            let start = prop_oneof![
                Just(b"/".to_vec()),
                Just(b"/public/".to_vec()),
                Just(b"/private/".to_vec()),
            ];
            (start, proptest::collection::vec(piece, 0..14)).prop_map(|(start, pieces)| {
                let mut t = start;
                t.extend(pieces.concat());
                t
            })
        }

        /// Every escape decoded (the generator never makes `%2F` or a NUL).
        fn decode_all(s: &[u8]) -> Vec<u8> {
            let mut out = Vec::new();
            let mut i = 0;
            while i < s.len() {
                if s[i] == b'%' {
                    let hex = std::str::from_utf8(&s[i + 1..i + 3]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 3;
                } else {
                    out.push(s[i]);
                    i += 1;
                }
            }
            out
        }

        /// What an origin that decodes the path once and then removes dot segments as
        /// RFC 3986 §5.2.4 says (empty segments kept) resolves `path` to; `None` when it
        /// climbs above the root (the RFC clamps; refused here). A model written
        /// without the code under test, segment stack by segment stack.
        fn resolve_as_origin(path: &[u8]) -> Option<Vec<u8>> {
            let decoded = decode_all(path);
            let mut stack: Vec<&[u8]> = Vec::new();
            let mut segments = decoded.split(|&b| b == b'/').skip(1).peekable();
            while let Some(seg) = segments.next() {
                let last = segments.peek().is_none();
                match seg {
                    b"." => {}
                    b".." => {
                        stack.pop()?;
                    }
                    s => stack.push(s),
                }
                if last && (seg == b"." || seg == b"..") {
                    stack.push(b"");
                }
            }
            let mut out = Vec::new();
            for s in &stack {
                out.push(b'/');
                out.extend_from_slice(s);
            }
            if out.is_empty() {
                out.push(b'/');
            }
            Some(out)
        }

        /// The output invariants both the property tests and the fuzz target assert.
        fn assert_proxy_normal(t: &ProxyTarget) -> Result<(), TestCaseError> {
            let path = t.path();
            prop_assert!(path.starts_with(b"/"), "{:?}", t);
            prop_assert!(!path.contains(&b'?') && !path.contains(&b'#'), "{:?}", t);
            for seg in path.split(|&b| b == b'/').skip(1) {
                prop_assert!(seg != b"." && seg != b"..", "dot segment in {:?}", t);
            }
            let mut i = 0;
            while i < path.len() {
                let b = path[i];
                if b == b'%' {
                    let h = &path[i + 1..i + 3];
                    prop_assert!(
                        h.iter()
                            .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c)),
                        "{:?}",
                        t
                    );
                    let v = u8::from_str_radix(std::str::from_utf8(h).unwrap(), 16).unwrap();
                    prop_assert!(!is_unreserved(v), "unreserved left encoded in {:?}", t);
                    prop_assert!(!matches!(v, 0..=0x1f | 0x7f | b'/' | b'\\'), "{:?}", t);
                    i += 3;
                } else {
                    prop_assert!(b == b'/' || is_pchar(b), "raw {b:#x} in {:?}", t);
                    i += 1;
                }
            }
            let again = normalize_proxy_target(t.as_bytes());
            prop_assert_eq!(again.as_ref(), Ok(t), "not idempotent");
            Ok(())
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

            /// The proxy flavour's output is in normal form (no dot segment, no
            /// encoded unreserved character, no encoded or raw separator, NUL or control,
            /// upper-case hex, starts with `/`) and is its own normal form.
            #[test]
            fn proxy_output_is_normal_and_idempotent(t in proxy_target()) {
                if let Ok(n) = normalize_proxy_target(&t) {
                    assert_proxy_normal(&n)?;
                }
            }

            /// No route escape: the path routed, keyed and forwarded names the very
            /// resource an RFC 3986 origin resolves the client's target to (decode once,
            /// remove dot segments), and it is refused exactly when that resolution
            /// climbs above the root. So for every route prefix P (here `/public/`,
            /// `/private/`, `/`), the normalised path starts with P if and only if the
            /// resource the client named lies under P: a target that resolves outside a
            /// route's prefix is never matched by that route, and the origin, which
            /// receives a path without dot segments, cannot be walked out of P either
            /// (resolving the output again changes nothing).
            #[test]
            fn proxy_routes_what_the_origin_resolves(t in proxy_target()) {
                let resolved = resolve_as_origin(&t);
                let n = normalize_proxy_target(&t);
                prop_assert_eq!(n.is_ok(), resolved.is_some(), "{:?} -> {:?}", String::from_utf8_lossy(&t), n);
                if let (Ok(n), Some(resolved)) = (n, resolved) {
                    prop_assert_eq!(&decode_all(n.path()), &resolved);
                    prop_assert_eq!(resolve_as_origin(n.path()), Some(resolved.clone()));
                    for p in [&b"/public/"[..], b"/private/", b"/"] {
                        prop_assert_eq!(n.path().starts_with(p), resolved.starts_with(p), "prefix {:?}", String::from_utf8_lossy(p));
                    }
                }
            }

            /// Arbitrary bytes never panic, and what is accepted is normal.
            #[test]
            fn proxy_arbitrary_bytes(t in proptest::collection::vec(any::<u8>(), 0..64)) {
                let mut target = b"/".to_vec();
                target.extend(t);
                if let Ok(n) = normalize_proxy_target(&target) {
                    assert_proxy_normal(&n)?;
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
