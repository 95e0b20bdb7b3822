//! Preconditions (RFC 9110 §13.1-§13.2) and `If-Range` (§13.1.5), evaluated in the order
//! §13.2.2 prescribes, against the validators of the selected representation.
//!
//! Entity-tag lists are parsed properly (`etagc` may contain a comma, so splitting on
//! commas would be wrong); a list with a syntax error matches nothing from the error on.
//! Dates that do not parse are ignored, as §13.1.3 and §13.1.4 require. Not here: whether
//! the representation exists (the server only asks once it has one, so `*` always
//! matches) or the `Range` itself.

use crate::request::{Method, RequestHead};

/// The validators of a stored representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validators<'a> {
    /// Strong entity tag including quotes, e.g. `"1f4-5f2a1c3b"`.
    pub etag: &'a str,
    /// Last modification time, seconds since the Unix epoch.
    pub last_modified: u64,
}

/// What the preconditions decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Carry on with the request (range processing next).
    Proceed,
    /// 304 Not Modified (If-None-Match / If-Modified-Since on GET/HEAD).
    NotModified,
    /// 412 Precondition Failed (If-Match / If-Unmodified-Since).
    Failed,
}

impl Precondition {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Precondition::Proceed => "proceed",
            Precondition::NotModified => "not_modified",
            Precondition::Failed => "failed",
        }
    }
}

/// Evaluate If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since in RFC 9110
/// §13.2.2 order for a GET or HEAD.
///
/// For any other method a matching If-None-Match gives [`Precondition::Failed`] and
/// If-Modified-Since is ignored, as §13.1.2 and §13.1.3 say, so the answer stays right
/// even if the server evaluates before refusing the method.
pub fn evaluate(req: &RequestHead<'_>, v: &Validators<'_>) -> Precondition {
    let safe = matches!(req.method, Method::Get | Method::Head);

    // §13.2.2 step 1: If-Match; false -> 412. Step 2 (only without If-Match):
    // If-Unmodified-Since; false -> 412. §13.1.4: "A recipient MUST ignore the
    // If-Unmodified-Since header field if the received field value is not a valid
    // HTTP-date".
    if let Some(value) = req.if_match {
        if !list_matches(value, v.etag, Comparison::Strong) {
            return Precondition::Failed;
        }
    } else if let Some(date) = req.if_unmodified_since.and_then(crate::date::parse) {
        if v.last_modified > date {
            return Precondition::Failed;
        }
    }

    // Step 3: If-None-Match; a match -> 304 for GET/HEAD, 412 otherwise (§13.1.2).
    // Step 4 (only without If-None-Match, GET/HEAD only): If-Modified-Since.
    // §13.1.3: "A recipient MUST ignore If-Modified-Since if the request contains an
    // If-None-Match header field", "...if the received field value is not a valid
    // HTTP-date ... or if the request method is neither GET nor HEAD."
    if let Some(value) = req.if_none_match {
        if list_matches(value, v.etag, Comparison::Weak) {
            return if safe {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
    } else if let Some(date) = req.if_modified_since.and_then(crate::date::parse) {
        if safe && v.last_modified <= date {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

/// Whether a `Range` may be honoured given `If-Range` (§13.1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfRange {
    /// No If-Range, or it matches: apply the Range.
    Apply,
    /// It does not match (or is a weak tag / unparsable): ignore Range, send 200.
    Ignore,
}

impl IfRange {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            IfRange::Apply => "apply",
            IfRange::Ignore => "ignore",
        }
    }
}

/// Evaluate an `If-Range` value: a strong ETag must match exactly; an HTTP-date must
/// equal `last_modified` exactly.
///
/// §13.1.5: the condition is false for a weak entity tag ("MUST NOT" be sent by a client,
/// and a weak tag can never match strongly), and an entity tag is told from a date by its
/// first characters (`"` or `W/"`). The date is taken as a strong validator: §8.8.2.2
/// would want `Last-Modified` at least a second before the response's `Date`, which needs
/// the clock this crate does not have; files a video edge serves are written well before
/// they are requested. The server must not call this without a `Range` (§13.1.5: "A
/// server MUST ignore an If-Range header field received in a request that does not
/// contain a Range header field").
pub fn if_range(value: Option<&[u8]>, v: &Validators<'_>) -> IfRange {
    let Some(value) = value else {
        return IfRange::Apply;
    };
    let value = crate::syntax::trim_ows(value);
    let matched = if value.starts_with(b"W/") {
        false
    } else if value.starts_with(b"\"") {
        match next_tag(value) {
            TagScan::Tag(tag, rest) if crate::syntax::trim_ows(rest).is_empty() => {
                tags_match(tag, own_tag(v.etag), Comparison::Strong)
            }
            _ => false,
        }
    } else {
        crate::date::parse(value) == Some(v.last_modified)
    };
    if matched {
        IfRange::Apply
    } else {
        IfRange::Ignore
    }
}

/// The strong ETag this server gives a file: `"<size hex>-<mtime nanoseconds hex>"`,
/// lower-case hex without leading zeros, e.g. `"1f4-17f1c2a3b4c5d6e7"`.
pub fn file_etag(size: u64, mtime_nanos: u128) -> String {
    format!("\"{size:x}-{mtime_nanos:x}\"")
}

/// How two entity tags are compared (RFC 9110 §8.8.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Comparison {
    /// Both strong and the opaque tags equal (If-Match, If-Range).
    Strong,
    /// Opaque tags equal, weakness ignored (If-None-Match).
    Weak,
}

/// One parsed entity-tag (RFC 9110 §8.8.3): `[W/] DQUOTE *etagc DQUOTE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EntityTag<'a> {
    weak: bool,
    /// The opaque tag including its quotes.
    opaque: &'a [u8],
}

