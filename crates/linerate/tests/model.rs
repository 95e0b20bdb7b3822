//! The binary against the model: for random response and request header sets, whether
//! the real server answers a second request from its store (and how many requests reach
//! the origin) must be what the pure policy of `linerate_http::cache` says:
//! `admit` (was the first response stored?) then `decide` (may the stored response
//! answer the second request?).
//!
//! The header sets are drawn from a vocabulary that covers every rule the model has
//! (freshness from `s-maxage`, `max-age`, `Expires`, `Age`, heuristics; `no-store`,
//! `no-cache`, `private`, `must-revalidate`, `Set-Cookie`, `Authorization`, `Vary`,
//! `CDN-Cache-Control`, stale extensions; request directives), with times far enough
//! from every boundary that the seconds between the model's clock and the server's
//! cannot change an answer. Each cell of the matrix runs its own cases (bodies of one
//! slice: the rules on objects of several slices are in `spec/large.rs`).
//!
//! What this does not show: the model *is* the policy the server calls, so a wrong
//! reading of the RFC in `admit`/`decide` would be wrong in both. It shows that the
//! running server applies its policy faithfully through every path (store, slices,
//! variants, hit-for-pass, background revalidation); whether the policy reads the RFCs
//! right is the spec suite's job (`tests/spec/`, derived from the RFC text).
//!
//! The cases come from a fixed seed, so a failure reproduces; `LINERATE_MODEL_SEED=N`
//! runs another set.
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use linerate_http::cache::policy::{Request as ModelRequest, Response as ModelResponse};
use linerate_http::cache::{
    admit, decide, decide_miss, Decision, Freshness, Heuristic, Miss, RequestCacheControl, Settings,
};
use linerate_http::Method;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use support::kit::{CacheStatus, Variant};
use support::origin::Reply;

/// Cases per cell: enough to reach every rule many times, few enough for CI (each case
/// is two requests to a running server, ~2 ms).
const CASES: u32 = 500;

/// Response fields, each a template: `{now}` becomes the origin's clock.
const RESPONSE_FIELDS: &[(&str, &str)] = &[
    ("Cache-Control", "max-age=3600"),
    ("Cache-Control", "max-age=60"),
    ("Cache-Control", "max-age=0"),
    ("Cache-Control", "s-maxage=3600"),
    ("Cache-Control", "s-maxage=0, max-age=3600"),
    ("Cache-Control", "no-store"),
    ("Cache-Control", "no-cache"),
    ("Cache-Control", "private"),
    ("Cache-Control", "public"),
    ("Cache-Control", "must-revalidate"),
    ("Cache-Control", "stale-while-revalidate=86400"),
    ("Cache-Control", "stale-if-error=86400"),
    ("Cache-Control", "max-age =3600"),
    ("CDN-Cache-Control", "max-age=3600"),
    ("CDN-Cache-Control", "no-store"),
    ("CDN-Cache-Control", "max-age=\"60\""),
    ("Expires", "{now+3600}"),
    ("Expires", "{now-3600}"),
    ("Expires", "0"),
    ("Date", "{now}"),
    ("Date", "{now-7200}"),
    ("Age", "30"),
    ("Age", "7200"),
    ("Age", "7200, 0"),
    ("Age", "abc"),
    ("Last-Modified", "{now-864000}"),
    ("Last-Modified", "{now-100}"),
    ("ETag", "\"v1\""),
    ("Set-Cookie", "a=b"),
    ("Vary", "X-Variant"),
    ("Vary", "*"),
];

/// Statuses the origin answers with.
const STATUSES: &[u16] = &[200, 200, 200, 203, 204, 301, 302, 404, 410, 500, 503];

/// Request fields of the second request. (No `max-age=0`: a response stored a moment
/// ago is 0 s old by one clock and 1 s by another, right at that boundary; `max-age=5`
/// asks the same question of responses that arrive with an `Age`.)
const REQUEST_FIELDS: &[(&str, &str)] = &[
    ("Cache-Control", "no-cache"),
    ("Cache-Control", "max-age=5"),
    ("Cache-Control", "max-age=100000"),
    ("Cache-Control", "min-fresh=600"),
    ("Cache-Control", "max-stale"),
    ("Cache-Control", "max-stale=10"),
    ("Cache-Control", "only-if-cached"),
    ("Cache-Control", "no-store"),
    ("Pragma", "no-cache"),
    ("X-Variant", "other"),
];

