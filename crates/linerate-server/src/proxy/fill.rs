//! One fill: fetch a key from the origin and write it to the store while clients follow
//! it. The fill runs as its own task on the leader's worker, so a client that
//! disconnects never cancels it for the others; it publishes its progress through its
//! claim (`fills::Phase`) and the store's writer.
//!
//! This module does the I/O. Every decision about the response is made by
//! `linerate_http::cache`: what it is ([`classify`]: the whole object, the slice asked
//! for, the whole object in one slice, or not what was asked), whether it may be stored
//! ([`admit`]), what is stored with it ([`to_store`]) and how a 304 freshens a stored
//! copy ([`freshen`]).
//!
//! Nothing partial is ever published: any origin failure after the head (short body,
//! broken chunking, stall, fill timeout) aborts the writer, which fails every follower's
//! body (their connections close short) and leaves nothing in the index. A body longer
//! than its `Content-Length` is delivered as the `Content-Length` bytes the origin
//! declared (what nginx and Varnish deliver), but not stored: a response whose framing
//! lied cannot be trusted enough to keep.

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use linerate_cache::{Lookup, ObjectMeta, WriteFailure};
use linerate_http::cache::key;
use linerate_http::cache::policy::Response as PolicyResponse;
use linerate_http::cache::{admit, classify, freshen, to_store, Answer, Asked, Vary};
use linerate_http::StatusCode;
use tokio::sync::oneshot;

use super::fills::bad_gateway;
use super::fills::{Claim, Failure, FillGuard, Phase};
use super::head::Shape;
use super::peer::Source;
use super::request::{variant_of, CacheRequest, Fetch};
use super::shared::{now_ms, ProxyShared, ProxyWorker, VARY_STUB};
use crate::origin::{InterimSink, OriginError, OriginRequest, OriginResponse};

/// Body bytes read from the origin per store append.
const FILL_CHUNK: usize = 256 * 1024;

/// What to fetch, and for whom.
pub(crate) struct Job {
    pub(crate) px: Arc<ProxyShared>,
    /// The claim this fill holds.
    pub(crate) guard: FillGuard,
    /// The request as the fill sends it.
    pub(crate) fetch: Rc<Fetch>,
    /// The key the request resolved to: the primary key, or the variant the request
    /// selected through a `Vary` stub (slices of it are keyed under it).
    pub(crate) base: Vec<u8>,
    /// The stale copy being revalidated.
    pub(crate) stale: Option<ObjectMeta>,
    /// A slice to fetch with `Range`.
    pub(crate) slice: Option<SliceJob>,
    /// Where a response that may not be stored goes, when it answers the leader's
    /// request as it stands.
    pub(crate) handoff: Option<oneshot::Sender<Handoff>>,
    /// Where interim responses go (the leader's client).
    pub(crate) interim: Option<InterimSink>,
}

/// A slice to fetch with a Range request.
#[derive(Debug, Clone)]
pub(crate) struct SliceJob {
    /// Its number.
    pub(crate) index: u64,
    /// First byte.
    pub(crate) start: u64,
    /// Bytes (the last slice may be shorter).
    pub(crate) len: u64,
    /// `If-Match` value: the version the other slices have (strong ETag).
    pub(crate) if_match: Option<Vec<u8>>,
    /// Expected complete length, when known from another slice.
    pub(crate) total: Option<u64>,
}

/// What the fill hands the leader's client directly, so it never needs a second origin
/// request nor has to catch the store's in-flight object in time.
pub(crate) enum Handoff {
    /// A response the fill could not store, its body unread.
    Relay {
        /// The response.
        response: Box<OriginResponse>,
        /// How to present it (a 206 covering the whole object goes out as the 200 it is).
        shape: Shape,
    },
    /// The object being written: delivered to the clients following it even when it
    /// is not kept in the end (a body longer than its `Content-Length`).
    Writing(linerate_cache::ObjectHandle),
    /// The `Set-Cookie` values of the 304 that revalidated the stored copy, which the
    /// stored copy does not keep (`cache::freshen`): the origin set them for the
    /// leader's client, whose request (and `Cookie`) it answered.
    Cookies(Vec<Vec<u8>>),
    /// The slice asked for, exactly as asked (its version checked by `classify`), that
    /// the store would not keep (full, behind, failing disk), its body unread: a
    /// response already sending the object's earlier slices splices it in, where
    /// without it the client's connection would close short.
    Part(Box<OriginResponse>),
}

