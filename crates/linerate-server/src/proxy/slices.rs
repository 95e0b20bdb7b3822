//! Large objects in slices: a route with `slice_bytes` fetches and stores an object as
//! fixed-size slices, each with its own Range request to the origin, its own key
//! (`key::slice(base, n)`, where `base` is the URL's primary key or the key of the
//! variant the request selects) and its own one-fill-per-key claim. A range request on a
//! miss fetches only the slices it covers and gets its head as soon as the first of them
//! starts to arrive; a response crossing slices moves from one to the next as it is
//! sent. With route `slice_readahead = N`, a response reading its object front to back
//! has the N slices after each one it opens prefetched (`prefetch::read_ahead`).
//!
//! The first slice decides what the object is: if the origin answers it with the whole
//! object (it ignores `Range`, or the object fits one slice), or with a `Vary`, the fill
//! stores it where a lookup of the URL finds it (whole at the base key, or under the
//! variant) and the request resolves the URL again ([`Restart`]).
//!
//! Versions: every slice stores the complete length and validators the origin sent
//! with it. Later slices are fetched with `If-Match` (strong ETag) and checked against
//! the first; a mismatch (or a 412) means the file changed at the origin: all slices of
//! the object are dropped and the response in progress is cut short, so two versions are
//! never spliced into one body.

use std::collections::VecDeque;
use std::fs::File;
use std::rc::Rc;
use std::sync::Arc;

use linerate_cache::{Body as StoreBody, BodyProgress, Lookup, ObjectHandle};
use linerate_http::cache::key;
use linerate_http::cache::{self, CachePhase, CacheStatus, Fwd, OnError, RequestCacheControl};
use linerate_http::conditional::{self, IfRange, Validators};
use linerate_http::range::{self, ByteRange, RangeOutcome, RangeSpec};
use linerate_http::{multipart, HeadWriter, StatusCode};

use super::body::{available, Segment};
use super::fill::{self, Handoff, SliceJob};
use super::fills::Phase;
use super::head;
use super::request::{CacheRequest, Fetch};
use super::round::{self, Judged};
use super::shared::{ProxyShared, ProxyWorker};
use crate::context::Worker;
use crate::exchange::Interim;
use crate::response::{Body, NextPiece, Piece, Pieces, Response, TransferError};

/// Lookups of one slice before giving up.
const MAX_ROUNDS: usize = 6;

/// The URL turned out to be stored whole or as a variant while its first slice was
/// being fetched: resolve it again. Carries the `Cache-Status` facts so far.
pub(crate) type Restart = CacheStatus;

/// Where a request's slices are: the key they are under (the URL's primary key or its
/// variant's), and why the request goes forward if one is missing.
pub(crate) struct Base<'k> {
    /// The key.
    pub(crate) key: &'k [u8],
    /// `uri-miss`, or `vary-miss` for a variant.
    pub(crate) miss: Fwd,
}

/// What a slice fetch needs, owned (the body outlives the request head).
pub(crate) struct SliceCtx {
    pw: Rc<ProxyWorker>,
    px: Arc<ProxyShared>,
    route: usize,
    /// The request as a fill sends it.
    fetch: Rc<Fetch>,
    /// The key the slices are under (primary or variant).
    base: Vec<u8>,
    slice_bytes: u64,
    /// The request's Cache-Control (as honoured by configuration).
    cc: RequestCacheControl,
    /// Why the request goes forward when a slice is missing.
    miss: Fwd,
}

/// One slice, open.
struct Open {
    index: u64,
    file: Arc<File>,
    body_offset: u64,
    progress: Option<BodyProgress>,
    /// This slice's length.
    len: u64,
}

