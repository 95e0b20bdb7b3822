//! Extensible priorities (RFC 9218): the `priority` request field and the PRIORITY_UPDATE
//! frame carry the same Priority Field Value, an RFC 8941 Dictionary with `u` (urgency,
//! 0 most urgent to 7, default 3) and `i` (incremental, default false). What the
//! scheduler does with them is the connection's; here only the value.

/// Urgency and incrementality of a response (RFC 9218 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    /// 0 (most urgent) to 7 (least).
    pub urgency: u8,
    /// Whether a client can use the response's bytes as they arrive (§4.2): such
    /// responses of one urgency share the connection rather than go one after another.
    pub incremental: bool,
}

/// The default urgency (§4.1).
pub const DEFAULT_URGENCY: u8 = 3;

impl Default for Priority {
    fn default() -> Self {
        Priority {
            urgency: DEFAULT_URGENCY,
            incremental: false,
        }
    }
}

/// The priority a Priority Field Value asks for (RFC 9218 §4, §5). Whatever cannot be
/// used is ignored, as §4 says: a value that is not a Dictionary gives the defaults, and
/// a `u` that is not an integer in 0..=7 or an `i` that is not a boolean leaves that
/// parameter at its default; unknown keys are ignored. Several `priority` field lines
/// are one value joined with `, ` (RFC 9110 §5.3), as for any Dictionary.
pub fn parse(value: &[u8]) -> Priority {
    let mut p = Priority::default();
    let Ok(dict) = sfv::Parser::new(value).parse::<sfv::Dictionary>() else {
        return p;
    };
    for (key, member) in dict.iter() {
        let sfv::ListEntry::Item(item) = member else {
            continue;
        };
        match key.as_str() {
            "u" => {
                if let Some(u) = item.bare_item.as_integer() {
                    if let Ok(u @ 0..=7) = u8::try_from(i64::from(u)) {
                        p.urgency = u;
                    }
                }
            }
            "i" => {
                if let Some(i) = item.bare_item.as_boolean() {
                    p.incremental = i;
                }
            }
            _ => {}
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(urgency: u8, incremental: bool) -> Priority {
        Priority {
            urgency,
            incremental,
        }
    }

    #[test]
    fn defaults() {
        assert_eq!(parse(b""), p(3, false));
        assert_eq!(Priority::default(), p(3, false));
    }

    #[test]
    fn urgency_and_incremental() {
        assert_eq!(parse(b"u=0"), p(0, false));
        assert_eq!(parse(b"u=7, i"), p(7, true));
        assert_eq!(parse(b"i"), p(3, true));
        assert_eq!(parse(b"i=?0, u=5"), p(5, false));
        assert_eq!(parse(b"i=?1"), p(3, true));
        // Unknown keys and parameters are ignored.
        assert_eq!(parse(b"u=1;x=2, foo=bar, i"), p(1, true));
        // The last value of a repeated key wins (RFC 8941 §3.2).
        assert_eq!(parse(b"u=1, u=6"), p(6, false));
    }

    #[test]
    fn unusable_values_ignored() {
        // Out of range or the wrong type: that parameter keeps its default.
        assert_eq!(parse(b"u=8"), p(3, false));
        assert_eq!(parse(b"u=-1, i"), p(3, true));
        assert_eq!(parse(b"u=1.5"), p(3, false));
        assert_eq!(parse(b"u=\"1\""), p(3, false));
        assert_eq!(parse(b"u=(1 2)"), p(3, false));
        assert_eq!(parse(b"i=1, u=2"), p(2, false));
        // Not a Dictionary at all: the defaults.
        assert_eq!(parse(b"u=1,,"), p(3, false));
        assert_eq!(parse(b"\xff"), p(3, false));
        assert_eq!(parse(b"U=1"), p(3, false));
    }
}
