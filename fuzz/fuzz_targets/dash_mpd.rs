//! Fuzz target: DASH manifests from an origin (`linerate_http::dash`), which cache mode
//! reads to prefetch segments. Nothing may panic (overflow checks are on), lists stay
//! within their bound, and every segment, resolved base by base against a target taken
//! from the input, is either nothing or an origin-form target with no authority and no
//! dot segment left.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_http::dash::{parse_mpd, MAX_SEGMENTS};
use linerate_http::hls::resolve;

fuzz_target!(|data: &[u8]| {
    // Up to the first NUL: the manifest's own target; the rest: the manifest body.
    let (base, body) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b"/v/manifest.mpd"[..], data),
    };
    let Some(reps) = parse_mpd(body) else {
        return;
    };
    for rep in reps {
        assert!(rep.segments.len() <= MAX_SEGMENTS);
        let Some(base) = rep
            .bases
            .iter()
            .try_fold(base.to_vec(), |b, u| resolve(&b, u.as_bytes()))
        else {
            continue;
        };
        for uri in rep.segments.iter().take(64) {
            let Some(target) = resolve(&base, uri.as_bytes()) else {
                continue;
            };
            assert!(target.starts_with(b"/") && !target.starts_with(b"//"), "{target:?}");
            let path = target.split(|&b| b == b'?').next().unwrap_or(&[]);
            for seg in path.split(|&b| b == b'/') {
                assert!(seg != b"." && seg != b"..", "{target:?}");
            }
        }
    }
});
