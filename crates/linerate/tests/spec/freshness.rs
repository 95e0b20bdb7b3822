//! RFC 9111 §4.2: freshness.

use crate::matrix;
use crate::support::kit::CacheStatus;
use crate::support::origin;

matrix! {
    /// RFC 9111 §4.2: "a cache MUST NOT reuse a stored response unless ... the stored
    /// response is ... fresh"; a response with `max-age` is fresh until its age passes it.
    fn fresh_max_age_is_reused(v) {
        let origin = v.origin(|_| origin::ok(b"fresh body", &[("Cache-Control", "max-age=3600")]));
        let cache = v.start(&origin);
        let first = cache.get("/a", &[]);
        assert_eq!(first.status, 200);
        assert_eq!(first.body, b"fresh body");
        assert!(!CacheStatus::of(&first).is_hit());
        let second = cache.get("/a", &[]);
        assert_eq!(second.body, b"fresh body");
        assert!(CacheStatus::of(&second).is_hit(), "{:?}", second.headers);
        assert_eq!(origin.count("/a"), 1);
    }
}
