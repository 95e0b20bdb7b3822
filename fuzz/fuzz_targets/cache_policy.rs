//! Fuzz target: the caching policy (`linerate_http::cache`) on arbitrary response and
//! request fields. Neither `admit`, `Freshness::of`, `decide`, `freshen`, `to_store`
//! nor the targeted-field parser may panic, and their answers must keep the invariants
//! the server relies on: a response carrying `no-store` or `private` in its governing
//! directives is never admitted (unless `must-understand` lets an understood status
//! override `no-store`), a fresh decision is only ever made for a fresh response, and
//! stored and freshened fields never carry hop-by-hop fields, nor a `Set-Cookie` the
//! freshened response may not share.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_http::cache::policy::{Request, Response};
use linerate_http::cache::{
    admit, decide, freshen, to_store, Control, Decision, Freshness, Heuristic, RequestCacheControl,
    Settings,
};
use linerate_http::Method;

/// Field names worth generating often; other names come from the input.
const NAMES: [&[u8]; 12] = [
    b"cache-control",
    b"cdn-cache-control",
    b"expires",
    b"date",
    b"age",
    b"last-modified",
    b"etag",
    b"vary",
    b"set-cookie",
    b"connection",
    b"content-length",
    b"keep-alive",
];

/// Split the input into a status, some fields, request directives and times.
fn fields(data: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    data.split(|&b| b == b'\n')
        .filter_map(|line| {
            let (&tag, value) = line.split_first()?;
            let name = NAMES[usize::from(tag) % NAMES.len()].to_vec();
            Some((name, value.to_vec()))
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 12 {
        return;
    }
    let (head, rest) = data.split_at(12);
    let status = 100 + u16::from_le_bytes([head[0], head[1]]) % 600;
    let now_ms = u64::from_le_bytes(head[2..10].try_into().unwrap_or([0; 8])) % 4_000_000_000_000;
    let later_ms = now_ms.saturating_add(u64::from(head[10]) * 1000);
    let mid = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let (response_part, request_part) = rest.split_at(mid);
    let response_fields = fields(response_part);
    let targets = vec![b"cdn-cache-control".to_vec()];
    let settings = Settings {
        targets: &targets,
        heuristic: Heuristic::default(),
        default_ttl: (head[11] & 1 == 1).then_some(u64::from(head[11])),
        stale_while_revalidate: u64::from(head[11] >> 4),
        stale_if_error: u64::from(head[11] & 0x0f),
    };
    let response = Response {
        status,
        fields: &response_fields,
        request_time_ms: now_ms,
        response_time_ms: now_ms,
    };
    let rc = RequestCacheControl::parse([request_part], Some(request_part));
    let request = Request {
        method: Method::Get,
        cc: rc.clone(),
        authorization: head[11] & 2 == 2,
    };
    let admitted = admit(&request, &response, head[11] & 4 == 4, &settings, now_ms);
    let fresh = Freshness::of(&response, &settings, later_ms);
    if admitted.is_ok() {
        let cc = &fresh.control.directives;
        assert!(!cc.private);
        assert!(!cc.no_store || cc.must_understand);
        assert!(!rc.no_store);
    }
    let decision = decide(&rc, &fresh);
    if decision == Decision::Fresh {
        assert!(fresh.is_fresh());
    }
    let stored = to_store(&response_fields, now_ms);
    let hop = |f: &[(Vec<u8>, Vec<u8>)]| {
        f.iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(b"connection") || n.eq_ignore_ascii_case(b"keep-alive"))
    };
    assert!(!hop(&stored));
    let freshened = freshen(&stored, &response_fields, later_ms, &targets);
    assert!(!hop(&freshened.stored));
    // A `Set-Cookie` is stored only where the freshened response may be shared with it
    // (the rule `admit` applies); the 304's others go to one client, never both.
    let cookie =
        |f: &[(Vec<u8>, Vec<u8>)]| f.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"set-cookie"));
    let cc = Control::of(&targets, &freshened.stored).directives;
    assert!(cc.public || cc.s_maxage.is_some() || !cookie(&freshened.stored));
    assert!(freshened.personal.is_empty() || !cookie(&freshened.stored));
});
