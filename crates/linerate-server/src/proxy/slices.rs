//! Large objects in slices: a route with `slice_bytes` fetches and stores an object as
//! fixed-size slices, each with its own Range request to the origin, its own key
//! (`key \0s\0 n`) and its own one-fill-per-key claim. A range request on a miss fetches
//! only the slices it covers and gets its head as soon as the first of them starts to
//! arrive; a response crossing slices moves from one to the next as it is sent.
//!
//! Versions: every slice stores the complete length and validators the origin sent
//! with it. Later slices are fetched with `If-Match` (strong ETag) and checked against
//! the first; a mismatch (or a 412) means the file changed at the origin: all slices of
//! the URL are dropped and the response in progress is cut short, so two versions are
//! never spliced into one body.

use std::collections::VecDeque;
use std::fs::File;
use std::rc::Rc;
use std::sync::Arc;

use linerate_cache::{Body as StoreBody, BodyProgress, Lookup, ObjectHandle};
use linerate_http::cache::{self, Fwd};
use linerate_http::conditional::{self, IfRange, Validators};
use linerate_http::range::{self, ByteRange, RangeOutcome, RangeSpec};
use linerate_http::{multipart, HeadWriter, StatusCode};

use super::body::{available, ProxyBody, Segment};
use super::fill::{self, SliceJob};
use super::fills::{self, Claim, FillState, Outcome};
use super::{head, slice_key, ProxyShared, ProxyWorker, Req, Status};
use crate::context::Worker;
use crate::response::TransferError;
use crate::response::{Body, Piece, Response};
use crate::stats::CacheStatus;

/// Lookups of one slice before giving up.
const MAX_ROUNDS: usize = 6;

/// What a slice fetch needs, owned (the body outlives the request head).
pub(crate) struct SliceCtx {
    pub(crate) pw: Rc<ProxyWorker>,
    pub(crate) px: Arc<ProxyShared>,
    pub(crate) route: usize,
    pub(crate) origin: usize,
    pub(crate) primary: Vec<u8>,
    pub(crate) target: Vec<u8>,
    pub(crate) fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) request_fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) slice_bytes: u64,
    /// The request's Cache-Control (as honoured by configuration).
    pub(crate) cc: linerate_http::cache::RequestCacheControl,
}

/// One slice, open.
struct Open {
    index: u64,
    file: File,
    body_offset: u64,
    progress: Option<BodyProgress>,
    /// This slice's length.
    len: u64,
}

