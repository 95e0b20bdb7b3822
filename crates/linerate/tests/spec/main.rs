//! Cache mode against the HTTP caching specifications, end to end: one test per
//! requirement a shared cache has in RFC 9111 (HTTP Caching), RFC 9110 (HTTP Semantics)
//! and RFC 9213 (Targeted Cache-Control), each run against the real binary in the three
//! cells of the test matrix (slicing off; slicing on against an origin that honours
//! `Range` and one that ignores it; see `support::kit`). Every test asserts how many
//! requests reached
//! the origin, because a cache that answers correctly by asking the origin every time
//! is not a cache.
//!
//! The tests are derived from the RFC text, not from linerate's code: each names the
//! section it checks.
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]

#[path = "../support/mod.rs"]
mod support;

mod common;

mod age;
mod cache_status;
mod collapse;
mod forwarding;
mod framing;
mod freshness;
mod head;
mod interim;
mod invalidation;
mod large;
mod partial;
mod request_directives;
mod stale;
mod storable;
mod targeted;
mod uncacheable;
mod validation;
mod vary;
