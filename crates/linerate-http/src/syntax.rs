//! Small pieces of RFC 9110 §5.6 field-value syntax shared by the parsers: OWS trimming,
//! tokens and decimal numbers. Private to the crate; each caller decides what an invalid
//! value means for its field.

/// Field lines joined into one field value (RFC 9110 §5.3: "a recipient MAY combine
/// multiple field lines ... into one field line ... by appending each subsequent field
/// line value to the combined field line value in order, separated by a comma").
pub(crate) fn combine_lines<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut joined = Vec::new();
    for line in lines {
        if !joined.is_empty() {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(line);
    }
    joined
}

/// Strip OWS (`*( SP / HTAB )`, RFC 9110 §5.6.3) from both ends.
pub(crate) fn trim_ows(s: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !is_ows(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    &s[start..end]
}

/// `token = 1*tchar` (RFC 9110 §5.6.2).
pub(crate) fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// `tchar` (RFC 9110 §5.6.2): visible ASCII except delimiters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// `1*DIGIT` as a u64; `None` if empty, not all digits, or too large for a u64. No sign,
/// no whitespace, leading zeros allowed.
pub(crate) fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Call `f` with each non-empty member of a comma-separated list (RFC 9110 §5.6.1), OWS
/// trimmed. A comma inside a quoted-string (§5.6.4) does not split; a backslash inside
/// one escapes the next byte; an unterminated quote runs to the end of the value.
pub(crate) fn for_each_member<'a>(value: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    let mut emit = |member: &'a [u8]| {
        let member = trim_ows(member);
        if !member.is_empty() {
            f(member);
        }
    };
    let mut start = 0;
    let mut in_quote = false;
    let mut escaped = false;
    for (i, &b) in value.iter().enumerate() {
        if in_quote {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_quote = false;
            }
        } else if b == b'"' {
            in_quote = true;
        } else if b == b',' {
            emit(&value[start..i]);
            start = i + 1;
        }
    }
    emit(&value[start..]);
}

/// The non-empty members of a comma-separated list, OWS-trimmed (RFC 9110 §5.6.1:
/// recipients tolerate empty members). No quoted-string handling: for lists of tokens
/// (`Connection`, `Expect`, `Transfer-Encoding`), where a quote is already an error.
pub(crate) fn list_members(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|m| !m.is_empty())
}

/// `s` split at the first `sep`, which belongs to neither side.
pub(crate) fn split_once(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|&b| b == sep)?;
    Some((&s[..i], &s[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_only_ows() {
        assert_eq!(trim_ows(b" \t a b \t "), b"a b");
        assert_eq!(trim_ows(b"   "), b"");
        assert_eq!(trim_ows(b""), b"");
        assert_eq!(trim_ows(b"\r\na\r\n"), b"\r\na\r\n");
    }

    #[test]
    fn tokens() {
        assert!(is_token(b"chunked"));
        assert!(is_token(b"x-Y_z.1~!#$%&'*+^`|"));
        for bad in [
            &b""[..],
            b"a b",
            b"a,b",
            b"\"a\"",
            b"a;b",
            b"a/b",
            b"\x80",
            b"a\0",
        ] {
            assert!(!is_token(bad), "{bad:?}");
        }
    }

    #[test]
    fn decimals() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"007"), Some(7));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        for bad in [&b""[..], b"+1", b"-1", b" 1", b"1 ", b"1a", b"0x1"] {
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
    }
}
