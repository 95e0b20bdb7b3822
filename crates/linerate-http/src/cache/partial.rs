//! Partial content as a cache meets it (RFC 9110 §14, RFC 9111 §3.3-3.4): the
//! `Content-Range` of a stored part, whether two parts are the same version of an
//! object, and what a response to a range request the cache sent turned out to be.

use crate::syntax::{parse_u64, split_once, trim_ows};

/// A satisfied response `Content-Range` (RFC 9110 §14.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentRange {
    /// First byte offset.
    pub first: u64,
    /// Last byte offset, inclusive; `first <= last`.
    pub last: u64,
    /// Complete length, if known (`/*` gives `None`); `last < complete`.
    pub complete: Option<u64>,
}

/// Parse a response `Content-Range`: `bytes first-last/complete` or `bytes first-last/*`
/// (RFC 9110 §14.4; the unit is case-insensitive, §14.1; OWS around the whole value is
/// tolerated). `None` for anything else: another unit, `bytes */N` (unsatisfied), last
/// before first, last at or past the complete length (§14.4: such a value is invalid),
/// or a number too large for a u64.
pub fn parse_content_range(v: &[u8]) -> Option<ContentRange> {
    let (unit, rest) = split_once(trim_ows(v), b' ')?;
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    let (range, complete) = split_once(rest, b'/')?;
    let (first, last) = split_once(range, b'-')?;
    let first = parse_u64(first)?;
    let last = parse_u64(last)?;
    let complete = if complete == b"*" {
        None
    } else {
        Some(parse_u64(complete)?)
    };
    if last < first || complete.is_some_and(|c| last >= c) {
        return None;
    }
    Some(ContentRange {
        first,
        last,
        complete,
    })
}

/// Whether two responses (e.g. two stored slices) are the same version of an object,
/// so their bytes may be combined (RFC 9111 §3.4 requires validators equal under the
/// strong comparison, RFC 9110 §8.8.3.2).
///
/// If either side has an entity tag, both must have the same strong one, byte for byte
/// (a weak `W/` tag or a malformed one never matches, and Last-Modified is not consulted:
/// the origin says the tag is what identifies the version). With no entity tag on either
/// side, both Last-Modified must be present and equal. `false` when neither side has a
/// usable validator.
pub fn same_version(
    etag_a: Option<&[u8]>,
    lm_a: Option<u64>,
    etag_b: Option<&[u8]>,
    lm_b: Option<u64>,
) -> bool {
    match (etag_a, etag_b) {
        (None, None) => matches!((lm_a, lm_b), (Some(a), Some(b)) if a == b),
        (Some(a), Some(b)) => is_strong_etag(a) && a == b,
        _ => false,
    }
}

/// A strong entity-tag: `DQUOTE *etagc DQUOTE` (RFC 9110 §8.8.3), no `W/` prefix.
fn is_strong_etag(e: &[u8]) -> bool {
    e.len() >= 2
        && e.first() == Some(&b'"')
        && e.last() == Some(&b'"')
        && !e[1..e.len() - 1].contains(&b'"')
}

/// What the cache asked an origin for (RFC 9110 §14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// The whole representation (no `Range`).
    Whole,
    /// `Range: bytes=first-last` (a slice; `last` may be past the end of the object).
    Part {
        /// First byte.
        first: u64,
        /// Last byte asked for, inclusive.
        last: u64,
    },
}

/// What a response to the cache's request turned out to be, for storing it. The body
/// of a `Part` or `WholeAsPart` must have exactly the length its `Content-Range` says,
/// whatever its framing (a chunked 206 could otherwise carry more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A complete response: any status but 206 and 416 (an origin that ignores `Range`
    /// answers 200, RFC 9110 §14.2: "A server MAY ignore the Range header field").
    Whole,
    /// A 206 that is exactly the part asked for (clipped at the end of the object), of
    /// an object of `total` bytes.
    Part {
        /// The complete length (`Content-Range: bytes a-b/total`).
        total: u64,
        /// The part's length (`b - a + 1`): what its body must be, whatever its framing.
        len: u64,
    },
    /// A 206 that covers the whole object (`bytes 0-(total-1)/total`): it is the object
    /// itself, and is kept as the 200 it stands for.
    WholeAsPart {
        /// The complete length, which is the body's length.
        total: u64,
    },
    /// 416: the part asked for starts at or past the end; `total` when the
    /// `Content-Range` says (`bytes */total`).
    Unsatisfiable {
        /// The complete length, if given.
        total: Option<u64>,
    },
    /// A 206 that is not what was asked: another range, no or an invalid
    /// `Content-Range`, a `Content-Length` that disagrees with it, or a 206 to a request
    /// without `Range`. RFC 9110 §15.3.7: the recipient must go by `Content-Range`; a
    /// cache that stored this under the part it asked for would serve wrong bytes. It is
    /// neither stored nor served as anything else.
    Mismatch,
}

