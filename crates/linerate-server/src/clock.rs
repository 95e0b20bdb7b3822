//! The `Date` header, formatted at most once per second per worker (RFC 9110 §6.6.1
//! requires it on every response from a server with a clock). Formatting an IMF-fixdate
//! per response would be a needless allocation on the hottest path.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// A worker-local cached `Date` value.
pub(crate) struct DateCache {
    cached: RefCell<(u64, String)>,
}

impl DateCache {
    pub(crate) fn new() -> Self {
        DateCache {
            cached: RefCell::new((u64::MAX, String::new())),
        }
    }

    /// Run `f` with the current IMF-fixdate.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let now = unix_now();
        let mut c = self.cached.borrow_mut();
        if c.0 != now {
            *c = (now, linerate_http::date::format(now));
        }
        f(c.1.as_bytes())
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
