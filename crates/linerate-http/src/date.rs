//! IMF-fixdate formatting and HTTP-date parsing (RFC 9110 §5.6.7), seconds resolution.
//!
//! A thin, panic-free layer over the `httpdate` crate, which panics on times past year
//! 9999 (and before the epoch) when formatting; those are clamped here. Not here: the
//! clock (the caller passes the time in) or caching the formatted `Date` per second (the
//! server does that).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Latest second `httpdate` can format: 9999-12-31T23:59:59Z. RFC 9110 §5.6.7 dates have
/// four-digit years; a file time past it is nonsense and is clamped rather than refused.
pub const MAX_UNIX_SECS: u64 = 253_402_300_799;

/// Format seconds since the Unix epoch as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
/// Values past [`MAX_UNIX_SECS`] format as that second.
pub fn format(unix_secs: u64) -> String {
    let secs = unix_secs.min(MAX_UNIX_SECS);
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Parse any of the three HTTP-date forms; `None` if invalid (the field is then ignored,
/// per §13.1.3/§13.1.4).
///
/// RFC 9110 §5.6.7: recipients MUST accept all three forms (IMF-fixdate, RFC 850,
/// asctime). Surrounding OWS is tolerated; the day-of-week must agree with the date, and
/// bytes that are not ASCII make the value invalid. Dates before 1970 are invalid here
/// (`httpdate` refuses them), which is harmless: no file this server has is that old.
pub fn parse(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(crate::syntax::trim_ows(value)).ok()?;
    if !text.is_ascii() {
        return None;
    }
    let time: SystemTime = httpdate::parse_http_date(text).ok()?;
    time.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_imf_fixdate() {
        assert_eq!(format(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(format(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(format(MAX_UNIX_SECS), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(format(u64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn parses_three_forms() {
        assert_eq!(parse(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse(b"Sun Nov  6 08:49:37 1994"), Some(784_111_777));
        assert_eq!(
            parse(b"  Sun, 06 Nov 1994 08:49:37 GMT\t"),
            Some(784_111_777)
        );
    }

    #[test]
    fn rejects_invalid() {
        for bad in [
            &b""[..],
            b"yesterday",
            b"Mon, 06 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 31 Feb 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 GMT\xff",
            b"\xe2\x80\x83Sun, 06 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 GMT extra",
            b"784111777",
        ] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    proptest! {
        #[test]
        fn round_trip(secs in 0..=MAX_UNIX_SECS) {
            prop_assert_eq!(parse(format(secs).as_bytes()), Some(secs));
        }

        #[test]
        fn parse_never_panics(v in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = parse(&v);
        }

        #[test]
        fn parse_never_panics_on_datey_text(v in "[A-Za-z]{3}, [0-9]{2} [A-Za-z]{3} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT") {
            let _ = parse(v.as_bytes());
        }
    }
}