/// Start a background revalidation of `key` unless one is running (stale-while-
/// revalidate): the client is served the stale copy without waiting.
pub(crate) fn revalidate_in_background(
    pw: &Rc<ProxyWorker>,
    req: &CacheRequest<'_>,
    key: &[u8],
    stale: &ObjectMeta,
) {
    let pw = pw.clone();
    let fetch = Rc::new(req.fetch());
    let key = key.to_vec();
    let stale = stale.clone();
    tokio::task::spawn_local(async move {
        let Some(guard) = pw.shared.fills.claim_after_answered(&key).await else {
            return;
        };
        let job = Job {
            px: Arc::clone(&pw.shared),
            guard,
            fetch,
            base: key,
            stale: Some(stale),
            slice: None,
            handoff: None,
            interim: None,
        };
        run(pw, job).await;
    });
}

/// Run one fill to its end and publish how it ended (also returned).
///
/// The fetch and store run in a future of their own on the heap (about 9 KB: the
/// origin exchange, the body loop), freed when the body is written; what then waits
/// for the disk's publisher (the group commit, which can lag by thousands of objects)
/// is this small task alone.
pub(crate) async fn run(pw: Rc<ProxyWorker>, mut job: Job) -> Phase {
    let mut publishing = None;
    let end = Box::pin(fetch(&pw, &mut job, &mut publishing)).await;
    let end = match publishing {
        Some(p) => p.outcome().await,
        None => end,
    };
    tracing::trace!(phase = end.as_str(), "fill over");
    job.guard.finish(end.clone());
    end
}

/// A fill whose body is stored and complete, waiting for its disk's publisher: the
/// publish's outcome, and what the fill does with it.
struct Publishing {
    published: oneshot::Receiver<bool>,
    then: Box<dyn FnOnce(Phase) -> Phase>,
}

impl Publishing {
    async fn outcome(self) -> Phase {
        let stored = match self.published.await {
            Ok(true) => Phase::Stored,
            _ => Phase::Failed(bad_gateway("store_failed", false)),
        };
        (self.then)(stored)
    }
}

fn failed(e: &OriginError, stale_ok: bool) -> Phase {
    Phase::Failed(Failure {
        status: e.status(),
        detail: e.as_str(),
        stale_ok,
        fwd_status: None,
    })
}