/// Why a slice could not be had.
enum SliceError {
    /// The origin answered with a whole object (or the URL is stored whole now).
    Whole,
    /// Not storable: relay.
    Pass,
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

/// Drop every slice of `primary` (the file changed at the origin). In the background:
/// purges write the journal.
pub(crate) async fn version_changed(px: &Arc<ProxyShared>, primary: &[u8]) {
    tracing::info!(key = %String::from_utf8_lossy(primary), "object changed at the origin; dropping its slices");
    let mut prefix = primary.to_vec();
    prefix.extend_from_slice(super::SLICE_SEP);
    let px = Arc::clone(px);
    let _ = tokio::task::spawn_blocking(move || px.store.purge_prefix(&prefix)).await;
}

impl SliceCtx {
    /// Get slice `index` (stored, in flight, or fetched now). `expect`: the version the
    /// response already committed to.
    async fn slice(
        &self,
        index: u64,
        expect: Option<&Version>,
        st: &mut Status,
    ) -> Result<(ObjectHandle, Version), SliceError> {
        let key = slice_key(&self.primary, index);
        // Set once this request has been to the origin for this slice: what that left
        // in the store is the answer, however short its freshness.
        let mut forwarded = false;
        for _ in 0..MAX_ROUNDS {
            // An in-flight write (a refresh of an expired slice) wins over the stale copy.
            let found = self.px.store.lookup_latest(&key);
            let mut stale = None;
            let usable = match found {
                Lookup::Hit(h) => {
                    let fresh = head::freshness_for(&self.px, self.route, &self.target, &h.meta);
                    if forwarded || fresh.usable_fresh(&self.cc) {
                        Some(h)
                    } else if fresh.within_swr() && !self.cc.no_cache {
                        // Served stale; one background refresh for the slice.
                        self.refresh_in_background(index, &key, expect, &h.meta);
                        st.detail = Some("stale-while-revalidate");
                        Some(h)
                    } else {
                        stale = Some((h, fresh));
                        None
                    }
                }
                Lookup::Filling(h) => Some(h),
                Lookup::Miss(_) => None,
            };
            if let Some(h) = usable {
                let Some(v) = version_of(&h) else {
                    return Err(SliceError::Failed(StatusCode::BadGateway, "bad_slice"));
                };
                if let Some(e) = expect {
                    if !v.same(e) {
                        version_changed(&self.px, &self.primary).await;
                        return Err(SliceError::Failed(
                            StatusCode::BadGateway,
                            "version_changed",
                        ));
                    }
                }
                return Ok((h, v));
            }
            // The URL may be stored whole (its origin ignores Range).
            if stale.is_none()
                && matches!(
                    self.px.store.lookup(&self.primary),
                    Lookup::Hit(_) | Lookup::Filling(_)
                )
            {
                return Err(SliceError::Whole);
            }
            if self.cc.only_if_cached {
                return Err(SliceError::Failed(
                    StatusCode::GatewayTimeout,
                    "only-if-cached",
                ));
            }
            if st.fwd.is_none() {
                st.fwd = Some(if stale.is_some() {
                    Fwd::Stale
                } else {
                    Fwd::UriMiss
                });
            }
            let stale_meta = stale.as_ref().map(|(h, _)| (*h.meta).clone());
            let mut rx = match self.px.fills.claim(&key) {
                Claim::Leader(guard) => {
                    let rx = guard.subscribe();
                    let job = self.job(guard, index, expect, stale_meta);
                    tokio::task::spawn_local(fill::run(self.pw.clone(), job, None));
                    rx
                }
                Claim::Follower(mut rx) if forwarded => {
                    // Seen being written, then nothing to follow: that fill failed.
                    // Wait for its claim to go, then claim afresh.
                    fills::finished(&mut rx).await;
                    continue;
                }
                Claim::Follower(rx) => {
                    st.collapsed = true;
                    rx
                }
            };
            match fills::settled(&mut rx).await {
                FillState::Pending => {}
                FillState::Writing => {
                    st.stored = true;
                    forwarded = true;
                }
                FillState::Done(Outcome::Stored) => {
                    st.stored = true;
                    forwarded = true;
                }
                FillState::Done(Outcome::Revalidated) => {
                    st.fwd_status = Some(304);
                    forwarded = true;
                }
                FillState::Done(Outcome::Uncacheable) => return Err(SliceError::Pass),
                FillState::Done(Outcome::Failed {
                    status,
                    detail,
                    stale_ok,
                }) => {
                    // stale-if-error: the stored slice stands in.
                    if let Some((h, fresh)) = stale {
                        if stale_ok && fresh.within_sie() {
                            if let Some(v) = version_of(&h) {
                                if expect.is_none_or(|e| v.same(e)) {
                                    st.detail = Some(detail);
                                    return Ok((h, v));
                                }
                            }
                        }
                    }
                    return Err(SliceError::Failed(status, detail));
                }
            }
        }
        Err(SliceError::Failed(StatusCode::BadGateway, "fill_lost"))
    }

    /// The fill of slice `index`; `stale`: the stored copy to revalidate.
    fn job(
        &self,
        guard: super::fills::FillGuard,
        index: u64,
        expect: Option<&Version>,
        stale: Option<linerate_cache::ObjectMeta>,
    ) -> fill::Job {
        fill::Job {
            px: Arc::clone(&self.px),
            guard,
            origin: self.origin,
            primary: self.primary.clone(),
            target: self.target.clone(),
            fields: self.fields.clone(),
            request_fields: self.request_fields.clone(),
            stale,
            slice: Some(SliceJob {
                start: index * self.slice_bytes,
                len: self.slice_bytes,
                if_match: expect.and_then(Version::if_match),
                total: expect.map(|e| e.total),
            }),
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
        if let Claim::Leader(guard) = self.px.fills.claim(key) {
            let job = self.job(guard, index, expect, Some(stale.clone()));
            tokio::task::spawn_local(fill::run(self.pw.clone(), job, None));
        }
    }
}

/// A sliced response body.
pub(crate) struct SlicedBody {
    ctx: SliceCtx,
    version: Version,
    segments: VecDeque<Segment>,
    open: Option<Open>,
    literal: Vec<u8>,
    st: Status,
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

impl SlicedBody {
    /// Whether the slice the body starts with is complete.
    pub(crate) fn ready(&self) -> bool {
        self.open.as_ref().is_some_and(|o| o.progress.is_none())
    }