/// Why a slice could not be had.
enum SliceError {
    /// The URL is stored whole or as a variant now (first slice only).
    Restart,
    /// This request's own fill of the first slice got the whole object and is writing
    /// it under the URL: the handle it wrote (the request is answered from it, not by
    /// a lookup that could race its publish and eviction).
    Whole(Box<ObjectHandle>),
    /// The response may not be stored; the leader's client may have it.
    Uncacheable(Option<Box<Handoff>>),
    /// The origin failed, or the object changed.
    Failed(StatusCode, &'static str),
}

/// The version and size facts of a slice.
struct Version {
    total: u64,
    etag: Option<Vec<u8>>,
    last_modified: Option<u64>,
}

fn version_of(h: &ObjectHandle) -> Option<Version> {
    let cr = h
        .meta
        .header(b"content-range")
        .and_then(cache::parse_content_range)?;
    Some(Version {
        total: cr.complete?,
        etag: h.meta.etag.clone(),
        last_modified: h.meta.last_modified_s,
    })
}

impl Version {
    fn same(&self, other: &Version) -> bool {
        self.total == other.total
            && match (&self.etag, &other.etag) {
                (Some(a), Some(b)) => a == b,
                (None, None) => self.last_modified == other.last_modified,
                _ => false,
            }
    }

    /// `If-Match` for later slices: a strong ETag only (RFC 9110 §13.1.1).
    fn if_match(&self) -> Option<Vec<u8>> {
        self.etag.clone().filter(|t| !t.starts_with(b"W/"))
    }
}

impl SliceCtx {
    /// Whether the URL is now stored whole at the base key, or (when the base is the
    /// primary key) has a `Vary` stub there: either way not as these slices.
    fn moved(&self) -> bool {
        matches!(
            self.px.store.lookup(&self.base),
            Lookup::Hit(_) | Lookup::Filling(_)
        )
    }