/// Result of scanning for the next entity tag in a list.
enum TagScan<'a> {
    /// A tag and what follows it.
    Tag(EntityTag<'a>, &'a [u8]),
    /// Nothing but OWS and commas left.
    End,
    /// Not an entity tag.
    Invalid,
}

/// `If-Match` / `If-None-Match` value against our tag: `*` matches (the representation
/// exists), otherwise any member of the `#entity-tag` list.
fn list_matches(value: &[u8], etag: &str, comparison: Comparison) -> bool {
    let mut rest = crate::syntax::trim_ows(value);
    if rest == b"*" {
        return true;
    }
    let ours = own_tag(etag);
    loop {
        match next_tag(rest) {
            TagScan::Tag(tag, after) => {
                if tags_match(tag, ours, comparison) {
                    return true;
                }
                // After a tag: OWS, then a comma or the end.
                let after = crate::syntax::trim_ows(after);
                match after.first() {
                    None => return false,
                    Some(b',') => rest = &after[1..],
                    Some(_) => return false,
                }
            }
            TagScan::End | TagScan::Invalid => return false,
        }
    }
}

/// Skip leading OWS and empty list elements (RFC 9110 §5.6.1), then read one entity-tag.
fn next_tag(s: &[u8]) -> TagScan<'_> {
    let start = s
        .iter()
        .position(|&b| !matches!(b, b' ' | b'\t' | b','))
        .unwrap_or(s.len());
    let s = &s[start..];
    if s.is_empty() {
        return TagScan::End;
    }
    let (weak, quoted) = match s.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if quoted.first() != Some(&b'"') {
        return TagScan::Invalid;
    }
    // etagc = %x21 / %x23-7E / obs-text: anything visible but DQUOTE.
    let Some(close) = quoted[1..].iter().position(|&b| b == b'"') else {
        return TagScan::Invalid;
    };
    let opaque = &quoted[..close + 2];
    if !opaque[1..opaque.len() - 1]
        .iter()
        .all(|&b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
    {
        return TagScan::Invalid;
    }
    TagScan::Tag(EntityTag { weak, opaque }, &quoted[close + 2..])
}

/// Our own tag, parsed; a tag the server built badly is compared as an opaque string
/// rather than trusted to be well-formed.
fn own_tag(etag: &str) -> EntityTag<'_> {
    match next_tag(etag.as_bytes()) {
        TagScan::Tag(tag, []) => tag,
        _ => EntityTag {
            weak: false,
            opaque: etag.as_bytes(),
        },
    }
}

