//! Common Media Client Data (CTA-5004): the one key cache mode reads, `nor` ("next
//! object request": the relative path of the object the player will ask for next),
//! from the `CMCD-Request` header, an RFC 8941 Dictionary. CTA-5004 §3.3: its value is
//! a String holding a URL-encoded path relative to the current request URL, so it is
//! percent-decoded once here; resolving it (and refusing another host, an escape, or a
//! percent-encoded `.` or `/` left after decoding) is `hls::resolve`'s job.
//!
//! CMCD sent as a `CMCD=` query argument (CTA-5004 §2.2: the same payload, URL-encoded
//! once more) is read too ([`next_object_in_query`]); it is kept out of the cache key
//! (`cache::key::query`).
//!
//! `sid` (the session id, a String in the `CMCD-Session` header or the query argument)
//! is read too ([`session_id`], [`session_id_in_query`]): segment prefetch tells one
//! viewer from another by it when a player sends it. Every other key is ignored.

/// The `nor` of a request's `CMCD-Request` field lines, decoded; `None` when absent,
/// not a String, empty, or not valid percent-encoding of UTF-8.
pub fn next_object<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Option<Vec<u8>> {
    let joined = crate::syntax::combine_lines(lines);
    nor(&joined)
}

/// The `nor` of a request target's `CMCD=` query argument (the first), decoded as
/// [`next_object`] does after the argument's own URL-encoding is undone.
pub fn next_object_in_query(target: &[u8]) -> Option<Vec<u8>> {
    let query = &target[target.iter().position(|&b| b == b'?')? + 1..];
    let value = query
        .split(|&b| b == b'&')
        .find_map(|p| p.strip_prefix(b"CMCD="))?;
    // `+` is not a space here: CTA-5004 encodes with encodeURIComponent.
    let payload = percent_decode(value)?;
    nor(&payload)
}

/// Longest `sid` taken (CTA-5004 §3.3: at most 64 characters); a longer one is ignored.
pub const MAX_SESSION_ID: usize = 64;

/// The `sid` of a request's `CMCD-Session` field lines, as sent; `None` when absent,
/// not a String, empty or longer than [`MAX_SESSION_ID`].
pub fn session_id<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Option<Vec<u8>> {
    let joined = crate::syntax::combine_lines(lines);
    sid(&joined)
}

/// The `sid` of a request target's `CMCD=` query argument (the first), as
/// [`session_id`] reads it once the argument's URL-encoding is undone.
pub fn session_id_in_query(target: &[u8]) -> Option<Vec<u8>> {
    let query = &target[target.iter().position(|&b| b == b'?')? + 1..];
    let value = query
        .split(|&b| b == b'&')
        .find_map(|p| p.strip_prefix(b"CMCD="))?;
    sid(&percent_decode(value)?)
}

/// `sid` of a CMCD payload.
fn sid(payload: &[u8]) -> Option<Vec<u8>> {
    let dict: sfv::Dictionary = sfv::Parser::new(payload).parse().ok()?;
    let (_, member) = dict.iter().find(|(k, _)| k.as_str() == "sid")?;
    let sfv::ListEntry::Item(item) = member else {
        return None;
    };
    let s = item.bare_item.as_string()?.as_str().as_bytes();
    (!s.is_empty() && s.len() <= MAX_SESSION_ID).then(|| s.to_vec())
}

/// `nor` of a CMCD payload (an RFC 8941 Dictionary).
fn nor(payload: &[u8]) -> Option<Vec<u8>> {
    let dict: sfv::Dictionary = sfv::Parser::new(payload).parse().ok()?;
    let (_, member) = dict.iter().find(|(k, _)| k.as_str() == "nor")?;
    let sfv::ListEntry::Item(item) = member else {
        return None;
    };
    let encoded = item.bare_item.as_string()?.as_str().as_bytes();
    let decoded = percent_decode(encoded)?;
    (!decoded.is_empty()).then_some(decoded)
}

/// `%XX` decoded once; `None` for a bad escape or a decoded NUL.
fn percent_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            if v == 0 {
                return None;
            }
            out.push(v);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;

    fn nor(lines: &[&str]) -> Option<String> {
        next_object(lines.iter().map(|l| l.as_bytes())).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn reads_nor_from_cmcd_request() {
        // CTA-5004's own example shape: URL-encoded relative path.
        assert_eq!(
            nor(&[r#"bl=21300,nor="..%2F300kbps%2Fsegment35.m4v""#]).as_deref(),
            Some("../300kbps/segment35.m4v")
        );
        assert_eq!(
            nor(&["nor=\"seg7.ts\", mtp=25400"]).as_deref(),
            Some("seg7.ts")
        );
        assert_eq!(
            nor(&["bl=100", "nor=\"a.ts\""]).as_deref(),
            Some("a.ts"),
            "two lines"
        );
    }

    #[test]
    fn reads_nor_from_the_query_argument() {
        // CTA-5004 §2.2 shape: the payload URL-encoded as one query value.
        let q = b"/v/seg1.ts?CMCD=bl%3D21300%2Cnor%3D%22..%252F300kbps%252Fsegment35.m4v%22";
        assert_eq!(
            next_object_in_query(q).as_deref(),
            Some(&b"../300kbps/segment35.m4v"[..])
        );
        assert_eq!(
            next_object_in_query(b"/a.ts?x=1&CMCD=nor%3D%22b.ts%22").as_deref(),
            Some(&b"b.ts"[..])
        );
        for bad in [
            &b"/a.ts"[..],
            b"/a.ts?CMCD=bl%3D100",
            b"/a.ts?CMCD=nor%3D7",
            b"/a.ts?CMCD=%ZZ",
            b"/a.ts?cmcd=nor%3D%22b.ts%22",
        ] {
            assert_eq!(next_object_in_query(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_sid_from_the_session_header_and_the_query() {
        let sid = |lines: &[&str]| session_id(lines.iter().map(|l| l.as_bytes()));
        assert_eq!(
            sid(&[r#"sid="6e2fb550-c457-11e9-bb97-0800200c9a66""#]).as_deref(),
            Some(&b"6e2fb550-c457-11e9-bb97-0800200c9a66"[..])
        );
        assert_eq!(sid(&["cid=\"x\"", "sid=\"a\""]).as_deref(), Some(&b"a"[..]));
        let long = format!("sid=\"{}\"", "a".repeat(MAX_SESSION_ID + 1));
        for bad in ["", "sid=7", "sid=\"\"", "sid=abc", &long] {
            assert_eq!(sid(&[bad]), None, "{bad}");
        }
        assert_eq!(
            session_id_in_query(b"/s.ts?CMCD=bl%3D100%2Csid%3D%22v1%22").as_deref(),
            Some(&b"v1"[..])
        );
        assert_eq!(session_id_in_query(b"/s.ts?CMCD=bl%3D100"), None);
    }

    #[test]
    fn anything_else_is_none() {
        for bad in [
            "",
            "bl=100",
            "nor=seg7",
            "nor=7",
            "nor=\"\"",
            "nor=\"%zz\"",
            "nor=\"a%00b\"",
            "nor=(\"a\")",
            "garbage =",
        ] {
            assert_eq!(nor(&[bad]), None, "{bad}");
        }
    }
}
