//! One fill: fetch a key from the origin and write it to the store while clients
//! follow it. The fill runs as its own task on the leader's worker, so a client that
//! disconnects never cancels it for the others; it publishes its progress through the
//! claim (`fills`) and the store's writer.
//!
//! Nothing partial is ever published: any origin failure after the head (short or long
//! body, broken chunking, stall) aborts the writer, which fails every follower's body
//! (their connections close short) and leaves nothing in the index.

use std::rc::Rc;
use std::sync::Arc;

use linerate_cache::{ObjectMeta, WriteFailure};
use linerate_http::cache::{self, ResponseCacheControl, Vary};
use linerate_http::StatusCode;
use tokio::sync::oneshot;

use super::fills::{Claim, FillGuard, Outcome};
use super::{now_ms, ProxyShared, ProxyWorker, Req, VARY_STUB};
use crate::origin::{OriginRequest, OriginResponse};

/// Body bytes read from the origin per store append.
const FILL_CHUNK: usize = 256 * 1024;

/// What to fetch.
pub(crate) struct Job {
    pub(crate) px: Arc<ProxyShared>,
    pub(crate) guard: FillGuard,
    pub(crate) origin: usize,
    /// Primary key of the URL (the claim may be on a variant or slice key).
    pub(crate) primary: Vec<u8>,
    pub(crate) target: Vec<u8>,
    /// Request fields forwarded (end-to-end, minus the cache's own).
    pub(crate) fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// Every request field, as lookups see them: the variant key is computed from
    /// these, so a fill stores a variant where the next lookup will look for it.
    pub(crate) request_fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// The stale copy being revalidated.
    pub(crate) stale: Option<ObjectMeta>,
    /// A slice: (first byte, length, the validators it must match).
    pub(crate) slice: Option<SliceJob>,
}

/// A slice to fetch with a Range request.
#[derive(Debug, Clone)]
pub(crate) struct SliceJob {
    pub(crate) start: u64,
    pub(crate) len: u64,
    /// `If-Match` value: the version the other slices have (strong ETag).
    pub(crate) if_match: Option<Vec<u8>>,
    /// Expected complete length, when known from another slice.
    pub(crate) total: Option<u64>,
}

impl Job {
    pub(crate) fn new(
        px: &Arc<ProxyShared>,
        req: &Req<'_>,
        guard: FillGuard,
        stale: Option<ObjectMeta>,
        slice: Option<SliceJob>,
    ) -> Job {
        Job {
            px: Arc::clone(px),
            guard,
            origin: px.routes[req.route].origin,
            primary: req.key.clone(),
            target: req.target.to_vec(),
            fields: req.forwarded(false),
            request_fields: req
                .fields
                .iter()
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect(),
            stale,
            slice,
        }
    }