/// One generated case.
#[derive(Debug, Clone)]
struct Case {
    status: u16,
    response: Vec<(&'static str, &'static str)>,
    /// The first request carries `Authorization`.
    authorized: bool,
    second: Vec<(&'static str, &'static str)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::sample::select(STATUSES),
        proptest::sample::subsequence(RESPONSE_FIELDS, 0..6),
        proptest::bool::weighted(0.15),
        proptest::sample::subsequence(REQUEST_FIELDS, 0..3),
    )
        .prop_map(|(status, response, authorized, second)| Case {
            status,
            response: response.to_vec(),
            authorized,
            second: second.to_vec(),
        })
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn http_date(secs: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

/// A field template with its times filled in at `now`.
fn expand(value: &str, now: u64) -> String {
    let at = |delta: i64| http_date(now.saturating_add_signed(delta));
    match value {
        "{now}" => at(0),
        "{now+3600}" => at(3600),
        "{now-3600}" => at(-3600),
        "{now-7200}" => at(-7200),
        "{now-864000}" => at(-864_000),
        "{now-100}" => at(-100),
        v => v.to_owned(),
    }
}

/// What the model says of the second request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expect {
    /// Served from the store.
    hit: bool,
    /// Origin requests it costs (a background revalidation included).
    more: usize,
    /// Answered 504 by the cache itself (only-if-cached, must-revalidate).
    gateway_timeout: bool,
}

/// Whether the model serves the second request from the store, and how many more
/// origin requests it costs.
fn model(case: &Case, fields: &[(Vec<u8>, Vec<u8>)], stored_at_ms: u64) -> Expect {
    let expect = |hit, more, gateway_timeout| Expect {
        hit,
        more,
        gateway_timeout,
    };
    let targets = vec![b"cdn-cache-control".to_vec()];
    let settings = Settings {
        targets: &targets,
        heuristic: Heuristic::default(),
        default_ttl: None,
        stale_while_revalidate: 0,
        stale_if_error: 0,
    };
    let response = ModelResponse {
        status: case.status,
        fields,
        request_time_ms: stored_at_ms,
        response_time_ms: stored_at_ms,
    };
    let first = ModelRequest {
        method: Method::Get,
        cc: RequestCacheControl::default(),
        authorization: case.authorized,
    };
    let rc = RequestCacheControl::parse(
        case.second
            .iter()
            .filter(|(n, _)| *n == "Cache-Control")
            .map(|(_, v)| v.as_bytes()),
        case.second
            .iter()
            .find(|(n, _)| *n == "Pragma")
            .map(|(_, v)| v.as_bytes()),
    );
    let stored = admit(&first, &response, false, &settings, stored_at_ms).is_ok();
    // The second request selects another variant when it sends another X-Variant.
    let varies = fields
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case(b"vary") && v.as_slice() == b"X-Variant");
    let other_variant = varies && case.second.iter().any(|(n, _)| *n == "X-Variant");
    if !stored || other_variant {
        return match decide_miss(&rc) {
            Miss::GatewayTimeout => expect(false, 0, true),
            Miss::Fetch | Miss::Uncached => expect(false, 1, false),
        };
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let decision = decide(&rc, &Freshness::of(&response, &settings, now_ms));
    match decision {
        // Served at once, and revalidated in the background.
        Decision::StaleWhileRevalidate => expect(true, 1, false),
        d if d.is_hit() => expect(true, 0, false),
        Decision::GatewayTimeout => expect(false, 0, true),
        _ => expect(false, 1, false),
    }
}

/// What the origin answers for each path: status and fields.
type Answers = std::collections::HashMap<String, (u16, Vec<(String, String)>)>;