    /// Get slice `index` (stored, in flight, or fetched now). `expect`: the version the
    /// response already committed to (`None` for the first slice). `interim`: the
    /// leader's client, for the first slice (its interim responses, and the response
    /// itself if it may not be stored but answers the request).
    async fn slice(
        &self,
        index: u64,
        expect: Option<&Version>,
        trace: &mut CacheStatus,
        mut interim: Option<&mut Interim<'_>>,
    ) -> Result<(ObjectHandle, Version), SliceError> {
        let key = key::slice(&self.base, index);
        // Set once this request has been to the origin for this slice: what that left
        // in the store is the answer, however short its freshness.
        let mut forwarded = false;
        for _ in 0..MAX_ROUNDS {
            // An in-flight write (a refresh of an expired slice) wins over the stale copy.
            let found = super::shared::lookup(&self.px, &key, true).await;
            let judged = round::judge(found, &self.cc, forwarded, |m| {
                self.px.freshness(self.route, &self.fetch.target, m)
            });
            let mut stale = None;
            let usable = match judged {
                Judged::Use {
                    h, swr, writing, ..
                } => {
                    if swr && !writing {
                        // Served stale; one background refresh for the slice.
                        self.refresh_in_background(index, &key, expect, &h.meta);
                        trace.detail = Some("stale-while-revalidate");
                    }
                    Some(h)
                }
                Judged::GatewayTimeout => {
                    return Err(SliceError::Failed(
                        StatusCode::GatewayTimeout,
                        "only-if-cached",
                    ))
                }
                Judged::Revalidate { h, on_error, .. } => {
                    stale = Some((h, on_error));
                    None
                }
                // Being written by another fill, and not usable as a stored response
                // would not be: wait for it.
                Judged::Writing => {
                    round::wait_for_writer(&self.pw, &key).await;
                    continue;
                }
                Judged::Miss => None,
            };
            if let Some(h) = usable {
                if forwarded {
                    // What the origin answered this request's fill (RFC 9211 §2.3): only
                    // a 206 of exactly this slice is stored under a slice key (the
                    // stored status is the whole response's, 200).
                    trace.fwd_status.get_or_insert(206);
                }
                let Some(v) = version_of(&h) else {
                    return Err(SliceError::Failed(StatusCode::BadGateway, "bad_slice"));
                };
                if let Some(e) = expect {
                    if !v.same(e) {
                        self.px.drop_slices(&self.base).await;
                        return Err(SliceError::Failed(
                            StatusCode::BadGateway,
                            "version_changed",
                        ));
                    }
                }
                let opts = &self.px.routes[self.route].opts;
                if opts.prefetch_segments > 0 || opts.slice_readahead > 0 {
                    // A slice prefetched ahead of a range (`prefetch`) is used when a
                    // response reads it.
                    self.px.prefetch.served(&key);
                }
                return Ok((h, v));
            }
            if stale.is_none() && expect.is_none() && self.moved() {
                return Err(SliceError::Restart);
            }
            if self.cc.only_if_cached {
                return Err(SliceError::Failed(
                    StatusCode::GatewayTimeout,
                    "only-if-cached",
                ));
            }
            trace.forward(if stale.is_some() {
                Fwd::Stale
            } else {
                self.miss
            });
            let stale_meta = stale.as_ref().map(|(h, _)| (*h.meta).clone());
            let (phase, handoff) = round::follow(
                &self.pw,
                &key,
                self.job_template(index, expect, stale_meta),
                trace,
                forwarded,
                interim.as_deref_mut(),
            )
            .await;
            match phase {
                // Not an answer to this request (see `round::follow`): look up afresh.
                Phase::Pending => forwarded = false,
                Phase::Writing | Phase::Stored => {
                    trace.stored = true;
                    forwarded = true;
                }
                Phase::Revalidated => {
                    trace.fwd_status = Some(304);
                    forwarded = true;
                }
                Phase::Elsewhere if expect.is_none() => {
                    trace.stored = true;
                    if let Some(Handoff::Writing(h)) = handoff {
                        return Err(SliceError::Whole(Box::new(h)));
                    }
                    return Err(SliceError::Restart);
                }
                Phase::Elsewhere => {
                    return Err(SliceError::Failed(
                        StatusCode::BadGateway,
                        "version_changed",
                    ))
                }
                Phase::Uncacheable => return Err(SliceError::Uncacheable(handoff.map(Box::new))),
                Phase::Failed(f) => {
                    trace.fill_failed(f.fwd_status);
                    // stale-if-error: the stored slice stands in.
                    if let Some((h, on_error)) = stale {
                        match on_error {
                            OnError::ServeStored if f.stale_ok => {
                                if let Some(v) = version_of(&h) {
                                    if expect.is_none_or(|e| v.same(e)) {
                                        trace.detail = Some(f.detail);
                                        return Ok((h, v));
                                    }
                                }
                            }
                            OnError::GatewayTimeout => {
                                return Err(SliceError::Failed(
                                    StatusCode::GatewayTimeout,
                                    "must-revalidate",
                                ))
                            }
                            _ => {}
                        }
                    }
                    return Err(SliceError::Failed(f.status, f.detail));
                }
            }
        }
        Err(SliceError::Failed(StatusCode::BadGateway, "fill_lost"))
    }

    /// The fill of slice `index`, waiting for its claim; `stale`: the stored copy to
    /// revalidate.
    fn job_template(
        &self,
        index: u64,
        expect: Option<&Version>,
        stale: Option<linerate_cache::ObjectMeta>,
    ) -> impl FnOnce(super::fills::FillGuard) -> fill::Job + 'static {
        let px = Arc::clone(&self.px);
        let fetch = Rc::clone(&self.fetch);
        let base = self.base.clone();
        let slice = SliceJob {
            index,
            start: index * self.slice_bytes,
            len: self.slice_bytes,
            if_match: expect.and_then(Version::if_match),
            total: expect.map(|e| e.total),
        };
        move |guard| fill::Job {
            px,
            guard,
            fetch,
            base,
            stale,
            slice: Some(slice),
            handoff: None,
            interim: None,
        }
    }

