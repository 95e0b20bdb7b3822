//! Message framing, one set of rules for every side: where a message body ends
//! (RFC 9112 §6.3), what the `Content-Length` field lines say together (RFC 9110 §8.6)
//! and what the `Transfer-Encoding` list says (RFC 9112 §6.1, §7).
//!
//! Used by the request parser ([`crate::request`]), the origin client
//! ([`crate::upstream`]), the load generator (`linerate-bench`) and HTTP/2, where
//! `content-length` must agree with the DATA frames (RFC 9113 §8.1.1). A framing guess
//! that differs between two hops is how requests are smuggled and caches poisoned, so
//! each ambiguous case here is an error rather than a guess, and the two sides cannot
//! drift apart because they read the same lists.
//!
//! The fields are folded one line at a time ([`ContentLength::merge`],
//! [`TransferCodings::add`]) while the caller walks its field lines once, then one of
//! the two decision tables ([`request_framing`], [`response_framing`]) gives the answer.

use crate::syntax::{is_token, list_members, parse_u64, trim_ows};

/// What the `Content-Length` field lines say, combined (RFC 9110 §8.6, RFC 9112 §6.3 ¶5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContentLength {
    /// No `Content-Length` line.
    #[default]
    Absent,
    /// Every member of every line is this decimal value.
    Valid(u64),
    /// Members that differ, a member that is not `1*DIGIT`, an empty member, or a value
    /// over `u64::MAX`.
    Invalid,
}

impl ContentLength {
    /// Fold one `Content-Length` field line into what earlier lines said. A list of the
    /// same decimal value (`5, 5`, or the same value on two lines) is that value (RFC 9110
    /// §8.6 lets a recipient accept it); differing values, non-digits, overflow or an
    /// empty member are invalid, and invalid stays invalid. Empty members are refused
    /// here, unlike in other lists, because this field decides framing.
    #[must_use]
    pub fn merge(self, line: &[u8]) -> ContentLength {
        let mut acc = self;
        for member in line.split(|&b| b == b',') {
            let Some(n) = parse_u64(trim_ows(member)) else {
                return ContentLength::Invalid;
            };
            acc = match acc {
                ContentLength::Absent => ContentLength::Valid(n),
                ContentLength::Valid(m) if m == n => ContentLength::Valid(n),
                _ => return ContentLength::Invalid,
            };
        }
        acc
    }

    /// All the `Content-Length` lines of a message, folded.
    pub fn of<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> ContentLength {
        lines
            .into_iter()
            .fold(ContentLength::Absent, ContentLength::merge)
    }
}

/// What the `Transfer-Encoding` field lines say, combined across lines as one list
/// (RFC 9110 §5.3). Counts only: the codings themselves are handed to
/// [`TransferCodings::add_each`]'s callback for a caller that keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransferCodings {
    /// A `Transfer-Encoding` line was seen (even an empty one).
    present: bool,
    /// Members seen, `chunked` included.
    codings: usize,
    /// Members named `chunked`.
    chunked: usize,
    /// The last member seen is `chunked`.
    last_is_chunked: bool,
    /// A member whose name is not a token, or `chunked` with parameters.
    invalid: bool,
}

impl TransferCodings {
    /// Fold one `Transfer-Encoding` field line into the running list of codings. An empty
    /// line still marks the field present (and names no coding).
    pub fn add(&mut self, line: &[u8]) {
        self.add_each(line, |_| {});
    }

    /// [`TransferCodings::add`], calling `other` with each member that is not `chunked`
    /// (as sent, parameters included, OWS-trimmed), in order.
    pub fn add_each<'l>(&mut self, line: &'l [u8], mut other: impl FnMut(&'l [u8])) {
        self.present = true;
        for member in list_members(line) {
            self.codings += 1;
            // transfer-coding = token *( OWS ";" OWS transfer-parameter ) (RFC 9112 §7).
            let name = trim_ows(member.split(|&b| b == b';').next().unwrap_or(member));
            if name.eq_ignore_ascii_case(b"chunked") {
                self.chunked += 1;
                self.last_is_chunked = true;
                // `chunked;param`: chunked has no parameters (RFC 9112 §7.1).
                self.invalid |= name.len() != member.len();
            } else {
                self.last_is_chunked = false;
                // The name at least must be a token, or the list itself is garbage.
                self.invalid |= !is_token(name);
                other(member);
            }
        }
    }

    /// Whether any `Transfer-Encoding` line was seen.
    pub fn is_present(&self) -> bool {
        self.present
    }

