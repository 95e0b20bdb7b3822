//! Response heads in cache mode: the head a client gets for a stored object, a relayed
//! origin response, or an error we answer, each with `Age` (stored responses, RFC 9111
//! §5.1), `Via` (RFC 9110 §7.6.3) and an RFC 9211 `Cache-Status`.
//!
//! Not here: whether to serve (`flow`, `linerate_http::cache::decide`) or the bodies
//! (`body`).

use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

use linerate_cache::{Body as StoreBody, ObjectHandle, ObjectMeta};
use linerate_http::cache::{CachePhase, CacheStatus, Freshness};
use linerate_http::conditional::{self, IfRange, Precondition, Validators};
use linerate_http::forward::{connection_tokens, is_hop_by_hop};
use linerate_http::range::{self, RangeOutcome};
use linerate_http::upstream::Framing;
use linerate_http::{multipart, HeadWriter, Persistence, StatusCode, Version};

use super::body::{Relay, Segment, Stored};
use super::request::CacheRequest;
use super::shared::{known_len, PEER_STATUS};
use crate::context::Worker;
use crate::origin::OriginResponse;
use crate::response::{Body, Response};

/// How a relayed response is presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// As the origin sent it.
    AsIs,
    /// A 206 whose `Content-Range` covers the whole object, to a request the cache sent
    /// with a `Range` of its own (a slice): sent as the 200 it is.
    Whole,
}

fn field<'m>(meta: &'m ObjectMeta, name: &[u8]) -> Option<&'m [u8]> {
    meta.header(name)
}

fn fields<'m>(meta: &'m ObjectMeta, name: &'m [u8]) -> impl Iterator<Item = &'m [u8]> + 'm {
    meta.headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// Fields never replayed from a stored or relayed response: framing and hop-by-hop
/// ones (we write our own), our internal markers, and `Age` (recomputed).
/// `Content-Range` is replayed only with the whole stored response ([`serve`]).
fn replayable(name: &[u8], tokens: &[Vec<u8>]) -> bool {
    let lower = name.to_ascii_lowercase();
    !(is_hop_by_hop(&lower, tokens)
        || matches!(
            lower.as_slice(),
            b"content-length" | b"content-range" | b"age" | b"via" | b"accept-ranges"
        )
        || lower.starts_with(b"x-linerate-"))
}

/// Write our common fields: Via (appended to the origin's), Cache-Status (after the
/// member of the peer that served a stored object's fill, `peer_status`, when given),
/// connection.
fn common(
    w: &mut HeadWriter<'_>,
    req: &CacheRequest<'_>,
    (via_in, peer_status): (Option<&[u8]>, Option<&[u8]>),
    status: &CacheStatus,
    ttl: Option<i64>,
    persistence: Persistence,
) {
    let ours = req.px.via.as_str();
    match via_in {
        Some(v) => {
            let mut joined = v.to_vec();
            joined.extend_from_slice(b", ");
            joined.extend_from_slice(ours.as_bytes());
            w.field("Via", &joined);
        }
        None => {
            w.field("Via", ours.as_bytes());
        }
    }
    if let Some(p) = peer_status {
        w.field("Cache-Status", p);
    }
    w.field(
        "Cache-Status",
        status.to_header(worker_name(req), ttl).as_bytes(),
    );
    crate::response::persistence_field(w, req.head, persistence);
}

/// A stored response's own fields for `common`: its `Via`, and the member of the peer
/// that served its fill when this response went forward with that fill (a hit says
/// what this node did, not what the owner did when the copy was made).
fn from_stored<'m>(meta: &'m ObjectMeta, st: &CacheStatus) -> (Option<&'m [u8]>, Option<&'m [u8]>) {
    let peer = (!st.is_hit()).then(|| field(meta, PEER_STATUS)).flatten();
    (field(meta, b"via"), peer)
}

/// Set apart the `Cache-Status` member the peer that served a fill added (its last
/// `Cache-Status` field line: a node writes its own member as a line of its own, after
/// the ones it replays) as [`PEER_STATUS`], before the response is stored; the lines
/// before it (the origin's, or caches' upstream of it) stay as stored fields, replayed
/// on every response as the owner replays them.
pub(crate) fn set_apart_peer_status(headers: &mut [(Vec<u8>, Vec<u8>)]) {
    if let Some(last) = headers
        .iter_mut()
        .rev()
        .find(|(n, _)| n.eq_ignore_ascii_case(b"cache-status"))
    {
        last.0 = PEER_STATUS.to_vec();
    }
}

fn worker_name<'r>(req: &'r CacheRequest<'_>) -> &'r str {
    req.px.opts.cache_name.as_str()
}

