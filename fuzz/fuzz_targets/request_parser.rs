//! Fuzz target: the whole request pipeline on arbitrary bytes. `parse_request` must never
//! panic, nor locating a malformed head's fault (`malformation`); for every complete
//! head, the values it hands on (target, Range, validators) must go through the later
//! stages without panicking either, and what they return must keep its documented
//! invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_http::conditional::{evaluate, if_range, Validators};
use linerate_http::path::normalize_target;
use linerate_http::range::{parse_range, resolve, RangeOutcome};
use linerate_http::request::{malformation, FieldBuf, RequestError};
use linerate_http::{parse_request, ParseOutcome};

fuzz_target!(|data: &[u8]| {
    let mut fields = FieldBuf::new();
    let parsed = parse_request(data, &mut fields);
    // A refused head is located again for the log and the 400's body (on the error
    // path, with the same attacker's bytes): that must not panic either.
    if let Err(RequestError::Malformed) = parsed {
        let _ = malformation(data).as_str();
    }
    let Ok(ParseOutcome::Complete { head, head_len }) = parsed else {
        return;
    };
    assert!(head_len <= data.len());
    assert!(head_len <= linerate_http::request::MAX_HEAD_BYTES);
    // RFC 9112 §3.2: no target with a fragment gets through; every field is kept.
    assert!(!head.target.contains(&b'#'));
    assert!(head.fields().count() <= linerate_http::request::MAX_HEADERS);
    let _ = (head.authority(), head.path_and_query());

    if let Ok(path) = normalize_target(head.target) {
        assert!(!path.relative.starts_with(b"/"));
        assert!(!path.relative.contains(&0));
        for segment in path.relative.split(|&b| b == b'/') {
            assert!(segment != b"." && segment != b"..");
        }
    }

    // Lengths derived from the input, so small, zero and huge ones all get exercised.
    let len = data
        .iter()
        .fold(0u64, |acc, &b| acc.rotate_left(7) ^ u64::from(b));
    let validators = Validators {
        etag: "\"1f4-5f2a1c3b\"",
        last_modified: len % 4_000_000_000,
    };
    let _ = evaluate(&head, &validators);
    let _ = if_range(head.if_range, &validators);

    if let Some(specs) = head.range.and_then(parse_range) {
        for len in [0, 1, len % 1024, len] {
            check_outcome(&resolve(&specs, len), len);
        }
    }
});

fn check_outcome(outcome: &RangeOutcome, len: u64) {
    let ranges = match outcome {
        RangeOutcome::Single(r) => std::slice::from_ref(r),
        RangeOutcome::Multi(v) => v.as_slice(),
        RangeOutcome::Full | RangeOutcome::Unsatisfiable => return,
    };
    let mut prev_end = None;
    for r in ranges {
        assert!(r.len > 0);
        let end = r.start.checked_add(r.len).expect("range end overflows");
        assert!(end <= len);
        if let Some(prev) = prev_end {
            assert!(r.start > prev, "ranges overlap or touch");
        }
        prev_end = Some(end);
    }
}