/// The fill itself; returns its final phase, or sets `publishing` when the body is
/// stored and only the publish is left (the phase returned then is a placeholder).
async fn fetch(pw: &ProxyWorker, job: &mut Job, publishing: &mut Option<Publishing>) -> Phase {
    let px = Arc::clone(&job.px);
    let fetch = Rc::clone(&job.fetch);
    let mut headers: Vec<(&[u8], &[u8])> = fetch
        .fields
        .iter()
        .map(|(n, v)| (n.as_slice(), v.as_slice()))
        .collect();
    // Owned copies: the request borrows them while `store` takes the job mutably.
    let (slice, stale, interim) = (job.slice.clone(), job.stale.clone(), job.interim.take());
    let range;
    if let Some(s) = &slice {
        range = format!("bytes={}-{}", s.start, s.start + s.len - 1);
        headers.push((b"Range", range.as_bytes()));
        if let Some(tag) = &s.if_match {
            headers.push((b"If-Match", tag));
        }
    }
    let lm;
    if let Some(stale) = &stale {
        if let Some(tag) = stale.header(b"etag") {
            headers.push((b"If-None-Match", tag));
        }
        if let Some(t) = stale.last_modified_s {
            lm = linerate_http::date::format(t);
            headers.push((b"If-Modified-Since", lm.as_bytes()));
        }
    }
    // The whole fill is bounded, not just each read (an origin dripping a byte just
    // inside the idle timeout would otherwise hold every follower indefinitely).
    let deadline = tokio::time::Instant::now() + px.origins[fetch.origin].opts.fill_timeout;
    let request = OriginRequest {
        method: "GET",
        target: &fetch.target,
        headers: &headers,
        body: &[],
        idempotent: true,
        interim: interim.as_ref(),
    };
    // The origin, or in a cluster the key's owner (see `peer`).
    let claim_key = job.guard.key().to_vec();
    let (resp, source) = match super::peer::send(pw, &fetch, &claim_key, &request).await {
        Ok(o) => (o.response, o.source),
        Err(e) => {
            tracing::debug!(error = e.as_str(), "origin request failed");
            return failed(&e, true);
        }
    };
    let status = resp.head.status;

    // Revalidation confirmed: freshen the stored copy (RFC 9111 §4.3.4).
    if status == 304 {
        let Some(stale) = &job.stale else {
            // A 304 to a request without validators answers nothing we asked.
            return Phase::Failed(bad_gateway("unexpected_304", true));
        };
        // The 304's own fields, never our markers (`is_internal_field`).
        let theirs: Vec<(Vec<u8>, Vec<u8>)> = resp
            .head
            .headers
            .iter()
            .filter(|(n, _)| !super::shared::is_internal_field(n))
            .cloned()
            .collect();
        let freshened = freshen(
            &stale.headers,
            &theirs,
            resp.response_time_ms,
            px.settings(fetch.route, &fetch.target).targets,
        );
        // The cookies the 304 set for the leader's client (and that may not be stored):
        // to it alone, never to a request that joined this fill.
        if let Some(tx) = job.handoff.take() {
            if !freshened.personal.is_empty() {
                let _ = tx.send(Handoff::Cookies(freshened.personal));
            }
        }
        let meta = ObjectMeta {
            headers: freshened.stored,
            derived: Default::default(),
            request_time_ms: resp.request_time_ms,
            response_time_ms: resp.response_time_ms,
            etag: resp
                .head
                .header(b"etag")
                .map(<[u8]>::to_vec)
                .or_else(|| stale.etag.clone()),
            last_modified_s: resp
                .head
                .header(b"last-modified")
                .and_then(linerate_http::date::parse)
                .or(stale.last_modified_s),
            status: stale.status,
        };
        let store_px = Arc::clone(&px);
        let k = job.guard.key().to_vec();
        let updated =
            tokio::task::spawn_blocking(move || store_px.store.update_meta(&k, meta)).await;
        if !matches!(updated, Ok(Ok(true))) {
            tracing::debug!("could not freshen a revalidated object");
        }
        return Phase::Revalidated;
    }
    // RFC 9111 §4.3.3: a 5xx to a revalidation may be forwarded, or treated as the
    // origin failing to answer. While the stored copy may stand in (stale-if-error, or
    // still fresh) it is a failure, so the copy answers; otherwise the origin's answer
    // is forwarded like any response (and stored if it may be: an error with explicit
    // freshness replaces the copy), rather than a 502 of our own in its place.
    if let (Some(stale), true) = (&job.stale, status >= 500) {
        if px
            .freshness(job.fetch.route, &job.fetch.target, stale)
            .stands_in_on_error()
        {
            return Phase::Failed(Failure {
                fwd_status: Some(status),
                ..bad_gateway("origin_error", true)
            });
        }
    }

    let asked = match &job.slice {
        Some(s) => Asked::Part {
            first: s.start,
            last: s.start + s.len - 1,
        },
        None => Asked::Whole,
    };
    let answer = classify(
        asked,
        status,
        resp.head.header(b"content-range"),
        resp.content_length(),
    );
    if let Some(s) = job.slice.clone() {
        match answer {
            // The object changed at the origin since the other slices were stored.
            _ if status == 412 => return version_changed(&px, &job.base).await,
            Answer::Unsatisfiable { .. } if s.total.is_some() => {
                return version_changed(&px, &job.base).await
            }
            Answer::Part { total, .. } => {
                let other_version = s.total.is_some_and(|t| t != total)
                    || s.if_match
                        .as_ref()
                        .is_some_and(|tag| resp.head.header(b"etag") != Some(tag.as_slice()));
                if other_version {
                    return version_changed(&px, &job.base).await;
                }
            }
            _ => {}
        }
    }
    match answer {
        Answer::Mismatch => {
            // Not what was asked: never stored, never served as something else. The
            // client's own request goes to the origin and gets its own answer; for a
            // while the URL is relayed straight away (this origin does not do ranges
            // the way slices need).
            tracing::debug!(status, "origin answered another range than asked");
            px.mark_pass(&fetch.primary);
            return Phase::Uncacheable;
        }
        // The first slice a request needs starts past the end of the object, so the
        // client's own range does too: the origin's 416 (`bytes */total`) answers it.
        Answer::Unsatisfiable { .. } => return hand_off(job, resp, answer),
        Answer::Whole | Answer::Part { .. } | Answer::WholeAsPart { .. } => {}
    }

    // Stored as the 200 it is (part of).
    let stored_status = match answer {
        Answer::Part { .. } | Answer::WholeAsPart { .. } => 200,
        _ => status,
    };
    let settings = px.settings(fetch.route, &fetch.target);
    let facts = PolicyResponse {
        status: stored_status,
        fields: &resp.head.headers,
        request_time_ms: resp.request_time_ms,
        response_time_ms: resp.response_time_ms,
    };
    let coded = !resp.head.codings.is_empty();
    let vary = match admit(&fetch.policy, &facts, coded, &settings, now_ms()) {
        Ok(admitted) => admitted.vary,
        Err(why) => {
            tracing::debug!(reason = why.as_str(), status, "response not stored");
            if why.sticks() {
                px.mark_pass(&fetch.primary);
            }
            return hand_off(job, resp, answer);
        }
    };

    // Vary (as admission read it): the object goes under the variant's key; a stub at
    // the primary key names the fields (RFC 9111 §4.1), so a lookup finds the variant
    // it selects.
    let base = match vary {
        Vary::Names(names) => {
            if !write_stub(&px, &fetch.primary, &names).await {
                return hand_off(job, resp, answer);
            }
            variant_of(&fetch.primary, &names, |n| fetch.values(n))
        }
        _ => {
            if job.base != fetch.primary {
                // Resolved through a stub the origin has dropped its Vary since: the
                // object goes back to the primary key, and the stub must not hide it.
                let p = Arc::clone(&px);
                let primary = fetch.primary.clone();
                let _ = tokio::task::spawn_blocking(move || p.store.purge(&primary)).await;
            }
            fetch.primary.clone()
        }
    };
    let store_key = match (answer, &job.slice) {
        (Answer::Part { .. }, Some(s)) => key::slice(&base, s.index),
        _ => base,
    };
    let claimed = job.guard.key().to_vec();
    // A different key than the claim (a variant, or a whole object on a sliced route)
    // needs its own claim, or two fills could write it.
    let mut extra = None;
    let moving = if store_key == claimed {
        Phase::Writing
    } else {
        match px.fills.claim(&store_key) {
            Claim::Leader(g) => extra = Some(g),
            // Someone is writing it already: follow that.
            Claim::Follower(_) => return Phase::Elsewhere,
        }
        Phase::Elsewhere
    };
    let mut published = None;
    let end = store(
        pw,
        &request,
        &px,
        job,
        extra.as_ref(),
        (resp, source),
        &store_key,
        (stored_status, answer),
        deadline,
        &moving,
        &mut published,
    )
    .await;
    let whole = job.slice.is_none();
    let primary = fetch.primary.clone();
    let then = move |end: Phase| -> Phase {
        let end = match end {
            Phase::Stored => {
                if whole {
                    // Stored now: an earlier "not storable" verdict is out of date.
                    px.clear_pass(&primary);
                }
                moving
            }
            other => other,
        };
        if let Some(g) = extra {
            g.finish(match &end {
                Phase::Elsewhere => Phase::Stored,
                other => other.clone(),
            });
        }
        end
    };
    match published {
        Some(published) => {
            *publishing = Some(Publishing {
                published,
                then: Box::new(then),
            });
            Phase::Stored
        }
        None => then(end),
    }
}

