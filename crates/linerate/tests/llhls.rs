//! Low-Latency HLS through cache mode: blocking playlist reloads (`_HLS_msn`,
//! `_HLS_part` delivery directives) are keyed by their directives, in one order, also
//! on a route whose key ignores the query; every player blocking on the same part
//! waits on one origin request. The real binary in front of a counting origin that
//! holds each blocking reload, as an LL-HLS packager does until the part exists.
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]

mod support;

use std::time::Duration;

use support::kit::{CacheStatus, Variant};
use support::origin::{self, Origin, Reply, Request};

/// How long the origin holds a blocking reload.
const HOLD: Duration = Duration::from_millis(600);

/// The query parameter `name` of `target`, if any.
fn param<'a>(target: &'a str, name: &str) -> Option<&'a str> {
    let (_, q) = target.split_once('?')?;
    q.split('&')
        .find_map(|p| p.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
}

/// A playlist body that says which reload it answers.
fn answer(msn: &str, part: &str) -> Vec<u8> {
    format!(
        "#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-TARGETDURATION:4\n#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=3.0\n#EXT-X-PART-INF:PART-TARGET=1.0\n#EXT-X-MEDIA-SEQUENCE:0\n# answer msn={msn} part={part}\n"
    )
    .into_bytes()
}

/// `/live/index.m3u8`: with `_HLS_msn`, held for [`HOLD`] then answered (cacheable for
/// a few part durations, as the HLS spec recommends for blocking responses); without,
/// answered at once.
fn live_origin(v: Variant) -> Origin {
    v.origin(|r: &Request| {
        let path = r.path();
        let msn = param(path, "_HLS_msn").unwrap_or("-").to_owned();
        let part = param(path, "_HLS_part").unwrap_or("-").to_owned();
        let reply = origin::ok(
            &answer(&msn, &part),
            &[
                ("Content-Type", "application/vnd.apple.mpegurl"),
                ("Cache-Control", "max-age=6"),
            ],
        );
        if msn == "-" {
            reply
        } else {
            Reply::Delayed {
                delay: HOLD,
                reply: Box::new(reply),
            }
        }
    })
}

fn playlist_requests(origin: &Origin) -> Vec<String> {
    origin
        .requests()
        .iter()
        .map(|r| r.path().to_owned())
        .filter(|p| p.starts_with("/live/index.m3u8"))
        .collect()
}

matrix! {
    /// 40 players block on the same part, half of them naming the directives in the
    /// other order: one origin request, every player gets that part's playlist; the
    /// next part is another origin request.
    fn players_blocking_on_one_part_share_one_origin_request(v) {
        let origin = live_origin(v);
        let cache = v.config(&origin).start();
        let targets = [
            "/live/index.m3u8?_HLS_msn=7&_HLS_part=2",
            "/live/index.m3u8?_HLS_part=2&_HLS_msn=7",
        ];
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..40)
                .map(|i| {
                    let cache = &cache;
                    s.spawn(move || cache.get(targets[i % 2], &[]))
                })
                .collect();
            for h in handles {
                let r = h.join().unwrap();
                assert_eq!(r.status, 200);
                assert_eq!(r.body, answer("7", "2"));
            }
        });
        assert_eq!(playlist_requests(&origin).len(), 1, "{:?}", playlist_requests(&origin));
        // Stored: a late player for the same part is a hit.
        let late = cache.get(targets[1], &[]);
        assert!(CacheStatus::of(&late).is_hit(), "{:?}", CacheStatus::of(&late));
        let next = cache.get("/live/index.m3u8?_HLS_msn=7&_HLS_part=3", &[]);
        assert_eq!(next.body, answer("7", "3"));
        assert_eq!(playlist_requests(&origin).len(), 2);
        origin.assert_no_panics();
    }

    /// A route keyed without its query (tokens in URLs) still keeps the directives:
    /// players with different tokens share a part's playlist, and the next part is not
    /// answered with the previous one. The origin gets the query as the client sent it.
    fn a_route_ignoring_the_query_keeps_the_directives(v) {
        let origin = live_origin(v);
        let cache = v.config(&origin).route("query = \"ignore\"").start();
        let a = cache.get("/live/index.m3u8?token=a&_HLS_msn=7", &[]);
        assert_eq!(a.body, answer("7", "-"));
        let b = cache.get("/live/index.m3u8?_HLS_msn=7&token=b", &[]);
        assert_eq!(b.body, answer("7", "-"));
        assert!(CacheStatus::of(&b).is_hit(), "{:?}", CacheStatus::of(&b));
        let next = cache.get("/live/index.m3u8?token=a&_HLS_msn=8", &[]);
        assert_eq!(next.body, answer("8", "-"), "the next sequence, not the stored one");
        // No directive: the plain playlist, one object whatever the token.
        let plain = cache.get("/live/index.m3u8?token=c", &[]);
        assert_eq!(plain.body, answer("-", "-"));
        let plain2 = cache.get("/live/index.m3u8?token=d", &[]);
        assert!(CacheStatus::of(&plain2).is_hit(), "{:?}", CacheStatus::of(&plain2));
        assert_eq!(
            playlist_requests(&origin),
            [
                "/live/index.m3u8?token=a&_HLS_msn=7",
                "/live/index.m3u8?token=a&_HLS_msn=8",
                "/live/index.m3u8?token=c",
            ]
        );
        origin.assert_no_panics();
    }
}