    pub(crate) fn len_hint(&self) -> u64 {
        super::body::segments_len(&self.segments)
    }

    pub(crate) async fn next(&mut self) -> Result<Option<Piece<'_>>, TransferError> {
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
                    if self.open.as_ref().is_none_or(|o| o.index != index) {
                        self.open = None;
                        let (h, _) = match self
                            .ctx
                            .slice(index, Some(&self.version), &mut self.st)
                            .await
                        {
                            Ok(x) => x,
                            Err(SliceError::Failed(_, d)) => {
                                return Err(TransferError::Upstream(d))
                            }
                            Err(_) => return Err(TransferError::Upstream("slice_unavailable")),
                        };
                        self.open = Some(open(index, h, s, self.version.total));
                    }
                    let Some(o) = self.open.as_mut() else {
                        return Ok(None);
                    };
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
                    return Ok(Some(Piece::File(
                        &o.file,
                        ByteRange {
                            start: o.body_offset + local,
                            len: n,
                        },
                    )));
                }
            }
        }
    }
}

/// The first byte the request asks for, when it says so directly (`a-` or `a-b`).
fn first_wanted(req: &Req<'_>) -> u64 {
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

/// Serve a URL of a sliced route that is not stored whole.
pub(crate) async fn serve(
    worker: &Rc<Worker>,
    pw: &Rc<ProxyWorker>,
    req: &Req<'_>,
    mut st: Status,
) -> Response {
    let px = &pw.shared;
    let route = &px.routes[req.route];
    let ctx = SliceCtx {
        pw: pw.clone(),
        px: Arc::clone(px),
        route: req.route,
        origin: route.origin,
        primary: req.key.clone(),
        target: req.target.to_vec(),
        fields: req.forwarded(false),
        request_fields: req
            .fields
            .iter()
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect(),
        slice_bytes: route.opts.slice_bytes,
        cc: req.cc.clone(),
    };
    let s = ctx.slice_bytes;
    let mut probe = first_wanted(req) / s;
    // A start beyond the end of a known object: answer from slice 0 (416), rather than
    // asking the origin for a slice that cannot exist.
    if probe > 0 {
        if let Lookup::Hit(h) | Lookup::Filling(h) = px.store.lookup_latest(&slice_key(&req.key, 0))
        {
            if version_of(&h).is_some_and(|v| probe * s >= v.total) {
                probe = 0;
            }
        }
    }
    let (h, version) = match ctx.slice(probe, None, &mut st).await {
        Ok(x) => x,
        Err(SliceError::Whole) => {
            let (_, found) = super::lookup(px, req, true);
            return match found {
                Lookup::Hit(h) | Lookup::Filling(h) => {
                    let fresh = head::freshness_for(px, req.route, req.target, &h.meta);
                    head::serve(worker, req, h, &fresh, st, CacheStatus::Miss)
                }
                Lookup::Miss(_) => {
                    head::error(worker, req, StatusCode::BadGateway, st, "fill_lost")
                }
            };
        }
        Err(SliceError::Pass) => {
            st.fwd = Some(Fwd::Bypass);
            st.detail = Some("uncacheable");
            return super::relay(worker, pw, req, &[], st).await;
        }
        Err(SliceError::Failed(status, detail)) => {
            return head::error(worker, req, status, st, detail)
        }
    };
    let fresh = head::freshness_for(px, req.route, req.target, &h.meta);
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
        conditional::evaluate(&req.head, &validators)
    } else {
        conditional::Precondition::Proceed
    };
    match precondition {
        conditional::Precondition::Proceed => {}
        conditional::Precondition::NotModified => {
            return head::not_modified(req, &meta, &fresh, &st);
        }
        conditional::Precondition::Failed => {
            return head::error(
                worker,
                req,
                StatusCode::PreconditionFailed,
                st,
                "precondition",
            );
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
        let first = open(probe, h, s, total);
        Body::Pieces(Box::new(ProxyBody::Sliced(SlicedBody {
            ctx,
            version,
            segments,
            open: Some(first),
            literal: Vec::new(),
            st: st.clone(),
        })))
    };
    Response {
        head: headw,
        body,
        persistence: req.persistence,
        status: code,
        cache: if st.fwd.is_some() {
            CacheStatus::Miss
        } else {
            CacheStatus::Hit
        },
    }
}