/// Write the response under `store_key` while followers read it. Returns `Stored`,
/// `Uncacheable` (delivered but not kept) or `Failed`; `Stored` with `published` set
/// when the body is complete and handed to the disk's publisher, whose outcome the
/// receiver gets.
#[allow(clippy::too_many_arguments)] // One fill's state, passed down once.
async fn store(
    pw: &ProxyWorker,
    request: &OriginRequest<'_>,
    px: &Arc<ProxyShared>,
    job: &mut Job,
    extra: Option<&FillGuard>,
    (mut resp, mut source): (OriginResponse, Source),
    store_key: &[u8],
    (stored_status, answer): (u16, Answer),
    deadline: tokio::time::Instant,
    moving: &Phase,
    published: &mut Option<oneshot::Receiver<bool>>,
) -> Phase {
    let mut headers = to_store(&resp.head.headers, resp.response_time_ms);
    headers.retain(|(n, _)| !super::shared::is_internal_field(n));
    if source.peer().is_some() {
        super::head::set_apart_peer_status(&mut headers);
    }
    if matches!(answer, Answer::WholeAsPart { .. }) {
        // Kept as the 200 it stands for.
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(b"content-range"));
    }
    headers.truncate(linerate_cache::meta::MAX_STORED_FIELDS);
    let meta = ObjectMeta {
        status: stored_status,
        request_time_ms: resp.request_time_ms,
        response_time_ms: resp.response_time_ms,
        etag: resp.head.header(b"etag").map(<[u8]>::to_vec),
        last_modified_s: resp
            .head
            .header(b"last-modified")
            .and_then(linerate_http::date::parse),
        headers,
        derived: Default::default(),
    };
    let expected = match answer {
        Answer::Part { len, .. } => Some(len),
        Answer::WholeAsPart { total } => Some(total),
        _ => resp.content_length(),
    };
    // Its tags (`[cache] tag_header`), for purges by tag: noted before the write, so a
    // purge of a tag while it is written cancels it.
    px.tags.note(store_key, &meta.headers);
    // A large body's create and appends run on the fill threads; a small one's here
    // while the worker's writes are quick (`DiskWrites`).
    let large = super::shared::large_body(expected);
    let begun = if !large && pw.disk_writes.inline() {
        // Create the temporary file here.
        let t = std::time::Instant::now();
        let r = px.store.begin_write(store_key, meta, expected);
        pw.disk_writes.took(t.elapsed(), &px.write_counts);
        Some(r)
    } else {
        px.write_counts.pooled.fetch_add(1, Ordering::Relaxed);
        let p = Arc::clone(px);
        let k = store_key.to_vec();
        px.writes
            .run(move || p.store.begin_write(&k, meta, expected))
            .await
    };
    let writer = match begun {
        Some(Ok(w)) => w,
        Some(Err(refused)) => {
            tracing::debug!(reason = refused.as_str(), "store refused the object");
            return hand_off(job, resp, answer);
        }
        None => return hand_off(job, resp, answer),
    };
    // A whole object only: a slice alone answers no request as it stands.
    let whole = !matches!(answer, Answer::Part { .. });
    if let Some(tx) = job.handoff.take().filter(|_| whole) {
        if let Lookup::Filling(h) = px.store.lookup_latest(store_key) {
            let _ = tx.send(Handoff::Writing(h));
        }
    }
    job.guard.progress(moving.clone());
    if let Some(g) = extra {
        g.progress(Phase::Writing);
    }
    let mut writer = writer;
    // The body bytes that came with the head go to the store from the buffer they
    // arrived in (a small object's whole body: no copy, and no read buffer at all);
    // later reads go into `buf`, which the first of them sizes.
    let mut ahead = resp.take_ahead(FILL_CHUNK).await;
    let mut buf = Vec::new();
    // For a resume after a peer breaks off: where this response's body starts in the
    // object, how long it is, and the validator that pins its version.
    let first_byte = match (answer, &job.slice) {
        (Answer::Part { .. }, Some(s)) => s.start,
        _ => 0,
    };
    // The object's complete length, which a resumed `Content-Range` must repeat.
    let complete = match answer {
        Answer::Part { total, .. } | Answer::WholeAsPart { total } => Some(total),
        _ => expected,
    };
    let validator = resume_validator(&resp);
    let mut written = 0u64;
    let mut tried = Vec::new();
    loop {
        let read = match ahead.take() {
            Some((bytes, range)) => {
                buf = bytes;
                Ok(range)
            }
            None => {
                buf.clear();
                let Ok(read) =
                    tokio::time::timeout_at(deadline, resp.read(&mut buf, FILL_CHUNK)).await
                else {
                    tracing::info!("origin body too slow (fill_timeout); object discarded");
                    writer.abort(WriteFailure::Aborted);
                    return Phase::Failed(Failure {
                        status: StatusCode::GatewayTimeout,
                        detail: "fill_timeout",
                        stale_ok: false,
                        fwd_status: None,
                    });
                };
                read.map(|n| 0..n)
            }
        };
        match read {
            Ok(range) if range.is_empty() => break,
            Ok(range) => {
                let n = range.len();
                written += n as u64;
                if let Some(p) = source.peer() {
                    p.count_bytes(n as u64);
                }
                // A page-cache `pwrite`, here while they are quick; on the fill
                // threads (the writer and buffer travel there and back) for a large
                // body or after slow ones (`DiskWrites`).
                let appended = if !large && pw.disk_writes.inline() {
                    let t = std::time::Instant::now();
                    let r = writer.append(&buf[range]);
                    pw.disk_writes.took(t.elapsed(), &px.write_counts);
                    Some((writer, buf, r))
                } else {
                    px.write_counts.pooled.fetch_add(1, Ordering::Relaxed);
                    px.writes
                        .run(move || {
                            let r = writer.append(&buf[range]);
                            (writer, buf, r)
                        })
                        .await
                };
                match appended {
                    Some((w, b, Ok(()))) => {
                        writer = w;
                        buf = b;
                    }
                    Some((_, _, Err(e))) => {
                        tracing::warn!(failure = e.failure.as_str(), "cache write failed");
                        return Phase::Failed(bad_gateway("store_failed", false));
                    }
                    // The pool job panicked: the writer is gone (and so aborted).
                    None => return Phase::Failed(bad_gateway("store_failed", false)),
                }
            }
            Err(OriginError::BodyLong) => {
                // Every declared byte arrived, then more: the followers get the body as
                // declared, complete; nothing is kept.
                tracing::info!("origin body longer than its Content-Length; delivered, not stored");
                writer.complete_unstored();
                return Phase::Uncacheable;
            }
            Err(e) if source.peer().is_some() && tried.len() < MAX_RESUMES => {
                // The peer broke off mid-body (it died, or its own fill failed): the
                // rest of the same version from the next node or the origin.
                let (Some(p), Some(len), Some(tag)) = (source.peer(), expected, &validator) else {
                    tracing::info!(
                        error = e.as_str(),
                        "peer body failed and cannot be resumed; object discarded"
                    );
                    writer.abort(WriteFailure::Aborted);
                    return failed(&e, false);
                };
                p.record_failure(
                    px.cluster
                        .as_ref()
                        .map_or(1, |c| c.membership().opts.down_after),
                );
                tried.push(Arc::clone(p));
                let from = first_byte + written;
                let last = first_byte + len - 1;
                tracing::info!(peer = %p.name, error = e.as_str(), from, "peer body broke off; resuming");
                let claim_key = job.guard.key().to_vec();
                let resumed = tokio::time::timeout_at(
                    deadline,
                    super::peer::resume(
                        pw, &job.fetch, &claim_key, request, &mut tried, from, last, tag,
                    ),
                )
                .await;
                match resumed {
                    Ok(Ok(o)) if is_exact_rest(&o.response, from, last, complete, tag) => {
                        if let Some(c) = &px.cluster {
                            c.count_resume();
                        }
                        resp = o.response;
                        source = o.source;
                    }
                    _ => {
                        // No source, or not the rest of this version (it changed): the
                        // clients' connections close short; nothing is kept.
                        tracing::info!(from, "peer body could not be resumed; object discarded");
                        writer.abort(WriteFailure::Aborted);
                        return failed(&e, false);
                    }
                }
            }
            Err(e) => {
                if let (Some(p), Some(c)) = (source.peer(), &px.cluster) {
                    p.record_failure(c.membership().opts.down_after);
                }
                tracing::info!(error = e.as_str(), "origin body failed; object discarded");
                writer.abort(WriteFailure::Aborted);
                return failed(&e, false);
            }
        }
    }
    // The body is complete: the origin connection goes back, and a peer it came from
    // stops counting it in flight (its bounded load) before the publish is waited for.
    crate::origin::recycle_head_buffer(buf);
    drop(resp);
    drop(source);
    // The body is complete: its readers (the clients) are told so now and finish; the
    // disk's publisher flushes it with the others that completed meanwhile (group
    // commit), then renames and indexes it. The fill, and so its claim, ends then
    // (`run` waits for it, once this future and its buffers are freed: a fill that
    // kept them while waiting held a 256 KiB read buffer each, a gigabyte behind a
    // lagging publisher, and every new one was faulted in page by page).
    let (tx, rx) = oneshot::channel();
    writer.finish_later(Box::new(move |r| {
        let _ = tx.send(r.is_ok());
    }));
    *published = Some(rx);
    Phase::Stored
}