    /// Whether the list is well formed: every member a token (`chunked` without
    /// parameters) and `chunked` at most once (RFC 9112 §7: "A sender MUST NOT apply the
    /// chunked transfer coding more than once") and, if there, last (chunked before
    /// another coding would have to be chunked again to delimit the message).
    fn well_formed(&self) -> bool {
        !self.invalid && self.chunked <= 1 && (self.chunked == 0 || self.last_is_chunked)
    }
}

/// Why a message's framing is refused. Each is an unrecoverable error for the
/// connection (RFC 9112 §6.3 ¶3-¶5): the next message could start anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingError {
    /// Both `Content-Length` and `Transfer-Encoding` (§6.3 ¶3 lets a recipient treat it
    /// as an error; this is the classic smuggling vector).
    LengthAndTransferEncoding,
    /// Several `Content-Length` values that differ, or one that is not a number (§6.3 ¶5).
    BadContentLength,
    /// A `Transfer-Encoding` list that is garbled, applies `chunked` twice or not last,
    /// names no coding, or (requests) does not end in `chunked`; or any
    /// `Transfer-Encoding` in an HTTP/1.0 message (§6.1).
    BadTransferEncoding,
}

/// How a request body is framed (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// `Content-Length: n` with n > 0.
    Length(u64),
    /// `Transfer-Encoding` present (chunked last). The server refuses these bodies.
    Chunked,
}

impl BodyFraming {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            BodyFraming::None => "none",
            BodyFraming::Length(_) => "length",
            BodyFraming::Chunked => "chunked",
        }
    }
}

/// The request side of RFC 9112 §6.3, refusing every ambiguous combination:
/// - `Transfer-Encoding` with `Content-Length`: refused (¶3, a server MAY reject it);
/// - `Transfer-Encoding` in HTTP/1.0: refused (§6.1: "MUST treat the message as if the
///   framing is faulty");
/// - `Transfer-Encoding` whose final coding is not `chunked`: refused (¶4: the server
///   "MUST respond with the 400 (Bad Request) status code and then close the
///   connection"), as is a garbled list or `chunked` twice (§7);
/// - otherwise `Transfer-Encoding` means [`BodyFraming::Chunked`];
/// - an invalid `Content-Length`: refused (¶5: "MUST respond with a 400");
/// - `Content-Length: 0` or none: no body (¶6: a request without either has none).
pub fn request_framing(
    http10: bool,
    content_length: ContentLength,
    te: TransferCodings,
) -> Result<BodyFraming, FramingError> {
    if te.present {
        if content_length != ContentLength::Absent {
            return Err(FramingError::LengthAndTransferEncoding);
        }
        if http10 || !te.well_formed() || te.codings == 0 || !te.last_is_chunked {
            return Err(FramingError::BadTransferEncoding);
        }
        return Ok(BodyFraming::Chunked);
    }
    match content_length {
        ContentLength::Absent | ContentLength::Valid(0) => Ok(BodyFraming::None),
        ContentLength::Valid(n) => Ok(BodyFraming::Length(n)),
        ContentLength::Invalid => Err(FramingError::BadContentLength),
    }
}

/// How the body of a response ends (RFC 9112 §6.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseFraming {
    /// Exactly this many bytes follow the head (`Content-Length`).
    Length(u64),
    /// Chunked transfer coding; decode with [`crate::upstream::ChunkedDecoder`].
    Chunked,
    /// The body runs until the server closes the connection (no length given).
    UntilClose,
    /// No body at all, whatever the fields say: a response to HEAD, 1xx, 204 or 304.
    Empty,
}