/// Serve a stored object (complete or still being written).
pub(crate) fn serve(
    worker: &Rc<Worker>,
    req: &CacheRequest<'_>,
    h: ObjectHandle,
    fresh: &Freshness,
    st: CacheStatus,
) -> Response {
    serve_with_cookies(worker, req, h, fresh, st, &[])
}

/// [`serve`], with `Set-Cookie` fields `cookies` that are this client's alone: those a
/// 304 answering its own revalidation set, which the stored copy does not keep
/// (`cache::freshen`).
pub(crate) fn serve_with_cookies(
    worker: &Rc<Worker>,
    req: &CacheRequest<'_>,
    h: ObjectHandle,
    fresh: &Freshness,
    st: CacheStatus,
    cookies: &[Vec<u8>],
) -> Response {
    let meta = Arc::clone(&h.meta);
    let ttl = Some(fresh.ttl());
    let len = known_len(&h);
    let status = meta.status;
    let etag = field(&meta, b"etag")
        .and_then(|v| std::str::from_utf8(v).ok())
        .unwrap_or("");
    let validators = Validators {
        etag,
        last_modified: meta.last_modified_s.unwrap_or(0),
    };
    let mut head = Vec::with_capacity(512);
    // Unknown length to an HTTP/1.0 client: the body ends when the connection does.
    let persistence = if len.is_none() && matches!(req.head.version, Version::Http10) {
        Persistence::Close
    } else {
        req.persistence
    };
    // The stored fields (all but Content-Type for multipart, which has its own), Age,
    // Via, Cache-Status and the connection field.
    let write_stored = |w: &mut HeadWriter<'_>, skip_content_type: bool| {
        stored_fields(w, &meta, skip_content_type);
        for c in cookies {
            w.field("Set-Cookie", c);
        }
        w.field_u64("Age", fresh.age);
        common(w, req, from_stored(&meta, &st), &st, ttl, persistence);
    };
    let response = |head: Vec<u8>, body: Body, code: StatusCode| Response {
        head,
        body,
        persistence,
        status: code,
        cache: st.phase,
        refusal: None,
    };
    // Preconditions and ranges apply to a stored 200 (RFC 9110 §13.2.1, §14.2).
    if status == 200 && (!etag.is_empty() || meta.last_modified_s.is_some()) {
        match conditional::evaluate(req.head, &validators) {
            Precondition::Proceed => {}
            Precondition::NotModified => {
                return not_modified(req, &meta, fresh, &st, cookies);
            }
            Precondition::Failed => {
                return error(
                    worker,
                    req,
                    StatusCode::PreconditionFailed,
                    st.clone(),
                    "precondition",
                );
            }
        }
    }
    let outcome = match (req.head_only, req.head.range, len) {
        (false, Some(value), Some(len)) if status == 200 => {
            if conditional::if_range(req.head.if_range, &validators) == IfRange::Apply {
                match range::parse_range(value) {
                    Some(specs) => range::resolve(&specs, len),
                    None => RangeOutcome::Full,
                }
            } else {
                RangeOutcome::Full
            }
        }
        _ => RangeOutcome::Full,
    };
    let code = StatusCode::from_code(status);
    let progress = match &h.body {
        StoreBody::Complete { .. } => None,
        StoreBody::Streaming(p) => Some(p.clone()),
    };
    let mut segments = VecDeque::new();
    let mut w;
    let mut sent_code = code;
    match outcome {
        RangeOutcome::Full => {
            w = HeadWriter::new(&mut head, code);
            write_stored(&mut w, false);
            // The stored response as it is (RFC 9111 §4: its stored fields), so with the
            // `Content-Range` the origin sent on it (a 200 may carry one; a stored 416
            // has its `bytes */len`). Not replayed elsewhere: a range of it gets our
            // own, and a slice's describes that slice alone (see `replayable`).
            if let Some(cr) = field(&meta, b"content-range") {
                w.field_raw(b"Content-Range", cr);
            }
            match len {
                Some(len) => {
                    if status == 200 {
                        w.field("Accept-Ranges", b"bytes");
                    }
                    if !code.is_bodiless() {
                        w.field_u64("Content-Length", len);
                    }
                    segments.push_back(Segment::Range { start: 0, len });
                }
                None => {
                    let chunked = matches!(req.head.version, Version::Http11) && !req.http2;
                    if chunked {
                        w.field("Transfer-Encoding", b"chunked");
                    }
                    segments.push_back(Segment::ToEnd { start: 0, chunked });
                }
            }
        }
        RangeOutcome::Single(r) => {
            sent_code = StatusCode::PartialContent;
            let total = len.unwrap_or(0);
            w = HeadWriter::new(&mut head, StatusCode::PartialContent);
            write_stored(&mut w, false);
            w.field("Accept-Ranges", b"bytes");
            w.content_range(r.start, r.last(), total);
            w.field_u64("Content-Length", r.len);
            segments.push_back(Segment::Range {
                start: r.start,
                len: r.len,
            });
        }
        RangeOutcome::Multi(ranges) => {
            sent_code = StatusCode::PartialContent;
            let total = len.unwrap_or(0);
            let ctype = field(&meta, b"content-type")
                .and_then(|v| std::str::from_utf8(v).ok())
                .unwrap_or("application/octet-stream");
            let plan = multipart::plan(&ranges, total, ctype, &worker.next_boundary());
            w = HeadWriter::new(&mut head, StatusCode::PartialContent);
            write_stored(&mut w, true);
            w.field("Accept-Ranges", b"bytes");
            w.field("Content-Type", plan.content_type.as_bytes());
            w.field_u64("Content-Length", plan.body_len);
            segments = super::body::multipart_segments(plan.parts, plan.trailer);
        }
        RangeOutcome::Unsatisfiable => {
            let mut w = HeadWriter::new(&mut head, StatusCode::RangeNotSatisfiable);
            write_stored(&mut w, false);
            w.content_range_unsatisfied(len.unwrap_or(0));
            w.field_u64("Content-Length", 0);
            w.finish();
            return response(head, Body::Empty, StatusCode::RangeNotSatisfiable);
        }
    }
    let code = sent_code;
    w.finish();
    let body = if req.head_only || code.is_bodiless() {
        Body::Empty
    } else {
        Body::Pieces(Box::new(Stored {
            file: h.file,
            body_offset: h.body_offset,
            progress,
            object_len: len,
            segments,
            literal: Vec::new(),
        }))
    };
    response(head, body, code)
}

