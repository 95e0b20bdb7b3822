//! HTTP caching for a shared cache, as pure functions: RFC 9111 (HTTP Caching) with the
//! stale extensions of RFC 5861, targeted cache control (RFC 9213, `CDN-Cache-Control`)
//! and the `Cache-Status` field (RFC 9211).
//!
//! - [`control`]: `Cache-Control` and targeted fields, request directives, `Pragma`;
//! - [`freshness`]: freshness lifetime, heuristics, `Age` and current age;
//! - [`vary`]: `Vary` and the secondary key of a variant;
//! - [`status`]: status codes a cache understands, `Cache-Status`;
//! - [`partial`]: `Content-Range`, versions of stored parts, what a range request got;
//! - [`key`]: primary, variant and slice keys;
//! - [`policy`]: the decisions themselves, [`admit`] (may this response be stored?) and
//!   [`decide`] (what to do with a stored response for this request?).
//!
//! Not here: the store, the clock, request collapsing, or any I/O; the server's cache
//! mode does those with the answers computed here.

pub mod control;
pub mod freshness;
pub mod key;
pub mod partial;
pub mod policy;
pub mod status;
pub mod vary;

pub use control::{
    parse_delta_seconds, Control, ControlSource, RequestCacheControl, ResponseCacheControl,
    DELTA_SECONDS_MAX,
};
pub use freshness::{age_field, current_age, freshness_lifetime, AgeField, Heuristic};
pub use partial::{classify, parse_content_range, same_version, Answer, Asked, ContentRange};
pub use policy::{
    admit, decide, decide_miss, freshen, to_store, Admitted, Decision, Freshened, Freshness, Miss,
    NotStorable, OnError, Settings, Terms, NEGATIVE_TTL_SECS,
};
pub use status::{default_cacheable_status, understood_status, CachePhase, CacheStatus, Fwd};
pub use vary::{vary_key, Vary, MAX_VARY_NAMES};