/// Most times one fill continues a broken peer body (each from another source).
const MAX_RESUMES: usize = 3;

/// The validator a resume sends in `If-Range`: a strong `ETag`, else `Last-Modified`
/// (RFC 9110 §13.1.5: If-Range needs a strong validator; a date counts as one when it
/// is at least a second older than `Date`, which the sender checks). `None`: no resume.
fn resume_validator(resp: &OriginResponse) -> Option<Vec<u8>> {
    match resp.head.header(b"etag") {
        Some(tag) if !tag.starts_with(b"W/") => Some(tag.to_vec()),
        _ => resp.head.header(b"last-modified").map(<[u8]>::to_vec),
    }
}

/// Whether `resp` is exactly bytes `from..=last` of the version `tag` of an object of
/// `total` bytes: a `206` with that `Content-Range` and, for an ETag, the same ETag.
/// Anything else (a `200` because `If-Range` did not match) must not be spliced in.
fn is_exact_rest(
    resp: &OriginResponse,
    from: u64,
    last: u64,
    total: Option<u64>,
    tag: &[u8],
) -> bool {
    let range_ok = resp.head.status == 206
        && resp
            .head
            .header(b"content-range")
            .and_then(linerate_http::cache::parse_content_range)
            .is_some_and(|cr| cr.first == from && cr.last == last && cr.complete == total);
    let etag_ok = !tag.starts_with(b"\"") || resp.head.header(b"etag") == Some(tag);
    range_ok && etag_ok && resp.content_length() == Some(last - from + 1)
}