    /// stale-while-revalidate for a slice: refresh it in the background unless a fill
    /// of it is running.
    fn refresh_in_background(
        &self,
        index: u64,
        key: &[u8],
        expect: Option<&Version>,
        stale: &linerate_cache::ObjectMeta,
    ) {
        let template = self.job_template(index, expect, Some(stale.clone()));
        let (pw, px, key) = (self.pw.clone(), Arc::clone(&self.px), key.to_vec());
        tokio::task::spawn_local(async move {
            if let Some(guard) = px.fills.claim_after_answered(&key).await {
                fill::run(pw, template(guard)).await;
            }
        });
    }
}

/// Read-ahead for a response of a client reading the object front to back (route
/// `slice_readahead`): each slice the body opens prefetches the `n` after it.
struct ReadAhead {
    n: u32,
    /// What the prefetches send (the client's fields, no directives of its own).
    fetch: Rc<Fetch>,
}

impl SliceCtx {
    /// Prefetch the `ra.n` slices after slice `index` of an object of `version`.
    fn read_ahead(&self, ra: &ReadAhead, index: u64, version: &Version) {
        super::prefetch::read_ahead(
            &self.pw,
            self.route,
            &self.base,
            &ra.fetch,
            (index, ra.n, self.slice_bytes),
            (version.total, version.if_match()),
        );
    }
}

/// A sliced response body.
pub(crate) struct SlicedBody {
    ctx: SliceCtx,
    readahead: Option<ReadAhead>,
    version: Version,
    segments: VecDeque<Segment>,
    open: Option<Open>,
    /// A slice the store would not keep, read from its origin response as it is sent.
    relay: Option<RelayedSlice>,
    literal: Vec<u8>,
    st: CacheStatus,
}

fn open(index: u64, h: ObjectHandle, slice_bytes: u64, total: u64) -> Open {
    let len = slice_bytes.min(total.saturating_sub(index * slice_bytes));
    Open {
        index,
        file: h.file,
        body_offset: h.body_offset,
        progress: match h.body {
            StoreBody::Complete { .. } => None,
            StoreBody::Streaming(p) => Some(p),
        },
        len,
    }
}

/// A later slice that is not stored (the store refused it: full, behind, failing
/// disk), spliced into the response from the origin's answer for it.
struct RelayedSlice {
    index: u64,
    response: Box<crate::origin::OriginResponse>,
    /// Slice bytes read from the response so far.
    at: u64,
}

/// Bytes of a relayed slice read per piece.
const RELAY_SLICE_CHUNK: usize = 256 * 1024;

impl Pieces for SlicedBody {
    fn next(&mut self) -> NextPiece<'_> {
        Box::pin(self.next_piece())
    }

    /// Whether the slice the body starts with is complete.
    fn ready(&self) -> bool {
        self.open.as_ref().is_some_and(|o| o.progress.is_none())
    }

    fn len_hint(&self) -> u64 {
        super::body::segments_len(&self.segments)
    }
}