impl Answer {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Whole => "whole",
            Answer::Part { .. } => "part",
            Answer::WholeAsPart { .. } => "whole_as_part",
            Answer::Unsatisfiable { .. } => "unsatisfiable",
            Answer::Mismatch => "mismatch",
        }
    }
}

/// Classify the response `status`, `Content-Range` and `Content-Length` (the body's
/// length when the framing gives one) to what was `asked`.
pub fn classify(
    asked: Asked,
    status: u16,
    content_range: Option<&[u8]>,
    content_length: Option<u64>,
) -> Answer {
    match status {
        206 => {}
        416 if matches!(asked, Asked::Part { .. }) => {
            let total = content_range.and_then(parse_unsatisfied_range);
            return Answer::Unsatisfiable { total };
        }
        _ => return Answer::Whole,
    }
    let Some(cr) = content_range.and_then(parse_content_range) else {
        return Answer::Mismatch;
    };
    let Some(total) = cr.complete else {
        return Answer::Mismatch;
    };
    if content_length.is_some_and(|n| Some(n) != (cr.last - cr.first).checked_add(1)) {
        return Answer::Mismatch;
    }
    let whole = cr.first == 0 && cr.last.checked_add(1) == Some(total);
    match asked {
        Asked::Whole if whole => Answer::WholeAsPart { total },
        Asked::Whole => Answer::Mismatch,
        Asked::Part { first, last } => {
            let want_last = last.min(total.saturating_sub(1));
            if cr.first != first || cr.last != want_last {
                Answer::Mismatch
            } else if whole {
                Answer::WholeAsPart { total }
            } else {
                Answer::Part {
                    total,
                    len: cr.last - cr.first + 1,
                }
            }
        }
    }
}