/// The response side of RFC 9112 §6.3, for the response to a request that was HEAD
/// (`request_was_head`) or not:
/// 1. HEAD, 1xx, 204 and 304 responses end at the head ([`ResponseFraming::Empty`]),
///    whatever the fields say: their `Content-Length` describes the representation,
///    not a body (¶1).
/// 2. `Transfer-Encoding` with `Content-Length` is refused (¶3); in HTTP/1.0 it is
///    refused (§6.1); a garbled list or `chunked` twice or not last is refused (§7).
///    `chunked` last: [`ResponseFraming::Chunked`]; other codings without it: the body
///    runs until the connection closes (¶4); no coding at all: refused.
/// 3. An invalid `Content-Length` is refused (¶5: "MUST treat it as an unrecoverable
///    error"); a valid one is the length.
/// 4. Otherwise the body runs until the connection closes (¶8).
pub fn response_framing(
    request_was_head: bool,
    status: u16,
    http10: bool,
    content_length: ContentLength,
    te: TransferCodings,
) -> Result<ResponseFraming, FramingError> {
    if request_was_head || status < 200 || status == 204 || status == 304 {
        return Ok(ResponseFraming::Empty);
    }
    if te.present {
        if content_length != ContentLength::Absent {
            return Err(FramingError::LengthAndTransferEncoding);
        }
        if http10 || !te.well_formed() || te.codings == 0 {
            return Err(FramingError::BadTransferEncoding);
        }
        return Ok(if te.last_is_chunked {
            ResponseFraming::Chunked
        } else {
            ResponseFraming::UntilClose
        });
    }
    match content_length {
        ContentLength::Valid(n) => Ok(ResponseFraming::Length(n)),
        ContentLength::Invalid => Err(FramingError::BadContentLength),
        ContentLength::Absent => Ok(ResponseFraming::UntilClose),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;

    /// `Content-Length` alone, line by line.
    #[test]
    fn content_length_merging() {
        let cl = |lines: &[&str]| ContentLength::of(lines.iter().map(|l| l.as_bytes()));
        assert_eq!(cl(&[]), ContentLength::Absent);
        assert_eq!(cl(&["0"]), ContentLength::Valid(0));
        assert_eq!(cl(&["007"]), ContentLength::Valid(7));
        assert_eq!(cl(&["5, 5"]), ContentLength::Valid(5));
        assert_eq!(cl(&["5", "5"]), ContentLength::Valid(5));
        assert_eq!(cl(&[" 5 ,\t5 ", "5"]), ContentLength::Valid(5));
        assert_eq!(
            cl(&["18446744073709551615"]),
            ContentLength::Valid(u64::MAX)
        );
        for bad in [
            &["5, 6"][..],
            &["5", "6"],
            &["abc"],
            &["-1"],
            &["+5"],
            &["0x10"],
            &["1e3"],
            &["5 5"],
            &["5,"],
            &[",5"],
            &[""],
            &["18446744073709551616"],
            &["99999999999999999999999"],
            // Invalid stays invalid, whatever follows.
            &["x", "5"],
            &["5", "x", "5"],
        ] {
            assert_eq!(cl(bad), ContentLength::Invalid, "{bad:?}");
        }
    }

    /// `Transfer-Encoding` lists alone, as each side's table reads them.
    #[test]
    fn transfer_coding_lists() {
        fn te(lines: &[&'static str]) -> (TransferCodings, Vec<&'static [u8]>) {
            let mut te = TransferCodings::default();
            let mut others = Vec::new();
            for l in lines {
                te.add_each(l.as_bytes(), |o| others.push(o));
            }
            (te, others)
        }
        let (t, others) = te(&["gzip;q=1 , chunked"]);
        assert!(t.is_present() && t.well_formed() && t.last_is_chunked);
        assert_eq!(others, vec![&b"gzip;q=1"[..]]);
        let (t, _) = te(&[]);
        assert!(!t.is_present());
        let (t, others) = te(&["", " , "]);
        assert!(t.is_present() && t.codings == 0 && others.is_empty());
        for bad in [
            &["chunked, chunked"][..],
            &["chunked", "Chunked"],
            &["chunked, gzip"],
            &["chunked;x=1"],
            &["chunked ;x=1, chunked"],
            &["\"chunked\""],
            &["g zip, chunked"],
            &["b@d, chunked"],
        ] {
            assert!(!te(bad).0.well_formed(), "{bad:?}");
        }
    }

    // Each case through both real parsers (request and origin response) is in
    // `tests/framing.rs`: this crate's modules must not use each other in a ring, and
    // `request` and `upstream` use this one.

    /// The decision tables without a parser: the bodiless responses ignore every field,
    /// and HTTP/1.0 refuses `Transfer-Encoding` on both sides.
    #[test]
    fn decision_tables() {
        let mut chunked = TransferCodings::default();
        chunked.add(b"chunked");
        let bad = ContentLength::Invalid;
        for status in [100, 103, 199, 204, 304] {
            assert_eq!(
                response_framing(false, status, false, bad, chunked),
                Ok(ResponseFraming::Empty)
            );
        }
        assert_eq!(
            response_framing(true, 200, false, ContentLength::Valid(10), chunked),
            Ok(ResponseFraming::Empty)
        );
        assert_eq!(
            response_framing(false, 200, true, ContentLength::Absent, chunked),
            Err(FramingError::BadTransferEncoding)
        );
        assert_eq!(
            request_framing(true, ContentLength::Absent, chunked),
            Err(FramingError::BadTransferEncoding)
        );
        assert_eq!(
            request_framing(false, ContentLength::Absent, chunked),
            Ok(BodyFraming::Chunked)
        );
        assert_eq!(BodyFraming::None.as_str(), "none");
        assert_eq!(BodyFraming::Chunked.as_str(), "chunked");
    }
}