impl SlicedBody {
    async fn next_piece(&mut self) -> Result<Option<Piece<'_>>, TransferError> {
        loop {
            let Some(front) = self.segments.front() else {
                return Ok(None);
            };
            match *front {
                Segment::Bytes(_) => {
                    if let Some(Segment::Bytes(b)) = self.segments.pop_front() {
                        self.literal = b;
                    }
                    return Ok(Some(Piece::Bytes(&self.literal)));
                }
                Segment::Range { len: 0, .. } | Segment::ToEnd { .. } => {
                    self.segments.pop_front();
                }
                Segment::Range { start, len } => {
                    let s = self.ctx.slice_bytes;
                    let index = start / s;
                    if let Some(r) = self.relay.as_mut().filter(|r| r.index == index) {
                        // Segments only move forward: skip to `local`, then send what
                        // the origin has of this range now.
                        let local = start - index * s;
                        let short = TransferError::Upstream("slice_short");
                        while r.at < local {
                            self.literal.clear();
                            let skip = usize::try_from(local - r.at).unwrap_or(usize::MAX);
                            let skip = skip.min(RELAY_SLICE_CHUNK);
                            match r.response.read(&mut self.literal, skip).await {
                                Ok(0) | Err(_) => return Err(short),
                                Ok(n) => r.at += n as u64,
                            }
                        }
                        self.literal.clear();
                        let want = usize::try_from(len).unwrap_or(usize::MAX);
                        let want = want.min(RELAY_SLICE_CHUNK);
                        let n = match r.response.read(&mut self.literal, want).await {
                            Ok(0) | Err(_) => return Err(short),
                            Ok(n) => n as u64,
                        };
                        r.at += n;
                        if let Some(Segment::Range { start: st, len: l }) =
                            self.segments.front_mut()
                        {
                            *st += n;
                            *l -= n;
                        }
                        return Ok(Some(Piece::Bytes(&self.literal)));
                    }
                    if self.open.as_ref().is_none_or(|o| o.index != index) {
                        self.open = None;
                        self.relay = None;
                        let (h, _) = match self
                            .ctx
                            .slice(index, Some(&self.version), &mut self.st, None)
                            .await
                        {
                            Ok(x) => x,
                            Err(SliceError::Failed(_, d)) => {
                                return Err(TransferError::Upstream(d))
                            }
                            Err(SliceError::Uncacheable(Some(h))) => match *h {
                                Handoff::Part(response) => {
                                    self.st.detail = Some("slice_not_stored");
                                    self.relay = Some(RelayedSlice {
                                        index,
                                        response,
                                        at: 0,
                                    });
                                    continue;
                                }
                                _ => return Err(TransferError::Upstream("slice_unavailable")),
                            },
                            Err(_) => return Err(TransferError::Upstream("slice_unavailable")),
                        };
                        self.open = Some(open(index, h, s, self.version.total));
                        if let Some(ra) = &self.readahead {
                            self.ctx.read_ahead(ra, index, &self.version);
                        }
                    }
                    let Some(o) = self.open.as_mut() else {
                        return Ok(None);
                    };
                    let written = o.progress.is_some();
                    let local = start - index * s;
                    let end_local = (local + len).min(o.len);
                    let upto =
                        available(&mut o.progress, local, end_local, end_local == o.len).await?;
                    let n = upto - local;
                    if let Some(Segment::Range { start: st, len: l }) = self.segments.front_mut() {
                        *st += n;
                        *l -= n;
                    }
                    let Some(o) = self.open.as_ref() else {
                        return Ok(None);
                    };
                    let range = ByteRange {
                        start: o.body_offset + local,
                        len: n,
                    };
                    return Ok(Some(if written {
                        Piece::Written(&o.file, range)
                    } else {
                        Piece::File(&o.file, range)
                    }));
                }
            }
        }
    }
}

/// The first byte the request asks for, when it says so directly (`a-` or `a-b`).
fn first_wanted(req: &CacheRequest<'_>) -> u64 {
    if req.head_only {
        return 0;
    }
    let Some(specs) = req.head.range.and_then(range::parse_range) else {
        return 0;
    };
    specs
        .iter()
        .filter_map(|s| match s {
            RangeSpec::FromTo(first, _) | RangeSpec::From(first) => Some(*first),
            RangeSpec::Suffix(_) => None,
        })
        .min()
        .unwrap_or(0)
}