    fn values<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.request_fields
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// Start a background revalidation of `key` unless one is running (stale-while-
/// revalidate): the client is served the stale copy without waiting.
pub(crate) fn revalidate_in_background(
    pw: &Rc<ProxyWorker>,
    req: &Req<'_>,
    key: &[u8],
    stale: &ObjectMeta,
) {
    if let Claim::Leader(guard) = pw.shared.fills.claim(key) {
        let job = Job::new(&pw.shared, req, guard, Some(stale.clone()), None);
        tokio::task::spawn_local(run(pw.clone(), job, None));
    }
}

/// Run one fill to its end. `handoff`: where an uncacheable response goes (the
/// leader's client relays it instead of asking the origin again).
pub(crate) async fn run(
    pw: Rc<ProxyWorker>,
    job: Job,
    handoff: Option<oneshot::Sender<OriginResponse>>,
) {
    let outcome = fetch(&pw, &job, handoff).await;
    job.guard.finish(outcome);
}

fn failed(e: &crate::origin::OriginError, stale_ok: bool) -> Outcome {
    Outcome::Failed {
        status: e.status(),
        detail: e.as_str(),
        stale_ok,
    }
}

async fn fetch(
    pw: &ProxyWorker,
    job: &Job,
    handoff: Option<oneshot::Sender<OriginResponse>>,
) -> Outcome {
    let px = &job.px;
    let origin = &pw.origins[job.origin];
    let mut headers: Vec<(&[u8], &[u8])> = job
        .fields
        .iter()
        .map(|(n, v)| (n.as_slice(), v.as_slice()))
        .collect();
    headers.push((b"via", px.via.as_bytes()));
    let range;
    if let Some(s) = &job.slice {
        range = format!("bytes={}-{}", s.start, s.start + s.len - 1);
        headers.push((b"range", range.as_bytes()));
        if let Some(tag) = &s.if_match {
            headers.push((b"if-match", tag));
        }
    }
    let lm;
    if let Some(stale) = &job.stale {
        if let Some(tag) = stale.header(b"etag") {
            headers.push((b"if-none-match", tag));
        }
        if let Some(t) = stale.last_modified_s {
            lm = linerate_http::date::format(t);
            headers.push((b"if-modified-since", lm.as_bytes()));
        }
    }
    // The whole fill is bounded, not just each read (an origin dripping a byte just
    // inside the idle timeout would otherwise hold every follower indefinitely).
    let deadline = tokio::time::Instant::now() + px.origins[job.origin].opts.fill_timeout;
    let request = OriginRequest {
        method: "GET",
        target: &job.target,
        headers: &headers,
        body: &[],
        idempotent: true,
    };
    let mut resp = match origin.send(&request).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = e.as_str(), "origin request failed");
            return failed(&e, true);
        }
    };
    let status = resp.head.status;
    let key = job.guard.key().to_vec();

    // Revalidation confirmed: freshen the stored copy (RFC 9111 §4.3.4).
    if status == 304 {
        if let Some(stale) = &job.stale {
            let meta = freshened(stale, &resp);
            let store_px = Arc::clone(px);
            let k = key.clone();
            let updated =
                tokio::task::spawn_blocking(move || store_px.store.update_meta(&k, meta)).await;
            if !matches!(updated, Ok(Ok(true))) {
                tracing::debug!("could not freshen a revalidated object");
            }
            return Outcome::Revalidated;
        }
    }
    // A revalidation answered 5xx: the stale copy may stand in (stale-if-error).
    if job.stale.is_some() && status >= 500 {
        return Outcome::Failed {
            status: StatusCode::BadGateway,
            detail: "origin_error",
            stale_ok: true,
        };
    }

    let cc = ResponseCacheControl::parse(resp.head.headers_named(b"cache-control"));
    let vary = Vary::parse(resp.head.headers_named(b"vary"));

    // Slices: a 206 must be the range asked for, of the version asked for.
    let mut store_key = key.clone();
    let mut slice_total = None;
    let mut whole_from_slice = false;
    // The body length a 206 slice must have (its Content-Range says so; a different
    // Content-Length, or fewer/more bytes on a chunked or close-delimited body, is a
    // lie the writer refuses to publish).
    let mut slice_len = None;
    if let Some(s) = &job.slice {
        match status {
            206 => {
                let cr = resp
                    .head
                    .header(b"content-range")
                    .and_then(cache::parse_content_range);
                let Some(cr) = cr else {
                    return bad("bad_content_range");
                };
                let Some(total) = cr.complete else {
                    return bad("bad_content_range");
                };
                let want_last = (s.start + s.len).min(total).saturating_sub(1);
                if cr.first != s.start || cr.last != want_last {
                    return bad("bad_content_range");
                }
                let len = want_last - s.start + 1;
                if resp.content_length().is_some_and(|cl| cl != len) {
                    return bad("bad_content_length");
                }
                slice_len = Some(len);
                if s.total.is_some_and(|t| t != total) {
                    super::slices::version_changed(px, &job.primary).await;
                    return bad("version_changed");
                }
                if let Some(tag) = &s.if_match {
                    if resp.head.header(b"etag") != Some(tag.as_slice()) {
                        super::slices::version_changed(px, &job.primary).await;
                        return bad("version_changed");
                    }
                }
                slice_total = Some(total);
                // The whole object fit in the first slice: it is stored whole, as the
                // URL's object (only objects larger than a slice are kept in slices,
                // and a whole object gets revalidation and the stale extensions).
                if s.start == 0 && total <= s.len && s.if_match.is_none() {
                    whole_from_slice = true;
                    store_key = job.primary.clone();
                }
            }
            412 => {
                super::slices::version_changed(px, &job.primary).await;
                return bad("version_changed");
            }
            // The object is shorter than this slice's start. With a length known from
            // other slices that means another version; without, the client asked
            // beyond the end (or the object is empty): its own request is relayed and
            // the origin answers it.
            416 if s.total.is_some() => {
                super::slices::version_changed(px, &job.primary).await;
                return bad("version_changed");
            }
            416 => return Outcome::Uncacheable,
            // The origin ignored the Range (200) or answered something else: the whole
            // response is stored as the URL's object, not as a slice.
            _ => store_key = job.primary.clone(),
        }
    }

    let authorization = job.values(b"authorization").next().is_some();
    let storable = if status == 206 && slice_total.is_some() {
        // A requested slice: storable like its 200 would be.
        cache::storable(
            true,
            200,
            &cc,
            resp.head.header(b"expires").is_some(),
            false,
            authorization,
            &vary,
        )
    } else {
        cache::storable(
            true,
            status,
            &cc,
            resp.head.header(b"expires").is_some(),
            false,
            authorization,
            &vary,
        )
    };
    // Set-Cookie: a response meant for one client, unless the origin explicitly made it
    // shareable (nginx and Varnish do not cache these either).
    let storable = storable.and_then(|()| {
        let cookie = resp.head.header(b"set-cookie").is_some();
        if cookie && !cc.public && cc.s_maxage.is_none() {
            Err(cache::NotStorable::Private)
        } else {
            Ok(())
        }
    });
    if let Err(why) = storable {
        tracing::debug!(reason = why.as_str(), status, "response not stored");
        // Remembered only for what the origin says about the object itself; a 5xx or
        // an odd status must not turn off collapsing for the next requests.
        if why != cache::NotStorable::Status {
            px.mark_pass(&job.primary);
        }
        if let Some(tx) = handoff {
            if job.slice.is_none() && job.stale.is_none() {
                let _ = tx.send(resp);
            }
        }
        return Outcome::Uncacheable;
    }

    // Vary: the object goes under its variant key; a stub at the primary key names
    // the fields (written first, so followers looking up find their variant).
    if let Vary::Names(names) = &vary {
        if slice_total.is_some() && !whole_from_slice {
            // Slices are keyed by URL alone: variants of a sliced object could mix.
            // Relayed from now on.
            tracing::debug!("Vary on a sliced object: not stored");
            px.mark_pass(&job.primary);
            return Outcome::Uncacheable;
        }
        if job.slice.is_none() || whole_from_slice {
            let stub = ObjectMeta {
                status: 200,
                request_time_ms: resp.request_time_ms,
                response_time_ms: resp.response_time_ms,
                etag: None,
                last_modified_s: None,
                headers: vec![(VARY_STUB.to_vec(), vary.encode())],
            };
            let p = Arc::clone(px);
            let primary = job.primary.clone();
            let stub_written = tokio::task::spawn_blocking(move || {
                let w = p.store.begin_write(&primary, stub, Some(0)).ok()?;
                w.finish().ok()
            })
            .await;
            if !matches!(stub_written, Ok(Some(_))) {
                return Outcome::Uncacheable;
            }
            let get = |n: &[u8]| -> Vec<&[u8]> {
                job.request_fields
                    .iter()
                    .filter(|(k, _)| k.eq_ignore_ascii_case(n))
                    .map(|(_, v)| v.as_slice())
                    .collect()
            };
            let mut k = job.primary.clone();
            k.extend_from_slice(super::VARIANT_SEP);
            k.extend_from_slice(&cache::vary_key(names, get));
            store_key = k;
        }
    }

    // A different key than the claim (variant, or a whole object on a slice route)
    // needs its own claim, or two fills could write it.
    let mut extra_guard = None;
    if store_key != key {
        match px.fills.claim(&store_key) {
            Claim::Leader(g) => extra_guard = Some(g),
            Claim::Follower(_) => return Outcome::Stored,
        }
    }

    let mut meta = stored_meta(&resp);
    if whole_from_slice {
        // Stored as the 200 it stands for.
        meta.status = 200;
        meta.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case(b"content-range"));
    }
    let expected = slice_len.or(resp.content_length());
    let writer = {
        let p = Arc::clone(px);
        let k = store_key.clone();
        match tokio::task::spawn_blocking(move || p.store.begin_write(&k, meta, expected)).await {
            Ok(Ok(w)) => w,
            Ok(Err(refused)) => {
                tracing::debug!(reason = refused.as_str(), "store refused the object");
                if let Some(tx) = handoff {
                    if job.slice.is_none() && job.stale.is_none() {
                        let _ = tx.send(resp);
                    }
                }
                return Outcome::Uncacheable;
            }
            Err(_) => return Outcome::Uncacheable,
        }
    };
    job.guard.writing();
    if let Some(g) = &extra_guard {
        g.writing();
    }
    let mut writer = writer;
    let mut buf = Vec::with_capacity(FILL_CHUNK);
    loop {
        buf.clear();
        let Ok(read) = tokio::time::timeout_at(deadline, resp.read(&mut buf, FILL_CHUNK)).await
        else {
            tracing::info!("origin body too slow (fill_timeout); object discarded");
            writer.abort(WriteFailure::Aborted);
            let outcome = Outcome::Failed {
                status: StatusCode::GatewayTimeout,
                detail: "fill_timeout",
                stale_ok: false,
            };
            if let Some(g) = extra_guard {
                g.finish(outcome.clone());
            }
            return outcome;
        };
        match read {
            Ok(0) => break,
            Ok(_) => {
                // A `pwrite` can block on the disk: on the blocking pool, not this
                // worker's event loop (the writer and buffer travel there and back).
                let appended = px
                    .writes
                    .run(move || {
                        let r = writer.append(&buf);
                        (writer, buf, r)
                    })
                    .await;
                let store_failed = Outcome::Failed {
                    status: StatusCode::BadGateway,
                    detail: "store_failed",
                    stale_ok: false,
                };
                match appended {
                    Some((w, b, Ok(()))) => {
                        writer = w;
                        buf = b;
                    }
                    Some((_, _, Err(e))) => {
                        tracing::warn!(failure = e.failure.as_str(), "cache write failed");
                        if let Some(g) = extra_guard {
                            g.finish(store_failed.clone());
                        }
                        return store_failed;
                    }
                    // The pool job panicked: the writer is gone (and so aborted).
                    None => {
                        if let Some(g) = extra_guard {
                            g.finish(store_failed.clone());
                        }
                        return store_failed;
                    }
                }
            }
            Err(e) => {
                tracing::info!(error = e.as_str(), "origin body failed; object discarded");
                writer.abort(WriteFailure::Aborted);
                if let Some(g) = extra_guard {
                    g.finish(failed(&e, false));
                }
                return failed(&e, false);
            }
        }
    }
    drop(resp);
    let published = tokio::task::spawn_blocking(move || writer.finish()).await;
    let outcome = match published {
        Ok(Ok(_)) => {
            if job.slice.is_none() {
                // Stored now: an earlier "not storable" verdict is out of date.
                px.clear_pass(&job.primary);
            }
            Outcome::Stored
        }
        _ => Outcome::Failed {
            status: StatusCode::BadGateway,
            detail: "store_failed",
            stale_ok: false,
        },
    };
    if let Some(g) = extra_guard {
        g.finish(outcome.clone());
    }
    outcome
}

