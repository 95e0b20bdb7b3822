//! Collapsed forwarding (RFC 9111 §4: a cache may wait for a response already being
//! fetched rather than send another request; RFC 9211 §2.8 `collapsed`): concurrent
//! requests for the same missing cacheable URL cost one origin fetch. A response that
//! may not be stored is never shared that way.

use std::sync::Barrier;
use std::time::Duration;

use crate::common::{assert_response, fill_requests, nth, BIG};
use crate::matrix;
use crate::support::content;
use crate::support::kit::{CacheStatus, Variant};
use crate::support::origin::{self, Reply};
use crate::support::Response;

/// `n` concurrent GETs of `path` (started together).
fn concurrently(cache: &crate::support::Server, path: &str, n: usize) -> Vec<Response> {
    let barrier = Barrier::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    cache.get(path, &[])
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Eight concurrent misses of a cacheable object of `len` bytes behind a slow origin.
fn collapse(v: Variant, len: usize) {
    let body = content(len, 3);
    let b = body.clone();
    let origin = v.origin(move |req| Reply::Delayed {
        delay: Duration::from_millis(1500),
        reply: Box::new(
            v.ranges
                .apply(origin::ok(&b, &[("Cache-Control", "max-age=3600")]), req),
        ),
    });
    let cache = v.start(&origin);
    let responses = concurrently(&cache, "/c", 8);
    for r in &responses {
        assert_response(r, 200, &body);
    }
    assert_eq!(
        origin.count("/c"),
        fill_requests(v, len),
        "origin requests for 8 concurrent misses"
    );
    // All eight arrive within the origin's 1.5 s delay (wide, for a loaded machine): the
    // first leads, the seven others wait on its fill.
    assert_eq!(
        responses
            .iter()
            .filter(|r| CacheStatus::of(r).collapsed)
            .count(),
        7,
        "RFC 9211 §2.8: a collapsed request says `collapsed`"
    );
}

matrix! {
    /// Collapsed forwarding, small object: one origin request for eight clients.
    fn concurrent_misses_collapse_small(v) {
        collapse(v, 2000);
    }

    /// Collapsed forwarding, an object of several slices: each slice fetched once.
    fn concurrent_misses_collapse_large(v) {
        collapse(v, BIG);
    }

    /// RFC 9111 §5.2.2.5: a `no-store` response may not be stored, so it cannot be
    /// handed to other waiting clients either: four concurrent requests get four
    /// different origin answers (their numbered bodies differ).
    fn uncacheable_responses_are_not_shared(v) {
        let seen = std::sync::atomic::AtomicUsize::new(0);
        let origin = v.origin(move |req| {
            let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            Reply::Delayed {
                delay: Duration::from_millis(300),
                reply: Box::new(v.ranges.apply(
                    origin::ok(&nth(n, req.path()), &[("Cache-Control", "no-store")]),
                    req,
                )),
            }
        });
        let cache = v.start(&origin);
        let responses = concurrently(&cache, "/u", 4);
        let mut bodies: Vec<Vec<u8>> = responses
            .iter()
            .map(|r| {
                assert_eq!(r.status, 200, "{:?}", r.headers);
                r.body.clone()
            })
            .collect();
        bodies.sort();
        bodies.dedup();
        assert_eq!(bodies.len(), 4, "each client got its own origin response");
        assert_eq!(origin.count("/u"), 4);
    }
}
