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
//! cannot change an answer. Each cell of the slicing x Range matrix runs its own cases.
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

use support::kit::{CacheStatus, Slicing, Variant};
use support::origin::{RangeSupport, Reply};

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

/// Request fields of the second request.
const REQUEST_FIELDS: &[(&str, &str)] = &[
    ("Cache-Control", "no-cache"),
    ("Cache-Control", "max-age=0"),
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
        proptest::sample::subsequence(REQUEST_FIELDS, 0..2),
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

/// Whether the model serves the second request from the store, and how many more
/// origin requests it costs.
fn model(case: &Case, fields: &[(Vec<u8>, Vec<u8>)], stored_at_ms: u64) -> (bool, usize) {
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
            Miss::GatewayTimeout => (false, 0),
            Miss::Fetch | Miss::Uncached => (false, 1),
        };
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let decision = decide(&rc, &Freshness::of(&response, &settings, now_ms));
    match decision {
        // Served at once, and revalidated in the background.
        Decision::StaleWhileRevalidate => (true, 1),
        d if d.is_hit() => (true, 0),
        Decision::GatewayTimeout => (false, 0),
        _ => (false, 1),
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
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
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
        let (hit, more) = model(&case, &fields, stored_at);
        hits.set(hits.get() + usize::from(hit));
        let cs = CacheStatus::of(&second);
        prop_assert_eq!(cs.is_hit(), hit, "Cache-Status {:?}", cs);
        // A background revalidation may still be on its way.
        origin.wait_count(&path, 1 + more, Duration::from_secs(2));
        prop_assert_eq!(origin.count(&path), 1 + more, "origin requests; {:?}", cs);
        if hit {
            prop_assert_eq!(second.status, case.status);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{v:?}: the binary disagrees with the model: {e}");
    }
    // Not a vacuous agreement: both answers were exercised, many times.
    let (hits, runs) = (hits.get(), next.get());
    assert!(
        hits * 10 > runs && hits * 10 < runs * 9,
        "{hits} hits in {runs} cases"
    );
}

#[test]
fn binary_matches_the_model_slices_off_ranges_honoured() {
    run(Variant {
        slicing: Slicing::Off,
        ranges: RangeSupport::Honoured,
    });
}

#[test]
fn binary_matches_the_model_slices_off_ranges_ignored() {
    run(Variant {
        slicing: Slicing::Off,
        ranges: RangeSupport::Ignored,
    });
}

#[test]
fn binary_matches_the_model_slices_on_ranges_honoured() {
    run(Variant {
        slicing: Slicing::On,
        ranges: RangeSupport::Honoured,
    });
}

#[test]
fn binary_matches_the_model_slices_on_ranges_ignored() {
    run(Variant {
        slicing: Slicing::On,
        ranges: RangeSupport::Ignored,
    });
}
