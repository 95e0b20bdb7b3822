//! `Range: bytes=...` parsing and resolution against a representation length
//! (RFC 9110 §14.1-§14.4). Syntax errors and unknown units make the server ignore the
//! header and answer 200 (§14.2: "A server MAY ignore the Range header field").
//!
//! Parsing is pure syntax ([`parse_range`]); everything that depends on the file
//! (satisfiability, clamping, merging, the part limit) is [`resolve`]. Not here: `If-Range`
//! (see [`crate::conditional::if_range`]) and the multipart layout (see
//! [`crate::multipart`]).

use crate::syntax::{parse_u64, trim_ows};

/// Most ranges served as one multipart response, after merging overlapping and adjacent
/// ones. A request for more is answered with the whole representation (200), as nginx's
/// `max_ranges` does, so a client cannot make us emit thousands of tiny parts (the
/// "Apache Killer" CVE-2011-3192 pattern).
pub const MAX_RANGES: usize = 16;

/// Longest `Range` value parsed, in bytes; longer is ignored (treated as absent).
pub const MAX_RANGE_HEADER: usize = 1024;

/// Most `byte-range-spec`s parsed from one value; more and the header is ignored.
/// [`MAX_RANGE_HEADER`] alone would allow about 340 (`-1,` is three bytes); this bounds
/// the allocation and the sort in [`resolve`] independently of that limit, at a count no
/// player comes near (they send one range, rarely two).
pub const MAX_RANGE_SPECS: usize = 256;

/// One `byte-range-spec` as written by the client (§14.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `first-last` (inclusive).
    FromTo(u64, u64),
    /// `first-`
    From(u64),
    /// `-suffix_length`
    Suffix(u64),
}

/// A resolved, satisfiable byte range: `start..start+len` with len > 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte offset.
    pub start: u64,
    /// Number of bytes (> 0).
    pub len: u64,
}

impl ByteRange {
    /// Last byte offset, inclusive (as written in `Content-Range`).
    ///
    /// Saturating, so a hand-built range that breaks the `len > 0` / no-overflow invariant
    /// gives a wrong number rather than a panic; [`resolve`] never builds one.
    pub fn last(&self) -> u64 {
        self.start.saturating_add(self.len.saturating_sub(1))
    }
}

/// What to send for a request's `Range` against a representation of `len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeOutcome {
    /// No (valid) range: send the whole representation with 200.
    Full,
    /// One range: 206 with `Content-Range`.
    Single(ByteRange),
    /// Several disjoint ranges in ascending order (2..=MAX_RANGES): 206 multipart/byteranges.
    Multi(Vec<ByteRange>),
    /// No range satisfiable: 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

impl RangeOutcome {
    /// Short stable name for logs and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            RangeOutcome::Full => "full",
            RangeOutcome::Single(_) => "single",
            RangeOutcome::Multi(_) => "multi",
            RangeOutcome::Unsatisfiable => "unsatisfiable",
        }
    }
}

/// Parse a `Range` value. `None` means "ignore it" (bad syntax, other unit, too long).
///
/// Grammar (RFC 9110 §14.1.2, §14.2): `ranges-specifier = range-unit "=" range-set`, the
/// unit `bytes` case-insensitively (§14.1: "range units are compared case-insensitively"),
/// no whitespace around `=`; `range-set = 1#range-spec` with OWS around commas and empty
/// list elements tolerated (§5.6.1), but at least one spec. Any invalid spec invalidates
/// the whole value, including `first-last` with last < first (§14.1.1: "invalid"), a
/// number that does not fit in a u64, or whitespace inside a spec. More than
/// [`MAX_RANGE_SPECS`] specs or more than [`MAX_RANGE_HEADER`] bytes: ignored too.
pub fn parse_range(value: &[u8]) -> Option<Vec<RangeSpec>> {
    if value.len() > MAX_RANGE_HEADER {
        return None;
    }
    let value = trim_ows(value);
    const UNIT: &[u8] = b"bytes=";
    if value.len() < UNIT.len() || !value[..UNIT.len()].eq_ignore_ascii_case(UNIT) {
        return None;
    }
    let mut specs = Vec::new();
    for element in value[UNIT.len()..].split(|&b| b == b',') {
        let element = trim_ows(element);
        if element.is_empty() {
            continue;
        }
        if specs.len() == MAX_RANGE_SPECS {
            return None;
        }
        specs.push(parse_spec(element)?);
    }
    if specs.is_empty() {
        return None;
    }
    Some(specs)
}

