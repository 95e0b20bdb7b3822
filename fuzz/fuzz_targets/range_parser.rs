//! Fuzz target: `Range` parsing, resolution against a length taken from the input, and
//! the multipart layout of the result. Nothing may panic or overflow; resolved ranges
//! must be sorted, disjoint, non-adjacent and inside the representation, and the plan's
//! `body_len` must equal the bytes it describes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_http::multipart::plan;
use linerate_http::range::{parse_range, resolve, RangeOutcome, MAX_RANGES};

fuzz_target!(|data: &[u8]| {
    // First 8 bytes: the representation length; the rest: the Range value.
    let (len, value) = match data.split_first_chunk::<8>() {
        Some((head, rest)) => (u64::from_le_bytes(*head), rest),
        None => (0, data),
    };
    let Some(specs) = parse_range(value) else {
        return;
    };
    assert!(!specs.is_empty());
    // Exercise both the raw length and a small one, where clamping and merging bite.
    for len in [len, len % 4096] {
        let ranges = match resolve(&specs, len) {
            RangeOutcome::Single(r) => vec![r],
            RangeOutcome::Multi(v) => {
                assert!(v.len() >= 2 && v.len() <= MAX_RANGES);
                v
            }
            RangeOutcome::Full | RangeOutcome::Unsatisfiable => continue,
        };
        let mut prev_end = None;
        for r in &ranges {
            assert!(r.len > 0);
            let end = r.start.checked_add(r.len).expect("range end overflows");
            assert!(end <= len);
            if let Some(prev) = prev_end {
                assert!(r.start > prev, "ranges overlap or touch");
            }
            prev_end = Some(end);
        }
        let p = plan(&ranges, len, "video/mp2t", "LINERATE0123456789");
        let mut total = p.trailer.len() as u64;
        for part in &p.parts {
            total = total
                .saturating_add(part.head.len() as u64)
                .saturating_add(part.range.len);
        }
        assert_eq!(p.body_len, total);
    }
});
