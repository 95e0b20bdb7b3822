//! Fuzz target: DASH MPDs from an origin (`linerate_http::dash`), which fill jobs read
//! to list the segments to fetch. Nothing may panic or overflow; every object it lists
//! is an origin-form target with no dot segment left and no authority, so an MPD can
//! never steer a fill to another host.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_http::dash::objects;

fuzz_target!(|data: &[u8]| {
    let Ok(list) = objects(data, b"/vod/manifest.mpd") else {
        return;
    };
    for target in list {
        assert!(target.starts_with(b"/") && !target.starts_with(b"//"), "{target:?}");
        let path = target.split(|&b| b == b'?').next().unwrap_or(&[]);
        for seg in path.split(|&b| b == b'/') {
            assert!(seg != b"." && seg != b"..", "{target:?}");
        }
    }
});