/// Serve a URL of a sliced route whose object is not stored whole under `base`.
/// `Err`: resolve the URL again (it is stored whole or as a variant now).
pub(crate) async fn serve(
    worker: &Rc<Worker>,
    pw: &Rc<ProxyWorker>,
    req: &CacheRequest<'_>,
    base: Base<'_>,
    mut st: CacheStatus,
    interim: &mut Interim<'_>,
) -> Result<Response, Restart> {
    let Base { key: base, miss } = base;
    let px = &pw.shared;
    let route = &px.routes[req.route];
    let ctx = SliceCtx {
        pw: pw.clone(),
        px: Arc::clone(px),
        route: req.route,
        fetch: Rc::new(req.fetch()),
        base: base.to_vec(),
        slice_bytes: route.opts.slice_bytes,
        cc: req.cc.clone(),
        miss,
    };
    let s = ctx.slice_bytes;
    let mut probe = first_wanted(req) / s;
    // A start beyond the end of a known object: answer from slice 0 (416), rather than
    // asking the origin for a slice that cannot exist.
    if probe > 0 {
        if let Lookup::Hit(h) | Lookup::Filling(h) = px.store.lookup_latest(&key::slice(base, 0)) {
            if version_of(&h).is_some_and(|v| probe * s >= v.total) {
                probe = 0;
            }
        }
    }
    let (h, version) = match ctx.slice(probe, None, &mut st, Some(interim)).await {
        Ok(x) => x,
        Err(SliceError::Restart) => return Err(st),
        Err(SliceError::Whole(h)) => {
            let fresh = px.freshness(req.route, &req.target, &h.meta);
            st.fwd_status.get_or_insert(h.meta.status);
            st.phase = CachePhase::Miss;
            return Ok(head::serve(worker, req, *h, &fresh, st));
        }
        Err(SliceError::Uncacheable(handoff)) => {
            st.forward(Fwd::Bypass);
            st.detail = Some("uncacheable");
            // A 416 for the slice answers only a client that asked for a range (an
            // empty object asked for whole is a 200 for the client's own request).
            let handoff = handoff
                .map(|h| *h)
                .filter(|h| !matches!(h, Handoff::Relay { response, .. } if response.head.status == 416 && req.head.range.is_none()));
            return Ok(match handoff {
                Some(Handoff::Relay { response, shape }) => {
                    head::relayed(worker, req, *response, st, shape)
                }
                Some(Handoff::Writing(h)) => {
                    let fresh = px.freshness(req.route, &req.target, &h.meta);
                    st.phase = CachePhase::Pass;
                    head::serve(worker, req, h, &fresh, st)
                }
                // Cookies come with a 304 (a revalidation), never with this; a slice
                // alone is not an answer to this request: it goes to the origin itself.
                Some(Handoff::Cookies(_) | Handoff::Part(_)) | None => {
                    super::relay::relay(worker, pw, req, interim, st).await
                }
            });
        }
        Err(SliceError::Failed(status, detail)) => {
            return Ok(head::error(worker, req, status, st, detail))
        }
    };
    st.phase = if st.fwd.is_some() {
        CachePhase::Miss
    } else {
        CachePhase::Hit
    };
    let fresh = px.freshness(req.route, &req.target, &h.meta);
    let total = version.total;
    let meta = Arc::clone(&h.meta);
    let etag = version
        .etag
        .as_deref()
        .and_then(|v| std::str::from_utf8(v).ok())
        .unwrap_or("");
    let validators = Validators {
        etag,
        last_modified: version.last_modified.unwrap_or(0),
    };
    // Without a validator there is nothing to compare (a missing Last-Modified is not 0).
    let has_validator = !etag.is_empty() || version.last_modified.is_some();
    let precondition = if has_validator {
        conditional::evaluate(req.head, &validators)
    } else {
        conditional::Precondition::Proceed
    };
    match precondition {
        conditional::Precondition::Proceed => {}
        conditional::Precondition::NotModified => {
            return Ok(head::not_modified(req, &meta, &fresh, &st, &[]));
        }
        conditional::Precondition::Failed => {
            return Ok(head::error(
                worker,
                req,
                StatusCode::PreconditionFailed,
                st,
                "precondition",
            ));
        }
    }
    let outcome = match req.head.range {
        Some(value)
            if !req.head_only
                && conditional::if_range(req.head.if_range, &validators) == IfRange::Apply =>
        {
            match range::parse_range(value) {
                Some(specs) => range::resolve(&specs, total),
                None => RangeOutcome::Full,
            }
        }
        _ => RangeOutcome::Full,
    };
    // What the response sends of the object, when it is one span (for read-ahead).
    let span = match &outcome {
        RangeOutcome::Full => Some((0, total)),
        RangeOutcome::Single(r) => Some((r.start, r.start + r.len)),
        _ => None,
    };
    let mut segments = VecDeque::new();
    let mut headw = Vec::with_capacity(512);
    let (code, extra): (StatusCode, Vec<(&str, Vec<u8>)>) = match outcome {
        RangeOutcome::Full => {
            segments.push_back(Segment::Range {
                start: 0,
                len: total,
            });
            (
                StatusCode::Ok,
                vec![("Content-Length", total.to_string().into_bytes())],
            )
        }
        RangeOutcome::Single(r) => {
            segments.push_back(Segment::Range {
                start: r.start,
                len: r.len,
            });
            (
                StatusCode::PartialContent,
                vec![
                    (
                        "Content-Range",
                        format!("bytes {}-{}/{}", r.start, r.last(), total).into_bytes(),
                    ),
                    ("Content-Length", r.len.to_string().into_bytes()),
                ],
            )
        }
        RangeOutcome::Multi(ranges) => {
            let ctype = meta
                .header(b"content-type")
                .and_then(|v| std::str::from_utf8(v).ok())
                .unwrap_or("application/octet-stream");
            let plan = multipart::plan(&ranges, total, ctype, &worker.next_boundary());
            segments = super::body::multipart_segments(plan.parts, plan.trailer);
            (
                StatusCode::PartialContent,
                vec![
                    ("Content-Type", plan.content_type.into_bytes()),
                    ("Content-Length", plan.body_len.to_string().into_bytes()),
                ],
            )
        }
        RangeOutcome::Unsatisfiable => (
            StatusCode::RangeNotSatisfiable,
            vec![
                ("Content-Range", format!("bytes */{total}").into_bytes()),
                ("Content-Length", b"0".to_vec()),
            ],
        ),
    };
    {
        let mut w = HeadWriter::new(&mut headw, code);
        let replace_type = extra.iter().any(|(n, _)| *n == "Content-Type");
        head::stored_fields(&mut w, &meta, replace_type);
        w.field_u64("Age", fresh.age);
        w.field("Accept-Ranges", b"bytes");
        for (n, v) in &extra {
            w.field(n, v);
        }
        head::common_fields(&mut w, req, &meta, &st, &fresh);
        w.finish();
    }
    let body = if req.head_only || code == StatusCode::RangeNotSatisfiable || total == 0 {
        Body::Empty
    } else {
        // Route `slice_readahead`: a client reading the object front to back (the whole
        // of it, or a single range read as a player reads: `prefetch::reads_ahead`) has
        // the slices after each one its response reads prefetched.
        let readahead = span
            .filter(|_| route.opts.slice_readahead > 0 && !req.cc.no_store)
            .filter(|&(from, to)| super::prefetch::reads_ahead(pw, req, code, (from, to, total)))
            .map(|_| ReadAhead {
                n: route.opts.slice_readahead,
                fetch: Rc::new(req.fetch_of(
                    req.route,
                    &req.key,
                    &req.target,
                    RequestCacheControl::default(),
                )),
            });
        if let Some(ra) = &readahead {
            ctx.read_ahead(ra, probe, &version);
        }
        let first = open(probe, h, s, total);
        Body::Pieces(Box::new(SlicedBody {
            ctx,
            readahead,
            version,
            segments,
            open: Some(first),
            relay: None,
            literal: Vec::new(),
            st: st.clone(),
        }))
    };
    Ok(Response {
        head: headw,
        body,
        persistence: req.persistence,
        status: code,
        cache: st.phase,
        refusal: None,
    })
}
