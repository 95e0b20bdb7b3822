//! `Vary` (RFC 9110 §12.5.5) and the secondary cache key of a variant (RFC 9111 §4.1).

use crate::syntax::{for_each_member, is_token, trim_ows};

/// Most distinct field names in one `Vary`; a response naming more is treated as
/// `Vary: *` (not stored). Real origins vary on one to three fields
/// (`Accept-Encoding`, `Origin`, occasionally `Accept`); the bound keeps the secondary
/// key of every variant short and its computation cheap whatever an origin sends.
pub const MAX_VARY_NAMES: usize = 32;

/// A response's `Vary` (RFC 9110 §12.5.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vary {
    /// No `Vary`, or only empty members: one variant per URI.
    None,
    /// `Vary: *` (or a value this cache will not key on): never matches (RFC 9111 §4.1).
    Star,
    /// Field names, lower-cased, sorted and deduplicated; never empty.
    Names(Vec<Vec<u8>>),
}

impl Vary {
    /// Parse every `Vary` field line of a response.
    ///
    /// Members are split on commas and OWS-trimmed; empty members are ignored (RFC 9110
    /// §5.6.1). A `*` member gives [`Vary::Star`], and so does a member that is not a
    /// field name (a token, §5.1) or more than [`MAX_VARY_NAMES`] distinct names: a
    /// response whose variants this cache cannot key reliably is not shared.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Vary {
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut star = false;
        for value in values {
            for_each_member(value, |member| {
                if member == b"*" || !is_token(member) {
                    star = true;
                } else if !star {
                    names.push(member.to_ascii_lowercase());
                }
            });
            if star {
                return Vary::Star;
            }
        }
        names.sort_unstable();
        names.dedup();
        if names.len() > MAX_VARY_NAMES {
            Vary::Star
        } else if names.is_empty() {
            Vary::None
        } else {
            Vary::Names(names)
        }
    }

    /// The value stored with a variant: names joined by `,`, `*` for [`Vary::Star`],
    /// empty for [`Vary::None`]. [`Vary::parse`] of it gives the same `Vary` back.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Vary::None => Vec::new(),
            Vary::Star => b"*".to_vec(),
            Vary::Names(names) => names.join(&b","[..]),
        }
    }
}