fn bad(detail: &'static str) -> Outcome {
    Outcome::Failed {
        status: StatusCode::BadGateway,
        detail,
        stale_ok: true,
    }
}

/// The metadata stored with a response: status, times, validators, and the fields a
/// hit replays (hop-by-hop ones removed, RFC 9110 §7.6.1).
fn stored_meta(resp: &OriginResponse) -> ObjectMeta {
    let tokens = cache::connection_tokens(resp.head.headers_named(b"connection"));
    let headers: Vec<(Vec<u8>, Vec<u8>)> = resp
        .head
        .headers
        .iter()
        .filter(|(n, _)| {
            let lower = n.to_ascii_lowercase();
            !cache::is_hop_by_hop(&lower, &tokens)
        })
        .take(linerate_cache::meta::MAX_STORED_FIELDS)
        .cloned()
        .collect();
    let mut headers = headers;
    // RFC 9110 §6.6.1: an origin without a clock sends no Date; a cache adds one
    // (otherwise Age could not be computed the same way later).
    if resp.head.header(b"date").is_none() {
        headers.push((
            b"Date".to_vec(),
            linerate_http::date::format(resp.response_time_ms / 1000).into_bytes(),
        ));
    }
    ObjectMeta {
        status: resp.head.status,
        request_time_ms: resp.request_time_ms,
        response_time_ms: resp.response_time_ms,
        etag: resp.head.header(b"etag").map(<[u8]>::to_vec),
        last_modified_s: resp
            .head
            .header(b"last-modified")
            .and_then(linerate_http::date::parse),
        headers,
    }
}