fn run(v: Variant) {
    let answers: Arc<Mutex<Answers>> = Arc::default();
    let a = answers.clone();
    let origin = v.origin(move |req| {
        let (status, headers) = a.lock().unwrap().get(req.path()).cloned().unwrap();
        Reply::Full {
            status,
            headers,
            body: b"model body".to_vec(),
            chunked: false,
        }
    });
    let cache = v.start(&origin);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: CASES,
            failure_persistence: None,
            ..Config::default()
        },
        rng(),
    );
    // Every path's expected origin count, checked again at the end: a request the model
    // does not expect may arrive late (a background revalidation).
    let expected: std::cell::RefCell<Vec<(String, usize)>> = Default::default();
    // Shrinking reruns cases: every run gets a path of its own.
    let next = std::cell::Cell::new(0usize);
    let hits = std::cell::Cell::new(0usize);
    let result = runner.run(&case(), |case| {
        next.set(next.get() + 1);
        let path = format!("/m/{}", next.get());
        let now = now_s();
        let headers: Vec<(String, String)> = case
            .response
            .iter()
            .map(|(name, value)| ((*name).to_owned(), expand(value, now)))
            .collect();
        answers
            .lock()
            .unwrap()
            .insert(path.clone(), (case.status, headers.clone()));
        let stored_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let first_headers: Vec<&str> = if case.authorized {
            vec!["Authorization: Bearer t", "X-Variant: one"]
        } else {
            vec!["X-Variant: one"]
        };
        let first = cache.get(&path, &first_headers);
        prop_assert_eq!(first.status, case.status);
        prop_assert_eq!(origin.count(&path), 1);
        let second_lines: Vec<String> = case
            .second
            .iter()
            .map(|(n, v)| format!("{n}: {v}"))
            .chain(
                (!case.second.iter().any(|(n, _)| *n == "X-Variant"))
                    .then(|| "X-Variant: one".to_owned()),
            )
            .collect();
        let second_refs: Vec<&str> = second_lines.iter().map(String::as_str).collect();
        let second = cache.get(&path, &second_refs);
        let fields: Vec<(Vec<u8>, Vec<u8>)> = headers
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        let want = model(&case, &fields, stored_at);
        hits.set(hits.get() + usize::from(want.hit));
        let cs = CacheStatus::of(&second);
        prop_assert_eq!(cs.is_hit(), want.hit, "Cache-Status {:?}", cs);
        // A background revalidation may still be on its way.
        origin.wait_count(&path, 1 + want.more, Duration::from_secs(2));
        prop_assert_eq!(
            origin.count(&path),
            1 + want.more,
            "origin requests; {:?}",
            cs
        );
        if want.gateway_timeout {
            prop_assert_eq!(second.status, 504, "Cache-Status {:?}", cs);
        } else {
            prop_assert_eq!(second.status, case.status, "Cache-Status {:?}", cs);
        }
        expected.borrow_mut().push((path, 1 + want.more));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{v:?}: the binary disagrees with the model: {e}");
    }
    // Nothing arrived late: a second after the last case, every path still has exactly
    // the origin requests the model said.
    std::thread::sleep(Duration::from_secs(1));
    for (path, n) in expected.borrow().iter() {
        assert_eq!(
            origin.count(path),
            *n,
            "{v:?}: {path} got a late origin request"
        );
    }
    // Not a vacuous agreement: both answers were exercised, many times.
    let (hits, runs) = (hits.get(), next.get());
    assert!(
        hits * 10 > runs && hits * 10 < runs * 9,
        "{hits} hits in {runs} cases"
    );
}

/// The case generator's randomness: a fixed seed unless `LINERATE_MODEL_SEED` names
/// another.
fn rng() -> TestRng {
    match std::env::var("LINERATE_MODEL_SEED") {
        Ok(seed) => {
            let seed: u64 = seed.parse().expect("LINERATE_MODEL_SEED is a number");
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seed.to_le_bytes());
            TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
        }
        Err(_) => TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    }
}

#[test]
fn binary_matches_the_model_slicing_off() {
    run(Variant::ALL[0]);
}

#[test]
fn binary_matches_the_model_slices_ranges_honoured() {
    run(Variant::ALL[1]);
}

#[test]
fn binary_matches_the_model_slices_ranges_ignored() {
    run(Variant::ALL[2]);
}
