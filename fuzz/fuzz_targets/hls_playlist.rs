//! Fuzz target: HLS media playlists from an origin (`linerate_http::hls`), which cache
//! mode reads to prefetch segments. Nothing may panic; every segment it lists resolves
//! (against a base taken from the input) either to nothing or to an origin-form target
//! with no dot segment left and no authority, so a playlist can never steer a prefetch
//! to another host or out of the path it was allowed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_http::hls::{parse_media, resolve};

fuzz_target!(|data: &[u8]| {
    // Up to the first NUL: the playlist's own target; the rest: the playlist body.
    let (base, body) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b"/v/index.m3u8"[..], data),
    };
    let Some(playlist) = parse_media(body) else {
        return;
    };
    for uri in playlist.segments {
        let Some(target) = resolve(base, uri) else {
            continue;
        };
        assert!(target.starts_with(b"/") && !target.starts_with(b"//"), "{target:?}");
        let path = target.split(|&b| b == b'?').next().unwrap_or(&[]);
        for seg in path.split(|&b| b == b'/') {
            assert!(seg != b"." && seg != b"..", "{target:?}");
        }
    }
});