/// The head for a relayed (uncached) origin response; the body follows as it arrives.
/// Its fields go through as the origin sent them (hop-by-hop ones removed), with its
/// `Content-Range` and `Content-Length`, except that a [`Shape::Whole`] 206 loses its
/// `Content-Range` and becomes a 200. A body in a transfer coding other than chunked
/// (`Transfer-Encoding: gzip, chunked`, or `gzip` to close) is relayed as it came, with
/// its codings named and chunked added last for an HTTP/1.1 client (RFC 9112 §6.1); an
/// HTTP/1.0 client cannot be sent a transfer coding at all and gets a 502.
pub(crate) fn relayed(
    worker: &Worker,
    req: &CacheRequest<'_>,
    r: OriginResponse,
    st: CacheStatus,
    shape: Shape,
) -> Response {
    let coded = !r.head.codings.is_empty();
    if coded && req.head.version == Version::Http10 {
        return error(worker, req, StatusCode::BadGateway, st, "transfer_coding");
    }
    let mut st = st;
    st.fwd_status.get_or_insert(r.head.status);
    st.phase = CachePhase::Pass;
    let code = match shape {
        Shape::AsIs => StatusCode::from_code(r.head.status),
        Shape::Whole => StatusCode::Ok,
    };
    let tokens = connection_tokens(r.head.headers_named(b"connection"));
    let mut head = Vec::with_capacity(512);
    let mut w = HeadWriter::new(&mut head, code);
    let mut via_in = None;
    for (n, v) in &r.head.headers {
        if n.eq_ignore_ascii_case(b"via") {
            via_in = Some(v.as_slice());
        }
        let keep_length = req.head_only && n.eq_ignore_ascii_case(b"content-length");
        let keep_range = (n.eq_ignore_ascii_case(b"content-range") && shape == Shape::AsIs)
            || n.eq_ignore_ascii_case(b"accept-ranges");
        if replayable(n, &tokens) || keep_length || keep_range {
            w.field_raw(n, v);
        }
    }
    if let Some(age) = r.head.header(b"age") {
        w.field("Age", age);
    }
    let mut persistence = req.persistence;
    let chunked = match r.head.framing {
        _ if coded && req.head_only => {
            w.field(
                "Transfer-Encoding",
                &transfer_codings(&r.head.codings, false),
            );
            false
        }
        _ if coded => {
            w.field(
                "Transfer-Encoding",
                &transfer_codings(&r.head.codings, true),
            );
            true
        }
        Framing::Length(n) => {
            if !req.head_only {
                w.field_u64("Content-Length", n);
            }
            false
        }
        Framing::Empty => {
            if !req.head_only && !code.is_bodiless() {
                w.field_u64("Content-Length", 0);
            }
            false
        }
        Framing::Chunked | Framing::UntilClose if req.head_only => false,
        Framing::Chunked | Framing::UntilClose => {
            if req.http2 {
                // The stream's end ends the body.
                false
            } else if matches!(req.head.version, Version::Http11) {
                w.field("Transfer-Encoding", b"chunked");
                true
            } else {
                // An HTTP/1.0 client: the body ends when the connection does.
                persistence = Persistence::Close;
                false
            }
        }
    };
    common(&mut w, req, (via_in, None), &st, None, persistence);
    w.finish();
    let body = if req.head_only || matches!(r.head.framing, Framing::Empty) {
        Body::Empty
    } else {
        Body::Pieces(Box::new(Relay {
            response: r,
            chunked,
            buf: Vec::new(),
            done: false,
        }))
    };
    Response {
        head,
        body,
        persistence,
        status: code,
        cache: st.phase,
        refusal: None,
    }
}