/// The secondary cache key of a variant (RFC 9111 §4.1): for each name of `names` (in
/// their sorted order), `name` `:` value `\n`, or `name` `\n` when the request lacks
/// that field.
///
/// The value is every field line `get(name)` returns, joined by `,`, split into list
/// members with OWS trimmed around each and empty members dropped (the normalisation
/// §4.1 permits, RFC 9110 §5.6.1), rejoined by `,`. CR, LF and NUL, which no valid field
/// value contains (RFC 9110 §5.5), are dropped so a value cannot forge another name's
/// line of the key.
pub fn vary_key<'a>(names: &[Vec<u8>], get: impl Fn(&[u8]) -> Vec<&'a [u8]>) -> Vec<u8> {
    let mut key = Vec::new();
    for name in names {
        key.extend_from_slice(name);
        let values = get(name);
        if !values.is_empty() {
            key.push(b':');
            let mut first = true;
            for member in values.iter().flat_map(|v| v.split(|&b| b == b',')) {
                let member = trim_ows(member);
                if member.is_empty() {
                    continue;
                }
                if !first {
                    key.push(b',');
                }
                first = false;
                key.extend(member.iter().filter(|&&b| !matches!(b, b'\r' | b'\n' | 0)));
            }
        }
        key.push(b'\n');
    }
    key
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vary(values: &[&str]) -> Vary {
        Vary::parse(values.iter().map(|v| v.as_bytes()))
    }

    // ---- Vary ----

    #[test]
    fn vary_normalises_names() {
        assert_eq!(
            vary(&["Accept-Encoding, USER-AGENT", " accept-encoding ,Origin,,"]),
            Vary::Names(vec![
                b"accept-encoding".to_vec(),
                b"origin".to_vec(),
                b"user-agent".to_vec()
            ])
        );
        assert_eq!(vary(&[]), Vary::None);
        assert_eq!(vary(&["", " , ,"]), Vary::None);
        assert_eq!(vary(&["*"]), Vary::Star);
        assert_eq!(vary(&["accept", " * "]), Vary::Star);
        assert_eq!(vary(&["accept encoding"]), Vary::Star, "not a field name");
        assert_eq!(vary(&["\"accept\""]), Vary::Star);
        assert_eq!(vary(&["accept:x"]), Vary::Star);
    }

    #[test]
    fn vary_name_limit() {
        let names: Vec<String> = (0..MAX_VARY_NAMES).map(|i| format!("x-h{i}")).collect();
        let joined = names.join(",");
        assert!(matches!(vary(&[&joined]), Vary::Names(n) if n.len() == MAX_VARY_NAMES));
        let more = format!("{joined},x-one-more");
        assert_eq!(vary(&[&more]), Vary::Star);
        // Duplicates do not count towards the limit.
        let dup = format!("{joined},{joined}");
        assert!(matches!(vary(&[&dup]), Vary::Names(_)));
    }

    #[test]
    fn vary_encode() {
        assert_eq!(Vary::None.encode(), b"");
        assert_eq!(Vary::Star.encode(), b"*");
        let v = vary(&["Origin, Accept-Encoding"]);
        assert_eq!(v.encode(), b"accept-encoding,origin");
        assert_eq!(Vary::parse([&v.encode()[..]]), v);
    }

    #[test]
    fn vary_key_format() {
        let names = vec![
            b"accept-encoding".to_vec(),
            b"origin".to_vec(),
            b"x-absent".to_vec(),
        ];
        let key = vary_key(&names, |name| match name {
            b"accept-encoding" => vec![&b" gzip ,\tbr "[..], b"zstd"],
            b"origin" => vec![&b"https://a.example"[..]],
            _ => vec![],
        });
        assert_eq!(
            key,
            b"accept-encoding:gzip,br,zstd\norigin:https://a.example\nx-absent\n"
        );
        // Present but empty differs from absent.
        let names = vec![b"accept-encoding".to_vec()];
        assert_eq!(vary_key(&names, |_| vec![&b""[..]]), b"accept-encoding:\n");
        assert_eq!(vary_key(&names, |_| vec![]), b"accept-encoding\n");
        assert_eq!(vary_key(&[], |_| vec![&b"x"[..]]), b"");
    }

    #[test]
    fn vary_key_whitespace_and_line_equivalence() {
        let names = vec![b"accept-encoding".to_vec()];
        let a = vary_key(&names, |_| vec![&b"gzip, br"[..]]);
        let b = vary_key(&names, |_| vec![&b"gzip"[..], b" br"]);
        let c = vary_key(&names, |_| vec![&b"gzip,,br,"[..]]);
        assert_eq!(a, b);
        assert_eq!(a, c);
        // Inner content is kept as is.
        let d = vary_key(&names, |_| vec![&b"gzip;q=1.0 , br"[..]]);
        assert_eq!(d, b"accept-encoding:gzip;q=1.0,br\n");
        let e = vary_key(&names, |_| vec![&b"a  b"[..]]);
        assert_eq!(e, b"accept-encoding:a  b\n");
    }

    #[test]
    fn vary_key_cannot_forge_lines() {
        let names = vec![b"a".to_vec(), b"b".to_vec()];
        let forged = vary_key(&names, |n| {
            if n == b"a" {
                vec![&b"x\nb:y"[..]]
            } else {
                vec![]
            }
        });
        let honest = vary_key(&names, |n| {
            if n == b"a" {
                vec![&b"x"[..]]
            } else {
                vec![&b"y\nb"[..]]
            }
        });
        assert_ne!(forged, honest);
        assert_eq!(forged, b"a:xb:y\nb\n");
    }

    proptest! {
        #[test]
        fn vary_never_panics(v in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Vary::parse([&v[..]]);
        }

        #[test]
        fn vary_encode_round_trips(names in proptest::collection::vec("[A-Za-z0-9-]{1,12}", 0..40)) {
            let v = Vary::parse(names.iter().map(|n| n.as_bytes()));
            prop_assert_eq!(Vary::parse([&v.encode()[..]]), v.clone());
            if let Vary::Names(ns) = &v {
                prop_assert!(ns.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(ns.iter().all(|n| !n.iter().any(u8::is_ascii_uppercase)));
            }
        }
    }
}