/// One `range-spec`: `int-range = first-pos "-" [ last-pos ]` or
/// `suffix-range = "-" suffix-length`.
fn parse_spec(spec: &[u8]) -> Option<RangeSpec> {
    let dash = spec.iter().position(|&b| b == b'-')?;
    let (first, last) = (&spec[..dash], &spec[dash + 1..]);
    match (first.is_empty(), last.is_empty()) {
        (true, true) => None,
        (true, false) => Some(RangeSpec::Suffix(parse_u64(last)?)),
        (false, true) => Some(RangeSpec::From(parse_u64(first)?)),
        (false, false) => {
            let (first, last) = (parse_u64(first)?, parse_u64(last)?);
            // RFC 9110 §14.1.1: "An int-range is invalid if the last-pos value is present
            // and less than the first-pos."
            (last >= first).then_some(RangeSpec::FromTo(first, last))
        }
    }
}

/// Resolve parsed specs against a length: drop unsatisfiable specs, clamp ends, merge
/// overlapping or adjacent ranges (RFC 9110 §14.2 allows coalescing), sort ascending,
/// apply [`MAX_RANGES`].
///
/// Satisfiability follows RFC 9110 §14.1.2: an int-range is satisfiable if its first-pos
/// is below `len`, a suffix-range if its length is non-zero (`-0` is not). A last-pos
/// past the end is clamped to `len - 1`; a suffix longer than `len` means the whole
/// representation. Specs that merge into one range give [`RangeOutcome::Single`].
///
/// Empty representation (`len == 0`): §14.1.2 says "the only satisfiable form of
/// range-spec in a GET request is a suffix-range with a non-zero suffix-length", yet what
/// it selects is zero bytes, which no `Content-Range` can describe (§14.4 has no empty
/// `incl-range`). So a non-zero suffix gives [`RangeOutcome::Full`] (200 with the empty
/// body, as §14.2 lets a server ignore Range), and anything else
/// [`RangeOutcome::Unsatisfiable`] (416 `bytes */0`).
///
/// Parts come back in ascending order even when the client listed them otherwise: RFC
/// 9110 §14.6 says a server SHOULD keep the request order, but sorting is what makes
/// merging cheap and players ask in ascending order anyway.
pub fn resolve(specs: &[RangeSpec], len: u64) -> RangeOutcome {
    if len == 0 {
        let suffix = specs
            .iter()
            .any(|s| matches!(s, RangeSpec::Suffix(n) if *n > 0));
        return if suffix {
            RangeOutcome::Full
        } else {
            RangeOutcome::Unsatisfiable
        };
    }

    // Half-open [start, end) with end <= len, so `end` never overflows.
    let mut spans: Vec<(u64, u64)> = specs
        .iter()
        .filter_map(|spec| match *spec {
            RangeSpec::FromTo(first, last) if first < len => Some((first, last.min(len - 1) + 1)),
            RangeSpec::From(first) if first < len => Some((first, len)),
            RangeSpec::Suffix(n) if n > 0 => Some((len - n.min(len), len)),
            _ => None,
        })
        .collect();
    if spans.is_empty() {
        return RangeOutcome::Unsatisfiable;
    }

    spans.sort_unstable();
    let mut merged: Vec<ByteRange> = Vec::with_capacity(spans.len().min(MAX_RANGES + 1));
    let mut current = spans[0];
    for &(start, end) in &spans[1..] {
        if start <= current.1 {
            // Overlapping or adjacent (start == end of the previous): one range.
            current.1 = current.1.max(end);
        } else {
            merged.push(span_to_range(current));
            if merged.len() > MAX_RANGES {
                return RangeOutcome::Full;
            }
            current = (start, end);
        }
    }
    merged.push(span_to_range(current));

    match merged.len() {
        1 => RangeOutcome::Single(merged[0]),
        n if n <= MAX_RANGES => RangeOutcome::Multi(merged),
        _ => RangeOutcome::Full,
    }
}