/// `Transfer-Encoding` for a relayed body with `codings`: the codings, then `chunked`
/// when we frame it.
fn transfer_codings(codings: &[Vec<u8>], chunked: bool) -> Vec<u8> {
    let mut value = codings.join(&b", "[..]);
    if chunked {
        value.extend_from_slice(b", chunked");
    }
    value
}

/// An error we answer ourselves (502/504/412...), with a Cache-Status saying why.
pub(crate) fn error(
    worker: &Worker,
    req: &CacheRequest<'_>,
    status: StatusCode,
    mut st: CacheStatus,
    detail: &'static str,
) -> Response {
    st.detail = Some(detail);
    st.phase = if st.fwd.is_some() {
        CachePhase::Miss
    } else {
        CachePhase::Local
    };
    let reason = status.reason();
    let body = format!("{} {}\n", status.code(), reason);
    let mut head = Vec::with_capacity(256);
    let mut w = HeadWriter::new(&mut head, status);
    worker.date.with(|d| w.field("Date", d));
    w.field("Server", crate::response::SERVER);
    w.field("Content-Type", b"text/plain; charset=utf-8");
    w.field_u64("Content-Length", body.len() as u64);
    w.field("Cache-Control", b"no-store");
    common(&mut w, req, (None, None), &st, None, req.persistence);
    w.finish();
    if !req.head_only {
        head.extend_from_slice(body.as_bytes());
    }
    Response {
        head,
        body: Body::Empty,
        persistence: req.persistence,
        status,
        cache: st.phase,
        refusal: None,
    }
}

/// Replay a stored response's fields (those a hit may repeat): rendered once per stored
/// response and kept with its metadata (`ObjectMeta::rendered`), except without
/// `Content-Type` (a multipart response has its own), which is rare.
pub(crate) fn stored_fields(w: &mut HeadWriter<'_>, meta: &ObjectMeta, skip_content_type: bool) {
    if skip_content_type {
        render_stored(w, meta, true);
        return;
    }
    w.rendered(meta.rendered(|m| {
        let mut fields = Vec::with_capacity(256);
        render_stored(&mut HeadWriter::fields_into(&mut fields), m, false);
        fields
    }));
}

fn render_stored(w: &mut HeadWriter<'_>, meta: &ObjectMeta, skip_content_type: bool) {
    let tokens = connection_tokens(fields(meta, b"connection"));
    for (n, v) in &meta.headers {
        if replayable(n, &tokens) && !(skip_content_type && n.eq_ignore_ascii_case(b"content-type"))
        {
            w.field_raw(n, v);
        }
    }
}

/// Via, Cache-Status and the connection field for a stored response.
pub(crate) fn common_fields(
    w: &mut HeadWriter<'_>,
    req: &CacheRequest<'_>,
    meta: &ObjectMeta,
    st: &CacheStatus,
    fresh: &Freshness,
) {
    let ttl = Some(fresh.ttl());
    common(w, req, from_stored(meta, st), st, ttl, req.persistence);
}

/// 304 for a client whose validators match the stored response (`st.phase` as served:
/// `Hit` or `Stale`, or `Miss` after going forward).
pub(crate) fn not_modified(
    req: &CacheRequest<'_>,
    meta: &ObjectMeta,
    fresh: &Freshness,
    st: &CacheStatus,
    cookies: &[Vec<u8>],
) -> Response {
    let mut head = Vec::with_capacity(256);
    let mut w = HeadWriter::new(&mut head, StatusCode::NotModified);
    for (n, v) in &meta.headers {
        let lower = n.to_ascii_lowercase();
        if matches!(
            lower.as_slice(),
            b"etag"
                | b"last-modified"
                | b"cache-control"
                | b"expires"
                | b"vary"
                | b"date"
                | b"content-location"
        ) {
            w.field_raw(n, v);
        }
    }
    // The cookies this client's own revalidation set (see `serve_with_cookies`): a
    // 304 may carry `Set-Cookie`, and the client gets no 200 to carry them.
    for c in cookies {
        w.field("Set-Cookie", c);
    }
    w.field_u64("Age", fresh.age);
    common_fields(&mut w, req, meta, st, fresh);
    w.finish();
    Response {
        head,
        body: Body::Empty,
        persistence: req.persistence,
        status: StatusCode::NotModified,
        cache: st.phase,
        refusal: None,
    }
}