/// Hand a response that is not stored to the leader's client when it answers that
/// client's request as it stands: a complete response (an origin that ignored the
/// slice's `Range` sent the whole object), a 206 that covers the whole object (sent as
/// the 200 it is), or a 416 for the first slice the client's range needs (its range
/// starts past the end too). A slice of a larger object goes as [`Handoff::Part`]:
/// a response already sending that object splices it in; for a first slice the leader
/// asks the origin for its own request instead.
fn hand_off(job: &mut Job, response: OriginResponse, answer: Answer) -> Phase {
    let shape = match answer {
        Answer::Whole | Answer::Unsatisfiable { .. } => Some(Shape::AsIs),
        Answer::WholeAsPart { .. } => Some(Shape::Whole),
        Answer::Part { .. } => {
            if let Some(tx) = job.handoff.take() {
                let _ = tx.send(Handoff::Part(Box::new(response)));
            }
            return Phase::Uncacheable;
        }
        Answer::Mismatch => None,
    };
    if let (Some(tx), Some(shape)) = (job.handoff.take(), shape) {
        let _ = tx.send(Handoff::Relay {
            response: Box::new(response),
            shape,
        });
    }
    Phase::Uncacheable
}

/// Write (or rewrite) the `Vary` stub at `primary` unless it already names `names`.
/// `false` if it could not be written.
async fn write_stub(px: &Arc<ProxyShared>, primary: &[u8], names: &[Vec<u8>]) -> bool {
    let encoded = Vary::Names(names.to_vec()).encode();
    if let Lookup::Hit(h) = super::shared::lookup(px, primary, false).await {
        if h.meta.header(VARY_STUB) == Some(encoded.as_slice()) {
            return true;
        }
    }
    let stub = ObjectMeta {
        status: 200,
        request_time_ms: now_ms(),
        response_time_ms: now_ms(),
        etag: None,
        last_modified_s: None,
        headers: vec![(VARY_STUB.to_vec(), encoded)],
        derived: Default::default(),
    };
    let p = Arc::clone(px);
    let primary = primary.to_vec();
    let written = tokio::task::spawn_blocking(move || {
        let w = p.store.begin_write(&primary, stub, Some(0)).ok()?;
        w.finish().ok()
    })
    .await;
    matches!(written, Ok(Some(_)))
}

/// The object changed at the origin while it was being read in slices: drop every slice
/// of it, and fail this one (the response in progress is cut short, never spliced).
async fn version_changed(px: &Arc<ProxyShared>, base: &[u8]) -> Phase {
    px.drop_slices(base).await;
    Phase::Failed(bad_gateway("version_changed", true))
}