/// RFC 9110 §8.8.3.2: strong comparison needs both tags strong; weak ignores `W/`.
fn tags_match(theirs: EntityTag<'_>, ours: EntityTag<'_>, comparison: Comparison) -> bool {
    let weakness_ok = match comparison {
        Comparison::Strong => !theirs.weak && !ours.weak,
        Comparison::Weak => true,
    };
    weakness_ok && theirs.opaque == ours.opaque
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;

    const ETAG: &str = "\"1f4-5f2a\"";
    /// Sun, 06 Nov 1994 08:49:37 GMT
    const T: u64 = 784_111_777;
    const T_STR: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";
    const BEFORE: &[u8] = b"Sun, 06 Nov 1994 08:49:36 GMT";
    const AFTER: &[u8] = b"Sun, 06 Nov 1994 08:49:38 GMT";

    const V: Validators<'static> = Validators {
        etag: ETAG,
        last_modified: T,
    };

    fn req(method: Method) -> RequestHead<'static> {
        RequestHead::for_tests(method, b"/a")
    }

    fn get() -> RequestHead<'static> {
        req(Method::Get)
    }

    #[test]
    fn no_preconditions() {
        assert_eq!(evaluate(&get(), &V), Precondition::Proceed);
    }

    #[test]
    fn if_match() {
        let with = |v: &'static [u8]| RequestHead {
            if_match: Some(v),
            ..get()
        };
        assert_eq!(evaluate(&with(b"\"1f4-5f2a\""), &V), Precondition::Proceed);
        assert_eq!(evaluate(&with(b"*"), &V), Precondition::Proceed);
        assert_eq!(
            evaluate(&with(b"\"x\", \"1f4-5f2a\""), &V),
            Precondition::Proceed
        );
        assert_eq!(
            evaluate(&with(b" , \"x\" ,, \"1f4-5f2a\" "), &V),
            Precondition::Proceed
        );
        // Strong comparison: a weak tag never matches.
        assert_eq!(evaluate(&with(b"W/\"1f4-5f2a\""), &V), Precondition::Failed);
        assert_eq!(evaluate(&with(b"\"other\""), &V), Precondition::Failed);
        // Quotes are part of the tag.
        assert_eq!(evaluate(&with(b"1f4-5f2a"), &V), Precondition::Failed);
        // Syntax error stops the scan.
        assert_eq!(
            evaluate(&with(b"\"x\" junk, \"1f4-5f2a\""), &V),
            Precondition::Failed
        );
        assert_eq!(evaluate(&with(b"\"1f4-5f2a"), &V), Precondition::Failed);
        assert_eq!(evaluate(&with(b""), &V), Precondition::Failed);
    }

    #[test]
    fn if_match_takes_precedence_over_if_unmodified_since() {
        // §13.2.2: step 2 only runs without If-Match.
        let r = RequestHead {
            if_match: Some(b"\"1f4-5f2a\""),
            if_unmodified_since: Some(BEFORE),
            ..get()
        };
        assert_eq!(evaluate(&r, &V), Precondition::Proceed);
    }

    #[test]
    fn if_unmodified_since() {
        let with = |v: &'static [u8]| RequestHead {
            if_unmodified_since: Some(v),
            ..get()
        };
        assert_eq!(evaluate(&with(T_STR), &V), Precondition::Proceed);
        assert_eq!(evaluate(&with(AFTER), &V), Precondition::Proceed);
        assert_eq!(evaluate(&with(BEFORE), &V), Precondition::Failed);
        // Invalid dates are ignored.
        assert_eq!(evaluate(&with(b"yesterday"), &V), Precondition::Proceed);
    }

    #[test]
    fn if_none_match() {
        let with = |v: &'static [u8]| RequestHead {
            if_none_match: Some(v),
            ..get()
        };
        assert_eq!(
            evaluate(&with(b"\"1f4-5f2a\""), &V),
            Precondition::NotModified
        );
        // Weak comparison: W/ matches too.
        assert_eq!(
            evaluate(&with(b"W/\"1f4-5f2a\""), &V),
            Precondition::NotModified
        );
        assert_eq!(evaluate(&with(b"*"), &V), Precondition::NotModified);
        assert_eq!(
            evaluate(&with(b"\"a\", W/\"1f4-5f2a\""), &V),
            Precondition::NotModified
        );
        // etagc may contain a comma: that is one tag, not two.
        assert_eq!(
            evaluate(&with(b"\"a,b\", \"1f4-5f2a\""), &V),
            Precondition::NotModified
        );
        assert_eq!(
            evaluate(&with(b"\"1f4-5f2a,x\""), &V),
            Precondition::Proceed
        );
        assert_eq!(evaluate(&with(b"\"other\""), &V), Precondition::Proceed);
        assert_eq!(
            evaluate(&with(b"w/\"1f4-5f2a\""), &V),
            Precondition::Proceed
        );
        let head = RequestHead {
            if_none_match: Some(b"\"1f4-5f2a\""),
            ..req(Method::Head)
        };
        assert_eq!(evaluate(&head, &V), Precondition::NotModified);
        // Other methods: 412 (§13.1.2).
        let other = RequestHead {
            if_none_match: Some(b"*"),
            ..req(Method::Other)
        };
        assert_eq!(evaluate(&other, &V), Precondition::Failed);
    }

    #[test]
    fn if_modified_since() {
        let with = |v: &'static [u8]| RequestHead {
            if_modified_since: Some(v),
            ..get()
        };
        assert_eq!(evaluate(&with(T_STR), &V), Precondition::NotModified);
        assert_eq!(evaluate(&with(AFTER), &V), Precondition::NotModified);
        assert_eq!(evaluate(&with(BEFORE), &V), Precondition::Proceed);
        assert_eq!(
            evaluate(&with(b"Sunday, 06-Nov-94 08:49:37 GMT"), &V),
            Precondition::NotModified
        );
        assert_eq!(
            evaluate(&with(b"Sun Nov  6 08:49:37 1994"), &V),
            Precondition::NotModified
        );
        assert_eq!(evaluate(&with(b"not a date"), &V), Precondition::Proceed);
        let other = RequestHead {
            if_modified_since: Some(T_STR),
            ..req(Method::Other)
        };
        assert_eq!(evaluate(&other, &V), Precondition::Proceed);
    }

    #[test]
    fn if_none_match_overrides_if_modified_since() {
        // §13.1.3: ignore If-Modified-Since when If-None-Match is present.
        let r = RequestHead {
            if_none_match: Some(b"\"other\""),
            if_modified_since: Some(T_STR),
            ..get()
        };
        assert_eq!(evaluate(&r, &V), Precondition::Proceed);
    }

    #[test]
    fn failure_before_not_modified() {
        // Step 1 runs before step 3.
        let r = RequestHead {
            if_match: Some(b"\"other\""),
            if_none_match: Some(b"\"1f4-5f2a\""),
            ..get()
        };
        assert_eq!(evaluate(&r, &V), Precondition::Failed);
        let r = RequestHead {
            if_unmodified_since: Some(BEFORE),
            if_modified_since: Some(T_STR),
            ..get()
        };
        assert_eq!(evaluate(&r, &V), Precondition::Failed);
        // Both pass: then 304 from step 3.
        let r = RequestHead {
            if_match: Some(b"*"),
            if_none_match: Some(b"\"1f4-5f2a\""),
            ..get()
        };
        assert_eq!(evaluate(&r, &V), Precondition::NotModified);
    }

    #[test]
    fn if_range_rules() {
        assert_eq!(if_range(None, &V), IfRange::Apply);
        assert_eq!(if_range(Some(b"\"1f4-5f2a\""), &V), IfRange::Apply);
        assert_eq!(if_range(Some(b" \"1f4-5f2a\" "), &V), IfRange::Apply);
        assert_eq!(if_range(Some(b"W/\"1f4-5f2a\""), &V), IfRange::Ignore);
        assert_eq!(if_range(Some(b"\"other\""), &V), IfRange::Ignore);
        assert_eq!(if_range(Some(b"\"1f4-5f2a\", \"x\""), &V), IfRange::Ignore);
        assert_eq!(if_range(Some(b"\"1f4-5f2a"), &V), IfRange::Ignore);
        assert_eq!(if_range(Some(T_STR), &V), IfRange::Apply);
        assert_eq!(if_range(Some(AFTER), &V), IfRange::Ignore);
        assert_eq!(if_range(Some(BEFORE), &V), IfRange::Ignore);
        assert_eq!(if_range(Some(b"garbage"), &V), IfRange::Ignore);
        assert_eq!(if_range(Some(b""), &V), IfRange::Ignore);
    }

    #[test]
    fn weak_own_tag_never_matches_strongly() {
        let weak = Validators {
            etag: "W/\"a\"",
            last_modified: T,
        };
        assert_eq!(if_range(Some(b"\"a\""), &weak), IfRange::Ignore);
        let r = RequestHead {
            if_none_match: Some(b"\"a\""),
            ..get()
        };
        assert_eq!(evaluate(&r, &weak), Precondition::NotModified);
    }

    #[test]
    fn etag_format() {
        assert_eq!(file_etag(500, 0x5f2a), "\"1f4-5f2a\"");
        assert_eq!(file_etag(0, 0), "\"0-0\"");
        assert_eq!(
            file_etag(u64::MAX, u128::MAX),
            "\"ffffffffffffffff-ffffffffffffffffffffffffffffffff\""
        );
        // Our tags match themselves in every comparison.
        let tag = file_etag(123, 456);
        let v = Validators {
            etag: &tag,
            last_modified: 0,
        };
        assert_eq!(if_range(Some(tag.as_bytes()), &v), IfRange::Apply);
    }

    #[test]
    fn names() {
        assert_eq!(Precondition::Proceed.as_str(), "proceed");
        assert_eq!(Precondition::NotModified.as_str(), "not_modified");
        assert_eq!(Precondition::Failed.as_str(), "failed");
        assert_eq!(IfRange::Apply.as_str(), "apply");
        assert_eq!(IfRange::Ignore.as_str(), "ignore");
    }
}