/// The complete length of an unsatisfied-range `Content-Range: bytes */N`.
fn parse_unsatisfied_range(v: &[u8]) -> Option<u64> {
    let (unit, rest) = split_once(trim_ows(v), b' ')?;
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    parse_u64(rest.strip_prefix(b"*/")?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;

    const T: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT
    use proptest::prelude::*;

    // ---- What came back ----

    #[test]
    fn classify_answers() {
        let part = Asked::Part {
            first: 100,
            last: 199,
        };
        let c = |asked, status, cr: Option<&str>, cl| {
            classify(asked, status, cr.map(str::as_bytes), cl)
        };
        assert_eq!(c(part, 200, None, Some(5)), Answer::Whole);
        assert_eq!(c(part, 404, None, None), Answer::Whole);
        assert_eq!(
            c(part, 206, Some("bytes 100-199/1000"), Some(100)),
            Answer::Part {
                total: 1000,
                len: 100
            }
        );
        // Clipped at the end of the object.
        assert_eq!(
            c(part, 206, Some("bytes 100-149/150"), None),
            Answer::Part {
                total: 150,
                len: 50
            }
        );
        // The whole object in the first part.
        let first = Asked::Part { first: 0, last: 99 };
        assert_eq!(
            c(first, 206, Some("bytes 0-49/50"), Some(50)),
            Answer::WholeAsPart { total: 50 }
        );
        assert_eq!(
            c(Asked::Whole, 206, Some("bytes 0-9/10"), None),
            Answer::WholeAsPart { total: 10 }
        );
        // Not what was asked.
        for (asked, cr, cl) in [
            (part, Some("bytes 100-150/1000"), None),
            (part, Some("bytes 0-99/1000"), None),
            (part, Some("bytes 100-199/*"), None),
            (part, None, Some(100)),
            (part, Some("bytes 100-199/1000"), Some(99)),
            (Asked::Whole, Some("bytes 4-9/10"), None),
            (first, Some("bytes 1-49/50"), None),
        ] {
            assert_eq!(c(asked, 206, cr, cl), Answer::Mismatch, "{cr:?} {cl:?}");
        }
        assert_eq!(
            c(part, 416, Some("bytes */90"), None),
            Answer::Unsatisfiable { total: Some(90) }
        );
        assert_eq!(
            c(part, 416, None, None),
            Answer::Unsatisfiable { total: None }
        );
        // A 416 to a request without Range is just a response.
        assert_eq!(c(Asked::Whole, 416, None, None), Answer::Whole);
        assert_eq!(Answer::Mismatch.as_str(), "mismatch");
    }

    // ---- Content-Range ----

    #[test]
    fn content_range_accepts() {
        let cr = |first, last, complete| {
            Some(ContentRange {
                first,
                last,
                complete,
            })
        };
        assert_eq!(
            parse_content_range(b"bytes 0-499/1234"),
            cr(0, 499, Some(1234))
        );
        assert_eq!(parse_content_range(b"bytes 500-999/*"), cr(500, 999, None));
        assert_eq!(parse_content_range(b"BYTES 0-0/1"), cr(0, 0, Some(1)));
        assert_eq!(parse_content_range(b" bytes 1-1/2 "), cr(1, 1, Some(2)));
        assert_eq!(
            parse_content_range(b"bytes 0-18446744073709551614/18446744073709551615"),
            cr(0, u64::MAX - 1, Some(u64::MAX))
        );
    }

    #[test]
    fn content_range_rejects() {
        for bad in [
            &b""[..],
            b"bytes",
            b"bytes */1234",
            b"bytes 5-4/10",
            b"bytes 0-10/10",
            b"bytes 0-0/0",
            b"bytes 0-9",
            b"bytes=0-9/10",
            b"bytes  0-9/10",
            b"bytes 0 -9/10",
            b"bytes -9/10",
            b"bytes 0-/10",
            b"bytes 0-9/",
            b"bytes 0-9/10/",
            b"bytes 0-9/1x",
            b"items 0-9/10",
            b"bytes 0-9/18446744073709551616",
            b"bytes 0-18446744073709551616/*",
            b"bytes +0-9/10",
        ] {
            assert_eq!(
                parse_content_range(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    // ---- Validators ----

    #[test]
    fn same_version_etags() {
        let e = |s: &'static str| Some(s.as_bytes());
        assert!(same_version(e("\"abc\""), None, e("\"abc\""), None));
        assert!(!same_version(e("\"abc\""), None, e("\"abd\""), None));
        assert!(
            !same_version(e("W/\"abc\""), None, e("W/\"abc\""), None),
            "weak never matches"
        );
        assert!(!same_version(
            e("W/\"abc\""),
            Some(5),
            e("W/\"abc\""),
            Some(5)
        ));
        assert!(
            !same_version(e("\"abc\""), Some(5), e("\"abd\""), Some(5)),
            "ETag decides over LM"
        );
        assert!(
            !same_version(e("\"abc\""), Some(5), None, Some(5)),
            "one side lost its ETag"
        );
        assert!(!same_version(e("abc"), None, e("abc"), None), "malformed");
        assert!(!same_version(e("\""), None, e("\""), None));
        assert!(!same_version(e("\"a\"b\""), None, e("\"a\"b\""), None));
        assert!(same_version(e("\"\""), None, e("\"\""), None));
    }

    #[test]
    fn same_version_last_modified() {
        assert!(same_version(None, Some(T), None, Some(T)));
        assert!(!same_version(None, Some(T), None, Some(T + 1)));
        assert!(!same_version(None, Some(T), None, None));
        assert!(!same_version(None, None, None, None));
    }

    proptest! {
        #[test]
        fn content_range_never_panics(v in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_content_range(&v);
        }

        #[test]
        fn content_range_round_trips(first in any::<u64>(), len in 1..u64::MAX, extra in 0..1000u64, star in any::<bool>()) {
            let last = first.saturating_add(len - 1);
            let complete = if star { None } else { last.checked_add(1).and_then(|c| c.checked_add(extra)) };
            let text = match complete {
                Some(c) => format!("bytes {first}-{last}/{c}"),
                None => format!("bytes {first}-{last}/*"),
            };
            prop_assert_eq!(parse_content_range(text.as_bytes()), Some(ContentRange { first, last, complete }));
        }
    }
}