/// The stored metadata updated with a 304's fields (RFC 9111 §3.2: every field in the
/// 304 replaces the stored ones of that name, except framing fields).
fn freshened(stale: &ObjectMeta, resp: &OriginResponse) -> ObjectMeta {
    let tokens = cache::connection_tokens(resp.head.headers_named(b"connection"));
    let fresh: Vec<&(Vec<u8>, Vec<u8>)> = resp
        .head
        .headers
        .iter()
        .filter(|(n, _)| {
            let lower = n.to_ascii_lowercase();
            !cache::is_hop_by_hop(&lower, &tokens)
                && !matches!(lower.as_slice(), b"content-length" | b"content-range")
        })
        .collect();
    let mut headers: Vec<(Vec<u8>, Vec<u8>)> = stale
        .headers
        .iter()
        .filter(|(n, _)| !fresh.iter().any(|(f, _)| f.eq_ignore_ascii_case(n)))
        .cloned()
        .collect();
    headers.extend(fresh.into_iter().cloned());
    // The stored Age described the old response; the 304 carries its own (or none).
    if resp.head.header(b"age").is_none() {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(b"age"));
    }
    // Likewise Date: the old one would make the freshened copy look old at once.
    if resp.head.header(b"date").is_none() {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(b"date"));
        headers.push((
            b"Date".to_vec(),
            linerate_http::date::format(resp.response_time_ms / 1000).into_bytes(),
        ));
    }
    headers.truncate(linerate_cache::meta::MAX_STORED_FIELDS);
    ObjectMeta {
        status: stale.status,
        request_time_ms: resp.request_time_ms,
        response_time_ms: resp
            .response_time_ms
            .max(now_ms().min(resp.response_time_ms)),
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
        headers,
    }
}