fn span_to_range((start, end): (u64, u64)) -> ByteRange {
    ByteRange {
        start,
        len: end - start,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;
    use RangeSpec::{From, FromTo, Suffix};

    fn br(start: u64, len: u64) -> ByteRange {
        ByteRange { start, len }
    }

    fn resolve_str(value: &str, len: u64) -> RangeOutcome {
        resolve(&parse_range(value.as_bytes()).unwrap(), len)
    }

    #[test]
    fn parses_forms() {
        assert_eq!(parse_range(b"bytes=0-499"), Some(vec![FromTo(0, 499)]));
        assert_eq!(parse_range(b"bytes=500-"), Some(vec![From(500)]));
        assert_eq!(parse_range(b"bytes=-500"), Some(vec![Suffix(500)]));
        assert_eq!(parse_range(b"bytes=5-5"), Some(vec![FromTo(5, 5)]));
        assert_eq!(parse_range(b"bytes=-0"), Some(vec![Suffix(0)]));
        assert_eq!(parse_range(b"bytes=007-010"), Some(vec![FromTo(7, 10)]));
        assert_eq!(
            parse_range(b"bytes=0-0,-1, 5-"),
            Some(vec![FromTo(0, 0), Suffix(1), From(5)])
        );
    }

    #[test]
    fn unit_is_case_insensitive() {
        assert_eq!(parse_range(b"BYTES=0-1"), Some(vec![FromTo(0, 1)]));
        assert_eq!(parse_range(b"Bytes=0-1"), Some(vec![FromTo(0, 1)]));
    }

    #[test]
    fn ows_and_empty_elements() {
        assert_eq!(
            parse_range(b"bytes=0-1 ,\t2-3 , ,4-5,"),
            Some(vec![FromTo(0, 1), FromTo(2, 3), FromTo(4, 5)])
        );
        assert_eq!(parse_range(b"bytes=,0-1"), Some(vec![FromTo(0, 1)]));
        assert_eq!(parse_range(b"  bytes=0-1  "), Some(vec![FromTo(0, 1)]));
    }

    #[test]
    fn invalid_values_are_ignored() {
        for v in [
            &b""[..],
            b"bytes",
            b"bytes=",
            b"bytes=,",
            b"bytes= , ",
            b"bytes=-",
            b"bytes=5-4",
            b"bytes=0-1,5-4",
            b"bytes=a-b",
            b"bytes=1-2-3",
            b"bytes=0 - 1",
            b"bytes=0- 1",
            b"bytes =0-1",
            b"bytes= 0-1x",
            b"bytes=+1-2",
            b"bytes=--1",
            b"bytes=1",
            b"items=0-1",
            b"byte=0-1",
            b"0-1",
            b"bytes=0-18446744073709551616",
            b"bytes=18446744073709551616-",
            b"bytes=-99999999999999999999",
        ] {
            assert_eq!(parse_range(v), None, "{:?}", String::from_utf8_lossy(v));
        }
        // The largest u64 is fine.
        assert_eq!(
            parse_range(b"bytes=18446744073709551615-"),
            Some(vec![From(u64::MAX)])
        );
    }

    #[test]
    fn length_limit() {
        let mut v = b"bytes=0-1".to_vec();
        v.resize(MAX_RANGE_HEADER, b' ');
        assert!(parse_range(&v).is_some());
        v.push(b' ');
        assert_eq!(parse_range(&v), None);
    }

    #[test]
    fn spec_count_limit() {
        let at_limit = format!("bytes={}", vec!["-1"; MAX_RANGE_SPECS].join(","));
        assert_eq!(
            parse_range(at_limit.as_bytes()).map(|s| s.len()),
            Some(MAX_RANGE_SPECS)
        );
        let over = format!("bytes={}", vec!["-1"; MAX_RANGE_SPECS + 1].join(","));
        assert!(over.len() <= MAX_RANGE_HEADER);
        assert_eq!(parse_range(over.as_bytes()), None);
    }

    #[test]
    fn resolves_single() {
        assert_eq!(
            resolve_str("bytes=0-499", 1000),
            RangeOutcome::Single(br(0, 500))
        );
        assert_eq!(
            resolve_str("bytes=500-", 1000),
            RangeOutcome::Single(br(500, 500))
        );
        assert_eq!(
            resolve_str("bytes=-200", 1000),
            RangeOutcome::Single(br(800, 200))
        );
        // Clamp last-pos; a suffix longer than the representation is all of it.
        assert_eq!(
            resolve_str("bytes=900-5000", 1000),
            RangeOutcome::Single(br(900, 100))
        );
        assert_eq!(
            resolve_str("bytes=-5000", 1000),
            RangeOutcome::Single(br(0, 1000))
        );
        assert_eq!(
            resolve_str("bytes=-1000", 1000),
            RangeOutcome::Single(br(0, 1000))
        );
        assert_eq!(
            resolve_str("bytes=999-", 1000),
            RangeOutcome::Single(br(999, 1))
        );
        assert_eq!(
            resolve_str("bytes=0-18446744073709551615", 10),
            RangeOutcome::Single(br(0, 10))
        );
        assert_eq!(
            resolve(&[FromTo(0, u64::MAX - 1)], u64::MAX),
            RangeOutcome::Single(br(0, u64::MAX))
        );
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(
            resolve_str("bytes=1000-", 1000),
            RangeOutcome::Unsatisfiable
        );
        assert_eq!(
            resolve_str("bytes=1000-2000", 1000),
            RangeOutcome::Unsatisfiable
        );
        assert_eq!(resolve_str("bytes=-0", 1000), RangeOutcome::Unsatisfiable);
        assert_eq!(
            resolve_str("bytes=-0,5000-", 1000),
            RangeOutcome::Unsatisfiable
        );
        assert_eq!(resolve(&[], 1000), RangeOutcome::Unsatisfiable);
        // Unsatisfiable specs are dropped when another one is satisfiable.
        assert_eq!(
            resolve_str("bytes=5000-,0-0", 1000),
            RangeOutcome::Single(br(0, 1))
        );
        assert_eq!(
            resolve_str("bytes=-0,-1", 1000),
            RangeOutcome::Single(br(999, 1))
        );
    }

    #[test]
    fn empty_representation() {
        assert_eq!(resolve_str("bytes=0-", 0), RangeOutcome::Unsatisfiable);
        assert_eq!(resolve_str("bytes=0-0", 0), RangeOutcome::Unsatisfiable);
        assert_eq!(resolve_str("bytes=-0", 0), RangeOutcome::Unsatisfiable);
        assert_eq!(resolve_str("bytes=-1", 0), RangeOutcome::Full);
        assert_eq!(resolve_str("bytes=0-,-5", 0), RangeOutcome::Full);
    }

    #[test]
    fn merges_overlapping_and_adjacent() {
        assert_eq!(
            resolve_str("bytes=0-99,100-199", 1000),
            RangeOutcome::Single(br(0, 200))
        );
        assert_eq!(
            resolve_str("bytes=0-150,100-199", 1000),
            RangeOutcome::Single(br(0, 200))
        );
        assert_eq!(
            resolve_str("bytes=100-199,0-99", 1000),
            RangeOutcome::Single(br(0, 200))
        );
        assert_eq!(
            resolve_str("bytes=0-,-10", 1000),
            RangeOutcome::Single(br(0, 1000))
        );
        assert_eq!(
            resolve_str("bytes=10-20,12-15", 1000),
            RangeOutcome::Single(br(10, 11))
        );
        assert_eq!(
            resolve_str("bytes=0-0,0-0", 1000),
            RangeOutcome::Single(br(0, 1))
        );
    }

    #[test]
    fn multi_sorted() {
        assert_eq!(
            resolve_str("bytes=500-599,0-99", 1000),
            RangeOutcome::Multi(vec![br(0, 100), br(500, 100)])
        );
        assert_eq!(
            resolve_str("bytes=0-0,2-2,-1", 1000),
            RangeOutcome::Multi(vec![br(0, 1), br(2, 1), br(999, 1)])
        );
    }

    #[test]
    fn too_many_ranges_is_full() {
        let specs: Vec<RangeSpec> = (0..MAX_RANGES as u64)
            .map(|i| FromTo(i * 10, i * 10))
            .collect();
        assert!(matches!(resolve(&specs, 1000), RangeOutcome::Multi(v) if v.len() == MAX_RANGES));
        let specs: Vec<RangeSpec> = (0..=MAX_RANGES as u64)
            .map(|i| FromTo(i * 10, i * 10))
            .collect();
        assert_eq!(resolve(&specs, 1000), RangeOutcome::Full);
        // Many specs that merge into few are fine (the Apache Killer shape).
        let killer: Vec<RangeSpec> = (0..200).map(|i| FromTo(0, i)).collect();
        assert_eq!(resolve(&killer, 1000), RangeOutcome::Single(br(0, 200)));
    }

    #[test]
    fn names_and_last() {
        assert_eq!(RangeOutcome::Full.as_str(), "full");
        assert_eq!(RangeOutcome::Single(br(0, 1)).as_str(), "single");
        assert_eq!(RangeOutcome::Multi(vec![]).as_str(), "multi");
        assert_eq!(RangeOutcome::Unsatisfiable.as_str(), "unsatisfiable");
        assert_eq!(br(10, 5).last(), 14);
        assert_eq!(br(0, 1).last(), 0);
        // Broken invariants saturate instead of panicking.
        assert_eq!(br(0, 0).last(), 0);
        assert_eq!(br(u64::MAX, 10).last(), u64::MAX);
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn spec(max: u64) -> impl Strategy<Value = RangeSpec> {
            prop_oneof![
                (0..=max, 0..=max).prop_map(|(a, b)| RangeSpec::FromTo(a.min(b), a.max(b))),
                (0..=max).prop_map(RangeSpec::From),
                (0..=max).prop_map(RangeSpec::Suffix),
            ]
        }

        fn format_spec(s: &RangeSpec) -> String {
            match s {
                RangeSpec::FromTo(a, b) => format!("{a}-{b}"),
                RangeSpec::From(a) => format!("{a}-"),
                RangeSpec::Suffix(n) => format!("-{n}"),
            }
        }

        /// Which bytes of `0..len` a spec selects, per RFC 9110 §14.1.2, naively.
        fn naive_bitmap(specs: &[RangeSpec], len: u64) -> Vec<bool> {
            let mut bits = vec![false; len as usize];
            for s in specs {
                for (i, bit) in bits.iter_mut().enumerate() {
                    let i = i as u64;
                    let hit = match *s {
                        RangeSpec::FromTo(a, b) => a <= i && i <= b,
                        RangeSpec::From(a) => a <= i,
                        RangeSpec::Suffix(n) => i + n >= len && n > 0,
                    };
                    *bit |= hit;
                }
            }
            bits
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]

            /// Resolved ranges are sorted, disjoint, non-adjacent, inside [0, len), and
            /// cover exactly the bytes the specs select.
            #[test]
            fn resolve_matches_bitmap_model(
                specs in proptest::collection::vec(spec(80), 1..24),
                len in 0u64..64,
            ) {
                let model = naive_bitmap(&specs, len);
                let any_selected = model.iter().any(|&b| b);
                let outcome = resolve(&specs, len);
                let ranges = match &outcome {
                    RangeOutcome::Single(r) => vec![*r],
                    RangeOutcome::Multi(v) => {
                        prop_assert!(v.len() >= 2 && v.len() <= MAX_RANGES);
                        v.clone()
                    }
                    RangeOutcome::Unsatisfiable => {
                        prop_assert!(!any_selected);
                        if len == 0 {
                            let suffix = specs.iter().any(|s| matches!(s, RangeSpec::Suffix(n) if *n > 0));
                            prop_assert!(!suffix);
                        }
                        return Ok(());
                    }
                    RangeOutcome::Full => {
                        // Either too many parts, or a satisfiable suffix on an empty file.
                        let parts = model.windows(2).filter(|w| w[0] && !w[1]).count()
                            + usize::from(model.last() == Some(&true));
                        prop_assert!(parts > MAX_RANGES || len == 0, "parts {}", parts);
                        return Ok(());
                    }
                };
                let mut bits = vec![false; len as usize];
                let mut prev_end: Option<u64> = None;
                for r in &ranges {
                    prop_assert!(r.len > 0);
                    prop_assert!(r.start + r.len <= len);
                    prop_assert_eq!(r.last(), r.start + r.len - 1);
                    if let Some(end) = prev_end {
                        // Strictly after the previous end: disjoint and not adjacent.
                        prop_assert!(r.start > end, "{:?}", ranges);
                    }
                    prev_end = Some(r.start + r.len);
                    for i in r.start..r.start + r.len {
                        bits[i as usize] = true;
                    }
                }
                prop_assert_eq!(bits, model);
            }

            /// Formatting specs and parsing them back gives the same specs, whatever
            /// the unit's case, the OWS around commas and empty elements.
            #[test]
            fn format_parse_round_trip(
                specs in proptest::collection::vec(spec(u64::MAX), 1..20),
                upper in any::<bool>(),
                sep in prop_oneof![Just(","), Just(", "), Just(" ,\t"), Just(",,")],
            ) {
                let body: Vec<String> = specs.iter().map(format_spec).collect();
                let unit = if upper { "BYTES=" } else { "bytes=" };
                let value = format!("{unit}{}", body.join(sep));
                prop_assume!(value.len() <= MAX_RANGE_HEADER);
                prop_assert_eq!(parse_range(value.as_bytes()), Some(specs));
            }

            #[test]
            fn parse_never_panics(v in proptest::collection::vec(any::<u8>(), 0..128)) {
                let _ = parse_range(&v);
            }

            #[test]
            fn parse_never_panics_on_rangey_text(v in "(bytes|BYTES|x)=[0-9,\\- \t]{0,64}", len in any::<u64>()) {
                if let Some(specs) = parse_range(v.as_bytes()) {
                    prop_assert!(!specs.is_empty() && specs.len() <= MAX_RANGE_SPECS);
                    let _ = resolve(&specs, len);
                }
            }

            /// Large lengths and offsets: no overflow, results stay inside [0, len).
            #[test]
            fn resolve_huge_values(specs in proptest::collection::vec(spec(u64::MAX), 1..8), len in any::<u64>()) {
                match resolve(&specs, len) {
                    RangeOutcome::Single(r) => {
                        prop_assert!(r.len > 0 && r.start.checked_add(r.len).is_some_and(|e| e <= len));
                    }
                    RangeOutcome::Multi(v) => {
                        for w in v.windows(2) {
                            prop_assert!(w[0].start + w[0].len < w[1].start);
                        }
                        for r in &v {
                            prop_assert!(r.len > 0 && r.start.checked_add(r.len).is_some_and(|e| e <= len));
                        }
                    }
                    RangeOutcome::Full | RangeOutcome::Unsatisfiable => {}
                }
            }
        }
    }
}
